/**
 * What `flotilla bench` needs from a protocol, and nothing more: the model's metadata and batching limit, its
 * statistics counters, and a way to send pre-built inference requests. Each protocol (HTTP with JSON bodies, HTTP
 * with Triton's binary tensor extension, gRPC) is one implementation of {@link Transport}; the load generator,
 * the input builder and the report never look past this interface.
 *
 * Like perf_analyzer, a run encodes its requests once, up front ({@link Transport.prepare}), and then only sends
 * them, so the client's own encoding cost is never part of a measured latency.
 */
import { type DataType, type InferRequest } from '../../common/protocol/types.ts'

/** One input or output as the model metadata endpoint describes it; `-1` marks a variable dimension. */
export interface TensorMetadata {
  name: string
  datatype: DataType
  shape: number[]
}

/** `GET /v2/models/{m}[/versions/{v}]` (or gRPC ModelMetadata), the parts a benchmark uses. */
export interface ModelMetadata {
  name: string
  versions: string[]
  inputs: TensorMetadata[]
  outputs: TensorMetadata[]
}

/** A `{count, ns}` pair of Triton's statistics; bigint, because a server's running ns total can pass 2^53. */
export interface StatDuration {
  count: bigint
  ns: bigint
}

/**
 * The statistics counters a benchmark diffs across its measurement window, summed over every version the request
 * named (Triton's `inference_stats` plus `inference_count` and `execution_count`).
 */
export interface StatsCounters {
  success: StatDuration
  fail: StatDuration
  queue: StatDuration
  computeInput: StatDuration
  computeInfer: StatDuration
  computeOutput: StatDuration
  inferenceCount: bigint
  executionCount: bigint
}

/** A statistics read: the counters, or why there are none (the server has no statistics endpoint, say). */
export type StatsResult =
  | { readonly ok: true, readonly counters: StatsCounters }
  | { readonly ok: false, readonly reason: string }

/**
 * How one request ended. Latency is not here: the load generator times {@link Transport.send} itself, so every
 * transport is measured the same way.
 */
export type Outcome =
  | { readonly ok: true }
  | {
    readonly ok: false
    /** The HTTP status, or the gRPC status name, or the transport error's code (`ECONNREFUSED`, `UND_ERR_HEADERS_TIMEOUT`). */
    readonly status: number | string
    /** The server's error text, or the transport error's message. */
    readonly message: string
  }

/** A request body built once by {@link Transport.prepare}; opaque to everything but the transport that built it. */
export interface PreparedRequest {
  /** Bytes on the wire for the body, for the report. */
  readonly bytes: number
}

/** What a transport is created with, once per run. */
export interface TransportOptions {
  /** The server, as given to `-u` and normalised: `http://host:port` for HTTP, `host:port` for gRPC. */
  url: string
  model: string
  /** Absent: the server's choice (its latest ready version). */
  version?: string
  /** The most requests the run will have in flight at once: the connection (or stream) budget to allow for. */
  maxInFlight: number
  /** A request with no answer for this long fails with a timeout. */
  timeoutMs: number
}

/**
 * One protocol, bound to one server and model. Created once per run and closed once.
 *
 * Contract: {@link metadata}, {@link maxBatchSize} and {@link statistics} are control calls and must not queue
 * behind inference traffic (the statistics are read while the load runs, at the window's edges), so an
 * implementation sends them over a connection of their own. {@link send} never rejects: every failure, a refused
 * connection included, resolves as an error {@link Outcome}. Up to {@link TransportOptions.maxInFlight} sends may
 * be outstanding at once and must not wait on each other.
 */
export interface Transport {
  /** For the report: `http/json`, `http/binary`, `grpc`. */
  readonly name: string
  /**
   * The model's inputs and outputs.
   * @throws Error with a message fit to print (what was asked, what the server answered) when it cannot be read
   */
  metadata (): Promise<ModelMetadata>
  /**
   * The model config's `max_batch_size` (0: the model does not batch).
   * @throws Error as {@link metadata}
   */
  maxBatchSize (): Promise<number>
  /** The model's statistics counters now; never throws. */
  statistics (): Promise<StatsResult>
  /** Encodes `request` once; the result is sent any number of times. */
  prepare (request: InferRequest): PreparedRequest
  /** Sends one prepared request and consumes the whole answer; resolves with how it ended, never rejects. */
  send (prepared: PreparedRequest): Promise<Outcome>
  /** Releases connections; resolves once they are closed. Outstanding sends should have settled first. */
  close (): Promise<void>
}

/** Builds a transport; one per protocol, looked up by name in `transports.ts`. */
export type TransportFactory = (options: TransportOptions) => Transport
