import t from 'tap'
import { float32ToBf16Bits, float32ToFp16Bits } from '../../../../common/protocol/datatypes.ts'
import { OnnxBuilder } from '../../../../worker/backends/native/onnx-builder.ts'
import {
  decodeTensor, isConstTensor, loadOnnxGraph, NodeAttributes, type ConstTensor
} from '../../../../worker/backends/native/onnx-graph.ts'
import { encodeOnnxModel, OnnxAttributeType, type OnnxModel } from '../../../../worker/backends/native/onnx-proto.ts'
import { throwsCoded } from '../../../helpers/coded-error.ts'

const options = { modelName: 'm', file: 'model.onnx' }
const invalid = (reason: string) => ({
  code: 'WRK_ERR_ONNX_INVALID' as const,
  message: `failed to load model 'm': model.onnx is not a valid ONNX model: ${reason}`
})

function base (): OnnxModel {
  const b = new OnnxBuilder({ opset: 13 })
  b.input('X', 'float32', ['N', 3, 0]).output('Y', 'float32', ['N', 3])
  b.initializer('W', Float32Array.from([1, 2, 3]), [3])
  b.node('Add', ['X', 'W'], ['Y'], {}, '')
  return b.model()
}

const constant = (c: ReturnType<typeof decodeTensor>): ConstTensor => {
  if (!isConstTensor(c)) throw new Error('not a constant')
  return c
}

t.test('decodes nodes, inputs, outputs, value_info and the opset', async t => {
  const model = base()
  model.graph!.valueInfo = [{ name: 'Z', type: { tensorType: { elemType: 7, shape: { dim: [{ dimValue: 2 }, {}] } } } }]
  // IR < 4 lists initializers among the inputs too; they are not model inputs.
  model.graph!.input!.push({ name: 'W', type: { tensorType: { elemType: 1, shape: { dim: [{ dimValue: 3 }] } } } })
  const g = loadOnnxGraph(encodeOnnxModel(model), options)
  t.equal(g.opset, 13)
  t.equal(g.producerName, 'flotilla')
  t.strictSame(g.inputs, [{ name: 'X', elemType: 1, dims: ['N', 3, null] }], 'dim_value 0 reads as unknown')
  t.strictSame(g.outputs, [{ name: 'Y', elemType: 1, dims: ['N', 3] }])
  t.strictSame(g.valueInfo.get('Z'), { name: 'Z', elemType: 7, dims: [2, null] })
  t.equal(g.nodes.length, 1)
  t.strictSame({ ...g.nodes[0], attrs: undefined }, { name: 'Y', opType: 'Add', inputs: ['X', 'W'], outputs: ['Y'], attrs: undefined },
    'a node without a name is named after its first output')
  t.strictSame(constant(g.initializers.get('W')!), { dtype: 'float32', dims: [3], data: Float32Array.from([1, 2, 3]) })
})

t.test('initializers of every supported encoding', async t => {
  const raw = (bytes: number[]): Uint8Array => {
    // Offset by one byte inside a larger buffer, as protobufjs hands out views of the model's Buffer.
    const buf = new Uint8Array(bytes.length + 1)
    buf.set(bytes, 1)
    return buf.subarray(1)
  }
  const le = (arr: Float32Array | Int32Array | BigInt64Array | Uint16Array): number[] => [...new Uint8Array(arr.buffer)]
  t.strictSame(constant(decodeTensor({ dims: [2], dataType: 1, rawData: raw(le(Float32Array.from([1.5, -2]))) }, 't')).data,
    Float32Array.from([1.5, -2]), 'float raw_data, unaligned')
  t.strictSame(constant(decodeTensor({ dims: [2], dataType: 6, rawData: raw(le(Int32Array.from([7, -8]))) }, 't')).data,
    Int32Array.from([7, -8]))
  t.strictSame(constant(decodeTensor({ dims: [2], dataType: 6, int32Data: [7, -8] }, 't')).data, Int32Array.from([7, -8]))
  t.strictSame(constant(decodeTensor({ dims: [2], dataType: 7, rawData: raw(le(BigInt64Array.from([3n, -4n]))) }, 't')).data,
    BigInt64Array.from([3n, -4n]))
  t.strictSame(constant(decodeTensor({ dims: [2], dataType: 7, int64Data: [3, -4] }, 't')).data, BigInt64Array.from([3n, -4n]))
  t.strictSame(constant(decodeTensor({ dims: [], dataType: 1, floatData: [0.5] }, 't')), { dtype: 'float32', dims: [], data: Float32Array.from([0.5]) })

  const halves = Uint16Array.from([float32ToFp16Bits(1.5), float32ToFp16Bits(-0.25)])
  t.strictSame(constant(decodeTensor({ dims: [2], dataType: 10, rawData: raw(le(halves)) }, 't')),
    { dtype: 'float32', dims: [2], data: Float32Array.from([1.5, -0.25]) }, 'float16 raw_data becomes float32')
  t.strictSame(constant(decodeTensor({ dims: [2], dataType: 10, int32Data: [...halves] }, 't')).data, Float32Array.from([1.5, -0.25]),
    'float16 in int32_data')
  const bf = Uint16Array.from([float32ToBf16Bits(3), float32ToBf16Bits(-0.5)])
  t.strictSame(constant(decodeTensor({ dims: [2], dataType: 16, rawData: raw(le(bf)) }, 't')).data, Float32Array.from([3, -0.5]),
    'bfloat16 becomes float32')
  t.strictSame(decodeTensor({ dims: [2], dataType: 11, doubleData: [1, 2] }, 't'), { unsupportedType: 'DOUBLE', dims: [2] },
    'a known type the engine does not compute with is kept aside')
})

