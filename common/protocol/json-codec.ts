/**
 * The KServe v2 JSON body codec (triton-behaviour.md §1.6–§1.8, §1.11): request bodies to typed tensors and back,
 * and responses to compact JSON built by hand. Error texts follow Triton's where Triton has one, extended with the
 * input name and counts where Triton's text alone would not say what went wrong.
 *
 * The binary tensor data extension (§2) lives in binary-codec.ts, built on the pieces exported here: this module walks
 * the JSON part once and asks a {@link BinarySection} for the bytes of every tensor that sets `binary_data_size`.
 * The functions here read bodies that are JSON only, so such a tensor can only be empty (`binary_data_size: 0`);
 * anything more is Triton's "expecting additional bytes" error.
 *
 * Bodies are parsed from their bytes by json-body-parser.ts, which leaves each tensor's `data` array in place; its
 * elements go straight from the body into the typed array (json-tensor-data.ts), number tokens read as written. So
 * decoding a JSON request costs about its typed arrays in memory, not the 3-19x of its body that JSON.parse's JS
 * values took (bench/json-memory.ts), and INT64/UINT64 values are exact over their whole range, in and out.
 *
 * Tensor `data` (json-tensor-data.ts has the rules):
 * - Integer datatypes take numbers written as integers within the datatype's range, as Triton's RapidJSON does for
 *   the integer/non-integer distinction: `1.0` and `1e2` are refused. INT64/UINT64 are exact (2^53 + 1, INT64 min,
 *   UINT64 max all arrive as sent).
 * - FP16, BF16, FP32, FP64 take any number, rounded to nearest; the bare tokens `NaN`, `Infinity` and `-Infinity`
 *   (RapidJSON's, which our encoder writes) are taken and stored as such. The same tokens for an integer datatype
 *   (or BOOL, or BYTES) are refused with a 400, as is any other non-number. Outside `data` the tokens are read as
 *   the numbers they name (a parameter may be NaN), as RapidJSON reads them.
 * - BOOL takes `true`/`false` only; 0 and 1 are refused, as Triton refuses them.
 * - Every refusal is a 400 (PROTO_ERR_DATA_MISMATCH) naming the tensor, the element's index and its value as written.
 *
 * Deliberate differences from Triton:
 * - Malformed JSON and every structural problem answer 400 (Triton answers 500 for anything its JSON helper rejects).
 * - FP16 and BF16 are accepted and produced in JSON as plain numbers (Triton refuses both directions).
 * - A value outside its integer datatype's range is refused (300 for UINT8, 2^31 for INT32, -1 for any unsigned
 *   type); Triton casts it to the element width (300 → 44), silently. A finite number that rounds to infinity in its
 *   float datatype (1e39 for FP32, 70000 for FP16; 1e400 for any) is refused; Triton's cast to float makes it
 *   infinity (and its RapidJSON refuses 1e400 as malformed JSON, a 500).
 * - Numbers outside `data` (shapes, parameters) are read as doubles, so `1.0` in a shape counts as 1 (Triton refuses
 *   it there too).
 * - The size limit of a JSON input tensor names our own setting (`maxInputBytesSetting`, by default the worker's
 *   `--max-body-bytes`), not Triton's `--http-max-input-size`.
 * - Shared memory is not implemented; inputs that use it get a clear 400.
 */
import { createError, type FlotillaError } from '../errors.ts'
import { type BytesData } from './bytes-data.ts'
import {
  DATATYPES,
  allocateTensorData,
  bf16BitsToFloat32,
  elementCount,
  fp16BitsToFloat32,
  isDataType
} from './datatypes.ts'
import { PARSE_FAILED as NOT_PARSED, parseJsonBody } from './json-body-parser.ts'
import {
  DEFAULT_INPUT_LIMIT_SETTING,
  DEFAULT_OUTPUT_LIMIT_SETTING,
  type TensorKind,
  checkedElementCount,
  decodeTensorData,
  describeValue,
  jsonTypeName,
  shapeString
} from './json-tensor-data.ts'
import {
  type DataType,
  type InferRequest,
  type InferResponse,
  type ParameterValue,
  type Parameters,
  type RequestedOutput,
  type Tensor,
  type TensorData
} from './types.ts'

/** Triton's `--http-max-input-size` default: the largest decoded JSON input tensor, in bytes (64 MiB). */
export const DEFAULT_MAX_INPUT_BYTES = 64 * 1024 * 1024

/** Options for {@link decodeInferRequest}. */
export interface DecodeInferRequestOptions {
  /**
   * Largest size of one input tensor in bytes (BYTES elements count 4 + length), decoded from JSON or given as
   * `binary_data_size`. Default 64 MiB.
   */
  maxInputBytes?: number
  /**
   * Where `maxInputBytes` is raised, named in the size errors (`... Use <setting> to increase the limit.`).
   * Default: the worker's flag, `the worker flag --max-body-bytes`, which sets it there.
   */
  maxInputBytesSetting?: string
  /** The model the request is for, named in Triton's binary-data messages (`... for model '<m>'`); left out when unset. */
  modelName?: string
}

