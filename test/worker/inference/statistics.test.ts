import t, { type Test } from 'tap'
import { silentLogger } from '../../../common/logger.ts'
import { startWorker, type RunningWorker } from '../../../worker/main.ts'
import { type RequestTiming } from '../../../worker/scheduler/types.ts'
import { ModelStatistics, VersionStatistics } from '../../../worker/inference/statistics.ts'
import { get, http, post } from '../../helpers/http.ts'
import { identityConfig } from '../../helpers/model-repo.ts'

const timing = (queueNs: bigint, computeInputNs: bigint, computeInferNs: bigint, computeOutputNs: bigint): RequestTiming =>
  ({ queueNs, computeInputNs, computeInferNs, computeOutputNs })
const NO_COMPUTE = timing(0n, 0n, 0n, 0n)

/** Triton's entry for a version that has not run: every duration present, at zero. */
const zeros = (name: string, version: string): object => ({
  name,
  version,
  last_inference: 0,
  inference_count: 0,
  execution_count: 0,
  inference_stats: {
    success: { count: 0, ns: 0 },
    fail: { count: 0, ns: 0 },
    queue: { count: 0, ns: 0 },
    compute_input: { count: 0, ns: 0 },
    compute_infer: { count: 0, ns: 0 },
    compute_output: { count: 0, ns: 0 },
    cache_hit: { count: 0, ns: 0 },
    cache_miss: { count: 0, ns: 0 }
  },
  response_stats: {},
  batch_stats: [],
  memory_usage: []
})

t.test('a version that has not run: Triton\'s shape, in Triton\'s key order', async t => {
  const stats = new ModelStatistics()
  stats.observerFor('simple', 1)
  t.equal(stats.toJson([{ name: 'simple', version: 1 }]),
    '{"model_stats":[{"name":"simple","version":"1","last_inference":0,"inference_count":0,"execution_count":0,' +
    '"inference_stats":{"success":{"count":0,"ns":0},"fail":{"count":0,"ns":0},"queue":{"count":0,"ns":0},' +
    '"compute_input":{"count":0,"ns":0},"compute_infer":{"count":0,"ns":0},"compute_output":{"count":0,"ns":0},' +
    '"cache_hit":{"count":0,"ns":0},"cache_miss":{"count":0,"ns":0}},' +
    '"response_stats":{},"batch_stats":[],"memory_usage":[]}]}')
})

t.test('an observer fed by hand: exact counts and nanoseconds', async t => {
  let wall = 1_700_000_000_000
  const stats = new ModelStatistics({ wallClock: () => wall })
  const o = stats.observerFor('m', 2)

  // A batch of 3 (requests of 2 and 1), then a request alone, then one that timed out in the queue.
  o.batchDone(3, 10n, 100n, 20n)
  o.requestDone(true, undefined, 2, 1_000n, timing(50n, 10n, 100n, 20n))
  o.requestDone(true, undefined, 1, 900n, timing(40n, 10n, 100n, 20n))
  wall += 5
  o.batchDone(1, 7n, 70n, 3n)
  o.requestDone(true, undefined, 0, 500n, timing(30n, 7n, 70n, 3n))
  o.requestDone(false, 'REJECTED', 1, 5_000n, timing(5_000n, 0n, 0n, 0n))
  o.batchDone(3, 1n, 2n, 3n)

  t.strictSame(JSON.parse(stats.toJson([{ name: 'm', version: 2 }])), {
    model_stats: [{
      name: 'm',
      version: '2',
      last_inference: 1_700_000_000_005,
      inference_count: 4, // 2 + 1 + max(1, 0); the failed request adds nothing
      execution_count: 3,
      inference_stats: {
        success: { count: 3, ns: 2_400 },
        fail: { count: 1, ns: 5_000 },
        queue: { count: 3, ns: 120 },
        compute_input: { count: 3, ns: 27 },
        compute_infer: { count: 3, ns: 270 },
        compute_output: { count: 3, ns: 43 },
        cache_hit: { count: 0, ns: 0 },
        cache_miss: { count: 0, ns: 0 }
      },
      response_stats: {},
      batch_stats: [
        { batch_size: 1, compute_input: { count: 1, ns: 7 }, compute_infer: { count: 1, ns: 70 }, compute_output: { count: 1, ns: 3 } },
        { batch_size: 3, compute_input: { count: 2, ns: 11 }, compute_infer: { count: 2, ns: 102 }, compute_output: { count: 2, ns: 23 } }
      ],
      memory_usage: []
    }]
  })
  t.equal(o.failures('REJECTED'), 1)
  t.equal(o.failures('BACKEND'), 0)
})

