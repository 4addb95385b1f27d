import * as ort from 'onnxruntime-node'
import t from 'tap'
import { onnxAttribute, OnnxBuilder } from '../../../../worker/backends/native/onnx-builder.ts'
import { decodeOnnxModel, OnnxAttributeType, OnnxDataType } from '../../../../worker/backends/native/onnx-proto.ts'

const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s)

t.test('attribute types: wrappers say it, names and values infer it', async t => {
  t.match(onnxAttribute('axis', 1), { type: OnnxAttributeType.INT, i: 1 })
  t.match(onnxAttribute('alpha', 1), { type: OnnxAttributeType.FLOAT, f: 1 }, 'alpha is a FLOAT even when integral')
  t.match(onnxAttribute('epsilon', 1e-5), { type: OnnxAttributeType.FLOAT })
  t.match(onnxAttribute('whatever', 0.5), { type: OnnxAttributeType.FLOAT, f: 0.5 })
  t.match(onnxAttribute('alpha', { i: 2 }), { type: OnnxAttributeType.INT, i: 2 }, 'a wrapper wins over the name')
  t.match(onnxAttribute('axis', { f: 2 }), { type: OnnxAttributeType.FLOAT, f: 2 })
  t.match(onnxAttribute('perm', [0, 2, 1]), { type: OnnxAttributeType.INTS, ints: [0, 2, 1] })
  t.match(onnxAttribute('pads', []), { type: OnnxAttributeType.INTS, ints: [] })
  t.match(onnxAttribute('scales', [1, 1.5]), { type: OnnxAttributeType.FLOATS, floats: [1, 1.5] })
  t.match(onnxAttribute('scales', { floats: [1, 2] }), { type: OnnxAttributeType.FLOATS, floats: [1, 2] })
  t.match(onnxAttribute('axes', { ints: [1] }), { type: OnnxAttributeType.INTS, ints: [1] })
  t.strictSame(onnxAttribute('auto_pad', 'SAME_UPPER').s, utf8('SAME_UPPER'))
  t.strictSame(onnxAttribute('auto_pad', { s: 'VALID' }).s, utf8('VALID'))
  t.match(onnxAttribute('value', new Float32Array([1, 2])), { type: OnnxAttributeType.TENSOR, t: { dims: [2], dataType: OnnxDataType.FLOAT } })
  t.match(onnxAttribute('value', { t: { data: new BigInt64Array([1n, 2n, 3n, 4n]), dims: [2, 2] } }),
    { type: OnnxAttributeType.TENSOR, t: { dims: [2, 2], dataType: OnnxDataType.INT64 } })
  t.throws(() => onnxAttribute('axis', { i: 1.5 }), /integer/)
  t.throws(() => onnxAttribute('axes', { ints: [0.5] }), /integers/)
  t.throws(() => onnxAttribute('x', {} as unknown as { i: number }), /cannot tell its type/)
})

