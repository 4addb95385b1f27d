/**
 * An ONNX model decoded into what the planner works on: nodes with typed attribute access, initializers as typed
 * arrays, and the graph's inputs, outputs and value_info with their dimensions. Everything that makes the bytes
 * unusable as a whole (not a ModelProto, no graph, external or sparse data, a node outside the default domain, an
 * initializer of an unknown type) fails here with WRK_ERR_ONNX_INVALID; what depends on how a tensor is used (an
 * initializer of a type the engine does not compute with) is left to the planner, which drops unused ones first.
 */
import protobuf from 'protobufjs'
import { createError, wrapError } from '../../../common/errors.ts'
import { bf16BitsToFloat32, fp16BitsToFloat32 } from '../../../common/protocol/datatypes.ts'
import { type NativeArray } from '../../../native/index.ts'
import { GraphFailure, invalid } from './graph-failure.ts'
import {
  decodeOnnxModel, ONNX_DATA_LOCATION_EXTERNAL, OnnxAttributeType, OnnxDataType, type OnnxAttribute, type OnnxModel,
  type OnnxTensor, type OnnxValueInfo
} from './onnx-proto.ts'

/** Element types a decoded constant holds: fp16 and bf16 become float32 at load. */
export type ConstDType = 'float32' | 'int32' | 'int64'

/** A constant tensor (an initializer, a Constant node's value, a folded result). */
export interface ConstTensor {
  dtype: ConstDType
  dims: number[]
  data: NativeArray
}

/** An initializer of a type the engine does not compute with; an error only if a node that stays uses it. */
export interface UnsupportedConstant {
  unsupportedType: string
  dims: number[]
}

export type GraphConstant = ConstTensor | UnsupportedConstant

/** A dimension as declared: fixed, a dim_param name, or null (unknown, or a non-positive dim_value). */
export type OnnxDim = number | string | null

export interface GraphValueInfo {
  name: string
  /** TensorProto.DataType; 0 when not declared. */
  elemType: number
  /** Undefined when the value declares no shape at all. */
  dims?: OnnxDim[]
}

export interface GraphNode {
  /** The node's name, or its first output's when it has none (plan.h's convention). */
  name: string
  opType: string
  /** '' for an absent optional input. */
  inputs: string[]
  outputs: string[]
  attrs: NodeAttributes
}

export interface OnnxGraphModel {
  /** The default domain's opset version. */
  opset: number
  producerName: string
  nodes: GraphNode[]
  initializers: Map<string, GraphConstant>
  /** Graph inputs that are not initializers (IR < 4 lists initializers as inputs too). */
  inputs: GraphValueInfo[]
  outputs: GraphValueInfo[]
  valueInfo: Map<string, GraphValueInfo>
}

export interface LoadOnnxGraphOptions {
  modelName: string
  /** What messages call the bytes ('model.onnx', or a path). */
  file: string
}

/** TensorProto.DataType names, by value, for messages. */
const DATA_TYPE_NAMES: Readonly<Record<number, string>> = {
  1: 'FLOAT',
  2: 'UINT8',
  3: 'INT8',
  4: 'UINT16',
  5: 'INT16',
  6: 'INT32',
  7: 'INT64',
  8: 'STRING',
  9: 'BOOL',
  10: 'FLOAT16',
  11: 'DOUBLE',
  12: 'UINT32',
  13: 'UINT64',
  14: 'COMPLEX64',
  15: 'COMPLEX128',
  16: 'BFLOAT16',
  17: 'FLOAT8E4M3FN',
  18: 'FLOAT8E4M3FNUZ',
  19: 'FLOAT8E5M2',
  20: 'FLOAT8E5M2FNUZ',
  21: 'UINT4',
  22: 'INT4',
  23: 'FLOAT4E2M1',
  24: 'FLOAT8E8M0',
  25: 'UINT2',
  26: 'INT2'
}

