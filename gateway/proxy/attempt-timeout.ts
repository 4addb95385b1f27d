/**
 * How long one attempt may take before the gateway gives up on that server and tries another (Envoy's
 * `per_try_timeout`): a hung worker (SIGSTOPped, deadlocked, swapping) accepts connections and requests and never
 * answers, and without a per-attempt limit every request it takes waits out the whole request deadline.
 *
 * A fixed value cannot suit every model: a per-try timeout of 1 s cuts a 3 s model short on every request, and one
 * of 30 s makes a 1 ms model's requests wait 30 s on a hung server. So by default it follows each model's own recent
 * latency, as gRPC's and Finagle's hedging policies follow a latency percentile: `p99_multiple` × the model's p99
 * over the last one to two `window_ms`, clamped to [`min_ms`, `max_ms`].
 *
 * - The floor (1 s by default) keeps ordinary tail latency (a GC pause, a batch waiting out its queue delay, a cold
 *   connection) from being mistaken for a hang on a fast model, while a hung server costs such a model about a
 *   second.
 * - The ceiling (30 s, half the default request deadline) leaves time for a second attempt when a slow model's
 *   server hangs; a model whose p99 reaches it is never cut short by this rule, only by the request deadline.
 * - Until a model has `min_samples` answers in the window, the ceiling applies: a model the gateway knows nothing
 *   about is never cut short.
 * - Only complete answers are samples: a timed-out attempt is not (it would raise the p99 that judges it), nor an
 *   error answer (a 400 for a malformed request is fast and says nothing about how long inference takes).
 *
 * A fixed `per_try_timeout_ms` (fleet-wide under `retries`, or per model) replaces the rule; 0 turns the per-try
 * limit off, leaving the request deadline alone.
 *
 * Latencies go into a log-scale histogram (8 buckets per doubling: the p99 is known within 9%), two of them
 * rotating per window so old samples age out; the timeout is recomputed at most every 64 samples or 100 ms, never
 * per request.
 */
import { DEFAULT_RETRY_SETTINGS, type RetryConfig } from '../fleet/fleet-config.ts'
import { type Timers } from '../health/types.ts'

/** The rule's parameters (the fleet file's `retries.per_try_timeout` keys). */
export interface AttemptTimeoutSettings {
  /** A fixed per-try timeout for every model in ms, 0 for none; `undefined`: follow each model's latency. */
  readonly fixedMs: number | undefined
  readonly p99Multiple: number
  readonly minMs: number
  readonly maxMs: number
  readonly windowMs: number
  readonly minSamples: number
}

/** The fleet file's `retries.per_try_timeout_ms` and `retries.per_try_timeout` as the forwarder takes them. */
export function attemptTimeoutSettingsOf (config: Pick<RetryConfig, 'per_try_timeout_ms' | 'per_try_timeout'>): AttemptTimeoutSettings {
  const rule = config.per_try_timeout
  return Object.freeze({
    fixedMs: config.per_try_timeout_ms,
    p99Multiple: rule.p99_multiple,
    minMs: rule.min_ms,
    maxMs: rule.max_ms,
    windowMs: rule.window_ms,
    minSamples: rule.min_samples
  })
}

/** The fleet file's defaults, defined once there. */
export const DEFAULT_ATTEMPT_TIMEOUT_SETTINGS: AttemptTimeoutSettings = attemptTimeoutSettingsOf(DEFAULT_RETRY_SETTINGS)

/** 8 buckets per power of two over [10 µs, ~6 days]: bucket i holds durations around 0.01 ms × 2^(i/8). */
const BUCKETS_PER_DOUBLING = 8
const BUCKET_COUNT = 8 * 36
const SMALLEST_MS = 0.01
const RECOMPUTE_EVERY = 64
const RECOMPUTE_MS = 100

function bucketOf (ms: number): number {
  if (!(ms > SMALLEST_MS)) return 0
  const i = Math.ceil(Math.log2(ms / SMALLEST_MS) * BUCKETS_PER_DOUBLING)
  return i < BUCKET_COUNT ? i : BUCKET_COUNT - 1
}

/** The upper bound of bucket `i`, in ms: a percentile read from the histogram errs on the long side. */
function bucketUpperMs (i: number): number {
  return SMALLEST_MS * 2 ** (i / BUCKETS_PER_DOUBLING)
}

