/**
 * Shape inference for the native op list with the batch symbolic (batch-dims.ts: d < 0 is (-d) x batch). One
 * function per op computes the output dtype and dims from the inputs' and checks what ONNX requires of them; the
 * geometry helpers (reshape targets, convolution and pooling windows, axes) are shared with constant folding and
 * lowering so the three agree on every attribute default and opset difference.
 *
 * Failures are GraphFailures (graph-failure.ts) with the reason only; the planner names the node.
 */
import {
  broadcastDims, dimsProduct, formatDims, isFixed, normalizeAxis, productToDim, type BatchProduct
} from './batch-dims.ts'
import { invalid, refused, unsupported } from './graph-failure.ts'
import { type ConstDType, type ConstTensor, type GraphNode } from './onnx-graph.ts'

/** An element of an integer tensor known at load: a number, or a multiple of the batch (Shape of a batched tensor). */
export type SymInt = number | BatchMultiple
export interface BatchMultiple { batch: number }

export interface TensorType {
  dtype: ConstDType
  /** Batch-scaled (batch-dims.ts). */
  dims: number[]
}

/** What the planner knows of a value: its type, and its elements when they are known at load. */
export interface Value extends TensorType {
  constant?: ConstTensor
  /** An integer tensor known at load except for multiples of the batch (a shape computed with Shape). */
  symbolic?: SymInt[]
}

/** The element of a dimension: d, or { batch: -d }. */
export function dimToSym (d: number): SymInt {
  return d >= 0 ? d : { batch: -d }
}

export function isBatchMultiple (s: SymInt): s is BatchMultiple {
  return typeof s !== 'number'
}

/** The value's elements when it is an integer tensor known at load (constant or symbolic); otherwise undefined. */
export function knownInts (v: Value | undefined): SymInt[] | undefined {
  if (v === undefined) return undefined
  if (v.symbolic !== undefined) return v.symbolic
  const c = v.constant
  if (c === undefined || c.dtype === 'float32') return undefined
  return Array.from(c.data as ArrayLike<number | bigint>, x => Number(x))
}

/** Integer elements that must be known at load and free of the batch (axes, pads). */
export function constInts (v: Value | undefined, what: string): number[] {
  const ints = knownInts(v)
  if (ints === undefined) {
    if (v !== undefined && v.constant !== undefined) throw invalid(`${what} must be an integer tensor`)
    throw unsupported(`its ${what} is computed at run time`)
  }
  if (ints.some(isBatchMultiple)) throw unsupported(`its ${what} depends on the batch size`)
  return ints as number[]
}

function input (inputs: ReadonlyArray<Value | undefined>, i: number, what: string): Value {
  const v = inputs[i]
  if (v === undefined) throw invalid(`it needs input #${i} (${what})`)
  return v
}

function requireFloat (v: Value, what: string): void {
  if (v.dtype !== 'float32') {
    throw refused(`${what} is ${v.dtype}; the native backend computes in float32 (integer tensors only go through ` +
      'Gather, Reshape, Transpose and Concat)')
  }
}

function intAttr (node: GraphNode, name: string, fallback: number): number {
  return node.attrs.int(name) ?? fallback
}

// ----------------------------------------------------------------------------------------------------------------
// Element-preserving ops

/**
 * Reshape's target dims: 0 copies the input's dimension (unless allowzero), -1 takes what is left, a batch multiple
 * (from a folded Shape) stays one. "[batch, 64, 128] to [-1, 128]" gives [64*batch, 128].
 */
