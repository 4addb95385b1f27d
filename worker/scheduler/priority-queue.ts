/**
 * The dynamic batcher's queue, after Triton's `PriorityQueue` (core `src/scheduler_utils.cc`, triton-behaviour.md
 * §6.5, §6.6): one FIFO per priority level, level 1 served first, each level with its own queue policy.
 *
 *   level 1: [ main: unexpired requests, arrival order ] [ delayed: DELAY-expired requests, expiry order ]
 *   level 2: [ main ...                                 ] [ delayed ...                                   ]
 *   ...
 *   service order = level 1 main, level 1 delayed, level 2 main, level 2 delayed, ...
 *
 * - `priority_levels: 0`: one level, `default_queue_policy`; the request's priority is ignored.
 * - `priority_levels: N`: a request's `priority` p is its level when 1 <= p <= N, else `default_priority_level`.
 * - `max_queue_size` counts a level's queued requests, delayed ones included (not executing ones); a full level
 *   refuses at enqueue.
 * - A request's timeout is the level's `default_timeout_microseconds`, or its own `timeout` parameter when
 *   `allow_timeout_override` is set and that is non-zero and smaller (a larger one is ignored). Its clock starts at
 *   enqueue; it expires once `now > enqueue + timeout` (Triton's strict comparison), and only while queued:
 *   REJECT removes it (the caller answers 503 "Request timeout expired"), DELAY moves it behind the level's
 *   unexpired requests, where it no longer expires.
 *
 * Timeouts are applied by {@link PriorityRequestQueue.expire}, which the batcher calls before forming a batch and
 * from a timer at {@link PriorityRequestQueue.nextDeadlineNs}, so a request is rejected on time even while every
 * instance is busy. No I/O, no clock: `now` is passed in.
 */
import { type DynamicBatching, type QueuePolicy } from '../repository/types.ts'
import { type Parameters } from '../../common/protocol/types.ts'
import { Deque } from './deque.ts'

/** What the queue needs of a request. */
export interface QueuedItem {
  /** max(1, the request's batch size): what it adds to a batch. */
  readonly size: number
  readonly enqueueNs: bigint
  /** When it expires (`now > deadlineNs`); {@link NO_DEADLINE} when it cannot (also after a DELAY move). */
  deadlineNs: bigint
}

/** A deadline later than any clock reading. */
export const NO_DEADLINE = BigInt(Number.MAX_SAFE_INTEGER) * 1_000_000n

/** One priority level's requests. */
export interface PriorityLevel<T> {
  /** Unexpired requests, in arrival order. */
  readonly main: Deque<T>
  /** Requests a DELAY policy moved back, in the order they expired. Served after `main`. */
  readonly delayed: Deque<T>
}

interface Level<T> extends PriorityLevel<T> {
  readonly policy: QueuePolicy
  /** Whether any request of this level can ever expire. */
  readonly timesOut: boolean
}

/** The `priority` request parameter as Triton reads it: a positive integer, else 0 ("use the default level"). */
export function requestPriority (parameters: Readonly<Parameters>): number {
  const p = parameters.priority
  return typeof p === 'number' && Number.isInteger(p) && p > 0 ? p : 0
}

/**
 * The `timeout` request parameter in microseconds, else 0 ("none given"). A negative value (possible over gRPC's
 * int64) is what Triton's uint64 makes of it, larger than any default, so it never shortens anything: 0 here.
 */
export function requestTimeoutUs (parameters: Readonly<Parameters>): number {
  const t = parameters.timeout
  return typeof t === 'number' && Number.isInteger(t) && t > 0 ? t : 0
}

export class PriorityRequestQueue<T extends QueuedItem> {
  readonly #levels: Array<Level<T>>
  /** Index into #levels of `default_priority_level`. */
  readonly #defaultIndex: number
  #size = 0
  /** No queued request expires before this; may be early (a request it was for has left), never late. */
  #nextDeadlineNs = NO_DEADLINE

