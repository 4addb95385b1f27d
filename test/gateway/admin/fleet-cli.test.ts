/**
 * `flotilla fleet` against a fake admin API on 127.0.0.1 port 0: just enough of the contract in `api.ts`, with
 * canned answers that change from call to call where the command depends on that (a drain's in-flight count), and
 * a record of every request, so each test checks both what was sent and what was printed.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { type AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import {
  type AddEndpointBody, type AdminEndpointView, type CanaryBody, type CanaryView, type DrainStatus
} from '../../../gateway/admin/api.ts'
import { FLEET_USAGE, runFleetCommand, type FleetCliIo } from '../../../gateway/admin/fleet-cli.ts'
import { createError, errorCodes } from '../../../common/errors.ts'

interface Recorded {
  method: string
  /** Path and query string. */
  url: string
  body: unknown
  authorization: string | undefined
}

interface FakeAdmin {
  url: string
  requests: Recorded[]
  /** The headers of each request, in the same order. */
  headers: IncomingHttpHeaders[]
}

function endpoint (over: Partial<AdminEndpointView> & { name: string }): AdminEndpointView {
  return {
    origin: 'http://10.0.0.1:8000',
    state: 'active',
    weight: 1,
    configured_weight: 1,
    models: ['simple'],
    versions: null,
    in_flight: 0,
    max_in_flight: 0,
    healthy: true,
    unready_models: [],
    ejected: false,
    last_health_failure: null,
    last_check_ms_ago: null,
    latency_ms: null,
    queue_depth: null,
    queue_depth_ms_ago: null,
    source: 'admin',
    drain: null,
    ...over
  }
}

const ENDPOINTS: AdminEndpointView[] = [
  endpoint({ name: 'alpha', weight: 10, configured_weight: 10, models: ['simple', 'resnet50'], in_flight: 3, source: 'file' }),
  endpoint({
    name: 'beta-long-name', origin: 'http://[::1]:8001', weight: 2, configured_weight: 10, in_flight: 12,
    unready_models: ['resnet50', 'bert']
  }),
  endpoint({ name: 'gamma', origin: 'http://h:1', state: 'drained', weight: 5, configured_weight: 5, models: [], healthy: false, ejected: true })
]

function canary (over: Partial<CanaryView> = {}): CanaryView {
  return {
    model: 'simple',
    split: 'version',
    baseline_version: 1,
    canary_version: 2,
    canary_servers: null,
    percent: 10,
    configured_percent: 10,
    promoted: false,
    rolled_back: null,
    force_header: { name: 'x-canary', value: '1' },
    sticky_header: 'x-user',
    auto_rollback: {
      enabled: true, window_ms: 60_000, min_requests: 100, error_rate_factor: 2, min_error_rate: 0.01, p99_factor: 1.5, min_p99_increase_ms: 20
    },
    baseline: { requests: 1000, errors: 2, error_rate: 0.002, p50_ms: 12, p99_ms: 40.25 },
    canary: { requests: 0, errors: 0, error_rate: 0, p50_ms: null, p99_ms: null },
    ...over
  }
}

/**
 * Drains by endpoint: the in-flight counts that the POST and then successive `GET …/drain` calls report. The last
 * count ends the drain (completed when it is 0, timed out otherwise), unless `end` says the drain is undrained
 * there instead, or never reports itself done.
 */
const DRAIN_SCRIPTS: Record<string, { counts: number[], end?: 'undrained' | 'never' }> = {
  alpha: { counts: [3, 1, 1, 0] },
  slow: { counts: [2, 2] },
  flip: { counts: [4, 4], end: 'undrained' },
  stuck: { counts: [1], end: 'never' }
}

