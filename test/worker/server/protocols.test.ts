/**
 * One worker, three wire forms: every datatype through HTTP JSON, HTTP binary (Triton's binary tensor extension) and
 * gRPC gives the same answer; compressed bodies and answers; and every malformed case gets its named error while
 * the worker keeps serving.
 */
import { gzipSync, deflateSync, createGzip } from 'node:zlib'
import { Readable } from 'node:stream'
import * as grpc from '@grpc/grpc-js'
import t, { type Test } from 'tap'
import { request as undiciRequest } from 'undici'
import { silentLogger } from '../../../common/logger.ts'
import {
  decodeHttpInferResponse, encodeHttpInferRequest, INFERENCE_HEADER_CONTENT_LENGTH
} from '../../../common/protocol/binary-codec.ts'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { DATATYPE_NAMES, float32ToBf16Bits, float32ToFp16Bits } from '../../../common/protocol/datatypes.ts'
import { decodeModelInferResponse, encodeModelInferRequest } from '../../../common/protocol/grpc/grpc-codec.ts'
import { callUnary, createHealthClient, createInferenceClient, type InferenceClient } from '../../../common/protocol/grpc/grpc-service.ts'
import { type ModelInferRequestMessage, type ModelStreamInferResponseMessage } from '../../../common/protocol/grpc/messages.ts'
import { decodeInferResponse, encodeInferRequest } from '../../../common/protocol/json-codec.ts'
import { type DataType, type InferRequest, type InferResponse, type Tensor, type TensorData } from '../../../common/protocol/types.ts'
import { startWorker, type RunningWorker } from '../../../worker/main.ts'
import { get } from '../../helpers/http.ts'
import { tensorsPbtxt } from '../../helpers/model-repo.ts'

const CONFIG_TYPE: Record<DataType, string> = {
  BOOL: 'TYPE_BOOL', UINT8: 'TYPE_UINT8', UINT16: 'TYPE_UINT16', UINT32: 'TYPE_UINT32', UINT64: 'TYPE_UINT64',
  INT8: 'TYPE_INT8', INT16: 'TYPE_INT16', INT32: 'TYPE_INT32', INT64: 'TYPE_INT64', FP16: 'TYPE_FP16',
  BF16: 'TYPE_BF16', FP32: 'TYPE_FP32', FP64: 'TYPE_FP64', BYTES: 'TYPE_STRING'
}

/**
 * `all_types`: one optional input and one output per datatype (IN_<T> echoed as OUT_<T>, when given), any length;
 * `raw`: one FP32 input of rows of 4.
 */
function repository (t: Test): string {
  const config = (name: string, types: readonly DataType[], dims: string): string => [
    `name: "${name}"`, 'backend: "identity"', 'max_batch_size: 0',
    tensorsPbtxt('input', types.map((d) => ({ name: `IN_${d}`, dataType: CONFIG_TYPE[d], dims: dims === '' ? [-1] : [-1, 4], optional: types.length > 1 }))),
    tensorsPbtxt('output', types.map((d) => ({ name: `OUT_${d}`, dataType: CONFIG_TYPE[d], dims: dims === '' ? [-1] : [-1, 4] })))
  ].join('\n')
  return t.testdir({
    all_types: { 'config.pbtxt': config('all_types', DATATYPE_NAMES, ''), 1: {} },
    raw: { 'config.pbtxt': config('raw', ['FP32'], 'rows'), 1: {} }
  })
}

async function worker (t: Test, extra: { maxBodyBytes?: number, grpcMaxMessageBytes?: number } = {}): Promise<RunningWorker> {
  const w = await startWorker({ modelRepository: repository(t), httpPort: 0, grpcPort: 0, metricsPort: -1, logger: silentLogger(), shutdownQuietMs: 0, ...extra })
  t.teardown(() => w.close())
  return w
}

function client (t: Test, w: RunningWorker): InferenceClient {
  const c = createInferenceClient(`127.0.0.1:${w.grpcPort}`)
  t.teardown(() => { c.close() })
  return c
}

