/**
 * Triton's response cache through a running worker: hits and misses over HTTP (JSON, binary) and gRPC, the
 * statistics and metrics they leave, the byte budget, a worker without a cache, the models Triton refuses, and the
 * `--cache-config` flag of `flotilla worker`.
 */
import { fork } from 'node:child_process'
import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { request as undiciRequest } from 'undici'
import { createLogger, silentLogger } from '../../../common/logger.ts'
import {
  decodeHttpInferResponse, encodeHttpInferRequest, INFERENCE_HEADER_CONTENT_LENGTH
} from '../../../common/protocol/binary-codec.ts'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { decodeModelInferResponse, encodeModelInferRequest } from '../../../common/protocol/grpc/grpc-codec.ts'
import { callUnary, createInferenceClient } from '../../../common/protocol/grpc/grpc-service.ts'
import { decodeInferResponse, encodeInferRequest } from '../../../common/protocol/json-codec.ts'
import { requestKey } from '../../../common/protocol/request-key.ts'
import { type InferRequest, type InferResponse } from '../../../common/protocol/types.ts'
import { entryBytes } from '../../../worker/cache/response-cache.ts'
import { startWorker, type RunningWorker } from '../../../worker/main.ts'
import { CHILD_EXEC_ARGV, CLI, childEnv } from '../../helpers/processes.ts'
import { get, post } from '../../helpers/http.ts'
import { tensorsPbtxt } from '../../helpers/model-repo.ts'
import { scrape, sumOf } from '../../helpers/scrape.ts'


function modelConfig (name: string, extra: string): string {
  return [
    `name: "${name}"`, 'backend: "identity"', 'max_batch_size: 8',
    tensorsPbtxt('input', [{ name: 'IN0', dataType: 'TYPE_FP32', dims: [4] }, { name: 'IN1', dataType: 'TYPE_STRING', dims: [2] }]),
    tensorsPbtxt('output', [{ name: 'OUT0', dataType: 'TYPE_FP32', dims: [4] }, { name: 'OUT1', dataType: 'TYPE_STRING', dims: [2] }]),
    extra
  ].join('\n')
}

/**
 * `cached` (response_cache on, dynamic batching), `plain` (no response_cache), and two that Triton refuses to
 * load with the cache on: a decoupled one and a sequence-batching one.
 */
function repository (t: Test): string {
  return t.testdir({
    cached: { 'config.pbtxt': modelConfig('cached', 'dynamic_batching { }\nresponse_cache { enable: true }'), 1: {} },
    plain: { 'config.pbtxt': modelConfig('plain', ''), 1: {} },
    decoupled: {
      'config.pbtxt': modelConfig('decoupled', 'model_transaction_policy { decoupled: true }\nresponse_cache { enable: true }'),
      1: {}
    },
    sequence: { 'config.pbtxt': modelConfig('sequence', 'sequence_batching { }\nresponse_cache { enable: true }'), 1: {} }
  })
}

async function worker (t: Test, sizeBytes: number | undefined, repo = repository(t), logger = silentLogger()): Promise<RunningWorker> {
  const w = await startWorker({
    modelRepository: repo, httpPort: 0, grpcPort: 0, metricsPort: 0, logger, shutdownQuietMs: 0,
    ...(sizeBytes !== undefined ? { responseCache: { kind: 'local' as const, sizeBytes } } : {})
  })
  t.teardown(() => w.close())
  return w
}

function inferRequest (fill = 1, id = 'r'): InferRequest {
  return {
    id,
    parameters: {},
    inputs: [
      { name: 'IN0', datatype: 'FP32', shape: [1, 4], data: new Float32Array([fill, 2, 3, 4]) },
      { name: 'IN1', datatype: 'BYTES', shape: [1, 2], data: BytesData.from(['héllo', '']) }
    ]
  }
}

/** What an answer says, comparable across wire forms. */
function comparable (r: InferResponse): unknown {
  return {
    id: r.id,
    model: `${r.model_name}:${r.model_version}`,
    outputs: r.outputs.map(o => ({
      name: o.name,
      datatype: o.datatype,
      shape: o.shape.map(Number),
      data: o.data instanceof BytesData ? o.data.toArray().map(b => Buffer.from(b).toString('hex')) : Array.from(o.data as Float32Array)
    }))
  }
}

async function postBody (url: string, body: string | Buffer, headers: Record<string, string> = {}): Promise<{ status: number, headers: Record<string, unknown>, body: Buffer }> {
  const res = await undiciRequest(url, { method: 'POST', body, headers })
  return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) }
}

async function stats (w: RunningWorker, model: string): Promise<any> {
  return (await get(`${w.url}/v2/models/${model}/stats`)).json.model_stats[0]
}

