import t from 'tap'
import { AttemptTimeouts, DEFAULT_ATTEMPT_TIMEOUT_SETTINGS, ModelLatency } from '../../../gateway/proxy/attempt-timeout.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'

const SETTINGS = { ...DEFAULT_ATTEMPT_TIMEOUT_SETTINGS, windowMs: 1000, minSamples: 10 }

t.test('p99 from the histogram: within a bucket (9%) above the true value, never below', async (t) => {
  const clock = new FakeClock()
  const latency = new ModelLatency(SETTINGS, clock)
  t.equal(latency.p99(), undefined, 'too few samples')
  for (let i = 1; i <= 1000; i++) latency.record(i / 10)
  const p99 = latency.p99()!
  t.ok(p99 >= 99 && p99 <= 99 * 1.09, `p99 of 0.1..100 ms is about 99 ms, got ${p99}`)
  latency.record(0)
  latency.record(1e12)
  t.ok(latency.p99()! >= 99, 'zero and absurd durations land in the end buckets without breaking anything')
})

t.test('the timeout is p99 x the multiple, clamped; the ceiling until there are enough samples', async (t) => {
  const clock = new FakeClock()
  const timeouts = new AttemptTimeouts(SETTINGS, clock)
  t.equal(timeouts.timeoutMs('fast', undefined), 30_000, 'unknown model: the ceiling')
  for (let i = 0; i < 100; i++) timeouts.record('fast', undefined, 1)
  for (let i = 0; i < 100; i++) timeouts.record('slow', undefined, 20_000)
  await clock.advance(100)
  t.equal(timeouts.timeoutMs('fast', undefined), 1000, 'a 1 ms model gets the 1 s floor')
  t.equal(timeouts.timeoutMs('slow', undefined), 30_000, 'a 20 s model is never cut short below the ceiling')
  for (let i = 0; i < 100; i++) timeouts.record('mid', undefined, 400)
  await clock.advance(100)
  const mid = timeouts.timeoutMs('mid', undefined)
  t.ok(mid >= 2000 && mid <= 2000 * 1.09, `5 x a 400 ms p99, got ${mid}`)
})

t.test('a fixed value wins: per model over fleet-wide over the rule; 0 means none', async (t) => {
  const clock = new FakeClock()
  const rule = new AttemptTimeouts(SETTINGS, clock)
  t.equal(rule.timeoutMs('m', 250), 250)
  t.equal(rule.timeoutMs('m', 0), Number.POSITIVE_INFINITY)
  const fixed = new AttemptTimeouts({ ...SETTINGS, fixedMs: 700 }, clock)
  t.equal(fixed.timeoutMs('m', undefined), 700)
  t.equal(fixed.timeoutMs('m', 90), 90)
  fixed.record('m', undefined, 5)
  t.equal(fixed.latencyOf('m').p99(), undefined, 'with a fixed value, nothing is recorded')
})

t.test('old samples age out: one to two windows of history', async (t) => {
  const clock = new FakeClock()
  const latency = new ModelLatency(SETTINGS, clock)
  for (let i = 0; i < 50; i++) latency.record(500)
  await clock.advance(1000)
  for (let i = 0; i < 50; i++) latency.record(5)
  t.ok(latency.p99()! >= 500, 'the previous window still counts')
  await clock.advance(1000)
  for (let i = 0; i < 50; i++) latency.record(5)
  t.ok(latency.p99()! < 6, 'two windows on, the slow samples are gone')
  await clock.advance(2000)
  t.equal(latency.p99(), undefined, 'after two quiet windows nothing is known')
  await clock.advance(100)
  t.equal(latency.timeoutMs(), 30_000, 'and the timeout goes back to the ceiling')
})
