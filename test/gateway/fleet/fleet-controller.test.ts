/**
 * The fleet controller on a fake clock: health probes through a scripted probe, drains and slow start on the same
 * timers, and a real UpstreamPool whose dispatchers are fakes that record being closed.
 */
import t from 'tap'
import { type Dispatcher } from 'undici'
import { silentLogger } from '../../../common/logger.ts'
import { hasBalancer } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig, type FleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { FleetController } from '../../../gateway/fleet/fleet-controller.ts'
import { Fleet, type FleetServer } from '../../../gateway/fleet/fleet.ts'
import { type Endpoint } from '../../../gateway/fleet/types.ts'
import { FleetHealth } from '../../../gateway/health/fleet-health.ts'
import { type Probe, type ProbeResult } from '../../../gateway/health/types.ts'
import { UpstreamPool } from '../../../gateway/proxy/upstream-pool.ts'
import { throwsCoded } from '../../helpers/coded-error.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'

interface ServerLine { name: string, port: number, weight?: number, models?: string[] }

const line = (s: ServerLine): string =>
  `  - { name: ${s.name}, host: 127.0.0.1, port: ${s.port}, models: [${(s.models ?? ['m']).join(', ')}], weight: ${s.weight ?? 10} }`

/** A fleet file: checks every second (no jitter), 2 up / 2 down; no outlier detection, no panic. */
function fleetFile (servers: ServerLine[], options: { checks?: boolean, slowStartMs?: number, drainTimeoutMs?: number } = {}): FleetConfig {
  return parseFleetConfig([
    'inference_servers:',
    ...servers.map(line),
    'load_balancer: { type: round_robin, panic_threshold_percent: 0 }',
    `health_check: { enabled: ${String(options.checks ?? true)}, interval_ms: 1000, timeout_ms: 500, jitter_percent: 0, healthy_threshold: 2, unhealthy_threshold: 2 }`,
    'outlier_detection: { enabled: false }',
    `gateway: { drain_timeout_ms: ${options.drainTimeoutMs ?? 1000}, slow_start_ms: ${options.slowStartMs ?? 0} }`
  ].join('\n'), { file: 'fleet.yaml', isKnownStrategy: hasBalancer })
}

const FILE: ServerLine[] = [{ name: 'a', port: 9001 }, { name: 'b', port: 9002 }]

function server (name: string, port: number, weight = 10): FleetServer {
  return { name, host: '127.0.0.1', port, models: ['m'], weight, labels: {} }
}

const names = (list: readonly { name: string }[]): string[] => list.map((e) => e.name)

function setup (options: { checks?: boolean, slowStartMs?: number, drainTimeoutMs?: number, servers?: ServerLine[] } = {}) {
  const config = fleetFile(options.servers ?? FILE, options)
  const clock = new FakeClock()
  const answers = new Map<string, ProbeResult>()
  const probes: string[] = []
  const probe: Probe = async (endpoint, model) => {
    probes.push(`${clock.now()} ${endpoint.name}/${model ?? 'server'}`)
    return answers.get(endpoint.name) ?? { ok: true }
  }
  let controller: FleetController | undefined
  const health = new FleetHealth({
    config,
    probe,
    timers: clock,
    random: () => 0,
    logger: silentLogger(),
    onTransition: (tr) => { controller?.healthChanged(tr) }
  })
  const fleet = Fleet.fromConfig(config, { usable: health.usable })
  health.attach(fleet)
  const closed: string[] = []
  const pool = new UpstreamPool({
    factory: (origin) => ({ close: async () => { closed.push(origin) }, destroy: async () => {} }) as unknown as Dispatcher
  })
  controller = new FleetController({
    fleet,
    health,
    pool,
    timers: clock,
    logger: silentLogger(),
    drainTimeoutMs: config.gateway.drain_timeout_ms,
    slowStartMs: config.gateway.slow_start_ms
  })
  const c = controller
  t.teardown(() => { c.stop(); health.stop() })
  const endpoint = (name: string): Endpoint => {
    const e = fleet.get(name)
    if (e === undefined) throw new Error(`no endpoint ${name}`)
    return e
  }
  const serving = (): string[] => names(fleet.endpointsServing('m'))
  return { config, clock, fleet, health, pool, closed, probes, answers, controller: c, endpoint, serving }
}

