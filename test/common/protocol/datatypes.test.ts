import t from 'tap'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import {
  DATATYPES,
  DATATYPE_NAMES,
  allocateTensorData,
  bf16BitsToFloat32,
  configTypeToDataType,
  dataTypeToConfigType,
  elementCount,
  float32ToBf16Bits,
  float32ToFp16Bits,
  fp16BitsToFloat32,
  isDataType,
  tensorByteSize
} from '../../../common/protocol/datatypes.ts'

t.test('the table matches triton-behaviour.md §1.12', async t => {
  const expected: Array<[string, number, string, number, string]> = [
    ['BOOL', 1, 'TYPE_BOOL', 1, 'uint8'],
    ['UINT8', 1, 'TYPE_UINT8', 2, 'uint8'],
    ['UINT16', 2, 'TYPE_UINT16', 3, 'uint16'],
    ['UINT32', 4, 'TYPE_UINT32', 4, 'uint32'],
    ['UINT64', 8, 'TYPE_UINT64', 5, 'biguint64'],
    ['INT8', 1, 'TYPE_INT8', 6, 'int8'],
    ['INT16', 2, 'TYPE_INT16', 7, 'int16'],
    ['INT32', 4, 'TYPE_INT32', 8, 'int32'],
    ['INT64', 8, 'TYPE_INT64', 9, 'bigint64'],
    ['FP16', 2, 'TYPE_FP16', 10, 'uint16'],
    ['FP32', 4, 'TYPE_FP32', 11, 'float32'],
    ['FP64', 8, 'TYPE_FP64', 12, 'float64'],
    ['BYTES', 0, 'TYPE_STRING', 13, 'bytes'],
    ['BF16', 2, 'TYPE_BF16', 14, 'uint16']
  ]
  t.same(DATATYPE_NAMES, expected.map(e => e[0]), 'names in config-enum order')
  for (const [name, size, configType, enumValue, storage] of expected) {
    if (!isDataType(name)) throw new Error(`not a datatype: ${name}`)
    const info = DATATYPES[name]
    t.equal(info.name, name)
    t.equal(info.byteSize, size, `${name} byte size`)
    t.equal(info.configType, configType, `${name} config type`)
    t.equal(info.configEnumValue, enumValue, `${name} enum value`)
    t.equal(info.storage, storage, `${name} storage`)
    t.equal(dataTypeToConfigType(name), configType)
    t.equal(configTypeToDataType(configType), name)
  }
  t.ok(Object.isFrozen(DATATYPES) && Object.isFrozen(DATATYPES.FP32), 'the table is frozen')
})

t.test('integer / unsigned / float flags', async t => {
  const integers = DATATYPE_NAMES.filter(n => DATATYPES[n].isInteger)
  t.same(integers, ['UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64'])
  t.same(DATATYPE_NAMES.filter(n => DATATYPES[n].isUnsigned), ['UINT8', 'UINT16', 'UINT32', 'UINT64'])
  t.same(DATATYPE_NAMES.filter(n => DATATYPES[n].isFloat), ['FP16', 'FP32', 'FP64', 'BF16'])
  t.same(DATATYPE_NAMES.filter(n => DATATYPES[n].isBigInt), ['UINT64', 'INT64'])
  t.notOk(DATATYPES.BOOL.isInteger || DATATYPES.BOOL.isFloat, 'BOOL is neither integer nor float')
  t.notOk(DATATYPES.BYTES.isInteger || DATATYPES.BYTES.isFloat, 'BYTES is neither integer nor float')
})

t.test('integer ranges, exact at both ends', async t => {
  const ranges = Object.fromEntries(DATATYPE_NAMES.map(n => [n, DATATYPES[n].integerRange]))
  t.same(ranges, {
    BOOL: undefined,
    UINT8: { min: 0n, max: 255n },
    UINT16: { min: 0n, max: 65535n },
    UINT32: { min: 0n, max: 4294967295n },
    UINT64: { min: 0n, max: 18446744073709551615n },
    INT8: { min: -128n, max: 127n },
    INT16: { min: -32768n, max: 32767n },
    INT32: { min: -2147483648n, max: 2147483647n },
    INT64: { min: -9223372036854775808n, max: 9223372036854775807n },
    FP16: undefined,
    FP32: undefined,
    FP64: undefined,
    BYTES: undefined,
    BF16: undefined
  })
  t.ok(Object.isFrozen(DATATYPES.INT8.integerRange), 'frozen')
})

