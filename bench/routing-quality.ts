/**
 * bench/routing-quality: how well each balancing strategy routes around a slow worker, against HAProxy on the same
 * workers, under the same bursty open-loop load. Three Flotilla workers serve the `simulated` model (a timer, no
 * CPU): two at 5 ms + 0.1 ms per item, one three times slower (15 ms). The gateway runs once per strategy, fresh
 * each time; HAProxy runs with `balance roundrobin` and with `balance leastconn`. Every target is offered the same
 * seeded arrival schedule by `open-loop.ts`, in its own process, and latency is measured from each request's
 * scheduled time. The target (issue "routing quality"): the best strategy's p99 is at most 0.8x HAProxy leastconn's.
 * Everything listens on 127.0.0.1 only; every process started here is stopped at the end, on failure and on Ctrl-C
 * alike, and every wait is bounded.
 *
 *   npx tsc -p . && flock /tmp/flotilla-bench.lock node dist/bench/routing-quality.js
 *
 * (flock: so that two benchmarks on this shared machine never overlap.)
 *
 * Parameters come from the environment (defaults in brackets):
 *   BENCH_RATE [300]            mean offered requests per second (the fleet serves about 460: 198 + 198 + 66)
 *   BENCH_BURST_FACTOR [1.6]    the rate during a burst, as a multiple of BENCH_RATE (1: plain Poisson)
 *   BENCH_BURST_DUTY [0.25]     the share of each period spent in a burst
 *   BENCH_BURST_PERIOD_MS [1000]  one burst plus the rest after it
 *   BENCH_SEED [1]              seeds the arrival schedule (the same for every target)
 *   BENCH_DURATION_S [20]       measured seconds per target
 *   BENCH_WARMUP_S [3]          seconds of the same schedule sent first and not measured
 *   BENCH_TIMEOUT_MS [2000]     a request not answered this long after its scheduled time is a timeout (an error)
 *   BENCH_CONNECTIONS [256]     the generator's connections to the target
 *   BENCH_SLOW_FACTOR [3]       how many times the slow worker's fixed_ms exceeds the model's (5 ms)
 *   BENCH_WEIGHTS [1,1,1]       server weights of fast-1, fast-2 and slow, in the fleet file and in HAProxy alike
 *   BENCH_TARGETS [haproxy-roundrobin,haproxy-leastconn,<every strategy>]   which targets, in this order
 *   BENCH_ROUNDS [1]            runs per target, taking turns; each figure is then the median over rounds
 *   BENCH_DRAIN_LIMIT_S [5]     how long to wait for the workers' queues to empty between targets before
 *                               restarting them instead (a round robin leaves the slow worker ~15 s of backlog)
 *   BENCH_NICE [0]              the nice level this bench and every process it starts run at (they inherit it),
 *                               and of its scheduler autogroup while it runs (with autogroups on, that is what
 *                               weighs against other sessions' work); negative values (root only) shield the
 *                               measurement from other work on the machine
 *   BENCH_KEEP_TMP [0]          1 keeps the generated model repositories, configs and logs (the path is printed)
 *
 * Prints a table, the best strategy's p99 against HAProxy leastconn's, and ends with one JSON line of every figure.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { closeSync, cpSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, setPriority, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { balancerNames } from '../gateway/balancer/registry.ts'
import { phaseRates, type ArrivalShape } from './arrivals.ts'
// `import type`: open-loop.ts is a program, and a value import (even an empty one) would run it here.
import type { OpenLoopResult } from './open-loop.ts'
import {
  CLOCK_TICKS, HOST, cpuTicks, freePort, httpOnce, intEnv, machineTicks, median, numberEnv, printTable, round, runOpenLoop,
  selfTicks, sleep, stop, stopAll, stopAllOnSignals, track, versionOf, waitForPort
} from './support.ts'

const MODEL = 'simulated'
const INFER_PATH = `/v2/models/${MODEL}/infer`
/** One [1,16] FP32 request, the shape the `simulated` model takes (batch 1). */
const REQUEST_BODY = JSON.stringify({
  inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i + 0.5) }]
})
const ENDPOINT_HEADER = 'x-flotilla-endpoint'
const QUEUE_DEPTH_HEADER = 'x-flotilla-queue-depth'
/** The workers, in fleet order; the last is the slow one. */
const WORKER_NAMES = ['fast-1', 'fast-2', 'slow'] as const
const SLOW = 'slow'
const HAPROXY_TARGETS = ['haproxy-roundrobin', 'haproxy-leastconn'] as const
/** The anchor: the ratio is taken against this target's p99. */
const ANCHOR = 'haproxy-leastconn'
const P99_TARGET = 0.8

