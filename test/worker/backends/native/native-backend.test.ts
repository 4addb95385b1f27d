import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { isFlotillaError } from '../../../../common/errors.ts'
import { silentLogger } from '../../../../common/logger.ts'
import { type Tensor } from '../../../../common/protocol/types.ts'
import {
  loadNative, nativeAvailable, type NativeArray, type NativeModule, type NativePlan, type SessionOptions
} from '../../../../native/index.ts'
import {
  checkConfigAgainstModel, configInputDims, createNativeBackend, nativeBackend, sessionPrecision
} from '../../../../worker/backends/native/native-backend.ts'
import { OnnxBuilder } from '../../../../worker/backends/native/onnx-builder.ts'
import { planFromOnnx } from '../../../../worker/backends/native/planner.ts'
import { type BackendRequest, type BackendResponse, type LoadContext } from '../../../../worker/backends/types.ts'
import { parseModelConfig } from '../../../../worker/repository/model-config.ts'
import { type ModelConfig } from '../../../../worker/repository/types.ts'
import { throwsCoded } from '../../../helpers/coded-error.ts'

const config = (body: string, name = 'mlp'): ModelConfig =>
  parseModelConfig(`name: "${name}"\nbackend: "native"\n${body}`, { file: 'config.pbtxt', modelName: name })

const MLP_CONFIG = `max_batch_size: 8
input { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] }`

/** Y = Relu(X.W + B) with W[k][n] = k - n and B = [1, -2, 0.5]. */
function mlp (): Uint8Array {
  const b = new OnnxBuilder({ opset: 17 })
  b.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 3])
  b.initializer('W', Float32Array.from({ length: 12 }, (_, i) => Math.floor(i / 3) - (i % 3)), [4, 3])
  b.initializer('B', Float32Array.from([1, -2, 0.5]), [3])
  b.node('MatMul', ['X', 'W'], ['XW']).node('Add', ['XW', 'B'], ['XWB']).node('Relu', ['XWB'], ['Y'])
  return b.build()
}

function mlpReference (x: Float32Array): number[] {
  const out: number[] = []
  for (let r = 0; r < x.length / 4; r++) {
    for (let n = 0; n < 3; n++) {
      let s = [1, -2, 0.5][n]!
      for (let k = 0; k < 4; k++) s += x[r * 4 + k]! * (k - n)
      out.push(Math.max(s, 0))
    }
  }
  return out
}

/** An embedding lookup: Y[b, s, :] = table[ids[b, s], :] with table[i] = [i, 10 i]. */
function embedding (): Uint8Array {
  const b = new OnnxBuilder({ opset: 17 })
  b.input('ids', 'int64', ['N', 2]).output('Y', 'float32', ['N', 2, 2])
  b.initializer('table', Float32Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? i / 2 : 5 * i - 5)), [5, 2])
  b.node('Gather', ['table', 'ids'], ['Y'], {}, 'embed')
  return b.build()
}

const EMBEDDING_CONFIG = `max_batch_size: 4
input { name: "ids" data_type: TYPE_INT64 dims: [ 2 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 2, 2 ] }`

function context (t: Test, cfg: ModelConfig, model: Uint8Array, filename = 'model.onnx'): LoadContext {
  const dir = t.testdir({ 1: {} })
  writeFileSync(join(dir, '1', filename), model)
  return { modelName: cfg.name, version: 1, modelDir: dir, versionDir: join(dir, '1'), config: cfg, logger: silentLogger(), random: Math.random }
}

const request = (inputs: Tensor[], batchSize: number): BackendRequest => ({
  inputs: new Map(inputs.map(x => [x.name, x])), requestedOutputs: ['Y'], parameters: {}, batchSize
})

function outputsOf (t: Test, r: BackendResponse | undefined): Tensor[] {
  if (r === undefined || 'error' in r) {
    t.fail(`expected outputs, got ${r === undefined ? 'nothing' : r.error.message}`)
    return []
  }
  return r.outputs
}

interface FakeSession { plan: NativePlan, options: SessionOptions | undefined, closed: boolean, runs: Array<{ inputs: readonly NativeArray[], batch: number }> }

/** A NativeModule whose sessions answer with `answer` and record what they were given. */
function fakeNative (answer: (inputs: readonly NativeArray[], batch: number) => Promise<NativeArray[]>): { module: NativeModule, sessions: FakeSession[] } {
  const sessions: FakeSession[] = []
  const module = {
    createSession (plan: NativePlan, options?: SessionOptions) {
      const s: FakeSession = { plan, options, closed: false, runs: [] }
      sessions.push(s)
      return {
        async run (inputs: readonly NativeArray[], batch: number) {
          s.runs.push({ inputs, batch })
          return await answer(inputs, batch)
        },
        close () { s.closed = true },
        arenaBytes: 0,
        device: options?.device ?? -1
      }
    }
  }
  return { module: module as unknown as NativeModule, sessions }
}

