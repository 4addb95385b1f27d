import t from 'tap'
import { createLeastQueue } from '../../../gateway/balancer/least-queue.ts'
import { type Endpoint } from '../../../gateway/balancer/types.ts'
import { CTX, byName, fakeClock, names, setInFlight, weighted } from './helpers.ts'

function report (e: Endpoint, depth: number, at: number): void {
  e.queueDepth = depth
  e.queueDepthAt = at
}

t.test('a fresh report counts on top of in-flight', async (t) => {
  const clock = fakeClock(10_000)
  const ab = weighted({ a: 1, b: 1 })
  const balancer = createLeastQueue({ now: clock.now, random: () => 0 })
  // The example of the rationale: both carry 4 of ours; a runs them all, b runs 1 and queues 3.
  setInFlight(ab, { a: 4, b: 4 })
  report(byName(ab, 'a'), 0, clock.t)
  report(byName(ab, 'b'), 3, clock.t)
  t.strictSame(names(balancer, ab, 3), ['a', 'a', 'a'])
  // Other replicas' work shows up only in the report: a's queue of 6 makes it heavier than b's 4 + 3.
  report(byName(ab, 'a'), 6, clock.t)
  t.strictSame(names(balancer, ab, 3), ['b', 'b', 'b'])
  // In-flight still counts: a request we just sent is not in any report yet.
  setInFlight(ab, { a: 0, b: 8 })
  t.strictSame(names(balancer, ab, 2), ['a', 'a'], '0 + 6 < 8 + 3')
})

t.test('a stale report falls back to in-flight for that endpoint only (fake clock)', async (t) => {
  const clock = fakeClock(10_000)
  const abc = weighted({ a: 1, b: 1, c: 1 })
  const balancer = createLeastQueue({ now: clock.now, random: () => 0 })
  setInFlight(abc, { a: 0, b: 1, c: 2 })
  report(byName(abc, 'a'), 5, clock.t)
  report(byName(abc, 'b'), 0, clock.t)
  t.equal(balancer.pick(abc, CTX)?.name, 'b', 'a: 0 + 5, b: 1 + 0, c: 2 (never reported)')
  clock.t += 2000
  t.equal(balancer.pick(abc, CTX)?.name, 'b', 'exactly staleAfterMs old is still fresh')
  clock.t += 1
  t.equal(balancer.pick(abc, CTX)?.name, 'a', 'one ms later a is judged by its in-flight (0)')
  report(byName(abc, 'a'), 5, clock.t)
  t.equal(balancer.pick(abc, CTX)?.name, 'b', 'a new report counts again')
})

t.test('staleAfterMs is an option', async (t) => {
  const clock = fakeClock(10_000)
  const ab = weighted({ a: 1, b: 1 })
  setInFlight(ab, { a: 0, b: 1 })
  report(byName(ab, 'a'), 5, clock.t - 150)
  t.equal(createLeastQueue({ now: clock.now, random: () => 0 }, { staleAfterMs: 100 }).pick(ab, CTX)?.name, 'a', '150 ms > 100 ms: stale')
  t.equal(createLeastQueue({ now: clock.now, random: () => 0 }, { staleAfterMs: 200 }).pick(ab, CTX)?.name, 'b', 'fresh')
  t.equal(createLeastQueue({ now: clock.now, random: () => 0 }, { staleAfterMs: 0 }).pick(ab, CTX)?.name, 'a', '0: only a report from this very ms counts')
  report(byName(ab, 'a'), 5, clock.t - 1e9)
  t.equal(createLeastQueue({ now: clock.now, random: () => 0 }, { staleAfterMs: Infinity }).pick(ab, CTX)?.name, 'b', 'Infinity: trusted forever')
})

t.test('no report, or a garbage one, is the same as a stale one', async (t) => {
  const clock = fakeClock(10_000)
  const ab = weighted({ a: 1, b: 1 })
  setInFlight(ab, { a: 0, b: 1 })
  for (const [depth, at, why] of [
    [9, Number.NEGATIVE_INFINITY, 'never reported'],
    [9, Number.NaN, 'NaN time'],
    [Number.NaN, 10_000, 'NaN depth'],
    [-3, 10_000, 'negative depth']
  ] as const) {
    report(byName(ab, 'a'), depth, at)
    t.equal(createLeastQueue({ now: clock.now, random: () => 0 }, { staleAfterMs: Infinity }).pick(ab, CTX)?.name, 'a', why)
  }
})

t.test('the fleet\'s new endpoints start with no report', async (t) => {
  const [a] = weighted({ a: 1 })
  t.equal(a?.queueDepth, 0)
  t.equal(a?.queueDepthAt, Number.NEGATIVE_INFINITY)
})

t.test('all queues reading 0 does not send everything to the first worker (sglang#1417)', async (t) => {
  const clock = fakeClock(10_000)
  const abc = weighted({ a: 1, b: 1, c: 1 })
  for (const e of abc) report(e, 0, clock.t)
  t.strictSame(names(createLeastQueue({ now: clock.now, random: () => 0 }), abc, 6), ['a', 'b', 'c', 'a', 'b', 'c'])
})

t.test('per unit of weight; weight 0 never', async (t) => {
  const clock = fakeClock(10_000)
  const set = weighted({ a: 3, b: 1, z: 0 })
  const balancer = createLeastQueue({ now: clock.now, random: () => 0 })
  report(byName(set, 'a'), 4, clock.t)
  report(byName(set, 'b'), 1, clock.t)
  t.equal(balancer.pick(set, CTX)?.name, 'b', '4/3 > 1/1')
  report(byName(set, 'a'), 2, clock.t)
  t.equal(balancer.pick(set, CTX)?.name, 'a', '2/3 < 1/1')
  t.notOk(names(balancer, set, 10).includes('z'))
})

t.test('the clock is read once a pick', async (t) => {
  let reads = 0
  const balancer = createLeastQueue({ now: () => { reads++; return 0 }, random: () => 0 })
  names(balancer, weighted({ a: 1, b: 1, c: 1 }), 5)
  t.equal(reads, 5)
})
