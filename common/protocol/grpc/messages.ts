/**
 * The messages of `inference.GRPCInferenceService` and `grpc.health.v1.Health` as Flotilla's gRPC layer hands them
 * over (grpc-service.ts) and builds them (grpc-codec.ts). Field names are the protos' own, snake_case.
 *
 * How values arrive, and what the encoders accept:
 * - 64-bit integers ({@link Int64}): a `number` when the value is within ±(2^53 − 1), a `bigint` beyond, so no value
 *   is ever rounded and no `Long` object is made. Encoders take either (and `Long`-like objects or decimal strings).
 * - `bytes`: `Buffer` views into the received message, never copies (they keep the message's memory alive).
 * - enums: their names (`'TYPE_FP32'`, `'SERVING'`); encoders also take the numbers.
 * - ModelInfer / ModelStreamInfer messages are protobufjs message instances: every field reads with its default
 *   (`''`, `0`, `false`, `[]`, `{}`, `null` for an absent sub-message), defaults come from the prototype, and the
 *   members of a oneof that are not set are NOT own properties (their prototype defaults still read as `false`, `0`,
 *   `''`): test a oneof member with `Object.hasOwn`, or read the oneof's name (`parameter_choice`), which names the
 *   member that is set.
 * - Every other message arrives as a plain object with every scalar, repeated and map field present (defaults
 *   included, as Triton prints JSON) and unset sub-messages and oneof members absent.
 * Messages built by hand may leave out any field (proto3: absent means default).
 */

/** A 64-bit integer: exact `number` within ±(2^53 − 1), `bigint` beyond (see the module comment). */
export type Int64 = number | bigint

/** Which member of a parameter oneof is set. */
export type InferParameterChoice = 'bool_param' | 'int64_param' | 'string_param' | 'double_param' | 'uint64_param'

/** `inference.InferParameter`: exactly one member set. */
export interface InferParameterMessage {
  bool_param?: boolean
  int64_param?: Int64
  string_param?: string
  double_param?: number
  uint64_param?: Int64
  /** The member that is set; present on decoded messages, ignored by the encoder. */
  readonly parameter_choice?: InferParameterChoice
}

/** Parameters as a proto `map<string, InferParameter>`. */
export type InferParameterMap = Record<string, InferParameterMessage>

/**
 * `inference.InferTensorContents`: typed elements, only the field matching the datatype. Encoders also take typed
 * arrays (and 0/1 numbers for `bool_contents`); decoders give plain arrays.
 */
export interface InferTensorContentsMessage {
  bool_contents?: ArrayLike<boolean | number>
  int_contents?: ArrayLike<number>
  int64_contents?: ArrayLike<Int64>
  uint_contents?: ArrayLike<number>
  uint64_contents?: ArrayLike<Int64>
  fp32_contents?: ArrayLike<number>
  fp64_contents?: ArrayLike<number>
  bytes_contents?: ArrayLike<Uint8Array>
}

/** `inference.ModelInferRequest.InferInputTensor`. */
export interface InferInputTensorMessage {
  name: string
  datatype: string
  /** Dimensions; `-1` passes the codec and is rejected by the worker's validation. */
  shape: readonly Int64[]
  parameters?: InferParameterMap
  /** Present (even empty) means "this input's data is in contents", as protobuf's `has_contents()`. */
  contents?: InferTensorContentsMessage | null
}

/** `inference.ModelInferRequest.InferRequestedOutputTensor`. */
export interface InferRequestedOutputTensorMessage {
  name: string
  parameters?: InferParameterMap
}

/** `inference.ModelInferRequest`. */
export interface ModelInferRequestMessage {
  model_name: string
  model_version?: string
  id?: string
  parameters?: InferParameterMap
  inputs: readonly InferInputTensorMessage[]
  outputs?: readonly InferRequestedOutputTensorMessage[]
  raw_input_contents?: readonly Uint8Array[]
}

