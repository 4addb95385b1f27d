/**
 * Constant folding: a node whose inputs are all known at load is evaluated here, in TypeScript, and its outputs
 * become constants the engine never computes. This is a small reference implementation of the native op list
 * (float64 arithmetic, stored as float32), plus the ops exporters use only to compute shapes (Shape, Cast,
 * ConstantOfShape, Range, Constant), which the native backend runs only this way.
 *
 * Shapes that depend on the batch size fold too: Shape of a [batch, 64] tensor gives the symbolic [batch, 64] (a
 * {@link SymInt} per element), which Gather, Unsqueeze, Concat, Cast and integer arithmetic carry on, and which a
 * Reshape then reads as its target. That covers the `x.view(x.size(0), -1)` pattern PyTorch exports
 * (Shape -> Gather -> Unsqueeze -> Concat -> Reshape). A symbolic value that reaches anything else is refused there.
 */
import { broadcastDims, elementCount, formatDims } from './batch-dims.ts'
import { invalid, refused } from './graph-failure.ts'
import { type ConstDType, type ConstTensor, type GraphNode, isConstTensor } from './onnx-graph.ts'
import {
  concatDims, convGeometry, dimToSym, flattenDims, gatherAxis, gatherDims, gemmShape, isBatchMultiple, knownInts,
  layerNormAxis, matmulDims, poolGeometry, reshapeDims, softmaxAxis, squeezeAxes, squeezeDims, transposePerm,
  unsqueezeAxes, unsqueezeDims, type SymInt, type Value
} from './shape-inference.ts'

// ----------------------------------------------------------------------------------------------------------------
// Values

/** A Value for a constant tensor. */
export function constantValue (c: ConstTensor): Value {
  return { dtype: c.dtype, dims: [...c.dims], constant: c }
}

/** A constant from plain numbers, in the storage of `dtype`. */
export function makeConst (dtype: ConstDType, dims: readonly number[], values: ArrayLike<number>): ConstTensor {
  const n = values.length
  if (dtype === 'float32') return { dtype, dims: [...dims], data: Float32Array.from(values) }
  if (dtype === 'int32') {
    const data = new Int32Array(n)
    for (let i = 0; i < n; i++) data[i] = Math.trunc(values[i]!)
    return { dtype, dims: [...dims], data }
  }
  const data = new BigInt64Array(n)
  for (let i = 0; i < n; i++) data[i] = BigInt(Math.trunc(values[i]!))
  return { dtype, dims: [...dims], data }
}

/** An integer Value: a constant when no element depends on the batch, symbolic otherwise. */
function intValue (dtype: ConstDType, dims: readonly number[], elems: readonly SymInt[]): Value {
  if (elems.some(isBatchMultiple)) return { dtype, dims: [...dims], symbolic: [...elems] }
  return constantValue(makeConst(dtype, dims, elems as number[]))
}

/** The constant's elements as numbers (int64 through Number: shapes and indices are far below 2^53). */
export function constNumbers (c: ConstTensor): Float64Array {
  const out = new Float64Array(c.data.length)
  if (c.data instanceof BigInt64Array) {
    for (let i = 0; i < out.length; i++) out[i] = Number(c.data[i]!)
  } else {
    out.set(c.data)
  }
  return out
}

type Elements = Float64Array | SymInt[]

/** Elements of a value known at load: numbers for float32, SymInts for integers; undefined when not known. */
function elementsOf (v: Value | undefined): Elements | undefined {
  if (v === undefined) return undefined
  if (v.dtype === 'float32') return v.constant === undefined ? undefined : constNumbers(v.constant)
  return knownInts(v)
}

function withElements (dtype: ConstDType, dims: readonly number[], elems: Elements | readonly SymInt[]): Value {
  if (dtype === 'float32') return constantValue(makeConst('float32', dims, elems as ArrayLike<number>))
  return intValue(dtype, dims, elems as SymInt[])
}

function pick<T> (elems: ArrayLike<T>, map: ArrayLike<number>): T[] {
  const out = new Array<T>(map.length)
  for (let i = 0; i < map.length; i++) out[i] = elems[map[i]!]!
  return out
}

