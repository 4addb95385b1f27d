/**
 * Fastify plumbing both tiers share, so the gateway and a worker answer malformed traffic the same way, the way
 * Triton does: `{"error":"..."}` bodies, 404 `Not Found` for unknown paths, 405 `Method Not Allowed` for a known
 * path with the wrong method, and the request body kept as raw bytes whatever its Content-Type (Triton ignores it).
 *
 * Every error either tier answers has that one shape, fastify's and Node's own included (an oversized head or
 * path segment, too many headers, bytes that are not HTTP, a request that arrives too slowly), and says which of our
 * settings changes the limit that was hit.
 *
 * Slow clients are cut off as HAProxy and Node cut them (fastify turns Node's request timeout off by default):
 * - the request head must arrive within `headerTimeoutMs` (HAProxy's customary `timeout http-request 10s`; a
 *   slowloris sending a header byte at a time holds a connection for no longer);
 * - the whole request, head and body, within `bodyTimeoutMs` (Node's own `requestTimeout` default, 300 s: room for
 *   a 64 MiB body over a slow link, while a body that stops halfway is not held forever);
 * - an idle keep-alive connection is closed after `idleTimeoutMs` (fastify's 72 s, longer than the 60 s idle
 *   timeout of common cloud load balancers, so the balancer in front closes first and never reuses a closed one).
 * All three answer 408 with the JSON body when a response can still be written. Node checks the first two every
 * `connectionsCheckingInterval`, set here to a quarter of the shorter one (at most 1 s) instead of Node's 30 s.
 */
import { randomUUID } from 'node:crypto'
import { STATUS_CODES, type Server } from 'node:http'
import { type Socket } from 'node:net'
import { fastify, LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest, type HTTPMethods } from 'fastify'
import { createError, errorBody, isFlotillaError } from './errors.ts'
import { type Logger } from './logger.ts'

export interface KServeServerOptions {
  logger: Logger
  /** Largest request body accepted, in bytes; larger bodies get a 413. */
  bodyLimit: number
  /** Named in the 413 message: the flag or key that raises the limit. */
  bodyLimitSetting: string
  /** Largest request head (request line and headers) accepted, in bytes; larger ones get a 431. Node's 16 KiB by default. */
  headerLimit?: number
  /** Named in the 431 message. */
  headerLimitSetting?: string
  /** Most header fields in a request; more get a 431. Default {@link DEFAULT_HEADER_COUNT_LIMIT}. */
  headerCountLimit?: number
  /** Named in the 431 message for too many headers. */
  headerCountSetting?: string
  /** Time for the request head to arrive, in ms. Default {@link DEFAULT_HEADER_TIMEOUT_MS}. */
  headerTimeoutMs?: number
  /** Time for the whole request to arrive, in ms. Default {@link DEFAULT_BODY_TIMEOUT_MS}. */
  bodyTimeoutMs?: number
  /** How long an idle keep-alive connection stays open, in ms. Default {@link DEFAULT_IDLE_TIMEOUT_MS}. */
  idleTimeoutMs?: number
  /** Named in the 408 message: the settings that give a slow client more time. */
  timeoutSettings?: string
}

/** Node's own default for `maxHeaderSize`. */
export const DEFAULT_HEADER_LIMIT = 16 * 1024
/**
 * HAProxy's `tune.http.maxhdr` (101) and Apache's `LimitRequestFields` (100), rounded: far above what a client
 * sends (a browser sends about 15), while Node's own limit (2000) drops the fields past it without a word, which
 * turned a request with 1,000 headers into one without its Content-Length.
 */
export const DEFAULT_HEADER_COUNT_LIMIT = 100
/** HAProxy's customary `timeout http-request`. */
export const DEFAULT_HEADER_TIMEOUT_MS = 10_000
/** Node's default `requestTimeout`. */
export const DEFAULT_BODY_TIMEOUT_MS = 300_000
/** fastify's default `keepAliveTimeout`. */
export const DEFAULT_IDLE_TIMEOUT_MS = 72_000
/** The longest path segment (model name, version) a route takes; fastify's default of 100 is short for model names. */
export const MAX_PATH_SEGMENT_LENGTH = 256

const ALL_METHODS: HTTPMethods[] = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']

