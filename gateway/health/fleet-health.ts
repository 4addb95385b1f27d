/**
 * Health for a whole fleet: the active checker and the outlier detector, configured from the fleet file, joined
 * into the one question the fleet asks (`usable(endpoint, model)`), with every change logged once and the fleet's
 * candidate lists refreshed. The proxy reports each exchange's outcome here ({@link FleetHealth.record}).
 */
import { type Logger } from '../../common/logger.ts'
import { type FleetConfig } from '../fleet/fleet-config.ts'
import { type Fleet } from '../fleet/fleet.ts'
import { type Endpoint } from '../fleet/types.ts'
import { ActiveHealthChecker, type EndpointHealth } from './active-checker.ts'
import { OutlierDetector, outcomeOf } from './outlier-detector.ts'
import { type EjectionEvent, type HealthTransition, type Probe, type Timers } from './types.ts'

export interface FleetHealthOptions {
  config: FleetConfig
  probe: Probe
  timers: Timers
  random: () => number
  logger: Logger
  /** Told of every change after the fleet was refreshed, e.g. for metrics. */
  onTransition?: (transition: HealthTransition) => void
  onEjection?: (event: EjectionEvent) => void
}

/** What `/v2/fleet` shows of an endpoint's health. */
export interface EndpointHealthView extends Partial<EndpointHealth> {
  readonly ejected: boolean
}

export class FleetHealth {
  readonly #checker: ActiveHealthChecker | undefined
  readonly #detector: OutlierDetector | undefined
  readonly #options: FleetHealthOptions
  #fleet: Fleet | undefined

  constructor (options: FleetHealthOptions) {
    this.#options = options
    const { config, timers, logger } = options
    const hc = config.health_check
    if (hc.enabled) {
      this.#checker = new ActiveHealthChecker({
        settings: {
          intervalMs: hc.interval_ms,
          timeoutMs: hc.timeout_ms,
          jitterPercent: hc.jitter_percent,
          healthyThreshold: hc.healthy_threshold,
          unhealthyThreshold: hc.unhealthy_threshold
        },
        probe: options.probe,
        timers,
        random: options.random,
        onTransition: (t) => {
          const what = { endpoint: t.endpoint.name, model: t.model, reason: t.reason }
          if (t.healthy) logger.info(what, t.model === undefined ? 'endpoint healthy' : 'model ready on endpoint')
          else logger.warn(what, t.model === undefined ? 'endpoint unhealthy' : 'model not ready on endpoint')
          this.#fleet?.refresh()
          options.onTransition?.(t)
        },
        onServerProbe: (endpoint, result) => {
          if (result.ok && result.queueDepth !== undefined) {
            endpoint.queueDepth = result.queueDepth
            endpoint.queueDepthAt = timers.now()
          }
        }
      })
    }
    const od = config.outlier_detection
    if (od.enabled) {
      this.#detector = new OutlierDetector({
        settings: {
          consecutiveFailures: od.consecutive_failures,
          baseEjectionTimeMs: od.base_ejection_time_ms,
          maxEjectionTimeMs: od.max_ejection_time_ms,
          maxEjectionPercent: od.max_ejection_percent
        },
        timers,
        // The cap is about each model's servers, whatever their state: only failures of real traffic lead here.
        peers: (endpoint) => endpoint.models.map((m) => this.#fleet?.endpoints.filter((e) => e.models.includes(m)) ?? []),
        onEjection: (e) => {
          const what = { endpoint: e.endpoint.name, reason: e.reason, durationMs: e.durationMs }
          if (e.ejected) logger.warn(what, 'endpoint ejected')
          else logger.info(what, 'endpoint back from ejection')
          this.#fleet?.refresh()
          options.onEjection?.(e)
        }
      })
    }
  }

  /** The fleet's `usable` predicate: passing its checks for `model`, and not ejected. */
  readonly usable = (endpoint: Endpoint, model: string): boolean =>
    (this.#checker?.isHealthy(endpoint, model) ?? true) && this.#detector?.isEjected(endpoint) !== true

  /** Starts checking every endpoint of `fleet` (configured endpoints start healthy). */
  attach (fleet: Fleet): void {
    this.#fleet = fleet
    for (const endpoint of fleet.endpoints) this.#checker?.add(endpoint)
  }

  /**
   * Starts checking an endpoint that joined the fleet at run time. It starts unhealthy and is probed at once, so it
   * takes traffic only after `healthy_threshold` passing checks (with checks off, at once). `healthy`: it replaces
   * one at the same address that was passing, and starts passing (checked on its usual interval).
   */
  add (endpoint: Endpoint, healthy = false): void {
    this.#checker?.add(endpoint, healthy)
  }

  /** Forgets an endpoint that left the fleet: no more probes, no ejection timer. */
  remove (endpoint: Endpoint): void {
    this.#checker?.remove(endpoint)
    this.#detector?.remove(endpoint)
  }

  /** Whether the active checker is on (else an added endpoint is usable at once). */
  get checking (): boolean {
    return this.#checker !== undefined
  }

  /** The endpoint said it is shutting down: out of rotation now, rather than after failing its next checks. */
  failNow (endpoint: Endpoint, reason: string): void {
    this.#checker?.failNow(endpoint, reason)
  }

  /**
   * Records one exchange: the status a server answered, or `undefined` when no connection could be made. Also
   * takes the queue depth the worker reported, for `least_queue`.
   */
  record (endpoint: Endpoint, status: number | undefined, queueDepth?: number): void {
    this.#detector?.record(endpoint, outcomeOf(status))
    if (queueDepth !== undefined) {
      endpoint.queueDepth = queueDepth
      endpoint.queueDepthAt = this.#options.timers.now()
    }
  }

  view (endpoint: Endpoint): EndpointHealthView {
    return { ...this.#checker?.health(endpoint), ejected: this.#detector?.isEjected(endpoint) === true }
  }

  stop (): void {
    this.#checker?.stop()
    this.#detector?.stop()
  }
}