t.test('an added endpoint takes traffic only once healthy_threshold checks pass', async (t) => {
  const { clock, controller, fleet, health, serving, probes } = setup()
  await clock.advance(0)
  t.ok(health.checking)
  const c = controller.add(server('c', 9003), 'admin')
  t.equal(fleet.get('c'), c, 'in the fleet at once')
  t.strictSame(names(fleet.endpoints), ['a', 'b', 'c'])
  t.strictSame(serving(), ['a', 'b'], 'but not among the candidates before its checks')
  t.equal(controller.sourceOf(c), 'admin')
  t.equal(controller.sourceOf(fleet.get('a')!), 'file')
  t.equal(controller.get('c'), c)
  await clock.advance(0)
  t.ok(probes.includes('0 c/server') && probes.includes('0 c/m'), 'probed at once, server and model')
  t.strictSame(serving(), ['a', 'b'], 'one passing check is not enough (threshold 2)')
  await clock.advance(999)
  t.strictSame(serving(), ['a', 'b'])
  await clock.advance(1)
  t.strictSame(serving(), ['a', 'b', 'c'], 'the second passing check brings it in')
  t.equal(c.weight, 10, 'no slow start configured: full weight at once')
})

t.test('an added endpoint failing its checks never takes traffic', async (t) => {
  const { clock, controller, serving, answers } = setup()
  answers.set('c', { ok: false, reason: 'HTTP 503' })
  controller.add(server('c', 9003), 'admin')
  await clock.advance(10_000)
  t.strictSame(serving(), ['a', 'b'])
  answers.delete('c')
  await clock.advance(2000)
  t.strictSame(serving(), ['a', 'b', 'c'], 'and joins once it passes')
})

t.test('with health checks off an added endpoint takes traffic at once', async (t) => {
  const { controller, health, serving, probes } = setup({ checks: false })
  t.notOk(health.checking)
  controller.add(server('c', 9003), 'file')
  t.strictSame(serving(), ['a', 'b', 'c'])
  t.strictSame(probes, [])
})

t.test('a name already in the fleet is a 409; an unknown one a 404 naming the endpoints there are', async (t) => {
  const { controller, fleet } = setup()
  throwsCoded(t, () => controller.add(server('a', 9100), 'admin'), {
    code: 'GW_ERR_ADMIN_CONFLICT',
    status: 409,
    message: "a server named 'a' is already in the fleet; remove it first or pick another name"
  })
  t.equal(fleet.get('a')?.port, 9001, 'the fleet is unchanged')
  t.equal(fleet.endpoints.length, 2)
  const unknown = { code: 'GW_ERR_ADMIN_UNKNOWN_ENDPOINT' as const, status: 404, message: "no endpoint named 'zz' in the fleet (endpoints: a, b)" }
  throwsCoded(t, () => controller.get('zz'), unknown, 'get')
  throwsCoded(t, () => controller.drain('zz'), unknown, 'drain')
  throwsCoded(t, () => controller.drainStatus('zz'), unknown, 'drainStatus')
  throwsCoded(t, () => controller.undrain('zz'), unknown, 'undrain')
  throwsCoded(t, () => controller.setWeight('zz', 3), unknown, 'setWeight')
  await t.rejects(controller.drained('zz'), { code: unknown.code, message: unknown.message }, 'drained')
  await t.rejects(controller.remove('zz'), { code: unknown.code, message: unknown.message }, 'remove')
  await t.rejects(controller.remove('zz', { force: true }), { code: unknown.code }, 'remove, forced')
  await controller.remove('a', { force: true })
  await controller.remove('b', { force: true })
  throwsCoded(t, () => controller.drain('a'), {
    code: 'GW_ERR_ADMIN_UNKNOWN_ENDPOINT', message: "no endpoint named 'a' in the fleet (endpoints: none)"
  }, 'an empty fleet')
})

