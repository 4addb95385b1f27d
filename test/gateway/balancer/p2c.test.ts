import t, { type Test } from 'tap'
import { createP2c } from '../../../gateway/balancer/p2c.ts'
import { createRandom } from '../../../gateway/balancer/random.ts'
import { type Balancer, type Endpoint } from '../../../gateway/balancer/types.ts'
import { CTX, byName, fakeClock, many, names, setInFlight, seededRandom, tally, weighted } from './helpers.ts'

const clock = fakeClock()
const N = 60000

/** Within `tolerance` (a fraction) of `expected`. */
function near (t: Test, actual: number, expected: number, tolerance: number, what: string): void {
  t.ok(Math.abs(actual - expected) <= expected * tolerance + 1e-9, `${what}: ${actual} vs ${expected.toFixed(1)}`)
}

t.test('never picks the most loaded of three; the other two share evenly', async (t) => {
  const abc = weighted({ a: 1, b: 1, c: 1 })
  setInFlight(abc, { a: 10, b: 0, c: 0 })
  const counts = tally(createP2c({ now: clock.now, random: seededRandom(1) }), abc, N)
  t.equal(counts.a, 0, 'a loses every pair it is drawn in')
  near(t, counts.b ?? 0, N / 2, 0.02, 'b')
  near(t, counts.c ?? 0, N / 2, 0.02, 'c')
})

t.test('with distinct loads the share follows rank exactly as two distinct uniform draws predict', async (t) => {
  // The endpoint of rank r (0 = least loaded) of n wins when it is drawn with one of the n - 1 - r heavier ones:
  // probability (n - 1 - r) / C(n, 2).
  const n = 6
  const set = many(n)
  set.forEach((e, i) => { e.inFlight = i })
  const counts = tally(createP2c({ now: clock.now, random: seededRandom(2) }), set, N)
  const pairs = n * (n - 1) / 2
  set.forEach((e, r) => near(t, counts[e.name] ?? 0, N * (n - 1 - r) / pairs, 0.05, e.name))
  t.equal(counts.e5, 0)
})

t.test('equal loads: uniform', async (t) => {
  const set = many(5)
  const counts = tally(createP2c({ now: clock.now, random: seededRandom(3) }), set, N)
  for (const e of set) near(t, counts[e.name] ?? 0, N / 5, 0.04, e.name)
})

t.test('the two draws are distinct: with two endpoints the lighter always wins', async (t) => {
  const ab = weighted({ a: 1, b: 1 })
  setInFlight(ab, { a: 1, b: 0 })
  t.strictSame(tally(createP2c({ now: clock.now, random: seededRandom(4) }), ab, 1000), { a: 0, b: 1000 })
})

t.test('a burst spreads far more evenly than random choice', async (t) => {
  function maxLoad (balancer: Balancer, set: readonly Endpoint[]): number {
    for (const e of set) e.inFlight = 0
    for (let i = 0; i < 3000; i++) {
      const e = balancer.pick(set, CTX)
      if (e !== undefined) e.inFlight++
    }
    return Math.max(...set.map((e) => e.inFlight))
  }
  const set = many(100)
  const p2c = maxLoad(createP2c({ now: clock.now, random: seededRandom(5) }), set)
  const random = maxLoad(createRandom({ now: clock.now, random: seededRandom(5) }), set)
  // 30 a piece on average; one random choice reaches the mid 40s, two choices stay within a few of the mean.
  t.ok(p2c <= 33, `p2c max ${p2c}`)
  t.ok(random > p2c + 5, `random max ${random}`)
})

t.test('weights: Envoy\'s dynamic weight weight / (inFlight + 1) decides between the two drawn', async (t) => {
  const ab = weighted({ a: 3, b: 1 })
  const balancer = createP2c({ now: clock.now, random: seededRandom(6) })
  setInFlight(ab, { a: 0, b: 0 })
  t.strictSame(tally(balancer, ab, 50), { a: 50, b: 0 }, '1/3 < 1/1: the heavier wins at equal in-flight')
  setInFlight(ab, { a: 1, b: 0 })
  t.strictSame(tally(balancer, ab, 50), { a: 50, b: 0 }, '2/3 < 1/1')
  setInFlight(ab, { a: 3, b: 0 })
  t.strictSame(tally(balancer, ab, 50), { a: 0, b: 50 }, '4/3 > 1/1')
  // A burst ends with in-flight roughly in proportion to weight.
  setInFlight(ab, { a: 0, b: 0 })
  for (let i = 0; i < 400; i++) {
    const e = balancer.pick(ab, CTX)
    if (e !== undefined) e.inFlight++
  }
  t.ok(Math.abs(byName(ab, 'a').inFlight - 300) <= 2, `a ${byName(ab, 'a').inFlight} of 400`)
})

t.test('weight 0 and excluded endpoints are never drawn; a lone survivor is picked without a draw', async (t) => {
  const set = weighted({ a: 1, z: 0, b: 1, c: 1 })
  const a = byName(set, 'a')
  const b = byName(set, 'b')
  setInFlight(set, { a: 5, z: 0, b: 9, c: 7 })
  let draws = 0
  const random = seededRandom(7)
  const balancer = createP2c({ now: clock.now, random: () => { draws++; return random() } })
  const counts = tally(balancer, set, 3000, { ...CTX, exclude: new Set([a]) })
  t.equal(counts.z, 0)
  t.equal(counts.a, 0)
  t.equal(counts.c, 3000, 'c (7) beats b (9) in every pair without a')
  draws = 0
  t.strictSame(names(balancer, set, 5, { ...CTX, exclude: new Set([a, b]) }), ['c', 'c', 'c', 'c', 'c'])
  t.ok(draws <= 5 * 3, `${draws} draws`)
})

t.test('choices: 3 draws three, and more choices than endpoints compares them all', async (t) => {
  const set = many(4)
  set.forEach((e, i) => { e.inFlight = [3, 2, 1, 0][i] ?? 0 })
  const three = tally(createP2c({ now: clock.now, random: seededRandom(8) }, { choices: 3 }), set, N)
  // With 3 of 4 drawn, e3 (least) wins whenever drawn (3/4), e2 when e3 is not (1/4); e0 and e1 never.
  near(t, three.e3 ?? 0, N * 3 / 4, 0.03, 'e3')
  near(t, three.e2 ?? 0, N / 4, 0.05, 'e2')
  t.equal((three.e0 ?? 0) + (three.e1 ?? 0), 0)
  t.strictSame(tally(createP2c({ now: clock.now, random: seededRandom(9) }, { choices: 10 }), set, 100), { e0: 0, e1: 0, e2: 0, e3: 100 })
})

t.test('a tie between the two drawn goes to the one drawn first, so ties are spread at random', async (t) => {
  const abc = many(3)
  setInFlight(abc, { e0: 2, e1: 2, e2: 2 })
  const counts = tally(createP2c({ now: clock.now, random: seededRandom(10) }), abc, N)
  for (const e of abc) near(t, counts[e.name] ?? 0, N / 3, 0.04, e.name)
})