// ----------------------------------------------------------------------------------------------------------------
// Index maps (output element -> input element)

function strides (dims: readonly number[]): number[] {
  const s = new Array<number>(dims.length)
  let acc = 1
  for (let i = dims.length - 1; i >= 0; i--) {
    s[i] = acc
    acc *= dims[i]!
  }
  return s
}

/** For each element of `outDims`, the element of `inDims` numpy broadcasting reads. */
export function broadcastMap (outDims: readonly number[], inDims: readonly number[]): Int32Array {
  const rank = outDims.length
  const inStrides = strides(inDims)
  // A broadcast dimension (missing, or 1 in the input) reads the same element all along: stride 0.
  return broadcastMapWithStrides(outDims, outDims.map((_, i) => {
    const j = i - (rank - inDims.length)
    return j < 0 || inDims[j] === 1 ? 0 : inStrides[j]!
  }))
}

function transposeMap (inDims: readonly number[], perm: readonly number[]): Int32Array {
  const inStrides = strides(inDims)
  const outDims = perm.map(p => inDims[p]!)
  return broadcastMapWithStrides(outDims, perm.map(p => inStrides[p]!))
}

/** For each element of `outDims`, the input offset when output dimension i advances the input by eff[i]. */
function broadcastMapWithStrides (outDims: readonly number[], eff: readonly number[]): Int32Array {
  const n = elementCount(outDims)
  const map = new Int32Array(n)
  const rank = outDims.length
  const idx = new Array<number>(rank).fill(0)
  let off = 0
  for (let e = 0; e < n; e++) {
    map[e] = off
    for (let i = rank - 1; i >= 0; i--) {
      idx[i]!++
      off += eff[i]!
      if (idx[i]! < outDims[i]!) break
      off -= eff[i]! * idx[i]!
      idx[i] = 0
    }
  }
  return map
}

function gatherMap (dataDims: readonly number[], axis: number, indices: readonly number[]): Int32Array {
  const outer = elementCount(dataDims.slice(0, axis))
  const axisLen = dataDims[axis]!
  const inner = elementCount(dataDims.slice(axis + 1))
  const map = new Int32Array(outer * indices.length * inner)
  let e = 0
  for (let o = 0; o < outer; o++) {
    for (const raw of indices) {
      const i = raw < 0 ? raw + axisLen : raw
      if (!(i >= 0 && i < axisLen)) throw invalid(`index ${raw} is out of range for dimension ${axis} (${axisLen}) of its data`)
      const base = (o * axisLen + i) * inner
      for (let k = 0; k < inner; k++) map[e++] = base + k
    }
  }
  return map
}

// ----------------------------------------------------------------------------------------------------------------
// Arithmetic

type BinaryOp = 'Add' | 'Sub' | 'Mul' | 'Div'

function floatBinary (op: BinaryOp, a: number, b: number): number {
  switch (op) {
    case 'Add': return a + b
    case 'Sub': return a - b
    case 'Mul': return a * b
    case 'Div': return a / b
  }
}

/** Integer arithmetic over SymInts; undefined when the result is not a whole multiple of the batch. */
function symBinary (op: BinaryOp, a: SymInt, b: SymInt): SymInt | undefined {
  if (!isBatchMultiple(a) && !isBatchMultiple(b)) {
    if (op === 'Div') {
      if (b === 0) throw invalid('it divides an integer by zero')
      return Math.trunc(a / b)
    }
    return floatBinary(op, a, b)
  }
  const ka = isBatchMultiple(a) ? a.batch : undefined
  const kb = isBatchMultiple(b) ? b.batch : undefined
  const batch = (k: number): SymInt => (k === 0 ? 0 : { batch: k })
  switch (op) {
    case 'Add': return ka !== undefined && kb !== undefined ? batch(ka + kb) : undefined
    case 'Sub': return ka !== undefined && kb !== undefined && ka >= kb ? batch(ka - kb) : undefined
    case 'Mul':
      if (ka !== undefined && kb !== undefined) return undefined
      return batch((ka ?? (a as number)) * (kb ?? (b as number)))
    case 'Div':
      if (ka !== undefined && kb !== undefined) return ka % kb === 0 ? ka / kb : undefined
      if (ka !== undefined && typeof b === 'number' && b > 0 && ka % b === 0) return batch(ka / b)
      return undefined
  }
}