/** Options for {@link decodeInferResponse}. */
export interface DecodeInferResponseOptions {
  /** Largest size of one output tensor in bytes, decoded from JSON or given as `binary_data_size`. Default: no limit. */
  maxOutputBytes?: number
}

/**
 * The prefix Triton's core puts on request-validation messages (`InferenceRequest::LogRequest()`):
 * `[request id: <id>] `, with the literal `<id_unknown>` when the request has no (or an empty) id.
 */
export function requestIdPrefix (id: string | undefined): string {
  return `[request id: ${id !== undefined && id !== '' ? id : '<id_unknown>'}] `
}

// ---------------------------------------------------------------------------------------------------------------
// Parsing

/** A parsed JSON object. */
export type JsonObject = Record<string, unknown>

function isJsonObject (v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function invalidRequest (message: string): FlotillaError {
  return createError('PROTO_ERR_INVALID_REQUEST', message)
}

function dataMismatch (message: string): FlotillaError {
  return createError('PROTO_ERR_DATA_MISMATCH', message)
}

function binaryDataError (message: string): FlotillaError {
  return createError('PROTO_ERR_BINARY_DATA', message)
}

/**
 * The document in `body`. json-body-parser.ts reads it from its bytes and leaves the tensors' `data` arrays in place
 * (the codec reads them straight into typed arrays, and reads 64-bit integers exactly); a body it does not take
 * (malformed, or nested beyond its depth limit) goes to {@link parseBody}, whose verdict and messages are JSON.parse's.
 */
function parseDocument (body: Uint8Array | string): unknown {
  const bytes = typeof body === 'string'
    ? Buffer.from(body, 'utf8')
    : Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength)
  const root = parseJsonBody(bytes)
  return root !== NOT_PARSED ? root : parseBody(body)
}

function parseBody (body: Uint8Array | string): unknown {
  const text = typeof body === 'string' ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8')
  try {
    return JSON.parse(text)
  } catch (err) {
    // Triton's RapidJSON accepts bare NaN / Infinity / -Infinity (and our encoder writes them), JSON.parse does not.
    // Only on this slow path, and only when such a token could be present, retry with a parser that accepts them.
    if (text.includes('NaN') || text.includes('Infinity')) {
      const lenient = parseLenientJson(text)
      if (lenient !== PARSE_FAILED) return lenient
    }
    throw createError('PROTO_ERR_INVALID_JSON', err instanceof Error ? err.message : String(err))
  }
}

const PARSE_FAILED: unique symbol = Symbol('flotilla.json.parse-failed')
// Recursion guard for the fallback parser; real request bodies are nowhere near this deep.
const LENIENT_MAX_DEPTH = 1000
const NUMBER_RE = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y

interface LenientState {
  readonly text: string
  pos: number
}

class LenientParseError extends Error {}

/**
 * Strict JSON plus the three non-finite tokens. Used only after JSON.parse failed, so it favours being obviously
 * correct over being fast: strings are handed to JSON.parse one by one for escape handling.
 */
function parseLenientJson (text: string): unknown {
  const state: LenientState = { text, pos: 0 }
  try {
    const value = lenientValue(state, 0)
    skipWhitespace(state)
    return state.pos === text.length ? value : PARSE_FAILED
  } catch (err) {
    if (err instanceof LenientParseError || err instanceof SyntaxError || err instanceof RangeError) return PARSE_FAILED
    throw err
  }
}

function skipWhitespace (s: LenientState): void {
  const text = s.text
  let pos = s.pos
  while (pos < text.length) {
    const c = text.charCodeAt(pos)
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break
    pos++
  }
  s.pos = pos
}

function lenientLiteral (s: LenientState, literal: string): void {
  if (!s.text.startsWith(literal, s.pos)) throw new LenientParseError()
  s.pos += literal.length
}

function lenientString (s: LenientState): string {
  const text = s.text
  let end = s.pos + 1
  while (end < text.length) {
    const c = text.charCodeAt(end)
    if (c === 0x22) break
    end += c === 0x5c ? 2 : 1
  }
  if (end >= text.length) throw new LenientParseError()
  const value: unknown = JSON.parse(text.slice(s.pos, end + 1))
  s.pos = end + 1
  return value as string
}

