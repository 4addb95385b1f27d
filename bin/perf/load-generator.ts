/**
 * The load of one benchmark step, closed or open loop, and a log of every request it sent. The log holds raw
 * timestamps only; which requests count, and what they add up to, is `report.ts`'s business, so the arithmetic
 * is pure and tested on hand-made logs.
 *
 * A step is a warm-up followed by a measurement window:
 *
 *     start            windowStart                     windowEnd
 *       │── warm-up ──────│────── measurement window ───────│── drain ──▶ (in-flight requests finish)
 *
 * Load runs without a break from start to windowEnd, so the window sees a server already in its steady state;
 * after windowEnd nothing new is sent and the step ends when the last request in flight settles.
 *
 * - Closed loop (perf_analyzer's concurrency mode): N workers each send a request, wait for its answer, send the
 *   next. The server sees exactly N requests outstanding, and its throughput sets the pace.
 * - Open loop (request-rate mode): requests are due on a schedule (constant gaps or seeded Poisson arrivals)
 *   fixed in advance and sent whether or not earlier ones were answered, as independent clients would send them.
 *   At most `maxOutstanding` may be in flight: an arrival due while the cap is reached is dropped and counted,
 *   never queued, so no wait inside the client is ever hidden in (or added to) a latency. Latency runs from the
 *   actual send; an arrival sent more than {@link LATE_MS} after it was due is counted as late, which says the
 *   generator (not the server) fell behind.
 *
 * Requests are taken round-robin from the prepared pool, from the first, in every step.
 */
import { seededRandom } from '../../common/seeded-random.ts'
import { type Outcome, type PreparedRequest, type Transport } from './transport.ts'

/** An arrival sent later than this after its due time counts as late. */
export const LATE_MS = 2

/** How a step applies load. */
export type LoadMode = 'concurrency' | 'request-rate'

/** Open loop's inter-arrival gaps: all equal, or exponential (a Poisson process). */
export type RequestDistribution = 'constant' | 'poisson'

/** One step's load. */
export interface LoadStep {
  mode: LoadMode
  /** Requests kept outstanding (concurrency), or requests per second (request-rate). */
  value: number
  warmupMs: number
  windowMs: number
}

/** Open-loop settings, the same for every step of a run. */
export interface OpenLoopSettings {
  distribution: RequestDistribution
  /** Seeds the Poisson arrivals; each step adds its index, so steps differ and runs repeat. */
  seed: number
  maxOutstanding: number
}

/** Called at the window's edges: the command reads the server's statistics there, and moves its progress line on. */
export interface StepHooks {
  windowStart?: () => void
  windowEnd?: () => void
}

/** A distinct error, as the log keeps it. */
export interface ErrorKind {
  status: number | string
  message: string
}

/**
 * Every request a step sent: start and end times (the clock's milliseconds) and how it ended. Grows in typed
 * arrays, so recording a request allocates nothing but the occasional doubling.
 */
export class SampleLog {
  /** Requests recorded. */
  length = 0
  /** Of those, successful and failed (any time: warm-up and drain included). */
  ok = 0
  failed = 0
  /** The distinct errors, in the order first seen; `codes` index into this. */
  readonly errorKinds: ErrorKind[] = []
  #starts = new Float64Array(1024)
  #ends = new Float64Array(1024)
  /** -1: success; otherwise the index of the error in {@link errorKinds}. */
  #codes = new Int32Array(1024)
  readonly #kindIndex = new Map<string, number>()

  /** Records one request. */
  record (start: number, end: number, outcome: Outcome): void {
    if (this.length === this.#starts.length) this.#grow()
    const i = this.length++
    this.#starts[i] = start
    this.#ends[i] = end
    if (outcome.ok) {
      this.ok++
      this.#codes[i] = -1
      return
    }
    this.failed++
    const key = `${outcome.status}\u0000${outcome.message}`
    let kind = this.#kindIndex.get(key)
    if (kind === undefined) {
      kind = this.errorKinds.length
      this.errorKinds.push({ status: outcome.status, message: outcome.message })
      this.#kindIndex.set(key, kind)
    }
    this.#codes[i] = kind
  }

