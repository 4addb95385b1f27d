/**
 * Facts about each KServe v2 datatype (triton-behaviour.md §1.12): element size, in-memory storage, the model-config
 * enum name, and the half-precision conversions. Codecs and backends read this table instead of switching on names.
 */
import { BytesData } from './bytes-data.ts'
import { type DataType, type Tensor, type TensorData } from './types.ts'

/**
 * Model-config `data_type` enum names that correspond to a protocol datatype. Spelled out here rather than imported
 * from the worker's config types because `common/` must not depend on a tier; the strings are identical, so the two
 * types are assignable to each other.
 */
export type ConfigTypeName =
  | 'TYPE_BOOL'
  | 'TYPE_UINT8' | 'TYPE_UINT16' | 'TYPE_UINT32' | 'TYPE_UINT64'
  | 'TYPE_INT8' | 'TYPE_INT16' | 'TYPE_INT32' | 'TYPE_INT64'
  | 'TYPE_FP16' | 'TYPE_FP32' | 'TYPE_FP64' | 'TYPE_STRING' | 'TYPE_BF16'

/** How elements of one datatype are held in memory; see `TensorData` in types.ts. */
export type StorageKind =
  | 'uint8' | 'uint16' | 'uint32' | 'biguint64'
  | 'int8' | 'int16' | 'int32' | 'bigint64'
  | 'float32' | 'float64'
  | 'bytes'

/** The smallest and largest value of an integer datatype, exact (bigint, since the 64-bit ends are not doubles). */
export interface IntegerRange {
  readonly min: bigint
  readonly max: bigint
}

/** Everything Flotilla needs to know about one protocol datatype. */
export interface DataTypeInfo {
  /** Protocol name, as on the wire. */
  readonly name: DataType
  /** Bytes per element in the raw (binary) layout; 0 for BYTES, whose elements are variable-length. */
  readonly byteSize: number
  /** The model-config enum name (BYTES is TYPE_STRING). */
  readonly configType: ConfigTypeName
  /** The config enum's numeric value (model_config.proto). */
  readonly configEnumValue: number
  /** Integer-valued (BOOL is not counted as an integer). */
  readonly isInteger: boolean
  /** Unsigned integer. */
  readonly isUnsigned: boolean
  /** Floating point, including FP16 and BF16. */
  readonly isFloat: boolean
  /** Elements are bigint (INT64, UINT64). */
  readonly isBigInt: boolean
  /** The values an integer datatype holds, both ends included; undefined for the others (BOOL included). */
  readonly integerRange: IntegerRange | undefined
  /** The TypedArray (or array of Uint8Array for BYTES) that holds the elements. */
  readonly storage: StorageKind
}

function info (
  name: DataType, byteSize: number, configType: ConfigTypeName, configEnumValue: number, storage: StorageKind,
  flags: { integer?: boolean, unsigned?: boolean, float?: boolean, bigint?: boolean } = {}
): DataTypeInfo {
  const bits = BigInt(byteSize * 8)
  let integerRange: IntegerRange | undefined
  if (flags.integer === true) {
    integerRange = Object.freeze(flags.unsigned === true
      ? { min: 0n, max: (1n << bits) - 1n }
      : { min: -(1n << (bits - 1n)), max: (1n << (bits - 1n)) - 1n })
  }
  return Object.freeze({
    name,
    byteSize,
    configType,
    configEnumValue,
    isInteger: flags.integer === true,
    isUnsigned: flags.unsigned === true,
    isFloat: flags.float === true,
    isBigInt: flags.bigint === true,
    integerRange,
    storage
  })
}

