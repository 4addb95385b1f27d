/**
 * Balancing strategies by the name the fleet file uses (`load_balancer.type`). The strategy is chosen here, once,
 * when a gateway starts; nothing else branches on the name. An unknown name is rejected when the fleet file is
 * loaded (`loadFleetFile(path, { isKnownStrategy: hasBalancer })`), not at the first request.
 */
import { createError } from '../../common/errors.ts'
import { createRoundRobin, ROUND_ROBIN } from './round-robin.ts'
import { type Balancer, type BalancerDeps, type BalancerFactory } from './types.ts'

const factories: ReadonlyMap<string, BalancerFactory> = new Map<string, BalancerFactory>([
  // The seed fleet file's spelling.
  [ROUND_ROBIN, createRoundRobin],
  // The house style spells strategy names in kebab-case; accept that spelling as an explicit alias.
  ['round-robin', createRoundRobin]
])

/** Whether `name` is a registered strategy (what `loadFleetFile` needs as `isKnownStrategy`). */
export function hasBalancer (name: string): boolean {
  return factories.has(name)
}

/** The registered names, for messages and `--help`. */
export function balancerNames (): readonly string[] {
  return [...factories.keys()]
}

/**
 * Builds the strategy registered as `name`.
 *
 * @throws FlotillaError `GW_ERR_FLEET_INVALID` when no strategy has that name
 */
export function createBalancer (name: string, deps: BalancerDeps): Balancer {
  const factory = factories.get(name)
  if (factory === undefined) {
    throw createError('GW_ERR_FLEET_INVALID',
      `load_balancer.type '${name}' is not a known balancing strategy (known: ${balancerNames().join(', ')})`)
  }
  return factory(deps)
}
