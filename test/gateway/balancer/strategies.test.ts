import t from 'tap'
import { DEFAULT_CHOICES, DEFAULT_HASH_BALANCE_FACTOR, DEFAULT_STALE_AFTER_MS } from '../../../gateway/balancer/options.ts'
import {
  balancerAliases, balancerNames, balancerOptionKeys, createBalancer, hasBalancer, validateBalancerOptions
} from '../../../gateway/balancer/registry.ts'
import { type BalancerOptions } from '../../../gateway/balancer/types.ts'
import { conformance } from './conformance.ts'
import { deps, many } from './helpers.ts'

// The seven, plus least_latency (Flotilla's own).
const EXPECTED = ['round_robin', 'weighted', 'least_connections', 'p2c', 'least_queue', 'least_latency', 'random', 'consistent_hash']

t.test('every strategy the issue asks for is registered under its fleet-file name', async (t) => {
  t.strictSame(balancerNames(), EXPECTED)
  for (const name of EXPECTED) t.ok(hasBalancer(name), name)
})

// The conformance suite, for every registered name: a strategy added to the registry is covered without a change here.
for (const name of balancerNames()) {
  t.test(`conformance: ${name}`, async (t) => {
    await conformance(t, {
      name,
      create: (d) => createBalancer(name, d),
      ignoresWeights: name === 'round_robin'
    })
  })
}

t.test('kebab-case aliases build the same strategy, named canonically', async (t) => {
  t.strictSame([...balancerAliases()], [
    ['round-robin', 'round_robin'],
    ['least-connections', 'least_connections'],
    ['least-queue', 'least_queue'],
    ['least-latency', 'least_latency'],
    ['consistent-hash', 'consistent_hash']
  ])
  for (const [alias, name] of balancerAliases()) {
    t.ok(hasBalancer(alias), alias)
    t.equal(createBalancer(alias, deps()).name, name)
    t.strictSame(balancerOptionKeys(alias), balancerOptionKeys(name))
  }
  t.notOk(hasBalancer('least_conn'))
  t.notOk(hasBalancer('toString'), 'no prototype names')
  t.notOk(hasBalancer('__proto__'))
})

t.test('each strategy takes only its own options', async (t) => {
  t.strictSame(balancerOptionKeys('round_robin'), [])
  t.strictSame(balancerOptionKeys('weighted'), [])
  t.strictSame(balancerOptionKeys('least_connections'), [])
  t.strictSame(balancerOptionKeys('random'), [])
  t.strictSame(balancerOptionKeys('p2c'), ['choices'])
  t.strictSame(balancerOptionKeys('least_queue'), ['staleAfterMs'])
  t.strictSame(balancerOptionKeys('consistent_hash'), ['hashBalanceFactor'])
  t.equal(balancerOptionKeys('fastest'), undefined)
  t.equal(DEFAULT_CHOICES, 2)
  t.equal(DEFAULT_STALE_AFTER_MS, 2000)
  t.equal(DEFAULT_HASH_BALANCE_FACTOR, 1.25)
})

t.test('validateBalancerOptions accepts what is valid', async (t) => {
  const valid: Array<[string, unknown]> = [
    ['round_robin', undefined],
    ['round_robin', {}],
    ['weighted', { choices: undefined }],
    ['p2c', { choices: 2 }],
    ['p2c', { choices: 5 }],
    ['least_queue', { staleAfterMs: 0 }],
    ['least_queue', { staleAfterMs: 150.5 }],
    ['least_queue', { staleAfterMs: Infinity }],
    ['least-queue', { staleAfterMs: 10 }],
    ['consistent_hash', { hashBalanceFactor: 0 }],
    ['consistent_hash', { hashBalanceFactor: 1 }],
    ['consistent_hash', { hashBalanceFactor: 2.5 }]
  ]
  for (const [name, options] of valid) t.strictSame(validateBalancerOptions(name, options), [], `${name} ${JSON.stringify(options)}`)
})

