/**
 * `flotilla bench`: perf_analyzer for a Flotilla gateway or worker (or any KServe v2 server). It sweeps a range
 * of concurrencies (closed loop) or request rates (open loop); each step warms up, then measures a window, and
 * reports throughput, client latency percentiles and the server's own split of the time (from its statistics
 * endpoint, diffed across the window). Output: a table on stdout, perf_analyzer's CSV (`-f`), an SVG chart of
 * latency against throughput (`--plot`) and a one-line JSON summary (`--json`).
 *
 * The pieces, each its own file: `transport.ts` (the protocol interface; `transports.ts` picks one),
 * `input-data.ts` (the requests), `load-generator.ts` (the load and its raw log), `server-stats.ts`, `report.ts`
 * (the arithmetic and the table/CSV), `plot.ts`. This file reads the flags, runs the steps in order and prints.
 *
 * Everything that the user must fix (a flag, the data file, a shape the model needs) is a usage error, exit 2,
 * found before any load is sent; the server failing (unreachable, or failing every request of a step) is exit 1.
 * All I/O but the network comes through {@link BenchIo}, so tests run the real command against a real server
 * without touching the process's streams or files.
 */
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { createError, isFlotillaError } from '../../common/errors.ts'
import {
  DEFAULT_INT_RANGE, DEFAULT_REQUEST_POOL, DEFAULT_STRING_LENGTH, fileRequests, parseInputDataFile, parseShapeFlag,
  randomRequests, resolveInputs, zeroRequests, type InputDataFile
} from './input-data.ts'
import { SampleLog, runStep, type LoadMode, type RequestDistribution } from './load-generator.ts'
import { renderLatencyPlot } from './plot.ts'
import { formatCsv, formatTable, rate, stepJson, stepName, summarizeStep, type StepResult } from './report.ts'
import { diffStatistics } from './server-stats.ts'
import { type StatsResult, type Transport, type TransportFactory } from './transport.ts'
import { DEFAULT_HTTP_ENCODING, HTTP_ENCODINGS, PROTOCOLS, transportFactory, type Protocol } from './transports.ts'

/** What the command reads and writes, injected so that tests need neither a terminal nor files of their own. */
export interface BenchIo {
  stdout: { write (s: string): unknown }
  /** `isTTY`: the progress line is rewritten in place instead of printed as a line per phase. */
  stderr: { write (s: string): unknown, isTTY?: boolean }
  /** Reads `--input-data FILE`; may throw (the message is shown). */
  readFile: (path: string) => string
  /** Writes `-f` and `--plot`; may throw (the message is shown). */
  writeFile: (path: string, data: string) => void
  /** A monotonic clock in milliseconds that advances with real time; `performance.now` by default. */
  now?: () => number
}

export const DEFAULT_HTTP_URL = 'http://127.0.0.1:8000'
export const DEFAULT_GRPC_URL = '127.0.0.1:8001'
export const DEFAULT_WARMUP_MS = 1000
/** perf_analyzer's default window. */
export const DEFAULT_MEASUREMENT_INTERVAL_MS = 5000
export const DEFAULT_TIMEOUT_MS = 30_000
export const DEFAULT_MAX_OUTSTANDING = 1000
/** A sweep longer than this is a typo in a range, not a plan. */
const MAX_STEPS = 1000
const MAX_CONCURRENCY = 10_000
/** How often the progress line is redrawn on a terminal. */
const PROGRESS_INTERVAL_MS = 200

