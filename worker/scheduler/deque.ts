/**
 * A FIFO on a growable ring buffer (after undici `lib/dispatcher/fixed-queue.js`): push and shift are O(1), where
 * `Array.prototype.shift` is O(n). The scheduler's queues and its preserve_ordering list use it.
 *
 *   head                      head + length
 *    v                              v
 *   [ . . . a b c d e f . . . . . . ]    indexes wrap with `& mask`; the buffer doubles when full
 */
export class Deque<T> {
  #buffer: Array<T | undefined>
  #mask: number
  #head = 0
  #length = 0

  /** `capacity` is rounded up to a power of two. */
  constructor (capacity = 16) {
    let size = 4
    while (size < capacity) size *= 2
    this.#buffer = new Array<T | undefined>(size)
    this.#mask = size - 1
  }

  get length (): number { return this.#length }

  push (item: T): void {
    if (this.#length === this.#buffer.length) this.#grow()
    this.#buffer[(this.#head + this.#length) & this.#mask] = item
    this.#length++
  }

  /** Removes and returns the oldest item. */
  shift (): T | undefined {
    if (this.#length === 0) return undefined
    const item = this.#buffer[this.#head]
    this.#buffer[this.#head] = undefined
    this.#head = (this.#head + 1) & this.#mask
    this.#length--
    return item
  }

  /** The oldest item, left in place. */
  peek (): T | undefined {
    return this.#length === 0 ? undefined : this.#buffer[this.#head]
  }

  /** The item `index` places behind the head (0 = oldest); undefined out of range. */
  at (index: number): T | undefined {
    if (index < 0 || index >= this.#length) return undefined
    return this.#buffer[(this.#head + index) & this.#mask]
  }

  /**
   * Removes, in order, every item `remove` returns true for; the rest keep their order. O(n), for the rare sweeps
   * (queue timeouts), never for the per-request path.
   */
  removeWhere (remove: (item: T) => boolean): void {
    let kept = 0
    for (let i = 0; i < this.#length; i++) {
      const item = this.#buffer[(this.#head + i) & this.#mask] as T
      if (!remove(item)) {
        this.#buffer[(this.#head + kept) & this.#mask] = item
        kept++
      }
    }
    for (let i = kept; i < this.#length; i++) this.#buffer[(this.#head + i) & this.#mask] = undefined
    this.#length = kept
  }

  /** Removes `item` (the first occurrence); whether it was there. O(n), as {@link removeWhere}. */
  remove (item: T): boolean {
    let found = false
    this.removeWhere((x) => {
      if (found || x !== item) return false
      found = true
      return true
    })
    return found
  }

  #grow (): void {
    const old = this.#buffer
    const size = old.length * 2
    const next = new Array<T | undefined>(size)
    for (let i = 0; i < this.#length; i++) next[i] = old[(this.#head + i) & this.#mask]
    this.#buffer = next
    this.#mask = size - 1
    this.#head = 0
  }
}