/** Three elements of each datatype, with its edges (and NaN, -0, Infinity for floats). */
function tensorOf (d: DataType, utf8Only: boolean): Tensor {
  const shape = [3]
  const data = ((): TensorData => {
    switch (d) {
      case 'BOOL': return new Uint8Array([1, 0, 1])
      case 'UINT8': return new Uint8Array([0, 255, 7])
      case 'UINT16': return new Uint16Array([0, 65535, 300])
      case 'UINT32': return new Uint32Array([0, 4294967295, 70000])
      case 'UINT64': return new BigUint64Array([0n, 2n ** 53n - 1n, 12345n])
      case 'INT8': return new Int8Array([-128, 127, 0])
      case 'INT16': return new Int16Array([-32768, 32767, -1])
      case 'INT32': return new Int32Array([-(2 ** 31), 2 ** 31 - 1, 5])
      case 'INT64': return new BigInt64Array([-(2n ** 53n) + 1n, 2n ** 53n - 1n, -7n])
      case 'FP16': return new Uint16Array([float32ToFp16Bits(1.5), float32ToFp16Bits(-65504), float32ToFp16Bits(0)])
      case 'BF16': return new Uint16Array([float32ToBf16Bits(3.25), float32ToBf16Bits(-1e30), float32ToBf16Bits(0.5)])
      case 'FP32': return new Float32Array([0.1, -0, Infinity])
      case 'FP64': return new Float64Array([Math.PI, -1e-300, -Infinity])
      case 'BYTES': return utf8Only
        ? BytesData.from(['héllo', '', 'zz'])
        : BytesData.from([new Uint8Array([0xff, 0xfe, 0x00]), new Uint8Array(0), 'ok'])
    }
  })()
  return { name: `IN_${d}`, datatype: d, shape, data }
}

function allTypesRequest (utf8Only: boolean): InferRequest {
  return { id: 'r1', parameters: {}, inputs: DATATYPE_NAMES.map((d) => tensorOf(d, utf8Only)) }
}

/** What a response carries, comparable across wire forms: per output, datatype, shape and elements as plain values. */
function comparable (response: InferResponse): unknown {
  return {
    id: response.id,
    model: `${response.model_name}:${response.model_version}`,
    outputs: Object.fromEntries(response.outputs.map((o) => [o.name, {
      datatype: o.datatype,
      shape: o.shape,
      data: o.data instanceof BytesData
        ? o.data.toArray().map((b) => Buffer.from(b).toString('hex'))
        : Array.from(o.data as ArrayLike<number | bigint>, String)
    }]))
  }
}

async function postInfer (url: string, body: Buffer | string, headers: Record<string, string> = {}): Promise<{ status: number, headers: Record<string, string | string[] | undefined>, body: Buffer }> {
  const res = await undiciRequest(url, { method: 'POST', body, headers })
  return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) }
}

function errorOf (body: Buffer): string {
  return (JSON.parse(body.toString()) as { error: string }).error
}

