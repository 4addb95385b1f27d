/**
 * Triton's binary tensor data extension over HTTP (triton-behaviour.md §2): a body is N bytes of JSON
 * (`Inference-Header-Content-Length: N`) followed by the raw bytes of every tensor whose JSON object sets
 * `parameters.binary_data_size`, back to back in the order the tensors appear in the JSON, no padding. Elements are
 * little-endian and row-major; BOOL is one byte; FP16 and BF16 are raw 16-bit patterns; BYTES is, per element, a
 * 4-byte little-endian length followed by that many bytes.
 *
 * Decoding walks the JSON once (json-codec.ts) and turns each binary tensor into a typed view over the body: no
 * element is touched, no byte copied, except where a typed array cannot be made (see {@link typedElements}). Encoding
 * writes the JSON and every binary section into one buffer allocated once, copying each tensor's bytes as a block.
 *
 * Byte order: the views and block copies rely on the host being little-endian, as the wire is (x86 and ARM as
 * Node runs them). A big-endian host is detected once, at load, and takes a copy-and-swap path instead.
 */
import { createError, type FlotillaError } from '../errors.ts'
import { BytesData } from './bytes-data.ts'
import { DATATYPES, elementCount, isDataType, tensorByteSize } from './datatypes.ts'
import { bytesElements, rawBytes, typedElements, writeRawBytes } from './raw-layout.ts'
import {
  type BinarySection,
  type BinaryTensorRef,
  DEFAULT_MAX_INPUT_BYTES,
  type DecodeInferRequestOptions,
  type DecodeInferResponseOptions,
  binaryByteSizeError,
  checkTensorLength,
  decodeInferRequest,
  decodeInferRequestJson,
  decodeInferResponse,
  decodeInferResponseJson,
  decodeResponseEnvelope,
  encodeBinaryTensorJson,
  encodeRequestEnvelope,
  encodeResponseEnvelope,
  encodeTensorJson,
  forModel,
  missingBinaryBytesError,
  requestIdPrefix,
  stringElementCountError
} from './json-codec.ts'
import { DEFAULT_INPUT_LIMIT_SETTING, type TensorKind, decodeTensorData } from './json-tensor-data.ts'
import {
  type DataType,
  type InferRequest,
  type InferResponse,
  type RawInferRequest,
  type RawInferResponse,
  type RawTensor,
  type RequestedOutput,
  type TensorData
} from './types.ts'

/** The header that carries the JSON part's length (lower case, as Node presents request headers). */
export const INFERENCE_HEADER_CONTENT_LENGTH = 'inference-header-content-length'


const INT32_MAX = 2147483647
const INT32_MIN = -2147483648

function binaryDataError (message: string): FlotillaError {
  return createError('PROTO_ERR_BINARY_DATA', message)
}

function dataMismatch (message: string): FlotillaError {
  return createError('PROTO_ERR_DATA_MISMATCH', message)
}

function invalidRequest (message: string): FlotillaError {
  return createError('PROTO_ERR_INVALID_REQUEST', message)
}

/**
 * The JSON part's length from the `Inference-Header-Content-Length` header: undefined when the header is absent (the
 * body is all JSON); 0 means a raw binary request ({@link decodeRawBinaryRequest}). A value that is not an integer
 * (Triton parses an int32) or that is negative or beyond the body is a 400 with Triton's texts (triton-behaviour.md
 * §1.6). Triton's `atoi` would read `12abc` as 12 and `abc` as 0; we refuse both.
 */
export function parseInferenceHeaderLength (value: string | string[] | undefined, bodyLength: number): number | undefined {
  if (value === undefined) return undefined
  const text = typeof value === 'string' ? value : value.join(', ')
  const trimmed = text.trim()
  const n = /^[+-]?[0-9]{1,10}$/.test(trimmed) ? Number(trimmed) : NaN
  if (!(n >= INT32_MIN && n <= INT32_MAX)) {
    throw binaryDataError(`Unable to parse Inference-Header-Content-Length, got: ${text}`)
  }
  if (n < 0 || n > bodyLength) {
    throw binaryDataError(`inference header size should be in range (0, ${bodyLength}), got: ${text}`)
  }
  // `-0` parses to -0, which is a header length of 0 all the same.
  return n === 0 ? 0 : n
}