t.test('precision parameter and config dims', async t => {
  t.equal(sessionPrecision(config(MLP_CONFIG)), 'fp32')
  t.equal(sessionPrecision(config(`${MLP_CONFIG}\nparameters { key: "precision" value: { string_value: "bf16" } }`)), 'bf16')
  throwsCoded(t, () => sessionPrecision(config(`${MLP_CONFIG}\nparameters { key: "precision" value: { string_value: "int8" } }`)), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'mlp': parameter 'precision' of the native backend must be one of fp32, fp16, bf16, got 'int8'"
  })
  t.strictSame(configInputDims(config(`max_batch_size: 2
input { name: "A" data_type: TYPE_FP32 dims: [ 16 ] reshape: { shape: [ 4, 4 ] } }
input { name: "B" data_type: TYPE_FP32 dims: [ 3 ] }`)), { A: [4, 4], B: [3] }, 'a reshape is what the model sees')
})

t.test('config.pbtxt is checked against the model', async t => {
  const model = planFromOnnx(mlp(), { modelName: 'mlp', maxBatch: 8 })
  checkConfigAgainstModel(config(MLP_CONFIG), model)
  checkConfigAgainstModel(config('max_batch_size: 8'), model)
  checkConfigAgainstModel(config(MLP_CONFIG.replace('dims: [ 3 ]', 'dims: [ -1 ]')), model)
  const fails = (body: string, message: string): void => throwsCoded(t, () => checkConfigAgainstModel(config(body), model),
    { code: 'WRK_ERR_MODEL_LOAD', message: `failed to load model 'mlp': ${message}` })
  fails(MLP_CONFIG.replace('name: "X"', 'name: "input"'),
    "config.pbtxt declares input 'input', which the model does not have; its inputs are 'X'")
  fails(MLP_CONFIG.replace('name: "Y"', 'name: "out"'),
    "config.pbtxt declares output 'out', which the model does not have; its outputs are 'Y'")
  fails(MLP_CONFIG.replace('TYPE_FP32 dims: [ 4 ]', 'TYPE_FP16 dims: [ 4 ]'),
    "input 'X' is TYPE_FP16 in config.pbtxt, the model's is float32: set data_type: TYPE_FP32")
  fails(MLP_CONFIG.replace('TYPE_FP32 dims: [ 3 ]', 'TYPE_INT64 dims: [ 3 ]'),
    "output 'Y' is TYPE_INT64 in config.pbtxt, the model's is float32: set data_type: TYPE_FP32")
  fails(MLP_CONFIG.replace('dims: [ 4 ]', 'dims: [ 5 ]'),
    "input 'X' has dims [ 5 ] in config.pbtxt, the model's input is [ 4 ] after the batch dimension: set dims: [ 4 ]")
  fails(MLP_CONFIG.replace('dims: [ 4 ]', 'dims: [ -1 ]'),
    "input 'X' has dims [ -1 ] in config.pbtxt, the model's input is [ 4 ] after the batch dimension: set dims: [ 4 ]")
  fails(MLP_CONFIG.replace('dims: [ 3 ]', 'dims: [ 1, 3 ]'),
    "output 'Y' has dims [ 1, 3 ] in config.pbtxt, the model's output is [ 3 ] after the batch dimension: set dims: [ 3 ]")
  fails(MLP_CONFIG.replace('dims: [ 4 ] }', 'dims: [ 2, 2 ] reshape: { shape: [ 2, 2 ] } }'),
    "input 'X' has reshape { shape } [ 2, 2 ] in config.pbtxt, the model's input is [ 4 ] after the batch dimension: set " +
    'reshape: { shape: [ 4 ] }')
  checkConfigAgainstModel(config(MLP_CONFIG.replace('dims: [ 4 ] }', 'dims: [ 2, 2 ] reshape: { shape: [ 4 ] } }')), model)

  const two = new OnnxBuilder()
  two.input('A', 'float32', ['N', 2]).input('ids', 'int64', ['N', 2]).output('Y', 'float32', ['N', 2])
  two.node('Relu', ['A'], ['Y'])
  const twoModel = planFromOnnx(two.build(), { modelName: 'mlp', maxBatch: 8 })
  throwsCoded(t, () => checkConfigAgainstModel(config(`max_batch_size: 8
input { name: "A" data_type: TYPE_FP32 dims: [ 2 ] }`), twoModel), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'mlp': the model's input 'ids' is not declared in config.pbtxt; add input { name: \"ids\" " +
      'data_type: TYPE_INT64 dims: [ 2 ] }'
  })
})

