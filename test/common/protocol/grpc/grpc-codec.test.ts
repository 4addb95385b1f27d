import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import * as grpc from '@grpc/grpc-js'
import protobuf from 'protobufjs'
import t, { type Test } from 'tap'
import { PACKAGE_ROOT } from '../../../../common/package-root.ts'
import { type ErrorCode, type GrpcStatusName, createError, errorCodes } from '../../../../common/errors.ts'
import { BytesData } from '../../../../common/protocol/bytes-data.ts'
import { DATATYPE_NAMES } from '../../../../common/protocol/datatypes.ts'
import {
  decodeModelInferRequest, decodeModelInferResponse, encodeModelInferRequest, encodeModelInferResponse,
  grpcErrorFrom, grpcErrorFromHttp, grpcStatusFromHttp, grpcStatusFromName, loadRequestToJson, modelConfigToMessage,
  modelInferRequestToRaw, modelMetadataToMessage, modelStatisticsToMessage, rawToModelInferResponse,
  repositoryIndexRequestToJson, repositoryIndexToMessage, serverMetadataToMessage, unloadRequestToJson
} from '../../../../common/protocol/grpc/grpc-codec.ts'
import { inferenceServiceDefinition } from '../../../../common/protocol/grpc/grpc-service.ts'
import {
  type InferInputTensorMessage, type InferOutputTensorMessage, type InferParameterMessage, type ModelInferRequestMessage,
  type ModelInferResponseMessage
} from '../../../../common/protocol/grpc/messages.ts'
import { type DataType, type InferRequest, type InferResponse, type Tensor, type TensorData } from '../../../../common/protocol/types.ts'
// Tests may use the worker (common/ itself never does): the config JSON comes from the worker's own printer.
import { modelConfigToJson, parseModelConfig } from '../../../../worker/repository/model-config.ts'
import { elementsOf } from '../../../helpers/bytes-data.ts'
import { type Asserts, throwsCoded } from '../../../helpers/coded-error.ts'

const service = inferenceServiceDefinition()
const inferMethod = service.ModelInfer as grpc.MethodDefinition<unknown, unknown>

/** A request through the wire exactly as a server receives it: serialized by the client side, decoded by the server side. */
function requestViaWire (msg: ModelInferRequestMessage): ModelInferRequestMessage {
  return inferMethod.requestDeserialize(inferMethod.requestSerialize(msg)) as ModelInferRequestMessage
}

function responseViaWire (msg: ModelInferResponseMessage): ModelInferResponseMessage {
  return inferMethod.responseDeserialize(inferMethod.responseSerialize(msg)) as ModelInferResponseMessage
}

/** Asserts the coded error, and that a gRPC front answers it with INVALID_ARGUMENT. */
function fails (t: Asserts, fn: () => unknown, message: string, code: ErrorCode = 'PROTO_ERR_INVALID_REQUEST'): void {
  throwsCoded(t, fn, { code, message, status: 400 })
  try {
    fn()
  } catch (err) {
    t.equal(grpcErrorFrom(err).code, grpc.status.INVALID_ARGUMENT, `${message}: gRPC status`)
  }
}

/** Triton's UNSUPPORTED for a named repository: 501 / UNIMPLEMENTED, as its HTTP route answers. */
function unsupported (t: Asserts, fn: () => unknown): void {
  throwsCoded(t, fn, { code: 'PROTO_ERR_UNSUPPORTED', message: "'repository_name' specification is not supported", status: 501 })
  try {
    fn()
  } catch (err) {
    t.equal(grpcErrorFrom(err).code, grpc.status.UNIMPLEMENTED, 'gRPC status')
  }
}

const bytes = (...values: number[]): Uint8Array => new Uint8Array(values)
const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s)

/** Representative values of every datatype, extremes included. */
function sampleData (datatype: DataType): TensorData {
  switch (datatype) {
    case 'BOOL': return bytes(1, 0, 1, 1)
    case 'UINT8': return bytes(0, 255, 7, 128)
    case 'UINT16': return new Uint16Array([0, 65535, 1, 300])
    case 'UINT32': return new Uint32Array([0, 4294967295, 5, 65536])
    case 'UINT64': return new BigUint64Array([0n, 2n ** 64n - 1n, 2n ** 53n + 1n, 9007199254740991n])
    case 'INT8': return new Int8Array([-128, 127, 0, -1])
    case 'INT16': return new Int16Array([-32768, 32767, 0, -2])
    case 'INT32': return new Int32Array([-(2 ** 31), 2 ** 31 - 1, 0, -3])
    case 'INT64': return new BigInt64Array([-(2n ** 63n), 2n ** 63n - 1n, -1n, -9007199254740993n])
    case 'FP16': return new Uint16Array([0x3c00, 0x7c00, 0x8001, 0x0000])
    case 'BF16': return new Uint16Array([0x3f80, 0xff80, 0x0001, 0x7fc0])
    case 'FP32': return new Float32Array([1.5, -2.25, 3.4028234663852886e38, -0])
    case 'FP64': return new Float64Array([Math.PI, -1e308, 5e-324, 0])
    case 'BYTES': return BytesData.from([new Uint8Array(0), bytes(0xff, 0xfe, 0x00, 0x80), 'hello', 'é'])
  }
}

const HAS_CONTENTS_FIELD: readonly DataType[] = DATATYPE_NAMES.filter(d => d !== 'FP16' && d !== 'BF16')

function tensor (name: string, datatype: DataType, shape: number[], data: TensorData): Tensor {
  return { name, datatype, shape, data }
}

/** Elements as plain values, and the storage's constructor name, for comparison. */
function plain (data: TensorData): { kind: string, values: unknown[] } {
  if (data instanceof BytesData) return { kind: 'BYTES', values: data.toArray().map(e => [e.constructor.name, Array.from(e)]) }
  return { kind: data.constructor.name, values: Array.from(data as ArrayLike<unknown>) }
}

function sameTensors (t: Test, got: Tensor[], want: Tensor[], what: string): void {
  t.equal(got.length, want.length, `${what}: count`)
  for (let i = 0; i < want.length; i++) {
    const g = got[i] as Tensor
    const w = want[i] as Tensor
    t.same({ name: g.name, datatype: g.datatype, shape: g.shape, parameters: g.parameters },
      { name: w.name, datatype: w.datatype, shape: w.shape, parameters: w.parameters }, `${what} ${w.name}: header`)
    t.same(plain(g.data), plain(w.data), `${what} ${w.name}: data`)
  }
}

