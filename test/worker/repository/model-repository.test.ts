import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { createLogger, silentLogger, type Logger } from '../../../common/logger.ts'
import { type Tensor } from '../../../common/protocol/types.ts'
import { identityBackend } from '../../../worker/backends/identity-backend.ts'
import { getBackend } from '../../../worker/backends/registry.ts'
import {
  type Backend, type BackendInstance, type BackendRequest, type BackendResponse, type InstanceSpec
} from '../../../worker/backends/types.ts'
import { type GpuDevice } from '../../../worker/instances/instance-groups.ts'
import { ModelRepository, selectVersions, type ModelRepositoryOptions } from '../../../worker/repository/model-repository.ts'
import {
  type Scheduler, type SchedulerObserver, type SchedulerOptions
} from '../../../worker/scheduler/types.ts'
import { identityConfig } from '../../helpers/model-repo.ts'

t.test('version policies select as Triton does', async t => {
  const available = [3, 1, 10, 2]
  t.strictSame(selectVersions({ latest: { num_versions: 1 } }, available), [10])
  t.strictSame(selectVersions({ latest: { num_versions: 2 } }, available), [3, 10], 'numeric, not lexical, order')
  t.strictSame(selectVersions({ latest: { num_versions: 9 } }, available), [1, 2, 3, 10])
  t.strictSame(selectVersions({ all: {} }, available), [1, 2, 3, 10])
  t.strictSame(selectVersions({ specific: { versions: [2, 7, 10] } }, available), [2, 10], 'missing versions are skipped')
  t.strictSame(selectVersions({ all: {} }, []), [])
})

interface Execution {
  instance: string
  deviceId: number
  requests: readonly BackendRequest[]
  /** The version's state in the repository index while it executed. */
  stateDuring: string | undefined
}

/**
 * Identity, recording what happens: instances created (their specs), each execute() with the version's state at that
 * moment, instances closed, models unloaded. `fail` answers every request of model `fail.model` with `fail.error`;
 * `gate` holds executions.
 */
class Recorder {
  readonly specs: InstanceSpec[] = []
  readonly executions: Execution[] = []
  closed = 0
  unloaded = 0
  repo: ModelRepository | undefined
  fail: { model: string, error: string } | undefined
  gate: Promise<void> | undefined

  backend (supportsGpu = false): Backend & { supportsGpu: boolean } {
    return {
      name: 'identity',
      supportsGpu,
      loadModel: async ctx => {
        const model = await identityBackend.loadModel(ctx)
        return {
          createInstance: async spec => {
            this.specs.push(spec)
            const inner = await model.createInstance(spec)
            const instance: BackendInstance = {
              execute: async (requests): Promise<BackendResponse[]> => {
                const state = this.repo?.index().find(e => e.name === ctx.modelName && e.version === String(ctx.version))?.state
                this.executions.push({ instance: spec.name, deviceId: spec.deviceId, requests, stateDuring: state })
                if (this.gate !== undefined) await this.gate
                const fail = this.fail
                if (fail?.model === ctx.modelName) return requests.map(() => ({ error: new Error(fail.error) }))
                return await inner.execute(requests)
              },
              close: async () => { this.closed++ }
            }
            return instance
          },
          unload: async () => { this.unloaded++ }
        }
      }
    }
  }
}

interface Built { repo: ModelRepository, rec: Recorder, logs: Array<Record<string, unknown>> }

/** A repository over `models` (t.testdir layout) whose identity models run through a {@link Recorder}. */
async function repository (
  t: Test, models: Record<string, unknown>,
  options: Partial<ModelRepositoryOptions> & {
    supportsGpu?: boolean, RepositoryClass?: typeof ModelRepository, fail?: Recorder['fail']
  } = {}
): Promise<Built> {
  const root = t.testdir(models as Parameters<Test['testdir']>[0])
  const rec = new Recorder()
  rec.fail = options.fail
  const logs: Array<Record<string, unknown>> = []
  const sink = new Writable({
    write (chunk, _enc, done) { logs.push(JSON.parse(String(chunk)) as Record<string, unknown>); done() }
  })
  const logger: Logger = createLogger({ level: 'debug', destination: sink })
  const { supportsGpu, RepositoryClass = ModelRepository, fail: _fail, ...rest } = options
  const backend = rec.backend(supportsGpu)
  const repo = new RepositoryClass({
    root, logger, random: () => 0.5, getBackend: (name, model) => name === 'identity' ? backend : getBackend(name, model), ...rest
  })
  rec.repo = repo
  await repo.loadAll()
  t.teardown(() => repo.unloadAll())
  return { repo, rec, logs }
}

