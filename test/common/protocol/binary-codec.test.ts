import t from 'tap'
import { type ErrorCode } from '../../../common/errors.ts'
import {
  INFERENCE_HEADER_CONTENT_LENGTH,
  decodeHttpInferRequest,
  decodeHttpInferResponse,
  decodeRawBinaryRequest,
  decodeRawHttpInferResponse,
  encodeHttpInferRequest,
  encodeHttpInferResponse,
  encodeRawHttpInferRequest,
  parseInferenceHeaderLength,
  rawRequestInputCountError
} from '../../../common/protocol/binary-codec.ts'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import {
  decodeInferRequest,
  decodeInferResponse,
  encodeInferResponse
} from '../../../common/protocol/json-codec.ts'
import {
  type DataType,
  type InferRequest,
  type InferResponse,
  type RawInferRequest,
  type Tensor,
  type TensorData
} from '../../../common/protocol/types.ts'
import { bytes, elementsOf, stringsOf } from '../../helpers/bytes-data.ts'
import { type Asserts, throwsCoded } from '../../helpers/coded-error.ts'

function fails (t: Asserts, fn: () => unknown, code: ErrorCode, message: string, what?: string): void {
  throwsCoded(t, fn, { code, message, status: 400 }, what)
}

const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s)

/** A typed array's own bytes (the wire layout on a little-endian host). */
function bytesOf (a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength)
}

/** BYTES elements in Triton's layout: a 4-byte little-endian length before each. */
function lengthPrefixed (...elements: Uint8Array[]): Uint8Array {
  const parts: Uint8Array[] = []
  for (const e of elements) {
    const len = Buffer.alloc(4)
    len.writeUInt32LE(e.length)
    parts.push(len, e)
  }
  return Buffer.concat(parts)
}

/**
 * A body built by hand, independent of the encoder: the JSON of `json` padded with spaces to `jsonLength` bytes
 * (when given), then `sections`. The body lives at offset 0 of its own ArrayBuffer, so offsets in it are absolute.
 */
function body (json: unknown, sections: Uint8Array[] = [], jsonLength?: number): { body: Buffer, headerLength: number } {
  let text = JSON.stringify(json)
  if (jsonLength !== undefined) {
    if (text.length > jsonLength) throw new Error(`the JSON is already ${text.length} bytes`)
    text = text.padEnd(jsonLength, ' ')
  }
  const header = Buffer.from(text)
  const total = header.length + sections.reduce((n, s) => n + s.length, 0)
  const out = Buffer.from(new ArrayBuffer(total))
  header.copy(out, 0)
  let pos = header.length
  for (const s of sections) {
    out.set(s, pos)
    pos += s.length
  }
  return { body: out, headerLength: header.length }
}

/** The ArrayBuffer under a typed tensor's elements. */
function bufferOf (data: TensorData | undefined): ArrayBufferLike {
  return (data as Float32Array).buffer
}

/** Element-wise Object.is, so -0 and NaN count; BYTES compared byte for byte (both must be BYTES). */
function sameElements (a: TensorData, b: TensorData): boolean {
  if (a.length !== b.length) return false
  if (a instanceof BytesData || b instanceof BytesData) {
    if (!(a instanceof BytesData) || !(b instanceof BytesData)) return false
    for (let i = 0; i < a.length; i++) if (!Buffer.from(a.get(i)).equals(Buffer.from(b.get(i)))) return false
    return true
  }
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false
  return true
}

interface DatatypeCase {
  datatype: DataType
  /** The JSON twin's data. */
  json: unknown[]
  /** The same elements in the binary layout. */
  raw: Uint8Array
  ctor: unknown
}

const CASES: DatatypeCase[] = [
  { datatype: 'BOOL', json: [true, false, true], raw: new Uint8Array([1, 0, 1]), ctor: Uint8Array },
  { datatype: 'UINT8', json: [0, 255, 7], raw: new Uint8Array([0, 255, 7]), ctor: Uint8Array },
  { datatype: 'UINT16', json: [0, 65535, 7], raw: bytesOf(new Uint16Array([0, 65535, 7])), ctor: Uint16Array },
  { datatype: 'UINT32', json: [0, 4294967295, 7], raw: bytesOf(new Uint32Array([0, 4294967295, 7])), ctor: Uint32Array },
  {
    datatype: 'UINT64',
    json: [0, 9007199254740991, 7],
    raw: bytesOf(new BigUint64Array([0n, 9007199254740991n, 7n])),
    ctor: BigUint64Array
  },
  { datatype: 'INT8', json: [-128, 127, 0], raw: bytesOf(new Int8Array([-128, 127, 0])), ctor: Int8Array },
  { datatype: 'INT16', json: [-32768, 32767, -1], raw: bytesOf(new Int16Array([-32768, 32767, -1])), ctor: Int16Array },
  {
    datatype: 'INT32',
    json: [-2147483648, 2147483647, -1],
    raw: bytesOf(new Int32Array([-2147483648, 2147483647, -1])),
    ctor: Int32Array
  },
  {
    datatype: 'INT64',
    json: [-9007199254740991, 0, 42],
    raw: bytesOf(new BigInt64Array([-9007199254740991n, 0n, 42n])),
    ctor: BigInt64Array
  },
  { datatype: 'FP16', json: [1, 0.5, -2], raw: bytesOf(new Uint16Array([0x3c00, 0x3800, 0xc000])), ctor: Uint16Array },
  { datatype: 'BF16', json: [1, -2, 0.5], raw: bytesOf(new Uint16Array([0x3f80, 0xc000, 0x3f00])), ctor: Uint16Array },
  { datatype: 'FP32', json: [0.1, -2.5, 3e38], raw: bytesOf(new Float32Array([0.1, -2.5, 3e38])), ctor: Float32Array },
  { datatype: 'FP64', json: [0.1, -1e300, 5e-324], raw: bytesOf(new Float64Array([0.1, -1e300, 5e-324])), ctor: Float64Array },
  {
    datatype: 'BYTES',
    json: ['a', '', '日本'],
    raw: lengthPrefixed(utf8('a'), utf8(''), utf8('日本')),
    ctor: BytesData
  }
]

