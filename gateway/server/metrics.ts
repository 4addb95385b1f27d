/**
 * Gateway metrics, `flotilla_*` (design section 5), in a registry per gateway instance rather than prom-client's
 * global one, so that several gateways in one process (tests, the demo) do not share or collide on counters.
 * Served on their own listener, like Triton's metrics port, so scrapes never queue behind inference traffic.
 */
import { createServer, type Server } from 'node:http'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { errorBody } from '../../common/errors.ts'
import { type Endpoint } from '../fleet/types.ts'

/**
 * Latency buckets in seconds: from a cache-hit-fast 1 ms to the 60 s default request timeout, denser where
 * typical inference latencies fall.
 */
export const DURATION_BUCKETS: readonly number[] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]

/** What the gauges read at scrape time, so the request path pays nothing for them. */
export interface MetricSources {
  endpoints (): readonly Endpoint[]
  /** Requests waiting in the gateway queue for a server under its in-flight limit. */
  queueWaiting (): number
  /** Whether an endpoint passes its checks and whether it is ejected. */
  health (endpoint: Endpoint): { readonly healthy: boolean, readonly ejected: boolean }
  /** Each model's canary share now (0 after a rollback); empty when there is none. */
  canaryPercents? (): ReadonlyArray<{ readonly model: string, readonly percent: number }>
}

/** Requests of one model, endpoint, code and protocol counted since the last scrape, which adds them to the counter. */
interface PendingCount {
  readonly labels: { readonly model: string, readonly endpoint: string, readonly code: string, readonly protocol: string }
  pending: number
}

/**
 * One model and endpoint's series, looked up once. prom-client builds and hashes a label string on every call
 * (`inc({ ... })`, and its children do the same), so the request path counts into plain numbers that the counter's
 * `collect` adds at scrape time; durations go through a histogram child bound to the labels once, which spares
 * the label object and the closure `Histogram.observe` allocates per call.
 */
interface BoundSeries {
  readonly duration: { observe (seconds: number): void }
  /** By status code. */
  readonly requests: Map<number, PendingCount>
}

export class GatewayMetrics {
  readonly registry = new Registry()
  readonly #requests: Counter<'model' | 'endpoint' | 'code' | 'protocol'>
  readonly #duration: Histogram<'model' | 'endpoint' | 'protocol'>
  /**
   * protocol → model → endpoint → series. Bounded by the fleet: the pipeline observes only models some server lists,
   * codes are HTTP's and the protocols two.
   */
  readonly #bound = new Map<string, Map<string, Map<string, BoundSeries>>>()
  /** Every count, in the order its series first appeared (the order prom-client would list them in). */
  readonly #counts: PendingCount[] = []
  readonly #retries: Counter<'model' | 'cause'>
  readonly #retriesDenied: Counter<'model' | 'reason'>
  readonly #ejections: Counter<'endpoint'>
  readonly #transitions: Counter<'endpoint' | 'model' | 'to'>
  readonly #queueWait: Histogram<'model' | 'outcome'>
  readonly #canaryRequests: Counter<'model' | 'side' | 'outcome'>
  readonly #canaryDuration: Histogram<'model' | 'side'>
  readonly #canaryRollbacks: Counter<'model' | 'trigger'>
  readonly #reloads: Counter<'result'>

