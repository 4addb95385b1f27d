/**
 * bench/balancer-pick: what one `Balancer.pick` costs, per strategy, for fleets of 3, 30 and 300 endpoints, against a
 * baseline that only indexes the array (the harness's own cost). Endpoints carry in-flight counts and fresh queue
 * reports, and one pick in 64 excludes an endpoint (a retry), so every strategy runs the branches it runs in
 * production; `consistent_hash` gets keys from a pool of 1024. Contexts are built before timing, so only `pick` is
 * measured. Not a test: numbers depend on the machine.
 *
 *   npx tsc -p . && node dist/bench/balancer-pick.js
 *
 * Parameters come from the environment (defaults in brackets):
 *   BENCH_PICKS [1000000]     picks per measured round
 *   BENCH_ROUNDS [5]          measured rounds per case; the figure is the median
 *   BENCH_SIZES [3,30,300]    fleet sizes
 *   BENCH_STRATEGIES [all]    comma-separated strategy names
 *
 * Prints one line per case and ends with one JSON line of every figure (ns per pick).
 */
import { performance } from 'node:perf_hooks'
import { seededRandom } from '../common/seeded-random.ts'
import { balancerNames, createBalancer } from '../gateway/balancer/registry.ts'
import { type Balancer, type Endpoint, type PickContext } from '../gateway/balancer/types.ts'
import { Fleet } from '../gateway/fleet/fleet.ts'

const PICKS = intFromEnv('BENCH_PICKS', 1_000_000)
const ROUNDS = intFromEnv('BENCH_ROUNDS', 5)
const SIZES = (process.env.BENCH_SIZES ?? '3,30,300').split(',').map((s) => Number.parseInt(s, 10)).filter((n) => n > 0)
const STRATEGIES = process.env.BENCH_STRATEGIES === undefined ? balancerNames() : process.env.BENCH_STRATEGIES.split(',')
const CONTEXTS = 1024

function intFromEnv (name: string, fallback: number): number {
  const value = Number.parseInt(process.env[name] ?? '', 10)
  return Number.isFinite(value) && value > 0 ? value : fallback
}

function fleetOf (n: number, rand: () => number): readonly Endpoint[] {
  const servers = Array.from({ length: n }, (_, i) => ({
    name: `worker-${i}`, host: '127.0.0.1', port: 9000 + i, models: ['m'], weight: 1 + (i % 3), labels: {}
  }))
  const endpoints = new Fleet(servers).endpointsServing('m')
  for (const e of endpoints) {
    e.inFlight = Math.floor(rand() * 8)
    e.queueDepth = Math.floor(rand() * 5)
    e.queueDepthAt = 0
  }
  return endpoints
}

function contextsFor (endpoints: readonly Endpoint[], rand: () => number): PickContext[] {
  return Array.from({ length: CONTEXTS }, (_, i) => {
    const victim = endpoints[Math.floor(rand() * endpoints.length)]
    // One context in 64 is a retry that excludes the endpoint tried first: a generous retry rate.
    const exclude = i % 64 === 0 && endpoints.length > 1 && victim !== undefined ? new Set([victim]) : undefined
    return { model: 'm', version: undefined, exclude, hashKey: `session-${Math.floor(rand() * 1_000_000)}` }
  })
}

/** ns per call of `pick` over one round; `sink` keeps the results alive so the loop is not optimised away. */
let sink = 0
function round (pick: (c: readonly Endpoint[], ctx: PickContext) => Endpoint | undefined, endpoints: readonly Endpoint[],
  contexts: readonly PickContext[], picks: number): number {
  const started = performance.now()
  for (let i = 0; i < picks; i++) {
    const e = pick(endpoints, contexts[i & (CONTEXTS - 1)] as PickContext)
    if (e !== undefined) sink += e.port
  }
  return (performance.now() - started) * 1e6 / picks
}

function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN
}

function measure (balancer: Pick<Balancer, 'pick'>, endpoints: readonly Endpoint[], contexts: readonly PickContext[]): number {
  const pick = balancer.pick.bind(balancer)
  round(pick, endpoints, contexts, Math.min(PICKS, 200_000)) // warm-up: JIT and per-set state
  const results: number[] = []
  for (let r = 0; r < ROUNDS; r++) results.push(round(pick, endpoints, contexts, PICKS))
  return median(results)
}

const baseline: Pick<Balancer, 'pick'> = {
  pick (candidates: readonly Endpoint[]): Endpoint | undefined {
    return candidates[(sink >>> 0) % candidates.length]
  }
}

const results: Record<string, Record<string, number>> = {}
console.log(`balancer-pick: ${PICKS} picks x ${ROUNDS} rounds, median ns/pick (node ${process.version})`)
console.log(['strategy'.padEnd(18), ...SIZES.map((n) => `n=${n}`.padStart(10))].join(''))
for (const name of ['baseline', ...STRATEGIES]) {
  const row: Record<string, number> = {}
  for (const n of SIZES) {
    const rand = seededRandom(n)
    const endpoints = fleetOf(n, rand)
    const contexts = contextsFor(endpoints, rand)
    const balancer = name === 'baseline' ? baseline : createBalancer(name, { now: () => 1, random: seededRandom(7) })
    row[String(n)] = Math.round(measure(balancer, endpoints, contexts) * 10) / 10
  }
  results[name] = row
  console.log([name.padEnd(18), ...SIZES.map((n) => String(row[String(n)]).padStart(10))].join(''))
}
console.log(JSON.stringify({ bench: 'balancer-pick', unit: 'ns/pick', picks: PICKS, rounds: ROUNDS, node: process.version, results, sink: sink > 0 }))