function lenientValue (s: LenientState, depth: number): unknown {
  if (depth > LENIENT_MAX_DEPTH) throw new LenientParseError()
  skipWhitespace(s)
  const text = s.text
  const c = text.charCodeAt(s.pos)
  switch (c) {
    case 0x7b: { // {
      s.pos++
      const obj: JsonObject = {}
      skipWhitespace(s)
      if (text.charCodeAt(s.pos) === 0x7d) { s.pos++; return obj }
      for (;;) {
        skipWhitespace(s)
        if (text.charCodeAt(s.pos) !== 0x22) throw new LenientParseError()
        const key = lenientString(s)
        skipWhitespace(s)
        if (text.charCodeAt(s.pos) !== 0x3a) throw new LenientParseError()
        s.pos++
        setOwn(obj, key, lenientValue(s, depth + 1))
        skipWhitespace(s)
        const next = text.charCodeAt(s.pos++)
        if (next === 0x7d) return obj
        if (next !== 0x2c) throw new LenientParseError()
      }
    }
    case 0x5b: { // [
      s.pos++
      const arr: unknown[] = []
      skipWhitespace(s)
      if (text.charCodeAt(s.pos) === 0x5d) { s.pos++; return arr }
      for (;;) {
        arr.push(lenientValue(s, depth + 1))
        skipWhitespace(s)
        const next = text.charCodeAt(s.pos++)
        if (next === 0x5d) return arr
        if (next !== 0x2c) throw new LenientParseError()
      }
    }
    case 0x22: return lenientString(s)
    case 0x74: lenientLiteral(s, 'true'); return true
    case 0x66: lenientLiteral(s, 'false'); return false
    case 0x6e: lenientLiteral(s, 'null'); return null
    case 0x4e: lenientLiteral(s, 'NaN'); return NaN
    case 0x49: lenientLiteral(s, 'Infinity'); return Infinity
    default: {
      if (c === 0x2d && text.startsWith('-Infinity', s.pos)) { s.pos += 9; return -Infinity }
      NUMBER_RE.lastIndex = s.pos
      const m = NUMBER_RE.exec(text)
      if (m === null) throw new LenientParseError()
      s.pos += m[0].length
      return Number(m[0])
    }
  }
}

/** Assigns an own property even for the key `__proto__`, which plain assignment would treat as the prototype. */
function setOwn (obj: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') {
    Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true })
  } else {
    obj[key] = value
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Structural pieces shared by requests and responses

/** Request parameters Triton interprets itself, and the JSON type each must have (http_server.cc ParseJsonTritonParams). */
const RESERVED_PARAMETER_TYPES: ReadonlyMap<string, 'bool' | 'uint' | 'uint-or-string'> = new Map([
  ['sequence_id', 'uint-or-string'],
  ['sequence_start', 'bool'],
  ['sequence_end', 'bool'],
  ['priority', 'uint'],
  ['timeout', 'uint'],
  ['binary_data_output', 'bool']
])

function isUnsignedInteger (v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0
}

/**
 * Checks a `parameters` object: values must be string, number or boolean. At request level (`checkReserved`)
 * `triton_*` keys are refused and the keys Triton interprets must have the type it expects.
 */
function decodeParameters (raw: unknown, checkReserved: boolean): Parameters {
  if (!isJsonObject(raw)) {
    throw invalidRequest("Unable to parse 'parameters': attempt to access JSON non-object as object")
  }
  const out: Parameters = {}
  for (const key of Object.keys(raw)) {
    const value = raw[key]
    if (checkReserved) {
      if (key.startsWith('triton_')) {
        throw invalidRequest(
          "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
        )
      }
      const reserved = RESERVED_PARAMETER_TYPES.get(key)
      if (reserved !== undefined) {
        const ok = reserved === 'bool'
          ? typeof value === 'boolean'
          : isUnsignedInteger(value) || (reserved === 'uint-or-string' && typeof value === 'string')
        if (!ok) {
          const expected = reserved === 'bool'
            ? 'a boolean'
            : reserved === 'uint' ? 'a non-negative integer' : 'a non-negative integer or a string'
          throw invalidRequest(`Unable to parse '${key}': expected ${expected}, got ${describeValue(value)}`)
        }
      }
    }
    if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') {
      throw invalidRequest(`parameter '${key}' has invalid type. It should be either 'int', 'bool', or 'string'.`)
    }
    setOwn(out, key, value)
  }
  return out
}

function requireString (obj: JsonObject, key: string): string {
  if (!Object.hasOwn(obj, key)) {
    throw invalidRequest(`Unable to parse '${key}': attempt to access non-existing object member '${key}'`)
  }
  const v = obj[key]
  if (typeof v !== 'string') {
    throw invalidRequest(`Unable to parse '${key}': attempt to access JSON non-string as string`)
  }
  return v
}

function requireArray (obj: JsonObject, key: string): unknown[] {
  if (!Object.hasOwn(obj, key)) {
    throw invalidRequest(`Unable to parse '${key}': attempt to access non-existing object member '${key}'`)
  }
  const v = obj[key]
  if (!Array.isArray(v)) {
    throw invalidRequest(`Unable to parse '${key}': attempt to access JSON non-array as array`)
  }
  return v
}

function requireObjectElement (v: unknown, arrayKey: string): JsonObject {
  if (!isJsonObject(v)) {
    throw invalidRequest(`Unable to parse '${arrayKey}': attempt to access JSON non-object as object`)
  }
  return v
}

function decodeShape (obj: JsonObject): number[] {
  const raw = requireArray(obj, 'shape')
  const shape = new Array<number>(raw.length)
  for (let i = 0; i < raw.length; i++) {
    const d = raw[i]
    if (!isUnsignedInteger(d)) {
      throw invalidRequest("Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer")
    }
    shape[i] = d
  }
  return shape
}

/**
 * Checks which data source a tensor names and that it is one Flotilla supports (http_server.cc
 * ValidateInputContentType, plus shared memory, which we refuse). True when its bytes are in the binary section.
 */
