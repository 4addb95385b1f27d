/**
 * The requests a benchmark sends, built once before any load: the model's inputs resolved to concrete shapes (the
 * batch dimension from `-b`, other variable dimensions from `--shape` or the data file), then filled with seeded
 * random data, zeros, or the entries of a data file in perf_analyzer's JSON format.
 *
 * A small pool of distinct requests is sent round-robin, so a server (or a cache in front of it) never sees one
 * identical body only; random data is seeded, so the same flags send the same bytes on every run.
 *
 * Every problem here is the user's to fix (a flag, a file), so each is a CLI_ERR_USAGE whose message names the
 * input, the entry and what to change.
 */
import { createError, type FlotillaError } from '../../common/errors.ts'
import { BytesData, BytesDataBuilder } from '../../common/protocol/bytes-data.ts'
import {
  DATATYPES, allocateTensorData, elementCount, float32ToBf16Bits, float32ToFp16Bits
} from '../../common/protocol/datatypes.ts'
import { bytesElements } from '../../common/protocol/raw-layout.ts'
import { type DataType, type InferRequest, type Tensor, type TensorData } from '../../common/protocol/types.ts'
import { seededRandom } from '../../common/seeded-random.ts'
import { type ModelMetadata } from './transport.ts'

/** Distinct random requests prepared when `--request-pool` is not given. */
export const DEFAULT_REQUEST_POOL = 16
/** Integers drawn for random data, inclusive: small enough for every integer type and for token ids. */
export const DEFAULT_INT_RANGE: readonly [number, number] = [0, 100]
/** Characters in each random BYTES element. */
export const DEFAULT_STRING_LENGTH = 16

/** One model input with its shapes settled as far as the flags settle them. */
export interface ResolvedInput {
  name: string
  datatype: DataType
  /** Whether the first dimension is the batch dimension (the model batches and the metadata leads with -1). */
  batched: boolean
  /** One sample's shape (without the batch dimension); -1 where neither the model nor `--shape` fixed it. */
  sampleShape: number[]
}

/** perf_analyzer's data file, checked for structure (not yet against the model). */
export interface InputDataFile {
  /** As given to `--input-data`, for messages. */
  source: string
  entries: Array<Map<string, InputValue>>
}

/** One input's data in one entry of the file. */
export interface InputValue {
  /** The elements, flattened (numbers, booleans or strings as written); absent when `b64` is given. */
  values?: unknown[]
  /** The raw little-endian bytes (BYTES: 4-byte length-prefixed elements), from `{"b64": ...}`. */
  b64?: Buffer
  /** The sample's shape, from `{"shape": [...]}`. */
  shape?: number[]
}

/** Settings for generated (random or zero) data. */
export interface GeneratedDataOptions {
  /** Requests in the pool (random data); zero data always makes one. */
  poolSize: number
  seed: number
  /** Inclusive range for integer datatypes. */
  intRange: readonly [number, number]
  stringLength: number
}

function usage (message: string): FlotillaError {
  return createError('CLI_ERR_USAGE', message)
}

const shapeText = (shape: readonly number[]): string => `[${shape.join(',')}]`

/**
 * Parses one `--shape NAME:d1,d2,...` (perf_analyzer's form: the dimensions of one sample, without the batch
 * dimension). The name may itself contain colons; the last one separates it from the dimensions.
 */
export function parseShapeFlag (raw: string): [string, number[]] {
  const colon = raw.lastIndexOf(':')
  const name = raw.slice(0, colon)
  const dims = raw.slice(colon + 1)
  if (colon <= 0 || !/^[0-9]+(,[0-9]+)*$/.test(dims)) {
    throw usage(`--shape takes NAME:d1,d2,... (the dimensions of one sample, without the batch dimension), got '${raw}'`)
  }
  const shape = dims.split(',').map(Number)
  if (shape.some((d) => d < 1 || !Number.isSafeInteger(d))) throw usage(`--shape ${raw}: every dimension must be at least 1`)
  return [name, shape]
}

