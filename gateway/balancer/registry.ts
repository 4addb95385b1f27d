/**
 * Balancing strategies by the name the fleet file uses (`load_balancer.type`). The strategy is chosen here, once,
 * when a gateway starts; nothing else branches on the name. An unknown name is rejected when the fleet file is
 * loaded (`loadFleetFile(path, { isKnownStrategy: hasBalancer })`), not at the first request, and so are options a
 * strategy does not take or values out of range ({@link validateBalancerOptions}).
 */
import { createError } from '../../common/errors.ts'
import { CONSISTENT_HASH, CONSISTENT_HASH_OPTION_KEYS, createConsistentHash } from './consistent-hash.ts'
import { createLeastConnections, LEAST_CONNECTIONS, LEAST_CONNECTIONS_OPTION_KEYS } from './least-connections.ts'
import { createLeastLatency, LEAST_LATENCY, LEAST_LATENCY_OPTION_KEYS } from './least-latency.ts'
import { createLeastQueue, LEAST_QUEUE, LEAST_QUEUE_OPTION_KEYS } from './least-queue.ts'
import { optionProblems, type BalancerOptionKey } from './options.ts'
import { createP2c, P2C, P2C_OPTION_KEYS } from './p2c.ts'
import { createRandom, RANDOM, RANDOM_OPTION_KEYS } from './random.ts'
import { createRoundRobin, ROUND_ROBIN, ROUND_ROBIN_OPTION_KEYS } from './round-robin.ts'
import { type Balancer, type BalancerDeps, type BalancerFactory, type BalancerOptions } from './types.ts'
import { createWeighted, WEIGHTED, WEIGHTED_OPTION_KEYS } from './weighted.ts'

/** A strategy's factory and the options it takes. */
interface Registration {
  readonly factory: BalancerFactory
  readonly optionKeys: readonly BalancerOptionKey[]
}

/** The fleet file's spellings (snake_case, as the seed's `round_robin`), in the order `--help` lists them. */
const strategies: ReadonlyMap<string, Registration> = new Map<string, Registration>([
  [ROUND_ROBIN, { factory: createRoundRobin, optionKeys: ROUND_ROBIN_OPTION_KEYS }],
  [WEIGHTED, { factory: createWeighted, optionKeys: WEIGHTED_OPTION_KEYS }],
  [LEAST_CONNECTIONS, { factory: createLeastConnections, optionKeys: LEAST_CONNECTIONS_OPTION_KEYS }],
  [P2C, { factory: createP2c, optionKeys: P2C_OPTION_KEYS }],
  [LEAST_QUEUE, { factory: createLeastQueue, optionKeys: LEAST_QUEUE_OPTION_KEYS }],
  [LEAST_LATENCY, { factory: createLeastLatency, optionKeys: LEAST_LATENCY_OPTION_KEYS }],
  [RANDOM, { factory: createRandom, optionKeys: RANDOM_OPTION_KEYS }],
  [CONSISTENT_HASH, { factory: createConsistentHash, optionKeys: CONSISTENT_HASH_OPTION_KEYS }]
])

/**
 * The house style spells strategy names in kebab-case; those spellings are accepted as explicit aliases. They are
 * not listed by {@link balancerNames}, so messages show each strategy once.
 */
const aliases: ReadonlyMap<string, string> = new Map([
  ['round-robin', ROUND_ROBIN],
  ['least-connections', LEAST_CONNECTIONS],
  ['least-queue', LEAST_QUEUE],
  ['least-latency', LEAST_LATENCY],
  ['consistent-hash', CONSISTENT_HASH]
])

function registrationOf (name: string): Registration | undefined {
  return strategies.get(aliases.get(name) ?? name)
}

/** Whether `name` is a registered strategy or alias (what `loadFleetFile` needs as `isKnownStrategy`). */
export function hasBalancer (name: string): boolean {
  return registrationOf(name) !== undefined
}

/** The registered names (aliases left out), for messages and `--help`. */
export function balancerNames (): readonly string[] {
  return [...strategies.keys()]
}

/** The kebab-case aliases and the names they stand for. */
export function balancerAliases (): ReadonlyMap<string, string> {
  return aliases
}

/**
 * The options strategy `name` takes (see {@link BalancerOptions}); `undefined` for an unknown name. What the
 * config loader may accept next to `load_balancer.type`.
 */
export function balancerOptionKeys (name: string): readonly BalancerOptionKey[] | undefined {
  return registrationOf(name)?.optionKeys
}

function unknownStrategy (name: string): string {
  return `load_balancer.type '${name}' is not a known balancing strategy (known: ${balancerNames().join(', ')})`
}

/**
 * Every problem with choosing strategy `name` with `options`, one message each; empty when the pair is valid. For
 * the config loader, which reports them all at load time with its own location prefix.
 *
 * @param options as parsed from configuration (any shape; `undefined` means none)
 */
export function validateBalancerOptions (name: string, options: unknown): string[] {
  const registration = registrationOf(name)
  if (registration === undefined) return [unknownStrategy(name)]
  return optionProblems(aliases.get(name) ?? name, registration.optionKeys, options)
}

/**
 * Builds the strategy registered as `name` (or an alias of it).
 *
 * @param options tuning for that strategy; see {@link balancerOptionKeys}
 * @throws FlotillaError `GW_ERR_FLEET_INVALID` when no strategy has that name, or when the options do not fit it
 *   (the messages of {@link validateBalancerOptions}, joined by `; `)
 */
export function createBalancer (name: string, deps: BalancerDeps, options?: BalancerOptions): Balancer {
  const registration = registrationOf(name)
  if (registration === undefined) throw createError('GW_ERR_FLEET_INVALID', unknownStrategy(name))
  // The factory checks the options itself (with the same messages), so a direct caller gets the same guarantees.
  return registration.factory(deps, options)
}
