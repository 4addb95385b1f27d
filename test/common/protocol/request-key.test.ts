import { createHash } from 'node:crypto'
import t from 'tap'
import { decodeHttpInferRequest, decodeRawBinaryRequest, encodeHttpInferRequest } from '../../../common/protocol/binary-codec.ts'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { decodeModelInferRequest, encodeModelInferRequest } from '../../../common/protocol/grpc/grpc-codec.ts'
import { decodeInferRequest, encodeInferRequest } from '../../../common/protocol/json-codec.ts'
import { requestKey } from '../../../common/protocol/request-key.ts'
import { type InferRequest, type Tensor, type TensorData } from '../../../common/protocol/types.ts'

const fp32 = (values: number[]): Float32Array => new Float32Array(values)

function base (): InferRequest {
  return {
    id: 'r1',
    parameters: { custom: 'x' },
    inputs: [
      { name: 'B', datatype: 'BYTES', shape: [2], data: BytesData.from(['héllo', new Uint8Array(0)]) },
      { name: 'A', datatype: 'FP32', shape: [2, 2], data: fp32([1, 2, 3, 4]) },
      { name: 'C', datatype: 'INT64', shape: [2], data: new BigInt64Array([-1n, 2n ** 40n]) }
    ],
    outputs: [{ name: 'OUT', parameters: { classification: 2 } }]
  }
}

const asBuffer = (b: string | Buffer): Buffer => typeof b === 'string' ? Buffer.from(b) : b

const keyOf = (r: InferRequest, model = 'm', version = '1'): string => requestKey(model, version, r).check

t.test('the key is 32 hex characters, the first 128 bits of the 64-hex SHA-256 check', async t => {
  const k = requestKey('m', '1', base())
  t.match(k.key, /^[0-9a-f]{32}$/)
  t.match(k.check, /^[0-9a-f]{64}$/)
  t.equal(k.check.slice(0, 32), k.key)
  t.equal(requestKey('m', '1', base()).check, k.check, 'deterministic')
})

t.test('the same tensors in other array types, offsets and orders give the same key', async t => {
  const want = keyOf(base())
  const reordered = base()
  reordered.inputs.reverse()
  t.equal(keyOf(reordered), want, 'inputs are taken in name order')

  const offset = base()
  const big = new Float32Array(9)
  big.set([1, 2, 3, 4], 5)
  offset.inputs[1]!.data = big.subarray(5)
  t.equal(keyOf(offset), want, 'a view at another offset of another buffer')

  const bytesView = base()
  const src = fp32([1, 2, 3, 4])
  bytesView.inputs[1]!.data = new Uint8Array(src.buffer) as TensorData
  t.equal(keyOf(bytesView), want, 'the same bytes as a Uint8Array')

  const unsigned = base()
  unsigned.inputs[2]!.data = new BigUint64Array(new BigInt64Array([-1n, 2n ** 40n]).buffer)
  t.equal(keyOf(unsigned), want, 'INT64 bits as a BigUint64Array')

  const strings = base()
  strings.inputs[0]!.data = BytesData.from([Buffer.from('héllo'), Buffer.alloc(0)])
  t.equal(keyOf(strings), want, 'BYTES elements from Buffers rather than text')

  // Only the elements count, not where they lie: here two elements in the middle of another tensor's memory.
  const stringsView = base()
  stringsView.inputs[0]!.data = BytesData.from(['x', 'héllo', '', 'yz']).subarray(1, 3)
  t.equal(keyOf(stringsView), want, 'BYTES elements viewed from a larger BytesData')

  const noId = base()
  delete noId.id
  t.equal(keyOf(noId), want, 'the request id is not in the key')
  t.equal(keyOf({ ...base(), id: 'another' }), want)

  const scheduling = base()
  scheduling.parameters = { ...scheduling.parameters, priority: 3, timeout: 1000 }
  t.equal(keyOf(scheduling), want, 'priority and timeout are not in the key')

  const paramOrder = base()
  paramOrder.parameters = { z: 1, custom: 'x' }
  const paramOrder2 = base()
  paramOrder2.parameters = { custom: 'x', z: 1 }
  t.equal(keyOf(paramOrder), keyOf(paramOrder2), 'parameters in any order')
})

