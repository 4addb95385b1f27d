/**
 * Triton's gRPC messages (messages.ts) to Flotilla's types (../types.ts) and back: pure functions, no I/O.
 *
 * Inference requests follow Triton's frontend (server src/grpc/infer_handler.cc `InferGRPCToInput`,
 * `SetInferenceRequestMetadata`) and the byte-size checks of its core (`ValidateRequestInputs`,
 * `ValidateBytesInputs`), with their error texts, extended with what was expected and what came where Triton's own
 * text does not say. Every error is PROTO_ERR_INVALID_REQUEST (400 / INVALID_ARGUMENT), except an unknown datatype
 * (PROTO_ERR_INVALID_DATATYPE, as in the JSON codec) and the JSON-to-message conversions' FLT_ERR_INTERNAL (our own
 * HTTP side produced something malformed).
 *
 * Hot path (ModelInfer, thousands per second): raw tensor bytes become typed-array views over the received message,
 * with no per-element work; a copy is made only when the entry's offset in the message is not a multiple of the
 * element size (typed arrays require alignment, and where a field lands is up to the sender's encoder and grpc-js's
 * 5-byte frame header). Outputs leave as views over the tensors' own buffers; BYTES tensors are length-prefixed once.
 * `contents` (typed protobuf fields) cost a pass per element; only clients that choose them pay it.
 *
 * Deliberate differences from Triton:
 * - int64/uint64 parameter values beyond ±(2^53 − 1) are refused (Flotilla's parameters are JavaScript numbers);
 *   Triton keeps all 64 bits. Send such a value as a string_param. (int64_contents and uint64_contents elements stay
 *   exact: protobufjs's reader hands them over as numbers or bigints, never rounded, see grpc-service.ts.)
 * - An integer `contents` element the tensor's datatype cannot hold (int_contents carries 32-bit values, so 300 for
 *   INT8, or -1 in uint_contents for UINT16) is refused with a 400 naming the tensor, the index and the value; Triton
 *   keeps its low bits. The JSON codec refuses such values the same way.
 * - Shared memory is not supported: an input or output naming 'shared_memory_region' is refused with a 400.
 * - A datatype that is not a protocol name is refused while decoding (Triton refuses it later, in its core).
 * - raw_input_contents entries beyond those the inputs use are ignored, as Triton ignores them.
 * - Byte sizes assume a little-endian host (every platform Node ships for); a big-endian one would swap bytes.
 */
import * as grpc from '@grpc/grpc-js'
import { createError, isFlotillaError, type FlotillaError, type GrpcStatusName } from '../../errors.ts'
import { BytesData, BytesDataBuilder } from '../bytes-data.ts'
import { DATATYPES, allocateTensorData, elementCount, isDataType } from '../datatypes.ts'
import { requestIdPrefix } from '../json-codec.ts'
import { bytesElements, rawBytes, typedElements } from '../raw-layout.ts'
import {
  type DataType, type InferRequest, type InferResponse, type ParameterValue, type Parameters, type RawInferRequest,
  type RawInferResponse, type RawTensor, type RequestedOutput, type Tensor, type TensorData
} from '../types.ts'
import {
  type InferBatchStatisticsMessage, type InferInputTensorMessage, type InferOutputTensorMessage,
  type InferParameterChoice, type InferParameterMap, type InferParameterMessage, type InferRequestedOutputTensorMessage,
  type InferStatisticsMessage, type InferTensorContentsMessage, type Int64, type ModelConfigResponse,
  type ModelIndexMessage, type ModelInferRequestMessage, type ModelInferResponseMessage, type ModelMetadataResponse,
  type ModelRepositoryParameterMessage, type ModelStatisticsMessage, type ModelStatisticsResponse,
  type RepositoryIndexRequest, type RepositoryIndexResponse, type RepositoryModelLoadRequest,
  type RepositoryModelUnloadRequest, type ServerMetadataResponse, type StatisticDurationMessage,
  type TensorMetadataMessage
} from './messages.ts'

const MAX_SAFE_BIGINT = BigInt(Number.MAX_SAFE_INTEGER)
const EMPTY_BYTES = new Uint8Array(0)

function invalid (message: string): FlotillaError {
  return createError('PROTO_ERR_INVALID_REQUEST', message)
}

function internal (message: string): FlotillaError {
  return createError('FLT_ERR_INTERNAL', message)
}

