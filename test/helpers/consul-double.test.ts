/**
 * Contract tests of the Consul HTTP API as Flotilla uses it. They run against the double (./consul-double.ts) and,
 * when CONSUL_HTTP_ADDR is set (host:port or a URL), against that agent instead: a `consul agent -dev` on this host
 * (HTTP checks call back to 127.0.0.1). The ACL tests need ACLs on there too: CONSUL_HTTP_TOKEN a management token,
 * acl.default_policy "deny"; without it they are skipped. The double's own controls, and reaping (which takes a
 * real agent over a minute: a 1-minute floor and a 30 s reaper), run against the double only.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http'
import { type AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { formatGoDuration, parseGoDuration, startConsulDouble, type ConsulDouble, type ConsulDoubleOptions } from './consul-double.ts'
import { http, type HttpResult } from './http.ts'

const REAL_ADDR = process.env.CONSUL_HTTP_ADDR ?? ''
const REAL_TOKEN = process.env.CONSUL_HTTP_TOKEN ?? ''
const real = REAL_ADDR !== ''
const DOUBLE_ONLY = real ? 'a control of the double (CONSUL_HTTP_ADDR is set)' : false
const ANONYMOUS_HINT = 'The anonymous token is used implicitly when a request does not specify a token.'

interface Agent {
  double: ConsulDouble | undefined
  /** A service name unique to this run, so that tests can share a real agent. */
  name (base: string): string
  /** With the suite's token, if any. */
  get (path: string): Promise<HttpResult>
  put (path: string, body?: unknown): Promise<HttpResult>
  /** Exactly these headers: no token unless given. */
  raw (method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<HttpResult>
  /** Registers (expecting 200) and deregisters in teardown on a real agent. */
  register (definition: Record<string, unknown>): Promise<void>
  /** Resolves once `n` blocking queries are parked (on a real agent: after a pause). */
  parked (n?: number): Promise<void>
}

let seq = 0

async function agent (t: Test, options: ConsulDoubleOptions = {}): Promise<Agent> {
  let url: string
  let token: string
  let double: ConsulDouble | undefined
  if (real) {
    url = REAL_ADDR.includes('://') ? REAL_ADDR.replace(/\/+$/, '') : `http://${REAL_ADDR}`
    token = REAL_TOKEN
  } else {
    const started = await startConsulDouble({ random: () => 0, ...options })
    t.teardown(() => started.close())
    double = started
    url = started.url
    token = options.token ?? ''
  }
  const auth: Record<string, string> = token === '' ? {} : { 'X-Consul-Token': token }
  const raw = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<HttpResult> =>
    http(method, `${url}${path}`, typeof body === 'string' || body === undefined ? body : JSON.stringify(body), headers)
  const registered = new Set<string>()
  if (real) {
    t.teardown(async () => {
      for (const id of registered) await raw('PUT', `/v1/agent/service/deregister/${encodeURIComponent(id)}`, undefined, auth)
    })
  }
  return {
    double,
    name: base => `flotilla-${base}-${process.pid}-${++seq}`,
    get: path => raw('GET', path, undefined, auth),
    put: (path, body) => raw('PUT', path, body, auth),
    raw,
    register: async definition => {
      const r = await raw('PUT', '/v1/agent/service/register', definition, auth)
      if (r.status !== 200) throw new Error(`register ${JSON.stringify(definition)}: ${r.status} ${r.text}`)
      registered.add(String(definition.ID ?? definition.Name))
    },
    parked: async (n = 1) => {
      if (double !== undefined) await double.waitForBlocked(n)
      else await sleep(250)
    }
  }
}

const index = (r: HttpResult): number => Number(r.headers['x-consul-index'])

