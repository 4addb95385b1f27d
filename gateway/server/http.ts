/**
 * The gateway's HTTP front: the KServe v2 HTTP API as a worker serves it (triton-behaviour.md section 1), on one
 * address for the whole fleet. Model requests go to a server that serves the model, picked by the configured
 * balancer; `POST /v2/repository/index` asks every server and merges the answers; health and server metadata are
 * the gateway's own. Bodies, unknown paths and wrong methods are handled exactly as a worker handles them
 * (`common/http-server.ts`), so clients cannot tell one from the other except by `x-flotilla-endpoint`.
 */
import { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { createError, errorBody, type FlotillaError } from '../../common/errors.ts'
import { createKServeServer, route } from '../../common/http-server.ts'
import { type Logger } from '../../common/logger.ts'
import { FLOTILLA_VERSION } from '../../common/package-root.ts'
import { type CanaryRoute, type Canaries } from '../canary/canaries.ts'
import { type Fleet } from '../fleet/fleet.ts'
import { type Endpoint } from '../fleet/types.ts'
import { type EndpointHealthView } from '../health/fleet-health.ts'
import { ENDPOINT_HEADER, REQUEST_ID_HEADER, upstreamRequestHeaders, type ForwardRequest, type ForwardResult, type Forwarder, type UpstreamResponse } from '../proxy/forward.ts'
import { type AbortSignalLike } from '../proxy/admission.ts'
import { type ModelPolicies } from '../proxy/model-policy.ts'
import { fleetView } from './fleet-view.ts'
import { type GatewayMetrics } from './metrics.ts'

/**
 * What `GET /v2` reports: what works end to end through the gateway, which is no more than the workers support.
 * `model_repository` is left out until load/unload are routed (only the index is).
 */
export const GATEWAY_EXTENSIONS: readonly string[] = ['model_configuration']

/** Named in the 413 and 431 messages: where to raise the limits. */
const BODY_LIMIT_SETTING = 'gateway.max_body_bytes in the fleet file'
const HEADER_LIMIT_SETTING = 'gateway.max_header_bytes in the fleet file'

/**
 * Seconds a client is told to wait (`Retry-After`) when the gateway itself answers 503: long enough for an
 * ejection's first health check or a queue to move, short enough not to idle a client that could be served.
 */
export const RETRY_AFTER_SECONDS = 1

/** What the HTTP front routes with. */
export interface GatewayHttpOptions {
  fleet: Fleet
  forwarder: Forwarder
  policies: ModelPolicies
  /** Per-model canary splits (checked per inference request naming no version). */
  canaries: Canaries
  /** Health as `GET /v2/fleet` shows it. */
  health: (endpoint: Endpoint) => EndpointHealthView
  metrics: GatewayMetrics
  logger: Logger
  /** Largest accepted request body in bytes (`gateway.max_body_bytes`). */
  bodyLimit: number
  /** Largest accepted request head in bytes (`gateway.max_header_bytes`). */
  headerLimit: number
  /** Deadline for each server's answer to a fan-out call (the repository index). */
  fanOutTimeoutMs: number
  /** Milliseconds from a monotonic clock, for request durations. */
  now (): number
}

interface ModelParams { model: string, version?: string }

// A version segment is decimal digits, as Triton's route regex requires; anything else falls through to 404.
const VERSION = ':version(^\\d+$)'

/** Builds (does not start) the HTTP front. */
export function buildGatewayHttp (options: GatewayHttpOptions): FastifyInstance {
  const { fleet, forwarder, policies, canaries, metrics, now, logger } = options
  const app = createKServeServer({
    logger,
    bodyLimit: options.bodyLimit,
    bodyLimitSetting: BODY_LIMIT_SETTING,
    headerLimit: options.headerLimit,
    headerLimitSetting: HEADER_LIMIT_SETTING
  })

  // Set first so that every answer carries the id, errors included; a proxied answer repeats the same value. Hooks
  // run on every request, so they are callback hooks (an async hook costs a promise and a microtask per request).
  app.addHook('onRequest', (request, reply, done) => {
    reply.header(REQUEST_ID_HEADER, request.id)
    done()
  })
  // The per-request debug line. The level is the one the gateway starts with (nothing changes it at run time), so
  // with debug off (the usual case in production) the hook is not there at all, rather than checking per request.
  if (logger.isLevelEnabled('debug')) {
    app.addHook('onResponse', (request, reply, done) => {
      const params = request.params as Partial<ModelParams> | undefined
      request.log.debug({
        method: request.method,
        url: request.url,
        model: params?.model,
        endpoint: reply.getHeader(ENDPOINT_HEADER),
        status: reply.statusCode,
        durationMs: reply.elapsedTime
      }, 'request')
      done()
    })
  }

  route(app, 'GET', '/v2/health/live', async (_request, reply) => reply.code(200).send())
  // Ready when there is somewhere to send requests; per-server health arrives with the health checker.
  route(app, 'GET', '/v2/health/ready', async (_request, reply) => reply.code(fleet.endpoints.length > 0 ? 200 : 400).send())
  route(app, 'GET', '/v2', async (_request, reply) => reply.type('application/json').send(JSON.stringify({
    name: 'flotilla',
    version: FLOTILLA_VERSION,
    extensions: GATEWAY_EXTENSIONS
  })))

  // Resolves once the answer is sent, with nothing: resolving with `reply` (a thenable) would cost fastify three more
  // microtasks per request to adopt it.
  const proxyModel = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const { model, version } = request.params as ModelParams
    let candidates = fleet.endpointsServing(model, version)
    if (candidates.length === 0) {
      const notServed = notServedError(fleet, model, version)
      if (notServed !== undefined) throw notServed
    }
    const started = now()
    const policy = policies.for(model)
    // Only inference naming no version is split (POST is infer on these routes): see canary/canaries.ts.
    const canary = version === undefined && request.method === 'POST' && candidates.length > 0 ? canaries.for(model) : undefined
    let route: CanaryRoute | undefined
    if (canary !== undefined) {
      route = canary.route(fleet, candidates, (name) => headerValue(request.headers[name]), queryOf(request.url))
      candidates = route.candidates
    }
    let result: ForwardResult
    if (candidates.length === 0) {
      // Served, but every server is failing its checks or ejected, and panic is off (or the version's servers are).
      result = { ok: false, endpoint: undefined, error: noHealthyError(fleet, model) }
    } else {
      const hashKey = policy.hashHeader === undefined ? undefined : headerValue(request.headers[policy.hashHeader])
      result = await forwarder.forward(candidates, { model, version, hashKey, policy }, forwardRequestOf(request, reply, route?.path))
    }
    const code = result.ok ? result.response.statusCode : result.error.statusCode
    const seconds = (now() - started) / 1000
    metrics.observe(model, result.endpoint?.name ?? '', code, seconds)
    // A client that left (499) says nothing about either side.
    if (canary !== undefined && route !== undefined && code !== 499) {
      // A request the chosen side could not take counts against that side, whatever the other side made of it.
      const side = route.unavailable ?? route.side
      const ok = route.unavailable === undefined && code < 500
      canary.canary.record(side, ok, seconds * 1000)
      metrics.canaryRequest(model, side, ok, seconds)
    }
    sendResult(request, reply, result)
  }
  for (const prefix of ['/v2/models/:model', `/v2/models/:model/versions/${VERSION}`]) {
    route(app, 'GET', prefix, proxyModel)
    route(app, 'GET', `${prefix}/ready`, proxyModel)
    route(app, 'GET', `${prefix}/config`, proxyModel)
    route(app, 'POST', `${prefix}/infer`, proxyModel)
  }

  route(app, 'POST', '/v2/repository/index', async (request, reply) => {
    const endpoints = fleet.endpoints.filter((e) => e.state === 'active')
    const forwarded = forwardRequestOf(request, reply)
    const headers = upstreamRequestHeaders(forwarded.headers, forwarded.requestId)
    const results = await Promise.all(endpoints.map((e) => forwarder.sendTo(e, forwarded, headers, options.fanOutTimeoutMs)))
    return sendMergedIndex(request, reply, results)
  })

  route(app, 'GET', '/v2/fleet', async (_request, reply) => reply.type('application/json').send(JSON.stringify(fleetView({
    fleet,
    health: options.health,
    policies,
    queueWaiting: () => forwarder.admission.waiting,
    requestsInProgress: () => forwarder.budget.requests,
    retriesInProgress: () => forwarder.budget.retries,
    now
  }))))

  return app
}

