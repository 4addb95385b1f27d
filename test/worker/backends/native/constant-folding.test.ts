import t, { type Test } from 'tap'
import { constantValue, erf, foldNode, gelu, makeConst } from '../../../../worker/backends/native/constant-folding.ts'
import { onnxAttribute, OnnxBuilder, type OnnxAttributeValue } from '../../../../worker/backends/native/onnx-builder.ts'
import { NodeAttributes, type ConstDType, type GraphNode } from '../../../../worker/backends/native/onnx-graph.ts'
import { planFromOnnx } from '../../../../worker/backends/native/planner.ts'
import { type Value } from '../../../../worker/backends/native/shape-inference.ts'

const node = (opType: string, attrs: Record<string, OnnxAttributeValue> = {}, inputs = ['x'], outputs = ['y']): GraphNode => ({
  name: 'n', opType, inputs, outputs, attrs: new NodeAttributes(Object.entries(attrs).map(([k, v]) => onnxAttribute(k, v)))
})
const c = (dims: number[], values: number[], dtype: ConstDType = 'float32'): Value => constantValue(makeConst(dtype, dims, values))
const runtime = (dims: number[], dtype: ConstDType = 'float32'): Value => ({ dtype, dims })

/** The folded first output as { dims, values } (numbers), or what it is instead. */
function fold (n: GraphNode, inputs: Array<Value | undefined>, opset = 17): { dims: number[], values: unknown } | string {
  const out = foldNode(n, inputs, opset)
  if (out === undefined) return 'not folded'
  const v = out[0]
  if (v === undefined) return 'no output'
  if (v.symbolic !== undefined) return { dims: v.dims, values: v.symbolic }
  return { dims: v.dims, values: Array.from(v.constant!.data as ArrayLike<number | bigint>, Number) }
}

function near (t: Test, got: ReturnType<typeof fold>, dims: number[], values: number[], eps = 1e-6): void {
  if (typeof got === 'string') {
    t.fail(got)
    return
  }
  t.strictSame(got.dims, dims)
  const vs = got.values as number[]
  t.ok(vs.length === values.length && values.every((x, i) => Math.abs(vs[i]! - x) <= eps * Math.max(1, Math.abs(x))),
    `${JSON.stringify(vs)} ~ ${JSON.stringify(values)}`)
}

t.test('element-wise arithmetic with broadcasting, float and integer', async t => {
  near(t, fold(node('Add', {}, ['a', 'b']), [c([2, 2], [1, 2, 3, 4]), c([2], [10, 20])]), [2, 2], [11, 22, 13, 24])
  near(t, fold(node('Sub', {}, ['a', 'b']), [c([2, 1], [1, 2]), c([3], [1, 2, 3])]), [2, 3], [0, -1, -2, 1, 0, -1])
  near(t, fold(node('Mul', {}, ['a', 'b']), [c([], [3]), c([2], [1.5, 2])]), [2], [4.5, 6])
  near(t, fold(node('Div', {}, ['a', 'b']), [c([2], [1, 3]), c([], [2])]), [2], [0.5, 1.5])
  t.strictSame(fold(node('Div', {}, ['a', 'b']), [c([2], [7, -7], 'int64'), c([], [2], 'int64')]), { dims: [2], values: [3, -3] },
    'integer Div truncates')
  t.equal(fold(node('Add', {}, ['a', 'b']), [runtime([2]), c([2], [1, 2])]), 'not folded')
  t.throws(() => fold(node('Add', {}, ['a', 'b']), [c([2], [1, 2]), c([3], [1, 2, 3])]), { message: '[2] and [3] do not broadcast' })
})