// ---------------------------------------------------------------------------------------------------------------
// Decoding: bytes to elements

/**
 * The elements of a BYTES tensor from its length-prefixed layout, each a view over the body. Checks follow Triton's
 * (core ValidateBytesInputs and the backends' string parsing), in its order and with its texts, extended.
 */
function stringElements (tensor: BinaryTensorRef, body: Buffer, offset: number, byteLength: number): BytesData {
  const { count, kind, name } = tensor
  const model = forModel(tensor.modelName)
  return bytesElements(body.subarray(offset, offset + byteLength), count, {
    tooMany: () => dataMismatch(
      `unexpected number of string elements ${count + 1} for inference ${kind} '${name}'${model}, expecting ${count} ` +
      `(binary_data_size ${byteLength} holds more elements than shape ${shapeString(tensor.shape)})`
    ),
    incompleteData: (length, available, index) => dataMismatch(
      `incomplete string data for inference ${kind} '${name}'${model}, expecting string of length ${length} but only ` +
      `${available} bytes available (element ${index})`
    ),
    incompleteLength: (available, index) => dataMismatch(
      `incomplete string length indicator for inference ${kind} '${name}'${model}, expecting 4 bytes but only ` +
      `${available} bytes available (element ${index})`
    ),
    tooFew: (got) => stringElementCountError(tensor, got)
  })
}

function shapeString (shape: readonly number[]): string {
  return `[${shape.join(',')}]`
}

/** The elements of `tensor` from `byteLength` bytes of `body` at `offset`, which must match its shape exactly. */
function tensorDataFromBytes (tensor: BinaryTensorRef, body: Buffer, offset: number, byteLength: number): TensorData {
  const info = DATATYPES[tensor.datatype]
  if (info.byteSize === 0) return stringElements(tensor, body, offset, byteLength)
  if (byteLength !== tensor.count * info.byteSize) throw binaryByteSizeError(tensor, byteLength)
  return typedElements(tensor.datatype, body.subarray(offset, offset + byteLength), tensor.count)
}

/** The bytes after a body's JSON part, handed out in order; leftovers are refused at the end. */
class BodySection implements BinarySection {
  readonly #body: Buffer
  readonly #start: number
  readonly #kind: TensorKind
  readonly #modelName: string | undefined
  #pos: number

  constructor (body: Buffer, start: number, kind: TensorKind, modelName: string | undefined) {
    this.#body = body
    this.#start = start
    this.#pos = start
    this.#kind = kind
    this.#modelName = modelName
  }

