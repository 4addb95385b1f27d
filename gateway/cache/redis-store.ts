/**
 * The shared tier of the response cache: one Redis that every gateway process and replica reads and writes, behind
 * each process's own LRU. Redis is an optimisation, never a dependency: down, slow, hung or holding garbage, it
 * answers "miss" within `timeoutMs` and the request goes on to a worker.
 *
 * Client: node-redis (`@redis/client`, the core of the `redis` package without the RedisJSON, Search, Bloom and
 * TimeSeries command sets we have no use for). Chosen over ioredis because:
 * - maintenance: both are Redis Inc.'s, but ioredis's README calls it "maintained on a best-effort basis" and points
 *   new projects at node-redis, which follows new Redis releases;
 * - offline queue: `disableOfflineQueue` rejects a command at once (`ClientOfflineError`) while the client is not
 *   ready, and a socket that dies rejects what was in flight; nothing waits for a reconnect, nothing is resent late.
 *   ioredis needs `enableOfflineQueue: false` plus `maxRetriesPerRequest` and `autoResendUnfulfilledCommands: false`
 *   to get there;
 * - reconnection: `socket.reconnectStrategy(retries)` runs from the first connect on, so a Redis that is down when the
 *   gateway starts is retried in the background like one lost later; `connect()` only settles once ready;
 * - binary values: per-command `typeMapping: { BLOB_STRING: Buffer }` returns a bulk string as a Buffer (no UTF-8
 *   round trip), and Buffer arguments are written as they are; no base64 anywhere;
 * - no dependencies of its own, types shipped, Node >= 20; CommonJS whose named exports load from our ESM.
 * Neither client bounds the wait for a reply once a command is written (node-redis's own command `timeout` only
 * covers the time before it is written), so the deadline is ours: a timer raced against each command. A late reply
 * still arrives in order on the connection and is dropped.
 *
 * We speak RESP2 (node-redis 6 defaults to RESP3, which sends HELLO 3 first): GET, SET, SCAN and UNLINK need nothing
 * else, and RESP2 also works through proxies and servers that have no HELLO.
 *
 * A server that stops answering without closing the connection (SIGSTOP, a host gone from the network) is seen by no
 * client until TCP gives up, minutes later. A watchdog replaces the client when written commands have had no reply
 * for `hangTimeoutMs`, or when a connection attempt has been stuck that long (node-redis bounds the TCP connect but
 * not the handshake after it).
 *
 * Entry layout (one Redis string per entry; the body is never re-encoded):
 *
 *   0        3              7                 7+H
 *   | "FC1"  | H: u32 BE    | head: JSON, H B | body: head.bodyLength bytes (the rest of the value) |
 *
 *   head = { model, version, check, headers, storedAt, bodyLength }
 *
 * "FC" for Flotilla cache, "1" for this layout: a value that does not parse exactly (another layout, another writer,
 * a truncated value) is a miss, reported as a `get` error.
 *
 * Keys are `${keyPrefix}${key}`, and the cache's `key` must begin with its model: `${encodeURIComponent(model)}:`
 * (build it with {@link modelKey}). `get(key)` has no model to add, and a purge finds one model's entries by that
 * prefix with `SCAN MATCH`, then `UNLINK`s them in batches (UNLINK frees the memory off Redis's main thread). A set
 * whose key does not begin with its answer's model is refused (reported as a `set` error), so that no entry escapes
 * its model's purge.
 */
import { createClient, ErrorReply, type RedisArgument, type RedisClientType } from '@redis/client'
import { silentLogger, type Logger } from '../../common/logger.ts'
import { modelKey, type CacheStore, type CachedAnswer } from './types.ts'

/** Re-exported for the store's callers and tests; defined with the contract in `types.ts`. */
export { modelKey }

export const DEFAULT_REDIS_TIMEOUT_MS = 50
export const DEFAULT_REDIS_KEY_PREFIX = 'flotilla:cache:'

/** What failed, for `flotilla_cache_redis_errors_total{kind}`. */
export type RedisErrorKind = 'get' | 'set' | 'purge' | 'connection'