t.test('activations', async t => {
  const x = c([5], [-2, -0.5, 0, 0.5, 2])
  near(t, fold(node('Relu'), [x]), [5], [0, 0, 0, 0.5, 2])
  near(t, fold(node('LeakyRelu', { alpha: 0.1 }), [x]), [5], [-0.2, -0.05, 0, 0.5, 2])
  near(t, fold(node('LeakyRelu'), [x]), [5], [-0.02, -0.005, 0, 0.5, 2], 1e-6)
  near(t, fold(node('Sigmoid'), [x]), [5], [0.11920292, 0.37754067, 0.5, 0.62245933, 0.88079708])
  near(t, fold(node('Tanh'), [x]), [5], [-0.96402758, -0.46211716, 0, 0.46211716, 0.96402758])
  near(t, fold(node('Erf'), [x]), [5], [-0.99532227, -0.52049988, 0, 0.52049988, 0.99532227])
  near(t, fold(node('Gelu'), [x]), [5], [-0.04550026, -0.15426877, 0, 0.34573123, 1.95449974])
  near(t, fold(node('Gelu', { approximate: 'tanh' }), [x]), [5], [-0.04540231, -0.15428599, 0, 0.34571401, 1.95459769])
  // erf against reference values on both sides of the series/erfc switch (Python's math.erf)
  for (const [xv, ev] of [[0.1, 0.1124629160182849], [0.49, 0.511668261188523], [0.51, 0.5292436198411704], [0.7, 0.6778011938374184],
    [1, 0.8427007929497149], [3, 0.9999779095030014], [-1.5, -0.9661051464753108]]) {
    t.ok(Math.abs(erf(xv!) - ev!) < 1e-7 * Math.abs(ev!), `erf(${xv}) = ${erf(xv!)}`)
  }
  t.ok(Math.abs(gelu(1, false) - 0.8413447461) < 1e-7)
})

t.test('products and normalisation', async t => {
  near(t, fold(node('MatMul', {}, ['a', 'b']), [c([2, 2], [1, 2, 3, 4]), c([2, 1], [5, 6])]), [2, 1], [17, 39])
  near(t, fold(node('MatMul', {}, ['a', 'b']), [c([2], [1, 2]), c([2, 2], [1, 2, 3, 4])]), [2], [7, 10], 1e-6)
  near(t, fold(node('MatMul', {}, ['a', 'b']), [c([2, 1, 2], [1, 0, 0, 1]), c([2, 2], [1, 2, 3, 4])]), [2, 1, 2], [1, 2, 3, 4])
  near(t, fold(node('Gemm', { transA: 1, transB: 1, alpha: 2, beta: 0.5 }, ['a', 'b', 'c']),
    [c([2, 1], [1, 2]), c([2, 2], [1, 2, 3, 4]), c([2], [10, 20])]), [1, 2], [2 * 5 + 5, 2 * 11 + 10])
  near(t, fold(node('Softmax', { axis: 1 }), [c([2, 2], [0, Math.log(3), 1, 1])]), [2, 2], [0.25, 0.75, 0.5, 0.5])
  near(t, fold(node('Softmax', { axis: 0 }), [c([2, 2], [0, 1, Math.log(3), 1])]), [2, 2], [0.25, 0.5, 0.75, 0.5], 1e-6)
  near(t, fold(node('Softmax', { axis: 0 }), [c([2, 2], [0, 0, 0, 0])], 11), [2, 2], [0.25, 0.25, 0.25, 0.25], 1e-6)
  // mean 2, variance 2/3 over [1, 2, 3]
  const inv = 1 / Math.sqrt(2 / 3 + 1e-5)
  near(t, fold(node('LayerNormalization', {}, ['x', 's', 'b']), [c([1, 3], [1, 2, 3]), c([3], [1, 2, 1]), c([1], [1])]),
    [1, 3], [-inv + 1, 1, inv + 1], 1e-5)
  near(t, fold(node('BatchNormalization', { epsilon: 0 }, ['x', 's', 'b', 'm', 'v']),
    [c([1, 2, 1, 2], [1, 2, 3, 4]), c([2], [2, 1]), c([2], [0, 1]), c([2], [1, 3]), c([2], [4, 1])]), [1, 2, 1, 2], [0, 1, 1, 2])
})