interface Params {
  shape: ArrivalShape
  durationS: number
  warmupS: number
  timeoutMs: number
  connections: number
  slowFactor: number
  weights: [number, number, number]
  targets: string[]
  rounds: number
  drainLimitS: number
  nice: number
  keepTmp: boolean
}

function readParams (): Params {
  const strategies = balancerNames()
  const known = [...HAPROXY_TARGETS, ...strategies]
  const targets = (process.env.BENCH_TARGETS ?? known.join(',')).split(',').map((s) => s.trim()).filter((s) => s !== '')
  for (const t of targets) {
    if (!known.includes(t)) throw new Error(`BENCH_TARGETS: unknown target '${t}' (known: ${known.join(', ')})`)
  }
  const weights = (process.env.BENCH_WEIGHTS ?? '1,1,1').split(',').map((s) => Number(s.trim()))
  if (weights.length !== 3 || !weights.every((w) => Number.isInteger(w) && w >= 1 && w <= 256)) {
    throw new Error(`BENCH_WEIGHTS must be three integers in [1, 256] (fast-1, fast-2, slow), got '${process.env.BENCH_WEIGHTS}'`)
  }
  const burstFactor = numberEnv('BENCH_BURST_FACTOR', 1.6, 1)
  const burstDuty = numberEnv('BENCH_BURST_DUTY', 0.25, 0.001, 1)
  if (burstFactor * burstDuty > 1) throw new Error('BENCH_BURST_FACTOR × BENCH_BURST_DUTY must be at most 1')
  return {
    shape: {
      rate: numberEnv('BENCH_RATE', 300, 1),
      burstFactor,
      burstDuty,
      periodMs: numberEnv('BENCH_BURST_PERIOD_MS', 1000, 10),
      seed: intEnv('BENCH_SEED', 1, 0)
    },
    durationS: intEnv('BENCH_DURATION_S', 20, 1),
    warmupS: intEnv('BENCH_WARMUP_S', 3, 0),
    timeoutMs: intEnv('BENCH_TIMEOUT_MS', 2000, 1),
    connections: intEnv('BENCH_CONNECTIONS', 256, 1),
    slowFactor: numberEnv('BENCH_SLOW_FACTOR', 3, 1),
    weights: weights as [number, number, number],
    targets,
    rounds: intEnv('BENCH_ROUNDS', 1, 1),
    drainLimitS: intEnv('BENCH_DRAIN_LIMIT_S', 5, 0),
    nice: intEnv('BENCH_NICE', 0, -20),
    keepTmp: process.env.BENCH_KEEP_TMP === '1'
  }
}

/** One target's figures (medians over rounds when there are several). */
interface TargetFigures {
  offeredRps: number
  throughputRps: number
  /** `null` when the percentile falls among failed requests (see `open-loop.ts`). */
  p50Ms: number | null
  p90Ms: number | null
  p99Ms: number | null
  p999Ms: number | null
  errors: number
  errorKinds: { status: number, timeout: number, transport: number }
  /** Share of answered requests per worker, in %. */
  sharePct: Record<string, number>
  /** Mean latency of the requests each worker answered, in ms. */
  meanMsByWorker: Record<string, number>
  /** CPU the proxy (gateway or HAProxy) used during the run, in % of one core. */
  proxyCpuPct: number
  /** CPU used meanwhile by processes this bench did not start, in % of one core: high values spoil comparisons. */
  otherCpuPct: number
  /** Time the hypervisor gave this machine's CPUs to someone else, in % of one core. */
  stealPct: number
  /** The generator's own p99 send lag: if this is not small, the generator, not the target, set the latency. */
  sendLagP99Ms: number
  maxOutstanding: number
}

