/**
 * The admin API (contract in `api.ts`): list, add, drain, undrain, remove and reweigh endpoints, set and clear
 * canaries, show the effective config. Its own listener, 127.0.0.1:9000 by default, so it never shares a port
 * (or a queue) with traffic, and so that binding it elsewhere is a deliberate act: then it needs a token.
 *
 * Every call goes through, in order: the cross-site checks (`admin-guard.ts`: no `Origin`, no `Sec-Fetch-Site`
 * but `none`, a `Host` that is an address, localhost or a listed name; 403), the token when one is configured
 * (on loopback too: 401, 403), the route (404, 405), and for a POST, PUT or DELETE `Content-Type:
 * application/json` (415). Names in paths are checked against the server-name rule (400) before any lookup, and
 * a path segment longer than the router takes (fastify's `maxParamLength`, which it would answer with a 414 before
 * any hook) is caught by a wildcard route instead: a 400 naming the rule, after the checks above.
 *
 * Authentication is a bearer token compared in constant time: both sides are hashed (SHA-256) first, so the
 * comparison neither leaks the token's length nor depends on where the first differing byte is.
 */
import { createHash, timingSafeEqual } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { type FastifyInstance, type FastifyReply, type FastifyRequest, type HTTPMethods } from 'fastify'
import { request as undiciRequest } from 'undici'
import { createError, type FlotillaError } from '../../common/errors.ts'
import { createKServeServer, isLoopbackHost, originOf, route } from '../../common/http-server.ts'
import { type Logger } from '../../common/logger.ts'
import { type ResponseCache } from '../cache/response-cache.ts'
import { type Canaries, type ModelCanary } from '../canary/canaries.ts'
import { canaryProblem, canarySpec, inferenceServerSpec } from '../fleet/fleet-config.ts'
import { type FleetController } from '../fleet/fleet-controller.ts'
import { type Fleet } from '../fleet/fleet.ts'
import { type Endpoint } from '../fleet/types.ts'
import { type EndpointHealthView } from '../health/fleet-health.ts'
import { quote, readJson } from '../fleet/yaml-schema.ts'
import { endpointView } from '../server/fleet-view.ts'
import { AdminGuard, contentTypeRefusal, RefusalLog, shown, type Refusal } from './admin-guard.ts'
import {
  ADMIN_TOKEN_ENV, SERVER_NAME_RULE, type AdminEndpointView, type CanaryList, type CanaryView, type DrainStatus,
  type EndpointList
} from './api.ts'

/** Admin bodies are small JSON documents; anything bigger is a mistake. */
const ADMIN_BODY_LIMIT = 1024 * 1024
/** How long `models: "discover"` waits for the worker's repository index. */
const DISCOVERY_TIMEOUT_MS = 5000
/** fastify's default `maxParamLength`: a longer path segment matches no parametric route. */
const DEFAULT_MAX_PARAM_LENGTH = 100
/** The methods a catch-all route answers (every one `route` registers). */
const ALL_METHODS: HTTPMethods[] = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']

export interface AdminServerOptions {
  fleet: Fleet
  controller: FleetController
  canaries: Canaries
  health: (endpoint: Endpoint) => EndpointHealthView
  logger: Logger
  /** The token every call must carry, or `undefined` for none (loopback only: see {@link adminToken}). */
  token: string | undefined
  /**
   * The listener's host as configured (`gateway.admin_host`): when it is a name rather than an address, calls
   * with that name in `Host` pass the DNS-rebinding check (addresses and `localhost` always do).
   */
  host?: string | undefined
  /** `gateway.admin_allowed_hosts`: further names `Host` may carry. */
  allowedHosts?: readonly string[] | undefined
  /** The effective config: the fleet file as loaded, with the live servers and canaries. */
  config: () => unknown
  now: () => number
  /** The response cache, for `GET /v1/cache` and `POST /v1/cache/purge`. */
  cache?: ResponseCache | undefined
  /** Asks a worker for its READY models (`models: "discover"`); by default its repository index over HTTP. */
  discover?: (origin: string) => Promise<string[]>
}