t.test('parseInferenceHeaderLength', async t => {
  t.equal(INFERENCE_HEADER_CONTENT_LENGTH, 'inference-header-content-length')
  t.equal(parseInferenceHeaderLength(undefined, 10), undefined, 'absent: the body is all JSON')
  t.equal(parseInferenceHeaderLength('7', 10), 7)
  t.equal(parseInferenceHeaderLength(' 7 ', 10), 7, 'surrounding spaces are fine')
  t.equal(parseInferenceHeaderLength('+7', 10), 7)
  t.equal(parseInferenceHeaderLength(['7'], 10), 7, 'a header given once, as an array')
  t.equal(parseInferenceHeaderLength('10', 10), 10, 'the whole body may be JSON')
  t.equal(parseInferenceHeaderLength('0', 10), 0, '0: a raw binary request')
  t.ok(Object.is(parseInferenceHeaderLength('-0', 10), 0), '-0 is 0')
  for (const bad of ['abc', '12abc', '', '1.5', '0x10', '2147483648', '99999999999']) {
    fails(t, () => parseInferenceHeaderLength(bad, 1e12), 'PROTO_ERR_BINARY_DATA',
      `Unable to parse Inference-Header-Content-Length, got: ${bad}`)
  }
  fails(t, () => parseInferenceHeaderLength(['7', '8'], 10), 'PROTO_ERR_BINARY_DATA',
    'Unable to parse Inference-Header-Content-Length, got: 7, 8', 'a header given twice')
  fails(t, () => parseInferenceHeaderLength('11', 10), 'PROTO_ERR_BINARY_DATA',
    'inference header size should be in range (0, 10), got: 11')
  fails(t, () => parseInferenceHeaderLength('-1', 10), 'PROTO_ERR_BINARY_DATA',
    'inference header size should be in range (0, 10), got: -1')
  fails(t, () => parseInferenceHeaderLength('-2147483648', 10), 'PROTO_ERR_BINARY_DATA',
    'inference header size should be in range (0, 10), got: -2147483648', 'the smallest int32 parses, and is out of range')
})

t.test('every datatype: a binary request decodes exactly as its JSON twin', async t => {
  for (const c of CASES) {
    const input = { name: 'X', datatype: c.datatype, shape: [1, 3] }
    const twin = decodeInferRequest(JSON.stringify({ inputs: [{ ...input, data: c.json }] }))
    const bin = body({ inputs: [{ ...input, parameters: { binary_data_size: c.raw.length } }] }, [c.raw])
    const decoded = decodeHttpInferRequest(bin.body, bin.headerLength)
    t.same(decoded, twin, `${c.datatype}: same request`)
    const a = decoded.inputs[0] as Tensor
    const b = twin.inputs[0] as Tensor
    t.equal(a.data.constructor, c.ctor, `${c.datatype}: storage`)
    t.ok(sameElements(a.data, b.data), `${c.datatype}: same elements, bit for bit`)
    t.notOk('parameters' in a, `${c.datatype}: binary_data_size is not kept as a parameter`)
  }
})

t.test('all datatypes in one body: sections are read in JSON order, JSON inputs consume nothing', async t => {
  const inputs: unknown[] = []
  const twins: unknown[] = []
  const sections: Uint8Array[] = []
  for (const c of CASES) {
    inputs.push({ name: c.datatype, datatype: c.datatype, shape: [3], parameters: { binary_data_size: c.raw.length, p: c.datatype } })
    twins.push({ name: c.datatype, datatype: c.datatype, shape: [3], data: c.json, parameters: { p: c.datatype } })
    sections.push(c.raw)
    // A JSON input and an empty binary one between every two binary ones.
    inputs.push({ name: `${c.datatype}-json`, datatype: 'INT32', shape: [1], data: [5] })
    twins.push({ name: `${c.datatype}-json`, datatype: 'INT32', shape: [1], data: [5] })
    inputs.push({ name: `${c.datatype}-empty`, datatype: c.datatype, shape: [2, 0], parameters: { binary_data_size: 0 } })
    twins.push({ name: `${c.datatype}-empty`, datatype: c.datatype, shape: [2, 0], data: [] })
  }
  const request = { id: 'all', parameters: { priority: 1 }, inputs, outputs: [{ name: 'O' }] }
  const bin = body(request, sections)
  const decoded = decodeHttpInferRequest(bin.body, bin.headerLength)
  const twin = decodeInferRequest(JSON.stringify({ ...request, inputs: twins }))
  t.same(decoded, twin)
  for (let i = 0; i < decoded.inputs.length; i++) {
    const a = decoded.inputs[i] as Tensor
    t.ok(sameElements(a.data, (twin.inputs[i] as Tensor).data), `${a.name}: same elements`)
  }
})

t.test('BYTES: empty and non-UTF-8 elements are views of the body', async t => {
  const elements = [new Uint8Array([0xff, 0xfe, 0x00]), new Uint8Array(0), utf8('ok'), new Uint8Array([0xc3])]
  const raw = lengthPrefixed(...elements)
  const bin = body({ inputs: [{ name: 'S', datatype: 'BYTES', shape: [2, 2], parameters: { binary_data_size: raw.length } }] }, [raw])
  const data = elementsOf((decodeHttpInferRequest(bin.body, bin.headerLength).inputs[0] as Tensor).data)
  t.equal(data.length, 4)
  t.same(data.map((e) => Array.from(e)), elements.map((e) => Array.from(e)), 'bytes as sent, not decoded as text')
  t.ok(data.every((e) => e.constructor === Uint8Array), 'plain Uint8Arrays')
  t.ok(data.every((e) => e.buffer === bin.body.buffer), 'every element is a view of the body, none copied')
  t.equal(data[0]?.byteOffset, bin.headerLength + 4)
})