/** 'FLOAT16', or 'type 99' for a value ONNX does not define. */
export function dataTypeName (elemType: number): string {
  return DATA_TYPE_NAMES[elemType] ?? `type ${elemType}`
}

/** The engine dtype of a TensorProto.DataType, or undefined when it computes with no such type. */
export function engineDType (elemType: number): ConstDType | undefined {
  switch (elemType) {
    case OnnxDataType.FLOAT: return 'float32'
    case OnnxDataType.INT32: return 'int32'
    case OnnxDataType.INT64: return 'int64'
    default: return undefined
  }
}

export function isConstTensor (c: GraphConstant): c is ConstTensor {
  return 'data' in c
}

/** The raw bytes in a fresh, aligned buffer (protobufjs hands out views into the model's Buffer). */
function alignedCopy (raw: Uint8Array, elementSize: number, count: number, what: string): ArrayBuffer {
  if (raw.byteLength !== elementSize * count) {
    throw invalid(`${what} holds ${raw.byteLength} bytes of raw_data, its dims need ${elementSize * count}`)
  }
  const copy = new Uint8Array(raw.byteLength)
  copy.set(raw)
  return copy.buffer
}

function checkCount (what: string, dims: readonly number[], count: number, length: number): void {
  if (length !== count) {
    throw invalid(`${what} has dims [${dims.join(', ')}] (${count} elements) but holds ${length}`)
  }
}

/** Half-precision bit patterns (raw_data as uint16, or int32_data holding one pattern each) as float32. */
function halfToFloat32 (t: OnnxTensor, count: number, what: string, convert: (bits: number) => number): Float32Array {
  let bits: ArrayLike<number>
  if (t.rawData !== undefined && t.rawData.byteLength > 0) bits = new Uint16Array(alignedCopy(t.rawData, 2, count, what))
  else bits = t.int32Data ?? []
  checkCount(what, t.dims ?? [], count, bits.length)
  const out = new Float32Array(count)
  for (let i = 0; i < count; i++) out[i] = convert(bits[i]!)
  return out
}

/**
 * Decodes one TensorProto. float16 and bfloat16 become float32; types the engine does not compute with give an
 * {@link UnsupportedConstant}. Throws a GraphFailure ('invalid') for external data, an unknown type or a size mismatch.
 * `what` names the tensor in messages ("initializer 'W'").
 */
export function decodeTensor (t: OnnxTensor, what: string): GraphConstant {
  const dims = (t.dims ?? []).map(Number)
  if (t.dataLocation === ONNX_DATA_LOCATION_EXTERNAL || (t.externalData !== undefined && t.externalData.length > 0)) {
    const location = t.externalData?.find(e => e.key === 'location')?.value
    throw invalid(`${what} keeps its data in an external file${location === undefined ? '' : ` ('${location}')`}; ` +
      'the native backend reads only self-contained models (save the model without external data)')
  }
  if (dims.some(d => !Number.isInteger(d) || d < 0)) throw invalid(`${what} has invalid dims [${dims.join(', ')}]`)
  const count = dims.reduce((a, b) => a * b, 1)
  const raw = t.rawData !== undefined && t.rawData.byteLength > 0 ? t.rawData : undefined
  const dataType = t.dataType ?? 0
  switch (dataType) {
    case OnnxDataType.FLOAT: {
      const data = raw !== undefined ? new Float32Array(alignedCopy(raw, 4, count, what)) : Float32Array.from(t.floatData ?? [])
      checkCount(what, dims, count, data.length)
      return { dtype: 'float32', dims, data }
    }
    case OnnxDataType.INT32: {
      const data = raw !== undefined ? new Int32Array(alignedCopy(raw, 4, count, what)) : Int32Array.from(t.int32Data ?? [])
      checkCount(what, dims, count, data.length)
      return { dtype: 'int32', dims, data }
    }
    case OnnxDataType.INT64: {
      const data = raw !== undefined
        ? new BigInt64Array(alignedCopy(raw, 8, count, what))
        : BigInt64Array.from((t.int64Data ?? []).map(v => BigInt(v)))
      checkCount(what, dims, count, data.length)
      return { dtype: 'int64', dims, data }
    }
    case OnnxDataType.FLOAT16:
      return { dtype: 'float32', dims, data: halfToFloat32(t, count, what, fp16BitsToFloat32) }
    case OnnxDataType.BFLOAT16:
      return { dtype: 'float32', dims, data: halfToFloat32(t, count, what, bf16BitsToFloat32) }
    default:
      if (DATA_TYPE_NAMES[dataType] === undefined) throw invalid(`${what} has data type ${dataType}, which ONNX does not define`)
      return { unsupportedType: dataTypeName(dataType), dims }
  }
}

