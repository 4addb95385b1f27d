/**
 * KServe v2 / Open Inference Protocol types as Flotilla holds them in memory, after decoding from the wire.
 * Wire details (JSON layout, the binary extension, gRPC) live in the codecs; nothing here depends on a transport.
 */
import { type BytesData } from './bytes-data.ts'

/** Protocol datatype names, case-sensitive, as on the wire. */
export type DataType =
  | 'BOOL'
  | 'UINT8' | 'UINT16' | 'UINT32' | 'UINT64'
  | 'INT8' | 'INT16' | 'INT32' | 'INT64'
  | 'FP16' | 'BF16' | 'FP32' | 'FP64'
  | 'BYTES'

/**
 * Element storage per datatype: BOOL → Uint8Array (0/1), UINT8 → Uint8Array, UINT16 → Uint16Array,
 * UINT32 → Uint32Array, UINT64 → BigUint64Array, INT8 → Int8Array, INT16 → Int16Array, INT32 → Int32Array,
 * INT64 → BigInt64Array, FP16 and BF16 → Uint16Array holding the raw 16-bit patterns, FP32 → Float32Array,
 * FP64 → Float64Array, BYTES → {@link BytesData} (the elements packed in one buffer).
 */
export type TensorData =
  | Uint8Array | Uint16Array | Uint32Array | BigUint64Array
  | Int8Array | Int16Array | Int32Array | BigInt64Array
  | Float32Array | Float64Array
  | BytesData

/** A request or response parameter value (KServe v2 allows string, number, boolean). */
export type ParameterValue = string | number | boolean

export type Parameters = Record<string, ParameterValue>

/** One tensor: row-major, flattened, `data.length` equals the product of `shape`. */
export interface Tensor {
  name: string
  datatype: DataType
  shape: number[]
  data: TensorData
  parameters?: Parameters
}

/** An output the client asked for by name. */
export interface RequestedOutput {
  name: string
  parameters?: Parameters
}

/** A decoded inference request. Model name and version come from the URL, not the body. */
export interface InferRequest {
  /** Echoed in the response when non-empty. */
  id?: string
  parameters: Parameters
  inputs: Tensor[]
  /** Absent: every output the model declares is returned. */
  outputs?: RequestedOutput[]
}

/** An inference response before encoding. */
export interface InferResponse {
  id?: string
  model_name: string
  model_version: string
  parameters?: Parameters
  outputs: Tensor[]
}

/**
 * A tensor whose elements stay in Triton's raw binary layout (little-endian, row-major; BYTES as 4-byte
 * little-endian length-prefixed elements): what the gateway moves between gRPC and binary HTTP without decoding a
 * tensor. `datatype` is the wire string, unchecked: the worker that serves the request validates it.
 */
export interface RawTensor {
  name: string
  datatype: string
  shape: number[]
  parameters?: Parameters
  /** The elements' bytes; a view into the message or body it came from, never a copy made for its own sake. */
  raw: Uint8Array
}

/** An inference request with raw tensors (see {@link RawTensor}); model name and version travel beside it. */
export interface RawInferRequest {
  id?: string
  parameters: Parameters
  inputs: RawTensor[]
  /** Absent: every output the model declares. */
  outputs?: RequestedOutput[]
}

/** An inference response with raw tensors (see {@link RawTensor}). */
export interface RawInferResponse {
  id?: string
  model_name: string
  model_version: string
  parameters?: Parameters
  outputs: RawTensor[]
}