/**
 * Settles each input's sample shape from the metadata, the batch size and `--shape`.
 *
 * @param metadata the model's inputs; a leading -1 is the batch dimension when `maxBatchSize` > 0
 * @param maxBatchSize the model config's max_batch_size (0: no batching)
 * @param batchSize `-b`
 * @param shapes `--shape` values by input name
 * @throws FlotillaError CLI_ERR_USAGE for a batch size the model cannot take, a `--shape` naming no input, or one
 *   that contradicts a fixed dimension
 */
export function resolveInputs (
  metadata: ModelMetadata, maxBatchSize: number, batchSize: number, shapes: ReadonlyMap<string, readonly number[]>
): ResolvedInput[] {
  const model = metadata.name === '' ? 'the model' : `model '${metadata.name}'`
  if (maxBatchSize === 0 && batchSize > 1) {
    throw usage(`${model} does not batch (max_batch_size 0), so -b must be 1, got ${batchSize}`)
  }
  if (maxBatchSize > 0 && batchSize > maxBatchSize) {
    throw usage(`-b ${batchSize} is more than ${model}'s max_batch_size ${maxBatchSize}`)
  }
  const names = metadata.inputs.map((i) => i.name)
  for (const name of shapes.keys()) {
    if (!names.includes(name)) throw usage(`--shape names '${name}', which is not an input of ${model} (its inputs: ${names.join(', ')})`)
  }
  return metadata.inputs.map((input) => {
    const batched = maxBatchSize > 0 && input.shape[0] === -1
    const modelShape = batched ? input.shape.slice(1) : [...input.shape]
    const given = shapes.get(input.name)
    const sampleShape = given === undefined ? modelShape : mergeShape(modelShape, given, `--shape ${input.name}:${given.join(',')}`, input.name)
    return { name: input.name, datatype: input.datatype, batched, sampleShape }
  })
}

/** `given` fills the -1s of `model`; a rank or a fixed dimension that disagrees is an error naming `source`. */
function mergeShape (model: readonly number[], given: readonly number[], source: string, input: string): number[] {
  if (given.length !== model.length) {
    throw usage(`${source} has ${given.length} dimension(s), but input '${input}' has ${model.length} per sample (shape ${shapeText(model)}` +
      `${model.length === 0 ? '' : ', batch dimension excluded'})`)
  }
  return model.map((d, i) => {
    if (d !== -1 && d !== given[i]) throw usage(`${source} gives dimension ${i} as ${given[i]}, but input '${input}' fixes it at ${d} (shape ${shapeText(model)})`)
    return given[i]!
  })
}

function requireComplete (input: ResolvedInput): void {
  if (input.sampleShape.includes(-1)) {
    throw usage(`input '${input.name}' has a variable dimension (shape ${shapeText(input.sampleShape)} per sample); ` +
      `give it with --shape ${input.name}:${input.sampleShape.map((d) => d === -1 ? 'N' : String(d)).join(',')}`)
  }
}

function fullShape (input: ResolvedInput, sampleShape: readonly number[], batchSize: number): number[] {
  return input.batched ? [batchSize, ...sampleShape] : [...sampleShape]
}

// ---------------------------------------------------------------------------------------------------------------
// Generated data

/** The inclusive range of an integer datatype, as numbers or bigints. */
function integerRange (datatype: DataType): [bigint, bigint] | undefined {
  const info = DATATYPES[datatype]
  if (!info.isInteger) return undefined
  const bits = BigInt(info.byteSize * 8)
  return info.isUnsigned ? [0n, (1n << bits) - 1n] : [-(1n << (bits - 1n)), (1n << (bits - 1n)) - 1n]
}

/**
 * `poolSize` requests of seeded random data: integers uniform in `intRange`, floats uniform in [0, 1) (FP16/BF16
 * rounded to their 16-bit patterns), BOOL 0 or 1, BYTES `stringLength` random lowercase letters and digits.
 *
 * @throws FlotillaError CLI_ERR_USAGE when a dimension is still variable or `intRange` does not fit a datatype
 */