t.test('convolution and pooling', async t => {
  const x = c([1, 1, 3, 3], [1, 2, 3, 4, 5, 6, 7, 8, 9])
  near(t, fold(node('Conv', {}, ['x', 'w', 'b']), [x, c([1, 1, 2, 2], [1, 0, 0, 1]), c([1], [10])]), [1, 1, 2, 2], [16, 18, 22, 24])
  near(t, fold(node('Conv', { pads: [1, 1, 1, 1], strides: [2, 2] }, ['x', 'w']), [x, c([1, 1, 3, 3], new Array(9).fill(1))]),
    [1, 1, 2, 2], [12, 16, 24, 28])
  near(t, fold(node('MaxPool', { kernel_shape: [2, 2], strides: [2, 2], ceil_mode: 1 }), [x]), [1, 1, 2, 2], [5, 6, 8, 9])
  near(t, fold(node('AveragePool', { kernel_shape: [2, 2], strides: [2, 2], ceil_mode: 1 }), [x]), [1, 1, 2, 2], [3, 4.5, 7.5, 9])
  near(t, fold(node('AveragePool', { kernel_shape: [2, 2], pads: [1, 1, 0, 0], count_include_pad: 1 }), [x]),
    [1, 1, 3, 3], [0.25, 0.75, 1.25, 1.25, 3, 4, 2.75, 6, 7])
  near(t, fold(node('GlobalAveragePool'), [c([1, 2, 1, 2], [1, 3, 5, 7])]), [1, 2, 1, 1], [2, 6])
})

t.test('data movement', async t => {
  const x = c([2, 3], [1, 2, 3, 4, 5, 6])
  near(t, fold(node('Transpose'), [x]), [3, 2], [1, 4, 2, 5, 3, 6])
  near(t, fold(node('Concat', { axis: 1 }, ['a', 'b']), [x, c([2, 1], [7, 8])]), [2, 4], [1, 2, 3, 7, 4, 5, 6, 8])
  near(t, fold(node('Gather', { axis: 1 }, ['x', 'i']), [x, c([2], [2, -3], 'int64')]), [2, 2], [3, 1, 6, 4])
  t.throws(() => fold(node('Gather', {}, ['x', 'i']), [x, c([1], [2], 'int64')]), { message: 'index 2 is out of range for dimension 0 (2) of its data' })
  near(t, fold(node('Reshape', {}, ['x', 's']), [x, c([2], [3, -1], 'int64')]), [3, 2], [1, 2, 3, 4, 5, 6])
  near(t, fold(node('Flatten', { axis: 0 }), [x]), [1, 6], [1, 2, 3, 4, 5, 6])
  near(t, fold(node('Unsqueeze', {}, ['x', 'a']), [x, c([1], [0], 'int64')], 13), [1, 2, 3], [1, 2, 3, 4, 5, 6])
  near(t, fold(node('Squeeze', { axes: [0] }), [c([1, 2], [1, 2])], 11), [2], [1, 2])
  near(t, fold(node('Identity'), [x]), [2, 3], [1, 2, 3, 4, 5, 6])
  t.equal(foldNode(node('Dropout', {}, ['x'], ['y', 'mask']), [x], 17)?.[1], undefined, 'no mask')
})

