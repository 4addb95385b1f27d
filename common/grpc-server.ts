/**
 * grpc-js plumbing both tiers share, so the gateway and a worker answer gRPC the same way, the way Triton does:
 * errors as the coded-error registry maps them, a message limit whose refusal says what to raise, the RPCs of
 * features Flotilla does not have answered as Triton answers with them compiled out (never left unimplemented to
 * hang a client), `grpc.health.v1.Health` for Kubernetes probes, and server reflection.
 */
import { type Http2Server, type ServerHttp2Session } from 'node:http2'
import { createRequire } from 'node:module'
import * as grpc from '@grpc/grpc-js'
import { createError, type ErrorCode } from './errors.ts'
import { type Logger } from './logger.ts'
import { grpcErrorFrom, type GrpcErrorStatus } from './protocol/grpc/grpc-codec.ts'
import {
  addHealthService, addInferenceService, addReflection, INFERENCE_SERVICE_NAME, type HealthServiceHandlers,
  type InferenceServiceHandlers
} from './protocol/grpc/grpc-service.ts'
import {
  type ModelInferRequestMessage, type ModelInferResponseMessage, type ModelStreamInferResponseMessage
} from './protocol/grpc/messages.ts'

/** What a gRPC front needs to build its server. */
export interface GrpcServerOptions {
  /** Largest request message accepted, in bytes; larger ones get RESOURCE_EXHAUSTED before they are buffered. */
  readonly maxMessageBytes: number
  /** Named in the RESOURCE_EXHAUSTED message: the flag or key that raises the limit. */
  readonly maxMessageSetting: string
  /** Readiness, for `grpc.health.v1.Health`: SERVING when true. */
  readonly ready: () => boolean
  readonly logger: Logger
}

/**
 * A server with the inference service's handlers, health and reflection added, not yet bound.
 *
 * @param handlers every RPC of `inference.GRPCInferenceService` but the feature-off ones, which are added here
 */
export function createGrpcServer (
  options: GrpcServerOptions,
  handlers: Omit<InferenceServiceHandlers, keyof typeof FEATURE_OFF_HANDLERS>
): grpc.Server {
  rewordSizeRefusals()
  const server = new grpc.Server({
    'grpc.max_receive_message_length': options.maxMessageBytes,
    // Answers are as large as the model makes them; refusing one would fail a request the client cannot fix.
    'grpc.max_send_message_length': -1,
    // channelz (grpc's introspection service, which Flotilla does not serve) would track every call and socket.
    'grpc.enable_channelz': 0
  })
  sizeSettings.set(options.maxMessageBytes, options.maxMessageSetting)
  addInferenceService(server, { ...handlers, ...FEATURE_OFF_HANDLERS })
  addHealthService(server, healthHandlers(options.ready))
  addReflection(server)
  return server
}

/** Binds `server` and resolves with the bound port (port 0 binds an ephemeral one). Plaintext, as Triton's default. */
export function listenGrpc (server: grpc.Server, host: string, port: number): Promise<number> {
  const address = `${host.includes(':') ? `[${host}]` : host}:${port}`
  return new Promise((resolve, reject) => {
    server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, bound) => {
      if (err !== null) {
        reject(err)
        return
      }
      widenFlowControl(server)
      resolve(bound)
    })
  })
}

/**
 * Stops `server`: no new calls, those in progress (streams included) may finish for `graceMs`, then whatever is
 * left is cancelled. Resolves once the server has stopped.
 */
export function closeGrpc (server: grpc.Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    const cut = setTimeout(() => { server.forceShutdown() }, graceMs)
    server.tryShutdown(() => {
      clearTimeout(cut)
      resolve()
    })
  })
}

/**
 * The status to end a call with for `err`: a coded error's own gRPC status and message; anything else is an
 * INTERNAL error (logged by the caller), its message kept.
 */
export function grpcStatusOf (err: unknown): grpc.StatusObject {
  return { ...grpcErrorFrom(err), metadata: new grpc.Metadata() }
}

const VERSION_DIGITS = /^[0-9]+$/

/**
 * A gRPC request's `model_version` as the version to resolve: `''` (or absent) is the model's latest (undefined);
 * anything but decimal digits is refused with Triton's words (server common.cc GetModelVersionFromString).
 */
export function modelVersionOf (version: string | undefined): string | undefined {
  if (version === undefined || version === '') return undefined
  if (!VERSION_DIGITS.test(version)) {
    throw createError('PROTO_ERR_INVALID_REQUEST', `failed to get model version from specified version string '${version}' ` +
      '(details: not a decimal integer), version should be an integral value > 0')
  }
  return version
}

/** An answer for a client, or the status to fail its call with. */
export type GrpcAnswer<T> = { readonly ok: true, readonly value: T } | { readonly ok: false, readonly error: GrpcErrorStatus }