export function reshapeDims (inDims: readonly number[], shape: readonly SymInt[], allowZero: boolean): number[] {
  const total = dimsProduct(inDims)
  if (total === undefined) throw refused(`its input ${formatDims(inDims)} scales with batch²`)
  let inferAt = -1
  const known: BatchProduct = { coef: 1, batched: false }
  const out: number[] = []
  for (const [i, s] of shape.entries()) {
    let d: number
    if (isBatchMultiple(s)) {
      d = -s.batch
    } else if (s === -1) {
      if (inferAt >= 0) throw invalid(`its shape ${formatShape(shape)} has more than one -1`)
      inferAt = i
      out.push(0)
      continue
    } else if (s === 0 && !allowZero) {
      const copied = inDims[i]
      if (copied === undefined) throw invalid(`its shape ${formatShape(shape)} copies dimension ${i} (0), which the input ${formatDims(inDims)} lacks`)
      d = copied
    } else if (s < 0 || !Number.isInteger(s)) {
      throw invalid(`its shape ${formatShape(shape)} has an invalid entry ${s}`)
    } else {
      d = s
    }
    if (d < 0) {
      if (known.batched) throw refused(`its shape ${formatShape(shape)} scales with batch²`)
      known.batched = true
    }
    known.coef *= Math.abs(d)
    out.push(d)
  }
  if (inferAt >= 0) {
    const batched = total.batched && !known.batched
    if ((known.batched && !total.batched) || known.coef === 0 || total.coef % known.coef !== 0) {
      throw refused(`reshaping ${formatDims(inDims)} to ${formatShape(shape)} leaves no whole dimension for the -1 ` +
        'at every batch size')
    }
    out[inferAt] = productToDim({ coef: total.coef / known.coef, batched })
  } else if (known.coef !== total.coef || known.batched !== total.batched) {
    throw invalid(`it reshapes ${formatDims(inDims)} to ${formatDims(out)}, which holds a different number of elements`)
  }
  return out
}

function formatShape (shape: readonly SymInt[]): string {
  return `[${shape.map(s => isBatchMultiple(s) ? (s.batch === 1 ? 'batch' : `${s.batch}*batch`) : String(s)).join(', ')}]`
}

export function flattenDims (inDims: readonly number[], axisAttr: number): number[] {
  const rank = inDims.length
  if (!Number.isInteger(axisAttr) || axisAttr < -rank || axisAttr > rank) {
    throw invalid(`axis ${axisAttr} is out of range for rank ${rank}`)
  }
  const axis = axisAttr < 0 ? axisAttr + rank : axisAttr
  const outer = dimsProduct(inDims.slice(0, axis))
  const inner = dimsProduct(inDims.slice(axis))
  if (outer === undefined || inner === undefined) throw refused(`its input ${formatDims(inDims)} scales with batch²`)
  return [productToDim(outer), productToDim(inner)]
}

/** Squeeze's axes: the `axes` attribute before opset 13, the optional second input since. */
export function squeezeAxes (node: GraphNode, inputs: ReadonlyArray<Value | undefined>, opset: number): number[] | undefined {
  if (opset >= 13) return inputs[1] === undefined ? undefined : constInts(inputs[1], 'axes input')
  return node.attrs.ints('axes')
}

export function squeezeDims (inDims: readonly number[], axes: readonly number[] | undefined): number[] {
  if (axes === undefined) return inDims.filter(d => d !== 1)
  const drop = new Set<number>()
  for (const a of axes) {
    const axis = normalizeAxis(a, inDims.length)
    if (axis === undefined) throw invalid(`axis ${a} is out of range for rank ${inDims.length}`)
    const d = inDims[axis]!
    if (d < 0) throw refused(`it squeezes dimension ${axis} of ${formatDims(inDims)}, which is the batch (1 at batch size 1 only)`)
    if (d !== 1) throw invalid(`it squeezes dimension ${axis} of ${formatDims(inDims)}, which is not 1`)
    drop.add(axis)
  }
  return inDims.filter((_, i) => !drop.has(i))
}

/** Unsqueeze's axes: the `axes` attribute before opset 13, the second input since. */
export function unsqueezeAxes (node: GraphNode, inputs: ReadonlyArray<Value | undefined>, opset: number): number[] {
  const axes = opset >= 13 ? constInts(input(inputs, 1, 'axes'), 'axes input') : node.attrs.ints('axes')
  if (axes === undefined) throw invalid("it needs the 'axes' attribute")
  return axes
}

