/**
 * bench/open-loop: an open-loop HTTP load generator, run as its own process by `routing-quality` so that it does
 * not share an event loop with anything it measures.
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
 * Prints one line, `OPEN_LOOP_JSON {...}` ({@link OpenLoopResult}), and exits.
 */
import { performance } from 'node:perf_hooks'
import { Pool } from 'undici'
import { arrivalSchedule, type ArrivalShape } from './arrivals.ts'

/** What the parent passes as the one argument, as JSON. */
export interface OpenLoopConfig {
  readonly host: string
  readonly port: number
  readonly path: string
  /** The POST body, sent with `content-type: application/json`. */
  readonly body: string
  readonly shape: ArrivalShape
  readonly warmupS: number
  readonly durationS: number
  /** Deadline per request, from its scheduled time. */
  readonly timeoutMs: number
  /** Connections to keep to the target; requests beyond them wait in the pool (and that wait counts). */
  readonly connections: number
  /** The response header that names the server that answered, counted per value. */
  readonly endpointHeader: string
}

/** Per value of the endpoint header: the answered measured requests, and their latency. */
export interface EndpointFigures {
  requests: number
  meanMs: number
  p99Ms: number
}

/** What the generator reports for the measured part of the schedule. */
export interface OpenLoopResult {
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
  const schedule = arrivalSchedule(config.shape, config.warmupS + config.durationS)
  const n = schedule.length
  const warmupMs = config.warmupS * 1000
  const windowEndMs = warmupMs + config.durationS * 1000
  // Per request; NaN latency marks a failure. Typed arrays, so the bookkeeping allocates nothing per request.
  const latency = new Float64Array(n).fill(Number.NaN)
  const completedAt = new Float64Array(n).fill(Number.NaN)
  const sendLag = new Float64Array(n)
  const endpointOf: Array<string | undefined> = new Array<string | undefined>(n)
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
      const res = await pool.request({ path: config.path, method: 'POST', headers, body: config.body, signal })
      await res.body.arrayBuffer()
      const end = performance.now() - origin
      if (res.statusCode === 200) {
        latency[i] = end - due
        completedAt[i] = end
        const endpoint = res.headers[config.endpointHeader]
        endpointOf[i] = Array.isArray(endpoint) ? endpoint[0] : endpoint
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
  return result
}

const raw = process.argv[2]
if (raw === undefined) {
  console.error('usage: node dist/bench/open-loop.js \'<config JSON>\' (see bench/open-loop.ts; routing-quality starts it)')
  process.exitCode = 2
} else {
  run(JSON.parse(raw) as OpenLoopConfig).then((result) => {
    console.log(`OPEN_LOOP_JSON ${JSON.stringify(result)}`)
  }, (err: unknown) => {
    console.error(err instanceof Error ? err.stack : err)
    process.exitCode = 1
  })
}
