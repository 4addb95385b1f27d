/**
 * Every model's canary, and how a request of a model with one is routed: which side it lands on (`canary.ts`
 * decides), which endpoints make up that side, and, for a split by version, the path that names the version so a
 * worker serving both runs the right one. Canaries come from the fleet file's `canary` section and from the admin
 * API; setting one always starts a fresh {@link Canary} (fresh statistics, no rollback on record).
 *
 * Only inference requests that name no version are split: a request naming a version goes to that version, and
 * metadata and readiness calls go to the model's endpoints as before.
 */
import { type CanaryConfig } from '../fleet/fleet-config.ts'
import { type Fleet } from '../fleet/fleet.ts'
import { type Endpoint } from '../fleet/types.ts'
import { type EndpointSource } from '../admin/api.ts'
import { Canary, type CanaryDeps, type CanarySettings, type CanarySide } from './canary.ts'

/** Where one request goes: its side, that side's endpoints, and the path to send (rewritten for a version split). */
export interface CanaryRoute {
  /** The side whose endpoints take the request. */
  readonly side: CanarySide
  /**
   * The side the request was meant for, when that side's servers were all failing (down, ejected) and the other
   * side took the request: that side failed it, which is what rollback must hear about.
   */
  readonly unavailable: CanarySide | undefined
  readonly candidates: readonly Endpoint[]
  /** The version to send the request to, for a split by versions; `undefined`: as the request addressed it. */
  readonly version: string | undefined
}

/** The two sides of a split by servers, for one candidate list (kept until the fleet hands out a new list). */
interface ServerSides {
  readonly baseline: readonly Endpoint[]
  readonly canary: readonly Endpoint[]
}

/** One model's canary as set, with what routing needs precomputed. */
export class ModelCanary {
  readonly canary: Canary
  readonly config: CanaryConfig
  readonly source: EndpointSource
  readonly #canaryServers: ReadonlySet<string> | undefined
  readonly #versions: { readonly baseline: string, readonly canary: string } | undefined
  readonly #sides = new WeakMap<readonly Endpoint[], ServerSides>()

  constructor (model: string, config: CanaryConfig, source: EndpointSource, deps: CanaryDeps) {
    this.config = config
    this.source = source
    this.canary = new Canary(model, toSettings(config), deps)
    this.#canaryServers = config.canary_servers === undefined ? undefined : new Set(config.canary_servers)
    this.#versions = config.baseline_version === undefined || config.canary_version === undefined
      ? undefined
      : { baseline: String(config.baseline_version), canary: String(config.canary_version) }
  }

  /**
   * Routes one inference request that names no version. When the chosen side has no usable endpoint the other
   * side takes the request (a canary is a split of capacity, not a reason to fail requests). When the chosen side's
   * servers are failing (not drained by an operator) it is charged with a failure ({@link CanaryRoute.unavailable}):
   * a canary whose servers all get ejected must still be rolled back.
   *
   * @param all the model's candidates (`fleet.endpointsServing(model)`)
   */
  route (fleet: Fleet, all: readonly Endpoint[], header: (name: string) => string | undefined): CanaryRoute {
    const chosen = this.canary.side(header)
    const versions = this.#versions
    if (versions !== undefined) {
      const pick = (side: CanarySide): readonly Endpoint[] => fleet.endpointsServing(this.canary.model, versions[side])
      let side = chosen
      let candidates = pick(side)
      if (candidates.length === 0) {
        side = side === 'canary' ? 'baseline' : 'canary'
        candidates = pick(side)
      }
      return { side, unavailable: this.#charged(fleet, chosen, side), candidates, version: versions[side] }
    }
    const sides = this.#serverSides(all)
    const other: CanarySide = chosen === 'canary' ? 'baseline' : 'canary'
    return sides[chosen].length > 0
      ? { side: chosen, unavailable: undefined, candidates: sides[chosen], version: undefined }
      : { side: other, unavailable: this.#charged(fleet, chosen, other), candidates: sides[other], version: undefined }
  }

  /**
   * Whether a request meant for `chosen`, served by `served`, counts as a failure of `chosen`: it had servers that
   * were meant to take traffic (active) and none could (failing checks, ejected). A side whose servers an operator
   * drained is not failing; the other side simply serves.
   */
  #charged (fleet: Fleet, chosen: CanarySide, served: CanarySide): CanarySide | undefined {
    if (chosen === served) return undefined
    const model = this.canary.model
    const names = this.#canaryServers
    const version = chosen === 'canary' ? this.config.canary_version : this.config.baseline_version
    const onSide = (e: Endpoint): boolean => names !== undefined
      ? names.has(e.name) === (chosen === 'canary')
      : e.versions === undefined || (version !== undefined && e.versions.includes(version))
    return fleet.endpoints.some((e) => e.state === 'active' && e.models.includes(model) && onSide(e)) ? chosen : undefined
  }

  #serverSides (all: readonly Endpoint[]): ServerSides {
    let sides = this.#sides.get(all)
    if (sides === undefined) {
      const names = this.#canaryServers!
      sides = {
        baseline: Object.freeze(all.filter((e) => !names.has(e.name))),
        canary: Object.freeze(all.filter((e) => names.has(e.name)))
      }
      this.#sides.set(all, sides)
    }
    return sides
  }
}

