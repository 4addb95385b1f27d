/**
 * Per-model canary routing: a model's requests that name no version are split between a baseline side and a
 * canary side by percentage, and both sides' outcomes are compared over a sliding window so that a canary that is
 * clearly worse is rolled back without waiting for an operator. The gateway decides what a side is (two versions
 * of the model, or two groups of servers) and sends each request where {@link Canary.side} says; this file holds
 * only the decision and the statistics, over injected time and randomness.
 *
 * Choosing a side, in order (first match wins):
 * 1. The force header (`force_header`) set to its value: the canary. This holds even after a rollback, manual or
 *    automatic, so that an operator testing the canary by hand (or checking a fix) still reaches it; no ordinary
 *    traffic sends that header, so a rolled-back canary gets nothing else.
 * 2. Promoted: the canary. Effective share 0 (set so, or rolled back): the baseline. Share 100: the canary.
 * 3. The sticky header (`sticky_header`) present and non-empty: the canary iff `stickyPoint(value) < percent/100`.
 *    A key's point is fixed, so a caller stays on one side on every replica, and raising the share only moves
 *    baseline keys to the canary, never the reverse: a user who saw the canary at 5% still sees it at 10%.
 * 4. Otherwise one draw of the injected `random`.
 *
 * Statistics: a window of `windowMs` made of {@link WINDOW_SLOTS} sub-buckets keyed by `floor(now / (windowMs /
 * 10))`; a sub-bucket is cleared when reused for a newer period, and read only while its period is one of the
 * last ten, so the window covers between 0.9 and 1 `windowMs` (the current sub-bucket fills as time passes).
 * Per side and sub-bucket: requests, errors, and a latency histogram with logarithmic bins (ratio 1.1 from
 * 0.05 ms to ~130 s, values outside clamped to the first or last bin). p50 and p99 are nearest-rank over the
 * merged bins, reported as the bin's geometric midpoint, so an estimate is within about 5% of the true value:
 * plenty to tell a 2x regression, at a fixed 620 bytes per side and sub-bucket whatever the traffic.
 *
 * Automatic rollback compares the canary with the live baseline (as Spinnaker's Kayenta does) rather than with
 * fixed thresholds, so a bad minute for the whole model (a slow dependency, a burst of bad inputs) is not blamed
 * on the canary. It is judged in `record`, only while enabled, not promoted, not rolled back and with a share
 * above 0, and only once both sides have `minRequests` requests in the window (checked on every record: ten
 * additions a side); from then on at most once per `windowMs / 20`, so the first verdict comes with the request
 * that completes the evidence.
 * - errors: canary error rate > max(`errorRateFactor` × baseline's, `minErrorRate`);
 * - latency: canary p99 > max(`p99Factor` × baseline's, baseline's + `minP99IncreaseMs`). The absolute floor keeps
 *   a fast model (1 ms against 3 ms) from being rolled back over noise.
 * The first rule that holds rolls back with a reason naming it and its figures. A rolled-back canary is never
 * judged again: the gateway makes a new `Canary` when an operator sets the canary again.
 */
// `import type`, not the house `import { type X }`: under verbatimModuleSyntax the latter still loads the admin
// module at run time, and this file needs only its wire types (and must not join the import cycles around it).
import { fmix32 } from '../../common/hash.ts'
import type { CanarySideStats, CanaryView } from '../admin/api.ts'

export type CanarySide = 'baseline' | 'canary'

/** When the canary is rolled back without an operator; see the rationale at the top of the file. */
export interface AutoRollbackSettings {
  readonly enabled: boolean
  /** The sliding window over which both sides are compared. */
  readonly windowMs: number
  /** Each side needs at least this many requests in the window before any verdict. */
  readonly minRequests: number
  /** Roll back when the canary's error rate > max(errorRateFactor × the baseline's, minErrorRate). */
  readonly errorRateFactor: number
  /** 0..1. */
  readonly minErrorRate: number
  /** Roll back when the canary's p99 > max(p99Factor × the baseline's, the baseline's + minP99IncreaseMs). */
  readonly p99Factor: number
  readonly minP99IncreaseMs: number
}

