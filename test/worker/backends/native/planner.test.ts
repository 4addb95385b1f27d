import t from 'tap'
import { type PlanOp } from '../../../../native/index.ts'
import { OnnxBuilder } from '../../../../worker/backends/native/onnx-builder.ts'
import { planFromOnnx, type LoweredModel, type PlanFromOnnxOptions } from '../../../../worker/backends/native/planner.ts'
import { throwsCoded } from '../../../helpers/coded-error.ts'

const f32 = (...xs: number[]): Float32Array => Float32Array.from(xs)
const i64 = (...xs: number[]): BigInt64Array => BigInt64Array.from(xs.map(BigInt))
const seq = (n: number, scale = 1): Float32Array => Float32Array.from({ length: n }, (_, i) => (i + 1) * scale)

function plan (b: OnnxBuilder, options: Partial<PlanFromOnnxOptions> = {}): LoweredModel {
  return planFromOnnx(b.build(), { modelName: 'm', maxBatch: 8, ...options })
}

/** Each op as `Op(in, in) -> out`, tensors by name. */
function summary (m: LoweredModel): string[] {
  const name = (i: number): string => (i < 0 ? '-' : m.plan.tensors[i]!.name)
  return m.plan.ops.map(op => `${op.op}(${op.inputs.map(name).join(', ')}) -> ${op.outputs.map(name).join(', ')}`)
}

function tensor (m: LoweredModel, name: string): { dims: number[], data?: ArrayLike<number | bigint> } {
  const found = m.plan.tensors.find(x => x.name === name)
  if (found === undefined) throw new Error(`no tensor '${name}' in ${m.plan.tensors.map(x => x.name).join(', ')}`)
  return found
}

function op (m: LoweredModel, i: number): PlanOp {
  const found = m.plan.ops[i]
  if (found === undefined) throw new Error(`no op #${i}`)
  return found
}

const near = (a: ArrayLike<number | bigint> | undefined, b: number[], eps = 1e-5): boolean =>
  a !== undefined && a.length === b.length && b.every((v, i) => Math.abs(Number(a[i]) - v) <= eps * Math.max(1, Math.abs(v)))

const builder = (opset = 17): OnnxBuilder => new OnnxBuilder({ name: 'g', opset })

t.test('MatMul + Add of a constant [N] + Relu become one MatMul with bias and activation', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 3])
  b.initializer('W', seq(12), [4, 3]).initializer('B', f32(1, 2, 3), [3])
  b.node('MatMul', ['X', 'W'], ['XW']).node('Add', ['XW', 'B'], ['XWB']).node('Relu', ['XWB'], ['Y'])
  const m = plan(b)
  t.strictSame(summary(m), ['MatMul(X, W, B) -> Y'])
  t.strictSame(op(m, 0).attrs, { transA: false, transB: false, alpha: 1, beta: 1, activation: 'relu' })
  t.equal(op(m, 0).name, 'MatMul_0+Add_1', 'the fused op names both nodes')
  t.strictSame(m.inputs, [{ name: 'X', dtype: 'float32', dims: [-1, 4] }])
  t.strictSame(m.outputs, [{ name: 'Y', dtype: 'float32', dims: [-1, 3] }])
  t.strictSame(m.opCounts, { MatMul: 1 })
  t.equal(m.plan.maxBatch, 8)
  t.strictSame(m.plan.inputs, [0])
  t.equal(m.plan.tensors[m.plan.outputs[0]!]!.name, 'Y')
  t.ok(tensor(m, 'W').data instanceof Float32Array, 'weights are float32 data')
})

t.test('the bias fuses from either side of the Add, from [1, N] and from a scalar', async t => {
  const cases: Array<[number[], Float32Array, number[]]> = [
    [[1, 3], f32(1, 2, 3), [1, 2, 3]],
    [[], f32(5), [5, 5, 5]],
    [[1, 1, 3], f32(1, 2, 3), [1, 2, 3]]
  ]
  for (const [dims, data, expected] of cases) {
    const b = builder()
    b.input('X', 'float32', ['N', 2, 4]).output('Y', 'float32', ['N', 2, 3])
    b.initializer('W', seq(12), [4, 3]).initializer('B', data, dims)
    b.node('MatMul', ['X', 'W'], ['XW']).node('Add', ['B', 'XW'], ['Y'])
    const m = plan(b)
    t.equal(m.plan.ops.length, 1, `bias of dims [${dims.join(', ')}]`)
    const bias = m.plan.tensors[op(m, 0).inputs[2]!]!
    t.strictSame(bias.dims, [3])
    t.ok(near(bias.data, expected))
  }
})

t.test('no fusion when the product is read elsewhere, is an output, or the addend is not [N]', async t => {
  const shared = builder()
  shared.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 3]).output('Z', 'float32', ['N', 3])
  shared.initializer('W', seq(12), [4, 3]).initializer('B', f32(1, 2, 3), [3])
  shared.node('MatMul', ['X', 'W'], ['XW']).node('Add', ['XW', 'B'], ['Y']).node('Relu', ['XW'], ['Z'])
  t.strictSame(summary(plan(shared)), ['MatMul(X, W) -> XW', 'Add(XW, B) -> Y', 'Relu(XW) -> Z'])

  const output = builder()
  output.input('X', 'float32', ['N', 4]).output('XW', 'float32', ['N', 3]).output('Y', 'float32', ['N', 3])
  output.initializer('W', seq(12), [4, 3])
  output.node('MatMul', ['X', 'W'], ['XW']).node('Sigmoid', ['XW'], ['Y'])
  t.strictSame(summary(plan(output)), ['MatMul(X, W) -> XW', 'Sigmoid(XW) -> Y'])

  const matrix = builder()
  matrix.input('X', 'float32', [2, 4]).output('Y', 'float32', [2, 3])
  matrix.initializer('W', seq(12), [4, 3]).initializer('B', seq(6), [2, 3])
  matrix.node('MatMul', ['X', 'W'], ['XW']).node('Add', ['XW', 'B'], ['Y'])
  t.strictSame(summary(plan(matrix, { maxBatch: 0 })), ['MatMul(X, W) -> XW', 'Add(XW, B) -> Y'])
})