async function startFakeAdmin (t: Test, options: { token?: string } = {}): Promise<FakeAdmin> {
  const requests: Recorded[] = []
  const headers: IncomingHttpHeaders[] = []
  const drains = new Map<string, { polls: number, timeoutMs: number }>()

  const drainStatus = (name: string): DrainStatus => {
    const d = drains.get(name)!
    const { counts, end } = DRAIN_SCRIPTS[name]!
    const inFlight = counts[Math.min(d.polls, counts.length - 1)]!
    const last = d.polls >= counts.length - 1
    const base = { name, in_flight: inFlight, started_ms_ago: d.polls * 250, timeout_ms: d.timeoutMs }
    if (last && end === 'undrained') return { ...base, state: 'active', done: false, completed: false }
    const done = last && end !== 'never'
    return { ...base, state: done ? 'drained' : 'draining', done, completed: done && inFlight === 0 }
  }

  const route = (req: IncomingMessage, path: string, query: URLSearchParams, body: any): [number, unknown] => {
    const method = req.method!
    if (options.token !== undefined) {
      const auth = req.headers.authorization
      if (auth === undefined) return [401, { error: 'this admin API needs a bearer token' }]
      if (auth !== `Bearer ${options.token}`) return [403, { error: errorCodes.GW_ERR_ADMIN_FORBIDDEN.message }]
    }
    // As the real server does (admin-guard.ts): every change says it is JSON, body or not, and browsers are refused.
    if (req.headers.origin !== undefined || req.headers['sec-fetch-site'] !== undefined) return [403, { error: 'a browser' }]
    if (method !== 'GET' && req.headers['content-type'] !== 'application/json') {
      return [415, { error: `${method} ${path} needs the header Content-Type: application/json` }]
    }
    let m: RegExpExecArray | null
    if (path === '/v1/endpoints' && method === 'GET') return [200, { endpoints: ENDPOINTS }]
    if (path === '/v1/endpoints' && method === 'POST') {
      const b = body as AddEndpointBody
      if (b.name === 'dup') return [409, { error: "an endpoint named 'dup' is already in the fleet" }]
      const host = b.host.includes(':') ? `[${b.host}]` : b.host
      return [201, endpoint({ name: b.name, origin: `http://${host}:${b.port}`, models: b.models === 'discover' ? [] : b.models ?? [] })]
    }
    if ((m = /^\/v1\/endpoints\/([^/]+)\/drain$/.exec(path)) !== null) {
      const name = decodeURIComponent(m[1]!)
      if (DRAIN_SCRIPTS[name] === undefined) return [404, { error: `no endpoint named '${name}'` }]
      if (method === 'POST') {
        drains.set(name, { polls: 0, timeoutMs: (body as { timeout_ms?: number } | undefined)?.timeout_ms ?? 30_000 })
        return [202, drainStatus(name)]
      }
      drains.get(name)!.polls++
      return [200, drainStatus(name)]
    }
    if ((m = /^\/v1\/endpoints\/([^/]+)\/undrain$/.exec(path)) !== null && method === 'POST') {
      return [200, endpoint({ name: decodeURIComponent(m[1]!) })]
    }
    if ((m = /^\/v1\/endpoints\/([^/]+)\/weight$/.exec(path)) !== null && method === 'PUT') {
      // As if slow start had just begun: the effective weight lags the configured one.
      const weight = (body as { weight: number }).weight
      return [200, endpoint({ name: decodeURIComponent(m[1]!), weight: Math.min(weight, 2), configured_weight: weight })]
    }
    if ((m = /^\/v1\/endpoints\/([^/]+)$/.exec(path)) !== null && method === 'DELETE') {
      const force = query.get('force') === '1'
      return [200, { removed: decodeURIComponent(m[1]!), drained: !force, in_flight: force ? 2 : 0 }]
    }
    if (path === '/v1/canaries' && method === 'GET') {
      return [200, { canaries: [canary(), canary({ model: 'resnet50', split: 'servers', canary_servers: ['a', 'b'], percent: 0, rolled_back: { automatic: true, reason: 'error rate 5x', ms_ago: 1500 } })] }]
    }
    if ((m = /^\/v1\/models\/([^/]+)\/canary(\/promote|\/rollback)?$/.exec(path)) !== null) {
      if (m[1] !== 'simple') return [404, { error: `no canary for model '${m[1]}'` }]
      if (method === 'DELETE') return [200, { cleared: 'simple' }]
      if (m[2] === '/promote') return [200, canary({ percent: 100, promoted: true })]
      if (m[2] === '/rollback') return [200, canary({ percent: 0, rolled_back: { automatic: false, reason: 'manual rollback', ms_ago: 0 } })]
      return [200, canary()]
    }
    return [404, { error: `no route ${method} ${path}` }]
  }

  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString()
      const body: unknown = text === '' ? undefined : JSON.parse(text)
      const url = new URL(req.url!, 'http://x')
      requests.push({ method: req.method!, url: req.url!, body, authorization: req.headers.authorization })
      headers.push(req.headers)
      const [status, answer] = route(req, url.pathname, url.searchParams, body)
      res.writeHead(status, { 'content-type': 'application/json', ...(status === 401 ? { 'www-authenticate': 'Bearer' } : {}) })
      res.end(JSON.stringify(answer))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests, headers }
}

interface Captured {
  io: FleetCliIo
  out: () => string
  err: () => string
  sleeps: number[]
}

