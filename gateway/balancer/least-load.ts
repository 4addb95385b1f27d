/**
 * The scan shared by `least_connections` and `least_queue`: the eligible endpoint with the least load per unit of
 * weight, ties broken round-robin. The load is in-flight, plus the reported queue depth while fresh for
 * `least_queue` (its rationale is in `least-queue.ts`). Both loads are computed here, behind one flag, rather than
 * through a load callback: a callback site that sees two functions (both strategies in one gateway, one per model)
 * stops being inlined, which measured 1.5-2x slower per pick at 300 endpoints.
 *
 * Why a rotating start for ties: when loads tie (an idle fleet, or all queues reading 0), a scan that keeps the
 * first minimum sends everything to the first server until its load moves, the trap sglang#1417 describes for
 * shortest-queue routing. Starting each scan just after the previous pick, and keeping the first minimum from
 * there, makes ties rotate like round robin while a strictly lighter endpoint still always wins. HAProxy's
 * `leastconn` rotates among ties the same way; NGINX's `least_conn` runs its weighted round robin among them.
 *
 * Loads are compared by cross-multiplication, `load(a) × weight(b) < load(b) × weight(a)`, as NGINX's `least_conn`
 * does, so there is no division per endpoint and weights are exact. Weight 0 takes no traffic.
 */
import { scanCopy } from './copy.ts'
import { type Endpoint } from './types.ts'

/**
 * One candidate set's scan state: where the next scan starts, and the plain copy of the set that scans read (see
 * `copy.ts`). An object so the WeakMap lookup is the only per-pick work.
 */
export interface ScanCursor {
  next: number
  readonly list: readonly Endpoint[]
}

/**
 * A new cursor for `candidates`, at a random offset so that gateway replicas started together break their first
 * ties differently. Once per candidate set.
 */
export function newScanCursor (candidates: readonly Endpoint[], random: () => number): ScanCursor {
  return { next: Math.floor(random() * candidates.length), list: scanCopy(candidates) }
}

/** The cursor of `candidates`, created (once per candidate set, not per pick) on first use. */
export function scanCursorFor (cursors: WeakMap<readonly Endpoint[], ScanCursor>, candidates: readonly Endpoint[],
  random: () => number): ScanCursor {
  let cursor = cursors.get(candidates)
  if (cursor === undefined) {
    cursor = newScanCursor(candidates, random)
    cursors.set(candidates, cursor)
  }
  return cursor
}

/**
 * The eligible endpoint of the cursor's set with the least `load / weight`, the first such from `cursor.next` on
 * (wrapping), and moves the cursor past it. Eligible: not in `exclude` and weight > 0.
 *
 * The load is `inFlight`, plus `queueDepth` when `staleAfterMs` is given and the report is fresh: made at a finite
 * time (`queueDepthAt` neither -Infinity nor NaN) at most `staleAfterMs` before `now`, with a depth > 0 (a NaN or
 * negative depth counts as no report).
 *
 * @param now the pick's clock reading, read once by the caller; unused without `staleAfterMs`
 * @param staleAfterMs `undefined` for in-flight alone (least connections)
 * @returns `undefined` when no candidate is eligible (the cursor does not move then)
 */
export function pickLeastLoaded (cursor: ScanCursor, exclude: ReadonlySet<Endpoint> | undefined, now: number,
  staleAfterMs: number | undefined): Endpoint | undefined {
  const withQueue = staleAfterMs !== undefined
  const maxAge = staleAfterMs ?? 0
  const candidates = cursor.list
  const n = candidates.length
  let best: Endpoint | undefined
  let bestIndex = -1
  let bestLoad = 0
  let bestWeight = 0
  const start = cursor.next
  for (let k = 0; k < n; k++) {
    const i = start + k < n ? start + k : start + k - n
    const endpoint = candidates[i]
    if (endpoint === undefined) continue
    const weight = endpoint.weight
    if (!(weight > 0) || (exclude !== undefined && exclude.has(endpoint))) continue
    let l = endpoint.inFlight
    if (withQueue) {
      const depth = endpoint.queueDepth
      const at = endpoint.queueDepthAt
      // Written so that a NaN or -Infinity report time (never reported, even with `staleAfterMs: Infinity`) and
      // a NaN depth all fail the test and count as no report.
      if (at > Number.NEGATIVE_INFINITY && now - at <= maxAge && depth > 0) l += depth
    }
    if (best === undefined || l * bestWeight < bestLoad * weight) {
      best = endpoint
      bestIndex = i
      bestLoad = l
      bestWeight = weight
    }
  }
  if (best !== undefined) cursor.next = bestIndex + 1 < n ? bestIndex + 1 : 0
  return best
}