t.test('ModelInferRequest is wire-compatible with an independent encoder', async t => {
  // Triton's field numbers, written by hand with protobufjs's bare Writer (no schema involved).
  const w = protobuf.Writer.create()
  w.uint32((1 << 3) | 2).string('simple')
  w.uint32((2 << 3) | 2).string('3')
  w.uint32((3 << 3) | 2).string('req-1')
  // parameters map entry: key 1, value 2 = InferParameter { int64_param (2) }
  w.uint32((4 << 3) | 2).fork().uint32((1 << 3) | 2).string('sequence_id')
    .uint32((2 << 3) | 2).fork().uint32((2 << 3) | 0).int64(-5).ldelim().ldelim()
  w.uint32((4 << 3) | 2).fork().uint32((1 << 3) | 2).string('priority')
    .uint32((2 << 3) | 2).fork().uint32((5 << 3) | 0).uint64(2).ldelim().ldelim()
  w.uint32((4 << 3) | 2).fork().uint32((1 << 3) | 2).string('ratio')
    .uint32((2 << 3) | 2).fork().uint32((4 << 3) | 1).double(0.5).ldelim().ldelim()
  // inputs[0]: INPUT0 INT32 [1, 2], raw
  w.uint32((5 << 3) | 2).fork()
    .uint32((1 << 3) | 2).string('INPUT0').uint32((2 << 3) | 2).string('INT32')
    .uint32((3 << 3) | 2).fork().int64(1).int64(2).ldelim()
    .ldelim()
  // inputs[1]: INPUT1 FP64 [2], contents.fp64_contents (7), with a tensor parameter
  w.uint32((5 << 3) | 2).fork()
    .uint32((1 << 3) | 2).string('INPUT1').uint32((2 << 3) | 2).string('FP64')
    .uint32((3 << 3) | 0).int64(2) // unpacked repeated int64 is also valid protobuf
    .uint32((4 << 3) | 2).fork().uint32((1 << 3) | 2).string('tag')
    .uint32((2 << 3) | 2).fork().uint32((3 << 3) | 2).string('x').ldelim().ldelim()
    .ldelim()
  // outputs[0]
  w.uint32((6 << 3) | 2).fork().uint32((1 << 3) | 2).string('OUTPUT0').ldelim()
  const bytesWritten = w.finish()

  const decoded = inferMethod.requestDeserialize(Buffer.from(bytesWritten)) as ModelInferRequestMessage
  t.equal(decoded.model_name, 'simple')
  t.equal(decoded.model_version, '3')
  t.equal(decoded.id, 'req-1')
  t.same(decoded.inputs.map(i => [i.name, i.datatype, i.shape]), [['INPUT0', 'INT32', [1, 2]], ['INPUT1', 'FP64', [2]]])
  t.same(decoded.outputs?.map(o => o.name), ['OUTPUT0'])

  // The same request, written by our encoder and read back field by field with the bare Reader.
  const ours = encodeModelInferRequest('simple', '3', {
    id: 'req-1',
    parameters: { sequence_id: -5 },
    inputs: [tensor('INPUT0', 'INT32', [1, 2], new Int32Array([7, -8]))],
    outputs: [{ name: 'OUTPUT0' }]
  })
  const r = protobuf.Reader.create(inferMethod.requestSerialize(ours))
  const seen: Array<[number, unknown]> = []
  while (r.pos < r.len) {
    const tag = r.uint32()
    const field = tag >>> 3
    if (field === 1 || field === 2 || field === 3) seen.push([field, r.string()])
    else if (field === 7) seen.push([field, Array.from(r.bytes())])
    else { seen.push([field, 'message']); r.skipType(tag & 7) }
  }
  t.same(seen, [
    [1, 'simple'], [2, '3'], [3, 'req-1'], [4, 'message'], [5, 'message'], [6, 'message'], [7, [7, 0, 0, 0, 0xf8, 0xff, 0xff, 0xff]]
  ], 'fields 1-7 with Triton\'s numbers, raw data little-endian')
})

t.test('a request decoded from the independent encoder, with contents, parameters and raw data', async t => {
  const int16Request = (values: number[]): ModelInferRequestMessage => {
    const w = protobuf.Writer.create()
    w.uint32((1 << 3) | 2).string('m')
    const contents = w.uint32((5 << 3) | 2).fork().uint32((1 << 3) | 2).string('A').uint32((2 << 3) | 2).string('INT16')
      .uint32((3 << 3) | 2).fork().int64(values.length).ldelim()
      .uint32((5 << 3) | 2).fork().uint32((2 << 3) | 2).fork()
    for (const v of values) contents.int32(v)
    contents.ldelim().ldelim().ldelim()
    return inferMethod.requestDeserialize(Buffer.from(w.finish())) as ModelInferRequestMessage
  }
  const { request } = decodeModelInferRequest(int16Request([-1, -32768, 32767]))
  const a = request.inputs[0] as Tensor
  t.ok(a.data instanceof Int16Array)
  t.same(Array.from(a.data as Int16Array), [-1, -32768, 32767], 'INT16 from int_contents')
  fails(t, () => decodeModelInferRequest(int16Request([-1, 70000, 5])),
    "invalid value 70000 at index 1 of int_contents for input tensor 'A' for model 'm': INT16 holds integers in " +
    '[-32768, 32767]')
})

t.test('every datatype round-trips through the wire as raw contents and as typed contents', async t => {
  for (const datatype of DATATYPE_NAMES) {
    const data = sampleData(datatype)
    const request: InferRequest = {
      id: 'r1',
      parameters: { sequence_id: 42, sequence_start: true, priority: 1, tag: 'x', ratio: 0.25, big: -9007199254740991 },
      inputs: [
        { ...tensor('IN', datatype, [2, 2], data), parameters: { note: 'n', flag: false } },
        tensor('EMPTY', datatype, [0, 3], data.subarray(0, 0))
      ],
      outputs: [{ name: 'OUT', parameters: { classification: 2 } }]
    }
    const modes = HAS_CONTENTS_FIELD.includes(datatype) ? [false, true] : [false]
    for (const contents of modes) {
      const what = `${datatype} ${contents ? 'contents' : 'raw'}`
      const msg = encodeModelInferRequest('model', '2', request, { contents })
      t.equal(msg.raw_input_contents === undefined, contents, `${what}: raw_input_contents only without the option`)
      const wire = requestViaWire(msg)
      const decoded = decodeModelInferRequest(wire)
      t.equal(decoded.modelName, 'model', what)
      t.equal(decoded.modelVersion, '2', what)
      t.equal(decoded.request.id, 'r1', what)
      t.same(decoded.request.parameters, request.parameters, `${what}: parameters`)
      t.same(decoded.request.outputs, request.outputs, `${what}: outputs`)
      sameTensors(t, decoded.request.inputs, request.inputs, what)
    }

    const response: InferResponse = {
      id: 'r1',
      model_name: 'model',
      model_version: '2',
      parameters: { triton_final_response: true },
      outputs: [
        { ...tensor('OUT', datatype, [4], data), parameters: { p: 1 } },
        tensor('EMPTY', datatype, [2, 0], data.subarray(0, 0))
      ]
    }
    const encoded = encodeModelInferResponse(response)
    t.ok(encoded.outputs.every(o => o.contents === undefined), `${datatype}: outputs' contents unset`)
    t.equal(encoded.raw_output_contents?.length, 2, `${datatype}: one raw entry per output`)
    const back = decodeModelInferResponse(responseViaWire(encoded))
    t.same({ ...back, outputs: [] }, { ...response, outputs: [] }, `${datatype}: response header`)
    sameTensors(t, back.outputs, response.outputs, `${datatype} response raw`)

    if (HAS_CONTENTS_FIELD.includes(datatype)) {
      // Responses with typed contents (Triton never sends them, other servers may): borrow the request encoder's.
      const asContents = encodeModelInferRequest('model', '2', { parameters: {}, inputs: response.outputs }, { contents: true })
      const withContents: ModelInferResponseMessage = {
        model_name: 'model',
        model_version: '2',
        outputs: asContents.inputs.map((i: InferInputTensorMessage) =>
          ({ name: i.name, datatype: i.datatype, shape: i.shape, contents: i.contents ?? null }))
      }
      const fromContents = decodeModelInferResponse(responseViaWire(withContents))
      sameTensors(t, fromContents.outputs,
        response.outputs.map(o => ({ ...o, parameters: undefined }) as unknown as Tensor), `${datatype} response contents`)
    }
  }
})

