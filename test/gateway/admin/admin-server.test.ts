/**
 * The admin API (`gateway/admin/admin-server.ts`, contract in `api.ts`) through a real gateway on port 0 with fake
 * workers: the bearer token, every endpoint route (list, get, add, drain, undrain, remove, weight), every canary
 * route, the effective config, and the answers to bad input, unknown names and wrong methods. Issue 14: calls a web
 * page could make (Origin, Sec-Fetch-Site, a DNS-rebinding Host, a change without `Content-Type: application/json`)
 * are refused, and server names, in the fleet file and here, keep to one rule.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createConnection } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { servers, testConfig, worker } from '../fixtures/gateway-config.ts'
import { runFleetCommand } from '../../../gateway/admin/fleet-cli.ts'
import { startGateway, type GatewayOptions, type RunningGateway } from '../../../gateway/main.ts'
import { createLogger, silentLogger } from '../../../common/logger.ts'
import { closedPort, send, type Answer, type FakeWorker } from '../fixtures/fake-worker.ts'

const TOKEN = 's3cret-token'

async function gateway (t: Test, yaml: string, options: Partial<GatewayOptions> = {}): Promise<RunningGateway> {
  const g = await startGateway({
    grpcPort: -1,
    config: testConfig(yaml),
    logger: silentLogger(),
    httpPort: 0,
    metricsPort: 0,
    adminPort: 0,
    env: {},
    deps: { random: () => 0 },
    ...options
  })
  t.teardown(() => g.close())
  return g
}

/**
 * One admin call; `body` an object is sent as JSON, a string as it is. Every method but GET carries
 * `Content-Type: application/json`, as `flotilla fleet` sends it; `headers` may replace it.
 */
function admin (g: RunningGateway, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const raw = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body)
  return send(g.adminPort, method, path, {
    headers: { ...(method === 'GET' ? {} : { 'content-type': 'application/json' }), ...headers },
    ...(raw === undefined ? {} : { body: raw })
  })
}

function json (answer: Answer): any {
  return JSON.parse(answer.body)
}

function errorOf (answer: Answer): string {
  return String((JSON.parse(answer.body) as { error?: unknown }).error)
}

function infer (g: RunningGateway, model = 'm'): Promise<Answer> {
  return send(g.httpPort, 'POST', `/v2/models/${model}/infer`, { headers: { 'content-type': 'application/json' }, body: '{"inputs":[]}' })
}

function servedBy (answer: Answer): string {
  return String(answer.headers['x-flotilla-endpoint'])
}

/** Whether something accepts connections on 127.0.0.1:port. */
function listening (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port })
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => { resolve(false) })
  })
}

function tempDir (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'flotilla-admin-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** Waits until the admin API shows the endpoint draining. */
async function draining (g: RunningGateway, name: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (json(await admin(g, 'GET', `/v1/endpoints/${name}`)).state === 'draining') return
    await sleep(5)
  }
  throw new Error(`${name} never started draining`)
}

/** Waits until the worker has received `n` requests (the gateway's request is then in flight there). */
async function arrived (w: FakeWorker, n = 1): Promise<void> {
  for (let i = 0; i < 200 && w.seen.length < n; i++) await sleep(5)
  if (w.seen.length < n) throw new Error(`${w.name} got ${w.seen.length} requests, not ${n}`)
}

t.test('token from FLOTILLA_ADMIN_TOKEN: 401 with WWW-Authenticate without one, 403 for a wrong one', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, servers({ name: 'a', port: a.port }), { env: { FLOTILLA_ADMIN_TOKEN: ` ${TOKEN}\n` } })

  const missing = await admin(g, 'GET', '/v1/endpoints')
  t.equal(missing.status, 401)
  t.match(missing.headers['www-authenticate'], /^Bearer\b/)
  t.match(missing.headers['content-type'], /application\/json/)
  t.match(errorOf(missing), /Authorization: Bearer <token>/)

  const notBearer = await admin(g, 'GET', '/v1/endpoints', undefined, { authorization: `Basic ${TOKEN}` })
  t.equal(notBearer.status, 401, 'another scheme is no token')

  const wrong = await admin(g, 'GET', '/v1/endpoints', undefined, { authorization: 'Bearer nope' })
  t.equal(wrong.status, 403)
  t.equal(errorOf(wrong), 'the admin token does not match')
  t.equal(wrong.headers['www-authenticate'], undefined)

  const prefix = await admin(g, 'GET', '/v1/endpoints', undefined, { authorization: `Bearer ${TOKEN}x` })
  t.equal(prefix.status, 403, 'the token with a character more is wrong')

  const right = await admin(g, 'GET', '/v1/endpoints', undefined, { authorization: `Bearer ${TOKEN}` })
  t.equal(right.status, 200, 'the env value is trimmed')
  t.equal(json(right).endpoints[0].name, 'a')
  const lower = await admin(g, 'GET', '/v1/endpoints', undefined, { authorization: `bearer ${TOKEN}` })
  t.equal(lower.status, 200, 'the scheme is case-insensitive')

  const writes = await admin(g, 'PUT', '/v1/endpoints/a/weight', { weight: 7 })
  t.equal(writes.status, 401, 'a write without a token changes nothing')
  t.equal(json(await admin(g, 'GET', '/v1/endpoints/a', undefined, { authorization: `Bearer ${TOKEN}` })).configured_weight, 1)

  const unknownPath = await admin(g, 'GET', '/v1/nothing-here')
  t.equal(unknownPath.status, 401, 'even an unknown path needs the token first')
})

t.test('token from gateway.admin_token_file wins over the environment', async (t) => {
  const a = await worker(t, 'a')
  const dir = tempDir(t)
  const file = join(dir, 'token')
  writeFileSync(file, `${TOKEN}\n`)
  const g = await gateway(t, `${servers({ name: 'a', port: a.port })}gateway: { admin_token_file: '${file}' }\n`,
    { env: { FLOTILLA_ADMIN_TOKEN: 'from-env' } })
  t.equal((await admin(g, 'GET', '/v1/endpoints')).status, 401)
  t.equal((await admin(g, 'GET', '/v1/endpoints', undefined, { authorization: 'Bearer from-env' })).status, 403)
  t.equal((await admin(g, 'GET', '/v1/endpoints', undefined, { authorization: `Bearer ${TOKEN}` })).status, 200)
})

t.test('no token on loopback: calls need none', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, servers({ name: 'a', port: a.port }), { env: { FLOTILLA_ADMIN_TOKEN: '  ' } })
  t.equal((await admin(g, 'GET', '/v1/endpoints')).status, 200, 'a blank env value is no token')
})