t.test('shape ops: Shape, Cast, ConstantOfShape, Range, Constant', async t => {
  t.strictSame(fold(node('Shape'), [runtime([-1, 4, 6])]), { dims: [3], values: [{ batch: 1 }, 4, 6] }, 'the batch stays symbolic')
  t.strictSame(fold(node('Shape'), [runtime([2, 4, 6])]), { dims: [3], values: [2, 4, 6] })
  t.strictSame(fold(node('Shape', { start: 1, end: -1 }), [runtime([-1, 4, 6])]), { dims: [1], values: [4] })
  const shape: Value = { dtype: 'int64', dims: [3], symbolic: [{ batch: 1 }, 4, 6] }
  t.strictSame(fold(node('Gather', {}, ['s', 'i']), [shape, c([], [0], 'int64')]), { dims: [], values: [{ batch: 1 }] })
  t.strictSame(fold(node('Mul', {}, ['a', 'b']), [shape, c([], [2], 'int64')]), { dims: [3], values: [{ batch: 2 }, 8, 12] })
  t.strictSame(fold(node('Div', {}, ['a', 'b']), [{ dtype: 'int64', dims: [1], symbolic: [{ batch: 4 }] }, c([], [2], 'int64')]),
    { dims: [1], values: [{ batch: 2 }] })
  t.equal(fold(node('Div', {}, ['a', 'b']), [{ dtype: 'int64', dims: [1], symbolic: [{ batch: 1 }] }, c([], [2], 'int64')]), 'not folded',
    'batch / 2 is not a whole multiple')
  t.equal(fold(node('Add', {}, ['a', 'b']), [shape, c([], [1], 'int64')]), 'not folded', 'batch + 1 is not a multiple')
  t.strictSame(fold(node('Cast', { to: 6 }), [shape]), { dims: [3], values: [{ batch: 1 }, 4, 6] })
  t.equal(fold(node('Cast', { to: 1 }), [shape]), 'not folded')
  near(t, fold(node('Cast', { to: 7 }), [c([2], [1.7, -1.7])]), [2], [1, -1])
  near(t, fold(node('ConstantOfShape', { value: Float32Array.from([2.5]) }), [c([2], [1, 2], 'int64')]), [1, 2], [2.5, 2.5])
  near(t, fold(node('ConstantOfShape'), [c([1], [2], 'int64')]), [2], [0, 0])
  t.equal(fold(node('ConstantOfShape'), [shape]), 'not folded')
  near(t, fold(node('Range', {}, ['s', 'l', 'd']), [c([], [1], 'int64'), c([], [7], 'int64'), c([], [2], 'int64')]), [3], [1, 3, 5])
  near(t, fold(node('Range', {}, ['s', 'l', 'd']), [c([], [1]), c([], [0]), c([], [-0.5])]), [2], [1, 0.5])
  near(t, fold(node('Constant', { value_ints: [1, 2] }, []), []), [2], [1, 2])
  near(t, fold(node('Constant', { value_float: { f: 1.5 } }, []), []), [], [1.5])
  near(t, fold(node('Constant', { value_int: 4 }, []), []), [], [4])
  near(t, fold(node('Constant', { value_floats: [1.5, 2] }, []), []), [2], [1.5, 2])
  t.throws(() => fold(node('Constant', { value_string: 'x' }, []), []),
    { kind: 'refused', message: 'its value is a string, which the native backend does not compute with' })
  t.throws(() => fold(node('Constant', {}, []), []), { kind: 'invalid', message: 'it has no value attribute' })
  t.equal(fold(node('Loop'), [c([1], [1])]), 'not folded', 'an op outside the list is left to the planner to refuse')
})

t.test('folding in a planned graph: a constant subgraph and a batch-dependent shape computation', async t => {
  const b = new OnnxBuilder({ opset: 13 })
  b.input('X', 'float32', ['N', 2]).output('Y', 'float32', ['N', 2])
  b.initializer('W', Float32Array.from([1, 2, 3, 4]), [2, 2]).initializer('k', Float32Array.from([0.5]), [])
  b.node('Constant', [], ['two'], { value: { t: { data: BigInt64Array.from([2n, 2n]), dims: [2] } } })
  b.node('ConstantOfShape', ['two'], ['ones'], { value: Float32Array.from([1]) })
  b.node('Add', ['W', 'ones'], ['w1']).node('Mul', ['w1', 'k'], ['w2']).node('Relu', ['w2'], ['w3'])
  b.node('MatMul', ['X', 'w3'], ['Y'])
  const m = planFromOnnx(b.build(), { modelName: 'm', maxBatch: 4 })
  t.strictSame(m.plan.ops.map(o => o.op), ['MatMul'])
  const w = m.plan.tensors[m.plan.ops[0]!.inputs[1]!]!
  t.strictSame(Array.from(w.data as Float32Array), [1, 1.5, 2, 2.5], 'relu((W + 1) * 0.5) computed at load')
})