t.test('build then decode gives the model back', async t => {
  const w = new Float32Array([1, -2.5, 3, 4e-8, 5, 6])
  const ids = new BigInt64Array([-1n, 2n ** 40n])
  const bytes = new OnnxBuilder({ name: 'g', opset: 20 })
    .input('X', 'float32', ['N', 3])
    .input('I', 'int32', [2])
    .output('Y', 'float32', ['N', 2])
    .output('Z', 'int64')
    .initializer('W', w, [3, 2])
    .initializer('IDS', ids, [2])
    .node('MatMul', ['X', 'W'], ['Y'])
    .node('Identity', ['IDS'], ['Z'], {}, 'copy')
    .build()
  const model = decodeOnnxModel(bytes)
  t.equal(model.irVersion, 9, 'opset 20 goes with IR 9')
  t.strictSame(model.opsetImport, [{ domain: '', version: 20 }])
  const g = model.graph!
  t.equal(g.name, 'g')
  t.strictSame(g.node!.map(n => [n.name, n.opType, n.input, n.output]), [
    ['MatMul_0', 'MatMul', ['X', 'W'], ['Y']],
    ['copy', 'Identity', ['IDS'], ['Z']]
  ])
  t.strictSame(g.input!.map(v => [v.name, v.type!.tensorType!.elemType, v.type!.tensorType!.shape!.dim]), [
    ['X', OnnxDataType.FLOAT, [{ dimParam: 'N' }, { dimValue: 3 }]],
    ['I', OnnxDataType.INT32, [{ dimValue: 2 }]]
  ])
  t.equal(g.output![1]!.type!.tensorType!.shape, undefined, 'an output without dims has no shape')
  const [wt, it] = g.initializer!
  t.strictSame(wt!.dims, [3, 2])
  t.equal(wt!.dataType, OnnxDataType.FLOAT)
  const raw = wt!.rawData! // a Buffer view into protobufjs's pool: copy before reinterpreting
  t.strictSame(new Float32Array(new Uint8Array(raw).buffer), w, 'raw_data holds the floats')
  t.equal(it!.dataType, OnnxDataType.INT64)
  t.strictSame(new BigInt64Array(new Uint8Array(it!.rawData!).buffer), ids)
  t.equal(new OnnxBuilder().opset, 17, 'opset 17 by default')
  t.equal(decodeOnnxModel(new OnnxBuilder().build()).irVersion, 8)
  t.equal(decodeOnnxModel(new OnnxBuilder({ opset: 21 }).build()).irVersion, 10)
  const i32 = decodeOnnxModel(new OnnxBuilder().initializer('S', new Int32Array([-7, 9]), [2]).build()).graph!.initializer![0]!
  t.equal(i32.dataType, OnnxDataType.INT32)
  t.strictSame(new Int32Array(new Uint8Array(i32.rawData!).buffer), new Int32Array([-7, 9]))
})

t.test('mistakes are refused when made', async t => {
  const b = new OnnxBuilder().input('X', 'float32', [2])
  t.throws(() => b.input('X', 'float32', [2]), /'X' is declared twice/)
  t.throws(() => b.initializer('W', new Float32Array(5), [2, 2]), /hold 4 elements, the data has 5/)
  t.throws(() => b.initializer('V', new Float32Array(0), [-1]), /non-negative integers/)
  t.throws(() => b.input('Y', 'float32', [1.5]), /non-negative integer or a name/)
  t.throws(() => b.initializer('U', new Float32Array(1), [0.5]), /non-negative integers/)
  t.throws(() => b.input('', 'float32', [1]), /must not be empty/)
})

t.test('onnxruntime runs what it builds', async t => {
  // Gemm with a FLOAT alpha given as an integer, a Constant from a tensor attribute, an int64 Gather, int32 input.
  const bytes = new OnnxBuilder({ name: 'run' })
    .input('X', 'float32', ['N', 4])
    .input('IDX', 'int32', ['N'])
    .output('Y', 'float32', ['N', 3])
    .output('E', 'float32', ['N', 2])
    .initializer('W', new Float32Array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]), [3, 4])
    .initializer('TABLE', new Float32Array([0, 1, 10, 11, 20, 21]), [3, 2])
    .node('Constant', [], ['C'], { value: new Float32Array([100, 200, 300]) })
    .node('Gemm', ['X', 'W', 'C'], ['Y'], { transB: 1, alpha: 2, beta: 1 })
    .node('Gather', ['TABLE', 'IDX'], ['E'], { axis: 0 })
    .build()
  const session = await ort.InferenceSession.create(bytes, { executionProviders: ['cpu'] })
  const out = await session.run({
    X: new ort.Tensor('float32', new Float32Array([1, 0, 0, 0, 0, 1, 0, 0]), [2, 4]),
    IDX: new ort.Tensor('int32', new Int32Array([2, -3]), [2])
  })
  t.strictSame(Array.from(out.Y!.data as Float32Array), [102, 210, 318, 104, 212, 320])
  t.strictSame(out.Y!.dims, [2, 3])
  t.strictSame(Array.from(out.E!.data as Float32Array), [20, 21, 0, 1])
  await session.release()
})
