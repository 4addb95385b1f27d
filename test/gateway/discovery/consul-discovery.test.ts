/**
 * Discovery against the Consul double (or a real agent when CONSUL_HTTP_ADDR is set, except the tests that need the
 * double's controls): what an answer becomes, blocking queries that bring changes at once, Consul's index rules, and
 * an outage that changes nothing.
 */
import { createServer } from 'node:http'
import { type AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { silentLogger, type Logger } from '../../../common/logger.ts'
import { ConsulDiscovery, serversFromHealth, type DiscoveryStatus } from '../../../gateway/discovery/consul-discovery.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { type FleetServer } from '../../../gateway/fleet/fleet.ts'
import { hasBalancer } from '../../../gateway/balancer/registry.ts'
import { startConsulDouble, type ConsulDouble } from '../../helpers/consul-double.ts'
import { http } from '../../helpers/http.ts'

const REAL_ADDR = process.env.CONSUL_HTTP_ADDR ?? ''
const real = REAL_ADDR !== ''
const DOUBLE_ONLY = real ? 'needs the double\'s controls (CONSUL_HTTP_ADDR is set)' : false
const REAL_TIMERS = { now: () => performance.now(), setTimeout: (fn: () => void, ms: number) => setTimeout(fn, ms), clearTimeout: (h: unknown) => { clearTimeout(h as NodeJS.Timeout) } }

let seq = 0

interface Harness {
  double: ConsulDouble | undefined
  url: string
  service: string
  register (id: string, port: number, tags: string[], meta?: Record<string, string>): Promise<void>
  deregister (id: string): Promise<void>
  start (options?: { tag?: string, token?: string, wait?: string }): { discovery: ConsulDiscovery, seen: Array<readonly FleetServer[]>, errors: () => number, logs: string[] }
  /** Resolves once `check` holds, polling every 10 ms; fails the test after `ms`. */
  until (check: () => boolean, what: string, ms?: number): Promise<void>
}

async function harness (t: Test, options: { token?: string } = {}): Promise<Harness> {
  let double: ConsulDouble | undefined
  let url: string
  const token = real ? (process.env.CONSUL_HTTP_TOKEN ?? '') : (options.token ?? '')
  if (real) {
    url = REAL_ADDR.includes('://') ? REAL_ADDR : `http://${REAL_ADDR}`
  } else {
    double = await startConsulDouble({ random: () => 0, ...(options.token !== undefined ? { token: options.token } : {}) })
    t.teardown(() => double!.close())
    url = double.url
  }
  const service = `flotilla-disc-${process.pid}-${++seq}`
  const auth: Record<string, string> = token === '' ? {} : { 'X-Consul-Token': token }
  const ids = new Set<string>()
  t.teardown(async () => {
    if (real) for (const id of ids) await http('PUT', `${url}/v1/agent/service/deregister/${id}`, undefined, auth)
  })
  return {
    double,
    url,
    service,
    async register (id, port, tags, meta = {}) {
      ids.add(id)
      const res = await http('PUT', `${url}/v1/agent/service/register`, {
        Name: service, ID: id, Address: '127.0.0.1', Port: port, Tags: tags, Meta: meta,
        Check: { Name: 'ready', TTL: '60s', Status: 'passing' }
      }, auth)
      t.equal(res.status, 200, `registered ${id}`)
    },
    async deregister (id) {
      const res = await http('PUT', `${url}/v1/agent/service/deregister/${id}`, undefined, auth)
      t.equal(res.status, 200, `deregistered ${id}`)
    },
    start (opts = {}) {
      const seen: Array<readonly FleetServer[]> = []
      const logs: string[] = []
      let errors = 0
      const config = parseFleetConfig([
        'load_balancer: { type: round_robin }',
        'discovery:',
        '  consul:',
        `    address: ${url}`,
        `    service: ${service}`,
        ...(opts.tag !== undefined ? [`    tag: "${opts.tag}"`] : []),
        `    wait: ${opts.wait ?? '5s'}`
      ].join('\n'), { file: 'fleet.yaml', isKnownStrategy: hasBalancer })
      const logger = silentLogger()
      const capture = (level: string) => (obj: unknown, msg?: string) => { logs.push(`${level} ${typeof obj === 'string' ? obj : msg ?? ''} ${JSON.stringify(obj)}`) }
      const spy = Object.assign(Object.create(logger) as Logger, { warn: capture('warn'), info: capture('info'), error: capture('error') })
      const env: NodeJS.ProcessEnv = opts.token !== undefined ? { CONSUL_HTTP_TOKEN: opts.token } : (token === '' ? {} : { CONSUL_HTTP_TOKEN: token })
      const discovery = new ConsulDiscovery({
        config: config.discovery.consul!, env, timers: REAL_TIMERS, random: () => 0, logger: spy,
        onServers: (servers) => { seen.push(servers) },
        onError: () => { errors++ }
      })
      discovery.start()
      t.teardown(() => discovery.stop())
      return { discovery, seen, errors: () => errors, logs }
    },
    async until (check, what, ms = 3000) {
      const end = Date.now() + ms
      while (!check()) {
        if (Date.now() > end) {
          t.fail(`timed out waiting for: ${what}`)
          return
        }
        await sleep(10)
      }
    }
  }
}

const last = (seen: Array<readonly FleetServer[]>): string[] => (seen.at(-1) ?? []).map((s) => s.name)

t.test('serversFromHealth: models and versions from tags, labels from meta, unusable entries left out with a reason', async (t) => {
  const entry = (id: string, tags: string[], extra: Record<string, unknown> = {}) => ({
    Node: { Node: 'n1', Address: '10.0.0.9' },
    Service: { ID: id, Service: 'flotilla-worker', Address: '10.0.0.5', Port: 8000, Tags: tags, Meta: { grpc_port: '8001', label_zone: 'a', label_gpu: 'h100' }, ...extra }
  })
  const { servers, skipped } = serversFromHealth([
    entry('w1', ['model=simple', 'model=simple:1', 'model=simple:2', 'model=mlp', 'model=mlp:3', 'other']),
    entry('w2', ['model=simple', 'model=ratio:7'], { Address: '', Port: 9000 }),
    entry('bad id!', ['model=simple']),
    entry('w3', []),
    entry('w4', ['model=simple'], { Port: 0 }),
    entry('w1', ['model=simple'])
  ])
  t.strictSame(servers, [
    { name: 'w1', host: '10.0.0.5', port: 8000, models: ['mlp', 'simple'], versions: [1, 2, 3], weight: 1, labels: { zone: 'a', gpu: 'h100' } },
    // 'model=ratio:7' without 'model=ratio' is a model named so; a model without version tags means every version.
    { name: 'w2', host: '10.0.0.9', port: 9000, models: ['ratio:7', 'simple'], weight: 1, labels: { zone: 'a', gpu: 'h100' } }
  ])
  t.strictSame(skipped.map((s) => s.id), ['bad id!', 'w3', 'w4', 'w1'])
  t.match(skipped[0]!.reason, /not a valid server name/)
  t.match(skipped[1]!.reason, /no model/)
  t.match(skipped[2]!.reason, /no address and port/)
  t.match(skipped[3]!.reason, /same service ID/)
  t.match(serversFromHealth({}).skipped[0]!.reason, /not a JSON array/)
})

t.test('the first answer comes at once; registrations and deregistrations arrive through blocking queries', async (t) => {
  const h = await harness(t)
  await h.register('w1', 9001, ['model=m', 'model=m:1'])
  const { discovery, seen } = h.start()
  await h.until(() => seen.length === 1, 'the first answer')
  t.strictSame(last(seen), ['w1'])
  t.equal(discovery.status.state, 'ok')
  t.ok(discovery.status.index > 0)
  t.type(discovery.status.lastSuccessAt, 'number')
  if (h.double !== undefined) await h.double.waitForBlocked(1)
  const before = Date.now()
  await h.register('w2', 9002, ['model=m'], { label_zone: 'b' })
  await h.until(() => seen.length === 2, 'the registration')
  t.ok(Date.now() - before < 1000, 'well within the 5 s wait: the parked query answered on the change')
  t.strictSame(last(seen), ['w1', 'w2'])
  t.strictSame(seen[1]![1]!.labels, { zone: 'b' })
  await h.deregister('w1')
  await h.until(() => seen.length === 3, 'the deregistration')
  t.strictSame(last(seen), ['w2'])
})

t.test('a check that goes critical takes the server out; the last one going is not an empty fleet', { skip: DOUBLE_ONLY }, async (t) => {
  const h = await harness(t)
  await h.register('w1', 9001, ['model=m'])
  await h.register('w2', 9002, ['model=m'])
  const { discovery, seen, logs } = h.start()
  await h.until(() => seen.length === 1, 'the first answer')
  h.double!.setCheckStatus('service:w1', 'critical', 'down')
  await h.until(() => seen.length === 2, 'w1 leaving')
  t.strictSame(last(seen), ['w2'])
  h.double!.setCheckStatus('service:w2', 'critical', 'down')
  await h.until(() => logs.some((l) => l.includes('no passing server')), 'the warning')
  t.equal(seen.length, 2, 'no empty list handed on: Consul listing nobody keeps the last servers')
  t.equal(discovery.status.servers, 1)
  h.double!.setCheckStatus('service:w1', 'passing', 'up')
  await h.until(() => seen.length === 3, 'w1 back')
  t.strictSame(last(seen), ['w1'])
})

t.test('the tag filter: only instances carrying it', async (t) => {
  const h = await harness(t)
  await h.register('w1', 9001, ['model=m', 'pool=a'])
  await h.register('w2', 9002, ['model=m', 'pool=b'])
  const { seen } = h.start({ tag: 'pool=b' })
  await h.until(() => seen.length === 1, 'the first answer')
  t.strictSame(last(seen), ['w2'])
})

t.test('Consul going away changes nothing: errors and an outage keep the fleet, logged once, and it resumes', { skip: DOUBLE_ONLY }, async (t) => {
  const h = await harness(t)
  await h.register('w1', 9001, ['model=m'])
  const { discovery, seen, errors, logs } = h.start()
  await h.until(() => seen.length === 1, 'the first answer')
  await h.double!.waitForBlocked(1)
  await h.double!.outage()
  await h.until(() => errors() >= 3, 'three failed queries (back-off from 125 ms with random() = 0)')
  const status: DiscoveryStatus = discovery.status
  t.equal(status.state, 'failing')
  t.ok(status.consecutiveErrors >= 3)
  t.match(status.lastError, /ECONNREFUSED|socket|closed|reset/i)
  t.equal(seen.length, 1, 'the fleet was not touched')
  t.equal(logs.filter((l) => l.startsWith('warn') && l.includes('Consul query failed')).length, 1, 'logged once per outage')

  await h.double!.restore()
  await h.register('w2', 9002, ['model=m'])
  await h.until(() => seen.length === 2, 'discovery resumed', 15_000)
  t.strictSame(last(seen), ['w1', 'w2'])
  t.equal(discovery.status.state, 'ok')
  t.equal(discovery.status.consecutiveErrors, 0)
  t.ok(logs.some((l) => l.includes('discovery resumed')))

  // 5xx answers count the same way: the query parked now answers w3, the next two fail, then w4 comes through.
  const n = errors()
  h.double!.failNext(2, 500, { route: 'GET /v1/health/service/:service' })
  await h.register('w3', 9003, ['model=m'])
  await h.until(() => errors() === n + 2, 'two 500s')
  await h.register('w4', 9004, ['model=m'])
  // w3 and w4 may come in one answer, or two: the first query after the errors does not block.
  await h.until(() => last(seen).length === 4, 'past the 500s')
  t.strictSame(last(seen), ['w1', 'w2', 'w3', 'w4'])
  t.equal(discovery.status.state, 'ok')
})

t.test('Consul\'s index rules: backwards resets to 0 (no blocking), below 1 is 1, a missing index is an error', async (t) => {
  // A scripted agent: each answer's X-Consul-Index in turn, and the index each query asked for.
  const script: Array<string | undefined> = ['100', '50', '60', '0', undefined, '70']
  const asked: Array<string | null> = []
  const server = createServer((req, res) => {
    asked.push(new URL(req.url!, 'http://x').searchParams.get('index'))
    const index = script.shift()
    if (index === undefined && script.length === 0) return // park the rest
    res.writeHead(200, { 'content-type': 'application/json', ...(index !== undefined ? { 'x-consul-index': index } : {}) })
    res.end(JSON.stringify([{ Node: { Address: '127.0.0.1' }, Service: { ID: 'w1', Port: 9001, Tags: ['model=m'] } }]))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const config = parseFleetConfig(`load_balancer: { type: round_robin }\ndiscovery: { consul: { address: "127.0.0.1:${(server.address() as AddressInfo).port}", service: s } }`,
    { file: 'fleet.yaml', isKnownStrategy: hasBalancer })
  let errors = 0
  const discovery = new ConsulDiscovery({
    config: config.discovery.consul!, env: {}, timers: REAL_TIMERS, random: () => 0, logger: silentLogger(), onServers: () => {}, onError: () => { errors++ }
  })
  discovery.start()
  t.teardown(() => discovery.stop())
  const end = Date.now() + 5000
  while (asked.length < 7 && Date.now() < end) await sleep(10)
  // 100 -> ask 100; 50 (backwards) -> reset, ask without an index; 60 -> ask 60; 0 -> ask 1; no header -> an
  // error, retried without an index (not blocking); then 70.
  t.strictSame(asked, [null, '100', null, '60', '1', null, '70'])
  t.equal(errors, 1, 'the answer without X-Consul-Index counted as an error')
})

t.test('ACLs: the token is sent; a wrong one is an error that keeps the fleet', { skip: DOUBLE_ONLY }, async (t) => {
  const h = await harness(t, { token: 'secret-token' })
  await h.register('w1', 9001, ['model=m'])
  const good = h.start({ token: 'secret-token' })
  await h.until(() => good.seen.length === 1, 'the first answer')
  t.strictSame(last(good.seen), ['w1'])
  const bad = h.start({ token: 'wrong-token' })
  await h.until(() => bad.errors() >= 1, 'a refused query')
  t.match(bad.discovery.status.lastError, /403 ACL not found/)
  t.notOk(bad.logs.some((l) => l.includes('wrong-token')), 'the token is never logged')
})
