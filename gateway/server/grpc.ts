/**
 * The gateway's gRPC front: Triton's `inference.GRPCInferenceService` on `gateway.grpc_port`, for the whole fleet.
 *
 * Every model call goes through the same pipeline as the HTTP front (`proxy/pipeline.ts`: candidates, strategy,
 * canary, admission queue, retries and budget, outlier detection, metrics with `protocol="grpc"`), one call at a
 * time: each ModelInfer is balanced on its own, never per connection, so a client that keeps one HTTP/2 connection
 * open (every gRPC client does) still spreads its requests over the fleet.
 *
 * Upstream, a call travels as the binary HTTP request it is equivalent to (bench/README.md "protocol" has the
 * measurement that chose this over gRPC to the workers): the ModelInferRequest's tensors are laid end to end after a
 * JSON header (raw contents as they came, typed `contents` converted to the raw layout), and the worker's binary
 * answer becomes the ModelInferResponse's `raw_output_contents`, without a tensor being decoded on the way. The
 * other calls are the HTTP calls they mirror (metadata, readiness, config; statistics and the index fanned out and
 * merged as the HTTP front merges them), their JSON answers turned into the gRPC messages.
 *
 * Every answer names the server in the `x-flotilla-endpoint` response metadata. ModelStreamInfer: see
 * {@link serveGatewayStream}.
 */
import * as grpc from '@grpc/grpc-js'
import { createError, isFlotillaError } from '../../common/errors.ts'
import { createGrpcServer, grpcError, modelVersionOf, serveInferStream, serviceError, type GrpcAnswer } from '../../common/grpc-server.ts'
import { requestIdGenerator } from '../../common/http-server.ts'
import { type Logger } from '../../common/logger.ts'
import { INFERENCE_HEADER_CONTENT_LENGTH, decodeRawHttpInferResponse, encodeRawHttpInferRequest, parseInferenceHeaderLength } from '../../common/protocol/binary-codec.ts'
import {
  grpcErrorFrom, grpcErrorFromHttp, modelConfigToMessage, modelInferRequestToRaw, modelMetadataToMessage,
  modelStatisticsToMessage, rawToModelInferResponse, repositoryIndexToMessage, serverMetadataToMessage
} from '../../common/protocol/grpc/grpc-codec.ts'
import {
  type ModelInferRequestMessage, type ModelInferResponseMessage, type ModelReadyRequest, type ModelReadyResponse,
  type ModelStreamInferResponseMessage
} from '../../common/protocol/grpc/messages.ts'
import { type Endpoint } from '../fleet/types.ts'
import { type Forwarder } from '../proxy/forward.ts'
import { CACHE_HEADER, ENDPOINT_HEADER, REQUEST_ID_HEADER, upstreamRequestHeaders } from '../proxy/headers.ts'
import { modelPath, type ModelCall, type ModelPipeline } from '../proxy/pipeline.ts'
import { type CacheResult, type ForwardRequest, type ForwardResult, type ModelResult, type UpstreamResponse } from '../proxy/types.ts'
import { ClientGone } from './client-gone.ts'
import { gatewayMetadata } from './gateway-metadata.ts'
import { mergeIndexes, mergeStatistics, type Merged } from './merge.ts'
import { type Readiness } from './readiness.ts'

export interface GatewayGrpcOptions {
  pipeline: ModelPipeline
  forwarder: Forwarder
  logger: Logger
  /** Largest request message in bytes (`gateway.max_body_bytes`, the same limit as an HTTP body). */
  maxMessageBytes: number
  /** Deadline for each server's answer to a fan-out call (statistics, the index). */
  fanOutTimeoutMs: number
  /** Whether the gateway can serve (`readiness.ts`), as the HTTP front's `/v2/health/ready` says. */
  readiness: () => Readiness
}

/** Client metadata passed on upstream, as the HTTP front passes these headers on. */
const FORWARDED_METADATA = ['traceparent', 'tracestate'] as const

/** A unary call's answer and the server that gave it, when one did. */
interface Reply<T> { readonly endpoint?: string | undefined, readonly cache?: CacheResult | undefined, readonly answer: GrpcAnswer<T> }

