/**
 * `-i grpc`: Triton's `inference.GRPCInferenceService` (common/protocol/grpc/grpc-service.ts), as perf_analyzer's
 * gRPC client drives it.
 *
 * The hot path encodes nothing and decodes nothing. {@link Transport.prepare} serialises each ModelInferRequest once,
 * with the service definition's own serializer, and {@link Transport.send} hands those bytes to grpc-js through a
 * pass-through serializer; the answer comes back as the message's bytes, also passed through, never parsed. A call
 * that ends with OK received the whole message, which is all a benchmark needs to know; any other status is the
 * outcome, with the status's name and the server's details.
 *
 * In flight: grpc-js multiplexes every call on one HTTP/2 connection per channel, so `maxInFlight` calls are
 * `maxInFlight` streams on one connection, not a pool of connections as over HTTP. That is how Triton's clients
 * and perf_analyzer (one shared channel) load a server, and behind a gateway each call is balanced on its own. The
 * one wait this can hide in a latency is a server that advertises SETTINGS_MAX_CONCURRENT_STREAMS below the
 * concurrency: grpc-js then holds the extra calls until a stream frees (neither Flotilla nor Triton sets a limit).
 *
 * The control calls (metadata, config, statistics) go on a channel of their own, which grpc-js is told not to
 * share with the inference channel (`grpc.use_local_subchannel_pool`), so a statistics read at a window's edge
 * never waits behind inference traffic on the same connection.
 */
import * as grpc from '@grpc/grpc-js'
import { encodeModelInferRequest } from '../../common/protocol/grpc/grpc-codec.ts'
import { callUnary, createInferenceClient, inferenceServiceDefinition } from '../../common/protocol/grpc/grpc-service.ts'
import {
  type Int64, type ModelMetadataResponse, type ModelStatisticsResponse, type StatisticDurationMessage,
  type TensorMetadataMessage
} from '../../common/protocol/grpc/messages.ts'
import { type InferRequest } from '../../common/protocol/types.ts'
import { checkMetadata } from './http-transport.ts'
import {
  type ModelMetadata, type Outcome, type PreparedRequest, type StatDuration, type StatsCounters, type StatsResult,
  type Transport, type TransportOptions
} from './transport.ts'

/** Control calls answer at once; anything slower than this is a hung server. */
const CONTROL_TIMEOUT_MS = 10_000

const OK: Outcome = Object.freeze({ ok: true })

/** The bytes go out as they are, and come back as they are: nothing is encoded or decoded per request. */
const passThrough = (bytes: Buffer): Buffer => bytes

interface GrpcPrepared extends PreparedRequest {
  /** The serialised ModelInferRequest. */
  readonly message: Buffer
}

/**
 * Builds the gRPC transport.
 *
 * @param options the server (`host:port`), model and limits
 */
export function createGrpcTransport (options: TransportOptions): Transport {
  const address = options.url
  const version = options.version ?? ''
  // The definition's own path and serializer: the bytes are exactly what a ModelInfer client method would send.
  const { path: inferPath, requestSerialize: serialize } = inferenceServiceDefinition().ModelInfer!
  const infer = createInferenceClient(address)
  const control = createInferenceClient(address, { 'grpc.use_local_subchannel_pool': 1 })
  const model = `'${options.model}'${options.version === undefined ? '' : ` version ${options.version}`}`

  const modelRef = { name: options.model, version }
  /** A control call's options: a fresh deadline each time. */
  const controlOptions = (): Partial<grpc.CallOptions> => ({ deadline: Date.now() + CONTROL_TIMEOUT_MS })

  /** Runs a control call; its error says what was asked and what came back, or that nothing could be reached. */
  const ask = async <Res>(rpc: string, call: () => Promise<Res>): Promise<Res> => {
    try {
      return await call()
    } catch (err) {
      const e = err as Partial<grpc.ServiceError>
      const details = e.details ?? (err as Error).message
      // UNAVAILABLE is also a server's answer (a model not ready); the channel's state tells the two apart.
      if (e.code === grpc.status.UNAVAILABLE && control.getChannel().getConnectivityState(false) !== grpc.connectivityState.READY) {
        throw new Error(`cannot reach ${address} (${rpc}): ${details}`)
      }
      if (e.code === grpc.status.DEADLINE_EXCEEDED) {
        throw new Error(`${rpc} for model ${model}: no answer from ${address} within ${CONTROL_TIMEOUT_MS / 1000} s`)
      }
      const status = typeof e.code === 'number' ? grpc.status[e.code] ?? String(e.code) : 'an error'
      throw new Error(`${rpc} for model ${model} answered ${status}: ${details}`)
    }
  }

  return {
    name: 'grpc',
    async metadata (): Promise<ModelMetadata> {
      const answer = await ask('ModelMetadata', () =>
        callUnary(control.ModelMetadata.bind(control), modelRef, new grpc.Metadata(), controlOptions()))
      return checkMetadata(metadataAsJson(answer), `ModelMetadata for model ${model}`)
    },
    async maxBatchSize (): Promise<number> {
      const answer = await ask('ModelConfig', () =>
        callUnary(control.ModelConfig.bind(control), modelRef, new grpc.Metadata(), controlOptions()))
      // proto3 leaves a zero out of the wire; the decoder gives it back as 0.
      const raw = answer.config?.max_batch_size ?? 0
      if (typeof raw !== 'number' || !Number.isInteger(raw) || raw < 0) {
        throw new Error(`ModelConfig for model ${model}: max_batch_size is not a non-negative integer`)
      }
      return raw
    },
    async statistics (): Promise<StatsResult> {
      try {
        const answer = await ask('ModelStatistics', () =>
          callUnary(control.ModelStatistics.bind(control), modelRef, new grpc.Metadata(), controlOptions()))
        return { ok: true, counters: statisticsCounters(answer) }
      } catch (err) {
        return { ok: false, reason: (err as Error).message }
      }
    },
    prepare (request: InferRequest): GrpcPrepared {
      const message = serialize(encodeModelInferRequest(options.model, version, request))
      return { message, bytes: message.length }
    },
    send (prepared: PreparedRequest): Promise<Outcome> {
      const message = (prepared as GrpcPrepared).message
      return new Promise((resolve) => {
        infer.makeUnaryRequest(inferPath, passThrough, passThrough, message, { deadline: Date.now() + options.timeoutMs },
          (err: grpc.ServiceError | null) => { resolve(err === null ? OK : failure(err, options.timeoutMs)) })
      })
    },
    async close (): Promise<void> {
      infer.close()
      control.close()
    }
  }
}