/** The text `flotilla bench --help` prints. */
export const BENCH_USAGE = `Usage: flotilla bench -m MODEL [flags]

Measure a KServe v2 server (a Flotilla gateway or worker, or Triton) as perf_analyzer does: a sweep of
concurrencies (closed loop) or request rates (open loop); per step a warm-up, then a measurement window, and
the throughput, the client latency percentiles and the server's own split of the time.

Target:
  -m, --model-name NAME          the model (required)
  -x, --model-version V          its version (default: the server's choice)
  -u, --url URL                  the server (default ${DEFAULT_HTTP_URL}, with -i grpc ${DEFAULT_GRPC_URL});
                                 for HTTP, HOST:PORT means http://HOST:PORT; for gRPC, HOST:PORT or
                                 grpc://HOST:PORT (the gRPC port, not the HTTP one)
  -i, --protocol http|grpc       default http; grpc speaks Triton's GRPCInferenceService
      --encoding json|binary     the HTTP body encoding (default ${DEFAULT_HTTP_ENCODING}): binary is Triton's binary
                                 tensor extension, as its own clients send; json writes every element as text
      --timeout-ms N             a request with no answer for N ms fails (default ${DEFAULT_TIMEOUT_MS})

Load (closed loop by default, at concurrency 1):
      --concurrency-range START[:END[:STEP]]
                                 closed loop: keep N requests in flight, N from START to END by STEP
                                 (default 1); STEP xF multiplies instead: 1:64:x2 is 1,2,4,...,64
      --concurrency N            the same as --concurrency-range N
      --request-rate-range START[:END[:STEP]]
                                 open loop: send R requests per second whether or not earlier ones were
                                 answered, R from START to END by STEP (or xF, as above)
      --request-rate R           the same as --request-rate-range R
      --request-distribution constant|poisson
                                 open-loop arrivals: evenly spaced, or a seeded Poisson process (default constant)
      --max-outstanding N        open loop: at most N requests in flight; an arrival due beyond that is
                                 dropped and counted (default ${DEFAULT_MAX_OUTSTANDING})

Measurement:
      --warmup-ms N              load before each window, not measured (default ${DEFAULT_WARMUP_MS})
  -p, --measurement-interval N   the window, in ms (default ${DEFAULT_MEASUREMENT_INTERVAL_MS})
  -l, --latency-threshold N      end the sweep after a step whose p99 latency passes N ms

Input data:
  -b, --batch-size N             samples per request (default 1): the batch dimension of a batching model
      --shape NAME:D1,D2,...     one sample's dimensions for input NAME where the model leaves them variable
                                 (batch dimension excluded); once per input
      --input-data random|zero|FILE
                                 seeded random data (default), zeros, or perf_analyzer's JSON data file:
                                 {"data": [{"INPUT0": [...], "INPUT1": {"content": [...], "shape": [...]}}]},
                                 one sample per entry, entries sent round-robin
      --request-pool N           distinct random requests, sent round-robin (default ${DEFAULT_REQUEST_POOL})
      --seed N                   seeds the random data and the Poisson arrivals (default 1)
      --int-range A:B            integer inputs drawn from A to B, inclusive (default ${DEFAULT_INT_RANGE.join(':')})
      --string-length N          characters in each random BYTES element (default ${DEFAULT_STRING_LENGTH})

Output:
  -f, --latency-report-file FILE perf_analyzer's CSV (microseconds; rows sorted by throughput, as it sorts them)
      --plot FILE                an SVG chart of p50 and p99 latency against throughput
      --json                     after the table, one line of JSON with every step
  -q, --quiet                    no progress on stderr
  -h, --help                     this text

How the figures are made: a request counts in a window when it completes inside it; throughput is the
successful ones per second, times the batch size (inferences/second). Latency runs from sending a request to
the last byte of its answer; percentiles are by nearest rank over every successful request of the window.
The server columns are the averages per request of its statistics (queue, compute input, infer, output),
diffed across the window (through a gateway: its workers' statistics, summed); they are empty where the
server has no statistics endpoint.

Connections: over HTTP, one per request the run may have in flight (the top concurrency, or
--max-outstanding), so no request waits inside the client; over gRPC, one HTTP/2 connection that carries
every call as a stream of its own, as Triton's clients do. Requests are encoded once, before the load, and
answers are read to the end but not decoded. The control calls (metadata, statistics) use a connection of
their own, so a statistics read never waits behind the load.

Exit status: 0 done, 1 the server failed (unreachable, or every request of a step failed), 2 usage error.
`

