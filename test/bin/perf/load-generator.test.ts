import { performance } from 'node:perf_hooks'
import t from 'tap'
import { runStep, type StepContext } from '../../../bin/perf/load-generator.ts'
import { type Outcome, type PreparedRequest, type Transport } from '../../../bin/perf/transport.ts'

/**
 * A transport that answers after `delayMs` on a timer, without a network: the generator's own behaviour (how many
 * requests it keeps in flight, which it sends, when) is what these tests look at. The command's tests run the
 * real HTTP transport against a real worker.
 */
function timedTransport (delayMs: number, fail = (_i: number): boolean => false): Transport & { inFlight: number, maxInFlight: number, sent: number[] } {
  const self = {
    name: 'fake',
    inFlight: 0,
    maxInFlight: 0,
    sent: [] as number[],
    metadata: async () => { throw new Error('unused') },
    maxBatchSize: async () => 0,
    statistics: async () => ({ ok: false, reason: 'none' }) as const,
    prepare: () => { throw new Error('unused') },
    send: (p: PreparedRequest): Promise<Outcome> => {
      const id = (p as PreparedRequest & { id: number }).id
      self.sent.push(id)
      self.inFlight++
      self.maxInFlight = Math.max(self.maxInFlight, self.inFlight)
      return new Promise((resolve) => setTimeout(() => {
        self.inFlight--
        resolve(fail(id) ? { ok: false, status: 500, message: `failed ${id}` } : { ok: true })
      }, delayMs))
    },
    close: async () => {}
  }
  return self
}

const requests = (n: number): PreparedRequest[] => Array.from({ length: n }, (_, id) => ({ id, bytes: 1 }) as PreparedRequest)
const now = (): number => performance.now()

t.test('closed loop: exactly N in flight, requests round-robin, the window after the warm-up', async t => {
  const transport = timedTransport(5)
  const edges: string[] = []
  // The step's start is its first reading of the clock.
  let started: number | undefined
  const clock = (): number => {
    const v = now()
    started ??= v
    return v
  }
  const context: StepContext = {
    transport, requests: requests(3), now: clock, index: 0,
    hooks: { windowStart: () => edges.push(`start ${transport.inFlight}`), windowEnd: () => edges.push('end') }
  }
  const samples = await runStep({ mode: 'concurrency', value: 4, warmupMs: 50, windowMs: 150 }, context)
  t.equal(transport.maxInFlight, 4)
  t.strictSame(transport.sent.slice(0, 7), [0, 1, 2, 0, 1, 2, 0])
  // The window's edges are computed from the step's start, not read from timers, so only float rounding moves them.
  t.ok(Math.abs(samples.windowStart - started! - 50) < 1e-6, 'the window opens after the 50 ms warm-up')
  t.ok(Math.abs(samples.windowEnd - samples.windowStart - 150) < 1e-6, 'a 150 ms window')
  t.strictSame(edges, ['start 4', 'end'], 'the statistics hooks fire once each, under load')
  t.equal(samples.log.length, transport.sent.length, 'every request sent is logged')
  let lateSends = 0
  let tooFast = 0
  for (let i = 0; i < samples.log.length; i++) {
    if (samples.log.start(i) >= samples.windowEnd) lateSends++
    if (samples.log.end(i) - samples.log.start(i) < 4) tooFast++
  }
  t.equal(lateSends, 0, 'nothing is sent after the window')
  t.equal(tooFast, 0, 'every latency covers the transport\'s 5 ms')
  // 4 in flight for 200 ms at 5 ms each at most; timers run late on a busy machine, so the floor is not a count but
  // that the 4 slots stayed busy: each sends its next request when the last is answered, so their latencies cover
  // about 4 x the time from the first send to the last answer (a slot idles only after the window's end).
  t.ok(samples.log.ok <= 4 * 200 / 5 + 4, `${samples.log.ok} requests`)
  let first = Infinity
  let last = 0
  let busy = 0
  for (let i = 0; i < samples.log.length; i++) {
    first = Math.min(first, samples.log.start(i))
    last = Math.max(last, samples.log.end(i))
    busy += samples.log.end(i) - samples.log.start(i)
  }
  t.ok(busy / (4 * (last - first)) > 0.75, `4 slots busy ${(100 * busy / (4 * (last - first))).toFixed(0)}% of the time`)
})

t.test('open loop, constant arrivals: the offered count is exact and sends do not wait for answers', async t => {
  const transport = timedTransport(30, (id) => id === 1)
  const samples = await runStep({ mode: 'request-rate', value: 200, warmupMs: 100, windowMs: 250 }, {
    transport, requests: requests(2), now, index: 0, openLoop: { distribution: 'constant', seed: 1, maxOutstanding: 100 }
  })
  t.equal(samples.arrivals!.offered, 50, '250 ms at one per 5 ms')
  t.equal(samples.arrivals!.dropped, 0)
  t.equal(samples.log.length, 70, 'warm-up and window: 350 ms at one per 5 ms')
  t.ok(transport.maxInFlight >= 5, `${transport.maxInFlight} in flight at once: arrivals went out before answers came`)
  t.equal(samples.log.failed, 35, 'every other request (pool entry 1) failed')
  t.strictSame(samples.log.errorKinds, [{ status: 500, message: 'failed 1' }])
})

t.test('open loop: past maxOutstanding, arrivals are dropped and counted, never queued', async t => {
  const transport = timedTransport(40)
  const samples = await runStep({ mode: 'request-rate', value: 500, warmupMs: 0, windowMs: 200 }, {
    transport, requests: requests(1), now, index: 0, openLoop: { distribution: 'constant', seed: 1, maxOutstanding: 2 }
  })
  const a = samples.arrivals!
  t.equal(transport.maxInFlight, 2)
  t.equal(a.maxOutstanding, 2)
  t.equal(a.offered, 100)
  t.equal(a.offered - a.dropped, samples.log.length, 'what was not dropped was sent')
  t.ok(a.dropped > 80, `${a.dropped} dropped`)
})

t.test('open loop, Poisson arrivals: seeded, so a step offers the same load on every run', async t => {
  const run = async (seed: number, index: number): Promise<number> => (await runStep({ mode: 'request-rate', value: 400, warmupMs: 0, windowMs: 200 }, {
    transport: timedTransport(1), requests: requests(1), now, index, openLoop: { distribution: 'poisson', seed, maxOutstanding: 1000 }
  })).arrivals!.offered
  const first = await run(3, 0)
  t.equal(await run(3, 0), first, 'same seed and step: same arrivals')
  t.ok(first > 40 && first < 130, `${first} arrivals for a mean of 80`)
  const others = await Promise.all([run(4, 0), run(3, 1), run(5, 0)])
  t.ok(others.some((n) => n !== first), 'another seed or step draws other arrivals')
})

t.test('bad steps are refused', async t => {
  const context: StepContext = { transport: timedTransport(1), requests: requests(1), now, index: 0 }
  await t.rejects(runStep({ mode: 'concurrency', value: 0, warmupMs: 0, windowMs: 10 }, context), /must be > 0/)
  await t.rejects(runStep({ mode: 'concurrency', value: 1, warmupMs: 0, windowMs: 10 }, { ...context, requests: [] }), /at least one prepared request/)
  await t.rejects(runStep({ mode: 'request-rate', value: 1, warmupMs: 0, windowMs: 10 }, context), /open-loop settings/)
})
