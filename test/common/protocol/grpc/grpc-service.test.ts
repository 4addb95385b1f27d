/**
 * The definitions end to end: a real grpc-js server on 127.0.0.1 with a tiny fake implementation of a few RPCs, the
 * health service and reflection, called with createInferenceClient / createHealthClient and with a reflection client
 * built from @grpc/reflection's own protos, as grpcurl would call it.
 */
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import descriptor from 'protobufjs/ext/descriptor/index.js'
import t, { type Test } from 'tap'
import { createError, isFlotillaError } from '../../../../common/errors.ts'
import { BytesData } from '../../../../common/protocol/bytes-data.ts'
import {
  decodeModelInferRequest, decodeModelInferResponse, encodeModelInferRequest, encodeModelInferResponse, grpcErrorFrom,
  modelConfigToMessage
} from '../../../../common/protocol/grpc/grpc-codec.ts'
import {
  GRPC_MESSAGE_SIZE_OPTIONS, type HealthServiceHandlers, type InferenceServiceHandlers, addHealthService,
  addInferenceService, addReflection, callUnary, createHealthClient, createInferenceClient
} from '../../../../common/protocol/grpc/grpc-service.ts'
import {
  type ModelInferRequestMessage, type ModelStreamInferResponseMessage
} from '../../../../common/protocol/grpc/messages.ts'
import { type InferRequest, type InferResponse, type Tensor } from '../../../../common/protocol/types.ts'
import { elementsOf } from '../../../helpers/bytes-data.ts'

/** The fake model: echoes every input as an output named OUT_<input>; model 'missing' does not exist. */
function infer (msg: ModelInferRequestMessage): InferResponse {
  const { modelName, modelVersion, request } = decodeModelInferRequest(msg)
  if (modelName === 'missing') throw createError('WRK_ERR_MODEL_NOT_FOUND', modelName)
  const response: InferResponse = {
    model_name: modelName,
    model_version: modelVersion === '' ? '1' : modelVersion,
    outputs: request.inputs.map(i => ({ ...i, name: `OUT_${i.name}` }))
  }
  if (request.id !== undefined) response.id = request.id
  return response
}

const handlers: Partial<InferenceServiceHandlers> = {
  ServerLive: (_call, callback) => callback(null, { live: true }),
  ModelInfer: (call, callback) => {
    try {
      callback(null, encodeModelInferResponse(infer(call.request)))
    } catch (err) {
      callback(grpcErrorFrom(err))
    }
  },
  ModelStreamInfer: (call) => {
    // Triton's default stream behaviour: a failed request is answered in-band and the stream stays open.
    call.on('data', (msg: ModelInferRequestMessage) => {
      let answer: ModelStreamInferResponseMessage
      try {
        answer = { infer_response: encodeModelInferResponse(infer(msg)) }
      } catch (err) {
        answer = { error_message: isFlotillaError(err) ? err.message : String(err) }
      }
      call.write(answer)
    })
    call.on('end', () => call.end())
  },
  ModelConfig: (call, callback) => {
    callback(null, modelConfigToMessage({
      name: call.request.name,
      max_batch_size: 8,
      input: [{ name: 'IN', data_type: 'TYPE_FP32', format: 'FORMAT_NONE', dims: [-1, 3] }],
      dynamic_batching: { max_queue_delay_microseconds: 100, priority_queue_policy: { 2: { timeout_action: 'DELAY' } } }
    }))
  }
}

const healthHandlers: HealthServiceHandlers = {
  Check: (call, callback) => {
    if (call.request.service === '' || call.request.service === undefined) callback(null, { status: 'SERVING' })
    else callback({ code: grpc.status.NOT_FOUND, details: 'unknown service' })
  },
  Watch: (call) => {
    call.write({ status: 'NOT_SERVING' })
    call.write({ status: 'SERVING' })
    call.end()
  }
}

async function startServer (t: Test): Promise<string> {
  const server = new grpc.Server(GRPC_MESSAGE_SIZE_OPTIONS)
  // camelCase names work as with proto-loader services: register one handler that way.
  const { ServerLive, ...rest } = handlers
  addInferenceService(server, { ...rest, serverLive: ServerLive } as Partial<InferenceServiceHandlers>)
  addHealthService(server, healthHandlers)
  addReflection(server)
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => err !== null ? reject(err) : resolve(p))
  })
  t.teardown(() => new Promise<void>(resolve => server.tryShutdown(() => resolve())))
  return `127.0.0.1:${port}`
}

/** The error a call fails with. */
async function rejection (call: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await call
  } catch (err) {
    return err as grpc.ServiceError
  }
  throw new Error('expected the call to fail')
}