export function unsqueezeDims (inDims: readonly number[], axes: readonly number[]): number[] {
  const rank = inDims.length + axes.length
  const at = new Set<number>()
  for (const a of axes) {
    const axis = normalizeAxis(a, rank)
    if (axis === undefined) throw invalid(`axis ${a} is out of range for output rank ${rank}`)
    if (at.has(axis)) throw invalid(`axis ${a} is repeated`)
    at.add(axis)
  }
  const out: number[] = []
  let j = 0
  for (let i = 0; i < rank; i++) out.push(at.has(i) ? 1 : inDims[j++]!)
  return out
}

export function transposePerm (node: GraphNode, rank: number): number[] {
  const perm = node.attrs.ints('perm') ?? Array.from({ length: rank }, (_, i) => rank - 1 - i)
  const sorted = [...perm].sort((a, b) => a - b)
  if (perm.length !== rank || sorted.some((p, i) => p !== i)) {
    throw invalid(`perm [${perm.join(', ')}] is not a permutation of the input's ${rank} dimensions`)
  }
  return perm
}

export function gatherAxis (node: GraphNode, rank: number): number {
  const a = intAttr(node, 'axis', 0)
  const axis = normalizeAxis(a, rank)
  if (axis === undefined) throw invalid(`axis ${a} is out of range for data of rank ${rank}`)
  return axis
}

export function gatherDims (dataDims: readonly number[], indicesDims: readonly number[], axis: number): number[] {
  return [...dataDims.slice(0, axis), ...indicesDims, ...dataDims.slice(axis + 1)]
}

export function concatDims (node: GraphNode, all: readonly (readonly number[])[]): { axis: number, dims: number[] } {
  const first = all[0]
  if (first === undefined) throw invalid('it has no inputs')
  const a = node.attrs.int('axis')
  if (a === undefined) throw invalid("it needs the 'axis' attribute")
  const axis = normalizeAxis(a, first.length)
  if (axis === undefined) throw invalid(`axis ${a} is out of range for rank ${first.length}`)
  const dims = [...first]
  let fixed = 0
  let batch = 0
  for (const d of all) {
    if (d.length !== first.length) throw invalid(`its inputs have ranks ${all.map(x => x.length).join(', ')}`)
    for (let i = 0; i < d.length; i++) {
      if (i !== axis && d[i] !== first[i]) {
        throw invalid(`its inputs ${all.map(x => formatDims(x)).join(', ')} differ outside axis ${axis}`)
      }
    }
    const da = d[axis]!
    if (da < 0) batch -= da
    else fixed += da
  }
  if (batch > 0 && fixed > 0) {
    throw refused(`it joins batch-sized and fixed-sized inputs (${all.map(x => formatDims(x)).join(', ')}) along axis ${axis}`)
  }
  dims[axis] = batch > 0 ? -batch : fixed
  return { axis, dims }
}

// ----------------------------------------------------------------------------------------------------------------
// Products

/** MatMul's output dims, numpy semantics (1-D operands promoted and their dimension removed again). */
export function matmulDims (a: readonly number[], b: readonly number[]): number[] {
  if (a.length === 0 || b.length === 0) throw invalid('MatMul needs operands of rank 1 or more')
  const a2 = a.length === 1 ? [1, ...a] : a
  const b2 = b.length === 1 ? [...b, 1] : b
  const k1 = a2[a2.length - 1]!
  const k2 = b2[b2.length - 2]!
  if (k1 !== k2) throw invalid(`it multiplies ${formatDims(a)} by ${formatDims(b)}: inner dimensions differ`)
  const batch = broadcastDims(a2.slice(0, -2), b2.slice(0, -2))
  if (batch === undefined) throw invalid(`the leading dimensions of ${formatDims(a)} and ${formatDims(b)} do not broadcast`)
  const out = [...batch]
  if (a.length > 1) out.push(a2[a2.length - 2]!)
  if (b.length > 1) out.push(b2[b2.length - 1]!)
  return out
}

export interface GemmShape { m: number, k: number, n: number, transA: boolean, transB: boolean }

