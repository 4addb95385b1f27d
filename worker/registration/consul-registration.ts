/**
 * A worker's entry in Consul, kept true for as long as the worker runs, so that gateways discover it there:
 *
 *   start ──▶ register ──▶ every second: ready models changed? ──▶ register again (same ID: a replace)
 *               ▲  │        every 10 s: does the agent still have it? (an agent restarted without its state)
 *               │  ▼ failure
 *             back-off (retryDelay), one log line per outage
 *   shutdown: maintenance on (gateways stop sending) ─▶ the worker drains and closes ─▶ deregister
 *
 * Consul runs the health check itself (an HTTP check of `/v2/health/ready`). The first registration says
 * `passing`, so a gateway routes to a new worker at once instead of after the first check interval.
 *
 * Nothing here throws into the worker or holds it up: Consul being unreachable only delays the registration, and
 * every call carries a deadline (the client has none of its own).
 */
import { EventEmitter } from 'node:events'
import { performance } from 'node:perf_hooks'
import type Consul from 'consul'
import type { DeregisterOptions, ListOptions, MaintenanceOptions, RegisterOptions } from 'consul/lib/agent/service.js'
import { consulClient, consulDuration, consulErrorText, retryDelay } from '../../common/consul.ts'
import { originOf } from '../../common/http-server.ts'
import { type Logger } from '../../common/logger.ts'
import { modelTags, serviceId, serviceMeta, type RegistrationSettings } from './service-definition.ts'

/** Timers, injected so that tests can run them on a fake clock: `setTimeout` semantics, opaque handles. */
export interface RegistrationTimers {
  /** Milliseconds from a monotonic clock. */
  now (): number
  setTimeout (fn: () => void, ms: number): unknown
  clearTimeout (handle: unknown): void
}

/** Node's timers, unref'd: a registration never keeps a process alive by itself. */
export const REAL_TIMERS: RegistrationTimers = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: handle => { clearTimeout(handle as ReturnType<typeof setTimeout>) }
}

export const POLL_MS = 1000
export const VERIFY_MS = 10_000
/** Deadline of a call made while the worker runs. */
export const CALL_TIMEOUT_MS = 5000
/** Deadline of each call made on the shutdown path: an agent that does not answer must not hold a shutdown up. */
export const SHUTDOWN_CALL_TIMEOUT_MS = 2000
export const MAINTENANCE_REASON = 'flotilla worker shutting down'

/** The worker a {@link ConsulRegistration} describes, and how it runs. */
export interface ConsulRegistrationOptions {
  readonly settings: RegistrationSettings
  readonly httpPort: number
  /** -1 when the gRPC listener is off (then no `grpc_port` meta). */
  readonly grpcPort: number
  /** -1 when the metrics listener is off (then no `metrics_port` meta). */
  readonly metricsPort: number
  /** The READY versions, as `repository.index(true)` lists them; read on every poll. */
  readonly readyModels: () => Iterable<{ name: string, version?: string | undefined }>
  /** Whether `/v2/health/ready` answers 200 now: the status a registration starts with. */
  readonly ready: () => boolean
  readonly logger: Logger
  readonly timers?: RegistrationTimers
  /** [0, 1), for the back-off's jitter. */
  readonly random?: () => number
  /** How often the ready models are compared with the tags registered (default {@link POLL_MS}). */
  readonly pollMs?: number
  /** How often the agent is asked whether it still has the service (default {@link VERIFY_MS}). */
  readonly verifyMs?: number
  /** Default {@link CALL_TIMEOUT_MS}. */
  readonly callTimeoutMs?: number
  /** Default {@link SHUTDOWN_CALL_TIMEOUT_MS}. */
  readonly shutdownTimeoutMs?: number
}

/** Call options with the per-call `timeout` (ms) and `ctx` (cancel) that the client honours but does not declare. */
const withDeadline = <T>(options: T & { timeout: number, ctx?: EventEmitter }): T => options

