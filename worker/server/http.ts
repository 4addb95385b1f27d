/**
 * The worker's KServe v2 HTTP API, as Triton serves it (triton-behaviour.md section 1): health, server and model
 * metadata, model config, readiness, infer, statistics, and the repository index.
 */
import { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { createError, isFlotillaError, wrapError } from '../../common/errors.ts'
import { createKServeServer, route } from '../../common/http-server.ts'
import { type Logger } from '../../common/logger.ts'
import { QUEUE_DEPTH_HEADER } from '../../common/protocol/headers.ts'
import { decodeInferRequest, encodeInferResponse } from '../../common/protocol/json-codec.ts'
import { type Tensor } from '../../common/protocol/types.ts'
import { FLOTILLA_VERSION } from '../../common/package-root.ts'
import { validateInferRequest } from '../inference/validate-request.ts'
import { configDataTypeToProtocol, modelConfigToJson } from '../repository/model-config.ts'
import { type LoadedVersion, type ModelRepository } from '../repository/model-repository.ts'
import { type DrainTracker } from './drain.ts'
import { type ModelStatistics } from './stats.ts'

export interface WorkerHttpOptions {
  repository: ModelRepository
  /** What `GET /v2/models[/{m}[/versions/{v}]]/stats` reports: the statistics the schedulers feed. */
  statistics: ModelStatistics
  logger: Logger
  /** Largest request body, in bytes (default 64 MiB, as Triton's --http-max-input-size). */
  bodyLimit: number
  /**
   * Counts the requests and marks the responses once the worker is shutting down (worker/server/drain.ts); from
   * then on ready answers 400, so that gateways stop sending.
   */
  drain: DrainTracker
}

/** In the order Triton lists them (triton-behaviour.md section 1.4). */
export const EXTENSIONS = ['model_repository', 'model_configuration', 'statistics'] as const

type ModelParams = { model: string, version?: string }

const DIGITS = /^[0-9]+$/

export function buildWorkerHttp (options: WorkerHttpOptions): FastifyInstance {
  const { repository, statistics } = options
  const app = createKServeServer({
    logger: options.logger, bodyLimit: options.bodyLimit, bodyLimitSetting: 'the worker flag --max-body-bytes'
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

  route(app, 'GET', '/v2/health/live', async (_req, reply) => reply.code(200).send())
  route(app, 'GET', '/v2/health/ready', async (_req, reply) => {
    return reply.code(!options.drain.draining && repository.isReady() ? 200 : 400).send()
  })
  route(app, 'GET', '/v2', async (_req, reply) => {
    return reply.type('application/json').send(JSON.stringify({ name: 'flotilla', version: FLOTILLA_VERSION, extensions: EXTENSIONS }))
  })

  /** Resolves `:model[/versions/:version]`; a non-numeric version is a router miss, as in Triton. */
  const resolve = (request: FastifyRequest): LoadedVersion => {
    const { model, version } = request.params as ModelParams
    if (version !== undefined && !DIGITS.test(version)) throw createError('FLT_ERR_NOT_FOUND')
    return repository.resolve(model, version)
  }

  const modelRoutes = (suffix: string, method: 'GET' | 'POST', handler: (loaded: LoadedVersion, req: FastifyRequest, reply: FastifyReply) => Promise<unknown>): void => {
    for (const prefix of ['/v2/models/:model', '/v2/models/:model/versions/:version']) {
      route(app, method, prefix + suffix, async (req, reply) => handler(resolve(req), req, reply))
    }
  }

  modelRoutes('', 'GET', async (loaded, req, reply) => {
    const { version } = req.params as ModelParams
    const { config } = loaded
    const batchDim = config.max_batch_size > 0 ? [-1] : []
    const tensor = (t: { name: string, data_type: Parameters<typeof configDataTypeToProtocol>[0], dims: number[] }): object =>
      ({ name: t.name, datatype: configDataTypeToProtocol(t.data_type), shape: [...batchDim, ...t.dims] })
    const body = {
      name: loaded.name,
      versions: version === undefined ? repository.readyVersions(loaded.name).map(String) : [String(loaded.version)],
      platform: config.platform || config.backend,
      inputs: config.input.map(tensor),
      outputs: config.output.map(tensor)
    }
    return reply.type('application/json').send(JSON.stringify(body))
  })
  modelRoutes('/ready', 'GET', async (_loaded, _req, reply) => reply.code(200).send())
  modelRoutes('/config', 'GET', async (loaded, _req, reply) => reply.type('application/json').send(modelConfigToJson(loaded.config)))
  modelRoutes('/infer', 'POST', async (loaded, req, reply) => {
    const body = await infer(loaded, req.body, options)
    return reply.type('application/json').send(body)
  })

  // Statistics: every READY version of every model, of one model, or one version. Triton words these errors its own
  // way (core tritonserver.cc TRITONSERVER_ServerModelStatistics), as 400s, not as the other model routes' 404/503.
  const sendStats = (reply: FastifyReply, versions: ReadonlyArray<{ name: string, version: number }>): FastifyReply =>
    reply.type('application/json').send(statistics.toJson(versions))
  route(app, 'GET', '/v2/models/stats', async (_req, reply) => {
    const versions = repository.index(true).flatMap(e => e.version === undefined ? [] : [{ name: e.name, version: Number(e.version) }])
    return sendStats(reply, versions)
  })
  for (const url of ['/v2/models/:model/stats', '/v2/models/:model/versions/:version/stats']) {
    route(app, 'GET', url, async (req, reply) => {
      const { model, version } = req.params as ModelParams
      if (version !== undefined && !DIGITS.test(version)) throw createError('FLT_ERR_NOT_FOUND')
      const ready = repository.readyVersions(model)
      if (ready.length === 0) throw createError('WRK_ERR_STATS_MODEL_NOT_AVAILABLE', model)
      if (version === undefined) return sendStats(reply, ready.map(v => ({ name: model, version: v })))
      if (!ready.includes(Number(version))) {
        throw createError('WRK_ERR_STATS_VERSION_NOT_AVAILABLE', model)
      }
      return sendStats(reply, [{ name: model, version: Number(version) }])
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
    return reply.type('application/json').send(JSON.stringify(repository.index(readyOnly)))
  })
  // Triton's default control mode loads everything at start and refuses explicit load/unload, with this message.
  for (const action of ['load', 'unload']) {
    route(app, 'POST', `/v2/repository/models/:model/${action}`, async (_req, reply) => {
      return reply.code(503).type('application/json')
        .send(JSON.stringify({ error: 'explicit model load / unload is not allowed if polling is enabled' }))
    })
  }

  return app
}

async function infer (loaded: LoadedVersion, body: unknown, options: WorkerHttpOptions): Promise<string> {
  const raw = Buffer.isBuffer(body) ? body : Buffer.alloc(0)
  if (raw.length === 0) throw createError('PROTO_ERR_INVALID_REQUEST', 'the infer request has no body; send a JSON inference request')
  const request = decodeInferRequest(raw, { maxInputBytes: options.bodyLimit })
  const batchSize = validateInferRequest(loaded.config, request, loaded.name)
  const requested = request.outputs?.map(o => o.name) ?? loaded.config.output.map(o => o.name)

  // Statistics and metrics are the scheduler's to report (its observer): only requests that reach it count.
  let response
  try {
    response = await loaded.scheduler.enqueue({
      inputs: new Map(request.inputs.map(t => [t.name, t])),
      requestedOutputs: requested,
      parameters: request.parameters,
      batchSize
    })
  } catch (err) {
    throw isFlotillaError(err) ? err : wrapError('WRK_ERR_EXECUTION_FAILED', err, loaded.name, err instanceof Error ? err.message : String(err))
  }
  if ('error' in response) throw createError('WRK_ERR_EXECUTION_FAILED', loaded.name, response.error.message)

  const produced = new Map(response.outputs.map(t => [t.name, t]))
  const outputs: Tensor[] = []
  for (const name of requested) {
    const t = produced.get(name)
    if (t !== undefined) outputs.push(t)
    else if (request.outputs !== undefined) {
      // The client asked for it by name: silently leaving it out would hand back a response it cannot use.
      throw createError('WRK_ERR_EXECUTION_FAILED', loaded.name, `the backend did not produce requested output '${name}'`)
    }
  }

  return encodeInferResponse({
    ...(request.id !== undefined && request.id !== '' ? { id: request.id } : {}),
    model_name: loaded.name,
    model_version: String(loaded.version),
    ...('parameters' in response && response.parameters !== undefined ? { parameters: response.parameters } : {}),
    outputs
  })
}
