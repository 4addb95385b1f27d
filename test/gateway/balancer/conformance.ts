/**
 * The conformance suite every balancing strategy must pass, whatever its algorithm (after hono's
 * `router/common.case.test.ts`): the contract of `Balancer.pick` in `gateway/balancer/types.ts`. Run for every
 * registered name by `strategies.test.ts`.
 *
 * Inputs are generated from a seeded random source, so a failure replays exactly. Loads (in-flight counts, queue
 * reports) and hash keys are varied between picks, so strategies that read them are exercised on every branch.
 */
import { type Test } from 'tap'
import { type Balancer, type BalancerDeps, type Endpoint, type PickContext } from '../../../gateway/balancer/types.ts'
import { CTX, fakeClock, many, seededRandom, weighted, type FakeClock } from './helpers.ts'

/** What the suite needs to know about a strategy. */
export interface ConformanceSubject {
  readonly name: string
  /** Builds a fresh instance (a new gateway replica) with the given deps. */
  readonly create: (deps: BalancerDeps) => Balancer
  /** True for a strategy that does not look at weights (round robin): it may pick a weight-0 endpoint. */
  readonly ignoresWeights?: boolean
}

const PICKS = 400

/** Everything a pick may read, shuffled between picks by `rand`. */
function shake (candidates: readonly Endpoint[], rand: () => number, clock: FakeClock): void {
  clock.t += Math.floor(rand() * 1500)
  for (const endpoint of candidates) {
    endpoint.inFlight = Math.floor(rand() * 6)
    const r = rand()
    // Fresh, stale, never reported, and a garbage report: least_queue must cope with each.
    endpoint.queueDepth = r < 0.1 ? Number.NaN : Math.floor(rand() * 8)
    endpoint.queueDepthAt = r < 0.2 ? Number.NEGATIVE_INFINITY : r < 0.3 ? Number.NaN : clock.t - Math.floor(rand() * 4000)
    // No sample yet, a zero, and real latencies: least_latency must cope with each.
    const l = rand()
    endpoint.latencyMs = l < 0.15 ? Number.NaN : l < 0.2 ? 0 : rand() * 50
  }
}

/** A context with a random subset excluded (sometimes none, sometimes all) and sometimes a hash key. */
function randomContext (candidates: readonly Endpoint[], rand: () => number): PickContext {
  const mode = rand()
  let exclude: Set<Endpoint> | undefined
  if (mode < 0.4) exclude = undefined
  else if (mode < 0.5) exclude = new Set(candidates)
  else exclude = new Set(candidates.filter(() => rand() < 0.5))
  const keyMode = rand()
  const hashKey = keyMode < 0.3 ? undefined : keyMode < 0.35 ? '' : `user-${Math.floor(rand() * 50)}`
  return { model: 'm', version: undefined, exclude, hashKey }
}

/** Endpoint fields a balancer may read but never write. */
function snapshot (candidates: readonly Endpoint[]): string {
  return JSON.stringify(candidates.map((e) => [e.name, e.weight, e.state, e.inFlight, e.queueDepth, e.queueDepthAt, e.latencyMs]))
}

/** The candidate sets the suite runs over: sizes 1, 2, 3, 7 and 30, equal and mixed weights. */
function candidateSets (): ReadonlyArray<readonly Endpoint[]> {
  return [
    many(1),
    many(2),
    weighted({ a: 5, b: 1, c: 1 }),
    weighted({ a: 1, b: 2, c: 3, d: 4, e: 1, f: 1, g: 10 }),
    many(30)
  ]
}

/** Whether `endpoint` may be picked at all by this subject (weight 0 may not, unless weights are ignored). */
function pickable (subject: ConformanceSubject, endpoint: Endpoint): boolean {
  return subject.ignoresWeights === true || endpoint.weight > 0
}

