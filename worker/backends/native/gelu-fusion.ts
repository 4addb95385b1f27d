/**
 * Finds GELU written out with Erf, as exporters emit it before opset 20 (PyTorch's nn.GELU, BERT's gelu):
 *
 *   y = x * 0.5 * (1 + Erf(x / sqrt 2))
 *
 * in the orders they produce: `x / 1.4142135` or `x * 0.70710678` (either operand order) into Erf, `+ 1` (either
 * order), then one of
 *   (a) (x * t) * 0.5              Mul(x, t) then Mul(., 0.5)
 *   (b) (x * 0.5) * t              Mul(x, 0.5) computed apart, then Mul(., t)
 *   (c) x * (t * 0.5)              Mul(t, 0.5) then Mul(x, .)
 * Each matched chain becomes one Gelu node (approximate 'none') in the place of its last node. An intermediate read by
 * anything else, or that is a graph output, stops the match: the chain then runs op by op.
 */
import { NodeAttributes, type GraphNode } from './onnx-graph.ts'
import { type Value } from './shape-inference.ts'

const SQRT2 = Math.SQRT2

function near (v: number, target: number): boolean {
  return Math.abs(v - target) <= 1e-5 * Math.abs(target)
}

/** Rewrites `nodes` (in execution order); `values` gives the constants, `graphOutputs` the names that must stay. */
export function fuseGelu (nodes: readonly GraphNode[], values: ReadonlyMap<string, Value>,
  graphOutputs: ReadonlySet<string>): GraphNode[] {
  const producer = new Map<string, GraphNode>()
  const readers = new Map<string, GraphNode[]>()
  for (const n of nodes) {
    for (const o of n.outputs) producer.set(o, n)
    for (const i of n.inputs) {
      if (i === '') continue
      const list = readers.get(i)
      if (list === undefined) readers.set(i, [n])
      else list.push(n)
    }
  }
  /** The only node reading `name`, when it is read once and is not a graph output. */
  const soleReader = (name: string): GraphNode | undefined => {
    const r = readers.get(name)
    return r !== undefined && r.length === 1 && !graphOutputs.has(name) ? r[0] : undefined
  }
  const scalar = (name: string | undefined): number | undefined => {
    const c = name === undefined ? undefined : values.get(name)?.constant
    return c !== undefined && c.dtype === 'float32' && c.data.length === 1 ? Number(c.data[0]) : undefined
  }
  /** For a binary node with a constant scalar operand near `target`: the other operand. */
  const otherThan = (n: GraphNode, op: string, target: number, commutative: boolean): string | undefined => {
    if (n.opType !== op || n.inputs.length !== 2) return undefined
    const [a, b] = n.inputs as [string, string]
    const sb = scalar(b)
    if (sb !== undefined && near(sb, target)) return a
    const sa = scalar(a)
    if (commutative && sa !== undefined && near(sa, target)) return b
    return undefined
  }
  const removed = new Set<GraphNode>()
  const replacement = new Map<GraphNode, GraphNode>()

  for (const erf of nodes) {
    if (erf.opType !== 'Erf' || removed.has(erf)) continue
    const u = erf.inputs[0] ?? ''
    const scale = producer.get(u)
    if (scale === undefined || soleReader(u) !== erf) continue
    const x = otherThan(scale, 'Div', SQRT2, false) ?? otherThan(scale, 'Mul', Math.SQRT1_2, true)
    if (x === undefined) continue
    const e = erf.outputs[0]!
    const add = soleReader(e)
    if (add === undefined || otherThan(add, 'Add', 1, true) !== e) continue
    const t = add.outputs[0]!
    const m1 = soleReader(t)
    if (m1 === undefined || m1.opType !== 'Mul' || m1.inputs.length !== 2) continue
    const other = m1.inputs[0] === t ? m1.inputs[1]! : m1.inputs[0]!
    const chain = [scale, erf, add, m1]
    let last: GraphNode | undefined
    if (other === x) {
      // (a) (x * t) * 0.5
      const m2 = soleReader(m1.outputs[0]!)
      if (m2 !== undefined && otherThan(m2, 'Mul', 0.5, true) === m1.outputs[0]) last = m2
    } else if (scalar(other) !== undefined && near(scalar(other)!, 0.5)) {
      // (c) x * (t * 0.5)
      const m2 = soleReader(m1.outputs[0]!)
      if (m2 !== undefined && m2.opType === 'Mul' && m2.inputs.includes(x) && m2.inputs.includes(m1.outputs[0]!)) last = m2
    } else {
      // (b) (x * 0.5) * t
      const half = producer.get(other)
      if (half !== undefined && otherThan(half, 'Mul', 0.5, true) === x) {
        last = m1
        if (soleReader(other) === m1) chain.push(half)
      }
    }
    if (last === undefined) continue
    if (last !== m1) chain.push(last)
    for (const n of chain) removed.add(n)
    replacement.set(last, {
      name: last.name,
      opType: 'Gelu',
      inputs: [x],
      outputs: [last.outputs[0]!],
      attrs: new NodeAttributes([])
    })
  }
  if (removed.size === 0) return [...nodes]
  const out: GraphNode[] = []
  for (const n of nodes) {
    const r = replacement.get(n)
    if (r !== undefined) out.push(r)
    else if (!removed.has(n)) out.push(n)
  }
  return out
}
