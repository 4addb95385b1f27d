/**
 * The inference service with the response cache, over a scripted scheduler and a clock that moves one step per
 * reading: which requests reach the scheduler, what each answer is, and the exact statistics Triton would keep.
 */
import t from 'tap'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { type InferRequest, type Tensor } from '../../../common/protocol/types.ts'
import { type BackendRequest, type BackendResponse } from '../../../worker/backends/types.ts'
import { ResponseCache } from '../../../worker/cache/response-cache.ts'
import { InferenceService, usesResponseCache } from '../../../worker/inference/inference-service.ts'
import { ModelStatistics } from '../../../worker/inference/statistics.ts'
import { parseModelConfig } from '../../../worker/repository/model-config.ts'
import { type LoadedVersion, type ModelRepository } from '../../../worker/repository/model-repository.ts'
import { type Scheduler, type SchedulerObserver } from '../../../worker/scheduler/types.ts'
import { stringsOf } from '../../helpers/bytes-data.ts'
import { tensorsPbtxt } from '../../helpers/model-repo.ts'

const STEP = 1000n
/** What the scripted scheduler reports for each request it runs: 50 µs in all, 10 of them queued, 30 computing. */
const RUN = { totalNs: 50_000n, queueNs: 10_000n, computeInputNs: 5_000n, computeInferNs: 20_000n, computeOutputNs: 5_000n }

function stepClock (): () => bigint {
  let now = 0n
  return () => { now += STEP; return now }
}

/** Two outputs echoing two inputs; `extra` is more config text. */
function config (extra = 'response_cache { enable: true }'): ReturnType<typeof parseModelConfig> {
  return parseModelConfig([
    'name: "m"', 'backend: "identity"', 'max_batch_size: 0',
    tensorsPbtxt('input', [{ name: 'IN0', dataType: 'TYPE_FP32', dims: [4] }, { name: 'IN1', dataType: 'TYPE_STRING', dims: [1] }]),
    tensorsPbtxt('output', [{ name: 'OUT0', dataType: 'TYPE_FP32', dims: [4] }, { name: 'OUT1', dataType: 'TYPE_STRING', dims: [1] }]),
    extra
  ].join('\n'), { file: 'config.pbtxt', modelName: 'm' })
}

/** A scheduler that echoes (INi → OUTi), reports as the real ones do, and can be held or made to fail. */
class ScriptedScheduler implements Scheduler {
  readonly queueDepth = 0
  readonly executing = 0
  calls = 0
  fail = false
  hold: Promise<void> | undefined
  constructor (readonly observer: SchedulerObserver) {}

  async enqueue (request: BackendRequest): Promise<BackendResponse> {
    this.calls++
    if (this.hold !== undefined) await this.hold
    if (this.fail) {
      this.observer.requestDone(false, 'BACKEND', 1, RUN.totalNs, { queueNs: RUN.queueNs, computeInputNs: 0n, computeInferNs: 0n, computeOutputNs: 0n })
      return { error: new Error('boom') }
    }
    this.observer.batchDone(1, RUN.computeInputNs, RUN.computeInferNs, RUN.computeOutputNs)
    this.observer.requestDone(true, undefined, 1, RUN.totalNs, RUN)
    const outputs: Tensor[] = []
    for (const name of request.requestedOutputs) {
      const input = request.inputs.get(name.replace('OUT', 'IN'))!
      outputs.push({ name, datatype: input.datatype, shape: input.shape, data: input.data })
    }
    return { outputs, parameters: { served_by: 'scripted' } }
  }

  async stop (): Promise<void> {}
}

interface Fixture {
  service: InferenceService
  scheduler: ScriptedScheduler
  loaded: LoadedVersion
  statistics: ModelStatistics
  cache: ResponseCache | undefined
  stats: () => any
}

function fixture (options: { cache?: boolean, configText?: string } = {}): Fixture {
  const now = stepClock()
  const cache = options.cache === false ? undefined : new ResponseCache({ sizeBytes: 1 << 20, now })
  const statistics = new ModelStatistics({ wallClock: () => 1234 })
  const cfg = config(options.configText)
  const observer = statistics.observerFor('m', 1, { cacheEnabled: usesResponseCache(cfg, cache) })
  const scheduler = new ScriptedScheduler(observer)
  const loaded: LoadedVersion = { name: 'm', version: 1, config: cfg, scheduler }
  const service = new InferenceService({
    repository: {} as ModelRepository, statistics, draining: () => false, now, ...(cache !== undefined ? { responseCache: cache } : {})
  })
  const stats = (): any => JSON.parse(statistics.toJson([{ name: 'm', version: 1 }])).model_stats[0]
  return { service, scheduler, loaded, statistics, cache, stats }
}