t.test('isDataType is case-sensitive and ignores inherited names', async t => {
  for (const name of DATATYPE_NAMES) t.ok(isDataType(name), name)
  for (const bad of ['fp32', 'Fp32', 'STRING', 'TYPE_FP32', '', 'constructor', 'toString', '__proto__', 'INT128']) {
    t.notOk(isDataType(bad), JSON.stringify(bad))
  }
  t.equal(configTypeToDataType('TYPE_INVALID'), undefined)
  t.equal(configTypeToDataType('BYTES'), undefined)
})

t.test('elementCount', async t => {
  t.equal(elementCount([]), 1, 'a scalar has one element')
  t.equal(elementCount([7]), 7)
  t.equal(elementCount([2, 3, 4]), 24)
  t.equal(elementCount([2, 0, 4]), 0)
  t.equal(elementCount([1, 16]), 16)
})

t.test('allocateTensorData', async t => {
  const ctors: Record<string, unknown> = {
    BOOL: Uint8Array,
    UINT8: Uint8Array,
    UINT16: Uint16Array,
    UINT32: Uint32Array,
    UINT64: BigUint64Array,
    INT8: Int8Array,
    INT16: Int16Array,
    INT32: Int32Array,
    INT64: BigInt64Array,
    FP16: Uint16Array,
    BF16: Uint16Array,
    FP32: Float32Array,
    FP64: Float64Array
  }
  for (const name of DATATYPE_NAMES) {
    const data = allocateTensorData(name, 5)
    t.equal(data.length, 5, `${name} length`)
    if (name === 'BYTES') {
      t.ok(data instanceof BytesData, 'BYTES is a BytesData')
      t.strictSame((data as BytesData).toArray(), Array.from({ length: 5 }, () => new Uint8Array(0)), 'of empty byte strings')
    } else {
      t.equal(data.constructor, ctors[name], `${name} storage`)
    }
    t.equal(allocateTensorData(name, 0).length, 0, `${name} empty`)
  }
})

t.test('tensorByteSize', async t => {
  t.equal(tensorByteSize({ datatype: 'FP32', data: new Float32Array(3) }), 12)
  t.equal(tensorByteSize({ datatype: 'INT64', data: new BigInt64Array(2) }), 16)
  t.equal(tensorByteSize({ datatype: 'BOOL', data: new Uint8Array(5) }), 5)
  t.equal(tensorByteSize({ datatype: 'FP16', data: new Uint16Array(4) }), 8)
  const bytes = BytesData.from([new Uint8Array([104, 105]), new Uint8Array(0), new Uint8Array(7)])
  t.equal(tensorByteSize({ datatype: 'BYTES', data: bytes }), 4 + 2 + 4 + 0 + 4 + 7, '4-byte length prefix per element')
})

const hex = (n: number): string => `0x${n.toString(16).padStart(4, '0')}`