t.test('a non-loopback admin host without a token is refused, and nothing is left listening', async (t) => {
  const a = await worker(t, 'a')
  const [httpPort, metricsPort, adminPort] = [await closedPort(), await closedPort(), await closedPort()]
  await t.rejects(startGateway({
    grpcPort: -1,
    config: testConfig(servers({ name: 'a', port: a.port })),
    logger: silentLogger(),
    httpPort,
    metricsPort,
    adminPort,
    adminHost: '0.0.0.0',
    env: {}
  }), { code: 'GW_ERR_ADMIN_TOKEN_REQUIRED', message: /0\.0\.0\.0 is not loopback-only.*admin_token_file or FLOTILLA_ADMIN_TOKEN/ })
  for (const port of [httpPort, metricsPort, adminPort]) t.notOk(await listening(port), `nothing listens on ${port}`)

  // The same host from the fleet file, with a token: it starts, and the token is required.
  const g = await gateway(t, `${servers({ name: 'a', port: a.port })}gateway: { admin_host: 0.0.0.0 }\n`,
    { env: { FLOTILLA_ADMIN_TOKEN: TOKEN } })
  t.equal((await admin(g, 'GET', '/v1/endpoints')).status, 401)
  t.equal((await admin(g, 'GET', '/v1/endpoints', undefined, { authorization: `Bearer ${TOKEN}` })).status, 200)

  // The admin listener turned off needs no token, wherever it would have been bound.
  const off = await gateway(t, servers({ name: 'a', port: a.port }), { adminHost: '0.0.0.0', adminPort: -1 })
  t.equal(off.adminPort, -1)
})

t.test('an empty, blank or missing token file is refused at start', async (t) => {
  const a = await worker(t, 'a')
  const dir = tempDir(t)
  const empty = join(dir, 'empty')
  writeFileSync(empty, '')
  const blank = join(dir, 'blank')
  writeFileSync(blank, ' \n\t\n')
  const missing = join(dir, 'missing')
  const adminPort = await closedPort()
  for (const [file, why] of [[empty, /the file is empty/], [blank, /the file is empty/], [missing, /ENOENT/]] as const) {
    await t.rejects(startGateway({
      grpcPort: -1,
      config: testConfig(`${servers({ name: 'a', port: a.port })}gateway: { admin_token_file: '${file}' }\n`),
      logger: silentLogger(),
      httpPort: 0,
      metricsPort: 0,
      adminPort,
      env: { FLOTILLA_ADMIN_TOKEN: TOKEN }
    }), { code: 'GW_ERR_ADMIN_TOKEN_FILE', message: new RegExp(`cannot read the admin token file '${file}': ${why.source}`) })
  }
  t.notOk(await listening(adminPort))
})

t.test('list and get show each endpoint with state, source, configured weight and drain', async (t) => {
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const g = await gateway(t, servers({ name: 'a', port: a.port, extra: ', weight: 3' }, { name: 'b', port: b.port, models: ['m', 'n'], extra: ', versions: [1, 2]' }))
  const list = await admin(g, 'GET', '/v1/endpoints')
  t.equal(list.status, 200)
  t.match(list.headers['content-type'], /application\/json/)
  t.match(json(list), {
    endpoints: [
      { name: 'a', origin: `http://127.0.0.1:${a.port}`, state: 'active', source: 'file', weight: 3, configured_weight: 3, models: ['m'], versions: null, drain: null, in_flight: 0 },
      { name: 'b', state: 'active', source: 'file', models: ['m', 'n'], versions: [1, 2], drain: null }
    ]
  })
  t.equal(json(list).endpoints.length, 2)

  const one = await admin(g, 'GET', '/v1/endpoints/b')
  t.equal(one.status, 200)
  t.strictSame(json(one), json(list).endpoints[1])

  const unknown = await admin(g, 'GET', '/v1/endpoints/zz')
  t.equal(unknown.status, 404)
  t.equal(errorOf(unknown), "no endpoint named 'zz' in the fleet (endpoints: a, b)")
  for (const [method, path, body] of [
    ['POST', '/v1/endpoints/zz/drain', undefined],
    ['GET', '/v1/endpoints/zz/drain', undefined],
    ['POST', '/v1/endpoints/zz/undrain', undefined],
    ['DELETE', '/v1/endpoints/zz', undefined],
    ['PUT', '/v1/endpoints/zz/weight', { weight: 2 }]
  ] as const) {
    const answer = await admin(g, method, path, body)
    t.equal(answer.status, 404, `${method} ${path}`)
    t.match(errorOf(answer), /no endpoint named 'zz' in the fleet \(endpoints: a, b\)/)
  }
})

t.test('add with explicit models: 201, traffic reaches it at once, and the config shows it', async (t) => {
  const a = await worker(t, 'a')
  const c = await worker(t, 'c')
  const g = await gateway(t, servers({ name: 'a', port: a.port }))
  const added = await admin(g, 'POST', '/v1/endpoints', { name: 'c', host: '127.0.0.1', port: c.port, models: ['m', 'fresh'], weight: 2, labels: { zone: 'z1' }, max_in_flight: 4 })
  t.equal(added.status, 201, added.body)
  t.match(json(added), { name: 'c', state: 'active', source: 'admin', configured_weight: 2, weight: 2, models: ['m', 'fresh'], max_in_flight: 4, drain: null })

  const seen = new Set<string>()
  for (let i = 0; i < 6; i++) seen.add(servedBy(await infer(g)))
  t.strictSame([...seen].sort(), ['a', 'c'], 'm is now served by both')
  const fresh = await infer(g, 'fresh')
  t.equal(fresh.status, 200)
  t.equal(servedBy(fresh), 'c', 'a model only the new server serves is routed to it')

  const list = json(await admin(g, 'GET', '/v1/endpoints'))
  t.strictSame(list.endpoints.map((e: { name: string, source: string }) => [e.name, e.source]), [['a', 'file'], ['c', 'admin']])

  const cfg = await admin(g, 'GET', '/v1/config')
  t.equal(cfg.status, 200)
  const servers_ = json(cfg).inference_servers as Array<Record<string, unknown>>
  t.match(servers_.find((s) => s.name === 'c'), { name: 'c', host: '127.0.0.1', port: c.port, models: ['m', 'fresh'], weight: 2, labels: { zone: 'z1' }, max_in_flight: 4, protocol: 'http' })
  t.equal(json(cfg).load_balancer.type, 'round_robin', 'the rest of the file is there too')
})

t.test('add with discovery: the worker\'s READY models; a failing discovery is a 502', async (t) => {
  const a = await worker(t, 'a')
  const d = await worker(t, 'd', {
    index: [
      { name: 'm', version: '1', state: 'READY' },
      { name: 'm', version: '2', state: 'READY' },
      { name: 'n', state: 'READY' },
      { name: 'broken', version: '1', state: 'UNAVAILABLE', reason: 'load failed' },
      { name: 'plain' }
    ]
  })
  const g = await gateway(t, servers({ name: 'a', port: a.port }))
  const added = await admin(g, 'POST', '/v1/endpoints', { name: 'd', host: '127.0.0.1', port: d.port })
  t.equal(added.status, 201, added.body)
  t.strictSame(json(added).models, ['m', 'n', 'plain'], 'READY (or stateless) entries once each, UNAVAILABLE left out')
  const ask = d.seen.find((r) => r.url === '/v2/repository/index')
  t.ok(ask, 'the worker\'s index was asked')
  t.strictSame(JSON.parse(ask?.body.toString() ?? 'null'), { ready: true })
  t.equal(servedBy(await infer(g, 'n')), 'd')

  const e = await worker(t, 'e', { index: [{ name: 'x', version: '1', state: 'READY' }] })
  const explicit = await admin(g, 'POST', '/v1/endpoints', { name: 'e', host: '127.0.0.1', port: e.port, models: 'discover' })
  t.equal(explicit.status, 201)
  t.strictSame(json(explicit).models, ['x'], '"discover" is the same as leaving models out')

  const refusing = await worker(t, 'refusing', { indexError: 'no index here' })
  const failed = await admin(g, 'POST', '/v1/endpoints', { name: 'r', host: '127.0.0.1', port: refusing.port })
  t.equal(failed.status, 502)
  t.match(errorOf(failed), /could not discover the models of 'r' from its repository index: its index answered HTTP 400.*no index here.*name them with 'models' instead/)

  const nothingReady = await worker(t, 'idle', { index: [{ name: 'm', version: '1', state: 'UNAVAILABLE' }] })
  const idle = await admin(g, 'POST', '/v1/endpoints', { name: 'idle', host: '127.0.0.1', port: nothingReady.port })
  t.equal(idle.status, 502)
  t.match(errorOf(idle), /could not discover the models of 'idle'.*it has no READY model/)

  const down = await admin(g, 'POST', '/v1/endpoints', { name: 'down', host: '127.0.0.1', port: await closedPort() })
  t.equal(down.status, 502)
  t.match(errorOf(down), /could not discover the models of 'down'.*ECONNREFUSED/)

  const names = json(await admin(g, 'GET', '/v1/endpoints')).endpoints.map((x: { name: string }) => x.name)
  t.strictSame(names, ['a', 'd', 'e'], 'failed additions left nothing behind')
})

