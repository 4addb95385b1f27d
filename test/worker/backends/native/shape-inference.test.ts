import t from 'tap'
import { broadcastDims, dimsProduct, formatDims, normalizeAxis } from '../../../../worker/backends/native/batch-dims.ts'
import { onnxAttribute, type OnnxAttributeValue } from '../../../../worker/backends/native/onnx-builder.ts'
import { NodeAttributes, type ConstDType, type GraphNode } from '../../../../worker/backends/native/onnx-graph.ts'
import {
  broadcastsOnto, concatDims, convGeometry, flattenDims, inferNode, matmulDims, poolGeometry, reshapeDims, squeezeDims,
  unsqueezeDims, type Value
} from '../../../../worker/backends/native/shape-inference.ts'

const node = (opType: string, attrs: Record<string, OnnxAttributeValue> = {}, inputs = ['x'], outputs = ['y']): GraphNode => ({
  name: 'n', opType, inputs, outputs, attrs: new NodeAttributes(Object.entries(attrs).map(([k, v]) => onnxAttribute(k, v)))
})
const v = (dims: number[], dtype: ConstDType = 'float32'): Value => ({ dtype, dims })
const ints = (...xs: number[]): Value => ({ dtype: 'int64', dims: [xs.length], constant: { dtype: 'int64', dims: [xs.length], data: BigInt64Array.from(xs.map(BigInt)) } })

t.test('batch-scaled dims', async t => {
  t.equal(formatDims([-1, 64, -128]), '[batch, 64, 128*batch]')
  t.strictSame(dimsProduct([-1, 4, 2]), { coef: 8, batched: true })
  t.strictSame(dimsProduct([3, 4]), { coef: 12, batched: false })
  t.equal(dimsProduct([-1, -2]), undefined, 'batch² is not representable')
  t.strictSame(broadcastDims([-1, 1, 4], [3, 1]), [-1, 3, 4])
  t.strictSame(broadcastDims([1], [-1, 4]), [-1, 4])
  t.equal(broadcastDims([-1, 4], [2, 4]), undefined, 'a batch dimension broadcasts only with 1 and itself')
  t.equal(normalizeAxis(-1, 3), 2)
  t.equal(normalizeAxis(3, 3), undefined)
})

t.test('reshape targets', async t => {
  t.strictSame(reshapeDims([-1, 64, 128], [-1, 128], false), [-64, 128])
  t.strictSame(reshapeDims([-64, 128], [-1, 64, 128], false), [-1, 64, 128])
  t.strictSame(reshapeDims([-1, 4, 6], [0, 0, 2, 3], false), [-1, 4, 2, 3], '0 copies the input dimension')
  t.strictSame(reshapeDims([-1, 4, 6], [{ batch: 1 }, -1], false), [-1, 24], 'a batch multiple from a folded Shape')
  t.strictSame(reshapeDims([-1, 4, 6], [{ batch: 4 }, 6], false), [-4, 6])
  t.strictSame(reshapeDims([2, 3], [6], false), [6])
  t.strictSame(reshapeDims([-1, 2, 3], [-1], false), [-6])
  t.throws(() => reshapeDims([-1, 3], [-1, 2], false), { kind: 'refused', message: 'reshaping [batch, 3] to [-1, 2] leaves no whole dimension for the -1 at every batch size' })
  t.throws(() => reshapeDims([2, 3], [-1, -1], false), { kind: 'invalid', message: 'its shape [-1, -1] has more than one -1' })
  t.throws(() => reshapeDims([2, 3], [4, 2], false), { kind: 'invalid', message: 'it reshapes [2, 3] to [4, 2], which holds a different number of elements' })
  t.throws(() => reshapeDims([-1, 3], [3, 2], false), { kind: 'invalid', message: 'it reshapes [batch, 3] to [3, 2], which holds a different number of elements' })
  t.throws(() => reshapeDims([6], [0, -1], true), { kind: 'refused', message: 'reshaping [6] to [0, -1] leaves no whole dimension for the -1 at every batch size' },
    'allowzero keeps a 0 literal')
  t.throws(() => reshapeDims([6], [-2, 3], false), { kind: 'invalid', message: 'its shape [-2, 3] has an invalid entry -2' })
  t.throws(() => reshapeDims([2, 3], [0, 0, 0], false), { message: 'its shape [0, 0, 0] copies dimension 2 (0), which the input [2, 3] lacks' })
  t.throws(() => reshapeDims([-1, 4], [{ batch: 1 }, { batch: 1 }], false), { kind: 'refused', message: 'its shape [batch, batch] scales with batch²' })
})

