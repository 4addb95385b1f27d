/**
 * The gateway's gRPC front, in front of two real workers (in this process): every call through the same pipeline
 * as HTTP, each ModelInfer balanced on its own over one client connection, streams pinned, answers merged as HTTP
 * merges them, the endpoint named in the response metadata, and errors with Triton's status codes.
 */
import * as grpc from '@grpc/grpc-js'
import t, { type Test } from 'tap'
import { silentLogger } from '../../../common/logger.ts'
import { decodeModelInferResponse, encodeModelInferRequest } from '../../../common/protocol/grpc/grpc-codec.ts'
import { callUnary, createInferenceClient, type InferenceClient } from '../../../common/protocol/grpc/grpc-service.ts'
import { type ModelInferRequestMessage, type ModelStreamInferResponseMessage } from '../../../common/protocol/grpc/messages.ts'
import { hasBalancer } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { startGateway, type RunningGateway } from '../../../gateway/main.ts'
import { startWorker, type RunningWorker } from '../../../worker/main.ts'
import { get } from '../../helpers/http.ts'
import { identityConfig } from '../../helpers/model-repo.ts'

async function worker (t: Test): Promise<RunningWorker> {
  const dir = t.testdir({ echo: { 'config.pbtxt': identityConfig('echo', 'TYPE_FP32', [4], 8), 1: {} } })
  const w = await startWorker({ modelRepository: dir, httpPort: 0, grpcPort: -1, metricsPort: -1, logger: silentLogger(), shutdownQuietMs: 0 })
  t.teardown(() => w.close())
  return w
}

async function gateway (t: Test, workers: readonly RunningWorker[]): Promise<RunningGateway> {
  const lines = ['inference_servers:']
  workers.forEach((w, i) => lines.push(`  - { name: w${i}, host: 127.0.0.1, port: ${w.httpPort}, models: [echo] }`))
  lines.push('load_balancer: { type: round_robin }', 'health_check: { enabled: false }', 'gateway: { http_port: 0, metrics_port: 0 }')
  const config = parseFleetConfig(lines.join('\n') + '\n', { file: 'grpc-fleet.yaml', isKnownStrategy: hasBalancer })
  const g = await startGateway({ config, grpcPort: 0, adminPort: -1, logger: silentLogger() })
  t.teardown(() => g.close())
  return g
}

function client (t: Test, g: RunningGateway): InferenceClient {
  const c = createInferenceClient(`127.0.0.1:${g.grpcPort}`)
  t.teardown(() => { c.close() })
  return c
}

function echoRequest (id: string, value: number): ModelInferRequestMessage {
  return { ...encodeModelInferRequest('echo', '', { parameters: {}, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: new Float32Array([value, 0, 0, value]) }] }), id }
}

/** A unary ModelInfer and the endpoint named in its response metadata. */
function inferWithEndpoint (c: InferenceClient, msg: ModelInferRequestMessage): Promise<{ endpoint: string, values: number[] }> {
  return new Promise((resolve, reject) => {
    let endpoint = ''
    const call = c.ModelInfer(msg, new grpc.Metadata(), (err, response) => {
      if (err !== null) reject(err)
      else resolve({ endpoint, values: Array.from(decodeModelInferResponse(response!).outputs[0]!.data as Float32Array) })
    })
    call.on('metadata', (m: grpc.Metadata) => { endpoint = String(m.get('x-flotilla-endpoint')[0] ?? '') })
  })
}

t.test('ModelInfer over one connection is balanced call by call, each answer naming its server', async (t) => {
  const w0 = await worker(t)
  const w1 = await worker(t)
  const g = await gateway(t, [w0, w1])
  const c = client(t, g)
  const seen: string[] = []
  for (let i = 0; i < 4; i++) {
    const { endpoint, values } = await inferWithEndpoint(c, echoRequest(`r${i}`, i))
    t.strictSame(values, [i, 0, 0, i])
    seen.push(endpoint)
  }
  t.strictSame(new Set(seen), new Set(['w0', 'w1']), 'both servers take calls of one connection')
  t.ok(seen.every((e, i) => i === 0 || e !== seen[i - 1]), `round robin per call, not per connection: ${seen.join(', ')}`)

  const metrics = await get(`http://127.0.0.1:${g.metricsPort}/metrics`)
  t.match(metrics.text, /flotilla_requests_total\{model="echo",endpoint="w0",code="200",protocol="grpc"\} 2/)
})