/** `inference.ModelInferResponse.InferOutputTensor`. */
export interface InferOutputTensorMessage {
  name: string
  datatype: string
  shape: readonly Int64[]
  parameters?: InferParameterMap
  contents?: InferTensorContentsMessage | null
}

/** `inference.ModelInferResponse`. */
export interface ModelInferResponseMessage {
  model_name: string
  model_version: string
  id?: string
  parameters?: InferParameterMap
  outputs: readonly InferOutputTensorMessage[]
  raw_output_contents?: readonly Uint8Array[]
}

/** `inference.ModelStreamInferResponse`: a response, or the error one request of the stream ended in. */
export interface ModelStreamInferResponseMessage {
  /** Empty or absent on success. */
  error_message?: string
  infer_response?: ModelInferResponseMessage | null
}

// ---------------------------------------------------------------------------------------------------------------
// Health and metadata

export type ServerLiveRequest = Record<string, never>
export interface ServerLiveResponse { live: boolean }
export type ServerReadyRequest = Record<string, never>
export interface ServerReadyResponse { ready: boolean }
export interface ModelReadyRequest { name: string, version?: string }
export interface ModelReadyResponse { ready: boolean }
export type ServerMetadataRequest = Record<string, never>

/** `inference.ServerMetadataResponse`. */
export interface ServerMetadataResponse {
  name: string
  version: string
  extensions: string[]
}

export interface ModelMetadataRequest { name: string, version?: string }

/** `inference.ModelMetadataResponse.TensorMetadata`. */
export interface TensorMetadataMessage {
  name: string
  datatype: string
  /** `-1` marks a variable dimension. */
  shape: Int64[]
}

/** `inference.ModelMetadataResponse`. */
export interface ModelMetadataResponse {
  name: string
  versions: string[]
  platform: string
  inputs: TensorMetadataMessage[]
  outputs: TensorMetadataMessage[]
}

// ---------------------------------------------------------------------------------------------------------------
// Model configuration

export interface ModelConfigRequest { name: string, version?: string }

/**
 * `inference.ModelConfig` in the shape of Triton's protobuf JSON (worker/repository/model-config.ts
 * `modelConfigToJson`): snake_case fields, enums by name, 64-bit integers as {@link Int64}, map keys as strings.
 * Typed loosely: the gRPC layer carries it, the worker's config module owns its meaning.
 */
export type ModelConfigMessage = Record<string, unknown>

/** `inference.ModelConfigResponse`. */
export interface ModelConfigResponse { config: ModelConfigMessage }

// ---------------------------------------------------------------------------------------------------------------
// Statistics

export interface ModelStatisticsRequest { name?: string, version?: string }

/** `inference.StatisticDuration`. */
export interface StatisticDurationMessage { count: Int64, ns: Int64 }

/** `inference.InferStatistics`. */
export interface InferStatisticsMessage {
  success: StatisticDurationMessage
  fail: StatisticDurationMessage
  queue: StatisticDurationMessage
  compute_input: StatisticDurationMessage
  compute_infer: StatisticDurationMessage
  compute_output: StatisticDurationMessage
  cache_hit: StatisticDurationMessage
  cache_miss: StatisticDurationMessage
}

/** `inference.InferResponseStatistics` (decoupled models, per response position). */
export interface InferResponseStatisticsMessage {
  compute_infer?: StatisticDurationMessage
  compute_output?: StatisticDurationMessage
  success?: StatisticDurationMessage
  fail?: StatisticDurationMessage
  empty_response?: StatisticDurationMessage
  cancel?: StatisticDurationMessage
}

/** `inference.InferBatchStatistics`. */
export interface InferBatchStatisticsMessage {
  batch_size: Int64
  compute_input: StatisticDurationMessage
  compute_infer: StatisticDurationMessage
  compute_output: StatisticDurationMessage
}

/** `inference.MemoryUsage`. */
export interface MemoryUsageMessage { type: string, id: Int64, byte_size: Int64 }

