/**
 * A float64 evaluator of small ONNX graphs, for the correctness test's second opinion: where the native engine and
 * onnxruntime disagree by more than the tolerance, both are measured against this, to tell a kernel bug from float32
 * rounding that onnxruntime shares. Plain loops, no speed tricks; it computes every op in double precision from the
 * same float32 inputs and weights.
 *
 * Supports: MatMul (rank >= 2), Gemm, Add, Sub, Mul, Div, Relu, LeakyRelu, Sigmoid, Tanh, Erf, Gelu, Softmax,
 * LayerNormalization, BatchNormalization, Gather, Reshape, Flatten, Transpose, Concat, Squeeze, Unsqueeze, Identity,
 * Dropout, Conv (2-D). A graph with any other op gives undefined.
 */
import {
  decodeOnnxModel, OnnxAttributeType, OnnxDataType, type OnnxAttribute, type OnnxNode, type OnnxTensor
} from '../../../../worker/backends/native/onnx-proto.ts'

export interface F64Tensor {
  d: Float64Array
  s: number[]
}

class Unsupported extends Error {}

const size = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1)

function stridesOf (s: readonly number[]): number[] {
  const r = new Array<number>(s.length).fill(1)
  for (let i = s.length - 2; i >= 0; i--) r[i] = r[i + 1]! * s[i + 1]!
  return r
}

/** erf to double precision: Taylor series below 3, Lentz's continued fraction for erfc above. */
export function erf64 (x: number): number {
  const ax = Math.abs(x)
  if (ax < 3) {
    let term = x
    let sum = x
    const x2 = x * x
    for (let n = 1; n < 100; n++) {
      term *= -x2 / n
      const add = term / (2 * n + 1)
      sum += add
      if (Math.abs(add) < 1e-17 * Math.abs(sum)) break
    }
    return sum * 2 / Math.sqrt(Math.PI)
  }
  // erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
  let f = ax
  let c = ax
  let d = 0
  for (let n = 1; n < 200; n++) {
    const an = n / 2
    d = ax + an * d
    d = d === 0 ? 1e-300 : 1 / d
    c = ax + an / c
    const delta = c * d
    f *= delta
    if (Math.abs(delta - 1) < 1e-16) break
  }
  const erfc = Math.exp(-ax * ax) / Math.sqrt(Math.PI) / f
  return x >= 0 ? 1 - erfc : erfc - 1
}

function broadcast (a: F64Tensor, b: F64Tensor, f: (x: number, y: number) => number): F64Tensor {
  const ad = a.d
  const bd = b.d
  if (a.s.length === b.s.length && a.s.every((d, i) => d === b.s[i])) return { d: ad.map((x, i) => f(x, bd[i]!)), s: a.s }
  if (bd.length === 1 && a.s.length >= b.s.length) { const y = bd[0]!; return { d: ad.map(x => f(x, y)), s: a.s } }
  const r = Math.max(a.s.length, b.s.length)
  const as = [...new Array<number>(r - a.s.length).fill(1), ...a.s]
  const bs = [...new Array<number>(r - b.s.length).fill(1), ...b.s]
  const os = as.map((d, i) => Math.max(d, bs[i]!))
  // b broadcast along the leading dims of a, over a's trailing block: the bias of a product.
  const inner = bd.length
  if (size(os) === ad.length && bs.every((d, i) => d === 1 || d === as[i]) && bs.slice(r - b.s.length).every((d, i) => d === as[r - b.s.length + i]) &&
      bs.slice(0, r - b.s.length).every(d => d === 1)) {
    return { d: ad.map((x, i) => f(x, bd[i % inner]!)), s: os }
  }
  const ast = stridesOf(as)
  const bst = stridesOf(bs)
  const ost = stridesOf(os)
  const out = new Float64Array(size(os))
  for (let i = 0; i < out.length; i++) {
    let ai = 0
    let bi = 0
    let rem = i
    for (let k = 0; k < r; k++) {
      const c = Math.floor(rem / ost[k]!)
      rem -= c * ost[k]!
      if (as[k] !== 1) ai += c * ast[k]!
      if (bs[k] !== 1) bi += c * bst[k]!
    }
    out[i] = f(ad[ai]!, bd[bi]!)
  }
  return { d: out, s: os }
}