/** The query string of a request URL, with its `?`; `''` when there is none. */
function queryOf (url: string): string {
  const i = url.indexOf('?')
  return i < 0 ? '' : url.slice(i)
}

/** @param path sent upstream instead of the request's own (a canary's version split names the version) */
function forwardRequestOf (request: FastifyRequest, reply: FastifyReply, path?: string): ForwardRequest {
  const gone = new ClientGone()
  // The response closing before it was written means the client went away: cancel the upstream request with it.
  const res = reply.raw
  res.on('close', () => { if (!res.writableFinished) gone.abort() })
  return {
    method: request.method,
    path: path ?? request.url,
    headers: request.headers,
    body: Buffer.isBuffer(request.body) ? request.body : undefined,
    requestId: request.id,
    signal: gone
  }
}

/**
 * The client going away, as the forwarder listens for it ({@link AbortSignalLike}, with an AbortSignal's
 * semantics: listeners run once, in order, and one removed meanwhile does not run). One per request: an
 * AbortController's signal is an EventTarget, and building one and adding and removing its listeners cost several
 * µs per request.
 */
class ClientGone implements AbortSignalLike {
  aborted = false
  /** Usually one at a time; a fan-out (the repository index) has one per server. Removed ones are `null`. */
  #listeners: Array<(() => void) | null> = []

