/**
 * When the proxy may try a request again, and how long it waits first.
 *
 * What is retried (KServe v2 inference is side-effect free, so a POST may be replayed, which generic proxies will
 * not assume; see gateway-anchors.md section 7): a failed connect (the request never left), a reset before any
 * response byte or an attempt past its per-try timeout (once only, the two together: see `forward.ts`), and a 503
 * (a worker whose queue is full, or not ready). Always on another server, never the same one (Envoy's
 * `previous_hosts` predicate).
 *
 * How much: at most `max_retries` per request, and a retry budget as Envoy's for 503s: their retries in progress
 * may not exceed `budget_percent` of the requests in progress, with a floor of `min_concurrent`, so that when the
 * whole fleet is overloaded the gateway does not multiply its load (a fixed retry count alone triples it at
 * max_retries 2). Unlike Envoy, a retry after a failed connect, a reset or a per-try timeout needs no budget: a
 * failed connect never reached a server, and a reset or a timeout (retried once at most, so it can at most double
 * what reaches the fleet) is a host that went away or hung, so a worker that was just killed or stopped costs no
 * request while the gateway learns of it.
 *
 * How fast: full jitter (a uniform draw between 0 and `min(cap, base × 2^n)`), Envoy's 25 ms base and 250 ms cap,
 * so retries of a burst spread out instead of arriving together. A connect failure and a per-try timeout are retried
 * at once: nothing reached a server, or the request has already waited, and the next server is a different one.
 */

import { DEFAULT_RETRY_SETTINGS as DEFAULT_RETRY_CONFIG, type RetryConfig } from '../fleet/fleet-config.ts'

/** Retry settings, from the fleet file's `retries` section. */
export interface RetrySettings {
  /** Most retries per request (0: none). */
  readonly maxRetries: number
  /** Retries in progress may be at most this share of requests in progress... */
  readonly budgetPercent: number
  /** ...or this many, whichever is more. */
  readonly minConcurrent: number
  readonly backoffBaseMs: number
  readonly backoffMaxMs: number
}

/** The fleet file's `retries` section as the proxy takes it. */
export function retrySettingsOf (config: RetryConfig): RetrySettings {
  return Object.freeze({
    maxRetries: config.max_retries,
    budgetPercent: config.budget_percent,
    minConcurrent: config.min_concurrent,
    backoffBaseMs: config.backoff_base_ms,
    backoffMaxMs: config.backoff_max_ms
  })
}

/** The fleet file's defaults (Envoy's, with the two retries), defined once there. */
export const DEFAULT_RETRY_SETTINGS: RetrySettings = retrySettingsOf(DEFAULT_RETRY_CONFIG)

/** Why a request was tried again; a metric label. */
export type RetryCause = 'connect_failure' | 'reset' | 'timeout' | 'unavailable'

/** Why a request that could have been retried was not; a metric label. */
export type RetryDenial = 'max_retries' | 'budget'

/**
 * The delay before retry number `retry` (1 for the first), full jitter.
 *
 * @param random uniform in [0, 1)
 */
export function backoffMs (retry: number, cause: RetryCause, settings: RetrySettings, random: () => number): number {
  // A failed connect reached no server; a timed-out attempt has already waited its per-try timeout. Either way the
  // next server is a different one, so there is nothing to wait for.
  if (cause === 'connect_failure' || cause === 'timeout') return 0
  const ceiling = Math.min(settings.backoffMaxMs, settings.backoffBaseMs * 2 ** Math.max(0, retry - 1))
  return Math.floor(random() * ceiling)
}

/** Counts requests and retries in progress across the gateway, and decides whether one more retry fits. */
export class RetryBudget {
  readonly #settings: RetrySettings
  #requests = 0
  #retries = 0

  constructor (settings: RetrySettings) {
    this.#settings = settings
  }

  /** Requests in progress (queued ones included, as Envoy counts pending requests). */
  get requests (): number {
    return this.#requests
  }

  /** Retries in progress. */
  get retries (): number {
    return this.#retries
  }

  requestStarted (): void {
    this.#requests++
  }

  requestFinished (): void {
    this.#requests--
  }

  /** Takes a retry slot if the budget allows one; the caller gives it back with {@link RetryBudget.retryFinished}. */
  tryStartRetry (): boolean {
    const allowed = Math.max(this.#settings.minConcurrent, (this.#requests * this.#settings.budgetPercent) / 100)
    if (this.#retries + 1 > allowed) return false
    this.#retries++
    return true
  }

  retryFinished (): void {
    this.#retries--
  }
}
