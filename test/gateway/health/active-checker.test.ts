import t from 'tap'
import { ActiveHealthChecker } from '../../../gateway/health/active-checker.ts'
import { DEFAULT_HEALTH_CHECK, type HealthTransition, type Probe, type ProbeResult } from '../../../gateway/health/types.ts'
import { type Endpoint } from '../../../gateway/fleet/types.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'
import { endpoints } from '../fixtures/helpers.ts'

/** A probe whose answers the test sets per endpoint and target; it records every call with the fake time. */
function scriptedProbe (clock: FakeClock) {
  const answers = new Map<string, ProbeResult | 'hang'>()
  const calls: string[] = []
  const key = (e: Endpoint, model: string | undefined): string => `${e.name}/${model ?? 'server'}`
  const probe: Probe = async (endpoint, model) => {
    calls.push(`${clock.now()} ${key(endpoint, model)}`)
    const answer = answers.get(key(endpoint, model)) ?? { ok: true }
    if (answer === 'hang') return new Promise<ProbeResult>(() => {})
    return answer
  }
  return { probe, calls, set: (name: string, model: string | undefined, answer: ProbeResult | 'hang') => answers.set(`${name}/${model ?? 'server'}`, answer) }
}

function setup (random = () => 0) {
  const clock = new FakeClock()
  const scripted = scriptedProbe(clock)
  const transitions: string[] = []
  const checker = new ActiveHealthChecker({
    settings: { ...DEFAULT_HEALTH_CHECK, jitterPercent: 0 },
    probe: scripted.probe,
    timers: clock,
    random,
    onTransition: (tr: HealthTransition) => transitions.push(`${clock.now()} ${tr.endpoint.name}/${tr.model ?? 'server'} ${tr.healthy ? 'up' : 'down'}: ${tr.reason}`)
  })
  return { clock, checker, transitions, ...scripted }
}

t.test('probes the server and each model on an interval; thresholds 3 down, 2 up; one report per change', async t => {
  const { clock, checker, transitions, calls, set } = setup()
  const [a] = endpoints('a')
  checker.add(a!)
  t.ok(checker.isHealthy(a!), 'a configured endpoint takes traffic before its first check')
  await clock.advance(0)
  t.strictSame(calls, ['0 a/server', '0 a/m'], 'first check at once with random() = 0; the server and its model')

  set('a', undefined, { ok: false, reason: 'HTTP 400' })
  await clock.advance(2000 * 2)
  t.ok(checker.isHealthy(a!), 'two failures are not enough')
  await clock.advance(2000)
  t.notOk(checker.isHealthy(a!), 'the third failure takes it out')
  t.notOk(checker.isHealthy(a!, 'm'), 'a model on an unhealthy server is unhealthy')
  await clock.advance(2000 * 3)
  t.strictSame(transitions, ['6000 a/server down: HTTP 400'], 'reported once, not at every failing check')
  t.match(checker.health(a!), { healthy: false, lastFailure: 'server: HTTP 400', lastCheckAt: 12000 })

  set('a', undefined, { ok: true })
  await clock.advance(2000)
  t.notOk(checker.isHealthy(a!), 'one success is not enough')
  await clock.advance(2000)
  t.ok(checker.isHealthy(a!), 'the second brings it back')
  t.strictSame(transitions.slice(1), ['16000 a/server up: checks passing'])
})

t.test('a model that is not ready takes the endpoint out for that model only', async t => {
  const { clock, checker, transitions, set } = setup()
  const [a] = endpoints('a')
  checker.add(a!)
  set('a', 'm', { ok: false, reason: 'HTTP 503' })
  await clock.advance(2000 * 2)
  t.notOk(checker.isHealthy(a!, 'm'))
  t.ok(checker.isHealthy(a!), 'the server itself stays healthy')
  t.ok(checker.isHealthy(a!, 'other'), 'models it is not checked for are not affected')
  t.strictSame(checker.health(a!)?.unreadyModels, ['m'])
  t.strictSame(transitions, ['4000 a/m down: HTTP 503'])
})

t.test('a probe that never answers fails at the timeout, and checks go on', async t => {
  const { clock, checker, transitions, set } = setup()
  const [a] = endpoints('a')
  set('a', undefined, 'hang')
  checker.add(a!)
  await clock.advance(0)
  await clock.advance(3 * (1000 + 2000))
  t.strictSame(transitions, ['7000 a/server down: no answer within 1000 ms'], 'each check waits 1 s, then 2 s to the next')
})

