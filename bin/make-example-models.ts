#!/usr/bin/env node
/**
 * Writes the example models of the native backend into a model repository (default: config/models):
 * `<name>/config.pbtxt` and `<name>/1/model.onnx` for
 *
 * - `mlp`: a classifier, FP32 [784] -> Gemm 512 + Relu -> Gemm 256 + Relu -> Gemm 10 -> Softmax "probabilities".
 * - `transformer`: a post-LN encoder over INT64 token ids [64]: token embedding (vocab 1000, hidden 128) plus a
 *   sinusoidal position embedding, 2 layers of 4-head self-attention and a 128-512-128 FFN, FP32 "hidden" [64, 128].
 *   Layer 0's FFN uses the Gelu op (opset 20), layer 1's the Erf decomposition torch exports, so both paths run.
 * - `cnn`: MNIST-sized, FP32 [1, 28, 28] -> Conv 3x3 (8) + BatchNormalization + Relu -> MaxPool 2 -> depthwise
 *   Conv 3x3 + Relu -> Conv 1x1 (16) + Relu -> AveragePool 2 -> Flatten -> Gemm 10 -> Softmax "probabilities".
 *
 * Weights come from a seeded PRNG (mulberry32, normals by Box-Muller), one seed per model, scaled like Kaiming
 * (layers followed by Relu/Gelu) or Xavier (the rest) initialisation so activations stay O(1) at every depth, and
 * rounded to bfloat16-representable values: the low half of each float is zero, so git stores the files at about
 * half their size, and a bf16 run of the CUDA path multiplies by exactly these weights. Running the script twice
 * gives byte-identical files (test/bin/make-example-models.test.ts holds it to that against the committed files).
 *
 *   node dist/bin/make-example-models.js [--out DIR]
 */
