/**
 * The gateway's HTTP front: the KServe v2 HTTP API as a worker serves it (triton-behaviour.md section 1), on one
 * address for the whole fleet. Model requests go to a server that serves the model, picked by the configured
 * balancer; `POST /v2/repository/index` asks every server and merges the answers; health and server metadata are
 * the gateway's own. Bodies, unknown paths and wrong methods are handled exactly as a worker handles them
 * (`common/http-server.ts`), so clients cannot tell one from the other except by `x-flotilla-endpoint`.
 */
import { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { errorBody } from '../../common/errors.ts'
import { createKServeServer, route, type KServeServerOptions } from '../../common/http-server.ts'
import { type Logger } from '../../common/logger.ts'
import { type Fleet } from '../fleet/fleet.ts'
import { type DiscoveryStatus } from '../discovery/consul-discovery.ts'
import { type Endpoint, type EndpointSource } from '../fleet/types.ts'
import { type EndpointHealthView } from '../health/fleet-health.ts'
import { type Forwarder } from '../proxy/forward.ts'
import { CACHE_HEADER, ENDPOINT_HEADER, REQUEST_ID_HEADER, upstreamRequestHeaders } from '../proxy/headers.ts'
import { type ModelPolicies } from '../proxy/model-policy.ts'
import { modelPath, type ModelCall, type ModelPipeline } from '../proxy/pipeline.ts'
import { type ForwardRequest, type ModelResult, type UpstreamResponse } from '../proxy/types.ts'
import { ClientGone } from './client-gone.ts'
import { fleetView } from './fleet-view.ts'
import { gatewayMetadata } from './gateway-metadata.ts'
import { mergeIndexes, mergeStatistics, type FanOutAnswer } from './merge.ts'
import { type Readiness } from './readiness.ts'
import { type ResponseCache } from '../cache/response-cache.ts'

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
  /** The protocol-neutral path every model request takes. */
  pipeline: ModelPipeline
  forwarder: Forwarder
  policies: ModelPolicies
  /** Health as `GET /v2/fleet` shows it. */
  health: (endpoint: Endpoint) => EndpointHealthView
  logger: Logger
  /** Largest accepted request body in bytes (`gateway.max_body_bytes`). */
  bodyLimit: number
  /** Largest accepted request head in bytes (`gateway.max_header_bytes`). */
  headerLimit: number
  /** Header count and slow-client timeouts (`gateway.max_header_count`, `*_timeout_ms`); each defaults there. */
  limits?: Pick<KServeServerOptions, 'headerCountLimit' | 'headerTimeoutMs' | 'bodyTimeoutMs' | 'idleTimeoutMs'>
  /** Deadline for each server's answer to a fan-out call (the repository index). */
  fanOutTimeoutMs: number
  /** Milliseconds from a monotonic clock, for request durations. */
  now (): number
  /** Whether the gateway can serve (`readiness.ts`). */
  readiness (): Readiness
  /** The response cache, for `GET /v2/fleet`. */
  cache?: ResponseCache | undefined
  /** Where each endpoint came from, for `GET /v2/fleet`. */
  sourceOf: (endpoint: Endpoint) => EndpointSource
  /** Service discovery's state, for `GET /v2/fleet`, when the fleet file sets `discovery`. */
  discovery?: (() => DiscoveryStatus) | undefined
}

interface ModelParams { model: string, version?: string }

// A version segment is decimal digits, as Triton's route regex requires; anything else falls through to 404.
const VERSION = ':version(^\\d+$)'