t.test('drain: out of the lists at once, in flight reported, done when the last request finishes', async (t) => {
  const { clock, controller, fleet, endpoint, serving } = setup()
  const a = endpoint('a')
  a.inFlight = 2
  await clock.advance(50)
  t.strictSame(controller.drain('a'), {
    name: 'a', state: 'draining', in_flight: 2, started_ms_ago: 0, timeout_ms: 1000, done: false, completed: false
  })
  t.equal(a.state, 'draining')
  t.strictSame(serving(), ['b'], 'no new request goes to it')
  t.strictSame(names(fleet.endpoints), ['a', 'b'], 'still in the fleet')
  let finished: unknown
  void controller.drained('a').then((s) => { finished = s })

  await clock.advance(100)
  t.match(controller.drainStatus('a'), { state: 'draining', in_flight: 2, started_ms_ago: 100, done: false })
  a.inFlight = 1
  await clock.advance(100)
  t.match(controller.drainStatus('a'), { in_flight: 1, done: false })
  t.equal(finished, undefined, 'drained() waits')

  a.inFlight = 0
  await clock.advance(20)
  t.strictSame(finished, {
    name: 'a', state: 'drained', in_flight: 0, started_ms_ago: 220, timeout_ms: 1000, done: true, completed: true
  }, 'done within one poll of the count reaching 0')
  t.equal(a.state, 'drained')
  t.strictSame(serving(), ['b'])
  t.match(await controller.drained('a'), { done: true, completed: true }, 'a finished drain resolves at once')

  t.equal(controller.drainStatus('b'), null, 'never drained')
  t.equal(await controller.drained('b'), null, 'drained() of an endpoint not draining resolves at once')
})

t.test('a drain with nothing in flight is over at once', async (t) => {
  const { controller, endpoint } = setup()
  t.match(controller.drain('a'), { state: 'drained', done: true, completed: true, in_flight: 0 })
  t.equal(endpoint('a').state, 'drained')
})

t.test('a drain that times out marks the endpoint drained anyway, not completed', async (t) => {
  const { clock, controller, endpoint } = setup()
  endpoint('a').inFlight = 1
  controller.drain('a', 300)
  await clock.advance(299)
  t.match(controller.drainStatus('a'), { state: 'draining', done: false })
  await clock.advance(1)
  t.strictSame(controller.drainStatus('a'), {
    name: 'a', state: 'drained', in_flight: 1, started_ms_ago: 300, timeout_ms: 300, done: true, completed: false
  })
  t.equal(endpoint('a').state, 'drained')

  endpoint('b').inFlight = 1
  t.equal(controller.drain('b').timeout_ms, 1000, 'the default timeout is gateway.drain_timeout_ms')
  await clock.advance(999)
  t.equal(controller.drainStatus('b')?.done, false)
  await clock.advance(1)
  t.match(controller.drainStatus('b'), { done: true, completed: false, state: 'drained' })
})

t.test('draining twice returns the drain already under way', async (t) => {
  const { clock, controller, endpoint } = setup()
  endpoint('a').inFlight = 1
  controller.drain('a', 500)
  await clock.advance(100)
  t.match(controller.drain('a', 5000), { timeout_ms: 500, started_ms_ago: 100, done: false }, 'the first drain, its timeout kept')
  await clock.advance(400)
  t.match(controller.drainStatus('a'), { done: true, completed: false, started_ms_ago: 500 }, 'over at the first timeout')
  t.match(controller.drain('a'), { done: true, timeout_ms: 500 }, 'a finished drain is returned too, not restarted')
})

t.test('undrain puts it back and resolves a waiting drained()', async (t) => {
  const { clock, controller, endpoint, serving } = setup()
  const a = endpoint('a')
  a.inFlight = 1
  controller.drain('a')
  let finished: unknown = 'pending'
  void controller.drained('a').then((s) => { finished = s })
  await clock.advance(100)
  t.equal(finished, 'pending')
  t.equal(controller.undrain('a'), a)
  await clock.advance(0)
  t.equal(finished, null, 'the waiter is released; the drain is forgotten')
  t.equal(a.state, 'active')
  t.strictSame(serving(), ['a', 'b'], 'back among the candidates, in fleet order')
  t.equal(controller.drainStatus('a'), null)
  await clock.advance(5000)
  t.equal(a.state, 'active', 'the cancelled drain does not time out later')

  a.inFlight = 0
  controller.drain('a')
  t.equal(a.state, 'drained')
  controller.undrain('a')
  t.equal(a.state, 'active', 'a finished drain is undone too')
  t.strictSame(serving(), ['a', 'b'])
  t.equal(controller.undrain('b'), endpoint('b'), 'undraining an active endpoint changes nothing')
  t.equal(endpoint('b').state, 'active')
})