const cfg = (name: string, extra: string, maxBatchSize = 8): string => `${identityConfig(name, 'TYPE_FP32', [2], maxBatchSize)}\n${extra}`
const warmupSample = (name: string, data: string, batchSize: number, count: number): string =>
  `model_warmup { name: "${name}" batch_size: ${batchSize} count: ${count} inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 2 ] ${data} } } }`
const body = (data: number[]): BackendRequest => ({
  inputs: new Map<string, Tensor>([['INPUT0', { name: 'INPUT0', datatype: 'FP32', shape: [2], data: new Float32Array(data) }]]),
  requestedOutputs: ['OUTPUT0'],
  parameters: {},
  batchSize: 0
})
const warnings = (logs: ReadonlyArray<Record<string, unknown>>): unknown[] => logs.filter(l => l.level === 40).map(l => l.msg)

t.test('instance groups: count instances per group, each created with its spec', async t => {
  const { repo, rec } = await repository(t, {
    m: { 'config.pbtxt': cfg('m', 'instance_group [ { name: "a" count: 3 kind: KIND_CPU }, { name: "b" kind: KIND_MODEL } ]'), 1: {} }
  })
  t.ok(repo.isReady())
  t.strictSame(rec.specs.map(s => `${s.name}:${s.kind}:${s.deviceId}`).sort(), ['a_0:KIND_CPU:-1', 'a_1:KIND_CPU:-1', 'a_2:KIND_CPU:-1', 'b_0:KIND_MODEL:-1'])
})

t.test('KIND_GPU without a GPU: the version is UNAVAILABLE with what to change; with injected GPUs it loads on them', async t => {
  const model = { 'config.pbtxt': cfg('g', 'instance_group [ { count: 2 kind: KIND_GPU } ]'), 1: {} }
  const none = await repository(t, { g: model })
  t.strictSame(none.repo.index(), [{
    name: 'g', version: '1', state: 'UNAVAILABLE',
    reason: "failed to load model 'g': instance group 'g' has kind KIND_GPU, but no GPU is available to this worker; " +
      'use kind KIND_CPU, or KIND_AUTO to use a GPU only when there is one, or run the worker on a machine with a GPU'
  }])
  t.equal(none.rec.specs.length, 0, 'no instance was created')
  t.notOk(none.repo.isReady())

  const devices: GpuDevice[] = [{ id: 0, name: 'NVIDIA H100' }, { id: 1, name: 'NVIDIA H100' }]
  const two = await repository(t, { g: model }, { devices: () => devices })
  t.ok(two.repo.isReady())
  t.strictSame(two.rec.specs.map(s => `${s.name}:${s.kind}:${s.deviceId}`).sort(), ['g_0:KIND_GPU:0', 'g_0:KIND_GPU:1', 'g_1:KIND_GPU:0', 'g_1:KIND_GPU:1'])

  const wrong = await repository(t, { g: { ...model, 'config.pbtxt': cfg('g', 'instance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]') } },
    { devices: () => devices })
  t.match(wrong.repo.index(), [{ state: 'UNAVAILABLE', reason: /specifies gpu id 3, which is not available to this worker \(GPUs: 0 \(NVIDIA H100\), 1 \(NVIDIA H100\)\)/ }])
})

