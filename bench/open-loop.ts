/**
 * bench/open-loop: an open-loop HTTP load generator, run as its own process by `routing-quality` and `cache` so that
 * it does not share an event loop with anything it measures.
 *
 *   node dist/bench/open-loop.js '<OpenLoopConfig as JSON>'
 *
 * Open loop, unlike wrk: each request is sent at its time in a precomputed, seeded schedule (`arrivals.ts`),
 * whether or not earlier ones have been answered, as independent clients would send them. A target that falls
 * behind therefore meets more outstanding requests, not fewer arrivals. Latency is measured from the request's
 * *scheduled* time, not from when it actually went out, so a late send (this process busy, a connection not yet
 * free) counts against the latency instead of hiding it: no coordinated omission (Gil Tene's term; wrk2 does the
 * same). The send lag is reported on its own so that a generator that cannot keep up is visible.
 *
 * The first `warmupS` seconds of the schedule are sent but not measured. Each request has a deadline of
 * `timeoutMs` after its scheduled time; past it, it is cancelled and counts as a timeout. Every request that is not
 * a 200 with a whole body is an error: a non-200 status, a timeout, or a transport error. A failed request ranks
 * above every answered one in the latency percentiles (a target cannot improve its p99 by failing fast); when a
 * percentile falls among the failures it is reported as `null`.
 *
 * Every request sends the same body, unless `zipf` is set: then each request's body is `body` with its
 * placeholder replaced by a rank drawn from a Zipf(s) distribution over 1..n (1 the most frequent), seeded apart
 * from the arrival times, so that a cache in front of the target sees a realistic mix of repeated and new inputs,
 * the same on every run. `countHeader` counts the answers by a response header's value (`x-flotilla-cache`).
 *
 * Prints one line, `OPEN_LOOP_JSON {...}` ({@link OpenLoopResult}), and exits.
 */
import { performance } from 'node:perf_hooks'
import { Pool } from 'undici'
import { seededRandom } from '../common/seeded-random.ts'
import { arrivalSchedule, type ArrivalShape } from './arrivals.ts'

/** Bodies drawn from a Zipf distribution: P(rank k) ∝ 1 / k^s, for k in 1..n. */
export interface ZipfInputs {
  /** Distinct inputs. */
  readonly n: number
  /** The exponent; larger is more skewed (1.1: a typical popularity curve). */
  readonly s: number
  /** Seeds the draws (independent of the arrival schedule's seed). */
  readonly seed: number
  /** Every occurrence of it in `body` is replaced by the drawn rank. */
  readonly placeholder: string
}

/** What the parent passes as the one argument, as JSON. */
export interface OpenLoopConfig {
  readonly host: string
  readonly port: number
  readonly path: string
  /** The POST body, sent with `content-type: application/json`; a template when `zipf` is set. */
  readonly body: string
  /** Draw each request's input from a Zipf distribution instead of sending `body` as it is. */
  readonly zipf?: ZipfInputs
  readonly shape: ArrivalShape
  /**
   * Ramps the load up over the first `rampS` seconds: an arrival at t < rampS is kept with probability t / rampS
   * (seeded), so the rate rises linearly from 0 to the shape's (a thinned Poisson process is still one). For a
   * target that starts cold, such as an empty cache; keep it within `warmupS` so the measured load is the shape's.
   */
  readonly rampS?: number
  readonly warmupS: number
  readonly durationS: number
  /** Deadline per request, from its scheduled time. */
  readonly timeoutMs: number
  /** Connections to keep to the target; requests beyond them wait in the pool (and that wait counts). */
  readonly connections: number
  /** The response header that names the server that answered, counted per value. */
  readonly endpointHeader: string
  /** A response header whose values are counted over measured 200 answers (`headerCounts`). */
  readonly countHeader?: string
}

/** Per value of the endpoint header: the answered measured requests, and their latency. */
export interface EndpointFigures {
  requests: number
  meanMs: number
  p99Ms: number
}

/** What the generator reports for the measured part of the schedule. */
export interface OpenLoopResult {
  /** Every request of the schedule, warm-up included. */
  scheduled: number
  /** Requests scheduled in the measured window, and their rate. */
  offered: number
  offeredRps: number
  /** Answered with 200 (measured requests). */
  ok: number
  /** 200 answers that completed inside the measured window, per second: what the target actually delivered. */
  throughputRps: number
  errors: { status: number, timeout: number, transport: number }
  /** Non-200 statuses seen, by code (measured requests). */
  statuses: Record<string, number>
  /** The first transport error's message, for the report; `undefined` when there were none. */
  firstTransportError?: string
  /** Latency from the scheduled time, over every measured request (failures rank last; `null`: among them). */
  p50Ms: number | null
  p90Ms: number | null
  p99Ms: number | null
  p999Ms: number | null
  maxMs: number | null
  /** The answering server, per the endpoint header (`(none)` when absent), over measured 200 answers. */
  endpoints: Record<string, EndpointFigures>
  /** How late requests went out against their schedule: this generator's own health, not the target's. */
  sendLagP99Ms: number
  sendLagMaxMs: number
  /** The most requests outstanding at once. */
  maxOutstanding: number
  /** Errors during the warm-up (not in the figures above). */
  warmupErrors: number
  /** With `countHeader`: measured 200 answers per value of that header (`(none)` when absent). */
  headerCounts?: Record<string, number>
  /** With `zipf`: distinct inputs in the whole schedule (warm-up included), and in its measured part. */
  distinctInputs?: number
  distinctMeasuredInputs?: number
}

