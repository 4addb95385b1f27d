/**
 * Coalescing identical requests in flight (NGINX's `proxy_cache_lock`): the first request for a key (the leader)
 * goes upstream; identical ones that arrive while it is in flight (followers) wait for its answer instead of
 * sending their own.
 *
 * - A follower waits at most `timeoutMs` (a lock with a timeout, as NGINX's `proxy_cache_lock_timeout`), then goes
 *   upstream itself: a slow leader must not hold every identical request hostage.
 * - When the leader fails (anything but a complete 200), its followers are not failed with it: each goes upstream
 *   on its own, as if it had been first. A failure is the leader's (its server died), not necessarily theirs.
 * - When the leader's own client leaves (its upstream request is cancelled with it), the followers are told so and
 *   join again: one of them leads a new flight and the rest follow it, instead of all of them going upstream at once
 *   (under overload, when clients give up, that would be a stampede of identical requests).
 * - A follower whose client leaves stops waiting; the leader goes on for the others.
 *
 * Pure logic over injected timers: what a leader shares is whatever `T` the cache gives it.
 */
import { type Timers } from '../health/types.ts'
import { type AbortSignalLike } from '../proxy/admission.ts'

/** How a follower's wait ended. */
export type FollowOutcome<T> =
  | { readonly kind: 'answer', readonly value: T }
  /** The leader failed, the wait timed out, or the follower's client left: go upstream alone (or not at all). */
  | { readonly kind: 'alone', readonly why: 'leader_failed' | 'timeout' | 'aborted' }
  /** The leader's client left before an answer: join again (one follower will lead). */
  | { readonly kind: 'rejoin' }

interface Flight<T> {
  readonly waiters: Set<(outcome: FollowOutcome<T>) => void>
}

/** What a request gets from {@link Coalescer.join}: lead (and then settle), or follow. */
export type Joined<T> =
  | { readonly role: 'leader', settle (value: T | undefined, leaderLeft?: boolean): void }
  | { readonly role: 'follower', readonly outcome: Promise<FollowOutcome<T>> }

export class Coalescer<T> {
  readonly #flights = new Map<string, Flight<T>>()
  readonly #timers: Timers
  readonly #timeoutMs: number

  constructor (timers: Timers, timeoutMs: number) {
    this.#timers = timers
    this.#timeoutMs = timeoutMs
  }

  /** Requests waiting on a leader right now. */
  get waiting (): number {
    let n = 0
    for (const flight of this.#flights.values()) n += flight.waiters.size
    return n
  }

  /**
   * Joins the flight for `key`: the first caller leads and must call `settle` exactly once (with the value to share,
   * or `undefined` when it failed); the others follow.
   */
  join (key: string, signal?: AbortSignalLike): Joined<T> {
    const flight = this.#flights.get(key)
    if (flight === undefined) {
      const own: Flight<T> = { waiters: new Set() }
      this.#flights.set(key, own)
      let settled = false
      return {
        role: 'leader',
        settle: (value, leaderLeft = false) => {
          if (settled) return
          settled = true
          if (this.#flights.get(key) === own) this.#flights.delete(key)
          const outcome: FollowOutcome<T> = value !== undefined
            ? { kind: 'answer', value }
            : leaderLeft ? { kind: 'rejoin' } : { kind: 'alone', why: 'leader_failed' }
          for (const wake of own.waiters) wake(outcome)
          own.waiters.clear()
        }
      }
    }
    return { role: 'follower', outcome: this.#follow(flight, signal) }
  }

  #follow (flight: Flight<T>, signal: AbortSignalLike | undefined): Promise<FollowOutcome<T>> {
    return new Promise((resolve) => {
      const done = (outcome: FollowOutcome<T>): void => {
        this.#timers.clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        flight.waiters.delete(done)
        resolve(outcome)
      }
      const onAbort = (): void => { done({ kind: 'alone', why: 'aborted' }) }
      const timer = this.#timers.setTimeout(() => { done({ kind: 'alone', why: 'timeout' }) }, this.#timeoutMs)
      flight.waiters.add(done)
      if (signal?.aborted === true) onAbort()
      else signal?.addEventListener('abort', onAbort, { once: true })
    })
  }
}