t.test('KIND_AUTO: CPU with one warning without GPUs; GPUs when present and the backend declares supportsGpu', async t => {
  const model = { 'config.pbtxt': cfg('a', 'instance_group [ { count: 2 kind: KIND_AUTO } ]'), 1: {} }
  const cpu = await repository(t, { a: model }, { supportsGpu: true })
  t.ok(cpu.repo.isReady())
  t.strictSame(cpu.rec.specs.map(s => s.kind), ['KIND_CPU', 'KIND_CPU'])
  t.strictSame(warnings(cpu.logs), ["KIND_AUTO instance group 'a' of model 'a' runs on CPU: no GPU is available to this worker"], 'one warning')

  const devices = (): GpuDevice[] => [{ id: 0, name: 'NVIDIA H100' }]
  const gpu = await repository(t, { a: model }, { supportsGpu: true, devices })
  t.strictSame(gpu.rec.specs.map(s => `${s.kind}:${s.deviceId}`), ['KIND_GPU:0', 'KIND_GPU:0'])
  t.strictSame(warnings(gpu.logs), [])

  const cpuOnly = await repository(t, { a: model }, { devices })
  t.strictSame(cpuOnly.rec.specs.map(s => s.kind), ['KIND_CPU', 'KIND_CPU'], 'a backend that does not declare GPU support stays on CPU')
  t.strictSame(warnings(cpuOnly.logs), ["KIND_AUTO instance group 'a' of model 'a' runs on CPU: backend 'identity' does not run on GPUs"])
})

t.test('warmup: zero and random samples run count times on every instance before the version is READY', async t => {
  const { repo, rec } = await repository(t, {
    w: {
      'config.pbtxt': cfg('w', [
        'instance_group [ { count: 2 kind: KIND_CPU } ]',
        warmupSample('zeros', 'zero_data: true', 3, 2),
        warmupSample('random', 'random_data: true', 1, 1)
      ].join('\n')),
      1: {}
    }
  })
  t.ok(repo.isReady())
  t.equal(rec.executions.length, 6, '2 instances x (2 runs of zeros + 1 of random)')
  t.ok(rec.executions.every(e => e.stateDuring === 'LOADING'), 'every warmup execution happened before READY')
  for (const name of ['w_0', 'w_1']) {
    const mine = rec.executions.filter(e => e.instance === name)
    t.strictSame(mine.map(e => e.requests.length), [3, 3, 1], `${name}: batch_size 3 as one batch, twice; then 1`)
    const zero = mine[0]!.requests[0]!.inputs.get('INPUT0')!
    t.strictSame([zero.shape, zero.data], [[1, 2], new Float32Array(2)])
    const random = mine[2]!.requests[0]!.inputs.get('INPUT0')!
    // random is injected as () => 0.5: every byte 0x80, so each FP32 is 0x80808080.
    t.strictSame(random.data, new Float32Array(new Uint8Array(8).fill(0x80).buffer))
  }
  const res = await repo.resolve('w').scheduler.enqueue(body([1, 2]))
  t.ok('outputs' in res)
  t.equal(rec.executions.at(-1)!.stateDuring, 'READY', 'traffic after warmup')
})

t.test('a failing warmup leaves the version UNAVAILABLE with the reason, its instances closed and model unloaded', async t => {
  const { repo, rec } = await repository(t, {
    f: { 'config.pbtxt': cfg('f', `instance_group [ { count: 2 kind: KIND_CPU } ]\n${warmupSample('zeros', 'zero_data: true', 1, 3)}`), 1: {} },
    ok: { 'config.pbtxt': cfg('ok', warmupSample('zeros', 'zero_data: true', 1, 1)), 1: {} }
  }, { fail: { model: 'f', error: 'kaput' } })
  t.strictSame(repo.index(), [
    { name: 'f', version: '1', state: 'UNAVAILABLE', reason: "failed to load model 'f': failed to run warmup sample 'zeros': kaput" },
    { name: 'ok', version: '1', state: 'READY' }
  ])
  t.equal(rec.executions.filter(e => e.instance.startsWith('f_')).length, 2, 'one failing run per instance, then it stopped')
  t.equal(rec.closed, 2, "both of f's instances closed, not ok's")
  t.equal(rec.unloaded, 1)
  t.throws(() => repo.resolve('f', '1'), { code: 'WRK_ERR_MODEL_VERSION_NOT_READY' })
  t.notOk(repo.isReady())
})

t.test('warmup data that does not fit the model fails the load', async t => {
  const { repo, rec } = await repository(t, {
    d: { 'config.pbtxt': cfg('d', warmupSample('file', 'input_data_file: "x.bin"', 1, 1)), 1: {}, warmup: { 'x.bin': Buffer.alloc(4) } }
  })
  t.match(repo.index(), [{ state: 'UNAVAILABLE', reason: "failed to load model 'd': failed to run warmup sample 'file': warmup setting expects 8 bytes, but the data provided from x.bin only has 4 bytes" }])
  t.equal(rec.closed, 1, 'the instance created is closed')
})

