/**
 * A tensor's JSON `data` to typed storage (triton-behaviour.md §1.7), with each datatype's rules:
 *
 * - BOOL: `true` / `false` only (numbers are refused, as Triton refuses them).
 * - Integer datatypes: a number written as an integer (no fraction, no exponent: `1.0` and `1e2` are refused, as
 *   Triton's RapidJSON refuses them) within the datatype's range. INT64 and UINT64 are read from the token's digits,
 *   so every 64-bit value arrives exact.
 * - FP16, BF16, FP32, FP64: any number, correctly rounded to the datatype, and the bare `NaN`, `Infinity` and
 *   `-Infinity` tokens. A finite number that rounds to infinity in the datatype (1e39 for FP32, 70000 for FP16,
 *   1e400 for any) is refused.
 * - BYTES: a string, stored as its UTF-8 bytes.
 *
 * Each refusal is a 400 (PROTO_ERR_DATA_MISMATCH) naming the tensor, the element's index and the value as written.
 *
 * Two sources: a {@link JsonDataRange} (json-body-parser.ts), read from the body's bytes straight into the typed
 * array, which is how every body the codec parses arrives; and an array JSON.parse built, which only a body that
 * parser leaves to JSON.parse (nesting beyond its depth limit) brings. From such an array, numbers are doubles: `1.0`
 * cannot be told from `1`, and 64-bit values are only as exact as a double.
 */
import { createError, type FlotillaError } from '../errors.ts'
import { BytesDataBuilder, type BytesData } from './bytes-data.ts'
import { DATATYPES, allocateTensorData, elementCount, float32ToBf16Bits, float32ToFp16Bits } from './datatypes.ts'
import {
  JsonDataRange, leafKind, leafValue, nextLeaf, numberTokenText, pushBytesString, readDouble, readInteger, readNarrowed,
  tokenEnd
} from './json-body-parser.ts'
import { LITTLE_ENDIAN_HOST } from './raw-layout.ts'
import { type DataType, type TensorData } from './types.ts'

/** Which side of the exchange a tensor is on, for messages. */
export type TensorKind = 'input' | 'output'

/**
 * `data` nested this many levels deep (the `data` array itself is level 1) is refused; Triton's limit is also 100
 * (`JSON nesting depth exceeds maximum allowed limit (100)`).
 */
export const MAX_DATA_NESTING_DEPTH = 100

/** Where the size limit of JSON input tensors is raised, named in its message, unless the caller names another. */
export const DEFAULT_INPUT_LIMIT_SETTING = 'the worker flag --max-body-bytes'

/** Where the size limit of JSON output tensors is raised (a client-side decode option). */
export const DEFAULT_OUTPUT_LIMIT_SETTING = 'the decode option maxOutputBytes'

function invalidRequest (message: string): FlotillaError {
  return createError('PROTO_ERR_INVALID_REQUEST', message)
}

function dataMismatch (message: string): FlotillaError {
  return createError('PROTO_ERR_DATA_MISMATCH', message)
}

/** `[2,3]`, the way messages print shapes. */
export function shapeString (shape: readonly number[]): string {
  return `[${shape.join(',')}]`
}

/** `null`, `array`, or the `typeof` of a JSON value. */
export function jsonTypeName (v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'array'
  return typeof v
}

/** A short, safe rendering of a JSON value for error messages. */
export function describeValue (v: unknown): string {
  if (typeof v === 'string') {
    const quoted = JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)
    return `string ${quoted}`
  }
  if (typeof v === 'number') return Object.is(v, -0) ? '-0' : String(v)
  if (typeof v === 'boolean' || v === null) return String(v)
  return jsonTypeName(v) === 'array' ? 'an array' : 'an object'
}

/** The message for a tensor whose decoded size is over the limit; `setting` is where the limit is raised. */
export function byteSizeError (
  name: string, kind: TensorKind, byteSize: number, maxBytes: number, setting: string
): FlotillaError {
  return invalidRequest(
    `JSON ${kind} '${name}' has a byte_size (${byteSize} bytes) that exceeds the maximum allowed value of ` +
    `${maxBytes} bytes. Use ${setting} to increase the limit.`
  )
}

/** The element count `shape` describes; a 400 when it is beyond what a double counts exactly. */
export function checkedElementCount (name: string, kind: TensorKind, shape: readonly number[]): number {
  const count = elementCount(shape)
  if (count > Number.MAX_SAFE_INTEGER) {
    throw invalidRequest(
      `invalid shape for ${kind} '${name}': shape ${shapeString(shape)} causes total element count to exceed ` +
      `maximum size of ${Number.MAX_SAFE_INTEGER}`
    )
  }
  return count
}

