/**
 * The gateway's one path for a request to a model, whichever front it came through (HTTP or gRPC): what every such
 * request is decided by, in order.
 *
 * 1. Served at all? A model (or version) no server lists is a 404 naming what the fleet serves; nothing is counted,
 *    since model names from clients are unbounded and metrics labels must not be.
 * 2. Canary: an inference naming no version is split between the model's baseline and canary (by version or by
 *    servers, `canary/`), which narrows the candidates and may name the version to send it to.
 * 3. Candidates: the fleet's precomputed list for the model and version (healthy, not ejected, not draining). None
 *    left: 503 `no healthy server`.
 * 4. Policy: the model's balancer, deadline and retry limit, and the consistent-hash key from its header.
 * 5. Cache (`cache/response-cache.ts`): an inference for a cached model is answered from the response cache, or
 *    waits for an identical one in flight, when it can; what goes upstream is stored for the next.
 * 6. Forward (`forward.ts`): pick, admission queue, attempts, retries within the budget, outlier detection fed.
 * 7. Account: `flotilla_requests_total` / `_request_duration_seconds` by model, endpoint, code and protocol; the
 *    canary's per-side outcome (a request the chosen side could not take counts against that side).
 *
 * The fronts only translate: a request into a {@link ModelCall}, the {@link ForwardResult} into their own answer.
 */
import { createError, type FlotillaError } from '../../common/errors.ts'
import { type CanaryRoute, type Canaries } from '../canary/canaries.ts'
import { type Fleet } from '../fleet/fleet.ts'
import { type Endpoint } from '../fleet/types.ts'
import { type Forwarder } from './forward.ts'
import { type ModelPolicies } from './model-policy.ts'
import { type ResponseCache } from '../cache/response-cache.ts'
import { type ForwardRequest, type ForwardResult, type ModelResult } from './types.ts'

/** The client-facing protocol a request came by (the `protocol` label of the request metrics). */
export type FrontProtocol = 'http' | 'grpc'

/**
 * One request for a model, as a front describes it to the pipeline. Built per request; the pipeline calls
 * {@link ModelCall.upstream} once, after the canary decided where the request goes.
 */
export interface ModelCall {
  readonly model: string
  /** The version the client named (decimal digits), or `undefined` for the model's latest. */
  readonly version: string | undefined
  /** An inference (a canary may split it), rather than a read of the model (metadata, readiness, config, stats). */
  readonly inference: boolean
  readonly protocol: FrontProtocol
  /**
   * A server to send it to while it is a candidate with room (a gRPC stream's pinned worker); see
   * `ForwardTarget.preferred`.
   */
  readonly preferred?: Endpoint | undefined
  /** One of the client's headers (gRPC: metadata) by lower-case name: canary force/sticky headers, the hash key. */
  header (name: string): string | undefined
  /**
   * The request to send upstream. `version` is set when a canary split by versions sends the request to a version
   * the client did not name; `undefined` sends it as the client addressed it.
   */
  upstream (version: string | undefined): ForwardRequest
}

/** What the pipeline records; the gateway's metrics implement it. */
export interface PipelineMetrics {
  /** One finished request: `endpoint` '' when none answered, `code` the HTTP status it ended with. */
  observe (model: string, endpoint: string, code: number, seconds: number, protocol: FrontProtocol): void
  canaryRequest (model: string, side: string, ok: boolean, seconds: number): void
}

export interface ModelPipelineOptions {
  readonly fleet: Fleet
  readonly forwarder: Forwarder
  readonly policies: ModelPolicies
  readonly canaries: Canaries
  readonly metrics: PipelineMetrics
  /** Milliseconds from a monotonic clock, for request durations. */
  readonly now: () => number
  /** The response cache, when the gateway has one. */
  readonly cache?: ResponseCache | undefined
}

export class ModelPipeline {
  readonly #fleet: Fleet
  readonly #forwarder: Forwarder
  readonly #policies: ModelPolicies
  readonly #canaries: Canaries
  readonly #metrics: PipelineMetrics
  readonly #now: () => number
  readonly #cache: ResponseCache | undefined

  constructor (options: ModelPipelineOptions) {
    this.#fleet = options.fleet
    this.#forwarder = options.forwarder
    this.#policies = options.policies
    this.#canaries = options.canaries
    this.#metrics = options.metrics
    this.#now = options.now
    this.#cache = options.cache
  }

