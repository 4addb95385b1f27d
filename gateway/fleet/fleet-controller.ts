/**
 * Runtime changes to the fleet, each with the steps around it that make it lose no request: the admin API and the
 * fleet file's hot reload both come through here.
 *
 * - add: the endpoint joins the fleet `joining` (out of every candidate list and of the panic arithmetic) and is
 *   probed at once, so it takes traffic only after passing `health_check.healthy_threshold` checks; with `gateway.slow_start_ms`, its effective weight then ramps up
 *   linearly from 5% (HAProxy's `slowstart`).
 * - drain: the endpoint leaves every candidate list at once (no new request goes to it, retries included: see
 *   `proxy/forward.ts`), its requests in flight finish, and it is marked `drained` when none is left or when the
 *   drain timeout passes, whichever comes first.
 * - remove: drain first (unless forced), then out of the fleet, its health checks stopped and its connection pool
 *   closed once its last requests finish. A request in flight on a removed endpoint completes.
 * - weight: applies at once.
 * - reload: the difference between two fleet files, as the steps above.
 * - discovery: the servers Consul lists (`setDiscovered`), as the steps above: new ones are checked in, the ones it
 *   no longer lists are drained out, changed ones replaced.
 *
 * Three sources feed one fleet, and for one server (same name, or same address) the first of these wins: the fleet
 * file, then the admin API, then Consul. The file and the admin API are an operator's explicit word about this
 * gateway (a weight, labels, a name), Consul is what workers say about themselves; so a server listed by hand is
 * routed as written, and its Consul entry waits until the hand-written one goes. An operator's drain of a Consul
 * server holds while Consul lists it, and when it comes back, until it is undrained.
 *
 * Time is injected (the health timers); nothing here sits on the request path.
 */
import { createError } from '../../common/errors.ts'
import { originOf } from '../../common/http-server.ts'
import { type Logger } from '../../common/logger.ts'
import { type DrainStatus, type EndpointSource, type RemoveResult } from '../admin/api.ts'
import { type FleetHealth } from '../health/fleet-health.ts'
import { type HealthTransition, type Timers } from '../health/types.ts'
import { type UpstreamPool } from '../proxy/upstream-pool.ts'
import { type FleetConfig } from './fleet-config.ts'
import { sameConfig, trafficServers, type Fleet, type FleetServer } from './fleet.ts'
import { type Endpoint } from './types.ts'

/** How often a drain looks at the in-flight count. Short: a drain's caller waits on it, and it costs nothing. */
const DRAIN_POLL_MS = 20
/** Slow start ramps the weight in this many steps (HAProxy recomputes it about as often). */
const SLOW_START_STEPS = 20
/** The share of its weight an endpoint starts slow start with: never 0, which would take it out altogether. */
const SLOW_START_FLOOR = 1 / SLOW_START_STEPS

export interface FleetControllerOptions {
  fleet: Fleet
  health: FleetHealth
  /** Closes the connections of endpoints that left. */
  pool: UpstreamPool
  timers: Timers
  logger: Logger
  /** `gateway.drain_timeout_ms`: for drains that name no timeout (removals by reload among them). */
  drainTimeoutMs: number
  /** `gateway.slow_start_ms`; 0 turns slow start off. */
  slowStartMs: number
}

interface Drain {
  readonly endpoint: Endpoint
  /** Started by a removal: it cannot be undone, the endpoint leaves when it is over. */
  removing: boolean
  /** Ended by an undrain: it has no outcome. */
  cancelled: boolean
  readonly startedAt: number
  readonly timeoutMs: number
  done: boolean
  completed: boolean
  timer: unknown
  readonly finished: Promise<void>
  readonly finish: () => void
}

/** What one Consul answer changed, for the log. */
export interface DiscoveryChanges {
  readonly added: string[]
  readonly leaving: string[]
  readonly replaced: string[]
}

interface SlowStart {
  readonly startedAt: number
  timer: unknown
}

export class FleetController {
  readonly #options: FleetControllerOptions
  readonly #sources = new Map<Endpoint, EndpointSource>()
  readonly #drains = new Map<Endpoint, Drain>()
  readonly #slowStarts = new Map<Endpoint, SlowStart>()
  /** What Consul lists now (see {@link FleetController.setDiscovered}). */
  #discovered: readonly FleetServer[] = []
  /** Consul servers an operator drained: they stay drained while listed, and when they come back, until undrained. */
  readonly #held = new Set<string>()
  /** Consul endpoints being drained out because Consul stopped listing them. */
  readonly #leaving = new Set<Endpoint>()
  /** Consul entries left out because the file or the admin API has the server, each logged once. */
  readonly #shadowed = new Set<string>()
  #stopped = false