t.test('typed views over the body; a copy only where alignment forces it', async t => {
  const f32 = new Float32Array([1.5, -2, 3])
  const u8 = new Uint8Array([9, 8, 7])
  const input = (name: string, datatype: string, n: number): unknown =>
    ({ name, datatype, shape: [n / (datatype === 'FP32' ? 4 : 1)], parameters: { binary_data_size: n } })

  const aligned = body({ inputs: [input('F', 'FP32', 12), input('U', 'UINT8', 3)] }, [bytesOf(f32), u8], 256)
  const a = decodeHttpInferRequest(aligned.body, aligned.headerLength)
  const af = (a.inputs[0] as Tensor).data as Float32Array
  t.equal(aligned.headerLength % 4, 0)
  t.equal(af.buffer, aligned.body.buffer, 'an aligned FP32 tensor is a view of the body')
  t.equal(af.byteOffset, 256)
  t.same(Array.from(af), [1.5, -2, 3])
  t.equal(((a.inputs[1] as Tensor).data as Uint8Array).buffer, aligned.body.buffer)

  const misaligned = body({ inputs: [input('U', 'UINT8', 3), input('F', 'FP32', 12)] }, [u8, bytesOf(f32)], 257)
  const m = decodeHttpInferRequest(misaligned.body, misaligned.headerLength)
  const mf = (m.inputs[1] as Tensor).data as Float32Array
  t.equal(mf.byteOffset, 260)
  t.equal(mf.buffer, misaligned.body.buffer, 'offset 260 is a multiple of 4: still a view')

  const odd = body({ inputs: [input('F', 'FP32', 12), input('U', 'UINT8', 3)] }, [bytesOf(f32), u8], 257)
  const o = decodeHttpInferRequest(odd.body, odd.headerLength)
  const of = (o.inputs[0] as Tensor).data as Float32Array
  t.not(of.buffer, odd.body.buffer, 'offset 257 cannot hold a Float32Array: copied')
  t.ok(of instanceof Float32Array)
  t.same(Array.from(of), [1.5, -2, 3], 'with the right values')
  const ou = (o.inputs[1] as Tensor).data as Uint8Array
  t.equal(ou.buffer, odd.body.buffer, 'one-byte elements are always views')
  t.equal(ou.byteOffset, 269)

  for (const [datatype, arr] of [['FP64', new Float64Array([0.25, -1])], ['INT64', new BigInt64Array([-5n, 7n])],
    ['UINT16', new Uint16Array([1, 65535])], ['BF16', new Uint16Array([0x3f80, 0x4000])]] as const) {
    for (const jsonLength of [128, 129, 130, 131, 132, 133, 134, 135]) {
      const b = body({ inputs: [{ name: 'X', datatype, shape: [2], parameters: { binary_data_size: arr.byteLength } }] },
        [bytesOf(arr)], jsonLength)
      const data = (decodeHttpInferRequest(b.body, b.headerLength).inputs[0] as Tensor).data
      t.ok(sameElements(data, arr as unknown as TensorData), `${datatype} at offset ${jsonLength}`)
      t.equal(bufferOf(data) === b.body.buffer, jsonLength % arr.BYTES_PER_ELEMENT === 0, `${datatype} at offset ${jsonLength}: view iff aligned`)
    }
  }
})

t.test('zero-element binary tensors', async t => {
  const b = body({
    inputs: [
      { name: 'A', datatype: 'FP32', shape: [0, 4], parameters: { binary_data_size: 0 } },
      { name: 'B', datatype: 'BYTES', shape: [0], parameters: { binary_data_size: 0 } },
      { name: 'C', datatype: 'INT8', shape: [2], parameters: { binary_data_size: 2 } }
    ]
  }, [new Uint8Array([1, 2])])
  const r = decodeHttpInferRequest(b.body, b.headerLength)
  t.same(r.inputs.map((i) => i.data.length), [0, 0, 2])
  t.ok(r.inputs[0]?.data instanceof Float32Array)
  t.strictSame(elementsOf(r.inputs[1]?.data), [])
  t.same(Array.from(r.inputs[2]?.data as Int8Array), [1, 2])
})

t.test('framing errors: Triton\'s texts, naming the input and what was expected', async t => {
  const F = (size: number, name = 'F', shape = [2]): unknown =>
    ({ name, datatype: 'FP32', shape, parameters: { binary_data_size: size } })
  const eight = bytesOf(new Float32Array([1, 2]))
  const opts = { modelName: 'simple' }

  const overrun = body({ inputs: [F(8, 'A'), F(8, 'B')] }, [eight, new Uint8Array(4)])
  fails(t, () => decodeHttpInferRequest(overrun.body, overrun.headerLength, opts), 'PROTO_ERR_BINARY_DATA',
    "unexpected size for input 'B', expecting 4 additional bytes for model 'simple' (binary_data_size is 8, but only 4 " +
    'bytes of binary data are left after the JSON and the binary inputs before it)')
  fails(t, () => decodeHttpInferRequest(overrun.body, overrun.headerLength), 'PROTO_ERR_BINARY_DATA',
    "unexpected size for input 'B', expecting 4 additional bytes (binary_data_size is 8, but only 4 " +
    'bytes of binary data are left after the JSON and the binary inputs before it)', 'without a model name')

  const leftover = body({ inputs: [F(8)] }, [eight, new Uint8Array(4)])
  fails(t, () => decodeHttpInferRequest(leftover.body, leftover.headerLength, opts), 'PROTO_ERR_BINARY_DATA',
    "unexpected additional input data for model 'simple' (the binary inputs take 8 bytes, but 12 bytes follow the JSON)")
  const trailing = body({ inputs: [{ name: 'J', datatype: 'INT32', shape: [1], data: [1] }] }, [new Uint8Array(3)])
  fails(t, () => decodeHttpInferRequest(trailing.body, trailing.headerLength), 'PROTO_ERR_BINARY_DATA',
    'unexpected additional input data (the binary inputs take 0 bytes, but 3 bytes follow the JSON)',
    'binary bytes with no binary input')

  const notMultiple = body({ inputs: [F(6)] }, [new Uint8Array(6)])
  fails(t, () => decodeHttpInferRequest(notMultiple.body, notMultiple.headerLength, opts), 'PROTO_ERR_DATA_MISMATCH',
    "[request id: <id_unknown>] input byte size mismatch for input 'F' for model 'simple'. Expected 8, got 6 " +
    '(shape [2] of FP32 is 2 elements of 4 bytes; 6 is not a multiple of 4)')
  const wrongCount = body({ id: 'r7', inputs: [F(8, 'F', [3])] }, [eight])
  fails(t, () => decodeHttpInferRequest(wrongCount.body, wrongCount.headerLength), 'PROTO_ERR_DATA_MISMATCH',
    "[request id: r7] input byte size mismatch for input 'F'. Expected 12, got 8 (shape [3] of FP32 is 3 elements of 4 bytes)")

  const fine = body({ inputs: [F(8)] }, [eight])
  fails(t, () => decodeHttpInferRequest(fine.body, fine.body.length + 1), 'PROTO_ERR_BINARY_DATA',
    `inference header size should be in range (0, ${fine.body.length}), got: ${fine.body.length + 1}`)
  throwsCoded(t, () => decodeHttpInferRequest(fine.body, 0), {
    code: 'FLT_ERR_INTERNAL',
    message: 'internal error: a raw binary request (Inference-Header-Content-Length: 0) needs decodeRawBinaryRequest'
  })
  fails(t, () => decodeHttpInferRequest(fine.body, 5), 'PROTO_ERR_INVALID_JSON',
    `failed to parse the request JSON body: ${jsonParseMessage(fine.body.toString('utf8', 0, 5))}`,
    'a header length that cuts the JSON short')

  const both = body({ inputs: [{ ...(F(8) as object), data: [1, 2] }] }, [eight])
  fails(t, () => decodeHttpInferRequest(both.body, both.headerLength), 'PROTO_ERR_INVALID_REQUEST',
    "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', " +
    "'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size'")

  for (const bad of [-8, 8.5, '8', null]) {
    const b = body({ inputs: [{ name: 'F', datatype: 'FP32', shape: [2], parameters: { binary_data_size: bad } }] }, [eight])
    const got = bad === null ? 'null' : typeof bad === 'string' ? `string "${bad}"` : String(bad)
    const code: ErrorCode = bad === null ? 'PROTO_ERR_INVALID_REQUEST' : 'PROTO_ERR_BINARY_DATA'
    const message = bad === null
      ? "parameter 'binary_data_size' has invalid type. It should be either 'int', 'bool', or 'string'."
      : `Unable to parse 'binary_data_size' for input 'F': expected a non-negative integer, got ${got}`
    fails(t, () => decodeHttpInferRequest(b.body, b.headerLength), code, message, `binary_data_size ${JSON.stringify(bad)}`)
  }

  const noHeader = Buffer.from(JSON.stringify({ inputs: [F(8)] }))
  fails(t, () => decodeHttpInferRequest(noHeader, undefined, opts), 'PROTO_ERR_BINARY_DATA',
    "unexpected size for input 'F', expecting 8 additional bytes for model 'simple' (binary_data_size is 8, but the " +
    'request has no Inference-Header-Content-Length header, so its body holds no binary data)')

  const big = body({ inputs: [F(8)] }, [eight])
  fails(t, () => decodeHttpInferRequest(big.body, big.headerLength, { maxInputBytes: 7 }), 'PROTO_ERR_INVALID_REQUEST',
    "binary input 'F' has a byte_size (8 bytes) that exceeds the maximum allowed value of 7 bytes. " +
    'Use the worker flag --max-body-bytes to increase the limit.', 'maxInputBytes applies to binary inputs')
  t.equal(decodeHttpInferRequest(big.body, big.headerLength, { maxInputBytes: 8 }).inputs.length, 1, 'at the limit is fine')
  const huge = body({ inputs: [{ name: 'F', datatype: 'FP32', shape: [2], parameters: { binary_data_size: 2 ** 40 } }] }, [eight])
  fails(t, () => decodeHttpInferRequest(huge.body, huge.headerLength), 'PROTO_ERR_INVALID_REQUEST',
    "binary input 'F' has a byte_size (1099511627776 bytes) that exceeds the maximum allowed value of 67108864 bytes. " +
    'Use the worker flag --max-body-bytes to increase the limit.', 'the limit is checked before the body')
  const shape = body({ inputs: [{ name: 'F', datatype: 'FP32', shape: [2 ** 30, 2 ** 30, 2 ** 30], parameters: { binary_data_size: 8 } }] }, [eight])
  fails(t, () => decodeHttpInferRequest(shape.body, shape.headerLength), 'PROTO_ERR_INVALID_REQUEST',
    "invalid shape for input 'F': shape [1073741824,1073741824,1073741824] causes total element count to exceed " +
    'maximum size of 9007199254740991')
})