/** On, judged over a minute, from 100 requests a side; twice the errors (at least 1%) or twice the p99 (at least +10 ms). */
export const DEFAULT_AUTO_ROLLBACK: AutoRollbackSettings = Object.freeze({
  enabled: true,
  windowMs: 60_000,
  minRequests: 100,
  errorRateFactor: 2,
  minErrorRate: 0.01,
  p99Factor: 2,
  minP99IncreaseMs: 10
})

/** What the two sides are: two versions of the model, or the listed servers (canary) against the model's others. */
export type CanarySplit =
  | { readonly kind: 'version', readonly baselineVersion: number, readonly canaryVersion: number }
  | { readonly kind: 'servers', readonly canaryServers: readonly string[] }

/** A model's canary as set by the operator; validated where it enters (the admin API), not here. */
export interface CanarySettings {
  readonly split: CanarySplit
  /** The canary's share, 0..100, fractions allowed. */
  readonly percent: number
  /** A request with header `name` (lower-case) equal to `value` always goes to the canary. */
  readonly forceHeader: { readonly name: string, readonly value: string } | undefined
  /** Lower-case name of the header whose value keeps a caller on one side. */
  readonly stickyHeader: string | undefined
  readonly autoRollback: AutoRollbackSettings
}

/** A rollback, manual or automatic, with both sides' window figures at that moment. */
export interface RollbackEvent {
  readonly model: string
  readonly automatic: boolean
  readonly reason: string
  readonly baseline: CanarySideStats
  readonly canary: CanarySideStats
}

export interface CanaryDeps {
  /** Monotonic milliseconds. */
  now (): number
  /** Uniform in [0, 1). */
  random (): number
  /**
   * Told of every rollback, after the share is already 0. Called synchronously from `record` (on the request path)
   * for an automatic one, so it must not throw and should only log or schedule work.
   */
  onRollback?: (event: RollbackEvent) => void
}

/** Sub-buckets in the sliding window. */
export const WINDOW_SLOTS = 10
/** The smallest latency the histogram tells apart; anything faster lands in the first bin. */
export const HISTOGRAM_MIN_MS = 0.05
/** Each latency bin is this much wider than the one before. */
export const HISTOGRAM_RATIO = 1.1
/** Bins from {@link HISTOGRAM_MIN_MS} up to ~130 s; anything slower lands in the last. */
export const HISTOGRAM_BINS = Math.ceil(Math.log(120_000 / HISTOGRAM_MIN_MS) / Math.log(HISTOGRAM_RATIO))

const LOG_RATIO = Math.log(HISTOGRAM_RATIO)
/** The value reported for each bin: its geometric midpoint, min × ratio^(i + ½). */
const BIN_MIDPOINTS = Float64Array.from({ length: HISTOGRAM_BINS }, (_, i) => HISTOGRAM_MIN_MS * HISTOGRAM_RATIO ** (i + 0.5))
/** Verdicts are at most this many per window. */
const VERDICTS_PER_WINDOW = 20

/** One side's counters, every sub-bucket in one typed array each. */
interface SideCounters {
  readonly requests: Float64Array
  readonly errors: Float64Array
  /** Sub-bucket `s`'s bins are `[s × HISTOGRAM_BINS, (s + 1) × HISTOGRAM_BINS)`. */
  readonly bins: Uint32Array
}

/** One side's raw window figures, before rounding for the wire. */
interface Figures {
  requests: number
  errors: number
  errorRate: number
  p50: number | null
  p99: number | null
}

function sideCounters (): SideCounters {
  return {
    requests: new Float64Array(WINDOW_SLOTS),
    errors: new Float64Array(WINDOW_SLOTS),
    bins: new Uint32Array(WINDOW_SLOTS * HISTOGRAM_BINS)
  }
}