t.test('load: the model file, the plan and the addon', async t => {
  const { module } = fakeNative(async () => [])
  const backend = createNativeBackend({ load: () => module })
  t.equal(backend.name, 'native')
  t.equal(backend.supportsGpu, true)
  t.equal(nativeBackend.name, 'native')

  const cfg = config(MLP_CONFIG)
  const missing = context(t, cfg, mlp(), 'other.onnx')
  await t.rejects(backend.loadModel(missing), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: `failed to load model 'mlp': the native backend needs ${join(missing.versionDir, 'model.onnx')} (ENOENT); put the ` +
      'ONNX model there or set default_model_filename'
  })
  await backend.loadModel(context(t, config(`${MLP_CONFIG}\ndefault_model_filename: "net.onnx"`), mlp(), 'net.onnx'))

  const garbage = context(t, cfg, new Uint8Array([1, 2, 3]))
  await t.rejects(backend.loadModel(garbage), { code: 'WRK_ERR_ONNX_INVALID', message: new RegExp(`${join(garbage.versionDir, 'model.onnx')} is not a valid ONNX model`) })

  const unavailable = createNativeBackend({ load: () => { throw new Error('libcudart.so: cannot open') } })
  await t.rejects(unavailable.loadModel(context(t, cfg, mlp())), {
    code: 'WRK_ERR_NATIVE_UNAVAILABLE',
    message: 'the native module (native/) could not be loaded: libcudart.so: cannot open; build it with `npm run build:native`'
  })
  await t.rejects(createNativeBackend({ load: () => { throw new Error('nope') } }).loadModel(context(t, config(`${MLP_CONFIG.replace('dims: [ 4 ]', 'dims: [ 5 ]')}`), mlp())),
    { code: 'WRK_ERR_MODEL_LOAD' }, 'model and config errors come before the addon')
})

t.test('instances: one session each, merged batches, outputs in the config datatypes and shapes', async t => {
  const { module, sessions } = fakeNative(async (inputs, batch) => [new Float32Array(batch * 3).fill(inputs.length)])
  const backend = createNativeBackend({ load: () => module })
  const model = await backend.loadModel(context(t, config(`${MLP_CONFIG}\nparameters { key: "precision" value: { string_value: "fp16" } }`), mlp()))
  const cpu = await model.createInstance({ name: 'mlp_0', kind: 'KIND_CPU', deviceId: -1 })
  const gpu = await model.createInstance({ name: 'mlp_1', kind: 'KIND_GPU', deviceId: 1 })
  t.equal(cpu.mergedBatches, true)
  t.strictSame(sessions.map(s => s.options), [{ device: -1, precision: 'fp16' }, { device: 1, precision: 'fp16' }])
  t.equal(sessions[0]!.plan.maxBatch, 8)

  const x = new Float32Array(12)
  const [res] = await gpu.execute([request([{ name: 'X', datatype: 'FP32', shape: [3, 4], data: x }], 3)])
  const [y] = outputsOf(t, res)
  t.strictSame(y && { ...y, data: Array.from(y.data as Float32Array) }, { name: 'Y', datatype: 'FP32', shape: [3, 3], data: new Array(9).fill(1) })
  t.equal(sessions[1]!.runs[0]!.inputs[0], x, 'the request tensor goes to the session without a copy')
  t.equal(sessions[1]!.runs[0]!.batch, 3)

  const bad = await cpu.execute([
    request([{ name: 'X', datatype: 'FP32', shape: [2, 4], data: new Float32Array(7) }], 2),
    request([{ name: 'X', datatype: 'INT32', shape: [1, 4], data: new Int32Array(4) }], 1),
    request([], 1),
    request([{ name: 'X', datatype: 'FP32', shape: [9, 4], data: new Float32Array(36) }], 9)
  ])
  t.strictSame(bad.map(r => ('error' in r ? [(r.error as { code?: string }).code, r.error.message] : 'ok')), [
    ['WRK_ERR_INVALID_INPUT', "input 'X' must be FP32 with 8 elements, got FP32 with 7"],
    ['WRK_ERR_INVALID_INPUT', "input 'X' must be FP32 with 4 elements, got INT32 with 4"],
    ['WRK_ERR_INVALID_INPUT', "input 'X' is missing"],
    ['WRK_ERR_INVALID_INPUT', "batch size 9 is outside 1..8 for model 'mlp'"]
  ])
  t.equal(sessions[0]!.runs.length, 0, 'nothing bad reached the session')

  await cpu.close()
  await cpu.close()
  t.equal(sessions[0]!.closed, true)
  await model.unload()
  t.equal(sessions[1]!.closed, true, 'unload closes the instances left')
})