/**
 * The admin token, from `gateway.admin_token_file` or else `FLOTILLA_ADMIN_TOKEN`; `undefined` when neither is
 * set. A listener on a non-loopback address without one is refused.
 *
 * @throws FlotillaError `GW_ERR_ADMIN_TOKEN_FILE` when the file cannot be read or is empty;
 *   `GW_ERR_ADMIN_TOKEN_REQUIRED` for a non-loopback host without a token
 */
export function adminToken (host: string, tokenFile: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  let token: string | undefined
  if (tokenFile !== undefined) {
    try {
      token = readFileSync(tokenFile, 'utf8').trim()
    } catch (err) {
      throw createError('GW_ERR_ADMIN_TOKEN_FILE', tokenFile, (err as Error).message)
    }
    if (token === '') throw createError('GW_ERR_ADMIN_TOKEN_FILE', tokenFile, 'the file is empty')
  } else {
    const fromEnv = env[ADMIN_TOKEN_ENV]?.trim()
    token = fromEnv === undefined || fromEnv === '' ? undefined : fromEnv
  }
  if (token === undefined && !isLoopbackHost(host)) throw createError('GW_ERR_ADMIN_TOKEN_REQUIRED', host)
  return token
}

function digest (value: string): Buffer {
  return createHash('sha256').update(value).digest()
}