/** One model's recent latencies and the per-try timeout they give. */
export class ModelLatency {
  readonly #settings: AttemptTimeoutSettings
  readonly #timers: Timers
  #current = new Uint32Array(BUCKET_COUNT)
  #previous = new Uint32Array(BUCKET_COUNT)
  #currentCount = 0
  #previousCount = 0
  #windowStart: number
  #sinceRecompute = 0
  #computedAt = Number.NEGATIVE_INFINITY
  #timeoutMs: number

  constructor (settings: AttemptTimeoutSettings, timers: Timers) {
    this.#settings = settings
    this.#timers = timers
    this.#windowStart = timers.now()
    this.#timeoutMs = settings.maxMs
  }

  /** Records the duration of an attempt that was answered in full. */
  record (ms: number): void {
    this.#rotate(this.#timers.now())
    this.#current[bucketOf(ms)]!++
    this.#currentCount++
    this.#sinceRecompute++
  }

  /** The model's p99 over the last one to two windows in ms, or `undefined` with fewer than `minSamples` answers. */
  p99 (): number | undefined {
    this.#rotate(this.#timers.now())
    const total = this.#currentCount + this.#previousCount
    if (total < this.#settings.minSamples) return undefined
    // The smallest bucket with at least 99% of the samples at or below it.
    const rank = Math.ceil(total * 0.99)
    let seen = 0
    for (let i = 0; i < BUCKET_COUNT; i++) {
      seen += this.#current[i]! + this.#previous[i]!
      if (seen >= rank) return bucketUpperMs(i)
    }
    return bucketUpperMs(BUCKET_COUNT - 1)
  }

  /** The per-try timeout in ms for the model's next attempt (see the module header). */
  timeoutMs (): number {
    const now = this.#timers.now()
    if (this.#sinceRecompute >= RECOMPUTE_EVERY || now - this.#computedAt >= RECOMPUTE_MS) {
      const { p99Multiple, minMs, maxMs } = this.#settings
      const p99 = this.p99()
      this.#timeoutMs = p99 === undefined ? maxMs : Math.min(maxMs, Math.max(minMs, Math.ceil(p99 * p99Multiple)))
      this.#sinceRecompute = 0
      this.#computedAt = now
    }
    return this.#timeoutMs
  }

  #rotate (now: number): void {
    const elapsed = now - this.#windowStart
    const windowMs = this.#settings.windowMs
    if (elapsed < windowMs) return
    if (elapsed >= 2 * windowMs) {
      // Quiet for two windows: everything known is too old.
      this.#previous.fill(0)
      this.#previousCount = 0
    } else {
      const spare = this.#previous
      this.#previous = this.#current
      this.#previousCount = this.#currentCount
      spare.fill(0)
      this.#current = spare
    }
    this.#current.fill(0)
    this.#currentCount = 0
    this.#windowStart = now
  }
}

/** Per-try timeouts for every model the gateway routes; models appear on their first request. */
export class AttemptTimeouts {
  readonly #settings: AttemptTimeoutSettings
  readonly #timers: Timers
  readonly #models = new Map<string, ModelLatency>()

  constructor (settings: AttemptTimeoutSettings, timers: Timers) {
    this.#settings = settings
    this.#timers = timers
  }

  get settings (): AttemptTimeoutSettings {
    return this.#settings
  }

  /** `model`'s latency record, created on first use. */
  latencyOf (model: string): ModelLatency {
    let latency = this.#models.get(model)
    if (latency === undefined) {
      latency = new ModelLatency(this.#settings, this.#timers)
      this.#models.set(model, latency)
    }
    return latency
  }

  /**
   * The per-try timeout for `model` in ms, `Infinity` for none.
   *
   * @param fixedMs the model's own `per_try_timeout_ms`, which wins over the fleet-wide value and the rule
   */
  timeoutMs (model: string, fixedMs: number | undefined): number {
    const fixed = fixedMs ?? this.#settings.fixedMs
    if (fixed !== undefined) return fixed === 0 ? Number.POSITIVE_INFINITY : fixed
    return this.latencyOf(model).timeoutMs()
  }

  /** Records a complete answer for `model` (only when its timeout follows its latency). */
  record (model: string, fixedMs: number | undefined, ms: number): void {
    if ((fixedMs ?? this.#settings.fixedMs) !== undefined) return
    this.latencyOf(model).record(ms)
  }
}