t.test('raw data: typed views over the message where aligned, aligned copies where not', async t => {
  const values = new Float32Array([1, 2, 3, 4])
  for (let offset = 0; offset < 8; offset++) {
    const backing = new Uint8Array(64)
    backing.set(new Uint8Array(values.buffer), offset)
    const raw = backing.subarray(offset, offset + 16)
    const { request } = decodeModelInferRequest({
      model_name: 'm', inputs: [{ name: 'X', datatype: 'FP32', shape: [4] }], raw_input_contents: [raw]
    })
    const data = (request.inputs[0] as Tensor).data as Float32Array
    t.same(Array.from(data), [1, 2, 3, 4], `offset ${offset}: values`)
    if (offset % 4 === 0) t.equal(data.buffer, backing.buffer, `offset ${offset}: a view, no copy`)
    else t.not(data.buffer, backing.buffer, `offset ${offset}: copied to align`)
  }

  // INT64 at an odd offset, BYTES anywhere (byte-addressed, always views).
  const backing = new Uint8Array(40)
  const i64 = new BigInt64Array([-2n, 2n ** 62n])
  backing.set(new Uint8Array(i64.buffer), 3)
  const strings = [utf8('ab'), utf8('')]
  backing.set([2, 0, 0, 0, 0x61, 0x62, 0, 0, 0, 0], 20)
  const { request } = decodeModelInferRequest({
    model_name: 'm',
    inputs: [{ name: 'I', datatype: 'INT64', shape: [2] }, { name: 'S', datatype: 'BYTES', shape: [2] }],
    raw_input_contents: [backing.subarray(3, 19), backing.subarray(21 - 1, 30)]
  })
  t.same(Array.from((request.inputs[0] as Tensor).data as BigInt64Array), [-2n, 2n ** 62n])
  const s = elementsOf((request.inputs[1] as Tensor).data)
  t.same(s.map(e => Array.from(e)), strings.map(e => Array.from(e)))
  t.equal(s[0]?.buffer, backing.buffer, 'BYTES elements are views')
  t.equal(s[0]?.constructor, Uint8Array, 'plain Uint8Array views, not Buffers')

  // Through grpc-js's deserializer: whatever offsets the fields land at, the values come out right.
  for (let pad = 0; pad < 4; pad++) {
    const msg = encodeModelInferRequest('m'.repeat(pad + 1), '', {
      parameters: {}, inputs: [tensor('F', 'FP64', [3], new Float64Array([0.5, -1, 1e300]))]
    })
    const decoded = decodeModelInferRequest(requestViaWire(msg))
    t.same(Array.from((decoded.request.inputs[0] as Tensor).data as Float64Array), [0.5, -1, 1e300], `model name of ${pad + 1} bytes`)
  }
})

t.test('modelInferRequestToRaw and rawToModelInferResponse pass the bytes through without copying', async t => {
  const request: InferRequest = {
    parameters: { sequence_id: 'abc' },
    inputs: [
      tensor('A', 'FP32', [2], new Float32Array([1, 2])),
      tensor('B', 'BYTES', [2], BytesData.from(['x', new Uint8Array(0)])),
      tensor('C', 'FP16', [1], new Uint16Array([0x3c00]))
    ]
  }
  const received = inferMethod.requestSerialize(encodeModelInferRequest('m', '1', request))
  const wire = inferMethod.requestDeserialize(received) as ModelInferRequestMessage
  const raws = wire.raw_input_contents as Uint8Array[]
  const { modelName, modelVersion, request: raw } = modelInferRequestToRaw(wire)
  t.equal(modelName, 'm')
  t.equal(modelVersion, '1')
  t.same(raw.parameters, { sequence_id: 'abc' })
  for (let i = 0; i < raws.length; i++) {
    const input = raw.inputs[i]
    t.equal(input?.raw.buffer, received.buffer, `input ${i}: the received message's own memory`)
    t.equal(input?.raw.byteOffset, raws[i]?.byteOffset, `input ${i}: same offset`)
    t.equal(input?.raw.byteLength, raws[i]?.byteLength, `input ${i}: same length`)
  }
  t.same(raw.inputs.map(i => [i.name, i.datatype, i.shape]), [['A', 'FP32', [2]], ['B', 'BYTES', [2]], ['C', 'FP16', [1]]])

  // Contents become Triton's raw layout: exactly the bytes a raw client would have sent.
  for (const datatype of HAS_CONTENTS_FIELD) {
    const t1 = tensor('X', datatype, [4], sampleData(datatype))
    const withContents = encodeModelInferRequest('m', '', { parameters: {}, inputs: [t1] }, { contents: true })
    const viaContents = modelInferRequestToRaw(requestViaWire(withContents))
    const direct = encodeModelInferRequest('m', '', { parameters: {}, inputs: [t1] }).raw_input_contents?.[0]
    t.same(Array.from(viaContents.request.inputs[0]?.raw ?? []), Array.from(direct ?? []), `${datatype}: contents to raw`)
  }

  const outputs = [
    { name: 'Y', datatype: 'FP32', shape: [2], raw: new Uint8Array(new Float32Array([3, 4]).buffer) },
    { name: 'Z', datatype: 'BYTES', shape: [1], raw: bytes(1, 0, 0, 0, 0x7a), parameters: { p: true } }
  ]
  const msg = rawToModelInferResponse({ id: 'q', model_name: 'm', model_version: '1', outputs })
  t.equal(msg.raw_output_contents?.[0], outputs[0]?.raw, 'the same Uint8Array, no copy before serialization')
  t.equal(msg.raw_output_contents?.[1], outputs[1]?.raw)
  const back = decodeModelInferResponse(responseViaWire(msg))
  t.equal(back.id, 'q')
  t.same(Array.from((back.outputs[0] as Tensor).data as Float32Array), [3, 4])
  t.same(elementsOf((back.outputs[1] as Tensor).data).map(e => Array.from(e)), [[0x7a]])
  t.same(back.outputs[1]?.parameters, { p: true })
})