/** Runs the whole suite for one strategy as subtests of `t`. */
export async function conformance (t: Test, subject: ConformanceSubject): Promise<void> {
  await t.test('an empty candidate set gives undefined and never throws', async (t) => {
    const balancer = subject.create({ now: fakeClock().now, random: seededRandom(1) })
    t.equal(balancer.pick([], CTX), undefined)
    t.equal(balancer.pick([], { ...CTX, exclude: new Set(many(2)), hashKey: 'k' }), undefined)
    t.equal(balancer.pick(Object.freeze([]), { ...CTX, hashKey: '' }), undefined)
    t.equal(balancer.name, subject.name, 'reports its registered name')
  })

  await t.test('picks only members of the set, never an excluded one, and something whenever it can', async (t) => {
    const rand = seededRandom(11)
    const clock = fakeClock()
    const balancer = subject.create({ now: clock.now, random: seededRandom(12) })
    let checked = 0
    let problems = 0
    for (const candidates of candidateSets()) {
      for (let i = 0; i < PICKS; i++) {
        shake(candidates, rand, clock)
        const ctx = randomContext(candidates, rand)
        const before = snapshot(candidates)
        const picked = balancer.pick(candidates, ctx)
        const open = candidates.filter((e) => ctx.exclude?.has(e) !== true && pickable(subject, e))
        checked++
        if (snapshot(candidates) !== before) {
          problems++
          t.fail('pick changed an endpoint', { before, after: snapshot(candidates) })
        }
        if (picked === undefined) {
          if (open.length > 0) {
            problems++
            t.fail('undefined although some endpoint could be picked', { open: open.map((e) => e.name) })
          }
          continue
        }
        if (!candidates.includes(picked)) {
          problems++
          t.fail('picked an endpoint outside the candidate set', { picked: picked.name })
        }
        if (ctx.exclude?.has(picked) === true) {
          problems++
          t.fail('picked an excluded endpoint', { picked: picked.name })
        }
        if (!pickable(subject, picked)) {
          problems++
          t.fail('picked an endpoint of weight 0', { picked: picked.name })
        }
      }
    }
    t.equal(problems, 0, `${checked} picks checked`)
  })

  await t.test('every candidate excluded gives undefined', async (t) => {
    const balancer = subject.create({ now: fakeClock().now, random: seededRandom(3) })
    for (const candidates of candidateSets()) {
      const all = new Set(candidates)
      for (let i = 0; i < 5; i++) {
        t.equal(balancer.pick(candidates, { ...CTX, exclude: all }), undefined, `${candidates.length} endpoints`)
        t.equal(balancer.pick(candidates, { ...CTX, exclude: all, hashKey: 'k' }), undefined)
      }
      // And it still works afterwards.
      t.not(balancer.pick(candidates, CTX), undefined)
    }
  })

  await t.test('only weight-0 endpoints left gives undefined (strategies that use weights)', { skip: subject.ignoresWeights === true }, async (t) => {
    const balancer = subject.create({ now: fakeClock().now, random: seededRandom(4) })
    const zeros = weighted({ a: 0, b: 0 })
    t.equal(balancer.pick(zeros, CTX), undefined)
    t.equal(balancer.pick(zeros, { ...CTX, hashKey: 'k' }), undefined)
    const mixed = weighted({ a: 0, b: 1, c: 0 })
    const b = mixed[1]
    t.equal(balancer.pick(mixed, { ...CTX, exclude: new Set(b === undefined ? [] : [b]) }), undefined)
    for (let i = 0; i < 20; i++) t.equal(balancer.pick(mixed, { ...CTX, hashKey: `k${i}` })?.name, 'b')
  })

  await t.test('stays correct when the candidate array is replaced (fleet updates)', async (t) => {
    const rand = seededRandom(21)
    const clock = fakeClock()
    const balancer = subject.create({ now: clock.now, random: seededRandom(22) })
    const first = many(5)
    // The same endpoint objects in a new array without two of them (removals), then with new ones added, then a
    // wholly new set, then back to the first array (still alive and still in use elsewhere).
    const removed = Object.freeze(first.slice(1, 4))
    const added = Object.freeze([...removed, ...many(3, 'new')])
    const reordered = Object.freeze([...added].reverse())
    const shrunk = Object.freeze(first.slice(0, 1))
    const sequence = [first, removed, added, reordered, shrunk, many(4, 'other'), first, removed]
    let problems = 0
    for (const candidates of sequence) {
      for (let i = 0; i < 60; i++) {
        shake(candidates, rand, clock)
        const ctx = i % 3 === 0 ? CTX : randomContext(candidates, rand)
        const picked = balancer.pick(candidates, ctx)
        const open = candidates.filter((e) => ctx.exclude?.has(e) !== true && pickable(subject, e))
        if (picked === undefined ? open.length > 0 : !open.includes(picked)) {
          problems++
          t.fail('wrong pick after an update', { picked: picked?.name, set: candidates.map((e) => e.name) })
        }
      }
    }
    t.equal(problems, 0)
  })

  await t.test('every endpoint of a set is reachable', async (t) => {
    // Not a distribution test: only that nothing is starved outright when the endpoints are alike and idle.
    const balancer = subject.create({ now: fakeClock().now, random: seededRandom(5) })
    const candidates = many(7)
    for (const e of candidates) e.inFlight = 0
    const seen = new Set<string>()
    for (let i = 0; i < 700; i++) {
      // Distinct keys, so consistent_hash spreads too.
      seen.add(balancer.pick(candidates, { ...CTX, hashKey: `key-${i}` })?.name ?? '-')
    }
    t.strictSame([...seen].sort(), candidates.map((e) => e.name).sort())
  })

  await t.test('deterministic given the seeded random and clock', async (t) => {
    function run (): string[] {
      const rand = seededRandom(31)
      const clock = fakeClock()
      const balancer = subject.create({ now: clock.now, random: seededRandom(32) })
      const out: string[] = []
      for (const candidates of candidateSets()) {
        for (let i = 0; i < 100; i++) {
          shake(candidates, rand, clock)
          out.push(balancer.pick(candidates, randomContext(candidates, rand))?.name ?? '-')
        }
      }
      return out
    }
    const a = run()
    t.strictSame(run(), a, 'two replicas with the same seed and inputs pick the same way')
    t.ok(new Set(a).size > 3, 'and the run is not trivial')
  })
}