  constructor (options: FleetControllerOptions) {
    this.#options = options
    for (const endpoint of options.fleet.endpoints) this.#sources.set(endpoint, 'file')
  }

  /** Where an endpoint came from. */
  sourceOf (endpoint: Endpoint): EndpointSource {
    return this.#sources.get(endpoint) ?? 'file'
  }

  /**
   * The endpoint called `name`.
   *
   * @throws FlotillaError `GW_ERR_ADMIN_UNKNOWN_ENDPOINT` (404) naming the endpoints there are
   */
  get (name: string): Endpoint {
    const endpoint = this.#options.fleet.get(name)
    if (endpoint !== undefined) return endpoint
    const names = this.#options.fleet.endpoints.map((e) => e.name)
    throw createError('GW_ERR_ADMIN_UNKNOWN_ENDPOINT', name, names.length > 0 ? names.join(', ') : 'none')
  }

  /**
   * Adds a server. It is health-checked before it takes traffic (at once when checks are off).
   *
   * @throws FlotillaError `GW_ERR_ADMIN_CONFLICT` (409) when the name is taken
   */
  add (server: FleetServer, source: EndpointSource): Endpoint {
    const endpoint = this.#add(server, source)
    // A Consul entry for the same address now yields to this one.
    if (source !== 'consul') this.#reconcileDiscovered()
    return endpoint
  }