t.test('a MatMul scaled by a constant scalar (attention scores) takes it as alpha', async t => {
  const b = builder()
  b.input('Q', 'float32', ['N', 4, 8]).input('K', 'float32', ['N', 8, 4]).output('Y', 'float32', ['N', 4, 4])
  b.initializer('scale', f32(0.25), []).initializer('two', f32(2), [1]).initializer('B', f32(1, 2, 3, 4), [4])
  b.node('MatMul', ['Q', 'K'], ['s']).node('Mul', ['scale', 's'], ['s1']).node('Div', ['s1', 'two'], ['s2'])
  b.node('Add', ['s2', 'B'], ['Y'])
  const m = plan(b)
  t.strictSame(summary(m), ['MatMul(Q, K, B) -> Y'])
  t.strictSame(op(m, 0).attrs, { transA: false, transB: false, alpha: 0.125, beta: 1 })

  const afterBias = builder()
  afterBias.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  afterBias.initializer('W', f32(1, 2, 3, 4), [2, 2]).initializer('B', f32(1, 2), [2]).initializer('k', f32(3), [])
  afterBias.node('Gemm', ['X', 'W', 'B'], ['g'], { alpha: 2, beta: 0.5 }).node('Mul', ['g', 'k'], ['Y'])
  t.strictSame(op(plan(afterBias), 0).attrs, { transA: false, transB: false, alpha: 6, beta: 1.5 }, 'scales the bias too')

  const vector = builder()
  vector.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  vector.initializer('W', f32(1, 2, 3, 4), [2, 2]).initializer('k', f32(3, 4), [2])
  vector.node('MatMul', ['X', 'W'], ['g']).node('Mul', ['g', 'k'], ['Y'])
  t.strictSame(plan(vector).plan.ops.map(o => o.op), ['MatMul', 'Mul'], 'not a scalar: a Mul op')
})

t.test('Gemm: transA, transB, alpha, beta, C as bias or as an Add', async t => {
  const gemm = (cDims: number[], c: Float32Array, attrs: Record<string, number> = {}): LoweredModel => {
    const b = builder()
    b.input('A', 'float32', [4, 'N']).output('Y', 'float32', ['N', 3])
    b.initializer('B', seq(12), [3, 4]).initializer('C', c, cDims)
    b.node('Gemm', ['A', 'B', 'C'], ['Y'], { transA: 1, transB: 1, alpha: 0.5, ...attrs })
    return plan(b, { maxBatch: 0, dims: { A: [4, 2] } })
  }
  const asBias = gemm([3], f32(1, 2, 3), { beta: 2 })
  t.strictSame(summary(asBias), ['MatMul(A, B, C) -> Y'])
  t.strictSame(op(asBias, 0).attrs, { transA: true, transB: true, alpha: 0.5, beta: 2 })
  t.strictSame(asBias.inputs[0]!.dims, [4, 2], 'the symbolic dim came from options.dims')

  const row = gemm([1, 3], f32(1, 2, 3))
  t.strictSame(tensor(row, row.plan.tensors[op(row, 0).inputs[2]!]!.name).dims, [3], '[1, N] becomes [N]')

  const scalar = gemm([], f32(7))
  t.ok(near(scalar.plan.tensors[op(scalar, 0).inputs[2]!]!.data, [7, 7, 7]), 'a scalar C fills [N]')

  const full = gemm([2, 3], seq(6), { beta: 3 })
  t.strictSame(summary(full), ['MatMul(A, B) -> Y#1', 'Add(Y#1, C#2) -> Y'])
  t.ok(near(tensor(full, 'C#2').data, [3, 6, 9, 12, 15, 18]), 'beta is applied to a constant C at load')
  t.equal(op(full, 0).attrs.beta, 1)

  const noC = builder()
  noC.input('A', 'float32', ['N', 4]).output('Y', 'float32', ['N', 3])
  noC.initializer('B', seq(12), [4, 3])
  noC.node('Gemm', ['A', 'B'], ['Y'])
  t.strictSame(op(plan(noC), 0).attrs, { transA: false, transB: false, alpha: 1, beta: 1 })
})

t.test('Gemm with a C computed at run time', async t => {
  const b = builder()
  b.input('A', 'float32', ['N', 4]).input('C', 'float32', ['N', 3]).output('Y', 'float32', ['N', 3])
  b.initializer('B', seq(12), [4, 3])
  b.node('Gemm', ['A', 'B', 'C'], ['Y'], { beta: 0.5 })
  const m = plan(b)
  t.strictSame(summary(m), ['MatMul(A, B) -> Y#1', 'Mul(C, g/beta#2) -> C#3', 'Add(Y#1, C#3) -> Y'].map(s => s.replace('g/beta', 'Gemm_0/beta')))
})

t.test('activations fuse into the MatMul or Conv they are the only reader of', async t => {
  const cases: Array<[string, Record<string, number | string>, string, number | undefined]> = [
    ['Relu', {}, 'relu', undefined],
    ['LeakyRelu', { alpha: 0.2 }, 'leaky_relu', Math.fround(0.2)],
    ['LeakyRelu', {}, 'leaky_relu', 0.01],
    ['Sigmoid', {}, 'sigmoid', undefined],
    ['Tanh', {}, 'tanh', undefined],
    ['Gelu', {}, 'gelu', undefined],
    ['Gelu', { approximate: 'tanh' }, 'gelu_tanh', undefined]
  ]
  for (const [act, attrs, expected, slope] of cases) {
    const b = builder(20)
    b.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 3])
    b.initializer('W', seq(12), [4, 3])
    b.node('MatMul', ['X', 'W'], ['XW']).node(act, ['XW'], ['Y'], attrs)
    const m = plan(b)
    t.strictSame(summary(m), ['MatMul(X, W) -> Y'], act)
    t.equal(op(m, 0).attrs.activation, expected)
    t.equal(op(m, 0).attrs.activationAlpha, slope)
  }
  const conv = builder()
  conv.input('X', 'float32', ['N', 1, 4, 4]).output('Y', 'float32', ['N', 2, 4, 4])
  conv.initializer('W', seq(18), [2, 1, 3, 3]).initializer('B', f32(1, 2), [2])
  conv.node('Conv', ['X', 'W', 'B'], ['C'], { pads: [1, 1, 1, 1] }).node('Relu', ['C'], ['Y'])
  const m = plan(conv)
  t.strictSame(summary(m), ['Conv(X, W, B) -> Y'])
  t.equal(op(m, 0).attrs.activation, 'relu')
})

