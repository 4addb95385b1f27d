/**
 * ConsulRegistration on its own, against the Consul double: following a changing set of ready models, anti-entropy
 * (an agent that lost the service), back-off and its logging, and a shutdown that an unresponsive agent cannot hold
 * up. The worker's wiring is in worker-registration.test.ts.
 */
import { createServer as createHttpServer } from 'node:http'
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net'
import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { ConsulRegistration, type ConsulRegistrationOptions } from '../../../worker/registration/consul-registration.ts'
import { registrationSettings } from '../../../worker/registration/service-definition.ts'
import { startConsulDouble, type ConsulDouble } from '../../helpers/consul-double.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'
import { http } from '../../helpers/http.ts'
import { capture, INFO, until, WARN, type LogLine } from './harness.ts'

/** What Consul's check calls: a server that is always ready, on the port the registration advertises. */
async function readyServer (t: Test): Promise<number> {
  const server = createHttpServer((_req, res) => res.end())
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => { server.closeAllConnections(); server.close(() => resolve()) }))
  return (server.address() as AddressInfo).port
}

async function double (t: Test): Promise<ConsulDouble> {
  const d = await startConsulDouble({ random: () => 0 })
  t.teardown(() => d.close())
  return d
}

interface Models { list: Array<{ name: string, version: string }> }

async function registration (t: Test, address: string, extra: Partial<ConsulRegistrationOptions> = {}): Promise<{ r: ConsulRegistration, models: Models, lines: LogLine[] }> {
  const { logger, lines } = capture()
  const models: Models = { list: [{ name: 'resnet', version: '1' }] }
  const r = new ConsulRegistration({
    settings: registrationSettings({ address }, '127.0.0.1'),
    httpPort: await readyServer(t),
    grpcPort: -1,
    metricsPort: -1,
    readyModels: () => models.list,
    ready: () => true,
    logger,
    random: () => 0,
    pollMs: 50,
    ...extra
  })
  t.teardown(() => r.close())
  return { r, models, lines }
}

t.test('a model loaded or unloaded changes the tags at the next poll, under the same ID', async t => {
  const d = await double(t)
  const { r, models, lines } = await registration(t, d.url)
  r.start()
  await until('registered', () => d.services()[0]?.Tags.join() === 'model=resnet,model=resnet:1')
  models.list = [...models.list, { name: 'bert', version: '3' }]
  await until('bert added', () => d.services()[0]?.Tags.join() === 'model=bert,model=bert:3,model=resnet,model=resnet:1')
  models.list = [{ name: 'bert', version: '3' }]
  await until('resnet removed', () => d.services()[0]?.Tags.join() === 'model=bert,model=bert:3')
  t.strictSame(d.services().map(s => s.ID), [r.serviceId], 'one entry, replaced each time')
  t.equal(d.requests()['PUT /v1/agent/service/register'], 3, 'registered again only when the tags changed')
  await until('logged', () => lines.filter(l => l.msg === 'ready models changed: Consul registration updated').length === 2)
})

t.test('an agent that lost the service (restarted without its state) gets it back', async t => {
  const d = await double(t)
  const { r, lines } = await registration(t, d.url, { verifyMs: 100 })
  r.start()
  await until('registered', () => r.registered)
  // Behind the registration's back, as an agent restarted without its data directory would.
  t.equal((await http('PUT', `${d.url}/v1/agent/service/deregister/${r.serviceId}`)).status, 200)
  t.strictSame(d.services(), [])
  await until('registered again', () => d.services().length === 1)
  t.match(d.services()[0], { ID: r.serviceId, Tags: ['model=resnet', 'model=resnet:1'], Checks: [{ Status: 'passing' }] })
  t.ok(lines.some(l => l.level === WARN && /no longer has this worker/.test(l.msg)))
  t.ok((d.requests()['GET /v1/agent/services'] ?? 0) >= 1, 'found out through the agent\'s services')
})

t.test('an agent answering errors: back-off, one warning for the outage, one line when it is over', async t => {
  const d = await double(t)
  d.failNext(3, 500, { route: 'PUT /v1/agent/service/register' })
  const { r, lines } = await registration(t, d.url)
  const start = performance.now()
  r.start()
  await until('registered', () => r.registered)
  // random 0: retryDelay's shortest waits, 125 + 250 + 500 ms.
  t.ok(performance.now() - start >= 850, `backed off (${Math.round(performance.now() - start)} ms)`)
  t.equal(d.requests()['PUT /v1/agent/service/register'], 4)
  t.match(lines.filter(l => l.level >= WARN), [{ level: WARN, err: '500 No cluster leader', retryInMs: 125 }])
  t.equal(lines.filter(l => l.level >= WARN).length, 1)
  t.match(lines.filter(l => l.msg === 'Consul reachable again: registered'), [{ level: INFO, failedAttempts: 3 }])
  t.equal(r.failures, 0)
})

t.test('an agent that accepts connections and never answers: each call gives up at its deadline', async t => {
  const sockets = new Set<Socket>()
  // Reads (so that it sees the client hang up) and never answers.
  const hole = createTcpServer(s => { sockets.add(s); s.resume(); s.on('close', () => sockets.delete(s)) })
  await new Promise<void>(resolve => hole.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => { for (const s of sockets) s.destroy(); hole.close(() => resolve()) }))
  const { r, lines } = await registration(t, `127.0.0.1:${(hole.address() as AddressInfo).port}`, { callTimeoutMs: 5000, shutdownTimeoutMs: 200 })
  r.start()
  await until('register sent', () => sockets.size === 1)
  const start = performance.now()
  await r.maintenance()
  await r.close()
  const took = performance.now() - start
  // The register in flight is abandoned at once; maintenance and deregister wait 200 ms each.
  t.ok(took >= 350 && took < 1500, `closed in ${Math.round(took)} ms`)
  t.strictSame(lines.filter(l => l.level === WARN).map(l => [l.msg, l.err]), [
    ['Consul maintenance failed; shutting down regardless', 'request timed out (200ms)'],
    ['Consul deregister failed; shutting down regardless', 'request timed out (200ms)']
  ])
  await until('no socket left open', () => sockets.size === 0)
})

t.test('close() leaves no timer behind and stops calling the agent; start() after it does nothing', async t => {
  const d = await double(t)
  const clock = new FakeClock()
  const { r } = await registration(t, d.url, { timers: clock })
  r.start()
  await clock.advance(0)
  await until('registered', () => r.registered)
  t.equal(clock.pending, 1, 'the next poll is scheduled')
  await r.close()
  t.equal(clock.pending, 0, 'no timer left')
  t.strictSame(d.services(), [], 'deregistered')
  const calls = JSON.stringify(d.requests())
  r.start()
  await clock.advance(10_000)
  t.equal(JSON.stringify(d.requests()), calls, 'nothing more sent')
  t.equal(r.close(), r.close(), 'repeated calls return the same promise')
})

t.test('never registered (closed before the first attempt): nothing to put in maintenance or deregister', async t => {
  const d = await double(t)
  const { r } = await registration(t, d.url)
  await r.maintenance()
  await r.close()
  t.strictSame(d.requests(), {})
})