function checkInputContentType (
  input: JsonObject, params: Parameters | undefined, name: string, kind: TensorKind
): boolean {
  const hasData = Object.hasOwn(input, 'data')
  const hasBinary = params !== undefined && Object.hasOwn(params, 'binary_data_size')
  const hasShm = params !== undefined && Object.hasOwn(params, 'shared_memory_region')
  const setCount = (hasData ? 1 : 0) + (hasBinary ? 1 : 0) + (hasShm ? 1 : 0)
  if (setCount !== 1) {
    let message = "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', " +
      "'shared_memory_region' in 'parameters'. But"
    if (setCount === 0) {
      message += ' no field is set'
    } else {
      message += ' set'
      if (hasData) message += " 'data'"
      if (hasBinary) message += " 'binary_data_size'"
      if (hasShm) message += " 'shared_memory_region'"
    }
    throw invalidRequest(message)
  }
  if (hasShm) {
    throw invalidRequest(
      `${kind} '${name}' sets 'shared_memory_region' in 'parameters', but the shared-memory extension is not ` +
      "supported; send the tensor as JSON in the 'data' field"
    )
  }
  return hasBinary
}

const utf8Decoder = new TextDecoder('utf-8')

// ---------------------------------------------------------------------------------------------------------------
// Tensor objects, and the hook for the binary tensor data extension (binary-codec.ts supplies the bytes)

/** A tensor object's members, checked, before its elements are read. */
export interface TensorHeader {
  name: string
  /** As sent, not yet checked against the datatype table. */
  datatype: string
  shape: number[]
  /**
   * The tensor's parameters less `binary_data_size` (framing, not a property of the tensor); undefined when none are
   * left.
   */
  parameters: Parameters | undefined
  /** Set when the elements are in the binary section: their size in bytes. */
  binaryDataSize: number | undefined
  /** The JSON `data` member, for a tensor that is not binary. */
  data: unknown
}

/**
 * Reads the members of one `{name, datatype, shape, parameters?, data?}` object (input or output), in Triton's order,
 * including the one-data-source rule and a binary size that must be a non-negative integer. The caller reads the
 * elements: {@link decodeTensorData} for JSON, a {@link BinarySection} for binary.
 */
export function decodeTensorHeader (
  obj: JsonObject, kind: TensorKind, seen: Set<string>, duplicateMessage: (name: string) => string
): TensorHeader {
  const name = requireString(obj, 'name')
  const datatype = requireString(obj, 'datatype')
  const shape = decodeShape(obj)
  if (seen.has(name)) throw invalidRequest(duplicateMessage(name))
  seen.add(name)
  let parameters = Object.hasOwn(obj, 'parameters') ? decodeParameters(obj.parameters, false) : undefined
  let binaryDataSize: number | undefined
  if (checkInputContentType(obj, parameters, name, kind)) {
    const params = parameters as Parameters
    const size = params.binary_data_size
    if (!isUnsignedInteger(size) || size > Number.MAX_SAFE_INTEGER) {
      throw binaryDataError(
        `Unable to parse 'binary_data_size' for ${kind} '${name}': expected a non-negative integer, ` +
        `got ${describeValue(size)}`
      )
    }
    binaryDataSize = size
    parameters = undefined
    for (const key of Object.keys(params)) {
      if (key === 'binary_data_size') continue
      parameters ??= {}
      setOwn(parameters, key, params[key])
    }
  }
  return { name, datatype, shape, parameters, binaryDataSize, data: obj.data }
}

/** What a {@link BinarySection} is told about the tensor whose bytes it hands out. */
export interface BinaryTensorRef {
  readonly name: string
  readonly kind: TensorKind
  readonly datatype: DataType
  readonly shape: readonly number[]
  /** The element count the shape describes, already checked to be a safe integer. */
  readonly count: number
  /** `[request id: …] ` for request inputs (Triton's core puts it on its byte-size message), '' for outputs. */
  readonly prefix: string
  /** The model, for Triton's `for model '<m>'`; undefined leaves that part out. */
  readonly modelName: string | undefined
}

/**
 * The bytes after the JSON part of a body (triton-behaviour.md §2.1). Tensors that set `binary_data_size` take their
 * bytes from it in the order they appear in the JSON; the codec checks that size (a non-negative integer within the
 * byte limit) before it calls `read`, and calls `end` once after the last tensor so that leftover bytes are refused.
 */
export interface BinarySection {
  /** The elements of `tensor`, from the next `byteSize` bytes. */
  read (tensor: BinaryTensorRef, byteSize: number): TensorData
  /** Called after the last tensor. */
  end (): void
}

/** ` for model '<m>'`, the way Triton's messages name the model, or nothing when it is not known. */
export function forModel (modelName: string | undefined): string {
  return modelName === undefined ? '' : ` for model '${modelName}'`
}

/**
 * Triton's text for a binary tensor whose bytes are not all there (http_server.cc: `expecting <k> additional bytes`,
 * k being what is missing), extended with the declared size and where the bytes should have been.
 */
