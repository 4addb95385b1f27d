/**
 * Fastify plumbing both tiers share, so the gateway and a worker answer malformed traffic the same way, the way
 * Triton does: `{"error":"..."}` bodies, 404 `Not Found` for unknown paths, 405 `Method Not Allowed` for a known
 * path with the wrong method, and the request body kept as raw bytes whatever its Content-Type (Triton ignores it).
 */
import { randomUUID } from 'node:crypto'
import { type Server } from 'node:http'
import { fastify, LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest, type HTTPMethods } from 'fastify'
import { createError, errorBody, isFlotillaError } from './errors.ts'
import { type Logger } from './logger.ts'

export interface KServeServerOptions {
  logger: Logger
  /** Largest request body accepted, in bytes; larger bodies get a 413. */
  bodyLimit: number
  /** Named in the 413 message: the flag or key that raises the limit. */
  bodyLimitSetting: string
}

const ALL_METHODS: HTTPMethods[] = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']

export type RouteHandler = (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>

/** Registers `url` for every method; the wrong method gets Triton's 405 instead of fastify's 404. */
export function route (app: FastifyInstance, method: 'GET' | 'POST', url: string, handler: RouteHandler): void {
  app.route({
    method: ALL_METHODS,
    url,
    handler: async (request, reply) => {
      if (request.method !== method && !(method === 'GET' && request.method === 'HEAD')) {
        throw createError('FLT_ERR_METHOD_NOT_ALLOWED')
      }
      return handler(request, reply)
    }
  })
}

/** A fastify instance with the shared parser, error and not-found handling. */
export function createKServeServer (options: KServeServerOptions): FastifyInstance {
  const app = fastify({
    // pino's Logger is a FastifyBaseLogger; the cast keeps the instance type the plain one both tiers share.
    loggerInstance: options.logger as FastifyBaseLogger,
    // One debug line per request comes from the tiers' own hooks; fastify's two info lines per request would drown it.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: options.bodyLimit,
    exposeHeadRoutes: false,
    requestIdHeader: 'x-request-id',
    genReqId: () => randomUUID(),
    // While closing, new requests get a 503 (a gateway retries elsewhere) and the ones in flight finish.
    return503OnClosing: true
  })

  // A keep-alive socket busy when close() starts would otherwise stay open until its keep-alive timeout (72 s),
  // holding close() up: once closing, in-flight requests are answered with `Connection: close`.
  let closing = false
  app.addHook('preClose', async () => { closing = true })
  app.addHook('onSend', async (_request, reply) => {
    if (closing) reply.header('connection', 'close')
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
        message = createError('FLT_ERR_BODY_TOO_LARGE', request.headers['content-length'] ?? 'more than the limit',
          options.bodyLimit, options.bodyLimitSetting).message
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