t.test('flatten, squeeze, unsqueeze, concat, matmul', async t => {
  t.strictSame(flattenDims([-1, 2, 3], 1), [-1, 6])
  t.strictSame(flattenDims([-1, 2, 3], -1), [-2, 3])
  t.strictSame(flattenDims([-1, 2, 3], 3), [-6, 1])
  t.throws(() => flattenDims([2, 3], 3), { message: 'axis 3 is out of range for rank 2' })
  t.strictSame(squeezeDims([-1, 1, 4, 1], [-1]), [-1, 1, 4])
  t.strictSame(squeezeDims([-1, 1, 4, 1], undefined), [-1, 4])
  t.throws(() => squeezeDims([-1, 2], [1]), { kind: 'invalid', message: 'it squeezes dimension 1 of [batch, 2], which is not 1' })
  t.strictSame(unsqueezeDims([-1, 4], [0, -1]), [1, -1, 4, 1])
  t.throws(() => unsqueezeDims([4], [1, 1]), { message: 'axis 1 is repeated' })
  t.strictSame(concatDims(node('Concat', { axis: 1 }), [[-1, 2], [-1, 3]]), { axis: 1, dims: [-1, 5] })
  t.strictSame(concatDims(node('Concat', { axis: 0 }), [[-1, 2], [-2, 2]]), { axis: 0, dims: [-3, 2] }, 'batch parts add up')
  t.throws(() => concatDims(node('Concat', { axis: 0 }), [[-1, 2], [3, 2]]),
    { kind: 'refused', message: 'it joins batch-sized and fixed-sized inputs ([batch, 2], [3, 2]) along axis 0' })
  t.throws(() => concatDims(node('Concat', { axis: 0 }), [[1, 2], [1, 3]]), { kind: 'invalid', message: 'its inputs [1, 2], [1, 3] differ outside axis 0' })
  t.throws(() => concatDims(node('Concat'), [[1, 2]]), { message: "it needs the 'axis' attribute" })
  t.strictSame(matmulDims([-1, 8, 4], [4, 3]), [-1, 8, 3])
  t.strictSame(matmulDims([-1, 2, 8, 4], [-1, 2, 4, 8]), [-1, 2, 8, 8])
  t.strictSame(matmulDims([4], [-1, 4, 3]), [-1, 3])
  t.strictSame(matmulDims([-1, 4], [4]), [-1])
  t.throws(() => matmulDims([2, 3], [4, 5]), { message: 'it multiplies [2, 3] by [4, 5]: inner dimensions differ' })
  t.ok(broadcastsOnto([3], [2, 3]))
  t.ok(broadcastsOnto([1, 2, 3], [2, 3]))
  t.notOk(broadcastsOnto([2], [2, 3]))
})