t.test('remove drains first: the endpoint, its checks and its pool go once its requests finish', async (t) => {
  const { clock, controller, fleet, health, pool, closed, probes, endpoint, serving } = setup()
  const a = endpoint('a')
  pool.dispatcherFor(a)
  pool.dispatcherFor(endpoint('b'))
  a.inFlight = 1
  let result: unknown
  void controller.remove('a').then((r) => { result = r })
  await clock.advance(100)
  t.equal(result, undefined, 'waits for the drain')
  t.equal(fleet.get('a'), a)
  t.equal(a.state, 'draining')
  t.strictSame(serving(), ['b'])
  t.strictSame(closed, [])

  a.inFlight = 0
  await clock.advance(20)
  t.strictSame(result, { removed: 'a', drained: true, in_flight: 0 })
  t.equal(fleet.get('a'), undefined)
  t.strictSame(names(fleet.endpoints), ['b'])
  t.strictSame(closed, [a.origin], 'its connections are closed, and only its')
  t.strictSame(health.view(a), { ejected: false }, 'the checker forgot it')
  const before = probes.filter((p) => p.includes(' a/')).length
  await clock.advance(5000)
  t.equal(probes.filter((p) => p.includes(' a/')).length, before, 'no more probes')
  t.ok(probes.filter((p) => p.includes(' b/')).length > 0, 'b is still probed')
  throwsCoded(t, () => controller.drainStatus('a'), {
    code: 'GW_ERR_ADMIN_UNKNOWN_ENDPOINT', message: "no endpoint named 'a' in the fleet (endpoints: b)"
  })
})

t.test('remove gives up waiting at its timeout and removes the endpoint anyway', async (t) => {
  const { clock, controller, fleet, endpoint } = setup()
  endpoint('a').inFlight = 1
  let result: unknown
  void controller.remove('a', { timeoutMs: 200 }).then((r) => { result = r })
  await clock.advance(199)
  t.equal(result, undefined)
  await clock.advance(1)
  t.strictSame(result, { removed: 'a', drained: false, in_flight: 1 })
  t.equal(fleet.get('a'), undefined)
})

t.test('remove with force does not wait', async (t) => {
  const { clock, controller, fleet, health, pool, closed, probes, endpoint, serving } = setup()
  await clock.advance(0)
  const a = endpoint('a')
  pool.dispatcherFor(a)
  a.inFlight = 3
  const result = await controller.remove('a', { force: true })
  t.strictSame(result, { removed: 'a', drained: false, in_flight: 3 }, 'its requests in flight are left to finish')
  t.equal(fleet.get('a'), undefined)
  t.strictSame(serving(), ['b'])
  t.strictSame(closed, [a.origin])
  t.strictSame(health.view(a), { ejected: false })
  const before = probes.length
  await clock.advance(1000)
  t.notOk(probes.slice(before).some((p) => p.includes(' a/')), 'no more probes of a')
})

t.test('remove of an endpoint that was added at runtime stops its checks', async (t) => {
  const { clock, controller, fleet, health, probes } = setup()
  const c = controller.add(server('c', 9003), 'admin')
  await clock.advance(0)
  await controller.remove('c')
  t.equal(fleet.get('c'), undefined)
  t.strictSame(health.view(c), { ejected: false })
  const before = probes.length
  await clock.advance(3000)
  t.notOk(probes.slice(before).some((p) => p.includes(' c/')))
  t.equal(health.usable(c, 'm'), true, 'an endpoint nobody checks is not held back by the checker any more')
})

t.test('setWeight applies in place, at once', async (t) => {
  const { controller, fleet, endpoint } = setup()
  const a = endpoint('a')
  const before = fleet.endpointsServing('m')
  t.equal(controller.setWeight('a', 3), a)
  t.equal(fleet.get('a'), a, 'the same endpoint: its in-flight count and health stay')
  t.equal(a.weight, 3)
  t.equal(a.configuredWeight, 3)
  t.not(fleet.endpointsServing('m'), before, 'the lists are rebuilt, so weighted balancers start over')
  t.equal(fleet.servers().find((s) => s.name === 'a')?.weight, 3)
})