/** The table, keyed by protocol name. */
export const DATATYPES: Readonly<Record<DataType, DataTypeInfo>> = Object.freeze({
  BOOL: info('BOOL', 1, 'TYPE_BOOL', 1, 'uint8'),
  UINT8: info('UINT8', 1, 'TYPE_UINT8', 2, 'uint8', { integer: true, unsigned: true }),
  UINT16: info('UINT16', 2, 'TYPE_UINT16', 3, 'uint16', { integer: true, unsigned: true }),
  UINT32: info('UINT32', 4, 'TYPE_UINT32', 4, 'uint32', { integer: true, unsigned: true }),
  UINT64: info('UINT64', 8, 'TYPE_UINT64', 5, 'biguint64', { integer: true, unsigned: true, bigint: true }),
  INT8: info('INT8', 1, 'TYPE_INT8', 6, 'int8', { integer: true }),
  INT16: info('INT16', 2, 'TYPE_INT16', 7, 'int16', { integer: true }),
  INT32: info('INT32', 4, 'TYPE_INT32', 8, 'int32', { integer: true }),
  INT64: info('INT64', 8, 'TYPE_INT64', 9, 'bigint64', { integer: true, bigint: true }),
  FP16: info('FP16', 2, 'TYPE_FP16', 10, 'uint16', { float: true }),
  FP32: info('FP32', 4, 'TYPE_FP32', 11, 'float32', { float: true }),
  FP64: info('FP64', 8, 'TYPE_FP64', 12, 'float64', { float: true }),
  BYTES: info('BYTES', 0, 'TYPE_STRING', 13, 'bytes'),
  BF16: info('BF16', 2, 'TYPE_BF16', 14, 'uint16', { float: true })
})

/** Every protocol datatype name, in config-enum order. */
export const DATATYPE_NAMES: readonly DataType[] = Object.freeze([
  'BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64',
  'FP16', 'FP32', 'FP64', 'BYTES', 'BF16'
] as const)

const CONFIG_TO_DATATYPE: ReadonlyMap<string, DataType> = new Map(
  DATATYPE_NAMES.map((name) => [DATATYPES[name].configType, name] as const)
)

/** Protocol names are case-sensitive (`fp32` is not a datatype), as in Triton's `ProtocolStringToDataType`. */
export function isDataType (s: string): s is DataType {
  // Object.hasOwn keeps inherited names such as `constructor` out.
  return Object.hasOwn(DATATYPES, s)
}

/** The protocol datatype for a config enum name (`TYPE_STRING` → `BYTES`); undefined for `TYPE_INVALID` or junk. */
export function configTypeToDataType (configType: string): DataType | undefined {
  return CONFIG_TO_DATATYPE.get(configType)
}

/** The config enum name for a protocol datatype (`BYTES` → `TYPE_STRING`). */
export function dataTypeToConfigType (datatype: DataType): ConfigTypeName {
  return DATATYPES[datatype].configType
}

/**
 * Number of elements a shape describes: the product of its dimensions, 1 for a scalar (`[]`). Dimensions are taken
 * as given; callers that accept shapes from the wire check them first. A result above Number.MAX_SAFE_INTEGER is
 * returned as is (imprecise) so callers can reject it.
 */
export function elementCount (shape: readonly number[]): number {
  let count = 1
  for (let i = 0; i < shape.length; i++) count *= shape[i] as number
  return count
}

/** Zero-filled storage for `count` elements of `datatype` (BYTES: `count` empty byte strings). */
export function allocateTensorData (datatype: DataType, count: number): TensorData {
  switch (DATATYPES[datatype].storage) {
    case 'uint8': return new Uint8Array(count)
    case 'uint16': return new Uint16Array(count)
    case 'uint32': return new Uint32Array(count)
    case 'biguint64': return new BigUint64Array(count)
    case 'int8': return new Int8Array(count)
    case 'int16': return new Int16Array(count)
    case 'int32': return new Int32Array(count)
    case 'bigint64': return new BigInt64Array(count)
    case 'float32': return new Float32Array(count)
    case 'float64': return new Float64Array(count)
    case 'bytes': return BytesData.empty(count)
  }
}

/**
 * Size of the tensor's elements in the raw binary layout: elements × element size, and for BYTES the sum of
 * (4-byte length prefix + length) over the elements, which is how Triton counts BYTES tensors.
 */
export function tensorByteSize (tensor: Pick<Tensor, 'datatype' | 'data'>): number {
  const size = DATATYPES[tensor.datatype].byteSize
  return size !== 0 ? tensor.data.length * size : tensor.data.byteLength
}

// ---------------------------------------------------------------------------------------------------------------
// Half-precision conversions. Widening is exact; narrowing rounds to nearest, ties to even, straight from the double
// (no intermediate float32, so no double rounding).