t.test('convolution and pooling geometry', async t => {
  const conv = (attrs: Record<string, OnnxAttributeValue>, x = [-1, 2, 7, 7], w = [4, 2, 3, 3]) => convGeometry(node('Conv', attrs), x, w)
  t.strictSame(conv({}), { kernelShape: [3, 3], strides: [1, 1], pads: [0, 0, 0, 0], dilations: [1, 1], out: [5, 5], group: 1, outDims: [-1, 4, 5, 5] })
  t.strictSame(conv({ auto_pad: 'SAME_UPPER', strides: [2, 2] }).pads, [1, 1, 1, 1])
  t.strictSame(conv({ auto_pad: 'SAME_UPPER' }, [-1, 2, 6, 6], [4, 2, 2, 2]).pads, [0, 0, 1, 1], 'SAME_UPPER puts the odd pad at the end')
  t.strictSame(conv({ auto_pad: 'SAME_LOWER' }, [-1, 2, 6, 6], [4, 2, 2, 2]).pads, [1, 1, 0, 0], 'SAME_LOWER at the start')
  t.strictSame(conv({ auto_pad: 'VALID', pads: [1, 1, 1, 1] }).pads, [0, 0, 0, 0])
  t.strictSame(conv({ pads: [1, 0, 2, 1], strides: [2, 3], dilations: [2, 1] }).outDims, [-1, 4, 3, 2])
  t.strictSame(conv({ group: 2 }, [-1, 4, 5, 5], [6, 2, 1, 1]).outDims, [-1, 6, 5, 5])
  t.throws(() => conv({ group: 3 }), { kind: 'invalid', message: 'its input [batch, 2, 7, 7] and weight [4, 2, 3, 3] do not agree with group 3' })
  t.throws(() => conv({}, [-1, 2, 7]), { kind: 'unsupported', message: 'only 2-D convolutions (input rank 4, NCHW); this input is [batch, 2, 7]' })
  t.throws(() => conv({ auto_pad: 'SAME' }), { message: "auto_pad 'SAME' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID" })
  t.throws(() => conv({ kernel_shape: [2, 2] }), { message: 'kernel_shape [2, 2] does not match the weight [4, 2, 3, 3]' })
  t.throws(() => conv({ pads: [1, 1] }), { message: "'pads' must have 4 non-negative values for a 2-D window, got [1, 1]" })
  t.throws(() => conv({}, [-1, 2, 2, 2]), { message: 'its window (3) is larger than the padded input (2)' })

  const pool = (attrs: Record<string, OnnxAttributeValue>, x = [-1, 3, 7, 7], op = 'MaxPool') => poolGeometry(node(op, attrs), x)
  t.strictSame(pool({ kernel_shape: [3, 3], strides: [2, 2] }).outDims, [-1, 3, 3, 3])
  t.strictSame(pool({ kernel_shape: [2, 2], strides: [2, 2], ceil_mode: 1 }).outDims, [-1, 3, 4, 4], 'ceil_mode rounds the last window up')
  t.strictSame(pool({ kernel_shape: [2, 2], strides: [2, 2], ceil_mode: 1, pads: [1, 1, 1, 1] }, [-1, 3, 5, 5]).outDims, [-1, 3, 3, 3],
    'a last window starting in the end padding is dropped')
  t.equal(pool({ kernel_shape: [2, 2], count_include_pad: 1 }, undefined, 'AveragePool').countIncludePad, true)
  t.equal(pool({ kernel_shape: [2, 2], count_include_pad: 1 }).countIncludePad, false, 'MaxPool has no count_include_pad')
  t.throws(() => pool({}), { message: "it needs the 'kernel_shape' attribute" })
  t.throws(() => pool({ kernel_shape: [2, 2], storage_order: 1 }), { kind: 'unsupported', message: 'storage_order 1 (column-major indices)' })
  t.throws(() => pool({ kernel_shape: [2, 2] }, [-1, 3, -7, 7]), { kind: 'refused', message: 'its input [batch, 3, 7*batch, 7] has batch-sized channels or spatial dimensions' })
})

t.test('inferNode: types and dims per op', async t => {
  const infer = (n: GraphNode, inputs: Array<Value | undefined>, opset = 17) => inferNode(n, inputs, opset)
  t.strictSame(infer(node('Relu'), [v([-1, 4])]), [{ dtype: 'float32', dims: [-1, 4] }])
  t.strictSame(infer(node('Add', {}, ['a', 'b']), [v([-1, 4]), v([4])]), [{ dtype: 'float32', dims: [-1, 4] }])
  t.strictSame(infer(node('Gemm', { transB: 1 }, ['a', 'b', 'c']), [v([-1, 4]), v([3, 4]), v([3])]), [{ dtype: 'float32', dims: [-1, 3] }])
  t.strictSame(infer(node('Gather', { axis: 0 }, ['d', 'i']), [v([10, 4]), v([-1, 5], 'int64')]), [{ dtype: 'float32', dims: [-1, 5, 4] }])
  t.strictSame(infer(node('Gather', {}, ['d', 'i']), [v([-1, 5], 'int64'), ints(0)]), [{ dtype: 'int64', dims: [1, 5] }], 'integer data moves too')
  t.strictSame(infer(node('Reshape', {}, ['x', 's']), [v([-1, 6]), ints(0, 2, 3)]), [{ dtype: 'float32', dims: [-1, 2, 3] }])
  t.strictSame(infer(node('Unsqueeze', {}, ['x', 'a']), [v([-1, 6]), ints(1)], 13), [{ dtype: 'float32', dims: [-1, 1, 6] }])
  t.strictSame(infer(node('Unsqueeze', { axes: [1] }), [v([-1, 6])], 11), [{ dtype: 'float32', dims: [-1, 1, 6] }])
  t.strictSame(infer(node('GlobalAveragePool'), [v([-1, 3, 5, 5])]), [{ dtype: 'float32', dims: [-1, 3, 1, 1] }])
  t.strictSame(infer(node('LayerNormalization', {}, ['x', 's']), [v([-1, 4, 6]), v([6])]), [{ dtype: 'float32', dims: [-1, 4, 6] }, undefined, undefined])
  t.strictSame(infer(node('Dropout'), [v([-1, 6])]), [{ dtype: 'float32', dims: [-1, 6] }, undefined])
  t.strictSame(infer(node('Cast', { to: 1 }), [v([-1, 6])]), [{ dtype: 'float32', dims: [-1, 6] }])
})

