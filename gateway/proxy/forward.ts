/**
 * Sends one client request to an upstream server and brings the answer back, whole: the retry loop around
 * `exchange.ts` (one attempt) and `admission.ts` (in-flight limits and the gateway queue).
 *
 * - The server is picked by the model's balancer among servers with room under their in-flight limit; when every
 *   one is full the request waits in the gateway queue (`admission.ts`).
 * - Retries (`retry-policy.ts`) go to another server, never the same one: after a failed connect (the request
 *   never left, so it moves on at once), after a 503 (a worker whose queue is full), and after a connection reset
 *   or closed before any response byte. A reset is different from the others: the server may have received the
 *   request and died of it (a batch that runs it out of memory, say), and replaying it on every server would take
 *   the fleet down one by one, so such a request moves on once at most. Only a 503's retry needs room in the retry
 *   budget: a failed connect cost no server anything, and a reset is one dead or dying host (a SIGKILLed worker
 *   resets every request it holds at once), which the budget must not turn into failed requests; the once-only rule
 *   already bounds what resets can add (Envoy gets there by ejecting the host before the budget counts).
 * - An attempt that outlives its per-try timeout (`attempt-timeout.ts`: by default a multiple of the model's recent
 *   p99) is abandoned, its late answer dropped with its connection, and the request moves on once, as after a reset:
 *   the server is hung or far slower than its peers, and the attempt counts against it (outlier detection).
 * - Anything after the first response byte ends the request, and so does the request deadline.
 * - One deadline covers the whole request (the model's `request_timeout_ms`): queueing, every attempt, backoff.
 * - A client that goes away cancels its upstream request, so the worker stops spending time on it.
 * - Headers cross as `headers.ts` says; every answer names the server in `x-flotilla-endpoint`.
 */
import { type Dispatcher } from 'undici'
import { createError, type FlotillaError, wrapError } from '../../common/errors.ts'
import { type Balancer, type PickContext } from '../balancer/types.ts'
import { DEFAULT_MAX_QUEUED_REQUESTS, DEFAULT_QUEUE_TIMEOUT_MS } from '../fleet/fleet-config.ts'
import { type Endpoint } from '../fleet/types.ts'
import { type Timers } from '../health/types.ts'
import { AttemptTimeouts, DEFAULT_ATTEMPT_TIMEOUT_SETTINGS } from './attempt-timeout.ts'
import { Admission, hasRoom, type AbortSignalLike, type AdmissionSettings, type WaitResult } from './admission.ts'
import { Exchange, type ExchangeSettings } from './exchange.ts'
import { upstreamRequestHeaders } from './headers.ts'
import {
  backoffMs, DEFAULT_RETRY_SETTINGS, RetryBudget, type RetryCause, type RetrySettings
} from './retry-policy.ts'
import {
  type ForwardObserver, type ForwardRequest, type ForwardResult, type ForwardTarget, type RoutePolicy, type UpstreamResponse
} from './types.ts'
import { type AttemptFailure, type AttemptResult, describeError } from './upstream-errors.ts'
import { type UpstreamPool } from './upstream-pool.ts'

/** How many times a request that met a reset or a per-try timeout may move on to another server (see the header). */
const MAX_HOST_FAILURE_RETRIES = 1

/** Options for {@link Forwarder}; everything but `pool` has a production default. */
export interface ForwarderOptions {
  pool: UpstreamPool
  retries?: RetrySettings
  /** The gateway queue; default: 1024 places, 5 s. */
  admission?: AdmissionSettings
  /** Time, injected for tests; real timers by default. */
  timers?: Timers
  /** Uniform in [0, 1), for backoff jitter; `Math.random` by default. */
  random?: () => number
  observer?: ForwardObserver
  /** Per-try timeouts; default: each model's recent latency with the default rule. */
  attemptTimeouts?: AttemptTimeouts
}

/** The fleet file's defaults for `gateway.max_queued_requests` and `gateway.queue_timeout_ms`. */
export const DEFAULT_ADMISSION: AdmissionSettings = Object.freeze({
  maxQueued: DEFAULT_MAX_QUEUED_REQUESTS,
  queueTimeoutMs: DEFAULT_QUEUE_TIMEOUT_MS
})

/** Node's timers on `performance.now()`: the forwarder's default; request deadlines are never unref'd. */
export const REAL_TIMERS: Timers = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => { clearTimeout(handle as NodeJS.Timeout) }
}