/** What leaf errors need to name. */
interface LeafContext {
  readonly name: string
  readonly kind: TensorKind
  readonly datatype: DataType
}

function leafError (ctx: LeafContext, index: number, got: string, expected: string, why = ''): FlotillaError {
  return dataMismatch(
    `Unable to parse 'data' for ${ctx.kind} '${ctx.name}': ${ctx.datatype} element at index ${index} must be ` +
    `${expected}, got ${got}${why}`
  )
}

/** What an integer datatype's elements must be, for messages: `an integer in [-128, 127]`. */
function integerExpectation (datatype: DataType): string {
  const range = DATATYPES[datatype].integerRange
  /* c8 ignore next */
  if (range === undefined) throw new Error(`${datatype} is not an integer datatype`)
  return `an integer in [${range.min}, ${range.max}]`
}

const OVERFLOW = ' (which rounds to infinity)'

function overflowExpectation (datatype: DataType): string {
  return `a number within the ${datatype} range`
}

/**
 * Converts a tensor's JSON `data` (flat or nested, as a {@link JsonDataRange} or an array JSON.parse built) to typed
 * storage, checking the leaf count against `shape` and each leaf against the datatype's rules (see the module
 * comment). `limitSetting` is named in the size error. Exported for binary-codec.ts, which turns a JSON output into
 * raw bytes for the gateway.
 * @throws FlotillaError PROTO_ERR_INVALID_REQUEST (not an array, shape, size, nesting) or PROTO_ERR_DATA_MISMATCH
 *   (leaf count, a leaf the datatype does not take)
 */
export function decodeTensorData (
  name: string, kind: TensorKind, datatype: DataType, shape: readonly number[], data: unknown, maxBytes: number,
  limitSetting: string = kind === 'input' ? DEFAULT_INPUT_LIMIT_SETTING : DEFAULT_OUTPUT_LIMIT_SETTING
): TensorData {
  const range = data instanceof JsonDataRange ? data : undefined
  if (range === undefined && !Array.isArray(data)) {
    throw invalidRequest("Unable to parse 'data': attempt to access JSON non-array as array")
  }
  const count = checkedElementCount(name, kind, shape)
  const elementSize = DATATYPES[datatype].byteSize
  if (elementSize !== 0 && count * elementSize > maxBytes) {
    throw byteSizeError(name, kind, count * elementSize, maxBytes, limitSetting)
  }
  // Triton reads nothing for a zero-element tensor, whatever 'data' holds.
  if (count === 0) return allocateTensorData(datatype, 0)

  let leaves: unknown[] | undefined
  let leafCount: number
  if (range !== undefined) {
    if (range.depth >= MAX_DATA_NESTING_DEPTH) throw nestingError(name, kind)
    leafCount = range.leafCount
  } else {
    leaves = flattenData(data as unknown[], name, kind)
    leafCount = leaves.length
  }
  if (leafCount < count) {
    throw dataMismatch(
      "Failed to parse 'data' field: shape does not match true shape " +
      `(${kind} '${name}', shape ${shapeString(shape)}: expected ${count} elements, got ${leafCount})`
    )
  }
  if (leafCount > count) {
    throw dataMismatch(
      "Unable to parse 'data': Shape does not match true shape of 'data' field " +
      `(${kind} '${name}', shape ${shapeString(shape)}: expected ${count} elements, got ${leafCount})`
    )
  }
  const ctx: LeafContext = { name, kind, datatype }
  return range !== undefined
    ? convertRange(ctx, range, maxBytes, limitSetting)
    : convertLeaves(ctx, leaves as unknown[], maxBytes, limitSetting)
}

function nestingError (name: string, kind: TensorKind): FlotillaError {
  return invalidRequest(
    `Unable to parse 'data' for ${kind} '${name}': JSON nesting depth exceeds maximum allowed limit ` +
    `(${MAX_DATA_NESTING_DEPTH})`
  )
}

// ---------------------------------------------------------------------------------------------------------------
// From the body's bytes. One tight loop per storage kind: the datatype switch runs once per tensor.

// The two 32-bit words of a 64-bit element, by the host's byte order.
const LO = LITTLE_ENDIAN_HOST ? 0 : 1
const HI = LITTLE_ENDIAN_HOST ? 1 : 0
const TWO_POW_32 = 4294967296