t.test('encodeModelInferResponse: views over the tensors, BYTES serialized once', async t => {
  const f = new Float32Array([1, 2, 3])
  const msg = encodeModelInferResponse({
    model_name: 'm', model_version: '1', outputs: [tensor('F', 'FP32', [3], f), tensor('S', 'BYTES', [2], BytesData.from(['ab', '']))]
  })
  t.equal(msg.raw_output_contents?.[0]?.buffer, f.buffer, 'fixed-size outputs are views over their own buffer')
  t.same(Array.from(msg.raw_output_contents?.[1] ?? []), [2, 0, 0, 0, 0x61, 0x62, 0, 0, 0, 0])
  t.notOk('id' in msg, 'no id when the response has none')
  t.notOk('parameters' in msg)
})

/** A one-input request message for the malformed cases. */
function oneInput (input: Partial<InferInputTensorMessage>, extra: Partial<ModelInferRequestMessage> = {}): ModelInferRequestMessage {
  return { model_name: 'simple', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [4], ...input }], ...extra }
}

const scalar = (name: string): InferInputTensorMessage => ({ name, datatype: 'FP32', shape: [1] })
const decodeWire = (msg: ModelInferRequestMessage): unknown => decodeModelInferRequest(requestViaWire(msg))
const toRawWire = (msg: ModelInferRequestMessage): unknown => modelInferRequestToRaw(requestViaWire(msg))

t.test('malformed requests: Triton\'s messages, INVALID_ARGUMENT', async t => {
  const f32 = (n: number): Uint8Array => new Uint8Array(new Float32Array(n).buffer)
  const structural: Array<[string, ModelInferRequestMessage, string]> = [
    ['contents mixed with raw_input_contents',
      oneInput({ shape: [1], contents: { fp32_contents: [1] } }, { raw_input_contents: [f32(1)] }),
      "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'"],
    ['an empty contents message still counts as contents',
      {
        model_name: 'simple',
        inputs: [{ name: 'A', datatype: 'FP32', shape: [1] }, { name: 'B', datatype: 'FP32', shape: [0], contents: {} }],
        raw_input_contents: [f32(1)]
      },
      "contents field must not be specified when using raw_input_contents for 'B' for model 'simple'"],
    ['no data at all', oneInput({}), "unable to find data for input tensor 'INPUT0' for model 'simple' in request."],
    ['fewer raw entries than inputs',
      { model_name: 'simple', inputs: [scalar('A'), scalar('B')], raw_input_contents: [f32(1)] },
      "unable to find data for input tensor 'B' for model 'simple' in request."],
    ['wrong contents field', oneInput({ contents: { int_contents: [1, 2, 3, 4] } }),
      "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'INT32', expected datatype 'FP32'"],
    ['FP16 has no contents field', oneInput({ datatype: 'FP16', contents: { fp32_contents: [1, 2, 3, 4] } }),
      "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', expected datatype 'FP16'"],
    ['uint_contents for INT8', oneInput({ datatype: 'INT8', contents: { uint_contents: [1, 2, 3, 4] } }),
      "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'UINT32', expected datatype 'INT8'"],
    ['two contents fields', oneInput({ contents: { fp32_contents: [1, 2, 3, 4], fp64_contents: [1] } }),
      "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple', binary data was already supplied. " +
      "(fp32_contents and fp64_contents both hold elements; use only the field of datatype 'FP32')"],
    ['contents for an unknown datatype', oneInput({ datatype: 'fp32', contents: { fp32_contents: [1] } }),
      "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', expected datatype 'INVALID'"],
    ['duplicate input',
      { model_name: 'simple', id: 'r9', inputs: [scalar('A'), scalar('A')], raw_input_contents: [f32(1), f32(1)] },
      "[request id: r9] input 'A' already exists in request"],
    ['duplicate output', oneInput({}, { raw_input_contents: [f32(4)], outputs: [{ name: 'O' }, { name: 'O' }] }),
      "[request id: <id_unknown>] output 'O' already exists in request"],
    ['shared memory', oneInput({ parameters: { shared_memory_region: { string_param: 'r' } } }),
      "input 'INPUT0' sets 'shared_memory_region' in 'parameters', but the shared-memory extension is not supported; " +
      'send the tensor in raw_input_contents or in contents'],
    ['shared memory with contents', oneInput({ parameters: { shared_memory_region: { string_param: 'r' } }, contents: {} }),
      "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' for model 'simple'"],
    ['shared memory output',
      oneInput({}, { raw_input_contents: [f32(4)], outputs: [{ name: 'O', parameters: { shared_memory_region: { string_param: 'r' } } }] }),
      "output 'O' sets 'shared_memory_region' in 'parameters', but the shared-memory extension is not supported; " +
      'leave it out to receive the output in raw_output_contents']
  ]
  for (const [what, msg, message] of structural) {
    fails(t, () => decodeWire(msg), message)
    fails(t, () => toRawWire(msg), message) // the gateway's decoder checks the same structure
    fails(t, () => decodeModelInferRequest(msg), message) // hand-built messages too
    void what
  }

  const sizes: Array<[string, ModelInferRequestMessage, string]> = [
    ['raw size', oneInput({}, { raw_input_contents: [f32(3)] }),
      "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 16, got 12"],
    ['raw size, with an id', oneInput({ datatype: 'INT64', shape: [2, 1] }, { id: 'x7', raw_input_contents: [bytes(1, 2, 3)] }),
      "[request id: x7] input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 16, got 3"],
    ['contents count', oneInput({ contents: { fp32_contents: [1, 2] } }),
      "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 16, got 8"],
    ['empty contents for elements', oneInput({ datatype: 'FP16', contents: {} }),
      "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 8, got 0"],
    ['BYTES raw overrun', oneInput({ datatype: 'BYTES', shape: [1] }, { raw_input_contents: [bytes(10, 0, 0, 0, 0x61, 0x62, 0x63)] }),
      "incomplete string data for inference input 'INPUT0' for model 'simple', expecting string of length 10 but only 3 bytes available"],
    ['BYTES raw truncated length', oneInput({ datatype: 'BYTES', shape: [2] }, { raw_input_contents: [bytes(1, 0, 0, 0, 0x61, 2, 0)] }),
      "incomplete string length indicator for inference input 'INPUT0' for model 'simple', expecting 4 bytes but only 2 bytes " +
      'available. Please make sure the string length indicator is in one buffer.'],
    ['BYTES raw too few', oneInput({ datatype: 'BYTES', shape: [3] }, { raw_input_contents: [bytes(1, 0, 0, 0, 0x61)] }),
      "expected 3 string elements for inference input 'INPUT0' for model 'simple', got 1"],
    ['BYTES raw too many', oneInput({ datatype: 'BYTES', shape: [1] }, { raw_input_contents: [bytes(0, 0, 0, 0, 0, 0, 0, 0)] }),
      "unexpected number of string elements 2 for inference input 'INPUT0' for model 'simple', expecting 1"],
    ['BYTES contents too few', oneInput({ datatype: 'BYTES', shape: [2], contents: { bytes_contents: [utf8('a')] } }),
      "expected 2 string elements for inference input 'INPUT0' for model 'simple', got 1"],
    ['BYTES contents too many', oneInput({ datatype: 'BYTES', shape: [1], contents: { bytes_contents: [utf8('a'), utf8('b')] } }),
      "unexpected number of string elements 2 for inference input 'INPUT0' for model 'simple', expecting 1"],
    ['element count overflow', oneInput({ shape: [2 ** 40, 2 ** 20] }, { raw_input_contents: [f32(1)] }),
      "invalid shape for input 'INPUT0': shape [1099511627776,1048576] causes total element count to exceed maximum size " +
      'of 9007199254740991'],
    ['dimension beyond 2^53', oneInput({ shape: [2n ** 60n] }, { raw_input_contents: [f32(1)] }),
      "invalid shape for input 'INPUT0': dimension 1152921504606846976 exceeds the maximum size of 9007199254740991"]
  ]
  for (const [, msg, message] of sizes) fails(t, () => decodeWire(msg), message)

  fails(t, () => decodeWire(oneInput({ datatype: 'FLOAT32' }, { raw_input_contents: [f32(4)] })),
    'invalid datatype for input INPUT0', 'PROTO_ERR_INVALID_DATATYPE')
  fails(t, () => decodeModelInferRequest(oneInput({}, { raw_input_contents: [f32(4)] }), { maxInputBytes: 15 }),
    "input 'INPUT0' has a byte_size (16 bytes) that exceeds the maximum allowed value of 15 bytes")
  const strings = oneInput({ datatype: 'BYTES', shape: [2], contents: { bytes_contents: [utf8('abc'), utf8('d')] } })
  fails(t, () => decodeModelInferRequest(strings, { maxInputBytes: 11 }),
    "input 'INPUT0' has a byte_size (12 bytes) that exceeds the maximum allowed value of 11 bytes")
  t.ok(decodeModelInferRequest(oneInput({}, { raw_input_contents: [f32(4)] }), { maxInputBytes: 16 }), 'at the limit is fine')
})

