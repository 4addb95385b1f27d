/**
 * Triton's batch-forming rule (core `DynamicBatchScheduler::GetDynamicBatch`, triton-behaviour.md §6.4), as a pure
 * function of the queue and the time: no I/O, no timers. The batcher calls {@link formBatch} only while an instance
 * is idle, and sends the first `count` requests in service order, or waits until `untilNs` (or a new arrival).
 *
 * Walking the queue from the head, with s = the pending batch's size so far and b = the next request's size:
 *   - the first request starts the batch;
 *   - if s + b > max(preferred) and no cut is marked yet, mark a cut at s (the overshoot rule: P={4}, [3,2] sends 3);
 *   - if s + b > max_batch_size, or the request's shapes differ from the first's, stop: send now;
 *   - else add it; if the new s is a preferred size, mark a cut there (later, larger ones win).
 * Then, with `expired` = max_queue_delay > 0 and the oldest pending request has waited at least that long:
 *   - a cut and not expired: send up to the cut;
 *   - "send now", or s >= max(preferred): send everything pending;
 *   - expired, or max_queue_delay = 0: send everything pending (the largest compatible batch, not a preferred size);
 *   - else wait until the oldest pending request has waited max_queue_delay.
 *
 * Requests batch together only when their non-batch shapes match (`RequiredEqualInputs`, §6.3): for inputs with a
 * variable dimension that do not allow ragged batches, and for shape tensors (shape and contents); a model with
 * optional inputs also needs the same set of inputs. {@link ShapeCheck.fromConfig} says which apply.
 */
import { BytesData } from '../../common/protocol/bytes-data.ts'
import { type Tensor, type TensorData } from '../../common/protocol/types.ts'
import { type BackendRequest } from '../backends/types.ts'
import { type ModelConfig } from '../repository/types.ts'
import { type PriorityLevel, type QueuedItem } from './priority-queue.ts'

/** The numbers the rule works with, from the config once. */
export interface BatchRules {
  /** max(1, max_batch_size). */
  readonly maxBatchSize: number
  /** Preferred sizes; empty with max_batch_size > 0 means [max_batch_size] (Triton's normalisation). */
  readonly preferred: ReadonlySet<number>
  /** max(preferred), 0 when none. */
  readonly maxPreferred: number
  /** max_queue_delay_microseconds in ns. */
  readonly delayNs: bigint
}

export function batchRules (config: ModelConfig): BatchRules {
  const maxBatchSize = Math.max(1, config.max_batch_size)
  const sizes = config.dynamic_batching?.preferred_batch_size ?? []
  const preferred = new Set(sizes.length === 0 && config.max_batch_size > 0 ? [config.max_batch_size] : sizes)
  let maxPreferred = 0
  for (const size of preferred) maxPreferred = Math.max(maxPreferred, size)
  const delayUs = config.dynamic_batching?.max_queue_delay_microseconds ?? 0
  return { maxBatchSize, preferred, maxPreferred, delayNs: BigInt(delayUs) * 1000n }
}

/** What the queue holds for the former: a request and its queue bookkeeping. */
export interface FormableItem extends QueuedItem {
  readonly request: BackendRequest
}

export type Formation =
  /** Send the first `count` requests in service order, `size` inferences in all. */
  | { readonly kind: 'send', readonly count: number, readonly size: number }
  /** Nothing to send yet; look again at `untilNs` (or when a request arrives). */
  | { readonly kind: 'wait', readonly untilNs: bigint }
  /** The queue is empty. */
  | { readonly kind: 'empty' }

const EMPTY: Formation = { kind: 'empty' }

/**
 * Decides the next batch. `flush` treats the delay as expired (a stopping batcher: nothing more will arrive).
 * Visits at most max_batch_size + 1 requests.
 */