/** Polls `probe` until it returns something other than undefined. */
async function eventually<T> (what: string, probe: () => Promise<T | undefined>, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

/** The fields, with Consul's casing: exactly these, in this order, on the double; at least these on a real agent. */
function fields (t: Test, value: Record<string, unknown>, keys: string[], what: string): void {
  if (real) t.ok(keys.every(k => k in value), `${what} has ${keys.join(', ')}`)
  else t.strictSame(Object.keys(value), keys, `${what}: Consul's fields, in Go's order`)
}

const AGENT_SERVICE = ['ID', 'Service', 'Tags', 'Meta', 'Port', 'Address', 'TaggedAddresses', 'Weights', 'EnableTagOverride', 'Datacenter']
const HEALTH_CHECK = ['Node', 'CheckID', 'Name', 'Status', 'Notes', 'Output', 'ServiceID', 'ServiceName', 'ServiceTags', 'Type',
  'Interval', 'Timeout', 'ExposedPort', 'Definition', 'CreateIndex', 'ModifyIndex']
const NODE = ['ID', 'Node', 'Address', 'Datacenter', 'TaggedAddresses', 'Meta', 'CreateIndex', 'ModifyIndex']
const NODE_SERVICE = ['ID', 'Service', 'Tags', 'Address', 'TaggedAddresses', 'Meta', 'Port', 'Weights', 'EnableTagOverride',
  'Proxy', 'Connect', 'PeerName', 'CreateIndex', 'ModifyIndex']

t.test('register: agent/services and agent/checks show it with Consul\'s defaults, check IDs and names', async t => {
  const a = await agent(t)
  const api = a.name('api')
  const definition = {
    Name: api, ID: `${api}-1`, Tags: ['v1'], Address: '127.0.0.1', Port: 8080, Meta: { zone: 'a' },
    Check: { TTL: '10s', DeregisterCriticalServiceAfter: '1m' }
  }
  await a.register(definition)
  const again = await a.put('/v1/agent/service/register', definition)
  t.strictSame([again.status, again.text], [200, ''], 'an empty 200; registering again is fine')
  await a.register({ Name: api, ID: `${api}-2`, Port: 8081, Checks: [
    { Name: 'http', HTTP: 'http://127.0.0.1:1/health', Interval: '10s', Timeout: '1500ms' },
    { TTL: '30s', Status: 'passing', Notes: 'heartbeat' }
  ] })
  await a.register({ Name: `${api}-solo` })

  const services = await a.get('/v1/agent/services')
  t.equal(services.status, 200)
  t.match(services.headers['content-type'], /^application\/json/)
  const one = services.json[`${api}-1`]
  fields(t, one, AGENT_SERVICE, 'an agent service')
  t.match(one, {
    ID: `${api}-1`, Service: api, Meta: { zone: 'a' }, Port: 8080, Address: '127.0.0.1',
    TaggedAddresses: { lan_ipv4: { Address: '127.0.0.1', Port: 8080 }, wan_ipv4: { Address: '127.0.0.1', Port: 8080 } },
    Weights: { Passing: 1, Warning: 1 }, EnableTagOverride: false, Datacenter: String
  })
  t.strictSame(one.Tags, ['v1'])
  const two = services.json[`${api}-2`]
  fields(t, two, AGENT_SERVICE.filter(k => k !== 'TaggedAddresses'), 'without an address, no TaggedAddresses')
  t.strictSame([two.Tags, two.Meta, two.Address], [[], {}, ''], 'empty Tags, Meta and Address, not null')
  t.equal(services.json[`${api}-solo`]?.ID, `${api}-solo`, 'the ID defaults to the name')

  const checks = (await a.get('/v1/agent/checks')).json
  const ttl = checks[`service:${api}-1`]
  fields(t, ttl, HEALTH_CHECK, 'an agent check')
  t.match(ttl, {
    CheckID: `service:${api}-1`, Name: `Service '${api}' check`, Status: 'critical', Notes: '', Output: '',
    ServiceID: `${api}-1`, ServiceName: api, Type: 'ttl', Interval: '', Timeout: '', ExposedPort: 0, Definition: {}
  })
  t.strictSame(ttl.ServiceTags, ['v1'])
  t.match(checks[`service:${api}-2:1`], { Name: 'http', Type: 'http', Interval: '10s', Timeout: '1.5s', Status: 'critical' },
    'several checks are numbered from 1; a new check starts critical; durations in Go\'s format')
  t.match(checks[`service:${api}-2:2`], { Name: `Service '${api}' check`, Type: 'ttl', Status: 'passing', Notes: 'heartbeat' },
    'unless it is given a Status')
  t.equal(checks[`service:${api}-solo`], undefined, 'no check, no check ID')
})

t.test('register: a bad body gets Consul\'s status code and text, and registers nothing', async t => {
  const a = await agent(t)
  const n = a.name('bad')
  const cases: Array<[string, unknown, number, string | RegExp]> = [
    ['an empty body', '', 400, 'Request decode failed: EOF'],
    ['truncated JSON', '{"Name":', 400, /^Request decode failed: /],
    ['no name', {}, 400, 'Missing service name'],
    ['an unknown field', { Name: n, Foo: 1 }, 400, 'Request decode failed: json: unknown field "Foo"'],
    ['a string port', { Name: n, Port: '80' }, 400, /^Request decode failed: json: cannot unmarshal string into Go struct field \S*Port of type int$/],
    ['the any address', { Name: n, Address: '0.0.0.0' }, 400, 'Invalid service address'],
    ['an HTTP check without Interval', { Name: n, Check: { HTTP: 'http://127.0.0.1:1/' } }, 400, /^Invalid check: Interval must be > 0 for Script, HTTP/],
    ['a check of no kind', { Name: n, Check: { Name: 'c' } }, 400, 'Invalid check: TTL must be > 0 for TTL checks'],
    ['both TTL and Interval', { Name: n, Check: { TTL: '10s', Interval: '10s', HTTP: 'http://x/' } }, 400, 'Invalid check: Interval and TTL cannot both be specified'],
    ['a bad Status', { Name: n, Check: { TTL: '10s', Status: 'ok' } }, 400, "Status for checks must 'passing', 'warning', 'critical'"],
    ['a bad duration', { Name: n, Check: { TTL: 'ten' } }, 400, 'Request decode failed: time: invalid duration "ten"'],
    ['a duration without unit', { Name: n, Checks: [{ TTL: '10' }] }, 400, 'Request decode failed: time: missing unit in duration "10"'],
    ['a bad Meta key', { Name: n, Meta: { 'bad key': 'v' } }, 400, "Invalid Service Meta: Couldn't load metadata pair ('bad key', 'v'): Key contains invalid characters"],
    ['a reserved Meta key', { Name: n, Meta: { 'consul-zone': 'a' } }, 400, "Invalid Service Meta: Couldn't load metadata pair ('consul-zone', 'a'): Key prefix 'consul-' is reserved for internal use"],
    ['a zero passing weight', { Name: n, Weights: { Passing: 0, Warning: 1 } }, 400, 'Invalid Weights: Passing must be greater than 0'],
    ['a script check', { Name: n, Check: { Args: ['true'], Interval: '10s' } }, 500, /^Scripts are disabled on this agent/]
  ]
  for (const [what, body, status, text] of cases) {
    const r = await a.put('/v1/agent/service/register', body)
    t.equal(r.status, status, `${what}: ${status}`)
    if (typeof text === 'string') t.equal(r.text, text, `${what}: text`)
    else t.match(r.text, text, `${what}: text`)
    t.match(r.headers['content-type'], /^text\/plain/, `${what}: plain text`)
  }
  const services = (await a.get('/v1/agent/services')).json
  t.notOk(Object.values(services).some((s: any) => s.Service === n), 'nothing was registered')

  const wrongMethod = await a.get('/v1/agent/service/register')
  t.equal(wrongMethod.status, 405)
  t.equal(wrongMethod.text, 'method GET not allowed')
  t.equal(wrongMethod.headers.allow, 'OPTIONS,PUT')
})

t.test('deregister: the service and its checks go; an unknown ID is a 404 with Consul\'s text', async t => {
  const a = await agent(t)
  const n = a.name('dereg')
  await a.register({ Name: n, Check: { TTL: '10s' } })
  const r = await a.put(`/v1/agent/service/deregister/${n}`)
  t.equal(r.status, 200)
  t.equal(r.text, '')
  t.equal((await a.get('/v1/agent/services')).json[n], undefined)
  t.equal((await a.get('/v1/agent/checks')).json[`service:${n}`], undefined)
  const again = await a.put(`/v1/agent/service/deregister/${n}`)
  t.equal(again.status, 404)
  t.equal(again.text, `Unknown service ID "${n}". Ensure that the service ID is passed, not the service name.`)
})

t.test('TTL checks: pass/warn/fail and update set status and output; a missed TTL is critical; bad IDs fail like Consul', async t => {
  const a = await agent(t)
  const n = a.name('ttl')
  await a.register({ Name: n, Check: { TTL: '30s' } })
  const check = async (id = `service:${n}`): Promise<any> => (await a.get('/v1/agent/checks')).json[id]

  for (const [verb, status, note] of [['pass', 'passing', 'alive'], ['warn', 'warning', 'slow'], ['fail', 'critical', '']]) {
    const r = await a.put(`/v1/agent/check/${verb}/${encodeURIComponent(`service:${n}`)}${note === '' ? '' : `?note=${note}`}`)
    t.equal(r.status, 200, `${verb}: 200`)
    t.match(await check(), { Status: status, Output: note }, `${verb}: ${status}, the note as output`)
  }
  const update = await a.put(`/v1/agent/check/update/service:${n}`, { Status: 'passing', Output: 'via update' })
  t.equal(update.status, 200)
  t.match(await check(), { Status: 'passing', Output: 'via update' })
  const badStatus = await a.put(`/v1/agent/check/update/service:${n}`, { Status: 'bogus' })
  t.equal(badStatus.status, 400)
  t.equal(badStatus.text, "Invalid check status: 'bogus'")

  const unknown = await a.put(`/v1/agent/check/pass/no-such-${n}`)
  t.equal(unknown.status, 404)
  t.equal(unknown.text, `Unknown check ID "no-such-${n}". Ensure that the check ID is passed, not the check name.`)
  const h = a.name('not-ttl')
  await a.register({ Name: h, Check: { HTTP: 'http://127.0.0.1:1/', Interval: '10s' } })
  const notTtl = await a.put(`/v1/agent/check/pass/service:${h}`)
  t.equal(notTtl.status, 500)
  t.equal(notTtl.text, `CheckID "service:${h}" does not have associated TTL`)

  const short = a.name('ttl-short')
  await a.register({ Name: short, Check: { TTL: '300ms', Status: 'passing' } })
  await a.put(`/v1/agent/check/pass/service:${short}?note=last%20words`)
  const expired = await eventually('the TTL to expire', async () => {
    const c = await check(`service:${short}`)
    return c?.Status === 'critical' ? c : undefined
  }, 3000)
  t.equal(expired.Output, 'TTL expired (last output before timeout follows): last words')
})

t.test('maintenance: enable adds the _service_maintenance:<id> critical check, disable removes it', async t => {
  const a = await agent(t)
  const n = a.name('maint')
  await a.register({ Name: n, Check: { TTL: '30s', Status: 'passing' } })
  const path = `/v1/agent/service/maintenance/${n}`

  const missing = await a.put(path)
  t.strictSame([missing.status, missing.text], [400, 'Missing value for enable'])
  const invalid = await a.put(`${path}?enable=maybe`)
  t.strictSame([invalid.status, invalid.text], [400, 'Invalid value for enable: "maybe"'])
  const unknown = await a.put(`/v1/agent/service/maintenance/no-such-${n}?enable=true`)
  t.strictSame([unknown.status, unknown.text], [404, `Unknown service ID "no-such-${n}". Ensure that the service ID is passed, not the service name.`])

  t.equal((await a.put(`${path}?enable=true&reason=deploying`)).status, 200)
  const maint = (await a.get('/v1/agent/checks')).json[`_service_maintenance:${n}`]
  t.match(maint, { CheckID: `_service_maintenance:${n}`, Name: 'Service Maintenance Mode', Status: 'critical', Notes: 'deploying', ServiceID: n, ServiceName: n, Type: 'maintenance' })
  t.strictSame((await a.get(`/v1/health/service/${n}?passing`)).json, [], 'out of ?passing')
  const all = (await a.get(`/v1/health/service/${n}`)).json
  t.ok(all[0].Checks.some((c: any) => c.CheckID === `_service_maintenance:${n}` && c.Status === 'critical'), 'its entry carries the check')

  t.equal((await a.put(`${path}?enable=false`)).status, 200)
  t.equal((await a.get('/v1/agent/checks')).json[`_service_maintenance:${n}`], undefined)
  t.equal((await a.get(`/v1/health/service/${n}?passing`)).json.length, 1, 'back in ?passing')

  t.equal((await a.put(`${path}?enable=1`)).status, 200, 'enable takes Go\'s booleans')
  t.equal((await a.get('/v1/agent/checks')).json[`_service_maintenance:${n}`].Notes,
    'Maintenance mode is enabled for this service, but no reason was provided. This is a default message.')
})

t.test('health/service: Consul\'s entries and headers; ?passing, ?tag, ?dc, ?stale; parameter errors', async t => {
  const a = await agent(t)
  const n = a.name('health')
  await a.register({ Name: n, ID: `${n}-a`, Tags: ['V1', 'primary'], Address: '127.0.0.1', Port: 9001, Meta: { zone: 'a' }, Check: { TTL: '30s', Status: 'passing' } })
  await a.register({ Name: n, ID: `${n}-b`, Tags: ['v2'], Port: 9002, Check: { TTL: '30s' } })

  const r = await a.get(`/v1/health/service/${n}`)
  t.equal(r.status, 200)
  t.match(r.headers, { 'content-type': /^application\/json/, 'x-consul-knownleader': 'true', 'x-consul-lastcontact': '0', 'x-consul-effective-consistency': 'leader' })
  t.ok(index(r) >= 1, 'an X-Consul-Index')
  t.strictSame(r.json.map((e: any) => e.Service.ID), [`${n}-a`, `${n}-b`], 'ordered by service ID')
  const [first] = r.json
  t.strictSame(Object.keys(first), ['Node', 'Service', 'Checks'])
  fields(t, first.Node, NODE, 'Node')
  t.match(first.Node, { Address: String, Datacenter: String, TaggedAddresses: { lan: String, wan: String } })
  fields(t, first.Service, NODE_SERVICE, 'Service')
  t.match(first.Service, {
    ID: `${n}-a`, Service: n, Address: '127.0.0.1', Meta: { zone: 'a' }, Port: 9001, Weights: { Passing: 1, Warning: 1 },
    EnableTagOverride: false, TaggedAddresses: { lan_ipv4: { Address: '127.0.0.1', Port: 9001 } }, Connect: {}, PeerName: ''
  })
  t.ok(first.Service.CreateIndex >= 1 && first.Service.ModifyIndex >= first.Service.CreateIndex, 'raft indexes')
  t.equal(first.Checks[0].CheckID, 'serfHealth', 'the node check first')
  t.match(first.Checks[0], { Name: 'Serf Health Status', Status: 'passing', ServiceID: '', ServiceName: '' })
  fields(t, first.Checks[1], HEALTH_CHECK, 'a service check')
  t.match(first.Checks[1], { CheckID: `service:${n}-a`, Status: 'passing', ServiceID: `${n}-a`, ServiceName: n, Type: 'ttl' })
  t.strictSame(first.Checks[1].ServiceTags, ['V1', 'primary'])
  t.equal(r.json[1].Service.Meta, null, 'no Meta: null in the catalog')
  t.equal(r.json[1].Service.TaggedAddresses, undefined, 'no address: no TaggedAddresses')

  const ids = async (query: string): Promise<string[]> => (await a.get(`/v1/health/service/${n}?${query}`)).json.map((e: any) => e.Service.ID)
  t.strictSame(await ids('passing'), [`${n}-a`], '?passing drops entries with any non-passing check')
  t.strictSame(await ids('passing=true'), [`${n}-a`])
  t.strictSame(await ids('passing=false'), [`${n}-a`, `${n}-b`])
  t.strictSame(await ids('tag=v1'), [`${n}-a`], 'tags match case-insensitively')
  t.strictSame(await ids('tag=v1&tag=PRIMARY'), [`${n}-a`], 'several tags must all match')
  t.strictSame(await ids('tag=v1&tag=v2'), [])
  t.strictSame(await ids(`dc=${first.Node.Datacenter as string}`), [`${n}-a`, `${n}-b`])
  const stale = await a.get(`/v1/health/service/${n}?stale`)
  t.equal(stale.headers['x-consul-effective-consistency'], 'stale')

  const none = await a.get(`/v1/health/service/${a.name('never')}`)
  t.strictSame([none.status, none.json], [200, []], 'an unknown service is an empty list')
  t.ok(index(none) >= 1, 'with an index')

  const errors: Array<[string, number, string]> = [
    ['passing=maybe', 400, 'Invalid value for ?passing'],
    ['index=1&wait=5', 400, 'Invalid wait time'],
    ['index=abc', 400, 'Invalid index'],
    ['index=-1', 400, 'Invalid index'],
    ['stale&consistent', 400, 'Cannot specify ?stale with ?consistent, conflicting semantics.'],
    ['dc=nowhere', 500, 'No path to datacenter']
  ]
  for (const [query, status, text] of errors) {
    const e = await a.get(`/v1/health/service/${n}?${query}`)
    t.strictSame([e.status, e.text], [status, text], `?${query}`)
  }
})

t.test('blocking queries: held until the service\'s index moves or the wait (plus jitter) ends', async t => {
  const a = await agent(t)
  const n = a.name('block')
  await a.register({ Name: n, ID: `${n}-1`, Check: { TTL: '30s' } })
  const path = `/v1/health/service/${n}`
  const idx = index(await a.get(path))

  let start = Date.now()
  const behind = await a.get(`${path}?index=${idx - 1}&wait=5s`)
  t.ok(Date.now() - start < 1000, 'an index behind the current one answers at once')
  t.equal(index(behind), idx)

  start = Date.now()
  const parked = a.get(`${path}?index=${idx}&wait=5s`)
  await a.parked()
  await a.put(`/v1/agent/check/pass/service:${n}-1?note=up`)
  const woke = await parked
  t.ok(Date.now() - start < 4000, 'a status change answers a parked query')
  t.ok(index(woke) > idx, 'with a higher index')
  t.equal(woke.json[0].Checks[1].Status, 'passing')
  const idx2 = index(woke)

  start = Date.now()
  const timedOut = await a.get(`${path}?index=${idx2}&wait=300ms`)
  const took = Date.now() - start
  t.ok(took >= 290 && took < 300 * (1 + 1 / 16) + 700, `no change: answered after the wait (${took} ms)`)
  t.equal(index(timedOut), idx2, 'with the same index')

  const quiet = a.get(`${path}?index=${idx2}&wait=400ms`)
  await a.parked()
  start = Date.now()
  await a.put(`/v1/agent/check/pass/service:${n}-1?note=still%20up`)
  const notWoken = await quiet
  t.ok(Date.now() - start >= 100, 'an output-only change does not answer a parked query')
  t.equal(index(notWoken), idx2, 'nor move the index')
  t.equal(notWoken.json[0].Checks[1].Output, 'up', 'the catalog keeps the old output (check_update_interval)')
  t.equal((await a.get('/v1/agent/checks')).json[`service:${n}-1`].Output, 'still up', 'while the agent has the new one')

  start = Date.now()
  const ahead = await a.get(`${path}?index=${idx2 + 1_000_000}&wait=200ms`)
  t.ok(Date.now() - start >= 190, 'an index from the future waits')
  t.equal(index(ahead), idx2, 'and answers the current, lower, index: the client resets')

  const later = a.name('later')
  const absent = await a.get(`/v1/health/service/${later}`)
  const waiting = a.get(`/v1/health/service/${later}?index=${index(absent)}&wait=5s`)
  await a.parked()
  start = Date.now()
  await a.register({ Name: later, Check: { TTL: '30s' } })
  const appeared = await waiting
  t.ok(Date.now() - start < 4000, 'a query parked on a service not yet registered is answered when it registers')
  t.equal(appeared.json.length, 1)
  t.ok(index(appeared) > index(absent))

  const gone = a.get(`${path}?index=${idx2}&wait=5s`)
  await a.parked()
  await a.put(`/v1/agent/service/deregister/${n}-1`)
  const last = await gone
  t.strictSame(last.json, [], 'deregistering the last instance answers a parked query with []')
  t.ok(index(last) > idx2, 'and a higher index, never 0')
})

/** An HTTP upstream whose answer the test sets. */
async function upstream (t: Test): Promise<{ url: string, state: { status: number, body: string, hang: boolean, headers: IncomingHttpHeaders } }> {
  const state = { status: 200, body: 'ok', hang: false, headers: {} as IncomingHttpHeaders }
  const server = createServer((req, res) => {
    state.headers = req.headers
    if (state.hang) return
    res.writeHead(state.status, { 'content-type': 'text/plain' })
    res.end(state.body)
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, state }
}

t.test('HTTP checks run on their interval: 2xx passing, 429 warning, other codes and timeouts critical', async t => {
  const a = await agent(t, { minCheckInterval: 50 }) // a real agent floors the interval at 1 s: slower, same results
  const up = await upstream(t)
  const n = a.name('http')
  await a.register({ Name: n, Address: '127.0.0.1', Check: { HTTP: `${up.url}/health`, Interval: '100ms', Timeout: '250ms' } })
  const until = (status: string): Promise<any> => eventually(`the check to turn ${status}`, async () => {
    const c = (await a.get('/v1/agent/checks')).json[`service:${n}`]
    return c?.Status === status ? c : undefined
  })

  let c = await until('passing')
  t.equal(c.Output, `HTTP GET ${up.url}/health: 200 OK Output: ok`)
  t.match(c, { Type: 'http', Interval: '100ms', Timeout: '250ms' })
  t.equal(up.state.headers['user-agent'], 'Consul Health Check')
  t.equal(up.state.headers.accept, 'text/plain, text/*, */*')

  Object.assign(up.state, { status: 429, body: 'slow down' })
  c = await until('warning')
  t.equal(c.Output, `HTTP GET ${up.url}/health: 429 Too Many Requests Output: slow down`)

  Object.assign(up.state, { status: 503, body: 'down' })
  c = await until('critical')
  t.equal(c.Output, `HTTP GET ${up.url}/health: 503 Service Unavailable Output: down`)

  Object.assign(up.state, { status: 200, body: 'ok' })
  await until('passing')
  up.state.hang = true
  c = await until('critical')
  t.match(c.Output, `Get "${up.url}/health": `)
  t.match(c.Output, /Client\.Timeout exceeded/, 'a timeout is critical')

  up.state.hang = false
  await until('passing')
  const entry = await eventually('the catalog to follow', async () => {
    const [e] = (await a.get(`/v1/health/service/${n}?passing`)).json
    return e
  })
  t.equal(entry.Checks[1].Status, 'passing', 'status changes reach health/service')
})

t.test('DeregisterCriticalServiceAfter: the reaper deregisters a service critical that long', { skip: DOUBLE_ONLY }, async t => {
  const a = await agent(t, { reapInterval: 20, deregisterIntervalMin: 0 })
  const n = a.name('reap')
  const keep = a.name('keep')
  const start = Date.now()
  await a.register({ Name: n, Check: { TTL: '50ms', DeregisterCriticalServiceAfter: '100ms' } })
  await a.register({ Name: keep, Check: { TTL: '10s', Status: 'passing', DeregisterCriticalServiceAfter: '100ms' } })
  const before = index(await a.get(`/v1/health/service/${n}`))
  await eventually('the reaper', async () => (await a.get('/v1/agent/services')).json[n] === undefined ? true : undefined, 2000)
  t.ok(Date.now() - start >= 150, 'only once critical (after the TTL) for longer than DeregisterCriticalServiceAfter')
  const after = await a.get(`/v1/health/service/${n}`)
  t.strictSame(after.json, [])
  t.ok(index(after) > before, 'a reaped service moves the index')
  t.ok((await a.get('/v1/agent/services')).json[keep], 'a passing service stays')

  const floored = await agent(t, { reapInterval: 20, deregisterIntervalMin: 400 })
  const m = floored.name('floor')
  await floored.register({ Name: m, Check: { TTL: '20ms', DeregisterCriticalServiceAfter: '10ms' } })
  await sleep(250)
  t.ok((await floored.get('/v1/agent/services')).json[m], 'DeregisterCriticalServiceAfter is floored (check_deregister_interval_min)')
  await eventually('the floored reaper', async () => (await floored.get('/v1/agent/services')).json[m] === undefined ? true : undefined, 2000)
})

t.test('ACLs: writes need the token (header, Bearer or ?token=); reads without one are filtered; unknown tokens are refused',
  { skip: real && REAL_TOKEN === '' ? 'needs CONSUL_HTTP_TOKEN (a management token; acl.default_policy "deny")' : false }, async t => {
    const token = real ? REAL_TOKEN : 'flotilla-secret'
    const a = await agent(t, { token })
    const n = a.name('acl')
    const denied = (what: string): string => `Permission denied: anonymous token lacks permission '${what}' on "${n}". ${ANONYMOUS_HINT}`

    const anonymous = await a.raw('PUT', '/v1/agent/service/register', { Name: n, ID: `${n}-1`, Check: { TTL: '30s' } })
    t.strictSame([anonymous.status, anonymous.text], [403, denied('service:write')], 'no token: the anonymous token may not write')
    for (const [method, path] of [['PUT', '/v1/agent/service/register'], ['GET', '/v1/agent/services'], ['GET', `/v1/health/service/${n}`]]) {
      const r = await a.raw(method as string, path as string, method === 'PUT' ? { Name: n } : undefined, { 'X-Consul-Token': 'not-a-token' })
      t.strictSame([r.status, r.text], [403, 'ACL not found'], `an unknown token: ${method} ${path as string}`)
    }

    await a.register({ Name: n, ID: `${n}-1`, Check: { TTL: '30s' } })
    const bearer = await a.raw('PUT', '/v1/agent/service/register', { Name: n, ID: `${n}-2` }, { Authorization: `Bearer ${token}` })
    t.equal(bearer.status, 200, 'Authorization: Bearer')
    const query = await a.raw('PUT', `/v1/agent/service/register?token=${encodeURIComponent(token)}`, { Name: n, ID: `${n}-3` })
    t.equal(query.status, 200, '?token=')
    await a.put(`/v1/agent/service/deregister/${n}-2`)
    await a.put(`/v1/agent/service/deregister/${n}-3`)

    const services = await a.raw('GET', '/v1/agent/services')
    t.equal(services.status, 200, 'reads without a token are not refused…')
    t.equal(services.json[`${n}-1`], undefined, '…but filtered')
    t.equal(services.headers['x-consul-default-acl-policy'], 'deny')
    t.equal(services.headers['x-consul-results-filtered-by-acls'], undefined, 'and not said so to the anonymous token')
    t.equal((await a.raw('GET', '/v1/agent/checks')).json[`service:${n}-1`], undefined)
    const health = await a.raw('GET', `/v1/health/service/${n}`)
    t.strictSame([health.status, health.json], [200, []], 'health/service without a token: an empty list')
    t.ok(index(health) >= 1)
    t.equal((await a.get(`/v1/health/service/${n}`)).json.length, 1, 'with it: the instance')

    const pass = await a.raw('PUT', `/v1/agent/check/pass/service:${n}-1`)
    t.strictSame([pass.status, pass.text], [403, denied('service:write')])
    const unknownCheck = await a.raw('PUT', `/v1/agent/check/pass/no-such-${n}`)
    t.equal(unknownCheck.status, 404, 'an unknown check is a 404 before any permission check')
    const dereg = await a.raw('PUT', `/v1/agent/service/deregister/${n}-1`)
    t.strictSame([dereg.status, dereg.text], [403, denied('service:write')])
  })

t.test('paths: an unknown endpoint is Consul\'s 404; OPTIONS lists the methods', async t => {
  const a = await agent(t)
  const unknown = await a.get('/v1/agent/no-such-endpoint')
  t.strictSame([unknown.status, unknown.text], [404, 'Invalid URL path: not a recognized HTTP API endpoint\n'])
  const options = await a.raw('OPTIONS', '/v1/agent/service/register')
  t.equal(options.status, 200)
  t.equal(options.headers.allow, 'OPTIONS,PUT')
})

t.test('the double\'s controls: setCheckStatus, failNext, outage/restore, services(), requests(), close()', { skip: DOUBLE_ONLY }, async t => {
  const double = await startConsulDouble({ random: () => 0 })
  t.teardown(() => double.close())
  const get = (path: string): Promise<HttpResult> => http('GET', `${double.url}${path}`)
  const put = (path: string, body?: object): Promise<HttpResult> => http('PUT', `${double.url}${path}`, body)
  await put('/v1/agent/service/register', { Name: 'api', ID: 'api-1', Port: 8080, Check: { TTL: '30s' } })
  const idx = double.index('api')

  const parked = get(`/v1/health/service/api?index=${idx}&wait=5s`)
  await double.waitForBlocked(1)
  t.equal(double.blocked, 1)
  double.setCheckStatus('service:api-1', 'passing', 'set by the test')
  const woke = await parked
  t.ok(index(woke) > idx, 'setCheckStatus moves the index and answers parked queries')
  t.match(woke.json[0].Checks[1], { Status: 'passing', Output: 'set by the test' })
  t.throws(() => double.setCheckStatus('nope', 'passing'), /no check "nope"/)

  t.strictSame(double.services(), [{
    ID: 'api-1', Service: 'api', Tags: [], Address: '', Port: 8080, Meta: {},
    Checks: [{ CheckID: 'service:api-1', Name: "Service 'api' check", Status: 'passing', Output: 'set by the test', Type: 'ttl' }]
  }])

  double.failNext(2, 500)
  const f1 = await get('/v1/agent/services')
  const f2 = await put('/v1/agent/check/pass/service:api-1')
  t.strictSame([f1.status, f1.text, f2.status], [500, 'No cluster leader', 500], 'failNext answers the next n requests')
  t.equal((await get('/v1/agent/services')).status, 200, 'then answers again')
  double.failNext(1, 429, { route: 'GET /v1/health/service/:service', body: 'rate limited' })
  t.equal((await get('/v1/agent/services')).status, 200, 'a route-scoped failure leaves other routes alone')
  t.strictSame(await get('/v1/health/service/api').then(r => [r.status, r.text]), [429, 'rate limited'])

  const cut = get(`/v1/health/service/api?index=${double.index('api')}&wait=5s`)
  await double.waitForBlocked(1)
  await double.outage()
  await t.rejects(cut, 'an outage cuts parked queries')
  await t.rejects(get('/v1/agent/services'), { code: 'ECONNREFUSED' }, 'and refuses connections')
  const port = double.port
  await double.restore()
  t.equal(double.port, port, 'restore listens on the same port')
  t.ok((await get('/v1/agent/services')).json['api-1'], 'with the state kept')

  t.strictSame(double.requests(), {
    'PUT /v1/agent/service/register': 1,
    'GET /v1/health/service/:service': 3,
    'GET /v1/agent/services': 4,
    'PUT /v1/agent/check/pass/:check_id': 1
  }, 'requests by route, failed ones included, refused connections not')

  const lastQuery = get(`/v1/health/service/api?index=${double.index('api')}&wait=5s`)
  await double.waitForBlocked(1)
  await double.close()
  await t.rejects(lastQuery, 'close() cuts parked queries')
})

t.test('Go duration formats used in bodies and answers', { skip: DOUBLE_ONLY }, async t => {
  t.equal(parseGoDuration('1m30s'), 90_000)
  t.equal(parseGoDuration('1.5s'), 1500)
  t.equal(parseGoDuration('250ms'), 250)
  t.equal(parseGoDuration('-2h'), -7_200_000)
  t.equal(parseGoDuration('0'), 0)
  t.throws(() => parseGoDuration('10'), { message: 'time: missing unit in duration "10"' })
  t.throws(() => parseGoDuration('5x'), { message: 'time: unknown unit "x" in duration "5x"' })
  t.throws(() => parseGoDuration(''), { message: 'time: invalid duration ""' })
  t.strictSame(
    [0, 0.5, 250, 1000, 1500, 60_000, 90_000, 3_600_000, 5_430_000].map(formatGoDuration),
    ['0s', '500µs', '250ms', '1s', '1.5s', '1m0s', '1m30s', '1h0m0s', '1h30m30s'])
})