/**
 * Triton's ModelStreamInfer, for both fronts: each message an independent request, answered as soon as `handle`
 * settles (not in arrival order: every answer carries its request's id); a failed one is answered with
 * `error_message` (and its request's id and model) and the stream stays open, unless the client opened the stream
 * with the metadata `triton_grpc_error: true`, which asks, as in Triton, for the first error to end the stream with
 * its status. The stream ends once the client has half-closed it and every request is answered; nothing is written
 * after the client cancelled it.
 *
 * @param handle one request's answer; a rejection is answered as the error's status
 */
export function serveInferStream (
  call: grpc.ServerDuplexStream<ModelInferRequestMessage, ModelStreamInferResponseMessage>,
  handle: (msg: ModelInferRequestMessage) => Promise<GrpcAnswer<ModelInferResponseMessage>>
): void {
  const statusOnError = call.metadata.get('triton_grpc_error')[0] === 'true'
  let pending = 0
  let halfClosed = false
  let ended = false
  const finish = (): void => {
    if (!ended && halfClosed && pending === 0) {
      ended = true
      call.end()
    }
  }
  const answer = (msg: ModelInferRequestMessage, result: GrpcAnswer<ModelInferResponseMessage>): void => {
    if (ended || call.cancelled) return
    if (result.ok) {
      call.write({ error_message: '', infer_response: result.value })
    } else if (statusOnError) {
      ended = true
      call.emit('error', { ...result.error, metadata: new grpc.Metadata() })
    } else {
      call.write({
        error_message: result.error.details,
        infer_response: { model_name: msg.model_name ?? '', model_version: msg.model_version ?? '', id: msg.id ?? '', outputs: [] }
      })
    }
  }
  call.on('data', (msg: ModelInferRequestMessage) => {
    if (ended) return
    pending++
    handle(msg)
      .catch((err: unknown): GrpcAnswer<ModelInferResponseMessage> => ({ ok: false, error: grpcErrorFrom(err) }))
      .then((result) => { answer(msg, result) })
      .finally(() => {
        pending--
        finish()
      })
  })
  call.on('end', () => {
    halfClosed = true
    finish()
  })
  call.on('cancelled', () => { ended = true })
  call.on('error', () => { ended = true })
}

/** A grpc-js ServiceError for a status, to hand a unary callback. */
export function serviceError (status: GrpcErrorStatus): grpc.ServiceError {
  return Object.assign(new Error(status.details), status, { metadata: new grpc.Metadata() }) as grpc.ServiceError
}

/** A grpc-js ServiceError for `err` (see {@link grpcStatusOf}), to hand a unary callback. */
export function grpcError (err: unknown): grpc.ServiceError {
  return serviceError(grpcErrorFrom(err))
}

/** A unary handler that refuses every call with `code`'s error. */
function refuse (code: ErrorCode): grpc.handleUnaryCall<unknown, never> {
  return (_call, callback) => { callback(grpcError(createError(code))) }
}

/**
 * Shared memory, tracing and dynamic logging: Flotilla has none of them. Status calls list no regions; the rest
 * answer exactly as Triton does when the feature is compiled out or client shared memory is disabled
 * (grpc_server.cc), so a client gets an answer it knows, never a hang.
 */
export const FEATURE_OFF_HANDLERS = Object.freeze({
  SystemSharedMemoryStatus: ((_call, callback) => { callback(null, { regions: {} }) }) satisfies InferenceServiceHandlers['SystemSharedMemoryStatus'],
  SystemSharedMemoryRegister: refuse('FLT_ERR_SHARED_MEMORY_DISABLED') satisfies InferenceServiceHandlers['SystemSharedMemoryRegister'],
  SystemSharedMemoryUnregister: refuse('FLT_ERR_SHARED_MEMORY_DISABLED') satisfies InferenceServiceHandlers['SystemSharedMemoryUnregister'],
  CudaSharedMemoryStatus: ((_call, callback) => { callback(null, { regions: {} }) }) satisfies InferenceServiceHandlers['CudaSharedMemoryStatus'],
  CudaSharedMemoryRegister: refuse('FLT_ERR_SHARED_MEMORY_DISABLED') satisfies InferenceServiceHandlers['CudaSharedMemoryRegister'],
  CudaSharedMemoryUnregister: refuse('FLT_ERR_SHARED_MEMORY_DISABLED') satisfies InferenceServiceHandlers['CudaSharedMemoryUnregister'],
  TraceSetting: refuse('FLT_ERR_TRACE_UNSUPPORTED') satisfies InferenceServiceHandlers['TraceSetting'],
  LogSettings: refuse('FLT_ERR_LOGGING_UNSUPPORTED') satisfies InferenceServiceHandlers['LogSettings']
})

/** How often `Health/Watch` looks at readiness again; it sends only changes. */
const HEALTH_WATCH_INTERVAL_MS = 1000

/** The services `Health/Check` answers for: the server as a whole (''), and the inference service by name. */
const HEALTH_SERVICES = new Set(['', INFERENCE_SERVICE_NAME])

