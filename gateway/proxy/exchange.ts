/**
 * One attempt: one request to one server over its undici pool, its answer collected whole (the request body is
 * already whole, as it must be to be resent, and inference answers are bounded by the worker's own limits).
 */
import { type IncomingHttpHeaders } from 'node:http'
import { errors, type Dispatcher } from 'undici'
import { createError, wrapError } from '../../common/errors.ts'
import { parseQueueDepth, QUEUE_DEPTH_HEADER, WORKER_DRAINING_HEADER } from '../../common/protocol/headers.ts'
import { type Endpoint, LATENCY_EWMA_WEIGHT } from '../fleet/types.ts'
import { type Timers } from '../health/types.ts'
import { type Admission } from './admission.ts'
import { clientResponseHeaders } from './headers.ts'
import { type ForwardObserver, type ForwardRequest } from './types.ts'
import { type AttemptResult, describeError, errorCode, RESET, UNREACHABLE } from './upstream-errors.ts'

/** What every {@link Exchange} of one forwarder shares. */
export interface ExchangeSettings {
  readonly timers: Timers
  readonly observer: ForwardObserver
  readonly admission: Admission
}

const EMPTY_BODY = Buffer.alloc(0)

/**
 * One attempt, as an undici dispatch handler (`Dispatcher.dispatch`) rather than through `Dispatcher.request`,
 * which per request builds a Readable for the body, an async resource and, with a deadline, an AbortController and
 * its signal; here the body is collected as it arrives, and the deadline and the client going away abort the
 * exchange through the controller undici hands over. It settles exactly once, on the end of the response or on
 * undici's error: reports the attempt, gives the slot back and resolves.
 *
 * - `answered` means the response head arrived (1xx heads do not count, as `request()` skips them too).
 * - An abort that comes before undici has started the request (it is still connecting) is applied as soon as undici
 *   does, as `request()` applies an aborted signal; undici then ends the exchange with `onResponseError`.
 * - After an abort, what undici reports is not classified: the deadline makes it a 504, the client leaving a 499.
 */
export class Exchange implements Dispatcher.DispatchHandler {
  readonly #settings: ExchangeSettings
  readonly #endpoint: Endpoint
  readonly #model: string | undefined
  readonly #request: ForwardRequest
  readonly #configuredMs: number
  readonly #started: number
  readonly #resolve: (result: AttemptResult) => void
  #timer: unknown = undefined
  #controller: Dispatcher.DispatchController | undefined = undefined
  /** An abort that came before undici handed over its controller. */
  #pendingAbort: Error | undefined = undefined
  #timedOut = false
  /** The per-try timeout when it, not the request's deadline, is what the timer stands for. */
  #perTryMs: number | undefined = undefined
  #answered = false
  #settled = false
  #statusCode = 0
  #headers: IncomingHttpHeaders = {}
  /** The body so far: one chunk as it came (the usual case), or several. */
  #body: Buffer | Buffer[] | undefined = undefined
  readonly #onClientGone = (): void => { this.#abort() }

  constructor (
    settings: ExchangeSettings,
    endpoint: Endpoint,
    model: string | undefined,
    request: ForwardRequest,
    configuredMs: number,
    started: number,
    resolve: (result: AttemptResult) => void
  ) {
    this.#settings = settings
    this.#endpoint = endpoint
    this.#model = model
    this.#request = request
    this.#configuredMs = configuredMs
    this.#started = started
    this.#resolve = resolve
  }