export interface RedisStoreOptions {
  /** `redis[s]://[[user][:password]@]host[:port][/db]`. Logged with the password removed. */
  url: string
  /** Deadline of each get and set, in ms: past it the answer is a miss. Default 50. */
  timeoutMs?: number
  /** Prepended to every key; purge() without a model drops everything under it. Default `flotilla:cache:`. */
  keyPrefix?: string
  /**
   * Called for every failure, never throws back: `get` and `set` once per call that could not use Redis (down, past
   * the deadline, a corrupt entry), `purge` once per failed purge, `connection` once per outage (when Redis becomes
   * unreachable, not per reconnect attempt).
   */
  onError?: (kind: RedisErrorKind, err: Error) => void
  /** Outages and recoveries, once each (warn, info). Default: silent. */
  logger?: Pick<Logger, 'warn' | 'info'>
  /** Deadline of each SCAN and UNLINK of a purge, in ms. Default 5000. */
  purgeTimeoutMs?: number
  /** SCAN's COUNT hint, and so the size of each UNLINK batch. Default 500. */
  scanCount?: number
  /** Longest wait between reconnect attempts, in ms (the backoff starts at 50 and doubles). Default 1000. */
  reconnectMaxMs?: number
  /** Bound on a TCP connect, in ms. Default 1000. */
  connectTimeoutMs?: number
  /** With no reply to a written command, or a connect stuck, for this long (ms), the connection is replaced. Default 2000. */
  hangTimeoutMs?: number
  /** Commands queued or awaiting a reply at most; past it a call fails at once (a hung server cannot pile up memory). Default 1000. */
  maxPending?: number
}

/** An error of this store's own making (the client's own errors are passed on as they are). */
export interface RedisStoreError extends Error {
  code: 'REDIS_CACHE_TIMEOUT' | 'REDIS_CACHE_CORRUPT_ENTRY' | 'REDIS_CACHE_OFFLINE' | 'REDIS_CACHE_HUNG' | 'REDIS_CACHE_BAD_KEY'
}

function storeError (code: RedisStoreError['code'], message: string): RedisStoreError {
  return Object.assign(new Error(message), { code })
}

const MAGIC = Buffer.from('FC1', 'latin1')
const HEAD_AT = MAGIC.length + 4
const BUFFER_REPLIES = { typeMapping: { 36 /* RESP_TYPES.BLOB_STRING, '$' */: Buffer } } as const
/** Leaving the `slow` state needs this long without a missed deadline, so borderline latency cannot flood the log. */
const SLOW_QUIET_MS = 10_000
const RECONNECT_JITTER_MS = 50
/** Bytes a decoded body may keep alive beyond its own (Buffer's 8 KiB pool slab, where small buffers live). */
const RETAIN_AT_MOST = 8192


/** `CachedAnswer` → one Buffer in the layout above. */
export function encodeEntry (answer: CachedAnswer): Buffer {
  const head = Buffer.from(JSON.stringify({
    model: answer.model,
    version: answer.version,
    check: answer.check,
    headers: answer.headers,
    storedAt: answer.storedAt,
    bodyLength: answer.body.length
  }))
  const out = Buffer.allocUnsafe(HEAD_AT + head.length + answer.body.length)
  MAGIC.copy(out, 0)
  out.writeUInt32BE(head.length, MAGIC.length)
  head.copy(out, HEAD_AT)
  answer.body.copy(out, HEAD_AT + head.length)
  return out
}

/** The inverse of {@link encodeEntry}; `undefined` for anything that is not exactly such a value. */
export function decodeEntry (value: Buffer): CachedAnswer | undefined {
  if (value.length < HEAD_AT || MAGIC.compare(value, 0, MAGIC.length) !== 0) return undefined
  const headLength = value.readUInt32BE(MAGIC.length)
  const bodyAt = HEAD_AT + headLength
  if (bodyAt > value.length) return undefined
  let head: unknown
  try {
    head = JSON.parse(value.toString('utf8', HEAD_AT, bodyAt))
  } catch {
    return undefined
  }
  if (typeof head !== 'object' || head === null) return undefined
  const { model, version, check, headers, storedAt, bodyLength } = head as Record<string, unknown>
  if (typeof model !== 'string' || typeof version !== 'string' || typeof check !== 'string') return undefined
  if (typeof storedAt !== 'number' || !Number.isFinite(storedAt)) return undefined
  if (bodyLength !== value.length - bodyAt) return undefined
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) return undefined
  for (const v of Object.values(headers)) if (typeof v !== 'string') return undefined
  const body = value.subarray(bodyAt)
  return {
    model,
    version,
    check,
    headers: headers as Record<string, string>,
    // A reply that came in one read is a slice of the socket's chunk (up to 64 KiB, other replies with it), which the
    // caller's LRU would keep alive whole: copy the body out then. One assembled from several reads is its own buffer.
    body: body.buffer.byteLength - body.length > RETAIN_AT_MOST ? Buffer.from(body) : body,
    storedAt
  }
}