export function gemmShape (node: GraphNode, a: readonly number[], b: readonly number[]): GemmShape {
  if (a.length !== 2 || b.length !== 2) throw invalid(`Gemm needs 2-D operands, got ${formatDims(a)} and ${formatDims(b)}`)
  const transA = intAttr(node, 'transA', 0) !== 0
  const transB = intAttr(node, 'transB', 0) !== 0
  const [m, k] = transA ? [a[1]!, a[0]!] : [a[0]!, a[1]!]
  const [k2, n] = transB ? [b[1]!, b[0]!] : [b[0]!, b[1]!]
  if (k !== k2) throw invalid(`it multiplies ${formatDims(a)} by ${formatDims(b)} (transA ${Number(transA)}, transB ${Number(transB)}): inner dimensions differ`)
  return { m, k, n, transA, transB }
}

// ----------------------------------------------------------------------------------------------------------------
// Convolution and pooling

export interface WindowGeometry {
  kernelShape: number[]
  strides: number[]
  /** [top, left, bottom, right] */
  pads: number[]
  dilations: number[]
  /** [outH, outW] */
  out: number[]
}

function spatialInput (x: readonly number[], what: string): [number, number] {
  if (x.length !== 4) throw unsupported(`only 2-D ${what} (input rank 4, NCHW); this input is ${formatDims(x)}`)
  const [h, w] = [x[2]!, x[3]!]
  if (h < 0 || w < 0 || x[1]! < 0) throw refused(`its input ${formatDims(x)} has batch-sized channels or spatial dimensions`)
  return [h, w]
}

function pair (node: GraphNode, name: string, fallback: number): number[] {
  const v = node.attrs.ints(name) ?? [fallback, fallback]
  if (v.length !== 2) throw invalid(`'${name}' must have 2 values for a 2-D window, got [${v.join(', ')}]`)
  if (v.some(x => !Number.isInteger(x) || x < 1)) throw invalid(`'${name}' must be positive, got [${v.join(', ')}]`)
  return v
}

/** Explicit pads and output size of a 2-D window op, auto_pad and (for pools) ceil_mode resolved. */
function windowGeometry (node: GraphNode, hw: [number, number], kernelShape: number[], ceilMode: boolean): WindowGeometry {
  const strides = pair(node, 'strides', 1)
  const dilations = pair(node, 'dilations', 1)
  const autoPad = node.attrs.string('auto_pad') ?? 'NOTSET'
  let pads = node.attrs.ints('pads') ?? [0, 0, 0, 0]
  if (pads.length !== 4 || pads.some(p => !Number.isInteger(p) || p < 0)) {
    throw invalid(`'pads' must have 4 non-negative values for a 2-D window, got [${pads.join(', ')}]`)
  }
  const out = [0, 0]
  if (autoPad === 'SAME_UPPER' || autoPad === 'SAME_LOWER') {
    pads = [0, 0, 0, 0]
    for (let i = 0; i < 2; i++) {
      const effective = (kernelShape[i]! - 1) * dilations[i]! + 1
      out[i] = Math.ceil(hw[i]! / strides[i]!)
      const total = Math.max(0, (out[i]! - 1) * strides[i]! + effective - hw[i]!)
      const small = Math.floor(total / 2)
      pads[i] = autoPad === 'SAME_UPPER' ? small : total - small
      pads[i + 2] = total - pads[i]!
    }
    return { kernelShape, strides, pads, dilations, out }
  }
  if (autoPad === 'VALID') pads = [0, 0, 0, 0]
  else if (autoPad !== 'NOTSET') throw invalid(`auto_pad '${autoPad}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID`)
  for (let i = 0; i < 2; i++) {
    const effective = (kernelShape[i]! - 1) * dilations[i]! + 1
    const span = hw[i]! + pads[i]! + pads[i + 2]! - effective
    if (span < 0) {
      throw invalid(`its window (${effective}) is larger than the padded input (${hw[i]! + pads[i]! + pads[i + 2]!})`)
    }
    if (ceilMode) {
      let o = Math.ceil(span / strides[i]!) + 1
      // A last window that would start in the end padding is dropped, as onnxruntime and PyTorch do.
      if ((o - 1) * strides[i]! >= hw[i]! + pads[i]!) o--
      out[i] = o
    } else {
      out[i] = Math.floor(span / strides[i]!) + 1
    }
  }
  return { kernelShape, strides, pads, dilations, out }
}

