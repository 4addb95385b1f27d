import { join } from 'node:path'
import t, { type Test } from 'tap'
import { isFlotillaError } from '../../../common/errors.ts'
import { silentLogger } from '../../../common/logger.ts'
import { type Tensor } from '../../../common/protocol/types.ts'
import { OnnxBuilder } from '../../../worker/backends/native/onnx-builder.ts'
import { checkModelAgainstConfig, createOnnxruntimeBackend, onnxruntimeBackend } from '../../../worker/backends/onnxruntime-backend.ts'
import type { OrtValueInfo } from '../../../worker/backends/onnxruntime-thread.ts'
import { type BackendInstance, type BackendModel, type BackendRequest, type BackendResponse } from '../../../worker/backends/types.ts'
import { parseModelConfig } from '../../../worker/repository/model-config.ts'
import { type ModelConfig } from '../../../worker/repository/types.ts'

const W = new Float32Array([1, -1, 0.5, 2, 0, 1, -2, 1, 0.25, 0, 3, -1]) // [4, 3]
const B = new Float32Array([0.5, -0.5, 1])
const TABLE = new Float32Array([0, 1, 10, 11, 20, 21]) // [3, 2]

/** Y = Relu(X.W + B) [N, 3], E = TABLE[IDS] [N, 2, 2], C = Identity(COUNT) [N, 1] (int32). */
function smallModel (): Uint8Array {
  return new OnnxBuilder({ name: 'small' })
    .input('X', 'float32', ['N', 4])
    .input('IDS', 'int64', ['N', 2])
    .input('COUNT', 'int32', ['N', 1])
    .output('Y', 'float32', ['N', 3])
    .output('E', 'float32', ['N', 2, 2])
    .output('C', 'int32', ['N', 1])
    .initializer('W', W, [4, 3])
    .initializer('B', B, [3])
    .initializer('TABLE', TABLE, [3, 2])
    .node('MatMul', ['X', 'W'], ['XW'])
    .node('Add', ['XW', 'B'], ['XWB'])
    .node('Relu', ['XWB'], ['Y'])
    .node('Gather', ['TABLE', 'IDS'], ['E'], { axis: 0 })
    .node('Identity', ['COUNT'], ['C'])
    .build()
}

const SMALL_CONFIG = `
backend: "onnxruntime"
max_batch_size: 8
input { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }
input { name: "IDS" data_type: TYPE_INT64 dims: [ 2 ] }
input { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] }
output { name: "E" data_type: TYPE_FP32 dims: [ 2, 2 ] }
output { name: "C" data_type: TYPE_INT32 dims: [ 1 ] }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
parameters { key: "inter_op_thread_count" value: { string_value: "1" } }
`

const parse = (text: string, name = 'small'): ModelConfig => parseModelConfig(
  `name: "${name}"\n${text.includes('backend:') ? '' : 'backend: "onnxruntime"\n'}${text}`, { file: 'config.pbtxt', modelName: name })

/** A model directory in a tap testdir: `<dir>/1/model.onnx` unless `onnx` is undefined. */
function repo (t: Test, onnx: Uint8Array | string | undefined): string {
  return t.testdir({ 1: onnx === undefined ? {} : { 'model.onnx': typeof onnx === 'string' ? onnx : Buffer.from(onnx) } })
}

async function load (t: Test, config: ModelConfig, dir: string, backend = onnxruntimeBackend): Promise<BackendModel> {
  const model = await backend.loadModel({
    modelName: config.name, version: 1, modelDir: dir, versionDir: join(dir, '1'), config, logger: silentLogger(), random: Math.random
  })
  t.teardown(() => model.unload())
  return model
}

async function instance (t: Test, model: BackendModel): Promise<BackendInstance> {
  const i = await model.createInstance({ name: 'small_0', kind: 'KIND_CPU', deviceId: -1 })
  t.teardown(() => i.close())
  return i
}

