import t from 'tap'
import { OutlierDetector, outcomeOf } from '../../../gateway/health/outlier-detector.ts'
import { DEFAULT_OUTLIER_DETECTION, type EjectionEvent } from '../../../gateway/health/types.ts'
import { type Endpoint } from '../../../gateway/fleet/types.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'
import { endpoints } from '../fixtures/helpers.ts'

function setup (peers: readonly Endpoint[], settings = DEFAULT_OUTLIER_DETECTION) {
  const clock = new FakeClock()
  const events: string[] = []
  const detector = new OutlierDetector({
    settings,
    timers: clock,
    peers: () => [peers],
    onEjection: (e: EjectionEvent) => events.push(`${clock.now()} ${e.endpoint.name} ${e.ejected ? 'out' : 'in'} ${e.durationMs}: ${e.reason}`)
  })
  return { clock, detector, events }
}

t.test('outcomes: connection failures and 5xx count, 503 does not', async t => {
  t.equal(outcomeOf(undefined), 'connect_failure')
  t.equal(outcomeOf(500), 'server_error')
  t.equal(outcomeOf(502), 'server_error')
  t.equal(outcomeOf(504), 'server_error')
  t.equal(outcomeOf(503), 'success', 'a full queue is backpressure, not a broken server')
  t.equal(outcomeOf(200), 'success')
  t.equal(outcomeOf(400), 'success', "a client's mistake says nothing about the server")
})

t.test('five consecutive failures eject for the base time; a success in between resets the count', async t => {
  const all = endpoints('a', 'b', 'c')
  const [a] = all
  const { clock, detector, events } = setup(all)
  for (let i = 0; i < 4; i++) detector.record(a!, 'server_error')
  detector.record(a!, 'success')
  for (let i = 0; i < 4; i++) detector.record(a!, 'connect_failure')
  t.notOk(detector.isEjected(a!), 'the success reset the run')
  detector.record(a!, 'connect_failure')
  t.ok(detector.isEjected(a!))
  t.strictSame(events, ['0 a out 30000: 5 consecutive failures (last: a connection failure), ejection 1 in a row'])
  await clock.advance(29_999)
  t.ok(detector.isEjected(a!))
  await clock.advance(1)
  t.notOk(detector.isEjected(a!))
  t.strictSame(events.slice(1), ['30000 a in 30000: ejection time over'])
})

t.test('each ejection in a row lasts longer, up to the maximum; the count decays while the endpoint behaves', async t => {
  const all = endpoints('a', 'b')
  const [a] = all
  const { clock, detector, events } = setup(all, { ...DEFAULT_OUTLIER_DETECTION, maxEjectionTimeMs: 70_000 })
  const fail5 = (): void => { for (let i = 0; i < 5; i++) detector.record(a!, 'server_error') }
  fail5()
  await clock.advance(30_000)
  fail5()
  await clock.advance(60_000)
  fail5()
  await clock.advance(70_000)
  t.strictSame(events.filter(e => / out /.test(e)).map(e => e.split(':')[0]),
    ['0 a out 30000', '30000 a out 60000', '90000 a out 70000'], '30 s, 60 s, then capped at 70 s')
  // In for two base times: the count decays from 3 to 1, so the next ejection is the second in a row.
  await clock.advance(60_000)
  fail5()
  t.match(events.at(-1), /a out 60000: .*ejection 2 in a row/)
})

t.test('at most 10% of a model\'s endpoints are ejected at once, but always at least one', async t => {
  const all = endpoints('a', 'b', 'c')
  const [a, b] = all
  const { detector, events } = setup(all)
  for (let i = 0; i < 5; i++) detector.record(a!, 'server_error')
  for (let i = 0; i < 8; i++) detector.record(b!, 'server_error')
  t.ok(detector.isEjected(a!), 'one of three may go (10% of 3 rounds down to 0, and one is always allowed)')
  t.notOk(detector.isEjected(b!), 'a second would exceed the cap: b keeps serving')
  t.equal(events.length, 1)

  const twenty = endpoints(...Array.from({ length: 20 }, (_, i) => `e${i}`))
  const big = setup(twenty)
  for (const e of twenty.slice(0, 5)) for (let i = 0; i < 5; i++) big.detector.record(e, 'server_error')
  t.equal(twenty.filter(e => big.detector.isEjected(e)).length, 2, '10% of 20')
})

t.test('remove and stop cancel ejection timers', async t => {
  const all = endpoints('a', 'b')
  const [a] = all
  const { clock, detector, events } = setup(all)
  for (let i = 0; i < 5; i++) detector.record(a!, 'server_error')
  detector.remove(a!)
  t.notOk(detector.isEjected(a!))
  t.equal(clock.pending, 0)
  for (let i = 0; i < 5; i++) detector.record(a!, 'server_error')
  detector.stop()
  t.equal(clock.pending, 0)
  await clock.advance(60_000)
  t.equal(events.filter(e => /^\d+ a in /.test(e)).length, 0, 'no return reported for forgotten endpoints')
})
