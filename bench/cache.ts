/**
 * bench/cache: the gateway's response cache against issue 15's targets, every ratio from one run. Three Flotilla
 * workers serve a `simulated` model with a fixed service time and no jitter (a timer, no CPU; one request at a time
 * per worker), so the fleet's uncached capacity C is known: 3 x 1000 / fixed_ms rps. Two gateways in front of them,
 * one with the model's cache off and one with it on (`cache.models.simulated.enabled`), are driven in turn:
 *
 *   1. capacity: closed loop through the cache-off gateway, to check C;
 *   2. load: open loop (`open-loop.ts`, its own process), each request's input drawn from Zipf(s) over N distinct
 *      inputs with a fixed seed: the cache-off gateway at R = overload x C (more than the fleet can serve), then the
 *      cache-on gateway, cold, at 3R. Both runs ramp up linearly during the warm-up (a cold cache taking 3R at once
 *      misses faster than the fleet serves for the first seconds: a backlog the measured window would inherit), and
 *      are measured at their full rate after it. Throughput, hit ratio, p50/p99, errors, and the requests that
 *      reached the workers (their own `inference_count` and failure counts, before and after);
 *   3. CPU: the same rate below C through both gateways, a handful of inputs, pre-warmed on the cache-on one (so it
 *      answers ~100% hits): the gateway's CPU per request, a hit against a proxied request. An idle gateway is not
 *      free (prom-client's event-loop monitor wakes it every 10 ms, health checks run): its idle CPU, measured
 *      first, is taken off, so the ratio compares what each request adds. Twice: at 0.7 C on `simulated` (~100/s,
 *      where each request wakes an idle process, a cost hits and proxied requests pay alike), and at
 *      BENCH_CPU_LOADED_RPS on `fast`, the same model with no service time, as a loaded gateway sees requests;
 *   4. coalescing: 64 identical requests at once with a fresh input, through each gateway: how many reached a worker;
 *      and once more through the cache-on gateway with the first request's client leaving while its answer is being
 *      computed (no target: what its followers do then);
 *   5. Redis: a real `redis-server`, two cache-on gateway replicas sharing it; K distinct requests through replica A,
 *      then the same K through replica B: B's hit ratio, and what still reached the workers.
 *
 * Targets (issue 15): a hit costs the gateway at most 1/3 of a proxied request's CPU; with the cache the fleet
 * sustains at least 3x the offered load (no errors) at a p99 below the uncached p99; 64 identical concurrent
 * requests reach a worker once; a second replica serves hits stored by the first. Everything listens on 127.0.0.1
 * only; every process started here is stopped at the end, on failure and on Ctrl-C alike, and every wait is bounded.
 *
 *   npx tsc -p . && flock /tmp/flotilla-bench.lock node dist/bench/cache.js
 *
 * Parameters come from the environment (defaults in brackets):
 *   BENCH_FIXED_MS [20]         the model's service time per request; C = 3 x 1000 / BENCH_FIXED_MS
 *   BENCH_OVERLOAD [1.3]        R, the uncached run's rate, as a multiple of C (above 1: more than the fleet serves)
 *   BENCH_CACHED_FACTOR [3]     the cached run's rate, as a multiple of R
 *   BENCH_ZIPF_N [10000]        distinct inputs
 *   BENCH_ZIPF_S [1.1]          the Zipf exponent
 *   BENCH_SEED [1]              seeds the arrival times and the inputs drawn
 *   BENCH_DURATION_S [15]       measured seconds per load run
 *   BENCH_WARMUP_S [10]         seconds of the same schedule sent first and not measured (the cache starts cold)
 *   BENCH_RAMP_S [=warm-up]     the load rises linearly from 0 over these first seconds of the warm-up
 *   BENCH_TIMEOUT_MS [2000]     a request not answered this long after its scheduled time is a timeout (an error)
 *   BENCH_CONNECTIONS [256]     the generator's connections to a gateway
 *   BENCH_CAPACITY_S [3]        seconds of the closed-loop capacity check (0: skip it)
 *   BENCH_CPU_LOAD [0.7]        the CPU runs' rate, as a multiple of C
 *   BENCH_CPU_DURATION_S [8]    seconds per CPU run
 *   BENCH_CPU_ROUNDS [2]        CPU runs per gateway, taking turns (figures are over all of them)
 *   BENCH_CPU_INPUTS [8]        distinct inputs in the CPU runs
 *   BENCH_CPU_LOADED_RPS [600]  the second CPU runs' rate, on `fast` (0: skip them); the hit target is judged there
 *   BENCH_CPU_IDLE_S [5]        seconds over which each gateway's idle CPU is measured (the median second is
 *                               subtracted from the CPU runs; 0: nothing is)
 *   BENCH_COALESCE_N [64]       identical requests sent at once
 *   BENCH_REDIS [auto]          auto: the Redis phase runs when redis-server is on PATH, else it is skipped;
 *                               required: a missing redis-server fails the run; skip: never run it
 *   BENCH_REDIS_K [200]         distinct requests stored through replica A and asked of replica B
 *   BENCH_DRAIN_LIMIT_S [30]    how long to wait for the workers' queues to empty between runs
 *   BENCH_KEEP_TMP [0]          1 keeps the generated repository, configs and logs (the path is printed)
 *
 * Prints a table, each target with its figure, and ends with one JSON line of every figure.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { createConnection } from 'node:net'
import { cpus, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Pool } from 'undici'
// `import type`: open-loop.ts is a program, and a value import would run it here.
import type { OpenLoopConfig } from './open-loop.ts'
import {
  CLOCK_TICKS, HOST, cpuTicks, freePort, httpOnce, intEnv, machineTicks, median, numberEnv, printTable, round, runOpenLoop, selfTicks, sleep,
  stop, stopAll, stopAllOnSignals, track, waitForPort
} from './support.ts'

const MODEL = 'simulated'
const INFER_PATH = `/v2/models/${MODEL}/infer`
/** The same model with no service time, for the CPU runs at a loaded gateway's rate (the fleet serves thousands/s). */
const FAST_MODEL = 'fast'
const FAST_PATH = `/v2/models/${FAST_MODEL}/infer`
const CACHE_HEADER = 'x-flotilla-cache'
const ENDPOINT_HEADER = 'x-flotilla-endpoint'
const QUEUE_DEPTH_HEADER = 'x-flotilla-queue-depth'
const WORKER_NAMES = ['w1', 'w2', 'w3'] as const
const RANK = '@RANK@'
/**
 * The second element of the input tells the phases' inputs apart, so that no phase finds another's entries: the
 * load runs, the CPU runs, coalescing, the Redis replicas, and the probes that wait for a process to answer.
 */
const MARK = { load: 0, cpu: 1, coalesce: 2, redis: 3, redisProbe: 4, probe: 9 } as const