t.test('standalone activations and element-wise ops', async t => {
  const b = builder(20)
  b.input('X', 'float32', ['N', 3]).output('Y', 'float32', ['N', 3])
  b.initializer('K', f32(2, 3, 4), [3])
  b.node('LeakyRelu', ['X'], ['a'], { alpha: 0.3 }).node('Gelu', ['a'], ['b'], { approximate: 'tanh' })
  b.node('Erf', ['b'], ['c']).node('Sub', ['c', 'K'], ['d']).node('Div', ['d', 'K'], ['e']).node('Mul', ['e', 'X'], ['f'])
  b.node('Tanh', ['f'], ['g']).node('Sigmoid', ['g'], ['h']).node('Relu', ['h'], ['Y'])
  const m = plan(b)
  t.strictSame(m.plan.ops.map(o => o.op), ['LeakyRelu', 'Gelu', 'Erf', 'Sub', 'Div', 'Mul', 'Tanh', 'Sigmoid', 'Relu'])
  t.strictSame(op(m, 0).attrs, { alpha: Math.fround(0.3) })
  t.strictSame(op(m, 1).attrs, { activation: 'gelu_tanh' })
})

t.test('BatchNormalization folds into the Conv before it', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 1, 3, 3]).output('Y', 'float32', ['N', 2, 3, 3])
  b.initializer('W', f32(...new Array(9).fill(1), ...new Array(9).fill(2)), [2, 1, 3, 3]).initializer('B', f32(1, -1), [2])
  b.initializer('gamma', f32(2, 3), [2]).initializer('beta', f32(0.5, 0.25), [2])
  b.initializer('mean', f32(1, 2), [2]).initializer('var', f32(3, 8), [2])
  b.node('Conv', ['X', 'W', 'B'], ['C'], { pads: [1, 1, 1, 1] })
  b.node('BatchNormalization', ['C', 'gamma', 'beta', 'mean', 'var'], ['bn'], { epsilon: 1 })
  b.node('Relu', ['bn'], ['Y'])
  const m = plan(b)
  t.equal(m.plan.ops.length, 1)
  const conv = op(m, 0)
  t.equal(conv.op, 'Conv')
  t.equal(conv.attrs.activation, 'relu', 'the Relu after the BatchNormalization still fuses')
  // s = gamma / sqrt(var + eps) = [1, 1]; bias' = s * (B - mean) + beta = [0.5, -2.75]
  t.ok(near(m.plan.tensors[conv.inputs[1]!]!.data, [...new Array(9).fill(1), ...new Array(9).fill(2)]))
  t.ok(near(m.plan.tensors[conv.inputs[2]!]!.data, [0.5, -2.75]))
  t.strictSame(conv.attrs.pads, [1, 1, 1, 1])
  t.equal(m.plan.tensors.filter(x => x.data !== undefined).length, 2, 'the unfolded weights and BN parameters are dropped')
})

t.test('BatchNormalization folds into a Gemm with constant weights (transB) and its bias', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  b.initializer('W', f32(1, 2, 3, 4), [2, 2]).initializer('C', f32(1, 1), [2])
  b.initializer('gamma', f32(2, 4), [2]).initializer('beta', f32(1, 0), [2])
  b.initializer('mean', f32(0, 1), [2]).initializer('var', f32(4, 16), [2])
  b.node('Gemm', ['X', 'W', 'C'], ['G'], { transB: 1, beta: 2 })
  b.node('BatchNormalization', ['G', 'gamma', 'beta', 'mean', 'var'], ['Y'], { epsilon: 0 })
  const m = plan(b)
  t.strictSame(m.plan.ops.map(o => o.op), ['MatMul'])
  const mm = op(m, 0)
  // s = [1, 1]; W rows scaled by s; bias' = s * (beta_gemm * C - mean) + beta = [2 + 1, 2 - 1]
  t.ok(near(m.plan.tensors[mm.inputs[1]!]!.data, [1, 2, 3, 4]))
  t.ok(near(m.plan.tensors[mm.inputs[2]!]!.data, [3, 1]))
  t.equal(mm.attrs.beta, 1)
  t.equal(mm.attrs.transB, true)

  const scaled = builder()
  scaled.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  scaled.initializer('W', f32(1, 2, 3, 4), [2, 2])
  scaled.initializer('gamma', f32(2, 4), [2]).initializer('beta', f32(0, 0), [2])
  scaled.initializer('mean', f32(0, 0), [2]).initializer('var', f32(1, 1), [2])
  scaled.node('MatMul', ['X', 'W'], ['G'])
  scaled.node('BatchNormalization', ['G', 'gamma', 'beta', 'mean', 'var'], ['Y'], { epsilon: 0 })
  const s = plan(scaled)
  t.ok(near(s.plan.tensors[op(s, 0).inputs[1]!]!.data, [2, 8, 6, 16]), 'columns of W [K, N] scaled by gamma')
})

t.test('BatchNormalization elsewhere becomes Mul + Add with per-channel constants', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 2, 3, 3]).output('Y', 'float32', ['N', 2, 3, 3])
  b.initializer('gamma', f32(2, 3), [2]).initializer('beta', f32(0.5, 0.25), [2])
  b.initializer('mean', f32(1, 2), [2]).initializer('var', f32(3, 8), [2])
  b.node('BatchNormalization', ['X', 'gamma', 'beta', 'mean', 'var'], ['Y'], { epsilon: 1 })
  const m = plan(b)
  t.strictSame(m.plan.ops.map(o => o.op), ['Mul', 'Add'])
  const scale = m.plan.tensors[op(m, 0).inputs[1]!]!
  const shift = m.plan.tensors[op(m, 1).inputs[1]!]!
  t.strictSame(scale.dims, [2, 1, 1])
  t.ok(near(scale.data, [1, 1]))
  t.ok(near(shift.data, [-0.5, -1.75]))

  const flat = builder()
  flat.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  flat.initializer('gamma', f32(2, 3), [2]).initializer('beta', f32(0.5, 0.25), [2])
  flat.initializer('mean', f32(1, 2), [2]).initializer('var', f32(3, 8), [2])
  flat.node('BatchNormalization', ['X', 'gamma', 'beta', 'mean', 'var'], ['Y'])
  t.strictSame(plan(flat).plan.tensors[op(plan(flat), 0).inputs[1]!]!.dims, [2], 'rank 2: [C]')
})

