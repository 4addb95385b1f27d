/**
 * Worker metrics with Triton's names, labels and help texts (triton-behaviour.md section 8; core
 * src/metric_model_reporter.cc), so dashboards built for Triton work unchanged. In a registry per worker rather than
 * prom-client's global one, so that several workers in one process (tests) do not share counters.
 *
 * The per-version counters are not counted here: they are the statistics the schedulers report
 * (worker/inference/statistics.ts), read at scrape time. So only requests that reached a scheduler count, as in Triton
 * (a request refused by validation before enqueue is in neither), the counters always agree with
 * `GET /v2/models/stats`, and the request path pays nothing for them: prom-client builds and hashes a label string
 * on every `inc`. Durations are cumulative microseconds, truncated per request, as Triton's counters are. The one
 * per-request metric, the latency histogram, counts into plain numbers too.
 */
import { createServer, type Server } from 'node:http'
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client'
import { errorBody } from '../../common/errors.ts'
import { type ResponseCacheStats } from '../cache/response-cache.ts'
import { FAILURE_REASONS, type VersionStatistics } from '../inference/statistics.ts'

/**
 * Buckets of `nv_inference_first_response_histogram_ms`, in milliseconds: Triton's defaults (triton-behaviour.md
 * section 8; Triton prints the histogram with `--metrics-config histogram_latencies=true`, and only for decoupled
 * models, whose first response comes before the last; here every model has it, and its one response is the first).
 */
export const FIRST_RESPONSE_BUCKETS_MS: readonly number[] = [100, 500, 2000, 5000]

const FIRST_RESPONSE = 'nv_inference_first_response_histogram_ms'
const FIRST_RESPONSE_HELP = 'Duration from request to first response in milliseconds'

/** A label value in the Prometheus text format. */
const escapeLabel = (value: string): string => value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')

/**
 * One version's latency histogram, counted in plain numbers and written out at scrape time: prom-client's
 * `Histogram.observe`, even through a child bound to its labels, builds an object and a label string per call,
 * which cost more than all of a request's statistics together.
 */
class LatencyHistogram {
  /** `model="…",version="…"`, escaped once. */
  readonly labels: string
  /** Observations per bucket, not cumulative; the last one is above every bound. */
  readonly #counts: number[]
  #sum = 0
  #count = 0

  constructor (readonly model: string, readonly version: number, readonly bounds: readonly number[]) {
    this.labels = `model="${escapeLabel(model)}",version="${version}"`
    this.#counts = new Array<number>(bounds.length + 1).fill(0)
  }

  observe (ms: number): void {
    this.#count++
    this.#sum += ms
    let i = 0
    while (i < this.bounds.length && ms > this.bounds[i]!) i++
    this.#counts[i]!++
  }

  /** Its samples in prometheus-cpp's order (what Triton prints): count, sum, then cumulative buckets, `le` last. */
  write (lines: string[]): void {
    lines.push(`${FIRST_RESPONSE}_count{${this.labels}} ${this.#count}`, `${FIRST_RESPONSE}_sum{${this.labels}} ${this.#sum}`)
    let cumulative = 0
    for (let i = 0; i < this.bounds.length; i++) {
      cumulative += this.#counts[i]!
      lines.push(`${FIRST_RESPONSE}_bucket{${this.labels},le="${this.bounds[i]!}"} ${cumulative}`)
    }
    lines.push(`${FIRST_RESPONSE}_bucket{${this.labels},le="+Inf"} ${this.#count}`)
  }
}

/** A model version's pending requests: received by its scheduler and not yet handed to an instance. */
export interface PendingCount {
  readonly model: string
  readonly version: number
  readonly count: number
}

/** What the metrics read at scrape time. */
export interface MetricSources {
  /** Every version's statistics (`ModelStatistics.all()`). */
  statistics (): Iterable<VersionStatistics>
  /** The pending requests of each READY version. */
  pending (): Iterable<PendingCount>
  /**
   * The response cache's own counters, when the worker has a cache (`--cache-config`): its families exist only
   * then, and the per-model series only for the versions that use it.
   */
  cache?: () => ResponseCacheStats
}