t.test('integer contents the datatype cannot hold are refused, not wrapped', async t => {
  const lead = (field: string, index: number, value: string): string =>
    `invalid value ${value} at index ${index} of ${field} for input tensor 'INPUT0' for model 'simple'`
  // int_contents / uint_contents carry 32-bit values: through the wire, anything in int32 / uint32 arrives.
  const cases: Array<[DataType, 'int_contents' | 'uint_contents', number[], number, string]> = [
    ['INT8', 'int_contents', [-128, 127, 128, 0], 2, ': INT8 holds integers in [-128, 127]'],
    ['INT8', 'int_contents', [-129, 0, 0, 0], 0, ': INT8 holds integers in [-128, 127]'],
    ['INT16', 'int_contents', [0, -32769, 0, 0], 1, ': INT16 holds integers in [-32768, 32767]'],
    ['INT16', 'int_contents', [0, 0, 0, 32768], 3, ': INT16 holds integers in [-32768, 32767]'],
    ['UINT8', 'uint_contents', [255, 256, 0, 0], 1, ': UINT8 holds integers in [0, 255]'],
    ['UINT16', 'uint_contents', [65536, 0, 0, 0], 0, ': UINT16 holds integers in [0, 65535]']
  ]
  for (const [datatype, field, values, index, holds] of cases) {
    const msg = oneInput({ datatype, contents: { [field]: values } })
    const message = lead(field, index, String(values[index])) + holds
    fails(t, () => decodeWire(msg), message)
    fails(t, () => toRawWire(msg), message) // the gateway refuses it too, rather than forward wrapped bytes
  }
  // The ends of each range pass.
  const ok = decodeWire(oneInput({ datatype: 'INT8', contents: { int_contents: [-128, 127, 0, -1] } })) as { request: InferRequest }
  t.same(Array.from(ok.request.inputs[0]?.data as Int8Array), [-128, 127, 0, -1])
  const u16 = decodeWire(oneInput({ datatype: 'UINT16', contents: { uint_contents: [0, 65535, 1, 2] } })) as { request: InferRequest }
  t.same(Array.from(u16.request.inputs[0]?.data as Uint16Array), [0, 65535, 1, 2])

  // Hand-built messages can hold anything: non-integers, values beyond 32 bits, 64-bit values out of range.
  fails(t, () => decodeModelInferRequest(oneInput({ datatype: 'INT32', contents: { int_contents: [1, 2.5, 3, 4] } })),
    lead('int_contents', 1, '2.5') + ': INT32 holds integers in [-2147483648, 2147483647]')
  fails(t, () => decodeModelInferRequest(oneInput({ datatype: 'UINT32', contents: { uint_contents: [1, 2, 3, 2 ** 32] } })),
    lead('uint_contents', 3, '4294967296') + ': UINT32 holds integers in [0, 4294967295]')
  fails(t, () => decodeModelInferRequest(oneInput({ datatype: 'INT64', contents: { int64_contents: [1n, 2n ** 63n, 3n, 4n] } })),
    lead('int64_contents', 1, '9223372036854775808') + ': INT64 holds integers in [-9223372036854775808, 9223372036854775807]')
  fails(t, () => decodeModelInferRequest(oneInput({ datatype: 'UINT64', contents: { uint64_contents: [1, -1, 3, 4] } })),
    lead('uint64_contents', 1, '-1') + ': UINT64 holds integers in [0, 18446744073709551615]')
  fails(t, () => decodeModelInferRequest(oneInput({ datatype: 'INT64', contents: { int64_contents: [0.5, 1, 2, 3] } })),
    lead('int64_contents', 0, '0.5') + ': INT64 holds integers in [-9223372036854775808, 9223372036854775807]')
})

t.test('64-bit contents stay exact through the wire: protobufjs hands over numbers or bigints, never rounded', async t => {
  const i64 = [-(2n ** 63n), 2n ** 63n - 1n, 2n ** 53n + 1n, -(2n ** 53n) - 1n]
  const u64 = [2n ** 64n - 1n, 2n ** 53n + 1n, 0n, 2n ** 63n]
  const wire = requestViaWire({
    model_name: 'simple',
    inputs: [
      { name: 'I', datatype: 'INT64', shape: [4], contents: { int64_contents: i64 } },
      { name: 'U', datatype: 'UINT64', shape: [4], contents: { uint64_contents: u64 } }
    ]
  })
  t.same(Array.from(wire.inputs?.[0]?.contents?.int64_contents ?? []).map(v => typeof v), ['bigint', 'bigint', 'bigint', 'bigint'],
    'values beyond 2^53 arrive as bigints')
  const { request } = decodeModelInferRequest(wire)
  t.same(Array.from(request.inputs[0]?.data as BigInt64Array), i64)
  t.same(Array.from(request.inputs[1]?.data as BigUint64Array), u64)
})