async function rejectsCoded (t: Test, p: Promise<unknown>, code: string, message: RegExp): Promise<void> {
  try {
    await p
    t.fail(`expected ${code}`)
  } catch (err) {
    t.ok(isFlotillaError(err), 'a coded error')
    t.equal((err as { code: string }).code, code)
    t.match((err as Error).message, message)
  }
}

function smallRequest (batch: number, ids?: bigint[]): BackendRequest {
  const x = Float32Array.from({ length: batch * 4 }, (_, i) => (i % 7) - 3)
  const idList = ids ?? Array.from({ length: batch * 2 }, (_, i) => BigInt(i % 3) - (i % 2 === 0 ? 0n : 3n))
  const inputs = new Map<string, Tensor>([
    ['X', { name: 'X', datatype: 'FP32', shape: [batch, 4], data: x }],
    ['IDS', { name: 'IDS', datatype: 'INT64', shape: [batch, 2], data: BigInt64Array.from(idList) }],
    ['COUNT', { name: 'COUNT', datatype: 'INT32', shape: [batch, 1], data: Int32Array.from({ length: batch }, (_, i) => 100 + i) }]
  ])
  return { inputs, requestedOutputs: ['Y', 'E', 'C'], parameters: {}, batchSize: batch }
}

/** What the small model should answer, in plain JavaScript. */
function expected (request: BackendRequest): { y: number[], e: number[], c: number[] } {
  const x = request.inputs.get('X')!.data as Float32Array
  const ids = request.inputs.get('IDS')!.data as BigInt64Array
  const y: number[] = []
  for (let n = 0; n < request.batchSize; n++) {
    for (let j = 0; j < 3; j++) {
      let s = B[j]!
      for (let k = 0; k < 4; k++) s += x[n * 4 + k]! * W[k * 3 + j]!
      y.push(Math.max(0, Math.fround(s)))
    }
  }
  const e = Array.from(ids).flatMap(id => {
    const row = Number(id < 0n ? id + 3n : id)
    return [TABLE[row * 2]!, TABLE[row * 2 + 1]!]
  })
  return { y, e, c: Array.from(request.inputs.get('COUNT')!.data as Int32Array) }
}

const outputsOf = (r: BackendResponse | undefined): Tensor[] => {
  if (r === undefined || 'error' in r) throw new Error(`expected outputs, got ${r === undefined ? 'nothing' : r.error.message}`)
  return r.outputs
}

t.test('loads, checks against the config and runs batches of 1 and 4', async t => {
  const config = parse(SMALL_CONFIG)
  const model = await load(t, config, repo(t, smallModel()))
  await rejectsCoded(t, model.createInstance({ name: 'small_0', kind: 'KIND_GPU', deviceId: 0 }), 'WRK_ERR_MODEL_LOAD', /CPU-only/)
  const inst = await instance(t, model)
  t.equal(inst.mergedBatches, true)
  for (const batch of [1, 4]) {
    const request = smallRequest(batch)
    const [res] = await inst.execute([request])
    const [y, e, c] = outputsOf(res)
    const want = expected(request)
    t.match(y, { name: 'Y', datatype: 'FP32', shape: [batch, 3] })
    t.ok(y!.data instanceof Float32Array)
    for (let i = 0; i < want.y.length; i++) {
      if (Math.abs((y!.data as Float32Array)[i]! - want.y[i]!) > 1e-5) t.fail(`batch ${batch}: Y[${i}]`)
    }
    t.strictSame(Array.from(y!.data as Float32Array).length, want.y.length)
    t.strictSame({ ...e, data: Array.from(e!.data as Float32Array) }, { name: 'E', datatype: 'FP32', shape: [batch, 2, 2], data: want.e })
    t.ok(c!.data instanceof Int32Array)
    t.strictSame({ ...c, data: Array.from(c!.data as Int32Array) }, { name: 'C', datatype: 'INT32', shape: [batch, 1], data: want.c })
    t.equal((request.inputs.get('X')!.data as Float32Array).length, batch * 4, "the request's inputs stay usable (copied, not transferred)")
  }
  // Several requests in one call run one after the other, each answered.
  const responses = await inst.execute([smallRequest(1), smallRequest(2)])
  t.strictSame(responses.map(r => outputsOf(r)[0]!.shape), [[1, 3], [2, 3]])

  // A second instance starts its own thread and session.
  const second = await model.createInstance({ name: 'small_1', kind: 'KIND_CPU', deviceId: -1 })
  t.teardown(() => second.close())
  t.strictSame(outputsOf((await second.execute([smallRequest(2)]))[0])[0]!.shape, [2, 3])
})

