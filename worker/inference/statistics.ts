/**
 * Triton's statistics extension (triton-behaviour.md section 3.3): per model version, what its scheduler reported
 * (worker/scheduler/types.ts `SchedulerObserver`), kept as plain numbers so that the request path only adds. The same
 * numbers feed the Prometheus counters (worker/server/metrics.ts reads them at scrape time), so
 * `nv_inference_request_success` is `success.count`, `nv_inference_count` is `inference_count` and
 * `nv_inference_exec_count` is `execution_count`, as in Triton.
 *
 * The arithmetic is Triton's `InferenceStatsAggregator` (core src/infer_stats.cc): a success adds its batch size to
 * `inference_count` and its times to `success`, `queue` and the three compute phases; a failure after enqueue adds
 * its time to `fail` only; each execution adds one to `execution_count` and to its size's `batch_stats`, and stamps
 * `last_inference` with the wall clock.
 *
 * With the response cache (worker/cache/response-cache.ts), the inference service reports the two cache outcomes
 * here, as Triton's `UpdateSuccessCacheHit` and `UpdateSuccessCacheMiss` do: a hit is a success (count, request
 * time, queue time up to the lookup) plus `cache_hit` (count, lookup time), and nothing else: no inference count, no
 * execution, no compute time, no `last_inference`; so the compute counts are `success.count - cache_hit.count`. A
 * miss runs as any request (the scheduler reports it) and then adds `cache_miss` (count, lookup + insert time), that
 * same time to the request's, and nothing to the success count.
 */
import { type FailureReason, type RequestTiming, type SchedulerObserver } from '../scheduler/types.ts'

/** Failure reasons in the order Triton's `nv_inference_request_failure{reason}` series are listed. */
export const FAILURE_REASONS: readonly FailureReason[] = ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER']

/** One executed batch size's phase times (Triton's `InferBatchStatistics`). */
export interface BatchTotals {
  count: number
  computeInputNs: bigint
  computeInferNs: bigint
  computeOutputNs: bigint
}

export interface StatisticsOptions {
  /** Milliseconds since the epoch, for `last_inference` (`Date.now` by default). */
  wallClock?: () => number
  /**
   * Called once per version by {@link ModelStatistics.observerFor}; what it returns is told each finished request's
   * whole time in milliseconds (the metrics' latency histogram).
   */
  latency?: (model: string, version: number) => { observe (ms: number): void }
}

/** Whole microseconds, truncated per request, as Triton adds `ns / 1000` to its `*_duration_us` counters. */
const micros = (ns: bigint): number => Math.floor(Number(ns) / 1000)

/**
 * One model version's statistics, and the observer its scheduler reports to. Fields are public for the metrics
 * exporter and the JSON below; only the scheduler's calls change them.
 */
export class VersionStatistics implements SchedulerObserver {
  readonly name: string
  readonly version: number
  /** The Prometheus labels of this version's series, built once. */
  readonly labels: { readonly model: string, readonly version: string }

  successCount = 0
  successNs = 0n
  failCount = 0
  failNs = 0n
  queueNs = 0n
  computeInputNs = 0n
  computeInferNs = 0n
  computeOutputNs = 0n
  inferenceCount = 0
  executionCount = 0
  /** Milliseconds since the epoch of the last execution; 0 before the first. */
  lastInferenceMs = 0
  /** By executed batch size. */
  readonly batches = new Map<number, BatchTotals>()

  /** Failures by reason, as `nv_inference_request_failure{reason}` counts them. */
  failRejected = 0
  failCanceled = 0
  failBackend = 0
  failOther = 0
  /** Cumulative microseconds of successful requests, for the `nv_inference_*_duration_us` counters. */
  requestUs = 0
  queueUs = 0
  computeInputUs = 0
  computeInferUs = 0
  computeOutputUs = 0