const SQRT1_2 = Math.SQRT1_2

/** erf(x), to about 1e-7 relative: a Taylor series near 0, Numerical Recipes' erfc (Chebyshev) elsewhere. */
export function erf (x: number): number {
  const ax = Math.abs(x)
  if (ax < 0.5) {
    // 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
    let term = x
    let sum = x
    const x2 = x * x
    for (let n = 1; n < 12; n++) {
      term *= -x2 / n
      sum += term / (2 * n + 1)
    }
    return sum * 1.1283791670955126
  }
  const t = 1 / (1 + 0.5 * ax)
  const erfc = t * Math.exp(-ax * ax - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
    t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
  return x >= 0 ? 1 - erfc : erfc - 1
}

export function gelu (x: number, tanhApproximation: boolean): number {
  if (tanhApproximation) return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)))
  return 0.5 * x * (1 + erf(x * SQRT1_2))
}

function unary (node: GraphNode, x: number): number {
  switch (node.opType) {
    case 'Relu': return x > 0 ? x : 0
    case 'LeakyRelu': return x >= 0 ? x : x * (node.attrs.float('alpha') ?? 0.01)
    case 'Sigmoid': return 1 / (1 + Math.exp(-x))
    case 'Tanh': return Math.tanh(x)
    case 'Erf': return erf(x)
    default: return gelu(x, (node.attrs.string('approximate') ?? 'none') === 'tanh')
  }
}

// ----------------------------------------------------------------------------------------------------------------
// Float kernels (reference implementations, for folding and for tests)

/** numpy matmul of two float tensors (rank >= 1). */
export function referenceMatMul (a: Float64Array, aDims: readonly number[], b: Float64Array, bDims: readonly number[]): { data: Float64Array, dims: number[] } {
  const outDims = matmulDims(aDims, bDims)
  const a2 = aDims.length === 1 ? [1, ...aDims] : [...aDims]
  const b2 = bDims.length === 1 ? [...bDims, 1] : [...bDims]
  const m = a2[a2.length - 2]!
  const k = a2[a2.length - 1]!
  const n = b2[b2.length - 1]!
  const batchDims = broadcastDims(a2.slice(0, -2), b2.slice(0, -2))!
  const aMap = broadcastMap(batchDims, a2.slice(0, -2))
  const bMap = broadcastMap(batchDims, b2.slice(0, -2))
  const batches = elementCount(batchDims)
  const out = new Float64Array(batches * m * n)
  for (let p = 0; p < batches; p++) {
    const ao = aMap[p]! * m * k
    const bo = bMap[p]! * k * n
    const oo = p * m * n
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let s = 0
        for (let q = 0; q < k; q++) s += a[ao + i * k + q]! * b[bo + q * n + j]!
        out[oo + i * n + j] = s
      }
    }
  }
  return { data: out, dims: outDims }
}

/** Softmax over `axisLen` contiguous-by-`inner` elements of each of `outer` slices. */
function softmaxInPlace (x: Float64Array, outer: number, axisLen: number, inner: number): void {
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < inner; i++) {
      const base = o * axisLen * inner + i
      let max = -Infinity
      for (let a = 0; a < axisLen; a++) max = Math.max(max, x[base + a * inner]!)
      let sum = 0
      for (let a = 0; a < axisLen; a++) {
        const e = Math.exp(x[base + a * inner]! - max)
        x[base + a * inner] = e
        sum += e
      }
      for (let a = 0; a < axisLen; a++) x[base + a * inner]! /= sum
    }
  }
}