t.test('add refuses bad input with a message that says what to fix', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, servers({ name: 'a', port: a.port }))
  const base = { name: 'c', host: '127.0.0.1', port: a.port, models: ['m'] }

  const duplicate = await admin(g, 'POST', '/v1/endpoints', { ...base, name: 'a' })
  t.equal(duplicate.status, 409)
  t.match(errorOf(duplicate), /a server named 'a' is already in the fleet; remove it first or pick another name/)

  const cases: Array<[string, unknown, RegExp]> = [
    ['port 70000', { ...base, port: 70000 }, /port.*70000|70000.*port/],
    ['port 0', { ...base, port: 0 }, /port/],
    ['weight 1001', { ...base, weight: 1001 }, /weight.*1001|1001.*weight/],
    ['host with a scheme', { ...base, host: 'http://127.0.0.1' }, /'http:\/\/127\.0\.0\.1' must be a host name or IP address alone: no scheme/],
    ['unknown key', { ...base, colour: 'blue' }, /colour/],
    ['no name', { host: '127.0.0.1', port: a.port, models: ['m'] }, /name/],
    ['empty models', { ...base, models: [] }, /at least one model/],
    ['models a number', { ...base, models: 5 }, /models must be a list of model names or "discover", got 5/],
    ['a model with a slash', { ...base, models: ['a/b'] }, /slashes/],
    ['an array', [base], /the body must be a JSON object/],
    ['null', 'null', /the body must be a JSON object/],
    ['non-JSON body', '{"name": "c",', /the body is not valid JSON/],
    ['empty body', '', /this call needs a JSON body/]
  ]
  for (const [what, body, message] of cases) {
    const answer = await admin(g, 'POST', '/v1/endpoints', body)
    t.equal(answer.status, 400, `${what}: ${answer.body}`)
    t.match(answer.headers['content-type'], /application\/json/)
    t.match(errorOf(answer), message, what)
  }
  const noBody = await send(g.adminPort, 'POST', '/v1/endpoints', { headers: { 'content-type': 'application/json' } })
  t.equal(noBody.status, 400, 'no body at all')
  t.match(errorOf(noBody), /this call needs a JSON body/)
  const noType = await send(g.adminPort, 'POST', '/v1/endpoints')
  t.equal(noType.status, 415, 'no body and no content-type: the content-type is asked for first')

  t.equal(json(await admin(g, 'GET', '/v1/endpoints')).endpoints.length, 1, 'nothing was added')
  t.equal(a.seen.length, 0, 'and no worker was asked anything')
})

t.test('drain: 202 at once, new requests go elsewhere, ?wait=1 answers 200 once it completed; undrain', async (t) => {
  const slow = await worker(t, 'slow', { inferDelayMs: 300 })
  const b = await worker(t, 'b')
  const g = await gateway(t, servers({ name: 'slow', port: slow.port }, { name: 'b', port: b.port }))
  const pending = infer(g) // random() = 0: the rotation starts with 'slow'
  await arrived(slow)

  const started = await admin(g, 'POST', '/v1/endpoints/slow/drain', { timeout_ms: 5000 })
  t.equal(started.status, 202, started.body)
  t.match(json(started), { name: 'slow', state: 'draining', in_flight: 1, timeout_ms: 5000, done: false, completed: false })

  const during = json(await admin(g, 'GET', '/v1/endpoints/slow/drain'))
  t.match(during, { name: 'slow', state: 'draining', done: false })
  t.equal(json(await admin(g, 'GET', '/v1/endpoints/slow')).state, 'draining')
  for (let i = 0; i < 4; i++) t.equal(servedBy(await infer(g)), 'b', 'a draining endpoint gets no new request')

  const again = await admin(g, 'POST', '/v1/endpoints/slow/drain?wait=1')
  t.equal(again.status, 200)
  t.match(json(again), { name: 'slow', state: 'drained', in_flight: 0, done: true, completed: true, timeout_ms: 5000 })
  const first = await pending
  t.equal(first.status, 200, 'the request in flight finished')
  t.equal(servedBy(first), 'slow')

  const status = json(await admin(g, 'GET', '/v1/endpoints/slow/drain'))
  t.match(status, { state: 'drained', done: true, completed: true })
  t.match(json(await admin(g, 'GET', '/v1/endpoints/slow')), { state: 'drained', drain: { done: true, completed: true } })

  const undrained = await admin(g, 'POST', '/v1/endpoints/slow/undrain')
  t.equal(undrained.status, 200)
  t.match(json(undrained), { name: 'slow', state: 'active', drain: null })
  const seen = new Set<string>()
  for (let i = 0; i < 4; i++) seen.add(servedBy(await infer(g)))
  t.ok(seen.has('slow'), 'an undrained endpoint takes traffic again')

  const never = json(await admin(g, 'GET', '/v1/endpoints/b/drain'))
  t.strictSame(never, { name: 'b', state: 'active', in_flight: 0, started_ms_ago: 0, timeout_ms: 0, done: false, completed: false },
    'an endpoint never drained has an idle status')

  const idle = await admin(g, 'POST', '/v1/endpoints/b/drain?wait=1')
  t.equal(idle.status, 200)
  t.match(json(idle), { state: 'drained', done: true, completed: true, timeout_ms: 30000 }, 'gateway.drain_timeout_ms by default')

  for (const bad of [{ timeout_ms: -1 }, { timeout_ms: 1.5 }, { timeout_ms: 'soon' }]) {
    const answer = await admin(g, 'POST', '/v1/endpoints/slow/drain', bad)
    t.equal(answer.status, 400, JSON.stringify(bad))
    t.match(errorOf(answer), /timeout_ms must be an integer in 0\.\.2147483647/)
  }
  t.equal(json(await admin(g, 'GET', '/v1/endpoints/slow')).state, 'active', 'a refused drain did not start')
  const notJson = await admin(g, 'POST', '/v1/endpoints/slow/drain', 'nope')
  t.equal(notJson.status, 400)
  t.match(errorOf(notJson), /not valid JSON/)
})

