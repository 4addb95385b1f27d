/**
 * What the proxy's parts exchange: a request to send upstream, a server's answer, the outcome of a forward, and how
 * a model's requests are routed. Transport-neutral on the client side: the HTTP and gRPC fronts both describe their
 * requests this way (the gRPC front as the binary HTTP request it becomes upstream).
 */
import { type IncomingHttpHeaders } from 'node:http'
import { type FlotillaError } from '../../common/errors.ts'
import { type Balancer } from '../balancer/types.ts'
import { type Endpoint } from '../fleet/types.ts'
import { type AbortSignalLike, type WaitResult } from './admission.ts'
import { type RetryCause, type RetryDenial } from './retry-policy.ts'

/** A client request, as it goes upstream: as the HTTP front received it, or as the gRPC front translated it. */
export interface ForwardRequest {
  readonly method: string
  /** Path and query exactly as received (Triton does no percent-decoding, so neither does the gateway). */
  readonly path: string
  readonly headers: IncomingHttpHeaders
  /** The raw body; `undefined` when there is none. */
  readonly body: Buffer | undefined
  /** Sent upstream as `x-request-id`. */
  readonly requestId: string
  /** Aborted when the client goes away; the upstream request is cancelled with it. An AbortSignal fits. */
  readonly signal?: AbortSignalLike
}

/** What a server answered, with hop-by-hop headers removed and `x-flotilla-endpoint` added. */
export interface UpstreamResponse {
  readonly statusCode: number
  readonly headers: Record<string, string | string[]>
  readonly body: Buffer
}

/** The outcome of a forward: the answer and who gave it, or the error to answer with and the last server tried. */
export type ForwardResult =
  | { readonly ok: true, readonly endpoint: Endpoint, readonly response: UpstreamResponse }
  | { readonly ok: false, readonly endpoint: Endpoint | undefined, readonly error: FlotillaError }

/** What the response cache did for a request (`x-flotilla-cache`); see `cache/response-cache.ts`. */
export type CacheResult = 'hit' | 'miss' | 'coalesced' | 'bypass'

/**
 * What the pipeline answers a model request with: a forward's result, or an answer no server gave just now (from
 * the response cache, or shared by an identical request in flight), with what the cache did when it looked.
 */
export type ModelResult = (ForwardResult | { readonly ok: true, readonly endpoint: undefined, readonly response: UpstreamResponse }) & {
  readonly cache?: CacheResult
}

/** How one model's requests are routed (`model-policy.ts` builds one per model from the fleet file). */
export interface RoutePolicy {
  readonly balancer: Balancer
  /** Deadline for the whole request, in ms: queueing, every attempt, backoff. */
  readonly timeoutMs: number
  /** Most retries per request. */
  readonly maxRetries: number
  /** The model's own fixed per-try timeout in ms (0: none); `undefined`: the fleet-wide rule (`attempt-timeout.ts`). */
  readonly perTryTimeoutMs?: number | undefined
}

/** Where a request is going: the model, what the balancer may know, and the model's policy. */
export interface ForwardTarget {
  readonly model: string
  /** The version from the URL (digits), or `undefined`. */
  readonly version: string | undefined
  /** The affinity key for `consistent_hash` (the configured header's value), if any. */
  readonly hashKey: string | undefined
  readonly policy: RoutePolicy
  /**
   * A server to send the request to when it is among the candidates, active and has room: a gRPC stream's pinned
   * worker. The balancer picks otherwise, and for every retry (the preferred server is then one that failed).
   */
  readonly preferred?: Endpoint | undefined
}

/** What the forwarder tells the rest of the gateway (metrics, outlier detection); every method optional. */
export interface ForwardObserver {
  /**
   * One exchange with one server: the status it answered (504 for a timeout), or `undefined` when no connection
   * could be made; the queue depth it reported, if it did; how long the exchange took.
   */
  attempt?: (endpoint: Endpoint, status: number | undefined, queueDepth: number | undefined, durationMs: number) => void
  retry?: (model: string, cause: RetryCause) => void
  retryDenied?: (model: string, reason: RetryDenial) => void
  /** A server answered with {@link WORKER_DRAINING_HEADER}: it is shutting down and wants no more requests. */
  draining?: (endpoint: Endpoint) => void
  /** A request that had to wait for a slot, and how the wait ended. */
  queued?: (model: string, waitedMs: number, outcome: WaitResult['outcome']) => void
}