interface Worker {
  readonly name: string
  readonly repository: string
  port: number
  /** `undefined` until first started. */
  child: ChildProcess | undefined
}

/** Removes the scratch folder (repositories, configs, logs); replaced once it exists. */
let cleanupDir = (): void => {}
/** Puts the autogroup's nice level back; replaced once it has been changed. */
let renice = (): void => {}

const AUTOGROUP = '/proc/self/autogroup'

/**
 * Sets the nice level of this process's scheduler autogroup and returns what restores it. With
 * `kernel.sched_autogroup_enabled`, CFS first shares the CPUs between sessions (autogroups) and only then between
 * the processes of one, so a process's own nice level does nothing against another session's work: the
 * autogroup's does. No-op (restoring nothing) where the kernel has no autogroups.
 */
function reniceAutogroup (nice: number): () => void {
  let before: string | undefined
  try {
    before = /nice (-?\d+)/.exec(readFileSync(AUTOGROUP, 'utf8'))?.[1]
  } catch {
    return () => {}
  }
  if (before === undefined) return () => {}
  writeFileSync(AUTOGROUP, String(nice))
  return () => {
    try {
      writeFileSync(AUTOGROUP, before)
    } catch {
      // Nothing to restore to any more.
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// HTTP probes.

/**
 * Waits until `port` answers an infer request with 200 (and, for a proxy, names the worker that served it).
 * Bounded; a target that never does fails the run here rather than in the table.
 */
async function waitForInfer (port: number, what: string, proxy: boolean, timeoutMs = 10000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  let last = 'no answer'
  while (Date.now() < deadline) {
    try {
      const answer = await httpOnce(port, 'POST', INFER_PATH, REQUEST_BODY)
      if (answer.status === 200 && answer.body.includes('"outputs"') && (!proxy || answer.headers[ENDPOINT_HEADER] !== undefined)) return
      last = `${answer.status} ${answer.body.slice(0, 200)}`
    } catch (err) {
      last = err instanceof Error ? err.message : String(err)
    }
    await sleep(100)
  }
  throw new Error(`${what} did not answer an infer request with 200${proxy ? ` and ${ENDPOINT_HEADER}` : ''} within ${timeoutMs} ms: ${last}`)
}

/** The requests queued or executing on a worker, from the header its every answer carries. */
async function pendingOn (worker: Worker): Promise<number> {
  const answer = await httpOnce(worker.port, 'GET', '/v2/health/ready')
  const raw = answer.headers[QUEUE_DEPTH_HEADER]
  const n = Number(Array.isArray(raw) ? raw[0] : raw)
  if (!Number.isInteger(n)) throw new Error(`${worker.name} answered /v2/health/ready without ${QUEUE_DEPTH_HEADER}`)
  return n
}

// ---------------------------------------------------------------------------------------------------------------
// Configs.

/** The `simulated` model's config with `fixed_ms` multiplied by `factor` (the slow worker's copy). */
function slowedConfig (config: string, factor: number): string {
  const pattern = /(key:\s*"fixed_ms"\s*value:\s*\{\s*string_value:\s*")([0-9.]+)(")/
  const match = pattern.exec(config)
  if (match === null) throw new Error(`config/models/${MODEL}/config.pbtxt has no fixed_ms parameter to slow down`)
  return config.replace(pattern, `$1${round(Number(match[2]) * factor, 3)}$3`)
}

function fleetFile (strategy: string, workers: readonly Worker[], weights: readonly number[]): string {
  // No health_check section: the defaults (checks on, every 2 s) apply, as in a real deployment.
  return `inference_servers:
${workers.map((w, i) => `  - name: ${w.name}
    host: ${HOST}
    port: ${w.port}
    models: [${MODEL}]
    weight: ${weights[i]}`).join('\n')}
load_balancer:
  type: ${strategy}
gateway:
  host: ${HOST}
`
}

function haproxyConfig (port: number, balance: 'roundrobin' | 'leastconn', workers: readonly Worker[], weights: readonly number[]): string {
  // Health checks as the gateway's defaults (GET /v2/health/ready every 2 s); the answering server is named in the
  // same header the gateway sets, so per-worker shares are read the same way for both.
  return `global
  maxconn 4096
defaults
  mode http
  option http-keep-alive
  http-reuse always
  timeout connect 3s
  timeout client 30s
  timeout server 30s
  timeout http-keep-alive 60s
frontend fe
  bind ${HOST}:${port}
  default_backend be
backend be
  balance ${balance}
  option httpchk
  http-check send meth GET uri /v2/health/ready
  http-response set-header ${ENDPOINT_HEADER} %s
${workers.map((w, i) => `  server ${w.name} ${HOST}:${w.port} weight ${weights[i]} check inter 2s`).join('\n')}
`
}

// ---------------------------------------------------------------------------------------------------------------
// Load.

/** The median of values that may be `null` (a percentile among failures), ranking `null` above every number. */
function medianOrNull (values: ReadonlyArray<number | null>): number | null {
  const m = median(values.map((v) => v ?? Number.POSITIVE_INFINITY))
  return Number.isFinite(m) ? round(m, 3) : null
}

function ms (v: number | null): string {
  return v === null ? 'fail' : v.toFixed(1)
}

// ---------------------------------------------------------------------------------------------------------------

async function main (): Promise<void> {
  const benchStarted = performance.now()
  const params = readParams()
  // Set before anything is spawned: children inherit it, so workers, proxies and the generator all run at it.
  if (params.nice !== 0) {
    try {
      setPriority(params.nice)
    } catch (err) {
      throw new Error(`BENCH_NICE=${params.nice}: ${err instanceof Error ? err.message : String(err)} (a negative level needs root)`)
    }
    renice = reniceAutogroup(params.nice)
  }
  const machine = {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    node: process.version,
    haproxy: versionOf('haproxy', ['-v'], /version (\S+)/)
  }
  const here = dirname(fileURLToPath(import.meta.url))
  const cli = resolve(here, '..', 'bin', 'flotilla.js')
  const generator = join(here, 'open-loop.js')
  if (!existsSync(cli) || !existsSync(generator)) {
    throw new Error(`${cli} or ${generator} not found: run 'npx tsc -p .' and start the bench as 'node dist/bench/routing-quality.js'`)
  }
  const modelDir = resolve(here, '..', '..', 'config', 'models', MODEL)
  if (!existsSync(join(modelDir, 'config.pbtxt'))) throw new Error(`${modelDir}/config.pbtxt not found`)

  const dir = mkdtempSync(join(tmpdir(), 'flotilla-routing-'))
  cleanupDir = () => { if (!params.keepTmp) rmSync(dir, { recursive: true, force: true }) }

  try {
    // Two repositories: the model as committed, and a copy whose fixed_ms is slowFactor times larger.
    const fastRepo = join(dir, 'models-fast')
    const slowRepo = join(dir, 'models-slow')
    cpSync(modelDir, join(fastRepo, MODEL), { recursive: true })
    cpSync(modelDir, join(slowRepo, MODEL), { recursive: true })
    const slowConfig = join(slowRepo, MODEL, 'config.pbtxt')
    writeFileSync(slowConfig, slowedConfig(readFileSync(slowConfig, 'utf8'), params.slowFactor))

    const workers: Worker[] = WORKER_NAMES.map((name) => ({
      name, repository: name === SLOW ? slowRepo : fastRepo, port: 0, child: undefined
    }))
    let workerStarts = 0

    async function startWorkers (): Promise<void> {
      workerStarts++
      await Promise.all(workers.map(async (w) => {
        w.port = await freePort()
        const log = openSync(join(dir, `${w.name}-${workerStarts}.log`), 'w')
        const child = track(spawn(process.execPath, [cli, 'worker', '--model-repository', w.repository, '--host', HOST,
          '--http-port', String(w.port), '--grpc-port', '-1', '--metrics-port', '-1', '--log-level', 'warn'], { stdio: ['ignore', log, log], cwd: dir }))
        w.child = child
        closeSync(log)
        await waitForPort(w.port, child, `worker ${w.name}`)
        await waitForInfer(w.port, `worker ${w.name}`, false)
      }))
    }

    /** Waits for every worker's queue to empty (what the last target left behind); restarts them past the limit. */
    async function drainWorkers (): Promise<void> {
      const deadline = Date.now() + params.drainLimitS * 1000
      while (Date.now() < deadline) {
        const pending = await Promise.all(workers.map(pendingOn))
        if (pending.every((n) => n === 0)) return
        await sleep(200)
      }
      process.stderr.write(`workers still busy after ${params.drainLimitS} s: restarting them\n`)
      // Killed outright: a worker's graceful stop would first work through the very queue this is skipping.
      await Promise.all(workers.map(async (w) => { if (w.child !== undefined) await stop(w.child, 0) }))
      await startWorkers()
    }

    await startWorkers()
    const workerTicks = (): number => workers.reduce((n, w) => n + cpuTicks(w.child?.pid), 0)

    interface Started { port: number, child: ChildProcess }
    async function startTarget (target: string, roundNo: number): Promise<Started> {
      const port = await freePort()
      const tag = `${target}-${roundNo}`
      let child: ChildProcess
      if (target.startsWith('haproxy-')) {
        const balance = target === 'haproxy-leastconn' ? 'leastconn' : 'roundrobin'
        writeFileSync(join(dir, `${tag}.cfg`), haproxyConfig(port, balance, workers, params.weights))
        // -db: foreground, so the spawned process is HAProxy itself and stopping it stops everything.
        child = track(spawn('haproxy', ['-db', '-f', join(dir, `${tag}.cfg`)], { stdio: ['ignore', 'ignore', 'inherit'] }))
      } else {
        const fleet = join(dir, `${tag}.yaml`)
        writeFileSync(fleet, fleetFile(target, workers, params.weights))
        const log = openSync(join(dir, `${tag}.log`), 'w')
        child = track(spawn(process.execPath, [cli, 'gateway', '--config', fleet, '--http-port', String(port),
          '--grpc-port', '-1', '--metrics-port', '-1', '--admin-port', '-1', '--log-level', 'warn'], { stdio: ['ignore', log, log], cwd: dir }))
        closeSync(log)
      }
      await waitForPort(port, child, target)
      await waitForInfer(port, target, true)
      return { port, child }
    }

    const runs = new Map<string, Array<{ load: OpenLoopResult, proxyCpuPct: number, otherCpuPct: number, stealPct: number }>>(
      params.targets.map((t) => [t, []]))
    for (let r = 0; r < params.rounds; r++) {
      for (const target of params.targets) {
        await drainWorkers()
        const started = await startTarget(target, r + 1)
        const proxyPid = started.child.pid
        // Ours: the proxy, the workers, this process and the generator (in this process's reaped children's time
        // once it has exited). Everything else busy meanwhile is "other".
        const ours = (): number => cpuTicks(proxyPid) + workerTicks() + selfTicks()
        const proxyBefore = cpuTicks(proxyPid)
        const oursBefore = ours()
        const machineBefore = machineTicks()
        const t0 = performance.now()
        const load = await runOpenLoop(generator, {
          host: HOST,
          port: started.port,
          path: INFER_PATH,
          body: REQUEST_BODY,
          shape: params.shape,
          warmupS: params.warmupS,
          durationS: params.durationS,
          timeoutMs: params.timeoutMs,
          connections: params.connections,
          endpointHeader: ENDPOINT_HEADER
        })
        const seconds = (performance.now() - t0) / 1000
        const machineAfter = machineTicks()
        const pct = (ticks: number): number => ticks / CLOCK_TICKS / seconds * 100
        const proxyCpuPct = pct(cpuTicks(proxyPid) - proxyBefore)
        const otherCpuPct = Math.max(0, pct(machineAfter.busy - machineBefore.busy) - pct(ours() - oursBefore))
        const stealPct = pct(machineAfter.steal - machineBefore.steal)
        await stop(started.child)
        runs.get(target)!.push({ load, proxyCpuPct, otherCpuPct, stealPct })
        const errors = load.errors.status + load.errors.timeout + load.errors.transport
        process.stderr.write(`round ${r + 1}/${params.rounds} ${target}: ${load.throughputRps.toFixed(0)} rps, ` +
          `p99 ${ms(load.p99Ms)} ms, errors ${errors}, slow share ${round((load.endpoints[SLOW]?.requests ?? 0) / Math.max(1, load.ok) * 100, 1)}%, ` +
          `proxy cpu ${proxyCpuPct.toFixed(0)}%, other ${otherCpuPct.toFixed(0)}%, steal ${stealPct.toFixed(0)}%, ` +
          `send lag p99 ${load.sendLagP99Ms} ms\n`)
        if (load.firstTransportError !== undefined) process.stderr.write(`  first transport error: ${load.firstTransportError}\n`)
      }
    }

    const results: Record<string, TargetFigures> = {}
    for (const target of params.targets) {
      const list = runs.get(target)!
      const loads = list.map((x) => x.load)
      const sharePct: Record<string, number> = {}
      const meanMsByWorker: Record<string, number> = {}
      for (const name of WORKER_NAMES) {
        sharePct[name] = round(median(loads.map((l) => (l.endpoints[name]?.requests ?? 0) / Math.max(1, l.ok) * 100)), 1)
        meanMsByWorker[name] = round(median(loads.map((l) => l.endpoints[name]?.meanMs ?? 0)), 2)
      }
      const sum = (f: (l: OpenLoopResult) => number): number => loads.reduce((n, l) => n + f(l), 0)
      results[target] = {
        offeredRps: round(median(loads.map((l) => l.offeredRps)), 1),
        throughputRps: round(median(loads.map((l) => l.throughputRps)), 1),
        p50Ms: medianOrNull(loads.map((l) => l.p50Ms)),
        p90Ms: medianOrNull(loads.map((l) => l.p90Ms)),
        p99Ms: medianOrNull(loads.map((l) => l.p99Ms)),
        p999Ms: medianOrNull(loads.map((l) => l.p999Ms)),
        errors: sum((l) => l.errors.status + l.errors.timeout + l.errors.transport),
        errorKinds: { status: sum((l) => l.errors.status), timeout: sum((l) => l.errors.timeout), transport: sum((l) => l.errors.transport) },
        sharePct,
        meanMsByWorker,
        proxyCpuPct: round(median(list.map((x) => x.proxyCpuPct)), 0),
        otherCpuPct: round(median(list.map((x) => x.otherCpuPct)), 0),
        stealPct: round(median(list.map((x) => x.stealPct)), 0),
        sendLagP99Ms: round(median(loads.map((l) => l.sendLagP99Ms)), 2),
        maxOutstanding: Math.max(...loads.map((l) => l.maxOutstanding))
      }
    }

    const anchorP99 = results[ANCHOR]?.p99Ms ?? null
    const vsAnchor = (f: TargetFigures): number | null => f.p99Ms === null || anchorP99 === null ? null : round(f.p99Ms / anchorP99, 3)
    const header = ['target', 'offered', 'rps', 'p50 ms', 'p90 ms', 'p99 ms', 'p99.9 ms', 'errors',
      ...WORKER_NAMES.map((n) => `${n} %`), 'slow ms', `p99/${ANCHOR}`, 'proxy cpu %', 'other %', 'steal %']
    const table = [header, ...params.targets.map((t) => {
      const f = results[t]!
      const ratio = vsAnchor(f)
      return [t, f.offeredRps.toFixed(0), f.throughputRps.toFixed(0), ms(f.p50Ms), ms(f.p90Ms), ms(f.p99Ms), ms(f.p999Ms),
        String(f.errors), ...WORKER_NAMES.map((n) => f.sharePct[n]!.toFixed(1)),
        f.sharePct[SLOW]! > 0 ? f.meanMsByWorker[SLOW]!.toFixed(1) : '-',
        ratio === null ? '-' : ratio.toFixed(3), String(f.proxyCpuPct), String(f.otherCpuPct), String(f.stealPct)]
    })]
    const rates = phaseRates(params.shape)
    console.log(`\nrouting-quality: POST ${INFER_PATH} [1,16], workers ${WORKER_NAMES.join(', ')} (fixed_ms x${params.slowFactor} on ${SLOW}), ` +
      `weights ${params.weights.join('/')}; open loop at ${params.shape.rate} rps mean (${rates.burst.toFixed(0)} rps for ` +
      `${round(params.shape.periodMs * params.shape.burstDuty, 1)} ms of every ${params.shape.periodMs} ms, ${rates.base.toFixed(0)} rps between), ` +
      `seed ${params.shape.seed}, ${params.durationS} s measured after ${params.warmupS} s, timeout ${params.timeoutMs} ms, ` +
      `${params.rounds} round(s); ${machine.cpus} x ${machine.cpuModel}, node ${machine.node}`)
    printTable(table)

    // The best strategy: the gateway target with the lowest p99 (one that failed too often to have one ranks last).
    const strategies = params.targets.filter((t) => !t.startsWith('haproxy-'))
    const best = strategies.reduce<string | undefined>((a, t) => {
      if (a === undefined) return t
      return (results[t]!.p99Ms ?? Number.POSITIVE_INFINITY) < (results[a]!.p99Ms ?? Number.POSITIVE_INFINITY) ? t : a
    }, undefined)
    const ratios: Record<string, number | string | null> = {}
    if (best !== undefined && results[ANCHOR] !== undefined) {
      const ratio = vsAnchor(results[best]!)
      ratios.bestStrategy = best
      ratios.bestP99VsHaproxyLeastconn = ratio
      for (const t of strategies) ratios[`${t}P99VsHaproxyLeastconn`] = vsAnchor(results[t]!)
      console.log(`\nbest strategy ${best}: p99 ${ms(results[best]!.p99Ms)} ms / ${ANCHOR} ${ms(anchorP99)} ms = ` +
        `${ratio === null ? 'n/a' : `${ratio}x`} (target <= ${P99_TARGET}): ${ratio !== null && ratio <= P99_TARGET ? 'met' : 'NOT met'}`)
    }
    if (workerStarts > 1) console.log(`the workers were restarted ${workerStarts - 1} time(s) between targets: their queues had not drained within ${params.drainLimitS} s`)
    const elapsedS = Math.round((performance.now() - benchStarted) / 1000)
    console.log(`took ${elapsedS} s`)
    if (params.keepTmp) console.log(`repositories, configs and logs kept in ${dir}`)
    console.log(JSON.stringify({
      bench: 'routing-quality',
      machine,
      params: { ...params, phaseRates: rates, path: INFER_PATH, workers: WORKER_NAMES },
      workerStarts,
      elapsedS,
      results,
      ratios
    }))
  } finally {
    await stopAll()
    cleanupDir()
    renice()
  }
}

// Ctrl-C or a kill: stop what was started, remove the scratch folder, then leave with the conventional status.
stopAllOnSignals(() => { cleanupDir(); renice() })

main().catch(async (err: unknown) => {
  console.error(err instanceof Error ? err.message : err)
  await stopAll()
  cleanupDir()
  renice()
  process.exitCode = 1
})