/** Builds (does not bind) the gateway's gRPC server: the inference service, health and reflection. */
export function buildGatewayGrpc (options: GatewayGrpcOptions): grpc.Server {
  const { pipeline, forwarder, logger } = options
  const nextRequestId = requestIdGenerator()

  /**
   * A unary call: `handle` resolves with the answer and the server that gave it (named in the response metadata); a
   * throw or rejection ends the call with the error's status, logged when it is not the client's doing.
   */
  const unary = <Req, Res>(handle: (call: grpc.ServerUnaryCall<Req, Res>) => Promise<Reply<Res>>): grpc.handleUnaryCall<Req, Res> =>
    (call, callback) => {
      handle(call).then(({ endpoint, cache, answer }) => {
        const named = endpoint !== undefined && endpoint !== ''
        if (named || cache !== undefined) {
          const metadata = new grpc.Metadata()
          if (named) metadata.set(ENDPOINT_HEADER, endpoint)
          if (cache !== undefined) metadata.set(CACHE_HEADER, cache)
          call.sendMetadata(metadata)
        }
        if (answer.ok) callback(null, answer.value)
        else callback(serviceError(answer.error))
      }, (err: unknown) => {
        if (!isFlotillaError(err) || err.statusCode >= 500) logger.error({ err }, 'gRPC call failed')
        callback(grpcError(err))
      })
    }

  /** A model route's GET (metadata, ready, config) through the pipeline, its JSON answer as a message. */
  const modelRead = <Req extends { name: string, version?: string }, Res>(
    suffix: string, toMessage: (status: number, body: Buffer) => GrpcAnswer<Res>
  ): grpc.handleUnaryCall<Req, Res> => unary(async (call) => {
    const model = call.request.name
    const version = modelVersionOf(call.request.version)
    const upstream = upstreamRequest(call, 'GET', modelPath(model, version, suffix), undefined, nextRequestId)
    const result = await pipeline.run({ model, version, inference: false, protocol: 'grpc', header: metadataHeader(call.metadata), upstream: () => upstream })
    return { endpoint: result.endpoint?.name, answer: answerOf(result, toMessage) }
  })

  /** Statistics or the index: every server concerned asked, the answers merged as the HTTP front merges them. */
  const fanOut = async <Res>(call: grpc.ServerUnaryCall<unknown, Res>, method: string, path: string, body: string | undefined,
    endpoints: readonly Endpoint[], merge: (answers: readonly ForwardResult[]) => Merged, toMessage: (json: unknown) => Res): Promise<Reply<Res>> => {
    const request = upstreamRequest(call, method, path, body === undefined ? undefined : Buffer.from(body), nextRequestId)
    const headers = upstreamRequestHeaders(request.headers, request.requestId)
    const merged = merge(await Promise.all(endpoints.map((e) => forwarder.sendTo(e, request, headers, options.fanOutTimeoutMs))))
    if ('body' in merged) return { endpoint: merged.answered.join(', '), answer: { ok: true, value: toMessage(JSON.parse(merged.body)) } }
    if ('passOn' in merged) return { answer: { ok: false, error: grpcErrorFromHttp(merged.passOn.statusCode, merged.passOn.body) } }
    return { answer: { ok: false, error: grpcErrorFrom(merged.error) } }
  }

  /** One ModelInfer (unary, or one message of a stream) through the pipeline. */
  const infer = async (call: grpc.ServerUnaryCall<ModelInferRequestMessage, unknown> | grpc.ServerDuplexStream<ModelInferRequestMessage, unknown>,
    msg: ModelInferRequestMessage, preferred: Endpoint | undefined, signal: ClientGone): Promise<{ result: ModelResult | undefined, answer: GrpcAnswer<ModelInferResponseMessage> }> => {
    let model: string
    let version: string | undefined
    let body: Buffer
    let headerLength: number
    try {
      const decoded = modelInferRequestToRaw(msg)
      model = decoded.modelName
      version = modelVersionOf(decoded.modelVersion)
      ;({ body, headerLength } = encodeRawHttpInferRequest(decoded.request))
    } catch (err) {
      return { result: undefined, answer: { ok: false, error: grpcErrorFrom(err) } }
    }
    const requestId = firstValue(call.metadata, REQUEST_ID_HEADER) ?? nextRequestId()
    const headers = forwardedHeaders(call.metadata)
    headers['content-type'] = 'application/octet-stream'
    headers[INFERENCE_HEADER_CONTENT_LENGTH] = String(headerLength)
    const modelCall: ModelCall = {
      model,
      version,
      inference: true,
      protocol: 'grpc',
      preferred,
      header: metadataHeader(call.metadata),
      // A canary split by versions names the version; the body is the same either way.
      upstream: (to) => ({ method: 'POST', path: modelPath(model, to ?? version, '/infer'), headers, body, requestId, signal })
    }
    const result = await pipeline.run(modelCall)
    // As the HTTP front: the fleet failing a request is worth a warning, a client's mistake is not.
    if (!result.ok && result.error.statusCode >= 500) logger.warn({ code: result.error.code, endpoint: result.endpoint?.name, protocol: 'grpc' }, result.error.message)
    return { result, answer: answerOf(result, (status, answerBody, response) => status === 200
      ? { ok: true, value: rawToModelInferResponse(decodeRawHttpInferResponse(answerBody, parseInferenceHeaderLength(response.headers[INFERENCE_HEADER_CONTENT_LENGTH], answerBody.length))) }
      : { ok: false, error: grpcErrorFromHttp(status, answerBody) }) }
  }

  return createGrpcServer({
    maxMessageBytes: options.maxMessageBytes,
    maxMessageSetting: 'gateway.max_body_bytes in the fleet file',
    ready: () => options.readiness().ready,
    logger
  }, {
    ServerLive: (_call, callback) => { callback(null, { live: true }) },
    ServerReady: (_call, callback) => { callback(null, { ready: options.readiness().ready }) },
    ServerMetadata: (_call, callback) => { callback(null, serverMetadataToMessage(gatewayMetadata())) },
    // Triton's HTTP ready answers 400 for a version that is not ready; through the gateway a model with no usable
    // server (503) is not ready either. An unknown model or version is an error, as in Triton.
    ModelReady: modelRead<ModelReadyRequest, ModelReadyResponse>('/ready', (status, body) =>
      status === 200 ? { ok: true, value: { ready: true } }
        : status === 400 || status === 503 ? { ok: true, value: { ready: false } }
          : { ok: false, error: grpcErrorFromHttp(status, body) }),
    ModelMetadata: modelRead('', jsonAnswer(modelMetadataToMessage)),
    ModelConfig: modelRead('/config', jsonAnswer(modelConfigToMessage)),
    ModelStatistics: unary(async (call) => {
      const version = modelVersionOf(call.request.version)
      const model = call.request.name === undefined || call.request.name === '' ? undefined : call.request.name
      const { endpoints, error } = model === undefined ? pipeline.fanOutTargets() : pipeline.fanOutTargets(model, version)
      if (error !== undefined) throw error
      const path = model === undefined ? '/v2/models/stats' : modelPath(model, version, '/stats')
      return fanOut(call, 'GET', path, undefined, endpoints, mergeStatistics, modelStatisticsToMessage)
    }),
    RepositoryIndex: unary(async (call) => {
      const body = JSON.stringify({ ready: call.request.ready === true })
      return fanOut(call, 'POST', '/v2/repository/index', body, pipeline.fanOutTargets().endpoints, mergeIndexes, repositoryIndexToMessage)
    }),
    RepositoryModelLoad: (_call, callback) => { callback(grpcError(createError('GW_ERR_NOT_ROUTED', 'RepositoryModelLoad'))) },
    RepositoryModelUnload: (_call, callback) => { callback(grpcError(createError('GW_ERR_NOT_ROUTED', 'RepositoryModelUnload'))) },
    ModelInfer: unary(async (call) => {
      const gone = new ClientGone()
      call.on('cancelled', () => { gone.abort() })
      const { result, answer } = await infer(call, call.request, undefined, gone)
      return { endpoint: result?.endpoint?.name, cache: result?.cache, answer }
    }),
    ModelStreamInfer: (call) => { serveGatewayStream(call, infer) }
  })
}