t.test('every datatype: HTTP JSON, HTTP binary and gRPC (raw and typed contents) give the same answer', async (t) => {
  const w = await worker(t)
  const url = `${w.url}/v2/models/all_types/infer`
  const c = client(t, w)

  for (const utf8Only of [true, false]) {
    const request = allTypesRequest(utf8Only)
    const answers: Record<string, unknown> = {}
    if (utf8Only) {
      // JSON strings are UTF-8: non-UTF-8 BYTES elements exist only in the binary forms.
      const json = await postInfer(url, encodeInferRequest(request))
      t.equal(json.status, 200, json.body.toString())
      answers.json = comparable(decodeInferResponse(json.body))
    }
    const binary = encodeHttpInferRequest(request, { binaryInputs: true, binaryOutputs: true })
    const bin = await postInfer(url, binary.body, { [INFERENCE_HEADER_CONTENT_LENGTH]: String(binary.headerLength) })
    t.equal(bin.status, 200, bin.body.toString())
    t.equal(bin.headers['content-type'], 'application/octet-stream')
    const headerLength = Number(bin.headers[INFERENCE_HEADER_CONTENT_LENGTH])
    t.ok(headerLength > 0 && headerLength < bin.body.length, 'the answer is JSON then binary outputs')
    answers.binary = comparable(decodeHttpInferResponse(bin.body, headerLength))

    const raw = await callUnary(c.ModelInfer.bind(c), encodeModelInferRequest('all_types', '', request))
    answers.grpcRaw = comparable(decodeModelInferResponse(raw))
    t.equal(raw.raw_output_contents?.length, DATATYPE_NAMES.length, 'gRPC answers in raw_output_contents, as Triton')
    const withContents = { ...request, inputs: request.inputs.filter((i) => i.datatype !== 'FP16' && i.datatype !== 'BF16') }
    const typed = await callUnary(c.ModelInfer.bind(c), encodeModelInferRequest('all_types', '1', withContents, { contents: true }))
    const typedRaw = await callUnary(c.ModelInfer.bind(c), encodeModelInferRequest('all_types', '1', withContents))
    t.strictSame(comparable(decodeModelInferResponse(typed)), comparable(decodeModelInferResponse(typedRaw)), 'typed contents = raw contents')

    const expected = comparable({ id: 'r1', model_name: 'all_types', model_version: '1', outputs: request.inputs.map((i) => ({ ...i, name: i.name.replace('IN_', 'OUT_') })) })
    for (const [form, answer] of Object.entries(answers)) t.strictSame(answer, expected, `${form} (utf8 only: ${utf8Only})`)
  }
})

t.test('zero-element tensors, and a binary request and its JSON twin give the same bytes out', async (t) => {
  const w = await worker(t)
  const url = `${w.url}/v2/models/all_types/infer`
  const request = allTypesRequest(true)
  const json = await postInfer(url, encodeInferRequest(request))
  const binary = encodeHttpInferRequest(request, { binaryInputs: true, binaryOutputs: false })
  const twin = await postInfer(url, binary.body, { [INFERENCE_HEADER_CONTENT_LENGTH]: String(binary.headerLength) })
  t.equal(twin.status, 200)
  t.equal(twin.headers['content-type'], 'application/json; charset=utf-8', 'JSON outputs asked for: a JSON answer')
  t.equal(twin.body.toString('hex'), json.body.toString('hex'), 'byte for byte')

  const empty: InferRequest = { parameters: {}, inputs: DATATYPE_NAMES.map((d) => ({ ...tensorOf(d, true), shape: [0], data: tensorOf(d, true).data.slice(0, 0) as TensorData })) }
  const emptyBinary = encodeHttpInferRequest(empty, { binaryInputs: true, binaryOutputs: true })
  t.equal(emptyBinary.headerLength, undefined, 'no binary section to follow the JSON: binary_data_size 0 each, no header')
  const res = await postInfer(url, emptyBinary.body)
  t.equal(res.status, 200, res.body.toString())
  const decoded = decodeHttpInferResponse(res.body, res.headers[INFERENCE_HEADER_CONTENT_LENGTH] === undefined ? undefined : Number(res.headers[INFERENCE_HEADER_CONTENT_LENGTH]))
  t.ok(decoded.outputs.every((o) => o.shape[0] === 0 && o.data.length === 0), 'every output is empty')
  t.equal(res.headers[INFERENCE_HEADER_CONTENT_LENGTH], undefined, 'nothing binary follows: a pure JSON answer, as Triton')

  const c = client(t, w)
  const grpcEmpty = decodeModelInferResponse(await callUnary(c.ModelInfer.bind(c), encodeModelInferRequest('all_types', '', empty)))
  t.ok(grpcEmpty.outputs.every((o) => o.shape[0] === 0 && o.data.length === 0), 'and through gRPC')
})