t.test('the observer factory is asked once per version that gets a scheduler', async t => {
  const calls: Array<[string, number]> = []
  const observer: SchedulerObserver = { requestDone () {}, batchDone () {} }
  const { repo } = await repository(t, {
    m: { 'config.pbtxt': cfg('m', 'version_policy: { all: {} }'), 1: {}, 2: {} },
    n: { 'config.pbtxt': cfg('n', ''), 3: {} },
    bad: { 'config.pbtxt': cfg('bad', 'instance_group [ { kind: KIND_GPU } ]'), 1: {} }
  }, { observer: (model, version) => { calls.push([model, version]); return model === 'n' ? undefined : observer } })
  t.strictSame(calls.sort(), [['m', 1], ['m', 2], ['n', 3]], 'a version that failed to load gets none')
  t.ok(repo.resolve('n').scheduler, 'undefined: a scheduler without observer')
})

t.test('the scheduler is the one createScheduler returns, with the version\'s instances and observer', async t => {
  const built: SchedulerOptions[] = []
  const fake = (options: SchedulerOptions): Scheduler => ({
    async enqueue () { return { outputs: [] } },
    queueDepth: 3,
    executing: 1,
    async stop () {},
    options
  } as unknown as Scheduler)
  // Absolute URLs from this module's own: the build does not rewrite these strings, and tap resolves relative ones
  // from the source-mapped caller (test/), not from the build that runs (dist/test/, whose modules end in .js).
  const ext = import.meta.url.endsWith('.ts') ? 'ts' : 'js'
  const url = (path: string): string => new URL(`${path}.${ext}`, import.meta.url).href
  const mod = await t.mockImport<typeof import('../../../worker/repository/model-repository.ts')>(
    url('../../../worker/repository/model-repository'),
    { [url('../../../worker/scheduler/create-scheduler')]: { createScheduler: (o: SchedulerOptions) => { built.push(o); return fake(o) } } })
  const observer: SchedulerObserver = { requestDone () {}, batchDone () {} }
  const { repo, logs } = await repository(t, {
    b: { 'config.pbtxt': cfg('b', 'instance_group [ { count: 2 kind: KIND_CPU } ]\ndynamic_batching { max_queue_delay_microseconds: 100 }'), 1: {} }
  }, { RepositoryClass: mod.ModelRepository, observer: () => observer })
  t.equal(built.length, 1)
  const options = built[0]!
  t.equal((repo.resolve('b').scheduler as unknown as { options: SchedulerOptions }).options, options, 'the version serves with it')
  t.match(options, { modelName: 'b', version: 1, config: { name: 'b', dynamic_batching: { max_queue_delay_microseconds: 100 } } })
  t.equal(options.instances.length, 2)
  t.equal(options.observer, observer)
  t.equal(repo.pendingRequests(), 4, 'pending = queued + executing, read from the scheduler')
  t.notMatch(JSON.stringify(logs), /not implemented/, 'no more "dynamic_batching is not implemented" warning')
})

t.test('unloadAll waits for executing requests, then closes instances and unloads', async t => {
  let open!: () => void
  const { repo, rec } = await repository(t, {
    m: { 'config.pbtxt': cfg('m', 'instance_group [ { count: 2 kind: KIND_CPU } ]', 0), 1: {} }
  }, { logger: silentLogger() })
  rec.gate = new Promise(resolve => { open = resolve })
  const pending = repo.resolve('m').scheduler.enqueue(body([1, 2]))
  await new Promise(resolve => setImmediate(resolve))
  t.equal(repo.pendingRequests(), 1)
  let unloaded = false
  const unloading = repo.unloadAll().then(() => { unloaded = true })
  await new Promise(resolve => setTimeout(resolve, 10))
  t.notOk(unloaded, 'still executing')
  open()
  await unloading
  t.ok('outputs' in await pending)
  t.equal(rec.closed, 2)
  t.equal(rec.unloaded, 1)
  t.match(repo.index(), [{ state: 'UNAVAILABLE', reason: 'unloaded' }])
})