t.test('float32ToFp16Bits: known bit patterns', async t => {
  const cases: Array<[number, number, string]> = [
    [0, 0x0000, 'zero'],
    [-0, 0x8000, 'negative zero'],
    [1, 0x3c00, 'one'],
    [-2, 0xc000, 'minus two'],
    [0.5, 0x3800, 'half'],
    [0.1, 0x2e66, '0.1 rounds down'],
    [1 / 3, 0x3555, 'a third'],
    [65504, 0x7bff, 'largest finite'],
    [65519.99, 0x7bff, 'just below the overflow midpoint'],
    [65520, 0x7c00, 'the overflow midpoint rounds to even: infinity'],
    [1e6, 0x7c00, 'overflow'],
    [-1e6, 0xfc00, 'negative overflow'],
    [Infinity, 0x7c00, 'infinity'],
    [-Infinity, 0xfc00, '-infinity'],
    [NaN, 0x7e00, 'NaN is the canonical quiet NaN'],
    [2 ** -14, 0x0400, 'smallest normal'],
    [2 ** -24, 0x0001, 'smallest subnormal'],
    [2 ** -25, 0x0000, 'half the smallest subnormal ties to even (zero)'],
    [3 * 2 ** -25, 0x0002, '1.5 subnormal units tie to even (2)'],
    [2 ** -26, 0x0000, 'underflow'],
    [-(2 ** -24), 0x8001, 'negative subnormal'],
    [1023 * 2 ** -24, 0x03ff, 'largest subnormal'],
    [1 + 2 ** -11, 0x3c00, 'tie between 0x3c00 and 0x3c01 goes to even'],
    [1 + 3 * 2 ** -11, 0x3c02, 'tie between 0x3c01 and 0x3c02 goes to even'],
    [1 + 2 ** -11 + 2 ** -20, 0x3c01, 'just above the tie rounds up'],
    [2047, 0x67ff, '2047 is representable (spacing 1 in [1024, 2048))'],
    [2047.5, 0x6800, '2047.5 ties to even (2048)'],
    [2046.5, 0x67fe, '2046.5 ties to even (2046)'],
    [2049, 0x6800, '2049 ties to 2048']
  ]
  for (const [value, bits, what] of cases) {
    t.equal(hex(float32ToFp16Bits(value)), hex(bits), `${what} (${value})`)
  }
})

t.test('fp16BitsToFloat32: known bit patterns', async t => {
  t.equal(fp16BitsToFloat32(0x3c00), 1)
  t.equal(fp16BitsToFloat32(0xc000), -2)
  t.equal(fp16BitsToFloat32(0x7bff), 65504)
  t.equal(fp16BitsToFloat32(0x0001), 2 ** -24)
  t.equal(fp16BitsToFloat32(0x03ff), 1023 * 2 ** -24)
  t.equal(fp16BitsToFloat32(0x0400), 2 ** -14)
  t.equal(fp16BitsToFloat32(0x3555), 0.333251953125)
  t.equal(fp16BitsToFloat32(0x2e66), 0.0999755859375)
  t.ok(Object.is(fp16BitsToFloat32(0x8000), -0), 'negative zero')
  t.equal(fp16BitsToFloat32(0x7c00), Infinity)
  t.equal(fp16BitsToFloat32(0xfc00), -Infinity)
  t.ok(Number.isNaN(fp16BitsToFloat32(0x7e00)))
  t.ok(Number.isNaN(fp16BitsToFloat32(0x7c01)), 'signalling NaN pattern')
})

t.test('fp16: every non-NaN pattern survives bits → number → bits', async t => {
  let failures = 0
  for (let bits = 0; bits < 0x10000; bits++) {
    const isNaNPattern = (bits & 0x7c00) === 0x7c00 && (bits & 0x3ff) !== 0
    if (isNaNPattern) continue
    if (float32ToFp16Bits(fp16BitsToFloat32(bits)) !== bits) failures++
  }
  t.equal(failures, 0)
})

t.test('fp16: narrowing a float32 value matches the float32 bit-level algorithm', async t => {
  // Reference: the classic round-to-nearest-even conversion on float32 bits, for a spread of float32 values.
  const f32 = new Float32Array(1)
  const u32 = new Uint32Array(f32.buffer)
  const reference = (x: number): number => {
    f32[0] = x
    const b = u32[0] as number
    const sign = (b >>> 16) & 0x8000
    const exp = (b >>> 23) & 0xff
    let mant = b & 0x7fffff
    if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0)
    let e = exp - 127 + 15
    if (e >= 0x1f) return sign | 0x7c00
    if (e <= 0) {
      if (e < -10) return sign
      mant |= 0x800000
      const shift = 14 - e
      const half = 1 << (shift - 1)
      const rest = mant & ((1 << shift) - 1)
      let m = mant >>> shift
      if (rest > half || (rest === half && (m & 1) === 1)) m++
      return sign | m
    }
    let m = mant >>> 13
    const rest = mant & 0x1fff
    if (rest > 0x1000 || (rest === 0x1000 && (m & 1) === 1)) {
      m++
      if (m === 0x400) { m = 0; e++ }
      if (e >= 0x1f) return sign | 0x7c00
    }
    return sign | (e << 10) | m
  }
  let failures = 0
  let seed = 12345
  for (let i = 0; i < 200000; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0
    u32[0] = seed
    const x = f32[0] as number
    if (Number.isNaN(x)) continue
    if (float32ToFp16Bits(x) !== reference(x)) failures++
  }
  t.equal(failures, 0)
})

