/**
 * A small builder of ONNX models, over onnx-proto.ts's encoder: the example-model script and the tests write
 * graphs with it instead of shipping binary fixtures.
 *
 *   const b = new OnnxBuilder({ name: 'mlp', opset: 17 })
 *   b.input('X', 'float32', ['N', 4]).output('Y', 'float32', ['N', 3])
 *   b.initializer('W', new Float32Array(12), [4, 3])
 *   b.node('Gemm', ['X', 'W'], ['Y'], { transB: 0, alpha: 1 })
 *   const bytes = b.build()
 *
 * Attribute types. ONNX types every attribute and onnxruntime refuses an INT where the op wants a FLOAT (Gemm's
 * alpha = 1 must go as a FLOAT 1.0), so a JavaScript number is ambiguous. The rules, in order:
 * - An explicit wrapper says it: `{ i: 3 }`, `{ f: 1 }`, `{ ints: [0, 2, 1] }`, `{ floats: [1, 2] }`, `{ s: 'SAME_UPPER' }`,
 *   `{ t: { data: Float32Array, dims: [2] } }`.
 * - A number under one of the names that are floats in every standard op ({@link FLOAT_ATTRIBUTE_NAMES}: alpha,
 *   beta, gamma, epsilon, momentum...) is a FLOAT; any other integer is an INT, any other number a FLOAT.
 * - An array of integers (or an empty array) is INTS, other arrays FLOATS.
 * - A string is a STRING (UTF-8).
 * - A typed array (Float32Array, BigInt64Array, Int32Array) is a 1-D TENSOR, as Constant's `value` takes.
 *
 * Initializers are written as raw_data, little-endian whatever the host. Node names default to `<opType>_<index>`
 * so the loader's messages name something.
 */
import {
  encodeOnnxModel, OnnxAttributeType, OnnxDataType, type OnnxAttribute, type OnnxModel, type OnnxNode,
  type OnnxTensor, type OnnxValueInfo
} from './onnx-proto.ts'

/** Element types the builder writes. */
export type OnnxBuilderDType = 'float32' | 'int64' | 'int32'

/** Data of an initializer or a tensor attribute. */
export type OnnxBuilderData = Float32Array | BigInt64Array | Int32Array

/** A tensor value: its elements row-major and its dims. */
export interface OnnxBuilderTensor {
  data: OnnxBuilderData
  dims: readonly number[]
}

export type OnnxAttributeValue =
  | number
  | readonly number[]
  | string
  | OnnxBuilderData
  | { i: number }
  | { f: number }
  | { ints: readonly number[] }
  | { floats: readonly number[] }
  | { s: string }
  | { t: OnnxBuilderTensor }

export interface OnnxBuilderOptions {
  /** The graph's name; default 'graph'. */
  name?: string
  /** The default domain's opset; default 17. */
  opset?: number
  /** ModelProto.ir_version; default: the version that goes with the opset (8 up to opset 18, 9 for 19-20, 10 after). */
  irVersion?: number
  /** Default 'flotilla'. */
  producerName?: string
}

/** Attribute names whose plain numbers are FLOATs (they are in every standard op that has them). */
export const FLOAT_ATTRIBUTE_NAMES: ReadonlySet<string> = new Set([
  'alpha', 'beta', 'gamma', 'epsilon', 'momentum', 'bias', 'lambd', 'spatial_scale', 'extrapolation_value',
  'cubic_coeff_a', 'ratio', 'scale', 'seed', 'mean', 'low', 'high', 'threshold'
])

const DTYPE_CODES: Record<OnnxBuilderDType, number> = {
  float32: OnnxDataType.FLOAT,
  int64: OnnxDataType.INT64,
  int32: OnnxDataType.INT32
}

export const DEFAULT_OPSET = 17

function irVersionFor (opset: number): number {
  if (opset <= 18) return 8
  if (opset <= 20) return 9
  return 10
}

function dtypeOf (data: OnnxBuilderData): OnnxBuilderDType {
  if (data instanceof Float32Array) return 'float32'
  if (data instanceof BigInt64Array) return 'int64'
  return 'int32'
}

function checkDims (what: string, dims: readonly number[]): void {
  for (const d of dims) {
    if (!Number.isInteger(d) || d < 0) throw new Error(`${what}: dims must be non-negative integers, got [${dims.join(', ')}]`)
  }
}

/** The tensor's elements as little-endian bytes (ONNX raw_data). */
function rawData (data: OnnxBuilderData): Uint8Array {
  const bytes = new Uint8Array(data.byteLength)
  const view = new DataView(bytes.buffer)
  if (data instanceof Float32Array) {
    for (let i = 0; i < data.length; i++) view.setFloat32(i * 4, data[i]!, true)
  } else if (data instanceof BigInt64Array) {
    for (let i = 0; i < data.length; i++) view.setBigInt64(i * 8, data[i]!, true)
  } else {
    for (let i = 0; i < data.length; i++) view.setInt32(i * 4, data[i]!, true)
  }
  return bytes
}

function tensorProto (name: string, data: OnnxBuilderData, dims: readonly number[]): OnnxTensor {
  checkDims(`tensor '${name}'`, dims)
  const count = dims.reduce((a, b) => a * b, 1)
  if (count !== data.length) {
    throw new Error(`tensor '${name}': dims [${dims.join(', ')}] hold ${count} elements, the data has ${data.length}`)
  }
  const tensor: OnnxTensor = { dims: [...dims], dataType: DTYPE_CODES[dtypeOf(data)], rawData: rawData(data) }
  if (name !== '') tensor.name = name
  return tensor
}