t.test('slow start ramps the weight from 5% to 100% over slow_start_ms once the endpoint turns healthy', async (t) => {
  const { clock, controller, serving } = setup({ slowStartMs: 1000 })
  const c = controller.add(server('c', 9003, 20), 'admin')
  await clock.advance(0)
  await clock.advance(999)
  t.equal(c.weight, 20, 'no ramp before it is healthy')
  t.strictSame(serving(), ['a', 'b'])
  await clock.advance(1)
  t.strictSame(serving(), ['a', 'b', 'c'], 'healthy at 1000 ms')
  t.equal(c.weight, 1, 'starts at 5% of its weight, never 0')
  t.equal(c.configuredWeight, 20, 'the configured weight is untouched')
  const weights: number[] = []
  for (let i = 0; i < 20; i++) {
    await clock.advance(50)
    weights.push(c.weight)
  }
  t.ok(weights.every((w, i) => w > 0 && (i === 0 || w >= weights[i - 1]!)), `never 0, never down: ${weights.join(' ')}`)
  t.ok(Math.abs(weights[1]! - 2) < 1e-9, '10% after 100 ms')
  t.ok(Math.abs(weights[9]! - 10) < 1e-9, '50% half way')
  t.ok(weights[18]! < 20, 'still ramping just before the end')
  t.equal(weights[19], 20, 'full weight after slow_start_ms')
  t.equal(new Set(weights).size, 20, 'in steps of slow_start_ms / 20')
  await clock.advance(1000)
  t.equal(c.weight, 20, 'and it stays there')
})

t.test('slow start also follows an endpoint coming back after failing its checks', async (t) => {
  const { clock, endpoint, answers, serving } = setup({ slowStartMs: 1000 })
  const a = endpoint('a')
  await clock.advance(0)
  answers.set('a', { ok: false, reason: 'HTTP 503' })
  await clock.advance(2000)
  t.strictSame(serving(), ['b'], 'a failed two checks')
  t.equal(a.weight, 10)
  answers.delete('a')
  await clock.advance(2000)
  t.strictSame(serving(), ['a', 'b'])
  t.equal(a.weight, 0.5, '5% of 10 just after it came back')
  await clock.advance(1000)
  t.equal(a.weight, 10)
})

t.test('with checks off, an added endpoint ramps from the moment it is added', async (t) => {
  const { clock, controller } = setup({ slowStartMs: 1000, checks: false })
  const c = controller.add(server('c', 9003, 10), 'admin')
  t.equal(c.weight, 0.5)
  await clock.advance(500)
  t.equal(c.weight, 5)
  await clock.advance(500)
  t.equal(c.weight, 10)
})

t.test('only a server turning healthy starts slow start, and only for an endpoint still in the fleet', async (t) => {
  const { controller, endpoint } = setup({ slowStartMs: 1000 })
  const a = endpoint('a')
  controller.healthChanged({ endpoint: a, model: 'm', healthy: true, reason: 'checks passing' })
  t.equal(a.weight, 10, 'a model coming back is not the server coming back')
  controller.healthChanged({ endpoint: a, model: undefined, healthy: false, reason: 'down' })
  t.equal(a.weight, 10)
  controller.healthChanged({ endpoint: { ...a }, model: undefined, healthy: true, reason: 'checks passing' })
  t.equal(a.weight, 10, 'not for an endpoint object the fleet does not hold')
  controller.healthChanged({ endpoint: a, model: undefined, healthy: true, reason: 'checks passing' })
  t.equal(a.weight, 0.5)

  const { controller: off, endpoint: endpointOff } = setup({ slowStartMs: 0 })
  off.healthChanged({ endpoint: endpointOff('a'), model: undefined, healthy: true, reason: 'checks passing' })
  t.equal(endpointOff('a').weight, 10, 'slow_start_ms 0: no ramp')
})

t.test('setWeight ends a slow start', async (t) => {
  const { clock, controller, fleet } = setup({ slowStartMs: 1000, checks: false })
  const c = controller.add(server('c', 9003, 10), 'admin')
  await clock.advance(500)
  t.equal(c.weight, 5)
  controller.setWeight('c', 40)
  t.equal(fleet.get('c'), c)
  t.equal(c.weight, 40, 'the new weight at once, not ramped')
  t.equal(c.configuredWeight, 40)
  await clock.advance(50)
  t.equal(c.weight, 40, 'the ramp does not resume')
  await clock.advance(2000)
  t.equal(c.weight, 40)
})

t.test('a drain ends a slow start and restores the configured weight', async (t) => {
  const { clock, controller } = setup({ slowStartMs: 1000, checks: false })
  const c = controller.add(server('c', 9003, 10), 'admin')
  await clock.advance(100)
  t.equal(c.weight, 1)
  controller.drain('c')
  t.equal(c.weight, 10)
  await clock.advance(2000)
  t.equal(c.weight, 10)
})

