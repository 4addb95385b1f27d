import t, { type Test } from 'tap'
import { silentLogger } from '../../../common/logger.ts'
import { startWorker, type RunningWorker } from '../../../worker/main.ts'
import { type RequestTiming } from '../../../worker/scheduler/types.ts'
import { type ResponseCacheStats } from '../../../worker/cache/response-cache.ts'
import { WorkerMetrics, type PendingCount } from '../../../worker/server/metrics.ts'
import { ModelStatistics } from '../../../worker/inference/statistics.ts'
import { http, post } from '../../helpers/http.ts'
import { identityConfig } from '../../helpers/model-repo.ts'
import { scrape, sumOf } from '../../helpers/scrape.ts'

const timing = (queueNs: bigint, computeInputNs: bigint, computeInferNs: bigint, computeOutputNs: bigint): RequestTiming =>
  ({ queueNs, computeInputNs, computeInferNs, computeOutputNs })

/** The Triton families of a scrape (HELP, TYPE and samples), without the process metrics. */
const tritonLines = (text: string): string =>
  text.split('\n').filter(l => l.startsWith('nv_') || l.startsWith('# HELP nv_') || l.startsWith('# TYPE nv_')).join('\n')

function fixture (pending: PendingCount[] = []): { metrics: WorkerMetrics, stats: ModelStatistics } {
  const metrics: WorkerMetrics = new WorkerMetrics({ statistics: () => stats.all(), pending: () => pending })
  const stats: ModelStatistics = new ModelStatistics({ latency: (m, v) => metrics.latency(m, v) })
  return { metrics, stats }
}

t.test('Triton\'s families, names, labels, help texts and units, from the statistics', async t => {
  const { metrics, stats } = fixture([{ model: 'm', version: 1, count: 4 }])
  const o = stats.observerFor('m', 1)
  o.batchDone(3, 1_000n, 2_000n, 3_000n)
  o.requestDone(true, undefined, 2, 150_000_999n, timing(40_999n, 1_000n, 2_000n, 3_999n))
  o.requestDone(true, undefined, 1, 600_000_000n, timing(1_999n, 1_000n, 2_000n, 3_000n))
  o.requestDone(false, 'REJECTED', 1, 7_000_000_000n, timing(7_000_000_000n, 0n, 0n, 0n))
  o.requestDone(false, 'BACKEND', 1, 1_000_000n, timing(0n, 0n, 0n, 0n))

  t.equal(tritonLines(await metrics.metrics()), [
    '# HELP nv_inference_request_success Number of successful inference requests, all batch sizes',
    '# TYPE nv_inference_request_success counter',
    'nv_inference_request_success{model="m",version="1"} 2',
    '# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes',
    '# TYPE nv_inference_request_failure counter',
    'nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 1',
    'nv_inference_request_failure{model="m",reason="CANCELED",version="1"} 0',
    'nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 1',
    'nv_inference_request_failure{model="m",reason="OTHER",version="1"} 0',
    '# HELP nv_inference_count Number of inferences performed (does not include cached requests)',
    '# TYPE nv_inference_count counter',
    'nv_inference_count{model="m",version="1"} 3',
    '# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)',
    '# TYPE nv_inference_exec_count counter',
    'nv_inference_exec_count{model="m",version="1"} 1',
    '# HELP nv_inference_request_duration_us Cumulative inference request duration in microseconds (includes cached requests)',
    '# TYPE nv_inference_request_duration_us counter',
    'nv_inference_request_duration_us{model="m",version="1"} 750000',
    '# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds (includes cached requests)',
    '# TYPE nv_inference_queue_duration_us counter',
    'nv_inference_queue_duration_us{model="m",version="1"} 41',
    '# HELP nv_inference_compute_input_duration_us Cumulative compute input duration in microseconds (does not include cached requests)',
    '# TYPE nv_inference_compute_input_duration_us counter',
    'nv_inference_compute_input_duration_us{model="m",version="1"} 2',
    '# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in microseconds (does not include cached requests)',
    '# TYPE nv_inference_compute_infer_duration_us counter',
    'nv_inference_compute_infer_duration_us{model="m",version="1"} 4',
    '# HELP nv_inference_compute_output_duration_us Cumulative inference compute output duration in microseconds (does not include cached requests)',
    '# TYPE nv_inference_compute_output_duration_us counter',
    'nv_inference_compute_output_duration_us{model="m",version="1"} 6',
    '# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.',
    '# TYPE nv_inference_pending_request_count gauge',
    'nv_inference_pending_request_count{model="m",version="1"} 4',
    '# HELP nv_inference_first_response_histogram_ms Duration from request to first response in milliseconds',
    '# TYPE nv_inference_first_response_histogram_ms histogram',
    // Every finished request, failures included: 150 ms, 600 ms, 7000 ms, 1 ms; in prometheus-cpp's order and layout.
    'nv_inference_first_response_histogram_ms_count{model="m",version="1"} 4',
    'nv_inference_first_response_histogram_ms_sum{model="m",version="1"} 7751',
    'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="100"} 1',
    'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="500"} 2',
    'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="2000"} 3',
    'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="5000"} 3',
    'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="+Inf"} 4'
  ].join('\n'))
})