/** Assigns an own property even for the key `__proto__`, which plain assignment would treat as the prototype. */
function setOwn (target: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') {
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })
  } else {
    target[key] = value
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Parameters

const PARAMETER_CHOICES: readonly InferParameterChoice[] =
  ['bool_param', 'int64_param', 'string_param', 'double_param', 'uint64_param']

/** Keys starting with `triton_` that requests may set (server src/common.h TRITON_RESERVED_REQUEST_PARAMS). */
const TRITON_REQUEST_PARAMS: readonly string[] = ['triton_enable_empty_final_response']

/**
 * Which oneof member a parameter sets. Decoded messages name it in `parameter_choice`; on hand-built ones it is the
 * member that is an own property (a decoded message's unset members still read their defaults from its prototype).
 */
function parameterChoice (p: InferParameterMessage | null | undefined): InferParameterChoice | undefined {
  if (p === null || p === undefined) return undefined
  const named = p.parameter_choice
  if (typeof named === 'string') return named
  for (const choice of PARAMETER_CHOICES) {
    if (Object.hasOwn(p, choice) && p[choice] !== undefined && p[choice] !== null) return choice
  }
  return undefined
}

/** An Int64 as a number when it is exact as one; undefined otherwise. */
function safeInteger (v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isSafeInteger(v) ? v : undefined
  if (typeof v === 'bigint') return v >= -MAX_SAFE_BIGINT && v <= MAX_SAFE_BIGINT ? Number(v) : undefined
  return undefined
}

function parameterValue (key: string, p: InferParameterMessage, choice: InferParameterChoice): ParameterValue {
  switch (choice) {
    case 'bool_param': return p.bool_param === true
    case 'string_param': return String(p.string_param ?? '')
    case 'double_param': return Number(p.double_param ?? 0)
    default: {
      const raw = p[choice]
      const value = safeInteger(raw)
      if (value === undefined) {
        throw invalid(
          `invalid value for '${key}' parameter: ${choice} ${String(raw)} is not an integer within ` +
          `±${Number.MAX_SAFE_INTEGER}, the integers Flotilla carries exactly; send a smaller value, or the value as a ` +
          'string_param'
        )
      }
      return value
    }
  }
}

/** Request-level parameters, with the types Triton requires of the keys it interprets itself. */
function decodeRequestParameters (map: InferParameterMap | undefined): Parameters {
  const out: Parameters = {}
  if (map === undefined || map === null) return out
  for (const key of Object.keys(map)) {
    const p = map[key]
    const choice = parameterChoice(p)
    switch (key) {
      case 'sequence_id':
        if (choice !== 'int64_param' && choice !== 'string_param') {
          throw invalid("invalid value type for 'sequence_id' parameter, expected int64_param or string_param.")
        }
        break
      case 'sequence_start':
      case 'sequence_end':
        if (choice !== 'bool_param') throw invalid(`invalid value type for '${key}' parameter, expected bool_param.`)
        break
      case 'priority':
        if (choice === 'int64_param') {
          if ((p?.int64_param ?? 0) < 0) throw invalid("invalid value for 'priority', expected value >= 0.")
        } else if (choice !== 'uint64_param') {
          throw invalid("invalid value type for 'priority' parameter, expected int64_param or uint64_param.")
        }
        break
      case 'timeout':
        if (choice !== 'int64_param') throw invalid("invalid value type for 'timeout' parameter, expected int64_param.")
        break
      default:
        if (key.startsWith('triton_')) {
          if (!TRITON_REQUEST_PARAMS.includes(key)) {
            throw invalid(
              "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting " +
              `with 'triton_' are allowed: ${TRITON_REQUEST_PARAMS.join(' ')}`
            )
          }
          if (choice !== 'bool_param') throw invalid(`invalid value type for '${key}' parameter, expected bool_param.`)
        } else if (choice === undefined || choice === 'uint64_param') {
          throw invalid(`invalid value type for '${key}' parameter, expected int64_param, bool_param, or string_param.`)
        }
    }
    setOwn(out, key, parameterValue(key, p as InferParameterMessage, choice as InferParameterChoice))
  }
  return out
}

/** Tensor and response parameters: any member; entries with none set carry nothing and are left out. */
function decodeParameters (map: InferParameterMap | undefined): Parameters | undefined {
  if (map === undefined || map === null) return undefined
  const keys = Object.keys(map)
  if (keys.length === 0) return undefined
  const out: Parameters = {}
  for (const key of keys) {
    const p = map[key]
    const choice = parameterChoice(p)
    if (choice !== undefined) setOwn(out, key, parameterValue(key, p as InferParameterMessage, choice))
  }
  return out
}

function parameterMessage (value: ParameterValue): InferParameterMessage {
  if (typeof value === 'boolean') return { bool_param: value }
  if (typeof value === 'string') return { string_param: value }
  return Number.isSafeInteger(value) ? { int64_param: value } : { double_param: value }
}

/** Parameters as a proto map: booleans and strings as such, integers as int64_param, other numbers as double_param. */
function encodeParameters (parameters: Parameters): InferParameterMap {
  const out: InferParameterMap = {}
  for (const key of Object.keys(parameters)) setOwn(out, key, parameterMessage(parameters[key] as ParameterValue))
  return out
}

// ---------------------------------------------------------------------------------------------------------------
// Shapes and sizes

type TensorKind = 'input' | 'output'

/** What error messages about one tensor need. */
interface TensorContext {
  readonly name: string
  readonly kind: TensorKind
  readonly modelName: string
  /** `[request id: ...] `, for the messages Triton's core prefixes. */
  readonly prefix: string
}

function shapeString (shape: readonly number[]): string {
  return `[${shape.join(',')}]`
}

/** A shape's dimensions as numbers. Negative ones (`-1`) pass: the worker's validation refuses them (Triton's text). */
function decodeShape (shape: readonly Int64[] | undefined, name: string, kind: TensorKind): number[] {
  const n = shape?.length ?? 0
  const out = new Array<number>(n)
  for (let i = 0; i < n; i++) {
    const d = (shape as readonly Int64[])[i]
    const value = typeof d === 'number' ? d : safeInteger(d)
    if (value === undefined) {
      throw invalid(
        `invalid shape for ${kind} '${name}': dimension ${String(d)} exceeds the maximum size of ` +
        String(Number.MAX_SAFE_INTEGER)
      )
    }
    out[i] = value
  }
  return out
}

/** Element count of a shape; undefined when a dimension is negative (then no size can be checked). */
function countOf (shape: readonly number[], ctx: TensorContext): number | undefined {
  for (let i = 0; i < shape.length; i++) if ((shape[i] as number) < 0) return undefined
  const count = elementCount(shape)
  if (count > Number.MAX_SAFE_INTEGER) {
    throw invalid(
      `invalid shape for ${ctx.kind} '${ctx.name}': shape ${shapeString(shape)} causes total element count to exceed ` +
      `maximum size of ${Number.MAX_SAFE_INTEGER}`
    )
  }
  return count
}

function byteSizeMismatch (ctx: TensorContext, expected: number, got: number): FlotillaError {
  return invalid(
    `${ctx.prefix}${ctx.kind} byte size mismatch for ${ctx.kind} '${ctx.name}' for model '${ctx.modelName}'. ` +
    `Expected ${expected}, got ${got}`
  )
}

function tooFewStrings (ctx: TensorContext, expected: number, got: number): FlotillaError {
  return invalid(
    `expected ${expected} string elements for inference ${ctx.kind} '${ctx.name}' for model '${ctx.modelName}', ` +
    `got ${got}`
  )
}

function tooManyStrings (ctx: TensorContext, expected: number): FlotillaError {
  return invalid(
    `unexpected number of string elements ${expected + 1} for inference ${ctx.kind} '${ctx.name}' for model ` +
    `'${ctx.modelName}', expecting ${expected}`
  )
}

function checkMaxBytes (ctx: TensorContext, byteSize: number, maxBytes: number): void {
  if (byteSize > maxBytes) {
    throw invalid(
      `${ctx.kind} '${ctx.name}' has a byte_size (${byteSize} bytes) that exceeds the maximum allowed value of ` +
      `${maxBytes} bytes`
    )
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Raw tensor bytes

/**
 * BYTES elements from Triton's raw layout (4-byte little-endian length, then the bytes), as views into `raw`, with
 * the core's element-count and truncation messages. `count` undefined: as many as there are.
 */
function parseBytesElements (raw: Uint8Array, count: number | undefined, ctx: TensorContext): BytesData {
  return bytesElements(raw, count, {
    tooMany: () => tooManyStrings(ctx, count ?? 0),
    incompleteData: (length, available) => invalid(
      `incomplete string data for inference ${ctx.kind} '${ctx.name}' for model '${ctx.modelName}', expecting ` +
      `string of length ${length} but only ${available} bytes available`
    ),
    incompleteLength: (available) => invalid(
      `incomplete string length indicator for inference ${ctx.kind} '${ctx.name}' for model '${ctx.modelName}', ` +
      `expecting 4 bytes but only ${available} bytes available. Please make sure the string length indicator is in ` +
      'one buffer.'
    ),
    tooFew: (got) => tooFewStrings(ctx, count ?? 0, got)
  })
}

/** Tensor data from its raw bytes, checked against the shape (Triton core's byte-size check). */
function fromRaw (
  datatype: DataType, raw: Uint8Array, count: number | undefined, ctx: TensorContext, maxBytes: number
): TensorData {
  checkMaxBytes(ctx, raw.byteLength, maxBytes)
  const size = DATATYPES[datatype].byteSize
  if (size === 0) return parseBytesElements(raw, count, ctx)
  if (count !== undefined && raw.byteLength !== count * size) throw byteSizeMismatch(ctx, count * size, raw.byteLength)
  return typedElements(datatype, raw, count ?? Math.floor(raw.byteLength / size))
}

// ---------------------------------------------------------------------------------------------------------------
// Typed contents

const CONTENTS_FIELDS = [
  'bool_contents', 'int_contents', 'int64_contents', 'uint_contents', 'uint64_contents', 'fp32_contents',
  'fp64_contents', 'bytes_contents'
] as const
type ContentsField = typeof CONTENTS_FIELDS[number]

/** The datatype a contents field carries for a tensor of `datatype` (int_contents is INT8/INT16 when asked for those). */
function contentsType (field: ContentsField, datatype: string): string {
  switch (field) {
    case 'bool_contents': return 'BOOL'
    case 'int_contents': return datatype === 'INT8' || datatype === 'INT16' ? datatype : 'INT32'
    case 'int64_contents': return 'INT64'
    case 'uint_contents': return datatype === 'UINT8' || datatype === 'UINT16' ? datatype : 'UINT32'
    case 'uint64_contents': return 'UINT64'
    case 'fp32_contents': return 'FP32'
    case 'fp64_contents': return 'FP64'
    case 'bytes_contents': return 'BYTES'
  }
}

/**
 * The one contents field that holds elements, checked as Triton's frontend checks it (`InferGRPCToInputHelper`):
 * fields in declaration order, a second non-empty field is refused, and the field must carry the tensor's datatype.
 * Undefined when no field has elements (then the tensor has zero elements, which the size check judges).
 */
function contentsField (
  contents: InferTensorContentsMessage, datatype: string, ctx: TensorContext
): ContentsField | undefined {
  const expected = isDataType(datatype) ? datatype : 'INVALID'
  let found: ContentsField | undefined
  for (const field of CONTENTS_FIELDS) {
    const values = contents[field]
    if (values === undefined || values === null || values.length === 0) continue
    if (found !== undefined) {
      throw invalid(
        `unexpected explicit tensor data for ${ctx.kind} tensor '${ctx.name}' for model '${ctx.modelName}', binary data ` +
        `was already supplied. (${found} and ${field} both hold elements; use only the field of datatype '${expected}')`
      )
    }
    const type = contentsType(field, datatype)
    if (type !== expected) {
      throw invalid(
        `unexpected explicit tensor data for ${ctx.kind} tensor '${ctx.name}' for model '${ctx.modelName}' of type ` +
        `'${type}', expected datatype '${expected}'`
      )
    }
    found = field
  }
  return found
}

/**
 * The message for a contents element the tensor's datatype cannot hold: int_contents carries 32-bit values for INT8
 * and INT16 (uint_contents for UINT8 and UINT16), and hand-built messages may hold any number. Triton keeps the low
 * bits; we refuse, as the JSON codec refuses such values.
 */
function contentsRangeError (
  ctx: TensorContext, field: ContentsField, datatype: DataType, index: number, value: unknown
): FlotillaError {
  const range = DATATYPES[datatype].integerRange
  const holds = range === undefined ? '' : `: ${datatype} holds integers in [${range.min}, ${range.max}]`
  return invalid(
    `invalid value ${String(value)} at index ${index} of ${field} for ${ctx.kind} tensor '${ctx.name}' for model ` +
    `'${ctx.modelName}'${holds}`
  )
}

/** Up-to-32-bit integer contents, each checked against the datatype's range (numbers from the message). */
function integerArray<T extends Int8Array | Int16Array | Int32Array | Uint8Array | Uint16Array | Uint32Array> (
  out: T, values: ArrayLike<number>, datatype: DataType, field: ContentsField, ctx: TensorContext
): T {
  const range = DATATYPES[datatype].integerRange
  /* c8 ignore next */
  if (range === undefined) throw internal(`${datatype} is not an integer datatype`)
  const min = Number(range.min)
  const max = Number(range.max)
  for (let i = 0; i < values.length; i++) {
    const v = values[i] as number
    // Integer-valued and in range; NaN fails both comparisons.
    if (!(v >= min && v <= max) || v !== Math.trunc(v)) throw contentsRangeError(ctx, field, datatype, i, v)
    out[i] = v
  }
  return out
}

/**
 * int64/uint64 contents: exact as decoded (number or bigint, messages.ts), checked against the datatype's range, which
 * only a hand-built message can leave (a BigInt64Array store would wrap silently).
 */
function int64Array<T extends BigInt64Array | BigUint64Array> (
  out: T, values: ArrayLike<Int64>, datatype: DataType, field: ContentsField, ctx: TensorContext
): T {
  const range = DATATYPES[datatype].integerRange
  /* c8 ignore next */
  if (range === undefined) throw internal(`${datatype} is not an integer datatype`)
  for (let i = 0; i < values.length; i++) {
    const v = values[i] as Int64
    if (typeof v !== 'bigint' && !Number.isInteger(v)) throw contentsRangeError(ctx, field, datatype, i, v)
    const big = typeof v === 'bigint' ? v : BigInt(v)
    if (big < range.min || big > range.max) throw contentsRangeError(ctx, field, datatype, i, v)
    out[i] = big
  }
  return out
}

/**
 * Contents as typed storage. Integer elements must fit the tensor's datatype (see {@link contentsRangeError}).
 */
function contentsToData (
  datatype: DataType, contents: InferTensorContentsMessage, field: ContentsField | undefined, ctx: TensorContext
): TensorData {
  if (field === undefined) return allocateTensorData(datatype, 0)
  const values = contents[field] as ArrayLike<never>
  const n = values.length
  switch (datatype) {
    case 'BOOL': {
      const bools = values as ArrayLike<boolean | number>
      const out = new Uint8Array(bools.length)
      for (let i = 0; i < bools.length; i++) out[i] = bools[i] === true || bools[i] === 1 ? 1 : 0
      return out
    }
    case 'INT8': return integerArray(new Int8Array(n), values, datatype, field, ctx)
    case 'INT16': return integerArray(new Int16Array(n), values, datatype, field, ctx)
    case 'INT32': return integerArray(new Int32Array(n), values, datatype, field, ctx)
    case 'UINT8': return integerArray(new Uint8Array(n), values, datatype, field, ctx)
    case 'UINT16': return integerArray(new Uint16Array(n), values, datatype, field, ctx)
    case 'UINT32': return integerArray(new Uint32Array(n), values, datatype, field, ctx)
    case 'INT64': return int64Array(new BigInt64Array(n), values as ArrayLike<Int64>, datatype, field, ctx)
    case 'UINT64': return int64Array(new BigUint64Array(n), values as ArrayLike<Int64>, datatype, field, ctx)
    case 'FP32': return new Float32Array(values as ArrayLike<number>)
    case 'FP64': return new Float64Array(values as ArrayLike<number>)
    case 'BYTES': {
      // Views of the message the elements arrived in, as long as they all are.
      const elements = values as ArrayLike<Uint8Array>
      const out = new BytesDataBuilder(elements.length)
      for (let i = 0; i < elements.length; i++) {
        const e = elements[i] as Uint8Array
        out.pushView(e, 0, e.length)
      }
      return out.finish()
    }
    /* c8 ignore next 3 */ // contentsField never matches FP16/BF16: they have no contents field
    case 'FP16':
    case 'BF16':
      return allocateTensorData(datatype, 0)
  }
}

/** Contents as tensor data, with the core's element-count checks. */
function fromContents (
  datatype: DataType, contents: InferTensorContentsMessage, field: ContentsField | undefined,
  count: number | undefined, ctx: TensorContext, maxBytes: number
): TensorData {
  const length = field === undefined ? 0 : (contents[field] as ArrayLike<unknown>).length
  const size = DATATYPES[datatype].byteSize
  if (count !== undefined && length !== count) {
    if (size !== 0) throw byteSizeMismatch(ctx, count * size, length * size)
    throw length < count ? tooFewStrings(ctx, count, length) : tooManyStrings(ctx, count)
  }
  if (size !== 0) checkMaxBytes(ctx, length * size, maxBytes)
  const data = contentsToData(datatype, contents, field, ctx)
  if (size === 0) checkMaxBytes(ctx, data.byteLength, maxBytes)
  return data
}

/** Typed contents for a tensor, for clients that send `contents`; FP16 and BF16 have none. */
function dataToContents (tensor: Tensor): InferTensorContentsMessage {
  const data = tensor.data
  switch (tensor.datatype) {
    // 0/1 bytes encode as bools directly; no conversion pass.
    case 'BOOL': return { bool_contents: data as Uint8Array }
    case 'INT8': case 'INT16': case 'INT32': return { int_contents: data as Int8Array | Int16Array | Int32Array }
    case 'UINT8': case 'UINT16': case 'UINT32': return { uint_contents: data as Uint8Array | Uint16Array | Uint32Array }
    case 'INT64': return { int64_contents: Array.from(data as BigInt64Array) }
    case 'UINT64': return { uint64_contents: Array.from(data as BigUint64Array) }
    case 'FP32': return { fp32_contents: data as Float32Array }
    case 'FP64': return { fp64_contents: data as Float64Array }
    case 'BYTES': return { bytes_contents: (data as BytesData).toArray() }
    case 'FP16':
    case 'BF16':
      throw invalid(
        `${tensor.datatype} input '${tensor.name}' can only travel in raw_input_contents, and raw_input_contents cannot ` +
        'be mixed with contents; encode this request without the contents option'
      )
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Requests

const SHARED_MEMORY_REGION = 'shared_memory_region'

function hasContents (tensor: InferInputTensorMessage | InferOutputTensorMessage): boolean {
  return tensor.contents !== undefined && tensor.contents !== null
}

/** Triton's shared-memory precedence, then our refusal: Flotilla cannot read a client's shared memory. */
function checkSharedMemory (input: InferInputTensorMessage, ctx: TensorContext): void {
  const parameters = input.parameters
  if (parameters === undefined || parameters === null || !Object.hasOwn(parameters, SHARED_MEMORY_REGION)) return
  if (hasContents(input)) {
    throw invalid(
      `unexpected 'content' provided when using shared memory for input tensor '${ctx.name}' for model '${ctx.modelName}'`
    )
  }
  throw invalid(
    `input '${ctx.name}' sets '${SHARED_MEMORY_REGION}' in 'parameters', but the shared-memory extension is not ` +
    'supported; send the tensor in raw_input_contents or in contents'
  )
}

function decodeRequestedOutputs (
  outputs: readonly InferRequestedOutputTensorMessage[] | undefined, prefix: string
): RequestedOutput[] | undefined {
  // No outputs named: every output the model declares.
  if (outputs === undefined || outputs === null || outputs.length === 0) return undefined
  const out = new Array<RequestedOutput>(outputs.length)
  const seen = new Set<string>()
  for (let i = 0; i < outputs.length; i++) {
    const o = outputs[i] as InferRequestedOutputTensorMessage
    const name = o.name ?? ''
    if (seen.has(name)) throw invalid(`${prefix}output '${name}' already exists in request`)
    seen.add(name)
    if (o.parameters !== undefined && o.parameters !== null && Object.hasOwn(o.parameters, SHARED_MEMORY_REGION)) {
      throw invalid(
        `output '${name}' sets '${SHARED_MEMORY_REGION}' in 'parameters', but the shared-memory extension is not ` +
        'supported; leave it out to receive the output in raw_output_contents'
      )
    }
    const requested: RequestedOutput = { name }
    const parameters = decodeParameters(o.parameters)
    if (parameters !== undefined) requested.parameters = parameters
    out[i] = requested
  }
  return out
}

/** Where one input's data is: its contents, or its raw_input_contents entry. */
type InputSource =
  | { readonly contents: InferTensorContentsMessage, readonly raw: null }
  | { readonly contents: null, readonly raw: Uint8Array }

/** Walks the inputs as Triton does, pairing each with its data source; shared by both request decoders. */
function inputSources (msg: ModelInferRequestMessage, modelName: string, prefix: string): InputSource[] {
  const raws = msg.raw_input_contents ?? []
  const inputs = msg.inputs ?? []
  const out = new Array<InputSource>(inputs.length)
  const seen = new Set<string>()
  let rawIndex = 0
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i] as InferInputTensorMessage
    const name = input.name ?? ''
    const ctx: TensorContext = { name, kind: 'input', modelName, prefix }
    if (seen.has(name)) throw invalid(`${prefix}input '${name}' already exists in request`)
    seen.add(name)
    checkSharedMemory(input, ctx)
    if (hasContents(input)) {
      if (raws.length > 0) {
        throw invalid(
          `contents field must not be specified when using raw_input_contents for '${name}' for model '${modelName}'`
        )
      }
      out[i] = { contents: input.contents as InferTensorContentsMessage, raw: null }
    } else if (rawIndex < raws.length) {
      out[i] = { contents: null, raw: raws[rawIndex++] as Uint8Array }
    } else {
      throw invalid(`unable to find data for input tensor '${name}' for model '${modelName}' in request.`)
    }
  }
  return out
}

/** Options for {@link decodeModelInferRequest}. */
export interface DecodeModelInferRequestOptions {
  /** Largest decoded size of one input in bytes (BYTES elements count 4 + length). Default: only the transport's limit. */
  maxInputBytes?: number
}

/** A decoded ModelInferRequest: the request, and the model and version it addresses ('' = the server's choice). */
export interface DecodedModelInferRequest<R> {
  modelName: string
  modelVersion: string
  request: R
}

/**
 * A ModelInferRequest as Flotilla's InferRequest, with Triton's rules and messages (triton-behaviour.md §4). Per
 * input, in order: shared memory is refused; `contents` (present, even empty) must not be mixed with
 * raw_input_contents and must use the one field matching the datatype (INT8/INT16 from int_contents, UINT8/UINT16
 * from uint_contents, BYTES from bytes_contents, FP16/BF16 never); otherwise the next raw_input_contents entry is the
 * input's; otherwise the data is missing. Sizes are then checked against the shape (fixed-size types by bytes, BYTES
 * by element count, with Triton core's texts). Raw fixed-size data becomes typed views over the message's bytes (an
 * aligned copy where the entry is misaligned); raw BYTES elements are views too. A `-1` in a shape passes (no size
 * can be checked then); the worker's validation refuses it. Parameters follow Triton's types for the keys it
 * interprets (sequence_id, sequence_start/end, priority, timeout, triton_*); other keys take int64, bool, string or
 * double (not uint64). int64/uint64 values beyond ±(2^53 − 1) are refused (see the module comment).
 * @returns the model name and version beside the request; `id` is set only when not empty
 * @throws FlotillaError PROTO_ERR_INVALID_REQUEST, or PROTO_ERR_INVALID_DATATYPE for a datatype that is not a protocol name
 */
export function decodeModelInferRequest (
  msg: ModelInferRequestMessage, options: DecodeModelInferRequestOptions = {}
): DecodedModelInferRequest<InferRequest> {
  const maxBytes = options.maxInputBytes ?? Number.POSITIVE_INFINITY
  const modelName = msg.model_name ?? ''
  const id = msg.id ?? ''
  const prefix = requestIdPrefix(id)
  const parameters = decodeRequestParameters(msg.parameters)
  const sources = inputSources(msg, modelName, prefix)
  const inputs = msg.inputs ?? []
  const tensors = new Array<Tensor>(inputs.length)
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i] as InferInputTensorMessage
    const source = sources[i] as InputSource
    const name = input.name ?? ''
    const datatype = input.datatype ?? ''
    const ctx: TensorContext = { name, kind: 'input', modelName, prefix }
    // Triton's frontend judges the contents fields before its core judges the datatype.
    const field = source.contents !== null ? contentsField(source.contents, datatype, ctx) : undefined
    if (!isDataType(datatype)) throw createError('PROTO_ERR_INVALID_DATATYPE', name)
    const shape = decodeShape(input.shape, name, 'input')
    const count = countOf(shape, ctx)
    const data = source.contents !== null
      ? fromContents(datatype, source.contents, field, count, ctx, maxBytes)
      : fromRaw(datatype, source.raw, count, ctx, maxBytes)
    const tensor: Tensor = { name, datatype, shape, data }
    const tensorParameters = decodeParameters(input.parameters)
    if (tensorParameters !== undefined) tensor.parameters = tensorParameters
    tensors[i] = tensor
  }
  const request: InferRequest = { parameters, inputs: tensors }
  if (id !== '') request.id = id
  const outputs = decodeRequestedOutputs(msg.outputs, prefix)
  if (outputs !== undefined) request.outputs = outputs
  return { modelName, modelVersion: msg.model_version ?? '', request }
}

/**
 * For the gateway, which must not decode tensors: the request with raw tensors. raw_input_contents entries are
 * passed on as the very same views (no copy); `contents` are converted to Triton's raw layout, the only per-element
 * work, and only for clients that send contents. The structural checks and messages are decodeModelInferRequest's
 * (duplicates, shared memory, contents mixed with raw, wrong contents field, missing data, parameter types); datatypes
 * and byte sizes are left to the worker that serves the request.
 * @throws FlotillaError PROTO_ERR_INVALID_REQUEST
 */
export function modelInferRequestToRaw (msg: ModelInferRequestMessage): DecodedModelInferRequest<RawInferRequest> {
  const modelName = msg.model_name ?? ''
  const id = msg.id ?? ''
  const prefix = requestIdPrefix(id)
  const parameters = decodeRequestParameters(msg.parameters)
  const sources = inputSources(msg, modelName, prefix)
  const inputs = msg.inputs ?? []
  const tensors = new Array<RawTensor>(inputs.length)
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i] as InferInputTensorMessage
    const source = sources[i] as InputSource
    const name = input.name ?? ''
    const datatype = input.datatype ?? ''
    let raw: Uint8Array
    if (source.contents !== null) {
      const ctx: TensorContext = { name, kind: 'input', modelName, prefix }
      const field = contentsField(source.contents, datatype, ctx)
      // A matched field implies a protocol datatype; no field means no elements.
      raw = field === undefined ? EMPTY_BYTES : rawBytes(contentsToData(datatype as DataType, source.contents, field, ctx))
    } else {
      raw = source.raw
    }
    const tensor: RawTensor = { name, datatype, shape: decodeShape(input.shape, name, 'input'), raw }
    const tensorParameters = decodeParameters(input.parameters)
    if (tensorParameters !== undefined) tensor.parameters = tensorParameters
    tensors[i] = tensor
  }
  const request: RawInferRequest = { parameters, inputs: tensors }
  if (id !== '') request.id = id
  const outputs = decodeRequestedOutputs(msg.outputs, prefix)
  if (outputs !== undefined) request.outputs = outputs
  return { modelName, modelVersion: msg.model_version ?? '', request }
}