/** `url` without its password, for logs. */
export function redactUrl (url: string): string {
  try {
    const u = new URL(url)
    if (u.password !== '') u.password = ''
    return u.toString()
  } catch {
    return '(unparsable url)'
  }
}

/** Escapes `*`, `?`, `[`, `]` and `\` for a SCAN MATCH pattern. */
function globEscape (s: string): string {
  return s.replace(/[*?[\]\\]/g, '\\$&')
}

function asError (err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err))
}

// RESP2, no modules, scripts or functions, the default type mapping (per-command mappings aside).
type Client = RedisClientType<{}, {}, {}, 2, {}>
type State = 'connecting' | 'up' | 'down' | 'closed'

/** {@link CacheStore} on Redis. Construct it and use it at once: it connects, and reconnects, in the background. */
export class RedisStore implements CacheStore {
  readonly name = 'redis'
  readonly #url: string
  readonly #safeUrl: string
  readonly #timeoutMs: number
  readonly #prefix: string
  readonly #onError: (kind: RedisErrorKind, err: Error) => void
  readonly #logger: Pick<Logger, 'warn' | 'info'>
  readonly #purgeTimeoutMs: number
  readonly #scanCount: number
  readonly #reconnectMaxMs: number
  readonly #connectTimeoutMs: number
  readonly #hangTimeoutMs: number
  readonly #maxPending: number
  readonly #timeoutError: RedisStoreError
  readonly #offlineError: RedisStoreError
  readonly #watchdog: NodeJS.Timeout
  #client: Client
  #state: State = 'connecting'
  #downSince = 0
  #slow = false
  #lastTimeoutAt = 0
  /** Commands sent and not settled, and when one last got an answer (or when the first of them was sent). */
  #pending = 0
  #lastProgressAt = 0
  /** When the client last reported on its connection (connect, ready, error, reconnecting). */
  #lastClientEventAt = 0

