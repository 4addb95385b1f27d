import { request } from 'node:http'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { silentLogger } from '../../../common/logger.ts'
import { PACKAGE_ROOT } from '../../../common/package-root.ts'
import { encodeModelInferRequest } from '../../../common/protocol/grpc/grpc-codec.ts'
import { callUnary, createInferenceClient } from '../../../common/protocol/grpc/grpc-service.ts'
import { startWorker, type RunningWorker } from '../../../worker/main.ts'
import { get, http, post } from '../../helpers/http.ts'
import { identityConfig } from '../../helpers/model-repo.ts'

const DEMO_MODELS = join(PACKAGE_ROOT, 'config', 'models')

async function worker (tt: Test, modelRepository: string, extra: { maxBodyBytes?: number } = {}): Promise<RunningWorker> {
  // No drain to wait for in these tests' teardown (shutdown.test.ts covers it).
  const w = await startWorker({ modelRepository, httpPort: 0, grpcPort: 0, metricsPort: 0, logger: silentLogger(), shutdownQuietMs: 0, ...extra })
  tt.teardown(() => w.close())
  return w
}

/** A repository with `slow`: FP32 [1] echoed after `fixedMs` (the simulated backend), `extra` config lines after. */
function slowRepository (tt: Test, fixedMs: number, extra = ''): string {
  return tt.testdir({
    slow: {
      'config.pbtxt': `${identityConfig('slow', 'TYPE_FP32', [1]).replace('"identity"', '"simulated"')}\n${extra}` +
        `parameters { key: "fixed_ms" value: { string_value: "${fixedMs}" } }`,
      1: {}
    }
  })
}

const iota = (n: number, f: (i: number) => number = i => i): number[] => Array.from({ length: n }, (_, i) => f(i))

t.test('the demo repository: health, metadata, config, ready, infer', async t => {
  const w = await worker(t, DEMO_MODELS)

  const live = await get(`${w.url}/v2/health/live`)
  t.equal(live.status, 200)
  t.equal(live.text, '', 'health answers with an empty body, as Triton')
  t.equal((await get(`${w.url}/v2/health/ready`)).status, 200)

  const meta = await get(`${w.url}/v2`)
  t.equal(meta.status, 200)
  t.equal(meta.json.name, 'flotilla')
  t.strictSame(meta.json.extensions, ['model_repository', 'schedule_policy', 'model_configuration', 'binary_tensor_data', 'parameters', 'statistics'])

  const simple = await get(`${w.url}/v2/models/simple`)
  t.strictSame(simple.json, {
    name: 'simple',
    versions: ['1'],
    platform: 'js',
    inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [-1, 16] }],
    outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [-1, 16] }, { name: 'OUTPUT1', datatype: 'INT32', shape: [-1, 16] }]
  })
  t.strictSame((await get(`${w.url}/v2/models/simple/versions/1`)).json.versions, ['1'])

  const config = await get(`${w.url}/v2/models/simple/config`)
  t.equal(config.status, 200)
  t.match(config.text, '"dims":[16]', 'int64 dims print as JSON numbers')
  t.equal(config.json.max_batch_size, 8)
  t.equal(config.json.backend, 'js')

  t.equal((await get(`${w.url}/v2/models/simple/ready`)).status, 200)
  t.equal((await get(`${w.url}/v2/models/simple/versions/1/ready`)).status, 200)

  const a = iota(16)
  const b = iota(16, () => 1)
  for (const path of ['/v2/models/simple/infer', '/v2/models/simple/versions/1/infer']) {
    const res = await post(`${w.url}${path}`, {
      id: 'req-7',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: a },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b }
      ]
    })
    t.equal(res.status, 200, path)
    t.equal(res.headers['content-type'], 'application/json; charset=utf-8')
    t.ok(res.headers['x-flotilla-queue-depth'] !== undefined, 'the worker reports its queue depth')
    t.strictSame(res.json, {
      id: 'req-7',
      model_name: 'simple',
      model_version: '1',
      outputs: [
        { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], data: a.map((x, i) => x + b[i]!) },
        { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], data: a.map((x, i) => x - b[i]!) }
      ]
    })
  }

  const one = await post(`${w.url}/v2/models/simple/infer`, {
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [2, 16], data: [a, a] },
      { name: 'INPUT1', datatype: 'INT32', shape: [2, 16], data: [b, b] }
    ],
    outputs: [{ name: 'OUTPUT1' }]
  })
  t.equal(one.status, 200)
  t.notOk('id' in one.json, 'no id in the response when the request had none')
  t.strictSame(one.json.outputs.map((o: { name: string }) => o.name), ['OUTPUT1'], 'only the requested output returns')
  t.strictSame(one.json.outputs[0].shape, [2, 16])

  const sim = await post(`${w.url}/v2/models/simulated/infer`, {
    inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: iota(16, i => i / 4) }]
  })
  t.equal(sim.status, 200)
  t.strictSame(sim.json.outputs[0].data, iota(16, i => i / 4), 'simulated echoes its input')

  const dyn = await post(`${w.url}/v2/models/identity/infer`, {
    inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [3, 5], data: iota(15) }]
  })
  t.equal(dyn.status, 200)
  t.strictSame(dyn.json.outputs[0].shape, [3, 5], 'identity takes any variable-size shape')
})

