/**
 * The routing tier through a real gateway on port 0 and fake workers: retries, limits and the queue, per-model
 * policies, the 503 for a model with no healthy server, the 431, and `GET /v2/fleet`.
 */
import t, { type Test } from 'tap'
import { balancerNames, hasBalancer, validateBalancerOptions } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { startGateway, type RunningGateway } from '../../../gateway/main.ts'
import { silentLogger } from '../../../common/logger.ts'
import { closedPort, send, startFakeWorker, type FakeWorker } from '../fixtures/fake-worker.ts'

/** Parses fleet YAML the way the CLI does; health checks off unless the text has its own section. */
function config (yaml: string): ReturnType<typeof parseFleetConfig> {
  const text = yaml.includes('health_check:') ? yaml : `${yaml}\nhealth_check:\n  enabled: false\n`
  return parseFleetConfig(text, {
    file: 'routing-test.yaml',
    isKnownStrategy: hasBalancer,
    knownStrategies: balancerNames(),
    strategyOptionProblems: validateBalancerOptions
  })
}

function servers (...list: Array<{ name: string, port: number, models?: string[], extra?: string }>): string {
  return 'inference_servers:\n' + list.map((s) =>
    `  - { name: ${s.name}, host: 127.0.0.1, port: ${s.port}, models: [${(s.models ?? ['m']).join(', ')}]${s.extra ?? ''} }`).join('\n')
}

async function worker (t: Test, name: string, options: Parameters<typeof startFakeWorker>[1] = {}): Promise<FakeWorker> {
  const w = await startFakeWorker(name, options)
  t.teardown(() => w.close())
  return w
}

async function gateway (t: Test, yaml: string): Promise<RunningGateway> {
  const g = await startGateway({ grpcPort: -1, config: config(yaml), logger: silentLogger(), httpPort: 0, metricsPort: 0, adminPort: -1, deps: { random: () => 0 } })
  t.teardown(() => g.close())
  return g
}

function infer (g: RunningGateway, model = 'm', headers: Record<string, string> = {}): ReturnType<typeof send> {
  return send(g.httpPort, 'POST', `/v2/models/${model}/infer`, { headers: { 'content-type': 'application/json', ...headers }, body: '{"inputs":[]}' })
}

async function metricsText (g: RunningGateway): Promise<string> {
  return (await send(g.metricsPort, 'GET', '/metrics')).body
}

t.test('a worker\'s 503 is retried on another server and counted', async (t) => {
  const full = await worker(t, 'full', { inferStatus: 503 })
  const good = await worker(t, 'good')
  const g = await gateway(t, `${servers({ name: 'full', port: full.port }, { name: 'good', port: good.port })}
load_balancer: { type: round_robin }
retries: { backoff_base_ms: 1, backoff_max_ms: 2 }
`)
  for (let i = 0; i < 6; i++) {
    const answer = await infer(g)
    t.equal(answer.status, 200, answer.body)
    t.equal(answer.headers['x-flotilla-endpoint'], 'good')
  }
  t.ok(full.seen.length >= 3, `the full server was tried (${full.seen.length} times)`)
  const text = await metricsText(g)
  t.match(text, new RegExp(`flotilla_retries_total\\{model="m",cause="unavailable"\\} ${full.seen.length}\\b`))
  t.match(text, /flotilla_requests_total\{model="m",endpoint="good",code="200",protocol="http"\} 6/)
})

t.test('retries off: the worker\'s 503 reaches the client as it is', async (t) => {
  const full = await worker(t, 'full', { inferStatus: 503 })
  const good = await worker(t, 'good')
  const g = await gateway(t, `${servers({ name: 'full', port: full.port }, { name: 'good', port: good.port })}
load_balancer: { type: round_robin }
models:
  m: { max_retries: 0 }
`)
  const answer = await infer(g)
  t.equal(answer.status, 503)
  t.match(answer.body, /Exceeds maximum queue size/)
  t.equal(answer.headers['x-flotilla-endpoint'], 'full')
  t.match(await metricsText(g), /flotilla_retries_denied_total\{model="m",reason="max_retries"\} 1/)
})

t.test('every server at its in-flight limit and no queue: 503 with Retry-After at once', async (t) => {
  const slow = await worker(t, 'slow', { inferDelayMs: 300 })
  const g = await gateway(t, `${servers({ name: 'slow', port: slow.port, extra: ', max_in_flight: 1' })}
load_balancer: { type: least_connections }
gateway: { max_queued_requests: 0 }
`)
  const first = infer(g)
  await new Promise((resolve) => setTimeout(resolve, 50))
  const refused = await infer(g)
  t.equal(refused.status, 503)
  t.equal(refused.headers['retry-after'], '1')
  t.match(JSON.parse(refused.body).error, /every server for model 'm' is at its in-flight limit and the gateway queue is full/)
  t.equal((await first).status, 200)
})

t.test('a queued request gets the first free slot; one queued past queue_timeout_ms gets a 503', async (t) => {
  const slow = await worker(t, 'slow', { inferDelayMs: 200 })
  const g = await gateway(t, `${servers({ name: 'slow', port: slow.port })}
load_balancer: { type: round_robin }
gateway: { max_in_flight_per_server: 1, queue_timeout_ms: 1000 }
`)
  const answers = await Promise.all([infer(g), infer(g)])
  t.strictSame(answers.map((a) => a.status), [200, 200], 'the second waited for the first')
  const text = await metricsText(g)
  t.match(text, /flotilla_queue_wait_seconds_count\{model="m",outcome="admitted"\} 1/)

  const g2 = await gateway(t, `${servers({ name: 'slow', port: slow.port })}
load_balancer: { type: round_robin }
gateway: { max_in_flight_per_server: 1, queue_timeout_ms: 50 }
`)
  const [ok, late] = await Promise.all([infer(g2), infer(g2)])
  t.equal(ok?.status, 200)
  t.equal(late?.status, 503)
  t.equal(late?.headers['retry-after'], '1')
  t.match(JSON.parse(late?.body ?? '{}').error, /stayed at its in-flight limit for 50 ms \(gateway.queue_timeout_ms\)/)
})