function jsonParseMessage (text: string): string {
  try {
    JSON.parse(text)
  } catch (err) {
    return (err as Error).message
  }
  throw new Error('parsed')
}

t.test('BYTES framing errors', async t => {
  const S = (raw: Uint8Array, shape = [2]): { body: Buffer, headerLength: number } =>
    body({ inputs: [{ name: 'S', datatype: 'BYTES', shape, parameters: { binary_data_size: raw.length } }] }, [raw])
  const opts = { modelName: 'm' }
  const fewer = S(lengthPrefixed(utf8('a')))
  fails(t, () => decodeHttpInferRequest(fewer.body, fewer.headerLength, opts), 'PROTO_ERR_DATA_MISMATCH',
    "expected 2 string elements for inference input 'S' for model 'm', got 1")
  const more = S(lengthPrefixed(utf8('a'), utf8('b'), utf8('c'), utf8('d')))
  fails(t, () => decodeHttpInferRequest(more.body, more.headerLength, opts), 'PROTO_ERR_DATA_MISMATCH',
    "unexpected number of string elements 3 for inference input 'S' for model 'm', expecting 2 " +
    '(binary_data_size 20 holds more elements than shape [2])', 'Triton counts up to the first element too many')
  const overrun = S(Buffer.concat([lengthPrefixed(utf8('a')), Buffer.from([5, 0, 0, 0]), utf8('abc')]))
  fails(t, () => decodeHttpInferRequest(overrun.body, overrun.headerLength, opts), 'PROTO_ERR_DATA_MISMATCH',
    "incomplete string data for inference input 'S' for model 'm', expecting string of length 5 but only 3 bytes " +
    'available (element 1)')
  const huge = S(Buffer.concat([Buffer.from([0xff, 0xff, 0xff, 0xff]), utf8('abc')]), [1])
  fails(t, () => decodeHttpInferRequest(huge.body, huge.headerLength), 'PROTO_ERR_DATA_MISMATCH',
    "incomplete string data for inference input 'S', expecting string of length 4294967295 but only 3 bytes " +
    'available (element 0)', 'lengths are unsigned')
  const stray = S(Buffer.concat([lengthPrefixed(utf8('a'), utf8('b')), Buffer.from([1, 2])]))
  fails(t, () => decodeHttpInferRequest(stray.body, stray.headerLength, opts), 'PROTO_ERR_DATA_MISMATCH',
    "incomplete string length indicator for inference input 'S' for model 'm', expecting 4 bytes but only 2 bytes " +
    'available (element 2)')
  const empty = S(new Uint8Array(3), [0])
  fails(t, () => decodeHttpInferRequest(empty.body, empty.headerLength), 'PROTO_ERR_DATA_MISMATCH',
    "incomplete string length indicator for inference input 'S', expecting 4 bytes but only 3 bytes available (element 0)")
  const claims = S(lengthPrefixed(utf8('a')), [1e12])
  fails(t, () => decodeHttpInferRequest(claims.body, claims.headerLength), 'PROTO_ERR_DATA_MISMATCH',
    "expected 1000000000000 string elements for inference input 'S', got 1", 'a huge shape does not allocate for itself')
})

// -----------------------------------------------------------------------------------------------------------------
// Responses

function tensor (name: string, datatype: DataType, data: TensorData, shape = [data.length]): Tensor {
  return { name, datatype, shape, data }
}