export function missingBinaryBytesError (
  tensor: Pick<BinaryTensorRef, 'name' | 'kind' | 'modelName'>, byteSize: number, available: number, hasHeader: boolean
): FlotillaError {
  const where = hasHeader
    ? `only ${available} bytes of binary data are left after the JSON and the binary ${tensor.kind}s before it`
    : `the ${tensor.kind === 'input' ? 'request' : 'response'} has no Inference-Header-Content-Length header, so its ` +
      'body holds no binary data'
  return binaryDataError(
    `unexpected size for ${tensor.kind} '${tensor.name}', expecting ${byteSize - available} additional bytes` +
    `${forModel(tensor.modelName)} (binary_data_size is ${byteSize}, but ${where})`
  )
}

/** Triton's core text for a fixed-size tensor whose byte count does not match its shape, extended with the arithmetic. */
export function binaryByteSizeError (tensor: BinaryTensorRef, got: number): FlotillaError {
  const size = DATATYPES[tensor.datatype].byteSize
  const expected = tensor.count * size
  return dataMismatch(
    `${tensor.prefix}${tensor.kind} byte size mismatch for ${tensor.kind} '${tensor.name}'${forModel(tensor.modelName)}. ` +
    `Expected ${expected}, got ${got} (shape ${shapeString(tensor.shape)} of ${tensor.datatype} is ${tensor.count} ` +
    `elements of ${size} bytes` + (got % size !== 0 ? `; ${got} is not a multiple of ${size})` : ')')
  )
}

/** Triton's text for a BYTES tensor with fewer elements than its shape. */
export function stringElementCountError (tensor: BinaryTensorRef, got: number): FlotillaError {
  return dataMismatch(
    `expected ${tensor.count} string elements for inference ${tensor.kind} '${tensor.name}'${forModel(tensor.modelName)}, ` +
    `got ${got}`
  )
}

/**
 * The elements of a tensor whose bytes are all there is to read: none (`binary_data_size: 0`). Anything but a
 * zero-element shape is a mismatch, worded as for any binary tensor.
 */
function emptyBinaryTensorData (tensor: BinaryTensorRef): TensorData {
  if (tensor.count !== 0) {
    throw tensor.datatype === 'BYTES' ? stringElementCountError(tensor, 0) : binaryByteSizeError(tensor, 0)
  }
  return allocateTensorData(tensor.datatype, 0)
}

/** The binary section of a body that is JSON only: nothing to read, so only empty binary tensors decode. */
const NO_BINARY_DATA: BinarySection = {
  read (tensor: BinaryTensorRef, byteSize: number): TensorData {
    if (byteSize > 0) throw missingBinaryBytesError(tensor, byteSize, 0, false)
    return emptyBinaryTensorData(tensor)
  },
  end (): void {}
}

/** Per-body state for {@link tensorFromHeader}. */
interface ElementContext {
  readonly kind: TensorKind
  readonly maxBytes: number
  /** Where `maxBytes` is raised, named in the size errors. */
  readonly limitSetting: string
  readonly prefix: string
  readonly modelName: string | undefined
  readonly section: BinarySection
}

/** A tensor from its checked members, its elements read from JSON `data` or from the binary section. */
function tensorFromHeader (header: TensorHeader, ctx: ElementContext): Tensor {
  const { name, datatype, shape } = header
  if (!isDataType(datatype)) throw createError('PROTO_ERR_INVALID_DATATYPE', name)
  let data: TensorData
  if (header.binaryDataSize === undefined) {
    data = decodeTensorData(name, ctx.kind, datatype, shape, header.data, ctx.maxBytes, ctx.limitSetting)
  } else {
    const count = checkedElementCount(name, ctx.kind, shape)
    const byteSize = header.binaryDataSize
    if (byteSize > ctx.maxBytes) {
      throw invalidRequest(
        `binary ${ctx.kind} '${name}' has a byte_size (${byteSize} bytes) that exceeds the maximum allowed value of ` +
        `${ctx.maxBytes} bytes. Use ${ctx.limitSetting} to increase the limit.`
      )
    }
    data = ctx.section.read(
      { name, kind: ctx.kind, datatype, shape, count, prefix: ctx.prefix, modelName: ctx.modelName }, byteSize
    )
  }
  const tensor: Tensor = { name, datatype, shape, data }
  if (header.parameters !== undefined) tensor.parameters = header.parameters
  return tensor
}

function decodeRequestedOutputs (raw: unknown, prefix: string): RequestedOutput[] {
  if (!Array.isArray(raw)) {
    throw invalidRequest("Unable to parse 'outputs': attempt to access JSON non-array as array")
  }
  const outputs = new Array<RequestedOutput>(raw.length)
  const seen = new Set<string>()
  for (let i = 0; i < raw.length; i++) {
    const obj = requireObjectElement(raw[i], 'outputs')
    const name = requireString(obj, 'name')
    if (seen.has(name)) throw invalidRequest(`${prefix}output '${name}' already exists in request`)
    seen.add(name)
    const output: RequestedOutput = { name }
    if (Object.hasOwn(obj, 'parameters')) output.parameters = decodeParameters(obj.parameters, false)
    outputs[i] = output
  }
  return outputs
}