/**
 * A failed call as an outcome: the status's name and the server's details. grpc-js words its own deadline with the
 * time it took and the peer's port (`Deadline exceeded after 0.152s,LB pick: 0.001s,remote_addr=...`), which would
 * make every timeout an error of its own in the report; those are told as one.
 */
function failure (err: grpc.ServiceError, timeoutMs: number): Outcome {
  const status = grpc.status[err.code] ?? String(err.code)
  if (err.code === grpc.status.DEADLINE_EXCEEDED && err.details.startsWith('Deadline exceeded')) {
    return { ok: false, status, message: `Deadline exceeded (no answer within ${timeoutMs} ms)` }
  }
  return { ok: false, status, message: err.details }
}

/** An int64 as an exact JSON-style number, or NaN (which checkMetadata refuses) where a number cannot hold it. */
function dimension (d: unknown): number {
  if (typeof d === 'number') return d
  if (typeof d === 'bigint' && d >= BigInt(Number.MIN_SAFE_INTEGER) && d <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(d)
  return Number.NaN
}

/** ModelMetadataResponse in the shape of the HTTP metadata JSON, so that one check serves both protocols. */
function metadataAsJson (answer: ModelMetadataResponse): Record<string, unknown> {
  const tensors = (list: readonly TensorMetadataMessage[] | undefined): unknown =>
    list?.map((t) => ({ ...t, shape: Array.isArray(t?.shape) ? t.shape.map(dimension) : t?.shape }))
  return { ...answer, inputs: tensors(answer.inputs), outputs: tensors(answer.outputs) }
}

/**
 * ModelStatisticsResponse as the counters a window diffs, summed over its entries as the HTTP statistics are
 * (`server-stats.ts`). Counters arrive as number or bigint, and are kept as exact bigints. A sub-message the server
 * left unset is proto3's default, all zero.
 *
 * @throws Error when a counter is not a non-negative integer
 */
export function statisticsCounters (answer: ModelStatisticsResponse): StatsCounters {
  const total: StatsCounters = {
    success: zero(), fail: zero(), queue: zero(), computeInput: zero(), computeInfer: zero(), computeOutput: zero(),
    inferenceCount: 0n, executionCount: 0n
  }
  for (const [i, entry] of (answer.model_stats ?? []).entries()) {
    const where = `model_stats[${i}]`
    const stats = entry.inference_stats
    add(total.success, stats?.success, `${where}.inference_stats.success`)
    add(total.fail, stats?.fail, `${where}.inference_stats.fail`)
    add(total.queue, stats?.queue, `${where}.inference_stats.queue`)
    add(total.computeInput, stats?.compute_input, `${where}.inference_stats.compute_input`)
    add(total.computeInfer, stats?.compute_infer, `${where}.inference_stats.compute_infer`)
    add(total.computeOutput, stats?.compute_output, `${where}.inference_stats.compute_output`)
    total.inferenceCount += counter(entry.inference_count, `${where}.inference_count`)
    total.executionCount += counter(entry.execution_count, `${where}.execution_count`)
  }
  return total
}

function zero (): StatDuration {
  return { count: 0n, ns: 0n }
}

function add (into: StatDuration, d: StatisticDurationMessage | undefined, where: string): void {
  if (d === undefined || d === null) return
  into.count += counter(d.count, `${where}.count`)
  into.ns += counter(d.ns, `${where}.ns`)
}

function counter (value: Int64 | undefined, where: string): bigint {
  if (value === undefined || value === null) return 0n
  if (typeof value === 'bigint' ? value < 0n : !(Number.isSafeInteger(value) && value >= 0)) {
    throw new Error(`the statistics' ${where} is not a non-negative integer`)
  }
  return BigInt(value)
}