t.test('an endpoint added at runtime starts unhealthy and is probed at once', async t => {
  const { clock, checker, transitions } = setup(() => 0.99)
  const [a] = endpoints('a')
  checker.add(a!, false)
  t.notOk(checker.isHealthy(a!), 'no traffic before it passed its checks')
  await clock.advance(0)
  t.notOk(checker.isHealthy(a!))
  await clock.advance(2000)
  t.ok(checker.isHealthy(a!), 'in within two checks (healthy threshold 2)')
  t.strictSame(transitions, ['2000 a/server up: checks passing', '2000 a/m up: checks passing'])
})

t.test('the first checks of configured endpoints spread over one interval; intervals are jittered', async t => {
  const clock = new FakeClock()
  const { probe, calls } = scriptedProbe(clock)
  const randoms = [0.25, 0.75, 0, 0.75]
  const checker = new ActiveHealthChecker({
    settings: { ...DEFAULT_HEALTH_CHECK, jitterPercent: 10 },
    probe,
    timers: clock,
    random: () => randoms.shift() ?? 0.5,
    onTransition: () => {}
  })
  const [a, b] = endpoints('a', 'b')
  checker.add(a!)
  checker.add(b!)
  await clock.advance(4000)
  const servers = calls.filter(c => c.endsWith('/server'))
  t.strictSame(servers, ['500 a/server', '1500 b/server', '2300 a/server', '3600 b/server'],
    'starts at 0.25 and 0.75 of an interval; next intervals 2000 - 10% and 2000 + 5%')
})

t.test('remove and stop cancel the timers; a probe landing after removal is ignored', async t => {
  const { clock, checker, calls, transitions, set } = setup()
  const [a, b] = endpoints('a', 'b')
  checker.add(a!)
  checker.add(b!)
  await clock.advance(0)
  checker.remove(a!)
  t.equal(checker.health(a!), undefined)
  t.ok(checker.isHealthy(a!), 'an endpoint the checker does not watch is not held back by it')
  set('b', undefined, { ok: false, reason: 'down' })
  checker.stop()
  const before = calls.length
  await clock.advance(20_000)
  t.equal(calls.length, before, 'no probes after stop')
  t.strictSame(transitions, [])
  t.equal(clock.pending, 0, 'no timers left')
})

t.test('failNow takes a healthy server out at once, reported once; passing checks bring it back', async t => {
  const { clock, checker, transitions, calls } = setup()
  const [a, b] = endpoints('a', 'b')
  checker.add(a!)
  checker.add(b!)
  await clock.advance(500)
  checker.failNow(a!, 'it answered x-flotilla-draining')
  t.notOk(checker.isHealthy(a!), 'out without waiting for a check')
  t.notOk(checker.isHealthy(a!, 'm'))
  t.ok(checker.isHealthy(b!), 'only that endpoint')
  t.strictSame(transitions, ['500 a/server down: it answered x-flotilla-draining'])
  t.match(checker.health(a!), { healthy: false, lastFailure: 'server: it answered x-flotilla-draining' })
  checker.failNow(a!, 'again')
  t.equal(transitions.length, 1, 'already unhealthy: no second report')

  const probesBefore = calls.length
  await clock.advance(1500)
  t.ok(calls.length > probesBefore, 'checks go on')
  t.notOk(checker.isHealthy(a!), 'one passing check is not enough')
  await clock.advance(2000)
  t.ok(checker.isHealthy(a!), 'healthy_threshold passing checks bring it back')
  t.strictSame(transitions.slice(1), ['4000 a/server up: checks passing'])
})

t.test('failNow counts as unhealthy_threshold failures and resets the successes so far', async t => {
  const { clock, checker, transitions, set } = setup(() => 0.99)
  const [a] = endpoints('a')
  checker.add(a!, false)
  await clock.advance(0)
  t.notOk(checker.isHealthy(a!), 'one passing check of two')
  checker.failNow(a!, 'going away')
  t.strictSame(transitions, [], 'already unhealthy: nothing to report')
  await clock.advance(2000)
  t.notOk(checker.isHealthy(a!), 'the success before failNow no longer counts')
  await clock.advance(2000)
  t.ok(checker.isHealthy(a!))

  set('a', undefined, { ok: false, reason: 'HTTP 500' })
  await clock.advance(2000)
  checker.failNow(a!, 'shutting down')
  t.notOk(checker.isHealthy(a!), 'out even though only one check had failed')
  t.equal(transitions.filter(x => x.includes('down')).length, 1)
  set('a', undefined, { ok: true })
  await clock.advance(2000)
  t.notOk(checker.isHealthy(a!))
  await clock.advance(2000)
  t.ok(checker.isHealthy(a!))
})

t.test('failNow of an endpoint the checker does not watch does nothing', async t => {
  const { checker, transitions } = setup()
  const [a] = endpoints('a')
  checker.failNow(a!, 'unknown')
  t.ok(checker.isHealthy(a!))
  t.equal(checker.health(a!), undefined)
  t.strictSame(transitions, [])
})
