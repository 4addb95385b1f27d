import t from 'tap'
import { identityBackend } from '../../../worker/backends/identity-backend.ts'
import { type Backend } from '../../../worker/backends/types.ts'
import { backendSupportsGpu, placeInstances, type GpuDevice, type PlacementOptions } from '../../../worker/instances/instance-groups.ts'
import { parseModelConfig } from '../../../worker/repository/model-config.ts'
import { type InstanceGroup } from '../../../worker/repository/types.ts'

const H100: GpuDevice[] = [{ id: 1, name: 'NVIDIA H100' }, { id: 0, name: 'NVIDIA H100' }]
const opts = (devices: readonly GpuDevice[] = [], backendSupportsGpu = false): PlacementOptions =>
  ({ modelName: 'm', devices, backendSupportsGpu, backendName: 'native' })
const group = (g: Partial<InstanceGroup> & Pick<InstanceGroup, 'kind'>): InstanceGroup => ({ name: 'm', count: 1, gpus: [], ...g })
const brief = (specs: ReadonlyArray<{ name: string, kind: string, deviceId: number }>): string[] =>
  specs.map(s => `${s.name}:${s.kind}:${s.deviceId}`)

t.test('KIND_CPU and KIND_MODEL: count instances named <group>_<i>, no device', async t => {
  const { specs, warnings } = placeInstances([
    group({ name: 'a', kind: 'KIND_CPU', count: 3 }),
    group({ name: 'b', kind: 'KIND_MODEL', count: 2 })
  ], opts(H100, true))
  t.strictSame(brief(specs), ['a_0:KIND_CPU:-1', 'a_1:KIND_CPU:-1', 'a_2:KIND_CPU:-1', 'b_0:KIND_MODEL:-1', 'b_1:KIND_MODEL:-1'],
    'GPUs being present changes nothing for explicit CPU kinds')
  t.strictSame(warnings, [])
})

t.test('from config.pbtxt: the parser\'s group names and counts reach the specs', async t => {
  const config = parseModelConfig([
    'name: "m"', 'backend: "identity"', 'max_batch_size: 0',
    'input { name: "I" data_type: TYPE_FP32 dims: [ 1 ] }', 'output { name: "O" data_type: TYPE_FP32 dims: [ 1 ] }',
    'instance_group [ { count: 2 kind: KIND_CPU }, { kind: KIND_CPU count: 0 } ]'
  ].join('\n'), { file: 'config.pbtxt', modelName: 'm' })
  t.strictSame(brief(placeInstances(config.instance_group, opts()).specs), ['m_0_0:KIND_CPU:-1', 'm_0_1:KIND_CPU:-1', 'm_1_0:KIND_CPU:-1'],
    'unnamed groups are <model>_<i>; count 0 becomes 1')
  const single = parseModelConfig('name: "m"\nbackend: "identity"\nmax_batch_size: 0\ninput { name: "I" data_type: TYPE_FP32 dims: [ 1 ] }\noutput { name: "O" data_type: TYPE_FP32 dims: [ 1 ] }',
    { file: 'config.pbtxt', modelName: 'm' })
  t.strictSame(brief(placeInstances(single.instance_group, opts()).specs), ['m_0:KIND_CPU:-1'], 'no instance_group: one CPU instance')
})

t.test('KIND_GPU: count instances on each GPU, every GPU when none are listed', async t => {
  t.strictSame(brief(placeInstances([group({ name: 'g', kind: 'KIND_GPU', count: 2 })], opts(H100)).specs),
    ['g_0:KIND_GPU:0', 'g_0:KIND_GPU:1', 'g_1:KIND_GPU:0', 'g_1:KIND_GPU:1'],
    'count per GPU, in Triton\'s order (instance, then device); one name per instance index, as Triton names them')
  t.strictSame(brief(placeInstances([group({ name: 'g', kind: 'KIND_GPU', count: 3, gpus: [1] })], opts(H100)).specs),
    ['g_0:KIND_GPU:1', 'g_1:KIND_GPU:1', 'g_2:KIND_GPU:1'])
  t.strictSame(placeInstances([group({ kind: 'KIND_GPU' })], opts(H100)).warnings, [])
})

t.test('KIND_GPU without a GPU, or naming one that is not there, fails the load and says what to change', async t => {
  t.throws(() => placeInstances([group({ name: 'g', kind: 'KIND_GPU' })], opts()), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': instance group 'g' has kind KIND_GPU, but no GPU is available to this worker; " +
      'use kind KIND_CPU, or KIND_AUTO to use a GPU only when there is one, or run the worker on a machine with a GPU'
  })
  t.throws(() => placeInstances([group({ name: 'g', kind: 'KIND_GPU', gpus: [0, 2] })], opts(H100)), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': instance group 'g' specifies gpu id 2, which is not available to this worker " +
      "(GPUs: 0 (NVIDIA H100), 1 (NVIDIA H100)); list only those ids in 'gpus', or leave 'gpus' out to use every GPU"
  })
  t.throws(() => placeInstances([group({ name: 'g', kind: 'KIND_GPU', gpus: [0] })], opts()), /no GPU is available/,
    'listed GPUs and no device at all: the missing GPU is the message')
})

t.test('KIND_AUTO: GPUs when present and the backend runs on them, else CPU with one warning', async t => {
  const auto = [group({ name: 'a', kind: 'KIND_AUTO', count: 2 })]
  const onGpu = placeInstances(auto, opts(H100, true))
  t.strictSame(brief(onGpu.specs), ['a_0:KIND_GPU:0', 'a_0:KIND_GPU:1', 'a_1:KIND_GPU:0', 'a_1:KIND_GPU:1'])
  t.strictSame(onGpu.warnings, [])

  const noGpu = placeInstances(auto, opts([], true))
  t.strictSame(brief(noGpu.specs), ['a_0:KIND_CPU:-1', 'a_1:KIND_CPU:-1'])
  t.strictSame(noGpu.warnings, ["KIND_AUTO instance group 'a' of model 'm' runs on CPU: no GPU is available to this worker"])

  const cpuBackend = placeInstances(auto, opts(H100, false))
  t.strictSame(brief(cpuBackend.specs), ['a_0:KIND_CPU:-1', 'a_1:KIND_CPU:-1'])
  t.strictSame(cpuBackend.warnings, ["KIND_AUTO instance group 'a' of model 'm' runs on CPU: backend 'native' does not run on GPUs"])

  const two = placeInstances([...auto, group({ name: 'b', kind: 'KIND_AUTO' }), group({ name: 'c', kind: 'KIND_CPU' })], opts())
  t.equal(two.specs.length, 4)
  t.strictSame(two.warnings, ["KIND_AUTO instance groups 'a', 'b' of model 'm' run on CPU: no GPU is available to this worker"],
    'one warning for all the groups that fell back')

  t.strictSame(brief(placeInstances([group({ name: 'a', kind: 'KIND_AUTO', gpus: [1] })], opts(H100, true)).specs), ['a_0:KIND_GPU:1'])
  t.throws(() => placeInstances([group({ name: 'a', kind: 'KIND_AUTO', gpus: [7] })], opts(H100, true)), /specifies gpu id 7/)
})

t.test('backends are CPU-only unless they declare supportsGpu', async t => {
  t.equal(backendSupportsGpu(identityBackend), false)
  const gpu: Backend & { supportsGpu: boolean } = { ...identityBackend, name: 'gpu', supportsGpu: true }
  t.equal(backendSupportsGpu(gpu), true)
  const off: Backend & { supportsGpu: boolean } = { ...gpu, supportsGpu: false }
  t.equal(backendSupportsGpu(off), false)
})
