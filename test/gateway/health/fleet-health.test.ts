/** Health through a running gateway: real HTTP upstreams whose readiness the test flips. */
import { createServer, type Server } from 'node:http'
import t, { type Test } from 'tap'
import { silentLogger } from '../../../common/logger.ts'
import { hasBalancer } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { startGateway } from '../../../gateway/main.ts'
import { Fleet, type FleetServer } from '../../../gateway/fleet/fleet.ts'
import { FleetHealth } from '../../../gateway/health/fleet-health.ts'
import { type HealthTransition, type ProbeResult } from '../../../gateway/health/types.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'
import { post } from '../../helpers/http.ts'

interface Upstream { name: string, port: number, ready: boolean, modelReady: boolean, probes: number, failInfer: boolean, infers: number }

async function upstream (t: Test, name: string): Promise<Upstream> {
  const state: Upstream = { name, port: 0, ready: true, modelReady: true, probes: 0, failInfer: false, infers: 0 }
  const server: Server = createServer((req, res) => {
    if (req.url === '/v2/health/ready') {
      state.probes++
      res.writeHead(state.ready ? 200 : 400, { 'x-flotilla-queue-depth': '0' }).end()
    } else if (req.url === '/v2/models/m/ready') {
      res.writeHead(state.modelReady ? 200 : 400).end()
    } else {
      req.resume()
      state.infers++
      req.on('end', () => res.writeHead(state.failInfer ? 500 : 200, { 'content-type': 'application/json' })
        .end(JSON.stringify(state.failInfer ? { error: 'kaput' } : { served_by: name })))
    }
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  state.port = (server.address() as { port: number }).port
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return state
}

const sleep = (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))

async function servedBy (url: string, n: number): Promise<string[]> {
  const names: string[] = []
  for (let i = 0; i < n; i++) names.push((await post(`${url}/v2/models/m/infer`, '{"inputs":[]}')).json.served_by)
  return names
}

t.test('a server failing its checks leaves the rotation, and comes back when they pass', async t => {
  const [a, b, c] = await Promise.all([upstream(t, 'a'), upstream(t, 'b'), upstream(t, 'c')])
  const config = parseFleetConfig([
    'inference_servers:',
    ...[a, b, c].map(u => `  - { name: ${u.name}, host: 127.0.0.1, port: ${u.port}, models: [m] }`),
    'load_balancer: { type: round_robin }',
    'health_check: { interval_ms: 100, timeout_ms: 100, jitter_percent: 0, healthy_threshold: 2, unhealthy_threshold: 2 }',
    'gateway: { http_port: 0, metrics_port: 0 }'
  ].join('\n'), { file: 'fleet.yaml', isKnownStrategy: hasBalancer })
  const g = await startGateway({ grpcPort: -1, config, logger: silentLogger(), metricsPort: -1, adminPort: -1 })
  t.teardown(() => g.close())

  t.strictSame(new Set(await servedBy(g.url, 6)), new Set(['a', 'b', 'c']))
  b.ready = false
  for (let i = 0; i < 40 && (await servedBy(g.url, 3)).includes('b'); i++) await sleep(50)
  t.notOk((await servedBy(g.url, 9)).includes('b'), 'b is out after two failing checks')

  b.ready = true
  for (let i = 0; i < 40 && !(await servedBy(g.url, 3)).includes('b'); i++) await sleep(50)
  t.ok((await servedBy(g.url, 9)).includes('b'), 'b is back after two passing checks')

  c.modelReady = false
  for (let i = 0; i < 40 && (await servedBy(g.url, 3)).includes('c'); i++) await sleep(50)
  t.notOk((await servedBy(g.url, 9)).includes('c'), "a model that is not ready on c takes c out of that model's rotation")
  t.ok(c.probes > 0)

  a.ready = false
  b.ready = false
  await sleep(600)
  t.strictSame(new Set(await servedBy(g.url, 9)), new Set(['a', 'b', 'c']),
    'with 0 of 3 usable (below the 50% panic threshold) traffic goes to all of them')
})

t.test('a server answering 5xx is ejected after 5 in a row, and its share goes to the others', async t => {
  const [a, b, c] = await Promise.all([upstream(t, 'a'), upstream(t, 'b'), upstream(t, 'c')])
  const config = parseFleetConfig([
    'inference_servers:',
    ...[a, b, c].map(u => `  - { name: ${u.name}, host: 127.0.0.1, port: ${u.port}, models: [m] }`),
    'load_balancer: { type: round_robin }',
    'health_check: { enabled: false }',
    'outlier_detection: { consecutive_failures: 5, base_ejection_time_ms: 60000, max_ejection_percent: 34 }',
    'gateway: { http_port: 0, metrics_port: 0 }'
  ].join('\n'), { file: 'fleet.yaml', isKnownStrategy: hasBalancer })
  const g = await startGateway({ grpcPort: -1, config, logger: silentLogger(), metricsPort: -1, adminPort: -1 })
  t.teardown(() => g.close())

  b.failInfer = true
  const statuses: number[] = []
  for (let i = 0; i < 30; i++) statuses.push((await post(`${g.url}/v2/models/m/infer`, '{"inputs":[]}')).status)
  t.equal(statuses.filter(s => s === 500).length, 5, 'exactly the five failures that ejected b reached a client')
  t.equal(b.infers, 5, 'b got nothing after its ejection')
  const last = statuses.slice(-10)
  t.ok(last.every(s => s === 200), 'the rest is served by a and c')
})

/** FleetHealth alone on a fake clock: a fleet of a and b, a scripted probe, checks every second (2 up, 2 down). */
function unit (options: { checks?: boolean, outliers?: boolean } = {}) {
  const config = parseFleetConfig([
    'inference_servers:',
    '  - { name: a, host: 127.0.0.1, port: 9001, models: [m] }',
    '  - { name: b, host: 127.0.0.1, port: 9002, models: [m] }',
    'load_balancer: { type: round_robin, panic_threshold_percent: 0 }',
    `health_check: { enabled: ${String(options.checks ?? true)}, interval_ms: 1000, timeout_ms: 500, jitter_percent: 0, healthy_threshold: 2, unhealthy_threshold: 2 }`,
    `outlier_detection: { enabled: ${String(options.outliers ?? false)}, consecutive_failures: 2, base_ejection_time_ms: 10000, max_ejection_percent: 100 }`
  ].join('\n'), { file: 'fleet.yaml', isKnownStrategy: hasBalancer })
  const clock = new FakeClock()
  const answers = new Map<string, ProbeResult>()
  const probes: string[] = []
  const transitions: string[] = []
  const health = new FleetHealth({
    config,
    probe: async (endpoint, model) => {
      probes.push(`${clock.now()} ${endpoint.name}/${model ?? 'server'}`)
      return answers.get(endpoint.name) ?? { ok: true }
    },
    timers: clock,
    random: () => 0,
    logger: silentLogger(),
    onTransition: (tr: HealthTransition) => transitions.push(`${clock.now()} ${tr.endpoint.name}/${tr.model ?? 'server'} ${tr.healthy ? 'up' : 'down'}: ${tr.reason}`)
  })
  const fleet = Fleet.fromConfig(config, { usable: health.usable })
  health.attach(fleet)
  t.teardown(() => { health.stop() })
  /** Adds a server the way the fleet controller does. */
  const join = (name: string, port: number) => {
    const server: FleetServer = { name, host: '127.0.0.1', port, models: ['m'], weight: 1, labels: {} }
    const endpoint = fleet.add(server)
    health.add(endpoint)
    fleet.refresh()
    return endpoint
  }
  const serving = (): string[] => fleet.endpointsServing('m').map((e) => e.name)
  return { clock, health, fleet, probes, transitions, answers, join, serving }
}

t.test('checking says whether the active checker is on', async (t) => {
  t.equal(unit().health.checking, true)
  t.equal(unit({ checks: false }).health.checking, false)
})

t.test('add: an endpoint that joined at run time is unusable until it passes healthy_threshold checks', async (t) => {
  const { clock, health, probes, transitions, join, serving } = unit()
  await clock.advance(0)
  const c = join('c', 9003)
  t.notOk(health.usable(c, 'm'))
  t.strictSame(serving(), ['a', 'b'])
  t.match(health.view(c), { healthy: false, ejected: false })
  await clock.advance(0)
  t.ok(probes.includes('0 c/server'), 'probed at once')
  t.notOk(health.usable(c, 'm'))
  await clock.advance(1000)
  t.ok(health.usable(c, 'm'))
  t.strictSame(serving(), ['a', 'b', 'c'], 'the fleet was refreshed on the transition')
  t.strictSame(transitions, ['1000 c/server up: checks passing', '1000 c/m up: checks passing'])
})

t.test('add with checks off: usable at once, never probed', async (t) => {
  const { clock, health, probes, join, serving } = unit({ checks: false })
  const c = join('c', 9003)
  t.ok(health.usable(c, 'm'))
  t.strictSame(serving(), ['a', 'b', 'c'])
  await clock.advance(5000)
  t.strictSame(probes, [])
})

t.test('remove: no more probes, and an ejection is forgotten with its timer', async (t) => {
  const { clock, health, fleet, probes } = unit({ outliers: true })
  await clock.advance(0)
  const a = fleet.get('a')!
  health.record(a, 500)
  health.record(a, 500)
  t.equal(health.view(a).ejected, true, 'ejected after two 5xx')
  t.notOk(health.usable(a, 'm'))
  const pendingBefore = clock.pending
  health.remove(a)
  t.equal(clock.pending, pendingBefore - 2, 'its probe timer and its ejection timer are cancelled')
  t.strictSame(health.view(a), { ejected: false }, 'nothing known of it any more')
  t.ok(health.usable(a, 'm'))
  const before = probes.length
  await clock.advance(3000)
  const after = probes.slice(before)
  t.notOk(after.some((p) => p.includes(' a/')), 'a is no longer probed')
  t.ok(after.some((p) => p.includes(' b/')), 'b still is')
})

t.test('failNow: out of the candidate lists at once; with checks off it does nothing', async (t) => {
  const { clock, health, fleet, transitions, serving } = unit()
  await clock.advance(100)
  const a = fleet.get('a')!
  health.failNow(a, 'it answered x-flotilla-draining: shutting down')
  t.notOk(health.usable(a, 'm'))
  t.strictSame(serving(), ['b'], 'the fleet was refreshed')
  t.strictSame(transitions, ['100 a/server down: it answered x-flotilla-draining: shutting down'])
  await clock.advance(1900)
  t.strictSame(serving(), ['a', 'b'], 'it comes back after two passing checks if it stays up')

  const off = unit({ checks: false })
  const offA = off.fleet.get('a')!
  off.health.failNow(offA, 'shutting down')
  t.ok(off.health.usable(offA, 'm'))
  t.strictSame(off.serving(), ['a', 'b'])
})