export function randomRequests (inputs: readonly ResolvedInput[], batchSize: number, options: GeneratedDataOptions): InferRequest[] {
  for (const input of inputs) {
    requireComplete(input)
    const range = integerRange(input.datatype)
    const [lo, hi] = options.intRange
    if (range !== undefined && (BigInt(lo) < range[0] || BigInt(hi) > range[1])) {
      throw usage(`--int-range ${lo}:${hi} does not fit input '${input.name}' (${input.datatype}: ${range[0]} to ${range[1]})`)
    }
  }
  const random = seededRandom(options.seed)
  const requests: InferRequest[] = []
  for (let r = 0; r < options.poolSize; r++) {
    requests.push({
      parameters: {},
      inputs: inputs.map((input) => {
        const shape = fullShape(input, input.sampleShape, batchSize)
        return { name: input.name, datatype: input.datatype, shape, data: randomData(input.datatype, elementCount(shape), random, options) }
      })
    })
  }
  return requests
}

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789'

function randomData (datatype: DataType, count: number, random: () => number, options: GeneratedDataOptions): TensorData {
  const data = allocateTensorData(datatype, count)
  const [lo, hi] = options.intRange
  const span = hi - lo + 1
  const int = (): number => lo + Math.floor(random() * span)
  switch (datatype) {
    case 'BOOL': {
      const d = data as Uint8Array
      for (let i = 0; i < count; i++) d[i] = random() < 0.5 ? 0 : 1
      return d
    }
    case 'INT64': case 'UINT64': {
      const d = data as BigInt64Array | BigUint64Array
      for (let i = 0; i < count; i++) d[i] = BigInt(int())
      return d
    }
    case 'FP16': case 'BF16': {
      const d = data as Uint16Array
      const narrow = datatype === 'FP16' ? float32ToFp16Bits : float32ToBf16Bits
      for (let i = 0; i < count; i++) d[i] = narrow(random())
      return d
    }
    case 'FP32': case 'FP64': {
      const d = data as Float32Array | Float64Array
      for (let i = 0; i < count; i++) d[i] = random()
      return d
    }
    case 'BYTES': {
      const bytes = new Uint8Array(count * options.stringLength)
      for (let j = 0; j < bytes.length; j++) bytes[j] = ALPHABET.charCodeAt(Math.floor(random() * ALPHABET.length))
      const spans = new Uint32Array(2 * count)
      for (let i = 0; i < count; i++) {
        spans[2 * i] = i * options.stringLength
        spans[2 * i + 1] = (i + 1) * options.stringLength
      }
      return new BytesData(bytes, spans)
    }
    default: {
      const d = data as Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array | Uint32Array
      for (let i = 0; i < count; i++) d[i] = int()
      return d
    }
  }
}

/**
 * One request of zeros (BYTES: empty strings); one is enough, every copy would be the same.
 *
 * @throws FlotillaError CLI_ERR_USAGE when a dimension is still variable
 */
export function zeroRequests (inputs: readonly ResolvedInput[], batchSize: number): InferRequest[] {
  for (const input of inputs) requireComplete(input)
  return [{
    parameters: {},
    inputs: inputs.map((input) => {
      const shape = fullShape(input, input.sampleShape, batchSize)
      return { name: input.name, datatype: input.datatype, shape, data: allocateTensorData(input.datatype, elementCount(shape)) }
    })
  }]
}

// ---------------------------------------------------------------------------------------------------------------
// perf_analyzer's JSON data file

const FORMAT_HINT = '{"data": [{"INPUT0": [1, 2, 3], "INPUT1": {"content": [...], "shape": [3]}}, ...]}'

/**
 * Reads perf_analyzer's data file for structure only, so that a malformed file is refused before any request to
 * the server: `{"data": [entry, ...]}`, each entry an object from input name to a flat (or nested) array of
 * values, `{"content": [...], "shape": [...]}`, or `{"b64": "...", "shape": [...]}`.
 *
 * @param text the file's contents
 * @param source the path, for messages
 * @throws FlotillaError CLI_ERR_USAGE naming the entry and input at fault
 */
export function parseInputDataFile (text: string, source: string): InputDataFile {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (err) {
    throw usage(`--input-data ${source} is not valid JSON: ${(err as Error).message}`)
  }
  const data = isObject(json) ? json.data : undefined
  if (!Array.isArray(data) || data.length === 0) {
    throw usage(`--input-data ${source} must be an object with a non-empty "data" array (perf_analyzer's format: ${FORMAT_HINT})`)
  }
  const entries = data.map((entry: unknown, i) => {
    if (Array.isArray(entry)) {
      throw usage(`--input-data ${source}: entry ${i} is an array; sequence streams are not supported, give one object of inputs per entry`)
    }
    if (!isObject(entry)) throw usage(`--input-data ${source}: entry ${i} must be an object from input name to data`)
    const inputs = new Map<string, InputValue>()
    for (const [name, value] of Object.entries(entry)) inputs.set(name, inputValue(value, `--input-data ${source}: entry ${i}, input '${name}'`))
    return inputs
  })
  return { source, entries }
}