t.test('inferNode: refusals', async t => {
  const infer = (n: GraphNode, inputs: Array<Value | undefined>, opset = 17) => () => inferNode(n, inputs, opset)
  t.throws(infer(node('Add', {}, ['a', 'b']), [v([-1, 4], 'int64'), v([4], 'int64')]), { kind: 'unsupported', message: 'int64 arithmetic on values known only at run time' })
  t.throws(infer(node('Add', {}, ['a', 'b']), [v([-1, 4]), v([3])]), { kind: 'invalid', message: '[batch, 4] and [3] do not broadcast' })
  t.throws(infer(node('Add', {}, ['a', 'b']), [v([4]), v([4], 'int64')]), { kind: 'invalid', message: 'its inputs are float32 and int64' })
  t.throws(infer(node('Relu'), [undefined]), { kind: 'invalid', message: 'it needs input #0 (X)' })
  t.throws(infer(node('Gelu', { approximate: 'fast' }), [v([4])]), { message: "approximate 'fast' is not 'none' or 'tanh'" })
  t.throws(infer(node('Reshape', {}, ['x', 's']), [v([-1, 6]), v([2], 'int64')]), { kind: 'unsupported', message: 'its shape input is computed at run time' })
  t.throws(infer(node('Unsqueeze', {}, ['x', 'a']), [v([-1, 6]), v([1], 'int64')], 13), { kind: 'unsupported', message: 'its axes input is computed at run time' })
  t.throws(infer(node('Unsqueeze', {}, ['x', 'a']), [v([-1, 6]), { dtype: 'int64', dims: [1], symbolic: [{ batch: 1 }] }], 13),
    { kind: 'unsupported', message: 'its axes input depends on the batch size' })
  t.throws(infer(node('Unsqueeze'), [v([-1, 6])], 11), { kind: 'invalid', message: "it needs the 'axes' attribute" })
  t.throws(infer(node('Gather', {}, ['d', 'i']), [v([10, 4]), v([3])]), { kind: 'invalid', message: 'its indices are float32, not int32 or int64' })
  t.throws(infer(node('Gemm', {}, ['a', 'b', 'c']), [v([2, 4]), v([4, 3]), v([2, 2])]), { message: 'C [2, 2] does not broadcast to [2, 3]' })
  t.throws(infer(node('Gemm'), [v([2, 4, 1]), v([4, 3])]), { message: 'Gemm needs 2-D operands, got [2, 4, 1] and [4, 3]' })
  t.throws(infer(node('Softmax', { axis: 0 }), [v([-1, 4])], 13), { kind: 'refused', message: 'it normalises over the batch dimension of [batch, 4]' })
  t.throws(infer(node('LayerNormalization', { axis: 0 }, ['x', 's']), [v([-1, 4]), v([4])]),
    { kind: 'refused', message: 'it normalises over the batch dimension of [batch, 4]' })
  t.throws(infer(node('LayerNormalization', {}, ['x', 's']), [v([-1, 4]), v([3])]), { message: 'its scale [3] does not broadcast onto the normalised dims [4]' })
  t.throws(infer(node('BatchNormalization', {}, ['x', 's', 'b', 'm', 'v']), [v([-1, 3, 2, 2]), v([3]), v([3]), v([2]), v([3])]), { message: 'its mean [2] is not [3]' })
  t.throws(infer(node('BatchNormalization', { training_mode: 1 }, ['x', 's', 'b', 'm', 'v']), [v([-1, 3]), v([3]), v([3]), v([3]), v([3])]),
    { kind: 'unsupported', message: 'training_mode 1' })
  t.throws(infer(node('Transpose', { perm: [0, 0] }), [v([-1, 4])]), { message: 'perm [0, 0] is not a permutation of the input\'s 2 dimensions' })
  t.throws(infer(node('Cast', { to: 7 }), [v([-1, 4])]), { kind: 'unsupported', message: 'a cast of a value known only at run time' })
  t.throws(infer(node('Shape'), [v([-1, 4])]), { kind: 'unsupported', message: 'outside constant folding: its input is known only at run time' })
  t.throws(infer(node('Loop'), [v([-1, 4])]), { kind: 'unsupported', message: '' })
  t.throws(infer(node('MatMul', {}, ['a', 'b']), [v([-1, 4]), v([4, 2], 'int32')]), { kind: 'refused', message: 'B is int32; the native backend computes in float32 (integer tensors only go through Gather, Reshape, Transpose and Concat)' })
})