t.test('Gelu: the opset 20 op and its Erf decompositions', async t => {
  const variants: Array<[string, (b: OnnxBuilder) => void]> = [
    ['div, (x * t) * 0.5', b => {
      b.node('Div', ['X', 'sqrt2'], ['u']).node('Erf', ['u'], ['e']).node('Add', ['e', 'one'], ['t'])
      b.node('Mul', ['X', 't'], ['m']).node('Mul', ['m', 'half'], ['Y'])
    }],
    ['mul by 1/sqrt2, (x * 0.5) * t', b => {
      b.node('Mul', ['X', 'rsqrt2'], ['u']).node('Erf', ['u'], ['e']).node('Add', ['one', 'e'], ['t'])
      b.node('Mul', ['half', 'X'], ['h']).node('Mul', ['h', 't'], ['Y'])
    }],
    ['x * (t * 0.5)', b => {
      b.node('Div', ['X', 'sqrt2'], ['u']).node('Erf', ['u'], ['e']).node('Add', ['e', 'one'], ['t'])
      b.node('Mul', ['t', 'half'], ['m']).node('Mul', ['X', 'm'], ['Y'])
    }]
  ]
  for (const [what, body] of variants) {
    const b = builder(13)
    b.input('X', 'float32', ['N', 3]).output('Y', 'float32', ['N', 3])
    b.initializer('sqrt2', f32(1.4142135381698608), []).initializer('rsqrt2', f32(0.7071067690849304), [])
    b.initializer('one', f32(1), []).initializer('half', f32(0.5), [])
    body(b)
    const m = plan(b)
    t.strictSame(summary(m), ['Gelu(X) -> Y'], what)
    t.strictSame(op(m, 0).attrs, { activation: 'gelu' })
    t.equal(m.plan.tensors.length, 2, `${what}: the constants are dropped`)
  }
  const fused = builder(13)
  fused.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 3])
  fused.initializer('W', seq(6), [2, 3]).initializer('B', f32(1, 2, 3), [3])
  fused.initializer('sqrt2', f32(1.4142135), []).initializer('one', f32(1), []).initializer('half', f32(0.5), [])
  fused.node('MatMul', ['X', 'W'], ['xw']).node('Add', ['xw', 'B'], ['x'])
  fused.node('Div', ['x', 'sqrt2'], ['u']).node('Erf', ['u'], ['e']).node('Add', ['e', 'one'], ['t'])
  fused.node('Mul', ['x', 't'], ['m']).node('Mul', ['m', 'half'], ['Y'])
  const m = plan(fused)
  t.strictSame(summary(m), ['MatMul(X, W, B) -> Y'], 'MatMul + bias + the decomposed Gelu: one op')
  t.equal(op(m, 0).attrs.activation, 'gelu')

  const wrong = builder(13)
  wrong.input('X', 'float32', ['N', 3]).output('Y', 'float32', ['N', 3])
  wrong.initializer('two', f32(2), []).initializer('one', f32(1), []).initializer('half', f32(0.5), [])
  wrong.node('Div', ['X', 'two'], ['u']).node('Erf', ['u'], ['e']).node('Add', ['e', 'one'], ['t'])
  wrong.node('Mul', ['X', 't'], ['m']).node('Mul', ['m', 'half'], ['Y'])
  t.strictSame(plan(wrong).plan.ops.map(o => o.op), ['Div', 'Erf', 'Add', 'Mul', 'Mul'], 'x / 2 is not GELU')

  const shared = builder(13)
  shared.input('X', 'float32', ['N', 3]).output('Y', 'float32', ['N', 3]).output('E', 'float32', ['N', 3])
  shared.initializer('sqrt2', f32(1.4142135), []).initializer('one', f32(1), []).initializer('half', f32(0.5), [])
  shared.node('Div', ['X', 'sqrt2'], ['u']).node('Erf', ['u'], ['E']).node('Add', ['E', 'one'], ['t'])
  shared.node('Mul', ['X', 't'], ['m']).node('Mul', ['m', 'half'], ['Y'])
  t.equal(plan(shared).plan.ops.length, 5, 'an intermediate that is an output stops the match')
})

t.test('Softmax: opset 13 axis, and the flattening semantics before 13', async t => {
  const soft = (opset: number, axis: number | undefined): LoweredModel => {
    const b = builder(opset)
    b.input('X', 'float32', ['N', 4, 8]).output('Y', 'float32', ['N', 4, 8])
    b.node('Softmax', ['X'], ['Y'], axis === undefined ? {} : { axis })
    return plan(b)
  }
  t.strictSame(op(soft(13, undefined), 0).attrs, { axis: 2 }, 'default -1')
  t.strictSame(op(soft(13, 1), 0).attrs, { axis: 1 })
  t.strictSame(op(soft(11, 2), 0).attrs, { axis: 2 }, 'over the last axis the semantics agree')
  const old = soft(11, undefined)
  t.strictSame(summary(old), ['Reshape(X) -> X#1', 'Softmax(X#1) -> Y#2', 'Reshape(Y#2) -> Y'], 'default axis 1 before 13')
  t.strictSame(tensor(old, 'X#1').dims, [-1, 32])
  t.strictSame(op(old, 1).attrs, { axis: 1 })
  throwsCoded(t, () => soft(11, 0), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': node 'Softmax_0' (Softmax): it normalises over the batch dimension of [batch, 4, 8]"
  })
})