/** Options for {@link encodeModelInferRequest}. */
export interface EncodeModelInferRequestOptions {
  /** Send typed `contents` instead of raw_input_contents (refused for FP16/BF16 inputs, which have no contents field). */
  contents?: boolean
}

function requestedOutputMessages (outputs: readonly RequestedOutput[]): InferRequestedOutputTensorMessage[] {
  return outputs.map(o => {
    const m: InferRequestedOutputTensorMessage = { name: o.name }
    if (o.parameters !== undefined) m.parameters = encodeParameters(o.parameters)
    return m
  })
}

/**
 * An InferRequest as a ModelInferRequest (clients, tests, load generators): raw_input_contents by default (views over
 * the tensors' buffers, BYTES serialized once), or typed `contents` when asked. Parameters: booleans and strings as
 * such, safe integers as int64_param, other numbers as double_param.
 */
export function encodeModelInferRequest (
  modelName: string, modelVersion: string, request: InferRequest, options: EncodeModelInferRequestOptions = {}
): ModelInferRequestMessage {
  const useContents = options.contents === true
  const inputs = new Array<InferInputTensorMessage>(request.inputs.length)
  const raw: Uint8Array[] = []
  for (let i = 0; i < request.inputs.length; i++) {
    const t = request.inputs[i] as Tensor
    const input: InferInputTensorMessage = { name: t.name, datatype: t.datatype, shape: t.shape }
    if (t.parameters !== undefined) input.parameters = encodeParameters(t.parameters)
    if (useContents) input.contents = dataToContents(t)
    else raw.push(rawBytes(t.data))
    inputs[i] = input
  }
  const msg: ModelInferRequestMessage = { model_name: modelName, model_version: modelVersion, inputs }
  if (raw.length > 0) msg.raw_input_contents = raw
  if (request.id !== undefined && request.id !== '') msg.id = request.id
  if (Object.keys(request.parameters).length > 0) msg.parameters = encodeParameters(request.parameters)
  if (request.outputs !== undefined) msg.outputs = requestedOutputMessages(request.outputs)
  return msg
}