  /** Routes and forwards one request; never rejects: failures come back as the error to answer with. */
  async run (call: ModelCall): Promise<ModelResult> {
    const fleet = this.#fleet
    const { model, version } = call
    let candidates = fleet.endpointsServing(model, version)
    if (candidates.length === 0) {
      const notServed = notServedError(fleet, model, version)
      if (notServed !== undefined) return { ok: false, endpoint: undefined, error: notServed }
    }
    const started = this.#now()
    const policy = this.#policies.for(model)
    // Only inference naming no version is split (see canary/canaries.ts).
    const canary = version === undefined && call.inference && candidates.length > 0 ? this.#canaries.for(model) : undefined
    let route: CanaryRoute | undefined
    if (canary !== undefined) {
      route = canary.route(fleet, candidates, (name) => call.header(name))
      candidates = route.candidates
    }
    let result: ModelResult
    if (candidates.length === 0) {
      // Served, but every server is failing its checks or ejected, and panic is off (or the version's servers are).
      result = { ok: false, endpoint: undefined, error: noHealthyError(fleet, model) }
    } else {
      const hashKey = policy.hashHeader === undefined ? undefined : call.header(policy.hashHeader)
      const request = call.upstream(route?.version)
      const forward = (): Promise<ForwardResult> =>
        this.#forwarder.forward(candidates, { model, version, hashKey, policy, preferred: call.preferred }, request)
      const cache = this.#cache
      result = cache === undefined || !call.inference
        ? await forward()
        // Keyed by where the request goes: the version it names, else the canary side it was routed to.
        : await cache.serve({ model, target: version ?? route?.version ?? route?.side, request, cacheControl: call.header('cache-control') }, forward)
    }
    const code = result.ok ? result.response.statusCode : result.error.statusCode
    const seconds = (this.#now() - started) / 1000
    this.#metrics.observe(model, result.endpoint?.name ?? '', code, seconds, call.protocol)
    // A client that left (499) says nothing about either side.
    if (canary !== undefined && route !== undefined && code !== 499) {
      // A request the chosen side could not take counts against that side, whatever the other side made of it.
      const side = route.unavailable ?? route.side
      const ok = route.unavailable === undefined && code < 500
      canary.canary.record(side, ok, seconds * 1000)
      this.#metrics.canaryRequest(model, side, ok, seconds)
    }
    return result
  }

  /**
   * The servers a fan-out call asks (the repository index, server-wide statistics): every active one, or those
   * serving `model` (and `version`) for a per-model call. Empty with an error when the model is not served.
   */
  fanOutTargets (model?: string, version?: string): { readonly endpoints: readonly Endpoint[], readonly error?: FlotillaError } {
    const fleet = this.#fleet
    if (model === undefined) return { endpoints: fleet.endpoints.filter((e) => e.state === 'active') }
    const notServed = notServedError(fleet, model, version)
    if (notServed !== undefined) return { endpoints: [], error: notServed }
    const wanted = version === undefined ? undefined : Number(version)
    return {
      endpoints: fleet.endpoints.filter((e) => e.state === 'active' && e.models.includes(model) &&
        (wanted === undefined || e.versions === undefined || e.versions.includes(wanted)))
    }
  }
}

/**
 * The path of a model route upstream, as the HTTP API spells it: `/v2/models/<model>[/versions/<version>]<suffix>`
 * (`suffix` '' for metadata, or '/infer', '/ready', '/config', '/stats').
 */
export function modelPath (model: string, version: string | undefined, suffix: string): string {
  return `/v2/models/${encodeURIComponent(model)}${version === undefined ? '' : `/versions/${version}`}${suffix}`
}

/** The 404 for a model (or model version) no server lists, or `undefined` when some server does list it. */
function notServedError (fleet: Fleet, model: string, version: string | undefined): FlotillaError | undefined {
  if (!fleet.servesModel(model)) {
    return createError('GW_ERR_MODEL_NOT_SERVED', model, fleet.models.length > 0 ? fleet.models.join(', ') : 'none')
  }
  if (version === undefined) return undefined
  const versions = fleet.versionsOf(model)
  if (versions === undefined || versions.includes(Number(version))) return undefined
  // Triton's wording for an unknown version, with what the fleet does serve.
  return createError('GW_ERR_MODEL_VERSION_NOT_SERVED', model, version, versions.join(', '))
}

/** The 503 for a model that is served but has no usable server at this moment. */
function noHealthyError (fleet: Fleet, model: string): FlotillaError {
  const count = fleet.endpoints.filter((e) => e.models.includes(model)).length
  return createError('GW_ERR_NO_HEALTHY_UPSTREAM', model, count === 1 ? 'its 1 server is' : `all ${count} of its servers are`)
}