t.test('every datatype round-trips through an identity model', async t => {
  const cases: Array<{ type: string, datatype: string, data: unknown[], expect?: unknown[] }> = [
    { type: 'TYPE_BOOL', datatype: 'BOOL', data: [true, false, true] },
    { type: 'TYPE_UINT8', datatype: 'UINT8', data: [0, 255, 44] },
    { type: 'TYPE_UINT16', datatype: 'UINT16', data: [0, 65535, 7] },
    { type: 'TYPE_UINT32', datatype: 'UINT32', data: [0, 4294967295, 7] },
    { type: 'TYPE_UINT64', datatype: 'UINT64', data: [0, 9007199254740991, 7] },
    { type: 'TYPE_INT8', datatype: 'INT8', data: [-128, 127, 0] },
    { type: 'TYPE_INT16', datatype: 'INT16', data: [-32768, 32767, 0] },
    { type: 'TYPE_INT32', datatype: 'INT32', data: [-2147483648, 2147483647, 0] },
    { type: 'TYPE_INT64', datatype: 'INT64', data: [-9007199254740991, 9007199254740991, 0] },
    { type: 'TYPE_FP16', datatype: 'FP16', data: [0.5, -2, 1024] },
    { type: 'TYPE_BF16', datatype: 'BF16', data: [0.5, -2, 1024] },
    { type: 'TYPE_FP32', datatype: 'FP32', data: [0.5, -2.25, 1e10] },
    { type: 'TYPE_FP64', datatype: 'FP64', data: [0.1, -2.5e-300, 1e300] },
    { type: 'TYPE_STRING', datatype: 'BYTES', data: ['hello', '', 'ünïcødé ✓'] }
  ]
  const dir = t.testdir(Object.fromEntries(cases.map(c => [
    `id_${c.datatype.toLowerCase()}`, { 'config.pbtxt': identityConfig(`id_${c.datatype.toLowerCase()}`, c.type, [-1]), 1: {} }
  ])))
  const w = await worker(t, dir)
  for (const c of cases) {
    const model = `id_${c.datatype.toLowerCase()}`
    const res = await post(`${w.url}/v2/models/${model}/infer`, {
      inputs: [{ name: 'INPUT0', datatype: c.datatype, shape: [c.data.length], data: c.data }]
    })
    t.equal(res.status, 200, `${c.datatype}: ${res.text}`)
    t.strictSame(res.json?.outputs?.[0], { name: 'OUTPUT0', datatype: c.datatype, shape: [c.data.length], data: c.expect ?? c.data }, c.datatype)
    const nested = await post(`${w.url}/v2/models/${model}/infer`, {
      inputs: [{ name: 'INPUT0', datatype: c.datatype, shape: [c.data.length], data: c.data.map(x => [x]) }]
    })
    t.strictSame(nested.json?.outputs?.[0]?.data, c.expect ?? c.data, `${c.datatype}: nested data equals flat data`)
  }
})