t.test('what passes: -1 dimensions, extra raw entries, the datatype of raw tensors in the gateway', async t => {
  const { request } = decodeModelInferRequest(requestViaWire(oneInput({ shape: [-1, 2] }, { raw_input_contents: [new Uint8Array(12)] })))
  t.same((request.inputs[0] as Tensor).shape, [-1, 2], '-1 is left to the worker\'s validation')
  t.equal(((request.inputs[0] as Tensor).data as Float32Array).length, 3, 'as many elements as the bytes hold')

  const extra = decodeModelInferRequest(oneInput({}, { raw_input_contents: [new Uint8Array(16), new Uint8Array(3)] }))
  t.equal(extra.request.inputs.length, 1, 'unused raw entries are ignored, as Triton ignores them')

  const raw = modelInferRequestToRaw(requestViaWire(oneInput({ datatype: 'NOT_A_TYPE', shape: [3] }, { raw_input_contents: [bytes(1)] })))
  t.equal(raw.request.inputs[0]?.datatype, 'NOT_A_TYPE', 'the gateway leaves datatypes and sizes to the worker')
  const empty = modelInferRequestToRaw(oneInput({ datatype: 'FP16', shape: [0], contents: {} }))
  t.equal(empty.request.inputs[0]?.raw.byteLength, 0, 'empty contents: no bytes')
  t.equal(empty.modelVersion, '', 'no version: the server picks')
})

/** A request with just one request-level parameter. */
function withParameter (key: string, p: InferParameterMessage): ModelInferRequestMessage {
  return oneInput({}, { raw_input_contents: [new Uint8Array(16)], parameters: { [key]: p } })
}

t.test('request parameters: Triton\'s types for the keys it interprets, and what ours can carry', async t => {
  const cases: Array<[string, InferParameterMessage, string]> = [
    ['sequence_id', { bool_param: true }, "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."],
    ['sequence_id', { uint64_param: 5 }, "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."],
    ['sequence_start', { int64_param: 1 }, "invalid value type for 'sequence_start' parameter, expected bool_param."],
    ['sequence_end', { string_param: 'true' }, "invalid value type for 'sequence_end' parameter, expected bool_param."],
    ['priority', { int64_param: -1 }, "invalid value for 'priority', expected value >= 0."],
    ['priority', { string_param: '1' }, "invalid value type for 'priority' parameter, expected int64_param or uint64_param."],
    ['timeout', { uint64_param: 100 }, "invalid value type for 'timeout' parameter, expected int64_param."],
    ['triton_foo', { bool_param: true },
      "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with " +
      "'triton_' are allowed: triton_enable_empty_final_response"],
    ['triton_enable_empty_final_response', { int64_param: 1 },
      "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param."],
    ['custom', { uint64_param: 7 }, "invalid value type for 'custom' parameter, expected int64_param, bool_param, or string_param."],
    ['custom', {}, "invalid value type for 'custom' parameter, expected int64_param, bool_param, or string_param."],
    ['custom', { int64_param: 2n ** 53n },
      "invalid value for 'custom' parameter: int64_param 9007199254740992 is not an integer within ±9007199254740991, " +
      'the integers Flotilla carries exactly; send a smaller value, or the value as a string_param'],
    ['priority', { uint64_param: 2n ** 64n - 1n },
      "invalid value for 'priority' parameter: uint64_param 18446744073709551615 is not an integer within ±9007199254740991, " +
      'the integers Flotilla carries exactly; send a smaller value, or the value as a string_param']
  ]
  for (const [key, p, message] of cases) {
    fails(t, () => decodeWire(withParameter(key, p)), message)
    fails(t, () => toRawWire(withParameter(key, p)), message)
  }

  const good = decodeModelInferRequest(requestViaWire(oneInput({ parameters: { big: { uint64_param: 3 }, empty: {} } }, {
    raw_input_contents: [new Uint8Array(16)],
    parameters: {
      sequence_id: { int64_param: -(2 ** 53) + 1 },
      sequence_start: { bool_param: false },
      priority: { uint64_param: 3 },
      timeout: { int64_param: 1000 },
      triton_enable_empty_final_response: { bool_param: true },
      d: { double_param: 1.25 },
      s: { string_param: '' },
      // A literal `__proto__:` would set the object's prototype; JSON.parse makes it an ordinary key, as the wire does.
      ...JSON.parse('{"__proto__":{"string_param":"kept"}}') as Record<string, InferParameterMessage>
    },
    outputs: [{ name: 'O', parameters: { binary_data: { bool_param: true } } }]
  })))
  t.same(Object.entries(good.request.parameters), [
    ['sequence_id', -9007199254740991], ['sequence_start', false], ['priority', 3], ['timeout', 1000],
    ['triton_enable_empty_final_response', true], ['d', 1.25], ['s', ''], ['__proto__', 'kept']
  ], 'values by type; a "__proto__" key is an ordinary key')
  t.same((good.request.inputs[0] as Tensor).parameters, { big: 3 }, 'tensor parameters take uint64; empty ones carry nothing')
  t.same(good.request.outputs, [{ name: 'O', parameters: { binary_data: true } }])
  t.notOk('id' in good.request, 'no id: none was sent')
})

t.test('encodeModelInferRequest refuses contents for FP16 and BF16', async t => {
  for (const datatype of ['FP16', 'BF16'] as const) {
    const request = { parameters: {}, inputs: [tensor('H', datatype, [1], new Uint16Array(1))] }
    fails(t, () => encodeModelInferRequest('m', '', request, { contents: true }),
      `${datatype} input 'H' can only travel in raw_input_contents, and raw_input_contents cannot be mixed with contents; ` +
      'encode this request without the contents option')
  }
})

t.test('malformed responses are refused with the same messages', async t => {
  const base = { model_name: 'm', model_version: '1' }
  const output = (datatype: string, shape: number[]): InferOutputTensorMessage => ({ name: 'O', datatype, shape })
  fails(t, () => decodeModelInferResponse({ ...base, outputs: [output('FP32', [2])], raw_output_contents: [new Uint8Array(4)] }),
    "[request id: <id_unknown>] output byte size mismatch for output 'O' for model 'm'. Expected 8, got 4")
  fails(t, () => decodeModelInferResponse({ ...base, outputs: [{ name: 'O', datatype: 'FP32', shape: [2] }] }),
    "unable to find data for output tensor 'O' for model 'm' in response.")
  fails(t, () => decodeModelInferResponse({ ...base, outputs: [output('F', [2])], raw_output_contents: [new Uint8Array(8)] }),
    "output 'O' has datatype 'F', which is not a protocol datatype")
  fails(t, () => decodeModelInferResponse({ ...base, outputs: [{ name: 'O', datatype: 'F', shape: [0], contents: {} }] }),
    "output 'O' has datatype 'F', which is not a protocol datatype")
  const both = { ...base, outputs: [{ ...output('FP32', [1]), contents: {} }], raw_output_contents: [new Uint8Array(4)] }
  fails(t, () => decodeModelInferResponse(both),
    "contents field must not be specified when using raw_output_contents for 'O' for model 'm'")
  fails(t, () => decodeModelInferResponse({ ...base, outputs: [output('BYTES', [1])], raw_output_contents: [bytes(9, 0, 0, 0)] }),
    "incomplete string data for inference output 'O' for model 'm', expecting string of length 9 but only 0 bytes available")
})

// ---------------------------------------------------------------------------------------------------------------
// The HTTP side's JSON as gRPC messages

const configMethod = service.ModelConfig as grpc.MethodDefinition<unknown, unknown>

function configViaWire (json: unknown): Record<string, unknown> {
  const msg = modelConfigToMessage(json)
  const back = configMethod.responseDeserialize(configMethod.responseSerialize(msg)) as { config: Record<string, unknown> }
  return back.config
}

