/**
 * Active health checking, after HAProxy's `check` and Envoy's HTTP health checker: every endpoint is probed on
 * its own timer, the server as a whole (`/v2/health/ready`) and each model it serves (`/v2/models/{m}/ready`).
 * Each of these targets has its own pair of counters: `unhealthyThreshold` consecutive failures take it out,
 * `healthyThreshold` consecutive successes bring it back, and every change is reported once.
 *
 * Intervals are jittered (±jitterPercent) and the first check of a configured endpoint is spread over one
 * interval, so that many gateways, or many endpoints, do not probe in lock-step. An endpoint added at runtime
 * starts unhealthy and is probed at once: it earns traffic with `healthyThreshold` passing checks.
 *
 * Timers, the clock and randomness are injected; the probe (the only I/O) is too.
 */
import { type Endpoint } from '../fleet/types.ts'
import { type HealthCheckSettings, type HealthTransition, type Probe, type ProbeResult, type Timers } from './types.ts'

export interface ActiveHealthCheckerOptions {
  settings: HealthCheckSettings
  probe: Probe
  timers: Timers
  random: () => number
  /** Called once per change of a target's health. */
  onTransition: (transition: HealthTransition) => void
  /** Called after every probe of the server target, e.g. to record the queue depth it reported. */
  onServerProbe?: (endpoint: Endpoint, result: ProbeResult) => void
}

/** One thing that is probed: the server, or one model on it. */
interface Target {
  readonly model: string | undefined
  healthy: boolean
  successes: number
  failures: number
  last: ProbeResult | undefined
}

interface Watched {
  readonly endpoint: Endpoint
  readonly targets: Target[]
  timer: unknown
  lastCheckAt: number
}

/** What the checker knows of one endpoint, for `/v2/fleet` and the admin API. */
export interface EndpointHealth {
  readonly healthy: boolean
  /** Models whose readiness check is failing on a healthy server. */
  readonly unreadyModels: readonly string[]
  /** The last failing probe's reason, or `undefined` when the last probes passed. */
  readonly lastFailure: string | undefined
  /** Monotonic ms of the last completed check, or `undefined` before the first. */
  readonly lastCheckAt: number | undefined
}

const TIMED_OUT = (ms: number): ProbeResult => ({ ok: false, reason: `no answer within ${ms} ms` })

export class ActiveHealthChecker {
  readonly #options: ActiveHealthCheckerOptions
  readonly #watched = new Map<Endpoint, Watched>()
  #stopped = false

  constructor (options: ActiveHealthCheckerOptions) {
    this.#options = options
  }