t.test('one request decoded from JSON, binary HTTP, a raw body and gRPC (raw and typed) gives one key', async t => {
  const request: InferRequest = {
    id: 'x',
    parameters: {},
    inputs: [
      { name: 'IN_FP32', datatype: 'FP32', shape: [3], data: fp32([0.5, -0, 1e30]) },
      { name: 'IN_BYTES', datatype: 'BYTES', shape: [2], data: BytesData.from(['a', 'bcd']) },
      { name: 'IN_INT8', datatype: 'INT8', shape: [1, 3], data: new Int8Array([-1, 0, 1]) },
      { name: 'IN_BOOL', datatype: 'BOOL', shape: [2], data: new Uint8Array([1, 0]) }
    ]
  }
  const keys: Record<string, string> = {}
  keys.json = keyOf(decodeInferRequest(encodeInferRequest(request)))
  const binary = encodeHttpInferRequest(request, { binaryInputs: true, binaryOutputs: false })
  keys.binary = keyOf(decodeHttpInferRequest(asBuffer(binary.body), binary.headerLength))
  keys.grpcRaw = keyOf(decodeModelInferRequest(encodeModelInferRequest('m', '1', request)).request)
  keys.grpcContents = keyOf(decodeModelInferRequest(encodeModelInferRequest('m', '1', request, { contents: true })).request)
  for (const [form, key] of Object.entries(keys)) t.equal(key, keys.json, form)

  const single: InferRequest = { parameters: {}, inputs: [{ name: 'IN', datatype: 'FP32', shape: [2, 2], data: fp32([1, 2, 3, 4]) }] }
  const raw = decodeRawBinaryRequest(Buffer.from(fp32([1, 2, 3, 4]).buffer), { name: 'IN', datatype: 'FP32', dims: [2, 2] }, false, 'm')
  // A raw request asks for binary outputs, as Triton reads it: the same key once the answer's form is left out.
  t.strictSame(raw.parameters, { binary_data_output: true })
  t.equal(keyOf(raw), keyOf({ ...single, parameters: { binary_data_output: true } }), "Triton's raw binary request")
  t.equal(requestKey('m', '1', raw, { answerForm: false }).check, requestKey('m', '1', single, { answerForm: false }).check)
  const singleBinary = encodeHttpInferRequest(single, { binaryInputs: true, binaryOutputs: false })
  t.equal(keyOf(decodeHttpInferRequest(asBuffer(singleBinary.body), singleBinary.headerLength)), keyOf(single), 'binary_data_size is not in the key')
})

t.test('any difference that can change the answer changes the key', async t => {
  const want = keyOf(base())
  const variants: Record<string, (r: InferRequest) => void> = {
    'model name': () => {},
    'input name': r => { r.inputs[1]!.name = 'A2' },
    datatype: r => { r.inputs[2]!.datatype = 'UINT64' },
    shape: r => { r.inputs[1]!.shape = [4] },
    'one byte of a number': r => { (r.inputs[1]!.data as Float32Array)[3] = 4.000001 },
    'one byte of a string': r => { r.inputs[0]!.data = BytesData.from(['hèllo', new Uint8Array(0)]) },
    'string boundaries': r => { r.inputs[0]!.data = BytesData.from(['hél', 'lo']) },
    'an extra input': r => { r.inputs.push({ name: 'D', datatype: 'UINT8', shape: [0], data: new Uint8Array(0) }) },
    'an input parameter': r => { r.inputs[1]!.parameters = { shared_memory_region: 'x' } },
    'output name': r => { r.outputs = [{ name: 'OUT2', parameters: { classification: 2 } }] },
    'output parameter': r => { r.outputs = [{ name: 'OUT', parameters: { classification: 3 } }] },
    'binary_data on an output': r => { r.outputs = [{ name: 'OUT', parameters: { classification: 2, binary_data: true } }] },
    'outputs absent (all of them)': r => { delete r.outputs },
    'no outputs listed': r => { r.outputs = [] },
    'output order': r => { r.outputs = [{ name: 'B' }, { name: 'A' }] },
    'a custom request parameter': r => { r.parameters = { custom: 'y' } },
    'its type': r => { r.parameters = { custom: 1 } },
    'binary_data_output': r => { r.parameters = { ...r.parameters, binary_data_output: true } },
    'sequence_id': r => { r.parameters = { ...r.parameters, sequence_id: 7 } }
  }
  const seen = new Set([want])
  for (const [name, change] of Object.entries(variants)) {
    const r = base()
    change(r)
    const key = name === 'model name' ? keyOf(r, 'm2') : keyOf(r)
    t.not(key, want, name)
    t.notOk(seen.has(key), `${name}: a key of its own`)
    seen.add(key)
  }
  t.not(keyOf(base(), 'm', '2'), want, 'version')
  const orderA = { ...base(), outputs: [{ name: 'A' }, { name: 'B' }] }
  const orderB = { ...base(), outputs: [{ name: 'B' }, { name: 'A' }] }
  t.not(keyOf(orderA), keyOf(orderB))
  // Fields are length-prefixed: moving a boundary between two fields is a difference.
  t.not(keyOf(base(), 'ab', 'c'), keyOf(base(), 'a', 'bc'))
})

t.test('answerForm: false leaves out what only chooses the encoding', async t => {
  const plain = base()
  const binary = base()
  binary.parameters = { ...binary.parameters, binary_data_output: true }
  binary.outputs = [{ name: 'OUT', parameters: { classification: 2, binary_data: true } }]
  const decoded = { answerForm: false }
  t.equal(requestKey('m', '1', binary, decoded).check, requestKey('m', '1', plain, decoded).check)
  t.not(requestKey('m', '1', binary).check, requestKey('m', '1', plain).check, 'kept by default')
  const classification = base()
  classification.outputs = [{ name: 'OUT', parameters: { classification: 5 } }]
  t.not(requestKey('m', '1', classification, decoded).check, requestKey('m', '1', plain, decoded).check,
    'classification changes what is answered, not only how')
})