t.test('a drain that times out is done but not completed', async (t) => {
  const slow = await worker(t, 'slow', { inferDelayMs: 400 })
  const g = await gateway(t, servers({ name: 'slow', port: slow.port }))
  const pending = infer(g)
  await arrived(slow)
  const answer = await admin(g, 'POST', '/v1/endpoints/slow/drain?wait=1', { timeout_ms: 50 })
  t.equal(answer.status, 200)
  t.match(json(answer), { state: 'drained', done: true, completed: false, in_flight: 1, timeout_ms: 50 })
  t.equal((await pending).status, 200, 'the request in flight still finished')
})

t.test('remove: drains first unless forced; the endpoint leaves the fleet and the config', async (t) => {
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const slow = await worker(t, 'slow', { inferDelayMs: 200 })
  const g = await gateway(t, servers({ name: 'a', port: a.port }, { name: 'b', port: b.port }, { name: 'slow', port: slow.port, models: ['s'] }))

  const removed = await admin(g, 'DELETE', '/v1/endpoints/b')
  t.equal(removed.status, 200)
  t.strictSame(json(removed), { removed: 'b', drained: true, in_flight: 0 })
  t.equal((await admin(g, 'GET', '/v1/endpoints/b')).status, 404)
  for (let i = 0; i < 3; i++) t.equal(servedBy(await infer(g)), 'a')
  t.notOk(json(await admin(g, 'GET', '/v1/config')).inference_servers.some((s: { name: string }) => s.name === 'b'))

  // A non-forced removal waits for the request in flight.
  const pending = infer(g, 's')
  await arrived(slow)
  const t0 = Date.now()
  const waited = await admin(g, 'DELETE', '/v1/endpoints/slow?timeout_ms=5000')
  t.ok(Date.now() - t0 >= 50, 'it waited for the request in flight')
  t.strictSame(json(waited), { removed: 'slow', drained: true, in_flight: 0 })
  t.equal((await pending).status, 200)

  const added = await admin(g, 'POST', '/v1/endpoints', { name: 'slow', host: '127.0.0.1', port: slow.port, models: ['s'] })
  t.equal(added.status, 201, 'the name is free again')
  const pending2 = infer(g, 's')
  await arrived(slow, 2)
  const forced = await admin(g, 'DELETE', '/v1/endpoints/slow?force=1')
  t.equal(forced.status, 200)
  t.strictSame(json(forced), { removed: 'slow', drained: false, in_flight: 1 }, 'forced: no drain, the request is still in flight')
  t.equal((await pending2).status, 200, 'and it still completes on its connection')
  t.equal((await infer(g, 's')).status, 404, 'a model no server serves any more')

  const bad = await admin(g, 'DELETE', '/v1/endpoints/a?timeout_ms=soon')
  t.equal(bad.status, 400)
  t.match(errorOf(bad), /timeout_ms must be a whole number of milliseconds, got 'soon'/)
  t.equal(json(await admin(g, 'GET', '/v1/endpoints')).endpoints.length, 1, 'a refused removal removed nothing')
})

t.test('undrain during a removal is a conflict, not a success that is then undone', async (t) => {
  const slow = await worker(t, 'slow', { inferDelayMs: 300 })
  const b = await worker(t, 'b')
  const g = await gateway(t, servers({ name: 'slow', port: slow.port }, { name: 'b', port: b.port }))
  const pending = infer(g)
  await arrived(slow)
  const removal = admin(g, 'DELETE', '/v1/endpoints/slow')
  await draining(g, 'slow')
  const undrain = await admin(g, 'POST', '/v1/endpoints/slow/undrain')
  const removed = await removal
  await pending
  const still = await admin(g, 'GET', '/v1/endpoints/slow')
  // Either the undrain is refused (409, as api.ts says), or it wins and the endpoint stays: never both "active" and gone.
  t.ok(undrain.status === 409 || still.status === 200,
    `undrain answered ${undrain.status} ${undrain.body}; removal ${removed.body}; GET afterwards ${still.status}`)
  t.equal(undrain.status, 409)
})

t.test('a drain waited on with ?wait=1 and undone by an undrain answers 409 saying so', async (t) => {
  const slow = await worker(t, 'slow', { inferDelayMs: 300 })
  const g = await gateway(t, servers({ name: 'slow', port: slow.port }))
  const pending = infer(g)
  await arrived(slow)
  const waiting = admin(g, 'POST', '/v1/endpoints/slow/drain?wait=1')
  await draining(g, 'slow')
  t.equal((await admin(g, 'POST', '/v1/endpoints/slow/undrain')).status, 200)
  const answer = await waiting
  await pending
  t.equal(answer.status, 409, `the wait answered ${answer.status} ${answer.body}`)
  t.match(JSON.parse(answer.body), { error: /the drain of 'slow' was cancelled by an undrain/ })
})

t.test('weight: 0..1000 applies at once; anything else is a 400', async (t) => {
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const g = await gateway(t, servers({ name: 'a', port: a.port }, { name: 'b', port: b.port }).replace('round_robin', 'weighted'))
  const set = await admin(g, 'PUT', '/v1/endpoints/b/weight', { weight: 0 })
  t.equal(set.status, 200)
  t.match(json(set), { name: 'b', weight: 0, configured_weight: 0 })
  for (let i = 0; i < 4; i++) t.equal(servedBy(await infer(g)), 'a', 'weight 0 takes b out of the rotation')
  t.equal((await admin(g, 'PUT', '/v1/endpoints/b/weight', { weight: 3 })).status, 200)
  const counts: Record<string, number> = {}
  for (let i = 0; i < 8; i++) {
    const by = servedBy(await infer(g))
    counts[by] = (counts[by] ?? 0) + 1
  }
  t.strictSame(counts, { a: 2, b: 6 }, 'weight 3 against 1: three requests in four')
  const max = await admin(g, 'PUT', '/v1/endpoints/b/weight', { weight: 1000 })
  t.equal(max.status, 200)
  t.match(json(max), { weight: 1000, configured_weight: 1000 })
  t.equal(json(await admin(g, 'GET', '/v1/config')).inference_servers.find((s: { name: string }) => s.name === 'b').weight, 1000)

  for (const body of [{ weight: 1001 }, { weight: -1 }, { weight: 2.5 }, { weight: '3' }, {}, [5]]) {
    const answer = await admin(g, 'PUT', '/v1/endpoints/b/weight', body)
    t.equal(answer.status, 400, JSON.stringify(body))
    t.match(errorOf(answer), /weight must be an integer in 0\.\.1000, got /)
  }
  const empty = await admin(g, 'PUT', '/v1/endpoints/b/weight', '')
  t.equal(empty.status, 400)
  t.match(errorOf(empty), /needs a JSON body/)
  t.equal(json(await admin(g, 'GET', '/v1/endpoints/b')).configured_weight, 1000, 'refused weights changed nothing')
})

