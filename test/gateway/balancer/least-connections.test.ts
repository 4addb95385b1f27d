import t from 'tap'
import { createLeastConnections } from '../../../gateway/balancer/least-connections.ts'
import { CTX, byName, fakeClock, many, names, setInFlight, seededRandom, weighted } from './helpers.ts'

const zero = { now: fakeClock().now, random: () => 0 }

t.test('ties rotate instead of always going to the first', async (t) => {
  const abc = weighted({ a: 1, b: 1, c: 1 })
  t.strictSame(names(createLeastConnections(zero), abc, 7), ['a', 'b', 'c', 'a', 'b', 'c', 'a'])
  // Only b and c tie: they alternate, a is never picked.
  setInFlight(abc, { a: 2, b: 1, c: 1 })
  t.strictSame(names(createLeastConnections(zero), abc, 6), ['b', 'c', 'b', 'c', 'b', 'c'])
})

t.test('the tie rotation starts at a random offset per candidate set', async (t) => {
  const abcd = many(4)
  t.strictSame(names(createLeastConnections({ ...zero, random: () => 0.5 }), abcd, 5), ['e2', 'e3', 'e0', 'e1', 'e2'])
  const starts = new Set([1, 2, 3, 4, 5, 6].map((seed) => createLeastConnections({ ...zero, random: seededRandom(seed) }).pick(abcd, CTX)?.name))
  t.ok(starts.size > 1, 'replicas do not break their first tie the same way')
})

t.test('the least in-flight wins outright', async (t) => {
  const abc = weighted({ a: 1, b: 1, c: 1 })
  setInFlight(abc, { a: 3, b: 0, c: 1 })
  t.strictSame(names(createLeastConnections(zero), abc, 4), ['b', 'b', 'b', 'b'])
})

t.test('in-flight is divided by weight; weight 0 is never picked', async (t) => {
  const ab = weighted({ a: 2, b: 1, z: 0 })
  const balancer = createLeastConnections(zero)
  setInFlight(ab, { a: 1, b: 0 })
  t.equal(balancer.pick(ab, CTX)?.name, 'b', '1/2 > 0/1')
  setInFlight(ab, { a: 1, b: 1 })
  t.equal(balancer.pick(ab, CTX)?.name, 'a', '1/2 < 1/1')
  setInFlight(ab, { a: 4, b: 2 })
  // 4/2 = 2/1: a tie, which rotates.
  t.strictSame(names(createLeastConnections(zero), ab, 4), ['a', 'b', 'a', 'b'])
  setInFlight(ab, { a: 9, b: 9, z: 0 })
  t.notOk(names(balancer, ab, 20).includes('z'))
})

t.test('a burst of long requests is spread in proportion to weight', async (t) => {
  const set = weighted({ a: 5, b: 1, c: 1 })
  const balancer = createLeastConnections(zero)
  // Requests that do not finish during the burst: each pick raises the endpoint's in-flight, as the proxy does.
  for (let i = 0; i < 70; i++) {
    const e = balancer.pick(set, CTX)
    if (e !== undefined) e.inFlight++
  }
  t.strictSame(set.map((e) => e.inFlight), [50, 10, 10])
})

t.test('a slow endpoint keeps its requests longer and so gets fewer', async (t) => {
  // Three endpoints; e2 finishes a request every third tick, the others every tick.
  const set = many(3)
  const balancer = createLeastConnections({ ...zero, random: seededRandom(3) })
  const served: Record<string, number> = { e0: 0, e1: 0, e2: 0 }
  for (let tick = 0; tick < 3000; tick++) {
    for (let k = 0; k < 2; k++) {
      const e = balancer.pick(set, CTX)
      if (e === undefined) continue
      e.inFlight++
      served[e.name] = (served[e.name] ?? 0) + 1
    }
    for (const e of set) {
      const rate = e.name === 'e2' ? tick % 3 === 0 ? 1 : 0 : 1
      const done = Math.min(rate, e.inFlight)
      e.inFlight -= done
    }
  }
  t.ok((served.e2 ?? 0) < (served.e0 ?? 0) / 2, `slow one served ${served.e2}, fast ones ${served.e0} and ${served.e1}`)
  t.ok(byName(set, 'e2').inFlight <= byName(set, 'e0').inFlight + 2, 'its backlog stays level with the others')
})