// ---------------------------------------------------------------------------------------------------------------
// Responses

/**
 * An InferResponse as a ModelInferResponse, as Triton answers: every output in raw_output_contents (one entry per
 * output, in order), straight from the tensors' buffers (views, no per-element work; BYTES length-prefixed once into
 * one allocation), `contents` unset.
 */
export function encodeModelInferResponse (response: InferResponse): ModelInferResponseMessage {
  const n = response.outputs.length
  const outputs = new Array<InferOutputTensorMessage>(n)
  const raw = new Array<Uint8Array>(n)
  for (let i = 0; i < n; i++) {
    const t = response.outputs[i] as Tensor
    const out: InferOutputTensorMessage = { name: t.name, datatype: t.datatype, shape: t.shape }
    if (t.parameters !== undefined) out.parameters = encodeParameters(t.parameters)
    outputs[i] = out
    raw[i] = rawBytes(t.data)
  }
  return responseMessage(response, outputs, raw)
}

/** For the gateway: raw outputs as a ModelInferResponse; raw_output_contents are the tensors' own `raw` views. */
export function rawToModelInferResponse (response: RawInferResponse): ModelInferResponseMessage {
  const n = response.outputs.length
  const outputs = new Array<InferOutputTensorMessage>(n)
  const raw = new Array<Uint8Array>(n)
  for (let i = 0; i < n; i++) {
    const t = response.outputs[i] as RawTensor
    const out: InferOutputTensorMessage = { name: t.name, datatype: t.datatype, shape: t.shape }
    if (t.parameters !== undefined) out.parameters = encodeParameters(t.parameters)
    outputs[i] = out
    raw[i] = t.raw
  }
  return responseMessage(response, outputs, raw)
}