/**
 * One ModelStreamInfer call through the gateway. Each message is an independent request (answered as soon as it is
 * done, with its id), routed through the pipeline like a unary call, except that the stream is pinned: per model,
 * the worker that answered the stream's last request takes the next one while it is a candidate with room
 * (`ForwardTarget.preferred`). When that worker dies or leaves the fleet, requests in flight on it are retried on
 * another worker as any request is (a reset before an answer, a refused connect), the stream stays open, and it is
 * pinned to the worker that answered. The rest of the stream's protocol (answers, errors, ending) is
 * `serveInferStream`'s, as on the worker. The client cancelling the stream cancels its requests in flight upstream.
 */
type StreamCall = grpc.ServerDuplexStream<ModelInferRequestMessage, ModelStreamInferResponseMessage>
type StreamInfer = (call: StreamCall, msg: ModelInferRequestMessage, preferred: Endpoint | undefined, signal: ClientGone) =>
  Promise<{ result: ModelResult | undefined, answer: GrpcAnswer<ModelInferResponseMessage> }>

function serveGatewayStream (call: StreamCall, infer: StreamInfer): void {
  /** model → the worker that answered its last request on this stream. */
  const pinned = new Map<string, Endpoint>()
  const gone = new ClientGone()
  call.on('cancelled', () => { gone.abort() })
  serveInferStream(call, async (msg) => {
    const model = msg.model_name ?? ''
    const { result, answer } = await infer(call, msg, pinned.get(model), gone)
    if (result?.endpoint !== undefined && (result.ok || result.error.statusCode < 500)) pinned.set(model, result.endpoint)
    return answer
  })
}