/** A leaf as messages show it: numbers (and NaN/Infinity) as written, at most 40 characters; others as values. */
function describeLeaf (b: Buffer, p: number): string {
  const kind = leafKind(b, p)
  if (kind === 'string' || kind === 'other') return describeValue(leafValue(b, p))
  const text = numberTokenText(b, p)
  return text.length > 40 ? `${text.slice(0, 40)}...` : text
}

function convertRange (ctx: LeafContext, range: JsonDataRange, maxBytes: number, limitSetting: string): TensorData {
  const n = range.leafCount
  switch (ctx.datatype) {
    case 'BOOL': return readBools(ctx, range)
    case 'UINT8': return readIntegers(new Uint8Array(n), ctx, range)
    case 'UINT16': return readIntegers(new Uint16Array(n), ctx, range)
    case 'UINT32': return readIntegers(new Uint32Array(n), ctx, range)
    case 'INT8': return readIntegers(new Int8Array(n), ctx, range)
    case 'INT16': return readIntegers(new Int16Array(n), ctx, range)
    case 'INT32': return readIntegers(new Int32Array(n), ctx, range)
    case 'UINT64': return readIntegers64(new BigUint64Array(n), ctx, range, false)
    case 'INT64': return readIntegers64(new BigInt64Array(n), ctx, range, true)
    case 'FP32': return readFloats(new Float32Array(n), ctx, range, Math.fround, isInfiniteDouble)
    case 'FP64': return readFloats(new Float64Array(n), ctx, range, undefined, isInfiniteDouble)
    case 'FP16': return readFloats(new Uint16Array(n), ctx, range, float32ToFp16Bits, isInfiniteFp16)
    case 'BF16': return readFloats(new Uint16Array(n), ctx, range, float32ToBf16Bits, isInfiniteBf16)
    case 'BYTES': return readStrings(ctx, range, maxBytes, limitSetting)
  }
}

function readBools (ctx: LeafContext, range: JsonDataRange): Uint8Array {
  const b = range.bytes
  const n = range.leafCount
  const out = new Uint8Array(n)
  let p = range.start
  for (let i = 0; i < n; i++) {
    p = nextLeaf(b, p)
    const c = b[p]
    if (c === 0x74) {
      out[i] = 1
      p += 4
    } else if (c === 0x66) {
      p += 5
    } else {
      throw leafError(ctx, i, describeLeaf(b, p), 'true or false')
    }
  }
  return out
}

/** Up to 32-bit integers: every value in range has at most 10 digits, so {@link readInteger}'s doubles are exact. */
function readIntegers<T extends Uint8Array | Uint16Array | Uint32Array | Int8Array | Int16Array | Int32Array> (
  out: T, ctx: LeafContext, range: JsonDataRange
): T {
  const limits = DATATYPES[ctx.datatype].integerRange
  /* c8 ignore next */
  if (limits === undefined) throw new Error(`${ctx.datatype} is not an integer datatype`)
  // Exact: the ends of an up-to-32-bit range are small integers. Number(bigint) is not free; this runs per tensor.
  const min = limits.min === 0n ? 0 : Number(limits.min)
  const max = Number(limits.max)
  const b = range.bytes
  const n = range.leafCount
  let p = range.start
  for (let i = 0; i < n; i++) {
    p = nextLeaf(b, p)
    const v = readInteger(b, p)
    // NaN (not an integer token, or too long to be in range) fails both comparisons.
    if (!(v >= min && v <= max)) throw leafError(ctx, i, describeLeaf(b, p), integerExpectation(ctx.datatype))
    out[i] = v
    p = tokenEnd
  }
  return out
}

/**
 * INT64 / UINT64, written as two 32-bit words each (no bigint is made). Tokens of up to 15 digits are exact doubles;
 * longer ones (up to 20 digits) are split into exact pieces, see {@link writeLongInteger}. Either way the stored value
 * is the token's, exactly.
 */
function readIntegers64 (
  out: BigInt64Array | BigUint64Array, ctx: LeafContext, range: JsonDataRange, signed: boolean
): BigInt64Array | BigUint64Array {
  const words = new Uint32Array(out.buffer, out.byteOffset, out.length * 2)
  const b = range.bytes
  const n = range.leafCount
  let p = range.start
  for (let i = 0; i < n; i++) {
    p = nextLeaf(b, p)
    const v = readInteger(b, p)
    if (v === v) {
      if (!signed && v < 0) throw leafError(ctx, i, describeLeaf(b, p), integerExpectation(ctx.datatype))
      // The Uint32Array stores take each word modulo 2^32: two's complement for negative values.
      words[2 * i + LO] = v
      words[2 * i + HI] = Math.floor(v / TWO_POW_32)
    } else if (leafKind(b, p) !== 'integer' || !writeLongInteger(b, p, tokenEnd, words, i, signed)) {
      throw leafError(ctx, i, describeLeaf(b, p), integerExpectation(ctx.datatype))
    }
    p = tokenEnd
  }
  return out
}