/** Builds (does not start) the HTTP front. */
export function buildGatewayHttp (options: GatewayHttpOptions): FastifyInstance {
  const { fleet, forwarder, pipeline, policies, now, logger } = options
  const app = createKServeServer({
    logger,
    bodyLimit: options.bodyLimit,
    bodyLimitSetting: BODY_LIMIT_SETTING,
    headerLimit: options.headerLimit,
    headerLimitSetting: HEADER_LIMIT_SETTING,
    headerCountSetting: 'gateway.max_header_count in the fleet file',
    timeoutSettings: 'gateway.header_timeout_ms and gateway.body_timeout_ms in the fleet file',
    ...options.limits
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
  // Triton answers 400 with no body when not ready; the body here says which models cannot be served.
  route(app, 'GET', '/v2/health/ready', async (_request, reply) => {
    const readiness = options.readiness()
    return readiness.ready ? reply.code(200).send() : reply.code(400).type('application/json').send(errorBody(readiness.reason))
  })
  route(app, 'GET', '/v2', async (_request, reply) => reply.type('application/json').send(JSON.stringify(gatewayMetadata())))

  // Resolves once the answer is sent, with nothing: resolving with `reply` (a thenable) would cost fastify three more
  // microtasks per request to adopt it.
  const proxyModel = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const result = await pipeline.run(new HttpModelCall(request, reply))
    sendResult(request, reply, result)
  }
  for (const prefix of ['/v2/models/:model', `/v2/models/:model/versions/${VERSION}`]) {
    route(app, 'GET', prefix, proxyModel)
    route(app, 'GET', `${prefix}/ready`, proxyModel)
    route(app, 'GET', `${prefix}/config`, proxyModel)
    route(app, 'POST', `${prefix}/infer`, proxyModel)
  }

  /** Asks each of `endpoints` the same request, each with its own deadline, and collects every answer. */
  const fanOut = async (request: FastifyRequest, reply: FastifyReply, endpoints: readonly Endpoint[]): Promise<FanOutAnswer[]> => {
    const forwarded = forwardRequestOf(request, reply)
    const headers = upstreamRequestHeaders(forwarded.headers, forwarded.requestId)
    return Promise.all(endpoints.map((e) => forwarder.sendTo(e, forwarded, headers, options.fanOutTimeoutMs)))
  }

  route(app, 'POST', '/v2/repository/index', async (request, reply) => {
    const { endpoints } = pipeline.fanOutTargets()
    sendMerged(request, reply, mergeIndexes(await fanOut(request, reply, endpoints)))
  })

  // Statistics: each server's for the models it serves, merged (counts and times summed: see merge.ts).
  route(app, 'GET', '/v2/models/stats', async (request, reply) => {
    const { endpoints } = pipeline.fanOutTargets()
    sendMerged(request, reply, mergeStatistics(await fanOut(request, reply, endpoints)))
  })
  for (const url of ['/v2/models/:model/stats', `/v2/models/:model/versions/${VERSION}/stats`]) {
    route(app, 'GET', url, async (request, reply) => {
      const { model, version } = request.params as ModelParams
      const { endpoints, error } = pipeline.fanOutTargets(model, version)
      if (error !== undefined) throw error
      sendMerged(request, reply, mergeStatistics(await fanOut(request, reply, endpoints)))
    })
  }

  route(app, 'GET', '/v2/fleet', async (_request, reply) => reply.type('application/json').send(JSON.stringify(fleetView({
    fleet,
    health: options.health,
    policies,
    queueWaiting: () => forwarder.admission.waiting,
    requestsInProgress: () => forwarder.budget.requests,
    retriesInProgress: () => forwarder.budget.retries,
    now,
    sourceOf: options.sourceOf,
    discovery: options.discovery,
    cache: options.cache === undefined ? undefined : (model) => options.cache!.modelView(model),
    perTry: (model) => {
      const timeouts = forwarder.attemptTimeouts
      return { timeoutMs: timeouts.timeoutMs(model, policies.for(model).perTryTimeoutMs), p99Ms: timeouts.latencyOf(model).p99() }
    }
  }))))

  return app
}

/** A model route's request, as the pipeline sees it. */
class HttpModelCall implements ModelCall {
  readonly model: string
  readonly version: string | undefined
  readonly inference: boolean
  readonly protocol = 'http'
  readonly #request: FastifyRequest
  readonly #reply: FastifyReply

  constructor (request: FastifyRequest, reply: FastifyReply) {
    const params = request.params as ModelParams
    this.model = params.model
    this.version = params.version
    // POST is infer on the model routes.
    this.inference = request.method === 'POST'
    this.#request = request
    this.#reply = reply
  }

  header (name: string): string | undefined {
    return headerValue(this.#request.headers[name])
  }

  upstream (version: string | undefined): ForwardRequest {
    const request = this.#request
    if (version === undefined) return forwardRequestOf(request, this.#reply)
    // A canary's split by versions: the same call, on the chosen version's path, query kept.
    const path = modelPath(this.model, version, '/infer') + queryOf(request.url)
    return forwardRequestOf(request, this.#reply, path)
  }
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

/** A header's value as one string; a repeated header counts by its first value. */
function headerValue (value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value
}

function sendUpstream (reply: FastifyReply, response: UpstreamResponse): FastifyReply {
  reply.code(response.statusCode).headers(response.headers)
  // An empty Buffer would be labelled application/octet-stream by fastify; an empty answer (ready) has no type.
  return response.body.length === 0 ? reply.send() : reply.send(response.body)
}

function sendResult (request: FastifyRequest, reply: FastifyReply, result: ModelResult): FastifyReply {
  if (result.cache !== undefined) reply.header(CACHE_HEADER, result.cache)
  if (result.ok) return sendUpstream(reply, result.response)
  if (result.endpoint !== undefined) reply.header(ENDPOINT_HEADER, result.endpoint.name)
  // An upstream failure is the fleet's problem, not the gateway's: warn, not error. A client's mistake (a model no
  // server serves, a client that left) is not a problem at all.
  if (result.error.statusCode >= 500) request.log.warn({ code: result.error.code, endpoint: result.endpoint?.name }, result.error.message)
  if (result.error.statusCode === 503) reply.header('retry-after', String(RETRY_AFTER_SECONDS))
  return reply.code(result.error.statusCode).type('application/json').send(errorBody(result.error.message))
}

/** The merged answer of a fan-out, or the error to answer with. */
function sendMerged (request: FastifyRequest, reply: FastifyReply, merged: ReturnType<typeof mergeIndexes>): FastifyReply {
  if ('body' in merged) {
    return reply.code(200).header(ENDPOINT_HEADER, merged.answered.join(', ')).type('application/json').send(merged.body)
  }
  if ('passOn' in merged) return sendUpstream(reply, merged.passOn)
  return sendResult(request, reply, { ok: false, endpoint: undefined, error: merged.error })
}