t.test('per-model policies: strategy, affinity header and timeout', async (t) => {
  const a = await worker(t, 'a', { inferDelayMs: 0 })
  const b = await worker(t, 'b', { inferDelayMs: 0 })
  const slow = await worker(t, 'slow', { inferDelayMs: 2000 })
  const g = await gateway(t, `${servers(
    { name: 'a', port: a.port, models: ['m', 'sticky'] },
    { name: 'b', port: b.port, models: ['m', 'sticky'] },
    { name: 'slow', port: slow.port, models: ['hasty'] }
  )}
load_balancer: { type: round_robin }
models:
  sticky:
    load_balancer: { type: consistent_hash, hash_header: X-User }
  hasty: { request_timeout_ms: 100 }
`)
  const rotation: string[] = []
  for (let i = 0; i < 4; i++) rotation.push(String((await infer(g)).headers['x-flotilla-endpoint']))
  t.strictSame(rotation, ['a', 'b', 'a', 'b'], 'the fleet-wide round robin for m')

  const byUser = new Map<string, Set<string>>()
  for (let i = 0; i < 24; i++) {
    const user = `user-${i % 6}`
    const answer = await infer(g, 'sticky', { 'x-user': user })
    t.equal(answer.status, 200)
    if (!byUser.has(user)) byUser.set(user, new Set())
    byUser.get(user)!.add(String(answer.headers['x-flotilla-endpoint']))
  }
  for (const [user, seen] of byUser) t.equal(seen.size, 1, `${user} always lands on the same server`)
  t.equal(new Set([...byUser.values()].map((s) => [...s][0])).size, 2, 'and the users are spread over both')

  const hasty = await infer(g, 'hasty')
  t.equal(hasty.status, 504)
  t.equal(JSON.parse(hasty.body).error, "server 'slow' did not answer within 100 ms")

  const view = JSON.parse((await send(g.httpPort, 'GET', '/v2/fleet')).body) as { models: Array<{ name: string, strategy: string }> }
  t.strictSame(view.models.map((m) => [m.name, m.strategy]),
    [['hasty', 'round_robin'], ['m', 'round_robin'], ['sticky', 'consistent_hash']])
})

t.test('a served model with no healthy server: 503 with Retry-After, not 502', async (t) => {
  const port = await closedPort()
  const g = await gateway(t, `${servers({ name: 'gone', port })}
load_balancer: { type: round_robin, panic_threshold_percent: 0 }
outlier_detection: { consecutive_failures: 1, max_ejection_percent: 100 }
`)
  const first = await infer(g)
  t.equal(first.status, 502, 'the first request finds the server down')
  const second = await infer(g)
  t.equal(second.status, 503)
  t.equal(second.headers['retry-after'], '1')
  t.equal(JSON.parse(second.body).error,
    "no healthy server for model 'm': its 1 server is failing health checks or ejected; try again later")
  const text = await metricsText(g)
  t.match(text, /flotilla_ejections_total\{endpoint="gone"\} 1/)
  t.match(text, /flotilla_endpoint_ejected\{endpoint="gone"\} 1/)
  t.match(text, /flotilla_endpoint_up\{endpoint="gone"\} 0/)
})

t.test('GET /v2/fleet shows every endpoint with its state, load and health', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, `${servers({ name: 'a', port: a.port, extra: ', max_in_flight: 4, weight: 3' }, { name: 'down', port: await closedPort() })}
load_balancer: { type: least_connections }
outlier_detection: { consecutive_failures: 1, max_ejection_percent: 100 }
`)
  for (let i = 0; i < 3; i++) await infer(g)
  const answer = await send(g.httpPort, 'GET', '/v2/fleet')
  t.equal(answer.status, 200)
  t.match(answer.headers['content-type'], /application\/json/)
  const view = JSON.parse(answer.body)
  t.match(view, {
    endpoints: [
      { name: 'a', state: 'active', weight: 3, models: ['m'], versions: null, in_flight: 0, max_in_flight: 4, healthy: true, ejected: false, latency_ms: Number },
      { name: 'down', ejected: true, in_flight: 0, max_in_flight: 0 }
    ],
    models: [{ name: 'm', strategy: 'least_connections', endpoints: ['a'], panic: false }],
    queue_waiting: 0,
    requests_in_progress: 0,
    retries_in_progress: 0
  })
  t.equal((await send(g.httpPort, 'POST', '/v2/fleet')).status, 405)
})

t.test('request headers over gateway.max_header_bytes: 431 naming the setting', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, `${servers({ name: 'a', port: a.port })}
load_balancer: { type: round_robin }
gateway: { max_header_bytes: 2048 }
`)
  const answer = await infer(g, 'm', { 'x-big': 'x'.repeat(4096) })
  t.equal(answer.status, 431)
  t.equal(JSON.parse(answer.body).error,
    'request headers exceed the limit of 2048 bytes; send fewer or smaller headers, or raise gateway.max_header_bytes in the fleet file')
  t.equal(a.seen.length, 0, 'nothing reached the worker')
  const fine = await infer(g, 'm', { 'x-small': 'x'.repeat(512) })
  t.equal(fine.status, 200, 'the listener still serves')
})
