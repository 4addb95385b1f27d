import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import t from 'tap'
import { DEFAULT_MODELS_DIR, exampleModels, normalSource, writeExampleModels } from '../../bin/make-example-models.ts'
import { seededRandom } from '../../common/seeded-random.ts'
import { parseModelConfig } from '../../worker/repository/model-config.ts'

const NAMES = ['mlp', 'transformer', 'cnn']

t.test('the committed example models are what the script writes', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'flotilla-models-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const files = writeExampleModels(dir)
  t.equal(files.length, 6)
  for (const name of NAMES) {
    for (const file of ['config.pbtxt', join('1', 'model.onnx')]) {
      const fresh = readFileSync(join(dir, name, file))
      const committed = readFileSync(join(DEFAULT_MODELS_DIR, name, file))
      t.ok(fresh.equals(committed), `${name}/${file} is up to date (else run: npm run models)`)
    }
  }
  const total = NAMES.reduce((sum, name) => sum + statSync(join(DEFAULT_MODELS_DIR, name, '1', 'model.onnx')).size, 0)
  t.ok(total < 4.5e6, `the three models take ${(total / 1e6).toFixed(2)} MB`)
})

t.test('building twice gives the same bytes', async t => {
  const [a, b] = [exampleModels(), exampleModels()]
  for (let i = 0; i < a.length; i++) t.ok(Buffer.from(a[i]!.onnx).equals(Buffer.from(b[i]!.onnx)), a[i]!.name)
})

t.test('the PRNG is pinned and its normals look normal', async t => {
  const u = seededRandom(42)
  t.strictSame([u(), u(), u()], [0.6011037519201636, 0.44829055899754167, 0.8524657934904099], 'seededRandom(42) (mulberry32) does not drift')
  const n = normalSource(seededRandom(7))
  let sum = 0
  let sq = 0
  const count = 20000
  for (let i = 0; i < count; i++) {
    const x = n()
    sum += x
    sq += x * x
  }
  t.ok(Math.abs(sum / count) < 0.03, 'mean about 0')
  t.ok(Math.abs(sq / count - 1) < 0.05, 'variance about 1')
})

t.test('configs match the models, and onnxruntime runs them at batch 2', async t => {
  const inputs: Record<string, (batch: number) => ort.Tensor> = {
    mlp: batch => new ort.Tensor('float32', new Float32Array(batch * 784).fill(0.5), [batch, 784]),
    transformer: batch => new ort.Tensor('int64', BigInt64Array.from({ length: batch * 64 }, (_, i) => BigInt((i * 37) % 1000)), [batch, 64]),
    cnn: batch => new ort.Tensor('float32', new Float32Array(batch * 784).fill(0.5), [batch, 1, 28, 28])
  }
  for (const name of NAMES) {
    const config = parseModelConfig(readFileSync(join(DEFAULT_MODELS_DIR, name, 'config.pbtxt'), 'utf8'), { file: 'config.pbtxt', modelName: name })
    t.equal(config.backend, 'native')
    t.equal(config.max_batch_size, 32)
    t.equal(config.dynamic_batching?.max_queue_delay_microseconds, 100)
    t.match(config.instance_group, [{ kind: 'KIND_CPU', count: 1 }])
    const session = await ort.InferenceSession.create(join(DEFAULT_MODELS_DIR, name, '1', 'model.onnx'), { executionProviders: ['cpu'] })
    t.strictSame(session.inputNames, config.input.map(i => i.name), `${name}: input names`)
    t.strictSame(session.outputNames, config.output.map(o => o.name), `${name}: output names`)
    const out = await session.run({ [config.input[0]!.name]: inputs[name]!(2) })
    const y = out[config.output[0]!.name]!
    t.strictSame(y.dims, [2, ...config.output[0]!.dims], `${name}: output shape`)
    const data = y.data as Float32Array
    t.ok(data.every(Number.isFinite), `${name}: finite outputs`)
    if (name !== 'transformer') {
      t.ok(Math.abs(data.slice(0, 10).reduce((a, b) => a + b, 0) - 1) < 1e-5, `${name}: probabilities sum to 1`)
    }
    await session.release()
  }
})