function isObject (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function inputValue (value: unknown, where: string): InputValue {
  if (Array.isArray(value)) return { values: flatten(value, where) }
  if (!isObject(value)) throw usage(`${where}: give an array of values, {"content": [...], "shape": [...]} or {"b64": "...", "shape": [...]}`)
  const out: InputValue = {}
  if (value.shape !== undefined) {
    const shape = value.shape
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw usage(`${where}: "shape" must be an array of non-negative integers`)
    }
    out.shape = shape as number[]
  }
  if (Array.isArray(value.content)) {
    out.values = flatten(value.content, where)
  } else if (typeof value.b64 === 'string') {
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(value.b64)) throw usage(`${where}: "b64" is not base64`)
    out.b64 = Buffer.from(value.b64, 'base64')
  } else {
    throw usage(`${where}: an object must have "content" (an array) or "b64" (a base64 string)`)
  }
  return out
}

function flatten (values: unknown[], where: string): unknown[] {
  const out: unknown[] = []
  const walk = (list: unknown[], depth: number): void => {
    if (depth > 64) throw usage(`${where}: the data is nested too deeply`)
    for (const v of list) {
      if (Array.isArray(v)) walk(v, depth + 1)
      else out.push(v)
    }
  }
  walk(values, 0)
  return out
}

/**
 * The requests of a data file: with `-b 1`, one per entry, sent round-robin; with `-b N`, entry `k` is one sample
 * and request `j` stacks entries `j·N … j·N+N-1` (wrapping around), so every entry is sent equally often.
 *
 * @throws FlotillaError CLI_ERR_USAGE for an entry that misses an input or names an unknown one, a shape or value
 *   count that does not fit, a value of the wrong kind, or entries of different shapes in one batch
 */
export function fileRequests (file: InputDataFile, inputs: readonly ResolvedInput[], batchSize: number, model: string): InferRequest[] {
  const names = inputs.map((i) => i.name)
  const samples = file.entries.map((entry, e) => {
    const at = `--input-data ${file.source}: entry ${e}`
    for (const name of entry.keys()) {
      if (!names.includes(name)) throw usage(`${at} names '${name}', which is not an input of model '${model}' (its inputs: ${names.join(', ')})`)
    }
    return inputs.map((input) => {
      const value = entry.get(input.name)
      if (value === undefined) throw usage(`${at} has no data for input '${input.name}' (the model's inputs: ${names.join(', ')})`)
      const where = `${at}, input '${input.name}'`
      const shape = value.shape === undefined ? input.sampleShape : mergeShape(input.sampleShape, value.shape, `${where}: "shape" ${shapeText(value.shape)}`, input.name)
      if (shape.includes(-1)) {
        throw usage(`${where}: the input has a variable dimension (shape ${shapeText(shape)} per sample); ` +
          `give "shape" in the entry, or --shape ${input.name}:...`)
      }
      const count = elementCount(shape)
      const data = value.b64 !== undefined
        ? rawToData(input.datatype, value.b64, count, shape, where)
        : valuesToData(input.datatype, value.values ?? [], count, shape, where)
      return { shape, data }
    })
  })

  const n = samples.length
  const requests: InferRequest[] = []
  for (let j = 0; j < n; j++) {
    const members = Array.from({ length: batchSize }, (_, k) => (j * batchSize + k) % n)
    requests.push({
      parameters: {},
      inputs: inputs.map((input, i): Tensor => {
        const parts = members.map((e) => samples[e]![i]!)
        const first = parts[0]!
        for (const [k, part] of parts.entries()) {
          if (shapeText(part.shape) !== shapeText(first.shape)) {
            throw usage(`--input-data ${file.source}: entries ${members[0]} and ${members[k]} give input '${input.name}' different shapes ` +
              `(${shapeText(first.shape)} and ${shapeText(part.shape)}), so they cannot share a batch of -b ${batchSize}`)
          }
        }
        return { name: input.name, datatype: input.datatype, shape: fullShape(input, first.shape, batchSize), data: concat(input.datatype, parts.map((p) => p.data)) }
      })
    })
  }
  return requests
}