t.test('run failures: bad data is the request\'s fault (400), anything else the model\'s (500)', async t => {
  let fail: Error = new Error('x')
  const { module } = fakeNative(async () => { throw fail })
  const model = await createNativeBackend({ load: () => module }).loadModel(context(t, config(MLP_CONFIG), mlp()))
  const instance = await model.createInstance({ name: 'mlp_0', kind: 'KIND_CPU', deviceId: -1 })
  const x = request([{ name: 'X', datatype: 'FP32', shape: [1, 4], data: new Float32Array(4) }], 1)

  fail = Object.assign(new Error("op 'embed' (Gather): index 7 is out of range [-5, 5)"), { code: 'NATIVE_INVALID_INPUT' })
  const [invalid] = await instance.execute([x])
  t.ok(invalid !== undefined && 'error' in invalid && isFlotillaError(invalid.error))
  const e1 = (invalid as { error: Error & { code: string, statusCode: number } }).error
  t.strictSame([e1.code, e1.statusCode, e1.message], ['WRK_ERR_INVALID_INPUT', 400, "op 'embed' (Gather): index 7 is out of range [-5, 5)"])

  fail = Object.assign(new Error("op 'mm' (MatMul): out of memory"), { code: 'NATIVE_EXECUTION_FAILED' })
  const [failed] = await instance.execute([x])
  const e2 = (failed as { error: Error & { code: string, statusCode: number } }).error
  t.strictSame([e2.code, e2.statusCode, e2.message], ['WRK_ERR_EXECUTION_FAILED', 500, "model 'mlp' failed to execute: op 'mm' (MatMul): out of memory"])

  const throwing = createNativeBackend({ load: () => ({ createSession () { throw new Error('CUDA device 3 does not exist') } }) as unknown as NativeModule })
  const m2 = await throwing.loadModel(context(t, config(MLP_CONFIG), mlp()))
  await t.rejects(m2.createInstance({ name: 'mlp_0', kind: 'KIND_GPU', deviceId: 3 }), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'mlp': instance 'mlp_0' could not create a session on GPU 3: CUDA device 3 does not exist"
  })
})

t.test('end to end on the real addon', { skip: nativeAvailable() ? false : 'the native addon is not built' }, async t => {
  t.ok(loadNative().cpu().threads >= 1)
  const model = await nativeBackend.loadModel(context(t, config(MLP_CONFIG), mlp()))
  const instance = await model.createInstance({ name: 'mlp_0', kind: 'KIND_CPU', deviceId: -1 })
  for (const batch of [1, 3]) {
    const x = Float32Array.from({ length: batch * 4 }, (_, i) => ((i * 7) % 11) / 3 - 1)
    const [res] = await instance.execute([request([{ name: 'X', datatype: 'FP32', shape: [batch, 4], data: x }], batch)])
    const [y] = outputsOf(t, res)
    t.strictSame(y?.shape, [batch, 3], `batch ${batch}: shape`)
    const expected = mlpReference(x)
    t.ok(expected.every((v, i) => Math.abs((y!.data as Float32Array)[i]! - v) < 1e-5),
      `batch ${batch}: ${Array.from(y!.data as Float32Array).join(', ')} = ${expected.join(', ')}`)
  }
  await instance.close()
  await model.unload()

  const emb = await nativeBackend.loadModel(context(t, config(EMBEDDING_CONFIG, 'emb'), embedding()))
  const lookup = await emb.createInstance({ name: 'emb_0', kind: 'KIND_CPU', deviceId: -1 })
  const ids = (...xs: number[]): Tensor => ({ name: 'ids', datatype: 'INT64', shape: [xs.length / 2, 2], data: BigInt64Array.from(xs.map(BigInt)) })
  const [ok] = await lookup.execute([request([ids(0, 4, 2, 1)], 2)])
  const [y] = outputsOf(t, ok)
  t.strictSame(y && { shape: y.shape, data: Array.from(y.data as Float32Array) }, { shape: [2, 2, 2], data: [0, 0, 4, 40, 2, 20, 1, 10] })
  const [bad] = await lookup.execute([request([ids(0, 5)], 1)])
  t.ok(bad !== undefined && 'error' in bad, 'an index out of range fails the request')
  const err = (bad as { error: Error & { code: string, statusCode: number } }).error
  t.equal(err.code, 'WRK_ERR_INVALID_INPUT')
  t.equal(err.statusCode, 400)
  t.match(err.message, /embed/, `the message names the op: ${err.message}`)
  await emb.unload()
})
