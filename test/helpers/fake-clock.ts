/**
 * A fake monotonic clock with timers, for code that takes injected `now`/`setTimeout`/`clearTimeout`: time moves
 * only when a test calls `advance`, which runs due timers in time order, letting promises settle between them.
 */
export class FakeClock {
  #now = 0
  #seq = 0
  readonly #timers = new Map<number, { at: number, fn: () => void }>()

  now = (): number => this.#now

  setTimeout = (fn: () => void, ms: number): unknown => {
    const id = ++this.#seq
    this.#timers.set(id, { at: this.#now + Math.max(0, ms), fn })
    return id
  }

  clearTimeout = (handle: unknown): void => {
    this.#timers.delete(handle as number)
  }

  get pending (): number { return this.#timers.size }

  /** Moves time forward by `ms`, firing every timer due on the way (in order), then settles promises. */
  async advance (ms: number): Promise<void> {
    const end = this.#now + ms
    for (;;) {
      await settle()
      let next: [number, { at: number, fn: () => void }] | undefined
      for (const entry of this.#timers) {
        if (entry[1].at <= end && (next === undefined || entry[1].at < next[1].at || (entry[1].at === next[1].at && entry[0] < next[0]))) next = entry
      }
      if (next === undefined) break
      this.#timers.delete(next[0])
      this.#now = next[1].at
      next[1].fn()
    }
    this.#now = end
    await settle()
  }
}

/** Lets pending promise callbacks (several hops deep) run. */
async function settle (): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve()
}