export interface ConvGeometry extends WindowGeometry { group: number, outDims: number[] }

export function convGeometry (node: GraphNode, x: readonly number[], w: readonly number[], bias?: readonly number[]): ConvGeometry {
  const hw = spatialInput(x, 'convolutions')
  if (w.length !== 4 || !isFixed(w)) throw invalid(`its weight ${formatDims(w)} is not [M, C/group, kH, kW]`)
  const group = intAttr(node, 'group', 1)
  const [m, cPerGroup, kh, kw] = [w[0]!, w[1]!, w[2]!, w[3]!]
  if (group < 1 || x[1] !== cPerGroup * group || m % group !== 0) {
    throw invalid(`its input ${formatDims(x)} and weight ${formatDims(w)} do not agree with group ${group}`)
  }
  const kernelShape = node.attrs.ints('kernel_shape') ?? [kh, kw]
  if (kernelShape[0] !== kh || kernelShape[1] !== kw || kernelShape.length !== 2) {
    throw invalid(`kernel_shape [${kernelShape.join(', ')}] does not match the weight ${formatDims(w)}`)
  }
  if (bias !== undefined && (bias.length !== 1 || bias[0] !== m)) throw invalid(`its bias ${formatDims(bias)} is not [${m}]`)
  const g = windowGeometry(node, hw, kernelShape, false)
  return { ...g, group, outDims: [x[0]!, m, g.out[0]!, g.out[1]!] }
}

export interface PoolGeometry extends WindowGeometry { countIncludePad: boolean, outDims: number[] }

export function poolGeometry (node: GraphNode, x: readonly number[]): PoolGeometry {
  const hw = spatialInput(x, 'pooling')
  const kernelShape = node.attrs.ints('kernel_shape')
  if (kernelShape === undefined) throw invalid("it needs the 'kernel_shape' attribute")
  if (kernelShape.length !== 2 || kernelShape.some(k => !Number.isInteger(k) || k < 1)) {
    throw invalid(`kernel_shape [${kernelShape.join(', ')}] is not a 2-D window`)
  }
  if (node.opType === 'MaxPool' && intAttr(node, 'storage_order', 0) !== 0) {
    throw unsupported('storage_order 1 (column-major indices)')
  }
  const g = windowGeometry(node, hw, kernelShape, intAttr(node, 'ceil_mode', 0) !== 0)
  return {
    ...g,
    countIncludePad: node.opType === 'AveragePool' && intAttr(node, 'count_include_pad', 0) !== 0,
    outDims: [x[0]!, x[1]!, g.out[0]!, g.out[1]!]
  }
}

// ----------------------------------------------------------------------------------------------------------------
// Normalisation

export function softmaxAxis (node: GraphNode, rank: number, opset: number): number {
  const a = intAttr(node, 'axis', opset >= 13 ? -1 : 1)
  const axis = normalizeAxis(a, rank)
  if (axis === undefined) throw invalid(`axis ${a} is out of range for rank ${rank}`)
  return axis
}

export function layerNormAxis (node: GraphNode, rank: number): number {
  const a = intAttr(node, 'axis', -1)
  const axis = normalizeAxis(a, rank)
  if (axis === undefined) throw invalid(`axis ${a} is out of range for rank ${rank}`)
  return axis
}

/** Whether `param` broadcasts onto `normalized` (the dims [axis, rank) of the input) without growing it. */
export function broadcastsOnto (param: readonly number[], normalized: readonly number[]): boolean {
  if (param.length > normalized.length) return param.slice(0, param.length - normalized.length).every(d => d === 1) &&
    broadcastsOnto(param.slice(param.length - normalized.length), normalized)
  const offset = normalized.length - param.length
  return param.every((d, i) => d === 1 || d === normalized[offset + i])
}

// ----------------------------------------------------------------------------------------------------------------
// Per-op inference