function matmul (a: F64Tensor, b: F64Tensor): F64Tensor {
  if (a.s.length < 2 || b.s.length < 2) throw new Unsupported('MatMul of a vector')
  const M = a.s[a.s.length - 2]!
  const K = a.s[a.s.length - 1]!
  const N = b.s[b.s.length - 1]!
  const ab = a.s.slice(0, -2)
  const bb = b.s.slice(0, -2)
  const r = Math.max(ab.length, bb.length)
  const A = [...new Array<number>(r - ab.length).fill(1), ...ab]
  const B = [...new Array<number>(r - bb.length).fill(1), ...bb]
  const O = A.map((d, i) => Math.max(d, B[i]!))
  const ost = stridesOf(O)
  const ast = stridesOf(A)
  const bst = stridesOf(B)
  const out = new Float64Array(size(O) * M * N)
  for (let bi = 0; bi < size(O); bi++) {
    let ai = 0
    let bj = 0
    let rem = bi
    for (let k = 0; k < r; k++) {
      const c = Math.floor(rem / ost[k]!)
      rem -= c * ost[k]!
      if (A[k] !== 1) ai += c * ast[k]!
      if (B[k] !== 1) bj += c * bst[k]!
    }
    const ad = a.d
    const bd = b.d
    for (let m = 0; m < M; m++) {
      const row = (bi * M + m) * N
      for (let kk = 0; kk < K; kk++) {
        const av = ad[(ai * M + m) * K + kk]!
        const bo = (bj * K + kk) * N
        for (let n = 0; n < N; n++) out[row + n] = out[row + n]! + av * bd[bo + n]!
      }
    }
  }
  return { d: out, s: [...O, M, N] }
}

function transpose (a: F64Tensor, perm: readonly number[]): F64Tensor {
  const os = perm.map(p => a.s[p]!)
  const ast = stridesOf(a.s)
  const ost = stridesOf(os)
  const out = new Float64Array(a.d.length)
  for (let i = 0; i < out.length; i++) {
    let rem = i
    let ai = 0
    for (let k = 0; k < os.length; k++) {
      const c = Math.floor(rem / ost[k]!)
      rem -= c * ost[k]!
      ai += c * ast[perm[k]!]!
    }
    out[i] = a.d[ai]!
  }
  return { d: out, s: os }
}

/** Applies f to every run of `inner` elements along `axis` (the elements at stride `inner` over dims[axis]). */
function alongAxis (a: F64Tensor, axis: number, f: (values: number[]) => number[]): F64Tensor {
  const outer = size(a.s.slice(0, axis))
  const n = a.s[axis]!
  const inner = size(a.s.slice(axis + 1))
  const out = Float64Array.from(a.d)
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < inner; i++) {
      const base = o * n * inner + i
      const values = Array.from({ length: n }, (_, k) => out[base + k * inner]!)
      f(values).forEach((v, k) => { out[base + k * inner] = v })
    }
  }
  return { d: out, s: a.s }
}

const softmaxOf = (xs: number[]): number[] => {
  const mx = Math.max(...xs)
  const e = xs.map(x => Math.exp(x - mx))
  const s = e.reduce((a, b) => a + b, 0)
  return e.map(x => x / s)
}

