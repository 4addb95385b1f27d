/**
 * The worker's KServe v2 HTTP API, as Triton serves it (triton-behaviour.md sections 1 and 2): health, server and
 * model metadata, model config, readiness, infer (JSON, the binary tensor extension, gzip/deflate bodies and
 * answers), statistics, and the repository index. Everything but the wire form is the InferenceService's, which the
 * gRPC front (grpc.ts) calls too.
 */
import { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { createError, isFlotillaError } from '../../common/errors.ts'
import { createKServeServer, route, type KServeServerOptions } from '../../common/http-server.ts'
import { type Logger } from '../../common/logger.ts'
import { QUEUE_DEPTH_HEADER } from '../../common/protocol/headers.ts'
import {
  decodeHttpInferRequest, decodeRawBinaryRequest, encodeHttpInferResponse, INFERENCE_HEADER_CONTENT_LENGTH,
  parseInferenceHeaderLength, rawRequestInputCountError
} from '../../common/protocol/binary-codec.ts'
import {
  decodeRequestBody, encodeResponseBody, negotiateResponseEncoding, SUPPORTED_CONTENT_CODINGS
} from '../../common/protocol/compression.ts'
import { configTypeToDataType } from '../../common/protocol/datatypes.ts'
import { type InferRequest } from '../../common/protocol/types.ts'
import { type InferenceService } from '../inference/inference-service.ts'
import { modelConfigToJson } from '../repository/model-config.ts'
import { type LoadedVersion, type ModelRepository } from '../repository/model-repository.ts'
import { type DrainTracker } from './drain.ts'

export interface WorkerHttpOptions {
  /** The protocol-neutral API both fronts call. */
  service: InferenceService
  repository: ModelRepository
  logger: Logger
  /** Largest request body, in bytes (default 64 MiB, as Triton's --http-max-input-size). */
  bodyLimit: number
  /**
   * Counts the requests and marks the responses once the worker is shutting down (worker/server/drain.ts); from
   * then on ready answers 400, so that gateways stop sending.
   */
  drain: DrainTracker
  /** Header count and slow-client timeouts (`common/http-server.ts`); each defaults there. */
  limits?: Pick<KServeServerOptions, 'headerLimit' | 'headerCountLimit' | 'headerTimeoutMs' | 'bodyTimeoutMs' | 'idleTimeoutMs'>
}

type ModelParams = { model: string, version?: string }

/** Named in the 413 messages: where to raise the limit. */
const BODY_LIMIT_SETTING = 'the worker flag --max-body-bytes'

const EMPTY = Buffer.alloc(0)

export function buildWorkerHttp (options: WorkerHttpOptions): FastifyInstance {
  const { repository, service } = options
  const app = createKServeServer({
    logger: options.logger,
    bodyLimit: options.bodyLimit,
    bodyLimitSetting: BODY_LIMIT_SETTING,
    headerLimitSetting: 'the worker flag --max-header-bytes',
    headerCountSetting: 'the worker flag --max-header-count',
    timeoutSettings: 'the worker flags --header-timeout-ms and --body-timeout-ms',
    ...options.limits
  })

  options.drain.track(app.server)

  app.addHook('onSend', async (_request, reply) => {
    reply.header(QUEUE_DEPTH_HEADER, repository.pendingRequests())
  })
  app.addHook('onResponse', async (request, reply) => {
    // Checked first so that the log object is not built when debug is off (the usual case in production).
    if (!options.logger.isLevelEnabled('debug')) return
    request.log.debug({ method: request.method, url: request.url, status: reply.statusCode, durationMs: reply.elapsedTime }, 'request')
  })

  route(app, 'GET', '/v2/health/live', async (_req, reply) => reply.code(service.live() ? 200 : 400).send())
  route(app, 'GET', '/v2/health/ready', async (_req, reply) => reply.code(service.ready() ? 200 : 400).send())
  route(app, 'GET', '/v2', async (_req, reply) => reply.type('application/json').send(JSON.stringify(service.serverMetadata())))

  /** Resolves `:model[/versions/:version]`; a non-numeric version is a router miss, as in Triton. */
  const resolve = (request: FastifyRequest): LoadedVersion => {
    const { model, version } = request.params as ModelParams
    return service.resolve(model, version)
  }

  const modelRoutes = (suffix: string, method: 'GET' | 'POST', handler: (loaded: LoadedVersion, req: FastifyRequest, reply: FastifyReply) => Promise<unknown>): void => {
    for (const prefix of ['/v2/models/:model', '/v2/models/:model/versions/:version']) {
      route(app, method, prefix + suffix, async (req, reply) => handler(resolve(req), req, reply))
    }
  }

  modelRoutes('', 'GET', async (loaded, req, reply) => {
    const { version } = req.params as ModelParams
    return reply.type('application/json').send(JSON.stringify(service.modelMetadata(loaded, version !== undefined)))
  })
  modelRoutes('/ready', 'GET', async (_loaded, _req, reply) => reply.code(200).send())
  modelRoutes('/config', 'GET', async (loaded, _req, reply) => reply.type('application/json').send(modelConfigToJson(loaded.config)))
  modelRoutes('/infer', 'POST', async (loaded, req, reply) => {
    const received = Buffer.isBuffer(req.body) ? req.body : EMPTY
    if (received.length === 0) throw createError('PROTO_ERR_INVALID_REQUEST', 'the infer request has no body; send a JSON inference request')
    let body: Buffer
    try {
      body = await decodeRequestBody(received, req.headers['content-encoding'], options.bodyLimit, BODY_LIMIT_SETTING)
    } catch (err) {
      // RFC 9110 15.5.16: a 415 for a coding says which codings would do.
      if (isFlotillaError(err) && err.code === 'FLT_ERR_UNSUPPORTED_CONTENT_ENCODING') reply.header('accept-encoding', SUPPORTED_CONTENT_CODINGS)
      throw err
    }
    const request = decodeInfer(loaded, body, req.headers[INFERENCE_HEADER_CONTENT_LENGTH], options.bodyLimit)
    // A client that closes its connection before the answer (a gateway whose attempt timed out, a caller that gave
    // up) leaves nobody to answer: its request leaves the queue instead of taking an instance from those waiting.
    const gone = new AbortController()
    const onClose = (): void => { if (!reply.raw.writableFinished) gone.abort() }
    reply.raw.once('close', onClose)
    let response
    try {
      response = await service.infer(loaded, request, gone.signal)
    } finally {
      reply.raw.off('close', onClose)
    }
    const encoded = encodeHttpInferResponse(response, request)
    if (encoded.headerLength === undefined) reply.type('application/json')
    else reply.type('application/octet-stream').header(INFERENCE_HEADER_CONTENT_LENGTH, encoded.headerLength)
    const coding = negotiateResponseEncoding(req.headers['accept-encoding'])
    if (coding === undefined) return reply.send(encoded.body)
    // Inference-Header-Content-Length stays the uncompressed JSON length, as Triton sends it.
    return reply.header('content-encoding', coding).send(await encodeResponseBody(encoded.body, coding))
  })

  // Statistics: every READY version of every model, of one model, or one version.
  route(app, 'GET', '/v2/models/stats', async (_req, reply) => reply.type('application/json').send(service.statisticsJson()))
  for (const url of ['/v2/models/:model/stats', '/v2/models/:model/versions/:version/stats']) {
    route(app, 'GET', url, async (req, reply) => {
      const { model, version } = req.params as ModelParams
      return reply.type('application/json').send(service.statisticsJson(model, version))
    })
  }

  route(app, 'POST', '/v2/repository/index', async (req, reply) => {
    let readyOnly = false
    const raw = req.body as Buffer | undefined
    if (raw !== undefined && raw.length > 0) {
      let parsed: unknown
      try {
        parsed = JSON.parse(raw.toString('utf8'))
      } catch (err) {
        throw createError('PROTO_ERR_INVALID_JSON', (err as Error).message)
      }
      const ready = (parsed as { ready?: unknown } | null)?.ready
      if (ready !== undefined && typeof ready !== 'boolean') {
        throw createError('PROTO_ERR_INVALID_REQUEST', "Invalid value for 'ready': expected a boolean")
      }
      readyOnly = ready === true
    }
    return reply.type('application/json').send(JSON.stringify(service.index(readyOnly)))
  })
  // Triton's default control mode loads everything at start and refuses explicit load/unload, with this message.
  for (const action of ['load', 'unload']) {
    route(app, 'POST', `/v2/repository/models/:model/${action}`, async () => {
      throw createError('WRK_ERR_MODEL_CONTROL_DISABLED')
    })
  }

  return app
}

/**
 * An infer body as a request: JSON, JSON and binary tensors (`Inference-Header-Content-Length: N`), or Triton's raw
 * binary request (`Inference-Header-Content-Length: 0`: the whole body is the model's only input).
 */
function decodeInfer (loaded: LoadedVersion, body: Buffer, headerValue: string | string[] | undefined, maxInputBytes: number): InferRequest {
  const headerLength = parseInferenceHeaderLength(headerValue, body.length)
  if (headerLength !== 0) return decodeHttpInferRequest(body, headerLength, { maxInputBytes, modelName: loaded.name })
  const inputs = loaded.config.input
  const input = inputs[0]
  if (inputs.length !== 1 || input === undefined) throw rawRequestInputCountError(inputs.length, loaded.name)
  const datatype = configTypeToDataType(input.data_type)
  if (datatype === undefined) throw createError('WRK_ERR_INVALID_INPUT', `model '${loaded.name}' declares no datatype for input '${input.name}'`)
  return decodeRawBinaryRequest(body, { name: input.name, datatype, dims: input.dims }, loaded.config.max_batch_size > 0, loaded.name, { maxInputBytes })
}
