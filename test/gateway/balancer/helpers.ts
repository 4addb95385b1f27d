/** Test doubles for the balancer tests: endpoints with weights, a fake clock, tallies. */
import { type Balancer, type BalancerDeps, type Endpoint, type PickContext } from '../../../gateway/balancer/types.ts'
import { Fleet, type FleetServer } from '../../../gateway/fleet/fleet.ts'
import { seededRandom } from '../fixtures/helpers.ts'

export { seededRandom }

/** A context for model `m` with nothing excluded and no hash key. */
export const CTX: PickContext = Object.freeze({ model: 'm', version: undefined, exclude: undefined })

/**
 * Endpoints built the way the fleet builds them (so every field a real one has is there), all serving model `m`,
 * with the weights given, in the order given. The array is the fleet's own frozen candidate list.
 */
export function weighted (weights: Readonly<Record<string, number>>): readonly Endpoint[] {
  const servers: FleetServer[] = Object.entries(weights).map(([name, weight], i) => ({
    name, host: '127.0.0.1', port: 9000 + i, models: ['m'], weight, labels: {}
  }))
  return new Fleet(servers).endpointsServing('m')
}

/** `n` endpoints of weight 1 named e0, e1, … */
export function many (n: number, prefix = 'e'): readonly Endpoint[] {
  const weights: Record<string, number> = {}
  for (let i = 0; i < n; i++) weights[`${prefix}${i}`] = 1
  return weighted(weights)
}

/** A clock the test moves by hand. */
export interface FakeClock { t: number, now: () => number }

export function fakeClock (start = 1000): FakeClock {
  const clock: FakeClock = { t: start, now: () => clock.t }
  return clock
}

/** Deps with a fake clock at `clock` and a mulberry32 random seeded with `seed`. */
export function deps (seed = 1, clock: FakeClock = fakeClock()): BalancerDeps {
  return { now: clock.now, random: seededRandom(seed) }
}

/** The names of `n` successive picks (`-` for undefined). */
export function names (balancer: Balancer, candidates: readonly Endpoint[], n: number, ctx: PickContext = CTX): string[] {
  const out: string[] = []
  for (let i = 0; i < n; i++) out.push(balancer.pick(candidates, ctx)?.name ?? '-')
  return out
}

/** How many of `n` picks went to each endpoint name (every candidate listed, 0 included). */
export function tally (balancer: Balancer, candidates: readonly Endpoint[], n: number, ctx: PickContext = CTX): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const endpoint of candidates) counts[endpoint.name] = 0
  for (let i = 0; i < n; i++) {
    const name = balancer.pick(candidates, ctx)?.name ?? '-'
    counts[name] = (counts[name] ?? 0) + 1
  }
  return counts
}

/** The endpoint called `name` in `candidates` (throws when there is none, which is a broken test). */
export function byName (candidates: readonly Endpoint[], name: string): Endpoint {
  const endpoint = candidates.find((e) => e.name === name)
  if (endpoint === undefined) throw new Error(`no endpoint ${name}`)
  return endpoint
}

/** Sets each named endpoint's in-flight count. */
export function setInFlight (candidates: readonly Endpoint[], loads: Readonly<Record<string, number>>): void {
  for (const [name, n] of Object.entries(loads)) byName(candidates, name).inFlight = n
}