export type RouteHandler = (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>

/** Per server, per URL: the handler of each method registered with {@link route}. */
const routeTables = new WeakMap<FastifyInstance, Map<string, Map<string, RouteHandler>>>()

/**
 * Registers `handler` for `method` on `url`, with the URL taking every method: a method with no handler gets
 * Triton's 405 instead of fastify's 404, and HEAD is answered by a GET handler. Several methods may be registered
 * on one URL (the admin API's `GET` and `POST /v1/endpoints`). The wrapper is a plain function that hands fastify
 * the handler's promise (a throw is answered as a rejection is), not a second async function around it; with one
 * method on the URL (every KServe route) it compares one string, as before.
 */
export function route (app: FastifyInstance, method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, handler: RouteHandler): void {
  let tables = routeTables.get(app)
  if (tables === undefined) {
    tables = new Map()
    routeTables.set(app, tables)
  }
  const known = tables.get(url)
  if (known !== undefined) {
    if (known.has(method)) throw new Error(`${method} ${url} is already registered`)
    known.set(method, handler)
    return
  }
  const handlers = new Map<string, RouteHandler>([[method, handler]])
  tables.set(url, handlers)
  app.route({
    method: ALL_METHODS,
    url,
    handler: (request, reply) => {
      if (handlers.size === 1 && request.method === method) return handler(request, reply)
      const own = handlers.get(request.method === 'HEAD' ? 'GET' : request.method)
      if (own === undefined) throw createError('FLT_ERR_METHOD_NOT_ALLOWED')
      return own(request, reply)
    }
  })
}

/**
 * Request ids for requests that come without `x-request-id`: UUID-shaped (version 4 and variant bits set, 36
 * characters, so logs and clients see the same shape as before): a prefix with 74 random bits drawn once per process,
 * then a 48-bit counter, so that ids are unique within a process and, by the prefix, across processes. About half the
 * cost of `randomUUID()` per request. Not meant to be unguessable: nothing uses a request id as a secret.
 */
export function requestIdGenerator (random: () => string = randomUUID): () => string {
  // A random UUID's first four groups: its version and variant bits stay as randomUUID set them.
  const prefix = random().slice(0, 24)
  let next = 0
  return () => {
    // 2^48 ids before it wraps: nine years at a million requests a second.
    next = next === 0xffffffffffff ? 1 : next + 1
    return prefix + next.toString(16).padStart(12, '0')
  }
}

/** A fastify instance with the shared parser, error and not-found handling. */
export function createKServeServer (options: KServeServerOptions): FastifyInstance {
  const headerLimit = options.headerLimit ?? DEFAULT_HEADER_LIMIT
  const headerCountLimit = options.headerCountLimit ?? DEFAULT_HEADER_COUNT_LIMIT
  const headerTimeoutMs = options.headerTimeoutMs ?? DEFAULT_HEADER_TIMEOUT_MS
  // Node refuses a head timeout longer than the whole request's.
  const bodyTimeoutMs = Math.max(options.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS, headerTimeoutMs)
  const timeoutSettings = options.timeoutSettings ?? 'the server\'s timeouts'
  const app = fastify({
    http: {
      maxHeaderSize: headerLimit,
      headersTimeout: headerTimeoutMs,
      connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(Math.min(headerTimeoutMs, bodyTimeoutMs) / 4)))
    },
    requestTimeout: bodyTimeoutMs,
    keepAliveTimeout: options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
    routerOptions: { maxParamLength: MAX_PATH_SEGMENT_LENGTH },
    // fastify's own answers for a URL it cannot route (its JSON shape, echoing the whole path) in ours.
    frameworkErrors (error, _request, reply: FastifyReply) {
      const code = (error as { code?: string }).code
      const status = code === 'FST_ERR_MAX_PARAM_LENGTH' ? 414 : 400
      const message = code === 'FST_ERR_MAX_PARAM_LENGTH'
        ? `a path segment (a model name or version) is longer than ${MAX_PATH_SEGMENT_LENGTH} characters`
        : createError('FLT_ERR_MALFORMED_HTTP', code ?? 'bad URL', 'the URL is not valid percent-encoding').message
      void reply.code(status).type('application/json').send(errorBody(message))
    },
    // Errors below HTTP (an oversized head, bytes that are not HTTP) get the same JSON body as every other error,
    // with a message that says what to change, instead of fastify's own shape.
    clientErrorHandler (err: Error & { code?: string }, socket: Socket) {
      if (err.code === 'ECONNRESET' || socket.destroyed) return
      let status = 400
      let message: string
      if (err.code === 'HPE_HEADER_OVERFLOW') {
        status = 431
        message = createError('FLT_ERR_HEADERS_TOO_LARGE', headerLimit, options.headerLimitSetting ?? 'the server\'s header limit').message
      } else if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
        status = 408
        message = createError('FLT_ERR_REQUEST_TOO_SLOW', headerTimeoutMs, bodyTimeoutMs, timeoutSettings).message
      } else {
        message = createError('FLT_ERR_MALFORMED_HTTP', err.code ?? 'unknown', err.message).message
      }
      if (socket.writable) {
        const body = errorBody(message)
        socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
      }
      socket.destroy(err)
    },
    // pino's Logger is a FastifyBaseLogger; the cast keeps the instance type the plain one both tiers share.
    loggerInstance: options.logger as FastifyBaseLogger,
    // One debug line per request comes from the tiers' own hooks; fastify's two info lines per request would drown it.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: options.bodyLimit,
    exposeHeadRoutes: false,
    requestIdHeader: 'x-request-id',
    genReqId: requestIdGenerator(),
    // While closing, new requests get a 503 (a gateway retries elsewhere) and the ones in flight finish.
    return503OnClosing: true
  })

  // A keep-alive socket busy when close() starts would otherwise stay open until its keep-alive timeout (72 s),
  // holding close() up: once closing, in-flight requests are answered with `Connection: close`.
  // The onSend hook runs for every answer, so it is a callback hook: an async one costs a promise and a
  // microtask per request.
  let closing = false
  app.addHook('preClose', async () => { closing = true })
  // Node's own count limit truncates silently; ours refuses. The head is already bounded by its size.
  app.server.maxHeadersCount = 0
  app.addHook('onRequest', (request, _reply, done) => {
    const fields = request.raw.rawHeaders.length >> 1
    if (fields <= headerCountLimit) {
      done()
      return
    }
    done(createError('FLT_ERR_TOO_MANY_HEADERS', fields, headerCountLimit, options.headerCountSetting ?? 'the server\'s header count limit'))
  })
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close')
    done(null, payload)
  })

  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: options.bodyLimit }, (_req, body, done) => {
    done(null, body)
  })

  app.setNotFoundHandler(async (_request, reply) => {
    return reply.code(404).type('application/json').send(errorBody('Not Found'))
  })

  app.setErrorHandler(async (error: unknown, request, reply) => {
    let status = 500
    let message: string
    if (isFlotillaError(error)) {
      status = error.statusCode
      message = error.message
    } else {
      const e = error as { code?: string, statusCode?: number, message?: string }
      if (e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
        status = 413
        const declared = request.headers['content-length']
        message = createError('FLT_ERR_BODY_TOO_LARGE', declared === undefined ? '(sent chunked)' : `of ${declared} bytes`,
          options.bodyLimit, options.bodyLimitSetting).message
      } else if (e.code === 'FST_ERR_CTP_INVALID_CONTENT_LENGTH') {
        status = 400
        message = createError('FLT_ERR_MALFORMED_HTTP', 'Content-Length', 'the body is not as long as its Content-Length says').message
      } else if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
        status = e.statusCode
        message = e.message ?? 'Bad Request'
      } else {
        message = e.message ?? String(error)
      }
    }
    if (status >= 500) request.log.error({ err: error }, 'request failed')
    return reply.code(status).type('application/json').send(errorBody(message))
  })

  return app
}

const LOOPBACK = /^(127\.[0-9.]+|localhost|::1|\[::1\])$/

/** Whether `host` only ever reaches this machine (a loopback address, or `localhost`). */
export function isLoopbackHost (host: string): boolean {
  return LOOPBACK.test(host)
}

/** `http://host:port`, bracketing IPv6 literals as URLs require. */
export function originOf (host: string, port: number): string {
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`
}

function boundPort (server: Server): number {
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error(`unexpected listen address ${String(address)}`)
  return address.port
}

/** Listens and returns the bound port (port 0 binds an ephemeral one). */
export async function listen (app: FastifyInstance, host: string, port: number): Promise<number> {
  await app.listen({ host, port })
  return boundPort(app.server)
}

/** The same for a plain node:http server (the metrics listeners); rejects on EADDRINUSE and the like. */
export function listenServer (server: Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.off('error', reject)
      resolve(boundPort(server))
    })
  })
}

/** Closes a plain node:http server if it listens; resolves once it has stopped. */
export async function closeServer (server: Server | undefined): Promise<void> {
  if (server?.listening !== true) return
  await new Promise(resolve => server.close(resolve))
}