/** `inference.ModelStatistics`. */
export interface ModelStatisticsMessage {
  name: string
  version: string
  last_inference: Int64
  inference_count: Int64
  execution_count: Int64
  inference_stats?: InferStatisticsMessage
  batch_stats: InferBatchStatisticsMessage[]
  memory_usage: MemoryUsageMessage[]
  response_stats: Record<string, InferResponseStatisticsMessage>
}

/** `inference.ModelStatisticsResponse`. */
export interface ModelStatisticsResponse { model_stats: ModelStatisticsMessage[] }

// ---------------------------------------------------------------------------------------------------------------
// Model repository

/** `inference.ModelRepositoryParameter`: exactly one member set. */
export interface ModelRepositoryParameterMessage {
  bool_param?: boolean
  int64_param?: Int64
  string_param?: string
  bytes_param?: Uint8Array
}

export interface RepositoryIndexRequest { repository_name?: string, ready?: boolean }

/** `inference.RepositoryIndexResponse.ModelIndex`: empty strings where the HTTP index leaves a key out. */
export interface ModelIndexMessage { name: string, version: string, state: string, reason: string }

/** `inference.RepositoryIndexResponse`. */
export interface RepositoryIndexResponse { models: ModelIndexMessage[] }

/** `inference.RepositoryModelLoadRequest`. */
export interface RepositoryModelLoadRequest {
  repository_name?: string
  model_name: string
  parameters?: Record<string, ModelRepositoryParameterMessage>
}

export type RepositoryModelLoadResponse = Record<string, never>

/** `inference.RepositoryModelUnloadRequest`. */
export interface RepositoryModelUnloadRequest {
  repository_name?: string
  model_name: string
  parameters?: Record<string, ModelRepositoryParameterMessage>
}

export type RepositoryModelUnloadResponse = Record<string, never>

// ---------------------------------------------------------------------------------------------------------------
// Shared memory, trace and log settings (carried, not implemented by Flotilla)

export interface SystemSharedMemoryStatusRequest { name?: string }
export interface SystemSharedMemoryRegionStatus { name: string, key: string, offset: Int64, byte_size: Int64 }
export interface SystemSharedMemoryStatusResponse { regions: Record<string, SystemSharedMemoryRegionStatus> }
export interface SystemSharedMemoryRegisterRequest { name: string, key: string, offset?: Int64, byte_size: Int64 }
export type SystemSharedMemoryRegisterResponse = Record<string, never>
export interface SystemSharedMemoryUnregisterRequest { name?: string }
export type SystemSharedMemoryUnregisterResponse = Record<string, never>

export interface CudaSharedMemoryStatusRequest { name?: string }
export interface CudaSharedMemoryRegionStatus { name: string, device_id: Int64, byte_size: Int64 }
export interface CudaSharedMemoryStatusResponse { regions: Record<string, CudaSharedMemoryRegionStatus> }
export interface CudaSharedMemoryRegisterRequest { name: string, raw_handle: Uint8Array, device_id: Int64, byte_size: Int64 }
export type CudaSharedMemoryRegisterResponse = Record<string, never>
export interface CudaSharedMemoryUnregisterRequest { name?: string }
export type CudaSharedMemoryUnregisterResponse = Record<string, never>

/** `inference.TraceSettingRequest.SettingValue` (and the response's): no value resets to the global setting. */
export interface TraceSettingValue { value: string[] }
export interface TraceSettingRequest { settings: Record<string, TraceSettingValue>, model_name?: string }
export interface TraceSettingResponse { settings: Record<string, TraceSettingValue> }

/** `inference.LogSettingsRequest.SettingValue` (and the response's): exactly one member set. */
export interface LogSettingValue { bool_param?: boolean, uint32_param?: number, string_param?: string }
export interface LogSettingsRequest { settings: Record<string, LogSettingValue> }
export interface LogSettingsResponse { settings: Record<string, LogSettingValue> }

// ---------------------------------------------------------------------------------------------------------------
// grpc.health.v1

export type ServingStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN'
export interface HealthCheckRequest { service?: string }
export interface HealthCheckResponse { status: ServingStatus }