// The double's two 32-bit words through a shared scratch view; which index holds the high word depends on the
// platform's byte order, detected once.
const scratchF64 = new Float64Array(1)
const scratchWords = new Uint32Array(scratchF64.buffer)
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1
const HI = LITTLE_ENDIAN ? 1 : 0
const LO = LITTLE_ENDIAN ? 0 : 1

/**
 * Narrows a double to a 16-bit IEEE-style format with 1 sign bit, `15 - mantBits` exponent bits and `mantBits`
 * mantissa bits (fp16: 10, bf16: 7), rounding to nearest even and overflowing to infinity. Works on the double's bits
 * (20 mantissa bits in the high word, 32 in the low word, which only matters as a sticky bit), so it is exact.
 */
function narrowTo16 (value: number, mantBits: number, bias: number, nanBits: number): number {
  scratchF64[0] = value
  const hi = scratchWords[HI] as number
  const lo = scratchWords[LO] as number
  const sign = (hi >>> 16) & 0x8000
  const exp = (hi >>> 20) & 0x7ff
  const mantHi = hi & 0xfffff
  const infBits = sign | ((2 * bias + 1) << mantBits)
  if (exp === 0x7ff) return (mantHi | lo) !== 0 ? nanBits : infBits
  const e = exp - 1023
  if (e > bias) return infBits
  const drop = 20 - mantBits // high-word mantissa bits below the kept ones
  if (e >= 1 - bias) {
    let m = mantHi >>> drop
    const rest = mantHi & ((1 << drop) - 1)
    const half = 1 << (drop - 1)
    if (rest > half || (rest === half && (lo !== 0 || (m & 1) === 1))) m++
    // A mantissa carry (m === 1 << mantBits) correctly bumps the exponent, up to the infinity pattern.
    return sign | (((e + bias) << mantBits) + m)
  }
  // Subnormal result. Zero and double subnormals are far below the smallest half-precision subnormal.
  if (exp === 0) return sign
  const shift = drop + (1 - bias - e)
  if (shift > 21) return sign // below half the smallest subnormal
  const full = 0x100000 | mantHi // implicit leading 1
  let m = full >>> shift
  const rest = full & ((1 << shift) - 1)
  const half = 1 << (shift - 1)
  if (rest > half || (rest === half && (lo !== 0 || (m & 1) === 1))) m++
  // m === 1 << mantBits here is the smallest normal's encoding, which is the right answer.
  return sign | m
}

// 2^(e - 25) for each fp16 exponent field e: the value of one mantissa unit of a normal fp16 number.
const FP16_UNIT: Float64Array = (() => {
  const table = new Float64Array(32)
  for (let e = 0; e < 32; e++) table[e] = Math.pow(2, e - 25)
  return table
})()

/** IEEE 754 binary16 bit pattern of `value`, rounded to nearest even; NaN becomes the quiet NaN 0x7e00. */
export function float32ToFp16Bits (value: number): number {
  return narrowTo16(value, 10, 15, 0x7e00)
}

/** The number an IEEE 754 binary16 bit pattern encodes (exact). */
export function fp16BitsToFloat32 (bits: number): number {
  const sign = (bits & 0x8000) !== 0 ? -1 : 1
  const exp = (bits >>> 10) & 0x1f
  const mant = bits & 0x3ff
  if (exp === 0) return sign * mant * 5.960464477539063e-8 // 2^-24
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN
  return sign * (1024 + mant) * (FP16_UNIT[exp] as number)
}

/** bfloat16 bit pattern of `value`, rounded to nearest even; NaN becomes the quiet NaN 0x7fc0. */
export function float32ToBf16Bits (value: number): number {
  return narrowTo16(value, 7, 127, 0x7fc0)
}

// bfloat16 is the top half of a float32, so widening is a shift through a shared scratch view (same-size views,
// so byte order does not matter).
const scratchF32 = new Float32Array(1)
const scratchU32 = new Uint32Array(scratchF32.buffer)

/** The number a bfloat16 bit pattern encodes (exact). */
export function bf16BitsToFloat32 (bits: number): number {
  scratchU32[0] = (bits & 0xffff) << 16
  return scratchF32[0] as number
}