const options = {
  help: { type: 'boolean', short: 'h' },
  'model-name': { type: 'string', short: 'm' },
  'model-version': { type: 'string', short: 'x' },
  url: { type: 'string', short: 'u' },
  protocol: { type: 'string', short: 'i' },
  encoding: { type: 'string' },
  'timeout-ms': { type: 'string' },
  'concurrency-range': { type: 'string' },
  concurrency: { type: 'string' },
  'request-rate-range': { type: 'string' },
  'request-rate': { type: 'string' },
  'request-distribution': { type: 'string' },
  'max-outstanding': { type: 'string' },
  'warmup-ms': { type: 'string' },
  'measurement-interval': { type: 'string', short: 'p' },
  'latency-threshold': { type: 'string', short: 'l' },
  'batch-size': { type: 'string', short: 'b' },
  shape: { type: 'string', multiple: true },
  'input-data': { type: 'string' },
  'request-pool': { type: 'string' },
  seed: { type: 'string' },
  'int-range': { type: 'string' },
  'string-length': { type: 'string' },
  'latency-report-file': { type: 'string', short: 'f' },
  plot: { type: 'string' },
  json: { type: 'boolean' },
  quiet: { type: 'boolean', short: 'q' }
} as const

type Flags = ReturnType<typeof parseArgs<{ options: typeof options, allowPositionals: true }>>['values']

/** A run, fully checked: everything the command needs before it sends anything. */
interface Plan {
  model: string
  version: string | undefined
  protocol: Protocol
  createTransport: TransportFactory
  url: string
  timeoutMs: number
  mode: LoadMode
  values: number[]
  distribution: RequestDistribution
  maxOutstanding: number
  warmupMs: number
  windowMs: number
  latencyThresholdMs: number | undefined
  batchSize: number
  shapes: Map<string, number[]>
  inputData: { kind: 'random' | 'zero' } | { kind: 'file', file: InputDataFile }
  poolSize: number
  seed: number
  intRange: [number, number]
  stringLength: number
  csvFile: string | undefined
  plotFile: string | undefined
  json: boolean
  quiet: boolean
}

function usage (message: string): never {
  throw createError('CLI_ERR_USAGE', message)
}

/**
 * Runs `flotilla bench <argv...>` (argv starts after "bench"); resolves with the exit status. Never throws: prints
 * a message to stderr and returns 2 (usage) or 1 (the server failed).
 *
 * @param argv the arguments after `bench`
 * @param io where output goes and where files and time come from
 * @returns 0 when every step ran, 1 when the server failed, 2 for a usage error
 */
export async function runBenchCommand (argv: readonly string[], io: BenchIo): Promise<number> {
  let transport: Transport | undefined
  try {
    const flags = parse(argv)
    if (flags.help === true) {
      io.stdout.write(BENCH_USAGE)
      return 0
    }
    const plan = planFrom(flags, io)
    const maxInFlight = plan.mode === 'concurrency' ? Math.max(...plan.values) : plan.maxOutstanding
    transport = plan.createTransport({
      url: plan.url,
      model: plan.model,
      ...(plan.version !== undefined ? { version: plan.version } : {}),
      maxInFlight,
      timeoutMs: plan.timeoutMs
    })
    return await run(plan, transport, io)
  } catch (err) {
    if (isFlotillaError(err) && err.code === 'CLI_ERR_USAGE') {
      io.stderr.write(`flotilla bench: ${err.message}\nRun 'flotilla bench --help' for usage.\n`)
      return 2
    }
    io.stderr.write(`flotilla bench: ${err instanceof Error ? err.message : String(err)}\n`)
    return 1
  } finally {
    await transport?.close().catch(() => {})
  }
}

function parse (argv: readonly string[]): Flags {
  const args: string[] = []
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    const next = argv[i + 1]
    const name = arg.startsWith('--') ? arg.slice(2) : ''
    // parseArgs reads `--int-range -5:5` as two options; join them so the value reaches its check.
    if (name in options && options[name as keyof typeof options].type === 'string' && next !== undefined && /^-[0-9]/.test(next)) {
      args.push(`${arg}=${next}`)
      i++
    } else {
      args.push(arg)
    }
  }
  let parsed
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true })
  } catch (err) {
    usage((err as Error).message)
  }
  if (parsed.positionals.length > 0) usage(`unexpected argument '${parsed.positionals[0]}'; every setting is a flag`)
  return parsed.values
}