t.test('with a response cache: Triton\'s cache families, per-model series only for the versions that use it', async t => {
  const cacheStats: ResponseCacheStats = {
    entries: 3, bytes: 512, sizeBytes: 2048, lookups: 7, hits: 4, misses: 3, evictions: 1, insertFailures: 0, lookupUs: 12, insertionUs: 9
  }
  const metrics: WorkerMetrics = new WorkerMetrics({ statistics: () => stats.all(), pending: () => [], cache: () => cacheStats })
  const stats: ModelStatistics = new ModelStatistics({ latency: (m, v) => metrics.latency(m, v) })
  const cached = stats.observerFor('c', 1, { cacheEnabled: true })
  stats.observerFor('plain', 1)
  cached.batchDone(1, 1_000n, 2_000n, 3_000n)
  cached.requestDone(true, undefined, 1, 100_000n, timing(10_000n, 1_000n, 2_000n, 3_000n))
  cached.cacheMiss(3_999n)
  cached.cacheHit(20_000n, 5_000n, 1_500n)
  cached.cacheHit(20_999n, 5_999n, 1_999n)

  const text = tritonLines(await metrics.metrics())
  const family = (name: string): string => text.split('\n').filter(l => l.includes(` ${name} `) || l.startsWith(`${name}{`) || l.startsWith(`${name} `)).join('\n')
  t.equal(family('nv_cache_num_hits_per_model'), [
    '# HELP nv_cache_num_hits_per_model Number of cache hits per model',
    '# TYPE nv_cache_num_hits_per_model counter',
    'nv_cache_num_hits_per_model{model="c",version="1"} 2'
  ].join('\n'), 'no series for the version without the cache')
  t.equal(family('nv_cache_num_misses_per_model'), [
    '# HELP nv_cache_num_misses_per_model Number of cache misses per model',
    '# TYPE nv_cache_num_misses_per_model counter',
    'nv_cache_num_misses_per_model{model="c",version="1"} 1'
  ].join('\n'))
  t.equal(family('nv_cache_hit_duration_per_model'), [
    '# HELP nv_cache_hit_duration_per_model Total cache hit duration per model, in microseconds',
    '# TYPE nv_cache_hit_duration_per_model counter',
    'nv_cache_hit_duration_per_model{model="c",version="1"} 2'
  ].join('\n'), 'µs truncated per request: 1 + 1')
  t.equal(family('nv_cache_miss_duration_per_model'), [
    '# HELP nv_cache_miss_duration_per_model Total cache miss (insert+lookup) duration per model, in microseconds',
    '# TYPE nv_cache_miss_duration_per_model counter',
    'nv_cache_miss_duration_per_model{model="c",version="1"} 3'
  ].join('\n'))
  t.match(text, 'nv_inference_request_success{model="c",version="1"} 3', 'hits are successes')
  t.match(text, 'nv_inference_count{model="c",version="1"} 1', 'hits are not inferences')
  t.match(text, 'nv_inference_exec_count{model="c",version="1"} 1')
  t.match(text, 'nv_inference_request_duration_us{model="c",version="1"} 143', '100 + 3 (the miss) + 20 + 20 (the hits), truncated per request')
  t.match(text, 'nv_inference_queue_duration_us{model="c",version="1"} 20', '10 + 5 + 5')
  t.match(text, 'nv_inference_compute_infer_duration_us{model="c",version="1"} 2', 'hits compute nothing')
  t.match(text, 'nv_inference_first_response_histogram_ms_count{model="c",version="1"} 3')
  for (const [name, help, value] of [
    ['nv_cache_num_entries', 'Number of responses stored in response cache', 3],
    ['nv_cache_num_lookups', 'Number of cache lookups in response cache', 7],
    ['nv_cache_num_hits', 'Number of cache hits in response cache', 4],
    ['nv_cache_num_misses', 'Number of cache misses in response cache', 3],
    ['nv_cache_num_evictions', 'Number of cache evictions in response cache', 1],
    ['nv_cache_lookup_duration', 'Total cache lookup duration (hit and miss), in microseconds', 12],
    ['nv_cache_insertion_duration', 'Total cache insertion duration, in microseconds', 9],
    ['nv_cache_util', 'Cache utilization [0.0 - 1.0]', 0.25]
  ] as const) {
    t.equal(family(name), [`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name} ${value}`].join('\n'), name)
  }

  const without = fixture()
  without.stats.observerFor('c', 1, { cacheEnabled: true })
  t.notMatch(await without.metrics.metrics(), /nv_cache_/, 'a worker without a cache has no cache families')
})