t.test('LayerNormalization: axis, epsilon, scale and bias broadcast over the normalised dims', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 2, 3]).output('Y', 'float32', ['N', 2, 3])
  b.initializer('S', f32(1, 2, 3), [3]).initializer('B', f32(0.5), [1])
  b.node('LayerNormalization', ['X', 'S', 'B'], ['Y'], { axis: -2, epsilon: 1e-3 })
  const m = plan(b)
  const ln = op(m, 0)
  t.equal(ln.op, 'LayerNorm')
  t.equal(ln.attrs.axis, 1)
  t.ok(Math.abs(ln.attrs.epsilon! - 1e-3) < 1e-9)
  t.strictSame(m.plan.tensors[ln.inputs[1]!]!.dims, [2, 3])
  t.ok(near(m.plan.tensors[ln.inputs[1]!]!.data, [1, 2, 3, 1, 2, 3]))
  t.ok(near(m.plan.tensors[ln.inputs[2]!]!.data, [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]))

  const plain = builder()
  plain.input('X', 'float32', ['N', 3]).output('Y', 'float32', ['N', 3])
  plain.initializer('S', f32(1, 2, 3), [3])
  plain.node('LayerNormalization', ['X', 'S'], ['Y'])
  const p = plan(plain)
  t.strictSame(summary(p), ['LayerNorm(X, S, -) -> Y'])
  t.strictSame(op(p, 0).attrs, { axis: 1, epsilon: 1e-5 })
})

t.test('Gather: constant data with int64 or int32 indices from the request, and data computed at run time', async t => {
  for (const dtype of ['int64', 'int32'] as const) {
    const b = builder()
    b.input('ids', dtype, ['N', 5]).output('Y', 'float32', ['N', 5, 4])
    b.initializer('table', seq(40), [10, 4])
    b.node('Gather', ['table', 'ids'], ['Y'])
    const m = plan(b)
    t.strictSame(summary(m), ['Gather(table, ids) -> Y'], dtype)
    t.strictSame(op(m, 0).attrs, { axis: 0 })
    t.strictSame(m.inputs, [{ name: 'ids', dtype, dims: [-1, 5] }])
    t.strictSame(tensor(m, 'Y').dims, [-1, 5, 4])
  }
  const cls = builder()
  cls.input('X', 'float32', ['N', 6, 4]).output('Y', 'float32', ['N', 4])
  cls.initializer('zero', i64(0), [])
  cls.node('Gather', ['X', 'zero'], ['Y'], { axis: 1 })
  const m = plan(cls)
  t.strictSame(op(m, 0).attrs, { axis: 1 })
  t.equal(m.plan.tensors[op(m, 0).inputs[1]!]!.data instanceof BigInt64Array, true, 'constant int64 indices')
})

t.test('Reshape keeps the batch symbolic: 0 copies, -1 infers, Shape-derived targets fold', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 64, 128]).output('Y', 'float32', ['N', 64, 128])
  b.initializer('flat', i64(-1, 128), [2]).initializer('back', i64(-1, 64, 128), [3])
  b.node('Reshape', ['X', 'flat'], ['r']).node('Reshape', ['r', 'back'], ['Y'])
  const m = plan(b)
  t.strictSame(tensor(m, 'r').dims, [-64, 128], '[B, 64, 128] -> [-1, 128] gives [64*batch, 128]')
  t.strictSame(tensor(m, 'Y').dims, [-1, 64, 128])

  const zero = builder()
  zero.input('X', 'float32', ['N', 4, 6]).output('Y', 'float32', ['N', 4, 2, 3])
  zero.initializer('s', i64(0, 0, 2, -1), [4])
  zero.node('Reshape', ['X', 's'], ['Y'])
  t.strictSame(tensor(plan(zero), 'Y').dims, [-1, 4, 2, 3])

  // x.view(x.size(0), 4, -1) as PyTorch exports it
  const torch = builder()
  torch.input('X', 'float32', ['N', 4, 6]).output('Y', 'float32', ['N', 4, 6])
  torch.initializer('i0', i64(0), []).initializer('ax', i64(0), [1]).initializer('rest', i64(4, -1), [2])
  torch.node('Shape', ['X'], ['shape']).node('Gather', ['shape', 'i0'], ['n'], { axis: 0 })
  torch.node('Unsqueeze', ['n', 'ax'], ['n1']).node('Concat', ['n1', 'rest'], ['target'], { axis: 0 })
  torch.node('Reshape', ['X', 'target'], ['Y'])
  const tm = plan(torch)
  t.strictSame(summary(tm), ['Reshape(X) -> Y'], 'the shape computation folds away')
  t.strictSame(tensor(tm, 'Y').dims, [-1, 4, 6])

  const heads = builder()
  heads.input('X', 'float32', ['N', 8, 16]).output('Y', 'float32', ['N', 8, 4, 4])
  heads.initializer('i0', i64(0), []).initializer('i1', i64(1), []).initializer('ax', i64(0), [1])
  heads.initializer('h', i64(4), [1]).initializer('d', i64(4), [1])
  heads.node('Shape', ['X'], ['shape'])
  heads.node('Gather', ['shape', 'i0'], ['n']).node('Gather', ['shape', 'i1'], ['s'])
  heads.node('Unsqueeze', ['n', 'ax'], ['n1']).node('Unsqueeze', ['s', 'ax'], ['s1'])
  heads.node('Concat', ['n1', 's1', 'h', 'd'], ['target'], { axis: 0 })
  heads.node('Reshape', ['X', 'target'], ['Y'])
  t.strictSame(tensor(plan(heads), 'Y').dims, [-1, 8, 4, 4])

  const batchOnly = builder()
  batchOnly.input('X', 'float32', ['N', 4, 6]).output('Y', 'float32', ['N', 24])
  batchOnly.initializer('i0', i64(0), []).initializer('ax', i64(0), [1]).initializer('minus', i64(-1), [1])
  batchOnly.node('Shape', ['X'], ['shape'], {}).node('Gather', ['shape', 'i0'], ['n'])
  batchOnly.node('Unsqueeze', ['n', 'ax'], ['n1']).node('Concat', ['n1', 'minus'], ['target'], { axis: 0 })
  batchOnly.node('Reshape', ['X', 'target'], ['Y'])
  t.strictSame(tensor(plan(batchOnly), 'Y').dims, [-1, 24])
})