  constructor (sources: MetricSources) {
    const registers = [this.registry]
    this.#requests = new Counter({
      name: 'flotilla_requests_total',
      help: 'Requests routed to a model, by model, answering endpoint ("" when none answered), HTTP status code (gRPC ' +
        'requests: the HTTP status their gRPC status was mapped from) and the protocol the client used (http, grpc)',
      labelNames: ['model', 'endpoint', 'code', 'protocol'],
      registers,
      collect: () => { this.#publishCounts() }
    })
    this.#duration = new Histogram({
      name: 'flotilla_request_duration_seconds',
      help: 'Time from receiving a model request to having its answer, in seconds, by model, endpoint and protocol',
      labelNames: ['model', 'endpoint', 'protocol'],
      buckets: [...DURATION_BUCKETS],
      registers
    })
    this.#retries = new Counter({
      name: 'flotilla_retries_total',
      help: 'Requests tried again on another endpoint, by model and cause (connect_failure, reset, timeout: past the per-try timeout, unavailable: a 503)',
      labelNames: ['model', 'cause'],
      registers
    })
    this.#retriesDenied = new Counter({
      name: 'flotilla_retries_denied_total',
      help: 'Retries not made although the failure was retriable, by model and reason (max_retries, budget)',
      labelNames: ['model', 'reason'],
      registers
    })
    this.#ejections = new Counter({
      name: 'flotilla_ejections_total',
      help: 'Times an endpoint was ejected by outlier detection',
      labelNames: ['endpoint'],
      registers
    })
    this.#transitions = new Counter({
      name: 'flotilla_health_transitions_total',
      help: 'Active health check transitions, by endpoint, model ("" for the server as a whole) and new state',
      labelNames: ['endpoint', 'model', 'to'],
      registers
    })
    this.#queueWait = new Histogram({
      name: 'flotilla_queue_wait_seconds',
      help: 'Time requests waited in the gateway queue for an endpoint under its in-flight limit, by model and ' +
        'outcome (admitted, timeout, full, aborted)',
      labelNames: ['model', 'outcome'],
      buckets: [...DURATION_BUCKETS],
      registers
    })
    this.#canaryRequests = new Counter({
      name: 'flotilla_canary_requests_total',
      help: 'Inference requests of a model with a canary, by model, side (baseline, canary) and outcome (ok, error: a 5xx or no answer)',
      labelNames: ['model', 'side', 'outcome'],
      registers
    })
    this.#canaryDuration = new Histogram({
      name: 'flotilla_canary_request_duration_seconds',
      help: 'Latency of inference requests of a model with a canary, by model and side, in seconds',
      labelNames: ['model', 'side'],
      buckets: [...DURATION_BUCKETS],
      registers
    })
    this.#canaryRollbacks = new Counter({
      name: 'flotilla_canary_rollbacks_total',
      help: 'Canaries set to 0%, by model and trigger (automatic: the canary did worse than the baseline; manual)',
      labelNames: ['model', 'trigger'],
      registers
    })
    new Gauge({
      name: 'flotilla_canary_percent',
      help: "The share of a model's requests (naming no version) that go to its canary, in percent",
      labelNames: ['model'],
      registers,
      collect () {
        this.reset()
        for (const c of sources.canaryPercents?.() ?? []) this.set({ model: c.model }, c.percent)
      }
    })
    this.#reloads = new Counter({
      name: 'flotilla_config_reloads_total',
      help: 'Fleet file reloads, by result (applied, rejected: the file was invalid and the running fleet was kept)',
      labelNames: ['result'],
      registers
    })
    new Gauge({
      name: 'flotilla_upstream_in_flight',
      help: 'Requests sent to an endpoint that have not finished yet',
      labelNames: ['endpoint'],
      registers,
      collect () {
        // Reset first so that endpoints that left the fleet stop being reported.
        this.reset()
        for (const endpoint of sources.endpoints()) this.set({ endpoint: endpoint.name }, endpoint.inFlight)
      }
    })
    new Gauge({
      name: 'flotilla_upstream_queue_depth',
      help: 'Requests waiting in an endpoint\'s own queue, as the worker last reported it (absent before a report)',
      labelNames: ['endpoint'],
      registers,
      collect () {
        this.reset()
        for (const e of sources.endpoints()) {
          if (Number.isFinite(e.queueDepthAt)) this.set({ endpoint: e.name }, e.queueDepth)
        }
      }
    })
    new Gauge({
      name: 'flotilla_endpoint_up',
      help: '1 when an endpoint passes its health checks and is not ejected, else 0',
      labelNames: ['endpoint'],
      registers,
      collect () {
        this.reset()
        for (const e of sources.endpoints()) {
          const h = sources.health(e)
          this.set({ endpoint: e.name }, h.healthy && !h.ejected ? 1 : 0)
        }
      }
    })
    new Gauge({
      name: 'flotilla_endpoint_ejected',
      help: '1 while outlier detection keeps an endpoint ejected, else 0',
      labelNames: ['endpoint'],
      registers,
      collect () {
        this.reset()
        for (const e of sources.endpoints()) this.set({ endpoint: e.name }, sources.health(e).ejected ? 1 : 0)
      }
    })
    new Gauge({
      name: 'flotilla_queue_depth',
      help: 'Requests waiting in the gateway queue for an endpoint under its in-flight limit',
      registers,
      collect () { this.set(sources.queueWaiting()) }
    })
    collectDefaultMetrics({ register: this.registry })
  }

  /**
   * Records one finished model request.
   *
   * @param endpoint the server that answered, or `''` when none did
   * @param seconds time from receiving the request to having its answer
   * @param protocol the client's protocol
   */
  observe (model: string, endpoint: string, code: number, seconds: number, protocol: 'http' | 'grpc' = 'http'): void {
    let byModel = this.#bound.get(protocol)
    if (byModel === undefined) {
      byModel = new Map()
      this.#bound.set(protocol, byModel)
    }
    let byEndpoint = byModel.get(model)
    if (byEndpoint === undefined) {
      byEndpoint = new Map()
      byModel.set(model, byEndpoint)
    }
    let series = byEndpoint.get(endpoint)
    if (series === undefined) {
      series = { duration: this.#duration.labels({ model, endpoint, protocol }), requests: new Map() }
      byEndpoint.set(endpoint, series)
    }
    let requests = series.requests.get(code)
    if (requests === undefined) {
      requests = { labels: { model, endpoint, code: String(code), protocol }, pending: 0 }
      series.requests.set(code, requests)
      this.#counts.push(requests)
    }
    requests.pending++
    series.duration.observe(seconds)
  }

  /** Adds the requests counted since the last read to the counter (its `collect`: every read runs it first). */
  #publishCounts (): void {
    for (const count of this.#counts) {
      if (count.pending === 0) continue
      this.#requests.inc(count.labels, count.pending)
      count.pending = 0
    }
  }

  retry (model: string, cause: string): void {
    this.#retries.inc({ model, cause })
  }

  retryDenied (model: string, reason: string): void {
    this.#retriesDenied.inc({ model, reason })
  }

  ejection (endpoint: string): void {
    this.#ejections.inc({ endpoint })
  }

  /** @param model `undefined`: the server as a whole */
  healthTransition (endpoint: string, model: string | undefined, healthy: boolean): void {
    this.#transitions.inc({ endpoint, model: model ?? '', to: healthy ? 'healthy' : 'unhealthy' })
  }

  queueWait (model: string, outcome: string, seconds: number): void {
    this.#queueWait.observe({ model, outcome }, seconds)
  }

  canaryRequest (model: string, side: string, ok: boolean, seconds: number): void {
    this.#canaryRequests.inc({ model, side, outcome: ok ? 'ok' : 'error' })
    this.#canaryDuration.observe({ model, side }, seconds)
  }

  canaryRollback (model: string, automatic: boolean): void {
    this.#canaryRollbacks.inc({ model, trigger: automatic ? 'automatic' : 'manual' })
  }

  reload (applied: boolean): void {
    this.#reloads.inc({ result: applied ? 'applied' : 'rejected' })
  }

  /** A plain HTTP listener for `GET /metrics` (and `/metrics/`), as Triton's metrics port answers. */
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
      this.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
        (err: unknown) => res.writeHead(500, { 'content-type': 'application/json' }).end(errorBody(String(err)))
      )
    })
  }
}
