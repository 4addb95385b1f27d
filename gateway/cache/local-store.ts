/**
 * The cache's first tier, in the gateway process: an LRU bounded in bytes (`cache.max_bytes`), with an optional TTL
 * per entry, on `lru-cache` (what npm itself and most of the ecosystem use; `maxSize` with `sizeCalculation` bounds
 * the bytes held, not the count). An entry counts as its body plus a fixed allowance for the key, headers and
 * bookkeeping, so that a flood of tiny answers is bounded too.
 */
import { LRUCache } from 'lru-cache'
import { type CachedAnswer, type CacheStore } from './types.ts'

/** What an entry costs beyond its body: the key, headers, the entry object and the LRU's own slots. */
const ENTRY_OVERHEAD_BYTES = 512

/** What the local store reports (the cache's metrics and `flotilla cache stats`). */
export interface LocalStoreStats {
  readonly entries: number
  readonly bytes: number
  readonly maxBytes: number
  readonly evictions: number
}

export class LocalStore implements CacheStore {
  readonly name = 'local'
  readonly #lru: LRUCache<string, CachedAnswer> | undefined
  readonly #maxBytes: number
  #evictions = 0

  /** @param maxBytes the budget; 0 keeps nothing (a Redis-only cache) */
  constructor (maxBytes: number) {
    this.#maxBytes = maxBytes
    this.#lru = maxBytes <= 0
      ? undefined
      : new LRUCache<string, CachedAnswer>({
        maxSize: maxBytes,
        sizeCalculation: (answer) => sizeOf(answer),
        // Expired entries are dropped when read, not on a timer per entry.
        ttlAutopurge: false,
        dispose: (_answer, _key, reason) => { if (reason === 'evict') this.#evictions++ }
      })
  }

  /** Synchronous: the request path reads the local tier without a promise. */
  peek (key: string): CachedAnswer | undefined {
    return this.#lru?.get(key)
  }

  async get (key: string): Promise<CachedAnswer | undefined> {
    return this.peek(key)
  }

  /** Synchronous set; an entry larger than the whole budget is not kept. */
  put (key: string, answer: CachedAnswer, ttlMs: number | undefined): void {
    const lru = this.#lru
    if (lru === undefined || sizeOf(answer) > this.#maxBytes) return
    lru.set(key, answer, ttlMs === undefined || ttlMs <= 0 ? undefined : { ttl: ttlMs })
  }

  async set (key: string, answer: CachedAnswer, ttlMs: number | undefined): Promise<void> {
    this.put(key, answer, ttlMs)
  }

  async purge (model?: string): Promise<number> {
    const lru = this.#lru
    if (lru === undefined) return 0
    if (model === undefined) {
      const n = lru.size
      lru.clear()
      return n
    }
    let n = 0
    for (const [key, answer] of lru.entries()) {
      if (answer.model === model) {
        lru.delete(key)
        n++
      }
    }
    return n
  }

  stats (): LocalStoreStats {
    return { entries: this.#lru?.size ?? 0, bytes: this.#lru?.calculatedSize ?? 0, maxBytes: this.#maxBytes, evictions: this.#evictions }
  }

  async close (): Promise<void> {
    this.#lru?.clear()
  }
}

function sizeOf (answer: CachedAnswer): number {
  return answer.body.length + ENTRY_OVERHEAD_BYTES
}