/** One [1,16] FP32 request for `simulated`: `[rank, mark, 0, ...]`; `rank` may be the Zipf placeholder. */
function inferBody (rank: number | string, mark: number): string {
  const data = [rank, mark, ...Array.from({ length: 14 }, () => 0)]
  return `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"data":[${data.join(',')}]}]}`
}

/** How long a process may take to listen: three workers and two gateways start at once on a shared 2-core machine. */
const START_TIMEOUT_MS = 30_000

/** Targets, from the issue. */
const HIT_CPU_TARGET = 1 / 3
const LOAD_TARGET = 3
/** "Sustains" the offered load: at least this share of it delivered in the window, and no errors. */
const SUSTAIN_SHARE = 0.97
const REDIS_HIT_TARGET = 0.99

type RedisMode = 'auto' | 'required' | 'skip'

interface Params {
  fixedMs: number
  overload: number
  cachedFactor: number
  zipfN: number
  zipfS: number
  seed: number
  durationS: number
  warmupS: number
  rampS: number
  timeoutMs: number
  connections: number
  capacityS: number
  cpuLoad: number
  cpuDurationS: number
  cpuRounds: number
  cpuInputs: number
  cpuLoadedRps: number
  cpuIdleS: number
  coalesceN: number
  redis: RedisMode
  redisK: number
  drainLimitS: number
  keepTmp: boolean
}

function readParams (): Params {
  const warmupS = intEnv('BENCH_WARMUP_S', 10, 0)
  const rampS = numberEnv('BENCH_RAMP_S', warmupS, 0)
  if (rampS > warmupS) throw new Error(`BENCH_RAMP_S (${rampS}) must be at most BENCH_WARMUP_S (${warmupS}): the measured window runs at the full rate`)
  const redis = process.env.BENCH_REDIS ?? 'auto'
  if (redis !== 'auto' && redis !== 'required' && redis !== 'skip') throw new Error(`BENCH_REDIS must be auto, required or skip, got '${redis}'`)
  return {
    fixedMs: numberEnv('BENCH_FIXED_MS', 20, 1, 10_000),
    overload: numberEnv('BENCH_OVERLOAD', 1.3, 0.01),
    cachedFactor: numberEnv('BENCH_CACHED_FACTOR', LOAD_TARGET, 0.01),
    zipfN: intEnv('BENCH_ZIPF_N', 10_000, 1),
    zipfS: numberEnv('BENCH_ZIPF_S', 1.1, 0, 10),
    seed: intEnv('BENCH_SEED', 1, 0),
    durationS: intEnv('BENCH_DURATION_S', 15, 1),
    warmupS,
    rampS,
    timeoutMs: intEnv('BENCH_TIMEOUT_MS', 2000, 1),
    connections: intEnv('BENCH_CONNECTIONS', 256, 1),
    capacityS: intEnv('BENCH_CAPACITY_S', 3, 0),
    cpuLoad: numberEnv('BENCH_CPU_LOAD', 0.7, 0.01, 1),
    cpuDurationS: intEnv('BENCH_CPU_DURATION_S', 8, 1),
    cpuRounds: intEnv('BENCH_CPU_ROUNDS', 2, 1),
    cpuInputs: intEnv('BENCH_CPU_INPUTS', 8, 1),
    cpuLoadedRps: intEnv('BENCH_CPU_LOADED_RPS', 600, 0),
    cpuIdleS: intEnv('BENCH_CPU_IDLE_S', 5, 0),
    coalesceN: intEnv('BENCH_COALESCE_N', 64, 1),
    redis,
    redisK: intEnv('BENCH_REDIS_K', 200, 1),
    drainLimitS: intEnv('BENCH_DRAIN_LIMIT_S', 30, 0),
    keepTmp: process.env.BENCH_KEEP_TMP === '1'
  }
}

// ---------------------------------------------------------------------------------------------------------------
// HTTP probes.

function headerOf (answer: { headers: Record<string, string | string[] | undefined> }, name: string): string | undefined {
  const v = answer.headers[name]
  return Array.isArray(v) ? v[0] : v
}

/** Waits until `port` answers an infer request with 200 (a proxy: one a worker served); bounded. */
async function waitForInfer (port: number, what: string, proxy: boolean, timeoutMs = START_TIMEOUT_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs
  let last = 'no answer'
  while (Date.now() < deadline) {
    try {
      const answer = await httpOnce(port, 'POST', INFER_PATH, inferBody(1, MARK.probe))
      if (answer.status === 200 && answer.body.includes('"outputs"') && (!proxy || headerOf(answer, ENDPOINT_HEADER) !== undefined || headerOf(answer, CACHE_HEADER) === 'hit')) return
      last = `${answer.status} ${answer.body.slice(0, 200)}`
    } catch (err) {
      last = err instanceof Error ? err.message : String(err)
    }
    await sleep(100)
  }
  throw new Error(`${what} did not answer an infer request with 200 within ${timeoutMs} ms: ${last}`)
}

// ---------------------------------------------------------------------------------------------------------------
// Processes.

interface Worker { readonly name: string, port: number, child: ChildProcess | undefined }
interface Gateway { readonly name: string, port: number, metricsPort: number, child: ChildProcess }

/** Requests that reached the worker: successes (batch items) plus failures after enqueue, from its statistics. */
async function workerRequests (worker: Worker): Promise<number> {
  const answer = await httpOnce(worker.port, 'GET', `/v2/models/${MODEL}/stats`)
  if (answer.status !== 200) throw new Error(`worker ${worker.name}: GET /v2/models/${MODEL}/stats answered ${answer.status}`)
  const stats = JSON.parse(answer.body) as { model_stats: Array<{ inference_count: number, inference_stats: { fail: { count: number } } }> }
  return stats.model_stats.reduce((n, s) => n + s.inference_count + s.inference_stats.fail.count, 0)
}

/** The requests queued or executing on a worker, from the header its every answer carries. */
async function pendingOn (worker: Worker): Promise<number> {
  const answer = await httpOnce(worker.port, 'GET', '/v2/health/ready')
  const n = Number(headerOf(answer, QUEUE_DEPTH_HEADER))
  if (!Number.isInteger(n)) throw new Error(`worker ${worker.name} answered /v2/health/ready without ${QUEUE_DEPTH_HEADER}`)
  return n
}

/** One labelled counter of the gateway's metrics, by the value of `label` (`flotilla_cache_requests_total` by result). */
async function gatewayCounter (gateway: Gateway, name: string, label: string): Promise<Record<string, number>> {
  const answer = await httpOnce(gateway.metricsPort, 'GET', '/metrics')
  const counts: Record<string, number> = {}
  for (const line of answer.body.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue
    const value = new RegExp(`${label}="([^"]*)"`).exec(line)?.[1]
    const n = Number(line.slice(line.lastIndexOf(' ') + 1))
    if (value !== undefined && Number.isFinite(n)) counts[value] = (counts[value] ?? 0) + n
  }
  return counts
}

