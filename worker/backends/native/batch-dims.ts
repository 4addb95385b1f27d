/**
 * Dimensions with the batch kept symbolic, as the plan carries them (native/src/plan.h): a dimension d >= 0 is fixed,
 * d < 0 means (-d) x batch. A tensor holds the batch at most once, so its element count is always `k` or `k x batch`;
 * anything that would need batch² (a product of two batch-scaled dimensions) cannot be planned and is refused.
 */

/** An element count (or a product of dimensions): `coef` elements, times the batch when `batched`. */
export interface BatchProduct {
  coef: number
  batched: boolean
}

/** `[batch, 64]`, `[64*batch, 128]`: dims as messages print them. */
export function formatDims (dims: readonly number[]): string {
  return `[${dims.map(d => d >= 0 ? String(d) : d === -1 ? 'batch' : `${-d}*batch`).join(', ')}]`
}

/** The product of `dims`; undefined when two of them scale with the batch. */
export function dimsProduct (dims: readonly number[]): BatchProduct | undefined {
  let coef = 1
  let batched = false
  for (const d of dims) {
    if (d < 0) {
      if (batched) return undefined
      batched = true
      coef *= -d
    } else {
      coef *= d
    }
  }
  return { coef, batched }
}

/** The dimension holding `p` elements: `coef`, or `-coef` when it scales with the batch. */
export function productToDim (p: BatchProduct): number {
  return p.batched ? -p.coef : p.coef
}

export function isFixed (dims: readonly number[]): boolean {
  return dims.every(d => d >= 0)
}

/** Element count of fixed dims. */
export function elementCount (dims: readonly number[]): number {
  let n = 1
  for (const d of dims) n *= d
  return n
}

/** Resolves batch-scaled dims for one batch size. */
export function resolveDims (dims: readonly number[], batch: number): number[] {
  return dims.map(d => d >= 0 ? d : -d * batch)
}

/**
 * Numpy broadcasting of two shapes; undefined when they do not broadcast. A batch-scaled dimension broadcasts with a
 * fixed 1 and with itself, never with another fixed size (that would hold at one batch size only).
 */
export function broadcastDims (a: readonly number[], b: readonly number[]): number[] | undefined {
  const rank = Math.max(a.length, b.length)
  const out = new Array<number>(rank)
  for (let i = 0; i < rank; i++) {
    const da = a[a.length - rank + i] ?? 1
    const db = b[b.length - rank + i] ?? 1
    if (da === db || db === 1) out[i] = da
    else if (da === 1) out[i] = db
    else return undefined
  }
  return out
}

/** An axis in [-rank, rank) made non-negative; undefined when out of range. */
export function normalizeAxis (axis: number, rank: number): number | undefined {
  if (!Number.isInteger(axis) || axis < -rank || axis >= rank) return undefined
  return axis < 0 ? axis + rank : axis
}