t.test('unknown paths are 404 and wrong methods 405, as JSON', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, servers({ name: 'a', port: a.port }))
  const unknown = await admin(g, 'GET', '/v1/nothing')
  t.equal(unknown.status, 404)
  t.match(unknown.headers['content-type'], /application\/json/)
  t.equal(errorOf(unknown), 'Not Found')
  for (const [method, path] of [
    ['PATCH', '/v1/endpoints'],
    ['DELETE', '/v1/endpoints'],
    ['POST', '/v1/endpoints/a'],
    ['PUT', '/v1/endpoints/a/drain'],
    ['GET', '/v1/endpoints/a/undrain'],
    ['GET', '/v1/endpoints/a/weight'],
    ['POST', '/v1/canaries'],
    ['POST', '/v1/models/m/canary'],
    ['GET', '/v1/models/m/canary/promote'],
    ['PUT', '/v1/models/m/canary/rollback'],
    ['DELETE', '/v1/config']
  ] as const) {
    const answer = await admin(g, method, path)
    t.equal(answer.status, 405, `${method} ${path}`)
    t.match(answer.headers['content-type'], /application\/json/)
    t.equal(errorOf(answer), 'Method Not Allowed')
  }
  t.equal(json(await admin(g, 'GET', '/v1/endpoints/a')).state, 'active', 'POST /v1/endpoints/a did nothing')
})

t.test('canaries: set by version and by servers, show, list, promote, rollback, clear', async (t) => {
  const v = await worker(t, 'v')
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const g = await gateway(t, servers(
    { name: 'v', port: v.port, models: ['m'], extra: ', versions: [1, 2]' },
    { name: 'a', port: a.port, models: ['s'] },
    { name: 'b', port: b.port, models: ['s'] }
  ))
  const none = await admin(g, 'GET', '/v1/canaries')
  t.equal(none.status, 200)
  t.strictSame(json(none), { canaries: [] })
  const missing = await admin(g, 'GET', '/v1/models/m/canary')
  t.equal(missing.status, 404)
  t.equal(errorOf(missing), "model 'm' has no canary (canaries: none)")

  const byVersion = await admin(g, 'PUT', '/v1/models/m/canary', {
    baseline_version: 1, canary_version: 2, percent: 12.5, force_header: { name: 'X-Canary', value: 'yes' }, sticky_header: 'X-User'
  })
  t.equal(byVersion.status, 200, byVersion.body)
  t.strictSame(json(byVersion), {
    model: 'm',
    split: 'version',
    baseline_version: 1,
    canary_version: 2,
    canary_servers: null,
    percent: 12.5,
    configured_percent: 12.5,
    promoted: false,
    rolled_back: null,
    force_header: { name: 'x-canary', value: 'yes' },
    sticky_header: 'x-user',
    auto_rollback: { enabled: true, window_ms: 60000, min_requests: 100, error_rate_factor: 2, min_error_rate: 0.01, p99_factor: 2, min_p99_increase_ms: 10 },
    baseline: { requests: 0, errors: 0, error_rate: 0, p50_ms: null, p99_ms: null },
    canary: { requests: 0, errors: 0, error_rate: 0, p50_ms: null, p99_ms: null }
  })

  const byServers = await admin(g, 'PUT', '/v1/models/s/canary', { canary_servers: ['b'], percent: 30, auto_rollback: { enabled: false, min_requests: 5 } })
  t.equal(byServers.status, 200, byServers.body)
  t.match(json(byServers), {
    model: 's', split: 'servers', baseline_version: null, canary_version: null, canary_servers: ['b'], percent: 30,
    force_header: null, sticky_header: null, auto_rollback: { enabled: false, min_requests: 5, window_ms: 60000 }
  })

  const list = json(await admin(g, 'GET', '/v1/canaries'))
  t.strictSame(list.canaries.map((c: { model: string }) => c.model), ['m', 's'])
  t.strictSame(list.canaries[0], json(await admin(g, 'GET', '/v1/models/m/canary')))

  const cfg = json(await admin(g, 'GET', '/v1/config'))
  t.match(cfg.canary, {
    m: { baseline_version: 1, canary_version: 2, percent: 12.5, force_header: { name: 'x-canary', value: 'yes' }, auto_rollback: { enabled: true } },
    s: { canary_servers: ['b'], percent: 30, auto_rollback: { enabled: false, min_requests: 5 } }
  })

  const promoted = await admin(g, 'POST', '/v1/models/m/canary/promote')
  t.equal(promoted.status, 200)
  t.match(json(promoted), { percent: 100, configured_percent: 12.5, promoted: true, rolled_back: null })
  for (let i = 0; i < 3; i++) t.equal(json(await infer(g)).model_version, '2', 'promoted: every request goes to the canary version')

  const rolledBack = await admin(g, 'POST', '/v1/models/m/canary/rollback')
  t.equal(rolledBack.status, 200)
  t.match(json(rolledBack), { percent: 0, promoted: false, rolled_back: { automatic: false, reason: /admin API/, ms_ago: Number } })
  for (let i = 0; i < 3; i++) t.equal(json(await infer(g)).model_version, '1', 'rolled back: every request goes to the baseline')

  // Setting it again starts afresh.
  const reset = await admin(g, 'PUT', '/v1/models/m/canary', { baseline_version: 1, canary_version: 2, percent: 40 })
  t.match(json(reset), { percent: 40, rolled_back: null, promoted: false, baseline: { requests: 0 } })

  const cleared = await admin(g, 'DELETE', '/v1/models/m/canary')
  t.equal(cleared.status, 200)
  t.strictSame(json(cleared), { cleared: 'm' })
  const gone = await admin(g, 'GET', '/v1/models/m/canary')
  t.equal(gone.status, 404)
  t.equal(errorOf(gone), "model 'm' has no canary (canaries: s)")
  t.notOk('m' in json(await admin(g, 'GET', '/v1/config')).canary)
  for (const [method, path] of [['DELETE', '/v1/models/m/canary'], ['POST', '/v1/models/m/canary/promote'], ['POST', '/v1/models/m/canary/rollback']] as const) {
    const answer = await admin(g, method, path)
    t.equal(answer.status, 404, `${method} ${path}`)
    t.match(errorOf(answer), /model 'm' has no canary \(canaries: s\)/)
  }
})

t.test('canaries: invalid bodies are 400 saying what to fix; a model not served is 404', async (t) => {
  const v = await worker(t, 'v')
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const g = await gateway(t, servers(
    { name: 'v', port: v.port, models: ['m'], extra: ', versions: [1, 2]' },
    { name: 'a', port: a.port, models: ['s'] },
    { name: 'b', port: b.port, models: ['s'] }
  ))
  const cases: Array<[string, string, unknown, RegExp]> = [
    ['both splits', 's', { baseline_version: 1, canary_version: 2, canary_servers: ['b'], percent: 10 }, /by version or by servers, not both/],
    ['neither split', 's', { percent: 10 }, /needs either baseline_version and canary_version, or canary_servers/],
    ['one version only', 'm', { canary_version: 2, percent: 10 }, /needs both baseline_version and canary_version/],
    ['same versions', 'm', { baseline_version: 1, canary_version: 1, percent: 10 }, /canary_version must differ from baseline_version \(both are 1\)/],
    ['a version not served', 'm', { baseline_version: 1, canary_version: 3, percent: 10 }, /no server of 'm' serves version 3/],
    ['an unknown canary server', 's', { canary_servers: ['zz'], percent: 10 }, /canary_servers 'zz' do not serve 's' \(servers serving it: a, b\)/],
    ['a canary server of another model', 's', { canary_servers: ['v'], percent: 10 }, /canary_servers 'v' do not serve 's'/],
    ['every server', 's', { canary_servers: ['a', 'b'], percent: 10 }, /leaves none for the baseline/],
    ['percent 101', 's', { canary_servers: ['b'], percent: 101 }, /percent/],
    ['no percent', 's', { canary_servers: ['b'] }, /percent/],
    ['an unknown key', 's', { canary_servers: ['b'], percent: 5, colour: 'red' }, /colour/],
    ['a bad header name', 's', { canary_servers: ['b'], percent: 5, sticky_header: 'x user' }, /header name/],
    ['window_ms too short', 's', { canary_servers: ['b'], percent: 5, auto_rollback: { window_ms: 10 } }, /window_ms/],
    ['not JSON', 's', '{percent: 5}', /not valid JSON/],
    ['empty', 's', '', /needs a JSON body/]
  ]
  for (const [what, model, body, message] of cases) {
    const answer = await admin(g, 'PUT', `/v1/models/${model}/canary`, body)
    t.equal(answer.status, 400, `${what}: ${answer.body}`)
    t.match(errorOf(answer), message, what)
  }
  const notServed = await admin(g, 'PUT', '/v1/models/nope/canary', { canary_servers: ['b'], percent: 10 })
  t.equal(notServed.status, 404)
  t.match(errorOf(notServed), /'nope' is not served by any server in the fleet \(served models: m, s\)/)
  t.strictSame(json(await admin(g, 'GET', '/v1/canaries')), { canaries: [] }, 'nothing was set')
})