/** Typed access to a node's attributes; a wrong type fails as an invalid model. */
export class NodeAttributes {
  readonly #byName: ReadonlyMap<string, OnnxAttribute>

  constructor (attributes: readonly OnnxAttribute[]) {
    this.#byName = new Map(attributes.map(a => [a.name ?? '', a]))
  }

  has (name: string): boolean {
    return this.#byName.has(name)
  }

  names (): string[] {
    return [...this.#byName.keys()]
  }

  #get (name: string, type: number, typeName: string): OnnxAttribute | undefined {
    const a = this.#byName.get(name)
    if (a === undefined) return undefined
    if (a.type !== undefined && a.type !== type) throw invalid(`attribute '${name}' must be ${typeName}`)
    return a
  }

  int (name: string): number | undefined {
    const a = this.#get(name, OnnxAttributeType.INT, 'an INT')
    return a === undefined ? undefined : Number(a.i ?? 0)
  }

  float (name: string): number | undefined {
    const a = this.#get(name, OnnxAttributeType.FLOAT, 'a FLOAT')
    return a === undefined ? undefined : (a.f ?? 0)
  }

  string (name: string): string | undefined {
    const a = this.#get(name, OnnxAttributeType.STRING, 'a STRING')
    return a === undefined ? undefined : new TextDecoder().decode(a.s ?? new Uint8Array(0))
  }

  ints (name: string): number[] | undefined {
    const a = this.#get(name, OnnxAttributeType.INTS, 'INTS')
    return a === undefined ? undefined : (a.ints ?? []).map(Number)
  }

  floats (name: string): number[] | undefined {
    const a = this.#get(name, OnnxAttributeType.FLOATS, 'FLOATS')
    return a === undefined ? undefined : [...(a.floats ?? [])]
  }

  tensor (name: string): GraphConstant | undefined {
    const a = this.#get(name, OnnxAttributeType.TENSOR, 'a TENSOR')
    if (a === undefined) return undefined
    if (a.t === undefined) throw invalid(`attribute '${name}' holds no tensor`)
    return decodeTensor(a.t, `attribute '${name}'`)
  }
}

function valueInfo (v: OnnxValueInfo): GraphValueInfo {
  const tensorType = v.type?.tensorType
  const info: GraphValueInfo = { name: v.name ?? '', elemType: tensorType?.elemType ?? 0 }
  if (tensorType?.shape !== undefined) {
    info.dims = (tensorType.shape.dim ?? []).map(d => {
      if (d.dimParam !== undefined && d.dimParam !== '') return d.dimParam
      if (d.dimValue !== undefined && Number(d.dimValue) > 0) return Number(d.dimValue)
      return null
    })
  }
  return info
}

/**
 * Whether the GraphProto inside ModelProto (field 7) has a sparse_initializer (field 15), which onnx-proto.ts's
 * subset does not decode: scanned on the wire so such a model is refused instead of loading without those weights.
 */
