/**
 * The balancing seam: a strategy picks one endpoint out of the candidates the fleet hands it. Strategies are pure
 * and synchronous (no I/O, no timers, no clock or randomness except through {@link BalancerDeps}), so they can be
 * tested with exact sequences and benchmarked without sockets. Implementations live one per file next to this one
 * and are registered by the name the fleet file uses in `registry.ts`; this file imports none of them.
 */
import { type Endpoint } from '../fleet/types.ts'

export type { Endpoint }

/** What a balancer may know about the request it picks for. Built once per request, never per pick. */
export interface PickContext {
  /** The model the request is for. */
  readonly model: string
  /** The version from the URL (digits), or `undefined` for "the server's choice". */
  readonly version: string | undefined
  /**
   * Endpoints already tried for this request (they refused the connection). A balancer must not return one of
   * them; when every candidate is excluded it returns `undefined`. `undefined` (the common case) excludes none.
   */
  readonly exclude: ReadonlySet<Endpoint> | undefined
  /**
   * The request's affinity key for `consistent_hash` (the value of the configured header), or `undefined` (or
   * absent, or `''`) when the request has none; other strategies ignore it. Optional so that contexts built before
   * the HTTP front fills it in still type-check.
   */
  readonly hashKey?: string | undefined
}

/**
 * A load-balancing strategy.
 *
 * Contract: `pick` is called on the request path for every request, so it must not allocate or do I/O. The
 * `candidates` array comes from `Fleet.endpointsServing` and keeps its identity and contents until the fleet
 * changes (it is frozen), so a strategy may keep per-candidate-set state keyed on the array itself (in a WeakMap,
 * so that replaced sets are collected), including a copy of it. Every candidate may take traffic as far as health
 * goes (the fleet has already left out endpoints that may not, or in panic hands over all of them: `panic.ts`);
 * strategies that use weights still give weight 0 no traffic (all but `round_robin`). Single-threaded: no
 * locking, but no re-entrancy either.
 */
export interface Balancer {
  /** The registered name, as in the fleet file. */
  readonly name: string
  /**
   * @param candidates endpoints that serve the request's model and version, in fleet order
   * @param ctx the request; see {@link PickContext.exclude}
   * @returns the endpoint to send to, or `undefined` when there is none to pick
   */
  pick (candidates: readonly Endpoint[], ctx: PickContext): Endpoint | undefined
}

/**
 * Sources of time and randomness, injected so picks are reproducible in tests. Strategies call each at most a few
 * times a pick (`bench/balancer-pick.ts`). Note for allocation profiles: V8 boxes a double returned from a call it
 * does not inline, so a draw or a clock read may cost one short-lived 16-byte HeapNumber; measured, about one
 * young-generation scavenge per 125,000 single-draw picks. Strategies allocate nothing else per pick.
 */
export interface BalancerDeps {
  /** Milliseconds from a monotonic clock (`performance.now()` in production). */
  now (): number
  /** Uniform in [0, 1), like `Math.random()`. */
  random (): number
}

/**
 * Tuning for the strategies that have any; each strategy accepts only the keys that apply to it (see
 * `balancerOptionKeys` in `registry.ts`), and leaving a key out means its default. Validated once, when the
 * configuration is loaded (`validateBalancerOptions`) and again by the factory, never per pick.
 */
export interface BalancerOptions {
  /**
   * `consistent_hash`: bounded load (Envoy `hash_balance_factor`, HAProxy `hash-balance-factor`). No endpoint takes
   * a request while its in-flight count has reached `ceil(factor × average)` of its weighted share; the walk goes on
   * round the ring. A number >= 1, or 0 to turn bounded load off. Default 1.25 (the paper's and SMG's value).
   */
  readonly hashBalanceFactor?: number
  /**
   * `least_queue`: a reported queue depth older than this many milliseconds is ignored and the endpoint is judged by
   * in-flight alone. A number >= 0 (`Infinity`: trust a report forever). Default 2000 (one HAProxy check interval).
   */
  readonly staleAfterMs?: number
  /** `p2c`: how many distinct endpoints to sample per pick (Envoy `choice_count`). An integer >= 2. Default 2. */
  readonly choices?: number
}

/**
 * Builds a strategy; called once per gateway (replica), at start.
 *
 * @param options already validated by the config loader; the factory checks them again and throws
 *   `GW_ERR_FLEET_INVALID` with the same messages when called with bad ones
 */
export type BalancerFactory = (deps: BalancerDeps, options?: BalancerOptions) => Balancer
