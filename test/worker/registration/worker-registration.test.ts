/**
 * A worker registering itself in Consul (issue 16, worker side), against the Consul double: what it registers, that
 * a gateway sees it at once, an agent that is down at start, ACL tokens, and the shutdown order (maintenance before
 * the worker stops answering, deregistration after).
 */
import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { startWorker, type RunningWorker, type WorkerOptions } from '../../../worker/main.ts'
import { startConsulDouble, type ConsulDouble, type ConsulDoubleOptions } from '../../helpers/consul-double.ts'
import { get } from '../../helpers/http.ts'
import { capture, ERROR, recordingProxy, repository, until, WARN, type LogLine } from './harness.ts'

async function double (t: Test, options: ConsulDoubleOptions = {}): Promise<ConsulDouble> {
  // random 0: the double runs a new HTTP check at once instead of after a random stagger.
  const d = await startConsulDouble({ random: () => 0, ...options })
  t.teardown(() => d.close())
  return d
}

async function worker (t: Test, consul: NonNullable<WorkerOptions['consul']>, extra: Partial<WorkerOptions> = {}): Promise<{ w: RunningWorker, lines: LogLine[], text: () => string }> {
  const { logger, lines, text } = capture()
  const w = await startWorker({ modelRepository: repository(t), httpPort: 0, grpcPort: 0, metricsPort: 0, shutdownQuietMs: 50, logger, consul, ...extra })
  t.teardown(() => w.close())
  return { w, lines, text }
}

const messages = (lines: LogLine[], level?: number): string[] => lines.filter(l => level === undefined || l.level === level).map(l => l.msg)

t.test('registers its ID, address, ports, ready models, tags and labels, with an HTTP check that passes from the start', async t => {
  const d = await double(t, { token: 's3cret-token' })
  const proxy = await recordingProxy(t, d.url)
  const { w, text } = await worker(t, { address: proxy.url, token: 's3cret-token', labels: { zone: 'eu-1', gpu: 'a100' }, tags: ['pool-a'] })
  const id = `flotilla-worker-127.0.0.1-${w.httpPort}`
  t.equal(w.registration?.serviceId, id)

  const [entry] = await until('registered', () => d.services().length === 1 ? d.services() : undefined)
  t.match(entry, {
    ID: id,
    Service: 'flotilla-worker',
    Address: '127.0.0.1',
    Port: w.httpPort,
    // Triton's default version policy loads echo's latest version only: the tags name what is READY.
    Tags: ['pool-a', 'model=add', 'model=add:1', 'model=echo', 'model=echo:2'],
    Meta: { grpc_port: String(w.grpcPort), metrics_port: String(w.metricsPort), label_zone: 'eu-1', label_gpu: 'a100' },
    Checks: [{ CheckID: `service:${id}`, Type: 'http', Status: 'passing' }]
  })
  await until('registered, as the worker knows', () => w.registration?.registered)

  const register = proxy.requests.find(r => r.method === 'PUT' && r.path === '/v1/agent/service/register')
  t.equal(register?.headers['x-consul-token'], 's3cret-token', 'the ACL token goes in a header')
  t.strictSame(JSON.parse(register?.body ?? '{}').Check, {
    Name: 'flotilla worker ready',
    HTTP: `http://127.0.0.1:${w.httpPort}/v2/health/ready`,
    Interval: '2s',
    Timeout: '1s',
    Status: 'passing',
    DeregisterCriticalServiceAfter: '60s'
  })

  // What a gateway asks: the passing instances of the service, here at once (no check interval to wait for).
  const seen = await get(`${d.url}/v1/health/service/flotilla-worker?passing=true`, { 'X-Consul-Token': 's3cret-token' })
  t.strictSame(seen.json.map((e: { Service: { ID: string } }) => e.Service.ID), [id])
  // Consul's own check calls the worker, and keeps it passing.
  const probed = await until('checked by Consul', () => d.services()[0]?.Checks[0]?.Output.startsWith('HTTP GET') && d.services()[0]!.Checks[0]!)
  t.match(probed, { Status: 'passing', Output: `HTTP GET http://127.0.0.1:${w.httpPort}/v2/health/ready: 200 OK Output: ` })
  t.notOk(text().includes('s3cret-token'), 'the token is never logged')
})

t.test('the tags follow the ready models: versions unloaded at run time leave the tags within two polls', async t => {
  // The repository API refuses load/unload (Triton's default model control mode), so the models are unloaded
  // from inside; the registration only reads repository.index(true), whatever changed it.
  const d = await double(t)
  const { w, lines } = await worker(t, { address: d.url })
  await until('registered', () => d.services()[0]?.Tags.length === 4)
  const unloadedAt = performance.now()
  await w.repository.unloadAll()
  await until('tags emptied', () => d.services()[0]?.Tags.length === 0, 2500)
  t.ok(performance.now() - unloadedAt < 2500, 'within a couple of seconds')
  t.equal(d.services().length, 1, 'the same entry, replaced (same ID)')
  await until('logged', () => messages(lines).includes('ready models changed: Consul registration updated'))
})

