/**
 * Health, as two separate mechanisms (Envoy keeps them apart for good reason): the active checker asks each
 * server whether it is ready, on a timer; the outlier detector watches the answers to real traffic and ejects a
 * server that keeps failing. Both report transitions; the fleet turns them into candidate lists. Neither does
 * routing, and neither owns a socket: the active checker's probe is injected, the detector is pure.
 */
import { type Endpoint } from '../fleet/types.ts'

/** Timers, injected so tests run on a fake clock. `setTimeout` semantics; handles are opaque. */
export interface Timers {
  /** Milliseconds from a monotonic clock. */
  now (): number
  setTimeout (fn: () => void, ms: number): unknown
  clearTimeout (handle: unknown): void
}

/** Active check settings; defaults are HAProxy's (`inter 2s`, `rise 2`, `fall 3`), with a 1 s timeout. */
export interface HealthCheckSettings {
  readonly intervalMs: number
  readonly timeoutMs: number
  /** Each interval is drawn uniformly from ±jitterPercent around intervalMs, so checks of many gateways spread. */
  readonly jitterPercent: number
  /** Consecutive successes that bring an unhealthy target back. */
  readonly healthyThreshold: number
  /** Consecutive failures that take a healthy target out. */
  readonly unhealthyThreshold: number
}

export const DEFAULT_HEALTH_CHECK: HealthCheckSettings = Object.freeze({
  intervalMs: 2000,
  timeoutMs: 1000,
  jitterPercent: 10,
  healthyThreshold: 2,
  unhealthyThreshold: 3
})

/** What one probe of one target found. */
export type ProbeResult =
  | { readonly ok: true, readonly queueDepth?: number }
  | { readonly ok: false, readonly reason: string }

/**
 * Probes one target of an endpoint: `model` undefined means the server as a whole (`GET /v2/health/ready`),
 * otherwise that model (`GET /v2/models/{model}/ready`). Must settle within `timeoutMs` (the checker also gives
 * up on it then) and must not throw.
 */
export type Probe = (endpoint: Endpoint, model: string | undefined, timeoutMs: number) => Promise<ProbeResult>

/** A change of one target's health, reported once per change. */
export interface HealthTransition {
  readonly endpoint: Endpoint
  /** `undefined`: the server as a whole. */
  readonly model: string | undefined
  readonly healthy: boolean
  /** The last probe's reason when going unhealthy; `'checks passing'` when coming back. */
  readonly reason: string
}

/** Passive ejection settings; defaults are Envoy's outlier detection defaults. */
export interface OutlierSettings {
  /** Consecutive failures (5xx answers or connection failures) that eject an endpoint. */
  readonly consecutiveFailures: number
  /** First ejection lasts this long; each further ejection in a row adds this much again. */
  readonly baseEjectionTimeMs: number
  readonly maxEjectionTimeMs: number
  /** At most this share of a model's endpoints ejected at once (at least one is always ejectable). */
  readonly maxEjectionPercent: number
}

export const DEFAULT_OUTLIER_DETECTION: OutlierSettings = Object.freeze({
  consecutiveFailures: 5,
  baseEjectionTimeMs: 30_000,
  maxEjectionTimeMs: 300_000,
  maxEjectionPercent: 10
})

/** How one exchange with an endpoint went, as the outlier detector counts it. */
export type Outcome = 'success' | 'server_error' | 'connect_failure'

/** An ejection starting or ending. */
export interface EjectionEvent {
  readonly endpoint: Endpoint
  readonly ejected: boolean
  /** For an ejection: why, and for how long. */
  readonly reason: string
  readonly durationMs: number
}