t.test('metadata, readiness, config, statistics and the index answer as the HTTP front does', async (t) => {
  const w0 = await worker(t)
  const w1 = await worker(t)
  const g = await gateway(t, [w0, w1])
  const c = client(t, g)
  t.strictSame(await callUnary(c.ServerReady.bind(c), {}), { ready: true })
  const meta = await callUnary(c.ServerMetadata.bind(c), {})
  t.strictSame(meta.extensions, (await get(`${g.url}/v2`)).json.extensions)
  t.strictSame(await callUnary(c.ModelReady.bind(c), { name: 'echo', version: '' }), { ready: true })
  const model = await callUnary(c.ModelMetadata.bind(c), { name: 'echo', version: '1' })
  t.strictSame(model.versions, ['1'])
  t.equal((await callUnary(c.ModelConfig.bind(c), { name: 'echo', version: '' })).config.max_batch_size, 8)

  for (let i = 0; i < 3; i++) await callUnary(c.ModelInfer.bind(c), echoRequest(`s${i}`, i))
  const stats = await callUnary(c.ModelStatistics.bind(c), { name: 'echo', version: '' })
  t.equal(Number(stats.model_stats[0]!.inference_stats?.success?.count), 3, 'summed over both workers')
  t.equal(Number((await callUnary(c.ModelStatistics.bind(c), { name: '', version: '' })).model_stats[0]!.inference_count), 3)
  const httpStats = (await get(`${g.url}/v2/models/echo/stats`)).json
  t.equal(httpStats.model_stats[0].inference_stats.success.count, 3, 'the HTTP front merges the same way')

  const index = await callUnary(c.RepositoryIndex.bind(c), { repository_name: '', ready: false })
  t.strictSame(index.models.map((m) => `${m.name}:${m.version}:${m.state}`), ['echo:1:READY'])

  const status = async (p: Promise<unknown>): Promise<number> => p.then(() => grpc.status.OK, (err: grpc.ServiceError) => err.code)
  t.equal(await status(callUnary(c.ModelMetadata.bind(c), { name: 'nope', version: '' })), grpc.status.NOT_FOUND)
  t.equal(await status(callUnary(c.ModelInfer.bind(c), { model_name: 'nope', inputs: [] })), grpc.status.NOT_FOUND)
  t.equal(await status(callUnary(c.ModelStatistics.bind(c), { name: 'nope', version: '' })), grpc.status.NOT_FOUND)
  t.equal(await status(callUnary(c.RepositoryModelLoad.bind(c), { repository_name: '', model_name: 'echo', parameters: {} })), grpc.status.UNIMPLEMENTED)
  t.equal(await status(callUnary(c.TraceSetting.bind(c), { settings: {}, model_name: '' })), grpc.status.UNAVAILABLE)
})

t.test('bad requests: the gateway refuses what it cannot translate; the worker refuses what does not fit the model', async (t) => {
  const w0 = await worker(t)
  const g = await gateway(t, [w0])
  const c = client(t, g)
  const failure = (msg: ModelInferRequestMessage): Promise<{ code: number, details: string }> =>
    callUnary(c.ModelInfer.bind(c), msg).then(() => ({ code: 0, details: '' }), (err: grpc.ServiceError) => ({ code: err.code, details: err.details }))
  const noData = await failure({ model_name: 'echo', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4] }] })
  t.equal(noData.code, grpc.status.INVALID_ARGUMENT)
  t.match(noData.details, /unable to find data for input tensor 'INPUT0'/)
  const wrongShape = await failure({ ...echoRequest('x', 1), inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2, 2] }] })
  t.equal(wrongShape.code, grpc.status.INVALID_ARGUMENT)
  t.match(wrongShape.details, /unexpected shape for input 'INPUT0' for model 'echo'/)
  const badVersion = await failure({ ...echoRequest('x', 1), model_version: 'latest' })
  t.equal(badVersion.code, grpc.status.INVALID_ARGUMENT)
  t.equal((await failure(echoRequest('ok', 1))).code, 0, 'and the next request is served')
  t.equal((await get(`${g.url}/v2/fleet`)).json.endpoints[0].ejected, false, "a client's mistakes never eject a server")
})

t.test('ModelStreamInfer through the gateway: pinned to one worker, answers with their ids, errors in error_message', async (t) => {
  const w0 = await worker(t)
  const w1 = await worker(t)
  const g = await gateway(t, [w0, w1])
  const c = client(t, g)
  const stream = c.ModelStreamInfer()
  const answers: ModelStreamInferResponseMessage[] = []
  const ended = new Promise<void>((resolve, reject) => {
    stream.on('data', (m: ModelStreamInferResponseMessage) => answers.push(m))
    stream.on('end', resolve)
    stream.on('error', reject)
  })
  // One at a time, so that the pin is set before the next request is routed.
  for (let i = 0; i < 6; i++) {
    stream.write(echoRequest(`m${i}`, i))
    while (answers.length <= i) await new Promise((resolve) => setTimeout(resolve, 5))
  }
  stream.write({ model_name: 'echo', id: 'broken', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4] }] })
  stream.end()
  await ended
  t.equal(answers.length, 7)
  t.ok(answers.slice(0, 6).every((a, i) => a.error_message === '' && a.infer_response?.id === `m${i}`))
  t.match(answers[6]?.error_message, /unable to find data for input tensor 'INPUT0'/)
  t.equal(answers[6]?.infer_response?.id, 'broken')
  const counts = await Promise.all([w0, w1].map(async (w) => (await get(`${w.url}/v2/models/echo/stats`)).json.model_stats[0].inference_stats.success.count as number))
  t.strictSame(counts.sort(), [0, 6], 'every request of the stream went to the same worker')
})