t.test('bad input: each a 4xx that names the problem, and the worker keeps serving', async t => {
  const w = await worker(t, DEMO_MODELS, { maxBodyBytes: 4096 })
  const infer = `${w.url}/v2/models/simple/infer`
  const good = [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: iota(16) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: iota(16) }
  ]
  const cases: Array<{ name: string, body: string | object, status: number, error: RegExp }> = [
    { name: 'malformed JSON', body: '{"inputs": [', status: 400, error: /failed to parse the request JSON body/ },
    { name: 'empty body', body: '', status: 400, error: /no body/ },
    { name: 'inputs missing', body: {}, status: 400, error: /inputs/ },
    {
      name: 'unknown input',
      body: { inputs: [...good, { name: 'INPUT9', datatype: 'INT32', shape: [1, 16], data: iota(16) }] },
      status: 400,
      error: /unexpected inference input 'INPUT9' for model 'simple'/
    },
    { name: 'missing input', body: { inputs: [good[0]] }, status: 400, error: /missing required input\(s\) \['INPUT1'\]/ },
    {
      name: 'datatype mismatch',
      body: { inputs: [{ ...good[0], datatype: 'FP32' }, good[1]] },
      status: 400,
      error: /inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'/
    },
    {
      name: 'shape mismatch',
      body: { inputs: [{ ...good[0], shape: [1, 8], data: iota(8) }, good[1]] },
      status: 400,
      error: /unexpected shape for input 'INPUT0' for model 'simple'. Expected \[-1,16\], got \[1,8\]/
    },
    {
      name: 'element count does not match shape',
      body: { inputs: [{ ...good[0], data: iota(15) }, good[1]] },
      status: 400,
      error: /shape does not match true shape/i
    },
    { name: 'unknown datatype', body: { inputs: [{ ...good[0], datatype: 'INT33' }, good[1]] }, status: 400, error: /invalid datatype for input INPUT0/ },
    // Issue 14: 2^31 used to wrap to -2^31 and answer 200.
    {
      name: 'INT32 out of range',
      body: { inputs: [{ ...good[0], data: [2147483648, ...iota(15)] }, good[1]] },
      status: 400,
      error: /INPUT0.*2147483648/
    },
    { name: 'a fraction for an integer', body: { inputs: [{ ...good[0], data: [1.5, ...iota(15)] }, good[1]] }, status: 400, error: /INPUT0.*1\.5/ },
    { name: 'unknown output', body: { inputs: good, outputs: [{ name: 'OUTPUT7' }] }, status: 400, error: /unexpected inference output 'OUTPUT7' for model 'simple'/ },
    { name: 'oversized body', body: 'x'.repeat(5000), status: 413, error: /exceeds the limit of 4096 bytes.*--max-body-bytes/ }
  ]
  for (const c of cases) {
    const res = await post(infer, c.body)
    t.equal(res.status, c.status, `${c.name}: status (${res.text})`)
    t.match(res.json?.error, c.error, `${c.name}: message`)
  }

  const big = await worker(t, DEMO_MODELS)
  const tooBig = await post(`${big.url}/v2/models/simple/infer`, {
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [9, 16], data: iota(144) },
      { name: 'INPUT1', datatype: 'INT32', shape: [9, 16], data: iota(144) }
    ]
  })
  t.equal(tooBig.status, 400)
  t.match(tooBig.json.error, /inference request batch-size must be <= 8 for 'simple'/)

  t.equal((await post(infer, { inputs: good })).status, 200, 'still serving after every bad request')
})

t.test('model and version resolution errors, router misses', async t => {
  const w = await worker(t, DEMO_MODELS)
  const cases: Array<[string, string, number, string]> = [
    ['GET', '/v2/models/nope', 404, "Request for unknown model: 'nope' is not found"],
    ['GET', '/v2/models/nope/ready', 404, "Request for unknown model: 'nope' is not found"],
    ['POST', '/v2/models/nope/infer', 404, "Request for unknown model: 'nope' is not found"],
    ['GET', '/v2/models/simple/versions/3', 404, "Request for unknown model: 'simple' version 3 is not found"],
    ['GET', '/v2/models/simple/versions/v1', 404, 'Not Found'],
    ['GET', '/v2/nothing/here', 404, 'Not Found'],
    ['GET', '/v2/models/simple/infer', 405, 'Method Not Allowed'],
    ['POST', '/v2/health/ready', 405, 'Method Not Allowed'],
    ['DELETE', '/v2', 405, 'Method Not Allowed'],
    ['POST', '/v2/repository/models/simple/load', 503, 'explicit model load / unload is not allowed if polling is enabled']
  ]
  for (const [method, path, status, error] of cases) {
    const res = await http(method, `${w.url}${path}`)
    t.equal(res.status, status, `${method} ${path}`)
    t.strictSame(res.json, { error }, `${method} ${path} body`)
  }
})