t.test('Consul down at start: the worker serves meanwhile, logs it once, and registers once the agent is back', async t => {
  const d = await double(t)
  await d.outage()
  // random 0: the shortest back-off (125, 250, 500 ms ...), so that the test sees several attempts quickly.
  const { w, lines } = await worker(t, { address: d.url }, { random: () => 0 })
  t.equal((await get(`${w.url}/v2/health/ready`)).status, 200, 'ready and serving without Consul')
  await until('three failed attempts', () => w.registration!.failures >= 3)
  t.equal(w.registration?.registered, false)
  await d.restore()
  await until('registered after the outage', () => d.services().length === 1 && w.registration?.registered, 5000)
  t.equal(lines.filter(l => l.level === WARN && l.msg.startsWith('cannot reach Consul')).length, 1, 'one warning for the whole outage')
  const recovered = lines.filter(l => l.msg === 'Consul reachable again: registered')
  t.equal(recovered.length, 1, 'one line on recovery')
  t.ok((recovered[0]?.failedAttempts as number) >= 3)
  t.equal(w.registration?.registered, true)
})

t.test('a token the agent refuses: one error line, without the token, and the worker serves', async t => {
  const d = await double(t, { token: 'right-token' })
  const { w, lines, text } = await worker(t, { address: d.url, token: 'wrong-token-do-not-log' })
  await until('three refused attempts', () => (d.requests()['PUT /v1/agent/service/register'] ?? 0) >= 3)
  t.strictSame(messages(lines, ERROR), ['Consul refused the registration: retrying with back-off; the worker serves meanwhile'])
  t.match(lines.find(l => l.level === ERROR), { err: '403 ACL not found' })
  t.notOk(text().includes('wrong-token-do-not-log'), 'the token is never logged')
  t.equal(d.services().length, 0)
  t.equal((await get(`${w.url}/v2/health/ready`)).status, 200)
})

t.test('close(): maintenance first while the worker still answers, then the drain, then deregistration', async t => {
  const d = await double(t)
  const { w, lines } = await worker(t, { address: d.url }, { shutdownQuietMs: 400 })
  const id = w.registration!.serviceId
  await until('registered', () => d.services().length === 1)

  const closing = w.close()
  await until('in maintenance', () => d.services()[0]?.Checks.some(c => c.CheckID === `_service_maintenance:${id}`))
  t.equal((await get(`${w.url}/v2/health/live`)).status, 200, 'still answering when gateways are told to stop sending')
  const seen = await get(`${d.url}/v1/health/service/flotilla-worker?passing=true`)
  t.strictSame(seen.json, [], 'no longer among the passing instances a gateway routes to')
  await closing
  t.strictSame(d.services(), [], 'deregistered: nothing lingers critical in the catalog')
  const order = ['Consul: in maintenance: gateways stop sending', 'draining: reporting not-ready, still serving', 'drained: closing', 'Consul: deregistered']
  t.strictSame(messages(lines).filter(m => order.includes(m)), order)
  t.equal(d.requests()['PUT /v1/agent/service/maintenance/:service_id'], 1)
})

t.test('close() with Consul unreachable finishes promptly, logging what it could not do', async t => {
  const d = await double(t)
  const { w, lines } = await worker(t, { address: d.url })
  await until('registered', () => d.services().length === 1)
  await d.outage()
  const start = performance.now()
  await w.close()
  t.ok(performance.now() - start < 1000, `closed in ${Math.round(performance.now() - start)} ms`)
  t.strictSame(messages(lines, WARN).filter(m => m.includes('shutting down')),
    ['Consul maintenance failed; shutting down regardless', 'Consul deregister failed; shutting down regardless'])
})

t.test('no consul option: no registration', async t => {
  const { logger } = capture()
  const w = await startWorker({ modelRepository: repository(t), httpPort: 0, grpcPort: -1, metricsPort: -1, logger })
  t.teardown(() => w.close())
  t.equal(w.registration, undefined)
})

t.test('settings that cannot work fail startWorker before anything listens', async t => {
  await t.rejects(startWorker({ modelRepository: repository(t), httpPort: 0, grpcPort: -1, metricsPort: -1, consul: { address: 'ftp://x' } }),
    { code: 'FLT_ERR_CONSUL_CONFIG', message: /only http and https/ })
  await t.rejects(startWorker({ modelRepository: repository(t), host: '0.0.0.0', httpPort: 0, consul: { address: 'x', advertiseHost: '::' } }),
    { code: 'FLT_ERR_CONSUL_CONFIG', message: /wildcard/ })
})