/** `schedule` thinned over its first `rampS` seconds so that the rate rises linearly from 0 (see `rampS`). */
function rampUp (schedule: Float64Array, rampS: number, seed: number): Float64Array {
  if (!(rampS > 0)) return schedule
  // Its own stream: the arrivals' seed would reuse the numbers that placed the arrivals.
  const random = seededRandom((seed ^ 0x2545f491) >>> 0)
  const rampMs = rampS * 1000
  return schedule.filter((t) => t >= rampMs || random() < t / rampMs)
}

/**
 * `count` ranks in 1..n drawn from Zipf(s) with a seeded source: inverse transform over the cumulative weights
 * (a binary search per draw; n is at most some millions).
 *
 * @throws Error when n is not a positive integer or s is not a finite number >= 0
 */
function zipfRanks (zipf: Pick<ZipfInputs, 'n' | 's' | 'seed'>, count: number): Uint32Array {
  if (!Number.isInteger(zipf.n) || zipf.n < 1) throw new Error(`zipf.n must be an integer >= 1, got ${zipf.n}`)
  if (!Number.isFinite(zipf.s) || zipf.s < 0) throw new Error(`zipf.s must be a number >= 0, got ${zipf.s}`)
  const cumulative = new Float64Array(zipf.n)
  let total = 0
  for (let k = 1; k <= zipf.n; k++) {
    total += 1 / k ** zipf.s
    cumulative[k - 1] = total
  }
  const random = seededRandom(zipf.seed)
  const ranks = new Uint32Array(count)
  for (let i = 0; i < count; i++) {
    const u = random() * total
    // The first rank whose cumulative weight exceeds u.
    let lo = 0
    let hi = zipf.n - 1
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (cumulative[mid]! > u) hi = mid
      else lo = mid + 1
    }
    ranks[i] = lo + 1
  }
  return ranks
}

/** The `q` quantile of `sorted` (ascending) when it holds the first `sorted.length` of `total` ranked values. */
function quantile (sorted: Float64Array, total: number, q: number): number | null {
  if (total === 0) return null
  const k = Math.max(0, Math.ceil(q * total) - 1)
  return k < sorted.length ? sorted[k]! : null
}

function round3 (n: number): number {
  return Math.round(n * 1000) / 1000
}