  read (tensor: BinaryTensorRef, byteSize: number): TensorData {
    const offset = this.#pos
    const available = this.#body.length - offset
    if (byteSize > available) throw missingBinaryBytesError(tensor, byteSize, available, true)
    this.#pos += byteSize
    return tensorDataFromBytes(tensor, this.#body, offset, byteSize)
  }

  end (): void {
    if (this.#pos !== this.#body.length) {
      throw leftoverBytesError(this.#kind, this.#modelName, this.#pos - this.#start, this.#body.length - this.#start)
    }
  }
}

/** Triton's text for bytes nobody claimed (http_server.cc), extended with the counts. */
function leftoverBytesError (kind: TensorKind, modelName: string | undefined, used: number, total: number): FlotillaError {
  return binaryDataError(
    `unexpected additional ${kind} data${forModel(modelName)} (the binary ${kind}s take ${used} bytes, but ${total} ` +
    'bytes follow the JSON)'
  )
}

function checkHeaderLength (headerLength: number, bodyLength: number): void {
  if (!Number.isSafeInteger(headerLength) || headerLength < 0 || headerLength > bodyLength) {
    throw binaryDataError(`inference header size should be in range (0, ${bodyLength}), got: ${headerLength}`)
  }
}

/**
 * A request body as the worker receives it: JSON only (`headerLength` undefined) or JSON + binary inputs
 * (`headerLength` from {@link parseInferenceHeaderLength}). Binary inputs are typed views over `body`, which they
 * keep alive; `binary_data_size` is taken out of their parameters, so a binary request decodes exactly as its JSON
 * twin. `options.modelName` puts Triton's `for model '<m>'` into the binary-data messages.
 * A header length of 0 is a raw binary request, which needs the model's input: see {@link decodeRawBinaryRequest}.
 * Throws the PROTO_* errors of json-codec, PROTO_ERR_BINARY_DATA for the framing and PROTO_ERR_DATA_MISMATCH for a
 * tensor whose bytes do not match its shape.
 */
export function decodeHttpInferRequest (
  body: Buffer, headerLength: number | undefined, options: DecodeInferRequestOptions = {}
): InferRequest {
  if (headerLength === undefined) return decodeInferRequest(body, options)
  if (headerLength === 0) {
    throw createError(
      'FLT_ERR_INTERNAL', 'a raw binary request (Inference-Header-Content-Length: 0) needs decodeRawBinaryRequest'
    )
  }
  checkHeaderLength(headerLength, body.length)
  const section = new BodySection(body, headerLength, 'input', options.modelName)
  return decodeInferRequestJson(body.subarray(0, headerLength), options, section)
}

/**
 * Client side (tests, load generators, the gateway's typed path): a response body, JSON only or JSON + binary
 * outputs. Binary outputs are typed views over `body`, without `binary_data_size` in their parameters.
 */
export function decodeHttpInferResponse (
  body: Buffer, headerLength: number | undefined, options: DecodeInferResponseOptions = {}
): InferResponse {
  if (headerLength === undefined) return decodeInferResponse(body, options)
  checkHeaderLength(headerLength, body.length)
  const section = new BodySection(body, headerLength, 'output', undefined)
  return decodeInferResponseJson(body.subarray(0, headerLength), options, section)
}

/**
 * Triton's text for a raw binary request to a model whose input cannot be deduced because it has `inputCount`
 * inputs (core InferenceRequest::Normalize); the HTTP front checks this before {@link decodeRawBinaryRequest}.
 */
export function rawRequestInputCountError (inputCount: number, modelName: string): FlotillaError {
  return invalidRequest(
    `Raw request must only have 1 input (found 1) to be deduced but got ${inputCount} inputs in '${modelName}' ` +
    'model configuration'
  )
}

/**
 * Triton's raw binary request (`Inference-Header-Content-Length: 0`, triton-behaviour.md §2.5): the whole body is the
 * data of the model's only input, described by `input` (config dims, without the batch dimension; `batching` when
 * max_batch_size > 0, which makes it a batch of 1). A BYTES input must have dims [1] and the body is its one element;
 * otherwise one -1 in the dims is deduced from the body's size. Every output is answered in binary
 * (`binary_data_output: true`). Errors are Triton's texts; a body over `options.maxInputBytes` (default 64 MiB) is a 400.
 */
export function decodeRawBinaryRequest (
  body: Buffer, input: { name: string, datatype: DataType, dims: readonly number[] }, batching: boolean,
  modelName: string, options: Pick<DecodeInferRequestOptions, 'maxInputBytes' | 'maxInputBytesSetting'> = {}
): InferRequest {
  const maxBytes = options.maxInputBytes ?? DEFAULT_MAX_INPUT_BYTES
  if (body.length > maxBytes) {
    throw invalidRequest(
      `Raw input has a byte_size (${body.length} bytes) that exceeds the maximum allowed value of ${maxBytes} bytes. ` +
      `Use ${options.maxInputBytesSetting ?? DEFAULT_INPUT_LIMIT_SETTING} to increase the limit.`
    )
  }
  const { name, datatype, dims } = input
  let shape: number[]
  let data: TensorData
  if (datatype === 'BYTES') {
    if (dims.length !== 1 || dims[0] !== 1) {
      throw invalidRequest(`For BYTE datatype raw input '${name}', the model must have input shape [1]`)
    }
    shape = [1]
    // Triton prepends the length itself: the body is the one element.
    data = new BytesData(body, new Uint32Array([0, body.length]))
  } else {
    let variable = -1
    let fixed = 1
    for (let i = 0; i < dims.length; i++) {
      const d = dims[i] as number
      if (d >= 0) {
        fixed *= d
      } else if (variable === -1) {
        variable = i
      } else {
        throw invalidRequest(
          `The shape of the raw input '${name}' can not be deduced because there are more than one variable-sized dimension`
        )
      }
    }
    shape = dims.slice()
    const size = DATATYPES[datatype].byteSize
    if (variable !== -1) shape[variable] = fixed === 0 ? 0 : Math.floor(body.length / (fixed * size))
    const tensor: BinaryTensorRef = {
      name,
      kind: 'input',
      datatype,
      shape: batching ? [1, ...shape] : shape,
      count: elementCount(shape),
      prefix: requestIdPrefix(undefined),
      modelName
    }
    data = tensorDataFromBytes(tensor, body, 0, body.length)
  }
  if (batching) shape = [1, ...shape]
  return { parameters: { binary_data_output: true }, inputs: [{ name, datatype, shape, data }] }
}

// ---------------------------------------------------------------------------------------------------------------
// Encoding

/** A body to send and, when binary sections follow the JSON, the Inference-Header-Content-Length value. */
export interface EncodedHttpBody {
  /** The bytes to send: the JSON alone (a string is fine) or JSON + binary sections. */
  body: Buffer | string
  /**
   * Length of the JSON part when binary sections follow (the Inference-Header-Content-Length value); undefined for
   * pure JSON.
   */
  headerLength: number | undefined
}

/** A tensor whose bytes follow the JSON: typed elements, or raw bytes already in the wire layout. */
type Section = { datatype: DataType, data: TensorData } | Uint8Array

/**
 * One buffer, allocated once: the JSON, `pad` spaces, then each section's bytes. Spaces after the JSON are valid
 * JSON whitespace and count in the header length.
 */
function assemble (
  json: string, pad: number, sections: readonly Section[], total: number
): { body: Buffer, headerLength: number } {
  const jsonLength = Buffer.byteLength(json)
  const headerLength = jsonLength + pad
  const body = Buffer.allocUnsafe(headerLength + total)
  body.write(json, 0, 'utf8')
  if (pad > 0) body.fill(0x20, jsonLength, headerLength)
  let pos = headerLength
  for (let i = 0; i < sections.length; i++) {
    const s = sections[i] as Section
    if (s instanceof Uint8Array) {
      body.set(s, pos)
      pos += s.length
    } else {
      pos = writeRawBytes(body, pos, s.data)
    }
  }
  return { body, headerLength }
}

/**
 * Spaces that bring the JSON part of a request we send to a multiple of 8 bytes, so that the first binary input
 * (and the next ones while their sizes keep the alignment) starts aligned and the receiving worker can view it in
 * place instead of copying it. Responses are not padded: they match Triton's byte for byte.
 */
function alignmentPad (json: string): number {
  return (8 - (Buffer.byteLength(json) % 8)) % 8
}

/**
 * Triton's rule (triton-behaviour.md §2.2): a listed output is binary by its own `binary_data`, any other by
 * `binary_data_output`.
 */
function outputIsBinary (name: string, listed: readonly RequestedOutput[] | undefined, byDefault: boolean): boolean {
  if (listed !== undefined) {
    for (let i = 0; i < listed.length; i++) {
      const o = listed[i] as RequestedOutput
      if (o.name === name) return o.parameters?.binary_data === true
    }
  }
  return byDefault
}

/**
 * The response for `request`: each output binary or JSON by Triton's rule (§2.2: a listed output is binary iff its
 * own `binary_data` parameter is true; an output returned without being listed follows `binary_data_output`). A
 * binary output gets `binary_data_size` in its parameters and no `data`; its bytes come straight from its typed
 * array. When no binary output has bytes, the answer is pure JSON (headerLength undefined; a 0-byte binary output
 * still shows `binary_data_size: 0`), exactly Triton's §2.3. FP16/BF16 outputs in JSON are numbers, as in json-codec.
 * Throws FLT_ERR_INTERNAL when an output's data does not match its shape.
 */
export function encodeHttpInferResponse (
  response: InferResponse, request: Pick<InferRequest, 'parameters' | 'outputs'>
): EncodedHttpBody {
  const listed = request.outputs
  const byDefault = request.parameters.binary_data_output === true
  const sections: Section[] = []
  let total = 0
  const json = encodeResponseEnvelope(response, (t) => {
    if (!outputIsBinary(t.name, listed, byDefault)) return encodeTensorJson(t, 'output')
    checkTensorLength(t, 'output')
    const size = tensorByteSize(t)
    if (size > 0) {
      sections.push(t)
      total += size
    }
    return encodeBinaryTensorJson(t.name, t.datatype, t.shape, t.parameters, size)
  })
  if (sections.length === 0) return { body: json, headerLength: undefined }
  return assemble(json, 0, sections, total)
}

/**
 * Client side (tests, load generators): a request with every input binary (`binaryInputs`) or in JSON `data`,
 * asking for binary outputs when `binaryOutputs` (`binary_data: true` on each listed output, or
 * `binary_data_output: true` when none are listed). headerLength is undefined when no binary bytes follow.
 */
export function encodeHttpInferRequest (
  request: InferRequest, options: { binaryInputs: boolean, binaryOutputs: boolean }
): EncodedHttpBody {
  if (!options.binaryInputs) {
    return {
      body: encodeRequestEnvelope(request, (t) => encodeTensorJson(t, 'input'), options.binaryOutputs),
      headerLength: undefined
    }
  }
  const sections: Section[] = []
  let total = 0
  const json = encodeRequestEnvelope(request, (t) => {
    checkTensorLength(t, 'input')
    const size = tensorByteSize(t)
    if (size > 0) {
      sections.push(t)
      total += size
    }
    return encodeBinaryTensorJson(t.name, t.datatype, t.shape, t.parameters, size)
  }, options.binaryOutputs)
  if (sections.length === 0) return { body: json, headerLength: undefined }
  return assemble(json, alignmentPad(json), sections, total)
}

/**
 * For the gateway, which must not decode tensors on its path: a binary HTTP request from raw tensors, every input
 * binary and every output asked for in binary (`binary_data: true` on each listed output, or
 * `binary_data_output: true` when none are listed). The tensors' bytes are copied once, into the one body buffer;
 * datatypes and sizes are not checked (the worker does that).
 */
export function encodeRawHttpInferRequest (request: RawInferRequest): { body: Buffer, headerLength: number } {
  const sections: Uint8Array[] = []
  let total = 0
  const json = encodeRequestEnvelope(request, (t: RawTensor) => {
    const size = t.raw.byteLength
    if (size > 0) {
      sections.push(t.raw)
      total += size
    }
    return encodeBinaryTensorJson(t.name, t.datatype, t.shape, t.parameters, size)
  }, true)
  return assemble(json, alignmentPad(json), sections, total)
}

/**
 * For the gateway: a worker's response (JSON only, or JSON + binary outputs) as raw tensors. Binary outputs are views
 * of `body`, their datatype and size unchecked; an output that came as JSON `data` is converted to the raw layout
 * (so a worker answering in JSON still works). `binary_data_size` is taken out of the outputs' parameters.
 * Throws PROTO_ERR_BINARY_DATA when the binary outputs overrun the body or leave bytes over, and json-codec's errors
 * for a malformed JSON part.
 */
export function decodeRawHttpInferResponse (body: Buffer, headerLength: number | undefined): RawInferResponse {
  const jsonLength = headerLength ?? body.length
  checkHeaderLength(jsonLength, body.length)
  let pos = jsonLength
  const response: RawInferResponse = decodeResponseEnvelope(body.subarray(0, jsonLength), (header) => {
    let raw: Uint8Array
    if (header.binaryDataSize !== undefined) {
      const size = header.binaryDataSize
      const available = body.length - pos
      if (size > available) {
        throw missingBinaryBytesError(
          { name: header.name, kind: 'output', modelName: undefined }, size, available, headerLength !== undefined
        )
      }
      raw = new Uint8Array(body.buffer, body.byteOffset + pos, size)
      pos += size
    } else {
      if (!isDataType(header.datatype)) throw createError('PROTO_ERR_INVALID_DATATYPE', header.name)
      const data = decodeTensorData(
        header.name, 'output', header.datatype, header.shape, header.data, Number.POSITIVE_INFINITY
      )
      raw = rawBytes(data)
    }
    const tensor: RawTensor = { name: header.name, datatype: header.datatype, shape: header.shape, raw }
    if (header.parameters !== undefined) tensor.parameters = header.parameters
    return tensor
  })
  if (pos !== body.length) throw leftoverBytesError('output', undefined, pos - jsonLength, body.length - jsonLength)
  return response
}