function allDatatypesResponse (): InferResponse {
  const u8 = (xs: number[]): Uint8Array => new Uint8Array(xs)
  return {
    id: '42',
    model_name: 'all',
    model_version: '1',
    parameters: { sequence_id: 3 },
    outputs: [
      tensor('BOOL', 'BOOL', u8([1, 0, 1])),
      tensor('UINT8', 'UINT8', u8([0, 255])),
      tensor('UINT16', 'UINT16', new Uint16Array([65535, 1])),
      tensor('UINT32', 'UINT32', new Uint32Array([4294967295, 0])),
      tensor('UINT64', 'UINT64', new BigUint64Array([18446744073709551615n, 1n])),
      tensor('INT8', 'INT8', new Int8Array([-128, 127, 0])),
      tensor('INT16', 'INT16', new Int16Array([-32768])),
      tensor('INT32', 'INT32', new Int32Array([-1, 2, -3, 4]), [2, 2]),
      tensor('INT64', 'INT64', new BigInt64Array([-9223372036854775808n, 9223372036854775807n])),
      tensor('FP16', 'FP16', new Uint16Array([0x3c00, 0x8000, 0x7bff, 0x0001, 0x7c00, 0x7e00])),
      tensor('BF16', 'BF16', new Uint16Array([0x3dcd, 0x8000, 0xff80, 0x7fc0])),
      tensor('FP32', 'FP32', new Float32Array([0.1, -0, Infinity, NaN, 1e-45])),
      tensor('FP64', 'FP64', new Float64Array([0.1, -Infinity, 5e-324, -0])),
      { ...tensor('BYTES', 'BYTES', bytes('a', '', '日本"\n')), parameters: { classification: 1 } },
      tensor('EMPTY', 'FP32', new Float32Array(0), [0, 3]),
      tensor('EMPTY_BYTES', 'BYTES', bytes(), [0])
    ]
  }
}

t.test('encodeHttpInferResponse: every datatype in binary decodes to the values the JSON answer gives', async t => {
  const response = allDatatypesResponse()
  const encoded = encodeHttpInferResponse(response, { parameters: { binary_data_output: true } })
  t.ok(Buffer.isBuffer(encoded.body))
  t.type(encoded.headerLength, 'number')
  const binary = decodeHttpInferResponse(encoded.body as Buffer, encoded.headerLength)
  const json = decodeInferResponse(encodeInferResponse(response))
  t.same(binary, json, 'same response')
  for (let i = 0; i < json.outputs.length; i++) {
    const a = binary.outputs[i] as Tensor
    const b = json.outputs[i] as Tensor
    t.equal(a.data.constructor, b.data.constructor, `${a.name}: storage`)
    t.ok(sameElements(a.data, b.data), `${a.name}: same elements, bit for bit`)
    t.ok(sameElements(a.data, (response.outputs[i] as Tensor).data), `${a.name}: the elements that were encoded`)
  }
  const header = JSON.parse((encoded.body as Buffer).toString('utf8', 0, encoded.headerLength))
  t.same(header.outputs[13], { name: 'BYTES', datatype: 'BYTES', shape: [3], parameters: { classification: 1, binary_data_size: 21 } },
    'binary_data_size joins the parameters an output has, and there is no data')
  t.same(header.outputs[14], { name: 'EMPTY', datatype: 'FP32', shape: [0, 3], parameters: { binary_data_size: 0 } })
})

t.test('encodeHttpInferResponse: layout, byte for byte', async t => {
  const f = new Float32Array([1, 2])
  const s = [utf8('hi'), new Uint8Array([0xff])]
  const response: InferResponse = {
    model_name: 'm',
    model_version: '1',
    outputs: [tensor('A', 'FP32', f), tensor('J', 'INT32', new Int32Array([7])), tensor('Z', 'INT8', new Int8Array(0)), tensor('S', 'BYTES', bytes(...s))]
  }
  const { body: out, headerLength } = encodeHttpInferResponse(response, { parameters: {}, outputs: [
    { name: 'A', parameters: { binary_data: true } }, { name: 'J' }, { name: 'Z', parameters: { binary_data: true } },
    { name: 'S', parameters: { binary_data: true } }
  ] })
  const json = '{"model_name":"m","model_version":"1","outputs":[' +
    '{"name":"A","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},' +
    '{"name":"J","datatype":"INT32","shape":[1],"data":[7]},' +
    '{"name":"Z","datatype":"INT8","shape":[0],"parameters":{"binary_data_size":0}},' +
    '{"name":"S","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":11}}]}'
  t.equal(headerLength, Buffer.byteLength(json), 'no padding: the JSON is exactly Triton\'s')
  t.same(out, Buffer.concat([Buffer.from(json), bytesOf(f), lengthPrefixed(...s)]),
    'JSON, then each binary output with bytes, in output order; the empty one adds nothing')
})

t.test('encodeHttpInferResponse: which outputs are binary (Triton\'s rule)', async t => {
  const response: InferResponse = {
    model_name: 'm',
    model_version: '1',
    outputs: [tensor('OUTPUT0', 'INT32', new Int32Array([1, 2])), tensor('OUTPUT1', 'INT32', new Int32Array([3]))]
  }
  const kinds = (request: Pick<InferRequest, 'parameters' | 'outputs'>): string[] => {
    const e = encodeHttpInferResponse(response, request)
    const text = typeof e.body === 'string' ? e.body : e.body.toString('utf8', 0, e.headerLength)
    if (typeof e.body === 'string') t.equal(e.headerLength, undefined, 'pure JSON has no header length')
    return JSON.parse(text).outputs.map((o: { data?: unknown }) => ('data' in o ? 'json' : 'binary'))
  }
  t.same(kinds({ parameters: {} }), ['json', 'json'], 'default: JSON')
  t.same(kinds({ parameters: { binary_data_output: true } }), ['binary', 'binary'], 'binary_data_output with no outputs listed')
  t.same(kinds({ parameters: { binary_data_output: false } }), ['json', 'json'])
  t.same(kinds({
    parameters: { binary_data_output: true },
    outputs: [{ name: 'OUTPUT0', parameters: { binary_data: false } }, { name: 'OUTPUT1' }]
  }), ['json', 'json'], 'qa L0_http: binary_data_output is ignored for listed outputs')
  t.same(kinds({ parameters: {}, outputs: [{ name: 'OUTPUT0' }, { name: 'OUTPUT1', parameters: { binary_data: true } }] }),
    ['json', 'binary'], 'a listed output by its own binary_data')
  t.same(kinds({ parameters: {}, outputs: [{ name: 'OUTPUT0', parameters: { binary_data: 'true' } }] }),
    ['json', 'json'], 'only the boolean true counts')
  t.same(kinds({ parameters: { binary_data_output: true }, outputs: [{ name: 'OUTPUT0' }] }), ['json', 'binary'],
    'an output returned without being listed follows binary_data_output')

  const onlyEmpty = encodeHttpInferResponse({ ...response, outputs: [tensor('E', 'FP32', new Float32Array(0), [0])] },
    { parameters: { binary_data_output: true } })
  t.equal(onlyEmpty.headerLength, undefined, 'no binary bytes follow: pure JSON')
  t.equal(onlyEmpty.body, '{"model_name":"m","model_version":"1","outputs":[{"name":"E","datatype":"FP32","shape":[0],' +
    '"parameters":{"binary_data_size":0}}]}', 'with binary_data_size 0, as Triton (§2.3)')
  const fp16 = encodeHttpInferResponse({ ...response, outputs: [tensor('H', 'FP16', new Uint16Array([0x3c00]))] }, { parameters: {} })
  t.equal(fp16.body, '{"model_name":"m","model_version":"1","outputs":[{"name":"H","datatype":"FP16","shape":[1],"data":[1]}]}',
    'FP16 in JSON as numbers')
})