t.test('response cache hits and misses, counted as Triton counts them', async t => {
  let wall = 1_700_000_000_000
  const seen: number[] = []
  const stats = new ModelStatistics({ wallClock: () => wall, latency: () => ({ observe: (ms: number) => { seen.push(ms) } }) })
  const o = stats.observerFor('m', 1, { cacheEnabled: true })
  t.equal(o.cacheEnabled, true)
  t.equal(stats.observerFor('n', 1).cacheEnabled, false, 'off unless the version uses the cache')

  // A miss: the scheduler reports it, then the service adds lookup + insert.
  o.batchDone(2, 10n, 100n, 20n)
  o.requestDone(true, undefined, 2, 1_000n, timing(50n, 10n, 100n, 20n))
  o.cacheMiss(30n)
  wall += 1_000
  // Two hits: total, queue (up to the lookup), lookup.
  o.cacheHit(2_000_000n, 40n, 15n)
  o.cacheHit(300n, 20n, 5n)

  const json = JSON.parse(stats.toJson([{ name: 'm', version: 1 }])).model_stats[0]
  t.equal(json.last_inference, 1_700_000_000_000, 'a hit is not an inference: last_inference stays')
  t.equal(json.inference_count, 2, 'the miss only')
  t.equal(json.execution_count, 1)
  t.strictSame(json.inference_stats, {
    success: { count: 3, ns: 1_000 + 30 + 2_000_000 + 300 },
    fail: { count: 0, ns: 0 },
    queue: { count: 3, ns: 50 + 40 + 20 },
    compute_input: { count: 1, ns: 10 },
    compute_infer: { count: 1, ns: 100 },
    compute_output: { count: 1, ns: 20 },
    cache_hit: { count: 2, ns: 20 },
    cache_miss: { count: 1, ns: 30 }
  })
  t.strictSame(seen, [0, 2, 0], 'every answered request is seen by the latency histogram, hits too')
})

t.test('nanosecond sums beyond 2^53 print exactly', async t => {
  const stats = new ModelStatistics()
  const o = stats.observerFor('m', 1)
  const big = 2n ** 53n + 1n
  o.requestDone(true, undefined, 1, big, timing(big, 0n, 0n, 0n))
  o.requestDone(true, undefined, 1, big, timing(0n, 0n, 0n, 0n))
  t.match(stats.toJson([{ name: 'm', version: 1 }]), `"success":{"count":2,"ns":${2n * big}}`)
  t.match(stats.toJson([{ name: 'm', version: 1 }]), `"queue":{"count":2,"ns":${big}}`)
})

t.test('failures count by reason; microseconds truncate per request, as Triton\'s counters', async t => {
  const o = new VersionStatistics('m', 1)
  for (const reason of ['REJECTED', 'CANCELED', 'BACKEND', 'BACKEND', 'OTHER', undefined] as const) {
    o.requestDone(false, reason, 1, 10n, NO_COMPUTE)
  }
  t.strictSame([o.failures('REJECTED'), o.failures('CANCELED'), o.failures('BACKEND'), o.failures('OTHER')], [1, 1, 2, 2],
    'no reason counts as OTHER')
  t.equal(o.failCount, 6)
  t.equal(o.successCount, 0)

  o.requestDone(true, undefined, 1, 1_999n, timing(1_999n, 2_500n, 999n, 1_000n))
  o.requestDone(true, undefined, 1, 1_999n, timing(1_999n, 2_500n, 999n, 1_000n))
  t.strictSame([o.requestUs, o.queueUs, o.computeInputUs, o.computeInferUs, o.computeOutputUs], [2, 2, 4, 0, 2])
  t.equal(o.successNs, 3_998n, 'the statistics keep the exact nanoseconds')
})