t.test('applyFile: added, removed, replaced and reweighted servers; admin-added servers stay', async (t) => {
  const { clock, controller, fleet, pool, closed, serving, endpoint } = setup({
    servers: [{ name: 'a', port: 9001 }, { name: 'b', port: 9002 }, { name: 'd', port: 9004 }]
  })
  await clock.advance(0)
  const x = controller.add(server('x', 9009), 'admin')
  await clock.advance(1000)
  t.strictSame(serving(), ['a', 'b', 'd', 'x'])
  const [a, oldB, d] = [endpoint('a'), endpoint('b'), endpoint('d')]
  for (const e of [a, oldB, d]) pool.dispatcherFor(e)
  oldB.inFlight = 2

  const summary = controller.applyFile(fleetFile([
    { name: 'a', port: 9001, weight: 30 },
    { name: 'b', port: 9102 },
    { name: 'e', port: 9005 }
  ]))
  t.strictSame(summary, { added: ['e'], removed: ['d'], replaced: ['b'], reweighted: ['a'] })

  t.equal(fleet.get('a'), a, 'a reweighted server keeps its endpoint')
  t.equal(a.weight, 30)
  t.equal(a.configuredWeight, 30)
  t.equal(fleet.get('d'), undefined, 'd is gone')
  t.equal(fleet.get('x'), x, 'x, added through the admin API, stays')
  t.equal(controller.sourceOf(x), 'admin')
  const newB = endpoint('b')
  t.not(newB, oldB, 'b moved: a new endpoint')
  t.equal(newB.port, 9102)
  t.equal(oldB.state, 'drained', 'the old b left the fleet at once (drained: no retry goes to it), its requests still in flight')
  t.equal(oldB.inFlight, 2)
  t.equal(controller.sourceOf(newB), 'file')
  t.equal(controller.sourceOf(endpoint('e')), 'file')
  t.strictSame(names(fleet.endpoints), ['a', 'x', 'b', 'e'])
  t.strictSame(serving(), ['a', 'x'], 'the new b and e are checked before they take traffic')
  t.strictSame(closed.sort(), [oldB.origin, d.origin].sort(), 'the connections of the servers that left are closed')

  await clock.advance(0)
  await clock.advance(1000)
  t.strictSame(serving(), ['a', 'x', 'b', 'e'])

  t.strictSame(controller.applyFile(fleetFile([
    { name: 'a', port: 9001, weight: 30 },
    { name: 'b', port: 9102 },
    { name: 'e', port: 9005 }
  ])), { added: [], removed: [], replaced: [], reweighted: [] }, 'the same file again changes nothing')
  t.equal(fleet.get('b'), newB)
})

t.test('applyFile: a file server takes over an admin server of the same name', async (t) => {
  const { controller, fleet } = setup({ checks: false })
  const x = controller.add(server('x', 9009), 'admin')
  const y = controller.add(server('y', 9010), 'admin')
  const summary = controller.applyFile(fleetFile([...FILE, { name: 'x', port: 9109 }, { name: 'y', port: 9010 }], { checks: false }))
  t.strictSame(summary, { added: [], removed: [], replaced: ['x'], reweighted: [] },
    'x differs: replaced (not counted as added); y is the same server: adopted, unchanged')
  const newX = fleet.get('x')!
  t.not(newX, x)
  t.equal(newX.port, 9109)
  t.equal(controller.sourceOf(newX), 'file')
  t.equal(fleet.get('y'), y, 'y keeps its endpoint')
  t.equal(controller.sourceOf(y), 'file', 'and now belongs to the file')
  const next = controller.applyFile(fleetFile(FILE, { checks: false }))
  t.strictSame(next, { added: [], removed: ['y', 'x'], replaced: [], reweighted: [] },
    'so a file without them removes them (in fleet order: the new x joined at the end)')
  t.strictSame(names(fleet.endpoints), ['a', 'b'])
})

t.test('applyFile: a reweight ends a slow start', async (t) => {
  const { clock, controller, fleet } = setup({ checks: false, slowStartMs: 1000 })
  const c = controller.add(server('c', 9003, 10), 'file')
  await clock.advance(100)
  t.equal(c.weight, 1)
  const summary = controller.applyFile(fleetFile([...FILE, { name: 'c', port: 9003, weight: 50 }], { checks: false, slowStartMs: 1000 }))
  t.strictSame(summary.reweighted, ['c'])
  t.equal(fleet.get('c'), c)
  t.equal(c.weight, 50)
  await clock.advance(100)
  t.equal(c.weight, 50, 'no ramp resumes')
})