  /**
   * @param healthy it replaces an endpoint at the same address that was passing its checks: it keeps taking
   *   traffic (its checks go on) rather than going through `joining` again
   */
  #add (server: FleetServer, source: EndpointSource, healthy = false): Endpoint {
    const { fleet, health, logger } = this.#options
    if (fleet.get(server.name) !== undefined) {
      throw createError('GW_ERR_ADMIN_CONFLICT', `a server named '${server.name}' is already in the fleet; remove it first or pick another name`)
    }
    const joining = health.checking && !healthy
    const endpoint = fleet.add(server, joining ? 'joining' : 'active')
    this.#sources.set(endpoint, source)
    health.add(endpoint, !joining)
    logger.info({ endpoint: endpoint.name, origin: endpoint.origin, models: endpoint.models, versions: endpoint.versions, source },
      joining ? 'endpoint added; it takes traffic once its health checks pass' : 'endpoint added')
    if (!health.checking) this.#startSlowStart(endpoint)
    return endpoint
  }

  /**
   * Takes what Consul lists now: servers it did not list before are added (health-checked in, slow-started), the
   * ones it no longer lists are drained and removed, changed ones (models, versions, labels, address) replaced. An
   * entry whose name or address the file or the admin API already has is left out (see the top of this file).
   * Callers never pass an empty list that follows a non-empty one: that is Consul saying nothing
   * (`discovery/consul-discovery.ts`).
   */
  setDiscovered (servers: readonly FleetServer[]): DiscoveryChanges {
    this.#discovered = servers
    return this.#reconcileDiscovered()
  }

  #reconcileDiscovered (): DiscoveryChanges {
    const changes: DiscoveryChanges = { added: [], leaving: [], replaced: [] }
    if (this.#stopped) return changes
    const { fleet, logger } = this.#options
    const names = new Map<string, Endpoint>()
    const origins = new Map<string, Endpoint>()
    for (const endpoint of fleet.endpoints) {
      if (this.sourceOf(endpoint) === 'consul') continue
      names.set(endpoint.name, endpoint)
      origins.set(endpoint.origin, endpoint)
    }
    const wanted = new Map<string, FleetServer>()
    for (const server of this.#discovered) {
      const other = names.get(server.name) ?? origins.get(originOf(server.host, server.port))
      if (other === undefined) {
        wanted.set(server.name, server)
      } else if (!this.#shadowed.has(server.name)) {
        this.#shadowed.add(server.name)
        logger.info({ consul: server.name, endpoint: other.name, source: this.sourceOf(other) },
          'Consul lists a server the fleet already has from another source; that entry wins')
      }
    }
    for (const endpoint of fleet.endpoints) {
      if (this.sourceOf(endpoint) !== 'consul' || this.#leaving.has(endpoint)) continue
      const server = wanted.get(endpoint.name)
      wanted.delete(endpoint.name)
      if (server === undefined) {
        changes.leaving.push(endpoint.name)
        this.#leave(endpoint)
      } else if (!sameConfig(endpoint, server)) {
        changes.replaced.push(endpoint.name)
        // Same address, new models or labels: the worker itself is as healthy as it was.
        const healthy = endpoint.state === 'active' && endpoint.origin === originOf(server.host, server.port) &&
          this.#options.health.view(endpoint).healthy !== false
        this.#retire(endpoint)
        this.#addDiscovered(server, healthy)
      }
    }
    for (const server of wanted.values()) {
      // Still draining out under that name: it comes back once gone (see #leave).
      if (fleet.get(server.name) !== undefined) continue
      changes.added.push(server.name)
      this.#addDiscovered(server, false)
    }
    return changes
  }

  #addDiscovered (server: FleetServer, healthy: boolean): void {
    this.#shadowed.delete(server.name)
    const endpoint = this.#add(server, 'consul', healthy)
    if (this.#held.has(server.name)) this.#drain(endpoint, this.#options.drainTimeoutMs)
  }

  /** Consul stopped listing `endpoint`: drained out, not cut; if it is listed again meanwhile, it rejoins after. */
  #leave (endpoint: Endpoint): void {
    this.#leaving.add(endpoint)
    this.#options.logger.info({ endpoint: endpoint.name, inFlight: endpoint.inFlight }, 'Consul no longer lists the endpoint: draining it out')
    this.#removeEndpoint(endpoint, {})
      .catch((err: unknown) => { this.#options.logger.warn({ err, endpoint: endpoint.name }, 'removing an endpoint Consul dropped failed') })
      .finally(() => {
        this.#leaving.delete(endpoint)
        this.#reconcileDiscovered()
      })
  }

  /**
   * Starts draining `name` (or returns the drain already under way). No new request goes to it from now on.
   *
   * @param timeoutMs how long to wait for its requests in flight; default `gateway.drain_timeout_ms`
   */
  drain (name: string, timeoutMs = this.#options.drainTimeoutMs): DrainStatus {
    const endpoint = this.get(name)
    if (this.sourceOf(endpoint) === 'consul' && !this.#leaving.has(endpoint)) this.#held.add(name)
    return this.#statusOf(this.#drain(endpoint, timeoutMs))
  }

  /**
   * Resolves when the drain of `name` is over (at once when it is not draining), with its outcome; `null` when
   * there was none, or an undrain ended it. The outcome stands even if the endpoint was removed meanwhile.
   */
  async drained (name: string): Promise<DrainStatus | null> {
    const drain = this.#drains.get(this.get(name))
    if (drain === undefined) return null
    await drain.finished
    return drain.cancelled ? null : this.#statusOf(drain)
  }

  /** The drain under way or last finished, `null` when none. */
  drainStatus (name: string): DrainStatus | null {
    const drain = this.#drains.get(this.get(name))
    return drain === undefined ? null : this.#statusOf(drain)
  }

  /**
   * Takes a draining or drained endpoint back into rotation.
   *
   * @throws FlotillaError `GW_ERR_ADMIN_CONFLICT` (409) when it is draining to be removed
   */
  undrain (name: string): Endpoint {
    const endpoint = this.get(name)
    this.#held.delete(name)
    const drain = this.#drains.get(endpoint)
    if (drain?.removing === true) {
      throw createError('GW_ERR_ADMIN_CONFLICT', `'${name}' is draining to be removed; it cannot be undrained (add it again once it is gone)`)
    }
    if (drain !== undefined) {
      this.#options.timers.clearTimeout(drain.timer)
      this.#drains.delete(endpoint)
      drain.cancelled = true
      drain.finish()
    }
    if (endpoint.state !== 'active') {
      this.#options.fleet.setState(endpoint, 'active')
      this.#options.logger.info({ endpoint: endpoint.name }, 'endpoint undrained: taking traffic again')
    }
    return endpoint
  }

  /** Sets a server's weight (0-1000, checked by the caller); it applies at once, and ends any slow start. */
  setWeight (name: string, weight: number): Endpoint {
    const endpoint = this.get(name)
    this.#stopSlowStart(endpoint)
    this.#options.fleet.setWeight(endpoint, weight)
    this.#options.logger.info({ endpoint: endpoint.name, weight }, 'endpoint weight set')
    return endpoint
  }

  /**
   * Removes `name`: drains it first (unless `force`), then takes it out of the fleet. Its requests still in flight
   * (after a forced removal, or a drain that timed out) finish on their connections, which close after them.
   */
  async remove (name: string, options: { force?: boolean, timeoutMs?: number } = {}): Promise<RemoveResult> {
    const endpoint = this.get(name)
    const source = this.sourceOf(endpoint)
    if (source === 'consul' && this.#discovered.some((s) => s.name === name)) {
      throw createError('GW_ERR_ADMIN_CONFLICT', `'${name}' comes from Consul, which still lists it, so it would come back: ` +
        `drain it to keep traffic off it (it stays drained while Consul lists it), or deregister it from Consul`)
    }
    const result = await this.#removeEndpoint(endpoint, options)
    // Its Consul entry, if any, takes over.
    if (source !== 'consul') this.#reconcileDiscovered()
    return result
  }

  async #removeEndpoint (endpoint: Endpoint, options: { force?: boolean, timeoutMs?: number }): Promise<RemoveResult> {
    let drained = false
    if (options.force !== true) {
      const drain = this.#drain(endpoint, options.timeoutMs ?? this.#options.drainTimeoutMs)
      drain.removing = true
      await drain.finished
      drained = drain.completed
    }
    this.#forget(endpoint)
    return { removed: endpoint.name, drained, in_flight: endpoint.inFlight }
  }

  /**
   * Told of every health transition: an endpoint whose server checks start passing joins the candidate lists (when
   * it was added at run time) and begins its slow start.
   */
  healthChanged (transition: HealthTransition): void {
    const { endpoint } = transition
    if (transition.model !== undefined || !transition.healthy || this.#options.fleet.get(endpoint.name) !== endpoint) return
    if (endpoint.state === 'joining') {
      this.#options.fleet.setState(endpoint, 'active')
      this.#options.logger.info({ endpoint: endpoint.name }, 'endpoint passed its health checks: taking traffic')
    }
    this.#startSlowStart(endpoint)
  }

  /**
   * Applies a reloaded fleet file: servers it adds are health-checked in, servers it no longer has are drained out
   * and removed, changed weights and in-flight limits apply at once, and a server whose address, models, versions or labels
   * changed is replaced (the old one drains, the new one is checked in). Servers added through the admin API stay,
   * unless the file now has a server of the same name, which takes over.
   *
   * @returns a summary for the log
   */
  applyFile (config: FleetConfig): { added: string[], removed: string[], replaced: string[], reweighted: string[] } {
    const { fleet } = this.#options
    const wanted = new Map<string, FleetServer>()
    const defaultMaxInFlight = config.gateway.max_in_flight_per_server
    for (const server of trafficServers(config)) wanted.set(server.name, server)
    const summary = { added: [] as string[], removed: [] as string[], replaced: [] as string[], reweighted: [] as string[] }
    for (const endpoint of fleet.endpoints) {
      const server = wanted.get(endpoint.name)
      if (server === undefined) {
        if (this.sourceOf(endpoint) !== 'file') continue
        summary.removed.push(endpoint.name)
        this.#retire(endpoint)
      } else if (sameConfig(endpoint, server)) {
        this.#sources.set(endpoint, 'file')
        // The limit is read per request: a new one applies at once, no replacement needed.
        endpoint.maxInFlight = server.max_in_flight ?? defaultMaxInFlight
        if (endpoint.configuredWeight !== server.weight) {
          summary.reweighted.push(endpoint.name)
          this.#stopSlowStart(endpoint)
          fleet.setWeight(endpoint, server.weight)
        }
        wanted.delete(endpoint.name)
      } else {
        summary.replaced.push(endpoint.name)
        this.#retire(endpoint)
      }
    }
    for (const server of wanted.values()) {
      if (!summary.replaced.includes(server.name)) summary.added.push(server.name)
      this.#add(server, 'file')
    }
    // Consul entries yield to servers the file now has, and take over from those it dropped.
    this.#reconcileDiscovered()
    return summary
  }

  /** Cancels every timer (drains still waiting are resolved as they stand). */
  stop (): void {
    this.#stopped = true
    for (const drain of this.#drains.values()) {
      this.#options.timers.clearTimeout(drain.timer)
      drain.finish()
    }
    for (const endpoint of [...this.#slowStarts.keys()]) this.#stopSlowStart(endpoint)
  }

  /** Takes an endpoint out now, letting its requests in flight finish in the background. */
  #retire (endpoint: Endpoint): void {
    const inFlight = endpoint.inFlight
    // Out of the lists at once (a replacement of the same name may be about to join), its name free again.
    this.#forget(endpoint)
    if (inFlight > 0) {
      this.#options.logger.info({ endpoint: endpoint.name, inFlight }, 'endpoint left the fleet; its requests in flight finish')
    }
  }

  #forget (endpoint: Endpoint): void {
    const { fleet, health, pool, logger } = this.#options
    const drain = this.#drains.get(endpoint)
    if (drain !== undefined) {
      this.#options.timers.clearTimeout(drain.timer)
      drain.finish()
      this.#drains.delete(endpoint)
    }
    this.#stopSlowStart(endpoint)
    if (fleet.get(endpoint.name) === endpoint) fleet.remove(endpoint.name)
    health.remove(endpoint)
    this.#sources.delete(endpoint)
    // The pool waits for the requests in flight before it closes, so a removal never cuts one short. A replacement
    // of the same name gets a fresh pool as soon as its origin differs (see UpstreamPool.dispatcherFor).
    if (fleet.get(endpoint.name) === undefined) {
      pool.remove(endpoint.name).catch((err: unknown) => { logger.warn({ err, endpoint: endpoint.name }, 'closing connections failed') })
    }
    logger.info({ endpoint: endpoint.name }, 'endpoint removed')
  }

  #drain (endpoint: Endpoint, timeoutMs: number): Drain {
    const existing = this.#drains.get(endpoint)
    if (existing !== undefined) return existing
    const { timers, fleet, logger } = this.#options
    this.#stopSlowStart(endpoint)
    let finish!: () => void
    const finished = new Promise<void>((resolve) => { finish = resolve })
    const drain: Drain = { endpoint, removing: false, cancelled: false, startedAt: timers.now(), timeoutMs, done: false, completed: false, timer: undefined, finished, finish }
    this.#drains.set(endpoint, drain)
    fleet.setState(endpoint, 'draining')
    logger.info({ endpoint: endpoint.name, inFlight: endpoint.inFlight, timeoutMs }, 'draining endpoint')
    const check = (): void => {
      if (this.#drains.get(endpoint) !== drain || drain.done) return
      const elapsed = timers.now() - drain.startedAt
      if (endpoint.inFlight > 0 && elapsed < timeoutMs && !this.#stopped) {
        drain.timer = timers.setTimeout(check, Math.min(DRAIN_POLL_MS, timeoutMs - elapsed))
        return
      }
      drain.done = true
      drain.completed = endpoint.inFlight === 0
      fleet.setState(endpoint, 'drained')
      if (drain.completed) logger.info({ endpoint: endpoint.name, ms: Math.round(elapsed) }, 'endpoint drained')
      else logger.warn({ endpoint: endpoint.name, inFlight: endpoint.inFlight, timeoutMs }, 'drain timed out with requests in flight; endpoint marked drained')
      finish()
    }
    check()
    return drain
  }

  #statusOf (drain: Drain): DrainStatus {
    const endpoint = drain.endpoint
    return {
      name: endpoint.name,
      state: endpoint.state,
      in_flight: endpoint.inFlight,
      started_ms_ago: Math.max(0, Math.round(this.#options.timers.now() - drain.startedAt)),
      timeout_ms: drain.timeoutMs,
      done: drain.done,
      completed: drain.completed
    }
  }

  #startSlowStart (endpoint: Endpoint): void {
    const { slowStartMs, timers, fleet } = this.#options
    if (slowStartMs <= 0 || this.#stopped || endpoint.configuredWeight === 0) return
    this.#stopSlowStart(endpoint)
    const ramp: SlowStart = { startedAt: timers.now(), timer: undefined }
    this.#slowStarts.set(endpoint, ramp)
    const step = (): void => {
      if (this.#slowStarts.get(endpoint) !== ramp) return
      const fraction = (timers.now() - ramp.startedAt) / slowStartMs
      if (fraction >= 1) {
        this.#slowStarts.delete(endpoint)
        fleet.setWeight(endpoint, endpoint.configuredWeight)
        return
      }
      // Fractional weights are fine: every weight-aware strategy divides or accumulates them as numbers.
      fleet.setWeight(endpoint, endpoint.configuredWeight, endpoint.configuredWeight * Math.max(SLOW_START_FLOOR, fraction))
      ramp.timer = timers.setTimeout(step, slowStartMs / SLOW_START_STEPS)
    }
    step()
  }

  #stopSlowStart (endpoint: Endpoint): void {
    const ramp = this.#slowStarts.get(endpoint)
    if (ramp === undefined) return
    this.#options.timers.clearTimeout(ramp.timer)
    this.#slowStarts.delete(endpoint)
    if (endpoint.weight !== endpoint.configuredWeight && this.#options.fleet.get(endpoint.name) === endpoint) {
      this.#options.fleet.setWeight(endpoint, endpoint.configuredWeight)
    }
  }
}