// ---- checking the flags ----

function int (raw: string | undefined, flag: string, min: number, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  if (raw === undefined) return fallback
  const n = Number(raw)
  if (!/^-?[0-9]+$/.test(raw) || n < min || n > max) {
    usage(max === Number.MAX_SAFE_INTEGER
      ? `${flag} must be an integer of at least ${min}, got '${raw}'`
      : `${flag} must be an integer from ${min} to ${max}, got '${raw}'`)
  }
  return n
}

function choice<T extends string> (raw: string | undefined, flag: string, allowed: readonly T[]): T | undefined {
  if (raw === undefined) return undefined
  if (!(allowed as readonly string[]).includes(raw)) usage(`${flag} must be one of ${allowed.join(', ')}, got '${raw}'`)
  return raw as T
}

const NUMBER = '[0-9]+(?:\\.[0-9]+)?'
const RANGE_RE = new RegExp(`^(${NUMBER})(?::(${NUMBER})(?::(x?)(${NUMBER}))?)?$`)

/**
 * A perf_analyzer range, `START[:END[:STEP]]`: START, START+STEP, ... up to END (END itself only when a step
 * lands on it), STEP 1 by default; `START:END:xF` multiplies by F instead. Concurrencies are integers.
 *
 * @param raw the flag's value
 * @param flag the flag, for messages
 * @param integers concurrency (integers ≥ 1) rather than rates (numbers > 0)
 * @returns the values, ascending
 * @throws FlotillaError CLI_ERR_USAGE for anything else
 */
export function parseRange (raw: string, flag: string, integers: boolean): number[] {
  const what = integers ? 'integers of at least 1' : 'numbers above 0'
  const m = RANGE_RE.exec(raw)
  if (m === null) usage(`${flag} takes START[:END[:STEP]] or START:END:xFACTOR with ${what}, got '${raw}'`)
  const start = Number(m[1])
  const end = m[2] === undefined ? start : Number(m[2])
  const multiply = m[3] === 'x'
  const step = m[4] === undefined ? 1 : Number(m[4])
  if (integers && [m[1], m[2], m[4]].some((s) => s !== undefined && s.includes('.'))) {
    usage(`${flag} takes integers (a concurrency is a count of requests), got '${raw}'`)
  }
  if (integers ? start < 1 : !(start > 0)) usage(`${flag}: START must be ${integers ? 'at least 1' : 'above 0'}, got '${raw}'`)
  if (end < start) usage(`${flag}: END ${m[2]} is below START ${m[1]}`)
  if (multiply ? !(step > 1) : !(step > 0)) {
    usage(`${flag}: ${multiply ? 'a factor must be above 1' : 'STEP must be above 0'}, got '${raw}'`)
  }
  if (integers && end > MAX_CONCURRENCY) usage(`${flag}: a concurrency above ${MAX_CONCURRENCY} is not supported, got '${raw}'`)
  const values: number[] = []
  // Each value from its index (start + i·step, start·F^i), rounded to 9 decimals: no drift, no 0.30000000000000004.
  for (let i = 0; ; i++) {
    const v = Number((multiply ? start * Math.pow(step, i) : start + i * step).toFixed(9))
    if (v > end + 1e-9) break
    values.push(v)
    if (values.length > MAX_STEPS) usage(`${flag} '${raw}' makes more than ${MAX_STEPS} steps`)
  }
  return values
}

/** `A:B`, integers, A ≤ B. */
function intRange (raw: string | undefined): [number, number] {
  if (raw === undefined) return [DEFAULT_INT_RANGE[0], DEFAULT_INT_RANGE[1]]
  const m = /^(-?[0-9]+):(-?[0-9]+)$/.exec(raw)
  const lo = Number(m?.[1])
  const hi = Number(m?.[2])
  if (m === null || !Number.isSafeInteger(lo) || !Number.isSafeInteger(hi) || lo > hi) {
    usage(`--int-range takes A:B, integers with A <= B, got '${raw}'`)
  }
  return [lo, hi]
}