// ---- issue 14: web pages kept off the admin API; server names limited ----

const EVIL = 'http://evil.example'
const NAME_RULE = "a server name is 1 to 63 characters, ASCII letters, digits, '.', '_', ':' and '-', starting with a " +
  'letter or digit (it is sent in URLs, metric labels, logs and the x-flotilla-endpoint header)'

/** A logger that keeps its lines, parsed, for the tests that check what is logged. */
function recordingLogger (): { logger: ReturnType<typeof createLogger>, lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = []
  const destination = new Writable({
    write (chunk: Buffer, _encoding, callback) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push(JSON.parse(line) as Record<string, unknown>)
      callback()
    }
  })
  return { logger: createLogger({ level: 'warn', destination }), lines }
}

t.test('issue 14: the reported call (text/plain POST, foreign Origin and Host) adds nothing, and each defence alone refuses it', async (t) => {
  const a = await worker(t, 'a')
  const c = await worker(t, 'c')
  const g = await gateway(t, servers({ name: 'a', port: a.port }))
  const body = JSON.stringify({ name: 'evil', host: '127.0.0.1', port: c.port, models: ['m'] })
  const own = `127.0.0.1:${g.adminPort}`
  const post = (headers: Record<string, string>): Promise<Answer> => send(g.adminPort, 'POST', '/v1/endpoints', { headers, body })

  const reported = await post({ origin: EVIL, host: `evil.example:${g.adminPort}`, 'content-type': 'text/plain' })
  t.equal(reported.status, 403)
  t.match(reported.headers['content-type'], /application\/json/)
  t.equal(errorOf(reported), "the admin API does not answer web pages: this call carries an Origin header (http://evil.example), " +
    "which browsers send and 'flotilla fleet' and curl do not; make admin calls from the command line, not from a browser")

  const cases: Array<[string, Record<string, string>, number, RegExp]> = [
    ['a foreign Origin alone', { origin: EVIL, host: own, 'content-type': 'application/json' }, 403, /carries an Origin header \(http:\/\/evil\.example\)/],
    ['Origin: null (a sandboxed page, a redirect)', { origin: 'null', host: own, 'content-type': 'application/json' }, 403, /carries an Origin header \(null\)/],
    ['our own origin', { origin: `http://${own}`, host: own, 'content-type': 'application/json' }, 403, /carries an Origin header/],
    ['Sec-Fetch-Site: cross-site', { 'sec-fetch-site': 'cross-site', host: own, 'content-type': 'application/json' }, 403, /carries Sec-Fetch-Site: cross-site/],
    ['Sec-Fetch-Site: same-site', { 'sec-fetch-site': 'same-site', host: own, 'content-type': 'application/json' }, 403, /carries Sec-Fetch-Site: same-site/],
    ['Sec-Fetch-Site: same-origin (a rebound page)', { 'sec-fetch-site': 'same-origin', host: own, 'content-type': 'application/json' }, 403, /Sec-Fetch-Site: same-origin/],
    ['a DNS-rebinding Host alone', { host: `evil.example:${g.adminPort}`, 'content-type': 'application/json' }, 403,
      new RegExp(`^the admin API does not answer to Host 'evil\\.example:${g.adminPort}', only to IP addresses, localhost \\(a web page ` +
        'that points its own name at this machine, DNS rebinding, sends a foreign Host\\); call it by address, or list the name in gateway\\.admin_allowed_hosts$')],
    ['text/plain alone', { host: own, 'content-type': 'text/plain' }, 415,
      /^POST \/v1\/endpoints needs the header Content-Type: application\/json, got 'text\/plain'; send it on every POST, PUT and DELETE, even one without a body \(curl: -H 'content-type: application\/json'\)$/],
    ['a form alone', { host: own, 'content-type': 'application/x-www-form-urlencoded' }, 415, /got 'application\/x-www-form-urlencoded'/],
    ['no Content-Type alone', { host: own }, 415, /needs the header Content-Type: application\/json, got none;/]
  ]
  for (const [what, headers, status, message] of cases) {
    const answer = await post(headers)
    t.equal(answer.status, status, `${what}: ${answer.body}`)
    t.match(errorOf(answer), message, what)
  }
  t.strictSame(json(await admin(g, 'GET', '/v1/endpoints')).endpoints.map((e: { name: string }) => e.name), ['a'], 'nothing was added')
  t.equal(c.seen.length, 0, 'and the worker was never asked anything')
  t.equal((await post({ host: own, 'content-type': 'application/json; charset=utf-8' })).status, 201, 'the same call from a program works')
})

t.test('issue 14: reads are refused too (a rebound page can read answers), on every path, before the token and the route', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, servers({ name: 'a', port: a.port }))
  const get = (path: string, headers: Record<string, string>): Promise<Answer> => send(g.adminPort, 'GET', path, { headers })
  for (const path of ['/v1/endpoints', '/v1/endpoints/a', '/v1/config', '/v1/canaries', '/v1/nothing-here']) {
    t.equal((await get(path, { host: `evil.example:${g.adminPort}` })).status, 403, `${path}: a rebinding Host`)
    t.equal((await get(path, { origin: EVIL })).status, 403, `${path}: an Origin`)
    t.equal((await get(path, { 'sec-fetch-site': 'cross-site' })).status, 403, `${path}: Sec-Fetch-Site`)
  }
  // A CORS preflight is refused like the rest, and grants nothing.
  const preflight = await send(g.adminPort, 'OPTIONS', '/v1/endpoints', {
    headers: { origin: EVIL, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' }
  })
  t.equal(preflight.status, 403)
  t.equal(preflight.headers['access-control-allow-origin'], undefined, 'no CORS grant')

  // What programs and a typed-in URL send passes, whatever the port the client used (a published or forwarded port).
  const allowed = [`127.0.0.1:${g.adminPort}`, `localhost:${g.adminPort}`, `LocalHost:${g.adminPort}`, `[::1]:${g.adminPort}`,
    '127.0.0.1:19000', 'localhost', '10.1.2.3:9000', '[fd00::7]:9000']
  for (const host of allowed) t.equal((await get('/v1/endpoints', { host })).status, 200, `Host: ${host}`)
  t.equal((await get('/v1/endpoints', { 'sec-fetch-site': 'none' })).status, 200, 'Sec-Fetch-Site: none is a URL typed into the address bar')

  const refused = ['localhost.evil.example', '127.0.0.1.nip.io:9000', 'evil.example', `localhost.:${g.adminPort}`, '[evil.example]:1',
    'a:b:9000', `${'h'.repeat(300)}:1`]
  for (const host of refused) {
    const answer = await get('/v1/endpoints', { host })
    t.equal(answer.status, 403, `Host: ${host.slice(0, 40)}`)
    t.ok(answer.body.length < 600, 'a long Host is not echoed whole')
  }
  // An empty Host, and none at all (HTTP/1.0): no browser sends either, and neither names this listener.
  for (const head of ['GET /v1/endpoints HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n', 'GET /v1/endpoints HTTP/1.0\r\n\r\n']) {
    const raw = await rawExchange(g.adminPort, head)
    t.match(raw, /^HTTP\/1\.1 403 /, JSON.stringify(head))
    t.match(raw, /does not answer to (Host ''|a call without a Host header)/)
  }
})