function capture (options: { env?: Record<string, string>, files?: Record<string, string>, tty?: boolean } = {}): Captured {
  let out = ''
  let err = ''
  const sleeps: number[] = []
  const io: FleetCliIo = {
    stdout: { write: (s: string) => { out += s }, ...(options.tty === true ? { isTTY: true } : {}) },
    stderr: { write: (s: string) => { err += s } },
    env: options.env ?? {},
    readFile: (path) => {
      const text = options.files?.[path]
      if (text === undefined) throw new Error(`ENOENT: no such file or directory, open '${path}'`)
      return text
    },
    sleep: async (ms) => { sleeps.push(ms) }
  }
  return { io, out: () => out, err: () => err, sleeps }
}

async function fleet (admin: FakeAdmin | string, args: string[], c = capture()): Promise<{ code: number, out: string, err: string, c: Captured }> {
  const url = typeof admin === 'string' ? admin : admin.url
  const code = await runFleetCommand([...args, '--admin', url], c.io)
  return { code, out: c.out(), err: c.err(), c }
}

t.test('list prints one aligned row per endpoint', async (t) => {
  const admin = await startFakeAdmin(t)
  const { code, out, err } = await fleet(admin, ['list'])
  t.equal(code, 0, err)
  t.equal(out, [
    'NAME            ORIGIN                STATE    WEIGHT  MODELS           IN-FLIGHT  HEALTH                  EJECTED  SOURCE',
    'alpha           http://10.0.0.1:8000  active   10      simple,resnet50  3          healthy                 no       file',
    'beta-long-name  http://[::1]:8001     active   2/10    simple           12         unready: resnet50,bert  no       admin',
    'gamma           http://h:1            drained  5       -                0          unhealthy               yes      admin',
    ''
  ].join('\n'))
  t.same(admin.requests, [{ method: 'GET', url: '/v1/endpoints', body: undefined, authorization: undefined }], 'no token, no Authorization header')
})

t.test('list columns line up: each column starts at the same offset on every line', async (t) => {
  const admin = await startFakeAdmin(t)
  const { out } = await fleet(admin, ['list'])
  const lines = out.trimEnd().split('\n')
  for (const header of ['ORIGIN', 'STATE', 'WEIGHT', 'MODELS', 'IN-FLIGHT', 'HEALTH', 'EJECTED', 'SOURCE']) {
    const at = lines[0]!.indexOf(header)
    for (const line of lines.slice(1)) t.equal(line[at - 1], ' ', `${header}: a blank before the column`)
    for (const line of lines.slice(1)) t.not(line[at], ' ', `${header}: the cell starts at the column`)
  }
  t.notOk(lines.some((l) => l.endsWith(' ')), 'no trailing blanks')
})

t.test('--json prints the server\'s answer unchanged', async (t) => {
  const admin = await startFakeAdmin(t)
  const { code, out } = await fleet(admin, ['--json', 'list'])
  t.equal(code, 0)
  t.same(JSON.parse(out), { endpoints: ENDPOINTS })
})

t.test('add sends the endpoint, with discovery unless --models names the models', async (t) => {
  const admin = await startFakeAdmin(t)
  let r = await fleet(admin, ['add', 'delta', '10.0.0.9:8000'])
  t.equal(r.code, 0, r.err)
  t.match(r.out, /^added delta \(http:\/\/10\.0\.0\.9:8000\)\nNAME /)
  t.same(admin.requests[0], { method: 'POST', url: '/v1/endpoints', body: { name: 'delta', host: '10.0.0.9', port: 8000, models: 'discover' }, authorization: undefined })

  r = await fleet(admin, ['add', 'eps', 'worker.local:8001', '--models', 'simple, resnet50', '--weight', '0', '--versions', '1,3',
    '--max-in-flight', '16', '--label', 'zone=eu-1', '--label', 'gpu=h100=x'])
  t.equal(r.code, 0, r.err)
  t.same(admin.requests[1]!.body, {
    name: 'eps', host: 'worker.local', port: 8001, models: ['simple', 'resnet50'], weight: 0, versions: [1, 3], max_in_flight: 16,
    labels: { zone: 'eu-1', gpu: 'h100=x' }
  })

  r = await fleet(admin, ['add', 'v6', '[::1]:8002', '--discover'])
  t.equal(r.code, 0, r.err)
  t.same(admin.requests[2]!.body, { name: 'v6', host: '::1', port: 8002, models: 'discover' }, 'the bare IPv6 address, as in the fleet file')
  t.match(r.out, 'added v6 (http://[::1]:8002)')
})

