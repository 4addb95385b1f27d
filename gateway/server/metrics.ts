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

export class GatewayMetrics {
  readonly registry = new Registry()
  readonly #requests: Counter<'model' | 'endpoint' | 'code'>
  readonly #duration: Histogram<'model' | 'endpoint'>
  /** Set from the endpoints at scrape time only. */
  readonly inFlight: Gauge<'endpoint'>

  /**
   * @param endpoints read at scrape time for the in-flight gauge, so the request path pays nothing for it
   */
  constructor (endpoints: () => readonly Endpoint[]) {
    const registers = [this.registry]
    this.#requests = new Counter({
      name: 'flotilla_requests_total',
      help: 'Requests routed to a model, by model, answering endpoint ("" when none answered) and HTTP status code',
      labelNames: ['model', 'endpoint', 'code'],
      registers
    })
    this.#duration = new Histogram({
      name: 'flotilla_request_duration_seconds',
      help: 'Time from receiving a model request to having its answer, in seconds, by model and endpoint',
      labelNames: ['model', 'endpoint'],
      buckets: [...DURATION_BUCKETS],
      registers
    })
    this.inFlight = new Gauge({
      name: 'flotilla_upstream_in_flight',
      help: 'Requests sent to an endpoint that have not finished yet',
      labelNames: ['endpoint'],
      registers,
      collect () {
        // Reset first so that endpoints that left the fleet stop being reported.
        this.reset()
        for (const endpoint of endpoints()) this.set({ endpoint: endpoint.name }, endpoint.inFlight)
      }
    })
    collectDefaultMetrics({ register: this.registry })
  }

  /**
   * Records one finished model request.
   *
   * @param endpoint the server that answered, or `''` when none did
   * @param seconds time from receiving the request to having its answer
   */
  observe (model: string, endpoint: string, code: number, seconds: number): void {
    this.#requests.inc({ model, endpoint, code: String(code) })
    this.#duration.observe({ model, endpoint }, seconds)
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