t.test('encodeHttpInferResponse: binary sections are the typed arrays\' own bytes, views included', async t => {
  const backing = new Float32Array([9, 1, 2, 3, 9])
  const view = backing.subarray(1, 4)
  const e = encodeHttpInferResponse({ model_name: 'm', model_version: '1', outputs: [tensor('V', 'FP32', view)] },
    { parameters: { binary_data_output: true } })
  t.same((e.body as Buffer).subarray(e.headerLength), Buffer.from(view.buffer, view.byteOffset, view.byteLength))
  throwsCoded(t, () => encodeHttpInferResponse({ model_name: 'm', model_version: '1', outputs: [tensor('V', 'FP32', view, [4])] },
    { parameters: { binary_data_output: true } }), {
    code: 'FLT_ERR_INTERNAL',
    message: "internal error: output tensor shape does not match size of output for 'V': shape [4] needs 4 elements, data has 3"
  })
})

t.test('decodeHttpInferResponse: framing errors name the output', async t => {
  const b = body({ model_name: 'm', model_version: '1', outputs: [
    { name: 'O', datatype: 'INT32', shape: [2], parameters: { binary_data_size: 8 } }
  ] }, [new Uint8Array(4)])
  fails(t, () => decodeHttpInferResponse(b.body, b.headerLength), 'PROTO_ERR_BINARY_DATA',
    "unexpected size for output 'O', expecting 4 additional bytes (binary_data_size is 8, but only 4 bytes of binary " +
    'data are left after the JSON and the binary outputs before it)')
  const extra = body({ model_name: 'm', model_version: '1', outputs: [
    { name: 'O', datatype: 'INT32', shape: [1], parameters: { binary_data_size: 4 } }
  ] }, [new Uint8Array(6)])
  fails(t, () => decodeHttpInferResponse(extra.body, extra.headerLength), 'PROTO_ERR_BINARY_DATA',
    'unexpected additional output data (the binary outputs take 4 bytes, but 6 bytes follow the JSON)')
  const mismatch = body({ model_name: 'm', model_version: '1', outputs: [
    { name: 'O', datatype: 'INT32', shape: [2], parameters: { binary_data_size: 4 } }
  ] }, [new Uint8Array(4)])
  fails(t, () => decodeHttpInferResponse(mismatch.body, mismatch.headerLength), 'PROTO_ERR_DATA_MISMATCH',
    "output byte size mismatch for output 'O'. Expected 8, got 4 (shape [2] of INT32 is 2 elements of 4 bytes)")
  fails(t, () => decodeHttpInferResponse(mismatch.body, mismatch.headerLength, { maxOutputBytes: 3 }), 'PROTO_ERR_INVALID_REQUEST',
    "binary output 'O' has a byte_size (4 bytes) that exceeds the maximum allowed value of 3 bytes. " +
    'Use the decode option maxOutputBytes to increase the limit.')
  fails(t, () => decodeHttpInferResponse(mismatch.body, mismatch.body.length + 1), 'PROTO_ERR_BINARY_DATA',
    `inference header size should be in range (0, ${mismatch.body.length}), got: ${mismatch.body.length + 1}`)
  const json = decodeHttpInferResponse(Buffer.from(encodeInferResponse(allDatatypesResponse())), undefined)
  t.equal(json.outputs.length, 16, 'a JSON-only response')
})

// -----------------------------------------------------------------------------------------------------------------
// Requests, client side

function allDatatypesRequest (): InferRequest {
  const r = allDatatypesResponse()
  return {
    id: 'q',
    parameters: { priority: 2 },
    inputs: r.outputs.map((o) => ({ ...o })),
    outputs: [{ name: 'A' }, { name: 'B', parameters: { classification: 2 } }]
  }
}

t.test('encodeHttpInferRequest: binary inputs decode to the same tensors; binary outputs asked for', async t => {
  const request = allDatatypesRequest()
  const e = encodeHttpInferRequest(request, { binaryInputs: true, binaryOutputs: true })
  t.ok(Buffer.isBuffer(e.body))
  t.equal((e.headerLength as number) % 8, 0, 'the JSON is padded to a multiple of 8 bytes, so sections can be viewed in place')
  const decoded = decodeHttpInferRequest(e.body as Buffer, e.headerLength)
  t.same(decoded.inputs, request.inputs)
  for (let i = 0; i < request.inputs.length; i++) {
    const a = decoded.inputs[i] as Tensor
    t.ok(sameElements(a.data, (request.inputs[i] as Tensor).data), `${a.name}: bit for bit`)
  }
  t.same(decoded.outputs, [{ name: 'A', parameters: { binary_data: true } }, { name: 'B', parameters: { classification: 2, binary_data: true } }])
  t.same(decoded.parameters, { priority: 2 }, 'outputs are listed: no binary_data_output')
  t.equal(bufferOf((decoded.inputs[0] as Tensor).data), (e.body as Buffer).buffer, 'the first input is a view of the body')

  const unlisted = encodeHttpInferRequest({ ...request, outputs: undefined as never }, { binaryInputs: true, binaryOutputs: true })
  t.same(decodeHttpInferRequest(unlisted.body as Buffer, unlisted.headerLength).parameters, { priority: 2, binary_data_output: true })

  const jsonOnly = encodeHttpInferRequest({ parameters: {}, inputs: [tensor('X', 'INT32', new Int32Array([1, 2]))] },
    { binaryInputs: false, binaryOutputs: true })
  t.equal(jsonOnly.headerLength, undefined)
  t.equal(jsonOnly.body, '{"parameters":{"binary_data_output":true},"inputs":[{"name":"X","datatype":"INT32","shape":[2],"data":[1,2]}]}')
  const plain = encodeHttpInferRequest({ parameters: {}, inputs: [], outputs: [{ name: 'Y' }] }, { binaryInputs: false, binaryOutputs: false })
  t.same(plain, { body: '{"inputs":[],"outputs":[{"name":"Y"}]}', headerLength: undefined })
  const empty = encodeHttpInferRequest({ parameters: {}, inputs: [tensor('E', 'FP32', new Float32Array(0), [0])] },
    { binaryInputs: true, binaryOutputs: false })
  t.same(empty, { body: '{"inputs":[{"name":"E","datatype":"FP32","shape":[0],"parameters":{"binary_data_size":0}}]}', headerLength: undefined },
    'no binary bytes: pure JSON')
  t.same(decodeHttpInferRequest(Buffer.from(empty.body as string), undefined).inputs[0]?.data, new Float32Array(0))
})

