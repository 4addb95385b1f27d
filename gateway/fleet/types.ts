/**
 * What the rest of the gateway sees of one upstream server. Balancers, the proxy and metrics depend on this file
 * only, never on how the fleet is built (fleet file today; Consul and the admin API later).
 */

/**
 * Lifecycle state of an endpoint, as operators set it (health and ejection are separate: see `health/`).
 * `joining`: added at run time, waiting for its first passing health checks; `active` takes traffic; `draining`
 * takes no new requests while those in flight finish; `drained` takes none and has none left (or its drain timed
 * out, or it left the fleet). The fleet keeps every endpoint that is not `active` out of the candidate lists it
 * hands out (and out of the panic arithmetic, as Envoy leaves out hosts it has not checked yet), so no request path
 * ever checks the state, except the proxy between the attempts of one request (an endpoint may start draining
 * while a request waits to retry).
 */
export type EndpointState = 'joining' | 'active' | 'draining' | 'drained'

/**
 * One upstream server as the gateway routes to it.
 *
 * Ownership: the configuration fields are fixed for the life of the object (a changed host or port means a new
 * endpoint), except the weights and the in-flight limit. `state`, `weight`, `configuredWeight` and `maxInFlight`
 * are written only by the fleet. `inFlight` is written only by the proxy (`proxy/admission.ts`), which
 * increments it before sending a request and decrements it when the exchange is over. `queueDepth` and `queueDepthAt` are written
 * together by whoever hears the worker report its queue (the proxy from responses, the health checker from its
 * probes). Balancers may read all of these, never write.
 */
export interface Endpoint {
  /** Unique within the fleet; sent back to clients in `x-flotilla-endpoint` and used as a metric label. */
  readonly name: string
  readonly host: string
  readonly port: number
  /** `http://host:port` (IPv6 hosts bracketed), computed once so the proxy never builds it per request. */
  readonly origin: string
  /** The models this server serves, as named in the fleet file. */
  readonly models: readonly string[]
  /** The model versions this server serves; `undefined` means any version. */
  readonly versions: readonly number[] | undefined
  /**
   * Relative share of traffic for weighted strategies (0 = none): the effective weight, which is
   * {@link Endpoint.configuredWeight} except while slow start ramps a newly healthy endpoint up to it.
   */
  weight: number
  /** The weight the fleet file or the admin API set. */
  configuredWeight: number
  readonly labels: Readonly<Record<string, string>>
  /**
   * Most requests this gateway sends it at once (HAProxy's `maxconn`); 0 means no limit. See `proxy/admission.ts`.
   * Written only by the fleet (a reload may change it in place).
   */
  maxInFlight: number
  state: EndpointState
  /** Requests sent to this endpoint that have not finished yet. */
  inFlight: number
  /**
   * The number of requests waiting in the worker's own queue (not yet executing), as the worker last reported it.
   * It counts requests from every gateway replica, and none still on the wire. Meaningful only together with
   * {@link Endpoint.queueDepthAt}; 0 until the first report.
   */
  queueDepth: number
  /**
   * When {@link Endpoint.queueDepth} was reported, in milliseconds of the gateway's monotonic clock (the same clock
   * as the balancer's `now`, `performance.now()` in production); `-Infinity` (or `NaN`) when it never was. Readers
   * judge staleness from it, so a writer sets both fields at once.
   */
  queueDepthAt: number
  /**
   * Recent latency: an exponentially weighted mean of the last attempts' durations in milliseconds (each new one
   * weighs {@link LATENCY_EWMA_WEIGHT}), `NaN` before the first. Written by the proxy; shown by `GET /v2/fleet`.
   */
  latencyMs: number
}

/** Where an endpoint came from: the fleet file, the admin API, Consul (`discovery.consul`). */
export type EndpointSource = 'file' | 'admin' | 'consul'

/** The weight of the newest sample in {@link Endpoint.latencyMs}: about the last 10 requests count. */
export const LATENCY_EWMA_WEIGHT = 0.1