t.test('every series exists at zero from load time; a reloaded version starts again from zero', async t => {
  const { metrics, stats } = fixture()
  stats.observerFor('a', 1)
  stats.observerFor('b', 2).requestDone(true, undefined, 1, 5_000n, timing(0n, 0n, 0n, 0n))
  let text = await metrics.metrics()
  t.match(text, /^nv_inference_request_success\{model="a",version="1"\} 0$/m)
  t.match(text, /^nv_inference_request_success\{model="b",version="2"\} 1$/m)
  for (const reason of ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER']) {
    t.match(text, new RegExp(`^nv_inference_request_failure\\{model="a",reason="${reason}",version="1"\\} 0$`, 'm'), reason)
  }
  t.match(text, /^nv_inference_first_response_histogram_ms_count\{model="a",version="1"\} 0$/m)
  t.match(text, /^nv_inference_first_response_histogram_ms_bucket\{model="a",version="1",le="\+Inf"\} 0$/m)
  t.match(text, /^nv_inference_first_response_histogram_ms_count\{model="b",version="2"\} 1$/m)

  stats.observerFor('b', 2)
  text = await metrics.metrics()
  t.match(text, /^nv_inference_request_success\{model="b",version="2"\} 0$/m, 'not the old count, nor the two added')
  t.match(text, /^nv_inference_first_response_histogram_ms_count\{model="b",version="2"\} 0$/m)
  t.equal(text.match(/^nv_inference_request_success\{model="b"/gm)?.length, 1, 'one series per version')
  t.equal(text.match(/^nv_inference_first_response_histogram_ms_count\{model="b"/gm)?.length, 1)
})

t.test('label values are escaped; versions listed in numeric order', async t => {
  const { metrics, stats } = fixture()
  stats.observerFor('q"uo\\te\nd', 10)
  stats.observerFor('m', 10)
  stats.observerFor('m', 9)
  const text = tritonLines(await metrics.metrics())
  t.match(text, 'nv_inference_request_success{model="q\\"uo\\\\te\\nd",version="10"} 0')
  t.match(text, 'nv_inference_first_response_histogram_ms_count{model="q\\"uo\\\\te\\nd",version="10"} 0')
  const order = [...text.matchAll(/^nv_inference_first_response_histogram_ms_count\{model="((?:[^"\\]|\\.)*)",version="(\d+)"/gm)]
    .map(m => `${m[1]}/${m[2]}`)
  t.strictSame(order, ['m/9', 'm/10', 'q\\"uo\\\\te\\nd/10'])
})

async function worker (tt: Test, dir: string): Promise<RunningWorker> {
  const w = await startWorker({ modelRepository: dir, httpPort: 0, grpcPort: -1, metricsPort: 0, logger: silentLogger(), shutdownQuietMs: 0 })
  tt.teardown(() => w.close())
  return w
}

t.test('the metrics port of a worker: only requests that reached a scheduler count', async t => {
  const dir = t.testdir({ m: { 'config.pbtxt': identityConfig('m', 'TYPE_INT32', [4], 8), 1: {} } })
  const w = await worker(t, dir)
  const url = `${w.url}/v2/models/m/infer`
  const rows = (n: number): object => ({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [n, 4], data: Array.from({ length: 4 * n }, (_, i) => i) }] })
  t.equal((await post(url, rows(2))).status, 200)
  t.equal((await post(url, rows(3))).status, 200)
  t.equal((await post(url, { inputs: [] })).status, 400, 'validation error: refused before enqueue')
  t.equal((await post(url, { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] })).status, 400)
  t.equal((await post(`${w.url}/v2/models/nope/infer`, rows(1))).status, 404)

  const { text, samples } = await scrape(w)
  const labels = { model: 'm', version: '1' }
  t.match(text, /^nv_inference_request_success\{model="m",version="1"\} 2$/m)
  t.match(text, /^nv_inference_count\{model="m",version="1"\} 5$/m, 'inference count sums batch sizes')
  t.match(text, /^nv_inference_exec_count\{model="m",version="1"\} 2$/m)
  t.equal(sumOf(samples, 'nv_inference_request_failure', labels), 0, 'validation errors are not counted, as in Triton')
  t.equal(samples.filter(s => s.name === 'nv_inference_request_failure').length, 4, 'one series per reason')
  t.equal(sumOf(samples, 'nv_inference_first_response_histogram_ms_count', labels), 2)
  t.ok(sumOf(samples, 'nv_inference_request_duration_us', labels) >= sumOf(samples, 'nv_inference_compute_infer_duration_us', labels))
  t.match(text, /^nv_inference_pending_request_count\{model="m",version="1"\} 0$/m)

  // The counters are the statistics: the two agree.
  const stats = w.statistics.get('m', 1)!
  t.equal(stats.successCount, 2)
  t.equal(sumOf(samples, 'nv_inference_request_duration_us', labels), stats.requestUs)

  t.equal((await http('GET', `http://127.0.0.1:${w.metricsPort}/other`)).status, 404)
  t.equal((await http('GET', `http://127.0.0.1:${w.metricsPort}/metrics/`)).status, 200)
  const posted = await http('POST', `http://127.0.0.1:${w.metricsPort}/metrics`)
  t.equal(posted.status, 405)
  t.strictSame(posted.json, { error: 'Method Not Allowed' })
})