function request (id?: string, fill = 1): InferRequest {
  const r: InferRequest = {
    parameters: {},
    inputs: [
      { name: 'IN0', datatype: 'FP32', shape: [4], data: new Float32Array(4).fill(fill) },
      { name: 'IN1', datatype: 'BYTES', shape: [1], data: BytesData.from(['text']) }
    ]
  }
  if (id !== undefined) r.id = id
  return r
}

t.test('a miss runs and is stored; the same request again is a hit that never reaches the scheduler', async t => {
  const f = fixture()
  const first = await f.service.infer(f.loaded, request('a'))
  const second = await f.service.infer(f.loaded, request('b'))
  t.equal(f.scheduler.calls, 1, 'the hit was answered without the scheduler')
  t.equal(first.id, 'a')
  t.equal(second.id, 'b', 'each answer carries its own request id')
  const third = await f.service.infer(f.loaded, request())
  t.notOk('id' in third, 'and none when the request has none')
  t.strictSame(second.outputs.map(o => o.name), ['OUT0', 'OUT1'])
  t.strictSame(Array.from(second.outputs[0]!.data as Float32Array), [1, 1, 1, 1])
  t.strictSame(stringsOf(second.outputs[1]!.data), ['text'])
  t.equal(second.model_name, 'm')
  t.equal(second.model_version, '1')
  t.strictSame(second.parameters, { served_by: 'scripted' })

  // Clock: the miss read it 5 times (start, lookup start, lookup 2, insert 2: lookup 1 step + insert 1 step);
  // each hit 5 times (start, lookup start, lookup 2, end): total 4 steps, queue 1 (the hashing), lookup 1.
  const s = f.stats()
  t.strictSame(s.inference_stats, {
    success: { count: 3, ns: Number(RUN.totalNs + 2n * STEP + 2n * 4n * STEP) },
    fail: { count: 0, ns: 0 },
    queue: { count: 3, ns: Number(RUN.queueNs + 2n * STEP) },
    compute_input: { count: 1, ns: Number(RUN.computeInputNs) },
    compute_infer: { count: 1, ns: Number(RUN.computeInferNs) },
    compute_output: { count: 1, ns: Number(RUN.computeOutputNs) },
    cache_hit: { count: 2, ns: Number(2n * STEP) },
    cache_miss: { count: 1, ns: Number(2n * STEP) }
  })
  t.equal(s.inference_count, 1, 'hits are not inferences')
  t.equal(s.execution_count, 1, 'nor executions')
  t.equal(s.batch_stats.length, 1)

  const v = f.statistics.get('m', 1)!
  t.equal(v.cacheHitUs, 2, 'µs per hit, truncated per request')
  t.equal(v.cacheMissUs, 2)
  t.equal(v.requestUs, 50 + 2 + 4 + 4, 'the request counter includes the cached requests and the insert')
  t.equal(v.queueUs, 10 + 1 + 1)
})

t.test('requested outputs are part of the key: each selection is an entry of its own', async t => {
  const f = fixture()
  const all = await f.service.infer(f.loaded, request())
  const only1: InferRequest = { ...request(), outputs: [{ name: 'OUT1' }] }
  const selected = await f.service.infer(f.loaded, only1)
  t.strictSame(selected.outputs.map(o => o.name), ['OUT1'], 'not the stored answer with every output')
  const reversed: InferRequest = { ...request(), outputs: [{ name: 'OUT1' }, { name: 'OUT0' }] }
  t.strictSame((await f.service.infer(f.loaded, reversed)).outputs.map(o => o.name), ['OUT1', 'OUT0'])
  t.equal(f.scheduler.calls, 3, 'three selections, three misses')
  t.strictSame((await f.service.infer(f.loaded, { ...request(), outputs: [{ name: 'OUT1' }] })).outputs.map(o => o.name), ['OUT1'])
  t.strictSame((await f.service.infer(f.loaded, request())).outputs.map(o => o.name), all.outputs.map(o => o.name))
  t.equal(f.scheduler.calls, 3, 'and each is then a hit')
  t.equal(f.stats().inference_stats.cache_hit.count, 2)
  t.equal(f.stats().inference_stats.cache_miss.count, 3)
})

