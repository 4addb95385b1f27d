/**
 * Canary routing through a real gateway on port 0 with fake workers (`canary/canaries.ts` and the split in
 * `server/http.ts`): the share by version and by servers, the force and sticky headers, requests that are not
 * split, the automatic rollback with its metrics, a canary from the fleet file, and a side with no endpoint.
 *
 * The fake worker answers with the version named in the URL it got, so a version split shows in every answer.
 */
import { Pool } from 'undici'
import t, { type Test } from 'tap'
import { stickyPoint } from '../../../gateway/canary/canary.ts'
import { servers, testConfig, worker } from '../fixtures/gateway-config.ts'
import { startGateway, type RunningGateway } from '../../../gateway/main.ts'
import { silentLogger } from '../../../common/logger.ts'
import { seededRandom } from '../../../common/seeded-random.ts'
import { send, type Answer } from '../fixtures/fake-worker.ts'

async function gateway (t: Test, yaml: string, seed = 1): Promise<RunningGateway> {
  const g = await startGateway({
    grpcPort: -1,
    config: testConfig(yaml), logger: silentLogger(), httpPort: 0, metricsPort: 0, adminPort: 0, env: {}, deps: { random: seededRandom(seed) }
  })
  t.teardown(() => g.close())
  return g
}

/** An admin call; every change carries `Content-Type: application/json`, body or not, as the admin API requires. */
function admin (g: RunningGateway, method: string, path: string, body?: unknown): Promise<Answer> {
  return send(g.adminPort, method, path, {
    ...(method === 'GET' ? {} : { headers: { 'content-type': 'application/json' } }),
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
}

async function setCanary (t: Test, g: RunningGateway, model: string, body: unknown): Promise<void> {
  const answer = await admin(g, 'PUT', `/v1/models/${model}/canary`, body)
  t.equal(answer.status, 200, `canary set: ${answer.body}`)
}

async function canaryView (g: RunningGateway, model = 'm'): Promise<any> {
  return JSON.parse((await admin(g, 'GET', `/v1/models/${model}/canary`)).body)
}

async function metricsText (g: RunningGateway): Promise<string> {
  return (await send(g.metricsPort, 'GET', '/metrics')).body
}

interface Reply { status: number, endpoint: string, version: string, body: string }

/** A keep-alive client for the gateway's HTTP port, so that thousands of requests take a second, not ten. */
function client (t: Test, g: RunningGateway): { infer: (path?: string, headers?: Record<string, string>) => Promise<Reply>, many: (n: number, path?: string, headers?: (i: number) => Record<string, string>) => Promise<Reply[]> } {
  const pool = new Pool(g.url, { connections: 64 })
  t.teardown(() => pool.close())
  const infer = async (path = '/v2/models/m/infer', headers: Record<string, string> = {}): Promise<Reply> => {
    const res = await pool.request({ method: 'POST', path, headers: { 'content-type': 'application/json', ...headers }, body: '{"inputs":[]}' })
    const body = await res.body.text()
    let version = ''
    try { version = String((JSON.parse(body) as { model_version?: unknown }).model_version ?? '') } catch {}
    return { status: res.statusCode, endpoint: String(res.headers['x-flotilla-endpoint']), version, body }
  }
  const many = async (n: number, path?: string, headers: (i: number) => Record<string, string> = () => ({})): Promise<Reply[]> => {
    const out: Reply[] = []
    for (let start = 0; start < n; start += 64) {
      const batch = []
      for (let i = start; i < Math.min(n, start + 64); i++) batch.push(infer(path, headers(i)))
      out.push(...await Promise.all(batch))
    }
    return out
  }
  return { infer, many }
}

function count<T> (items: readonly T[], pred: (x: T) => boolean): number {
  let n = 0
  for (const x of items) if (pred(x)) n++
  return n
}

/** Whether `k` successes in `n` tries is within 4 standard deviations of a binomial with probability `p`. */
function withinFourSigma (t: Test, k: number, n: number, p: number, what: string): void {
  const mean = n * p
  const sigma = Math.sqrt(n * p * (1 - p))
  t.ok(Math.abs(k - mean) <= 4 * sigma, `${what}: ${k} of ${n}, expected ${mean} ± ${(4 * sigma).toFixed(1)}`)
}

function metric (text: string, line: RegExp): number | undefined {
  const m = new RegExp(`^${line.source} ([0-9.e+-]+)$`, 'm').exec(text)
  return m === null ? undefined : Number(m[1])
}

t.test('a 90/10 version split of 2000 requests lands within 4 sigma; the path names the version and keeps the query', async (t) => {
  const v = await worker(t, 'v')
  const g = await gateway(t, servers({ name: 'v', port: v.port, extra: ', versions: [1, 2]' }))
  await setCanary(t, g, 'm', { baseline_version: 1, canary_version: 2, percent: 10, auto_rollback: { enabled: false } })
  const { many } = client(t, g)
  const replies = await many(2000, '/v2/models/m/infer?trace=on&x=1')
  t.equal(count(replies, (r) => r.status === 200), 2000, 'every request answered')
  const canary = count(replies, (r) => r.version === '2')
  t.equal(count(replies, (r) => r.version === '1') + canary, 2000, 'each went to version 1 or 2, none unversioned')
  withinFourSigma(t, canary, 2000, 0.1, 'canary share')

  const urls = new Set(v.seen.filter((r) => r.method === 'POST').map((r) => r.url))
  t.strictSame([...urls].sort(), ['/v2/models/m/versions/1/infer?trace=on&x=1', '/v2/models/m/versions/2/infer?trace=on&x=1'],
    'rewritten to the version\'s path, query string kept')

  const view = await canaryView(g)
  t.equal(view.canary.requests, canary, 'the canary side counted every canary request')
  t.equal(view.baseline.requests, 2000 - canary)
  t.equal(view.canary.errors + view.baseline.errors, 0)
  const text = await metricsText(g)
  t.equal(metric(text, /flotilla_canary_requests_total\{model="m",side="canary",outcome="ok"\}/), canary)
  t.equal(metric(text, /flotilla_canary_requests_total\{model="m",side="baseline",outcome="ok"\}/), 2000 - canary)
  t.equal(metric(text, /flotilla_canary_percent\{model="m"\}/), 10)
  t.equal(metric(text, /flotilla_canary_request_duration_seconds_count\{model="m",side="canary"\}/), canary)
})

t.test('only inference naming no version is split: a named version, metadata and readiness are not, nor counted', async (t) => {
  const v = await worker(t, 'v')
  const g = await gateway(t, servers({ name: 'v', port: v.port, extra: ', versions: [1, 2]' }))
  await setCanary(t, g, 'm', { baseline_version: 1, canary_version: 2, percent: 50 })
  const { infer } = client(t, g)
  for (let i = 0; i < 20; i++) {
    const one = await infer('/v2/models/m/versions/1/infer')
    t.equal(one.version, '1', 'a request naming version 1 goes to version 1')
  }
  for (let i = 0; i < 10; i++) {
    const two = await infer('/v2/models/m/versions/2/infer?q=1')
    t.equal(two.version, '2')
  }
  for (const path of ['/v2/models/m', '/v2/models/m/ready', '/v2/models/m/config']) {
    const answer = await send(g.httpPort, 'GET', path)
    t.equal(answer.status, 200, path)
  }
  const seenPaths = v.seen.map((r) => r.url)
  t.ok(seenPaths.includes('/v2/models/m'), 'metadata path sent as it was')
  t.ok(seenPaths.includes('/v2/models/m/ready'))
  t.ok(seenPaths.includes('/v2/models/m/config'))
  t.ok(seenPaths.includes('/v2/models/m/versions/2/infer?q=1'))
  t.equal(count(seenPaths, (p) => p === '/v2/models/m/versions/1/infer'), 20)

  const view = await canaryView(g)
  t.equal(view.baseline.requests, 0, 'nothing was counted on the baseline')
  t.equal(view.canary.requests, 0, 'nothing was counted on the canary')
  t.equal(metric(await metricsText(g), /flotilla_canary_requests_total\{model="m",side="canary",outcome="ok"\}/), undefined)

  // And one unversioned request is.
  await infer()
  const after = await canaryView(g)
  t.equal(after.baseline.requests + after.canary.requests, 1)
})

t.test('the force header sends every request to the canary, even rolled back; another value does not', async (t) => {
  const v = await worker(t, 'v')
  const g = await gateway(t, servers({ name: 'v', port: v.port, extra: ', versions: [1, 2]' }))
  // Forced requests count for the canary side; the automatic rollback is off so that only the split is tested here.
  await setCanary(t, g, 'm', { baseline_version: 1, canary_version: 2, percent: 10, force_header: { name: 'X-Canary', value: 'please' }, auto_rollback: { enabled: false } })
  const { many } = client(t, g)
  const forced = await many(60, undefined, () => ({ 'x-canary': 'please' }))
  t.equal(count(forced, (r) => r.version === '2'), 60, 'every forced request went to the canary')
  const other = await many(300, undefined, () => ({ 'x-canary': 'nope' }))
  withinFourSigma(t, count(other, (r) => r.version === '2'), 300, 0.1, 'another value is split as usual')

  t.equal((await admin(g, 'POST', '/v1/models/m/canary/rollback')).status, 200)
  const plain = await many(50)
  t.equal(count(plain, (r) => r.version === '1'), 50, 'rolled back: everything else to the baseline')
  const stillForced = await many(20, undefined, () => ({ 'X-CANARY': 'please' }))
  t.equal(count(stillForced, (r) => r.version === '2'), 20, 'the force header still reaches the canary')
})

t.test('sticky header: 50 keys over 20 requests each keep their side, as stickyPoint says', async (t) => {
  const v = await worker(t, 'v')
  const g = await gateway(t, servers({ name: 'v', port: v.port, extra: ', versions: [1, 2]' }))
  await setCanary(t, g, 'm', { baseline_version: 1, canary_version: 2, percent: 30, sticky_header: 'X-User', auto_rollback: { enabled: false } })
  const { many } = client(t, g)
  const keys = Array.from({ length: 50 }, (_, i) => `user-${i}`)
  const replies = await many(50 * 20, undefined, (i) => ({ 'x-user': keys[i % 50]! }))
  const sides = new Map<string, Set<string>>()
  replies.forEach((r, i) => {
    const key = keys[i % 50]!
    if (!sides.has(key)) sides.set(key, new Set())
    sides.get(key)!.add(r.version)
  })
  let onCanary = 0
  let agreeing = 0
  for (const key of keys) {
    const seen = [...sides.get(key) ?? []]
    t.equal(seen.length, 1, `${key} stayed on one side (${seen.join(', ')})`)
    if (seen[0] === '2') onCanary++
    if ((seen[0] === '2') === (stickyPoint(key) < 0.3)) agreeing++
  }
  t.equal(agreeing, 50, 'each key is on the side its sticky point gives')
  withinFourSigma(t, onCanary, 50, 0.3, 'keys on the canary')
  t.ok(onCanary > 0 && onCanary < 50, 'both sides have keys')

  // Requests without the key (or with an empty one) are split by the draw.
  const keyless = await many(200, undefined, (i) => i % 2 === 0 ? {} : { 'x-user': '' })
  withinFourSigma(t, count(keyless, (r) => r.version === '2'), 200, 0.3, 'requests without a key')
})

t.test('a servers split sends canary requests only to the canary servers, unrewritten', async (t) => {
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const c = await worker(t, 'c')
  const g = await gateway(t, servers({ name: 'a', port: a.port }, { name: 'b', port: b.port }, { name: 'c', port: c.port }))
  await setCanary(t, g, 'm', { canary_servers: ['c'], percent: 25, auto_rollback: { enabled: false } })
  const { many } = client(t, g)
  const replies = await many(400)
  t.equal(count(replies, (r) => r.status === 200), 400)
  const onC = count(replies, (r) => r.endpoint === 'c')
  withinFourSigma(t, onC, 400, 0.25, 'requests on the canary server')
  t.ok(count(replies, (r) => r.endpoint === 'a') > 0 && count(replies, (r) => r.endpoint === 'b') > 0, 'the baseline is both other servers')
  t.equal(count(replies, (r) => r.version !== ''), 0, 'no version named: the path is the request\'s own')
  t.ok(c.seen.every((r) => r.url === '/v2/models/m/infer'))

  const view = await canaryView(g)
  t.equal(view.canary.requests, onC, 'every request c served was counted as canary')
  t.equal(view.baseline.requests, 400 - onC, 'and every one a or b served as baseline')

  t.equal((await admin(g, 'POST', '/v1/models/m/canary/promote')).status, 200)
  const promoted = await many(30)
  t.equal(count(promoted, (r) => r.endpoint === 'c'), 30, 'promoted: only the canary server')
  t.equal((await admin(g, 'DELETE', '/v1/models/m/canary')).status, 200)
  const cleared = await many(30)
  t.strictSame(new Set(cleared.map((r) => r.endpoint)), new Set(['a', 'b', 'c']), 'cleared: every server again')
})

/** Sends requests one at a time until the canary is rolled back or `max` were sent; how many were sent. */
async function untilRolledBack (g: RunningGateway, infer: () => Promise<Reply>, max: number): Promise<Reply[]> {
  const replies: Reply[] = []
  for (let i = 0; i < max; i++) {
    replies.push(await infer())
    if (i % 5 === 4 && (await canaryView(g)).percent === 0) break
  }
  return replies
}

t.test('a failing canary is rolled back automatically, with its metrics', async (t) => {
  const good = await worker(t, 'good')
  const bad = await worker(t, 'bad', { inferStatus: 500 })
  const g = await gateway(t, `${servers({ name: 'good', port: good.port }, { name: 'bad', port: bad.port })}
outlier_detection: { enabled: false }
`)
  await setCanary(t, g, 'm', { canary_servers: ['bad'], percent: 50, auto_rollback: { min_requests: 20, window_ms: 10000 } })
  const { infer } = client(t, g)
  const replies = await untilRolledBack(g, () => infer(), 200)
  const failed = count(replies, (r) => r.status === 500)
  t.ok(failed >= 20, `the canary got its min_requests (${failed} failed requests)`)
  t.equal(count(replies, (r) => r.status === 500 && r.endpoint !== 'bad'), 0, 'only the canary failed')

  const view = await canaryView(g)
  t.equal(view.percent, 0)
  t.equal(view.configured_percent, 50)
  t.match(view.rolled_back, { automatic: true, reason: /canary error rate 100\.0% > 2x baseline 0\.0%.*over the last 10 s/ })
  t.equal(view.canary.errors, failed)
  t.equal(view.canary.error_rate, 1)

  const after = await Promise.all(Array.from({ length: 20 }, () => infer()))
  t.equal(count(after, (r) => r.endpoint === 'good' && r.status === 200), 20, 'after the rollback, the baseline takes everything')

  const text = await metricsText(g)
  t.equal(metric(text, /flotilla_canary_rollbacks_total\{model="m",trigger="automatic"\}/), 1)
  t.equal(metric(text, /flotilla_canary_rollbacks_total\{model="m",trigger="manual"\}/), undefined)
  t.equal(metric(text, /flotilla_canary_percent\{model="m"\}/), 0)
  t.equal(metric(text, /flotilla_canary_requests_total\{model="m",side="canary",outcome="error"\}/), failed)
  t.equal(metric(text, /flotilla_canary_requests_total\{model="m",side="canary",outcome="ok"\}/), undefined)
  t.equal(metric(text, /flotilla_canary_requests_total\{model="m",side="baseline",outcome="ok"\}/), replies.length - failed + 20)

  // A manual rollback on top counts as manual.
  t.equal((await admin(g, 'POST', '/v1/models/m/canary/rollback')).status, 200)
  t.equal(metric(await metricsText(g), /flotilla_canary_rollbacks_total\{model="m",trigger="manual"\}/), 1)
})

t.test('a failing canary server is rolled back with outlier detection on (the default)', async (t) => {
  const good = await worker(t, 'good')
  const good2 = await worker(t, 'good2')
  const bad = await worker(t, 'bad', { inferStatus: 500 })
  const g = await gateway(t, servers({ name: 'good', port: good.port }, { name: 'good2', port: good2.port }, { name: 'bad', port: bad.port }))
  await setCanary(t, g, 'm', { canary_servers: ['bad'], percent: 50, auto_rollback: { min_requests: 20, window_ms: 10000 } })
  const { infer } = client(t, g)
  const replies = await untilRolledBack(g, () => infer(), 200)
  const view = await canaryView(g)
  t.equal(view.percent, 0, `rolled back after ${replies.length} requests (canary side: ${JSON.stringify(view.canary)}, ${bad.seen.length} reached the canary server)`)
  t.match(view.rolled_back, { automatic: true, reason: /canary error rate/ })
})

t.test('a canary from the fleet file routes exactly like one set through the admin API', async (t) => {
  const v = await worker(t, 'v')
  const base = servers({ name: 'v', port: v.port, extra: ', versions: [1, 2]' })
  const fromFile = await gateway(t, `${base}canary:
  m:
    baseline_version: 1
    canary_version: 2
    percent: 20
    force_header: { name: X-Canary, value: '1' }
    sticky_header: X-User
    auto_rollback: { enabled: false, min_requests: 50 }
`, 7)
  const fromAdmin = await gateway(t, base, 7)
  await setCanary(t, fromAdmin, 'm', {
    baseline_version: 1, canary_version: 2, percent: 20, force_header: { name: 'X-Canary', value: '1' }, sticky_header: 'X-User', auto_rollback: { enabled: false, min_requests: 50 }
  })

  const fileView = await canaryView(fromFile)
  const adminView = await canaryView(fromAdmin)
  delete fileView.rolled_back
  delete adminView.rolled_back
  t.strictSame(fileView, adminView, 'the same view, defaults filled in the same way')
  t.match(fileView, { split: 'version', percent: 20, force_header: { name: 'x-canary', value: '1' }, sticky_header: 'x-user', auto_rollback: { enabled: false, min_requests: 50, window_ms: 60000 } })
  t.match(JSON.parse((await admin(fromFile, 'GET', '/v1/canaries')).body), { canaries: [{ model: 'm', percent: 20 }] })
  t.match(JSON.parse((await admin(fromFile, 'GET', '/v1/config')).body).canary, { m: { baseline_version: 1, canary_version: 2, percent: 20 } })

  // One request at a time, the same seed: the same draws, hence the same sides in the same order.
  const a = client(t, fromFile)
  const b = client(t, fromAdmin)
  const seqFile: string[] = []
  const seqAdmin: string[] = []
  for (let i = 0; i < 150; i++) {
    seqFile.push((await a.infer()).version)
    seqAdmin.push((await b.infer()).version)
  }
  t.strictSame(seqFile, seqAdmin, 'the same sequence of sides')
  withinFourSigma(t, count(seqFile, (x) => x === '2'), 150, 0.2, 'file canary share')
  const keys = Array.from({ length: 40 }, (_, i) => `key-${i}`)
  const stickyFile = await a.many(40, undefined, (i) => ({ 'x-user': keys[i]! }))
  const stickyAdmin = await b.many(40, undefined, (i) => ({ 'x-user': keys[i]! }))
  t.strictSame(stickyFile.map((r) => r.version), keys.map((k) => stickyPoint(k) < 0.2 ? '2' : '1'), 'the file\'s sticky header keeps keys where stickyPoint puts them')
  t.strictSame(stickyFile.map((r) => r.version), stickyAdmin.map((r) => r.version))
  const forced = await a.many(20, undefined, () => ({ 'x-canary': '1' }))
  t.equal(count(forced, (r) => r.version === '2'), 20, 'the file\'s force header works')

  t.equal((await admin(fromFile, 'POST', '/v1/models/m/canary/rollback')).status, 200, 'a file canary can be rolled back through the API')
  t.equal(count(await a.many(20), (r) => r.version === '1'), 20)
})

t.test('when the chosen side has no endpoint, the other side serves and is counted', async (t) => {
  const one = await worker(t, 'one')
  const two = await worker(t, 'two')
  const g = await gateway(t, servers({ name: 'one', port: one.port, extra: ', versions: [1]' }, { name: 'two', port: two.port, extra: ', versions: [2]' }))
  await setCanary(t, g, 'm', { baseline_version: 1, canary_version: 2, percent: 100, auto_rollback: { enabled: false } })
  const { many } = client(t, g)
  const before = await many(10)
  t.equal(count(before, (r) => r.endpoint === 'two' && r.version === '2'), 10, 'percent 100: version 2 on its server')

  t.equal((await admin(g, 'POST', '/v1/endpoints/two/drain?wait=1')).status, 200)
  const drained = await many(10)
  t.equal(count(drained, (r) => r.status === 200 && r.endpoint === 'one' && r.version === '1'), 10,
    'the canary version has no endpoint: the baseline version serves, at its own path')
  const view = await canaryView(g)
  t.equal(view.canary.requests, 10)
  t.equal(view.baseline.requests, 10, 'and those requests count for the baseline')

  // Servers split, the other way round: percent 0 sends everything to the baseline, which is drained.
  const a = await worker(t, 'a')
  const c = await worker(t, 'c')
  const g2 = await gateway(t, servers({ name: 'a', port: a.port }, { name: 'c', port: c.port }))
  await setCanary(t, g2, 'm', { canary_servers: ['c'], percent: 0 })
  const c2 = client(t, g2)
  t.equal(count(await c2.many(10), (r) => r.endpoint === 'a'), 10, 'percent 0: the baseline only')
  t.equal((await admin(g2, 'POST', '/v1/endpoints/a/drain?wait=1')).status, 200)
  const fallback = await c2.many(10)
  t.equal(count(fallback, (r) => r.status === 200 && r.endpoint === 'c'), 10, 'the baseline has no endpoint: the canary serves')
  t.match(await canaryView(g2), { canary: { requests: 10 }, baseline: { requests: 10 } })
})