  addEventListener (_type: 'abort', listener: () => void): void {
    if (!this.aborted) this.#listeners.push(listener)
  }

  removeEventListener (_type: 'abort', listener: () => void): void {
    const listeners = this.#listeners
    const i = listeners.indexOf(listener)
    if (i === -1) return
    if (this.aborted) listeners[i] = null
    else listeners.splice(i, 1)
  }

  abort (): void {
    if (this.aborted) return
    this.aborted = true
    const listeners = this.#listeners
    for (let i = 0; i < listeners.length; i++) {
      const listener = listeners[i]
      if (listener === null || listener === undefined) continue
      listeners[i] = null
      listener()
    }
    this.#listeners = []
  }
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

/** A header's value as one string; a repeated header counts by its first value. */
function headerValue (value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value
}

function sendUpstream (reply: FastifyReply, response: UpstreamResponse): FastifyReply {
  return reply.code(response.statusCode).headers(response.headers).send(response.body)
}

function sendResult (request: FastifyRequest, reply: FastifyReply, result: ForwardResult): FastifyReply {
  if (result.ok) return sendUpstream(reply, result.response)
  if (result.endpoint !== undefined) reply.header(ENDPOINT_HEADER, result.endpoint.name)
  // An upstream failure is the fleet's problem, not the gateway's: warn, not error.
  request.log.warn({ code: result.error.code, endpoint: result.endpoint?.name }, result.error.message)
  if (result.error.statusCode === 503) reply.header('retry-after', String(RETRY_AFTER_SECONDS))
  return reply.code(result.error.statusCode).type('application/json').send(errorBody(result.error.message))
}

interface IndexEntry { name: string, version?: string, state?: string, reason?: string }

function isIndexEntry (value: unknown): value is IndexEntry {
  return typeof value === 'object' && value !== null && typeof (value as { name?: unknown }).name === 'string'
}

/**
 * One index for the fleet: the union of every server's index, one entry per model and version (a READY entry
 * wins over any other state, since the model can be served), sorted by name then version as Triton sorts it.
 * Servers that cannot be reached or answer with something other than an index are left out; if none answered
 * with an index, the first error answer is passed on, else a 502.
 */
function sendMergedIndex (request: FastifyRequest, reply: FastifyReply, results: readonly ForwardResult[]): FastifyReply {
  const merged = new Map<string, IndexEntry>()
  const answered: string[] = []
  let firstAnswer: UpstreamResponse | undefined
  const failures: string[] = []
  for (const result of results) {
    if (!result.ok) {
      failures.push(result.error.message)
      continue
    }
    let entries: unknown
    try {
      entries = result.response.statusCode === 200 ? JSON.parse(result.response.body.toString('utf8')) : undefined
    } catch {
      entries = undefined
    }
    if (!Array.isArray(entries)) {
      request.log.warn({ endpoint: result.endpoint.name, status: result.response.statusCode },
        'repository index answer left out of the merged index')
      firstAnswer ??= result.response
      continue
    }
    answered.push(result.endpoint.name)
    for (const entry of entries) {
      if (!isIndexEntry(entry)) continue
      const key = `${entry.name}\u0000${entry.version ?? ''}`
      const seen = merged.get(key)
      if (seen === undefined || (seen.state !== 'READY' && entry.state === 'READY')) merged.set(key, entry)
    }
  }
  if (answered.length > 0) {
    const list = [...merged.values()].sort(compareIndexEntries)
    return reply.code(200).header(ENDPOINT_HEADER, answered.join(', ')).type('application/json').send(JSON.stringify(list))
  }
  // Every server answered, and none with an index: pass on what the first one said (a 400 for a bad body, say).
  if (firstAnswer !== undefined) return sendUpstream(reply, firstAnswer)
  const error = createError('GW_ERR_INDEX_UNAVAILABLE',
    results.map((r) => r.endpoint?.name ?? '?').join(', ') || 'none', failures.length > 0 ? `: ${failures.join('; ')}` : '')
  return sendResult(request, reply, { ok: false, endpoint: undefined, error })
}

function compareIndexEntries (a: IndexEntry, b: IndexEntry): number {
  if (a.name !== b.name) return a.name < b.name ? -1 : 1
  const va = a.version === undefined ? -1 : Number(a.version)
  const vb = b.version === undefined ? -1 : Number(b.version)
  return va - vb
}