function valueInfo (name: string, dtype: OnnxBuilderDType, dims: ReadonlyArray<number | string> | undefined): OnnxValueInfo {
  const tensorType: { elemType: number, shape?: { dim: Array<{ dimValue?: number, dimParam?: string }> } } = {
    elemType: DTYPE_CODES[dtype]
  }
  if (dims !== undefined) {
    tensorType.shape = {
      dim: dims.map(d => {
        if (typeof d === 'string') return { dimParam: d }
        if (!Number.isInteger(d) || d < 0) throw new Error(`'${name}': a dimension is a non-negative integer or a name, got ${d}`)
        return { dimValue: d }
      })
    }
  }
  return { name, type: { tensorType } }
}

const isIntegerList = (xs: readonly number[]): boolean => xs.every(x => Number.isInteger(x))

/** One attribute, typed by the rules in the header. */
export function onnxAttribute (name: string, value: OnnxAttributeValue): OnnxAttribute {
  if (typeof value === 'number') {
    if (!FLOAT_ATTRIBUTE_NAMES.has(name) && Number.isInteger(value)) return { name, type: OnnxAttributeType.INT, i: value }
    return { name, type: OnnxAttributeType.FLOAT, f: value }
  }
  if (typeof value === 'string') return { name, type: OnnxAttributeType.STRING, s: new TextEncoder().encode(value) }
  if (value instanceof Float32Array || value instanceof BigInt64Array || value instanceof Int32Array) {
    return { name, type: OnnxAttributeType.TENSOR, t: tensorProto('', value, [value.length]) }
  }
  if (Array.isArray(value)) {
    const xs = value as readonly number[]
    if (isIntegerList(xs)) return { name, type: OnnxAttributeType.INTS, ints: [...xs] }
    return { name, type: OnnxAttributeType.FLOATS, floats: [...xs] }
  }
  const v = value as Record<string, unknown>
  if ('i' in v) {
    if (!Number.isInteger(v.i)) throw new Error(`attribute '${name}': { i } must be an integer, got ${String(v.i)}`)
    return { name, type: OnnxAttributeType.INT, i: v.i as number }
  }
  if ('f' in v) return { name, type: OnnxAttributeType.FLOAT, f: v.f as number }
  if ('ints' in v) {
    const xs = v.ints as readonly number[]
    if (!isIntegerList(xs)) throw new Error(`attribute '${name}': { ints } must hold integers`)
    return { name, type: OnnxAttributeType.INTS, ints: [...xs] }
  }
  if ('floats' in v) return { name, type: OnnxAttributeType.FLOATS, floats: [...(v.floats as readonly number[])] }
  if ('s' in v) return { name, type: OnnxAttributeType.STRING, s: new TextEncoder().encode(v.s as string) }
  if ('t' in v) {
    const t = v.t as OnnxBuilderTensor
    return { name, type: OnnxAttributeType.TENSOR, t: tensorProto('', t.data, t.dims) }
  }
  throw new Error(`attribute '${name}': cannot tell its type; use { i }, { f }, { ints }, { floats }, { s } or { t }`)
}

export class OnnxBuilder {
  readonly #name: string
  readonly #opset: number
  readonly #irVersion: number
  readonly #producerName: string
  readonly #inputs: OnnxValueInfo[] = []
  readonly #outputs: OnnxValueInfo[] = []
  readonly #initializers: OnnxTensor[] = []
  readonly #nodes: OnnxNode[] = []
  readonly #names = new Set<string>()

  constructor ({ name = 'graph', opset = DEFAULT_OPSET, irVersion, producerName = 'flotilla' }: OnnxBuilderOptions = {}) {
    this.#name = name
    this.#opset = opset
    this.#irVersion = irVersion ?? irVersionFor(opset)
    this.#producerName = producerName
  }

  get opset (): number {
    return this.#opset
  }

  #declare (name: string): void {
    if (name === '') throw new Error('a tensor name must not be empty')
    if (this.#names.has(name)) throw new Error(`tensor '${name}' is declared twice`)
    this.#names.add(name)
  }

  /** A graph input; a string dimension is symbolic (the batch: 'N'). */
  input (name: string, dtype: OnnxBuilderDType, dims: ReadonlyArray<number | string>): this {
    this.#declare(name)
    this.#inputs.push(valueInfo(name, dtype, dims))
    return this
  }

  /** A graph output; without dims its shape is left to the runtime to infer. */
  output (name: string, dtype: OnnxBuilderDType, dims?: ReadonlyArray<number | string>): this {
    this.#outputs.push(valueInfo(name, dtype, dims))
    return this
  }

  /** A constant tensor (weights), its dtype taken from the array type. */
  initializer (name: string, data: OnnxBuilderData, dims: readonly number[]): this {
    this.#declare(name)
    this.#initializers.push(tensorProto(name, data, dims))
    return this
  }

  /** A node; '' in `inputs` is an absent optional input. Returns the builder. */
  node (opType: string, inputs: readonly string[], outputs: readonly string[],
    attrs: Readonly<Record<string, OnnxAttributeValue>> = {}, name?: string): this {
    const node: OnnxNode = {
      input: [...inputs],
      output: [...outputs],
      name: name ?? `${opType}_${this.#nodes.length}`,
      opType,
      attribute: Object.entries(attrs).map(([key, value]) => onnxAttribute(key, value))
    }
    this.#nodes.push(node)
    return this
  }

  /** The model as plain objects (what decodeOnnxModel gives back). */
  model (): OnnxModel {
    return {
      irVersion: this.#irVersion,
      producerName: this.#producerName,
      opsetImport: [{ domain: '', version: this.#opset }],
      graph: {
        name: this.#name,
        node: this.#nodes,
        initializer: this.#initializers,
        input: this.#inputs,
        output: this.#outputs
      }
    }
  }

  /** The serialised ModelProto. */
  build (): Uint8Array {
    return encodeOnnxModel(this.model())
  }
}
