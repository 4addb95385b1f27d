import t from 'tap'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { type Tensor } from '../../../common/protocol/types.ts'
import { type BackendInstance, type BackendRequest, type BackendResponse } from '../../../worker/backends/types.ts'
import { buildWarmupSamples, warmUp, type WarmupOptions, type WarmupSample } from '../../../worker/instances/warmup.ts'
import { parseModelConfig } from '../../../worker/repository/model-config.ts'
import { type ModelConfig } from '../../../worker/repository/types.ts'
import { elementsOf } from '../../helpers/bytes-data.ts'

/** A model `m` with one input INPUT0 of `type` and dims [2], plus `warmup` (the model_warmup entries). */
function config (warmup: string, { type = 'TYPE_FP32', maxBatchSize = 4, dims = '[ 2 ]', extraInput = '' } = {}): ModelConfig {
  return parseModelConfig([
    'name: "m"', 'backend: "identity"', `max_batch_size: ${maxBatchSize}`,
    `input { name: "INPUT0" data_type: ${type} dims: ${dims} }`, extraInput,
    `output { name: "OUTPUT0" data_type: ${type} dims: ${dims} }`,
    warmup
  ].join('\n'), { file: 'config.pbtxt', modelName: 'm' })
}

const sample = (name: string, input: string, { batchSize = 1, count = 1, key = 'INPUT0' } = {}): string =>
  `model_warmup { name: "${name}" batch_size: ${batchSize} count: ${count} inputs { key: "${key}" value { ${input} } } }`

const options = (modelDir = '/nonexistent', random: () => number = () => 0): WarmupOptions => ({ modelName: 'm', modelDir, random })

/** Returns the given values in turn, then repeats the last. */
function sequence (...values: number[]): () => number {
  let i = 0
  return () => values[Math.min(i++, values.length - 1)]!
}

const input0 = (s: WarmupSample | undefined, i = 0): Tensor => s!.requests[i]!.inputs.get('INPUT0')!

t.test('zero_data: batch_size batch-1 requests of zeros, for every output', async t => {
  const [s, ...rest] = await buildWarmupSamples(config(sample('zeros', 'data_type: TYPE_FP32 dims: [ 2 ] zero_data: true', { batchSize: 3, count: 2 })), options())
  t.equal(rest.length, 0)
  t.equal(s!.name, 'zeros')
  t.equal(s!.count, 2)
  t.equal(s!.requests.length, 3, 'batch_size 3: three requests executed together')
  for (const r of s!.requests) {
    t.equal(r.batchSize, 1)
    t.strictSame(r.requestedOutputs, ['OUTPUT0'])
    t.strictSame(r.parameters, {})
  }
  const tensor = input0(s)
  t.strictSame({ name: tensor.name, datatype: tensor.datatype, shape: tensor.shape }, { name: 'INPUT0', datatype: 'FP32', shape: [1, 2] },
    'a batching model gets the batch dimension')
  t.strictSame(tensor.data, new Float32Array(2))

  const [plain] = await buildWarmupSamples(config(sample('z', 'data_type: TYPE_INT32 dims: [ 2 ] zero_data: true'), { type: 'TYPE_INT32', maxBatchSize: 0 }), options())
  t.strictSame(input0(plain).shape, [2], 'a non-batching model: dims as given')
  t.equal(plain!.requests[0]!.batchSize, 0)
  t.strictSame(input0(plain).data, new Int32Array(2))

  const [bytes] = await buildWarmupSamples(config(sample('z', 'data_type: TYPE_STRING dims: [ 2 ] zero_data: true'), { type: 'TYPE_STRING' }), options())
  t.ok(input0(bytes).data instanceof BytesData)
  t.strictSame(elementsOf(input0(bytes).data), [new Uint8Array(0), new Uint8Array(0)], 'BYTES zeros are empty strings')
})