  constructor (options: RedisStoreOptions) {
    this.#url = options.url
    this.#safeUrl = redactUrl(options.url)
    this.#timeoutMs = positive('timeoutMs', options.timeoutMs, DEFAULT_REDIS_TIMEOUT_MS)
    this.#prefix = options.keyPrefix ?? DEFAULT_REDIS_KEY_PREFIX
    this.#onError = options.onError ?? (() => {})
    this.#logger = options.logger ?? silentLogger()
    this.#purgeTimeoutMs = positive('purgeTimeoutMs', options.purgeTimeoutMs, 5000)
    this.#scanCount = positive('scanCount', options.scanCount, 500)
    this.#reconnectMaxMs = positive('reconnectMaxMs', options.reconnectMaxMs, 1000)
    this.#connectTimeoutMs = positive('connectTimeoutMs', options.connectTimeoutMs, 1000)
    this.#hangTimeoutMs = positive('hangTimeoutMs', options.hangTimeoutMs, 2000)
    this.#maxPending = positive('maxPending', options.maxPending, 1000)
    // Between two reports of a healthy reconnect loop there is at most one backoff or one TCP connect.
    const loopGap = Math.max(this.#reconnectMaxMs + RECONNECT_JITTER_MS, this.#connectTimeoutMs)
    if (this.#hangTimeoutMs <= loopGap) {
      throw new RangeError(`RedisStore: hangTimeoutMs (${this.#hangTimeoutMs}) must exceed reconnectMaxMs + ${RECONNECT_JITTER_MS} and connectTimeoutMs (${loopGap})`)
    }
    // Shared instances: during an outage every call reports one, and none is ever thrown.
    this.#timeoutError = storeError('REDIS_CACHE_TIMEOUT', `Redis did not answer within ${this.#timeoutMs} ms`)
    this.#offlineError = storeError('REDIS_CACHE_OFFLINE', `Redis at ${this.#safeUrl} is not connected`)
    this.#client = this.#connect() // throws on a malformed url: a config error, at start
    this.#watchdog = setInterval(() => this.#checkHung(), Math.max(10, this.#hangTimeoutMs / 4))
    this.#watchdog.unref()
  }

  /** Whether Redis is connected now (for a `flotilla_cache_redis_up` gauge, and tests): calls go to it only then. */
  get connected (): boolean {
    return this.#state === 'up'
  }

  async get (key: string): Promise<CachedAnswer | undefined> {
    if (this.#state !== 'up') return this.#miss('get')
    const reply = await this.#command<Buffer | null>(['GET', this.#prefix + key], this.#timeoutMs, true)
    if (reply instanceof Error) return this.#miss('get', reply)
    if (reply === null) return undefined
    const answer = decodeEntry(reply)
    if (answer === undefined) {
      this.#report('get', storeError('REDIS_CACHE_CORRUPT_ENTRY', `the value under ${this.#prefix}${key} is not a cache entry (${reply.length} bytes)`))
    }
    return answer
  }

  async set (key: string, answer: CachedAnswer, ttlMs: number | undefined): Promise<void> {
    if (this.#state !== 'up') return void this.#miss('set')
    if (!key.startsWith(`${encodeURIComponent(answer.model)}:`)) {
      return void this.#report('set', storeError('REDIS_CACHE_BAD_KEY',
        `cache key ${JSON.stringify(key)} does not begin with its model ${JSON.stringify(modelKey(answer.model, ''))}: build it with modelKey()`))
    }
    const args: RedisArgument[] = ['SET', this.#prefix + key, encodeEntry(answer)]
    if (ttlMs !== undefined) args.push('PX', String(Math.max(1, Math.ceil(ttlMs))))
    const reply = await this.#command<string>(args, this.#timeoutMs, false)
    if (reply instanceof Error) this.#miss('set', reply)
  }

  async purge (model?: string): Promise<number | undefined> {
    const scope = model === undefined ? this.#prefix : `${this.#prefix}${encodeURIComponent(model)}:`
    const match = `${globEscape(scope)}*`
    let cursor = '0'
    let dropped = 0
    do {
      if (this.#state !== 'up') return this.#failPurge(this.#offlineError)
      const page = await this.#command<[string, string[]]>(
        ['SCAN', cursor, 'MATCH', match, 'COUNT', String(this.#scanCount)], this.#purgeTimeoutMs, false)
      if (page instanceof Error) return this.#failPurge(page)
      const [next, keys] = page
      cursor = next
      if (keys.length > 0) {
        const n = await this.#command<number>(['UNLINK', ...keys], this.#purgeTimeoutMs, false)
        if (n instanceof Error) return this.#failPurge(n)
        dropped += n
      }
    } while (cursor !== '0')
    return dropped
  }

  async close (): Promise<void> {
    if (this.#state === 'closed') return
    this.#state = 'closed'
    clearInterval(this.#watchdog)
    // destroy(), not close(): close() waits for replies, which a dead or hung server never sends.
    this.#client.destroy()
  }

  #miss (kind: 'get' | 'set', err?: Error): undefined {
    if (this.#state !== 'closed') this.#report(kind, err ?? this.#offlineError)
    return undefined
  }

  #failPurge (err: Error): undefined {
    if (this.#state !== 'closed') this.#report('purge', err)
    return undefined
  }

  #report (kind: RedisErrorKind, err: Error): void {
    try {
      this.#onError(kind, err)
    } catch {
      // A broken metrics callback must not turn a cache miss into a failed request.
    }
  }

  /**
   * Sends one command and waits for it until `deadlineMs`: resolves with the reply, or with an Error (the client's,
   * or this store's timeout); never rejects.
   */
  #command<T> (args: RedisArgument[], deadlineMs: number, buffers: boolean): Promise<T | Error> {
    let sent: Promise<T>
    try {
      sent = this.#client.sendCommand<T>(args, buffers ? BUFFER_REPLIES : undefined)
    } catch (err) {
      return Promise.resolve(asError(err))
    }
    if (this.#pending++ === 0) this.#lastProgressAt = Date.now()
    return new Promise(resolve => {
      const timer = setTimeout(() => {
        this.#timedOut()
        resolve(this.#timeoutError)
      }, deadlineMs)
      sent.then(reply => {
        clearTimeout(timer)
        this.#settled(true)
        resolve(reply)
      }, (err: unknown) => {
        clearTimeout(timer)
        // An error reply is an answer from the server; the client's own errors (offline, queue full, socket lost) are not.
        this.#settled(err instanceof ErrorReply)
        resolve(asError(err))
      })
    })
  }

  #settled (answered: boolean): void {
    this.#pending--
    if (!answered) return
    const now = Date.now()
    this.#lastProgressAt = now
    if (this.#slow && now - this.#lastTimeoutAt >= SLOW_QUIET_MS) {
      this.#slow = false
      this.#logger.info({ url: this.#safeUrl }, 'Redis cache answering within its deadline again')
    }
  }

  #timedOut (): void {
    this.#lastTimeoutAt = Date.now()
    if (this.#slow || this.#state !== 'up') return
    this.#slow = true
    this.#logger.warn({ url: this.#safeUrl, timeoutMs: this.#timeoutMs },
      'Redis cache slower than its deadline: calls past it count as misses')
  }

  #connect (): Client {
    const client = createClient({
      url: this.#url,
      RESP: 2,
      maintNotifications: 'disabled',
      disableOfflineQueue: true,
      commandsQueueMaxLength: this.#maxPending,
      // Our deadline is the only one; the client's (before a command is written) would cost a timer per command.
      commandOptions: { timeout: 0 },
      socket: {
        connectTimeout: this.#connectTimeoutMs,
        // 50 ms doubling up to reconnectMaxMs, with jitter so that replicas do not reconnect in step; never gives up.
        reconnectStrategy: retries => Math.min(50 * 2 ** Math.min(retries, 20), this.#reconnectMaxMs) + Math.floor(Math.random() * RECONNECT_JITTER_MS)
      }
    })
    const seen = (): void => { if (client === this.#client) this.#lastClientEventAt = Date.now() }
    client.on('connect', seen)
    client.on('reconnecting', seen)
    client.on('ready', () => {
      if (client !== this.#client) return
      seen()
      this.#up()
    })
    // Without an 'error' listener an EventEmitter throws: this one is always there, even on a replaced client.
    client.on('error', (err: unknown) => {
      if (client !== this.#client) return
      seen()
      if (!client.isReady) this.#down(asError(err))
    })
    this.#lastClientEventAt = Date.now()
    // Settles once ready, and rejects only when closed: until then it retries with reconnectStrategy.
    client.connect().catch(() => {})
    return client
  }

  #up (): void {
    if (this.#state === 'closed') return
    const was = this.#state
    this.#state = 'up'
    if (was === 'down') {
      this.#logger.info({ url: this.#safeUrl, downMs: Date.now() - this.#downSince }, 'Redis cache reachable again')
    } else {
      this.#logger.info({ url: this.#safeUrl }, 'Redis cache connected')
    }
  }

  #down (err: Error): void {
    if (this.#state === 'down' || this.#state === 'closed') return
    this.#state = 'down'
    this.#downSince = Date.now()
    this.#slow = false
    this.#logger.warn({ url: this.#safeUrl, err: err.message },
      'Redis cache unreachable: every lookup is a miss until it is back (reconnecting in the background)')
    this.#report('connection', err)
  }

  /** The watchdog: replaces a client whose server stopped answering without closing the connection. */
  #checkHung (): void {
    if (this.#state === 'closed') return
    const now = Date.now()
    let why: string | undefined
    if (this.#client.isReady) {
      if (this.#pending > 0 && now - this.#lastProgressAt > this.#hangTimeoutMs) why = `no reply for ${now - this.#lastProgressAt} ms`
    } else if (now - this.#lastClientEventAt > this.#hangTimeoutMs) {
      why = `connecting for ${now - this.#lastClientEventAt} ms`
    }
    if (why === undefined) return
    const old = this.#client
    this.#client = this.#connect()
    this.#down(storeError('REDIS_CACHE_HUNG', `Redis at ${this.#safeUrl} hung (${why}): reconnecting`))
    old.destroy()
  }
}

function positive (name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`RedisStore: ${name} must be a positive number, got ${value}`)
  return value
}