function requireRootObject (root: unknown, what: string): JsonObject {
  if (!isJsonObject(root)) {
    throw invalidRequest(`Unable to parse the ${what}: expected a JSON object, got ${jsonTypeName(root)}`)
  }
  return root
}

/**
 * Decodes the JSON part of an inference request, reading binary inputs from `section`. Building block for
 * {@link decodeInferRequest} (JSON only) and binary-codec.ts (JSON + binary).
 */
export function decodeInferRequestJson (
  body: Uint8Array | string, options: DecodeInferRequestOptions, section: BinarySection
): InferRequest {
  const root = requireRootObject(parseDocument(body), 'request')

  // Triton's parse order: id, parameters, inputs, outputs.
  let id: string | undefined
  if (Object.hasOwn(root, 'id')) id = requireString(root, 'id')
  const prefix = requestIdPrefix(id)
  const parameters = Object.hasOwn(root, 'parameters') ? decodeParameters(root.parameters, true) : {}

  const rawInputs = requireArray(root, 'inputs')
  const inputs = new Array<Tensor>(rawInputs.length)
  const ctx: ElementContext = {
    kind: 'input',
    maxBytes: options.maxInputBytes ?? DEFAULT_MAX_INPUT_BYTES,
    limitSetting: options.maxInputBytesSetting ?? DEFAULT_INPUT_LIMIT_SETTING,
    prefix,
    modelName: options.modelName,
    section
  }
  const seen = new Set<string>()
  const duplicate = (name: string): string => `${prefix}input '${name}' already exists in request`
  for (let i = 0; i < rawInputs.length; i++) {
    const header = decodeTensorHeader(requireObjectElement(rawInputs[i], 'inputs'), 'input', seen, duplicate)
    inputs[i] = tensorFromHeader(header, ctx)
  }
  // Triton refuses leftover binary bytes after the inputs and before it looks at the outputs.
  section.end()

  const request: InferRequest = { parameters, inputs }
  if (id !== undefined) request.id = id
  if (Object.hasOwn(root, 'outputs')) request.outputs = decodeRequestedOutputs(root.outputs, prefix)
  return request
}

/**
 * Decodes a KServe v2 inference request body that is JSON only (model name and version come from the URL).
 * Inputs may set `binary_data_size: 0` (an empty tensor); larger binary inputs need binary-codec.ts.
 * Throws PROTO_ERR_INVALID_JSON, PROTO_ERR_INVALID_REQUEST, PROTO_ERR_INVALID_DATATYPE, PROTO_ERR_DATA_MISMATCH or
 * PROTO_ERR_BINARY_DATA.
 */
export function decodeInferRequest (body: Uint8Array | string, options: DecodeInferRequestOptions = {}): InferRequest {
  return decodeInferRequestJson(body, options, NO_BINARY_DATA)
}

/** An inference response's members around its outputs, whatever form the outputs take. */
export interface ResponseEnvelope<T> {
  id?: string
  model_name: string
  model_version: string
  parameters?: Parameters
  outputs: T[]
}

/**
 * Walks the JSON part of an inference response, handing each output's checked members to `decodeOutput` in order.
 * Building block for {@link decodeInferResponse} and binary-codec.ts (typed or raw outputs).
 */
export function decodeResponseEnvelope<T> (
  body: Uint8Array | string, decodeOutput: (header: TensorHeader) => T
): ResponseEnvelope<T> {
  const root = requireRootObject(parseDocument(body), 'response')
  let id: string | undefined
  if (Object.hasOwn(root, 'id')) id = requireString(root, 'id')
  const modelName = requireString(root, 'model_name')
  const modelVersion = requireString(root, 'model_version')
  const parameters = Object.hasOwn(root, 'parameters') ? decodeParameters(root.parameters, false) : undefined
  const rawOutputs = requireArray(root, 'outputs')
  const outputs = new Array<T>(rawOutputs.length)
  const seen = new Set<string>()
  const duplicate = (name: string): string => `output '${name}' appears more than once in the response`
  for (let i = 0; i < rawOutputs.length; i++) {
    outputs[i] = decodeOutput(decodeTensorHeader(requireObjectElement(rawOutputs[i], 'outputs'), 'output', seen, duplicate))
  }
  const response: ResponseEnvelope<T> = { model_name: modelName, model_version: modelVersion, outputs }
  if (id !== undefined) response.id = id
  if (parameters !== undefined) response.parameters = parameters
  return response
}

/**
 * Decodes the JSON part of an inference response, reading binary outputs from `section`. Building block for
 * {@link decodeInferResponse} (JSON only) and binary-codec.ts (JSON + binary).
 */
export function decodeInferResponseJson (
  body: Uint8Array | string, options: DecodeInferResponseOptions, section: BinarySection
): InferResponse {
  const ctx: ElementContext = {
    kind: 'output',
    maxBytes: options.maxOutputBytes ?? Number.POSITIVE_INFINITY,
    limitSetting: DEFAULT_OUTPUT_LIMIT_SETTING,
    prefix: '',
    modelName: undefined,
    section
  }
  const response: InferResponse = decodeResponseEnvelope(body, (header) => tensorFromHeader(header, ctx))
  section.end()
  return response
}