  /**
   * Starts probing `endpoint`. A configured endpoint (`initiallyHealthy`, the default) takes traffic at once and
   * is first probed within one interval; an endpoint added at runtime starts unhealthy and is probed at once.
   */
  add (endpoint: Endpoint, initiallyHealthy = true): void {
    if (this.#stopped || this.#watched.has(endpoint)) return
    const target = (model: string | undefined): Target => ({ model, healthy: initiallyHealthy, successes: 0, failures: 0, last: undefined })
    const watched: Watched = {
      endpoint,
      targets: [target(undefined), ...endpoint.models.map(target)],
      timer: undefined,
      lastCheckAt: Number.NaN
    }
    this.#watched.set(endpoint, watched)
    const { intervalMs } = this.#options.settings
    this.#schedule(watched, initiallyHealthy ? this.#options.random() * intervalMs : 0)
  }

  /** Stops probing `endpoint` and forgets it (a probe in flight is ignored when it lands). */
  remove (endpoint: Endpoint): void {
    const watched = this.#watched.get(endpoint)
    if (watched === undefined) return
    this.#options.timers.clearTimeout(watched.timer)
    this.#watched.delete(endpoint)
  }

  /**
   * Marks the server target unhealthy at once, as if `unhealthyThreshold` checks had failed: the endpoint said it is
   * going away (Envoy's immediate health check fail). Checks go on, so it comes back after `healthyThreshold`
   * passing ones if it stays up after all.
   */
  failNow (endpoint: Endpoint, reason: string): void {
    const watched = this.#watched.get(endpoint)
    if (watched === undefined) return
    const target = watched.targets[0]!
    target.successes = 0
    target.failures = Math.max(target.failures, this.#options.settings.unhealthyThreshold)
    target.last = { ok: false, reason }
    if (!target.healthy) return
    target.healthy = false
    this.#options.onTransition({ endpoint, model: undefined, healthy: false, reason })
  }

  /** Whether the server, and `model` on it when given, pass their checks. Unknown endpoints are healthy. */
  isHealthy (endpoint: Endpoint, model?: string): boolean {
    const watched = this.#watched.get(endpoint)
    if (watched === undefined) return true
    if (!watched.targets[0]!.healthy) return false
    if (model === undefined) return true
    return watched.targets.find(t => t.model === model)?.healthy ?? true
  }

  health (endpoint: Endpoint): EndpointHealth | undefined {
    const watched = this.#watched.get(endpoint)
    if (watched === undefined) return undefined
    const failing = watched.targets.find(t => t.last !== undefined && !t.last.ok)
    return {
      healthy: watched.targets[0]!.healthy,
      unreadyModels: watched.targets.filter(t => t.model !== undefined && !t.healthy).map(t => t.model!),
      lastFailure: failing?.last?.ok === false ? `${failing.model ?? 'server'}: ${failing.last.reason}` : undefined,
      lastCheckAt: Number.isNaN(watched.lastCheckAt) ? undefined : watched.lastCheckAt
    }
  }

  /** Cancels every timer; probes in flight are ignored when they land. */
  stop (): void {
    this.#stopped = true
    for (const watched of this.#watched.values()) this.#options.timers.clearTimeout(watched.timer)
    this.#watched.clear()
  }

  #schedule (watched: Watched, delayMs: number): void {
    watched.timer = this.#options.timers.setTimeout(() => { this.#check(watched) }, delayMs)
  }

  #nextInterval (): number {
    const { intervalMs, jitterPercent } = this.#options.settings
    return intervalMs * (1 + (this.#options.random() * 2 - 1) * jitterPercent / 100)
  }

  #check (watched: Watched): void {
    const { probe, timers, settings } = this.#options
    const probeOne = (target: Target): Promise<ProbeResult> => new Promise<ProbeResult>(resolve => {
      // The checker holds its own deadline, so a probe that ignores its timeout cannot stall the cycle.
      const timer = timers.setTimeout(() => resolve(TIMED_OUT(settings.timeoutMs)), settings.timeoutMs)
      probe(watched.endpoint, target.model, settings.timeoutMs).then(
        result => { timers.clearTimeout(timer); resolve(result) },
        err => { timers.clearTimeout(timer); resolve({ ok: false, reason: err instanceof Error ? err.message : String(err) }) }
      )
    })
    Promise.all(watched.targets.map(probeOne)).then(results => {
      // Removed or stopped while probing: the endpoint is no longer ours to report on.
      if (this.#watched.get(watched.endpoint) !== watched) return
      watched.lastCheckAt = timers.now()
      for (let i = 0; i < results.length; i++) this.#apply(watched.endpoint, watched.targets[i]!, results[i]!)
      this.#options.onServerProbe?.(watched.endpoint, results[0]!)
      this.#schedule(watched, this.#nextInterval())
    }, () => {})
  }

  #apply (endpoint: Endpoint, target: Target, result: ProbeResult): void {
    const { healthyThreshold, unhealthyThreshold } = this.#options.settings
    target.last = result
    if (result.ok) {
      target.failures = 0
      target.successes++
      if (!target.healthy && target.successes >= healthyThreshold) {
        target.healthy = true
        this.#options.onTransition({ endpoint, model: target.model, healthy: true, reason: 'checks passing' })
      }
    } else {
      target.successes = 0
      target.failures++
      if (target.healthy && target.failures >= unhealthyThreshold) {
        target.healthy = false
        this.#options.onTransition({ endpoint, model: target.model, healthy: false, reason: result.reason })
      }
    }
  }
}