type ModelLabels = 'model' | 'version'

export class WorkerMetrics {
  readonly registry = new Registry()
  /** By model and version (`model\0version`): a version loaded again replaces its histogram. */
  readonly #latencies = new Map<string, LatencyHistogram>()

  constructor (sources: MetricSources) {
    const registers = [this.registry]
    /** A counter whose samples are one statistic of each version, read at scrape time. */
    const statistic = (name: string, help: string, value: (s: VersionStatistics) => number): void => {
      new Counter<ModelLabels>({
        name, help, labelNames: ['model', 'version'], registers,
        collect () {
          // Reset first, so that a version loaded again (statistics from zero) is not added twice.
          this.reset()
          for (const s of sources.statistics()) this.inc(s.labels, value(s))
        }
      })
    }
    statistic('nv_inference_request_success', 'Number of successful inference requests, all batch sizes', s => s.successCount)
    new Counter<ModelLabels | 'reason'>({
      name: 'nv_inference_request_failure',
      help: 'Number of failed inference requests, all batch sizes',
      // Triton's exposition lists labels alphabetically: {model, reason, version}.
      labelNames: ['model', 'reason', 'version'],
      registers,
      collect () {
        this.reset()
        // All four reasons from load time on, zeros included, as Triton creates them.
        for (const s of sources.statistics()) {
          for (const reason of FAILURE_REASONS) this.inc({ model: s.labels.model, reason, version: s.labels.version }, s.failures(reason))
        }
      }
    })
    statistic('nv_inference_count', 'Number of inferences performed (does not include cached requests)', s => s.inferenceCount)
    statistic('nv_inference_exec_count', 'Number of model executions performed (does not include cached requests)',
      s => s.executionCount)
    statistic('nv_inference_request_duration_us',
      'Cumulative inference request duration in microseconds (includes cached requests)', s => s.requestUs)
    statistic('nv_inference_queue_duration_us',
      'Cumulative inference queuing duration in microseconds (includes cached requests)', s => s.queueUs)
    statistic('nv_inference_compute_input_duration_us',
      'Cumulative compute input duration in microseconds (does not include cached requests)', s => s.computeInputUs)
    statistic('nv_inference_compute_infer_duration_us',
      'Cumulative compute inference duration in microseconds (does not include cached requests)', s => s.computeInferUs)
    statistic('nv_inference_compute_output_duration_us',
      'Cumulative inference compute output duration in microseconds (does not include cached requests)',
      s => s.computeOutputUs)
    if (sources.cache !== undefined) this.#cacheFamilies(sources.cache, sources.statistics)
    new Gauge<ModelLabels>({
      name: 'nv_inference_pending_request_count',
      help: 'Instantaneous number of pending requests awaiting execution per-model.',
      labelNames: ['model', 'version'],
      registers,
      collect () {
        this.reset()
        for (const p of sources.pending()) this.set({ model: p.model, version: String(p.version) }, p.count)
      }
    })
    collectDefaultMetrics({ register: this.registry })
  }