t.test('float32ToBf16Bits: known bit patterns, round to nearest even', async t => {
  const cases: Array<[number, number, string]> = [
    [0, 0x0000, 'zero'],
    [-0, 0x8000, 'negative zero'],
    [1, 0x3f80, 'one'],
    [-2, 0xc000, 'minus two'],
    [0.1, 0x3dcd, '0.1 (float32 0x3dcccccd) rounds up'],
    [Math.fround(Math.PI), 0x4049, 'pi (float32 0x40490fdb) rounds down'],
    [1 + 2 ** -8, 0x3f80, 'tie between 0x3f80 and 0x3f81 goes to even'],
    [1 + 3 * 2 ** -8, 0x3f82, 'tie between 0x3f81 and 0x3f82 goes to even'],
    [3.4028234663852886e38, 0x7f80, 'float32 max rounds up to infinity'],
    [3.3895313892515355e38, 0x7f7f, 'largest finite bfloat16'],
    [Infinity, 0x7f80, 'infinity'],
    [-Infinity, 0xff80, '-infinity'],
    [NaN, 0x7fc0, 'NaN is the canonical quiet NaN'],
    [2 ** -126, 0x0080, 'smallest normal'],
    [2 ** -133, 0x0001, 'smallest subnormal'],
    [2 ** -134, 0x0000, 'half the smallest subnormal ties to even (zero)'],
    [1e-50, 0x0000, 'underflow']
  ]
  for (const [value, bits, what] of cases) {
    t.equal(hex(float32ToBf16Bits(value)), hex(bits), `${what} (${value})`)
  }
})

t.test('bf16BitsToFloat32', async t => {
  t.equal(bf16BitsToFloat32(0x3f80), 1)
  t.equal(bf16BitsToFloat32(0xc000), -2)
  t.equal(bf16BitsToFloat32(0x3dcd), 0.10009765625)
  t.equal(bf16BitsToFloat32(0x4049), 3.140625)
  t.equal(bf16BitsToFloat32(0x0001), 2 ** -133)
  t.equal(bf16BitsToFloat32(0x7f80), Infinity)
  t.equal(bf16BitsToFloat32(0xff80), -Infinity)
  t.ok(Object.is(bf16BitsToFloat32(0x8000), -0))
  t.ok(Number.isNaN(bf16BitsToFloat32(0x7fc0)))
})

t.test('bf16: every non-NaN pattern survives bits → number → bits, and matches float32 bit rounding', async t => {
  let failures = 0
  for (let bits = 0; bits < 0x10000; bits++) {
    const isNaNPattern = (bits & 0x7f80) === 0x7f80 && (bits & 0x7f) !== 0
    if (isNaNPattern) continue
    if (float32ToBf16Bits(bf16BitsToFloat32(bits)) !== bits) failures++
  }
  t.equal(failures, 0, 'round trip')

  const f32 = new Float32Array(1)
  const u32 = new Uint32Array(f32.buffer)
  let mismatches = 0
  let seed = 987654321
  for (let i = 0; i < 200000; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0
    u32[0] = seed
    const x = f32[0] as number
    if (Number.isNaN(x)) continue
    const b = u32[0] as number
    const expected = ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff
    if (float32ToBf16Bits(x) !== expected) mismatches++
  }
  t.equal(mismatches, 0, 'agrees with the float32 bit trick (b + 0x7fff + lsb) >> 16')
})