/**
 * Writes the integer token `b[p, end)` (more than 15 digits, no fraction or exponent) into element `i` of `words`
 * when it fits the 64-bit datatype; false when it does not. With at most 20 digits the value is a * 10^9 + c
 * (a < 2^37, c < 10^9), and with a = aHigh * 2^17 + aLow it is x * 2^17 + y for x = aHigh * 10^9 and
 * y = aLow * 10^9 + c, both below 2^50: every step is exact in doubles.
 */
function writeLongInteger (
  b: Buffer, p: number, end: number, words: Uint32Array, i: number, signed: boolean
): boolean {
  const negative = b[p] === 0x2d
  let q = negative ? p + 1 : p
  if (end - q > 20) return false
  let a = 0
  for (const split = end - 9; q < split; q++) a = a * 10 + ((b[q] as number) - 0x30)
  let c = 0
  for (; q < end; q++) c = c * 10 + ((b[q] as number) - 0x30)
  const aHigh = Math.floor(a / 131072)
  const x = aHigh * 1e9
  const y = (a - aHigh * 131072) * 1e9 + c
  // value = (floor(x / 2^15) + floor(y / 2^32)) * 2^32 + (x mod 2^15) * 2^17 + (y mod 2^32)
  const low = (x % 32768) * 131072 + (y % TWO_POW_32)
  let lo = low % TWO_POW_32
  let hi = Math.floor(x / 32768) + Math.floor(y / TWO_POW_32) + Math.floor(low / TWO_POW_32)
  if (negative) {
    // Only INT64 takes negative values (a token this long is never -0); the magnitude goes up to 2^63.
    if (!signed || hi > 2147483648 || (hi === 2147483648 && lo !== 0)) return false
    if (lo === 0) {
      hi = (TWO_POW_32 - hi) % TWO_POW_32
    } else {
      lo = TWO_POW_32 - lo
      hi = TWO_POW_32 - 1 - hi
    }
  } else if (hi >= (signed ? 2147483648 : TWO_POW_32)) {
    return false
  }
  words[2 * i + LO] = lo
  words[2 * i + HI] = hi
  return true
}

/**
 * FP16, BF16, FP32 (`round` narrows a double to the stored form: Math.fround, or the 16-bit patterns) and FP64
 * (`round` undefined). Number tokens are rounded as JSON.parse-then-narrow would round them; a finite token whose
 * stored form is infinite (`isInfinite`) overflows the datatype and is refused. NaN and ±Infinity tokens are taken.
 */
function readFloats<T extends Float32Array | Float64Array | Uint16Array> (
  out: T, ctx: LeafContext, range: JsonDataRange, round: ((v: number) => number) | undefined,
  isInfinite: (stored: number) => boolean
): T {
  const b = range.bytes
  const n = range.leafCount
  let p = range.start
  for (let i = 0; i < n; i++) {
    p = nextLeaf(b, p)
    const c = b[p] as number
    let stored: number
    if ((c >= 0x30 && c <= 0x39) || (c === 0x2d && b[p + 1] !== 0x49)) {
      stored = round === undefined ? readDouble(b, p) : readNarrowed(b, p, round)
      if (isInfinite(stored)) {
        throw leafError(ctx, i, describeLeaf(b, p), overflowExpectation(ctx.datatype), OVERFLOW)
      }
      p = tokenEnd
    } else {
      let v: number
      if (c === 0x4e) {
        v = NaN
        p += 3
      } else if (c === 0x49) {
        v = Infinity
        p += 8
      } else if (c === 0x2d) {
        v = -Infinity
        p += 9
      } else {
        throw leafError(ctx, i, describeLeaf(b, p), 'a number')
      }
      stored = round === undefined ? v : round(v)
    }
    out[i] = stored
  }
  return out
}

function isInfiniteDouble (v: number): boolean {
  return v === Infinity || v === -Infinity
}

function isInfiniteFp16 (bits: number): boolean {
  return (bits & 0x7fff) === 0x7c00
}

function isInfiniteBf16 (bits: number): boolean {
  return (bits & 0x7fff) === 0x7f80
}