t.test('large tensors and long strings take the direct path, with the same result as small ones', async t => {
  const n = 100_000
  const values = new Float32Array(n).map((_, i) => i * 0.5)
  const big: Tensor = { name: 'X', datatype: 'FP32', shape: [n], data: values }
  const copy: Tensor = { ...big, data: values.slice() }
  t.equal(keyOf({ parameters: {}, inputs: [big] }), keyOf({ parameters: {}, inputs: [copy] }))
  const longString = 'é'.repeat(20_000)
  const withLong = (s: string): InferRequest => ({ parameters: { s }, inputs: [{ name: 'S', datatype: 'BYTES', shape: [3], data: BytesData.from([s, Buffer.alloc(9000, 1), 'x']) }] })
  t.equal(keyOf(withLong(longString)), keyOf(withLong(longString)))
  t.not(keyOf(withLong(longString)), keyOf(withLong(longString + 'x')))
  const many: InferRequest = { parameters: {}, inputs: [{ name: 'S', datatype: 'BYTES', shape: [5000], data: BytesData.from(Array.from({ length: 5000 }, (_, i) => String(i))) }] }
  const many2: InferRequest = { parameters: {}, inputs: [{ name: 'S', datatype: 'BYTES', shape: [5000], data: BytesData.from(Array.from({ length: 5000 }, (_, i) => String(i === 4999 ? 5000 : i))) }] }
  t.not(keyOf(many), keyOf(many2), 'the last of many short strings counts')
})

t.test('the digest is of the documented layout, whichever path each field takes (packed, overflowing, direct)', async t => {
  // A plain re-statement of the layout, one Buffer per field, hashed in one go.
  const parts: Buffer[] = []
  const u8 = (v: number): void => { parts.push(Buffer.from([v])) }
  const u32 = (v: number): void => { const b = Buffer.alloc(4); b.writeUInt32LE(v); parts.push(b) }
  const f64 = (v: number): void => { const b = Buffer.alloc(8); b.writeDoubleLE(v); parts.push(b) }
  const str = (s: string): void => { const b = Buffer.from(s); u32(b.length); parts.push(b) }
  const params = (p: Record<string, string | number | boolean> | undefined, skip: string[] = []): void => {
    const names = Object.keys(p ?? {}).filter(n => !skip.includes(n)).sort()
    u32(names.length)
    for (const n of names) {
      const v = p![n]!
      str(n)
      if (typeof v === 'string') { u8(0x73); str(v) } else if (typeof v === 'number') { u8(0x6e); f64(v) } else { u8(0x62); u8(v ? 1 : 0) }
    }
  }
  const request: InferRequest = {
    id: 'ignored',
    parameters: { priority: 2, z: true, a: 'ü'.repeat(10_000), n: -1.5 },
    inputs: [
      { name: 'T', datatype: 'UINT8', shape: [20_000], data: new Uint8Array(20_000).map((_, i) => i % 251), parameters: { binary_data_size: 20_000, q: 1 } },
      // Short elements packed a scratch-full at a time, and one longer than the scratch (16 KiB), hashed directly.
      { name: 'S', datatype: 'BYTES', shape: [3000], data: BytesData.from(Array.from({ length: 3000 }, (_, i) => Buffer.alloc(i === 1000 ? 20_000 : i % 100, i % 7))) },
      { name: 'F', datatype: 'FP64', shape: [2], data: new Float64Array([Math.E, -0]) }
    ],
    outputs: [{ name: 'O', parameters: { binary_data: false } }]
  }
  str('flotilla.request-key.v1')
  str('model')
  str('12')
  u32(3)
  for (const input of [...request.inputs].sort((a, b) => a.name < b.name ? -1 : 1)) {
    str(input.name)
    str(input.datatype)
    u32(input.shape.length)
    for (const d of input.shape) f64(d)
    params(input.parameters, ['binary_data_size'])
    if (input.data instanceof BytesData) {
      u8(1)
      u32(input.data.length)
      for (const e of input.data) { u32(e.length); parts.push(Buffer.from(e)) }
    } else {
      u8(0)
      f64(input.data.byteLength)
      parts.push(Buffer.from(input.data.buffer, input.data.byteOffset, input.data.byteLength))
    }
  }
  u8(1)
  u32(1)
  str('O')
  params({ binary_data: false })
  params(request.parameters, ['priority', 'timeout'])
  const want = createHash('sha256').update(Buffer.concat(parts)).digest('hex')
  t.equal(requestKey('model', '12', request).check, want)

  // And a request small enough for the one-shot path.
  parts.length = 0
  const small: InferRequest = { parameters: {}, inputs: [{ name: 'x', datatype: 'INT16', shape: [2], data: new Int16Array([-2, 3]) }] }
  str('flotilla.request-key.v1'); str('m'); str('1'); u32(1)
  str('x'); str('INT16'); u32(1); f64(2); u32(0); u8(0); f64(4); parts.push(Buffer.from(new Int16Array([-2, 3]).buffer))
  u8(0); u32(0)
  t.equal(requestKey('m', '1', small).check, createHash('sha256').update(Buffer.concat(parts)).digest('hex'))
})