async function run (config: OpenLoopConfig): Promise<OpenLoopResult> {
  const schedule = rampUp(arrivalSchedule(config.shape, config.warmupS + config.durationS), config.rampS ?? 0, config.shape.seed)
  const n = schedule.length
  const warmupMs = config.warmupS * 1000
  const windowEndMs = warmupMs + config.durationS * 1000
  // Per request; NaN latency marks a failure. Typed arrays, so the bookkeeping allocates nothing per request.
  const latency = new Float64Array(n).fill(Number.NaN)
  const completedAt = new Float64Array(n).fill(Number.NaN)
  const sendLag = new Float64Array(n)
  const endpointOf: Array<string | undefined> = new Array<string | undefined>(n)
  const countedOf: Array<string | undefined> = new Array<string | undefined>(n)
  // Each request's body: the one body, or the template filled with its drawn rank (built once per rank).
  const zipf = config.zipf
  const ranks = zipf === undefined ? undefined : zipfRanks(zipf, n)
  const bodies = new Map<number, string>()
  const bodyOf = (i: number): string => {
    if (ranks === undefined || zipf === undefined) return config.body
    const rank = ranks[i]!
    let body = bodies.get(rank)
    if (body === undefined) bodies.set(rank, body = config.body.split(zipf.placeholder).join(String(rank)))
    return body
  }
  const statuses: Record<string, number> = {}
  let firstTransportError: string | undefined
  let timeouts = 0
  let transport = 0
  let badStatus = 0
  let warmupErrors = 0
  let outstanding = 0
  let maxOutstanding = 0

  const pool = new Pool(`http://${config.host}:${config.port}`, {
    connections: config.connections,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    keepAliveMaxTimeout: 60_000
  })
  const headers = { 'content-type': 'application/json' }
  const origin = performance.now() + 20
  let done: () => void = () => {}
  const allDone = new Promise<void>((resolve) => { done = resolve })
  let sent = 0
  let settled = 0

  function settle (): void {
    outstanding--
    settled++
    if (settled === n) done()
  }

  async function send (i: number): Promise<void> {
    const due = schedule[i]!
    const measured = due >= warmupMs
    const now = performance.now() - origin
    sendLag[i] = now - due
    outstanding++
    if (outstanding > maxOutstanding) maxOutstanding = outstanding
    // The deadline runs from the scheduled time, as the latency does.
    const signal = AbortSignal.timeout(Math.max(1, Math.ceil(due + config.timeoutMs - now)))
    try {
      const res = await pool.request({ path: config.path, method: 'POST', headers, body: bodyOf(i), signal })
      await res.body.arrayBuffer()
      const end = performance.now() - origin
      if (res.statusCode === 200) {
        latency[i] = end - due
        completedAt[i] = end
        const endpoint = res.headers[config.endpointHeader]
        endpointOf[i] = Array.isArray(endpoint) ? endpoint[0] : endpoint
        if (config.countHeader !== undefined) {
          const counted = res.headers[config.countHeader]
          countedOf[i] = Array.isArray(counted) ? counted[0] : counted
        }
      } else if (measured) {
        badStatus++
        statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1
      } else {
        warmupErrors++
      }
    } catch (err) {
      if (!measured) warmupErrors++
      else if (signal.aborted) timeouts++
      else {
        transport++
        firstTransportError ??= err instanceof Error ? `${(err as { code?: string }).code ?? err.name}: ${err.message}` : String(err)
      }
    } finally {
      settle()
    }
  }

  // One timer for the next due request; everything already due goes out in the same turn.
  function tick (): void {
    const now = performance.now() - origin
    while (sent < n && schedule[sent]! <= now) {
      void send(sent)
      sent++
    }
    if (sent < n) setTimeout(tick, Math.max(0, schedule[sent]! - (performance.now() - origin)))
  }
  if (n === 0) done()
  else setTimeout(tick, Math.max(0, schedule[0]! + origin - performance.now()))
  await allDone
  await pool.close()

  // Figures over the measured part of the schedule only.
  let first = 0
  while (first < n && schedule[first]! < warmupMs) first++
  const offered = n - first
  const okLatencies: number[] = []
  const lags: number[] = []
  const perEndpoint = new Map<string, number[]>()
  let inWindow = 0
  for (let i = first; i < n; i++) {
    lags.push(sendLag[i]!)
    const l = latency[i]!
    if (Number.isNaN(l)) continue
    okLatencies.push(l)
    const name = endpointOf[i] ?? '(none)'
    let list = perEndpoint.get(name)
    if (list === undefined) perEndpoint.set(name, list = [])
    list.push(l)
  }
  for (let i = 0; i < n; i++) {
    const at = completedAt[i]!
    if (at >= warmupMs && at < windowEndMs) inWindow++
  }
  const sorted = Float64Array.from(okLatencies).sort()
  const sortedLags = Float64Array.from(lags).sort()
  const q = (p: number): number | null => {
    const v = quantile(sorted, offered, p)
    return v === null ? null : round3(v)
  }
  const endpoints: Record<string, EndpointFigures> = {}
  for (const [name, list] of [...perEndpoint].sort(([a], [b]) => a.localeCompare(b))) {
    const s = Float64Array.from(list).sort()
    endpoints[name] = {
      requests: s.length,
      meanMs: round3(s.reduce((a, b) => a + b, 0) / s.length),
      p99Ms: round3(quantile(s, s.length, 0.99)!)
    }
  }
  const result: OpenLoopResult = {
    scheduled: n,
    offered,
    offeredRps: round3(offered / config.durationS),
    ok: okLatencies.length,
    throughputRps: round3(inWindow / config.durationS),
    errors: { status: badStatus, timeout: timeouts, transport },
    statuses,
    p50Ms: q(0.5),
    p90Ms: q(0.9),
    p99Ms: q(0.99),
    p999Ms: q(0.999),
    maxMs: okLatencies.length === offered && offered > 0 ? round3(sorted[sorted.length - 1]!) : null,
    endpoints,
    sendLagP99Ms: round3(quantile(sortedLags, sortedLags.length, 0.99) ?? 0),
    sendLagMaxMs: round3(sortedLags.length > 0 ? sortedLags[sortedLags.length - 1]! : 0),
    maxOutstanding,
    warmupErrors
  }
  if (firstTransportError !== undefined) result.firstTransportError = firstTransportError
  if (config.countHeader !== undefined) {
    const counts: Record<string, number> = {}
    for (let i = first; i < n; i++) {
      if (Number.isNaN(latency[i]!)) continue
      const value = countedOf[i] ?? '(none)'
      counts[value] = (counts[value] ?? 0) + 1
    }
    result.headerCounts = counts
  }
  if (ranks !== undefined) {
    result.distinctInputs = new Set(ranks).size
    result.distinctMeasuredInputs = new Set(ranks.subarray(first)).size
  }
  return result
}

const raw = process.argv[2]
if (raw === undefined) {
  console.error('usage: node dist/bench/open-loop.js \'<config JSON>\' (see bench/open-loop.ts; routing-quality and cache start it)')
  process.exitCode = 2
} else {
  run(JSON.parse(raw) as OpenLoopConfig).then((result) => {
    console.log(`OPEN_LOOP_JSON ${JSON.stringify(result)}`)
  }, (err: unknown) => {
    console.error(err instanceof Error ? err.stack : err)
    process.exitCode = 1
  })
}