/** Converts a validated canary section to what {@link Canary} takes. */
export function toSettings (config: CanaryConfig): CanarySettings {
  const a = config.auto_rollback
  return {
    split: config.canary_servers !== undefined
      ? { kind: 'servers', canaryServers: config.canary_servers }
      : { kind: 'version', baselineVersion: config.baseline_version!, canaryVersion: config.canary_version! },
    percent: config.percent,
    forceHeader: config.force_header === undefined ? undefined : { name: config.force_header.name, value: config.force_header.value },
    stickyHeader: config.sticky_header,
    autoRollback: {
      enabled: a.enabled,
      windowMs: a.window_ms,
      minRequests: a.min_requests,
      errorRateFactor: a.error_rate_factor,
      minErrorRate: a.min_error_rate,
      p99Factor: a.p99_factor,
      minP99IncreaseMs: a.min_p99_increase_ms
    }
  }
}

export class Canaries {
  readonly #byModel = new Map<string, ModelCanary>()
  readonly #deps: CanaryDeps

  constructor (deps: CanaryDeps) {
    this.#deps = deps
  }

  /** The model's canary, if it has one: looked up per inference request. */
  for (model: string): ModelCanary | undefined {
    return this.#byModel.size === 0 ? undefined : this.#byModel.get(model)
  }

  /** Every canary, by model name. */
  list (): ModelCanary[] {
    return [...this.#byModel.values()].sort((a, b) => a.canary.model < b.canary.model ? -1 : 1)
  }

  /** Sets (or replaces) a model's canary, checked by the caller; statistics and rollback state start afresh. */
  set (model: string, config: CanaryConfig, source: EndpointSource): ModelCanary {
    const entry = new ModelCanary(model, config, source, this.#deps)
    this.#byModel.set(model, entry)
    return entry
  }

  /** Removes a model's canary: its requests go to all its endpoints again. Returns whether there was one. */
  clear (model: string): boolean {
    return this.#byModel.delete(model)
  }

  /**
   * Applies a reloaded file's `canary` section: canaries it adds or changes are set afresh, those it no longer has
   * are cleared (canaries set through the admin API stay unless the file now sets the same model).
   *
   * @returns the models whose canary changed
   */
  applyFile (section: Readonly<Record<string, CanaryConfig>>): string[] {
    const changed: string[] = []
    for (const [model, entry] of this.#byModel) {
      if (entry.source === 'file' && section[model] === undefined) {
        this.#byModel.delete(model)
        changed.push(model)
      }
    }
    for (const [model, config] of Object.entries(section)) {
      const entry = this.#byModel.get(model)
      if (entry !== undefined && entry.source === 'file' && JSON.stringify(entry.config) === JSON.stringify(config)) continue
      this.set(model, config, 'file')
      changed.push(model)
    }
    return changed
  }
}