t.test('an index out of range fails that request with a 400', async t => {
  const model = await load(t, parse(SMALL_CONFIG), repo(t, smallModel()))
  const inst = await instance(t, model)
  const [res] = await inst.execute([smallRequest(1, [0n, 7n])])
  t.ok(res !== undefined && 'error' in res)
  const err = (res as { error: Error & { code?: string, statusCode?: number } }).error
  t.equal(err.code, 'WRK_ERR_INVALID_INPUT')
  t.equal(err.statusCode, 400)
  t.match(err.message, /model 'small'.*Gather.*idx=7/)
  t.strictSame(outputsOf((await inst.execute([smallRequest(1)]))[0]).length, 3, 'the instance goes on')
})

t.test('missing and malformed model files fail the load', async t => {
  const config = parse(SMALL_CONFIG)
  await rejectsCoded(t, load(t, config, repo(t, undefined)), 'WRK_ERR_MODEL_LOAD',
    /^failed to load model 'small': the onnxruntime backend needs .*1\/model\.onnx \(ENOENT\); put the model there or set default_model_filename$/)
  await rejectsCoded(t, load(t, config, repo(t, 'this is not a protobuf')), 'WRK_ERR_MODEL_LOAD',
    /^failed to load model 'small': onnxruntime cannot load .*model\.onnx: .*protobuf parsing failed/)
  const renamed = parse(`${SMALL_CONFIG}\ndefault_model_filename: "other.onnx"`)
  await rejectsCoded(t, load(t, renamed, repo(t, smallModel())), 'WRK_ERR_MODEL_LOAD', /needs .*1\/other\.onnx/)
  const unknownOp = new OnnxBuilder().input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 4]).node('NoSuchOp', ['X'], ['Y']).build()
  await rejectsCoded(t, load(t, parse('max_batch_size: 8\ninput { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }\noutput { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }'),
    repo(t, unknownOp)), 'WRK_ERR_MODEL_LOAD', /onnxruntime cannot load .*NoSuchOp/)
})

// The small model's inputs and outputs as onnxruntime-node 1.30's inputMetadata/outputMetadata describe them.
const SMALL_INPUTS: OrtValueInfo[] = [
  { name: 'X', isTensor: true, type: 'float32', shape: ['N', 4] },
  { name: 'IDS', isTensor: true, type: 'int64', shape: ['N', 2] },
  { name: 'COUNT', isTensor: true, type: 'int32', shape: ['N', 1] }
]
const SMALL_OUTPUTS: OrtValueInfo[] = [
  { name: 'Y', isTensor: true, type: 'float32', shape: ['N', 3] },
  { name: 'E', isTensor: true, type: 'float32', shape: ['N', 2, 2] },
  { name: 'C', isTensor: true, type: 'int32', shape: ['N', 1] }
]