/** A {@link PickContext} the forwarder can update between attempts (balancers see it read-only). */
interface AttemptContext {
  readonly model: string
  readonly version: string | undefined
  readonly hashKey: string | undefined
  exclude: Set<Endpoint> | undefined
  /** {@link ForwardTarget.preferred}. */
  readonly preferred: Endpoint | undefined
}

/** Why no server could be had for an attempt. */
type NoServer = { readonly reason: 'none' } | { readonly reason: 'queue', readonly outcome: Exclude<WaitResult['outcome'], 'admitted'> }

export class Forwarder {
  readonly #pool: UpstreamPool
  readonly #retries: RetrySettings
  readonly #timers: Timers
  readonly #random: () => number
  readonly #observer: ForwardObserver
  readonly #admissionSettings: AdmissionSettings
  readonly #exchangeSettings: ExchangeSettings
  readonly #attemptTimeouts: AttemptTimeouts
  /** The in-flight limits and the gateway queue. */
  readonly admission: Admission
  /** Requests and retries in progress. */
  readonly budget: RetryBudget

  /** Each model's per-try timeout and the recent latency it follows (`GET /v2/fleet` shows them). */
  get attemptTimeouts (): AttemptTimeouts {
    return this.#attemptTimeouts
  }

  constructor (options: ForwarderOptions) {
    this.#pool = options.pool
    this.#retries = options.retries ?? DEFAULT_RETRY_SETTINGS
    this.#timers = options.timers ?? REAL_TIMERS
    this.#random = options.random ?? Math.random
    this.#observer = options.observer ?? {}
    this.#admissionSettings = options.admission ?? DEFAULT_ADMISSION
    this.admission = new Admission(this.#admissionSettings, this.#timers)
    this.budget = new RetryBudget(this.#retries)
    this.#exchangeSettings = { timers: this.#timers, observer: this.#observer, admission: this.admission }
    this.#attemptTimeouts = options.attemptTimeouts ?? new AttemptTimeouts(DEFAULT_ATTEMPT_TIMEOUT_SETTINGS, this.#timers)
  }

  /**
   * Sends `request` to a server picked from `candidates` by the target's balancer, retrying on another server as the
   * header describes. Never throws: failures come back as an error in the result (502 `GW_ERR_NO_UPSTREAM` or
   * `GW_ERR_UPSTREAM_BROKEN`, 503 `GW_ERR_QUEUE_FULL` or `GW_ERR_QUEUE_TIMEOUT`, 504 `GW_ERR_UPSTREAM_TIMEOUT` or
   * `GW_ERR_REQUEST_TIMEOUT`, 499 `GW_ERR_CLIENT_CLOSED`). A worker's own answer, a 503 included once retries are
   * spent, comes back as it is.
   *
   * @param candidates the servers for this model and version (`Fleet.endpointsServing`)
   */
  async forward (candidates: readonly Endpoint[], target: ForwardTarget, request: ForwardRequest): Promise<ForwardResult> {
    const { model, policy } = target
    const headers = upstreamRequestHeaders(request.headers, request.requestId)
    const ctx: AttemptContext = { model, version: target.version, hashKey: target.hashKey, exclude: undefined, preferred: target.preferred }
    const deadline = this.#timers.now() + policy.timeoutMs
    let last: Endpoint | undefined
    let lastFailure: AttemptFailure | undefined
    /** The last 503 a worker answered: what the client gets when no retry succeeds. */
    let lastAnswer: { endpoint: Endpoint, response: UpstreamResponse } | undefined
    let retries = 0
    let hostFailures = 0
    let retrying = false
    this.budget.requestStarted()
    try {
      for (;;) {
        const picked = await this.#admit(candidates, ctx, policy.balancer, deadline, request)
        if ('reason' in picked) {
          if (lastAnswer !== undefined) return { ok: true, ...lastAnswer }
          return { ok: false, endpoint: last, error: this.#noServerError(picked, model, ctx, last, lastFailure, policy, deadline) }
        }
        const endpoint = picked
        last = endpoint
        const started = this.#timers.now()
        const perTryMs = this.#attemptTimeouts.timeoutMs(model, policy.perTryTimeoutMs)
        const result = await this.#attempt(endpoint, model, request, headers, deadline - started, policy.timeoutMs, perTryMs)
        if (retrying) {
          // A retry holds its budget slot from the decision to retry until its attempt is over.
          this.budget.retryFinished()
          retrying = false
        }
        let cause: RetryCause
        if (result.ok) {
          const status = result.response.statusCode
          if (status === 200) this.#attemptTimeouts.record(model, policy.perTryTimeoutMs, this.#timers.now() - started)
          if (status !== 503) return { ok: true, endpoint, response: result.response }
          lastAnswer = { endpoint, response: result.response }
          cause = 'unavailable'
        } else if (result.kind === 'final') {
          return { ok: false, endpoint, error: result.error }
        } else {
          if (result.kind !== 'unreachable' && hostFailures++ >= MAX_HOST_FAILURE_RETRIES) return { ok: false, endpoint, error: result.error }
          lastFailure = result
          cause = result.kind === 'unreachable' ? 'connect_failure' : result.kind
        }
        // Allocated only on the failure path; the common case never builds a set.
        ctx.exclude ??= new Set()
        ctx.exclude.add(endpoint)
        // Nowhere left to go is not a denial; it ends the request the same way, without counting a retry.
        const exhausted = ctx.exclude.size >= candidates.length
        // Only a 503's retry takes a budget slot (see the header): a failed connect, a reset or a per-try timeout,
        // whose retry moves on once at most, is a host that went away or hung, and a killed worker must not fail its
        // requests while its death is being noticed.
        const denial = exhausted
          ? undefined
          : retries >= policy.maxRetries
            ? 'max_retries'
            : cause !== 'unavailable' || this.budget.tryStartRetry() ? undefined : 'budget'
        if (exhausted || denial !== undefined) {
          if (denial !== undefined) this.#observer.retryDenied?.(model, denial)
          // A worker's 503 is passed on as it is; a transport failure becomes the gateway's own error.
          return result.ok
            ? { ok: true, endpoint, response: result.response }
            : { ok: false, endpoint, error: this.#failureError(result, model, ctx, endpoint) }
        }
        retrying = cause === 'unavailable'
        retries++
        this.#observer.retry?.(model, cause)
        const pause = backoffMs(retries, cause, this.#retries, this.#random)
        if (pause > 0 && !(await this.#sleep(pause, deadline, request.signal))) {
          if (request.signal?.aborted === true) return { ok: false, endpoint, error: createError('GW_ERR_CLIENT_CLOSED', model) }
          if (lastAnswer !== undefined) return { ok: true, ...lastAnswer }
          return { ok: false, endpoint, error: createError('GW_ERR_REQUEST_TIMEOUT', model, policy.timeoutMs, 'while waiting to retry') }
        }
      }
    } finally {
      if (retrying) this.budget.retryFinished()
      this.budget.requestFinished()
    }
  }

  /**
   * Sends `request` to `endpoint` only (no limits, no retries), for fan-out calls that ask every server.
   *
   * @param headers built once per fan-out with {@link upstreamRequestHeaders}
   * @param timeoutMs deadline for the exchange
   */
  async sendTo (endpoint: Endpoint, request: ForwardRequest, headers: Record<string, string | string[]>, timeoutMs: number): Promise<ForwardResult> {
    this.admission.acquire(endpoint)
    const result = await this.#attempt(endpoint, undefined, request, headers, timeoutMs, timeoutMs, Number.POSITIVE_INFINITY)
    return result.ok ? { ok: true, endpoint, response: result.response } : { ok: false, endpoint, error: result.error }
  }

  /**
   * A server with room for the request, its slot taken: the balancer's pick, else its pick among the servers with
   * room, else the first slot to free up on any of them (the queue). Tried servers are never picked again.
   */
  async #admit (
    candidates: readonly Endpoint[],
    ctx: AttemptContext,
    balancer: Balancer,
    deadline: number,
    request: ForwardRequest
  ): Promise<Endpoint | NoServer> {
    const preferred = ctx.preferred
    let endpoint = preferred !== undefined && preferred.state === 'active' && hasRoom(preferred) &&
      ctx.exclude?.has(preferred) !== true && candidates.includes(preferred)
      ? preferred
      : balancer.pick(candidates, ctx)
    // The candidates were the fleet's when the request began; one may have started draining since (a retry after a
    // backoff). It takes nothing new: counted as tried, so the next pick skips it.
    while (endpoint !== undefined && endpoint.state !== 'active' && ctx.exclude?.has(endpoint) !== true) {
      ctx.exclude ??= new Set()
      ctx.exclude.add(endpoint)
      endpoint = ctx.exclude.size < candidates.length ? balancer.pick(candidates, ctx) : undefined
    }
    if (endpoint === undefined || ctx.exclude?.has(endpoint) === true) return { reason: 'none' }
    if (!hasRoom(endpoint)) {
      // Only when limits bite: pick again among those with room, so the strategy still decides among them.
      const full = new Set(ctx.exclude)
      for (const e of candidates) if (!hasRoom(e) || e.state !== 'active') full.add(e)
      endpoint = full.size < candidates.length ? balancer.pick(candidates, { ...ctx, exclude: full }) : undefined
      if (endpoint === undefined || full.has(endpoint)) {
        const started = this.#timers.now()
        const waited = await this.admission.wait(candidates, ctx.exclude, deadline - started, request.signal)
        this.#observer.queued?.(ctx.model, this.#timers.now() - started, waited.outcome)
        return waited.outcome === 'admitted' ? waited.endpoint : { reason: 'queue', outcome: waited.outcome }
      }
    }
    this.admission.acquire(endpoint)
    return endpoint
  }

  /** The error for a request that found no server for its next attempt. */
  #noServerError (
    why: NoServer,
    model: string,
    ctx: AttemptContext,
    last: Endpoint | undefined,
    lastFailure: AttemptFailure | undefined,
    policy: RoutePolicy,
    deadline: number
  ): FlotillaError {
    if (why.reason === 'queue') {
      if (why.outcome === 'aborted') return createError('GW_ERR_CLIENT_CLOSED', model)
      if (why.outcome === 'full') return createError('GW_ERR_QUEUE_FULL', model, this.admission.waiting)
      // The wait is cut short by the request's own deadline when that comes first.
      return this.#timers.now() >= deadline
        ? createError('GW_ERR_REQUEST_TIMEOUT', model, policy.timeoutMs, 'waiting for a server under its in-flight limit')
        : createError('GW_ERR_QUEUE_TIMEOUT', model, this.#admissionSettings.queueTimeoutMs)
    }
    if (lastFailure !== undefined) return this.#failureError(lastFailure, model, ctx, last)
    return createError('GW_ERR_NO_UPSTREAM', model, 'none', 'no server was available')
  }

  /** The error for a failed attempt that will not be retried: who was tried and what happened last. */
  #failureError (failure: AttemptFailure, model: string, ctx: AttemptContext, last: Endpoint | undefined): FlotillaError {
    if (failure.kind !== 'unreachable') return failure.error
    const tried = ctx.exclude === undefined ? 'none' : [...ctx.exclude].map((e) => e.name).join(', ')
    return wrapError('GW_ERR_NO_UPSTREAM', failure.cause, model, tried, `${last?.name ?? '?'}: ${describeError(failure.cause)}`)
  }

  /** Waits `ms` unless the deadline comes first or the client leaves; true when the full pause was taken. */
  async #sleep (ms: number, deadline: number, signal: AbortSignalLike | undefined): Promise<boolean> {
    if (this.#timers.now() + ms >= deadline || signal?.aborted === true) return false
    return new Promise((resolve) => {
      const onAbort = (): void => {
        this.#timers.clearTimeout(timer)
        resolve(false)
      }
      const timer = this.#timers.setTimeout(() => {
        signal?.removeEventListener('abort', onAbort)
        resolve(true)
      }, ms)
      signal?.addEventListener('abort', onAbort, { once: true })
    })
  }

  /**
   * One exchange with one server whose slot the caller took; never throws, always gives the slot back.
   * `model` is named in errors when the request was for one.
   *
   * @param timeoutMs what is left of the request's deadline
   * @param configuredMs the deadline as configured, for the 504 message
   * @param perTryMs the per-try timeout (`Infinity` for none): when it comes first, the attempt ends as a retryable
   *   `timeout` instead of a final 504
   */
  #attempt (
    endpoint: Endpoint,
    model: string | undefined,
    request: ForwardRequest,
    headers: Record<string, string | string[]>,
    timeoutMs: number,
    configuredMs: number,
    perTryMs: number
  ): Promise<AttemptResult> {
    const started = this.#timers.now()
    let dispatcher: Dispatcher
    try {
      dispatcher = this.#pool.dispatcherFor(endpoint)
    } catch (err) {
      this.admission.release(endpoint)
      return Promise.resolve({ ok: false, kind: 'unreachable', cause: err, error: wrapError('GW_ERR_UPSTREAM_UNREACHABLE', err, endpoint.name, describeError(err)) })
    }
    return new Promise((resolve) => {
      new Exchange(this.#exchangeSettings, endpoint, model, request, configuredMs, started, resolve).start(dispatcher, headers, timeoutMs, perTryMs)
    })
  }
}