import { mkdirSync, realpathSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { PACKAGE_ROOT } from '../common/package-root.ts'
import { seededRandom } from '../common/seeded-random.ts'
import { OnnxBuilder } from '../worker/backends/native/onnx-builder.ts'

const SELF = fileURLToPath(import.meta.url)
export const DEFAULT_MODELS_DIR = join(PACKAGE_ROOT, 'config', 'models')

/** Standard normals by Box-Muller, both values of each pair used. */
export function normalSource (uniform: () => number): () => number {
  let spare: number | undefined
  return () => {
    if (spare !== undefined) {
      const s = spare
      spare = undefined
      return s
    }
    const u = 1 - uniform() // (0, 1]: log(u) is finite
    const v = uniform()
    const r = Math.sqrt(-2 * Math.log(u))
    spare = r * Math.sin(2 * Math.PI * v)
    return r * Math.cos(2 * Math.PI * v)
  }
}

/** Rounds a float to the nearest bfloat16 (ties to even), kept as a float32. */
function toBf16 (x: number): number {
  const f = new Float32Array([x])
  const u = new Uint32Array(f.buffer)
  u[0] = ((u[0]! + 0x7fff + ((u[0]! >>> 16) & 1)) & 0xffff0000) >>> 0
  return f[0]!
}

/** Draws weights: normal(mean, std) or uniform(lo, hi), bf16-rounded. */
class WeightSource {
  readonly #uniform: () => number
  readonly #normal: () => number

  constructor (seed: number) {
    this.#uniform = seededRandom(seed)
    this.#normal = normalSource(this.#uniform)
  }

  normal (count: number, std: number, mean = 0): Float32Array {
    const out = new Float32Array(count)
    for (let i = 0; i < count; i++) out[i] = toBf16(mean + std * this.#normal())
    return out
  }

  uniform (count: number, lo: number, hi: number): Float32Array {
    const out = new Float32Array(count)
    for (let i = 0; i < count; i++) out[i] = toBf16(lo + (hi - lo) * this.#uniform())
    return out
  }

  /** Kaiming (He) normal for a layer followed by Relu/Gelu: std sqrt(2 / fanIn). */
  kaiming (count: number, fanIn: number): Float32Array {
    return this.normal(count, Math.sqrt(2 / fanIn))
  }

  /** Xavier (Glorot) normal: std sqrt(2 / (fanIn + fanOut)). */
  xavier (count: number, fanIn: number, fanOut: number): Float32Array {
    return this.normal(count, Math.sqrt(2 / (fanIn + fanOut)))
  }

  /** Biases: small, non-zero, so a kernel that drops them shows. */
  bias (count: number): Float32Array {
    return this.normal(count, 0.05)
  }
}

/** One model of the repository. */
export interface ExampleModel {
  name: string
  config: string
  onnx: Uint8Array
}

interface IoSpec { name: string, type: 'TYPE_FP32' | 'TYPE_INT64', dims: number[] }

function configPbtxt (name: string, comment: string, inputs: IoSpec[], outputs: IoSpec[]): string {
  const io = (specs: IoSpec[]): string => specs.map(s =>
    `  {\n    name: "${s.name}"\n    data_type: ${s.type}\n    dims: [ ${s.dims.join(', ')} ]\n  }`).join(',\n')
  return `${comment.split('\n').map(line => `# ${line}`).join('\n')}
# Written by bin/make-example-models.ts; edit the script and run it again rather than this file.
name: "${name}"
backend: "native"
max_batch_size: ${MAX_BATCH}
input [
${io(inputs)}
]
output [
${io(outputs)}
]
dynamic_batching {
  max_queue_delay_microseconds: 100
}
instance_group [
  {
    count: 1
    kind: KIND_CPU
  }
]
`
}

const MAX_BATCH = 32
const BATCH = 'batch'
const i64 = (xs: number[]): BigInt64Array => BigInt64Array.from(xs.map(x => BigInt(x)))

export function buildMlp (): ExampleModel {
  const w = new WeightSource(0x6d6c70) // 'mlp'
  const b = new OnnxBuilder({ name: 'mlp', opset: 17 })
  b.input('input', 'float32', [BATCH, 784]).output('probabilities', 'float32', [BATCH, 10])
  // Weights stored [out, in] with transB = 1, as torch.onnx.export writes nn.Linear.
  const layers: Array<[number, number, boolean]> = [[784, 512, true], [512, 256, true], [256, 10, false]]
  let x = 'input'
  layers.forEach(([fanIn, fanOut, relu], i) => {
    b.initializer(`fc${i + 1}.weight`, relu ? w.kaiming(fanOut * fanIn, fanIn) : w.xavier(fanOut * fanIn, fanIn, fanOut), [fanOut, fanIn])
    b.initializer(`fc${i + 1}.bias`, w.bias(fanOut), [fanOut])
    const y = `fc${i + 1}`
    b.node('Gemm', [x, `fc${i + 1}.weight`, `fc${i + 1}.bias`], [y], { transB: 1 }, `fc${i + 1}`)
    x = y
    if (relu) {
      b.node('Relu', [y], [`${y}.relu`], {}, `fc${i + 1}.relu`)
      x = `${y}.relu`
    }
  })
  b.node('Softmax', [x], ['probabilities'], { axis: 1 }, 'softmax')
  return {
    name: 'mlp',
    config: configPbtxt('mlp', 'A 784-512-256-10 classifier with random weights (Gemm + Relu, Softmax).',
      [{ name: 'input', type: 'TYPE_FP32', dims: [784] }], [{ name: 'probabilities', type: 'TYPE_FP32', dims: [10] }]),
    onnx: b.build()
  }
}

const SEQ = 64
const HIDDEN = 128
const HEADS = 4
const HEAD_DIM = HIDDEN / HEADS
const FFN = 512
const VOCAB = 1000

export function buildTransformer (): ExampleModel {
  const w = new WeightSource(0x7472616e) // 'tran'
  const b = new OnnxBuilder({ name: 'transformer', opset: 20 })
  b.input('input_ids', 'int64', [BATCH, SEQ]).output('hidden', 'float32', [BATCH, SEQ, HIDDEN])

  b.initializer('embedding', w.normal(VOCAB * HIDDEN, 1), [VOCAB, HIDDEN])
  const position = new Float32Array(SEQ * HIDDEN)
  for (let p = 0; p < SEQ; p++) {
    for (let i = 0; i < HIDDEN / 2; i++) {
      const angle = p / Math.pow(10000, (2 * i) / HIDDEN)
      position[p * HIDDEN + 2 * i] = toBf16(Math.sin(angle))
      position[p * HIDDEN + 2 * i + 1] = toBf16(Math.cos(angle))
    }
  }
  b.initializer('position', position, [SEQ, HIDDEN])
  b.initializer('heads_shape', i64([0, SEQ, HEADS, HEAD_DIM]), [4])
  b.initializer('merge_shape', i64([-1, SEQ, HIDDEN]), [3])
  b.initializer('attn_scale', new Float32Array([1 / Math.sqrt(HEAD_DIM)]), [])
  b.initializer('sqrt2', new Float32Array([Math.SQRT2]), [])
  b.initializer('one', new Float32Array([1]), [])
  b.initializer('half', new Float32Array([0.5]), [])

  b.node('Gather', ['embedding', 'input_ids'], ['tokens'], { axis: 0 }, 'embed')
  b.node('Add', ['tokens', 'position'], ['x0'], {}, 'embed.position')

  let x = 'x0'
  for (let l = 0; l < 2; l++) {
    const p = `layer${l}`
    const linear = (input: string, name: string, fanIn: number, fanOut: number, kaiming: boolean): string => {
      b.initializer(`${name}.weight`, kaiming ? w.kaiming(fanIn * fanOut, fanIn) : w.xavier(fanIn * fanOut, fanIn, fanOut), [fanIn, fanOut])
      b.initializer(`${name}.bias`, w.bias(fanOut), [fanOut])
      b.node('MatMul', [input, `${name}.weight`], [`${name}.mm`], {}, `${name}.matmul`)
      b.node('Add', [`${name}.mm`, `${name}.bias`], [name], {}, `${name}.add_bias`)
      return name
    }
    const layerNorm = (input: string, name: string): string => {
      b.initializer(`${name}.weight`, w.normal(HIDDEN, 0.1, 1), [HIDDEN])
      b.initializer(`${name}.bias`, w.bias(HIDDEN), [HIDDEN])
      b.node('LayerNormalization', [input, `${name}.weight`, `${name}.bias`], [name], { axis: -1, epsilon: 1e-5 }, name)
      return name
    }
    // [B, 64, 128] -> [B, 4, 64, 32]
    const heads = (input: string, name: string, perm: number[]): string => {
      b.node('Reshape', [input, 'heads_shape'], [`${name}.split`], {}, `${name}.split`)
      b.node('Transpose', [`${name}.split`], [`${name}.heads`], { perm }, `${name}.transpose`)
      return `${name}.heads`
    }
    const q = heads(linear(x, `${p}.attn.q`, HIDDEN, HIDDEN, false), `${p}.attn.q`, [0, 2, 1, 3])
    const kT = heads(linear(x, `${p}.attn.k`, HIDDEN, HIDDEN, false), `${p}.attn.k`, [0, 2, 3, 1]) // [B, 4, 32, 64]
    const v = heads(linear(x, `${p}.attn.v`, HIDDEN, HIDDEN, false), `${p}.attn.v`, [0, 2, 1, 3])
    b.node('MatMul', [q, kT], [`${p}.attn.scores`], {}, `${p}.attn.qk`)
    b.node('Mul', [`${p}.attn.scores`, 'attn_scale'], [`${p}.attn.scaled`], {}, `${p}.attn.scale`)
    b.node('Softmax', [`${p}.attn.scaled`], [`${p}.attn.probs`], { axis: -1 }, `${p}.attn.softmax`)
    b.node('MatMul', [`${p}.attn.probs`, v], [`${p}.attn.context`], {}, `${p}.attn.pv`)
    b.node('Transpose', [`${p}.attn.context`], [`${p}.attn.merge`], { perm: [0, 2, 1, 3] }, `${p}.attn.merge.transpose`)
    b.node('Reshape', [`${p}.attn.merge`, 'merge_shape'], [`${p}.attn.merged`], {}, `${p}.attn.merge.reshape`)
    const attn = linear(`${p}.attn.merged`, `${p}.attn.out`, HIDDEN, HIDDEN, false)
    b.node('Add', [x, attn], [`${p}.attn.residual`], {}, `${p}.attn.residual`)
    const h = layerNorm(`${p}.attn.residual`, `${p}.ln1`)

    const up = linear(h, `${p}.ffn.up`, HIDDEN, FFN, true)
    const act = `${p}.ffn.gelu`
    if (l === 0) {
      b.node('Gelu', [up], [act], {}, act)
    } else {
      // torch's export of nn.GELU() before opset 20: x * 0.5 * (1 + erf(x / sqrt(2))) as Div, Erf, Add, Mul, Mul.
      b.node('Div', [up, 'sqrt2'], [`${act}.div`], {}, `${act}.div`)
      b.node('Erf', [`${act}.div`], [`${act}.erf`], {}, `${act}.erf`)
      b.node('Add', [`${act}.erf`, 'one'], [`${act}.add`], {}, `${act}.add`)
      b.node('Mul', [up, `${act}.add`], [`${act}.mul`], {}, `${act}.mul`)
      b.node('Mul', [`${act}.mul`, 'half'], [act], {}, `${act}.half`)
    }
    const down = linear(act, `${p}.ffn.down`, FFN, HIDDEN, false)
    b.node('Add', [h, down], [`${p}.ffn.residual`], {}, `${p}.ffn.residual`)
    x = layerNorm(`${p}.ffn.residual`, `${p}.ln2`)
  }
  b.node('Identity', [x], ['hidden'], {}, 'hidden')
  return {
    name: 'transformer',
    config: configPbtxt('transformer',
      'A small post-LN transformer encoder with random weights: token ids [64] (vocab 1000) -> 2 layers, 4 heads,\n' +
      'hidden 128, FFN 512 (Gelu op in layer 0, its Erf decomposition in layer 1) -> hidden states [64, 128].',
      [{ name: 'input_ids', type: 'TYPE_INT64', dims: [SEQ] }], [{ name: 'hidden', type: 'TYPE_FP32', dims: [SEQ, HIDDEN] }]),
    onnx: b.build()
  }
}

export function buildCnn (): ExampleModel {
  const w = new WeightSource(0x636e6e) // 'cnn'
  const b = new OnnxBuilder({ name: 'cnn', opset: 17 })
  b.input('image', 'float32', [BATCH, 1, 28, 28]).output('probabilities', 'float32', [BATCH, 10])

  b.initializer('conv1.weight', w.kaiming(8 * 9, 9), [8, 1, 3, 3])
  b.initializer('conv1.bias', w.bias(8), [8])
  b.node('Conv', ['image', 'conv1.weight', 'conv1.bias'], ['conv1'],
    { kernel_shape: [3, 3], pads: [1, 1, 1, 1], strides: [1, 1] }, 'conv1')
  b.initializer('bn1.scale', w.uniform(8, 0.8, 1.2), [8])
  b.initializer('bn1.bias', w.bias(8), [8])
  b.initializer('bn1.mean', w.normal(8, 0.1), [8])
  b.initializer('bn1.var', w.uniform(8, 0.5, 1.5), [8])
  b.node('BatchNormalization', ['conv1', 'bn1.scale', 'bn1.bias', 'bn1.mean', 'bn1.var'], ['bn1'], { epsilon: 1e-5 }, 'bn1')
  b.node('Relu', ['bn1'], ['relu1'], {}, 'relu1')
  b.node('MaxPool', ['relu1'], ['pool1'], { kernel_shape: [2, 2], strides: [2, 2] }, 'pool1') // [8, 14, 14]

  b.initializer('dwconv.weight', w.kaiming(8 * 9, 9), [8, 1, 3, 3])
  b.initializer('dwconv.bias', w.bias(8), [8])
  b.node('Conv', ['pool1', 'dwconv.weight', 'dwconv.bias'], ['dwconv'],
    { kernel_shape: [3, 3], pads: [1, 1, 1, 1], group: 8 }, 'dwconv')
  b.node('Relu', ['dwconv'], ['relu2'], {}, 'relu2')

  b.initializer('pwconv.weight', w.kaiming(16 * 8, 8), [16, 8, 1, 1])
  b.initializer('pwconv.bias', w.bias(16), [16])
  b.node('Conv', ['relu2', 'pwconv.weight', 'pwconv.bias'], ['pwconv'], { kernel_shape: [1, 1] }, 'pwconv')
  b.node('Relu', ['pwconv'], ['relu3'], {}, 'relu3')
  b.node('AveragePool', ['relu3'], ['pool2'], { kernel_shape: [2, 2], strides: [2, 2] }, 'pool2') // [16, 7, 7]
  b.node('Flatten', ['pool2'], ['flat'], { axis: 1 }, 'flatten')

  b.initializer('fc.weight', w.xavier(10 * 784, 784, 10), [10, 784])
  b.initializer('fc.bias', w.bias(10), [10])
  b.node('Gemm', ['flat', 'fc.weight', 'fc.bias'], ['logits'], { transB: 1 }, 'fc')
  b.node('Softmax', ['logits'], ['probabilities'], { axis: 1 }, 'softmax')
  return {
    name: 'cnn',
    config: configPbtxt('cnn',
      'An MNIST-sized CNN with random weights: Conv + BatchNormalization + Relu, MaxPool, depthwise Conv, 1x1 Conv,\n' +
      'AveragePool, Flatten, Gemm, Softmax.',
      [{ name: 'image', type: 'TYPE_FP32', dims: [1, 28, 28] }], [{ name: 'probabilities', type: 'TYPE_FP32', dims: [10] }]),
    onnx: b.build()
  }
}

/** The three models, built in memory. */
export function exampleModels (): ExampleModel[] {
  return [buildMlp(), buildTransformer(), buildCnn()]
}

/** Writes every model under `dir`; returns the files written. */
export function writeExampleModels (dir: string): string[] {
  const written: string[] = []
  for (const model of exampleModels()) {
    const versionDir = join(dir, model.name, '1')
    mkdirSync(versionDir, { recursive: true })
    const config = join(dir, model.name, 'config.pbtxt')
    const onnx = join(versionDir, 'model.onnx')
    writeFileSync(config, model.config)
    writeFileSync(onnx, model.onnx)
    written.push(config, onnx)
  }
  return written
}

function isMain (): boolean {
  const arg = process.argv[1]
  if (arg === undefined) return false
  try {
    return realpathSync(arg) === realpathSync(SELF)
  } catch {
    return false
  }
}

if (isMain()) {
  const { values } = parseArgs({ options: { out: { type: 'string' } } })
  const dir = resolve(values.out ?? DEFAULT_MODELS_DIR)
  for (const file of writeExampleModels(dir)) process.stdout.write(`${file}\n`)
}