function referenceConv (node: GraphNode, x: Float64Array, xDims: number[], w: Float64Array, wDims: number[],
  bias: Float64Array | undefined): Value {
  const g = convGeometry(node, xDims, wDims)
  const [n, c, h, wd] = xDims as [number, number, number, number]
  const [m, cg, kh, kw] = wDims as [number, number, number, number]
  const [oh, ow] = g.out as [number, number]
  const mg = m / g.group
  const out = new Float64Array(n * m * oh * ow)
  for (let b = 0; b < n; b++) {
    for (let oc = 0; oc < m; oc++) {
      const grp = Math.floor(oc / mg)
      for (let y = 0; y < oh; y++) {
        for (let xx = 0; xx < ow; xx++) {
          let s = bias === undefined ? 0 : bias[oc]!
          for (let ic = 0; ic < cg; ic++) {
            const chan = grp * cg + ic
            for (let i = 0; i < kh; i++) {
              const iy = y * g.strides[0]! - g.pads[0]! + i * g.dilations[0]!
              if (iy < 0 || iy >= h) continue
              for (let j = 0; j < kw; j++) {
                const ix = xx * g.strides[1]! - g.pads[1]! + j * g.dilations[1]!
                if (ix < 0 || ix >= wd) continue
                s += x[((b * c + chan) * h + iy) * wd + ix]! * w[((oc * cg + ic) * kh + i) * kw + j]!
              }
            }
          }
          out[((b * m + oc) * oh + y) * ow + xx] = s
        }
      }
    }
  }
  return constantValue(makeConst('float32', g.outDims, out))
}

function referencePool (node: GraphNode, x: Float64Array, xDims: number[]): Value {
  const g = poolGeometry(node, xDims)
  const [n, c, h, w] = xDims as [number, number, number, number]
  const [oh, ow] = g.out as [number, number]
  const [kh, kw] = g.kernelShape as [number, number]
  const isMax = node.opType === 'MaxPool'
  const out = new Float64Array(n * c * oh * ow)
  for (let p = 0; p < n * c; p++) {
    for (let y = 0; y < oh; y++) {
      for (let xx = 0; xx < ow; xx++) {
        let acc = isMax ? -Infinity : 0
        let count = 0
        const y0 = y * g.strides[0]! - g.pads[0]!
        const x0 = xx * g.strides[1]! - g.pads[1]!
        for (let i = 0; i < kh; i++) {
          const iy = y0 + i * g.dilations[0]!
          for (let j = 0; j < kw; j++) {
            const ix = x0 + j * g.dilations[1]!
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue
            const v = x[(p * h + iy) * w + ix]!
            acc = isMax ? Math.max(acc, v) : acc + v
            count++
          }
        }
        if (!isMax) {
          if (g.countIncludePad) {
            // onnxruntime's rule: the window clipped to the explicitly padded input, not to the ceil_mode overhang.
            const yEnd = Math.min(y0 + (kh - 1) * g.dilations[0]! + 1, h + g.pads[2]!)
            const xEnd = Math.min(x0 + (kw - 1) * g.dilations[1]! + 1, w + g.pads[3]!)
            count = (Math.ceil((yEnd - y0) / g.dilations[0]!)) * (Math.ceil((xEnd - x0) / g.dilations[1]!))
          }
          acc = count === 0 ? 0 : acc / count
        }
        out[(p * oh + y) * ow + xx] = acc
      }
    }
  }
  return constantValue(makeConst('float32', g.outDims, out))
}

// ----------------------------------------------------------------------------------------------------------------
// The folder

/** Value of a Constant node from whichever value_* attribute it has. */
function constantNode (node: GraphNode): Value {
  const a = node.attrs
  const t = a.tensor('value')
  if (t !== undefined) {
    if (!isConstTensor(t)) throw refused(`its value is ${t.unsupportedType}, a type the native backend does not compute with`)
    return constantValue(t)
  }
  const f = a.float('value_float')
  if (f !== undefined) return constantValue(makeConst('float32', [], [f]))
  const fs = a.floats('value_floats')
  if (fs !== undefined) return constantValue(makeConst('float32', [fs.length], fs))
  const i = a.int('value_int')
  if (i !== undefined) return constantValue(makeConst('int64', [], [i]))
  const is = a.ints('value_ints')
  if (is !== undefined) return constantValue(makeConst('int64', [is.length], is))
  if (a.has('sparse_value')) throw refused('its value is a sparse tensor, which the native backend does not read')
  if (a.has('value_string') || a.has('value_strings')) throw refused('its value is a string, which the native backend does not compute with')
  throw invalid('it has no value attribute')
}

