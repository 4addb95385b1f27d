/**
 * A worker's drain phase on shutdown: it keeps serving, marks every response with {@link WORKER_DRAINING_HEADER}
 * so that gateways take it out of rotation, and ends once the traffic has stopped (or a deadline has passed), so
 * that a gateway in front loses no request to the listener closing under it.
 *
 * HTTP requests are counted at the node:http level: from the server's `request` event (the head has arrived; the body
 * may still be on its way, fastify has not routed or parsed anything yet) to the response's `close` (answered, or
 * the client went away). Work that outlives its client shows in the repository's pending count, which
 * {@link DrainOptions.pending} adds. gRPC calls are counted by the gRPC front ({@link DrainTracker.begin}).
 */
import { type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import { WORKER_DRAINING_HEADER } from '../../common/protocol/headers.ts'

export interface DrainOptions {
  /** Milliseconds with no request in progress and none arriving that end the drain. */
  quietMs: number
  /** Milliseconds after {@link DrainTracker.drain} began at which the drain ends whatever is still in progress. */
  timeoutMs: number
  /** Requests the worker still holds that no open HTTP response stands for (queued or executing). */
  pending: () => number
}

export interface DrainResult {
  /** `quiet`: nothing in progress and nothing new for `quietMs`; `timeout`: `timeoutMs` passed first. */
  reason: 'quiet' | 'timeout'
  /** HTTP requests still in progress when the drain ended. */
  inFlight: number
  durationMs: number
}

/** While only {@link DrainOptions.pending} is non-zero (its client gone) there is no event to wait for: poll. */
const PENDING_POLL_MS = 10
/** setTimeout's largest delay; a longer one fires at once. */
const MAX_TIMER_MS = 0x7fffffff

export class DrainTracker {
  #inFlight = 0
  #lastArrival = -Infinity
  #draining = false
  /** Responses in progress whose headers may still change; kept only until the drain begins. */
  readonly #open = new Set<ServerResponse>()
  /** Called on every response close while {@link drain} waits for one. */
  #onIdle: (() => void) | undefined
  readonly #now: () => number

  constructor (now: () => number = () => performance.now()) {
    this.#now = now
  }

  /** True from the moment {@link drain} is called, for good. */
  get draining (): boolean { return this.#draining }

  /** HTTP requests in progress: head received, response not yet closed. */
  get inFlight (): number { return this.#inFlight }

  /**
   * Counts `server`'s requests. The listener goes first, before fastify's, so that even the 503 fastify answers
   * while it closes carries the draining header.
   */
  track (server: Server): void {
    server.prependListener('request', (_req: IncomingMessage, res: ServerResponse) => {
      this.#inFlight++
      this.#lastArrival = this.#now()
      if (this.#draining) res.setHeader(WORKER_DRAINING_HEADER, '1')
      else this.#open.add(res)
      res.once('close', () => {
        this.#inFlight--
        this.#open.delete(res)
        this.#onIdle?.()
      })
    })
  }

  /**
   * Counts one request that did not come through a tracked HTTP server (a gRPC call, or one message of a gRPC
   * stream) from now until the returned function is called (once; later calls do nothing).
   */
  begin (): () => void {
    this.#inFlight++
    this.#lastArrival = this.#now()
    let ended = false
    return () => {
      if (ended) return
      ended = true
      this.#inFlight--
      this.#onIdle?.()
    }
  }

  /**
   * Enters the drain phase (every response not yet started carries the header from now on) and resolves when it
   * ends: no request in progress and none arrived for `quietMs` (counted from this call at the earliest), or
   * `timeoutMs` after this call. Its one timer is unref'd and cleared when it resolves.
   */
  drain (options: DrainOptions): Promise<DrainResult> {
    this.#draining = true
    for (const res of this.#open) {
      if (!res.headersSent) res.setHeader(WORKER_DRAINING_HEADER, '1')
    }
    this.#open.clear()
    const start = this.#now()
    const deadline = start + options.timeoutMs
    return new Promise(resolve => {
      let timer: NodeJS.Timeout | undefined
      const wakeAt = (at: number, now: number): void => {
        timer = setTimeout(check, Math.min(Math.max(0, Math.ceil(at - now)), MAX_TIMER_MS))
        timer.unref()
      }
      const check = (): void => {
        clearTimeout(timer)
        timer = undefined
        this.#onIdle = undefined
        const now = this.#now()
        if (now >= deadline) {
          resolve({ reason: 'timeout', inFlight: this.#inFlight, durationMs: now - start })
          return
        }
        if (this.#inFlight > 0) {
          // Woken by the next response that closes, or by the deadline.
          this.#onIdle = check
          wakeAt(deadline, now)
          return
        }
        if (options.pending() > 0) {
          wakeAt(Math.min(deadline, now + PENDING_POLL_MS), now)
          return
        }
        const quietAt = Math.max(start, this.#lastArrival) + options.quietMs
        if (now >= quietAt) {
          resolve({ reason: 'quiet', inFlight: 0, durationMs: now - start })
          return
        }
        // A request that arrives meanwhile moves quietAt on; this wake-up sees it and waits again.
        wakeAt(Math.min(deadline, quietAt), now)
      }
      check()
    })
  }
}