export class ConsulRegistration {
  /** `<service>-<advertise host>-<http port>`, sanitised (see serviceId in service-definition.ts). */
  readonly serviceId: string
  readonly #settings: RegistrationSettings
  readonly #client: Consul
  readonly #options: ConsulRegistrationOptions
  readonly #timers: RegistrationTimers
  readonly #random: () => number
  readonly #logger: Logger
  readonly #meta: Record<string, string>
  readonly #checkUrl: string
  /** Aborts the routine call in flight when the registration stops, so that it cannot land after a deregister. */
  readonly #cancel = new EventEmitter()
  #state: 'idle' | 'running' | 'stopped' = 'idle'
  #timer: unknown
  #cycle: Promise<void> | undefined
  /** The tags the agent holds, as far as we know; undefined: not registered (yet, or any more). */
  #registeredTags: string | undefined
  /** The tags of the last successful registration, kept through failures: what a change is logged against. */
  #lastTags: string | undefined
  /** Whether any register call was sent: until then there is nothing to put in maintenance or deregister. */
  #attempted = false
  #verifiedAt = -Infinity
  #failures = 0
  #maintenance: Promise<void> | undefined
  #closing: Promise<void> | undefined

  constructor (options: ConsulRegistrationOptions) {
    this.#options = options
    this.#settings = options.settings
    this.#timers = options.timers ?? REAL_TIMERS
    this.#random = options.random ?? Math.random
    this.serviceId = serviceId(this.#settings.service, this.#settings.advertiseHost, options.httpPort)
    this.#logger = options.logger.child({ consul: this.#settings.address.url, serviceId: this.serviceId })
    this.#meta = serviceMeta(options, this.#settings.labels)
    this.#checkUrl = `${originOf(this.#settings.advertiseHost, options.httpPort)}/v2/health/ready`
    this.#client = consulClient(this.#settings.address, this.#settings.token)
  }

  /** Whether the agent holds the current definition, as far as the last call knows. */
  get registered (): boolean {
    return this.#registeredTags !== undefined
  }

  /** Failed attempts in a row (0 once one succeeds): an outage in progress, for tests and status pages. */
  get failures (): number {
    return this.#failures
  }

  /** Registers in the background, then keeps the entry up to date; returns at once. */
  start (): void {
    if (this.#state !== 'idle') return
    this.#state = 'running'
    this.#schedule(0)
  }

  /**
   * Stops keeping the entry up to date and puts the service in maintenance, which makes it critical in the
   * catalog: gateways stop sending to it while it still answers. Never throws; repeated calls return the same
   * promise.
   */
  maintenance (): Promise<void> {
    this.#maintenance ??= (async () => {
      await this.#stop()
      if (!this.#attempted) return
      await this.#shutdownCall('maintenance', () => this.#client.agent.service.maintenance(withDeadline<MaintenanceOptions>({
        id: this.serviceId, enable: true, reason: MAINTENANCE_REASON, timeout: this.#shutdownTimeoutMs
      })), 'in maintenance: gateways stop sending')
    })()
    return this.#maintenance
  }

  /**
   * Deregisters (so that a stopped worker does not linger critical in the catalog) and releases the client's
   * sockets; after it resolves no timer or socket of the registration is left. Never throws.
   */
  close (): Promise<void> {
    this.#closing ??= (async () => {
      await this.#stop()
      if (this.#attempted) {
        await this.#shutdownCall('deregister', () => this.#client.agent.service.deregister(withDeadline<DeregisterOptions>({
          id: this.serviceId, timeout: this.#shutdownTimeoutMs
        })), 'deregistered')
      }
      this.#client.destroy()
    })()
    return this.#closing
  }

  get #shutdownTimeoutMs (): number {
    return this.#options.shutdownTimeoutMs ?? SHUTDOWN_CALL_TIMEOUT_MS
  }

  async #stop (): Promise<void> {
    if (this.#state === 'stopped') return await this.#cycle
    this.#state = 'stopped'
    if (this.#timer !== undefined) this.#timers.clearTimeout(this.#timer)
    this.#timer = undefined
    this.#cancel.emit('cancel')
    await this.#cycle
  }

  async #shutdownCall (what: string, call: () => Promise<unknown>, done: string): Promise<void> {
    try {
      await call()
      this.#logger.info(`Consul: ${done}`)
    } catch (err) {
      this.#logger.warn({ err: consulErrorText(err) }, `Consul ${what} failed; shutting down regardless`)
    }
  }

  #schedule (ms: number): void {
    this.#timer = this.#timers.setTimeout(() => {
      this.#timer = undefined
      this.#cycle = this.#runCycle().finally(() => { this.#cycle = undefined })
    }, ms)
  }

  /** One look: register when the tags changed or the agent lost the entry; then schedule the next look. */
  async #runCycle (): Promise<void> {
    let next = this.#options.pollMs ?? POLL_MS
    try {
      const tags = [...this.#settings.tags, ...modelTags(this.#options.readyModels())]
      if (this.#registeredTags !== tags.join('\n')) {
        await this.#register(tags)
      } else if (this.#timers.now() - this.#verifiedAt >= (this.#options.verifyMs ?? VERIFY_MS)) {
        // GET /v1/agent/services rather than /v1/agent/service/<id>: its answer cannot be mistaken for a missing route.
        const services: Record<string, unknown> = await this.#client.agent.service.list(withDeadline<ListOptions>({
          timeout: this.#callTimeoutMs, ctx: this.#cancel
        }))
        if (!Object.hasOwn(services, this.serviceId)) {
          this.#logger.warn('the Consul agent no longer has this worker (restarted without its state?): registering it again')
          await this.#register(tags)
        }
        this.#verifiedAt = this.#timers.now()
      }
      if (this.#failures > 0) {
        this.#logger.info({ failedAttempts: this.#failures }, 'Consul reachable again: registered')
        this.#failures = 0
      }
    } catch (err) {
      if (this.#state !== 'running') return
      this.#failures++
      // After any failure, register again rather than trust what the agent held before (it may have restarted).
      this.#registeredTags = undefined
      next = retryDelay(this.#failures, this.#random)
      if (this.#failures === 1) this.#logFailure(err, next)
    }
    if (this.#state === 'running') this.#schedule(next)
  }

  get #callTimeoutMs (): number {
    return this.#options.callTimeoutMs ?? CALL_TIMEOUT_MS
  }

  async #register (tags: string[]): Promise<void> {
    const { service, advertiseHost, checkIntervalMs, deregisterAfterMs } = this.#settings
    this.#attempted = true
    await this.#client.agent.service.register(withDeadline<RegisterOptions>({
      name: service,
      id: this.serviceId,
      address: advertiseHost,
      port: this.#options.httpPort,
      tags,
      meta: this.#meta,
      check: {
        name: 'flotilla worker ready',
        http: this.#checkUrl,
        interval: consulDuration(checkIntervalMs),
        timeout: consulDuration(Math.min(checkIntervalMs, 1000)),
        deregistercriticalserviceafter: consulDuration(deregisterAfterMs),
        // Honoured by the agent for a new check only: a re-registration keeps the status Consul's check found.
        status: this.#options.ready() ? 'passing' : 'critical'
      },
      timeout: this.#callTimeoutMs,
      ctx: this.#cancel
    }))
    const key = tags.join('\n')
    if (this.#lastTags === undefined) {
      this.#logger.info({ service, address: advertiseHost, port: this.#options.httpPort, tags, meta: this.#meta }, 'registered in Consul')
    } else if (this.#lastTags !== key) {
      this.#logger.info({ tags }, 'ready models changed: Consul registration updated')
    }
    this.#registeredTags = this.#lastTags = key
    this.#verifiedAt = this.#timers.now()
  }

  #logFailure (err: unknown, retryInMs: number): void {
    const status = (err as { statusCode?: number }).statusCode
    // A 4xx (a token the agent refuses, a definition it rejects) is ours to fix, not an outage to wait out.
    const fields = { err: consulErrorText(err), retryInMs: Math.round(retryInMs) }
    if (status !== undefined && status >= 400 && status < 500 && status !== 429) {
      this.#logger.error(fields, 'Consul refused the registration: retrying with back-off; the worker serves meanwhile')
    } else {
      this.#logger.warn(fields, 'cannot reach Consul: retrying with back-off; the worker serves meanwhile')
    }
  }
}