const CAST_TARGETS: Readonly<Record<number, ConstDType>> = { 1: 'float32', 6: 'int32', 7: 'int64' }

/**
 * Evaluates `node` when every input it reads is known at load (Shape only needs its input's dims); returns one
 * Value per output (undefined for an output it does not compute), or undefined when the node must run in the engine.
 * Throws a GraphFailure for inputs ONNX does not allow (an index out of range, dims that do not match).
 */
export function foldNode (node: GraphNode, inputs: ReadonlyArray<Value | undefined>, opset: number): Array<Value | undefined> | undefined {
  const op = node.opType
  if (op === 'Constant') return [constantNode(node)]
  if (op === 'Shape') {
    const x = inputs[0]
    if (x === undefined) return undefined
    const rank = x.dims.length
    const clamp = (v: number): number => Math.min(Math.max(v < 0 ? v + rank : v, 0), rank)
    const start = clamp(node.attrs.int('start') ?? 0)
    const end = clamp(node.attrs.int('end') ?? rank)
    const elems = x.dims.slice(start, Math.max(start, end)).map(dimToSym)
    return [intValue('int64', [elems.length], elems)]
  }
  // Everything else needs each of its inputs known.
  const present = inputs.filter((v): v is Value => v !== undefined)
  const elems = inputs.map(elementsOf)
  if (present.length === 0 || inputs.some((v, i) => v !== undefined && elems[i] === undefined)) return undefined
  const x = inputs[0]
  const xe = elems[0]
  switch (op) {
    case 'Identity':
      return x === undefined ? undefined : [x]
    case 'Dropout':
      return x === undefined ? undefined : [x, undefined]
    case 'Cast': {
      const to = CAST_TARGETS[node.attrs.int('to') ?? 0]
      if (x === undefined || xe === undefined || to === undefined) return undefined
      if (to === 'float32') {
        if (xe instanceof Float64Array) return [constantValue(makeConst('float32', x.dims, xe))]
        if (xe.some(isBatchMultiple)) return undefined
        return [constantValue(makeConst('float32', x.dims, xe as number[]))]
      }
      const ints = xe instanceof Float64Array ? Array.from(xe, Math.trunc) : xe
      return [intValue(to, x.dims, ints)]
    }
    case 'Reshape': {
      const shape = elems[1]
      if (x === undefined || xe === undefined || shape === undefined || shape instanceof Float64Array) return undefined
      return [withElements(x.dtype, reshapeDims(x.dims, shape, (node.attrs.int('allowzero') ?? 0) !== 0), xe)]
    }
    case 'Flatten':
      if (x === undefined || xe === undefined) return undefined
      return [withElements(x.dtype, flattenDims(x.dims, node.attrs.int('axis') ?? 1), xe)]
    case 'Squeeze':
      if (x === undefined || xe === undefined) return undefined
      return [withElements(x.dtype, squeezeDims(x.dims, squeezeAxes(node, inputs, opset)), xe)]
    case 'Unsqueeze':
      if (x === undefined || xe === undefined) return undefined
      return [withElements(x.dtype, unsqueezeDims(x.dims, unsqueezeAxes(node, inputs, opset)), xe)]
    case 'Transpose': {
      if (x === undefined || xe === undefined) return undefined
      const perm = transposePerm(node, x.dims.length)
      return [withElements(x.dtype, perm.map(p => x.dims[p]!), pick(xe, transposeMap(x.dims, perm)))]
    }
    case 'Concat': {
      if (present.length !== inputs.length || present.some(v => v.dtype !== present[0]!.dtype)) return undefined
      const { axis, dims } = concatDims(node, present.map(v => v.dims))
      const outer = elementCount(dims.slice(0, axis))
      const out: Array<number | SymInt> = []
      for (let o = 0; o < outer; o++) {
        for (const [i, v] of present.entries()) {
          const chunk = elementCount(v.dims.slice(axis))
          const e = elems[i]!
          for (let k = 0; k < chunk; k++) out.push(e[o * chunk + k]!)
        }
      }
      return [withElements(present[0]!.dtype, dims, out as SymInt[])]
    }
    case 'Gather': {
      const indices = elems[1]
      if (x === undefined || xe === undefined || indices === undefined || inputs[1]!.dtype === 'float32') return undefined
      if (indices.some(i => isBatchMultiple(i as SymInt))) return undefined
      const axis = gatherAxis(node, x.dims.length)
      const dims = gatherDims(x.dims, inputs[1]!.dims, axis)
      return [withElements(x.dtype, dims, pick(xe, gatherMap(x.dims, axis, indices as number[])))]
    }
    case 'ConstantOfShape': {
      const shape = elems[0]
      if (shape === undefined || shape instanceof Float64Array || shape.some(isBatchMultiple)) return undefined
      const dims = shape as number[]
      if (dims.some(d => d < 0)) throw invalid(`its shape [${dims.join(', ')}] has a negative dimension`)
      const t = node.attrs.tensor('value')
      let fill: ConstTensor = makeConst('float32', [1], [0])
      if (t !== undefined) {
        if (!isConstTensor(t)) throw refused(`its value is ${t.unsupportedType}, a type the native backend does not compute with`)
        if (t.data.length !== 1) throw invalid('its value must hold one element')
        fill = t
      }
      const v = constNumbers(fill)[0]!
      return [constantValue(makeConst(fill.dtype, dims, new Float64Array(elementCount(dims)).fill(v)))]
    }
    case 'Range': {
      const [s, l, d] = [elems[0], elems[1], elems[2]]
      if (x === undefined || s === undefined || l === undefined || d === undefined) return undefined
      if ([s, l, d].some(e => e.length !== 1 || isBatchMultiple(e[0] as SymInt))) return undefined
      const [start, limit, delta] = [Number(s[0]), Number(l[0]), Number(d[0])]
      if (delta === 0) throw invalid('its delta is 0')
      const count = Math.max(Math.ceil((limit - start) / delta), 0)
      return [constantValue(makeConst(x.dtype, [count], Array.from({ length: count }, (_, i) => start + i * delta)))]
    }
    case 'Add': case 'Sub': case 'Mul': case 'Div': {
      const [a, b] = [inputs[0], inputs[1]]
      const [ae, be] = [elems[0], elems[1]]
      if (a === undefined || b === undefined || ae === undefined || be === undefined || a.dtype !== b.dtype) return undefined
      const dims = broadcastDims(a.dims, b.dims)
      if (dims === undefined) throw invalid(`${formatDims(a.dims)} and ${formatDims(b.dims)} do not broadcast`)
      const am = broadcastMap(dims, a.dims)
      const bm = broadcastMap(dims, b.dims)
      if (ae instanceof Float64Array && be instanceof Float64Array) {
        const out = new Float64Array(am.length)
        for (let i = 0; i < out.length; i++) out[i] = floatBinary(op, ae[am[i]!]!, be[bm[i]!]!)
        return [constantValue(makeConst('float32', dims, out))]
      }
      const out: SymInt[] = []
      for (let i = 0; i < am.length; i++) {
        const r = symBinary(op, (ae as SymInt[])[am[i]!]!, (be as SymInt[])[bm[i]!]!)
        if (r === undefined) return undefined
        out.push(r)
      }
      return [intValue(a.dtype, dims, out)]
    }
    case 'Relu': case 'LeakyRelu': case 'Sigmoid': case 'Tanh': case 'Erf': case 'Gelu': {
      if (x === undefined || !(xe instanceof Float64Array)) return undefined
      return [constantValue(makeConst('float32', x.dims, xe.map(v => unary(node, v))))]
    }
    default:
      break
  }
  // Float-only kernels from here: every input a float constant.
  const f = elems.map(e => (e instanceof Float64Array ? e : undefined))
  if (x === undefined || f.some((e, i) => inputs[i] !== undefined && e === undefined)) return undefined
  const xf = f[0]!
  switch (op) {
    case 'MatMul': {
      const r = referenceMatMul(xf, x.dims, f[1]!, inputs[1]!.dims)
      return [constantValue(makeConst('float32', r.dims, r.data))]
    }
    case 'Gemm': {
      const b = inputs[1]!
      const g = gemmShape(node, x.dims, b.dims)
      const a2 = g.transA ? pick(xf, transposeMap(x.dims, [1, 0])) : xf
      const b2 = g.transB ? pick(f[1]!, transposeMap(b.dims, [1, 0])) : f[1]!
      const r = referenceMatMul(Float64Array.from(a2), [g.m, g.k], Float64Array.from(b2), [g.k, g.n])
      const alpha = node.attrs.float('alpha') ?? 1
      const beta = node.attrs.float('beta') ?? 1
      const c = inputs[2]
      const cm = c === undefined ? undefined : broadcastMap([g.m, g.n], c.dims)
      const out = r.data.map((v, i) => alpha * v + (cm === undefined ? 0 : beta * f[2]![cm[i]!]!))
      return [constantValue(makeConst('float32', [g.m, g.n], out))]
    }
    case 'Softmax': {
      const axis = softmaxAxis(node, x.dims.length, opset)
      const out = Float64Array.from(xf)
      const inner = opset >= 13 ? elementCount(x.dims.slice(axis + 1)) : 1
      const axisLen = opset >= 13 ? x.dims[axis]! : elementCount(x.dims.slice(axis))
      softmaxInPlace(out, elementCount(x.dims.slice(0, axis)), axisLen, inner)
      return [constantValue(makeConst('float32', x.dims, out))]
    }
    case 'LayerNormalization': {
      const axis = layerNormAxis(node, x.dims.length)
      const normalized = x.dims.slice(axis)
      const size = elementCount(normalized)
      const eps = node.attrs.float('epsilon') ?? 1e-5
      const sm = broadcastMap(normalized, inputs[1]!.dims)
      const bm = inputs[2] === undefined ? undefined : broadcastMap(normalized, inputs[2].dims)
      const out = new Float64Array(xf.length)
      for (let o = 0; o < xf.length / size; o++) {
        let mean = 0
        for (let i = 0; i < size; i++) mean += xf[o * size + i]!
        mean /= size
        let variance = 0
        for (let i = 0; i < size; i++) variance += (xf[o * size + i]! - mean) ** 2
        const inv = 1 / Math.sqrt(variance / size + eps)
        for (let i = 0; i < size; i++) {
          out[o * size + i] = (xf[o * size + i]! - mean) * inv * f[1]![sm[i]!]! + (bm === undefined ? 0 : f[2]![bm[i]!]!)
        }
      }
      return [constantValue(makeConst('float32', x.dims, out)), undefined, undefined]
    }
    case 'BatchNormalization': {
      const c = x.dims[1]!
      const spatial = elementCount(x.dims.slice(2))
      const eps = node.attrs.float('epsilon') ?? 1e-5
      const [scale, bias, mean, variance] = [f[1]!, f[2]!, f[3]!, f[4]!]
      const out = new Float64Array(xf.length)
      for (let i = 0; i < xf.length; i++) {
        const ch = Math.floor(i / spatial) % c
        out[i] = (xf[i]! - mean[ch]!) / Math.sqrt(variance[ch]! + eps) * scale[ch]! + bias[ch]!
      }
      return [constantValue(makeConst('float32', x.dims, out)), undefined, undefined]
    }
    case 'Conv':
      return [referenceConv(node, xf, x.dims, f[1]!, inputs[1]!.dims, f[2])]
    case 'MaxPool': case 'AveragePool':
      return [referencePool(node, xf, x.dims), undefined]
    case 'GlobalAveragePool': {
      if (x.dims.length < 3) return undefined
      const spatial = elementCount(x.dims.slice(2))
      const out = new Float64Array(xf.length / spatial)
      for (let i = 0; i < out.length; i++) {
        let s = 0
        for (let k = 0; k < spatial; k++) s += xf[i * spatial + k]!
        out[i] = s / spatial
      }
      return [constantValue(makeConst('float32', [...x.dims.slice(0, 2), ...x.dims.slice(2).map(() => 1)], out))]
    }
    default:
      return undefined
  }
}