  constructor (batching: DynamicBatching) {
    const count = Math.max(1, batching.priority_levels)
    this.#levels = []
    for (let level = 1; level <= count; level++) {
      const policy = batching.priority_levels === 0
        ? batching.default_queue_policy
        : batching.priority_queue_policy[String(level)] ?? batching.default_queue_policy
      this.#levels.push({
        main: new Deque<T>(),
        delayed: new Deque<T>(),
        policy,
        timesOut: policy.default_timeout_microseconds > 0
      })
    }
    this.#defaultIndex = batching.priority_levels === 0
      ? 0
      : Math.min(count, Math.max(1, batching.default_priority_level)) - 1
  }

  /** Queued requests, delayed ones included. */
  get size (): number { return this.#size }

  /** The levels in service order (index 0 = level 1), for the batch former to walk. */
  get levels (): ReadonlyArray<PriorityLevel<T>> { return this.#levels }

  get nextDeadlineNs (): bigint { return this.#nextDeadlineNs }

  /** The level index (0-based) a request with this `priority` parameter goes to. */
  levelIndexOf (priority: number): number {
    return priority >= 1 && priority <= this.#levels.length && this.#levels.length > 1
      ? priority - 1
      : this.#defaultIndex
  }

  /** Whether the level is at its `max_queue_size`. */
  isFull (levelIndex: number): boolean {
    const level = this.#levels[levelIndex] as Level<T>
    const max = level.policy.max_queue_size
    return max > 0 && level.main.length + level.delayed.length >= max
  }

  /** The deadline a request enqueued `now` on this level gets, given its `timeout` parameter (µs, 0 = none). */
  deadlineFor (levelIndex: number, timeoutUs: number, now: bigint): bigint {
    const policy = (this.#levels[levelIndex] as Level<T>).policy
    let us = policy.default_timeout_microseconds
    if (us === 0) return NO_DEADLINE
    if (policy.allow_timeout_override && timeoutUs !== 0 && timeoutUs < us) us = timeoutUs
    return now + BigInt(us) * 1000n
  }

  /** Appends to the level's queue; the caller checked {@link isFull}. */
  push (item: T, levelIndex: number): void {
    const level = this.#levels[levelIndex] as Level<T>
    level.main.push(item)
    this.#size++
    if (item.deadlineNs < this.#nextDeadlineNs) this.#nextDeadlineNs = item.deadlineNs
  }

  /** Removes `item` wherever it waits (a cancelled request); whether it was queued. */
  remove (item: T): boolean {
    for (const level of this.#levels) {
      if (level.main.remove(item) || level.delayed.remove(item)) {
        this.#size--
        return true
      }
    }
    return false
  }

  /** Removes the first request in service order. */
  shift (): T | undefined {
    for (const level of this.#levels) {
      const item = level.main.length > 0 ? level.main.shift() : level.delayed.shift()
      if (item !== undefined) {
        this.#size--
        return item
      }
    }
    return undefined
  }

  /**
   * Applies the queue policies at `now`: every request past its deadline is rejected (pushed to `rejected`, in
   * service order) or moved to its level's delayed queue. Cheap when nothing can have expired.
   */
  expire (now: bigint, rejected: T[]): void {
    if (now <= this.#nextDeadlineNs) return
    let next = NO_DEADLINE
    for (const level of this.#levels) {
      if (!level.timesOut) continue
      const reject = level.policy.timeout_action === 'REJECT'
      level.main.removeWhere(item => {
        if (now > item.deadlineNs) {
          if (reject) {
            rejected.push(item)
            this.#size--
          } else {
            item.deadlineNs = NO_DEADLINE
            level.delayed.push(item)
          }
          return true
        }
        if (item.deadlineNs < next) next = item.deadlineNs
        return false
      })
    }
    this.#nextDeadlineNs = next
  }
}
