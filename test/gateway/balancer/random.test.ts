import t, { type Test } from 'tap'
import { createRandom } from '../../../gateway/balancer/random.ts'
import { CTX, byName, fakeClock, many, seededRandom, tally, weighted } from './helpers.ts'

const clock = fakeClock()
const N = 70000

function near (t: Test, actual: number, expected: number, tolerance: number, what: string): void {
  t.ok(Math.abs(actual - expected) <= expected * tolerance, `${what}: ${actual} vs ${expected.toFixed(1)}`)
}

t.test('equal weights: roughly uniform', async (t) => {
  const set = many(7)
  const counts = tally(createRandom({ now: clock.now, random: seededRandom(1) }), set, N)
  // 10,000 expected each; one standard deviation is about 93.
  for (const e of set) near(t, counts[e.name] ?? 0, N / 7, 0.03, e.name)
})

t.test('in proportion to weight; weight 0 never', async (t) => {
  const set = weighted({ a: 5, b: 1, z: 0, c: 1 })
  const counts = tally(createRandom({ now: clock.now, random: seededRandom(2) }), set, N)
  near(t, counts.a ?? 0, N * 5 / 7, 0.02, 'a')
  near(t, counts.b ?? 0, N / 7, 0.04, 'b')
  near(t, counts.c ?? 0, N / 7, 0.04, 'c')
  t.equal(counts.z, 0)
})

t.test('the draw maps exactly onto the cumulative weights, edges included', async (t) => {
  const set = weighted({ a: 2, z: 0, b: 1, c: 1 })
  const at = (u: number): string => createRandom({ now: clock.now, random: () => u }).pick(set, CTX)?.name ?? '-'
  t.equal(at(0), 'a')
  t.equal(at(0.4999), 'a')
  t.equal(at(0.5), 'b', 'z, of weight 0, owns no part of the range')
  t.equal(at(0.7499), 'b')
  t.equal(at(0.75), 'c')
  t.equal(at(0.9999999999999999), 'c')
})

t.test('one draw a pick, none to set up', async (t) => {
  let draws = 0
  const random = seededRandom(3)
  const balancer = createRandom({ now: clock.now, random: () => { draws++; return random() } })
  const set = many(4)
  tally(balancer, set, 100)
  t.equal(draws, 100)
  tally(balancer, set, 10, { ...CTX, exclude: new Set([byName(set, 'e1')]) })
  t.equal(draws, 110)
})

t.test('an excluded endpoint\'s share goes to the others in proportion', async (t) => {
  const set = weighted({ a: 5, b: 1, c: 2 })
  const counts = tally(createRandom({ now: clock.now, random: seededRandom(4) }), set, N, { ...CTX, exclude: new Set([byName(set, 'a')]) })
  t.equal(counts.a, 0)
  near(t, counts.b ?? 0, N / 3, 0.03, 'b')
  near(t, counts.c ?? 0, N * 2 / 3, 0.03, 'c')
  const edge = createRandom({ now: clock.now, random: () => 0.9999999999999999 })
  t.equal(edge.pick(set, { ...CTX, exclude: new Set([byName(set, 'c')]) })?.name, 'b', 'the top of the range is the last eligible')
})