  /** When request `i` was sent. */
  start (i: number): number { return this.#starts[i]! }
  /** When request `i` settled. */
  end (i: number): number { return this.#ends[i]! }
  /** -1 when request `i` succeeded, else its index in {@link errorKinds}. */
  code (i: number): number { return this.#codes[i]! }

  #grow (): void {
    const size = this.#starts.length * 2
    const starts = new Float64Array(size)
    starts.set(this.#starts)
    const ends = new Float64Array(size)
    ends.set(this.#ends)
    const codes = new Int32Array(size)
    codes.set(this.#codes)
    this.#starts = starts
    this.#ends = ends
    this.#codes = codes
  }
}

/** Open loop's own counts, over arrivals due inside the window. */
export interface ArrivalCounts {
  /** Arrivals due in the window: the offered load. */
  offered: number
  /** Of those, not sent because `maxOutstanding` requests were in flight. */
  dropped: number
  /** Of those sent, sent more than {@link LATE_MS} after they were due. */
  late: number
  /** The most requests in flight at once during the step. */
  maxOutstanding: number
}

/** What one step measured. */
export interface StepSamples {
  step: LoadStep
  log: SampleLog
  /** The window, in the clock's milliseconds: requests that completed in [windowStart, windowEnd) count. */
  windowStart: number
  windowEnd: number
  /** Open loop only. */
  arrivals?: ArrivalCounts
}

/** What a step runs against. */
export interface StepContext {
  transport: Transport
  /** Sent round-robin; at least one. */
  requests: readonly PreparedRequest[]
  /** A monotonic clock in milliseconds that advances with real time (performance.now). */
  now: () => number
  /** Open loop settings; required for request-rate steps. */
  openLoop?: OpenLoopSettings
  /** The step's index in the run, which seeds its arrivals. */
  index: number
  hooks?: StepHooks
  /** The log to fill (pass one to watch it fill, for progress); a new one by default. */
  log?: SampleLog
}

/**
 * Runs one step and resolves when its last request has settled.
 *
 * @throws Error when the step or its settings are out of range (the command validates them first)
 */
export async function runStep (step: LoadStep, context: StepContext): Promise<StepSamples> {
  if (context.requests.length === 0) throw new Error('runStep needs at least one prepared request')
  if (!(step.value > 0) || !Number.isFinite(step.value)) throw new Error(`the step's ${step.mode} must be > 0, got ${step.value}`)
  if (step.mode === 'request-rate' && context.openLoop === undefined) throw new Error('a request-rate step needs open-loop settings')
  const log = context.log ?? new SampleLog()
  const start = context.now()
  const windowStart = start + step.warmupMs
  const windowEnd = windowStart + step.windowMs
  // The hooks fire on timers; the window itself is defined by the timestamps above, not by when these run. The
  // step waits for both, so a step whose last request settles before windowEnd still reads the statistics there.
  const edge = (delay: number, hook: (() => void) | undefined): Promise<void> =>
    new Promise((resolve) => setTimeout(() => { hook?.(); resolve() }, delay))
  const edges = Promise.all([edge(step.warmupMs, context.hooks?.windowStart), edge(step.warmupMs + step.windowMs, context.hooks?.windowEnd)])
  if (step.mode === 'concurrency') {
    await closedLoop(step.value, context, log, windowEnd)
    await edges
    return { step, log, windowStart, windowEnd }
  }
  const arrivals = await openLoop(step.value, context.openLoop!, context, log, start, windowStart, windowEnd)
  await edges
  return { step, log, windowStart, windowEnd, arrivals }
}

async function closedLoop (concurrency: number, context: StepContext, log: SampleLog, windowEnd: number): Promise<void> {
  const { transport, requests, now } = context
  let next = 0
  const worker = async (): Promise<void> => {
    for (;;) {
      const start = now()
      if (start >= windowEnd) return
      const prepared = requests[next]!
      next = next + 1 === requests.length ? 0 : next + 1
      const outcome = await transport.send(prepared)
      log.record(start, now(), outcome)
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
}

function openLoop (
  rate: number, settings: OpenLoopSettings, context: StepContext, log: SampleLog,
  start: number, windowStart: number, windowEnd: number
): Promise<ArrivalCounts> {
  const { transport, requests, now } = context
  const periodMs = 1000 / rate
  const random = seededRandom(settings.seed + context.index)
  const counts: ArrivalCounts = { offered: 0, dropped: 0, late: 0, maxOutstanding: 0 }
  // Constant arrivals are computed from their index (k × period), so no rounding drift builds up over a window;
  // Poisson arrivals add exponential gaps (1 - random() is in (0, 1], so the log is finite).
  let k = 0
  let due = settings.distribution === 'constant' ? start : start - Math.log(1 - random()) * periodMs
  const advance = (): void => {
    k++
    due = settings.distribution === 'constant' ? start + k * periodMs : due - Math.log(1 - random()) * periodMs
  }
  let outstanding = 0
  let next = 0
  let scheduling = true

  return new Promise((resolve) => {
    const settled = (): void => {
      outstanding--
      if (!scheduling && outstanding === 0) resolve(counts)
    }
    const send = (dueAt: number, inWindow: boolean): void => {
      const prepared = requests[next]!
      next = next + 1 === requests.length ? 0 : next + 1
      outstanding++
      if (outstanding > counts.maxOutstanding) counts.maxOutstanding = outstanding
      const sentAt = now()
      if (inWindow && sentAt - dueAt > LATE_MS) counts.late++
      transport.send(prepared).then((outcome) => {
        log.record(sentAt, now(), outcome)
        settled()
      }, (err: unknown) => {
        // Transports resolve every failure; this is a bug in one, recorded rather than lost.
        log.record(sentAt, now(), { ok: false, status: 'internal', message: String(err) })
        settled()
      })
    }
    // One timer for the next due arrival; everything already due goes out in the same turn.
    const tick = (): void => {
      const t = now()
      while (due <= t && due < windowEnd) {
        const inWindow = due >= windowStart
        if (inWindow) counts.offered++
        if (outstanding >= settings.maxOutstanding) {
          if (inWindow) counts.dropped++
        } else {
          send(due, inWindow)
        }
        advance()
      }
      if (due < windowEnd) {
        setTimeout(tick, Math.max(0, due - now()))
        return
      }
      scheduling = false
      if (outstanding === 0) resolve(counts)
    }
    tick()
  })
}