t.test('version policies and the repository index', async t => {
  const cfg = (name: string, policy: string): string => `${identityConfig(name, 'TYPE_INT32', [4])}\n${policy}`
  const dir = t.testdir({
    latest2: { 'config.pbtxt': cfg('latest2', 'version_policy: { latest: { num_versions: 2 } }'), 1: {}, 2: {}, 3: {}, '007': {}, notes: {} },
    every: { 'config.pbtxt': cfg('every', 'version_policy: { all: {} }'), 1: {}, 2: {} },
    picked: { 'config.pbtxt': cfg('picked', 'version_policy: { specific: { versions: [1, 3] } }'), 1: {}, 2: {}, 3: {} },
    broken: { 'config.pbtxt': 'name: "broken"\nbackend: "identity"\nmax_batch_size: -1\n', 1: {} },
    nofile: { 1: {} },
    badbackend: { 'config.pbtxt': identityConfig('badbackend', 'TYPE_INT32', [4]).replace('"identity"', '"tensorrt_llm"'), 1: {} }
  })
  const w = await worker(t, dir)

  const index = await post(`${w.url}/v2/repository/index`)
  t.equal(index.status, 200)
  t.match(index.json, [
    { name: 'badbackend', version: '1', state: 'UNAVAILABLE', reason: /unknown backend 'tensorrt_llm'/ },
    { name: 'broken', state: 'UNAVAILABLE', reason: /'max_batch_size' must be non-negative value for broken/ },
    { name: 'every', version: '1', state: 'READY' },
    { name: 'every', version: '2', state: 'READY' },
    { name: 'latest2', version: '2', state: 'READY' },
    { name: 'latest2', version: '3', state: 'READY' },
    { name: 'nofile', state: 'UNAVAILABLE', reason: /has no config.pbtxt/ },
    { name: 'picked', version: '1', state: 'READY' },
    { name: 'picked', version: '3', state: 'READY' }
  ])
  t.equal(index.json.length, 9)
  const ready = await post(`${w.url}/v2/repository/index`, { ready: true })
  t.equal(ready.json.length, 6, 'ready:true lists only READY versions')
  const bad = await post(`${w.url}/v2/repository/index`, { ready: 'yes' })
  t.equal(bad.status, 400)
  t.strictSame(bad.json, { error: "Invalid value for 'ready': expected a boolean" })

  t.equal((await get(`${w.url}/v2/health/live`)).status, 200, 'broken models never take the worker down')
  t.equal((await get(`${w.url}/v2/health/ready`)).status, 400, 'strict readiness: a model failed to load')

  t.strictSame((await get(`${w.url}/v2/models/latest2`)).json.versions, ['2', '3'])
  const body = { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [4], data: [1, 2, 3, 4] }] }
  t.equal((await post(`${w.url}/v2/models/latest2/infer`, body)).json.model_version, '3', 'no version: the highest READY')
  t.equal((await post(`${w.url}/v2/models/latest2/versions/2/infer`, body)).json.model_version, '2')
  t.equal((await post(`${w.url}/v2/models/latest2/versions/1/infer`, body)).status, 404, 'version outside the policy')
  t.equal((await post(`${w.url}/v2/models/picked/versions/2/infer`, body)).status, 404)
  const noVersions = await post(`${w.url}/v2/models/broken/infer`, body)
  t.equal(noVersions.status, 404)
  t.strictSame(noVersions.json, { error: "Request for unknown model: 'broken' has no available versions" })
})

t.test('js models: failures are the request\'s, never the worker\'s', async t => {
  const cfg = (name: string): string => `name: "${name}"\nbackend: "js"\nmax_batch_size: 0\n` +
    'input { name: "X" data_type: TYPE_FP32 dims: [ 2 ] }\noutput { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }'
  const dir = t.testdir({
    throws: { 'config.pbtxt': cfg('throws'), 1: { 'model.js': 'export function execute () { throw new Error("kaput") }' } },
    wrong: {
      'config.pbtxt': cfg('wrong'),
      1: { 'model.js': 'export function execute (rs) { return rs.map(() => ({ outputs: [{ name: "Y", shape: [2], data: [1] }] })) }' }
    },
    errs: { 'config.pbtxt': cfg('errs'), 1: { 'model.js': 'export function execute (rs) { return rs.map(() => ({ error: "bad pixel" })) }' } },
    plain: {
      'config.pbtxt': cfg('plain'),
      1: { 'model.js': 'export function execute (rs) { return rs.map(r => ({ outputs: [{ name: "Y", shape: [2], data: Array.from(r.inputs.X.data, v => v * 2) }] })) }' }
    },
    nomodule: { 'config.pbtxt': cfg('nomodule'), 1: {} },
    noexec: { 'config.pbtxt': cfg('noexec'), 1: { 'model.js': 'export const x = 1' } }
  })
  const w = await worker(t, dir)
  const body = { inputs: [{ name: 'X', datatype: 'FP32', shape: [2], data: [1.5, 2] }] }
  const throws = await post(`${w.url}/v2/models/throws/infer`, body)
  t.equal(throws.status, 500)
  t.match(throws.json.error, /model 'throws' failed to execute: kaput/)
  const wrong = await post(`${w.url}/v2/models/wrong/infer`, body)
  t.equal(wrong.status, 500)
  t.match(wrong.json.error, /output 'Y' has 1 elements, but its shape holds 2/)
  const errs = await post(`${w.url}/v2/models/errs/infer`, body)
  t.match(errs.json.error, /bad pixel/)
  const plain = await post(`${w.url}/v2/models/plain/infer`, body)
  t.strictSame(plain.json.outputs[0].data, [3, 4], 'plain arrays convert to the declared datatype')

  const index = (await post(`${w.url}/v2/repository/index`)).json as Array<{ name: string, reason?: string }>
  t.match(index.find(e => e.name === 'nomodule')?.reason, /needs .*model\.js/)
  t.match(index.find(e => e.name === 'noexec')?.reason, /must export a function named 'execute'/)
  t.equal((await get(`${w.url}/v2/health/live`)).status, 200)
})