t.test('add refuses what is obviously wrong before calling', async (t) => {
  const admin = await startFakeAdmin(t)
  const cases: Array<[string[], RegExp]> = [
    [['add', 'x', 'h:0'], /the port must be an integer from 1 to 65535, got '0'/],
    [['add', 'x', 'h:65536'], /the port must be an integer from 1 to 65535, got '65536'/],
    [['add', 'x', 'h:80a'], /the port must be an integer from 1 to 65535, got '80a'/],
    [['add', 'x', 'h'], /'h' has no port/],
    [['add', 'x', ':8000'], /':8000' has no host/],
    [['add', 'x', '::1:8000'], /write an IPv6 address in brackets, as in \[::1\]:8000/],
    [['add', 'x', 'http://h:8000'], /without a scheme/],
    [['add', 'x', 'h:1', '--weight', '1001'], /--weight must be an integer from 0 to 1000, got '1001'/],
    [['add', 'x', 'h:1', '--weight', '1.5'], /--weight must be an integer from 0 to 1000, got '1.5'/],
    [['add', 'x', 'h:1', '--weight', '-1'], /--weight must be an integer from 0 to 1000, got '-1'/],
    [['add', 'x', 'h:1', '--models', 'a', '--discover'], /either --models or --discover, not both/],
    [['add', 'x', 'h:1', '--models', 'a,,b'], /--models takes a comma-separated list/],
    [['add', 'x', 'h:1', '--label', 'novalue'], /--label takes KEY=VALUE, got 'novalue'/],
    [['add', 'x', 'h:1', '--label', 'a=1', '--label', 'a=2'], /--label a is given twice/],
    [['add', 'x'], /flotilla fleet add needs HOST:PORT/],
    [['add', 'x', 'h:1', '--percent', '5'], /flotilla fleet add does not take --percent/],
    [['add', 'my server', 'h:1'], /^flotilla fleet: 'my server' cannot be a server name: a server name is 1 to 63 characters, ASCII letters, digits, '\.', '_', ':' and '-', starting with a letter or digit/],
    [['add', 'rack/1', 'h:1'], /'rack\/1' cannot be a server name/],
    [['add', 'x'.repeat(64), 'h:1'], /'x{64}' cannot be a server name/],
    [['add', 'n'.repeat(10240), 'h:1'], /'n{40}\.\.\.' \(10240 characters\) cannot be a server name/]
  ]
  for (const [args, message] of cases) {
    const r = await fleet(admin, args)
    t.equal(r.code, 2, args.join(' '))
    t.match(r.err, message, args.join(' '))
    t.match(r.err, /Run 'flotilla fleet --help' for usage/)
    t.equal(r.out, '')
  }
  t.same(admin.requests, [], 'nothing reached the server')
})

t.test('the server\'s refusal is printed with its status', async (t) => {
  const admin = await startFakeAdmin(t)
  const r = await fleet(admin, ['add', 'dup', 'h:1'])
  t.equal(r.code, 1)
  t.equal(r.err, "flotilla fleet: an endpoint named 'dup' is already in the fleet (HTTP 409)\n")
  const missing = await fleet(admin, ['drain', 'nope'])
  t.equal(missing.code, 1)
  t.equal(missing.err, "flotilla fleet: no endpoint named 'nope' (HTTP 404)\n")
})

t.test('drain polls until the count reaches 0, printing a line per change off a terminal', async (t) => {
  const admin = await startFakeAdmin(t)
  const r = await fleet(admin, ['drain', 'alpha'])
  t.equal(r.code, 0, r.err)
  t.equal(r.out, [
    'draining alpha: 3 requests in flight, 0.0 s',
    'draining alpha: 1 request in flight, 0.3 s',
    'drained alpha: 0 in flight after 0.8 s',
    ''
  ].join('\n'))
  t.same(admin.requests.map((q) => `${q.method} ${q.url}`), [
    'POST /v1/endpoints/alpha/drain', 'GET /v1/endpoints/alpha/drain', 'GET /v1/endpoints/alpha/drain', 'GET /v1/endpoints/alpha/drain'
  ])
  t.same(admin.requests[0]!.body, {}, 'no timeout given: the server\'s default')
  t.same(r.c.sleeps, [250, 250, 250])
})