  /**
   * Whether this version uses the response cache (its config enables it and the worker has one): only then does it
   * have `nv_cache_*_per_model` series, as Triton creates them only for such models.
   */
  readonly cacheEnabled: boolean
  cacheHitCount = 0
  cacheHitNs = 0n
  cacheMissCount = 0
  cacheMissNs = 0n
  /** For `nv_cache_hit_duration_per_model` / `nv_cache_miss_duration_per_model`, truncated per request. */
  cacheHitUs = 0
  cacheMissUs = 0

  readonly #wallClock: () => number
  readonly #latency: { observe (ms: number): void } | undefined

  constructor (name: string, version: number, wallClock: () => number = Date.now, latency?: { observe (ms: number): void },
    cacheEnabled = false) {
    this.name = name
    this.version = version
    this.labels = { model: name, version: String(version) }
    this.#wallClock = wallClock
    this.#latency = latency
    this.cacheEnabled = cacheEnabled
  }

  requestDone (ok: boolean, reason: FailureReason | undefined, batchSize: number, totalNs: bigint, timing: RequestTiming): void {
    if (ok) {
      this.successCount++
      this.successNs += totalNs
      this.inferenceCount += batchSize > 1 ? batchSize : 1
      this.queueNs += timing.queueNs
      this.computeInputNs += timing.computeInputNs
      this.computeInferNs += timing.computeInferNs
      this.computeOutputNs += timing.computeOutputNs
      this.requestUs += micros(totalNs)
      this.queueUs += micros(timing.queueNs)
      this.computeInputUs += micros(timing.computeInputNs)
      this.computeInferUs += micros(timing.computeInferNs)
      this.computeOutputUs += micros(timing.computeOutputNs)
    } else {
      this.failCount++
      this.failNs += totalNs
      switch (reason) {
        case 'REJECTED': this.failRejected++; break
        case 'CANCELED': this.failCanceled++; break
        case 'BACKEND': this.failBackend++; break
        default: this.failOther++
      }
    }
    // Whole milliseconds, as Triton observes its first-response histogram; a request here has one response.
    this.#latency?.observe(Math.floor(Number(totalNs) / 1e6))
  }

  /**
   * A request answered from the response cache, without reaching the scheduler.
   * @param totalNs from its arrival at the service to its answer
   * @param queueNs from its arrival to the start of the lookup (its key's hashing), Triton's queue time of a hit
   * @param lookupNs the lookup
   */
  cacheHit (totalNs: bigint, queueNs: bigint, lookupNs: bigint): void {
    this.successCount++
    this.successNs += totalNs
    this.queueNs += queueNs
    this.requestUs += micros(totalNs)
    this.queueUs += micros(queueNs)
    this.cacheHitCount++
    this.cacheHitNs += lookupNs
    this.cacheHitUs += micros(lookupNs)
    this.#latency?.observe(Math.floor(Number(totalNs) / 1e6))
  }

  /**
   * A request that missed, ran (and was reported by the scheduler as a success), and whose answer was offered to the
   * cache. `ns` is the lookup plus the insert, which Triton adds to the request's duration too.
   */
  cacheMiss (ns: bigint): void {
    this.successNs += ns
    this.requestUs += micros(ns)
    this.cacheMissCount++
    this.cacheMissNs += ns
    this.cacheMissUs += micros(ns)
  }

  batchDone (size: number, computeInputNs: bigint, computeInferNs: bigint, computeOutputNs: bigint): void {
    const now = this.#wallClock()
    if (now > this.lastInferenceMs) this.lastInferenceMs = now
    this.executionCount++
    let batch = this.batches.get(size)
    if (batch === undefined) {
      batch = { count: 0, computeInputNs: 0n, computeInferNs: 0n, computeOutputNs: 0n }
      this.batches.set(size, batch)
    }
    batch.count++
    batch.computeInputNs += computeInputNs
    batch.computeInferNs += computeInferNs
    batch.computeOutputNs += computeOutputNs
  }

  /** Failures of one reason. */
  failures (reason: FailureReason): number {
    switch (reason) {
      case 'REJECTED': return this.failRejected
      case 'CANCELED': return this.failCanceled
      case 'BACKEND': return this.failBackend
      default: return this.failOther
    }
  }

