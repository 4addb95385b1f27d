import t from 'tap'
import { createWeighted } from '../../../gateway/balancer/weighted.ts'
import { CTX, byName, fakeClock, names, seededRandom, tally, weighted } from './helpers.ts'

const zero = { now: fakeClock().now, random: () => 0 }
const CYCLE_517 = ['a', 'a', 'b', 'a', 'c', 'a', 'a']

t.test("weights 5/1/1 give NGINX's a a b a c a a, cycle after cycle", async (t) => {
  const abc = weighted({ a: 5, b: 1, c: 1 })
  t.strictSame(names(createWeighted(zero), abc, 21), [...CYCLE_517, ...CYCLE_517, ...CYCLE_517])
})

t.test('each cycle of W = Σweight picks gives every endpoint exactly its weight, interleaved', async (t) => {
  const set = weighted({ a: 3, b: 2, c: 1, d: 0 })
  const balancer = createWeighted(zero)
  for (let cycle = 0; cycle < 5; cycle++) {
    t.strictSame(tally(balancer, set, 6), { a: 3, b: 2, c: 1, d: 0 }, `cycle ${cycle}`)
  }
  // Smooth: a never gets its 3 in a row within a cycle of 3/2/1 (NGINX gives a b a c b a... shape).
  t.strictSame(names(createWeighted(zero), set, 6), ['a', 'b', 'a', 'c', 'b', 'a'])
})

t.test('weight 0 never takes traffic; all weights 0 gives undefined', async (t) => {
  const set = weighted({ a: 0, b: 1, c: 0, d: 2 })
  t.strictSame(tally(createWeighted(zero), set, 300), { a: 0, b: 100, c: 0, d: 200 })
  t.equal(createWeighted(zero).pick(weighted({ a: 0, b: 0 }), CTX), undefined)
})

t.test('replicas start at a random phase of the cycle (one draw per set), otherwise the same sequence', async (t) => {
  const abc = weighted({ a: 5, b: 1, c: 1 })
  const phases = new Set<number>()
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    const first = seededRandom(seed)()
    const phase = Math.floor(first * 7)
    phases.add(phase)
    let draws = 0
    const random = seededRandom(seed)
    const balancer = createWeighted({ now: zero.now, random: () => { draws++; return random() } })
    const expected = Array.from({ length: 14 }, (_, k) => CYCLE_517[(phase + k) % 7] ?? '?')
    t.strictSame(names(balancer, abc, 14), expected, `seed ${seed}: phase ${phase}`)
    t.equal(draws, 1, 'one draw for the set, none per pick')
  }
  t.ok(phases.size > 2, 'different seeds, different phases')
})

t.test('the phase run-ahead is capped for large total weights', async (t) => {
  const heavy: Record<string, number> = {}
  for (let i = 0; i < 300; i++) heavy[`e${i}`] = 1000
  const set = weighted(heavy)
  const started = process.hrtime.bigint()
  const picked = createWeighted({ now: zero.now, random: () => 0.999999 }).pick(set, CTX)
  const ms = Number(process.hrtime.bigint() - started) / 1e6
  t.ok(picked !== undefined)
  // 4096 rounds over 300 endpoints is ~1.2M additions; a run-ahead over all 300,000 of weight would be ~90M.
  t.ok(ms < 1000, `first pick took ${ms.toFixed(1)} ms`)
})

t.test('excluded endpoints sit the round out; the others keep their relative shares', async (t) => {
  const abc = weighted({ a: 5, b: 1, c: 1 })
  const a = byName(abc, 'a')
  const balancer = createWeighted(zero)
  // With a excluded, b and c alternate (each gains 1 a round, the pick pays 2).
  t.strictSame(names(balancer, abc, 6, { ...CTX, exclude: new Set([a]) }), ['b', 'c', 'b', 'c', 'b', 'c'])
  // Back to normal: a's current was untouched, so the long run share is still 5/1/1.
  const counts = tally(balancer, abc, 700)
  t.strictSame(counts, { a: 500, b: 100, c: 100 })
})

t.test('each candidate set keeps its own currents', async (t) => {
  const one = weighted({ a: 2, b: 1 })
  const two = weighted({ x: 1, y: 1 })
  const balancer = createWeighted(zero)
  const seen: string[] = []
  for (let i = 0; i < 3; i++) {
    seen.push(balancer.pick(one, CTX)?.name ?? '-')
    seen.push(balancer.pick(two, CTX)?.name ?? '-')
  }
  t.strictSame(seen, ['a', 'x', 'b', 'y', 'a', 'x'])
})