t.test('the pending-request gauge counts requests queued behind a busy instance', async t => {
  const dir = t.testdir({
    slow: {
      'config.pbtxt': `${identityConfig('slow', 'TYPE_FP32', [1]).replace('"identity"', '"simulated"')}\n` +
        'instance_group [ { count: 1, kind: KIND_CPU } ]\n' +
        'parameters { key: "fixed_ms" value: { string_value: "200" } }',
      1: {}
    }
  })
  const w = await worker(t, dir)
  const body = { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [4] }] }
  const labels = { model: 'slow', version: '1' }
  const requests = [1, 2, 3].map(() => post(`${w.url}/v2/models/slow/infer`, body))

  // Wait until the worker holds all three (queued or executing); the first takes 200 ms, so the other two still wait.
  for (let i = 0; i < 100 && w.repository.pendingRequests() < 3; i++) await new Promise(resolve => setTimeout(resolve, 5))
  t.equal(w.repository.pendingRequests(), 3)
  const during = (await scrape(w)).samples
  t.equal(sumOf(during, 'nv_inference_pending_request_count', labels), 2, 'received, not yet executing')

  t.strictSame((await Promise.all(requests)).map(r => r.status), [200, 200, 200])
  const { samples } = await scrape(w)
  t.equal(sumOf(samples, 'nv_inference_pending_request_count', labels), 0)
  t.equal(sumOf(samples, 'nv_inference_request_success', labels), 3)
  t.ok(sumOf(samples, 'nv_inference_queue_duration_us', labels) >= 150_000 + 350_000,
    'the second and third waited about 200 and 400 ms in the queue')
})