/** Sends `head` as it is and resolves with everything the server wrote back before closing. */
function rawExchange (port: number, head: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port })
    let text = ''
    socket.on('data', (chunk: Buffer) => { text += chunk.toString('utf8') })
    socket.once('end', () => resolve(text))
    socket.once('error', reject)
    socket.write(head)
  })
}

t.test('issue 14: changes without a body need Content-Type: application/json too; with it (any case, any charset) they work', async (t) => {
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const g = await gateway(t, servers({ name: 'a', port: a.port }, { name: 'b', port: b.port }))
  await setCanaryForIssue14(t, g)
  const bare = (method: string, path: string, type?: string): Promise<Answer> =>
    send(g.adminPort, method, path, type === undefined ? {} : { headers: { 'content-type': type } })
  const calls: Array<[string, string]> = [
    ['POST', '/v1/endpoints/b/drain'], ['POST', '/v1/endpoints/b/undrain'], ['DELETE', '/v1/endpoints/b?force=1'],
    ['PUT', '/v1/endpoints/b/weight'], ['POST', '/v1/models/m/canary/promote'], ['POST', '/v1/models/m/canary/rollback'],
    ['DELETE', '/v1/models/m/canary'], ['PUT', '/v1/models/m/canary']
  ]
  for (const [method, path] of calls) {
    for (const type of [undefined, 'text/plain', 'application/jsonx', 'application/json-patch+json', 'multipart/form-data; boundary=x']) {
      const answer = await bare(method, path, type)
      t.equal(answer.status, 415, `${method} ${path} with ${type ?? 'no Content-Type'}`)
      t.match(errorOf(answer), new RegExp(`^${method} ${path.split('?')[0]!.replace(/[/]/g, '\\/')} needs the header Content-Type: application\\/json`))
    }
  }
  const after = json(await admin(g, 'GET', '/v1/endpoints/b'))
  t.match(after, { state: 'active', configured_weight: 1 }, 'b was neither drained, removed nor reweighed')
  t.match(json(await admin(g, 'GET', '/v1/models/m/canary')), { promoted: false, percent: 10 }, 'the canary was left alone')

  t.equal((await bare('POST', '/v1/endpoints/b/drain', 'Application/JSON')).status, 202, 'the media type is compared without case')
  t.equal((await bare('POST', '/v1/endpoints/b/undrain', 'application/json; charset=utf-8')).status, 200, 'parameters are allowed')
  t.equal((await bare('POST', '/v1/models/m/canary/promote', 'application/json')).status, 200)
  t.equal((await bare('DELETE', '/v1/endpoints/b?force=1', 'application/json')).status, 200)

  // Only the routes that change something ask: an unknown path stays a 404, a wrong method a 405, a read needs nothing.
  t.equal((await bare('POST', '/v1/nothing-here')).status, 404)
  t.equal((await bare('PATCH', '/v1/endpoints/a')).status, 405)
  t.equal((await bare('POST', '/v1/config')).status, 405)
  t.equal((await bare('GET', '/v1/endpoints/a', 'text/plain')).status, 200)
})

async function setCanaryForIssue14 (t: Test, g: RunningGateway): Promise<void> {
  const set = await admin(g, 'PUT', '/v1/models/m/canary', { canary_servers: ['b'], percent: 10 })
  t.equal(set.status, 200, set.body)
}

t.test('issue 14: a token configured on loopback is required, and does not let a web page through', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, servers({ name: 'a', port: a.port }), { env: { FLOTILLA_ADMIN_TOKEN: TOKEN } })
  const bearer = { authorization: `Bearer ${TOKEN}` }
  t.equal((await admin(g, 'GET', '/v1/endpoints')).status, 401, 'on 127.0.0.1 a configured token is required')
  t.equal((await admin(g, 'GET', '/v1/endpoints', undefined, { authorization: 'Bearer nope' })).status, 403)
  t.equal((await admin(g, 'GET', '/v1/endpoints', undefined, bearer)).status, 200)

  const withOrigin = await admin(g, 'GET', '/v1/endpoints', undefined, { ...bearer, origin: EVIL })
  t.equal(withOrigin.status, 403, 'the right token from a page is still refused')
  t.match(errorOf(withOrigin), /does not answer web pages/)
  t.equal((await admin(g, 'GET', '/v1/endpoints', undefined, { ...bearer, host: `evil.example:${g.adminPort}` })).status, 403)
  t.equal((await admin(g, 'GET', '/v1/endpoints', undefined, { origin: EVIL })).status, 403, 'a page does not learn that a token is needed')

  t.equal((await admin(g, 'POST', '/v1/endpoints/a/undrain', undefined, { 'content-type': 'text/plain' })).status, 401, 'the token before the content type')
  t.equal((await admin(g, 'POST', '/v1/endpoints/a/undrain', undefined, { ...bearer, 'content-type': 'text/plain' })).status, 415)
  t.equal((await admin(g, 'POST', '/v1/endpoints/a/undrain', undefined, bearer)).status, 200)
})

t.test('issue 14: refused calls are logged at warn, the first of each kind at once', async (t) => {
  const a = await worker(t, 'a')
  const { logger, lines } = recordingLogger()
  const g = await gateway(t, servers({ name: 'a', port: a.port }), { logger })
  for (let i = 0; i < 3; i++) await admin(g, 'GET', '/v1/endpoints', undefined, { origin: EVIL })
  await admin(g, 'GET', '/v1/config', undefined, { host: 'evil.example' })
  await admin(g, 'GET', '/v1/config', undefined, { 'sec-fetch-site': 'cross-site' })
  await admin(g, 'POST', '/v1/endpoints/a/undrain', undefined, { 'content-type': 'text/plain' })
  const refused = lines.filter((l) => String(l.msg).startsWith('admin call refused'))
  t.strictSame(refused.map((l) => l.refused), ['origin', 'host', 'sec-fetch-site', 'content-type'], 'one line per kind within the minute')
  t.match(refused[0], { level: 40, method: 'GET', url: '/v1/endpoints', header: EVIL, ip: '127.0.0.1' })
  t.match(refused[1], { header: 'evil.example', msg: /does not answer to Host 'evil\.example'/ })
  t.match(refused[3], { method: 'POST', header: 'text/plain' })
})