t.test('close waits for in-flight requests', async t => {
  const w = await startWorker({ modelRepository: slowRepository(t, 150), httpPort: 0, grpcPort: -1, metricsPort: -1, logger: silentLogger() })
  const inflight = post(`${w.url}/v2/models/slow/infer`, { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [4] }] })
  await new Promise(resolve => setTimeout(resolve, 30))
  await w.close()
  const res = await inflight
  t.equal(res.status, 200, 'the request accepted before close completes')
  t.strictSame(res.json.outputs[0].data, [4])
})

t.test('a client that goes away while its request is queued (HTTP, gRPC call, gRPC stream): dropped, CANCELED, never run', async t => {
  // One instance, 300 ms per request: the first request runs, the next ones queue behind it.
  const w = await worker(t, slowRepository(t, 300, 'instance_group [ { count: 1 kind: KIND_CPU } ]\n'))
  const body = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [4] }] })
  const first = post(`${w.url}/v2/models/slow/infer`, JSON.parse(body))
  await new Promise(resolve => setTimeout(resolve, 50))

  // HTTP: the connection closes while the request waits.
  const gone = request(`${w.url}/v2/models/slow/infer`, { method: 'POST', headers: { 'content-type': 'application/json' } })
  gone.on('error', () => {})
  gone.end(body)
  // gRPC: the call's deadline passes while it waits (the client cancels it).
  const client = createInferenceClient(`127.0.0.1:${w.grpcPort}`)
  t.teardown(() => { client.close() })
  const cancelled = callUnary(client.ModelInfer.bind(client), encodeModelInferRequest('slow', '', {
    parameters: {}, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: new Float32Array([4]) }]
  }), undefined, { deadline: Date.now() + 100 }).then(() => 'answered', (err: { code?: number }) => err.code)
  // A gRPC stream cancelled with a request of it queued.
  const stream = client.ModelStreamInfer()
  const streamEnded = new Promise<number | undefined>((resolve) => {
    stream.on('data', () => {})
    stream.on('error', (err: { code?: number }) => { resolve(err.code) })
  })
  stream.write(encodeModelInferRequest('slow', '', {
    parameters: {}, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: new Float32Array([5]) }]
  }))
  await new Promise(resolve => setTimeout(resolve, 60))
  gone.destroy()
  stream.cancel()
  t.equal(await streamEnded, 1, 'the stream was cancelled (CANCELLED)')

  t.equal((await first).status, 200, 'the running request is answered')
  t.equal(await cancelled, 4, 'the gRPC client saw its deadline pass (DEADLINE_EXCEEDED)')
  // Time for the three to have run one after the other, had they stayed queued.
  await new Promise(resolve => setTimeout(resolve, 1000))
  const stats = (await get(`${w.url}/v2/models/slow/stats`)).json.model_stats[0]
  t.equal(stats.execution_count, 1, 'only the first request ran: the others left the queue when their clients went')
  t.equal(stats.inference_stats.success.count, 1)
  t.equal(stats.inference_stats.fail.count, 3, 'the three counted as failures')
  const metrics = (await get(`http://127.0.0.1:${w.metricsPort}/metrics`)).text
  t.match(metrics, /nv_inference_request_failure\{model="slow",reason="CANCELED",version="1"\} 3/, 'with the reason CANCELED')
})