t.test('last_inference follows the wall clock, never backwards', async t => {
  const times = [2_000, 1_000, 3_000]
  const o = new VersionStatistics('m', 1, () => times.shift()!)
  o.batchDone(1, 0n, 0n, 0n)
  t.equal(o.lastInferenceMs, 2_000)
  o.batchDone(1, 0n, 0n, 0n)
  t.equal(o.lastInferenceMs, 2_000, 'a clock stepping back does not move it')
  o.batchDone(1, 0n, 0n, 0n)
  t.equal(o.lastInferenceMs, 3_000)
})

t.test('the latency hook sees every finished request, in whole milliseconds', async t => {
  const seen: Array<[string, number, number]> = []
  const stats = new ModelStatistics({
    latency: (model, version) => ({ observe: (ms: number) => { seen.push([model, version, ms]) } })
  })
  const o = stats.observerFor('m', 3)
  o.requestDone(true, undefined, 1, 2_999_999n, NO_COMPUTE)
  o.requestDone(false, 'BACKEND', 1, 7_000_000n, NO_COMPUTE)
  t.strictSame(seen, [['m', 3, 2], ['m', 3, 7]])
})

t.test('the registry: versions in order, a reload starts from zero, unobserved versions show zeros', async t => {
  const stats = new ModelStatistics()
  stats.observerFor('b', 2).requestDone(true, undefined, 1, 5n, NO_COMPUTE)
  stats.observerFor('b', 1)
  stats.observerFor('a"q', 1)
  t.strictSame(stats.all().map(s => [s.name, s.version]), [['a"q', 1], ['b', 1], ['b', 2]])
  t.equal(stats.get('b', 2)?.successCount, 1)

  const body = JSON.parse(stats.toJson([{ name: 'b', version: 2 }, { name: 'a"q', version: 1 }, { name: 'c', version: 4 }]))
  t.strictSame(body.model_stats.map((s: { name: string, version: string }) => [s.name, s.version]), [['b', '2'], ['a"q', '1'], ['c', '4']],
    'in the order asked, names escaped')
  t.strictSame(body.model_stats[2], zeros('c', '4'))

  const again = stats.observerFor('b', 2)
  t.equal(again.successCount, 0)
  t.equal(stats.get('b', 2), again)
  t.equal(stats.toJson([]), '{"model_stats":[]}')
})

async function worker (tt: Test, dir: string): Promise<RunningWorker> {
  const w = await startWorker({ modelRepository: dir, httpPort: 0, grpcPort: -1, metricsPort: -1, logger: silentLogger(), shutdownQuietMs: 0 })
  tt.teardown(() => w.close())
  return w
}