/** Builds (does not start) the admin listener. */
export function buildAdminServer (options: AdminServerOptions): FastifyInstance {
  const { fleet, controller, canaries, logger } = options
  const app = createKServeServer({ logger, bodyLimit: ADMIN_BODY_LIMIT, bodyLimitSetting: 'nothing: admin bodies are small' })
  const discover = options.discover ?? discoverModels
  const refusals = new RefusalLog(logger, options.now)
  const refuse = (request: FastifyRequest, refusal: Refusal, header: string | undefined): FlotillaError => {
    refusals.record(refusal, {
      ip: request.ip, method: request.method, url: shown(request.url, 200), ...(header === undefined ? {} : { header: shown(header) })
    })
    return refusal.error
  }

  // First, before the token: a page must not even learn whether a token is needed, and a token sent by a browser
  // (which can happen only same-origin, after DNS rebinding) must not open the door either.
  const guard = new AdminGuard({ host: options.host, allowedHosts: options.allowedHosts })
  app.addHook('onRequest', (request, _reply, done) => {
    const refusal = guard.check(request.headers)
    if (refusal === undefined) {
      done()
      return
    }
    const h = request.headers
    done(refuse(request, refusal, refusal.kind === 'origin' ? h.origin : refusal.kind === 'host' ? h.host : String(h['sec-fetch-site'])))
  })

  // On loopback too: a token, when one is configured, is required whatever the address.
  if (options.token !== undefined) {
    const expected = digest(options.token)
    app.addHook('onRequest', (request, reply, done) => {
      const header = request.headers.authorization
      const match = typeof header === 'string' ? /^Bearer +(.+)$/i.exec(header.trim()) : null
      if (match === null) {
        reply.header('www-authenticate', 'Bearer realm="flotilla-admin"')
        done(createError('GW_ERR_ADMIN_UNAUTHORIZED'))
        return
      }
      if (!timingSafeEqual(digest(match[1]!), expected)) {
        logger.warn({ ip: request.ip, url: request.url }, 'admin call with a wrong token refused')
        done(createError('GW_ERR_ADMIN_FORBIDDEN'))
        return
      }
      done()
    })
  }

  const view = (endpoint: Endpoint): AdminEndpointView => ({
    ...endpointView(endpoint, controller.sourceOf(endpoint), options.health(endpoint), options.now()),
    state: endpoint.state,
    configured_weight: endpoint.configuredWeight,
    drain: controller.drainStatus(endpoint.name)
  })
  const send = (reply: FastifyReply, status: number, body: unknown): FastifyReply =>
    reply.code(status).type('application/json').send(JSON.stringify(body))
  const name = (request: FastifyRequest): string => checkedName((request.params as { name: string }).name)
  /**
   * Registers a call that changes something: it needs `Content-Type: application/json` even without a body (see
   * rule 4 in `admin-guard.ts`). Checked in the route, not in a hook, so that an unknown path stays a 404 and a
   * wrong method a 405.
   */
  const change = (method: 'POST' | 'PUT' | 'DELETE', url: string, handler: (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>): void => {
    route(app, method, url, async (request, reply) => {
      const contentType = request.headers['content-type']
      const refusal = contentTypeRefusal(method, request.url.split('?')[0] ?? request.url, contentType)
      if (refusal !== undefined) throw refuse(request, refusal, contentType)
      return await handler(request, reply)
    })
  }

  route(app, 'GET', '/v1/endpoints', async (_request, reply) => {
    const body: EndpointList = { endpoints: fleet.endpoints.map(view) }
    return send(reply, 200, body)
  })
  route(app, 'GET', '/v1/endpoints/:name', async (request, reply) => send(reply, 200, view(controller.get(name(request)))))

  change('POST', '/v1/endpoints', async (request, reply) => {
    const body = jsonBody(request)
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw createError('GW_ERR_ADMIN_INVALID', 'the body must be a JSON object: {"name", "host", "port", "models"?, "weight"?, ...}')
    }
    const input = { ...(body as Record<string, unknown>) }
    const models = input.models
    delete input.models
    // Checked with the fleet file's own rules (every problem at once), before a worker is asked anything.
    const provisional = readJson(inferenceServerSpec, { ...input, models: Array.isArray(models) ? models : ['discovered'] }, '')
    if (!provisional.ok) throw createError('GW_ERR_ADMIN_INVALID', provisional.problems.join('; '))
    const server = provisional.value
    if (fleet.get(server.name) !== undefined) {
      throw createError('GW_ERR_ADMIN_CONFLICT', `a server named '${server.name}' is already in the fleet; remove it first or pick another name`)
    }
    let names: string[]
    if (models === undefined || models === 'discover') {
      try {
        names = await discover(originOf(server.host, server.port))
      } catch (err) {
        throw createError('GW_ERR_ADMIN_DISCOVERY', server.name, (err as Error).message)
      }
      if (names.length === 0) throw createError('GW_ERR_ADMIN_DISCOVERY', server.name, 'it has no READY model')
    } else if (Array.isArray(models)) {
      names = models as string[]
    } else {
      throw createError('GW_ERR_ADMIN_INVALID', `models must be a list of model names or "discover", got ${JSON.stringify(models)}`)
    }
    const checked = readJson(inferenceServerSpec, { ...input, models: names }, '')
    if (!checked.ok) throw createError('GW_ERR_ADMIN_INVALID', checked.problems.join('; '))
    const endpoint = controller.add(checked.value, 'admin')
    return send(reply, 201, view(endpoint))
  })

  change('POST', '/v1/endpoints/:name/drain', async (request, reply) => {
    const body = request.body !== undefined && (request.body as Buffer).length > 0 ? jsonBody(request) : {}
    const timeout = (body as Record<string, unknown> | null)?.timeout_ms
    if (timeout !== undefined && (!Number.isInteger(timeout) || (timeout as number) < 0 || (timeout as number) > 2 ** 31 - 1)) {
      throw createError('GW_ERR_ADMIN_INVALID', `timeout_ms must be an integer in 0..2147483647, got ${JSON.stringify(timeout)}`)
    }
    const status = controller.drain(name(request), timeout as number | undefined)
    if (!isTrue((request.query as Record<string, string | undefined>).wait)) return send(reply, 202, status)
    const done = await controller.drained(status.name)
    // An undrain while this call waited ended the drain without an outcome.
    if (done === null) throw createError('GW_ERR_ADMIN_CONFLICT', `the drain of '${status.name}' was cancelled by an undrain`)
    return send(reply, 200, done)
  })
  route(app, 'GET', '/v1/endpoints/:name/drain', async (request, reply) => {
    const endpoint = controller.get(name(request))
    const status: DrainStatus = controller.drainStatus(endpoint.name) ?? {
      name: endpoint.name, state: endpoint.state, in_flight: endpoint.inFlight, started_ms_ago: 0, timeout_ms: 0, done: false, completed: false
    }
    return send(reply, 200, status)
  })
  change('POST', '/v1/endpoints/:name/undrain', async (request, reply) => send(reply, 200, view(controller.undrain(name(request)))))
  change('DELETE', '/v1/endpoints/:name', async (request, reply) => {
    const query = request.query as Record<string, string | undefined>
    const timeout = query.timeout_ms
    if (timeout !== undefined && !/^[0-9]{1,10}$/.test(timeout)) {
      throw createError('GW_ERR_ADMIN_INVALID', `timeout_ms must be a whole number of milliseconds, got '${timeout}'`)
    }
    const result = await controller.remove(name(request), {
      force: isTrue(query.force),
      ...(timeout === undefined ? {} : { timeoutMs: Number(timeout) })
    })
    return send(reply, 200, result)
  })
  change('PUT', '/v1/endpoints/:name/weight', async (request, reply) => {
    const endpoint = controller.get(name(request))
    const weight = (jsonBody(request) as Record<string, unknown> | null)?.weight
    if (!Number.isInteger(weight) || (weight as number) < 0 || (weight as number) > 1000) {
      throw createError('GW_ERR_ADMIN_INVALID', `weight must be an integer in 0..1000, got ${JSON.stringify(weight)}`)
    }
    return send(reply, 200, view(controller.setWeight(endpoint.name, weight as number)))
  })

  const canaryOf = (model: string): ModelCanary => {
    const entry = canaries.for(model)
    if (entry !== undefined) return entry
    const names = canaries.list().map((c) => c.canary.model)
    throw createError('GW_ERR_ADMIN_UNKNOWN_CANARY', model, names.length > 0 ? names.join(', ') : 'none')
  }
  const model = (request: FastifyRequest): string => (request.params as { model: string }).model
  route(app, 'GET', '/v1/canaries', async (_request, reply) => {
    const body: CanaryList = { canaries: canaries.list().map((c) => c.canary.view()) }
    return send(reply, 200, body)
  })
  route(app, 'GET', '/v1/models/:model/canary', async (request, reply) => send(reply, 200, canaryOf(model(request)).canary.view()))
  change('PUT', '/v1/models/:model/canary', async (request, reply) => {
    const m = model(request)
    const checked = readJson(canarySpec, jsonBody(request), '')
    if (!checked.ok) throw createError('GW_ERR_ADMIN_INVALID', checked.problems.join('; '))
    const problem = canaryProblem(m, checked.value, fleet.servers())
    if (problem !== undefined) {
      if (!fleet.servesModel(m)) throw createError('GW_ERR_MODEL_NOT_SERVED', m, fleet.models.join(', ') || 'none')
      throw createError('GW_ERR_ADMIN_INVALID', problem)
    }
    const entry = canaries.set(m, checked.value, 'admin')
    logger.info({ model: m, percent: checked.value.percent }, 'canary set')
    const view: CanaryView = entry.canary.view()
    return send(reply, 200, view)
  })
  change('DELETE', '/v1/models/:model/canary', async (request, reply) => {
    const m = canaryOf(model(request)).canary.model
    canaries.clear(m)
    logger.info({ model: m }, 'canary cleared')
    return send(reply, 200, { cleared: m })
  })
  change('POST', '/v1/models/:model/canary/promote', async (request, reply) => {
    const entry = canaryOf(model(request))
    entry.canary.promote()
    logger.info({ model: entry.canary.model }, 'canary promoted: all its traffic goes to the canary')
    return send(reply, 200, entry.canary.view())
  })
  change('POST', '/v1/models/:model/canary/rollback', async (request, reply) => {
    const entry = canaryOf(model(request))
    entry.canary.rollback('rolled back through the admin API', false)
    return send(reply, 200, entry.canary.view())
  })

  route(app, 'GET', '/v1/config', async (_request, reply) => send(reply, 200, options.config()))

  const cache = options.cache
  route(app, 'GET', '/v1/cache', async (_request, reply) => {
    if (cache === undefined) throw createError('GW_ERR_CACHE_OFF')
    return send(reply, 200, cache.view(fleet.models))
  })
  change('POST', '/v1/cache/purge', async (request, reply) => {
    if (cache === undefined) throw createError('GW_ERR_CACHE_OFF')
    // No body (or `{}`): every model.
    const body = Buffer.isBuffer(request.body) && request.body.length > 0 ? jsonBody(request) : undefined
    const wanted = typeof body === 'object' && body !== null ? (body as { model?: unknown }).model : undefined
    if (wanted !== undefined && (typeof wanted !== 'string' || wanted === '')) {
      throw createError('GW_ERR_ADMIN_INVALID', '"model" must be a model name, or left out to purge every model')
    }
    if (wanted !== undefined && !fleet.servesModel(wanted)) throw createError('GW_ERR_MODEL_NOT_SERVED', shown(wanted), fleet.models.join(', ') || 'none')
    const purged = await cache.purge(wanted)
    logger.info({ model: wanted ?? '(all)', ...purged }, 'response cache purged through the admin API')
    return send(reply, 200, { model: wanted ?? null, local: purged.local, shared: purged.shared ?? null })
  })

  // A name longer than the router's limit on a path segment matches none of the routes above, and the router would
  // answer 414 itself, before any hook (the browser checks included). These wildcards are tried after the parametric
  // routes fail, so they take exactly those paths (and unknown paths below the prefixes): a 400 that names the rule.
  const config = app.initialConfig
  const maxParam = config.routerOptions?.maxParamLength ?? config.maxParamLength ?? DEFAULT_MAX_PARAM_LENGTH
  const firstSegment = (request: FastifyRequest): string => ((request.params as Record<string, string>)['*'] ?? '').split('/')[0] ?? ''
  app.route({
    method: ALL_METHODS,
    url: '/v1/endpoints/*',
    handler: async (request) => {
      checkedName(firstSegment(request))
      throw createError('FLT_ERR_NOT_FOUND')
    }
  })
  app.route({
    method: ALL_METHODS,
    url: '/v1/models/*',
    handler: async (request) => {
      const model = firstSegment(request)
      if (model.length > maxParam) {
        throw createError('GW_ERR_ADMIN_INVALID', `the model name in the path, ${quote(model)}, is too long: ` +
          `model names in admin paths are at most ${maxParam} characters`)
      }
      throw createError('FLT_ERR_NOT_FOUND')
    }
  })
  return app
}