function readStrings (ctx: LeafContext, range: JsonDataRange, maxBytes: number, limitSetting: string): BytesData {
  const b = range.bytes
  const n = range.leafCount
  // Strings that need no unescaping stay in the body (views); the first that does moves them to a buffer of their own,
  // sized once by the array's bytes (the elements' bytes are fewer, unless invalid UTF-8 becomes U+FFFD).
  const out = new BytesDataBuilder(n, range.end - range.start)
  let byteSize = 0
  let p = range.start
  for (let i = 0; i < n; i++) {
    p = nextLeaf(b, p)
    if (b[p] !== 0x22) throw leafError(ctx, i, describeLeaf(b, p), 'a string')
    // Triton sizes BYTES tensors with a 4-byte length prefix per element.
    byteSize += 4 + pushBytesString(b, p, out)
    if (byteSize > maxBytes) throw byteSizeError(ctx.name, ctx.kind, byteSize, maxBytes, limitSetting)
    p = tokenEnd
  }
  return out.finish()
}

// ---------------------------------------------------------------------------------------------------------------
// From an array JSON.parse built (only bodies json-body-parser.ts leaves to JSON.parse)

/** Flattens nested `data` row-major, refusing nesting at or beyond {@link MAX_DATA_NESTING_DEPTH}. */
function flattenData (data: unknown[], name: string, kind: TensorKind): unknown[] {
  // Flat data is used as is, without a copy.
  let flat = true
  for (let i = 0; i < data.length; i++) {
    if (Array.isArray(data[i])) { flat = false; break }
  }
  if (flat) return data
  const out: unknown[] = []
  appendLeaves(data, out, 1, name, kind)
  return out
}

function appendLeaves (arr: unknown[], out: unknown[], depth: number, name: string, kind: TensorKind): void {
  if (depth >= MAX_DATA_NESTING_DEPTH) throw nestingError(name, kind)
  for (let i = 0; i < arr.length; i++) {
    const v = arr[i]
    if (Array.isArray(v)) appendLeaves(v, out, depth + 1, name, kind)
    else out.push(v)
  }
}

function convertStrings (ctx: LeafContext, leaves: unknown[], maxBytes: number, limitSetting: string): BytesData {
  const out = new BytesDataBuilder(leaves.length)
  let byteSize = 0
  for (let i = 0; i < leaves.length; i++) {
    const v = leaves[i]
    if (typeof v !== 'string') throw leafError(ctx, i, describeValue(v), 'a string')
    byteSize += 4 + out.pushString(v)
    if (byteSize > maxBytes) throw byteSizeError(ctx.name, ctx.kind, byteSize, maxBytes, limitSetting)
  }
  return out.finish()
}

function convertLeaves (ctx: LeafContext, leaves: unknown[], maxBytes: number, limitSetting: string): TensorData {
  const n = leaves.length
  const datatype = ctx.datatype
  if (datatype === 'BYTES') return convertStrings(ctx, leaves, maxBytes, limitSetting)
  const info = DATATYPES[datatype]
  const out = allocateTensorData(datatype, n)
  for (let i = 0; i < n; i++) {
    const v = leaves[i]
    if (datatype === 'BOOL') {
      if (v !== true && v !== false) throw leafError(ctx, i, describeValue(v), 'true or false')
      ;(out as Uint8Array)[i] = v ? 1 : 0
    } else if (typeof v !== 'number') {
      throw leafError(ctx, i, describeValue(v), info.integerRange !== undefined ? integerExpectation(datatype) : 'a number')
    } else if (info.integerRange !== undefined) {
      const { min, max } = info.integerRange
      if (!Number.isInteger(v) || BigInt(v) < min || BigInt(v) > max) {
        throw leafError(ctx, i, describeValue(v), integerExpectation(datatype))
      }
      if (info.isBigInt) (out as BigInt64Array | BigUint64Array)[i] = BigInt(v)
      else (out as Int32Array)[i] = v
    } else {
      let overflow: boolean
      if (datatype === 'FP16' || datatype === 'BF16') {
        const bits = datatype === 'FP16' ? float32ToFp16Bits(v) : float32ToBf16Bits(v)
        overflow = datatype === 'FP16' ? isInfiniteFp16(bits) : isInfiniteBf16(bits)
        ;(out as Uint16Array)[i] = bits
      } else {
        const stored = datatype === 'FP32' ? Math.fround(v) : v
        overflow = isInfiniteDouble(stored)
        ;(out as Float32Array | Float64Array)[i] = stored
      }
      if (overflow && Number.isFinite(v)) throw leafError(ctx, i, describeValue(v), overflowExpectation(datatype), OVERFLOW)
    }
  }
  return out
}