/** The gateway's `flotilla_cache_requests_total` (one model here), by result. */
function gatewayCacheCounts (gateway: Gateway): Promise<Record<string, number>> {
  return gatewayCounter(gateway, 'flotilla_cache_requests_total', 'result')
}

function countsDelta (after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {}
  for (const [k, v] of Object.entries(after)) if (v - (before[k] ?? 0) !== 0) out[k] = v - (before[k] ?? 0)
  return out
}

/**
 * CPU time of every thread of `pid`, in ns, from /proc/<pid>/task/<tid>/schedstat (time on a CPU, user and kernel):
 * the gateway figures need finer than `cpuTicks`'s 10 ms, and a Node process's threads live as long as it does.
 */
function cpuNs (pid: number | undefined): number {
  if (pid === undefined) return 0
  let tasks: string[]
  try {
    tasks = readdirSync(`/proc/${pid}/task`)
  } catch {
    return 0
  }
  let total = 0
  for (const task of tasks) {
    try {
      total += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0])
    } catch {
      // exited meanwhile
    }
  }
  return total
}

/** One RESP command over a fresh socket; resolves with the raw first reply line. */
function redisCommand (port: number, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: HOST, port })
    let got = ''
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`redis ${args[0]} on port ${port} timed out`)) }, 2000)
    socket.once('error', (err) => { clearTimeout(timer); reject(err) })
    socket.once('connect', () => socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`))
    socket.on('data', (d: Buffer) => {
      got += d.toString('latin1')
      const end = got.indexOf('\r\n')
      if (end >= 0) { clearTimeout(timer); socket.destroy(); resolve(got.slice(0, end)) }
    })
  })
}

// ---------------------------------------------------------------------------------------------------------------
// Configs.

function modelConfig (name: string, fixedMs: number): string {
  // One instance (the default), no dynamic batching: one request at a time, fixed_ms each, no jitter.
  return `name: "${name}"
backend: "simulated"
max_batch_size: 64
input {
  name: "INPUT0"
  data_type: TYPE_FP32
  dims: [ 16 ]
}
output {
  name: "OUTPUT0"
  data_type: TYPE_FP32
  dims: [ 16 ]
}
parameters { key: "fixed_ms" value: { string_value: "${fixedMs}" } }
`
}

function fleetFile (workers: readonly Worker[], cached: boolean, redisUrl?: string): string {
  return `inference_servers:
${workers.map((w) => `  - name: ${w.name}
    host: ${HOST}
    port: ${w.port}
    models: [${MODEL}, ${FAST_MODEL}]`).join('\n')}
load_balancer:
  type: least_connections
gateway:
  host: ${HOST}
cache:
  models:
    ${MODEL}: { enabled: ${cached} }
    ${FAST_MODEL}: { enabled: ${cached} }
${redisUrl === undefined ? '' : `  redis:\n    url: ${redisUrl}\n`}`
}

// ---------------------------------------------------------------------------------------------------------------
// Load.

/** Sends each body once through `pool`, `concurrency` at a time; resolves with the answers' cache header counts. */
async function sendAll (pool: Pool, bodies: readonly string[], concurrency: number, path = INFER_PATH): Promise<{ ok: number, errors: number, cache: Record<string, number> }> {
  let next = 0
  let ok = 0
  let errors = 0
  const cache: Record<string, number> = {}
  const lane = async (): Promise<void> => {
    while (next < bodies.length) {
      const body = bodies[next++]!
      try {
        const res = await pool.request({ path, method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: AbortSignal.timeout(10_000) })
        await res.body.arrayBuffer()
        if (res.statusCode !== 200) { errors++; continue }
        ok++
        const h = res.headers[CACHE_HEADER]
        const value = (Array.isArray(h) ? h[0] : h) ?? '(none)'
        cache[value] = (cache[value] ?? 0) + 1
      } catch {
        errors++
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, bodies.length) }, lane))
  return { ok, errors, cache }
}

/** One open-loop run's figures, with what the gateway and the workers did meanwhile. */
interface LoadFigures {
  gateway: string
  offeredRps: number
  throughputRps: number
  scheduled: number
  ok: number
  errors: number
  errorKinds: { status: number, timeout: number, transport: number }
  p50Ms: number | null
  p90Ms: number | null
  p99Ms: number | null
  /** Measured 200 answers by `x-flotilla-cache` (`(none)`: the model is not cached there). */
  cacheHeader: Record<string, number>
  /** Hits over measured 200 answers; coalesced likewise. */
  hitRatio: number
  coalescedRatio: number
  distinctInputs: number | null
  /** Requests the workers received during the whole run, warm-up included, and per request sent. */
  workerRequests: number
  workerRequestsPerSent: number
  /** The gateway's own cache counters over the run (warm-up included). */
  gatewayCacheCounts: Record<string, number>
  /** The gateway's CPU per request sent, in µs; and over the run, in % of one core; and in ns. */
  gatewayCpuUsPerReq: number
  gatewayCpuPct: number
  gatewayCpuNs: number
  /** How long the generator ran (its start and end included). */
  seconds: number
  otherCpuPct: number
  sendLagP99Ms: number
  maxOutstanding: number
}

function ms (v: number | null): string {
  return v === null ? 'fail' : v.toFixed(1)
}

function pct (v: number): string {
  return (v * 100).toFixed(1)
}

// ---------------------------------------------------------------------------------------------------------------

/** Removes the scratch folder; replaced once it exists. */
let cleanupDir = (): void => {}

async function main (): Promise<void> {
  const benchStarted = performance.now()
  const params = readParams()
  const machine = { cpus: cpus().length, cpuModel: cpus()[0]?.model ?? 'unknown', node: process.version }
  const here = dirname(fileURLToPath(import.meta.url))
  const cli = resolve(here, '..', 'bin', 'flotilla.js')
  const generator = join(here, 'open-loop.js')
  if (!existsSync(cli) || !existsSync(generator)) {
    throw new Error(`${cli} or ${generator} not found: run 'npx tsc -p .' and start the bench as 'node dist/bench/cache.js'`)
  }
  let redisSkip: string | undefined
  if (params.redis === 'skip') redisSkip = 'BENCH_REDIS=skip'
  else {
    const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' })
    if (probe.error !== undefined || probe.status !== 0) {
      if (params.redis === 'required') throw new Error('BENCH_REDIS=required but redis-server is not installed (apt-get install -y redis-server)')
      redisSkip = 'redis-server is not installed (apt-get install -y redis-server)'
    }
  }
  const capacityRps = WORKER_NAMES.length * 1000 / params.fixedMs
  const rate = params.overload * capacityRps
  const cachedRate = params.cachedFactor * rate
  const cpuRate = params.cpuLoad * capacityRps

  const dir = mkdtempSync(join(tmpdir(), 'flotilla-cache-'))
  cleanupDir = () => { if (!params.keepTmp) rmSync(dir, { recursive: true, force: true }) }

  try {
    const repo = join(dir, 'models')
    mkdirSync(join(repo, MODEL, '1'), { recursive: true })
    writeFileSync(join(repo, MODEL, 'config.pbtxt'), modelConfig(MODEL, params.fixedMs))
    mkdirSync(join(repo, FAST_MODEL, '1'), { recursive: true })
    writeFileSync(join(repo, FAST_MODEL, 'config.pbtxt'), modelConfig(FAST_MODEL, 0))

    const workers: Worker[] = WORKER_NAMES.map((name) => ({ name, port: 0, child: undefined }))
    await Promise.all(workers.map(async (w) => {
      w.port = await freePort()
      const log = openSync(join(dir, `${w.name}.log`), 'w')
      const child = track(spawn(process.execPath, [cli, 'worker', '--model-repository', repo, '--host', HOST,
        '--http-port', String(w.port), '--grpc-port', '-1', '--metrics-port', '-1', '--log-level', 'warn'], { stdio: ['ignore', log, log], cwd: dir }))
      closeSync(log)
      w.child = child
      await waitForPort(w.port, child, `worker ${w.name}`, START_TIMEOUT_MS)
      await waitForInfer(w.port, `worker ${w.name}`, false)
    }))
    const workerTicks = (): number => workers.reduce((n, w) => n + cpuTicks(w.child?.pid), 0)
    const reached = async (): Promise<number> => (await Promise.all(workers.map(workerRequests))).reduce((a, b) => a + b, 0)

    /**
     * Starts a gateway on free ports. A port found free can be taken by another process before the gateway binds it
     * (the smoke test runs beside other tests that bind ports): then it is started again on other ports, twice at
     * most, and the last failure says what the gateway logged.
     */
    async function startGateway (name: string, cached: boolean, redisUrl?: string): Promise<Gateway> {
      const fleet = join(dir, `${name}.yaml`)
      writeFileSync(fleet, fleetFile(workers, cached, redisUrl))
      for (let attempt = 1; ; attempt++) {
        const port = await freePort()
        let metricsPort = await freePort()
        while (metricsPort === port) metricsPort = await freePort()
        const logFile = join(dir, `${name}.log`)
        const log = openSync(logFile, 'w')
        const child = track(spawn(process.execPath, [cli, 'gateway', '--config', fleet, '--http-port', String(port),
          '--grpc-port', '-1', '--metrics-port', String(metricsPort), '--admin-port', '-1', '--log-level', 'warn'], { stdio: ['ignore', log, log], cwd: dir }))
        closeSync(log)
        try {
          await waitForPort(port, child, `gateway ${name}`, START_TIMEOUT_MS)
        } catch (err) {
          if (attempt >= 3) throw new Error(`${(err as Error).message}:\n${readFileSync(logFile, 'utf8').slice(-2000)}`)
          continue
        }
        await waitForInfer(port, `gateway ${name}`, true)
        return { name, port, metricsPort, child }
      }
    }

    /** Waits for every worker's queue to empty (what an overloaded run left behind), within the limit. */
    async function drainWorkers (): Promise<void> {
      const deadline = Date.now() + params.drainLimitS * 1000
      while (Date.now() < deadline) {
        const pending = await Promise.all(workers.map(pendingOn))
        if (pending.every((n) => n === 0)) return
        await sleep(200)
      }
      process.stderr.write(`workers still busy after ${params.drainLimitS} s: going on (the next figures include that backlog)\n`)
    }

    // One after the other, so that their free ports are picked apart.
    const off = await startGateway('cache-off', false)
    const on = await startGateway('cache-on', true)

    // --- 1. Capacity: closed loop through the cache-off gateway, four requests in flight per worker.
    let measuredCapacityRps: number | null = null
    if (params.capacityS > 0) {
      const inFlight = 4 * workers.length
      const pool = new Pool(`http://${HOST}:${off.port}`, { connections: inFlight })
      const body = inferBody(1, MARK.probe)
      let done = 0
      const t0 = performance.now()
      const end = t0 + params.capacityS * 1000
      await Promise.all(Array.from({ length: inFlight }, async () => {
        while (performance.now() < end) {
          const res = await pool.request({ path: INFER_PATH, method: 'POST', headers: { 'content-type': 'application/json' }, body })
          await res.body.arrayBuffer()
          if (res.statusCode === 200) done++
        }
      }))
      measuredCapacityRps = round(done / ((performance.now() - t0) / 1000), 1)
      await pool.close()
      process.stderr.write(`capacity: ${measuredCapacityRps} rps measured, ${round(capacityRps, 1)} nominal\n`)
    }

    // --- 2. Load: Zipf inputs, uncached at R, then cached (cold) at 3R.
    async function loadRun (gateway: Gateway, config: Omit<OpenLoopConfig, 'host' | 'port' | 'path' | 'endpointHeader' | 'countHeader' | 'timeoutMs' | 'connections'> & { path?: string }): Promise<LoadFigures> {
      await drainWorkers()
      const pid = gateway.child.pid
      const ours = (): number => workerTicks() + cpuTicks(off.child.pid) + cpuTicks(on.child.pid) + selfTicks()
      const [reachedBefore, countsBefore] = [await reached(), await gatewayCacheCounts(gateway)]
      const gwBefore = cpuNs(pid)
      const oursBefore = ours()
      const machineBefore = machineTicks()
      const t0 = performance.now()
      const load = await runOpenLoop(generator, {
        host: HOST,
        port: gateway.port,
        path: INFER_PATH,
        endpointHeader: ENDPOINT_HEADER,
        countHeader: CACHE_HEADER,
        timeoutMs: params.timeoutMs,
        connections: params.connections,
        ...config
      })
      const seconds = (performance.now() - t0) / 1000
      const gwNs = cpuNs(pid) - gwBefore
      const otherTicks = machineTicks().busy - machineBefore.busy - (ours() - oursBefore)
      // Let the last answers' statistics land (and, for a timed-out run, what the workers still finish is theirs).
      await sleep(100)
      const workerRequests = (await reached()) - reachedBefore
      const counts = countsDelta(await gatewayCacheCounts(gateway), countsBefore)
      const header = load.headerCounts ?? {}
      const errors = load.errors.status + load.errors.timeout + load.errors.transport
      const figures: LoadFigures = {
        gateway: gateway.name,
        offeredRps: round(load.offeredRps, 1),
        throughputRps: round(load.throughputRps, 1),
        scheduled: load.scheduled,
        ok: load.ok,
        errors,
        errorKinds: load.errors,
        p50Ms: load.p50Ms,
        p90Ms: load.p90Ms,
        p99Ms: load.p99Ms,
        cacheHeader: header,
        hitRatio: round((header.hit ?? 0) / Math.max(1, load.ok), 4),
        coalescedRatio: round((header.coalesced ?? 0) / Math.max(1, load.ok), 4),
        distinctInputs: load.distinctInputs ?? null,
        workerRequests,
        workerRequestsPerSent: round(workerRequests / Math.max(1, load.scheduled), 4),
        gatewayCacheCounts: counts,
        gatewayCpuUsPerReq: round(gwNs / 1000 / Math.max(1, load.scheduled), 1),
        gatewayCpuPct: round(gwNs / 1e9 / seconds * 100, 0),
        gatewayCpuNs: gwNs,
        seconds: round(seconds, 3),
        otherCpuPct: round(Math.max(0, otherTicks / CLOCK_TICKS / seconds * 100), 0),
        sendLagP99Ms: load.sendLagP99Ms,
        maxOutstanding: load.maxOutstanding
      }
      process.stderr.write(`${gateway.name} at ${round(config.shape.rate, 1)} rps: ${figures.throughputRps} rps, hit ${pct(figures.hitRatio)}%, ` +
        `p99 ${ms(figures.p99Ms)} ms, errors ${errors}, to workers ${workerRequests}, gateway ${figures.gatewayCpuUsPerReq} µs/req, ` +
        `other ${figures.otherCpuPct}%, send lag p99 ${load.sendLagP99Ms} ms\n`)
      if (load.firstTransportError !== undefined) process.stderr.write(`  first transport error: ${load.firstTransportError}\n`)
      return figures
    }

    const poisson = (r: number, seed: number): OpenLoopConfig['shape'] => ({ rate: r, burstFactor: 1, burstDuty: 1, periodMs: 1000, seed })
    // The inputs are drawn from their own stream: with the arrivals' seed, rank and gap would come from the same numbers.
    const zipfSeed = (params.seed + 0x9e3779b9) >>> 0
    const zipfLoad = { body: inferBody(RANK, MARK.load), zipf: { n: params.zipfN, s: params.zipfS, seed: zipfSeed, placeholder: RANK } }
    const timing = { rampS: params.rampS, warmupS: params.warmupS, durationS: params.durationS }
    const uncached = await loadRun(off, { ...zipfLoad, shape: poisson(rate, params.seed), ...timing })
    const cached = await loadRun(on, { ...zipfLoad, shape: poisson(cachedRate, params.seed), ...timing })

    // --- 3. CPU per request: the same rate and the same few inputs, all proxied (cache off) against all hits.
    // Each gateway's CPU while idle, both at once (after the workers' queues emptied: nothing in flight).
    await drainWorkers()
    // Second by second, and the median taken: an idle gateway now and then spends 100-300 ms at once (a collection,
    // a compilation), which would otherwise be charged to every request of the runs whether or not it recurs there.
    const idle = { off: 0, on: 0 }
    if (params.cpuIdleS > 0) {
      const perSecond = { off: [] as number[], on: [] as number[] }
      for (let i = 0; i < params.cpuIdleS; i++) {
        const [offBefore, onBefore] = [cpuNs(off.child.pid), cpuNs(on.child.pid)]
        const t0 = performance.now()
        await sleep(1000)
        const seconds = (performance.now() - t0) / 1000
        perSecond.off.push((cpuNs(off.child.pid) - offBefore) / seconds)
        perSecond.on.push((cpuNs(on.child.pid) - onBefore) / seconds)
      }
      idle.off = median(perSecond.off)
      idle.on = median(perSecond.on)
    }
    interface CpuFigures {
      /** CPU per request over the runs, the gateway's idle CPU taken off; and without taking it off. */
      usPerReq: number
      rawUsPerReq: number
      /** The gateway's idle CPU, in % of one core. */
      idleCpuPct: number
      requests: number
      hitRatio: number
      p50Ms: number | null
      p99Ms: number | null
      errors: number
      otherCpuPct: number
    }
    const cpuOf = (runs: readonly LoadFigures[], idleNsPerS: number): CpuFigures => {
      const requests = runs.reduce((n, f) => n + f.scheduled, 0)
      const ns = runs.reduce((n, f) => n + f.gatewayCpuNs, 0)
      const idleNs = idleNsPerS * runs.reduce((n, f) => n + f.seconds, 0)
      const ok = runs.reduce((n, f) => n + f.ok, 0)
      const hits = runs.reduce((n, f) => n + (f.cacheHeader.hit ?? 0), 0)
      const worst = (pick: (f: LoadFigures) => number | null): number | null => runs.some((f) => pick(f) === null) ? null : Math.max(...runs.map((f) => pick(f)!))
      return {
        usPerReq: round(Math.max(0, ns - idleNs) / 1000 / Math.max(1, requests), 1),
        rawUsPerReq: round(ns / 1000 / Math.max(1, requests), 1),
        idleCpuPct: round(idleNsPerS / 1e9 * 100, 2),
        requests,
        hitRatio: round(hits / Math.max(1, ok), 4),
        p50Ms: worst((f) => f.p50Ms),
        p99Ms: worst((f) => f.p99Ms),
        errors: runs.reduce((n, f) => n + f.errors, 0),
        otherCpuPct: Math.max(...runs.map((f) => f.otherCpuPct))
      }
    }
    interface CpuPhase { proxied: CpuFigures, hit: CpuFigures, rateRps: number, path: string }
    /** Proxied against hits at `rateRps` on `path`, the cache-on gateway pre-warmed with every input first. */
    async function cpuPhase (path: string, rateRps: number): Promise<CpuPhase> {
      const cpuLoad = { path, body: inferBody(RANK, MARK.cpu), zipf: { n: params.cpuInputs, s: params.zipfS, seed: zipfSeed, placeholder: RANK } }
      const warmPool = new Pool(`http://${HOST}:${on.port}`, { connections: 1 })
      await sendAll(warmPool, Array.from({ length: params.cpuInputs }, (_, i) => inferBody(i + 1, MARK.cpu)), 1, path)
      await warmPool.close()
      const runs: { proxied: LoadFigures[], hit: LoadFigures[] } = { proxied: [], hit: [] }
      for (let r = 0; r < params.cpuRounds; r++) {
        const shape = poisson(rateRps, params.seed + 1 + r)
        runs.proxied.push(await loadRun(off, { ...cpuLoad, shape, warmupS: 0, durationS: params.cpuDurationS }))
        runs.hit.push(await loadRun(on, { ...cpuLoad, shape, warmupS: 0, durationS: params.cpuDurationS }))
      }
      return { proxied: cpuOf(runs.proxied, idle.off), hit: cpuOf(runs.hit, idle.on), rateRps: round(rateRps, 1), path }
    }
    const cpu = { ...await cpuPhase(INFER_PATH, cpuRate), rounds: params.cpuRounds, idleS: params.cpuIdleS }
    // At a rate a loaded gateway sees (the `fast` model: no service time), where a request's own work shows beside the
    // per-wake-up costs that every request pays alike at ~100/s.
    const cpuLoaded: CpuPhase | undefined = params.cpuLoadedRps > 0 ? await cpuPhase(FAST_PATH, params.cpuLoadedRps) : undefined

    // --- 4. Coalescing: N identical requests at once, with an input neither gateway has seen.
    interface CoalesceFigures { sent: number, ok: number, errors: number, cacheHeader: Record<string, number>, workerRequests: number, leader?: 'answered' | 'left' }
    /**
     * `leaderLeavesAfterMs`: the first request goes alone, the other N - 1 follow it a moment later, and the first
     * one's client gives up after this long, while the worker still executes it (to see what its followers do).
     */
    async function coalesceRun (gateway: Gateway, rank: number, leaderLeavesAfterMs?: number): Promise<CoalesceFigures> {
      await drainWorkers()
      const n = params.coalesceN
      const pool = new Pool(`http://${HOST}:${gateway.port}`, { connections: n })
      // Open the connections first, so that the N requests leave together instead of behind N handshakes.
      await Promise.all(Array.from({ length: n }, async () => {
        const res = await pool.request({ path: '/v2/health/live', method: 'GET' })
        await res.body.arrayBuffer()
      }))
      const before = await reached()
      const body = inferBody(rank, MARK.coalesce)
      let leader: Promise<'answered' | 'left'> | undefined
      if (leaderLeavesAfterMs !== undefined) {
        leader = pool.request({ path: INFER_PATH, method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: AbortSignal.timeout(leaderLeavesAfterMs) })
          .then(async (res) => { await res.body.arrayBuffer(); return 'answered' as const }, () => 'left' as const)
        // A head start, so that it is the first one the gateway sees: the one the others wait for.
        await sleep(Math.max(1, params.fixedMs * 0.15))
      }
      const result = await sendAll(pool, Array.from({ length: leader === undefined ? n : n - 1 }, () => body), n)
      const leaderOutcome = await leader
      await pool.close()
      await sleep(100)
      await drainWorkers()
      const workerRequests = (await reached()) - before
      process.stderr.write(`${gateway.name}: ${n} identical at once${leaderOutcome === undefined ? '' : `, the first one's client ${leaderOutcome}`}, ` +
        `${JSON.stringify(result.cache)}, to workers ${workerRequests}\n`)
      const figures: CoalesceFigures = { sent: n, ok: result.ok, errors: result.errors, cacheHeader: result.cache, workerRequests }
      if (leaderOutcome !== undefined) figures.leader = leaderOutcome
      return figures
    }
    const coalesce = {
      off: await coalesceRun(off, 1),
      on: await coalesceRun(on, 2),
      // Not a target of the issue: what the others do when the one they wait for is cancelled by its client.
      onLeaderLeaves: await coalesceRun(on, 3, params.fixedMs * 0.6)
    }
    await Promise.all([stop(off.child), stop(on.child)])

    // --- 5. Redis: replica A stores, replica B serves.
    type RedisFigures = { skipped: string } | {
      k: number
      entriesInRedis: number
      warmA: { ok: number, errors: number, cacheHeader: Record<string, number>, workerRequests: number }
      replicaB: { ok: number, errors: number, cacheHeader: Record<string, number>, workerRequests: number, hitRatio: number }
      /** Whether an entry stored through A was ever a hit on B before the K requests (Redis reachable and used by both). */
      sharedTierWorked: boolean
      probes: number
      /** `flotilla_cache_redis_errors_total` by operation, per replica, over the whole phase. */
      redisErrors: { a: Record<string, number>, b: Record<string, number> }
    }
    let redisFigures: RedisFigures
    if (redisSkip !== undefined) {
      redisFigures = { skipped: redisSkip }
      process.stderr.write(`redis: skipped (${redisSkip})\n`)
    } else {
      const redisPort = await freePort()
      const redisDir = join(dir, 'redis')
      mkdirSync(redisDir)
      const redisLog = openSync(join(dir, 'redis.log'), 'w')
      const redis = track(spawn('redis-server', ['--port', String(redisPort), '--bind', HOST, '--save', '', '--appendonly', 'no',
        '--dir', redisDir, '--daemonize', 'no'], { stdio: ['ignore', redisLog, redisLog], cwd: redisDir }))
      closeSync(redisLog)
      await waitForPort(redisPort, redis, 'redis-server', START_TIMEOUT_MS)
      const url = `redis://${HOST}:${redisPort}`
      const [a, b] = await Promise.all([startGateway('replica-a', true, url), startGateway('replica-b', true, url)])
      // Both replicas connect to Redis in the background: wait until an entry stored through A is a hit on B, each
      // time with a fresh input (a miss on B stores it in B's own tier, which would then answer a retry).
      // Past the deadline the phase still runs, and its figures show what the shared tier did (nothing, then).
      let probes = 0
      let sharedTierWorked = false
      const probeDeadline = Date.now() + 10_000
      while (Date.now() < probeDeadline) {
        probes++
        const body = inferBody(probes, MARK.redisProbe)
        await httpOnce(a.port, 'POST', INFER_PATH, body)
        await sleep(50)
        const answer = await httpOnce(b.port, 'POST', INFER_PATH, body)
        if (headerOf(answer, CACHE_HEADER) === 'hit') { sharedTierWorked = true; break }
        await sleep(200)
      }
      if (!sharedTierWorked) process.stderr.write(`redis: replica B never served an entry stored through replica A within 10 s (${probes} tries)\n`)
      const bodies = Array.from({ length: params.redisK }, (_, i) => inferBody(i + 1, MARK.redis))
      const poolA = new Pool(`http://${HOST}:${a.port}`, { connections: 16 })
      let before = await reached()
      const warmA = await sendAll(poolA, bodies, 16)
      await poolA.close()
      const warmAWorkers = (await reached()) - before
      // A stores in Redis after answering, without waiting: wait until the entries are there (bounded).
      const expected = params.redisK + probes
      let entries = 0
      const storeDeadline = Date.now() + (sharedTierWorked ? 5000 : 500)
      while (Date.now() < storeDeadline) {
        entries = Number((await redisCommand(redisPort, ['DBSIZE'])).slice(1))
        if (entries >= expected) break
        await sleep(50)
      }
      const poolB = new Pool(`http://${HOST}:${b.port}`, { connections: 16 })
      before = await reached()
      const onB = await sendAll(poolB, bodies, 16)
      await poolB.close()
      await sleep(100)
      const bWorkers = (await reached()) - before
      redisFigures = {
        k: params.redisK,
        entriesInRedis: entries,
        warmA: { ok: warmA.ok, errors: warmA.errors, cacheHeader: warmA.cache, workerRequests: warmAWorkers },
        replicaB: { ok: onB.ok, errors: onB.errors, cacheHeader: onB.cache, workerRequests: bWorkers, hitRatio: round((onB.cache.hit ?? 0) / params.redisK, 4) },
        sharedTierWorked,
        probes,
        redisErrors: {
          a: await gatewayCounter(a, 'flotilla_cache_redis_errors_total', 'operation'),
          b: await gatewayCounter(b, 'flotilla_cache_redis_errors_total', 'operation')
        }
      }
      process.stderr.write(`redis: A stored ${params.redisK} (${JSON.stringify(warmA.cache)}), ${entries} keys in Redis; B ${JSON.stringify(onB.cache)}, to workers ${bWorkers}, ` +
        `Redis errors A ${JSON.stringify(redisFigures.redisErrors.a)} B ${JSON.stringify(redisFigures.redisErrors.b)}\n`)
      await Promise.all([stop(a.child), stop(b.child)])
      await stop(redis)
    }

    // --- Report.
    const table: string[][] = [['phase', 'gateway', 'offered', 'rps', 'hit %', 'coal. %', 'p50 ms', 'p99 ms', 'errors', 'to workers', 'gw µs/req', 'other %']]
    if (measuredCapacityRps !== null) {
      table.push(['capacity (closed loop, 12 in flight)', off.name, '-', measuredCapacityRps.toFixed(0), '-', '-', '-', '-', '0', '-', '-', '-'])
    }
    const loadRow = (phase: string, f: LoadFigures): string[] => [phase, f.gateway, f.offeredRps.toFixed(0), f.throughputRps.toFixed(0),
      f.gateway === off.name ? '-' : pct(f.hitRatio), f.gateway === off.name ? '-' : pct(f.coalescedRatio), ms(f.p50Ms), ms(f.p99Ms),
      String(f.errors), String(f.workerRequests), f.gatewayCpuUsPerReq.toFixed(0), String(f.otherCpuPct)]
    table.push(loadRow(`zipf ${params.zipfN}/s=${params.zipfS}, R`, uncached))
    table.push(loadRow(`zipf ${params.zipfN}/s=${params.zipfS}, ${params.cachedFactor}R`, cached))
    const cpuRow = (phase: string, gateway: string, rateRps: number, c: typeof cpu.proxied, hits: boolean): string[] => [phase, gateway, rateRps.toFixed(0),
      '-', hits ? pct(c.hitRatio) : '-', '-', ms(c.p50Ms), ms(c.p99Ms), String(c.errors), '-', `${c.usPerReq.toFixed(0)} (${c.rawUsPerReq.toFixed(0)})`, String(c.otherCpuPct)]
    table.push(cpuRow(`cpu, ${params.cpuInputs} inputs, proxied`, off.name, cpu.rateRps, cpu.proxied, false))
    table.push(cpuRow(`cpu, ${params.cpuInputs} inputs, pre-warmed`, on.name, cpu.rateRps, cpu.hit, true))
    if (cpuLoaded !== undefined) {
      table.push(cpuRow(`cpu, ${FAST_MODEL}, proxied`, off.name, cpuLoaded.rateRps, cpuLoaded.proxied, false))
      table.push(cpuRow(`cpu, ${FAST_MODEL}, pre-warmed`, on.name, cpuLoaded.rateRps, cpuLoaded.hit, true))
    }
    for (const [what, g, c] of [['', off.name, coalesce.off], ['', on.name, coalesce.on], [', 1st client leaves', on.name, coalesce.onLeaderLeaves]] as const) {
      table.push([`${params.coalesceN} identical at once${what}`, g, String(c.sent), '-',
        g === off.name ? '-' : pct((c.cacheHeader.hit ?? 0) / Math.max(1, c.ok)), g === off.name ? '-' : pct((c.cacheHeader.coalesced ?? 0) / Math.max(1, c.ok)),
        '-', '-', String(c.errors), String(c.workerRequests), '-', '-'])
    }
    if ('skipped' in redisFigures) table.push([`redis: replica B, ${params.redisK} stored by A`, 'replica-b', '-', '-', 'skipped', '-', '-', '-', '-', '-', '-', '-'])
    else {
      table.push([`redis: replica B, ${params.redisK} stored by A`, 'replica-b', String(params.redisK), '-', pct(redisFigures.replicaB.hitRatio),
        pct((redisFigures.replicaB.cacheHeader.coalesced ?? 0) / params.redisK), '-', '-', String(redisFigures.replicaB.errors),
        String(redisFigures.replicaB.workerRequests), '-', '-'])
    }

    console.log(`\ncache: POST ${INFER_PATH} [1,16] through a gateway in front of ${WORKER_NAMES.length} simulated workers at ${params.fixedMs} ms ` +
      `a request, one at a time (C = ${round(capacityRps, 1)} rps${measuredCapacityRps === null ? '' : `, measured ${measuredCapacityRps}`}); ` +
      `Poisson open loop, R = ${params.overload} C = ${round(rate, 1)} rps, inputs Zipf(s=${params.zipfS}) over ${params.zipfN}, seed ${params.seed}, ` +
      `${params.durationS} s measured after ${params.warmupS} s (ramping up over ${params.rampS} s), timeout ${params.timeoutMs} ms; CPU runs at ${cpu.rateRps} rps, ` +
      `${params.cpuRounds} x ${params.cpuDurationS} s each; ${machine.cpus} x ${machine.cpuModel}, node ${machine.node}`)
    printTable(table)

    // Targets.
    const ratioOf = (c: { proxied: typeof cpu.proxied, hit: typeof cpu.hit }): { ratio: number | null, raw: number | null } => ({
      ratio: c.proxied.usPerReq > 0 ? round(c.hit.usPerReq / c.proxied.usPerReq, 3) : null,
      raw: c.proxied.rawUsPerReq > 0 ? round(c.hit.rawUsPerReq / c.proxied.rawUsPerReq, 3) : null
    })
    // Judged at the loaded rate when it ran: at ~100/s a request's own work is a small part of what it costs.
    const judged = cpuLoaded ?? cpu
    const { ratio: hitCpuRatio, raw: rawHitCpuRatio } = ratioOf(judged)
    const lowRate = ratioOf(cpu)
    const cachedSustains = cached.errors === 0 && cached.throughputRps >= SUSTAIN_SHARE * cached.offeredRps
    // An uncached p99 among the failures is above the timeout: any cached p99 that is a number is below it.
    const p99Below = cached.p99Ms !== null && (uncached.p99Ms === null || cached.p99Ms < uncached.p99Ms)
    const p99Ratio = cached.p99Ms === null || uncached.p99Ms === null ? null : round(cached.p99Ms / uncached.p99Ms, 3)
    const loadRatio = round(cached.offeredRps / Math.max(1e-9, uncached.offeredRps), 3)
    const uncachedSustains = uncached.errors === 0 && uncached.throughputRps >= SUSTAIN_SHARE * uncached.offeredRps
    const targets = {
      hitCpu: {
        rateRps: judged.rateRps,
        path: judged.path,
        hitUsPerReq: judged.hit.usPerReq,
        proxiedUsPerReq: judged.proxied.usPerReq,
        ratio: hitCpuRatio,
        rawRatio: rawHitCpuRatio,
        lowRate: { rateRps: cpu.rateRps, hitUsPerReq: cpu.hit.usPerReq, proxiedUsPerReq: cpu.proxied.usPerReq, ratio: lowRate.ratio, rawRatio: lowRate.raw },
        target: round(HIT_CPU_TARGET, 3),
        pass: hitCpuRatio !== null && hitCpuRatio <= HIT_CPU_TARGET
      },
      cachedLoad: {
        offeredRatio: loadRatio,
        cachedSustains,
        cachedThroughputOverUncachedOffered: round(cached.throughputRps / Math.max(1e-9, uncached.offeredRps), 3),
        // null when either p99 fell among the failures (then the uncached one is above BENCH_TIMEOUT_MS).
        p99Ratio,
        p99Below,
        target: `offered >= ${LOAD_TARGET}x, >= ${SUSTAIN_SHARE * 100}% of it delivered with no errors, p99 below the uncached p99`,
        pass: loadRatio >= LOAD_TARGET - 1e-9 && cachedSustains && p99Below
      },
      coalesce: { workerRequests: coalesce.on.workerRequests, target: 1, pass: coalesce.on.workerRequests === 1 && coalesce.on.errors === 0 },
      redis: 'skipped' in redisFigures
        ? { skipped: redisFigures.skipped, pass: null }
        : { hitRatio: redisFigures.replicaB.hitRatio, workerRequests: redisFigures.replicaB.workerRequests, target: REDIS_HIT_TARGET, pass: redisFigures.replicaB.hitRatio >= REDIS_HIT_TARGET }
    }
    const verdict = (pass: boolean | null): string => pass === null ? 'skipped' : pass ? 'met' : 'NOT met'
    console.log('\ntargets:')
    console.log(`  a hit costs <= 1/3 of a proxied request's gateway CPU, at ${judged.rateRps} rps on ${judged.path}: ` +
      `${judged.hit.usPerReq} / ${judged.proxied.usPerReq} µs = ${hitCpuRatio ?? 'n/a'} ` +
      `(hits ${pct(judged.hit.hitRatio)}%; idle CPU taken off: ${judged.hit.idleCpuPct}% / ${judged.proxied.idleCpuPct}% of a core; without: ` +
      `${judged.hit.rawUsPerReq} / ${judged.proxied.rawUsPerReq} µs = ${rawHitCpuRatio ?? 'n/a'}): ${verdict(targets.hitCpu.pass)}` +
      (cpuLoaded === undefined ? '' : `; at ${cpu.rateRps} rps on ${cpu.path}: ${cpu.hit.usPerReq} / ${cpu.proxied.usPerReq} µs = ${lowRate.ratio ?? 'n/a'}`))
    console.log(`  cached sustains >= ${LOAD_TARGET}x the load at a lower p99: ${cached.offeredRps} offered (${loadRatio}x), ${cached.throughputRps} rps, ` +
      `${cached.errors} errors, p99 ${ms(cached.p99Ms)} ms against ${uncached.p99Ms === null ? `> ${params.timeoutMs}` : ms(uncached.p99Ms)} ms uncached: ` +
      `${verdict(targets.cachedLoad.pass)}`)
    console.log(`  ${params.coalesceN} identical concurrent requests reach a worker once: ${coalesce.on.workerRequests} ` +
      `(cache off: ${coalesce.off.workerRequests}): ${verdict(targets.coalesce.pass)}`)
    console.log(`  (no target) the same when the first request's client leaves mid-flight: ${coalesce.onLeaderLeaves.workerRequests} reach a worker ` +
      `(${JSON.stringify(coalesce.onLeaderLeaves.cacheHeader)}; the first client ${coalesce.onLeaderLeaves.leader ?? 'n/a'})`)
    console.log(`  a second replica serves hits stored by the first: ${'skipped' in redisFigures ? redisFigures.skipped : `${pct(redisFigures.replicaB.hitRatio)}% hits, ` +
      `${redisFigures.replicaB.workerRequests} to workers` +
      `${Object.keys(redisFigures.redisErrors.a).length + Object.keys(redisFigures.redisErrors.b).length > 0 ? `, Redis errors A ${JSON.stringify(redisFigures.redisErrors.a)} B ${JSON.stringify(redisFigures.redisErrors.b)}` : ''}`}: ` +
      `${verdict(targets.redis.pass)}`)
    console.log(`premise: the fleet without cache ${uncachedSustains ? 'DID sustain' : 'could not sustain'} R = ${uncached.offeredRps} rps ` +
      `(${uncached.throughputRps} rps delivered, ${uncached.errors} errors)`)
    const elapsedS = Math.round((performance.now() - benchStarted) / 1000)
    console.log(`took ${elapsedS} s`)
    if (params.keepTmp) console.log(`repository, configs and logs kept in ${dir}`)
    console.log(JSON.stringify({
      bench: 'cache',
      machine,
      params: { ...params, capacityRps: round(capacityRps, 1), rateRps: round(rate, 1), cachedRateRps: round(cachedRate, 1), cpuRateRps: cpu.rateRps, path: INFER_PATH, workers: WORKER_NAMES },
      elapsedS,
      capacity: { nominalRps: round(capacityRps, 1), measuredRps: measuredCapacityRps },
      results: { uncached, cached, cpu, cpuLoaded: cpuLoaded ?? null, coalesce, redis: redisFigures },
      ratios: {
        hitCpuOverProxied: hitCpuRatio,
        hitCpuOverProxiedWithIdle: rawHitCpuRatio,
        cachedOfferedOverUncached: loadRatio,
        cachedThroughputOverUncachedOffered: targets.cachedLoad.cachedThroughputOverUncachedOffered,
        cachedP99OverUncachedP99: p99Ratio,
        coalescedWorkerRequests: coalesce.on.workerRequests,
        coalescedWorkerRequestsLeaderLeaves: coalesce.onLeaderLeaves.workerRequests,
        redisReplicaHitRatio: 'skipped' in redisFigures ? null : redisFigures.replicaB.hitRatio
      },
      premiseUncachedCannotSustain: !uncachedSustains,
      targets
    }))
  } finally {
    await stopAll()
    cleanupDir()
  }
}

// Ctrl-C or a kill: stop what was started, remove the scratch folder, then leave with the conventional status.
stopAllOnSignals(() => { cleanupDir() })

main().catch(async (err: unknown) => {
  console.error(err instanceof Error ? err.message : err)
  await stopAll()
  cleanupDir()
  process.exitCode = 1
})