t.test('stop: drains waiting are released as they stand and no timer of the controller is left', async (t) => {
  const { clock, controller, health, endpoint } = setup({ slowStartMs: 1000, checks: false })
  const c = controller.add(server('c', 9003, 10), 'admin')
  endpoint('a').inFlight = 1
  controller.drain('a')
  let finished: unknown
  void controller.drained('a').then((s) => { finished = s })
  controller.stop()
  health.stop()
  await clock.advance(0)
  t.match(finished, { done: false, state: 'draining' })
  t.equal(c.weight, 10, 'a slow start in progress ends at the configured weight')
  t.equal(clock.pending, 0)
  const later = controller.add(server('d', 9004, 10), 'admin')
  t.equal(later.weight, 10, 'no slow start after stop')
  endpoint('b').inFlight = 1
  t.match(controller.drain('b'), { done: true, completed: false }, 'a drain after stop does not wait')
  t.equal(clock.pending, 0)
})

t.test('two added endpoints in a small fleet take no traffic before their checks pass', {
}, async (t) => {
  const config = parseFleetConfig([
    'inference_servers:',
    line({ name: 'a', port: 9001 }),
    'load_balancer: { type: round_robin }',
    'health_check: { interval_ms: 1000, timeout_ms: 500, jitter_percent: 0, healthy_threshold: 2 }',
    'outlier_detection: { enabled: false }'
  ].join('\n'), { file: 'fleet.yaml', isKnownStrategy: hasBalancer })
  const clock = new FakeClock()
  const health = new FleetHealth({ config, probe: async () => ({ ok: true }), timers: clock, random: () => 0, logger: silentLogger() })
  const fleet = Fleet.fromConfig(config, { usable: health.usable })
  health.attach(fleet)
  const controller = new FleetController({
    fleet, health, pool: new UpstreamPool(), timers: clock, logger: silentLogger(), drainTimeoutMs: 1000, slowStartMs: 0
  })
  t.teardown(() => { controller.stop(); health.stop() })
  controller.add(server('c', 9003), 'admin')
  controller.add(server('d', 9004), 'admin')
  t.strictSame(names(fleet.endpointsServing('m')), ['a'])
})

t.test('a caller waiting in drained() gets the drain\'s outcome when the endpoint is removed', {
}, async (t) => {
  const { clock, controller, endpoint } = setup()
  endpoint('a').inFlight = 1
  controller.drain('a')
  const removing = controller.remove('a')
  const waiting = controller.drained('a')
  endpoint('a').inFlight = 0
  await clock.advance(20)
  t.match(await removing, { removed: 'a', drained: true })
  t.match(await waiting.catch((err: unknown) => err), { name: 'a', done: true, completed: true },
    'the drain completed: the waiter hears so, not a 404')
})

t.test('an endpoint removed without a drain is no longer active, so a request holding an old candidate list skips it', {
}, async (t) => {
  const { controller, fleet, endpoint } = setup({ checks: false })
  const a = endpoint('a')
  const held = fleet.endpointsServing('m')
  t.ok(held.includes(a))
  await controller.remove('a', { force: true })
  t.not(a.state, 'active', 'removed by force')
  const b = endpoint('b')
  controller.applyFile(fleetFile([{ name: 'a2', port: 9011 }], { checks: false }))
  t.equal(fleet.get('b'), undefined)
  t.not(b.state, 'active', 'dropped by a reload')
})

// Discovery: what Consul lists, through setDiscovered.
const consulServer = (name: string, port: number, models = ['m']): FleetServer =>
  ({ name, host: '127.0.0.1', port, models, weight: 1, labels: { zone: 'z1' } })

t.test('discovered servers are checked in before traffic; one Consul stops listing is drained out, not cut', async (t) => {
  const { clock, controller, fleet, serving, closed, pool } = setup()
  await clock.advance(0)
  const changes = controller.setDiscovered([consulServer('w1', 9101), consulServer('w2', 9102)])
  t.strictSame(changes, { added: ['w1', 'w2'], leaving: [], replaced: [] })
  t.equal(controller.sourceOf(fleet.get('w1')!), 'consul')
  t.equal(fleet.get('w1')!.state, 'joining')
  t.strictSame(serving(), ['a', 'b'], 'not before their checks pass')
  await clock.advance(1000)
  t.strictSame(serving(), ['a', 'b', 'w1', 'w2'])

  const w2 = fleet.get('w2')!
  pool.dispatcherFor(w2)
  w2.inFlight = 1
  t.strictSame(controller.setDiscovered([consulServer('w1', 9101)]), { added: [], leaving: ['w2'], replaced: [] })
  t.equal(w2.state, 'draining', 'it drains first')
  t.strictSame(serving(), ['a', 'b', 'w1'], 'no new request goes to it')
  t.equal(fleet.get('w2'), w2, 'still in the fleet while its request finishes')
  t.strictSame(controller.setDiscovered([consulServer('w1', 9101)]).leaving, [], 'a repeat changes nothing')
  w2.inFlight = 0
  await clock.advance(20)
  t.equal(fleet.get('w2'), undefined, 'gone once drained')
  await clock.advance(0)
  t.ok(closed.includes('http://127.0.0.1:9102'), 'and its connections closed')
})