t.test('random_data comes from the injected random', async t => {
  const [u8] = await buildWarmupSamples(
    config(sample('r', 'data_type: TYPE_UINT8 dims: [ 4 ] random_data: true'), { type: 'TYPE_UINT8', dims: '[ 4 ]' }),
    options('/x', sequence(0, 0.5, 0.25, 0.999)))
  t.strictSame(input0(u8).data, new Uint8Array([0, 128, 64, 255]))

  const [f32] = await buildWarmupSamples(config(sample('r', 'data_type: TYPE_FP32 dims: [ 2 ] random_data: true')),
    options('/x', sequence(0, 0, 0x80 / 256, 0x3f / 256, 0, 0, 0, 0x40 / 256)))
  t.strictSame(input0(f32).data, new Float32Array([1, 2]), 'random bytes, little-endian, as Triton fills the buffer')

  const [bool] = await buildWarmupSamples(
    config(sample('r', 'data_type: TYPE_BOOL dims: [ 3 ] random_data: true'), { type: 'TYPE_BOOL', dims: '[ 3 ]' }),
    options('/x', sequence(0.9, 0.1, 0.7)))
  t.strictSame(input0(bool).data, new Uint8Array([1, 0, 1]), 'BOOL stays 0/1')

  const [str] = await buildWarmupSamples(config(sample('r', 'data_type: TYPE_STRING dims: [ 2 ] random_data: true'), { type: 'TYPE_STRING' }),
    options('/x', () => 0.5))
  t.ok(input0(str).data instanceof BytesData)
  t.strictSame(elementsOf(input0(str).data), [new Uint8Array(0), new Uint8Array(0)], 'BYTES falls back to zeros')
})

t.test('count 0 runs once; batch_size 0 skips the sample', async t => {
  const samples = await buildWarmupSamples(config([
    sample('skipped', 'data_type: TYPE_FP32 dims: [ 2 ] zero_data: true', { batchSize: 0 }),
    sample('once', 'data_type: TYPE_FP32 dims: [ 2 ] zero_data: true', { count: 0 })
  ].join('\n')), options())
  t.strictSame(samples.map(s => [s.name, s.count]), [['once', 1]])
})

t.test('input_data_file is read from <model>/warmup/', async t => {
  const ints = Buffer.alloc(12)
  ints.writeInt32LE(7, 0); ints.writeInt32LE(-3, 4); ints.writeInt32LE(99, 8)
  const strings = Buffer.concat([Buffer.from([2, 0, 0, 0]), Buffer.from('hi'), Buffer.from([0, 0, 0, 0])])
  const dir = t.testdir({ warmup: { 'ints.bin': ints, 'short.bin': Buffer.alloc(4), 'strings.bin': strings, 'cut.bin': Buffer.from([9, 0, 0, 0, 1]), 'one.bin': Buffer.from([1, 0, 0, 0, 65]) }, 'secret.bin': ints })
  const int32 = (file: string): ModelConfig =>
    config(sample('f', `data_type: TYPE_INT32 dims: [ 2 ] input_data_file: "${file}"`), { type: 'TYPE_INT32' })

  const [s] = await buildWarmupSamples(int32('ints.bin'), options(dir))
  t.strictSame(input0(s).data, new Int32Array([7, -3]), 'raw little-endian elements; extra bytes are ignored')

  const [str] = await buildWarmupSamples(
    config(sample('f', 'data_type: TYPE_STRING dims: [ 2 ] input_data_file: "strings.bin"'), { type: 'TYPE_STRING' }), options(dir))
  t.ok(input0(str).data instanceof BytesData)
  t.strictSame(elementsOf(input0(str).data), [new Uint8Array(Buffer.from('hi')), new Uint8Array(0)], 'BYTES: length-prefixed elements')

  await t.rejects(buildWarmupSamples(int32('short.bin'), options(dir)), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': failed to run warmup sample 'f': warmup setting expects 8 bytes, but the data provided from short.bin only has 4 bytes"
  })
  await t.rejects(buildWarmupSamples(
    config(sample('f', 'data_type: TYPE_STRING dims: [ 2 ] input_data_file: "cut.bin"'), { type: 'TYPE_STRING' }), options(dir)),
  /failed to run warmup sample 'f': element 0 of input 'INPUT0' in cut.bin declares 9 bytes, but only 1 remain/)
  await t.rejects(buildWarmupSamples(
    config(sample('f', 'data_type: TYPE_STRING dims: [ 2 ] input_data_file: "one.bin"'), { type: 'TYPE_STRING' }), options(dir)),
  /failed to run warmup sample 'f': warmup setting expects 2 elements for input 'INPUT0', but the data provided from one.bin holds 1/)
  await t.rejects(buildWarmupSamples(int32('missing.bin'), options(dir)),
    /failed to run warmup sample 'f': cannot read input_data_file '.*missing\.bin' for input 'INPUT0'/)
  await t.rejects(buildWarmupSamples(int32('../secret.bin'), options(dir)),
    /input_data_file '\.\.\/secret\.bin' of input 'INPUT0' must name a file inside .*warmup/, 'no reading outside warmup/')
})

