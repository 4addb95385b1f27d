/**
 * Lowering: ONNX nodes that survived folding, in execution order, to the engine's op set (native/index.ts
 * NativeOpType), fusing as it goes:
 * - Gemm -> MatMul (transA, transB, alpha, beta; C as the bias when it is [N], [1, N] or a scalar, else an Add);
 * - MatMul followed by an Add of a constant [N] -> MatMul with bias; by a Mul or Div by a constant scalar -> its alpha;
 * - Relu, LeakyRelu, Sigmoid, Tanh, Gelu that are the only reader of a MatMul or Conv output -> its activation;
 * - BatchNormalization after a Conv (or a 2-D MatMul with constant weights) that nothing else reads -> folded into its
 *   weights and bias; elsewhere -> Mul and Add with per-channel constants shaped to broadcast over the channel axis;
 * - Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout, a float-to-float Cast -> Reshape with the output's dims;
 * - opset < 13 Softmax over more than the last axis -> Reshape to 2-D, Softmax, Reshape back.
 * A fusion only removes a value nothing else reads (`consumers` counts every read and the graph outputs), so no
 * output of the model changes.
 */
import { type NativeOpType, type PlanOpAttrs } from '../../../native/index.ts'
import { dimsProduct, formatDims, productToDim } from './batch-dims.ts'
import { broadcastMap, constantValue, constNumbers, makeConst } from './constant-folding.ts'
import { refused, unsupported } from './graph-failure.ts'
import { type ConstTensor, type GraphNode } from './onnx-graph.ts'
import {
  concatDims, convGeometry, gatherAxis, gemmShape, layerNormAxis, poolGeometry, softmaxAxis, transposePerm, type Value
} from './shape-inference.ts'

/** A plan op with its tensors still named; the planner numbers them. */
export interface LoweredOp {
  op: NativeOpType
  name: string
  /** '' for an absent optional input. */
  inputs: string[]
  outputs: string[]
  attrs: PlanOpAttrs
}

export interface LoweringContext {
  /** Every value's type and, for constants, data; lowering adds the values it makes. */
  values: Map<string, Value>
  /** Reads of each value by the nodes being lowered, plus one for each time it is a graph output. */
  consumers: ReadonlyMap<string, number>
  opset: number
}

const ACTIVATIONS: Readonly<Record<string, true>> = { Relu: true, LeakyRelu: true, Sigmoid: true, Tanh: true, Gelu: true }
const RESHAPES = new Set(['Reshape', 'Flatten', 'Squeeze', 'Unsqueeze', 'Identity', 'Dropout', 'Cast'])

/** Lowers one node at a time; the planner catches GraphFailures per node to name it. */
export class Lowerer {
  readonly ops: LoweredOp[] = []
  readonly #ctx: LoweringContext
  /** The op that writes each value, for fusions. */
  readonly #producer = new Map<string, LoweredOp>()
  #counter = 0

  constructor (ctx: LoweringContext) {
    this.#ctx = ctx
  }