/**
 * Decodes a KServe v2 inference response body that is JSON only, as {@link encodeInferResponse} (or Triton, for JSON
 * outputs) writes it. Used by the gateway and tests; errors use the same PROTO_* codes as request decoding.
 */
export function decodeInferResponse (body: Uint8Array | string, options: DecodeInferResponseOptions = {}): InferResponse {
  return decodeInferResponseJson(body, options, NO_BINARY_DATA)
}

// ---------------------------------------------------------------------------------------------------------------
// Encoding

/** A JSON number token; NaN and ±Infinity as RapidJSON's bare tokens, and -0 kept (String(-0) is "0"). */
function numberToken (v: number): string {
  return v === 0 && 1 / v < 0 ? '-0' : String(v)
}

function parameterToken (v: ParameterValue): string {
  return typeof v === 'string' ? JSON.stringify(v) : typeof v === 'number' ? numberToken(v) : (v ? 'true' : 'false')
}

/**
 * A `parameters` object. `extraKey`, when given, is written last with `extraValue`, in place of any member of that
 * name: that is how `binary_data_size`, `binary_data` and `binary_data_output` join parameters a tensor already has.
 */
export function encodeParameters (
  parameters: Parameters | undefined, extraKey?: string, extraValue?: ParameterValue
): string {
  let s = '{'
  let first = true
  if (parameters !== undefined) {
    for (const key of Object.keys(parameters)) {
      const v = parameters[key]
      if (v === undefined || key === extraKey) continue
      if (!first) s += ','
      first = false
      s += JSON.stringify(key) + ':' + parameterToken(v)
    }
  }
  if (extraKey !== undefined && extraValue !== undefined) {
    s += (first ? '' : ',') + JSON.stringify(extraKey) + ':' + parameterToken(extraValue)
  }
  return s + '}'
}

/**
 * `[...]` for plain numbers. JSON.stringify of a plain array is V8's fastest number printer (2-3x TypedArray join),
 * with JS's shortest round-trip form, but it writes NaN/Infinity as null and -0 as 0; arrays holding those take the
 * per-element path, which writes RapidJSON's bare NaN/Infinity/-Infinity tokens and keeps -0.
 */
function encodeNumbers (a: Float32Array | Float64Array | number[]): string {
  let plain = true
  for (let i = 0; i < a.length; i++) {
    const v = a[i] as number
    // v - v is NaN for NaN and ±Infinity; 1 / v < 0 singles out -0 among zeros.
    if (v - v !== 0 || (v === 0 && 1 / v < 0)) { plain = false; break }
  }
  if (plain) return JSON.stringify(Array.isArray(a) ? a : Array.from(a))
  let s = '['
  for (let i = 0; i < a.length; i++) s += (i === 0 ? '' : ',') + numberToken(a[i] as number)
  return s + ']'
}

/** The JSON array for a tensor's elements, always flat. */
function encodeDataArray (datatype: DataType, data: TensorData): string {
  switch (datatype) {
    case 'UINT8': case 'UINT16': case 'UINT32':
    case 'INT8': case 'INT16': case 'INT32':
      // Every 8/16/32-bit integer is a safe double, so the fast number printer is exact.
      return JSON.stringify(Array.from(data as Uint8Array | Uint16Array | Uint32Array | Int8Array | Int16Array | Int32Array))
    case 'UINT64': case 'INT64':
      // BigInt array join prints every value exactly (JSON.stringify refuses bigint) and is the fastest route.
      return '[' + (data as BigInt64Array | BigUint64Array).join(',') + ']'
    case 'FP32': case 'FP64':
      // FP32 elements are widened to double, so 0.1f prints as 0.10000000149011612, as Triton does.
      return encodeNumbers(data as Float32Array | Float64Array)
    case 'FP16': case 'BF16': {
      const a = data as Uint16Array
      const widened = new Array<number>(a.length)
      const fp16 = datatype === 'FP16'
      for (let i = 0; i < a.length; i++) {
        const bits = a[i] as number
        widened[i] = fp16 ? fp16BitsToFloat32(bits) : bf16BitsToFloat32(bits)
      }
      return encodeNumbers(widened)
    }
    case 'BOOL': {
      const a = data as Uint8Array
      const bools = new Array<boolean>(a.length)
      for (let i = 0; i < a.length; i++) bools[i] = a[i] !== 0
      return JSON.stringify(bools)
    }
    case 'BYTES': {
      const a = data as BytesData
      const strings = new Array<string>(a.length)
      for (let i = 0; i < a.length; i++) strings[i] = utf8Decoder.decode(a.get(i))
      return JSON.stringify(strings)
    }
  }
}

/** Throws FLT_ERR_INTERNAL when a tensor's data length does not match its shape (a backend bug, not a client's). */
export function checkTensorLength (t: Tensor, kind: TensorKind): void {
  const count = elementCount(t.shape)
  if (t.data.length !== count) {
    throw createError(
      'FLT_ERR_INTERNAL',
      `${kind} tensor shape does not match size of ${kind} for '${t.name}': shape ${shapeString(t.shape)} ` +
      `needs ${count} elements, data has ${t.data.length}`
    )
  }
}

