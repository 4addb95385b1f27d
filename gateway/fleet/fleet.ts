/**
 * The live view of the fleet: one {@link Endpoint} per server that takes traffic, and per model the candidate list
 * the balancer picks from. Candidate lists are computed when the fleet changes, never per request, and keep their
 * identity until the next change (balancers key per-set state on them).
 *
 * Health narrows the lists: an endpoint that fails its checks (or is ejected) for a model leaves that model's lists
 * when the checker or detector says so ({@link Fleet.refresh}), unless fewer than the panic threshold would remain,
 * in which case all of them stay (Envoy's panic mode: see `balancer/panic.ts`).
 *
 * The fleet file feeds {@link Fleet.update} (at start and on reload); the admin API adds, removes, drains and
 * reweighs single endpoints (through `fleet-controller.ts`, which owns the steps around each change).
 */
import { originOf } from '../../common/http-server.ts'
import { DEFAULT_PANIC_THRESHOLD_PERCENT, usableOrAll } from '../balancer/panic.ts'
import { type FleetConfig, type InferenceServerConfig } from './fleet-config.ts'
import { type Endpoint, type EndpointState } from './types.ts'

/** What the fleet needs to know about a server (an `inference_servers` entry, or one found by discovery). */
export type FleetServer = Pick<InferenceServerConfig, 'name' | 'host' | 'port' | 'models' | 'weight' | 'labels' | 'versions'> & {
  /** The server's in-flight limit; absent: the fleet's default (`gateway.max_in_flight_per_server`). */
  readonly max_in_flight?: number | undefined
}

/** Candidate lists for one model. */
interface ModelRoute {
  /** Every eligible endpoint serving the model: for requests that name no version. */
  readonly all: readonly Endpoint[]
  /** Eligible endpoints with no `versions` list: for a version that no server names explicitly. */
  readonly anyVersion: readonly Endpoint[]
  /** Per version named in some server's `versions` list: the endpoints naming it plus those serving any version. */
  readonly byVersion: ReadonlyMap<string, readonly Endpoint[]>
}

const NONE: readonly Endpoint[] = Object.freeze([])

/** How the fleet learns what may take traffic; both default to "everything, no panic arithmetic needed". */
export interface FleetOptions {
  /** Whether `endpoint` passes its checks for `model` and is not ejected. */
  usable?: (endpoint: Endpoint, model: string) => boolean
  /** Below this share of usable endpoints, a model's requests go to all of them (0 turns panic off). */
  panicThresholdPercent?: number
  /** The in-flight limit of servers that set none (`gateway.max_in_flight_per_server`); 0, the default, is none. */
  defaultMaxInFlight?: number
}

/** The servers of `config` that take traffic: all of them, or those named in `load_balancer.servers`. */
export function trafficServers (config: FleetConfig): readonly InferenceServerConfig[] {
  const picked = config.load_balancer.servers
  if (picked === undefined) return config.inference_servers
  const names = new Set(picked.map((s) => s.name))
  return config.inference_servers.filter((s) => names.has(s.name))
}

export class Fleet {
  #endpoints: readonly Endpoint[] = NONE
  #byName = new Map<string, Endpoint>()
  /** Every endpoint that may take traffic by state, per model: rebuilt when membership changes. */
  #routes = new Map<string, ModelRoute>()
  /** The same lists narrowed by health (or not, in panic): what requests see; rebuilt by {@link Fleet.refresh}. */
  #served = new Map<string, ModelRoute>()
  #models: readonly string[] = []
  readonly #usable: ((endpoint: Endpoint, model: string) => boolean) | undefined
  readonly #panicThreshold: number
  readonly #defaultMaxInFlight: number

  constructor (servers: readonly FleetServer[], options: FleetOptions = {}) {
    this.#usable = options.usable
    this.#panicThreshold = options.panicThresholdPercent ?? DEFAULT_PANIC_THRESHOLD_PERCENT
    this.#defaultMaxInFlight = options.defaultMaxInFlight ?? 0
    this.update(servers)
  }

  /** The fleet for the servers of `config` that take traffic (see {@link trafficServers}). */
  static fromConfig (config: FleetConfig, options: Omit<FleetOptions, 'panicThresholdPercent' | 'defaultMaxInFlight'> = {}): Fleet {
    return new Fleet(trafficServers(config), {
      ...options,
      panicThresholdPercent: config.load_balancer.panic_threshold_percent,
      defaultMaxInFlight: config.gateway.max_in_flight_per_server
    })
  }