t.test("Triton's raw binary request: the whole body is the single input", async (t) => {
  const w = await worker(t)
  const values = new Float32Array([1, 2, 3, 4, 5, 6, 7, 8])
  const res = await postInfer(`${w.url}/v2/models/raw/infer`, Buffer.from(values.buffer), { [INFERENCE_HEADER_CONTENT_LENGTH]: '0' })
  t.equal(res.status, 200, res.body.toString())
  const decoded = decodeHttpInferResponse(res.body, Number(res.headers[INFERENCE_HEADER_CONTENT_LENGTH]))
  t.strictSame(decoded.outputs[0]?.shape, [2, 4], 'the variable dimension deduced from the body')
  t.strictSame(Array.from(decoded.outputs[0]!.data as Float32Array), Array.from(values))
  const multi = await postInfer(`${w.url}/v2/models/all_types/infer`, Buffer.alloc(4), { [INFERENCE_HEADER_CONTENT_LENGTH]: '0' })
  t.equal(multi.status, 400)
  t.match(errorOf(multi.body), /Raw request must only have 1 input/)
})

t.test('compressed requests and answers, as tritonclient sends and asks for them', async (t) => {
  const w = await worker(t, { maxBodyBytes: 1024 * 1024 })
  const url = `${w.url}/v2/models/all_types/infer`
  const request = allTypesRequest(true)
  const plain = await postInfer(url, encodeInferRequest(request))
  const binary = encodeHttpInferRequest(request, { binaryInputs: true, binaryOutputs: true })

  for (const [coding, compress] of [['gzip', gzipSync], ['deflate', deflateSync]] as const) {
    const res = await postInfer(url, compress(Buffer.from(encodeInferRequest(request))), { 'content-encoding': coding })
    t.equal(res.status, 200, `${coding} request`)
    t.equal(res.body.toString('hex'), plain.body.toString('hex'), `${coding}: the same answer`)
    const bin = await postInfer(url, compress(Buffer.from(binary.body)), {
      'content-encoding': coding, [INFERENCE_HEADER_CONTENT_LENGTH]: String(binary.headerLength), 'accept-encoding': coding
    })
    t.equal(bin.status, 200)
    t.equal(bin.headers['content-encoding'], coding, `${coding}: the answer is compressed as asked`)
    const { gunzipSync, inflateSync } = await import('node:zlib')
    const inflated = coding === 'gzip' ? gunzipSync(bin.body) : inflateSync(bin.body)
    const headerLength = Number(bin.headers[INFERENCE_HEADER_CONTENT_LENGTH])
    t.ok(headerLength < inflated.length, 'Inference-Header-Content-Length is the uncompressed JSON length')
    t.strictSame(comparable(decodeHttpInferResponse(inflated, headerLength)), comparable(decodeInferResponse(plain.body)))
  }

  // A zip bomb: 64 MiB of zeros in about 64 KB, against a 1 MiB limit.
  const bomb = await new Promise<Buffer>((resolve) => {
    const chunks: Buffer[] = []
    const gz = createGzip()
    gz.on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve(Buffer.concat(chunks)))
    const zeros = Buffer.alloc(1024 * 1024)
    Readable.from((function * () { for (let i = 0; i < 64; i++) yield zeros })()).pipe(gz)
  })
  const before = process.memoryUsage().rss
  const boom = await postInfer(url, bomb, { 'content-encoding': 'gzip' })
  t.equal(boom.status, 413)
  t.match(errorOf(boom.body), /exceeds the limit of 1048576 bytes; send a smaller request or raise the worker flag --max-body-bytes/)
  t.ok(process.memoryUsage().rss - before < 32 * 1024 * 1024, 'inflating stopped at the limit: no 64 MiB allocation')

  const br = await postInfer(url, Buffer.from('x'), { 'content-encoding': 'br' })
  t.equal(br.status, 415)
  t.equal(br.headers['accept-encoding'], 'gzip, deflate', 'the 415 says which codings would do')
  const corrupt = await postInfer(url, Buffer.from('not gzip at all'), { 'content-encoding': 'gzip' })
  t.equal(corrupt.status, 400)
  t.match(errorOf(corrupt.body), /not valid gzip data/)
  t.equal((await postInfer(url, encodeInferRequest(request))).status, 200, 'still serving')
})