t.test('inference service: unary, streaming, errors, unimplemented RPCs', async t => {
  const address = await startServer(t)
  const client = createInferenceClient(address)
  t.teardown(() => client.close())

  t.same(await callUnary(client.ServerLive.bind(client), {}), { live: true }, 'a plain RPC, handler registered in camelCase')
  t.equal(typeof (client as unknown as Record<string, unknown>).modelInfer, 'function', 'camelCase client aliases exist')

  const request: InferRequest = {
    id: 'req-7',
    parameters: { sequence_id: 9, sequence_start: true },
    inputs: [
      { name: 'A', datatype: 'FP32', shape: [2, 2], data: new Float32Array([1, 2, 3, 4]) },
      { name: 'S', datatype: 'BYTES', shape: [2], data: BytesData.from([new Uint8Array([0xff]), new Uint8Array(0)]) },
      { name: 'I', datatype: 'INT64', shape: [1], data: new BigInt64Array([-(2n ** 62n)]) }
    ]
  }
  for (const contents of [false, true]) {
    const message = await callUnary(client.ModelInfer.bind(client), encodeModelInferRequest('echo', '', request, { contents }))
    const response = decodeModelInferResponse(message)
    t.equal(response.id, 'req-7', `contents=${contents}: id echoed`)
    t.equal(response.model_version, '1')
    t.same(response.outputs.map(o => o.name), ['OUT_A', 'OUT_S', 'OUT_I'])
    t.same(Array.from((response.outputs[0] as Tensor).data as Float32Array), [1, 2, 3, 4])
    t.same(elementsOf((response.outputs[1] as Tensor).data).map(e => Array.from(e)), [[0xff], []])
    t.same(Array.from((response.outputs[2] as Tensor).data as BigInt64Array), [-(2n ** 62n)])
    t.equal(message.raw_output_contents?.length, 3, 'outputs travel raw')
  }

  // Past grpc-js's default 4 MiB receive limit, both ways.
  const big = new Float32Array(1536 * 1024) // 6 MiB
  big[big.length - 1] = 42
  const bigResponse = decodeModelInferResponse(await callUnary(client.ModelInfer.bind(client),
    encodeModelInferRequest('echo', '', { parameters: {}, inputs: [{ name: 'X', datatype: 'FP32', shape: [big.length], data: big }] })))
  t.equal(((bigResponse.outputs[0] as Tensor).data as Float32Array)[big.length - 1], 42, '6 MiB each way')

  const notFound = await rejection(callUnary(client.ModelInfer.bind(client), encodeModelInferRequest('missing', '', request)))
  t.equal(notFound?.code, grpc.status.NOT_FOUND, 'the registry\'s gRPC status')
  t.equal(notFound?.details, "Request for unknown model: 'missing' is not found", 'Triton\'s message')

  const noData = { model_name: 'echo', inputs: [{ name: 'A', datatype: 'FP32', shape: [1] }] }
  const bad = await rejection(callUnary(client.ModelInfer.bind(client), noData))
  t.equal(bad?.code, grpc.status.INVALID_ARGUMENT)
  t.equal(bad?.details, "unable to find data for input tensor 'A' for model 'echo' in request.")

  const unimplemented = await rejection(callUnary(client.RepositoryIndex.bind(client), { ready: true }))
  t.equal(unimplemented?.code, grpc.status.UNIMPLEMENTED, 'RPCs without a handler answer UNIMPLEMENTED')

  const config = await callUnary(client.ModelConfig.bind(client), { name: 'm' })
  t.match(config.config, {
    name: 'm',
    max_batch_size: 8,
    input: [{ name: 'IN', data_type: 'TYPE_FP32', dims: [-1, 3], optional: false }],
    dynamic_batching: { max_queue_delay_microseconds: 100, priority_queue_policy: { 2: { timeout_action: 'DELAY', max_queue_size: 0 } } }
  }, 'enums by name, 64-bit integers as numbers, defaults filled')

  // ModelStreamInfer: responses in order, a failed request answered in-band, the stream still usable after it.
  const stream = client.ModelStreamInfer()
  const answers: ModelStreamInferResponseMessage[] = []
  const done = new Promise<void>((resolve, reject) => {
    stream.on('data', (m: ModelStreamInferResponseMessage) => answers.push(m))
    stream.on('end', resolve)
    stream.on('error', reject)
  })
  stream.write(encodeModelInferRequest('echo', '', { id: 'a', parameters: {}, inputs: [request.inputs[0] as Tensor] }))
  stream.write(encodeModelInferRequest('missing', '', { id: 'b', parameters: {}, inputs: [request.inputs[0] as Tensor] }))
  stream.write(encodeModelInferRequest('echo', '', { id: 'c', parameters: {}, inputs: [request.inputs[1] as Tensor] }))
  stream.end()
  await done
  t.equal(answers.length, 3)
  t.equal(answers[0]?.infer_response?.id, 'a')
  t.equal(answers[0]?.error_message, '', 'no error on success')
  t.equal(answers[1]?.error_message, "Request for unknown model: 'missing' is not found")
  t.equal(answers[1]?.infer_response, null, 'no response with the error')
  const third = decodeModelInferResponse(answers[2]?.infer_response as NonNullable<ModelStreamInferResponseMessage['infer_response']>)
  t.same(elementsOf((third.outputs[0] as Tensor).data).map(e => Array.from(e)), [[0xff], []])
})