  /**
   * Re-reads health for every endpoint and model and narrows the candidate lists. Called when a health check or
   * an ejection changes something, never per request. A list whose usable members did not change keeps its
   * identity, so balancer state keyed on it survives.
   */
  refresh (): void {
    const usable = this.#usable
    if (usable === undefined) {
      this.#served = this.#routes
      return
    }
    const served = new Map<string, ModelRoute>()
    for (const [model, route] of this.#routes) {
      const narrow = (list: readonly Endpoint[]): readonly Endpoint[] =>
        usableOrAll(list, (e) => usable(e, model), this.#panicThreshold)
      const byVersion = new Map<string, readonly Endpoint[]>()
      for (const [v, list] of route.byVersion) byVersion.set(v, narrow(list))
      served.set(model, { all: narrow(route.all), anyVersion: narrow(route.anyVersion), byVersion })
    }
    this.#served = served
  }

  /** Whether `model`'s requests currently go to every endpoint because too few are usable. */
  panicking (model: string): boolean {
    const base = this.#routes.get(model)?.all
    const served = this.#served.get(model)?.all
    return base !== undefined && base.length > 0 && served === base && this.#usable !== undefined &&
      base.some((e) => !this.#usable!(e, model))
  }

  /**
   * Replaces the set of servers. An endpoint whose address, models, versions and labels are unchanged keeps its
   * object (and so its state, in-flight count and health); a changed weight or in-flight limit is applied to it in
   * place. A
   * changed or new server gets a new endpoint. Rebuilds every candidate list.
   */
  update (servers: readonly FleetServer[]): void {
    const byName = new Map<string, Endpoint>()
    for (const server of servers) {
      const previous = this.#byName.get(server.name)
      const maxInFlight = server.max_in_flight ?? this.#defaultMaxInFlight
      if (previous !== undefined && sameConfig(previous, server)) {
        if (previous.configuredWeight !== server.weight) {
          previous.configuredWeight = server.weight
          previous.weight = server.weight
        }
        previous.maxInFlight = maxInFlight
        byName.set(server.name, previous)
      } else {
        byName.set(server.name, toEndpoint(server, maxInFlight))
      }
    }
    this.#byName = byName
    this.#endpoints = Object.freeze([...byName.values()])
    this.#rebuild()
  }

  /**
   * Adds one server at the end of the fleet, `active` or (to be health-checked first) `joining`.
   *
   * @returns its new endpoint
   * @throws Error when a server of that name is already in the fleet (callers check first and answer 409)
   */
  add (server: FleetServer, state: EndpointState = 'active'): Endpoint {
    if (this.#byName.has(server.name)) throw new Error(`a server named '${server.name}' is already in the fleet`)
    const endpoint = toEndpoint(server, server.max_in_flight ?? this.#defaultMaxInFlight)
    endpoint.state = state
    this.#byName.set(server.name, endpoint)
    this.#endpoints = Object.freeze([...this.#endpoints, endpoint])
    this.#rebuild()
    return endpoint
  }

  /**
   * Takes a server out of the fleet (its requests in flight are not touched); `undefined` when there is none. It is
   * left `drained`, so a request still holding an earlier candidate list never sends it a retry.
   */
  remove (name: string): Endpoint | undefined {
    const endpoint = this.#byName.get(name)
    if (endpoint === undefined) return undefined
    endpoint.state = 'drained'
    this.#byName.delete(name)
    this.#endpoints = Object.freeze(this.#endpoints.filter((e) => e !== endpoint))
    this.#rebuild()
    return endpoint
  }

  /** Sets an endpoint's lifecycle state; only `active` endpoints are in the candidate lists. */
  setState (endpoint: Endpoint, state: EndpointState): void {
    if (endpoint.state === state) return
    endpoint.state = state
    this.#rebuild()
  }

  /**
   * Sets an endpoint's weights: `configured` is what the operator asked for, `effective` what balancers use now
   * (lower while slow start ramps it up). The lists are rebuilt so balancers that keep per-list state start over.
   */
  setWeight (endpoint: Endpoint, configured: number, effective = configured): void {
    if (endpoint.configuredWeight === configured && endpoint.weight === effective) return
    endpoint.configuredWeight = configured
    endpoint.weight = effective
    this.#rebuild()
  }

  /** The fleet as servers (configured weights), e.g. to show the effective configuration. */
  servers (): FleetServer[] {
    return this.#endpoints.map((e) => ({
      name: e.name,
      host: e.host,
      port: e.port,
      models: e.models,
      weight: e.configuredWeight,
      labels: e.labels,
      ...(e.versions === undefined ? {} : { versions: e.versions }),
      max_in_flight: e.maxInFlight
    }))
  }

  /** Every endpoint, in fleet-file order, whatever its state. */
  get endpoints (): readonly Endpoint[] {
    return this.#endpoints
  }

  /** The names of the models some server serves, sorted. */
  get models (): readonly string[] {
    return this.#models
  }

  get (name: string): Endpoint | undefined {
    return this.#byName.get(name)
  }

  /**
   * The models (sorted) that no server can take a request for right now: none of their servers is active and
   * passing its checks (and not ejected). Panic does not count: a model whose every server fails its checks is
   * served by all of them in panic, but none of them is usable.
   */
  unservedModels (): string[] {
    const usable = this.#usable
    const unserved: string[] = []
    for (const model of this.#models) {
      const all = this.#routes.get(model)?.all ?? NONE
      if (!all.some((e) => usable === undefined || usable(e, model))) unserved.push(model)
    }
    return unserved
  }

  /** Whether any server in the fleet lists `model` (whatever its state). */
  servesModel (model: string): boolean {
    return this.#routes.has(model)
  }

  /**
   * The endpoints that may take a request for `model` (and `version`, when given), in fleet order: usable ones, or
   * all of them in panic. The array is shared and frozen: callers must not keep it past the next
   * {@link Fleet.update} or {@link Fleet.refresh}, nor modify it.
   *
   * @param version decimal digits as in the URL (leading zeros allowed); `undefined` when the URL names none
   */
  endpointsServing (model: string, version?: string): readonly Endpoint[] {
    const route = this.#served.get(model)
    if (route === undefined) return NONE
    if (version === undefined) return route.all
    return route.byVersion.get(canonicalVersion(version)) ?? route.anyVersion
  }

  /** The versions named for `model` across servers, or `undefined` when some server serves every version. */
  versionsOf (model: string): readonly number[] | undefined {
    const versions = new Set<number>()
    for (const endpoint of this.#endpoints) {
      if (!endpoint.models.includes(model)) continue
      if (endpoint.versions === undefined) return undefined
      for (const v of endpoint.versions) versions.add(v)
    }
    return [...versions].sort((a, b) => a - b)
  }

  #rebuild (): void {
    const routes = new Map<string, { all: Endpoint[], anyVersion: Endpoint[], byVersion: Map<string, Endpoint[]> }>()
    for (const endpoint of this.#endpoints) {
      for (const model of endpoint.models) {
        if (!routes.has(model)) routes.set(model, { all: [], anyVersion: [], byVersion: new Map() })
      }
    }
    // Versions first, so that each version's list can include the any-version endpoints in fleet order below.
    for (const endpoint of this.#endpoints) {
      for (const model of endpoint.models) {
        const route = routes.get(model)
        for (const v of endpoint.versions ?? []) {
          if (route !== undefined && !route.byVersion.has(String(v))) route.byVersion.set(String(v), [])
        }
      }
    }
    for (const endpoint of this.#endpoints) {
      // Later states (draining, ejected, unhealthy) are left out here, so no request path ever checks them.
      if (endpoint.state !== 'active') continue
      for (const model of endpoint.models) {
        const route = routes.get(model)
        if (route === undefined) continue
        route.all.push(endpoint)
        if (endpoint.versions === undefined) {
          route.anyVersion.push(endpoint)
          for (const list of route.byVersion.values()) list.push(endpoint)
        } else {
          for (const v of endpoint.versions) route.byVersion.get(String(v))?.push(endpoint)
        }
      }
    }
    const frozen = new Map<string, ModelRoute>()
    for (const [model, route] of routes) {
      const byVersion = new Map<string, readonly Endpoint[]>()
      for (const [v, list] of route.byVersion) byVersion.set(v, Object.freeze(list))
      frozen.set(model, { all: Object.freeze(route.all), anyVersion: Object.freeze(route.anyVersion), byVersion })
    }
    this.#routes = frozen
    this.#models = Object.freeze([...frozen.keys()].sort())
    this.refresh()
  }
}

