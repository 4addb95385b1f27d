/**
 * The gateway's response cache: identical inference requests answered from memory (or from Redis, shared by every
 * gateway process and replica), and identical requests in flight coalesced into one upstream request.
 *
 * Which models: one whose config.pbtxt enables `response_cache` (learnt from the workers, `model-cache-config.ts`),
 * unless `cache.models.<name>.enabled` says otherwise; nothing else is cached. `cache.coalesce` extends coalescing
 * to models that are not cached.
 *
 * The key (`common/protocol/request-key.ts`): the model, the version the request goes to (the version it names,
 * else the canary side it was routed to, so a cached baseline answer never masks a canary), and the request's
 * content that changes the answer: each input's name, datatype, shape and bytes (so JSON, binary and gRPC forms of a
 * tensor share an entry), the requested outputs and their form, the parameters. Not the request id. 128 bits look
 * the entry up; the full 256-bit digest stored with it rules out a collision.
 *
 * Only complete 200 answers are stored, as the bytes the client received (`answer.ts`), and only when the request
 * and the answer are under `cache.max_entry_bytes`. `Cache-Control: no-cache` skips the look-up (the answer is still
 * stored); `no-store` skips both. Requests whose body the gateway would have to inflate or that are raw binary are
 * passed through (`bypass`). An entry is dropped when its TTL passes, when the LRU needs the room, when an operator
 * purges it, and when the model's answers start naming another version (the fleet rolled it).
 *
 * Nothing here can fail a request: a request the cache cannot key, a store that errs, a leader that fails, all fall
 * back to sending the request upstream as if there were no cache.
 */
import { parseInferenceHeaderLength, decodeHttpInferRequest, INFERENCE_HEADER_CONTENT_LENGTH } from '../../common/protocol/binary-codec.ts'
import { requestKey } from '../../common/protocol/request-key.ts'
import { type CacheConfig } from '../fleet/fleet-config.ts'
import { type Timers } from '../health/types.ts'
import { type CacheResult, type ForwardRequest, type ForwardResult, type ModelResult } from '../proxy/types.ts'
import { replay, toCachedAnswer } from './answer.ts'
import { Coalescer } from './coalescer.ts'
import { type LocalStore } from './local-store.ts'
import { modelKey, type CachedAnswer, type CacheStore } from './types.ts'


/** What the cache tells the gateway's metrics. */
export interface CacheObserver {
  request? (model: string, result: CacheResult): void
  /** A follower's wait for its leader, and how it ended. */
  coalesced? (model: string, outcome: 'answer' | 'leader_failed' | 'timeout' | 'aborted'): void
}

export interface ResponseCacheOptions {
  readonly settings: CacheConfig
  readonly local: LocalStore
  /** The shared tier (Redis), when configured. */
  readonly shared?: CacheStore | undefined
  /** Whether `model`'s config.pbtxt enables `response_cache`, as learnt from the workers (`undefined`: not known). */
  readonly enabledByModelConfig: (model: string) => boolean | undefined
  readonly timers: Timers
  /** Wall-clock ms (entries are shared across processes). */
  readonly wallClock?: () => number
  readonly observer?: CacheObserver
}

/** The cache's decision for one model. */
interface ModelCachePolicy {
  readonly cached: boolean
  readonly coalesce: boolean
  readonly ttlMs: number | undefined
}

/** One model's cache state (`GET /v1/cache`, `GET /v2/fleet`). */
export interface ModelCacheView {
  readonly cached: boolean
  readonly decided_by: string
  readonly coalesce: boolean
  readonly ttl_ms: number | null
  /** The version its answers last named, or null before the first. */
  readonly version: string | null
}

/** The whole cache's state (`GET /v1/cache`). */
export interface CacheView {
  readonly local: { readonly entries: number, readonly bytes: number, readonly max_bytes: number, readonly evictions: number }
  readonly shared: { readonly store: string } | null
  readonly coalescing: number
  readonly models: Readonly<Record<string, ModelCacheView>>
}

/** A request the cache looked at, and what to send upstream when it has no answer. */
export interface CacheCall {
  readonly model: string
  /** The version the request goes to, or the canary side; `undefined`: the model's latest. */
  readonly target: string | undefined
  readonly request: ForwardRequest
  /** The client's `Cache-Control`, if any. */
  readonly cacheControl: string | undefined
}


const NO_CACHE = /(?:^|[\s,])no-cache(?:$|[\s,;=])/i
const NO_STORE = /(?:^|[\s,])no-store(?:$|[\s,;=])/i