/** The server address for a protocol: an http(s) URL for HTTP, `host:port` for gRPC. */
function targetUrl (raw: string | undefined, protocol: Protocol): string {
  if (protocol === 'grpc') {
    const text = raw ?? DEFAULT_GRPC_URL
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text)?.[1]?.toLowerCase()
    // An HTTP URL here is the usual slip (the HTTP port given to -i grpc); say so rather than fail to connect.
    if (scheme !== undefined && scheme !== 'grpc') {
      usage(`-u for -i grpc takes HOST:PORT or grpc://HOST:PORT, got the ${scheme}:// URL '${text}' ` +
        `(the gRPC endpoint has a port of its own, ${DEFAULT_GRPC_URL} by default; for HTTP leave out -i grpc)`)
    }
    const address = text.replace(/^grpc:\/\//i, '').replace(/\/$/, '')
    const m = /^[^/\s]+:([0-9]+)$/.exec(address)
    if (m === null || Number(m[1]) > 65535) usage(`-u for -i grpc takes HOST:PORT or grpc://HOST:PORT, got '${text}'`)
    return address
  }
  const text = raw ?? DEFAULT_HTTP_URL
  let url: URL
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `http://${text}`)
  } catch {
    usage(`-u takes a URL such as ${DEFAULT_HTTP_URL} (or HOST:PORT), got '${text}'`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') usage(`-u for HTTP takes an http:// or https:// URL, got '${text}'`)
  if (url.search !== '' || url.hash !== '') usage(`-u takes the server's base URL, without a query or fragment, got '${text}'`)
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`
}

/** Checks every flag, and reads and checks the data file, before anything is sent. */
function planFrom (flags: Flags, io: BenchIo): Plan {
  const model = flags['model-name'] ?? usage('flotilla bench needs -m MODEL (the model to measure)')
  if (model === '') usage('-m needs a model name')
  const version = flags['model-version']
  if (version !== undefined && !/^[0-9]+$/.test(version)) usage(`-x takes a version number, got '${version}'`)
  const protocol = choice(flags.protocol, '-i', PROTOCOLS) ?? 'http'
  const encoding = choice(flags.encoding, '--encoding', HTTP_ENCODINGS)
  // Refuses a protocol that is not available yet, whatever the other flags say.
  const createTransport = transportFactory(protocol, encoding)

  const closed = flags['concurrency-range'] !== undefined || flags.concurrency !== undefined
  const open = flags['request-rate-range'] !== undefined || flags['request-rate'] !== undefined
  if (closed && open) usage('give either a concurrency (closed loop) or a request rate (open loop), not both')
  if (flags['concurrency-range'] !== undefined && flags.concurrency !== undefined) usage('give --concurrency or --concurrency-range, not both')
  if (flags['request-rate-range'] !== undefined && flags['request-rate'] !== undefined) usage('give --request-rate or --request-rate-range, not both')
  if (!open) {
    for (const flag of ['request-distribution', 'max-outstanding'] as const) {
      if (flags[flag] !== undefined) usage(`--${flag} applies to an open loop (--request-rate or --request-rate-range)`)
    }
  }
  let values: number[]
  if (open) {
    const single = flags['request-rate']
    values = single !== undefined
      ? (/^[0-9]+(\.[0-9]+)?$/.test(single) && Number(single) > 0 ? [Number(single)] : usage(`--request-rate must be a number above 0, got '${single}'`))
      : parseRange(flags['request-rate-range']!, '--request-rate-range', false)
  } else {
    const single = flags.concurrency
    values = single !== undefined
      ? [int(single, '--concurrency', 1, 1, MAX_CONCURRENCY)]
      : parseRange(flags['concurrency-range'] ?? '1', '--concurrency-range', true)
  }

  const shapes = new Map<string, number[]>()
  for (const raw of flags.shape ?? []) {
    const [name, dims] = parseShapeFlag(raw)
    if (shapes.has(name)) usage(`--shape is given twice for input '${name}'`)
    shapes.set(name, dims)
  }
  const rawData = flags['input-data'] ?? 'random'
  let inputData: Plan['inputData']
  if (rawData === 'random' || rawData === 'zero') {
    inputData = { kind: rawData }
  } else {
    let text: string
    try {
      text = io.readFile(rawData)
    } catch (err) {
      usage(`cannot read --input-data ${rawData}: ${(err as Error).message}`)
    }
    inputData = { kind: 'file', file: parseInputDataFile(text, rawData) }
  }
  if (inputData.kind !== 'random') {
    for (const flag of ['request-pool', 'int-range', 'string-length'] as const) {
      if (flags[flag] !== undefined) usage(`--${flag} applies to random input data only`)
    }
  }
  const thresholdRaw = flags['latency-threshold']
  if (thresholdRaw !== undefined && !(/^[0-9]+(\.[0-9]+)?$/.test(thresholdRaw) && Number(thresholdRaw) > 0)) {
    usage(`--latency-threshold takes milliseconds above 0, got '${thresholdRaw}'`)
  }

  return {
    model,
    version,
    protocol,
    createTransport,
    url: targetUrl(flags.url, protocol),
    timeoutMs: int(flags['timeout-ms'], '--timeout-ms', 1, DEFAULT_TIMEOUT_MS),
    mode: open ? 'request-rate' : 'concurrency',
    values,
    distribution: choice(flags['request-distribution'], '--request-distribution', ['constant', 'poisson'] as const) ?? 'constant',
    maxOutstanding: int(flags['max-outstanding'], '--max-outstanding', 1, DEFAULT_MAX_OUTSTANDING, MAX_CONCURRENCY),
    warmupMs: int(flags['warmup-ms'], '--warmup-ms', 0, DEFAULT_WARMUP_MS),
    windowMs: int(flags['measurement-interval'], '--measurement-interval', 1, DEFAULT_MEASUREMENT_INTERVAL_MS),
    latencyThresholdMs: thresholdRaw === undefined ? undefined : Number(thresholdRaw),
    batchSize: int(flags['batch-size'], '-b', 1, 1),
    shapes,
    inputData,
    poolSize: int(flags['request-pool'], '--request-pool', 1, DEFAULT_REQUEST_POOL, 100_000),
    seed: int(flags.seed, '--seed', 0, 1, 0xffffffff),
    intRange: intRange(flags['int-range']),
    stringLength: int(flags['string-length'], '--string-length', 0, DEFAULT_STRING_LENGTH, 1 << 20),
    csvFile: flags['latency-report-file'],
    plotFile: flags.plot,
    json: flags.json === true,
    quiet: flags.quiet === true
  }
}

// ---- running ----

async function run (plan: Plan, transport: Transport, io: BenchIo): Promise<number> {
  const now = io.now ?? (() => performance.now())
  const metadata = await transport.metadata()
  const model = metadata.name === '' ? plan.model : metadata.name
  const maxBatchSize = await transport.maxBatchSize()
  const inputs = resolveInputs({ ...metadata, name: model }, maxBatchSize, plan.batchSize, plan.shapes)
  const requests = plan.inputData.kind === 'file'
    ? fileRequests(plan.inputData.file, inputs, plan.batchSize, model)
    : plan.inputData.kind === 'zero'
      ? zeroRequests(inputs, plan.batchSize)
      : randomRequests(inputs, plan.batchSize, { poolSize: plan.poolSize, seed: plan.seed, intRange: plan.intRange, stringLength: plan.stringLength })
  const prepared = requests.map((r) => transport.prepare(r))
  const bytes = prepared.reduce((sum, p) => sum + p.bytes, 0) / prepared.length

  // Read once before the load: a server without the statistics endpoint is said so once, up front.
  const firstStats = await transport.statistics()
  let statsNote: string | undefined = firstStats.ok ? undefined : `not available (${firstStats.reason}); the server columns stay empty`
  io.stdout.write(settingsText(plan, transport, model, prepared.length, bytes, statsNote))

  const progress = new Progress(io, plan.quiet, now)
  const results: StepResult[] = []
  let exitCode = 0
  const notes: string[] = []
  try {
    for (const [index, value] of plan.values.entries()) {
      const name = stepName(plan.mode, value)
      const label = `${name} (step ${index + 1}/${plan.values.length})`
      const log = new SampleLog()
      let before: Promise<StatsResult> | undefined
      let after: Promise<StatsResult> | undefined
      const readStats = statsNote === undefined
      progress.phase(label, `warm-up ${plan.warmupMs} ms`, log, undefined)
      const samples = await runStep({ mode: plan.mode, value, warmupMs: plan.warmupMs, windowMs: plan.windowMs }, {
        transport,
        requests: prepared,
        now,
        index,
        log,
        openLoop: { distribution: plan.distribution, seed: plan.seed, maxOutstanding: plan.maxOutstanding },
        hooks: {
          windowStart: () => {
            if (readStats) before = transport.statistics()
            progress.phase(label, `measuring ${plan.windowMs} ms`, log, now() + plan.windowMs)
          },
          windowEnd: () => {
            if (readStats) after = transport.statistics()
            progress.phase(label, 'finishing requests in flight', log, undefined)
          }
        }
      })
      const result = summarizeStep(samples, plan.batchSize)
      if (before !== undefined && after !== undefined) {
        const [b, a] = await Promise.all([before, after])
        const unreadable = (reason: string): void => {
          // Not asked again: a server that failed once mid-run would only fill the notes with the same line.
          statsNote = `could not be read at ${name} (${reason}); the server columns stay empty from there`
          notes.push(`Server statistics ${statsNote}.`)
        }
        if (!b.ok) unreadable(b.reason)
        else if (!a.ok) unreadable(a.reason)
        else {
          const split = diffStatistics(b.counters, a.counters)
          if (split !== undefined) result.server = split
          else notes.push(`At ${name} the server's counters went backwards during the window (the model reloaded?); its server columns are empty.`)
        }
      }
      results.push(result)
      progress.done(`${label}: ${rate(result.inferencesPerSecond)} infer/s, p99 ${result.latency === undefined ? '-' : `${Math.round(result.latency.p99)} us`}, ${result.errors} error(s)`)

      if (result.totalOk === 0) {
        const first = result.errorCounts[0]
        exitCode = 1
        io.stderr.write(`flotilla bench: every request at ${name} failed (${result.totalFailed} request(s))` +
          `${first === undefined ? '' : `; the most frequent error: ${first.status} ${first.message}`}\n`)
        break
      }
      const threshold = plan.latencyThresholdMs
      if (threshold !== undefined && result.latency !== undefined && result.latency.p99 > threshold * 1000 && index < plan.values.length - 1) {
        notes.push(`The sweep stopped after ${name}: its p99 latency (${Math.round(result.latency.p99)} us) passed --latency-threshold ${threshold} ms.`)
        break
      }
    }
  } finally {
    progress.stop()
  }

  io.stdout.write('\n' + formatTable(results))
  if (notes.length > 0) io.stdout.write('\n' + notes.join('\n') + '\n')
  const written = writeOutputs(plan, transport, results, io)
  if (plan.json) io.stdout.write(JSON.stringify(summaryJson(plan, transport, model, results)) + '\n')
  return written ? exitCode : 1
}