function concat (datatype: DataType, parts: TensorData[]): TensorData {
  if (parts.length === 1) return parts[0]!
  if (DATATYPES[datatype].storage === 'bytes') return BytesData.concat(parts as BytesData[])
  const total = parts.reduce((sum, p) => sum + p.length, 0)
  const out = allocateTensorData(datatype, total) as Exclude<TensorData, BytesData>
  let offset = 0
  for (const p of parts as Array<Exclude<TensorData, BytesData>>) {
    (out as { set (a: ArrayLike<number | bigint>, offset: number): void }).set(p, offset)
    offset += p.length
  }
  return out
}

function valuesToData (datatype: DataType, values: unknown[], count: number, shape: number[], where: string): TensorData {
  if (values.length !== count) {
    throw usage(`${where}: ${values.length} value(s) given, but its shape ${shapeText(shape)} needs ${count}`)
  }
  const bad = (i: number, what: string): never => {
    throw usage(`${where}: value ${i} (${JSON.stringify(values[i])}) is not ${what}`)
  }
  if (datatype === 'BYTES') {
    const out = new BytesDataBuilder(count)
    for (let i = 0; i < count; i++) {
      const v = values[i]
      if (typeof v !== 'string') bad(i, 'a string (BYTES)')
      out.pushString(v as string)
    }
    return out.finish()
  }
  const data = allocateTensorData(datatype, count)
  const info = DATATYPES[datatype]
  if (datatype === 'BOOL') {
    const d = data as Uint8Array
    for (let i = 0; i < count; i++) {
      const v = values[i]
      if (v === true || v === 1) d[i] = 1
      else if (v === false || v === 0) d[i] = 0
      else bad(i, 'a boolean (BOOL)')
    }
  } else if (info.isInteger) {
    const [lo, hi] = integerRange(datatype)!
    for (let i = 0; i < count; i++) {
      const v = values[i]
      // 64-bit values beyond 2^53 can only be written exactly as digit strings.
      const n = typeof v === 'number' && Number.isSafeInteger(v)
        ? BigInt(v)
        : typeof v === 'string' && /^-?[0-9]+$/.test(v) && info.isBigInt ? BigInt(v) : undefined
      if (n === undefined || n < lo || n > hi) bad(i, `an integer from ${lo} to ${hi} (${datatype})`)
      if (info.isBigInt) (data as BigInt64Array | BigUint64Array)[i] = n!
      else (data as Int32Array)[i] = Number(n)
    }
  } else {
    const narrow = datatype === 'FP16' ? float32ToFp16Bits : datatype === 'BF16' ? float32ToBf16Bits : undefined
    for (let i = 0; i < count; i++) {
      const v = values[i]
      if (typeof v !== 'number') bad(i, `a number (${datatype})`)
      const d = data as Float32Array | Float64Array | Uint16Array
      d[i] = narrow === undefined ? v as number : narrow(v as number)
    }
  }
  return data
}

function rawToData (datatype: DataType, raw: Buffer, count: number, shape: number[], where: string): TensorData {
  const size = DATATYPES[datatype].byteSize
  if (size === 0) {
    // BYTES: each element a 4-byte little-endian length, then that many bytes.
    const wrong = (): Error => usage(`${where}: "b64" does not hold ${count} length-prefixed BYTES element(s) for shape ${shapeText(shape)}`)
    return bytesElements(raw, count, { tooMany: wrong, incompleteData: wrong, incompleteLength: wrong, tooFew: wrong })
  }
  if (raw.length !== count * size) {
    throw usage(`${where}: "b64" holds ${raw.length} bytes, but shape ${shapeText(shape)} of ${datatype} needs ${count * size}`)
  }
  const data = allocateTensorData(datatype, count) as Exclude<TensorData, BytesData>
  // Copy into the typed array's own buffer: aligned, and in the platform's (little-endian) byte order.
  new Uint8Array(data.buffer, data.byteOffset, data.byteLength).set(raw)
  return data
}