  /**
   * This version's entry of `model_stats`, as compact JSON in Triton's key order (core tritonserver.cc
   * `TRITONSERVER_ServerModelStatistics`). Written by hand because nanosecond sums are bigints, which
   * `JSON.stringify` refuses, and must print as exact integers.
   */
  toJson (): string {
    // Cache hits are successes that computed nothing (Triton: compute count = success - cache_hit).
    const computeCount = this.successCount - this.cacheHitCount
    const batchStats = [...this.batches.keys()].sort((a, b) => a - b).map(size => {
      const b = this.batches.get(size)!
      return `{"batch_size":${size},"compute_input":${duration(b.count, b.computeInputNs)},` +
        `"compute_infer":${duration(b.count, b.computeInferNs)},"compute_output":${duration(b.count, b.computeOutputNs)}}`
    })
    return `{"name":${JSON.stringify(this.name)},"version":"${this.version}","last_inference":${this.lastInferenceMs},` +
      `"inference_count":${this.inferenceCount},"execution_count":${this.executionCount},` +
      '"inference_stats":{' +
      `"success":${duration(this.successCount, this.successNs)},"fail":${duration(this.failCount, this.failNs)},` +
      `"queue":${duration(this.successCount, this.queueNs)},` +
      `"compute_input":${duration(computeCount, this.computeInputNs)},` +
      `"compute_infer":${duration(computeCount, this.computeInferNs)},` +
      `"compute_output":${duration(computeCount, this.computeOutputNs)},` +
      `"cache_hit":${duration(this.cacheHitCount, this.cacheHitNs)},` +
      `"cache_miss":${duration(this.cacheMissCount, this.cacheMissNs)}},` +
      `"response_stats":{},"batch_stats":[${batchStats.join(',')}],"memory_usage":[]}`
  }
}

function duration (count: number, ns: bigint): string {
  return `{"count":${count},"ns":${ns}}`
}

/** Statistics of every loaded model version. */
export class ModelStatistics {
  readonly #wallClock: () => number
  readonly #latency: StatisticsOptions['latency']
  /** `model` → version → statistics. */
  readonly #models = new Map<string, Map<number, VersionStatistics>>()

  constructor (options: StatisticsOptions = {}) {
    this.#wallClock = options.wallClock ?? Date.now
    this.#latency = options.latency
  }

  /**
   * The observer for a version that is being loaded: the model repository calls it once per version and hands the
   * result to the version's scheduler. A version loaded again starts from zero, as a reloaded Triton model does.
   * @param options.cacheEnabled whether the version uses the response cache (its cache series then exist)
   */
  observerFor (model: string, version: number, options: { readonly cacheEnabled?: boolean } = {}): VersionStatistics {
    let versions = this.#models.get(model)
    if (versions === undefined) {
      versions = new Map()
      this.#models.set(model, versions)
    }
    const stats = new VersionStatistics(model, version, this.#wallClock, this.#latency?.(model, version), options.cacheEnabled === true)
    versions.set(version, stats)
    return stats
  }

  get (model: string, version: number): VersionStatistics | undefined {
    return this.#models.get(model)?.get(version)
  }

  /** Every version that got an observer, by model name then version. */
  all (): VersionStatistics[] {
    const out: VersionStatistics[] = []
    for (const model of [...this.#models.keys()].sort()) {
      const versions = this.#models.get(model)!
      for (const v of [...versions.keys()].sort((a, b) => a - b)) out.push(versions.get(v)!)
    }
    return out
  }

  /**
   * The body of `GET /v2/models[/{m}[/versions/{v}]]/stats` for these versions, in the order given. A version with no
   * observer (its scheduler reports nothing) shows zeros, as a Triton model that has not run yet.
   */
  toJson (versions: ReadonlyArray<{ readonly name: string, readonly version: number }>): string {
    const entries = versions.map(v => (this.get(v.name, v.version) ?? new VersionStatistics(v.name, v.version)).toJson())
    return `{"model_stats":[${entries.join(',')}]}`
  }
}
