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
}

/**
 * A load-balancing strategy.
 *
 * Contract: `pick` is called on the request path for every request, so it must not allocate or do I/O. The
 * `candidates` array comes from `Fleet.endpointsServing` and keeps its identity until the fleet changes, so a
 * strategy may keep per-candidate-set state keyed on the array itself (in a WeakMap, so that replaced sets are
 * collected). Every candidate is eligible (the fleet has already left out endpoints that may not take traffic).
 * Single-threaded: no locking, but no re-entrancy either.
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

/** Sources of time and randomness, injected so picks are reproducible in tests. */
export interface BalancerDeps {
  /** Milliseconds from a monotonic clock (`performance.now()` in production). */
  now (): number
  /** Uniform in [0, 1), like `Math.random()`. */
  random (): number
}

/** Builds a strategy; called once per gateway (replica), at start. */
export type BalancerFactory = (deps: BalancerDeps) => Balancer