function isDefault (v: unknown): boolean {
  if (v === false || v === 0 || v === '') return true
  if (Array.isArray(v)) return v.length === 0
  if (typeof v === 'object' && v !== null) return Object.keys(v).length === 0
  return false
}

/**
 * `got` holds every field of `want` with the same value; fields only `got` has are defaults (Triton's JSON prints
 * every field; the worker's printer leaves out a few it does not use).
 */
function sameConfig (t: Test, got: unknown, want: unknown, path: string): void {
  if (Array.isArray(want)) {
    if (!Array.isArray(got) || got.length !== want.length) {
      t.same(got, want, path)
      return
    }
    want.forEach((w, i) => sameConfig(t, got[i], w, `${path}[${i}]`))
    return
  }
  if (typeof want === 'object' && want !== null) {
    if (typeof got !== 'object' || got === null) {
      t.same(got, want, path)
      return
    }
    const g = got as Record<string, unknown>
    const w = want as Record<string, unknown>
    for (const key of Object.keys(w)) sameConfig(t, g[key], w[key], `${path}.${key}`)
    for (const key of Object.keys(g)) {
      if (!Object.hasOwn(w, key) && !isDefault(g[key])) t.fail(`${path}.${key}: unexpected ${JSON.stringify(g[key])}`)
    }
    return
  }
  t.equal(got, want, path)
}

const configJson = (text: string, name: string): Record<string, unknown> =>
  JSON.parse(modelConfigToJson(parseModelConfig(text, { file: 'config.pbtxt', modelName: name }))) as Record<string, unknown>

t.test('ModelConfig: the worker\'s JSON round-trips every field through the wire', async t => {
  const fixture = readFileSync(join(PACKAGE_ROOT, 'test', 'fixtures', 'model-configs', 'full', 'config.pbtxt'), 'utf8')
  const full = configJson(fixture, 'full')
  const back = configViaWire(full)
  sameConfig(t, back, full, 'config')
  t.same(back.dynamic_batching, full.dynamic_batching, 'uint64 map keys, queue policies')
  t.same(back.model_metrics, full.model_metrics, 'double buckets')
  t.same(back.version_policy, { latest: { num_versions: 2 } }, 'oneof members')

  const sequence = configJson(`
    backend: "b"
    max_batch_size: 4
    sequence_batching {
      direct { max_queue_delay_microseconds: 100 minimum_slot_utilization: 0.5 }
      max_sequence_idle_microseconds: 5000000
      control_input [
        { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
        { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
        { name: "CORRID" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } }
      ]
      state { input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_FP32 dims: [ -1 ]
              initial_state { data_type: TYPE_FP32 dims: [ 1 ] data_file: "init.bin" name: "init" } }
      iterative_sequence: true
    }
    instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] passive: true host_policy: "p"
      rate_limiter { resources [ { name: "R" global: true count: 2 } ] priority: 3 }
      secondary_devices [ { kind: KIND_NVDLA device_id: 1 } ] } ]
    optimization { cuda { graphs: true graph_spec [ { batch_size: 2 input { key: "X" value { dim: [ 3 ] } }
      graph_lower_bound { batch_size: 1 input { key: "X" value { dim: [ 1 ] } } } } ] } priority: PRIORITY_MAX }
  `, 'seq')
  sameConfig(t, configViaWire(sequence), sequence, 'sequence config')

  const ensemble = configJson(`
    platform: "ensemble"
    input { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }
    output { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }
    version_policy { specific { versions: [ 1, 3 ] } }
    ensemble_scheduling {
      step [
        { model_name: "pre" model_version: -1 input_map { key: "X" value: "IN" } output_map { key: "Y" value: "mid" } },
        { model_name: "post" input_map { key: "X" value: "mid" } output_map { key: "Y" value: "OUT" } }
      ]
      max_inflight_requests: 8
    }
  `, 'ens')
  const ensembleBack = configViaWire(ensemble)
  t.same((ensembleBack.ensemble_scheduling as Record<string, unknown>).max_inflight_responses, 8,
    'the older spelling of ModelEnsembling field 2 lands in the field')
  const { max_inflight_requests: _old, ...rest } = ensemble.ensemble_scheduling as Record<string, unknown>
  sameConfig(t, ensembleBack, { ...ensemble, ensemble_scheduling: { ...rest, max_inflight_responses: 8 } }, 'ensemble config')
})

t.test('statistics, metadata and index JSON become their messages', async t => {
  const duration = (count: number, ns: number | bigint): { count: number, ns: number | bigint } => ({ count, ns })
  const stats = {
    model_stats: [{
      name: 'simple',
      version: '1',
      last_inference: 1700000000000,
      inference_count: 8,
      execution_count: 2,
      inference_stats: {
        success: duration(2, 123), fail: duration(0, 0), queue: duration(2, 10), compute_input: duration(2, 1),
        compute_infer: duration(2, 100), compute_output: duration(2, 2), cache_hit: duration(0, 0), cache_miss: duration(0, 0)
      },
      response_stats: { 0: { compute_infer: duration(1, 5), success: duration(1, 6), cancel: duration(0, 0) } },
      batch_stats: [{ batch_size: 2, compute_input: duration(1, 1), compute_infer: duration(1, 2), compute_output: duration(1, 3) }],
      memory_usage: [{ type: 'GPU', id: 0, byte_size: 1024 }]
    }]
  }
  const method = service.ModelStatistics as grpc.MethodDefinition<unknown, unknown>
  const back = method.responseDeserialize(method.responseSerialize(modelStatisticsToMessage(stats))) as typeof stats
  t.same(back.model_stats[0]?.inference_stats, stats.model_stats[0]?.inference_stats)
  t.same(back.model_stats[0]?.batch_stats, stats.model_stats[0]?.batch_stats)
  t.same(back.model_stats[0]?.memory_usage, stats.model_stats[0]?.memory_usage)
  t.same(back.model_stats[0]?.response_stats, { 0: { compute_infer: duration(1, 5), success: duration(1, 6), cancel: duration(0, 0) } })
  t.same({ ...back.model_stats[0], inference_stats: 0, batch_stats: 0, memory_usage: 0, response_stats: 0 },
    { ...stats.model_stats[0], inference_stats: 0, batch_stats: 0, memory_usage: 0, response_stats: 0 })

  const exact = modelStatisticsToMessage({
    model_stats: [{
      name: 'a', version: '1', inference_count: '18446744073709551615', inference_stats: { success: { count: 1, ns: 2n ** 60n } }
    }]
  })
  const exactBack = method.responseDeserialize(method.responseSerialize(exact)) as { model_stats: Array<Record<string, any>> }
  t.equal(exactBack.model_stats[0]?.inference_count, 2n ** 64n - 1n, 'decimal strings stay exact')
  t.equal(exactBack.model_stats[0]?.inference_stats.success.ns, 2n ** 60n, 'bigints stay exact')

  const metadata = {
    name: 'simple',
    versions: ['1', '2'],
    platform: 'onnxruntime_onnx',
    inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [-1, 16] }],
    outputs: [{ name: 'OUTPUT0', datatype: 'BYTES', shape: [] }]
  }
  const mm = service.ModelMetadata as grpc.MethodDefinition<unknown, unknown>
  t.same(mm.responseDeserialize(mm.responseSerialize(modelMetadataToMessage(metadata))), metadata)

  const server = { name: 'flotilla', version: '0.1.0', extensions: ['model_repository', 'statistics'] }
  const sm = service.ServerMetadata as grpc.MethodDefinition<unknown, unknown>
  t.same(sm.responseDeserialize(sm.responseSerialize(serverMetadataToMessage(server))), server)

  const index = [
    { name: 'broken', state: 'UNAVAILABLE', reason: 'load failed' },
    { name: 'simple', version: '1', state: 'READY' },
    { name: 'never_loaded' }
  ]
  const ri = service.RepositoryIndex as grpc.MethodDefinition<unknown, unknown>
  t.same(ri.responseDeserialize(ri.responseSerialize(repositoryIndexToMessage(index))), {
    models: [
      { name: 'broken', version: '', state: 'UNAVAILABLE', reason: 'load failed' },
      { name: 'simple', version: '1', state: 'READY', reason: '' },
      { name: 'never_loaded', version: '', state: '', reason: '' }
    ]
  })

  const internal = (message: string): { code: ErrorCode, message: string } =>
    ({ code: 'FLT_ERR_INTERNAL', message: `internal error: ${message}` })
  throwsCoded(t, () => repositoryIndexToMessage({}), internal('the repository index must be a JSON array'))
  throwsCoded(t, () => modelMetadataToMessage({ name: 3 }), internal("model metadata: 'name' must be a string, got number"))
  throwsCoded(t, () => modelMetadataToMessage([]), internal('model metadata must be a JSON object, got an array'))
  throwsCoded(t, () => serverMetadataToMessage({ extensions: [1] }), internal("server metadata: 'extensions[0]' must be a string"))
  throwsCoded(t, () => modelStatisticsToMessage({ model_stats: [{ inference_count: 1.5 }] }),
    internal('model_stats[0].inference_count must be an integer, got number'))
  throwsCoded(t, () => modelStatisticsToMessage({ model_stats: {} }), internal("model statistics: 'model_stats' must be an array"))
  throwsCoded(t, () => modelConfigToMessage('x'), internal('model configuration must be a JSON object, got string'))
})