t.test('a server Consul lists again while it drains out rejoins once it is gone', async (t) => {
  const { clock, controller, fleet, serving } = setup()
  controller.setDiscovered([consulServer('w1', 9101)])
  await clock.advance(1000)
  const w1 = fleet.get('w1')!
  w1.inFlight = 1
  controller.setDiscovered([consulServer('w2', 9102)])
  t.equal(w1.state, 'draining')
  t.strictSame(controller.setDiscovered([consulServer('w1', 9101), consulServer('w2', 9102)]).added, [], 'not added twice')
  w1.inFlight = 0
  await clock.advance(20)
  const again = fleet.get('w1')
  t.not(again, w1, 'a new endpoint')
  t.equal(again?.state, 'joining', 'checked in again')
  await clock.advance(1000)
  t.ok(serving().includes('w1'))
})

t.test('a discovered server whose models change is replaced in place, without leaving rotation', async (t) => {
  const { clock, controller, fleet } = setup()
  controller.setDiscovered([consulServer('w1', 9101)])
  await clock.advance(1000)
  t.strictSame(fleet.endpointsServing('m').map((e) => e.name), ['a', 'b', 'w1'])
  t.strictSame(controller.setDiscovered([consulServer('w1', 9101, ['m', 'n'])]), { added: [], leaving: [], replaced: ['w1'] })
  const w1 = fleet.get('w1')!
  t.equal(w1.state, 'active', 'the worker was passing: it stays in')
  t.strictSame(w1.models, ['m', 'n'])
  t.strictSame(fleet.endpointsServing('m').map((e) => e.name), ['a', 'b', 'w1'])
  t.strictSame(fleet.endpointsServing('n').map((e) => e.name), ['w1'], 'and takes the new model at once')
})

t.test('the file and the admin API win over Consul for the same server; Consul takes over when they let go', async (t) => {
  const { clock, controller, fleet } = setup()
  // 'a' is the file's 127.0.0.1:9001: Consul's entry for that address (another name) and one for the name 'b' wait.
  const changes = controller.setDiscovered([consulServer('w-a', 9001), consulServer('b', 9555), consulServer('w3', 9103)])
  t.strictSame(changes.added, ['w3'])
  t.equal(fleet.get('w-a'), undefined)
  t.equal(controller.sourceOf(fleet.get('b')!), 'file')
  await clock.advance(1000)

  // An admin entry for w3's address: the Consul one drains out.
  controller.add({ ...consulServer('manual', 9103), weight: 5 }, 'admin')
  t.equal(fleet.get('w3')?.state, 'drained', 'the Consul twin yields (nothing in flight: drained at once)')
  await clock.advance(20)
  t.equal(fleet.get('w3'), undefined)
  // The admin entry goes: Consul's comes back.
  await controller.remove('manual', { force: true })
  t.equal(controller.sourceOf(fleet.get('w3')!), 'consul')
})

t.test('an operator\'s drain of a Consul server holds while Consul lists it, across changes, until undrained', async (t) => {
  const { clock, controller, fleet, serving } = setup()
  controller.setDiscovered([consulServer('w1', 9101)])
  await clock.advance(1000)
  controller.drain('w1')
  await clock.advance(20)
  t.equal(fleet.get('w1')!.state, 'drained')
  controller.setDiscovered([consulServer('w1', 9101, ['m', 'n'])])
  t.equal(fleet.get('w1')!.state, 'drained', 'a replacement stays drained')
  await clock.advance(3000)
  t.notOk(serving().includes('w1'), 'even once its checks pass')
  await t.rejects(controller.remove('w1'), { code: 'GW_ERR_ADMIN_CONFLICT', message: /Consul, which still lists it/ }, 'an admin removal would not last')
  controller.undrain('w1')
  t.ok(serving().includes('w1'))
})