t.test('one request by JSON, binary HTTP and gRPC: one miss, then hits from the same entry', async t => {
  const w = await worker(t, 1 << 20)
  const url = `${w.url}/v2/models/cached/infer`
  const c = createInferenceClient(`127.0.0.1:${w.grpcPort}`)
  t.teardown(() => { c.close() })
  const answers: Record<string, unknown> = {}

  const json = await postBody(url, encodeInferRequest(inferRequest(1, 'json')))
  t.equal(json.status, 200, json.body.toString())
  answers.json = comparable(decodeInferResponse(json.body))

  const binary = encodeHttpInferRequest(inferRequest(1, 'binary'), { binaryInputs: true, binaryOutputs: false })
  const bin = await postBody(url, binary.body, { [INFERENCE_HEADER_CONTENT_LENGTH]: String(binary.headerLength) })
  t.equal(bin.status, 200, bin.body.toString())
  answers.binary = comparable(decodeInferResponse(bin.body))

  const binaryOut = encodeHttpInferRequest(inferRequest(1, 'binary-out'), { binaryInputs: true, binaryOutputs: true })
  const binOut = await postBody(url, binaryOut.body, { [INFERENCE_HEADER_CONTENT_LENGTH]: String(binaryOut.headerLength) })
  t.equal(binOut.status, 200)
  t.equal(binOut.headers['content-type'], 'application/octet-stream', 'a hit answered in the form this client asked for')
  answers.binaryOut = comparable(decodeHttpInferResponse(binOut.body, Number(binOut.headers[INFERENCE_HEADER_CONTENT_LENGTH])))

  answers.grpc = comparable(decodeModelInferResponse(await callUnary(c.ModelInfer.bind(c),
    encodeModelInferRequest('cached', '', inferRequest(1, 'grpc')))))
  answers.grpcContents = comparable(decodeModelInferResponse(await callUnary(c.ModelInfer.bind(c),
    encodeModelInferRequest('cached', '1', inferRequest(1, 'grpc-contents'), { contents: true }))))

  for (const [form, answer] of Object.entries(answers)) {
    t.strictSame(answer, { ...(answers.json as object), id: (answer as { id: string }).id }, `${form}: the same outputs`)
    t.equal((answer as { id: string }).id, form === 'binaryOut' ? 'binary-out' : form === 'grpcContents' ? 'grpc-contents' : form, `${form}: its own id`)
  }

  const s = await stats(w, 'cached')
  t.equal(s.inference_stats.success.count, 5)
  t.equal(s.inference_stats.cache_miss.count, 1)
  t.equal(s.inference_stats.cache_hit.count, 4)
  t.ok(s.inference_stats.cache_hit.ns > 0 && s.inference_stats.cache_miss.ns > 0)
  t.equal(s.inference_stats.compute_infer.count, 1, 'compute: success - cache_hit')
  t.equal(s.inference_stats.queue.count, 5)
  t.equal(s.inference_count, 1, 'one inference: the miss')
  t.equal(s.execution_count, 1, 'one execution')

  const grpcStats = await callUnary(c.ModelStatistics.bind(c), { name: 'cached', version: '1' })
  const g = grpcStats.model_stats[0]!.inference_stats!
  t.strictSame([Number(g.cache_hit.count), Number(g.cache_miss.count), Number(g.cache_hit.ns)],
    [4, 1, s.inference_stats.cache_hit.ns], 'gRPC ModelStatistics reports the same')

  // A different input is a miss of its own; the untouched model never uses the cache.
  t.equal((await post(url, encodeInferRequest(inferRequest(9)))).status, 200)
  for (let i = 0; i < 2; i++) t.equal((await post(`${w.url}/v2/models/plain/infer`, encodeInferRequest(inferRequest()))).status, 200)
  const after = await stats(w, 'cached')
  t.equal(after.inference_stats.cache_miss.count, 2)
  t.equal(after.execution_count, 2)
  const plain = await stats(w, 'plain')
  t.strictSame([plain.execution_count, plain.inference_stats.cache_hit.count, plain.inference_stats.cache_miss.count], [2, 0, 0])

  const { samples, text } = await scrape(w)
  const labels = { model: 'cached', version: '1' }
  t.equal(sumOf(samples, 'nv_cache_num_hits_per_model', labels), 4)
  t.equal(sumOf(samples, 'nv_cache_num_misses_per_model', labels), 2)
  t.ok(sumOf(samples, 'nv_cache_hit_duration_per_model', labels) >= 0)
  t.ok(samples.some(s => s.name === 'nv_cache_miss_duration_per_model' && s.labels.model === 'cached'))
  t.equal(sumOf(samples, 'nv_inference_request_success', labels), 6, 'hits are successes')
  t.equal(sumOf(samples, 'nv_inference_count', labels), 2, 'and not inferences')
  t.equal(sumOf(samples, 'nv_inference_exec_count', labels), 2, 'nor executions')
  t.notOk(samples.some(s => s.name.startsWith('nv_cache_') && s.labels.model === 'plain'), 'no cache series for a model without the cache')
  t.match(text, '# HELP nv_cache_num_hits_per_model Number of cache hits per model')
  t.match(text, '# TYPE nv_cache_num_hits_per_model counter')
  t.match(text, '# HELP nv_cache_miss_duration_per_model Total cache miss (insert+lookup) duration per model, in microseconds')
  t.equal(sumOf(samples, 'nv_cache_num_entries', {}), 2)
  t.equal(sumOf(samples, 'nv_cache_num_lookups', {}), 6)
  t.equal(sumOf(samples, 'nv_cache_num_hits', {}), 4)
  t.equal(sumOf(samples, 'nv_cache_num_misses', {}), 2)
  t.equal(sumOf(samples, 'nv_cache_num_evictions', {}), 0)
  const util = sumOf(samples, 'nv_cache_util', {})
  t.ok(util > 0 && util < 0.01, `utilization ${util}`)
})