t.test('the answer form is not part of the worker\'s key; anything else that differs is', async t => {
  const f = fixture()
  await f.service.infer(f.loaded, request())
  await f.service.infer(f.loaded, { ...request(), parameters: { binary_data_output: true } })
  await f.service.infer(f.loaded, { ...request(), outputs: [{ name: 'OUT0', parameters: { binary_data: true } }, { name: 'OUT1' }] })
  await f.service.infer(f.loaded, { ...request(), outputs: [{ name: 'OUT0' }, { name: 'OUT1' }] })
  t.equal(f.scheduler.calls, 2, 'binary or JSON outputs share an entry (the outputs listed by name are another)')
  await f.service.infer(f.loaded, { ...request(), parameters: { priority: 1, timeout: 5 } })
  t.equal(f.scheduler.calls, 2, 'priority and timeout do not change the answer')
  await f.service.infer(f.loaded, request(undefined, 2))
  await f.service.infer(f.loaded, { ...request(), parameters: { custom: 1 } })
  t.equal(f.scheduler.calls, 4, 'other data, or a parameter the backend reads: a miss')
})

t.test('a failed request is not stored and not a miss', async t => {
  const f = fixture()
  f.scheduler.fail = true
  await t.rejects(f.service.infer(f.loaded, request()), { code: 'WRK_ERR_EXECUTION_FAILED' })
  f.scheduler.fail = false
  await f.service.infer(f.loaded, request())
  t.equal(f.scheduler.calls, 2, 'the failure left nothing behind')
  const s = f.stats().inference_stats
  t.strictSame(s.fail, { count: 1, ns: Number(RUN.totalNs) })
  t.equal(s.cache_miss.count, 1, 'only the success counts as a miss')
  t.equal(f.cache!.stats.entries, 1)
})

t.test('two identical requests that both miss: both run, one is stored, one miss is counted (as Triton)', async t => {
  const f = fixture()
  let release!: () => void
  f.scheduler.hold = new Promise(resolve => { release = resolve })
  const a = f.service.infer(f.loaded, request('a'))
  const b = f.service.infer(f.loaded, request('b'))
  release()
  const [ra, rb] = await Promise.all([a, b])
  t.equal(ra.id, 'a')
  t.equal(rb.id, 'b')
  t.equal(f.scheduler.calls, 2)
  const s = f.stats()
  t.equal(s.inference_stats.success.count, 2)
  t.equal(s.inference_stats.cache_miss.count, 1, 'the second insert found the first: not a miss')
  t.equal(s.inference_stats.compute_infer.count, 2)
  t.equal(f.cache!.stats.entries, 1)
})

t.test('no cache: a config that enables it runs uncached; a cache: a config that does not, too', async t => {
  const noCache = fixture({ cache: false })
  await noCache.service.infer(noCache.loaded, request())
  await noCache.service.infer(noCache.loaded, request())
  t.equal(noCache.scheduler.calls, 2, 'response_cache enabled, no --cache-config: both executed')
  t.strictSame(noCache.stats().inference_stats.cache_miss, { count: 0, ns: 0 })
  t.equal(noCache.statistics.get('m', 1)!.cacheEnabled, false)

  const notEnabled = fixture({ configText: '' })
  await notEnabled.service.infer(notEnabled.loaded, request())
  await notEnabled.service.infer(notEnabled.loaded, request())
  t.equal(notEnabled.scheduler.calls, 2)
  t.equal(notEnabled.cache!.stats.lookups, 0, 'the cache is not even asked')
  t.equal(notEnabled.statistics.get('m', 1)!.cacheEnabled, false)

  const disabled = fixture({ configText: 'response_cache { enable: false }' })
  await disabled.service.infer(disabled.loaded, request())
  await disabled.service.infer(disabled.loaded, request())
  t.equal(disabled.scheduler.calls, 2)
})

t.test('an invalid request is refused before the cache is asked', async t => {
  const f = fixture()
  await t.rejects(f.service.infer(f.loaded, { parameters: {}, inputs: [] }))
  t.equal(f.cache!.stats.lookups, 0)
  t.equal(f.stats().inference_stats.cache_miss.count, 0)
})