/** An endpoint name from a path, if it can be one ({@link SERVER_NAME_RULE}); else a 400 that states the rule. */
function checkedName (name: string): string {
  if (!SERVER_NAME_RULE.regex.test(name)) {
    throw createError('GW_ERR_ADMIN_INVALID', `the endpoint name in the path, ${quote(name)}, is not allowed: ${SERVER_NAME_RULE.text}`)
  }
  return name
}

function isTrue (value: string | undefined): boolean {
  return value === '1' || value === 'true' || value === ''
}

/** The request body as JSON. */
function jsonBody (request: FastifyRequest): unknown {
  const raw = request.body
  if (!Buffer.isBuffer(raw) || raw.length === 0) throw createError('GW_ERR_ADMIN_INVALID', 'this call needs a JSON body')
  try {
    return JSON.parse(raw.toString('utf8'))
  } catch (err) {
    throw createError('GW_ERR_ADMIN_INVALID', `the body is not valid JSON: ${(err as Error).message}`)
  }
}

/** A worker's READY models, from its repository index (`POST /v2/repository/index` with `{"ready": true}`). */
async function discoverModels (origin: string): Promise<string[]> {
  const res = await undiciRequest(`${origin}/v2/repository/index`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ready: true }),
    headersTimeout: DISCOVERY_TIMEOUT_MS,
    bodyTimeout: DISCOVERY_TIMEOUT_MS
  })
  const text = await res.body.text()
  if (res.statusCode !== 200) throw new Error(`its index answered HTTP ${res.statusCode}: ${text.slice(0, 200)}`)
  const entries: unknown = JSON.parse(text)
  if (!Array.isArray(entries)) throw new Error('its index is not a JSON array')
  const names = new Set<string>()
  for (const entry of entries) {
    const e = entry as { name?: unknown, state?: unknown }
    if (typeof e.name === 'string' && (e.state === undefined || e.state === 'READY')) names.add(e.name)
  }
  return [...names]
}