function conv (x: F64Tensor, w: F64Tensor, bias: F64Tensor | undefined, attr: (name: string) => OnnxAttribute | undefined): F64Tensor {
  if (x.s.length !== 4) throw new Unsupported('Conv other than 2-D')
  const [N, C, H, W] = x.s as [number, number, number, number]
  const [O, CG, KH, KW] = w.s as [number, number, number, number]
  const group = attr('group')?.i ?? 1
  const [sh, sw] = (attr('strides')?.ints ?? [1, 1]) as [number, number]
  const [dh, dw] = (attr('dilations')?.ints ?? [1, 1]) as [number, number]
  let pads = (attr('pads')?.ints ?? [0, 0, 0, 0])
  const autoPad = attr('auto_pad')?.s !== undefined ? new TextDecoder().decode(attr('auto_pad')!.s) : 'NOTSET'
  const ekh = (KH - 1) * dh + 1
  const ekw = (KW - 1) * dw + 1
  if (autoPad === 'VALID') pads = [0, 0, 0, 0]
  if (autoPad === 'SAME_UPPER' || autoPad === 'SAME_LOWER') {
    const total = (inSize: number, s: number, k: number): number => Math.max(0, (Math.ceil(inSize / s) - 1) * s + k - inSize)
    const th = total(H, sh, ekh)
    const tw = total(W, sw, ekw)
    const lo = (t: number): number => (autoPad === 'SAME_UPPER' ? Math.floor(t / 2) : Math.ceil(t / 2))
    pads = [lo(th), lo(tw), th - lo(th), tw - lo(tw)]
  }
  const [pt, pl, pb, pr] = pads as [number, number, number, number]
  const OH = Math.floor((H + pt + pb - ekh) / sh) + 1
  const OW = Math.floor((W + pl + pr - ekw) / sw) + 1
  const perGroup = O / group
  const out = new Float64Array(N * O * OH * OW)
  const xd = x.d
  const wd = w.d
  for (let n = 0; n < N; n++) {
    for (let o = 0; o < O; o++) {
      const g = Math.floor(o / perGroup)
      const plane = (n * O + o) * OH * OW
      out.fill(bias?.d[o] ?? 0, plane, plane + OH * OW)
      for (let c = 0; c < CG; c++) {
        const channel = (n * C + g * CG + c) * H * W
        for (let ky = 0; ky < KH; ky++) {
          for (let kx = 0; kx < KW; kx++) {
            const wv = wd[((o * CG + c) * KH + ky) * KW + kx]!
            for (let oy = 0; oy < OH; oy++) {
              const iy = oy * sh - pt + ky * dh
              if (iy < 0 || iy >= H) continue
              const orow = plane + oy * OW
              const irow = channel + iy * W
              for (let ox = 0; ox < OW; ox++) {
                const ix = ox * sw - pl + kx * dw
                if (ix >= 0 && ix < W) out[orow + ox] = out[orow + ox]! + xd[irow + ix]! * wv
              }
            }
          }
        }
      }
    }
  }
  return { d: out, s: [N, O, OH, OW] }
}

function tensorOf (t: OnnxTensor): F64Tensor {
  const s = t.dims ?? []
  const raw = t.rawData !== undefined ? new Uint8Array(t.rawData) : undefined
  switch (t.dataType) {
    case OnnxDataType.FLOAT: return { d: Float64Array.from(raw !== undefined ? new Float32Array(raw.buffer) : (t.floatData ?? [])), s }
    case OnnxDataType.INT64: return { d: Float64Array.from(raw !== undefined ? Array.from(new BigInt64Array(raw.buffer), Number) : (t.int64Data ?? [])), s }
    case OnnxDataType.INT32: return { d: Float64Array.from(raw !== undefined ? new Int32Array(raw.buffer) : (t.int32Data ?? [])), s }
    default: throw new Unsupported(`tensor type ${t.dataType}`)
  }
}

const norm = (axis: number, rank: number): number => (axis < 0 ? axis + rank : axis)