t.test('requested outputs: each selection is its own entry, and answers only what it asked for', async t => {
  const w = await worker(t, 1 << 20)
  const url = `${w.url}/v2/models/cached/infer`
  const ask = async (outputs?: string[]): Promise<string[]> => {
    const r = inferRequest()
    if (outputs !== undefined) r.outputs = outputs.map(name => ({ name }))
    const res = await postBody(url, encodeInferRequest(r))
    t.equal(res.status, 200, res.body.toString())
    return decodeInferResponse(res.body).outputs.map(o => o.name)
  }
  t.strictSame(await ask(), ['OUT0', 'OUT1'])
  t.strictSame(await ask(['OUT1']), ['OUT1'], 'not the stored answer of the other selection')
  t.strictSame(await ask(['OUT1', 'OUT0']), ['OUT1', 'OUT0'])
  t.strictSame(await ask(['OUT1']), ['OUT1'])
  t.strictSame(await ask(), ['OUT0', 'OUT1'])
  const s = await stats(w, 'cached')
  t.strictSame([s.inference_stats.cache_miss.count, s.inference_stats.cache_hit.count, s.execution_count], [3, 2, 3])
})

t.test('the byte budget: the least recently used answer is evicted and computed again', async t => {
  // Room for exactly two of these answers.
  const one = (fill: number): number => {
    const r = inferRequest(fill)
    const { key, check } = requestKey('cached', '1', r, { answerForm: false })
    return entryBytes(key, check, [
      { name: 'OUT0', datatype: 'FP32', shape: [1, 4], data: new Float32Array(4) },
      { name: 'OUT1', datatype: 'BYTES', shape: [1, 2], data: BytesData.from(['héllo', '']) }
    ])
  }
  const w = await worker(t, one(1) + one(2))
  const url = `${w.url}/v2/models/cached/infer`
  const send = async (fill: number): Promise<void> => { t.equal((await post(url, encodeInferRequest(inferRequest(fill)))).status, 200) }
  await send(1)
  await send(2)
  await send(1) // hit: 1 is now the most recent
  await send(3) // evicts 2
  await send(1) // hit
  await send(2) // miss: computed again (evicts 3)
  const s = await stats(w, 'cached')
  t.equal(s.inference_stats.cache_hit.count, 2)
  t.equal(s.inference_stats.cache_miss.count, 4)
  t.equal(s.execution_count, 4)
  const { samples } = await scrape(w)
  t.equal(sumOf(samples, 'nv_cache_num_evictions', {}), 2)
  t.equal(sumOf(samples, 'nv_cache_num_entries', {}), 2)
  t.equal(sumOf(samples, 'nv_cache_util', {}), 1, 'full to the byte')
})

t.test('no --cache-config: a model with response_cache enabled loads and runs uncached, as in Triton', async t => {
  const w = await worker(t, undefined)
  const url = `${w.url}/v2/models/cached/infer`
  for (let i = 0; i < 2; i++) t.equal((await post(url, encodeInferRequest(inferRequest()))).status, 200)
  const s = await stats(w, 'cached')
  t.equal(s.execution_count, 2)
  t.strictSame([s.inference_stats.cache_hit.count, s.inference_stats.cache_miss.count], [0, 0])
  const { text } = await scrape(w)
  t.notMatch(text, /nv_cache_/, 'no cache families at all')
})