/** Version strings as in the URL may have leading zeros ("01" is version 1, as Triton parses it). */
function canonicalVersion (version: string): string {
  if (version.length < 2 || version.charCodeAt(0) !== 48 /* '0' */) return version
  const stripped = version.replace(/^0+/, '')
  return stripped === '' ? '0' : stripped
}

function toEndpoint (server: FleetServer, maxInFlight: number): Endpoint {
  return {
    name: server.name,
    host: server.host,
    port: server.port,
    origin: originOf(server.host, server.port),
    models: Object.freeze([...server.models]),
    versions: server.versions === undefined ? undefined : Object.freeze([...server.versions]),
    weight: server.weight,
    configuredWeight: server.weight,
    labels: Object.freeze({ ...server.labels }),
    maxInFlight,
    state: 'active',
    inFlight: 0,
    // No report yet: least_queue treats the depth as stale and balances on in-flight alone.
    queueDepth: 0,
    queueDepthAt: Number.NEGATIVE_INFINITY,
    latencyMs: Number.NaN
  }
}

/** Whether `server` is the same server as `endpoint` (address, models, versions, labels), weight and limit aside. */
export function sameConfig (endpoint: Endpoint, server: FleetServer): boolean {
  return endpoint.host === server.host && endpoint.port === server.port &&
    sameList(endpoint.models, server.models) && sameOptionalList(endpoint.versions, server.versions) &&
    sameLabels(endpoint.labels, server.labels)
}

function sameList<T> (a: readonly T[], b: readonly T[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i])
}

function sameOptionalList<T> (a: readonly T[] | undefined, b: readonly T[] | undefined): boolean {
  return a === undefined || b === undefined ? a === b : sameList(a, b)
}

function sameLabels (a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  const keys = Object.keys(a)
  return keys.length === Object.keys(b).length && keys.every((k) => a[k] === b[k])
}