  #value (name: string): Value {
    const v = this.#ctx.values.get(name)
    // The planner types every value before lowering; a miss is a bug here, not a model error.
    /* c8 ignore next */
    if (v === undefined) throw new Error(`lowering: no value '${name}'`)
    return v
  }

  #const (name: string): ConstTensor | undefined {
    return name === '' ? undefined : this.#ctx.values.get(name)?.constant
  }

  #fresh (base: string): string {
    let name: string
    do name = `${base}#${++this.#counter}`
    while (this.#ctx.values.has(name))
    return name
  }

  #addConst (base: string, c: ConstTensor): string {
    const name = this.#fresh(base)
    this.#ctx.values.set(name, constantValue(c))
    return name
  }

  #addValue (base: string, dims: number[]): string {
    const name = this.#fresh(base)
    this.#ctx.values.set(name, { dtype: 'float32', dims })
    return name
  }

  #emit (op: NativeOpType, name: string, inputs: string[], outputs: string[], attrs: PlanOpAttrs = {}): LoweredOp {
    const lowered: LoweredOp = { op, name, inputs, outputs, attrs }
    this.ops.push(lowered)
    for (const o of outputs) this.#producer.set(o, lowered)
    return lowered
  }

  /** The op writing `name` when this node is its only reader, so the two may merge. */
  #soleProducer (name: string, ops: readonly NativeOpType[]): LoweredOp | undefined {
    const p = this.#producer.get(name)
    if (p === undefined || !ops.includes(p.op) || this.#ctx.consumers.get(name) !== 1) return undefined
    return p
  }

  #retarget (op: LoweredOp, output: string): void {
    this.#producer.delete(op.outputs[0]!)
    op.outputs[0] = output
    this.#producer.set(output, op)
  }

  /** `name` with other dims: a new constant for a constant, a Reshape op otherwise. */
  #reshaped (name: string, dims: number[], opName: string): string {
    const c = this.#const(name)
    if (c !== undefined) return this.#addConst(name, { ...c, dims })
    const out = this.#addValue(name, dims)
    this.#emit('Reshape', opName, [name], [out])
    return out
  }

  lower (node: GraphNode): void {
    const op = node.opType
    const [x = '', second = '', third = ''] = node.inputs
    const y = node.outputs[0]!
    if (op in ACTIVATIONS) return this.#activation(node, x, y)
    if (RESHAPES.has(op)) {
      this.#emit('Reshape', node.name, [x], [y])
      return
    }
    switch (op) {
      case 'Add':
        if (this.#tryBias(node.name, x, second, y) || this.#tryBias(node.name, second, x, y)) return
        this.#emit('Add', node.name, [x, second], [y])
        return
      case 'Mul': case 'Div':
        if (this.#tryScale(node.name, op, x, second, y) || (op === 'Mul' && this.#tryScale(node.name, op, second, x, y))) return
        this.#emit(op, node.name, [x, second], [y])
        return
      case 'Sub': case 'Erf':
        this.#emit(op, node.name, node.inputs.slice(0, op === 'Erf' ? 1 : 2), [y])
        return
      case 'MatMul':
        return this.#matmul(node, x, second, y)
      case 'Gemm':
        return this.#gemm(node, x, second, third, y)
      case 'Softmax':
        return this.#softmax(node, x, y)
      case 'LayerNormalization':
        return this.#layerNorm(node, x, second, third, y)
      case 'BatchNormalization':
        return this.#batchNorm(node, y)
      case 'Gather':
        this.#emit('Gather', node.name, [x, second], [y], { axis: gatherAxis(node, this.#value(x).dims.length) })
        return
      case 'Transpose':
        this.#emit('Transpose', node.name, [x], [y], { perm: transposePerm(node, this.#value(x).dims.length) })
        return
      case 'Concat':
        this.#emit('Concat', node.name, [...node.inputs], [y], {
          axis: concatDims(node, node.inputs.map(i => this.#value(i).dims)).axis
        })
        return
      case 'Conv': {
        const g = convGeometry(node, this.#value(x).dims, this.#value(second).dims)
        this.#emit('Conv', node.name, [x, second, third], [y], {
          kernelShape: g.kernelShape, strides: g.strides, pads: g.pads, dilations: g.dilations, group: g.group
        })
        return
      }
      case 'MaxPool': case 'AveragePool': {
        const g = poolGeometry(node, this.#value(x).dims)
        const attrs: PlanOpAttrs = { kernelShape: g.kernelShape, strides: g.strides, pads: g.pads, dilations: g.dilations }
        if (op === 'AveragePool') attrs.countIncludePad = g.countIncludePad
        this.#emit(op, node.name, [x], [y], attrs)
        return
      }
      case 'GlobalAveragePool':
        this.#emit('GlobalAveragePool', node.name, [x], [y])
        return
      // Shape inference refuses every op type not handled above, so nothing else reaches here.
      /* c8 ignore next 2 */
      default:
        throw unsupported()
    }
  }

  #activation (node: GraphNode, x: string, y: string): void {
    const op = node.opType
    const tanh = op === 'Gelu' && node.attrs.string('approximate') === 'tanh'
    const slope = node.attrs.float('alpha') ?? 0.01
    const activation = op === 'Relu'
      ? 'relu'
      : op === 'LeakyRelu' ? 'leaky_relu' : op === 'Sigmoid' ? 'sigmoid' : op === 'Tanh' ? 'tanh' : tanh ? 'gelu_tanh' : 'gelu'
    const p = this.#soleProducer(x, ['MatMul', 'Conv'])
    if (p !== undefined && (p.attrs.activation ?? 'none') === 'none') {
      p.attrs.activation = activation
      if (activation === 'leaky_relu') p.attrs.activationAlpha = slope
      this.#retarget(p, y)
      return
    }
    if (op === 'Gelu') this.#emit('Gelu', node.name, [x], [y], { activation })
    else if (op === 'LeakyRelu') this.#emit('LeakyRelu', node.name, [x], [y], { alpha: slope })
    else this.#emit(op as NativeOpType, node.name, [x], [y])
  }

  /** MatMul(...) + constant [N] (or a scalar, or [1, .., N]) -> the MatMul's bias. */
  #tryBias (name: string, product: string, addend: string, y: string): boolean {
    const p = this.#soleProducer(product, ['MatMul'])
    const c = this.#const(addend)
    if (p === undefined || c === undefined || c.dtype !== 'float32' || p.inputs[2] !== undefined ||
        (p.attrs.activation ?? 'none') !== 'none') return false
    const outDims = this.#value(product).dims
    const n = outDims[outDims.length - 1]!
    if (n < 0 || c.dims.length > outDims.length) return false
    const onlyLast = c.dims.slice(0, -1).every(d => d === 1)
    let bias: string
    if (c.data.length === n && onlyLast) bias = c.dims.length === 1 ? addend : this.#addConst(addend, { ...c, dims: [n] })
    else if (c.data.length === 1) bias = this.#addConst(addend, makeConst('float32', [n], new Float64Array(n).fill(Number(c.data[0]))))
    else return false
    p.inputs[2] = bias
    p.attrs.beta = 1
    p.name = `${p.name}+${name}`
    this.#retarget(p, y)
    return true
  }

  /** MatMul(...) * c or / c, c a constant scalar -> the MatMul's alpha (and beta, for its bias). */
  #tryScale (name: string, op: 'Mul' | 'Div', product: string, factor: string, y: string): boolean {
    const p = this.#soleProducer(product, ['MatMul'])
    const c = this.#const(factor)
    if (p === undefined || c === undefined || c.dtype !== 'float32' || c.data.length !== 1 ||
        (p.attrs.activation ?? 'none') !== 'none' || this.#value(y).dims.length !== this.#value(product).dims.length) return false
    const v = Number(c.data[0])
    const scale = op === 'Mul' ? v : 1 / v
    if (!Number.isFinite(scale)) return false
    p.attrs.alpha = (p.attrs.alpha ?? 1) * scale
    if (p.inputs[2] !== undefined && p.inputs[2] !== '') p.attrs.beta = (p.attrs.beta ?? 1) * scale
    p.name = `${p.name}+${name}`
    this.#retarget(p, y)
    return true
  }

  #matmul (node: GraphNode, a: string, b: string, y: string): void {
    const aDims = this.#value(a).dims
    const bDims = this.#value(b).dims
    if (aDims.length >= 2 && bDims.length >= 2) {
      this.#emit('MatMul', node.name, [a, b], [y], { transA: false, transB: false, alpha: 1, beta: 1 })
      return
    }
    // numpy's 1-D promotion, spelled out with Reshapes around a 2-D product.
    const a2 = aDims.length === 1 ? this.#reshaped(a, [1, aDims[0]!], `${node.name}/promote_a`) : a
    const b2 = bDims.length === 1 ? this.#reshaped(b, [bDims[0]!, 1], `${node.name}/promote_b`) : b
    const batchDims = aDims.length === 1 ? bDims.slice(0, -2) : aDims.slice(0, -2)
    const rawDims = [...batchDims, aDims.length === 1 ? 1 : aDims[aDims.length - 2]!, bDims.length === 1 ? 1 : bDims[bDims.length - 1]!]
    const raw = this.#addValue(y, rawDims)
    this.#emit('MatMul', node.name, [a2, b2], [raw], { transA: false, transB: false, alpha: 1, beta: 1 })
    this.#emit('Reshape', `${node.name}/squeeze`, [raw], [y])
  }

  #gemm (node: GraphNode, a: string, b: string, c: string, y: string): void {
    const g = gemmShape(node, this.#value(a).dims, this.#value(b).dims)
    const alpha = node.attrs.float('alpha') ?? 1
    const beta = node.attrs.float('beta') ?? 1
    const attrs: PlanOpAttrs = { transA: g.transA, transB: g.transB, alpha, beta: 1 }
    if (c === '') {
      this.#emit('MatMul', node.name, [a, b], [y], attrs)
      return
    }
    const cv = this.#value(c)
    const cc = cv.constant
    const numel = dimsProduct(cv.dims)
    const rowLike = cv.dims.length <= 2 && cv.dims.slice(0, -1).every(d => d === 1) && cv.dims[cv.dims.length - 1] === g.n
    if (rowLike || (cc !== undefined && numel !== undefined && !numel.batched && numel.coef === 1)) {
      let bias = c
      if (cc !== undefined && !(cv.dims.length === 1 && cv.dims[0] === g.n)) {
        bias = this.#addConst(c, makeConst('float32', [g.n], cc.data.length === 1 ? new Float64Array(g.n).fill(Number(cc.data[0])) : constNumbers(cc)))
      } else if (cc === undefined && cv.dims.length !== 1) {
        bias = this.#reshaped(c, [g.n], `${node.name}/bias`)
      }
      this.#emit('MatMul', node.name, [a, b, bias], [y], { ...attrs, beta })
      return
    }
    // A [M, N] or [M, 1] C: a separate Add, with beta applied to C first.
    const product = this.#addValue(y, [g.m, g.n])
    this.#emit('MatMul', node.name, [a, b], [product], attrs)
    let addend = c
    if (beta !== 1) {
      if (cc !== undefined) {
        addend = this.#addConst(c, makeConst('float32', cc.dims, constNumbers(cc).map(v => v * beta)))
      } else {
        const betaConst = this.#addConst(`${node.name}/beta`, makeConst('float32', [], [beta]))
        addend = this.#addValue(c, [...cv.dims])
        this.#emit('Mul', `${node.name}/beta`, [c, betaConst], [addend])
      }
    }
    this.#emit('Add', `${node.name}/C`, [product, addend], [y])
  }

  #softmax (node: GraphNode, x: string, y: string): void {
    const dims = this.#value(x).dims
    const axis = softmaxAxis(node, dims.length, this.#ctx.opset)
    if (this.#ctx.opset >= 13 || axis === dims.length - 1) {
      this.#emit('Softmax', node.name, [x], [y], { axis })
      return
    }
    // Before opset 13, Softmax normalises the input flattened to 2-D at `axis`.
    const outer = dimsProduct(dims.slice(0, axis))!
    const inner = dimsProduct(dims.slice(axis))!
    const flat = this.#reshaped(x, [productToDim(outer), productToDim(inner)], `${node.name}/flatten`)
    const soft = this.#addValue(y, [productToDim(outer), productToDim(inner)])
    this.#emit('Softmax', node.name, [flat], [soft], { axis: 1 })
    this.#emit('Reshape', `${node.name}/unflatten`, [soft], [y])
  }

  #layerNorm (node: GraphNode, x: string, scale: string, bias: string, y: string): void {
    const dims = this.#value(x).dims
    const axis = layerNormAxis(node, dims.length)
    const normalized = dims.slice(axis)
    const fit = (name: string, what: string): string => {
      if (name === '') return ''
      const v = this.#value(name)
      if (v.dims.length === normalized.length && v.dims.every((d, i) => d === normalized[i])) return name
      if (v.constant === undefined) {
        throw refused(`its ${what} ${formatDims(v.dims)} is computed at run time and is not shaped ${formatDims(normalized)}`)
      }
      const src = constNumbers(v.constant)
      const map = broadcastMap(normalized, v.dims)
      return this.#addConst(name, makeConst('float32', normalized, Float64Array.from(map, i => src[i]!)))
    }
    this.#emit('LayerNorm', node.name, [x, fit(scale, 'scale'), fit(bias, 'bias')], [y], {
      axis, epsilon: node.attrs.float('epsilon') ?? 1e-5
    })
  }

  #batchNorm (node: GraphNode, y: string): void {
    const [x = '', scaleName = '', biasName = '', meanName = '', varName = ''] = node.inputs
    const params = [scaleName, biasName, meanName, varName].map(n => this.#const(n))
    if (params.some(p => p === undefined)) throw unsupported('with scale, bias, mean or variance computed at run time')
    const [scale, bias, mean, variance] = params.map(p => constNumbers(p!)) as [Float64Array, Float64Array, Float64Array, Float64Array]
    const eps = node.attrs.float('epsilon') ?? 1e-5
    const c = scale.length
    const s = scale.map((g, i) => g / Math.sqrt(variance[i]! + eps))
    const t = bias.map((b, i) => b - mean[i]! * s[i]!)
    if (this.#foldBatchNorm(node.name, x, y, s, t)) return
    // Mul + Add with [C, 1, ..., 1] constants broadcasting over the spatial dims.
    const rank = this.#value(x).dims.length
    const shape = [c, ...new Array<number>(Math.max(rank - 2, 0)).fill(1)]
    const sName = this.#addConst(`${node.name}/scale`, makeConst('float32', shape, s))
    const tName = this.#addConst(`${node.name}/shift`, makeConst('float32', shape, t))
    const scaled = this.#addValue(y, [...this.#value(x).dims])
    this.#emit('Mul', `${node.name}/scale`, [x, sName], [scaled])
    this.#emit('Add', `${node.name}/shift`, [scaled, tName], [y])
  }

  /** z = s * (conv(x) + b - mean) + B = conv'(x) with W' = W * s per output channel and b' = s * b + t. */
  #foldBatchNorm (name: string, x: string, y: string, s: Float64Array, t: Float64Array): boolean {
    const p = this.#soleProducer(x, ['Conv', 'MatMul'])
    if (p === undefined || (p.attrs.activation ?? 'none') !== 'none') return false
    const w = this.#const(p.inputs[1] ?? '')
    const biasName = p.inputs[2] ?? ''
    const b = biasName === '' ? undefined : this.#const(biasName)
    if (w === undefined || w.dtype !== 'float32' || (biasName !== '' && b === undefined)) return false
    const c = s.length
    const wv = constNumbers(w)
    let beta = 1
    if (p.op === 'Conv') {
      if (w.dims[0] !== c) return false
      const per = wv.length / c
      for (let i = 0; i < wv.length; i++) wv[i]! *= s[Math.floor(i / per)]!
    } else {
      // A 2-D product: BatchNormalization's channel axis (1) is the product's last.
      if (this.#value(x).dims.length !== 2 || w.dims.length !== 2 || p.attrs.transA === true) return false
      beta = p.attrs.beta ?? 1
      const [rows, cols] = w.dims as [number, number]
      if (p.attrs.transB === true ? rows !== c : cols !== c) return false
      for (let i = 0; i < wv.length; i++) wv[i]! *= s[p.attrs.transB === true ? Math.floor(i / cols) : i % cols]!
    }
    const bv = b === undefined ? new Float64Array(c) : constNumbers(b)
    if (bv.length !== c && bv.length !== 1) return false
    const folded = Float64Array.from({ length: c }, (_, i) => s[i]! * beta * bv[bv.length === 1 ? 0 : i]! + t[i]!)
    p.inputs[1] = this.#addConst(p.inputs[1]!, makeConst('float32', w.dims, wv))
    p.inputs[2] = this.#addConst(`${p.name}/bias`, makeConst('float32', [c], folded))
    if (p.op === 'MatMul') p.attrs.beta = 1
    p.name = `${p.name}+${name}`
    this.#retarget(p, y)
    return true
  }
}

/** Drops ops whose outputs nothing reads (after fusion), keeping execution order. */
export function dropDeadOps (ops: readonly LoweredOp[], outputs: readonly string[]): LoweredOp[] {
  const live = new Set(outputs)
  const kept: LoweredOp[] = []
  for (let i = ops.length - 1; i >= 0; i--) {
    const op = ops[i]!
    if (!op.outputs.some(o => live.has(o))) continue
    kept.push(op)
    for (const input of op.inputs) if (input !== '') live.add(input)
  }
  return kept.reverse()
}