/**
 * `grpc.health.v1.Health`: SERVING while ready, NOT_SERVING otherwise (Triton: SERVING iff the server is ready);
 * an unknown service name is NOT_FOUND, as the health protocol asks.
 */
function healthHandlers (ready: () => boolean): HealthServiceHandlers {
  const status = (): 'SERVING' | 'NOT_SERVING' => ready() ? 'SERVING' : 'NOT_SERVING'
  return {
    Check (call, callback) {
      if (!HEALTH_SERVICES.has(call.request.service ?? '')) {
        callback(Object.assign(new Error(`unknown service '${call.request.service ?? ''}'`), { code: grpc.status.NOT_FOUND }) as grpc.ServiceError)
        return
      }
      callback(null, { status: status() })
    },
    Watch (call) {
      // An unknown service is SERVICE_UNKNOWN on a watch, which stays open in case the service appears.
      const known = HEALTH_SERVICES.has(call.request.service ?? '')
      let last = ''
      const send = (): void => {
        const now = known ? status() : 'SERVICE_UNKNOWN'
        if (now !== last) {
          last = now
          call.write({ status: now })
        }
      }
      send()
      const timer = setInterval(send, HEALTH_WATCH_INTERVAL_MS)
      timer.unref()
      call.on('cancelled', () => { clearInterval(timer) })
      call.on('close', () => { clearInterval(timer) })
    }
  }
}

/** HTTP/2 flow control for the server's connections: see {@link widenFlowControl}. */
export const GRPC_STREAM_WINDOW_BYTES = 4 * 1024 * 1024
export const GRPC_CONNECTION_WINDOW_BYTES = 16 * 1024 * 1024
export const GRPC_MAX_FRAME_BYTES = 1024 * 1024

/**
 * Node's HTTP/2 defaults (a 64 KiB window, 16 KiB frames) make a client send a 588 KiB image tensor in 37 frames, each
 * an event in JavaScript, and wait for window updates between them; Triton's C++ gRPC grows its windows by probing
 * the bandwidth-delay product instead. grpc-js exposes no server option for either, so each session's settings are
 * raised as it opens: about half the gateway's CPU per large gRPC request, and half its latency (bench/README.md,
 * "protocol"). It reaches into grpc-js's `http2Servers` map (not public API); should a release rename it, the
 * defaults stay and test/common/grpc-server.test.ts fails.
 */
function widenFlowControl (server: grpc.Server): void {
  const servers = (server as unknown as { http2Servers?: Map<Http2Server, unknown> }).http2Servers
  if (!(servers instanceof Map)) return
  for (const http2Server of servers.keys()) {
    if (widened.has(http2Server)) continue
    widened.add(http2Server)
    http2Server.on('session', (session: ServerHttp2Session) => {
      session.settings({ initialWindowSize: GRPC_STREAM_WINDOW_BYTES, maxFrameSize: GRPC_MAX_FRAME_BYTES })
      session.setLocalWindowSize(GRPC_CONNECTION_WINDOW_BYTES)
    })
  }
}
const widened = new WeakSet<Http2Server>()

/** A status as grpc-js's base call sends it. */
interface SentStatus { code: grpc.status, details?: string, metadata?: grpc.Metadata | null }

/** Each server's message limit → the setting that raises it (a process may run a gateway and workers in tests). */
const sizeSettings = new Map<number, string>()
let reworded = false

/**
 * grpc-js refuses an oversized message from its length prefix, before buffering it (good), but with its own text
 * ("Received message larger than max (N vs M)"), which does not say what to change, and from below the server
 * interceptors, so no interceptor sees that status. Its base call's `sendStatus` is wrapped once per process to
 * put our message there: the size, the limit, and the setting that raises it. If a grpc-js release moves the
 * class, the wrap is skipped and grpc-js's own text goes out (test/worker/server/protocols.test.ts notices).
 */
function rewordSizeRefusals (): void {
  if (reworded) return
  reworded = true
  const require = createRequire(import.meta.url)
  let base: { prototype: { sendStatus (status: SentStatus): void } } | undefined
  try {
    base = (require('@grpc/grpc-js/build/src/server-interceptors.js') as { BaseServerInterceptingCall?: typeof base }).BaseServerInterceptingCall
  } catch {
    base = undefined
  }
  const original = base?.prototype.sendStatus
  if (base === undefined || typeof original !== 'function') return
  const pattern = /^Received message (?:that decompresses to a size )?larger than (?:max \((\d+) vs (\d+)\)|(\d+))$/
  base.prototype.sendStatus = function (this: unknown, status: SentStatus): void {
    const match = status.code === grpc.status.RESOURCE_EXHAUSTED ? pattern.exec(status.details ?? '') : null
    if (match !== null) {
      const limit = Number(match[2] ?? match[3])
      const size = match[1] ?? `more than ${limit}`
      const setting = sizeSettings.get(limit) ?? "the server's gRPC message limit"
      status = { ...status, details: createError('FLT_ERR_MESSAGE_TOO_LARGE', size, limit, setting).message }
    }
    original.call(this, status)
  }
}