function evaluateNode (node: OnnxNode, ins: Array<F64Tensor | undefined>, opset: number): F64Tensor {
  const attr = (name: string): OnnxAttribute | undefined => node.attribute?.find(a => a.name === name)
  const x = ins[0]!
  const map = (f: (v: number) => number): F64Tensor => ({ d: x.d.map(f), s: x.s })
  switch (node.opType) {
    case 'Identity': case 'Dropout': return x
    case 'Add': return broadcast(x, ins[1]!, (a, b) => a + b)
    case 'Sub': return broadcast(x, ins[1]!, (a, b) => a - b)
    case 'Mul': return broadcast(x, ins[1]!, (a, b) => a * b)
    case 'Div': return broadcast(x, ins[1]!, (a, b) => a / b)
    case 'Relu': return map(v => Math.max(0, v))
    case 'LeakyRelu': { const alpha = attr('alpha')?.f ?? 0.01; return map(v => (v >= 0 ? v : v * alpha)) }
    case 'Sigmoid': return map(v => 1 / (1 + Math.exp(-v)))
    case 'Tanh': return map(Math.tanh)
    case 'Erf': return map(erf64)
    case 'Gelu': {
      const tanh = attr('approximate')?.s !== undefined && new TextDecoder().decode(attr('approximate')!.s) === 'tanh'
      return map(v => tanh
        ? 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v * v * v)))
        : 0.5 * v * (1 + erf64(v / Math.SQRT2)))
    }
    case 'MatMul': return matmul(x, ins[1]!)
    case 'Gemm': {
      let a = x
      let b = ins[1]!
      if ((attr('transA')?.i ?? 0) === 1) a = transpose(a, [1, 0])
      if ((attr('transB')?.i ?? 0) === 1) b = transpose(b, [1, 0])
      const alpha = attr('alpha')?.f ?? 1
      const beta = attr('beta')?.f ?? 1
      let y = matmul(a, b)
      y = { d: y.d.map(v => alpha * v), s: y.s }
      const c = ins[2]
      return c === undefined ? y : broadcast(y, c, (p, q) => p + beta * q)
    }
    case 'Softmax': {
      const rank = x.s.length
      const axis = norm(attr('axis')?.i ?? (opset >= 13 ? -1 : 1), rank)
      if (opset >= 13) return alongAxis(x, axis, softmaxOf)
      const flat = { d: x.d, s: [size(x.s.slice(0, axis)), size(x.s.slice(axis))] }
      return { d: alongAxis(flat, 1, softmaxOf).d, s: x.s }
    }
    case 'LayerNormalization': {
      const axis = norm(attr('axis')?.i ?? -1, x.s.length)
      const eps = Math.fround(attr('epsilon')?.f ?? 1e-5)
      const inner = size(x.s.slice(axis))
      const out = new Float64Array(x.d.length)
      for (let o = 0; o < x.d.length; o += inner) {
        let mean = 0
        for (let i = 0; i < inner; i++) mean += x.d[o + i]!
        mean /= inner
        let variance = 0
        for (let i = 0; i < inner; i++) variance += (x.d[o + i]! - mean) ** 2
        variance /= inner
        const inv = 1 / Math.sqrt(variance + eps)
        for (let i = 0; i < inner; i++) out[o + i] = (x.d[o + i]! - mean) * inv
      }
      let y: F64Tensor = { d: out, s: x.s }
      y = broadcast(y, ins[1]!, (p, q) => p * q)
      return ins[2] === undefined ? y : broadcast(y, ins[2], (p, q) => p + q)
    }
    case 'BatchNormalization': {
      const [scale, bias, mean, variance] = [ins[1]!, ins[2]!, ins[3]!, ins[4]!]
      const eps = Math.fround(attr('epsilon')?.f ?? 1e-5)
      const C = x.s[1]!
      const inner = size(x.s.slice(2))
      return { d: x.d.map((v, i) => { const c = Math.floor(i / inner) % C; return (v - mean.d[c]!) / Math.sqrt(variance.d[c]! + eps) * scale.d[c]! + bias.d[c]! }), s: x.s }
    }
    case 'Gather': {
      const idx = ins[1]!
      const axis = norm(attr('axis')?.i ?? 0, x.s.length)
      const outer = size(x.s.slice(0, axis))
      const n = x.s[axis]!
      const inner = size(x.s.slice(axis + 1))
      const out = new Float64Array(outer * idx.d.length * inner)
      for (let o = 0; o < outer; o++) {
        idx.d.forEach((raw, j) => {
          const k = raw < 0 ? raw + n : raw
          for (let i = 0; i < inner; i++) out[(o * idx.d.length + j) * inner + i] = x.d[(o * n + k) * inner + i]!
        })
      }
      return { d: out, s: [...x.s.slice(0, axis), ...idx.s, ...x.s.slice(axis + 1)] }
    }
    case 'Reshape': {
      const s = Array.from(ins[1]!.d, (d, i) => (d === 0 ? x.s[i]! : d))
      const k = s.indexOf(-1)
      if (k >= 0) s[k] = x.d.length / -size(s)
      return { d: x.d, s }
    }
    case 'Flatten': {
      const axis = norm(attr('axis')?.i ?? 1, x.s.length)
      return { d: x.d, s: [size(x.s.slice(0, axis)), size(x.s.slice(axis))] }
    }
    case 'Transpose': return transpose(x, attr('perm')?.ints ?? x.s.map((_, i) => x.s.length - 1 - i))
    case 'Squeeze': case 'Unsqueeze': {
      const axesList = opset >= 13 ? (ins[1] !== undefined ? Array.from(ins[1].d) : undefined) : attr('axes')?.ints
      if (axesList === undefined) throw new Unsupported(`${node.opType} without axes`)
      if (node.opType === 'Squeeze') {
        const axes = new Set(axesList.map(a => norm(a, x.s.length)))
        return { d: x.d, s: x.s.filter((_, i) => !axes.has(i)) }
      }
      const rank = x.s.length + axesList.length
      const axes = new Set(axesList.map(a => norm(a, rank)))
      const s: number[] = []
      let j = 0
      for (let i = 0; i < rank; i++) s.push(axes.has(i) ? 1 : x.s[j++]!)
      return { d: x.d, s }
    }
    case 'Concat': {
      const parts = ins as F64Tensor[]
      const axis = norm(attr('axis')!.i!, x.s.length)
      const outer = size(x.s.slice(0, axis))
      const widths = parts.map(p => size(p.s.slice(axis)))
      const total = widths.reduce((a, b) => a + b, 0)
      const out = new Float64Array(outer * total)
      for (let o = 0; o < outer; o++) {
        let at = 0
        parts.forEach((p, k) => {
          out.set(p.d.subarray(o * widths[k]!, (o + 1) * widths[k]!), o * total + at)
          at += widths[k]!
        })
      }
      return { d: out, s: x.s.map((d, i) => (i === axis ? parts.reduce((a, p) => a + p.s[axis]!, 0) : d)) }
    }
    case 'Conv': return conv(x, ins[1]!, ins[2], attr)
    default: throw new Unsupported(node.opType ?? '?')
  }
}