function responseMessage (
  response: InferResponse | RawInferResponse, outputs: InferOutputTensorMessage[], raw: Uint8Array[]
): ModelInferResponseMessage {
  const msg: ModelInferResponseMessage = {
    model_name: response.model_name, model_version: response.model_version, outputs, raw_output_contents: raw
  }
  if (response.id !== undefined && response.id !== '') msg.id = response.id
  if (response.parameters !== undefined) msg.parameters = encodeParameters(response.parameters)
  return msg
}

/**
 * A ModelInferResponse as an InferResponse (clients, tests): typed views over raw_output_contents (an aligned copy
 * where an entry is misaligned), or the outputs' `contents`, with the same checks and messages as requests.
 * @throws FlotillaError PROTO_ERR_INVALID_REQUEST for a malformed response
 */
export function decodeModelInferResponse (msg: ModelInferResponseMessage): InferResponse {
  const modelName = msg.model_name ?? ''
  const id = msg.id ?? ''
  const prefix = requestIdPrefix(id)
  const raws = msg.raw_output_contents ?? []
  const outputs = msg.outputs ?? []
  const tensors = new Array<Tensor>(outputs.length)
  let rawIndex = 0
  for (let i = 0; i < outputs.length; i++) {
    const output = outputs[i] as InferOutputTensorMessage
    const name = output.name ?? ''
    const datatype = output.datatype ?? ''
    const ctx: TensorContext = { name, kind: 'output', modelName, prefix }
    let data: TensorData
    if (hasContents(output)) {
      if (raws.length > 0) {
        throw invalid(
          `contents field must not be specified when using raw_output_contents for '${name}' for model '${modelName}'`
        )
      }
      const contents = output.contents as InferTensorContentsMessage
      const field = contentsField(contents, datatype, ctx)
      if (!isDataType(datatype)) throw notADatatype(name, datatype)
      const shape = decodeShape(output.shape, name, 'output')
      data = fromContents(datatype, contents, field, countOf(shape, ctx), ctx, Number.POSITIVE_INFINITY)
      tensors[i] = outputTensor(output, name, datatype, shape, data)
      continue
    }
    if (rawIndex >= raws.length) {
      throw invalid(`unable to find data for output tensor '${name}' for model '${modelName}' in response.`)
    }
    if (!isDataType(datatype)) throw notADatatype(name, datatype)
    const shape = decodeShape(output.shape, name, 'output')
    data = fromRaw(datatype, raws[rawIndex++] as Uint8Array, countOf(shape, ctx), ctx, Number.POSITIVE_INFINITY)
    tensors[i] = outputTensor(output, name, datatype, shape, data)
  }
  const response: InferResponse = { model_name: modelName, model_version: msg.model_version ?? '', outputs: tensors }
  if (id !== '') response.id = id
  const parameters = decodeParameters(msg.parameters)
  if (parameters !== undefined) response.parameters = parameters
  return response
}