function settingsText (plan: Plan, transport: Transport, model: string, poolSize: number, bytes: number, statsNote: string | undefined): string {
  const data = plan.inputData.kind === 'file'
    ? `the ${plan.inputData.file.entries.length} entries of ${plan.inputData.file.source}`
    : plan.inputData.kind === 'zero' ? 'zeros' : `random data (seed ${plan.seed})`
  const load = plan.mode === 'concurrency'
    ? `closed loop at concurrency ${plan.values.join(', ')}`
    : `open loop at ${plan.values.map(rate).join(', ')} requests/s (${plan.distribution} arrivals, at most ${plan.maxOutstanding} in flight)`
  return [
    `*** flotilla bench: model '${model}' (${plan.version === undefined ? "the server's version" : `version ${plan.version}`}) ` +
      `at ${plan.url} over ${transport.name} ***`,
    `  batch size ${plan.batchSize}; ${poolSize} distinct request(s) of ${data}, ${Math.round(bytes)} bytes each on average`,
    `  ${load}`,
    `  each step: ${plan.warmupMs} ms warm-up, then a ${plan.windowMs} ms measurement window`,
    `  server statistics: ${statsNote ?? 'diffed across each window'}`,
    ''
  ].join('\n')
}

function writeOutputs (plan: Plan, transport: Transport, results: StepResult[], io: BenchIo): boolean {
  let ok = true
  const write = (file: string, flag: string, data: string): void => {
    try {
      io.writeFile(file, data)
    } catch (err) {
      ok = false
      io.stderr.write(`flotilla bench: cannot write ${flag} ${file}: ${(err as Error).message}\n`)
    }
  }
  if (plan.csvFile !== undefined) write(plan.csvFile, '-f', formatCsv(results))
  if (plan.plotFile !== undefined) {
    const points = results.flatMap((r) => r.latency === undefined
      ? []
      : [{
          label: plan.mode === 'concurrency' ? `c=${r.value}` : `${rate(r.value)}/s`,
          throughput: r.inferencesPerSecond,
          p50Ms: r.latency.p50 / 1000,
          p99Ms: r.latency.p99 / 1000
        }])
    write(plan.plotFile, '--plot', renderLatencyPlot(points, {
      title: `${plan.model}: client latency against throughput`,
      subtitle: `${transport.name} at ${plan.url}, batch size ${plan.batchSize}, ` +
        `${plan.mode === 'concurrency' ? 'closed loop' : `open loop (${plan.distribution})`}, ${plan.windowMs} ms windows`
    }))
  }
  return ok
}