t.test('the worker says at start which models use the cache, or would if it had one', async t => {
  for (const sizeBytes of [4096, undefined]) {
    const lines: Array<{ msg: string, models?: string[], sizeBytes?: number }> = []
    const sink = new Writable({ write (chunk, _enc, done) { lines.push(JSON.parse(chunk.toString())); done() } })
    await worker(t, sizeBytes, repository(t), createLogger({ level: 'info', destination: sink }))
    const line = lines.find(l => /response.cache/.test(l.msg))
    t.ok(line, `a line about the cache (size ${sizeBytes})`)
    t.strictSame(line?.models, ['cached'], 'the models that load with response_cache on')
    if (sizeBytes === undefined) t.match(line?.msg, /no cache: they run uncached; start it with --cache-config local,size=<bytes>/)
    else t.equal(line?.sizeBytes, 4096)
  }
})

t.test('decoupled and sequence-batching models with the cache enabled fail to load, with Triton\'s messages', async t => {
  for (const sizeBytes of [1 << 20, undefined]) {
    const w = await worker(t, sizeBytes)
    const index = (await post(`${w.url}/v2/repository/index`, {})).json as Array<{ name: string, state?: string, reason?: string }>
    const byName = new Map(index.map(e => [e.name, e]))
    t.equal(byName.get('cached')?.state, 'READY')
    t.equal(byName.get('decoupled')?.state, 'UNAVAILABLE')
    t.match(byName.get('decoupled')?.reason, "Response Cache does not currently support model decoupled with 'decoupled' transaction policy. Please disable the response cache.")
    t.equal(byName.get('sequence')?.state, 'UNAVAILABLE')
    t.match(byName.get('sequence')?.reason, 'Response Cache does not currently support model sequence with sequence batching scheduler. Please disable the response cache.')
  }
})

/**
 * Runs `flotilla <args>` (the compiled CLI, as the e2e tests: from source through tsx each start cost seconds of
 * CPU); resolves with its exit code and output, or its ready message.
 */
function runCli (t: Test, args: string[]): Promise<{ code: number | null, output: string, ready?: { url: string } }> {
  const child = fork(CLI, args, { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], execArgv: CHILD_EXEC_ARGV, env: childEnv({ LOG_LEVEL: 'warn' }) })
  let output = ''
  child.stdout?.on('data', (d: Buffer) => { output += d.toString() })
  child.stderr?.on('data', (d: Buffer) => { output += d.toString() })
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  return new Promise((resolve) => {
    const timer = setTimeout(() => { child.kill('SIGKILL') }, 60_000)
    child.once('exit', code => { clearTimeout(timer); resolve({ code, output }) })
    child.on('message', (m: { type?: string, url: string }) => {
      if (m.type !== 'flotilla:ready') return
      clearTimeout(timer)
      resolve({ code: null, output, ready: m })
    })
  })
}

t.test('flotilla worker --cache-config: Triton\'s syntax, refused with a usage error when malformed', async t => {
  const repo = repository(t)
  const base = ['worker', '--model-repository', repo, '--http-port', '0', '--grpc-port', '-1', '--metrics-port', '-1']
  const refused: Array<[string[], RegExp]> = [
    [['--cache-config', 'size=10'], /No cache specified/],
    [['--cache-config', 'local,size'], /--cache-config option format is '<cache name>,<setting>=<value>'/],
    [['--cache-config=local,size=8192', '--cache-config=redis,key=value'], /multiple cache configurations/],
    [['--cache-config', 'local,size=0'], /valid 'size' field/]
  ]
  const results = await Promise.all(refused.map(([flags]) => runCli(t, [...base, ...flags])))
  results.forEach((r, i) => {
    t.equal(r.code, 2, `${refused[i]![0].join(' ')}: exit 2`)
    t.match(r.output, refused[i]![1])
    t.match(r.output, /Run 'flotilla --help' for usage/)
  })
  const gateway = await runCli(t, ['gateway', '--config', 'x.yaml', '--cache-config', 'local,size=10'])
  t.equal(gateway.code, 2)
  t.match(gateway.output, /flotilla gateway does not take --cache-config/)

  const ok = await runCli(t, [...base, '--cache-config', 'local,size=1048576'])
  t.ok(ok.ready, ok.output)
  const url = `${ok.ready!.url}/v2/models/cached/infer`
  for (let i = 0; i < 3; i++) t.equal((await post(url, encodeInferRequest(inferRequest()))).status, 200)
  const s = (await get(`${ok.ready!.url}/v2/models/cached/stats`)).json.model_stats[0]
  t.strictSame([s.inference_stats.cache_miss.count, s.inference_stats.cache_hit.count, s.execution_count], [1, 2, 1])
})
