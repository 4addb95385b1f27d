import t from 'tap'
import { createLeastConnections } from '../../../gateway/balancer/least-connections.ts'
import { createLeastLatency } from '../../../gateway/balancer/least-latency.ts'
import { type Balancer } from '../../../gateway/balancer/types.ts'
import { type Endpoint } from '../../../gateway/fleet/types.ts'
import { CTX, fakeClock, names, seededRandom, setInFlight, weighted } from './helpers.ts'

const zero = { now: fakeClock().now, random: () => 0 }

function setLatency (list: readonly Endpoint[], latency: Record<string, number>): void {
  for (const e of list) e.latencyMs = latency[e.name] ?? Number.NaN
}

t.test('an endpoint with no latency sample yet is tried first; ties rotate', async (t) => {
  const abc = weighted({ a: 1, b: 1, c: 1 })
  setLatency(abc, { a: 5, b: 5 })
  t.strictSame(names(createLeastLatency(zero), abc, 3), ['c', 'c', 'c'], 'c has no sample: cost 0')
  setLatency(abc, { a: 5, b: 5, c: 5 })
  t.strictSame(names(createLeastLatency(zero), abc, 6), ['a', 'b', 'c', 'a', 'b', 'c'])
})

t.test('cost is (in-flight + 1) x latency: a slow server takes work only when the fast ones are that much busier', async (t) => {
  const abc = weighted({ fast1: 1, fast2: 1, slow: 1 })
  setLatency(abc, { fast1: 5, fast2: 5, slow: 15 })
  const balancer = createLeastLatency(zero)
  setInFlight(abc, { fast1: 0, fast2: 0, slow: 0 })
  t.not(balancer.pick(abc, CTX)?.name, 'slow', 'idle fleet: a fast server')
  setInFlight(abc, { fast1: 1, fast2: 1, slow: 0 })
  t.not(balancer.pick(abc, CTX)?.name, 'slow', '2 x 5 < 1 x 15')
  setInFlight(abc, { fast1: 3, fast2: 3, slow: 0 })
  t.equal(balancer.pick(abc, CTX)?.name, 'slow', '4 x 5 > 1 x 15')
})

/**
 * A fleet of three one-at-a-time servers (service 5, 5 and 15 ms) under Poisson arrivals at 90% of its capacity
 * (466 requests/s); the forwarder's moving average is modelled the way it is computed. Returns each request's
 * latency and the share each server took.
 */
function simulate (balancer: Balancer): { latencies: number[], share: Record<string, number> } {
  const abc = weighted({ fast1: 1, fast2: 1, slow: 1 })
  const service: Record<string, number> = { fast1: 5, fast2: 5, slow: 15 }
  setLatency(abc, {})
  const busyUntil = new Map<string, number[]>(abc.map((e) => [e.name, []]))
  const served: Record<string, number> = { fast1: 0, fast2: 0, slow: 0 }
  const latencies: number[] = []
  const rand = seededRandom(7)
  const n = 4000
  let now = 0
  for (let i = 0; i < n; i++) {
    now += -Math.log(1 - rand()) * (1000 / 420)
    for (const e of abc) {
      const queue = busyUntil.get(e.name)!.filter((end) => end > now)
      busyUntil.set(e.name, queue)
      e.inFlight = queue.length
    }
    const e = balancer.pick(abc, CTX)!
    const queue = busyUntil.get(e.name)!
    const end = Math.max(now, queue[queue.length - 1] ?? now) + service[e.name]!
    queue.push(end)
    const latency = end - now
    e.latencyMs = Number.isNaN(e.latencyMs) ? latency : e.latencyMs + 0.1 * (latency - e.latencyMs)
    served[e.name]!++
    latencies.push(latency)
  }
  latencies.sort((x, y) => x - y)
  return { latencies, share: Object.fromEntries(Object.entries(served).map(([k, v]) => [k, v / n])) }
}

function quantile (sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!
}

t.test('in a simulated fleet with one slow server, work follows speed and the tail shrinks against least_connections', async (t) => {
  const latency = simulate(createLeastLatency(zero))
  const leastConn = simulate(createLeastConnections(zero))
  t.ok(latency.share.slow! > 0.08 && latency.share.slow! < 0.2,
    `the slow server takes about its 1/7 share of capacity (${(latency.share.slow! * 100).toFixed(1)}%)`)
  t.ok(latency.share.slow! < leastConn.share.slow!, `less than under least_connections (${(leastConn.share.slow! * 100).toFixed(1)}%)`)
  const [p50, p99] = [quantile(latency.latencies, 0.5), quantile(latency.latencies, 0.99)]
  const [c50, c99] = [quantile(leastConn.latencies, 0.5), quantile(leastConn.latencies, 0.99)]
  t.ok(p99 < c99, `p99 ${p99.toFixed(1)} ms vs least_connections ${c99.toFixed(1)} ms (p50 ${p50.toFixed(1)} vs ${c50.toFixed(1)})`)
})

t.test('cost is divided by weight; weight 0 and excluded endpoints are never picked', async (t) => {
  const list = weighted({ a: 3, b: 1, z: 0 })
  setLatency(list, { a: 10, b: 10, z: 1 })
  setInFlight(list, { a: 2, b: 0, z: 0 })
  const balancer = createLeastLatency(zero)
  t.equal(balancer.pick(list, CTX)?.name, 'a', '3 x 10 / 3 = 10 equals 1 x 10 / 1: tie, the rotation starts at a')
  setInFlight(list, { a: 3, b: 0, z: 0 })
  t.equal(balancer.pick(list, CTX)?.name, 'b')
  t.equal(balancer.pick(list, { ...CTX, exclude: new Set([list[1]!]) })?.name, 'a')
  t.equal(balancer.pick(list, { ...CTX, exclude: new Set([list[0]!, list[1]!]) }), undefined, 'only z is left, and it weighs 0')
})

t.test('options are refused', async (t) => {
  t.throws(() => createLeastLatency(zero, { choices: 2 }), { code: 'GW_ERR_FLEET_INVALID' })
})