function summaryJson (plan: Plan, transport: Transport, model: string, results: StepResult[]): Record<string, unknown> {
  return {
    model,
    version: plan.version ?? null,
    url: plan.url,
    transport: transport.name,
    mode: plan.mode,
    batch_size: plan.batchSize,
    warmup_ms: plan.warmupMs,
    measurement_interval_ms: plan.windowMs,
    input_data: plan.inputData.kind === 'file' ? plan.inputData.file.source : plan.inputData.kind,
    seed: plan.seed,
    ...(plan.mode === 'request-rate' ? { request_distribution: plan.distribution, max_outstanding: plan.maxOutstanding } : {}),
    steps: results.map(stepJson)
  }
}

/**
 * The progress line on stderr: on a terminal one line, rewritten in place every {@link PROGRESS_INTERVAL_MS}
 * with the requests so far; elsewhere (a log file, CI) one plain line per phase, so nothing fills with redraws.
 */
class Progress {
  readonly #io: BenchIo
  readonly #quiet: boolean
  readonly #tty: boolean
  readonly #now: () => number
  #timer: NodeJS.Timeout | undefined
  #render: (() => string) | undefined

  constructor (io: BenchIo, quiet: boolean, now: () => number) {
    this.#io = io
    this.#quiet = quiet
    this.#tty = io.stderr.isTTY === true
    this.#now = now
  }

