/**
 * The worker's gRPC front: Triton's `inference.GRPCInferenceService` (triton-behaviour.md section 4) on the worker's
 * gRPC port, over the same {@link InferenceService} the HTTP front calls, so a request gets the same validation,
 * scheduling, statistics, metrics and error text whichever protocol it came by. Errors end a call with the status
 * the coded-error registry gives (Triton's mapping: INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, ...).
 *
 * ModelStreamInfer follows Triton's rules as common/grpc-server.ts `serveInferStream` implements them for both tiers.
 */
import { setMaxListeners } from 'node:events'
import * as grpc from '@grpc/grpc-js'
import { createError, isFlotillaError } from '../../common/errors.ts'
import { createGrpcServer, grpcError, modelVersionOf, serveInferStream, type GrpcAnswer } from '../../common/grpc-server.ts'
import { type Logger } from '../../common/logger.ts'
import { WORKER_DRAINING_HEADER } from '../../common/protocol/headers.ts'
import {
  decodeModelInferRequest, encodeModelInferResponse, grpcErrorFrom, modelConfigToMessage, modelMetadataToMessage,
  modelStatisticsToMessage, repositoryIndexToMessage, serverMetadataToMessage
} from '../../common/protocol/grpc/grpc-codec.ts'
import {
  type ModelInferRequestMessage, type ModelInferResponseMessage, type ModelStreamInferResponseMessage
} from '../../common/protocol/grpc/messages.ts'
import { type InferenceService } from '../inference/inference-service.ts'
import { modelConfigToJson } from '../repository/model-config.ts'
import { type DrainTracker } from './drain.ts'

/** The default `--grpc-max-message-bytes`: the same 64 MiB as the HTTP body limit. */
export const DEFAULT_GRPC_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

export interface WorkerGrpcOptions {
  service: InferenceService
  logger: Logger
  /** Largest request message in bytes (`--grpc-max-message-bytes`); also the largest input tensor. */
  maxMessageBytes: number
  /** Counts calls, so a draining worker waits for them as for HTTP requests. */
  drain: DrainTracker
}

/**
 * A signal that aborts when the client cancels `call` (or its deadline passes), for the scheduler to drop what it
 * has queued. A stream's signal has a listener per request of it still queued, each removed as that request leaves
 * the queue: no limit on their number, and no leak.
 */
function cancelSignal (call: { once: (event: 'cancelled', listener: () => void) => unknown }): AbortSignal {
  const cancelled = new AbortController()
  setMaxListeners(0, cancelled.signal)
  call.once('cancelled', () => { cancelled.abort() })
  return cancelled.signal
}

/** Builds (does not bind) the worker's gRPC server: the inference service, health and reflection. */
export function buildWorkerGrpc (options: WorkerGrpcOptions): grpc.Server {
  const { service, drain, logger } = options
  const decodeOptions = { maxInputBytes: options.maxMessageBytes }

  /** Response metadata for a call: marks the answers of a draining worker, as its HTTP answers are marked. */
  const responseMetadata = (): grpc.Metadata | undefined => {
    if (!drain.draining) return undefined
    const metadata = new grpc.Metadata()
    metadata.set(WORKER_DRAINING_HEADER, '1')
    return metadata
  }

  /** A unary call counted by the drain tracker; a throw or rejection ends it with the error's status. */
  const unary = <Req, Res>(handle: (request: Req, call: grpc.ServerUnaryCall<Req, Res>) => Res | Promise<Res>): grpc.handleUnaryCall<Req, Res> => {
    return (call, callback) => {
      const end = drain.begin()
      let result: Promise<Res>
      try {
        result = Promise.resolve(handle(call.request, call))
      } catch (err) {
        result = Promise.reject(err)
      }
      result.then((response) => {
        end()
        const metadata = responseMetadata()
        if (metadata !== undefined) call.sendMetadata(metadata)
        callback(null, response)
      }, (err: unknown) => {
        end()
        if (!isFlotillaError(err) || err.statusCode >= 500) logger.error({ err }, 'gRPC call failed')
        callback(grpcError(err))
      })
    }
  }

  /** One inference, from the message to the answer message. */
  const infer = async (msg: ModelInferRequestMessage, signal: AbortSignal): Promise<ModelInferResponseMessage> => {
    const { modelName, modelVersion, request } = decodeModelInferRequest(msg, decodeOptions)
    const loaded = service.resolve(modelName, modelVersionOf(modelVersion))
    return encodeModelInferResponse(await service.infer(loaded, request, signal))
  }

  const modelStreamInfer: grpc.handleBidiStreamingCall<ModelInferRequestMessage, ModelStreamInferResponseMessage> = (call) => {
    // A cancelled stream cancels every request of it still queued.
    const signal = cancelSignal(call)
    serveInferStream(call, async (msg): Promise<GrpcAnswer<ModelInferResponseMessage>> => {
      const end = drain.begin()
      try {
        return { ok: true, value: await infer(msg, signal) }
      } catch (err) {
        if (!isFlotillaError(err) || err.statusCode >= 500) logger.error({ err }, 'gRPC stream request failed')
        return { ok: false, error: grpcErrorFrom(err) }
      } finally {
        end()
      }
    })
  }

  return createGrpcServer({
    maxMessageBytes: options.maxMessageBytes,
    maxMessageSetting: 'the worker flag --grpc-max-message-bytes',
    ready: () => service.ready(),
    logger
  }, {
    ServerLive: unary(() => ({ live: service.live() })),
    ServerReady: unary(() => ({ ready: service.ready() })),
    ServerMetadata: unary(() => serverMetadataToMessage(service.serverMetadata())),
    ModelReady: unary((request) => {
      try {
        service.resolve(request.name, modelVersionOf(request.version))
        return { ready: true }
      } catch (err) {
        // A version the worker knows but is not serving is not ready; an unknown model or version is an error.
        if (isFlotillaError(err) && err.code === 'WRK_ERR_MODEL_VERSION_NOT_READY') return { ready: false }
        throw err
      }
    }),
    ModelMetadata: unary((request) => {
      const version = modelVersionOf(request.version)
      return modelMetadataToMessage(service.modelMetadata(service.resolve(request.name, version), version !== undefined))
    }),
    ModelConfig: unary((request) => {
      const loaded = service.resolve(request.name, modelVersionOf(request.version))
      return modelConfigToMessage(JSON.parse(modelConfigToJson(loaded.config)))
    }),
    ModelStatistics: unary((request) =>
      modelStatisticsToMessage(JSON.parse(service.statisticsJson(request.name, modelVersionOf(request.version))))),
    RepositoryIndex: unary((request) => repositoryIndexToMessage(service.index(request.ready === true))),
    // Triton's default control mode loads everything at start and refuses explicit load/unload, as HTTP does.
    RepositoryModelLoad: unary(() => { throw createError('WRK_ERR_MODEL_CONTROL_DISABLED') }),
    RepositoryModelUnload: unary(() => { throw createError('WRK_ERR_MODEL_CONTROL_DISABLED') }),
    ModelInfer: unary((msg, call) => infer(msg, cancelSignal(call))),
    ModelStreamInfer: modelStreamInfer
  })
}