t.test('issue 14: server names are limited in the admin API as in the fleet file; a long name in a path is 400, not 414', async (t) => {
  const a = await worker(t, 'a')
  const c = await worker(t, 'c')
  const g = await gateway(t, servers({ name: 'a', port: a.port }))
  const base = { host: '127.0.0.1', port: c.port, models: ['m'] }
  const long = 'n'.repeat(10 * 1024)

  for (const name of [long, 'x'.repeat(64), 'my server', 'rack/1', '-a', '..', '.hidden', 'wörker', 'a\tb', "a'b", 'a%20b']) {
    const answer = await admin(g, 'POST', '/v1/endpoints', { ...base, name })
    t.equal(answer.status, 400, `${name.slice(0, 20)}: ${answer.body.slice(0, 200)}`)
    t.ok(errorOf(answer).endsWith(`is not allowed: ${NAME_RULE}`), 'the message states the rule')
    t.ok(answer.body.length < 600, 'a long name is not echoed whole')
  }
  t.match(errorOf(await admin(g, 'POST', '/v1/endpoints', { ...base, name: long })), `name '${'n'.repeat(40)}...' (10240 characters) is not allowed`)
  t.strictSame(json(await admin(g, 'GET', '/v1/endpoints')).endpoints.map((e: { name: string }) => e.name), ['a'], 'none was added')

  const longest = 'x'.repeat(63)
  t.equal((await admin(g, 'POST', '/v1/endpoints', { ...base, name: longest })).status, 201, '63 characters is allowed')
  t.equal((await admin(g, 'POST', `/v1/endpoints/${longest}/drain?wait=1`)).status, 200, 'and can be drained')
  t.equal((await admin(g, 'DELETE', `/v1/endpoints/${longest}`)).status, 200, 'and removed')

  // Names in paths: a name that breaks the rule is a 400 in our shape, whatever its length (fastify's router would
  // answer a segment over its limit with a 414 of its own).
  const paths: Array<[string, string]> = [
    ['GET', `/v1/endpoints/${long}`], ['GET', `/v1/endpoints/${long}/drain`], ['POST', `/v1/endpoints/${long}/drain`],
    ['POST', `/v1/endpoints/${long}/undrain`], ['DELETE', `/v1/endpoints/${long}`], ['PUT', `/v1/endpoints/${long}/weight`],
    ['GET', `/v1/endpoints/${'x'.repeat(64)}`], ['GET', '/v1/endpoints/bad%20name'], ['DELETE', '/v1/endpoints/-a'], ['GET', '/v1/endpoints/']
  ]
  for (const [method, path] of paths) {
    const answer = await admin(g, method, path, method === 'PUT' ? { weight: 1 } : undefined)
    t.equal(answer.status, 400, `${method} ${path.slice(0, 40)}`)
    t.match(answer.headers['content-type'], /application\/json/)
    t.match(errorOf(answer), /^the endpoint name in the path, '.*, is not allowed: a server name is 1 to 63 characters/)
    t.ok(answer.body.length < 600, 'a long name is not echoed whole')
  }
  t.equal(errorOf(await admin(g, 'GET', `/v1/endpoints/${long}`)),
    `the endpoint name in the path, '${'n'.repeat(40)}...' (10240 characters), is not allowed: ${NAME_RULE}`)
  const unknown = await admin(g, 'GET', '/v1/endpoints/a/nothing-here')
  t.equal(unknown.status, 404, 'a valid name under an unknown path is still a 404')
  t.equal(errorOf(unknown), 'Not Found')
  t.equal((await admin(g, 'GET', `/v1/endpoints/${long}`, undefined, { origin: EVIL })).status, 403, 'the browser checks come first there too')

  // Model names in canary paths: bounded the same way.
  for (const [method, path] of [['GET', `/v1/models/${long}/canary`], ['PUT', `/v1/models/${long}/canary`], ['DELETE', `/v1/models/${long}/canary`],
    ['POST', `/v1/models/${long}/canary/promote`], ['POST', `/v1/models/${long}/canary/rollback`]] as const) {
    const answer = await admin(g, method, path, method === 'PUT' ? { canary_servers: ['a'], percent: 1 } : undefined)
    t.equal(answer.status, 400, `${method} ${path.slice(0, 40)}`)
    t.match(errorOf(answer), /^the model name in the path, 'n{40}\.\.\.' \(10240 characters\), is too long: model names in admin paths are at most \d+ characters$/)
  }
  t.equal((await admin(g, 'GET', '/v1/models/nope/canary')).status, 404, 'a short unknown model is a 404, as before')
  t.equal(errorOf(await admin(g, 'GET', '/v1/models/m')), 'Not Found')
})

t.test('issue 14: flotilla fleet works against the guarded admin API, body-less changes included', async (t) => {
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const g = await gateway(t, servers({ name: 'a', port: a.port }, { name: 'b', port: b.port }))
  const run = async (...args: string[]): Promise<{ code: number, out: string, err: string }> => {
    let out = ''
    let err = ''
    const code = await runFleetCommand([...args, '--admin', `http://localhost:${g.adminPort}`], {
      stdout: { write: (s: string) => { out += s } },
      stderr: { write: (s: string) => { err += s } },
      env: {},
      readFile: () => { throw new Error('no files here') },
      sleep: async () => {}
    })
    return { code, out, err }
  }
  for (const args of [['list'], ['add', 'c', `127.0.0.1:${b.port}`, '--models', 'm'], ['weight', 'c', '3'], ['drain', 'c'], ['undrain', 'c'],
    ['canary', 'm', 'set', '--percent', '5', '--servers', 'c'], ['canary', 'm', 'promote'], ['canary', 'm', 'rollback'],
    ['canary', 'm', 'clear'], ['remove', 'c', '--force'], ['drain', 'b', '--no-wait'], ['list']]) {
    const r = await run(...args)
    t.equal(r.code, 0, `flotilla fleet ${args.join(' ')}: ${r.err}`)
  }
  const bad = await run('add', 'x'.repeat(64), `127.0.0.1:${b.port}`)
  t.equal(bad.code, 2, 'a name that breaks the rule is a usage error, before any call')
  t.match(bad.err, /cannot be a server name: a server name is 1 to 63 characters/)
})

// Needs gateway/main.ts to pass `host: adminHost, allowedHosts: settings.admin_allowed_hosts` to buildAdminServer;
// admin-guard.test.ts checks the same names on the guard itself.
t.test('issue 14: names listed in gateway.admin_allowed_hosts are answered to, in any case, on any port', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, `${servers({ name: 'a', port: a.port })}gateway: { admin_allowed_hosts: [gw.internal, Flotilla-Admin] }\n`)
  for (const host of [`gw.internal:${g.adminPort}`, 'GW.INTERNAL', 'flotilla-admin:19000']) {
    t.equal((await admin(g, 'GET', '/v1/endpoints', undefined, { host })).status, 200, host)
  }
  const evil = await admin(g, 'GET', '/v1/endpoints', undefined, { host: 'evil.example' })
  t.equal(evil.status, 403)
  t.match(errorOf(evil), /only to IP addresses, localhost and gw\.internal, flotilla-admin \(/)
})