t.test('drain on a terminal rewrites one progress line', async (t) => {
  const admin = await startFakeAdmin(t)
  const r = await fleet(admin, ['drain', 'alpha'], capture({ tty: true }))
  t.equal(r.code, 0, r.err)
  const progress = r.out.slice(0, r.out.indexOf('drained'))
  t.notMatch(progress, /\n/, 'no newline while draining')
  t.equal(progress.split('\r').filter((s) => s.startsWith('draining')).length, 3, 'one rewrite per poll before the end')
  t.match(progress, '\rdraining alpha: 1 request in flight, 0.5 s')
  t.match(r.out, /\r +\rdrained alpha: 0 in flight after 0\.8 s\n$/, 'the progress line is cleared before the verdict')
})

t.test('a drain that times out exits 1 and says the endpoint is drained anyway', async (t) => {
  const admin = await startFakeAdmin(t)
  const r = await fleet(admin, ['drain', 'slow', '--timeout-ms', '500'])
  t.equal(r.code, 1)
  t.same(admin.requests[0]!.body, { timeout_ms: 500 })
  t.equal(r.out, 'draining slow: 2 requests in flight, 0.0 s\n')
  t.equal(r.err, 'flotilla fleet: drain of slow timed out after 0.5 s with 2 requests in flight; it is marked drained and takes no new requests\n')
})

t.test('drain --json prints only the final status, and still exits 1 on a timeout', async (t) => {
  const admin = await startFakeAdmin(t)
  let r = await fleet(admin, ['drain', 'alpha', '--json'])
  t.equal(r.code, 0, r.err)
  t.same(JSON.parse(r.out), { name: 'alpha', state: 'drained', in_flight: 0, started_ms_ago: 750, timeout_ms: 30_000, done: true, completed: true })
  r = await fleet(admin, ['drain', 'slow', '--json'])
  t.equal(r.code, 1)
  t.same(JSON.parse(r.out).completed, false)
  t.match(r.err, 'drain of slow timed out')
})

t.test('a drain undone by an undrain, or one the server never ends, exits 1', async (t) => {
  const admin = await startFakeAdmin(t)
  let r = await fleet(admin, ['drain', 'flip'])
  t.equal(r.code, 1)
  t.equal(r.err, 'flotilla fleet: the drain of flip was cancelled (undrained?); it takes new requests again\n')

  r = await fleet(admin, ['drain', 'stuck', '--timeout-ms', '500'])
  t.equal(r.code, 1)
  t.match(r.err, /still reports the drain of stuck in progress .* past its 0\.5 s timeout; stopped waiting/)
  t.equal(r.c.sleeps.length, 42, 'polled for the timeout plus 10 s of grace, at 250 ms a poll')
})

t.test('drain --no-wait starts the drain and returns', async (t) => {
  const admin = await startFakeAdmin(t)
  const r = await fleet(admin, ['drain', 'alpha', '--no-wait'])
  t.equal(r.code, 0, r.err)
  t.equal(admin.requests.length, 1)
  t.same(r.c.sleeps, [])
  t.match(r.out, /^draining alpha: 3 requests in flight, 0\.0 s \(timeout 30\.0 s\)/)
})

t.test('the token comes from --token-file, else from FLOTILLA_ADMIN_TOKEN', async (t) => {
  const admin = await startFakeAdmin(t, { token: 's3cret' })
  let r = await fleet(admin, ['list', '--token-file', '/etc/tok'], capture({ files: { '/etc/tok': '  s3cret\n' } }))
  t.equal(r.code, 0, r.err)
  t.equal(admin.requests.at(-1)!.authorization, 'Bearer s3cret')

  r = await fleet(admin, ['list'], capture({ env: { FLOTILLA_ADMIN_TOKEN: 's3cret' } }))
  t.equal(r.code, 0, r.err)
  t.equal(admin.requests.at(-1)!.authorization, 'Bearer s3cret')

  r = await fleet(admin, ['list', '--token-file', '/etc/tok'], capture({ env: { FLOTILLA_ADMIN_TOKEN: 'stale' }, files: { '/etc/tok': 's3cret' } }))
  t.equal(r.code, 0, r.err)
  t.equal(admin.requests.at(-1)!.authorization, 'Bearer s3cret', '--token-file wins over the environment')

  r = await fleet(admin, ['list', '--token-file', '/missing'])
  t.equal(r.code, 2)
  t.match(r.err, /cannot read --token-file \/missing: ENOENT/)

  r = await fleet(admin, ['list', '--token-file', '/empty'], capture({ files: { '/empty': '\n' } }))
  t.equal(r.code, 2)
  t.match(r.err, /--token-file \/empty is empty/)
})