t.test('malformed binary requests: a named 400 each, and the worker keeps serving', async (t) => {
  const w = await worker(t)
  const url = `${w.url}/v2/models/all_types/infer`
  const header = (inputs: unknown[]): string => JSON.stringify({ inputs })
  const f32 = (name: string, size: number, shape = [2]): unknown => ({ name, datatype: 'FP32', shape, parameters: { binary_data_size: size } })
  const send = async (json: string, tail: Buffer, headerLength: string = String(Buffer.byteLength(json))): Promise<string> => {
    const res = await postInfer(url, Buffer.concat([Buffer.from(json), tail]), { [INFERENCE_HEADER_CONTENT_LENGTH]: headerLength })
    t.equal(res.status, 400, res.body.toString())
    return errorOf(res.body)
  }
  t.match(await send(header([f32('IN_FP32', 8)]), Buffer.alloc(4)), /unexpected size for input 'IN_FP32', expecting 4 additional bytes for model 'all_types'/)
  t.match(await send(header([f32('IN_FP32', 8)]), Buffer.alloc(12)), /unexpected additional input data for model 'all_types'/)
  t.match(await send(header([f32('IN_FP32', 6)]), Buffer.alloc(6)), /input byte size mismatch for input 'IN_FP32'.*not a multiple of 4/)
  t.match(await send(header([f32('IN_FP32', 12)]), Buffer.alloc(12)), /input byte size mismatch for input 'IN_FP32'.*Expected 8, got 12/)
  t.match(await send(header([f32('IN_FP32', 8)]), Buffer.alloc(8), '100000'), /inference header size should be in range/)
  t.match(await send(header([{ ...(f32('IN_FP32', 8) as object), data: [1, 2] }]), Buffer.alloc(8)), /Input must set only one of the following fields/)
  const bytes = Buffer.alloc(9)
  bytes.writeUInt32LE(100, 0)
  t.match(await send(header([{ name: 'IN_BYTES', datatype: 'BYTES', shape: [1], parameters: { binary_data_size: 9 } }]), bytes),
    /incomplete string data for inference input 'IN_BYTES'/)
  t.equal((await postInfer(url, encodeInferRequest(allTypesRequest(true)))).status, 200, 'still serving')
})

function grpcCode (err: unknown): { code: number, details: string } {
  const e = err as grpc.ServiceError
  return { code: e.code, details: e.details }
}

