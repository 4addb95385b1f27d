/**
 * One undici `Pool` per endpoint, created on first use and kept alive between requests, so that the common case
 * (a request to a server the gateway has talked to recently) reuses a warm connection. The pool constructor is
 * injectable (`factory`, as undici's own Agent does) so tests can count or fake dispatchers.
 */
import { Pool, type Dispatcher } from 'undici'
import { type Endpoint } from '../fleet/types.ts'

/** Builds the dispatcher for one origin (`http://host:port`). */
export type PoolFactory = (origin: string, options: Pool.Options) => Dispatcher

/**
 * A dead or black-holed server should cost a request little before it fails over to the next server; undici's
 * default (10 s) is meant for general clients, not for a proxy with somewhere else to go.
 */
export const DEFAULT_CONNECT_TIMEOUT_MS = 3000
/** How long an idle upstream connection is kept (undici's default; workers keep theirs at least as long). */
export const DEFAULT_KEEP_ALIVE_TIMEOUT_MS = 4000

/** Options for {@link UpstreamPool}; the defaults suit production. */
export interface UpstreamPoolOptions {
  factory?: PoolFactory
  connectTimeoutMs?: number
  keepAliveTimeoutMs?: number
  /** Most connections per endpoint; `null` (the default) means no limit, so requests never queue in the gateway. */
  connections?: number | null
}

const defaultFactory: PoolFactory = (origin, options) => new Pool(origin, options)

export class UpstreamPool {
  readonly #factory: PoolFactory
  readonly #options: Pool.Options
  readonly #pools = new Map<string, { readonly origin: string, readonly dispatcher: Dispatcher }>()
  #closed = false

  constructor (options: UpstreamPoolOptions = {}) {
    this.#factory = options.factory ?? defaultFactory
    this.#options = {
      connections: options.connections ?? null,
      keepAliveTimeout: options.keepAliveTimeoutMs ?? DEFAULT_KEEP_ALIVE_TIMEOUT_MS,
      connect: { timeout: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS },
      // The proxy enforces one deadline per attempt (request_timeout_ms) itself; undici's own header and body
      // timeouts would otherwise cut long inferences at 300 s with an error that reads like a network fault.
      headersTimeout: 0,
      bodyTimeout: 0
    }
  }

  /**
   * The dispatcher for `endpoint`, created on first use. An endpoint whose name now points at another origin gets
   * a fresh pool; the old one finishes its requests and closes.
   *
   * @throws Error after {@link UpstreamPool.close} (a programming error: requests must stop first)
   */
  dispatcherFor (endpoint: Endpoint): Dispatcher {
    const entry = this.#pools.get(endpoint.name)
    if (entry !== undefined && entry.origin === endpoint.origin) return entry.dispatcher
    if (this.#closed) throw new Error('upstream pool is closed')
    if (entry !== undefined) entry.dispatcher.close().catch(() => {})
    const dispatcher = this.#factory(endpoint.origin, this.#options)
    this.#pools.set(endpoint.name, { origin: endpoint.origin, dispatcher })
    return dispatcher
  }

  /** Closes the pool of a server that left the fleet, after its requests finish. */
  async remove (name: string): Promise<void> {
    const entry = this.#pools.get(name)
    if (entry === undefined) return
    this.#pools.delete(name)
    await entry.dispatcher.close()
  }

  /** Waits for requests in flight, then closes every connection. */
  async close (): Promise<void> {
    this.#closed = true
    const entries = [...this.#pools.values()]
    this.#pools.clear()
    await Promise.all(entries.map((e) => e.dispatcher.close()))
  }

  /** Aborts requests in flight and closes every connection at once. */
  async destroy (): Promise<void> {
    this.#closed = true
    const entries = [...this.#pools.values()]
    this.#pools.clear()
    await Promise.all(entries.map((e) => e.dispatcher.destroy()))
  }
}
