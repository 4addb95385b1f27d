import t from 'tap'
import { balancerNames, createBalancer, hasBalancer } from '../../../gateway/balancer/registry.ts'
import { createRoundRobin } from '../../../gateway/balancer/round-robin.ts'
import { type Balancer, type Endpoint, type PickContext } from '../../../gateway/balancer/types.ts'
import { endpoints, seededRandom } from '../fixtures/helpers.ts'

const CTX: PickContext = { model: 'm', version: undefined, exclude: undefined }
const clock = { now: () => 0 }

function picks (balancer: Balancer, candidates: readonly Endpoint[], n: number, ctx: PickContext = CTX): string[] {
  const out: string[] = []
  for (let i = 0; i < n; i++) out.push(balancer.pick(candidates, ctx)?.name ?? '-')
  return out
}

t.test('the seeded helper is deterministic', async (t) => {
  const a = seededRandom(7)
  const b = seededRandom(7)
  t.strictSame([a(), a(), a()], [b(), b(), b()])
})

t.test('rotates through the candidates from a random start', async (t) => {
  const abc = endpoints('a', 'b', 'c')
  // floor(0.5 * 3) = 1: the rotation starts at b.
  t.strictSame(picks(createRoundRobin({ ...clock, random: () => 0.5 }), abc, 7), ['b', 'c', 'a', 'b', 'c', 'a', 'b'])
  t.strictSame(picks(createRoundRobin({ ...clock, random: () => 0 }), abc, 4), ['a', 'b', 'c', 'a'])
  t.strictSame(picks(createRoundRobin({ ...clock, random: () => 0.999 }), abc, 4), ['c', 'a', 'b', 'c'])
})

t.test('exact sequences with a seeded random, per replica', async (t) => {
  const abcd = endpoints('a', 'b', 'c', 'd')
  const seeds = [1, 2, 3, 4].map((seed) => {
    const first = seededRandom(seed)()
    return Math.floor(first * 4)
  })
  const names = ['a', 'b', 'c', 'd']
  for (const [i, seed] of [1, 2, 3, 4].entries()) {
    const start = seeds[i] ?? 0
    const expected = Array.from({ length: 8 }, (_, k) => names[(start + k) % 4] ?? '?')
    t.strictSame(picks(createRoundRobin({ ...clock, random: seededRandom(seed) }), abcd, 8), expected, `seed ${seed}`)
  }
  // The seeds above do not all start at the same server: replicas are not in lock-step.
  t.ok(new Set(seeds).size > 1)
  // Pinned (seededRandom(42) first draws 0.601…, so floor(0.601 * 4) = 2: start at c), so a change to the start rule shows up here.
  t.strictSame(picks(createRoundRobin({ ...clock, random: seededRandom(42) }), abcd, 6), ['c', 'd', 'a', 'b', 'c', 'd'])
})

t.test('each candidate set has its own rotation', async (t) => {
  const rr = createRoundRobin({ ...clock, random: () => 0 })
  const ab = endpoints('a', 'b')
  const xyz = endpoints('x', 'y', 'z')
  const seen: string[] = []
  for (let i = 0; i < 3; i++) {
    seen.push(rr.pick(ab, CTX)?.name ?? '-')
    seen.push(rr.pick(xyz, CTX)?.name ?? '-')
  }
  t.strictSame(seen, ['a', 'x', 'b', 'y', 'a', 'z'])
})

t.test('the random start is drawn once per candidate set', async (t) => {
  let draws = 0
  const rr = createRoundRobin({ ...clock, random: () => { draws++; return 0.4 } })
  const ab = endpoints('a', 'b')
  picks(rr, ab, 10)
  t.equal(draws, 1)
})

t.test('empty candidate set', async (t) => {
  let draws = 0
  const rr = createRoundRobin({ ...clock, random: () => { draws++; return 0 } })
  t.equal(rr.pick([], CTX), undefined)
  t.equal(draws, 0, 'no state is made for an empty set')
})

t.test('excluded endpoints are skipped, and the rotation goes on after the one picked', async (t) => {
  const abc = endpoints('a', 'b', 'c')
  const [a, b, c] = abc
  const rr = createRoundRobin({ ...clock, random: () => 0 })
  t.equal(rr.pick(abc, { ...CTX, exclude: new Set([a!]) })?.name, 'b')
  t.equal(rr.pick(abc, CTX)?.name, 'c')
  t.equal(rr.pick(abc, { ...CTX, exclude: new Set([a!, b!]) })?.name, 'c')
  t.equal(rr.pick(abc, { ...CTX, exclude: new Set([a!, b!, c!]) }), undefined, 'all excluded: nothing to pick')
  t.equal(rr.pick(abc, CTX)?.name, 'a')
})

t.test('the registry', async (t) => {
  t.ok(hasBalancer('round_robin'), "the seed's name")
  t.ok(hasBalancer('round-robin'), 'the kebab-case alias')
  t.notOk(hasBalancer('fastest'))
  t.notOk(hasBalancer('constructor'), 'no prototype names')
  t.ok(balancerNames().includes('round_robin'))
  const rr = createBalancer('round_robin', { ...clock, random: () => 0 })
  t.equal(rr.name, 'round_robin')
  t.strictSame(picks(rr, endpoints('a', 'b'), 3), ['a', 'b', 'a'])
  t.throws(() => createBalancer('fastest', { ...clock, random: Math.random }), {
    code: 'GW_ERR_FLEET_INVALID',
    message: `load_balancer.type 'fastest' is not a known balancing strategy (known: ${balancerNames().join(', ')})`
  })
})