  /** A new phase of a step; `until` (a clock time) shows the time left while measuring. */
  phase (label: string, what: string, log: SampleLog, until: number | undefined): void {
    if (this.#quiet) return
    if (!this.#tty) {
      this.#io.stderr.write(`${label}: ${what}\n`)
      return
    }
    this.#render = () => {
      const left = until === undefined ? '' : `, ${Math.max(0, (until - this.#now()) / 1000).toFixed(1)} s left`
      return `${label}: ${what}${left}; ${log.ok} ok, ${log.failed} failed`
    }
    this.#draw()
    this.#timer ??= setInterval(() => this.#draw(), PROGRESS_INTERVAL_MS)
  }

  /** A step's result line; on a terminal it replaces the progress line and stays. */
  done (line: string): void {
    if (this.#quiet) return
    this.#render = undefined
    this.#io.stderr.write(this.#tty ? `\r\x1b[K${line}\n` : `${line}\n`)
  }

  stop (): void {
    if (this.#timer !== undefined) clearInterval(this.#timer)
    this.#timer = undefined
    if (this.#tty && this.#render !== undefined && !this.#quiet) this.#io.stderr.write('\r\x1b[K')
    this.#render = undefined
  }

  #draw (): void {
    if (this.#render !== undefined) this.#io.stderr.write(`\r\x1b[K${this.#render()}`)
  }
}