t.test('warmup requests are checked as client requests are', async t => {
  await t.rejects(buildWarmupSamples(config(sample('w', 'data_type: TYPE_INT32 dims: [ 2 ] zero_data: true')), options()), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': failed to run warmup sample 'w': [request id: <id_unknown>] inference input 'INPUT0' data-type is 'INT32', but model 'm' expects 'FP32'"
  })
  await t.rejects(buildWarmupSamples(config(sample('w', 'data_type: TYPE_FP32 dims: [ 3 ] zero_data: true')), options()),
    /failed to run warmup sample 'w': \[request id: <id_unknown>\] unexpected shape for input 'INPUT0' for model 'm'. Expected \[-1,2\], got \[1,3\]/)
  await t.rejects(buildWarmupSamples(config(sample('w', 'data_type: TYPE_FP32 dims: [ 2 ] zero_data: true', { key: 'NOPE' })), options()),
    /failed to run warmup sample 'w': unexpected inference input 'NOPE' for model 'm'/)
  await t.rejects(buildWarmupSamples(config(sample('w', 'data_type: TYPE_FP32 dims: [ 2 ] zero_data: true'),
    { extraInput: 'input { name: "INPUT1" data_type: TYPE_FP32 dims: [ 2 ] }' }), options()),
  /failed to run warmup sample 'w': \[request id: <id_unknown>\] expected 2 inputs but got 1 inputs/, 'a required input left out')
})

/** An instance that records each execute() call; `answer` decides the responses. */
function recorder (answer: (requests: readonly BackendRequest[]) => Promise<BackendResponse[]> | BackendResponse[] =
  rs => rs.map(() => ({ outputs: [] }))): BackendInstance & { calls: Array<readonly BackendRequest[]> } {
  const calls: Array<readonly BackendRequest[]> = []
  return {
    calls,
    async execute (requests) { calls.push(requests); return await answer(requests) },
    async close () {}
  }
}

t.test('warmUp runs each sample count times on every instance, as one batch', async t => {
  const samples = await buildWarmupSamples(config([
    sample('a', 'data_type: TYPE_FP32 dims: [ 2 ] zero_data: true', { batchSize: 2, count: 3 }),
    sample('b', 'data_type: TYPE_FP32 dims: [ 2 ] random_data: true', { count: 1 })
  ].join('\n')), options('/x', () => 0.5))
  const instances = [recorder(), recorder()]
  await warmUp('m', instances, samples)
  for (const instance of instances) {
    t.strictSame(instance.calls.map(c => c.length), [2, 2, 2, 1], 'sample a: 3 batches of 2; then sample b once')
    t.equal(instance.calls[0], samples[0]!.requests)
  }
  await warmUp('m', instances, [])
  t.equal(instances[0]!.calls.length, 4, 'no samples: nothing runs')
})

t.test('a failing warmup rejects with Triton\'s message, after every instance stopped', async t => {
  const samples = await buildWarmupSamples(config(sample('w', 'data_type: TYPE_FP32 dims: [ 2 ] zero_data: true', { batchSize: 2, count: 3 })), options())
  const errors = recorder(rs => rs.map(() => ({ error: new Error('kaput') })))
  await t.rejects(warmUp('m', [errors], samples), {
    code: 'WRK_ERR_MODEL_LOAD', message: "failed to load model 'm': failed to run warmup sample 'w': kaput"
  })
  t.equal(errors.calls.length, 1, 'the first failing execution ends the warmup')

  const mixed = recorder(rs => [{ outputs: [] }, { error: new Error('bad pixel') }].slice(0, rs.length))
  await t.rejects(warmUp('m', [mixed], samples), /failed to run warmup sample 'w': bad pixel$/)

  const short = recorder(() => [{ outputs: [] }])
  await t.rejects(warmUp('m', [short], samples), /failed to run warmup sample 'w': the backend returned 1 responses for 2 requests/)

  let slowDone = false
  const slow = recorder(async rs => {
    await new Promise(resolve => setTimeout(resolve, 20))
    slowDone = true
    return rs.map(() => ({ outputs: [] }))
  })
  const throws = recorder(() => { throw new Error('device lost') })
  await t.rejects(warmUp('m', [throws, slow], samples), /failed to run warmup sample 'w': device lost/)
  t.ok(slowDone, 'the other instance finished before the rejection')
})