t.test('gRPC: every RPC answers as the HTTP side does', async (t) => {
  const w = await worker(t)
  const c = client(t, w)
  t.strictSame(await callUnary(c.ServerLive.bind(c), {}), { live: true })
  t.strictSame(await callUnary(c.ServerReady.bind(c), {}), { ready: true })
  const meta = await callUnary(c.ServerMetadata.bind(c), {})
  t.equal(meta.name, 'flotilla')
  t.strictSame(meta.extensions, (await get(`${w.url}/v2`)).json.extensions)
  t.strictSame(await callUnary(c.ModelReady.bind(c), { name: 'raw', version: '' }), { ready: true })
  const notFound = await callUnary(c.ModelReady.bind(c), { name: 'nope', version: '' }).catch(grpcCode)
  t.strictSame(notFound, { code: grpc.status.NOT_FOUND, details: "Request for unknown model: 'nope' is not found" })
  const badVersion = await callUnary(c.ModelMetadata.bind(c), { name: 'raw', version: 'v1' }).catch(grpcCode)
  t.equal((badVersion as { code: number }).code, grpc.status.INVALID_ARGUMENT)
  t.match((badVersion as { details: string }).details, /failed to get model version from specified version string 'v1'/)

  const metadata = await callUnary(c.ModelMetadata.bind(c), { name: 'raw', version: '' })
  const httpMetadata = (await get(`${w.url}/v2/models/raw`)).json
  t.equal(metadata.name, httpMetadata.name)
  t.strictSame(metadata.versions, httpMetadata.versions)
  t.strictSame(metadata.inputs.map((i) => ({ ...i, shape: i.shape.map(Number) })), httpMetadata.inputs)

  const config = await callUnary(c.ModelConfig.bind(c), { name: 'raw', version: '1' })
  t.equal(config.config.name, 'raw')
  t.equal((config.config as { backend?: string }).backend, 'identity')

  await callUnary(c.ModelInfer.bind(c), encodeModelInferRequest('raw', '', { parameters: {}, inputs: [{ name: 'IN_FP32', datatype: 'FP32', shape: [1, 4], data: new Float32Array(4) }] }))
  const stats = await callUnary(c.ModelStatistics.bind(c), { name: 'raw', version: '' })
  const httpStats = (await get(`${w.url}/v2/models/raw/stats`)).json
  t.equal(stats.model_stats.length, 1)
  t.equal(Number(stats.model_stats[0]!.inference_count), httpStats.model_stats[0].inference_count)
  t.equal(Number(stats.model_stats[0]!.inference_stats?.success?.count), 1, 'the gRPC inference is counted like any other')

  const index = await callUnary(c.RepositoryIndex.bind(c), { repository_name: '', ready: true })
  t.strictSame(index.models.map((m) => `${m.name}:${m.version}:${m.state}`), ['all_types:1:READY', 'raw:1:READY'])
  const load = await callUnary(c.RepositoryModelLoad.bind(c), { repository_name: '', model_name: 'raw', parameters: {} }).catch(grpcCode)
  t.strictSame(load, { code: grpc.status.UNAVAILABLE, details: 'explicit model load / unload is not allowed if polling is enabled' })

  // Features Flotilla does not have answer at once, as Triton does without them.
  t.strictSame(await callUnary(c.SystemSharedMemoryStatus.bind(c), { name: '' }), { regions: {} })
  t.equal((await callUnary(c.SystemSharedMemoryRegister.bind(c), { name: 'r', key: '/k', offset: 0, byte_size: 8 }).catch(grpcCode) as { code: number }).code, grpc.status.UNIMPLEMENTED)
  t.strictSame(await callUnary(c.TraceSetting.bind(c), { settings: {}, model_name: '' }).catch(grpcCode), { code: grpc.status.UNAVAILABLE, details: 'the server does not support trace' })
  t.strictSame(await callUnary(c.LogSettings.bind(c), { settings: {} }).catch(grpcCode), { code: grpc.status.UNAVAILABLE, details: 'the server does not support dynamic logging' })

  const health = createHealthClient(`127.0.0.1:${w.grpcPort}`)
  t.teardown(() => { health.close() })
  t.strictSame(await callUnary(health.Check.bind(health), { service: '' }), { status: 'SERVING' })
  t.equal((await callUnary(health.Check.bind(health), { service: 'nope' }).catch(grpcCode) as { code: number }).code, grpc.status.NOT_FOUND)
})