t.test('tensor errors', async t => {
  t.throws(() => decodeTensor({ dims: [3], dataType: 1, rawData: new Uint8Array(8) }, "initializer 'W'"),
    { kind: 'invalid', message: "initializer 'W' holds 8 bytes of raw_data, its dims need 12" })
  t.throws(() => decodeTensor({ dims: [3], dataType: 1, floatData: [1, 2] }, "initializer 'W'"),
    { message: "initializer 'W' has dims [3] (3 elements) but holds 2" })
  t.throws(() => decodeTensor({ dims: [1], dataType: 99 }, "initializer 'W'"),
    { message: "initializer 'W' has data type 99, which ONNX does not define" })
  t.throws(() => decodeTensor({ dims: [-1], dataType: 1 }, "initializer 'W'"), { message: "initializer 'W' has invalid dims [-1]" })
  t.throws(() => decodeTensor({ dims: [1], dataType: 1, dataLocation: 1, externalData: [{ key: 'location', value: 'w.bin' }] }, "initializer 'W'"),
    { message: "initializer 'W' keeps its data in an external file ('w.bin'); the native backend reads only self-contained models (save the model without external data)" })
})

t.test('model-level refusals', async t => {
  throwsCoded(t, () => loadOnnxGraph(new Uint8Array([0x0a, 0x05, 0x01]), options),
    invalid('the bytes do not decode as an ONNX ModelProto (index out of range: 3 + 8 > 3)'))
  throwsCoded(t, () => loadOnnxGraph(new Uint8Array(0), options), invalid('it has no graph'))

  const noOpset = base()
  noOpset.opsetImport = [{ domain: 'ai.onnx.ml', version: 3 }]
  throwsCoded(t, () => loadOnnxGraph(encodeOnnxModel(noOpset), options), invalid('it imports no opset of the default (ai.onnx) domain'))

  const external = base()
  external.graph!.initializer![0] = { name: 'W', dims: [3], dataType: 1, dataLocation: 1, externalData: [{ key: 'location', value: 'weights.bin' }] }
  throwsCoded(t, () => loadOnnxGraph(encodeOnnxModel(external), options),
    invalid("initializer 'W' keeps its data in an external file ('weights.bin'); the native backend reads only " +
      'self-contained models (save the model without external data)'))

  const unknownType = base()
  unknownType.graph!.initializer![0] = { name: 'W', dims: [3], dataType: 42, rawData: new Uint8Array(12) }
  throwsCoded(t, () => loadOnnxGraph(encodeOnnxModel(unknownType), options), invalid("initializer 'W' has data type 42, which ONNX does not define"))

  const contrib = base()
  contrib.graph!.node![0]!.domain = 'com.microsoft'
  contrib.graph!.node![0]!.name = 'fused'
  throwsCoded(t, () => loadOnnxGraph(encodeOnnxModel(contrib), options),
    invalid("node 'fused' is op Add of domain 'com.microsoft'; the native backend reads only the default ONNX domain " +
      '(set backend: "onnxruntime" in config.pbtxt for models with contrib ops)'))

  const noOutputs = base()
  noOutputs.graph!.output = []
  throwsCoded(t, () => loadOnnxGraph(encodeOnnxModel(noOutputs), options), invalid('its graph has no outputs'))

  // GraphProto.sparse_initializer (field 15) is outside onnx-proto.ts's subset: found on the wire.
  const bytes = encodeOnnxModel(base())
  const withSparse = new Uint8Array(bytes.length + 4)
  withSparse.set(bytes)
  withSparse.set([0x3a, 0x02, 0x7a, 0x00], bytes.length)
  throwsCoded(t, () => loadOnnxGraph(withSparse, options), invalid('it has sparse initializers, which the native backend does not read'))
})

t.test('typed attribute access', async t => {
  const attrs = new NodeAttributes([
    { name: 'i', type: OnnxAttributeType.INT, i: 3 },
    { name: 'zero', type: OnnxAttributeType.INT },
    { name: 'f', type: OnnxAttributeType.FLOAT, f: 0.5 },
    { name: 's', type: OnnxAttributeType.STRING, s: new TextEncoder().encode('SAME_UPPER') },
    { name: 'ints', type: OnnxAttributeType.INTS, ints: [1, 2] },
    { name: 'floats', type: OnnxAttributeType.FLOATS, floats: [0.5] },
    { name: 't', type: OnnxAttributeType.TENSOR, t: { dims: [1], dataType: 7, int64Data: [9] } },
    { name: 'empty', type: OnnxAttributeType.TENSOR }
  ])
  t.equal(attrs.int('i'), 3)
  t.equal(attrs.int('zero'), 0, 'proto3 leaves a 0 off the wire')
  t.equal(attrs.int('missing'), undefined)
  t.equal(attrs.float('f'), 0.5)
  t.equal(attrs.string('s'), 'SAME_UPPER')
  t.strictSame(attrs.ints('ints'), [1, 2])
  t.strictSame(attrs.floats('floats'), [0.5])
  t.strictSame(attrs.tensor('t'), { dtype: 'int64', dims: [1], data: BigInt64Array.from([9n]) })
  t.ok(attrs.has('i'))
  t.strictSame(attrs.names(), ['i', 'zero', 'f', 's', 'ints', 'floats', 't', 'empty'])
  t.throws(() => attrs.float('i'), { kind: 'invalid', message: "attribute 'i' must be a FLOAT" })
  t.throws(() => attrs.ints('f'), { message: "attribute 'f' must be INTS" })
  t.throws(() => attrs.tensor('empty'), { message: "attribute 'empty' holds no tensor" })
})