t.test('a 401 or 403 says how to give a token', async (t) => {
  const admin = await startFakeAdmin(t, { token: 's3cret' })
  let r = await fleet(admin, ['list'])
  t.equal(r.code, 1)
  t.equal(r.err, 'flotilla fleet: this admin API needs a bearer token (HTTP 401)\n' +
    'hint: the admin API wants a token: pass --token-file FILE or set FLOTILLA_ADMIN_TOKEN\n')
  r = await fleet(admin, ['list'], capture({ env: { FLOTILLA_ADMIN_TOKEN: 'wrong' } }))
  t.equal(r.code, 1)
  t.match(r.err, 'the admin token does not match (HTTP 403)\nhint: the token from $FLOTILLA_ADMIN_TOKEN was not accepted; check --token-file / FLOTILLA_ADMIN_TOKEN\n')
})

t.test('a 403 that is not about the token is printed with its own remedy, and no token hint', async (t) => {
  const message = createError('GW_ERR_ADMIN_HOST', "Host 'gw.internal:9000'", '').message
  const server = createServer((_req, res) => { res.writeHead(403, { 'content-type': 'application/json' }); res.end(JSON.stringify({ error: message })) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  for (const env of [{}, { FLOTILLA_ADMIN_TOKEN: 't' }]) {
    const r = await fleet(url, ['list'], capture({ env }))
    t.equal(r.code, 1)
    t.equal(r.err, `flotilla fleet: ${message} (HTTP 403)\n`)
  }
})

t.test('every call sends the Host of --admin and no browser header; every change says it is JSON, body or not', async (t) => {
  const admin = await startFakeAdmin(t)
  const runs = [['list'], ['add', 'x', 'h:1', '--models', 'simple'], ['drain', 'alpha', '--no-wait'], ['undrain', 'alpha'], ['weight', 'alpha', '2'],
    ['remove', 'alpha', '--force'], ['canary', 'simple', 'promote'], ['canary', 'simple', 'rollback'], ['canary', 'simple', 'clear'],
    ['canary', 'simple', 'set', '--percent', '5', '--servers', 'a']]
  for (const args of runs) t.equal((await fleet(admin, args)).code, 0, args.join(' '))
  const port = new URL(admin.url).port
  admin.headers.forEach((h, i) => {
    const { method, url } = admin.requests[i]!
    t.equal(h.host, `127.0.0.1:${port}`, `${method} ${url}: Host`)
    t.equal(h.origin, undefined, `${method} ${url}: no Origin`)
    t.equal(h['sec-fetch-site'], undefined, `${method} ${url}: no Sec-Fetch-Site`)
    t.equal(h['content-type'], method === 'GET' ? undefined : 'application/json', `${method} ${url}: Content-Type`)
  })
  t.ok(admin.requests.some((r) => r.method === 'POST' && r.body === undefined), 'body-less POSTs were among them')
  t.ok(admin.requests.some((r) => r.method === 'DELETE'), 'and DELETEs')
})

t.test('weight, undrain and remove call their paths', async (t) => {
  const admin = await startFakeAdmin(t)
  let r = await fleet(admin, ['weight', 'alpha', '7'])
  t.equal(r.code, 0, r.err)
  t.same(admin.requests.at(-1), { method: 'PUT', url: '/v1/endpoints/alpha/weight', body: { weight: 7 }, authorization: undefined })
  t.equal(r.out, 'weight of alpha set to 7; slow start has it at 2 for now\n')

  r = await fleet(admin, ['undrain', 'gamma'])
  t.equal(r.code, 0, r.err)
  t.same(admin.requests.at(-1), { method: 'POST', url: '/v1/endpoints/gamma/undrain', body: undefined, authorization: undefined })
  t.equal(r.out, 'undrained gamma: active, it takes new requests again\n')

  r = await fleet(admin, ['remove', 'gamma', '--force', '--timeout-ms', '500'])
  t.equal(r.code, 0, r.err)
  t.equal(`${admin.requests.at(-1)!.method} ${admin.requests.at(-1)!.url}`, 'DELETE /v1/endpoints/gamma?force=1&timeout_ms=500')
  t.equal(r.out, 'removed gamma without draining it (--force); 2 requests still in flight finish on their connections\n')

  r = await fleet(admin, ['remove', 'a/b'])
  t.equal(r.code, 0, r.err)
  t.equal(admin.requests.at(-1)!.url, '/v1/endpoints/a%2Fb', 'the name is one path segment')
  t.equal(r.out, 'removed a/b after draining it\n')

  r = await fleet(admin, ['weight', 'alpha', '1001'])
  t.equal(r.code, 2)
  t.match(r.err, /the weight must be an integer from 0 to 1000, got '1001'/)
  r = await fleet(admin, ['weight', 'alpha', '-3'])
  t.equal(r.code, 2)
  t.match(r.err, /'-3' is not a valid argument here/)
})

t.test('canary set sends a version split or a servers split', async (t) => {
  const admin = await startFakeAdmin(t)
  let r = await fleet(admin, ['canary', 'simple', 'set', '--percent', '12.5', '--version', '2', '--baseline-version', '1',
    '--force-header', 'x-canary=yes=please', '--sticky-header', 'x-user'])
  t.equal(r.code, 0, r.err)
  t.same(admin.requests.at(-1), {
    method: 'PUT',
    url: '/v1/models/simple/canary',
    body: { percent: 12.5, canary_version: 2, baseline_version: 1, force_header: { name: 'x-canary', value: 'yes=please' }, sticky_header: 'x-user' } satisfies CanaryBody,
    authorization: undefined
  })
  t.match(r.out, /^set the canary of simple\ncanary of simple: version 2 against version 1\n/)

  r = await fleet(admin, ['canary', 'simple', 'set', '--percent', '5', '--servers', 'a,b', '--no-auto-rollback'])
  t.equal(r.code, 0, r.err)
  t.same(admin.requests.at(-1)!.body, { percent: 5, canary_servers: ['a', 'b'], auto_rollback: { enabled: false } })

  const bad: Array<[string[], RegExp]> = [
    [['canary', 'simple', 'set', '--version', '2', '--baseline-version', '1'], /needs --percent P/],
    [['canary', 'simple', 'set', '--percent', '101', '--servers', 'a'], /--percent must be a number from 0 to 100, got '101'/],
    [['canary', 'simple', 'set', '--percent', '-1', '--servers', 'a'], /--percent must be a number from 0 to 100, got '-1'/],
    [['canary', 'simple', 'set', '--percent', '5'], /say what the canary is/],
    [['canary', 'simple', 'set', '--percent', '5', '--version', '2'], /--version needs --baseline-version B/],
    [['canary', 'simple', 'set', '--percent', '5', '--version', '2', '--baseline-version', '1', '--servers', 'a'], /either by version .* or by servers/],
    [['canary', 'simple', 'set', '--percent', '5', '--servers', 'a', '--force-header', 'x-canary'], /--force-header takes NAME=VALUE, got 'x-canary'/],
    [['canary', 'simple', '--percent', '5'], /--percent goes with 'flotilla fleet canary MODEL set'/],
    [['canary', 'simple', 'frobnicate'], /unknown canary action 'frobnicate'/]
  ]
  const before = admin.requests.length
  for (const [args, message] of bad) {
    const b = await fleet(admin, args)
    t.equal(b.code, 2, args.join(' '))
    t.match(b.err, message, args.join(' '))
  }
  t.equal(admin.requests.length, before, 'nothing reached the server')
})

t.test('canary show prints both sides; the list prints one line per model', async (t) => {
  const admin = await startFakeAdmin(t)
  let r = await fleet(admin, ['canary', 'simple'])
  t.equal(r.code, 0, r.err)
  t.equal(r.out, [
    'canary of simple: version 2 against version 1',
    'share:          10% of requests to the canary',
    'state:          active',
    'force header:   x-canary: 1 always goes to the canary',
    'sticky header:  x-user',
    'auto rollback:  on (window 60.0 s, at least 100 requests)',
    '',
    'SIDE      TARGET     REQUESTS  ERRORS  ERROR RATE  P50      P99',
    'baseline  version 1  1000      2       0.2%        12.0 ms  40.3 ms',
    'canary    version 2  0         0       -           -        -',
    ''
  ].join('\n'))
  t.equal(admin.requests.at(-1)!.url, '/v1/models/simple/canary')
  r = await fleet(admin, ['canary', 'simple', 'show'])
  t.equal(r.code, 0, r.err)
  t.equal(admin.requests.at(-1)!.method, 'GET')

  r = await fleet(admin, ['canary'])
  t.equal(r.code, 0, r.err)
  t.equal(admin.requests.at(-1)!.url, '/v1/canaries')
  t.equal(r.out, [
    'MODEL     CANARY       BASELINE           SHARE            STATE',
    'simple    version 2    version 1          10%              active',
    'resnet50  servers a,b  the other servers  0% (set to 10%)  rolled back automatically',
    ''
  ].join('\n'))

  r = await fleet(admin, ['canary', 'nope'])
  t.equal(r.code, 1)
  t.equal(r.err, "flotilla fleet: no canary for model 'nope' (HTTP 404)\n")
})

t.test('canary clear, promote and rollback', async (t) => {
  const admin = await startFakeAdmin(t)
  let r = await fleet(admin, ['canary', 'simple', 'clear'])
  t.equal(r.code, 0, r.err)
  t.equal(`${admin.requests.at(-1)!.method} ${admin.requests.at(-1)!.url}`, 'DELETE /v1/models/simple/canary')
  t.match(r.out, /^cleared the canary of simple/)

  r = await fleet(admin, ['canary', 'simple', 'promote'])
  t.equal(r.code, 0, r.err)
  t.equal(`${admin.requests.at(-1)!.method} ${admin.requests.at(-1)!.url}`, 'POST /v1/models/simple/canary/promote')
  t.match(r.out, 'state:          promoted (all traffic to the canary)')
  t.match(r.out, 'share:          100% (set to 10%)')

  r = await fleet(admin, ['canary', 'simple', 'rollback'])
  t.equal(r.code, 0, r.err)
  t.equal(`${admin.requests.at(-1)!.method} ${admin.requests.at(-1)!.url}`, 'POST /v1/models/simple/canary/rollback')
  t.match(r.out, 'rolled back:    0.0 s ago, by hand: manual rollback')
})

t.test('usage errors exit 2 and name the problem; --help exits 0', async (t) => {
  const admin = await startFakeAdmin(t)
  const cases: Array<[string[], RegExp]> = [
    [[], /flotilla fleet needs a command: list, add/],
    [['frob'], /unknown fleet command 'frob'/],
    [['list', 'extra'], /unexpected argument 'extra'/],
    [['drain'], /flotilla fleet drain needs an endpoint name/],
    [['drain', 'alpha', '--timeout-ms', 'soon'], /--timeout-ms must be an integer of at least 0, got 'soon'/],
    [['weight', 'alpha'], /flotilla fleet weight needs a weight/],
    [['undrain'], /needs an endpoint name/],
    [['list', '--bogus'], /Unknown option '--bogus'/],
    [['list', '--force'], /flotilla fleet list does not take --force/],
    [['list', '--admin', 'ftp://h'], /--admin must be an http:\/\/ or https:\/\/ URL, got 'ftp:\/\/h'/]
  ]
  for (const [args, message] of cases) {
    const c = capture()
    const code = await runFleetCommand([...args, ...(args.includes('--admin') ? [] : ['--admin', admin.url])], c.io)
    t.equal(code, 2, args.join(' '))
    t.match(c.err(), message, args.join(' '))
  }
  t.same(admin.requests, [])

  const help = capture()
  t.equal(await runFleetCommand(['--help'], help.io), 0)
  t.equal(help.out(), FLEET_USAGE)
  t.match(FLEET_USAGE, 'canary MODEL set --percent P')
})

t.test('--admin takes a path prefix; a 404 on a path every admin API has says --admin is wrong', async (t) => {
  const admin = await startFakeAdmin(t)
  const r = await fleet(`${admin.url}/ops/`, ['list'])
  t.equal(r.code, 1)
  t.equal(admin.requests.at(-1)!.url, '/ops/v1/endpoints')
  t.equal(r.err, 'flotilla fleet: no route GET /ops/v1/endpoints (HTTP 404)\n' +
    `hint: is ${admin.url}/ops the gateway's admin listener (default http://127.0.0.1:9000) and not its inference port? (--admin URL)\n`)
})

t.test('an answer that is not JSON is a failure, not a crash', async (t) => {
  const server = createServer((_req, res) => { res.writeHead(200, { 'content-type': 'text/html' }); res.end('<html>hello</html>') })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const r = await fleet(url, ['canary'])
  t.equal(r.code, 1)
  t.equal(r.err, `flotilla fleet: the admin API at ${url} answered GET /v1/canaries with something that is not JSON; is --admin the gateway's admin listener?\n`)
})

t.test('an admin API that is not there: exit 1 and a hint', async (t) => {
  const probe = createServer()
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve))
  const port = (probe.address() as AddressInfo).port
  await new Promise((resolve) => probe.close(resolve))
  const r = await fleet(`http://127.0.0.1:${port}`, ['list'])
  t.equal(r.code, 1)
  t.equal(r.err, `flotilla fleet: cannot reach the admin API at http://127.0.0.1:${port} (ECONNREFUSED); ` +
    'is the gateway running with its admin listener on? (--admin URL)\n')
  t.equal(r.out, '')
})
