/**
 * What the gateway's response cache is made of (see `response-cache.ts`): entries, the stores that keep them (an
 * in-process LRU, and Redis shared by every gateway process and replica), and what they report.
 */

/**
 * One cached answer: a complete 200 as the client received it, stored once and replayed with the request id of
 * each hit.
 */
export interface CachedAnswer {
  /** The model and the version that answered (an entry is dropped when the versions served change). */
  readonly model: string
  readonly version: string
  /**
   * The request's full digest, kept to rule out a collision of the shorter lookup key: a hit whose `check` differs
   * from the request's is a miss.
   */
  readonly check: string
  /** The answer's own headers that matter to replay it (`content-type`, `inference-header-content-length`). */
  readonly headers: Readonly<Record<string, string>>
  readonly body: Buffer
  /** Milliseconds since the epoch when it was stored (wall clock: entries are shared across processes). */
  readonly storedAt: number
}

/**
 * The key to cache an answer of `model` under: `${encodeURIComponent(model)}:${digest}` (`digest`: the request's
 * lookup hash). The model leads so that a store can drop one model's entries by prefix; `encodeURIComponent` keeps
 * `:` out of the model part, so one model's prefix never covers another's.
 */
export function modelKey (model: string, digest: string): string {
  return `${encodeURIComponent(model)}:${digest}`
}

/**
 * A place entries are kept. Never throws or rejects: a store that cannot answer (Redis down, slow, a corrupt entry)
 * answers "not there" and reports the error through its own options, so the cache can never fail a request.
 */
export interface CacheStore {
  /** For logs and metrics: `local`, `redis`. */
  readonly name: string
  /** The entry under `key`, or `undefined`. */
  get (key: string): Promise<CachedAnswer | undefined>
  /**
   * Keeps `answer` under `key`; `ttlMs` bounds its life (`undefined`: until evicted). Resolves once stored, or once
   * the store gave up; callers do not wait for it on the request path.
   */
  set (key: string, answer: CachedAnswer, ttlMs: number | undefined): Promise<void>
  /** Drops every entry of `model`, or every entry when `model` is undefined; resolves with how many it dropped, if known. */
  purge (model?: string): Promise<number | undefined>
  close (): Promise<void>
}