t.test('the statistics routes through a worker', async t => {
  const cfg = (name: string, extra = ''): string => `${identityConfig(name, 'TYPE_INT32', [4])}\n${extra}`
  const dir = t.testdir({
    every: { 'config.pbtxt': cfg('every', 'version_policy: { all: {} }'), 1: {}, 2: {} },
    idle: { 'config.pbtxt': cfg('idle'), 1: {} },
    badbackend: { 'config.pbtxt': cfg('badbackend').replace('"identity"', '"tensorrt_llm"'), 1: {} },
    latest: { 'config.pbtxt': cfg('latest', 'version_policy: { latest: { num_versions: 1 } }'), 1: {}, 2: {} }
  })
  const w = await worker(t, dir)

  const all = await get(`${w.url}/v2/models/stats`)
  t.equal(all.status, 200)
  t.equal(all.headers['content-type'], 'application/json; charset=utf-8')
  t.strictSame(all.json, { model_stats: [zeros('every', '1'), zeros('every', '2'), zeros('idle', '1'), zeros('latest', '2')] },
    'every READY version of every model, by name then version; models that failed to load are left out')

  t.strictSame((await get(`${w.url}/v2/models/every/stats`)).json, { model_stats: [zeros('every', '1'), zeros('every', '2')] },
    'no version: every READY version of the model')
  t.strictSame((await get(`${w.url}/v2/models/every/versions/2/stats`)).json, { model_stats: [zeros('every', '2')] })

  // Whatever the scheduler reports lands in its version's entry, and only there.
  const observed = w.statistics.get('every', 2)
  t.ok(observed !== undefined, 'the repository handed each loaded version an observer')
  observed!.batchDone(2, 3n, 4n, 5n)
  observed!.requestDone(true, undefined, 2, 100n, timing(10n, 3n, 4n, 5n))
  observed!.requestDone(false, 'CANCELED', 1, 70n, NO_COMPUTE)
  const one = (await get(`${w.url}/v2/models/every/versions/2/stats`)).json.model_stats[0]
  t.equal(one.inference_count, 2)
  t.equal(one.execution_count, 1)
  t.ok(one.last_inference > Date.now() - 60_000, 'last_inference is a wall-clock time in ms')
  t.strictSame(one.inference_stats.success, { count: 1, ns: 100 })
  t.strictSame(one.inference_stats.fail, { count: 1, ns: 70 })
  t.strictSame(one.batch_stats, [{ batch_size: 2, compute_input: { count: 1, ns: 3 }, compute_infer: { count: 1, ns: 4 }, compute_output: { count: 1, ns: 5 } }])
  t.strictSame((await get(`${w.url}/v2/models/every/versions/1/stats`)).json, { model_stats: [zeros('every', '1')] })

  const cases: Array<[string, string, number, string]> = [
    ['GET', '/v2/models/nope/stats', 400, "requested model 'nope' is not available"],
    ['GET', '/v2/models/nope/versions/1/stats', 400, "requested model 'nope' is not available"],
    ['GET', '/v2/models/badbackend/stats', 400, "requested model 'badbackend' is not available"],
    ['GET', '/v2/models/every/versions/3/stats', 400, "requested model version is not available for model 'every'"],
    ['GET', '/v2/models/latest/versions/1/stats', 400, "requested model version is not available for model 'latest'"],
    ['GET', '/v2/models/every/versions/v1/stats', 404, 'Not Found'],
    ['POST', '/v2/models/stats', 405, 'Method Not Allowed'],
    ['POST', '/v2/models/every/stats', 405, 'Method Not Allowed'],
    ['POST', '/v2/models/every/versions/1/stats', 405, 'Method Not Allowed']
  ]
  for (const [method, path, status, error] of cases) {
    const res = await http(method, `${w.url}${path}`)
    t.equal(res.status, status, `${method} ${path}`)
    t.strictSame(res.json, { error }, `${method} ${path} body`)
  }
  t.ok((await get(`${w.url}/v2`)).json.extensions.includes('statistics'), 'the server metadata lists the extension')
})

t.test('real requests: only those that reached the scheduler count', async t => {
  const dir = t.testdir({ m: { 'config.pbtxt': identityConfig('m', 'TYPE_INT32', [4], 8), 1: {} } })
  const w = await worker(t, dir)
  const url = `${w.url}/v2/models/m/infer`
  const ok = { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [3, 4], data: Array.from({ length: 12 }, (_, i) => i) }] }
  t.equal((await post(url, ok)).status, 200)
  t.equal((await post(url, { ...ok, inputs: [{ ...ok.inputs[0]!, shape: [1, 4], data: [1, 2, 3, 4] }] })).status, 200)
  const invalid = await post(url, { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] })
  t.equal(invalid.status, 400, 'a validation error, refused before enqueue')
  t.equal((await post(url, { inputs: [] })).status, 400)

  const s = (await get(`${w.url}/v2/models/m/stats`)).json.model_stats[0]
  t.equal(s.inference_count, 4, 'batch sizes 3 and 1')
  t.equal(s.execution_count, 2)
  t.equal(s.inference_stats.success.count, 2)
  t.ok(s.inference_stats.success.ns > 0, 'request time is measured')
  t.strictSame(s.inference_stats.fail, { count: 0, ns: 0 }, 'validation errors are not counted, as in Triton')
  t.equal(s.inference_stats.queue.count, 2)
  t.strictSame(s.batch_stats.map((b: { batch_size: number }) => b.batch_size), [1, 3])
  t.ok(s.last_inference > 0)
})