const UNARY = new Set(['Relu', 'LeakyRelu', 'Sigmoid', 'Tanh', 'Erf', 'Gelu'])
const BINARY = new Set(['Add', 'Sub', 'Mul', 'Div'])

/** Ops that run only as constant folding; reaching inference means their input is not known at load. */
export const FOLD_ONLY_OPS: ReadonlySet<string> = new Set(['Shape', 'Cast', 'ConstantOfShape', 'Range', 'Constant'])

/**
 * The output types of a node that is not folded, one per output; undefined for an output the native backend does
 * not compute (MaxPool's Indices, Dropout's mask, LayerNormalization's Mean): the planner refuses those only when
 * something reads them.
 */
export function inferNode (node: GraphNode, inputs: ReadonlyArray<Value | undefined>, opset: number): Array<TensorType | undefined> {
  const op = node.opType
  const x = (): Value => input(inputs, 0, 'X')
  const same = (v: Value): TensorType[] => [{ dtype: v.dtype, dims: [...v.dims] }]
  if (UNARY.has(op)) {
    requireFloat(x(), 'its input')
    if (op === 'Gelu') {
      const approximate = node.attrs.string('approximate') ?? 'none'
      if (approximate !== 'none' && approximate !== 'tanh') throw invalid(`approximate '${approximate}' is not 'none' or 'tanh'`)
    }
    return same(x())
  }
  if (BINARY.has(op)) {
    const a = input(inputs, 0, 'A')
    const b = input(inputs, 1, 'B')
    if (a.dtype !== b.dtype) throw invalid(`its inputs are ${a.dtype} and ${b.dtype}`)
    if (a.dtype !== 'float32') throw unsupported(`${a.dtype} arithmetic on values known only at run time`)
    const dims = broadcastDims(a.dims, b.dims)
    if (dims === undefined) throw invalid(`${formatDims(a.dims)} and ${formatDims(b.dims)} do not broadcast`)
    return [{ dtype: 'float32', dims }]
  }
  switch (op) {
    case 'Identity':
      return same(x())
    case 'Dropout':
      return [...same(x()), undefined]
    case 'Cast': {
      const to = node.attrs.int('to')
      if (to === undefined) throw invalid("it needs the 'to' attribute")
      if (to === 1 && x().dtype === 'float32') return same(x())
      throw unsupported('a cast of a value known only at run time')
    }
    case 'Reshape': {
      const shape = knownInts(input(inputs, 1, 'shape'))
      if (shape === undefined) throw unsupported('its shape input is computed at run time')
      return [{ dtype: x().dtype, dims: reshapeDims(x().dims, shape, intAttr(node, 'allowzero', 0) !== 0) }]
    }
    case 'Flatten':
      return [{ dtype: x().dtype, dims: flattenDims(x().dims, intAttr(node, 'axis', 1)) }]
    case 'Squeeze':
      return [{ dtype: x().dtype, dims: squeezeDims(x().dims, squeezeAxes(node, inputs, opset)) }]
    case 'Unsqueeze':
      return [{ dtype: x().dtype, dims: unsqueezeDims(x().dims, unsqueezeAxes(node, inputs, opset)) }]
    case 'Transpose': {
      const perm = transposePerm(node, x().dims.length)
      return [{ dtype: x().dtype, dims: perm.map(p => x().dims[p]!) }]
    }
    case 'Concat': {
      const all = inputs.filter((v): v is Value => v !== undefined)
      if (all.length !== inputs.length) throw invalid('it has an empty input name')
      if (all.some(v => v.dtype !== all[0]!.dtype)) throw invalid(`its inputs mix ${[...new Set(all.map(v => v.dtype))].join(' and ')}`)
      return [{ dtype: all[0]!.dtype, dims: concatDims(node, all.map(v => v.dims)).dims }]
    }
    case 'Gather': {
      const data = x()
      const indices = input(inputs, 1, 'indices')
      if (indices.dtype === 'float32') throw invalid('its indices are float32, not int32 or int64')
      const axis = gatherAxis(node, data.dims.length)
      return [{ dtype: data.dtype, dims: gatherDims(data.dims, indices.dims, axis) }]
    }
    case 'MatMul': {
      const a = input(inputs, 0, 'A')
      const b = input(inputs, 1, 'B')
      requireFloat(a, 'A')
      requireFloat(b, 'B')
      return [{ dtype: 'float32', dims: matmulDims(a.dims, b.dims) }]
    }
    case 'Gemm': {
      const a = input(inputs, 0, 'A')
      const b = input(inputs, 1, 'B')
      requireFloat(a, 'A')
      requireFloat(b, 'B')
      const g = gemmShape(node, a.dims, b.dims)
      const c = inputs[2]
      if (c !== undefined) {
        requireFloat(c, 'C')
        const out = broadcastDims([g.m, g.n], c.dims)
        if (out === undefined || out.length !== 2 || out[0] !== g.m || out[1] !== g.n) {
          throw invalid(`C ${formatDims(c.dims)} does not broadcast to ${formatDims([g.m, g.n])}`)
        }
      }
      return [{ dtype: 'float32', dims: [g.m, g.n] }]
    }
    case 'Conv': {
      requireFloat(x(), 'X')
      const w = input(inputs, 1, 'W')
      requireFloat(w, 'W')
      const b = inputs[2]
      if (b !== undefined) requireFloat(b, 'B')
      return [{ dtype: 'float32', dims: convGeometry(node, x().dims, w.dims, b?.dims).outDims }]
    }
    case 'MaxPool':
    case 'AveragePool':
      requireFloat(x(), 'X')
      return [{ dtype: 'float32', dims: poolGeometry(node, x().dims).outDims }, undefined]
    case 'GlobalAveragePool': {
      requireFloat(x(), 'X')
      spatialInput(x().dims, 'pooling')
      return [{ dtype: 'float32', dims: [x().dims[0]!, x().dims[1]!, 1, 1] }]
    }
    case 'Softmax': {
      requireFloat(x(), 'its input')
      const axis = softmaxAxis(node, x().dims.length, opset)
      if (x().dims.slice(axis).some(d => d < 0) && (opset < 13 || x().dims[axis]! < 0)) {
        throw refused(`it normalises over the batch dimension of ${formatDims(x().dims)}`)
      }
      return same(x())
    }
    case 'LayerNormalization': {
      requireFloat(x(), 'X')
      const axis = layerNormAxis(node, x().dims.length)
      const normalized = x().dims.slice(axis)
      if (normalized.some(d => d < 0)) throw refused(`it normalises over the batch dimension of ${formatDims(x().dims)}`)
      for (const [i, what] of [[1, 'scale'], [2, 'bias']] as const) {
        const p = i === 1 ? input(inputs, 1, 'scale') : inputs[2]
        if (p === undefined) continue
        requireFloat(p, `its ${what}`)
        if (!broadcastsOnto(p.dims, normalized)) {
          throw invalid(`its ${what} ${formatDims(p.dims)} does not broadcast onto the normalised dims ${formatDims(normalized)}`)
        }
      }
      return [...same(x()), undefined, undefined]
    }
    case 'BatchNormalization': {
      const v = x()
      requireFloat(v, 'X')
      if (v.dims.length < 2) throw invalid(`its input ${formatDims(v.dims)} has no channel dimension`)
      const c = v.dims[1]!
      if (c < 0) throw refused(`its channel dimension is the batch (${formatDims(v.dims)})`)
      for (const [i, what] of [[1, 'scale'], [2, 'B'], [3, 'mean'], [4, 'var']] as const) {
        const p = input(inputs, i, what)
        requireFloat(p, what)
        if (p.dims.length !== 1 || p.dims[0] !== c) throw invalid(`its ${what} ${formatDims(p.dims)} is not [${c}]`)
      }
      if (intAttr(node, 'training_mode', 0) !== 0) throw unsupported('training_mode 1')
      return [...same(v), undefined, undefined]
    }
    default:
      if (FOLD_ONLY_OPS.has(op)) throw unsupported('outside constant folding: its input is known only at run time')
      throw unsupported()
  }
}