  /**
   * The response cache's families, by Triton's names (core src/metrics.cc, src/metric_model_reporter.cc).
   *
   * Per model version, counters that Triton 23.03 and later create only for models that use the cache:
   * `nv_cache_num_hits_per_model`, `nv_cache_num_misses_per_model`, and `nv_cache_hit_duration_per_model`,
   * `nv_cache_miss_duration_per_model` in microseconds (a miss: lookup + insert). They are the statistics'
   * `cache_hit` / `cache_miss`, read at scrape time.
   *
   * Cache-wide gauges, without labels: Triton 2.x exported these for its built-in cache until the cache moved behind
   * the TRITONCACHE API in 23.03 (the `local` cache library exports none since); kept by the same names because they
   * show what the per-model counters cannot, the byte budget: `nv_cache_num_entries`, `nv_cache_num_lookups`,
   * `nv_cache_num_hits`, `nv_cache_num_misses`, `nv_cache_num_evictions`, `nv_cache_lookup_duration` and
   * `nv_cache_insertion_duration` (µs), `nv_cache_util` (bytes held / size, 0 to 1).
   */
  #cacheFamilies (cache: () => ResponseCacheStats, statistics: () => Iterable<VersionStatistics>): void {
    const registers = [this.registry]
    const perModel = (name: string, help: string, value: (s: VersionStatistics) => number): void => {
      new Counter<ModelLabels>({
        name, help, labelNames: ['model', 'version'], registers,
        collect () {
          this.reset()
          for (const s of statistics()) if (s.cacheEnabled) this.inc(s.labels, value(s))
        }
      })
    }
    perModel('nv_cache_num_hits_per_model', 'Number of cache hits per model', s => s.cacheHitCount)
    perModel('nv_cache_num_misses_per_model', 'Number of cache misses per model', s => s.cacheMissCount)
    perModel('nv_cache_hit_duration_per_model', 'Total cache hit duration per model, in microseconds', s => s.cacheHitUs)
    perModel('nv_cache_miss_duration_per_model',
      'Total cache miss (insert+lookup) duration per model, in microseconds', s => s.cacheMissUs)
    const gauge = (name: string, help: string, value: (c: ResponseCacheStats) => number): void => {
      new Gauge({ name, help, registers, collect () { this.set(value(cache())) } })
    }
    gauge('nv_cache_num_entries', 'Number of responses stored in response cache', c => c.entries)
    gauge('nv_cache_num_lookups', 'Number of cache lookups in response cache', c => c.lookups)
    gauge('nv_cache_num_hits', 'Number of cache hits in response cache', c => c.hits)
    gauge('nv_cache_num_misses', 'Number of cache misses in response cache', c => c.misses)
    gauge('nv_cache_num_evictions', 'Number of cache evictions in response cache', c => c.evictions)
    gauge('nv_cache_lookup_duration', 'Total cache lookup duration (hit and miss), in microseconds', c => c.lookupUs)
    gauge('nv_cache_insertion_duration', 'Total cache insertion duration, in microseconds', c => c.insertionUs)
    gauge('nv_cache_util', 'Cache utilization [0.0 - 1.0]', c => c.bytes / c.sizeBytes)
  }

  /** A version's series of `nv_inference_first_response_histogram_ms` (`StatisticsOptions.latency`), from zero. */
  latency (model: string, version: number): { observe (ms: number): void } {
    const histogram = new LatencyHistogram(model, version, FIRST_RESPONSE_BUCKETS_MS)
    this.#latencies.set(`${model}\0${version}`, histogram)
    return histogram
  }

  /** The whole exposition, in the Prometheus text format: prom-client's families, then the latency histogram. */
  async metrics (): Promise<string> {
    const lines = [`# HELP ${FIRST_RESPONSE} ${FIRST_RESPONSE_HELP}`, `# TYPE ${FIRST_RESPONSE} histogram`]
    const histograms = [...this.#latencies.values()]
      .sort((a, b) => a.model < b.model ? -1 : a.model > b.model ? 1 : a.version - b.version)
    for (const h of histograms) h.write(lines)
    return `${await this.registry.metrics()}\n${lines.join('\n')}\n`
  }

  /** A plain HTTP listener: GET /metrics (and /metrics/), as Triton's metrics port. */
  createServer (): Server {
    return createServer((req, res) => {
      const path = (req.url ?? '').split('?')[0]
      if (path !== '/metrics' && path !== '/metrics/') {
        res.writeHead(404, { 'content-type': 'application/json' }).end(errorBody('Not Found'))
        return
      }
      if (req.method !== 'GET') {
        res.writeHead(405, { 'content-type': 'application/json' }).end(errorBody('Method Not Allowed'))
        return
      }
      this.metrics().then(
        text => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
        (err: unknown) => res.writeHead(500, { 'content-type': 'application/json' }).end(errorBody(String(err)))
      )
    })
  }
}