function hasSparseInitializers (bytes: Uint8Array): boolean {
  const model = protobuf.Reader.create(bytes)
  while (model.pos < model.len) {
    const tag = model.uint32()
    if (tag >>> 3 === 7 && (tag & 7) === 2) {
      const graph = protobuf.Reader.create(model.bytes())
      while (graph.pos < graph.len) {
        const gtag = graph.uint32()
        if (gtag >>> 3 === 15) return true
        graph.skipType(gtag & 7)
      }
    } else {
      model.skipType(tag & 7)
    }
  }
  return false
}

const DEFAULT_DOMAINS = new Set(['', 'ai.onnx'])

/** Decodes and checks model bytes; throws WRK_ERR_ONNX_INVALID saying what is wrong. */
export function loadOnnxGraph (bytes: Uint8Array, options: LoadOnnxGraphOptions): OnnxGraphModel {
  const fail = (reason: string, cause?: unknown): Error => cause === undefined
    ? createError('WRK_ERR_ONNX_INVALID', options.modelName, options.file, reason)
    : wrapError('WRK_ERR_ONNX_INVALID', cause, options.modelName, options.file, reason)
  let model: OnnxModel
  try {
    model = decodeOnnxModel(bytes)
  } catch (err) {
    throw fail(`the bytes do not decode as an ONNX ModelProto (${(err as Error).message})`, err)
  }
  const graph = model.graph
  if (graph === undefined) throw fail('it has no graph')
  try {
    if (hasSparseInitializers(bytes)) throw fail('it has sparse initializers, which the native backend does not read')
  } catch (err) {
    if ((err as { code?: string }).code === 'WRK_ERR_ONNX_INVALID') throw err
    throw fail(`the bytes do not decode as an ONNX ModelProto (${(err as Error).message})`, err)
  }
  const opsetEntry = (model.opsetImport ?? []).find(o => DEFAULT_DOMAINS.has(o.domain ?? ''))
  if (opsetEntry === undefined || !(Number(opsetEntry.version) > 0)) {
    throw fail('it imports no opset of the default (ai.onnx) domain')
  }

  const initializers = new Map<string, GraphConstant>()
  for (const t of graph.initializer ?? []) {
    const name = t.name ?? ''
    if (name === '') throw fail('an initializer has no name')
    try {
      initializers.set(name, decodeTensor(t, `initializer '${name}'`))
    } catch (err) {
      if (err instanceof GraphFailure) throw fail(err.message)
      throw err
    }
  }

  const nodes: GraphNode[] = []
  for (const [i, n] of (graph.node ?? []).entries()) {
    const opType = n.opType ?? ''
    const outputs = n.output ?? []
    const name = n.name !== undefined && n.name !== '' ? n.name : (outputs[0] ?? `${opType}_${i}`)
    if (opType === '') throw fail(`node '${name}' has no op_type`)
    const domain = n.domain ?? ''
    if (!DEFAULT_DOMAINS.has(domain)) {
      throw fail(`node '${name}' is op ${opType} of domain '${domain}'; the native backend reads only the default ` +
        'ONNX domain (set backend: "onnxruntime" in config.pbtxt for models with contrib ops)')
    }
    nodes.push({ name, opType, inputs: n.input ?? [], outputs, attrs: new NodeAttributes(n.attribute ?? []) })
  }

  const inputs = (graph.input ?? []).map(valueInfo).filter(v => !initializers.has(v.name))
  const outputs = (graph.output ?? []).map(valueInfo)
  if (outputs.length === 0) throw fail('its graph has no outputs')
  for (const v of [...inputs, ...outputs]) if (v.name === '') throw fail('a graph input or output has no name')
  const valueInfoMap = new Map((graph.valueInfo ?? []).map(v => [v.name ?? '', valueInfo(v)]))
  return {
    opset: Number(opsetEntry.version),
    producerName: model.producerName ?? '',
    nodes,
    initializers,
    inputs,
    outputs,
    valueInfo: valueInfoMap
  }
}