  /**
   * @param timeoutMs what is left of the request's deadline
   * @param perTryMs the per-try timeout, `Infinity` for none
   */
  start (dispatcher: Dispatcher, headers: Record<string, string | string[]>, timeoutMs: number, perTryMs: number): void {
    const request = this.#request
    request.signal?.addEventListener('abort', this.#onClientGone)
    if (perTryMs < timeoutMs) this.#perTryMs = perTryMs
    this.#timer = this.#settings.timers.setTimeout(() => {
      this.#timedOut = true
      this.#abort()
    }, Math.max(0, Math.min(timeoutMs, perTryMs)))
    try {
      dispatcher.dispatch({
        origin: this.#endpoint.origin,
        path: request.path,
        method: request.method as Dispatcher.HttpMethod,
        headers,
        body: request.body !== undefined && request.body.length > 0 ? request.body : null
      }, this)
    } catch (err) {
      // undici reports its own errors through onResponseError; this is a dispatcher that throws instead.
      this.#finish(true, err)
    }
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#pendingAbort !== undefined) controller.abort(this.#pendingAbort)
  }

  onResponseStart (_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) return
    this.#answered = true
    this.#statusCode = statusCode
    this.#headers = headers
  }

  onResponseData (_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const body = this.#body
    if (body === undefined) this.#body = chunk
    else if (Array.isArray(body)) body.push(chunk)
    else this.#body = [body, chunk]
  }

  onResponseEnd (): void {
    this.#finish(false, undefined)
  }

  onResponseError (_controller: Dispatcher.DispatchController | undefined, err: Error): void {
    this.#finish(true, err)
  }

  /** Aborts the exchange (deadline, client gone); undici answers with onResponseError. */
  #abort (): void {
    if (this.#settled) return
    const reason = new errors.RequestAbortedError()
    if (this.#controller === undefined) this.#pendingAbort ??= reason
    else this.#controller.abort(reason)
  }

  /** Settles the attempt, once: a complete response, or `err`. */
  #finish (failed: boolean, err: unknown): void {
    if (this.#settled) return
    this.#settled = true
    const endpoint = this.#endpoint
    let result: AttemptResult
    try {
      result = failed ? this.#failure(err) : this.#answer()
    } catch (thrown) {
      // An observer that throws must neither leave the request hanging nor keep its slot.
      result = { ok: false, kind: 'final', error: wrapError('GW_ERR_UPSTREAM_BROKEN', thrown, endpoint.name, this.#model ?? '(none)', describeError(thrown)) }
    } finally {
      this.#settings.timers.clearTimeout(this.#timer)
      this.#request.signal?.removeEventListener('abort', this.#onClientGone)
      this.#settings.admission.release(endpoint)
    }
    this.#resolve(result)
  }

  #answer (): AttemptResult {
    const body = this.#body
    const payload = body === undefined ? EMPTY_BODY : Array.isArray(body) ? Buffer.concat(body) : body
    const headers = this.#headers
    this.#report(this.#statusCode, parseQueueDepth(headers[QUEUE_DEPTH_HEADER]))
    if (headers[WORKER_DRAINING_HEADER] !== undefined) this.#settings.observer.draining?.(this.#endpoint)
    return { ok: true, response: { statusCode: this.#statusCode, headers: clientResponseHeaders(headers, this.#endpoint.name), body: payload } }
  }

  #failure (err: unknown): AttemptResult {
    const endpoint = this.#endpoint
    const model = this.#model
    if (this.#timedOut) {
      // Counted against the server either way: it did not answer in a time its peers answer in.
      this.#report(504, undefined)
      if (this.#perTryMs !== undefined) {
        return { ok: false, kind: 'timeout', error: createError('GW_ERR_ATTEMPT_TIMEOUT', endpoint.name, this.#perTryMs, model ?? '(none)') }
      }
      return { ok: false, kind: 'final', error: createError('GW_ERR_UPSTREAM_TIMEOUT', endpoint.name, this.#configuredMs) }
    }
    // A client that went away says nothing about the server.
    if (this.#request.signal?.aborted === true) {
      return { ok: false, kind: 'final', error: createError('GW_ERR_CLIENT_CLOSED', model ?? '(none)') }
    }
    this.#report(undefined, undefined)
    const code = errorCode(err)
    const why = describeError(err)
    if (!this.#answered && code !== undefined && UNREACHABLE.has(code)) {
      return { ok: false, kind: 'unreachable', cause: err, error: wrapError('GW_ERR_UPSTREAM_UNREACHABLE', err, endpoint.name, why) }
    }
    const error = wrapError('GW_ERR_UPSTREAM_BROKEN', err, endpoint.name, model ?? '(none)', why)
    if (!this.#answered && code !== undefined && RESET.has(code)) return { ok: false, kind: 'reset', cause: err, error }
    return { ok: false, kind: 'final', error }
  }

  #report (status: number | undefined, queueDepth: number | undefined): void {
    const endpoint = this.#endpoint
    const ms = this.#settings.timers.now() - this.#started
    endpoint.latencyMs = Number.isNaN(endpoint.latencyMs) ? ms : endpoint.latencyMs + LATENCY_EWMA_WEIGHT * (ms - endpoint.latencyMs)
    this.#settings.observer.attempt?.(endpoint, status, queueDepth, ms)
  }
}

