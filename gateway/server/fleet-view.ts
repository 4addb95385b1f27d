/**
 * `GET /v2/fleet`: what an operator asks first when traffic looks wrong. Every endpoint with its state, load,
 * limits, recent latency and last health result, and per model which endpoints take its traffic now and whether
 * it is in panic. Read from the live objects at request time; nothing here is kept per request.
 */
import { type ModelCacheView } from '../cache/response-cache.ts'
import { type DiscoveryStatus } from '../discovery/consul-discovery.ts'
import { type Fleet } from '../fleet/fleet.ts'
import { type Endpoint, type EndpointSource } from '../fleet/types.ts'
import { type EndpointHealthView } from '../health/fleet-health.ts'
import { type ModelPolicies } from '../proxy/model-policy.ts'

/** One endpoint as `GET /v2/fleet` shows it. */
export interface EndpointView {
  name: string
  origin: string
  /** Where it came from: the fleet file, the admin API or Consul. */
  source: EndpointSource
  state: string
  weight: number
  models: readonly string[]
  /** `null`: every version. */
  versions: readonly number[] | null
  in_flight: number
  /** 0: no limit. */
  max_in_flight: number
  /** Passes its active checks (server and every model). */
  healthy: boolean
  /** Models whose readiness check fails on a server that is otherwise healthy. */
  unready_models: readonly string[]
  ejected: boolean
  /** The last failing probe's reason, `null` when the last probes passed or none ran. */
  last_health_failure: string | null
  /** Milliseconds since the last completed check, `null` before the first (or with checks off). */
  last_check_ms_ago: number | null
  /** Recent latency (an exponentially weighted mean of the last ~10 attempts), `null` before the first. */
  latency_ms: number | null
  /** The worker's own queue as it last reported it, and how long ago; `null` before a report. */
  queue_depth: number | null
  queue_depth_ms_ago: number | null
}

/** One model as `GET /v2/fleet` shows it. */
export interface ModelView {
  name: string
  strategy: string
  /** The endpoints its requests (naming no version) go to now. */
  endpoints: readonly string[]
  /** Too few usable endpoints: requests go to all of them (panic threshold). */
  panic: boolean
  /** Whether its answers are cached (and why), coalesced, for how long; null when the gateway has no cache. */
  cache: ModelCacheView | null
  /** How long an attempt may take now (`Infinity`: no limit, shown as null), and the recent p99 it follows. */
  per_try_timeout_ms: number | null
  recent_p99_ms: number | null
}

/** Service discovery as `GET /v2/fleet` shows it (`null` without `discovery.consul`). */
export interface DiscoveryView {
  source: 'consul'
  address: string
  service: string
  tag: string | null
  /** `starting` before the first answer, `ok`, or `failing` (the servers known before stay in the fleet). */
  state: DiscoveryStatus['state']
  /** Servers in the last answer applied. */
  servers: number
  index: number
  /** ISO 8601 time of the last answer, and how long ago; `null` before the first. */
  last_success: string | null
  last_success_ms_ago: number | null
  errors: number
  consecutive_errors: number
  last_error: string | null
}

export interface FleetView {
  endpoints: EndpointView[]
  models: ModelView[]
  discovery: DiscoveryView | null
  /** Requests waiting in the gateway queue; requests and retries in progress. */
  queue_waiting: number
  requests_in_progress: number
  retries_in_progress: number
}

/** What the view is read from. */
export interface FleetViewSources {
  fleet: Fleet
  health: (endpoint: Endpoint) => EndpointHealthView
  policies: ModelPolicies
  queueWaiting: () => number
  requestsInProgress: () => number
  retriesInProgress: () => number
  /** The monotonic clock the fleet's timestamps use. */
  now: () => number
  sourceOf: (endpoint: Endpoint) => EndpointSource
  /** Discovery's state, when the fleet file sets `discovery`. */
  discovery?: (() => DiscoveryStatus) | undefined
  /** The wall clock discovery's times are on (`Date.now`). */
  wallClock?: (() => number) | undefined
  /** Each model's cache state, when the gateway has a response cache. */
  cache?: ((model: string) => ModelCacheView) | undefined
  /** Each model's per-try timeout now and the recent p99 it follows (`undefined`: not known yet). */
  perTry?: ((model: string) => { readonly timeoutMs: number, readonly p99Ms: number | undefined }) | undefined
}

function round (ms: number): number {
  return Math.round(ms * 100) / 100
}

function agoOrNull (now: number, at: number | undefined): number | null {
  return at === undefined || !Number.isFinite(at) ? null : Math.max(0, Math.round(now - at))
}

/** One endpoint as `GET /v2/fleet` shows it; `now` on the clock its timestamps use. */
export function endpointView (e: Endpoint, source: EndpointSource, health: EndpointHealthView, now: number): EndpointView {
  return {
    name: e.name,
    origin: e.origin,
    source,
    state: e.state,
    weight: round(e.weight),
    models: e.models,
    versions: e.versions ?? null,
    in_flight: e.inFlight,
    max_in_flight: e.maxInFlight,
    healthy: health.healthy ?? true,
    unready_models: health.unreadyModels ?? [],
    ejected: health.ejected,
    last_health_failure: health.lastFailure ?? null,
    last_check_ms_ago: agoOrNull(now, health.lastCheckAt),
    latency_ms: Number.isNaN(e.latencyMs) ? null : round(e.latencyMs),
    queue_depth: Number.isFinite(e.queueDepthAt) ? e.queueDepth : null,
    queue_depth_ms_ago: agoOrNull(now, e.queueDepthAt)
  }
}

function perTryView (perTry: { readonly timeoutMs: number, readonly p99Ms: number | undefined } | undefined): Pick<ModelView, 'per_try_timeout_ms' | 'recent_p99_ms'> {
  return {
    per_try_timeout_ms: perTry === undefined || !Number.isFinite(perTry.timeoutMs) ? null : perTry.timeoutMs,
    recent_p99_ms: perTry?.p99Ms === undefined ? null : round(perTry.p99Ms)
  }
}

function discoveryView (s: DiscoveryStatus, wallNow: number): DiscoveryView {
  return {
    source: s.source,
    address: s.address,
    service: s.service,
    tag: s.tag,
    state: s.state,
    servers: s.servers,
    index: s.index,
    last_success: s.lastSuccessAt === null ? null : new Date(s.lastSuccessAt).toISOString(),
    last_success_ms_ago: s.lastSuccessAt === null ? null : Math.max(0, wallNow - s.lastSuccessAt),
    errors: s.errors,
    consecutive_errors: s.consecutiveErrors,
    last_error: s.lastError
  }
}

export function fleetView (sources: FleetViewSources): FleetView {
  const { fleet, now: clock } = sources
  const now = clock()
  const endpoints = fleet.endpoints.map((e) => endpointView(e, sources.sourceOf(e), sources.health(e), now))
  const models = fleet.models.map((name): ModelView => ({
    name,
    strategy: sources.policies.for(name).balancer.name,
    endpoints: fleet.endpointsServing(name).map((e) => e.name),
    panic: fleet.panicking(name),
    cache: sources.cache?.(name) ?? null,
    ...perTryView(sources.perTry?.(name))
  }))
  return {
    endpoints,
    models,
    discovery: sources.discovery === undefined ? null : discoveryView(sources.discovery(), (sources.wallClock ?? Date.now)()),
    queue_waiting: sources.queueWaiting(),
    requests_in_progress: sources.requestsInProgress(),
    retries_in_progress: sources.retriesInProgress()
  }
}