t.test('health service: Check and Watch', async t => {
  const address = await startServer(t)
  const health = createHealthClient(address)
  t.teardown(() => health.close())
  t.same(await callUnary(health.Check.bind(health), {}), { status: 'SERVING' })
  const unknown = await rejection(callUnary(health.Check.bind(health), { service: 'other' }))
  t.equal(unknown?.code, grpc.status.NOT_FOUND)
  const statuses: string[] = []
  await new Promise<void>((resolve, reject) => {
    const watch = health.Watch({})
    watch.on('data', (m: { status: string }) => statuses.push(m.status))
    watch.on('end', resolve)
    watch.on('error', reject)
  })
  t.same(statuses, ['NOT_SERVING', 'SERVING'])
})

interface ReflectionResponse {
  list_services_response?: { service: Array<{ name: string }> }
  file_descriptor_response?: { file_descriptor_proto: Buffer[] }
  error_response?: { error_code: number, error_message: string }
}

/** Sends reflection requests over one ServerReflectionInfo stream, as grpcurl does, and collects the answers. */
async function reflect (address: string, version: 'v1' | 'v1alpha', requests: object[]): Promise<ReflectionResponse[]> {
  const require = createRequire(import.meta.url)
  const protoPath = join(dirname(require.resolve('@grpc/reflection')), '..', 'proto', 'grpc', 'reflection', version, 'reflection.proto')
  const definition = protoLoader.loadSync(protoPath, { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true })
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    grpc: { reflection: Record<string, { ServerReflection: grpc.ServiceClientConstructor }> }
  }
  const Client = loaded.grpc.reflection[version]?.ServerReflection as grpc.ServiceClientConstructor
  const client = new Client(address, grpc.credentials.createInsecure())
  try {
    type Stream = grpc.ClientDuplexStream<object, ReflectionResponse>
    const call = (client as unknown as { ServerReflectionInfo: () => Stream }).ServerReflectionInfo()
    const answers: ReflectionResponse[] = []
    const done = new Promise<void>((resolve, reject) => {
      call.on('data', (m: ReflectionResponse) => answers.push(m))
      call.on('end', resolve)
      call.on('error', reject)
    })
    for (const r of requests) call.write(r)
    call.end()
    await done
    return answers
  } finally {
    client.close()
  }
}

function fileNames (answer: ReflectionResponse | undefined): string[] {
  return (answer?.file_descriptor_response?.file_descriptor_proto ?? [])
    .map(b => (descriptor.FileDescriptorProto.decode(b) as unknown as { name: string }).name)
}

t.test('reflection (v1alpha and v1): list services, describe a symbol, fetch a file', async t => {
  const address = await startServer(t)
  for (const version of ['v1alpha', 'v1'] as const) {
    const [list, byService, byMessage, byFile, byMethod, missing] = await reflect(address, version, [
      { list_services: '*' },
      { file_containing_symbol: 'inference.GRPCInferenceService' },
      { file_containing_symbol: 'inference.ModelConfig' },
      { file_by_filename: 'health.proto' },
      { file_containing_symbol: 'grpc.health.v1.Health.Check' },
      { file_containing_symbol: 'inference.NoSuchThing' }
    ])
    t.same(list?.list_services_response?.service.map(s => s.name).sort(), ['grpc.health.v1.Health', 'inference.GRPCInferenceService'],
      `${version}: both services listed`)
    t.same(fileNames(byService).sort(), ['grpc_service.proto', 'model_config.proto'], `${version}: the service's file and its import`)
    t.same(fileNames(byMessage), ['model_config.proto'], `${version}: a config message's file alone`)
    t.same(fileNames(byFile), ['health.proto'], `${version}: by file name`)
    t.same(fileNames(byMethod), ['health.proto'], `${version}: by method name`)
    t.equal(missing?.error_response?.error_code, grpc.status.NOT_FOUND, `${version}: unknown symbols are NOT_FOUND`)

    const service = (byService?.file_descriptor_response?.file_descriptor_proto ?? [])
      .map(b => descriptor.FileDescriptorProto.toObject(descriptor.FileDescriptorProto.decode(b)) as Record<string, any>)
      .find(f => f.name === 'grpc_service.proto')
    const method = service?.service[0].method.find((m: { name: string }) => m.name === 'ModelStreamInfer')
    t.same(method, {
      name: 'ModelStreamInfer', inputType: '.inference.ModelInferRequest', outputType: '.inference.ModelStreamInferResponse',
      clientStreaming: true, serverStreaming: true
    }, `${version}: method descriptors as protoc writes them`)
  }
})
