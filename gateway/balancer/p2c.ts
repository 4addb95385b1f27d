/**
 * Power of two choices on in-flight requests: Envoy's least-request balancer (the default `choice_count` of 2).
 * Draw `choices` distinct eligible endpoints uniformly at random and send to the one with the fewest requests in
 * flight; ties go to the one drawn first (itself random).
 *
 * Why: a full least-connections scan is O(n) and, when several gateway replicas (or a stale signal) agree on the
 * single least-loaded server, they all herd onto it; a random choice spreads but ignores load. Sampling two and
 * keeping the lighter gets most of the benefit of the full scan at O(1): the maximum load drops from
 * Θ(log n / log log n) for one random choice to Θ(log log n) (Mitzenmacher, "The Power of Two Choices in
 * Randomized Load Balancing", 2001; Azar, Broder, Karlin and Upfal, 1999), and different replicas draw different
 * pairs, so they do not herd. Envoy, HAProxy (`random(2)`), NGINX (`random two least_conn`) and Ray Serve all do
 * this.
 *
 * Weights: with equal weights this is exactly Envoy's P2C. When weights differ Envoy switches to weighted round
 * robin (EDF) on a dynamic weight `weight / (active + 1)^bias`, bias 1. We keep the sampling and use that same
 * dynamic weight, bias 1, as the comparison key between the sampled endpoints: the winner is the one with the
 * smaller `(inFlight + 1) / weight` (compared by cross-multiplication). So a heavier endpoint wins a tie in
 * in-flight and may hold proportionally more requests before it loses; sampling stays uniform, so at idle each
 * endpoint's share is not exactly its weight (with weights 3/1/1 about 2/3, 1/6, 1/6 rather than 3/5, 1/5, 1/5).
 * Weight 0 takes no traffic. `choices` larger than the number of eligible endpoints compares them all.
 *
 * Sampling without replacement and without allocation: each candidate set keeps a permutation of its indices
 * (a Uint32Array made once, next to a plain copy of the set; see `copy.ts`). A pick runs a partial Fisher-Yates
 * shuffle over it: swap a random remaining index into the next slot; an ineligible one (excluded, weight 0) is
 * swapped to the tail and the range shrinks. The array stays a permutation whatever it held before, and the prefix
 * drawn is uniform, so nothing is reset per pick. Costs `choices` draws of `random` a pick (fewer when only one
 * endpoint remains), plus one per ineligible endpoint met.
 */
import { scanCopy } from './copy.ts'
import { checkedOptions, DEFAULT_CHOICES, type BalancerOptionKey } from './options.ts'
import { type Balancer, type BalancerDeps, type BalancerOptions, type Endpoint, type PickContext } from './types.ts'

export const P2C = 'p2c'
/** P2C takes `choices`. */
export const P2C_OPTION_KEYS: readonly BalancerOptionKey[] = Object.freeze(['choices'])

/**
 * Power of `choices` (default 2) choices on in-flight requests, weighted as described above.
 *
 * @param options `choices` (default {@link DEFAULT_CHOICES}); other keys are a `GW_ERR_FLEET_INVALID`
 */
export function createP2c (deps: BalancerDeps, options?: BalancerOptions): Balancer {
  const choices = checkedOptions(P2C, P2C_OPTION_KEYS, options).choices ?? DEFAULT_CHOICES
  const samplers = new WeakMap<readonly Endpoint[], Sampler>()

  function samplerFor (candidates: readonly Endpoint[]): Sampler {
    let sampler = samplers.get(candidates)
    if (sampler === undefined) {
      // Allocated once per candidate set, not per pick.
      const order = new Uint32Array(candidates.length)
      for (let i = 0; i < order.length; i++) order[i] = i
      sampler = { list: scanCopy(candidates), order }
      samplers.set(candidates, sampler)
    }
    return sampler
  }

  return {
    name: P2C,
    pick (candidates: readonly Endpoint[], ctx: PickContext): Endpoint | undefined {
      if (candidates.length === 0) return undefined
      const { list, order } = samplerFor(candidates)
      const exclude = ctx.exclude
      let best: Endpoint | undefined
      let bestCost = 0
      let bestWeight = 0
      let drawn = 0
      // order[0, drawn) were compared; order[drawn, remaining) may still be drawn; the tail holds the ineligible.
      let remaining = order.length
      while (drawn < choices && drawn < remaining) {
        const r = remaining - drawn === 1 ? drawn : drawn + Math.floor(deps.random() * (remaining - drawn))
        const index = order[r] ?? 0
        order[r] = order[drawn] ?? 0
        order[drawn] = index
        const endpoint = list[index]
        if (endpoint === undefined || !(endpoint.weight > 0) || (exclude !== undefined && exclude.has(endpoint))) {
          remaining--
          order[drawn] = order[remaining] ?? 0
          order[remaining] = index
          continue
        }
        drawn++
        // Lower (inFlight + 1) / weight wins; strictly lower, so a tie keeps the one drawn first.
        const cost = endpoint.inFlight + 1
        if (best === undefined || cost * bestWeight < bestCost * endpoint.weight) {
          best = endpoint
          bestCost = cost
          bestWeight = endpoint.weight
        }
      }
      return best
    }
  }
}

/** One candidate set's sampling state: the plain copy scans read (see `copy.ts`) and the permutation drawn from. */
interface Sampler {
  readonly list: readonly Endpoint[]
  readonly order: Uint32Array
}