export function formBatch<T extends FormableItem> (
  levels: ReadonlyArray<PriorityLevel<T>>, now: bigint, rules: BatchRules, shapes: ShapeCheck | undefined, flush = false
): Formation {
  let count = 0
  let size = 0
  let cutCount = 0
  let cutSize = 0
  let sendNow = false
  let oldest = 0n
  let first: BackendRequest | undefined

  walk:
  for (const level of levels) {
    for (let q = 0; q < 2; q++) {
      const queue = q === 0 ? level.main : level.delayed
      for (let i = 0; i < queue.length; i++) {
        const item = queue.at(i) as T
        const b = item.size
        if (first === undefined) {
          first = item.request
          oldest = item.enqueueNs
        } else {
          if (size + b > rules.maxPreferred && cutCount === 0) {
            cutCount = count
            cutSize = size
          }
          if (size + b > rules.maxBatchSize) {
            sendNow = true
            break walk
          }
          if (shapes !== undefined && !shapes.matches(first, item.request)) {
            sendNow = true
            break walk
          }
          if (item.enqueueNs < oldest) oldest = item.enqueueNs
        }
        size += b
        count++
        if (rules.preferred.has(size)) {
          cutCount = count
          cutSize = size
        }
      }
    }
  }

  if (count === 0) return EMPTY
  const expired = flush || (rules.delayNs > 0n && now - oldest >= rules.delayNs)
  if (cutCount !== 0 && !expired) return { kind: 'send', count: cutCount, size: cutSize }
  if (sendNow || size >= rules.maxPreferred || expired || rules.delayNs === 0n) return { kind: 'send', count, size }
  return { kind: 'wait', untilNs: oldest + rules.delayNs }
}

/** Which inputs must agree for two requests to share a batch (core `RequiredEqualInputs`). */
export class ShapeCheck {
  /** Inputs compared by shape (without the batch dimension). */
  readonly #shapeInputs: readonly string[]
  /** Shape tensors: compared by full shape and contents. */
  readonly #shapeTensors: readonly string[]
  /** The model has optional inputs: requests must give the same set. */
  readonly #sameInputSet: boolean
  /** 1 when the leading dimension is the batch dimension. */
  readonly #skip: number

  constructor (config: ModelConfig) {
    const shapeInputs: string[] = []
    const shapeTensors: string[] = []
    let sameInputSet = false
    for (const input of config.input) {
      if (input.is_shape_tensor) shapeTensors.push(input.name)
      else if (!input.allow_ragged_batch && input.dims.includes(-1)) shapeInputs.push(input.name)
      if (input.optional) sameInputSet = true
    }
    this.#shapeInputs = shapeInputs
    this.#shapeTensors = shapeTensors
    this.#sameInputSet = sameInputSet
    this.#skip = config.max_batch_size > 0 ? 1 : 0
  }

  /** The checks a model's config calls for; undefined when any two requests may batch together. */
  static fromConfig (config: ModelConfig): ShapeCheck | undefined {
    const check = new ShapeCheck(config)
    return check.#shapeInputs.length === 0 && check.#shapeTensors.length === 0 && !check.#sameInputSet ? undefined : check
  }

  /** Whether `other` may join a batch that `first` started. */
  matches (first: BackendRequest, other: BackendRequest): boolean {
    if (this.#sameInputSet) {
      if (first.inputs.size !== other.inputs.size) return false
      for (const name of other.inputs.keys()) if (!first.inputs.has(name)) return false
    }
    for (const name of this.#shapeInputs) {
      const a = first.inputs.get(name)
      const b = other.inputs.get(name)
      if (a === undefined || b === undefined) {
        if (a !== b) return false
        continue
      }
      if (!sameDims(a.shape, b.shape, this.#skip)) return false
    }
    for (const name of this.#shapeTensors) {
      const a = first.inputs.get(name)
      const b = other.inputs.get(name)
      if (a === undefined || b === undefined) {
        if (a !== b) return false
        continue
      }
      if (!sameDims(a.shape, b.shape, 0) || !sameContents(a, b)) return false
    }
    return true
  }
}

function sameDims (a: readonly number[], b: readonly number[], from: number): boolean {
  if (a.length !== b.length) return false
  for (let i = from; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

function sameContents (a: Tensor, b: Tensor): boolean {
  return sameData(a.data, b.data)
}

function sameData (a: TensorData, b: TensorData): boolean {
  if (a instanceof BytesData || b instanceof BytesData) {
    if (!(a instanceof BytesData) || !(b instanceof BytesData) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!sameBytes(a.get(i), b.get(i))) return false
    return true
  }
  return sameBytes(
    new Uint8Array(a.buffer, a.byteOffset, a.byteLength),
    new Uint8Array(b.buffer, b.byteOffset, b.byteLength)
  )
}

function sameBytes (a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}