/**
 * Stable position of a sticky key in [0, 1): the same on every gateway replica and every run (no per-process
 * seed), so a caller keeps its side across replicas and restarts.
 *
 * FNV-1a (32-bit) over the key's UTF-8 bytes (encoded on the fly, without allocating; a lone surrogate counts as
 * U+FFFD, as `TextEncoder` writes it), then MurmurHash3's fmix32 finaliser, divided by 2^32. UTF-8 bytes rather
 * than UTF-16 units (compare `hash32` in the consistent-hash balancer) so that any other implementation can
 * reproduce a key's side from the textbook algorithms. The finaliser matters: plain FNV-1a puts keys that differ
 * only in their last character ("user-1" … "user-9") on a lattice, so at small shares such keys would all fall
 * on the same side. The tests pin values, so a change of hash, which would move callers between sides, is caught.
 */
export function stickyPoint (key: string): number {
  let h = 0x811c9dc5
  const length = key.length
  for (let i = 0; i < length; i++) {
    let c = key.charCodeAt(i)
    if (c < 0x80) {
      h = Math.imul(h ^ c, 0x01000193)
      continue
    }
    if (c < 0x800) {
      h = Math.imul(h ^ (0xc0 | (c >>> 6)), 0x01000193)
      h = Math.imul(h ^ (0x80 | (c & 0x3f)), 0x01000193)
      continue
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = i + 1 < length ? key.charCodeAt(i + 1) : 0
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00)
        i++
        h = Math.imul(h ^ (0xf0 | (c >>> 18)), 0x01000193)
        h = Math.imul(h ^ (0x80 | ((c >>> 12) & 0x3f)), 0x01000193)
        h = Math.imul(h ^ (0x80 | ((c >>> 6) & 0x3f)), 0x01000193)
        h = Math.imul(h ^ (0x80 | (c & 0x3f)), 0x01000193)
        continue
      }
      c = 0xfffd
    }
    h = Math.imul(h ^ (0xe0 | (c >>> 12)), 0x01000193)
    h = Math.imul(h ^ (0x80 | ((c >>> 6) & 0x3f)), 0x01000193)
    h = Math.imul(h ^ (0x80 | (c & 0x3f)), 0x01000193)
  }
  return fmix32(h) / 4294967296
}

function clearSlot (counters: SideCounters, slot: number): void {
  counters.requests[slot] = 0
  counters.errors[slot] = 0
  counters.bins.fill(0, slot * HISTOGRAM_BINS, (slot + 1) * HISTOGRAM_BINS)
}

/** The histogram bin of a latency; NaN and anything at or below the minimum land in bin 0. */
function binOf (durationMs: number): number {
  if (!(durationMs > HISTOGRAM_MIN_MS)) return 0
  const bin = Math.floor(Math.log(durationMs / HISTOGRAM_MIN_MS) / LOG_RATIO)
  return bin < HISTOGRAM_BINS ? bin : HISTOGRAM_BINS - 1
}

/**
 * One model's canary: which side each request goes to, what each side's requests did, and the automatic
 * rollback. Made by the gateway when an operator sets the canary and replaced (never reset) when it is set again.
 * Not shared across replicas: each gateway judges its own traffic.
 */
export class Canary {
  readonly model: string
  readonly settings: CanarySettings
  readonly #now: () => number
  readonly #random: () => number
  readonly #onRollback: ((event: RollbackEvent) => void) | undefined
  /** settings.percent / 100, the threshold `side` compares against. */
  readonly #threshold: number
  readonly #slotMs: number
  /** The period (`floor(now / slotMs)`) each sub-bucket holds; -Infinity until first used. */
  readonly #periods = new Float64Array(WINDOW_SLOTS).fill(Number.NEGATIVE_INFINITY)
  readonly #baseline = sideCounters()
  readonly #canary = sideCounters()
  /** Scratch for merging one side's bins, reused so that a verdict allocates nothing. */
  readonly #merged = new Float64Array(HISTOGRAM_BINS)
  #promoted = false
  #rolledBack: { automatic: boolean, reason: string, at: number } | undefined
  /** No verdict before this time (the throttle). */
  #nextVerdictAt = Number.NEGATIVE_INFINITY