// -----------------------------------------------------------------------------------------------------------------
// The gateway's raw path

t.test('encodeRawHttpInferRequest: layout, byte for byte, and what the worker decodes', async t => {
  const f = new Float32Array([1, 2, 3])
  const request: RawInferRequest = {
    id: 'g1',
    parameters: { timeout: 5 },
    inputs: [
      { name: 'F', datatype: 'FP32', shape: [3], raw: bytesOf(f), parameters: { binary_data_size: 99, note: 'x' } },
      { name: 'E', datatype: 'INT8', shape: [0], raw: new Uint8Array(0) },
      { name: 'S', datatype: 'BYTES', shape: [1], raw: lengthPrefixed(utf8('hey')) }
    ],
    outputs: [{ name: 'O', parameters: { binary_data: false } }]
  }
  const e = encodeRawHttpInferRequest(request)
  const json = '{"id":"g1","parameters":{"timeout":5},"inputs":[' +
    '{"name":"F","datatype":"FP32","shape":[3],"parameters":{"note":"x","binary_data_size":12}},' +
    '{"name":"E","datatype":"INT8","shape":[0],"parameters":{"binary_data_size":0}},' +
    '{"name":"S","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":7}}],' +
    '"outputs":[{"name":"O","parameters":{"binary_data":true}}]}'
  const pad = (8 - (json.length % 8)) % 8
  t.equal(e.headerLength, json.length + pad)
  t.same(e.body, Buffer.concat([Buffer.from(json + ' '.repeat(pad)), bytesOf(f), lengthPrefixed(utf8('hey'))]))
  f[0] = 100
  t.equal(e.body.readFloatLE(e.headerLength), 1, 'the bytes were copied into the body')

  const decoded = decodeHttpInferRequest(e.body, e.headerLength)
  t.same(Array.from(decoded.inputs[0]?.data as Float32Array), [1, 2, 3])
  t.same(decoded.inputs[0]?.parameters, { note: 'x' })
  t.strictSame(stringsOf(decoded.inputs[2]?.data), ['hey'])
  t.same(decoded.outputs, [{ name: 'O', parameters: { binary_data: true } }], 'every listed output asked for in binary')

  const none = encodeRawHttpInferRequest({ parameters: {}, inputs: [{ name: 'X', datatype: 'NOT_A_TYPE', shape: [1], raw: new Uint8Array(1) }] })
  const noneJson = JSON.parse(none.body.toString('utf8', 0, none.headerLength))
  t.same(noneJson.parameters, { binary_data_output: true }, 'no outputs listed: binary_data_output')
  t.equal(noneJson.inputs[0].datatype, 'NOT_A_TYPE', 'datatypes are not checked on the gateway')
  const emptyList = encodeRawHttpInferRequest({ parameters: { binary_data_output: false }, inputs: [], outputs: [] })
  t.equal(emptyList.body.toString().trimEnd(), '{"parameters":{"binary_data_output":true},"inputs":[],"outputs":[]}',
    'an empty outputs list asks for every output, so binary_data_output')
})

t.test('decodeRawHttpInferResponse: binary outputs are views, JSON outputs become the raw layout', async t => {
  const f = new Float32Array([1.5, -2])
  const b = body({ id: 'x', model_name: 'm', model_version: '2', parameters: { p: 1 }, outputs: [
    { name: 'B', datatype: 'FP32', shape: [2], parameters: { binary_data_size: 8, classification: 0 } },
    { name: 'J', datatype: 'FP32', shape: [2], data: [1.5, -2] },
    { name: 'S', datatype: 'BYTES', shape: [2], data: ['ab', ''] },
    { name: 'Q', datatype: 'WHATEVER', shape: [3], parameters: { binary_data_size: 3 } },
    { name: 'Z', datatype: 'INT8', shape: [0], parameters: { binary_data_size: 0 } }
  ] }, [bytesOf(f), new Uint8Array([1, 2, 3])])
  const r = decodeRawHttpInferResponse(b.body, b.headerLength)
  t.same({ id: r.id, model_name: r.model_name, model_version: r.model_version, parameters: r.parameters },
    { id: 'x', model_name: 'm', model_version: '2', parameters: { p: 1 } })
  const [B, J, S, Q, Z] = r.outputs
  t.equal(B?.raw.buffer, b.body.buffer, 'a binary output is a view of the body')
  t.equal(B?.raw.byteOffset, b.headerLength)
  t.same(Buffer.from(B?.raw as Uint8Array), Buffer.from(bytesOf(f)))
  t.same(B?.parameters, { classification: 0 }, 'binary_data_size is taken out')
  t.same(Buffer.from(J?.raw as Uint8Array), Buffer.from(bytesOf(f)), 'JSON FP32 in the raw layout')
  t.notOk('parameters' in (J as object))
  t.same(Buffer.from(S?.raw as Uint8Array), Buffer.from(lengthPrefixed(utf8('ab'), utf8(''))), 'JSON BYTES length-prefixed')
  t.equal(Q?.datatype, 'WHATEVER', 'binary outputs keep their datatype unchecked')
  t.same(Array.from(Q?.raw as Uint8Array), [1, 2, 3])
  t.equal(Z?.raw.length, 0)
  t.same(r.outputs.map((o) => o.shape), [[2], [2], [2], [3], [0]])

  const plain = decodeRawHttpInferResponse(Buffer.from(encodeInferResponse(allDatatypesResponse())), undefined)
  const binary = encodeHttpInferResponse(allDatatypesResponse(), { parameters: { binary_data_output: true } })
  const viaBinary = decodeRawHttpInferResponse(binary.body as Buffer, binary.headerLength)
  t.equal(viaBinary.outputs.length, 16)
  for (let i = 0; i < plain.outputs.length; i++) {
    const name = plain.outputs[i]?.name as string
    t.same(Buffer.from(plain.outputs[i]?.raw as Uint8Array), Buffer.from(viaBinary.outputs[i]?.raw as Uint8Array),
      `${name}: the raw layout of a JSON output equals the binary one`)
  }

  const short = body({ model_name: 'm', model_version: '1', outputs: [
    { name: 'O', datatype: 'FP32', shape: [2], parameters: { binary_data_size: 8 } }
  ] }, [new Uint8Array(5)])
  fails(t, () => decodeRawHttpInferResponse(short.body, short.headerLength), 'PROTO_ERR_BINARY_DATA',
    "unexpected size for output 'O', expecting 3 additional bytes (binary_data_size is 8, but only 5 bytes of binary " +
    'data are left after the JSON and the binary outputs before it)')
  fails(t, () => decodeRawHttpInferResponse(Buffer.from(short.body.subarray(0, short.headerLength)), undefined), 'PROTO_ERR_BINARY_DATA',
    "unexpected size for output 'O', expecting 8 additional bytes (binary_data_size is 8, but the response has no " +
    'Inference-Header-Content-Length header, so its body holds no binary data)')
  const long = body({ model_name: 'm', model_version: '1', outputs: [] }, [new Uint8Array(2)])
  fails(t, () => decodeRawHttpInferResponse(long.body, long.headerLength), 'PROTO_ERR_BINARY_DATA',
    'unexpected additional output data (the binary outputs take 0 bytes, but 2 bytes follow the JSON)')
  fails(t, () => decodeRawHttpInferResponse(Buffer.from('{"model_name":"m","model_version":"1","outputs":[{"name":"O","datatype":"F32","shape":[1],"data":[1]}]}'), undefined),
    'PROTO_ERR_INVALID_DATATYPE', 'invalid datatype for input O', 'a JSON output needs a real datatype to be converted')
  fails(t, () => decodeRawHttpInferResponse(long.body, long.body.length + 1), 'PROTO_ERR_BINARY_DATA',
    `inference header size should be in range (0, ${long.body.length}), got: ${long.body.length + 1}`)
})

