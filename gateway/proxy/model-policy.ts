/**
 * Each model's routing policy, resolved once at start from the fleet file: the balancing strategy (the model's own
 * `models.<name>.load_balancer`, else the fleet-wide `load_balancer`), the request deadline, the retry limit and the
 * affinity header. A model without its own section shares the fleet-wide balancer instance, so its state (round
 * robin position, per-candidate-set cursors) is the same as if per-model policies did not exist.
 */
import { createBalancer } from '../balancer/registry.ts'
import { type Balancer, type BalancerDeps } from '../balancer/types.ts'
import { toBalancerOptions, type FleetConfig } from '../fleet/fleet-config.ts'
import { type RoutePolicy } from './types.ts'

/** A model's routing policy: what the forwarder needs, and the header the HTTP front reads the affinity key from. */
export interface ModelPolicy extends RoutePolicy {
  /** Lower-case header name whose value is the `consistent_hash` key, or `undefined`. */
  readonly hashHeader: string | undefined
}

export class ModelPolicies {
  #default!: ModelPolicy
  #byModel = new Map<string, ModelPolicy>()
  readonly #deps: BalancerDeps

  /**
   * @throws FlotillaError `GW_ERR_FLEET_INVALID` when a strategy or its options are invalid (the loader has
   *   already rejected such a file, so only a config built by hand gets here)
   */
  constructor (config: FleetConfig, deps: BalancerDeps) {
    this.#deps = deps
    this.apply(config)
  }

  /**
   * Rebuilds every policy from `config` (a reloaded fleet file). Balancers are built afresh, so their state
   * (rotation positions) starts over; requests already forwarding keep the policy they started with.
   */
  apply (config: FleetConfig): void {
    const deps = this.#deps
    const lb = config.load_balancer
    const byModel = new Map<string, ModelPolicy>()
    this.#default = Object.freeze({
      balancer: createBalancer(lb.type, deps, lb.options === undefined ? undefined : toBalancerOptions(lb.options)),
      timeoutMs: config.gateway.request_timeout_ms,
      maxRetries: config.retries.max_retries,
      perTryTimeoutMs: undefined,
      hashHeader: lb.hash_header
    })
    for (const [model, own] of Object.entries(config.models ?? {})) {
      const ownLb = own.load_balancer
      let balancer: Balancer = this.#default.balancer
      let hashHeader = this.#default.hashHeader
      if (ownLb !== undefined) {
        balancer = createBalancer(ownLb.type, deps, ownLb.options === undefined ? undefined : toBalancerOptions(ownLb.options))
        hashHeader = ownLb.hash_header
      }
      byModel.set(model, Object.freeze({
        balancer,
        timeoutMs: own.request_timeout_ms ?? this.#default.timeoutMs,
        maxRetries: own.max_retries ?? this.#default.maxRetries,
        perTryTimeoutMs: own.per_try_timeout_ms,
        hashHeader
      }))
    }
    this.#byModel = byModel
  }

  /** The policy for `model`: its own, else the fleet-wide one. */
  for (model: string): ModelPolicy {
    return this.#byModel.get(model) ?? this.#default
  }
}