/** One tensor as a JSON object with its elements in `data`. */
export function encodeTensorJson (t: Tensor, kind: TensorKind): string {
  checkTensorLength(t, kind)
  let s = '{"name":' + JSON.stringify(t.name) + ',"datatype":"' + t.datatype + '","shape":' + shapeString(t.shape)
  if (t.parameters !== undefined) s += ',"parameters":' + encodeParameters(t.parameters)
  return s + ',"data":' + encodeDataArray(t.datatype, t.data) + '}'
}

/**
 * One binary tensor's JSON object (triton-behaviour.md §2.3): no `data`, and `binary_data_size` added to its
 * parameters. `datatype` is quoted as JSON, since the gateway's raw tensors carry it unchecked.
 */
export function encodeBinaryTensorJson (
  name: string, datatype: string, shape: readonly number[], parameters: Parameters | undefined, byteSize: number
): string {
  return '{"name":' + JSON.stringify(name) + ',"datatype":' + JSON.stringify(datatype) + ',"shape":' +
    shapeString(shape) + ',"parameters":' + encodeParameters(parameters, 'binary_data_size', byteSize) + '}'
}

/**
 * Encodes a response's members in Triton's key order, compact: `id` (only when non-empty), `model_name`,
 * `model_version`, `parameters` (only when present), then `outputs`, each written by `encodeOutput`.
 */
export function encodeResponseEnvelope<T> (
  response: Omit<ResponseEnvelope<T>, 'outputs'> & { outputs: readonly T[] }, encodeOutput: (output: T) => string
): string {
  let s = '{'
  if (response.id !== undefined && response.id !== '') s += '"id":' + JSON.stringify(response.id) + ','
  s += '"model_name":' + JSON.stringify(response.model_name) +
    ',"model_version":' + JSON.stringify(response.model_version)
  if (response.parameters !== undefined) s += ',"parameters":' + encodeParameters(response.parameters)
  s += ',"outputs":['
  const outputs = response.outputs
  for (let i = 0; i < outputs.length; i++) {
    if (i > 0) s += ','
    s += encodeOutput(outputs[i] as T)
  }
  return s + ']}'
}

/**
 * Encodes an inference response as compact JSON in Triton's key order: `id` (only when non-empty), `model_name`,
 * `model_version`, `parameters` (only when present), `outputs` with data always flattened.
 * Throws FLT_ERR_INTERNAL when an output's data length does not match its shape.
 */
export function encodeInferResponse (response: InferResponse): string {
  return encodeResponseEnvelope(response, (t) => encodeTensorJson(t, 'output'))
}

/** A request's members around its inputs, whatever form the inputs take. */
export interface RequestEnvelope<T> {
  id?: string
  parameters: Parameters
  inputs: readonly T[]
  outputs?: readonly RequestedOutput[]
}

/**
 * Encodes a request's members: `id` (when non-empty), `parameters` (when non-empty), `inputs`, each written by
 * `encodeInput`, and `outputs` (when set). With `binaryOutputs`, every listed output gets `binary_data: true`, or,
 * when none are listed, the request gets `binary_data_output: true` (the python client's way, triton-behaviour.md §2.2).
 */
export function encodeRequestEnvelope<T> (
  request: RequestEnvelope<T>, encodeInput: (input: T) => string, binaryOutputs: boolean
): string {
  const outputs = request.outputs
  const listed = outputs !== undefined && outputs.length > 0
  let s = '{'
  let sep = ''
  if (request.id !== undefined && request.id !== '') {
    s += '"id":' + JSON.stringify(request.id)
    sep = ','
  }
  if (binaryOutputs && !listed) {
    s += sep + '"parameters":' + encodeParameters(request.parameters, 'binary_data_output', true)
    sep = ','
  } else if (Object.keys(request.parameters).length > 0) {
    s += sep + '"parameters":' + encodeParameters(request.parameters)
    sep = ','
  }
  s += sep + '"inputs":['
  const inputs = request.inputs
  for (let i = 0; i < inputs.length; i++) {
    if (i > 0) s += ','
    s += encodeInput(inputs[i] as T)
  }
  s += ']'
  if (outputs !== undefined) {
    s += ',"outputs":['
    for (let i = 0; i < outputs.length; i++) {
      const o = outputs[i] as RequestedOutput
      if (i > 0) s += ','
      s += '{"name":' + JSON.stringify(o.name)
      if (binaryOutputs) s += ',"parameters":' + encodeParameters(o.parameters, 'binary_data', true)
      else if (o.parameters !== undefined) s += ',"parameters":' + encodeParameters(o.parameters)
      s += '}'
    }
    s += ']'
  }
  return s + '}'
}

/**
 * Encodes an inference request as the JSON body {@link decodeInferRequest} reads: `id` (when non-empty),
 * `parameters` (when non-empty), `inputs` with flattened data, `outputs` (when set). FP16/BF16 inputs are written as
 * numbers, which Flotilla accepts and Triton does not.
 */
export function encodeInferRequest (request: InferRequest): string {
  return encodeRequestEnvelope(request, (t) => encodeTensorJson(t, 'input'), false)
}