t.test('Flatten, Squeeze, Unsqueeze, Identity, Dropout and a float Cast lower to Reshape', async t => {
  const b = builder(13)
  b.input('X', 'float32', ['N', 1, 4, 3]).output('Y', 'float32', ['N', 12])
  b.initializer('ax1', i64(1), [1]).initializer('ax2', i64(-1), [1])
  b.node('Squeeze', ['X', 'ax1'], ['a']).node('Unsqueeze', ['a', 'ax2'], ['b']).node('Identity', ['b'], ['c'])
  b.node('Dropout', ['c'], ['d']).node('Cast', ['d'], ['e'], { to: 1 }).node('Flatten', ['e'], ['Y'])
  const m = plan(b)
  t.strictSame(m.plan.ops.map(o => o.op), ['Reshape', 'Reshape', 'Reshape', 'Reshape', 'Reshape', 'Reshape'])
  t.strictSame(['a', 'b', 'c', 'Y'].map(n => tensor(m, n).dims), [[-1, 4, 3], [-1, 4, 3, 1], [-1, 4, 3, 1], [-1, 12]])

  const old = builder(11)
  old.input('X', 'float32', ['N', 1, 4]).output('Y', 'float32', ['N', 4, 1])
  old.node('Squeeze', ['X'], ['a'], { axes: [1] }).node('Unsqueeze', ['a'], ['Y'], { axes: [2] })
  t.strictSame(tensor(plan(old), 'a').dims, [-1, 4], 'opset 11: axes as attributes')

  const all = builder(13)
  all.input('X', 'float32', ['N', 1, 4, 1]).output('Y', 'float32', ['N', 4])
  all.node('Squeeze', ['X'], ['Y'])
  t.strictSame(tensor(plan(all), 'Y').dims, [-1, 4], 'no axes: every fixed 1, never the batch')

  const axis0 = builder()
  axis0.input('X', 'float32', ['N', 2, 3]).output('Y', 'float32', ['N', 6])
  axis0.initializer('s', i64(-1, 6), [2])
  axis0.node('Flatten', ['X'], ['f'], { axis: 0 }).node('Reshape', ['f', 's'], ['Y'])
  t.strictSame(tensor(plan(axis0), 'f').dims, [1, -6], 'Flatten at axis 0 puts the batch in the second dimension')
})

t.test('Transpose, Concat, pools', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 2, 3]).input('Z', 'float32', ['N', 3, 5]).output('Y', 'float32', ['N', 3, 7])
  b.node('Transpose', ['X'], ['xt'], { perm: [0, 2, 1] }).node('Concat', ['xt', 'Z'], ['Y'], { axis: -1 })
  const m = plan(b)
  t.strictSame(op(m, 0).attrs, { perm: [0, 2, 1] })
  t.strictSame(op(m, 1).attrs, { axis: 2 })
  t.strictSame(m.plan.inputs.map(i => m.plan.tensors[i]!.name), ['X', 'Z'])

  const rev = builder()
  rev.input('X', 'float32', [2, 3, 4]).output('Y', 'float32', [4, 3, 2])
  rev.node('Transpose', ['X'], ['Y'])
  t.strictSame(op(plan(rev, { maxBatch: 0 }), 0).attrs, { perm: [2, 1, 0] }, 'default perm reverses')

  const cnn = builder()
  cnn.input('X', 'float32', ['N', 1, 7, 7]).output('Y', 'float32', ['N', 2, 1, 1])
  cnn.initializer('W', seq(8), [2, 1, 2, 2])
  cnn.node('Conv', ['X', 'W'], ['c'], { auto_pad: 'SAME_UPPER', strides: [2, 2] })
  cnn.node('MaxPool', ['c'], ['p'], { kernel_shape: [3, 3], strides: [2, 2], ceil_mode: 1 })
  cnn.node('AveragePool', ['p'], ['a'], { kernel_shape: [2, 2], pads: [1, 1, 0, 0], count_include_pad: 1 })
  cnn.node('GlobalAveragePool', ['a'], ['Y'])
  const c = plan(cnn)
  t.strictSame(c.plan.ops.map(o => o.op), ['Conv', 'MaxPool', 'AveragePool', 'GlobalAveragePool'])
  // SAME_UPPER, stride 2 on 7: out 4, total pad (4-1)*2+2-7 = 1 -> [0, 0, 1, 1]
  t.strictSame(op(c, 0).attrs, { kernelShape: [2, 2], strides: [2, 2], pads: [0, 0, 1, 1], dilations: [1, 1], group: 1 })
  t.strictSame(tensor(c, 'c').dims, [-1, 2, 4, 4])
  // ceil((4 - 3) / 2) + 1 = 2
  t.strictSame(tensor(c, 'p').dims, [-1, 2, 2, 2])
  t.strictSame(op(c, 1).attrs, { kernelShape: [3, 3], strides: [2, 2], pads: [0, 0, 0, 0], dilations: [1, 1] })
  t.strictSame(op(c, 2).attrs, { kernelShape: [2, 2], strides: [1, 1], pads: [1, 1, 0, 0], dilations: [1, 1], countIncludePad: true })
  t.strictSame(tensor(c, 'a').dims, [-1, 2, 2, 2])
  t.strictSame(tensor(c, 'Y').dims, [-1, 2, 1, 1])

  const lower = builder()
  lower.input('X', 'float32', ['N', 4, 5, 5]).output('Y', 'float32', ['N', 4, 5, 5])
  lower.initializer('W', seq(16), [4, 1, 2, 2])
  lower.node('Conv', ['X', 'W'], ['Y'], { auto_pad: 'SAME_LOWER', group: 4 })
  t.strictSame(op(plan(lower), 0).attrs, { kernelShape: [2, 2], strides: [1, 1], pads: [1, 1, 0, 0], dilations: [1, 1], group: 4 })
})

t.test('folding: Constant nodes become initializers, constant subgraphs are computed at load', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  b.node('Constant', [], ['w'], { value: { t: { data: f32(1, 2, 3, 4), dims: [2, 2] } } })
  b.node('Constant', [], ['k'], { value_float: { f: 2 } })
  b.node('Mul', ['w', 'k'], ['w2']).node('Transpose', ['w2'], ['wt'])
  b.node('MatMul', ['X', 'wt'], ['Y'])
  const m = plan(b)
  t.strictSame(summary(m), ['MatMul(X, wt) -> Y'])
  t.ok(near(tensor(m, 'wt').data, [2, 6, 4, 8]))
  t.strictSame(tensor(m, 'wt').dims, [2, 2])
})