/** The graph's outputs in float64, or undefined when it has an op this evaluator does not know. */
export function evaluateF64 (bytes: Uint8Array, feeds: Readonly<Record<string, F64Tensor>>): Record<string, F64Tensor> | undefined {
  const model = decodeOnnxModel(bytes)
  const opset = model.opsetImport?.find(o => (o.domain ?? '') === '')?.version ?? 1
  const values = new Map<string, F64Tensor>(Object.entries(feeds))
  try {
    for (const t of model.graph?.initializer ?? []) values.set(t.name!, tensorOf(t))
    for (const node of model.graph?.node ?? []) {
      if (node.opType === 'Constant') {
        const value = node.attribute?.find(a => a.name === 'value' && a.type === OnnxAttributeType.TENSOR)
        if (value?.t === undefined) throw new Unsupported('Constant')
        values.set(node.output![0]!, tensorOf(value.t))
        continue
      }
      const ins = (node.input ?? []).map(n => (n === '' ? undefined : values.get(n)))
      values.set(node.output![0]!, evaluateNode(node, ins, opset))
    }
  } catch (err) {
    if (err instanceof Unsupported) return undefined
    throw err
  }
  return Object.fromEntries((model.graph?.output ?? []).map(o => [o.name!, values.get(o.name!)!]))
}