  /**
   * @param model the model whose unversioned requests are split
   * @param settings as validated by the admin API (or the fleet file); kept as given, never changed
   * @param deps injected time, randomness and the rollback listener
   */
  constructor (model: string, settings: CanarySettings, deps: CanaryDeps) {
    this.model = model
    this.settings = settings
    this.#now = deps.now
    this.#random = deps.random
    this.#onRollback = deps.onRollback
    this.#threshold = settings.percent / 100
    // A zero or negative window would divide by zero; the boundary refuses it, this only keeps the maths finite.
    this.#slotMs = Math.max(settings.autoRollback.windowMs, WINDOW_SLOTS) / WINDOW_SLOTS
  }

  /** The canary's effective share now: 100 after a promote, 0 after a rollback, else the configured one. */
  get percent (): number {
    if (this.#promoted) return 100
    if (this.#rolledBack !== undefined) return 0
    return this.settings.percent
  }

  get promoted (): boolean {
    return this.#promoted
  }

  /**
   * Which side a request goes to (rules at the top of the file). Allocates nothing beyond what `header` does.
   *
   * @param header the request's header value for a lower-case name, or undefined when absent
   */
  side (header: (name: string) => string | undefined): CanarySide {
    const { forceHeader, stickyHeader } = this.settings
    // Checked before the rollback on purpose: an operator must still reach a rolled-back canary by hand.
    if (forceHeader !== undefined && header(forceHeader.name) === forceHeader.value) return 'canary'
    if (this.#promoted) return 'canary'
    if (this.#rolledBack !== undefined || !(this.#threshold > 0)) return 'baseline'
    if (this.#threshold >= 1) return 'canary'
    if (stickyHeader !== undefined) {
      const key = header(stickyHeader)
      // An empty value is no key: every such caller would otherwise share one point, hence one side.
      if (key !== undefined && key !== '') return stickyPoint(key) < this.#threshold ? 'canary' : 'baseline'
    }
    return this.#random() < this.#threshold ? 'canary' : 'baseline'
  }

  /**
   * Records one finished request and, when due, judges the canary (which may roll it back and call `onRollback`).
   * Its latency counts whatever the outcome: it is what the caller waited.
   *
   * @param side where it went
   * @param ok answered without a 5xx or a transport error
   * @param durationMs its latency
   */
  record (side: CanarySide, ok: boolean, durationMs: number): void {
    const now = this.#now()
    const slot = this.#slotFor(now)
    const counters = side === 'canary' ? this.#canary : this.#baseline
    counters.requests[slot] = (counters.requests[slot] ?? 0) + 1
    if (!ok) counters.errors[slot] = (counters.errors[slot] ?? 0) + 1
    const bin = slot * HISTOGRAM_BINS + binOf(durationMs)
    counters.bins[bin] = (counters.bins[bin] ?? 0) + 1
    if (this.#judging() && now >= this.#nextVerdictAt) this.#judge(now)
  }

  /** Sends all traffic to the canary from now on (the force header is moot); automatic rollback stops judging. */
  promote (): void {
    this.#promoted = true
  }

  /**
   * Sets the canary's share to 0 (undoing a promote too), remembers why and when, and calls `onRollback`.
   * The force header still reaches the canary. A later rollback replaces the remembered one.
   *
   * @param reason what an operator reads in the admin API and the logs
   * @param automatic whether the auto rollback decided it (default false: an operator did)
   */
  rollback (reason: string, automatic = false): void {
    this.#promoted = false
    this.#rolledBack = { automatic, reason, at: this.#now() }
    if (this.#onRollback !== undefined) {
      const { baseline, canary } = this.stats()
      this.#onRollback({ model: this.model, automatic, reason, baseline, canary })
    }
  }

  /** Both sides' figures over the window, rounded for the wire. */
  stats (): { baseline: CanarySideStats, canary: CanarySideStats } {
    const now = this.#now()
    return { baseline: wire(this.#figures(this.#baseline, now)), canary: wire(this.#figures(this.#canary, now)) }
  }

  /** The admin API's view of this canary (`GET /v1/models/:model/canary`). */
  view (): CanaryView {
    const { split, forceHeader, stickyHeader, autoRollback } = this.settings
    const { baseline, canary } = this.stats()
    const rolledBack = this.#rolledBack
    return {
      model: this.model,
      split: split.kind,
      baseline_version: split.kind === 'version' ? split.baselineVersion : null,
      canary_version: split.kind === 'version' ? split.canaryVersion : null,
      canary_servers: split.kind === 'servers' ? [...split.canaryServers] : null,
      percent: this.percent,
      configured_percent: this.settings.percent,
      promoted: this.#promoted,
      rolled_back: rolledBack === undefined
        ? null
        : { automatic: rolledBack.automatic, reason: rolledBack.reason, ms_ago: Math.max(0, this.#now() - rolledBack.at) },
      force_header: forceHeader === undefined ? null : { name: forceHeader.name, value: forceHeader.value },
      sticky_header: stickyHeader ?? null,
      auto_rollback: {
        enabled: autoRollback.enabled,
        window_ms: autoRollback.windowMs,
        min_requests: autoRollback.minRequests,
        error_rate_factor: autoRollback.errorRateFactor,
        min_error_rate: autoRollback.minErrorRate,
        p99_factor: autoRollback.p99Factor,
        min_p99_increase_ms: autoRollback.minP99IncreaseMs
      },
      baseline,
      canary
    }
  }

  /** The sub-bucket for `now`, cleared first when it last held an older period. */
  #slotFor (now: number): number {
    const period = Math.floor(now / this.#slotMs)
    const slot = ((period % WINDOW_SLOTS) + WINDOW_SLOTS) % WINDOW_SLOTS
    if (this.#periods[slot] !== period) {
      this.#periods[slot] = period
      clearSlot(this.#baseline, slot)
      clearSlot(this.#canary, slot)
    }
    return slot
  }

  /** Whether the auto rollback may judge at all now. */
  #judging (): boolean {
    return this.settings.autoRollback.enabled && !this.#promoted && this.#rolledBack === undefined && this.#threshold > 0
  }

  /** Requests of one side in the window (cheap: no histogram), to tell whether a verdict is possible. */
  #requests (counters: SideCounters, now: number): number {
    const current = Math.floor(now / this.#slotMs)
    let requests = 0
    for (let slot = 0; slot < WINDOW_SLOTS; slot++) {
      const period = this.#periods[slot] ?? Number.NEGATIVE_INFINITY
      if (period > current - WINDOW_SLOTS && period <= current) requests += counters.requests[slot] ?? 0
    }
    return requests
  }

  /** One side's figures over the window. */
  #figures (counters: SideCounters, now: number): Figures {
    const current = Math.floor(now / this.#slotMs)
    const merged = this.#merged
    merged.fill(0)
    let requests = 0
    let errors = 0
    for (let slot = 0; slot < WINDOW_SLOTS; slot++) {
      const period = this.#periods[slot] ?? Number.NEGATIVE_INFINITY
      if (!(period > current - WINDOW_SLOTS && period <= current)) continue
      const count = counters.requests[slot] ?? 0
      if (count === 0) continue
      requests += count
      errors += counters.errors[slot] ?? 0
      const base = slot * HISTOGRAM_BINS
      for (let bin = 0; bin < HISTOGRAM_BINS; bin++) merged[bin] = (merged[bin] ?? 0) + (counters.bins[base + bin] ?? 0)
    }
    const errorRate = requests > 0 ? errors / requests : 0
    if (requests === 0) return { requests, errors, errorRate, p50: null, p99: null }
    return { requests, errors, errorRate, p50: quantile(merged, requests, 0.5), p99: quantile(merged, requests, 0.99) }
  }

  /** The verdict: see the rules at the top of the file. */
  #judge (now: number): void {
    const settings = this.settings.autoRollback
    // At least one request a side, or a `minRequests` of 0 would judge an empty window.
    const needed = Math.max(1, settings.minRequests)
    if (this.#requests(this.#canary, now) < needed || this.#requests(this.#baseline, now) < needed) return
    // The throttle starts only once there is enough evidence, so the first verdict comes with the request that
    // brings both sides to `minRequests`, not up to a throttle period later.
    this.#nextVerdictAt = now + Math.max(settings.windowMs, 0) / VERDICTS_PER_WINDOW
    const canary = this.#figures(this.#canary, now)
    const baseline = this.#figures(this.#baseline, now)
    const over = `over the last ${formatWindow(settings.windowMs)} (${canary.requests} canary, ${baseline.requests} baseline requests)`
    const errorLimit = Math.max(settings.errorRateFactor * baseline.errorRate, settings.minErrorRate)
    if (canary.errorRate > errorLimit) {
      this.rollback(`canary error rate ${formatRate(canary.errorRate)} > ${settings.errorRateFactor}x baseline ` +
        `${formatRate(baseline.errorRate)} (min ${formatRate(settings.minErrorRate)}) ${over}`, true)
      return
    }
    const canaryP99 = canary.p99
    const baselineP99 = baseline.p99
    /* c8 ignore next */
    if (canaryP99 === null || baselineP99 === null) return // unreachable: both sides have requests
    const p99Limit = Math.max(settings.p99Factor * baselineP99, baselineP99 + settings.minP99IncreaseMs)
    if (canaryP99 > p99Limit) {
      this.rollback(`canary p99 ${formatMs(canaryP99)} ms > ${settings.p99Factor}x baseline p99 ${formatMs(baselineP99)} ms ` +
        `(min +${formatMs(settings.minP99IncreaseMs)} ms) ${over}`, true)
    }
  }
}

/** Nearest-rank quantile `q` of `count` values binned in `bins`, as the holding bin's geometric midpoint. */
function quantile (bins: Float64Array, count: number, q: number): number {
  const rank = Math.max(1, Math.ceil(q * count))
  let seen = 0
  for (let bin = 0; bin < HISTOGRAM_BINS; bin++) {
    seen += bins[bin] ?? 0
    if (seen >= rank) return BIN_MIDPOINTS[bin] ?? 0
  }
  /* c8 ignore next */
  return BIN_MIDPOINTS[HISTOGRAM_BINS - 1] ?? 0 // unreachable: the bins add up to count
}

/**
 * Figures as the admin API shows them: the error rate to 4 significant digits (so 3 errors in 100 000 still
 * show), latencies to 3 (the histogram is good to about 5%, more digits would be noise).
 */
function wire (figures: Figures): CanarySideStats {
  return {
    requests: figures.requests,
    errors: figures.errors,
    error_rate: Number(figures.errorRate.toPrecision(4)),
    p50_ms: figures.p50 === null ? null : Number(figures.p50.toPrecision(3)),
    p99_ms: figures.p99 === null ? null : Number(figures.p99.toPrecision(3))
  }
}

/** A rate as a percentage for a reason: 40.0%, 1.0%, and two significant digits below 1% (0.50%, 0.012%). */
function formatRate (rate: number): string {
  const percent = rate * 100
  return `${percent >= 1 || percent === 0 ? percent.toFixed(1) : percent.toPrecision(2)}%`
}

function formatMs (ms: number): string {
  return String(Number(ms.toPrecision(3)))
}

function formatWindow (ms: number): string {
  return ms >= 1000 ? `${Number((ms / 1000).toFixed(1))} s` : `${ms} ms`
}