t.test('unused nodes and initializers are dropped; a shared constant is stored once', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  b.initializer('W', f32(1, 0, 0, 1), [2, 2]).initializer('unused', seq(100), [100])
  b.node('MatMul', ['X', 'W'], ['a']).node('MatMul', ['a', 'W'], ['Y']).node('Relu', ['a'], ['dead'])
  b.node('Foo', ['X'], ['dead2'])
  const m = plan(b)
  t.strictSame(summary(m), ['MatMul(X, W) -> a', 'MatMul(a, W) -> Y'])
  t.strictSame(m.plan.tensors.map(x => x.name), ['X', 'W', 'a', 'Y'])
})

t.test('an output that is an input, a constant or another output gets a copy', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 2]).output('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  b.output('Y', 'float32', ['N', 2])
  b.node('Relu', ['X'], ['Y'])
  const m = plan(b)
  t.strictSame(summary(m), ['Relu(X) -> Y', 'Reshape(X) -> X#output0', 'Reshape(Y) -> Y#output2'])
  t.strictSame(m.plan.outputs.map(i => m.plan.tensors[i]!.name), ['X#output0', 'Y', 'Y#output2'])
  t.strictSame(m.outputs.map(o => o.name), ['X', 'Y', 'Y'])
})

t.test('a model without batching keeps every dim fixed', async t => {
  const b = builder()
  b.input('X', 'float32', [2, 'K']).output('Y', 'float32', [2, 3])
  b.initializer('W', seq(12), [4, 3])
  b.node('MatMul', ['X', 'W'], ['Y'])
  const m = plan(b, { maxBatch: 0, dims: { X: [2, 4] } })
  t.equal(m.plan.maxBatch, 0)
  t.strictSame(m.inputs[0]!.dims, [2, 4])
  t.strictSame(m.outputs[0]!.dims, [2, 3])
})

t.test('an input without a declared shape takes config dims', async t => {
  const model = builder()
  model.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 4])
  model.node('Relu', ['X'], ['Y'])
  const m = model.model()
  delete m.graph!.input![0]!.type!.tensorType!.shape
  const { encodeOnnxModel } = await import('../../../../worker/backends/native/onnx-proto.ts')
  const bytes = encodeOnnxModel(m)
  t.strictSame(planFromOnnx(bytes, { modelName: 'm', maxBatch: 4, dims: { X: [4] } }).inputs[0]!.dims, [-1, 4])
  throwsCoded(t, () => planFromOnnx(bytes, { modelName: 'm', maxBatch: 4 }), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': input 'X' declares no shape; give its dims in config.pbtxt"
  })
})

// ------------------------------------------------------------------------------------------------------------------
// Refusals

const OPS = 'MatMul, Gemm, Add, Sub, Mul, Div, Relu, LeakyRelu, Sigmoid, Tanh, Erf, Gelu, Softmax, LayerNormalization, ' +
  'BatchNormalization, Gather, Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout, Transpose, Concat, Conv, ' +
  'MaxPool, AveragePool, GlobalAveragePool (and Shape, Cast, ConstantOfShape, Range, Constant where they fold to constants)'

t.test('malformed bytes', async t => {
  throwsCoded(t, () => planFromOnnx(new Uint8Array([0xff, 0xff, 0xff]), { modelName: 'm', maxBatch: 0, file: '/r/m/1/model.onnx' }), {
    code: 'WRK_ERR_ONNX_INVALID',
    message: "failed to load model 'm': /r/m/1/model.onnx is not a valid ONNX model: the bytes do not decode as an " +
      'ONNX ModelProto (index out of range: 3 + 1 > 3)'
  })
})

t.test('an op outside the list names the op and the node, and suggests onnxruntime', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 4])
  b.node('Relu', ['X'], ['r']).node('HardSwish', ['r'], ['Y'], {}, 'act/hardswish')
  throwsCoded(t, () => plan(b), {
    code: 'WRK_ERR_ONNX_UNSUPPORTED_OP',
    message: "failed to load model 'm': the native backend cannot run op HardSwish (node 'act/hardswish'); it runs " +
      `${OPS}. Set backend: "onnxruntime" in config.pbtxt to run this model with onnxruntime`
  })
  const shape = builder()
  shape.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 4])
  shape.node('Shape', ['X'], ['s']).node('ConstantOfShape', ['s'], ['zeros']).node('Add', ['X', 'zeros'], ['Y'])
  throwsCoded(t, () => plan(shape), {
    code: 'WRK_ERR_ONNX_UNSUPPORTED_OP',
    message: "failed to load model 'm': the native backend cannot run op ConstantOfShape (outside constant folding: " +
      `its input is known only at run time) (node 'ConstantOfShape_1'); it runs ${OPS}. Set backend: "onnxruntime" ` +
      'in config.pbtxt to run this model with onnxruntime'
  })
  const indices = builder()
  indices.input('X', 'float32', ['N', 1, 4, 4]).output('Y', 'float32', ['N', 1, 4, 4]).output('I', 'int64', ['N', 1, 4, 4])
  indices.node('MaxPool', ['X'], ['Y', 'I'], { kernel_shape: [1, 1] })
  throwsCoded(t, () => plan(indices), {
    code: 'WRK_ERR_ONNX_UNSUPPORTED_OP',
    message: "failed to load model 'm': the native backend cannot run op MaxPool (with output #1 ('I') in use) (node " +
      `'MaxPool_0'); it runs ${OPS}. Set backend: "onnxruntime" in config.pbtxt to run this model with onnxruntime`
  })
})

t.test('a fixed first dimension with max_batch_size > 0', async t => {
  const b = builder()
  b.input('X', 'float32', [1, 4]).output('Y', 'float32', [1, 4])
  b.node('Relu', ['X'], ['Y'])
  throwsCoded(t, () => plan(b), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': input 'X' has a fixed first dimension (1), but max_batch_size 8 makes it the " +
      "batch: export the model with a dynamic batch axis (torch.onnx.export(..., dynamic_axes={'X': {0: 'batch'}})), " +
      'or set max_batch_size: 0 in config.pbtxt'
  })
  t.strictSame(plan(b, { maxBatch: 0 }).inputs[0]!.dims, [1, 4], 'fine without batching')
})