t.test('a config that does not fit the model fails the load with what to change', async t => {
  // Through a real load: the session's description, the check, the thread closed on the way out.
  await rejectsCoded(t, load(t, parse(SMALL_CONFIG.replace('name: "X"', 'name: "INPUT0"')), repo(t, smallModel())), 'WRK_ERR_MODEL_LOAD',
    /^failed to load model 'small': config\.pbtxt declares input 'INPUT0', which the model does not have \(its inputs: 'X', 'IDS', 'COUNT'\)$/)
  // Refused before any thread starts.
  const early: Array<[string, string, RegExp]> = [
    ['unsupported type', SMALL_CONFIG.replace('name: "X" data_type: TYPE_FP32', 'name: "X" data_type: TYPE_FP16'),
      /input 'X' is TYPE_FP16; the onnxruntime backend takes TYPE_FP32, TYPE_INT64 and TYPE_INT32 tensors/],
    ['bad thread count', SMALL_CONFIG.replace('string_value: "1" } }\nparameters', 'string_value: "two" } }\nparameters'),
      /parameter 'intra_op_thread_count' must be a non-negative integer \(0: onnxruntime's default\), got 'two'/],
    ['GPU group', `${SMALL_CONFIG}\ninstance_group { kind: KIND_GPU }`,
      /instance group 'small' has kind KIND_GPU, but the onnxruntime backend here is CPU-only \(onnxruntime-node's CUDA provider is not installed\)/]
  ]
  const dir = repo(t, smallModel())
  for (const [what, text, message] of early) {
    t.comment(what)
    await rejectsCoded(t, load(t, parse(text), dir), 'WRK_ERR_MODEL_LOAD', message)
  }
  // The check itself, on the description.
  const check = (text: string, inputs = SMALL_INPUTS, outputs = SMALL_OUTPUTS) => () => checkModelAgainstConfig(parse(text), inputs, outputs)
  const cases: Array<[string, () => void, RegExp]> = [
    ['input left out', check(SMALL_CONFIG.replace('input { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }', '')),
      /the model has input 'COUNT', which config\.pbtxt does not declare; onnxruntime needs every input/],
    ['output renamed', check(SMALL_CONFIG.replace('name: "Y"', 'name: "OUT"')), /declares output 'OUT', which the model does not have \(its outputs: 'Y', 'E', 'C'\)/],
    ['wrong type', check(SMALL_CONFIG.replace('name: "IDS" data_type: TYPE_INT64', 'name: "IDS" data_type: TYPE_INT32')),
      /input 'IDS' is TYPE_INT32 in config\.pbtxt but int64 in the model; give it the model's type/],
    ['fixed dim differs', check(SMALL_CONFIG.replace('name: "X" data_type: TYPE_FP32 dims: [ 4 ]', 'name: "X" data_type: TYPE_FP32 dims: [ 5 ]')),
      /input 'X' has shape \[N, 4\] in the model, but config\.pbtxt declares dims \[5\]; dimension 1 differs \(4 against 5\)/],
    ['output dim differs', check(SMALL_CONFIG.replace('dims: [ 2, 2 ]', 'dims: [ 2, 3 ]')),
      /output 'E' has shape \[N, 2, 2\] in the model, but config\.pbtxt declares dims \[2, 3\]; dimension 2 differs \(2 against 3\)/],
    ['no batch dimension in the config', check(SMALL_CONFIG.replace('max_batch_size: 8', 'max_batch_size: 0')),
      /input 'X' has shape \[N, 4\] in the model, and config\.pbtxt's dims \[4\] make \[4\]; make the ranks agree/],
    ['no batch dimension in the model', check(SMALL_CONFIG, [{ name: 'X', isTensor: true, type: 'float32', shape: [4] }, ...SMALL_INPUTS.slice(1)]),
      /input 'X' has shape \[4\] in the model, and config\.pbtxt's dims \[4\] with the batch dimension \(max_batch_size > 0\) make \[batch, 4\]; set max_batch_size: 0 for a model without a batch dimension/],
    ['fixed batch dimension', check(SMALL_CONFIG, [{ name: 'X', isTensor: true, type: 'float32', shape: [2, 4] }, ...SMALL_INPUTS.slice(1)]),
      /input 'X' has a fixed first dimension 2 in the model, so it cannot batch; set max_batch_size: 0 and declare the full shape in dims/],
    ['not a tensor', check(SMALL_CONFIG, [{ name: 'X', isTensor: false, type: '', shape: [] }, ...SMALL_INPUTS.slice(1)]),
      /model input 'X' is not a tensor/]
  ]
  for (const [what, fn, message] of cases) {
    t.throws(fn, { code: 'WRK_ERR_MODEL_LOAD', message }, what)
  }
  // -1 in the config matches any model dimension; a model that leaves a shape open or fixes the batch at 1 fits.
  const loose = SMALL_CONFIG.replace('name: "X" data_type: TYPE_FP32 dims: [ 4 ]', 'name: "X" data_type: TYPE_FP32 dims: [ -1 ]')
  t.doesNotThrow(check(loose))
  t.doesNotThrow(check(SMALL_CONFIG, [{ name: 'X', isTensor: true, type: 'float32', shape: [] }, ...SMALL_INPUTS.slice(1)]))
  t.doesNotThrow(check(SMALL_CONFIG, [{ name: 'X', isTensor: true, type: 'float32', shape: [1, 4] }, ...SMALL_INPUTS.slice(1)]))
  t.doesNotThrow(check(SMALL_CONFIG.replace('max_batch_size: 8', 'max_batch_size: 0').replace('dims: [ 4 ]', 'dims: [ 2, 4 ]'),
    [{ name: 'X', isTensor: true, type: 'float32', shape: [2, 4] }, ...SMALL_INPUTS.slice(1).map(i => ({ ...i, shape: i.shape.slice(1) }))],
    SMALL_OUTPUTS.map(o => ({ ...o, shape: o.shape.slice(1) }))), 'a model without batching')
})

t.test('without onnxruntime-node the load says how to install it', async t => {
  const backend = createOnnxruntimeBackend({ moduleSpecifier: 'onnxruntime-node-not-installed' })
  await rejectsCoded(t, load(t, parse(SMALL_CONFIG), repo(t, smallModel()), backend), 'WRK_ERR_ONNXRUNTIME_UNAVAILABLE',
    /^failed to load model 'small': the onnxruntime backend needs the onnxruntime-node package: it is not installed; install it with `ONNXRUNTIME_NODE_INSTALL=skip npm install onnxruntime-node`/)
})

t.test('the event loop stays free while a long run computes', async t => {
  // 40 products of [256, 1024] . [1024, 1024]: about 21 GFLOP, a few hundred ms on one core.
  const n = 1024
  const w = Float32Array.from({ length: n * n }, (_, i) => ((i * 7919) % 2001 - 1000) / (1000 * Math.sqrt(n)))
  const b = new OnnxBuilder({ name: 'long' }).input('X', 'float32', [256, n]).output('Y', 'float32', [256, n]).initializer('W', w, [n, n])
  let x = 'X'
  for (let i = 0; i < 40; i++) {
    const y = i === 39 ? 'Y' : `h${i}`
    b.node('MatMul', [x, 'W'], [y])
    x = y
  }
  const config = parse(`backend: "onnxruntime"
max_batch_size: 0
input { name: "X" data_type: TYPE_FP32 dims: [ 256, ${n} ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 256, ${n} ] }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }`, 'long')
  const inst = await instance(t, await load(t, config, repo(t, b.build())))
  const request: BackendRequest = {
    inputs: new Map([['X', { name: 'X', datatype: 'FP32', shape: [256, n], data: new Float32Array(256 * n).fill(0.01) }]]),
    requestedOutputs: ['Y'], parameters: {}, batchSize: 0
  }
  let last = performance.now()
  let maxGap = 0
  let ticks = 0
  const timer = setInterval(() => {
    const now = performance.now()
    maxGap = Math.max(maxGap, now - last)
    last = now
    ticks++
  }, 5)
  const start = performance.now()
  const [res] = await inst.execute([request])
  const elapsed = performance.now() - start
  clearInterval(timer)
  t.equal(outputsOf(res)[0]!.shape.join('x'), `256x${n}`)
  t.comment(`run took ${elapsed.toFixed(0)} ms; a 5 ms timer fired ${ticks} times, largest gap ${maxGap.toFixed(1)} ms`)
  t.ok(elapsed > 100, 'the run is long enough to matter')
  // Blocked, the loop would show one gap as long as the run; a busy shared machine adds some, never that much.
  t.ok(maxGap < elapsed / 2, `the timer kept firing (largest gap ${maxGap.toFixed(1)} ms of a ${elapsed.toFixed(0)} ms run)`)
})