export class ResponseCache {
  readonly #settings: CacheConfig
  readonly #local: LocalStore
  readonly #shared: CacheStore | undefined
  readonly #enabledByModelConfig: (model: string) => boolean | undefined
  readonly #wallClock: () => number
  readonly #observer: CacheObserver
  readonly #coalescer: Coalescer<CachedAnswer>
  /**
   * Per model and target (the version or canary side a request goes to), the version its answers last named: a
   * change drops the model's entries. Per target, because a canary split by versions answers with two versions at
   * once, each stable on its side.
   */
  readonly #versions = new Map<string, string>()

  constructor (options: ResponseCacheOptions) {
    this.#settings = options.settings
    this.#local = options.local
    this.#shared = options.shared
    this.#enabledByModelConfig = options.enabledByModelConfig
    this.#wallClock = options.wallClock ?? Date.now
    this.#observer = options.observer ?? {}
    this.#coalescer = new Coalescer(options.timers, options.settings.coalesce_timeout_ms)
  }

  /** Requests waiting for an identical one in flight. */
  get coalescing (): number {
    return this.#coalescer.waiting
  }

  get local (): LocalStore {
    return this.#local
  }

  get shared (): CacheStore | undefined {
    return this.#shared
  }

  /** Whether `model`'s answers are cached, coalesced, and for how long. */
  policyFor (model: string): ModelCachePolicy {
    const own = this.#settings.models?.[model]
    const cached = own?.enabled ?? this.#enabledByModelConfig(model) ?? false
    const ttl = own?.ttl_ms ?? this.#settings.ttl_ms
    return { cached, coalesce: cached || this.#settings.coalesce, ttlMs: ttl > 0 ? ttl : undefined }
  }

  /**
   * Answers `call` from the cache, from an identical request in flight, or by `send` (the forwarder), storing what
   * `send` brings back when the model is cached. Never rejects unless `send` does.
   */
  async serve (call: CacheCall, send: () => Promise<ForwardResult>): Promise<ModelResult> {
    const { model } = call
    const policy = this.policyFor(model)
    if (!policy.coalesce) return send()
    const control = call.cacheControl
    const noStore = control !== undefined && NO_STORE.test(control)
    if (noStore) return this.#bypass(model, policy, send)
    const keyed = this.#keyOf(call)
    if (keyed === undefined) return this.#bypass(model, policy, send)
    const { key, check, id } = keyed

    if (policy.cached && !(control !== undefined && NO_CACHE.test(control))) {
      const found = await this.#lookup(key, check, policy, targetOf(call))
      if (found !== undefined) return this.#answer(model, found, id, 'hit')
    }

    let joined = this.#coalescer.join(key, call.request.signal)
    while (joined.role === 'follower') {
      const outcome = await joined.outcome
      if (outcome.kind === 'rejoin') {
        // The leader's client left: a new flight, led by whichever follower joins first.
        joined = this.#coalescer.join(key, call.request.signal)
        continue
      }
      this.#observer.coalesced?.(model, outcome.kind === 'answer' ? 'answer' : outcome.why)
      if (outcome.kind === 'answer') return this.#answer(model, outcome.value, id, 'coalesced')
      // On its own: not stored by a follower, which would race its leader's successor for nothing.
      const result = await send()
      return this.#counted(model, policy, result, 'miss')
    }
    let shared: CachedAnswer | undefined
    let leaderLeft = false
    try {
      const result = await send()
      leaderLeft = !result.ok && result.error.code === 'GW_ERR_CLIENT_CLOSED'
      if (result.ok && result.response.statusCode === 200 && result.response.body.length <= this.#settings.max_entry_bytes) {
        shared = toCachedAnswer(model, check, result.response, this.#wallClock())
        if (shared !== undefined && policy.cached) this.#store(key, shared, policy, targetOf(call))
      }
      return this.#counted(model, policy, result, 'miss')
    } finally {
      joined.settle(shared, leaderLeft)
    }
  }

  /**
   * What `flotilla cache stats`, `GET /v1/cache` and `GET /v2/fleet` show: the tiers, coalescing, and per model of
   * `models` whether it is cached, where that was decided, and for how long entries live.
   */
  view (models: readonly string[]): CacheView {
    const local = this.#local.stats()
    return {
      local: { entries: local.entries, bytes: local.bytes, max_bytes: local.maxBytes, evictions: local.evictions },
      shared: this.#shared === undefined ? null : { store: this.#shared.name },
      coalescing: this.#coalescer.waiting,
      models: Object.fromEntries(models.map((model) => [model, this.modelView(model)]))
    }
  }

  /** One model's cache state, as {@link view} shows it. */
  modelView (model: string): ModelCacheView {
    const policy = this.policyFor(model)
    const own = this.#settings.models?.[model]?.enabled
    const fromConfig = this.#enabledByModelConfig(model)
    return {
      cached: policy.cached,
      decided_by: own !== undefined ? 'fleet file (cache.models)' : fromConfig !== undefined ? 'config.pbtxt response_cache' : 'default (off)',
      coalesce: policy.coalesce,
      ttl_ms: policy.ttlMs ?? null,
      version: this.#versions.get(targetKey(model, undefined)) ?? null
    }
  }

  /** Drops `model`'s entries (every entry when undefined) from both tiers; how many the local tier held. */
  async purge (model?: string): Promise<{ local: number, shared: number | undefined }> {
    if (model === undefined) this.#versions.clear()
    else for (const key of [...this.#versions.keys()]) if (key.startsWith(targetKey(model, ''))) this.#versions.delete(key)
    const [local, shared] = await Promise.all([this.#local.purge(model), this.#shared?.purge(model)])
    return { local, shared }
  }

  async close (): Promise<void> {
    await Promise.all([this.#local.close(), this.#shared?.close()])
  }

  /** The request's key, or `undefined` when the cache cannot key it (too large, compressed, raw, malformed). */
  #keyOf (call: CacheCall): { key: string, check: string, id: string | undefined } | undefined {
    const { request } = call
    const body = request.body
    if (body === undefined || body.length > this.#settings.max_entry_bytes) return undefined
    const encoding = request.headers['content-encoding']
    if (encoding !== undefined && encoding !== 'identity') return undefined
    try {
      const headerLength = parseInferenceHeaderLength(request.headers[INFERENCE_HEADER_CONTENT_LENGTH], body.length)
      // A raw binary request needs the model's config to decode; rare enough to pass through.
      if (headerLength === 0) return undefined
      const decoded = decodeHttpInferRequest(body, headerLength)
      const { key, check } = requestKey(call.model, call.target ?? '', decoded)
      // The model leads the key, so that a store can drop one model's entries by prefix (Redis: SCAN MATCH).
      return { key: modelKey(call.model, key), check, id: decoded.id }
    } catch {
      // The worker answers a malformed request with its own 400.
      return undefined
    }
  }

  async #lookup (key: string, check: string, policy: ModelCachePolicy, target: string): Promise<CachedAnswer | undefined> {
    const local = this.#local.peek(key)
    if (local !== undefined) return local.check === check ? local : undefined
    const shared = this.#shared === undefined ? undefined : await this.#shared.get(key)
    if (shared === undefined || shared.check !== check) return undefined
    // A model whose versions changed since it was stored: stale (its entries are being purged).
    const seen = this.#versions.get(target)
    if (seen !== undefined && seen !== shared.version) return undefined
    this.#local.put(key, shared, remainingTtl(shared, policy, this.#wallClock()))
    return shared
  }

  #store (key: string, answer: CachedAnswer, policy: ModelCachePolicy, target: string): void {
    const seen = this.#versions.get(target)
    this.#versions.set(target, answer.version)
    if (seen !== undefined && seen !== answer.version) {
      // The fleet now serves another version: everything stored for the model answered for the old one.
      void this.purge(answer.model).then(() => { this.#versions.set(target, answer.version) })
    }
    this.#local.put(key, answer, policy.ttlMs)
    void this.#shared?.set(key, answer, policy.ttlMs)
  }

  #answer (model: string, entry: CachedAnswer, id: string | undefined, result: 'hit' | 'coalesced'): ModelResult {
    this.#observer.request?.(model, result)
    return { ok: true, endpoint: undefined, response: replay(entry, id), cache: result }
  }

  async #bypass (model: string, policy: ModelCachePolicy, send: () => Promise<ForwardResult>): Promise<ModelResult> {
    const result = await send()
    return this.#counted(model, policy, result, 'bypass')
  }

  /** `result` labelled for a cached model; a model that is only coalesced gets no header. */
  #counted (model: string, policy: ModelCachePolicy, result: ForwardResult, as: CacheResult): ModelResult {
    if (!policy.cached) return result
    this.#observer.request?.(model, as)
    return { ...result, cache: as }
  }
}

/** The {@link ResponseCache} version-tracking key of a model and the target its requests go to. */
function targetKey (model: string, target: string | undefined): string {
  return `${model}\n${target ?? ''}`
}

function targetOf (call: CacheCall): string {
  return targetKey(call.model, call.target)
}

/** What is left of a shared entry's TTL when it is copied into the local tier. */
function remainingTtl (entry: CachedAnswer, policy: ModelCachePolicy, now: number): number | undefined {
  if (policy.ttlMs === undefined) return undefined
  return Math.max(1, policy.ttlMs - (now - entry.storedAt))
}