t.test('gRPC: malformed requests get INVALID_ARGUMENT, an oversized one RESOURCE_EXHAUSTED naming the flag', async (t) => {
  const w = await worker(t, { grpcMaxMessageBytes: 64 * 1024 })
  const c = client(t, w)
  const infer = (msg: ModelInferRequestMessage): Promise<{ code: number, details: string }> =>
    callUnary(c.ModelInfer.bind(c), msg).then(() => ({ code: 0, details: 'ok' }), grpcCode)
  const input = { name: 'IN_FP32', datatype: 'FP32', shape: [2] }
  const cases: Array<[string, ModelInferRequestMessage, number, RegExp]> = [
    ['no data', { model_name: 'all_types', inputs: [input] }, grpc.status.INVALID_ARGUMENT, /unable to find data for input tensor 'IN_FP32'/],
    ['contents and raw mixed', { model_name: 'all_types', inputs: [{ ...input, contents: { fp32_contents: [1, 2] } }], raw_input_contents: [new Uint8Array(8)] },
      grpc.status.INVALID_ARGUMENT, /contents field must not be specified when using raw_input_contents/],
    ['wrong contents field', { model_name: 'all_types', inputs: [{ ...input, contents: { int_contents: [1, 2] } }] }, grpc.status.INVALID_ARGUMENT, /expected datatype 'FP32'|unexpected explicit tensor data/],
    ['raw size mismatch', { model_name: 'all_types', inputs: [input], raw_input_contents: [new Uint8Array(12)] }, grpc.status.INVALID_ARGUMENT, /input byte size mismatch for input 'IN_FP32'/],
    ['wrong datatype for the model', { model_name: 'all_types', inputs: [{ ...input, datatype: 'INT32' }], raw_input_contents: [new Uint8Array(8)] },
      grpc.status.INVALID_ARGUMENT, /data-type is 'INT32', but model 'all_types' expects 'FP32'/],
    ['a -1 in the shape', { model_name: 'all_types', inputs: [{ ...input, shape: [-1] }], raw_input_contents: [new Uint8Array(8)] }, grpc.status.INVALID_ARGUMENT, /./],
    ['unknown model', { model_name: 'nope', inputs: [] }, grpc.status.NOT_FOUND, /Request for unknown model: 'nope' is not found/],
    ['too large', { model_name: 'all_types', inputs: [{ ...input, shape: [32768] }], raw_input_contents: [new Uint8Array(128 * 1024)] },
      grpc.status.RESOURCE_EXHAUSTED, /exceeds the limit of 65536 bytes; send a smaller request or raise the worker flag --grpc-max-message-bytes/]
  ]
  for (const [name, msg, code, details] of cases) {
    const got = await infer(msg)
    t.equal(got.code, code, `${name}: ${got.details}`)
    t.match(got.details, details, name)
  }
  t.equal((await infer(encodeModelInferRequest('all_types', '', allTypesRequest(false)))).code, 0, 'still serving')
})

t.test('gRPC ModelStreamInfer: each message answered with its id; an error answers that message and the stream stays open', async (t) => {
  const w = await worker(t)
  const c = client(t, w)
  const good = (id: string): ModelInferRequestMessage => ({ ...encodeModelInferRequest('raw', '', { parameters: {}, inputs: [{ name: 'IN_FP32', datatype: 'FP32', shape: [1, 4], data: new Float32Array([1, 2, 3, Number(id.slice(1))]) }] }), id })
  const stream = c.ModelStreamInfer()
  const answers: ModelStreamInferResponseMessage[] = []
  const done = new Promise<void>((resolve, reject) => {
    stream.on('data', (m: ModelStreamInferResponseMessage) => answers.push(m))
    stream.on('end', resolve)
    stream.on('error', reject)
  })
  stream.write(good('a1'))
  stream.write({ model_name: 'raw', id: 'bad', inputs: [{ name: 'IN_FP32', datatype: 'FP32', shape: [1, 4] }] })
  stream.write({ model_name: 'nope', id: 'nope', inputs: [] })
  stream.write(good('a2'))
  stream.end()
  await done
  t.equal(answers.length, 4, 'every message answered, then the stream ends')
  const byId = new Map(answers.map((a) => [a.infer_response?.id, a]))
  t.equal(byId.get('a1')?.error_message, '')
  t.strictSame(Array.from(decodeModelInferResponse(byId.get('a2')!.infer_response!).outputs[0]!.data as Float32Array), [1, 2, 3, 2])
  t.match(byId.get('bad')?.error_message, /unable to find data for input tensor 'IN_FP32'/)
  t.match(byId.get('nope')?.error_message, /Request for unknown model: 'nope' is not found/)

  // Triton's option: the first error ends the stream with its status.
  const metadata = new grpc.Metadata()
  metadata.set('triton_grpc_error', 'true')
  const strict = c.ModelStreamInfer(metadata)
  const failed = await new Promise<{ code: number, details: string }>((resolve) => {
    strict.on('data', () => {})
    strict.on('error', (err) => { resolve(grpcCode(err)) })
    strict.write({ model_name: 'nope', id: 'x', inputs: [] })
  })
  t.equal(failed.code, grpc.status.NOT_FOUND)
})