t.test('an unresolved symbolic dimension', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 'seq', 4]).output('Y', 'float32', ['N', 'seq', 4])
  b.node('Relu', ['X'], ['Y'])
  throwsCoded(t, () => plan(b), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': input 'X' dimension 1 is symbolic ('seq'); give its size in config.pbtxt's " +
      "dims for input 'X' (dims exclude the batch dimension)"
  })
  t.strictSame(plan(b, { dims: { X: [16, 4] } }).inputs[0]!.dims, [-1, 16, 4])
  throwsCoded(t, () => plan(b, { dims: { X: [-1, 4] } }), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': input 'X' dimension 1 is symbolic ('seq'); give its size in config.pbtxt's " +
      "dims for input 'X' (dims exclude the batch dimension)"
  }, 'a -1 in config dims does not resolve it')
  throwsCoded(t, () => plan(b, { maxBatch: 0 }), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': input 'X' dimension 0 is symbolic ('N'); give its size in config.pbtxt's " +
      "dims for input 'X', or set max_batch_size > 0 if it is the batch"
  })
})

t.test('data types the engine does not compute with', async t => {
  const half = builder()
  half.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 4])
  half.node('Relu', ['X'], ['Y'])
  const m = half.model()
  m.graph!.input![0]!.type!.tensorType!.elemType = 10
  const { encodeOnnxModel } = await import('../../../../worker/backends/native/onnx-proto.ts')
  throwsCoded(t, () => planFromOnnx(encodeOnnxModel(m), { modelName: 'm', maxBatch: 8 }), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': input 'X' is FLOAT16; the native backend takes float32 inputs, and int32 or " +
      'int64 ones as Gather indices'
  })

  const double = builder()
  double.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  double.initializer('W', f32(1, 2, 3, 4), [2, 2]).node('MatMul', ['X', 'W'], ['Y'])
  const dm = double.model()
  dm.graph!.initializer![0] = { name: 'W', dims: [2, 2], dataType: 11, doubleData: [1, 2, 3, 4] }
  throwsCoded(t, () => planFromOnnx(encodeOnnxModel(dm), { modelName: 'm', maxBatch: 8 }), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': node 'MatMul_0' (MatMul) reads initializer 'W' of type DOUBLE; the native " +
      'backend computes with float32 (float16 and bfloat16 weights are converted at load), int32 and int64'
  })
  dm.graph!.node = [{ name: 'id', opType: 'Identity', input: ['X'], output: ['Y'] }]
  t.equal(planFromOnnx(encodeOnnxModel(dm), { modelName: 'm', maxBatch: 8 }).plan.ops.length, 1, 'unused, it is dropped')

  const ints = builder()
  ints.input('ids', 'int64', ['N', 4]).output('Y', 'float32', ['N', 4])
  ints.initializer('W', seq(16), [4, 4]).node('MatMul', ['ids', 'W'], ['Y'])
  throwsCoded(t, () => plan(ints), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': node 'MatMul_0' (MatMul): A is int64; the native backend computes in float32 " +
      '(integer tensors only go through Gather, Reshape, Transpose and Concat)'
  })
})

t.test('shapes that only hold at some batch sizes', async t => {
  const squeeze = builder(13)
  squeeze.input('X', 'float32', ['N', 4]).output('Y', 'float32', [4])
  squeeze.initializer('ax', i64(0), [1]).node('Squeeze', ['X', 'ax'], ['Y'])
  throwsCoded(t, () => plan(squeeze), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': node 'Squeeze_0' (Squeeze): it squeezes dimension 0 of [batch, 4], which is " +
      'the batch (1 at batch size 1 only)'
  })
  const odd = builder()
  odd.input('X', 'float32', ['N', 3]).output('Y', 'float32', ['M', 2])
  odd.initializer('s', i64(-1, 2), [2]).node('Reshape', ['X', 's'], ['Y'])
  throwsCoded(t, () => plan(odd), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': node 'Reshape_0' (Reshape): reshaping [batch, 3] to [-1, 2] leaves no whole " +
      'dimension for the -1 at every batch size'
  })
  const squared = builder()
  squared.input('X', 'float32', ['N', 3]).output('Y', 'float32', ['N', 'N'])
  squared.node('Transpose', ['X'], ['xt']).node('MatMul', ['X', 'xt'], ['Y'])
  throwsCoded(t, () => plan(squared), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': node 'MatMul_1' (MatMul): its output [batch, batch] would scale with batch²"
  })
  const notFirst = builder()
  notFirst.input('X', 'float32', ['N', 3]).output('Y', 'float32', [3, 'N'])
  notFirst.node('Transpose', ['X'], ['Y'])
  throwsCoded(t, () => plan(notFirst), {
    code: 'WRK_ERR_MODEL_LOAD',
    message: "failed to load model 'm': output 'Y' has dims [3, batch]; with max_batch_size > 0 every output needs the " +
      'batch as its first dimension and fixed sizes after it'
  })
})

t.test('declared outputs are checked against the graph', async t => {
  const b = builder()
  b.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 5])
  b.node('Relu', ['X'], ['Y'])
  throwsCoded(t, () => plan(b), {
    code: 'WRK_ERR_ONNX_INVALID',
    message: "failed to load model 'm': model.onnx is not a valid ONNX model: output 'Y' is declared [N, 5], the " +
      'graph computes [batch, 4]'
  })
  const bad = builder()
  bad.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 3])
  bad.initializer('W', seq(9), [3, 3]).node('MatMul', ['X', 'W'], ['Y'])
  throwsCoded(t, () => plan(bad), {
    code: 'WRK_ERR_ONNX_INVALID',
    message: "failed to load model 'm': model.onnx is not a valid ONNX model: node 'MatMul_0' (MatMul): it multiplies " +
      '[batch, 4] by [3, 3]: inner dimensions differ'
  })
  const missing = builder()
  missing.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 4])
  missing.node('Relu', ['Z'], ['Y'])
  throwsCoded(t, () => plan(missing), {
    code: 'WRK_ERR_ONNX_INVALID',
    message: "failed to load model 'm': model.onnx is not a valid ONNX model: node 'Relu_0' reads 'Z', which no node, " +
      'input or initializer defines'
  })
  const nothing = builder()
  nothing.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 4])
  throwsCoded(t, () => plan(nothing), {
    code: 'WRK_ERR_ONNX_INVALID',
    message: "failed to load model 'm': model.onnx is not a valid ONNX model: graph output 'Y' is not computed by any node"
  })
})