// -----------------------------------------------------------------------------------------------------------------
// Raw binary requests (Inference-Header-Content-Length: 0)

t.test('decodeRawBinaryRequest', async t => {
  const six = bytesOf(new Float32Array([1, 2, 3, 4, 5, 6]))
  const raw = Buffer.from(six)
  const r = decodeRawBinaryRequest(raw, { name: 'IN', datatype: 'FP32', dims: [-1, 2] }, false, 'm')
  t.same(r.parameters, { binary_data_output: true }, 'every output answered in binary')
  t.same(r.inputs.map((i) => [i.name, i.datatype, i.shape]), [['IN', 'FP32', [3, 2]]], 'the variable dim is deduced')
  t.same(Array.from(r.inputs[0]?.data as Float32Array), [1, 2, 3, 4, 5, 6])
  t.same(decodeRawBinaryRequest(raw, { name: 'IN', datatype: 'FP32', dims: [-1, 2] }, true, 'm').inputs[0]?.shape, [1, 3, 2],
    'a batching model gets a batch of 1')
  t.same(decodeRawBinaryRequest(raw, { name: 'IN', datatype: 'FP32', dims: [6] }, false, 'm').inputs[0]?.shape, [6])
  const aligned = Buffer.from(new ArrayBuffer(24))
  six.forEach((b, i) => { aligned[i] = b })
  t.equal(bufferOf(decodeRawBinaryRequest(aligned, { name: 'IN', datatype: 'FP32', dims: [6] }, false, 'm').inputs[0]?.data),
    aligned.buffer, 'a view of the body')

  fails(t, () => decodeRawBinaryRequest(raw, { name: 'IN', datatype: 'FP32', dims: [4] }, false, 'm'), 'PROTO_ERR_DATA_MISMATCH',
    "[request id: <id_unknown>] input byte size mismatch for input 'IN' for model 'm'. Expected 16, got 24 " +
    '(shape [4] of FP32 is 4 elements of 4 bytes)')
  fails(t, () => decodeRawBinaryRequest(raw.subarray(0, 22), { name: 'IN', datatype: 'FP32', dims: [-1, 2] }, true, 'm'),
    'PROTO_ERR_DATA_MISMATCH',
    "[request id: <id_unknown>] input byte size mismatch for input 'IN' for model 'm'. Expected 16, got 22 " +
    '(shape [1,2,2] of FP32 is 4 elements of 4 bytes; 22 is not a multiple of 4)', 'a size the deduced shape cannot hold')
  fails(t, () => decodeRawBinaryRequest(raw, { name: 'IN', datatype: 'FP32', dims: [-1, 0] }, false, 'm'), 'PROTO_ERR_DATA_MISMATCH',
    "[request id: <id_unknown>] input byte size mismatch for input 'IN' for model 'm'. Expected 0, got 24 " +
    '(shape [0,0] of FP32 is 0 elements of 4 bytes)')
  fails(t, () => decodeRawBinaryRequest(raw, { name: 'IN', datatype: 'FP32', dims: [-1, -1] }, false, 'm'), 'PROTO_ERR_INVALID_REQUEST',
    "The shape of the raw input 'IN' can not be deduced because there are more than one variable-sized dimension")

  const text = Buffer.from('any bytes \u00ff')
  const s = decodeRawBinaryRequest(text, { name: 'TEXT', datatype: 'BYTES', dims: [1] }, true, 'm')
  t.same(s.inputs[0]?.shape, [1, 1])
  t.strictSame(stringsOf(s.inputs[0]?.data), ['any bytes \u00ff'],
    'BYTES: the body is the one element, without a length prefix')
  t.equal(elementsOf(s.inputs[0]?.data)[0]?.buffer, text.buffer, 'a view of the body')
  for (const dims of [[2], [-1], [1, 1]]) {
    fails(t, () => decodeRawBinaryRequest(text, { name: 'TEXT', datatype: 'BYTES', dims }, false, 'm'), 'PROTO_ERR_INVALID_REQUEST',
      "For BYTE datatype raw input 'TEXT', the model must have input shape [1]", `dims ${JSON.stringify(dims)}`)
  }
  fails(t, () => decodeRawBinaryRequest(raw, { name: 'IN', datatype: 'FP32', dims: [-1] }, false, 'm', { maxInputBytes: 20 }),
    'PROTO_ERR_INVALID_REQUEST',
    'Raw input has a byte_size (24 bytes) that exceeds the maximum allowed value of 20 bytes. Use the worker flag --max-body-bytes to increase the limit.')
  fails(t, () => { throw rawRequestInputCountError(3, 'm') }, 'PROTO_ERR_INVALID_REQUEST',
    "Raw request must only have 1 input (found 1) to be deduced but got 3 inputs in 'm' model configuration")

  const answer = encodeHttpInferResponse({ model_name: 'm', model_version: '1', outputs: [tensor('OUT', 'INT32', new Int32Array([1]))] }, r)
  t.type(answer.headerLength, 'number', 'a raw request is answered in binary')
})