t.test('validateBalancerOptions reports every problem with a message that says what to change', async (t) => {
  const cases: Array<[string, unknown, string[]]> = [
    ['fastest', undefined,
      [`load_balancer.type 'fastest' is not a known balancing strategy (known: ${EXPECTED.join(', ')})`]],
    ['p2c', 'two', ["options for balancing strategy 'p2c' must be a mapping, got 'two' (a string)"]],
    ['p2c', [2], ["options for balancing strategy 'p2c' must be a mapping, got a list"]],
    ['p2c', null, ["options for balancing strategy 'p2c' must be a mapping, got null"]],
    ['p2c', { choices: 1 }, ["option 'choices' of balancing strategy 'p2c' must be an integer >= 2, got 1"]],
    ['p2c', { choices: 2.5 }, ["option 'choices' of balancing strategy 'p2c' must be an integer >= 2, got 2.5"]],
    ['p2c', { choices: '3' }, ["option 'choices' of balancing strategy 'p2c' must be an integer >= 2, got '3' (a string)"]],
    ['p2c', { choices: Infinity }, ["option 'choices' of balancing strategy 'p2c' must be an integer >= 2, got Infinity"]],
    ['least_queue', { staleAfterMs: -1 },
      ["option 'staleAfterMs' of balancing strategy 'least_queue' must be a number of milliseconds >= 0, got -1"]],
    ['least_queue', { staleAfterMs: Number.NaN },
      ["option 'staleAfterMs' of balancing strategy 'least_queue' must be a number of milliseconds >= 0, got NaN"]],
    ['consistent_hash', { hashBalanceFactor: 0.5 },
      ["option 'hashBalanceFactor' of balancing strategy 'consistent_hash' must be a number >= 1, or 0 to turn bounded load off, got 0.5"]],
    ['consistent_hash', { hashBalanceFactor: Infinity },
      ["option 'hashBalanceFactor' of balancing strategy 'consistent_hash' must be a number >= 1, or 0 to turn bounded load off, got Infinity"]],
    ['consistent_hash', { hashBalanceFactor: true },
      ["option 'hashBalanceFactor' of balancing strategy 'consistent_hash' must be a number >= 1, or 0 to turn bounded load off, got true"]],
    ['p2c', { choices: { n: 2 } }, ["option 'choices' of balancing strategy 'p2c' must be an integer >= 2, got a mapping"]],
    ['weighted', { choices: 2 }, ["option 'choices' does not apply to balancing strategy 'weighted' (it takes none)"]],
    ['least_queue', { hashBalanceFactor: 2 },
      ["option 'hashBalanceFactor' does not apply to balancing strategy 'least_queue' (it takes: staleAfterMs)"]],
    // An alias is reported under the canonical name, which is what the strategy is called everywhere else.
    ['consistent-hash', { sticky: true },
      ["unknown option 'sticky' for balancing strategy 'consistent_hash' (it takes: hashBalanceFactor)"]],
    ['p2c', { choices: 1, staleAfterMs: 5, bogus: {} }, [
      "option 'choices' of balancing strategy 'p2c' must be an integer >= 2, got 1",
      "option 'staleAfterMs' does not apply to balancing strategy 'p2c' (it takes: choices)",
      "unknown option 'bogus' for balancing strategy 'p2c' (it takes: choices)"
    ]]
  ]
  for (const [name, options, expected] of cases) t.strictSame(validateBalancerOptions(name, options), expected, `${name} ${String(JSON.stringify(options))}`)
})

t.test('createBalancer and every factory refuse bad options with the same messages', async (t) => {
  t.throws(() => createBalancer('p2c', deps(), { choices: 1 }), {
    code: 'GW_ERR_FLEET_INVALID',
    message: "option 'choices' of balancing strategy 'p2c' must be an integer >= 2, got 1"
  })
  t.throws(() => createBalancer('least_queue', deps(), { staleAfterMs: -5, choices: 3 }), {
    code: 'GW_ERR_FLEET_INVALID',
    message: "option 'staleAfterMs' of balancing strategy 'least_queue' must be a number of milliseconds >= 0, got -5; " +
      "option 'choices' does not apply to balancing strategy 'least_queue' (it takes: staleAfterMs)"
  })
  // Every strategy, direct through the registry: an option that belongs to no one is refused by all.
  for (const name of balancerNames()) {
    t.throws(() => createBalancer(name, deps(), { nope: 1 } as unknown as BalancerOptions), { code: 'GW_ERR_FLEET_INVALID' }, name)
    t.doesNotThrow(() => createBalancer(name, deps(), {}), name)
  }
  t.throws(() => createBalancer('fastest', deps(), {}), {
    code: 'GW_ERR_FLEET_INVALID',
    message: `load_balancer.type 'fastest' is not a known balancing strategy (known: ${EXPECTED.join(', ')})`
  })
})

t.test('options reach the strategy', async (t) => {
  // p2c with choices = 3 over 3 endpoints compares all of them, so the least loaded always wins.
  const abc = many(3)
  abc.forEach((e, i) => { e.inFlight = [4, 1, 6][i] ?? 0 })
  const p2c = createBalancer('p2c', deps(7), { choices: 3 })
  for (let i = 0; i < 50; i++) t.equal(p2c.pick(abc, { model: 'm', version: undefined, exclude: undefined })?.name, 'e1')
})