t.test('repository requests become the HTTP API\'s bodies, with Triton\'s gRPC rules', async t => {
  t.same(repositoryIndexRequestToJson({ ready: true }), { ready: true })
  t.same(repositoryIndexRequestToJson({}), { ready: false })
  unsupported(t, () => repositoryIndexRequestToJson({ repository_name: 'other' }))

  t.same(loadRequestToJson({ model_name: 'm' }), {})
  t.same(loadRequestToJson({
    model_name: 'm',
    parameters: { config: { string_param: '{"backend":"b"}' }, 'file:1/model.onnx': { bytes_param: bytes(0, 1, 0xff) } }
  }), { parameters: { config: '{"backend":"b"}', 'file:1/model.onnx': 'AAH/' } })
  fails(t, () => loadRequestToJson({ model_name: 'm', parameters: { config: { bytes_param: bytes(1) } } }),
    "invalid value type for load parameter 'config', expected string_param.")
  fails(t, () => loadRequestToJson({ model_name: 'm', parameters: { 'file:1/a': { string_param: 'AAH/' } } }),
    "invalid value type for load parameter 'file:1/a', expected bytes_param.")
  fails(t, () => loadRequestToJson({ model_name: 'm', parameters: { other: { bool_param: true } } }),
    "unrecognized load parameter 'other'.")
  unsupported(t, () => loadRequestToJson({ repository_name: 'r', model_name: 'm' }))

  // Through the wire: decoded oneofs are recognised the same way.
  const load = service.RepositoryModelLoad as grpc.MethodDefinition<unknown, unknown>
  const decoded = load.requestDeserialize(load.requestSerialize({ model_name: 'm', parameters: { config: { string_param: '{}' } } }))
  t.same(loadRequestToJson(decoded as Parameters<typeof loadRequestToJson>[0]), { parameters: { config: '{}' } })

  t.same(unloadRequestToJson({ model_name: 'm' }), {})
  t.same(unloadRequestToJson({ model_name: 'm', parameters: { unload_dependents: { bool_param: true } } }),
    { parameters: { unload_dependents: true } })
  fails(t, () => unloadRequestToJson({ model_name: 'm', parameters: { unload_dependents: { int64_param: 1 } } }),
    "invalid value type for 'unload_dependents' parameter, expected bool_param.")
})

t.test('status codes: HTTP statuses and registry names to gRPC', async t => {
  const table: Array<[number, grpc.status]> = [
    [400, grpc.status.INVALID_ARGUMENT], [404, grpc.status.NOT_FOUND], [503, grpc.status.UNAVAILABLE],
    [500, grpc.status.INTERNAL], [501, grpc.status.UNIMPLEMENTED], [413, grpc.status.RESOURCE_EXHAUSTED],
    [415, grpc.status.UNIMPLEMENTED], [429, grpc.status.RESOURCE_EXHAUSTED], [499, grpc.status.CANCELLED],
    [502, grpc.status.UNAVAILABLE], [504, grpc.status.DEADLINE_EXCEEDED], [401, grpc.status.UNAUTHENTICATED],
    [403, grpc.status.PERMISSION_DENIED], [405, grpc.status.UNIMPLEMENTED], [409, grpc.status.ALREADY_EXISTS],
    [431, grpc.status.RESOURCE_EXHAUSTED], [422, grpc.status.INVALID_ARGUMENT], [507, grpc.status.INTERNAL], [200, grpc.status.UNKNOWN]
  ]
  for (const [http, code] of table) t.equal(grpcStatusFromHttp(http), code, `HTTP ${http}`)

  // Every registered code's gRPC name resolves, and agrees with its HTTP status where Triton's table has the pair.
  for (const [code, spec] of Object.entries(errorCodes)) {
    const status = grpcStatusFromName(spec.grpc as GrpcStatusName)
    t.equal(typeof status, 'number', `${code}: ${spec.grpc}`)
    t.equal(grpc.status[status], spec.grpc, `${code}: round trip`)
  }

  t.same(grpcErrorFrom(createError('WRK_ERR_MODEL_NOT_FOUND', 'm')), {
    code: grpc.status.NOT_FOUND, details: "Request for unknown model: 'm' is not found"
  })
  t.same(grpcErrorFrom(new Error('boom')), { code: grpc.status.INTERNAL, details: 'boom' })
  t.same(grpcErrorFrom('odd'), { code: grpc.status.INTERNAL, details: 'odd' })
  t.same(grpcErrorFromHttp(503, '{"error":"Server not ready"}'), { code: grpc.status.UNAVAILABLE, details: 'Server not ready' })
  t.same(grpcErrorFromHttp(502, utf8('bad gateway')), { code: grpc.status.UNAVAILABLE, details: 'bad gateway' })
})