function notADatatype (name: string, datatype: string): FlotillaError {
  return invalid(`output '${name}' has datatype '${datatype}', which is not a protocol datatype`)
}

function outputTensor (
  output: InferOutputTensorMessage, name: string, datatype: DataType, shape: number[], data: TensorData
): Tensor {
  const tensor: Tensor = { name, datatype, shape, data }
  const parameters = decodeParameters(output.parameters)
  if (parameters !== undefined) tensor.parameters = parameters
  return tensor
}

// ---------------------------------------------------------------------------------------------------------------
// The HTTP API's JSON bodies as gRPC messages, so the gRPC fronts answer what the HTTP side answers.

type JsonObject = Record<string, unknown>

function isObject (v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function requireObject (v: unknown, what: string): JsonObject {
  if (!isObject(v)) throw internal(`${what} must be a JSON object, got ${Array.isArray(v) ? 'an array' : typeof v}`)
  return v
}

function stringOf (o: JsonObject, key: string, what: string): string {
  const v = o[key]
  if (v === undefined) return ''
  if (typeof v !== 'string') throw internal(`${what}: '${key}' must be a string, got ${typeof v}`)
  return v
}

function arrayOf (o: JsonObject, key: string, what: string): unknown[] {
  const v = o[key]
  if (v === undefined) return []
  if (!Array.isArray(v)) throw internal(`${what}: '${key}' must be an array`)
  return v
}

function stringsOf (o: JsonObject, key: string, what: string): string[] {
  return arrayOf(o, key, what).map((v, i) => {
    if (typeof v !== 'string') throw internal(`${what}: '${key}[${i}]' must be a string`)
    return v
  })
}

/** A 64-bit JSON value: an integer number, a bigint, or a decimal string (for values JSON numbers cannot hold). */
function int64Of (v: unknown, what: string): Int64 {
  if (v === undefined) return 0
  if (typeof v === 'number' && Number.isInteger(v)) return v
  if (typeof v === 'bigint') return v
  if (typeof v === 'string' && /^-?[0-9]+$/.test(v)) {
    const big = BigInt(v)
    return safeInteger(big) ?? big
  }
  throw internal(`${what} must be an integer, got ${typeof v === 'string' ? JSON.stringify(v) : typeof v}`)
}

function tensorMetadata (v: unknown, what: string): TensorMetadataMessage {
  const o = requireObject(v, what)
  return {
    name: stringOf(o, 'name', what),
    datatype: stringOf(o, 'datatype', what),
    shape: arrayOf(o, 'shape', what).map((d, i) => int64Of(d, `${what}: 'shape[${i}]'`))
  }
}

/** `GET /v2/models/{m}[/versions/{v}]`'s body as ModelMetadataResponse. */
export function modelMetadataToMessage (json: unknown): ModelMetadataResponse {
  const what = 'model metadata'
  const o = requireObject(json, what)
  return {
    name: stringOf(o, 'name', what),
    versions: stringsOf(o, 'versions', what),
    platform: stringOf(o, 'platform', what),
    inputs: arrayOf(o, 'inputs', what).map((t, i) => tensorMetadata(t, `${what}: 'inputs[${i}]'`)),
    outputs: arrayOf(o, 'outputs', what).map((t, i) => tensorMetadata(t, `${what}: 'outputs[${i}]'`))
  }
}

/** `GET /v2`'s body as ServerMetadataResponse. */
export function serverMetadataToMessage (json: unknown): ServerMetadataResponse {
  const what = 'server metadata'
  const o = requireObject(json, what)
  return {
    name: stringOf(o, 'name', what),
    version: stringOf(o, 'version', what),
    extensions: stringsOf(o, 'extensions', what)
  }
}

/** `POST /v2/repository/index`'s JSON array as RepositoryIndexResponse; keys the HTTP index leaves out become ''. */
export function repositoryIndexToMessage (json: unknown): RepositoryIndexResponse {
  if (!Array.isArray(json)) throw internal('the repository index must be a JSON array')
  const models = json.map((entry, i): ModelIndexMessage => {
    const what = `repository index entry ${i}`
    const o = requireObject(entry, what)
    return {
      name: stringOf(o, 'name', what),
      version: stringOf(o, 'version', what),
      state: stringOf(o, 'state', what),
      reason: stringOf(o, 'reason', what)
    }
  })
  return { models }
}

function duration (v: unknown, what: string): StatisticDurationMessage {
  const o = requireObject(v, what)
  return { count: int64Of(o.count, `${what}.count`), ns: int64Of(o.ns, `${what}.ns`) }
}

const INFER_STATS_KEYS = [
  'success', 'fail', 'queue', 'compute_input', 'compute_infer', 'compute_output', 'cache_hit', 'cache_miss'
] as const
const BATCH_STATS_KEYS = ['compute_input', 'compute_infer', 'compute_output'] as const
const RESPONSE_STATS_KEYS = ['compute_infer', 'compute_output', 'success', 'fail', 'empty_response', 'cancel'] as const

/** The durations of `keys` present in `o` (absent ones stay absent: unset sub-messages, as Triton prints them). */
function durations (o: JsonObject, keys: readonly string[], what: string): Record<string, StatisticDurationMessage> {
  const out: Record<string, StatisticDurationMessage> = {}
  for (const key of keys) if (o[key] !== undefined) out[key] = duration(o[key], `${what}.${key}`)
  return out
}

function modelStatistics (v: unknown, what: string): ModelStatisticsMessage {
  const o = requireObject(v, what)
  const stats: ModelStatisticsMessage = {
    name: stringOf(o, 'name', what),
    version: stringOf(o, 'version', what),
    last_inference: int64Of(o.last_inference, `${what}.last_inference`),
    inference_count: int64Of(o.inference_count, `${what}.inference_count`),
    execution_count: int64Of(o.execution_count, `${what}.execution_count`),
    batch_stats: arrayOf(o, 'batch_stats', what).map((b, i) => {
      const bw = `${what}.batch_stats[${i}]`
      const bo = requireObject(b, bw)
      // Durations the JSON leaves out stay unset sub-messages (the type says present: decoders always give them).
      const batch = { batch_size: int64Of(bo.batch_size, `${bw}.batch_size`), ...durations(bo, BATCH_STATS_KEYS, bw) }
      return batch as InferBatchStatisticsMessage
    }),
    memory_usage: arrayOf(o, 'memory_usage', what).map((m, i) => {
      const mw = `${what}.memory_usage[${i}]`
      const mo = requireObject(m, mw)
      return {
        type: stringOf(mo, 'type', mw), id: int64Of(mo.id, `${mw}.id`), byte_size: int64Of(mo.byte_size, `${mw}.byte_size`)
      }
    }),
    response_stats: {}
  }
  if (o.inference_stats !== undefined) {
    const iw = `${what}.inference_stats`
    const inference = durations(requireObject(o.inference_stats, iw), INFER_STATS_KEYS, iw)
    stats.inference_stats = inference as unknown as InferStatisticsMessage
  }
  if (o.response_stats !== undefined) {
    const rw = `${what}.response_stats`
    const ro = requireObject(o.response_stats, rw)
    for (const key of Object.keys(ro)) {
      const kw = `${rw}.${key}`
      setOwn(stats.response_stats, key, durations(requireObject(ro[key], kw), RESPONSE_STATS_KEYS, kw))
    }
  }
  return stats
}

/**
 * The statistics endpoint's body (`{"model_stats":[...]}`) as ModelStatisticsResponse. Counters may be numbers,
 * bigints or decimal strings; JSON.parse rounds integers beyond 2^53 (nanosecond sums get there after ~104 days of
 * summed time), so pass such values as bigints or strings to keep them exact.
 */
export function modelStatisticsToMessage (statsJson: unknown): ModelStatisticsResponse {
  const o = requireObject(statsJson, 'model statistics')
  const entries = arrayOf(o, 'model_stats', 'model statistics')
  return { model_stats: entries.map((s, i) => modelStatistics(s, `model_stats[${i}]`)) }
}

/**
 * `GET /v2/models/{m}/config`'s body (worker/repository/model-config.ts `modelConfigToJson`, Triton's protobuf JSON:
 * snake_case, enums by name, 64-bit integers as numbers) as ModelConfigResponse. The object goes to the wire as it is
 * (the serializer maps enum names and integers); the only rewrite is ModelEnsembling field 2, which the JSON may
 * also spell by its older name, max_inflight_requests.
 */
export function modelConfigToMessage (configJson: unknown): ModelConfigResponse {
  const config = requireObject(configJson, 'model configuration')
  const ensemble = config.ensemble_scheduling
  if (!isObject(ensemble) || !Object.hasOwn(ensemble, 'max_inflight_requests')) return { config }
  const { max_inflight_requests: legacy, ...rest } = ensemble
  const current = rest.max_inflight_responses
  const value = current !== undefined && current !== 0 ? current : legacy
  return { config: { ...config, ensemble_scheduling: { ...rest, max_inflight_responses: value } } }
}

// ---------------------------------------------------------------------------------------------------------------
// gRPC repository requests as the HTTP API's JSON bodies.

function refuseRepositoryName (name: string | undefined): void {
  // Triton answers UNSUPPORTED (gRPC UNIMPLEMENTED), as for the HTTP route with a repository segment.
  if (name !== undefined && name !== null && name !== '') {
    throw createError('PROTO_ERR_UNSUPPORTED', "'repository_name' specification is not supported")
  }
}

/** Which member of a repository parameter is set (hand-built messages: the own property). */
function repositoryParameterChoice (p: ModelRepositoryParameterMessage | null | undefined): string | undefined {
  if (p === null || p === undefined) return undefined
  const named = (p as { parameter_choice?: unknown }).parameter_choice
  if (typeof named === 'string') return named
  for (const choice of ['bool_param', 'int64_param', 'string_param', 'bytes_param'] as const) {
    if (Object.hasOwn(p, choice) && p[choice] !== undefined && p[choice] !== null) return choice
  }
  return undefined
}

/** RepositoryIndex's request as `POST /v2/repository/index`'s body. */
export function repositoryIndexRequestToJson (msg: RepositoryIndexRequest): { ready: boolean } {
  refuseRepositoryName(msg.repository_name)
  return { ready: msg.ready === true }
}

/**
 * RepositoryModelLoad's request as `POST /v2/repository/models/{model_name}/load`'s body, with Triton's gRPC rules:
 * `config` must be a string_param (the ModelConfig JSON), `file:<path>` a bytes_param (sent base64-encoded, as the
 * HTTP API takes it), any other name is refused.
 */
export function loadRequestToJson (msg: RepositoryModelLoadRequest): { parameters?: Record<string, string> } {
  refuseRepositoryName(msg.repository_name)
  const map = msg.parameters
  if (map === undefined || map === null || Object.keys(map).length === 0) return {}
  const parameters: Record<string, string> = {}
  for (const key of Object.keys(map)) {
    const p = map[key] as ModelRepositoryParameterMessage
    const choice = repositoryParameterChoice(p)
    if (key === 'config') {
      if (choice !== 'string_param') {
        throw invalid("invalid value type for load parameter 'config', expected string_param.")
      }
      setOwn(parameters, key, p.string_param as string)
    } else if (key.startsWith('file:')) {
      if (choice !== 'bytes_param') {
        throw invalid(`invalid value type for load parameter '${key}', expected bytes_param.`)
      }
      const bytes = p.bytes_param as Uint8Array
      setOwn(parameters, key, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64'))
    } else {
      throw invalid(`unrecognized load parameter '${key}'.`)
    }
  }
  return { parameters }
}

/** RepositoryModelUnload's request as `POST /v2/repository/models/{model_name}/unload`'s body. */
export function unloadRequestToJson (
  msg: RepositoryModelUnloadRequest
): { parameters?: { unload_dependents: boolean } } {
  refuseRepositoryName(msg.repository_name)
  const p = msg.parameters?.unload_dependents
  if (p === undefined || p === null) return {}
  if (repositoryParameterChoice(p) !== 'bool_param') {
    throw invalid("invalid value type for 'unload_dependents' parameter, expected bool_param.")
  }
  return { parameters: { unload_dependents: p.bool_param === true } }
}

// ---------------------------------------------------------------------------------------------------------------
// Status codes

/**
 * HTTP status of an error answer → gRPC status code: Triton's pairs (triton-behaviour.md §0.1: 400 INVALID_ARGUMENT,
 * 404 NOT_FOUND, 500 INTERNAL, 501 UNIMPLEMENTED, 503 UNAVAILABLE) and the ones Flotilla's error registry uses.
 */
const HTTP_TO_GRPC: ReadonlyMap<number, grpc.status> = new Map([
  [400, grpc.status.INVALID_ARGUMENT],
  [401, grpc.status.UNAUTHENTICATED],
  [403, grpc.status.PERMISSION_DENIED],
  [404, grpc.status.NOT_FOUND],
  [405, grpc.status.UNIMPLEMENTED],
  [408, grpc.status.DEADLINE_EXCEEDED],
  [409, grpc.status.ALREADY_EXISTS],
  [413, grpc.status.RESOURCE_EXHAUSTED],
  [415, grpc.status.UNIMPLEMENTED],
  [429, grpc.status.RESOURCE_EXHAUSTED],
  [431, grpc.status.RESOURCE_EXHAUSTED],
  [499, grpc.status.CANCELLED],
  [500, grpc.status.INTERNAL],
  [501, grpc.status.UNIMPLEMENTED],
  [502, grpc.status.UNAVAILABLE],
  [503, grpc.status.UNAVAILABLE],
  [504, grpc.status.DEADLINE_EXCEEDED]
])

/**
 * The gRPC status for an HTTP error status. Statuses not in the table: other 4xx are INVALID_ARGUMENT (the request's
 * fault), other 5xx INTERNAL, anything else (not an error status) UNKNOWN.
 */
export function grpcStatusFromHttp (httpStatus: number): grpc.status {
  const mapped = HTTP_TO_GRPC.get(httpStatus)
  if (mapped !== undefined) return mapped
  if (httpStatus >= 400 && httpStatus < 500) return grpc.status.INVALID_ARGUMENT
  if (httpStatus >= 500 && httpStatus < 600) return grpc.status.INTERNAL
  return grpc.status.UNKNOWN
}

/** The grpc-js status number for a status name, such as a FlotillaError's `grpcStatus`. */
export function grpcStatusFromName (name: GrpcStatusName): grpc.status {
  return grpc.status[name]
}

/** What a grpc-js handler passes to its callback (or `call.destroy`/`emit('error')`) to fail a call. */
export interface GrpcErrorStatus {
  code: grpc.status
  details: string
}

/**
 * An error as the status a gRPC front answers with: a FlotillaError's registered status and message; anything else
 * INTERNAL with its message. grpc-js itself turns an error whose `code` is not a number (every FlotillaError's is a
 * string) into UNKNOWN, so handlers must pass this instead of the error.
 */
export function grpcErrorFrom (err: unknown): GrpcErrorStatus {
  if (isFlotillaError(err)) return { code: grpcStatusFromName(err.grpcStatus), details: err.message }
  return { code: grpc.status.INTERNAL, details: err instanceof Error ? err.message : String(err) }
}

/**
 * An HTTP error answer (status and body, Triton's `{"error":"<message>"}`) as a gRPC status, for fronts that relay
 * HTTP answers: the message is the body's `error` when it has one, else the body's text.
 */
export function grpcErrorFromHttp (httpStatus: number, body: string | Uint8Array): GrpcErrorStatus {
  const text = typeof body === 'string'
    ? body
    : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8')
  let details = text
  try {
    const parsed: unknown = JSON.parse(text)
    if (isObject(parsed) && typeof parsed.error === 'string') details = parsed.error
  } catch {}
  return { code: grpcStatusFromHttp(httpStatus), details }
}