/** The answer to a pipeline result: the worker's 2xx turned into a message by `toMessage`, or an error status. */
function answerOf<T> (result: ModelResult, toMessage: (status: number, body: Buffer, response: UpstreamResponse) => GrpcAnswer<T>): GrpcAnswer<T> {
  if (!result.ok) return { ok: false, error: grpcErrorFrom(result.error) }
  try {
    return toMessage(result.response.statusCode, result.response.body, result.response)
  } catch (err) {
    // A worker answer that is not what the protocol says (a broken binary section): the worker's fault, not the client's.
    return { ok: false, error: grpcErrorFrom(createError('GW_ERR_UPSTREAM_BROKEN', result.endpoint?.name ?? '(cache)', '(gRPC)', (err as Error).message)) }
  }
}

/** A JSON 200 answer as a message; any other status as the error it says. */
function jsonAnswer<T> (toMessage: (json: unknown) => T): (status: number, body: Buffer) => GrpcAnswer<T> {
  return (status, body) => status === 200
    ? { ok: true, value: toMessage(JSON.parse(body.toString('utf8'))) }
    : { ok: false, error: grpcErrorFromHttp(status, body) }
}

/** The upstream request for a non-inference call. */
function upstreamRequest (call: grpc.ServerUnaryCall<unknown, unknown>, method: string, path: string, body: Buffer | undefined,
  nextRequestId: () => string): ForwardRequest {
  const signal = new ClientGone()
  call.on('cancelled', () => { signal.abort() })
  const headers = forwardedHeaders(call.metadata)
  if (body !== undefined) headers['content-type'] = 'application/json'
  return { method, path, headers, body, requestId: firstValue(call.metadata, REQUEST_ID_HEADER) ?? nextRequestId(), signal }
}

function forwardedHeaders (metadata: grpc.Metadata): Record<string, string> {
  const headers: Record<string, string> = {}
  for (const name of FORWARDED_METADATA) {
    const value = firstValue(metadata, name)
    if (value !== undefined) headers[name] = value
  }
  return headers
}

/** Client metadata as the pipeline reads headers (canary force/sticky headers, the hash key). */
function metadataHeader (metadata: grpc.Metadata): (name: string) => string | undefined {
  return (name) => firstValue(metadata, name)
}

function firstValue (metadata: grpc.Metadata, name: string): string | undefined {
  const value = metadata.get(name)[0]
  return typeof value === 'string' ? value : undefined
}
