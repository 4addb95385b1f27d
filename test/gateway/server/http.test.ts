import { request } from 'node:http'
import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { hasBalancer } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { startGateway, type RunningGateway } from '../../../gateway/main.ts'
import { createLogger, silentLogger } from '../../../common/logger.ts'
import { closedPort, send, startFakeWorker, type FakeWorker } from '../fixtures/fake-worker.ts'

interface ServerSpec { name: string, port: number, models: string[], versions?: number[] }

/** A fleet file for servers on 127.0.0.1, parsed the way the CLI parses one. */
function fleet (servers: ServerSpec[], gateway: Record<string, number> = {}): ReturnType<typeof parseFleetConfig> {
  const lines = ['inference_servers:']
  for (const s of servers) {
    lines.push(`  - name: ${s.name}`, '    host: 127.0.0.1', `    port: ${s.port}`, `    models: [${s.models.join(', ')}]`)
    if (s.versions !== undefined) lines.push(`    versions: [${s.versions.join(', ')}]`)
  }
  // These tests pin which requests reach which server: active health probes would add their own.
  lines.push('load_balancer:', '  type: round_robin', 'health_check:', '  enabled: false', 'gateway:')
  for (const [key, value] of Object.entries({ http_port: 0, metrics_port: 0, ...gateway })) lines.push(`  ${key}: ${value}`)
  return parseFleetConfig(lines.join('\n') + '\n', { file: 'test-fleet.yaml', isKnownStrategy: hasBalancer })
}

async function worker (t: Test, name: string, options: Parameters<typeof startFakeWorker>[1] = {}): Promise<FakeWorker> {
  const w = await startFakeWorker(name, options)
  t.teardown(() => w.close())
  return w
}

async function gateway (t: Test, config: ReturnType<typeof fleet>, random = (): number => 0): Promise<RunningGateway> {
  const g = await startGateway({ grpcPort: -1, config, logger: silentLogger(), deps: { random }, adminPort: -1 })
  t.teardown(() => g.close())
  return g
}

function infer (g: RunningGateway, model: string, headers: Record<string, string> = {}, body = '{"inputs":[]}'): ReturnType<typeof send> {
  return send(g.httpPort, 'POST', `/v2/models/${model}/infer`, { headers: { 'content-type': 'application/json', ...headers }, body })
}

function servedBy (answer: { body: string }): string {
  return (JSON.parse(answer.body) as { served_by: string }).served_by
}

t.test('requests for a model alternate between the servers that serve it', async (t) => {
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const c = await worker(t, 'c')
  const g = await gateway(t, fleet([
    { name: 'a', port: a.port, models: ['m'] },
    { name: 'b', port: b.port, models: ['m'] },
    { name: 'c', port: c.port, models: ['solo'] }
  ]))

  const order: string[] = []
  for (let i = 0; i < 4; i++) {
    const answer = await infer(g, 'm')
    t.equal(answer.status, 200)
    t.equal(answer.headers['x-flotilla-endpoint'], servedBy(answer), 'x-flotilla-endpoint names the server that answered')
    order.push(servedBy(answer))
  }
  // random() = 0 starts the rotation at the first server.
  t.strictSame(order, ['a', 'b', 'a', 'b'])

  for (let i = 0; i < 3; i++) {
    const answer = await infer(g, 'solo')
    t.equal(answer.status, 200)
    t.equal(servedBy(answer), 'c', 'a model served by one server only goes there')
  }
  t.equal(c.seen.length, 3)
  t.notOk(a.seen.some((r) => r.url.includes('solo')) || b.seen.some((r) => r.url.includes('solo')))
})

t.test('the rotation of one model is not disturbed by traffic to another', async (t) => {
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const g = await gateway(t, fleet([
    { name: 'a', port: a.port, models: ['m', 'n'] },
    { name: 'b', port: b.port, models: ['m', 'n'] }
  ]))
  const order: string[] = []
  for (let i = 0; i < 3; i++) {
    order.push(servedBy(await infer(g, 'm')))
    await infer(g, 'n')
  }
  t.strictSame(order, ['a', 'b', 'a'])
})

t.test('unknown model, unknown version and malformed paths', async (t) => {
  const a = await worker(t, 'a')
  const b = await worker(t, 'b')
  const g = await gateway(t, fleet([
    { name: 'a', port: a.port, models: ['m', 'v'], versions: [1] },
    { name: 'b', port: b.port, models: ['solo', 'v'], versions: [2, 3] }
  ]))

  const unknown = await infer(g, 'nope')
  t.equal(unknown.status, 404)
  t.match(unknown.headers['content-type'], /^application\/json/)
  t.strictSame(JSON.parse(unknown.body), {
    error: "Request for unknown model: 'nope' is not served by any server in the fleet (served models: m, solo, v)"
  })

  const v2 = await send(g.httpPort, 'POST', '/v2/models/v/versions/2/infer', { body: '{}' })
  t.equal(v2.status, 200)
  t.equal(servedBy(v2), 'b', 'a version goes to a server that lists it')
  t.equal((JSON.parse(v2.body) as { model_version: string }).model_version, '2')
  const v1 = await send(g.httpPort, 'POST', '/v2/models/v/versions/01/infer', { body: '{}' })
  t.equal(servedBy(v1), 'a', 'leading zeros name the same version, as in Triton')

  const v9 = await send(g.httpPort, 'POST', '/v2/models/v/versions/9/infer', { body: '{}' })
  t.equal(v9.status, 404)
  t.strictSame(JSON.parse(v9.body), {
    error: "Request for unknown model: 'v' version 9 is not served by any server in the fleet (versions served: 1, 2, 3)"
  })

  const badVersion = await send(g.httpPort, 'POST', '/v2/models/m/versions/v1/infer', { body: '{}' })
  t.equal(badVersion.status, 404)
  t.equal(badVersion.body, '{"error":"Not Found"}', 'a non-numeric version is not a route, as in Triton')

  const notFound = await send(g.httpPort, 'GET', '/v2/nothing/here')
  t.equal(notFound.status, 404)
  t.equal(notFound.body, '{"error":"Not Found"}')
  const trailing = await send(g.httpPort, 'GET', '/v2/health/live/')
  t.equal(trailing.status, 404, 'no trailing-slash tolerance, as in Triton')

  const wrongMethod = await send(g.httpPort, 'GET', '/v2/models/m/infer')
  t.equal(wrongMethod.status, 405)
  t.equal(wrongMethod.body, '{"error":"Method Not Allowed"}')
  const postLive = await send(g.httpPort, 'POST', '/v2/health/live')
  t.equal(postLive.status, 405)
  t.equal(postLive.body, '{"error":"Method Not Allowed"}')
  const deleteIndex = await send(g.httpPort, 'DELETE', '/v2/repository/index')
  t.equal(deleteIndex.status, 405)
  t.equal(a.seen.length + b.seen.length, 2, 'nothing but the two good requests reached a server')
})

t.test('metadata, ready and config are proxied; health and server metadata are the gateway\'s own', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, fleet([{ name: 'a', port: a.port, models: ['m'] }]))

  const live = await send(g.httpPort, 'GET', '/v2/health/live')
  t.equal(live.status, 200)
  t.equal(live.body, '')
  const ready = await send(g.httpPort, 'GET', '/v2/health/ready')
  t.equal(ready.status, 200)
  t.equal(ready.body, '')

  const meta = await send(g.httpPort, 'GET', '/v2')
  t.equal(meta.status, 200)
  const server = JSON.parse(meta.body) as { name: string, version: string, extensions: string[] }
  t.equal(server.name, 'flotilla')
  t.match(server.version, /^\d+\.\d+\.\d+/)
  t.ok(Array.isArray(server.extensions))

  const model = await send(g.httpPort, 'GET', '/v2/models/m')
  t.equal(model.status, 200)
  t.match(JSON.parse(model.body), { name: 'm', served_by: 'a' })
  t.equal(model.headers['x-flotilla-endpoint'], 'a')
  const versioned = await send(g.httpPort, 'GET', '/v2/models/m/versions/3')
  t.match(JSON.parse(versioned.body), { versions: ['3'] })
  const modelReady = await send(g.httpPort, 'GET', '/v2/models/m/versions/1/ready')
  t.equal(modelReady.status, 200)
  t.equal(modelReady.body, '')
  const config = await send(g.httpPort, 'GET', '/v2/models/m/config')
  t.match(JSON.parse(config.body), { name: 'm', served_by: 'a' })
  t.strictSame(a.seen.map((r) => `${r.method} ${r.url}`), [
    'GET /v2/models/m', 'GET /v2/models/m/versions/3', 'GET /v2/models/m/versions/1/ready', 'GET /v2/models/m/config'
  ])
})

t.test('a server that refuses connections is skipped', async (t) => {
  const a = await worker(t, 'a')
  const dead = await closedPort()
  // random() = 0 starts at the dead server, so every first attempt hits it.
  const g = await gateway(t, fleet([
    { name: 'dead', port: dead, models: ['m'] },
    { name: 'a', port: a.port, models: ['m'] }
  ]))
  for (let i = 0; i < 4; i++) {
    const answer = await infer(g, 'm')
    t.equal(answer.status, 200)
    t.equal(servedBy(answer), 'a')
    t.equal(answer.headers['x-flotilla-endpoint'], 'a')
  }
  t.equal(a.seen.length, 4, 'each request reached the live server exactly once')
})

t.test('every server down: 502 naming the model, the servers tried and the last error', async (t) => {
  const p1 = await closedPort()
  const p2 = await closedPort()
  const g = await gateway(t, fleet([
    { name: 'down-1', port: p1, models: ['m'] },
    { name: 'down-2', port: p2, models: ['m'] }
  ]))
  const answer = await infer(g, 'm')
  t.equal(answer.status, 502)
  t.match(answer.headers['content-type'], /^application\/json/)
  const { error } = JSON.parse(answer.body) as { error: string }
  t.equal(error, `no server serving model 'm' could be reached (tried: down-1, down-2): down-2: connect ECONNREFUSED 127.0.0.1:${p2}`)
})

t.test('a server that does not answer in time: 504', async (t) => {
  const slow = await worker(t, 'slow', { inferDelayMs: 5000 })
  const g = await gateway(t, fleet([{ name: 'slow', port: slow.port, models: ['m'] }], { request_timeout_ms: 150 }))
  const started = Date.now()
  const answer = await infer(g, 'm')
  t.equal(answer.status, 504)
  t.strictSame(JSON.parse(answer.body), { error: "server 'slow' did not answer within 150 ms" })
  t.equal(answer.headers['x-flotilla-endpoint'], 'slow')
  t.ok(Date.now() - started < 3000, 'the gateway did not wait for the server')
})

t.test('a client that goes away cancels its upstream request', async (t) => {
  const slow = await worker(t, 'slow', { inferDelayMs: 5000 })
  const g = await gateway(t, fleet([{ name: 'slow', port: slow.port, models: ['m'] }]))
  const client = request({ host: '127.0.0.1', port: g.httpPort, method: 'POST', path: '/v2/models/m/infer' })
  client.on('error', () => {})
  client.end('{"inputs":[]}')
  while (slow.seen.length === 0) await new Promise((resolve) => setTimeout(resolve, 10))
  client.destroy()
  for (let i = 0; i < 200 && slow.aborted() === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10))
  t.equal(slow.aborted(), 1, 'the worker saw its request cancelled, long before it would have answered')
})

t.test('request bodies: raw bytes pass through; over the limit is a 413', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, fleet([{ name: 'a', port: a.port, models: ['m'] }], { max_body_bytes: 1024 }))

  const bytes = Buffer.alloc(1000)
  for (let i = 0; i < bytes.length; i++) bytes[i] = i % 251
  const binary = await send(g.httpPort, 'POST', '/v2/models/m/infer', {
    headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': '12' },
    body: bytes
  })
  t.equal(binary.status, 200)
  t.equal(a.seen[0]?.body.equals(bytes), true, 'the worker got the exact bytes, whatever the content type')
  t.equal(a.seen[0]?.headers['inference-header-content-length'], '12')

  const noType = await send(g.httpPort, 'POST', '/v2/models/m/infer', { body: '{"inputs":[]}' })
  t.equal(noType.status, 200, 'a body without Content-Type is accepted, as Triton does')

  const big = await send(g.httpPort, 'POST', '/v2/models/m/infer', {
    headers: { 'content-type': 'application/json' },
    body: Buffer.alloc(2048, 0x20)
  })
  t.equal(big.status, 413)
  const { error } = JSON.parse(big.body) as { error: string }
  t.equal(error, 'request body of 2048 bytes exceeds the limit of 1024 bytes; send a smaller request or raise ' +
    'gateway.max_body_bytes in the fleet file')
  t.equal(a.seen.length, 2, 'the oversized request never reached a server')
})

t.test('request ids, trace context and hop-by-hop headers', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, fleet([{ name: 'a', port: a.port, models: ['m'] }]))

  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
  const given = await infer(g, 'm', { 'x-request-id': 'req-42', traceparent })
  const seen = JSON.parse(given.body) as { request_id: string, traceparent: string, headers: string[] }
  t.equal(seen.request_id, 'req-42', 'the client\'s x-request-id reaches the server')
  t.equal(seen.traceparent, traceparent, 'traceparent passes through')
  t.equal(given.headers['x-request-id'], 'req-42', 'and comes back to the client')

  const generated = await infer(g, 'm')
  const id = (JSON.parse(generated.body) as { request_id: string }).request_id
  t.match(id, /^[0-9a-f-]{36}$/, 'an id is generated when the client sent none')
  t.equal(generated.headers['x-request-id'], id, 'the client gets the generated id')

  const hop = await infer(g, 'm', { connection: 'keep-alive, x-client-hop', 'x-client-hop': 'secret', 'keep-alive': 'timeout=9', 'x-end-to-end': '1' })
  const upstream = a.seen[a.seen.length - 1]
  t.equal(upstream?.headers['x-client-hop'], undefined, 'headers named in Connection are not forwarded')
  t.equal(upstream?.headers['keep-alive'], undefined, 'Keep-Alive is not forwarded')
  t.equal(upstream?.headers['x-end-to-end'], '1', 'end-to-end headers are forwarded')
  t.equal(hop.headers['x-worker'], 'a', 'end-to-end response headers come back')
  t.equal(hop.headers['x-worker-hop'], undefined, 'headers the server named in Connection do not come back')
  t.equal(hop.headers['keep-alive'] === 'timeout=5', false, 'the server\'s Keep-Alive does not come back')
})

t.test('repository index: fanned out to every server and merged', async (t) => {
  const a = await worker(t, 'a', {
    index: [
      { name: 'm', version: '1', state: 'READY' },
      { name: 'alpha', version: '1', state: 'READY' },
      { name: 'never_loaded' }
    ]
  })
  const b = await worker(t, 'b', {
    index: [
      { name: 'm', version: '2', state: 'READY' },
      { name: 'm', version: '1', state: 'UNAVAILABLE', reason: 'unloaded' },
      { name: 'never_loaded' }
    ]
  })
  const dead = await closedPort()
  const g = await gateway(t, fleet([
    { name: 'a', port: a.port, models: ['m'] },
    { name: 'dead', port: dead, models: ['m'] },
    { name: 'b', port: b.port, models: ['m'] }
  ]))
  const answer = await send(g.httpPort, 'POST', '/v2/repository/index', { body: '{"ready":false}' })
  t.equal(answer.status, 200)
  t.strictSame(JSON.parse(answer.body), [
    { name: 'alpha', version: '1', state: 'READY' },
    { name: 'm', version: '1', state: 'READY' },
    { name: 'm', version: '2', state: 'READY' },
    { name: 'never_loaded' }
  ].sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0)))
  t.equal(answer.headers['x-flotilla-endpoint'], 'a, b', 'names the servers whose index was merged')
  t.equal(a.seen[0]?.body.toString(), '{"ready":false}', 'the body goes to every server')
  t.equal(b.seen[0]?.body.toString(), '{"ready":false}')
})

t.test('repository index with every server down: 502', async (t) => {
  const g = await gateway(t, fleet([
    { name: 'down-1', port: await closedPort(), models: ['m'] },
    { name: 'down-2', port: await closedPort(), models: ['m'] }
  ]))
  const answer = await send(g.httpPort, 'POST', '/v2/repository/index')
  t.equal(answer.status, 502)
  t.match(JSON.parse(answer.body), {
    error: /^no server in the fleet could be reached for the repository index \(tried: down-1, down-2\): .*ECONNREFUSED/
  })
})

t.test('repository index: no server answered with an index, so the first answer is passed on', async (t) => {
  const a = await worker(t, 'a', { indexError: "Invalid value for 'ready': expected a boolean" })
  const b = await worker(t, 'b', { indexError: "Invalid value for 'ready': expected a boolean" })
  const g = await gateway(t, fleet([
    { name: 'down', port: await closedPort(), models: ['m'] },
    { name: 'a', port: a.port, models: ['m'] },
    { name: 'b', port: b.port, models: ['m'] }
  ]))
  const answer = await send(g.httpPort, 'POST', '/v2/repository/index', { body: '{"ready":"yes"}' })
  t.equal(answer.status, 400)
  t.strictSame(JSON.parse(answer.body), { error: "Invalid value for 'ready': expected a boolean" })
  t.equal(answer.headers['x-flotilla-endpoint'], 'a')
})

t.test('one debug log line per request', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const sink = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push(JSON.parse(line) as Record<string, unknown>)
      done()
    }
  })
  const a = await worker(t, 'a')
  const g = await startGateway({
    grpcPort: -1,
    config: fleet([{ name: 'a', port: a.port, models: ['m'] }]),
    adminPort: -1,
    logger: createLogger({ level: 'debug', destination: sink })
  })
  t.teardown(() => g.close())
  await infer(g, 'm', { 'x-request-id': 'log-1' })
  await send(g.httpPort, 'GET', '/v2/health/live', { headers: { 'x-request-id': 'log-2' } })
  // The line is written once the response has gone, which can be just after the client has it.
  for (let i = 0; i < 50 && lines.filter((l) => l.msg === 'request').length < 2; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  const requests = lines.filter((l) => l.msg === 'request')
  t.equal(requests.length, 2)
  t.match(requests[0], { level: 20, reqId: 'log-1', method: 'POST', model: 'm', endpoint: 'a', status: 200, durationMs: Number })
  t.match(requests[1], { level: 20, reqId: 'log-2', method: 'GET', url: '/v2/health/live', status: 200 })
})

t.test('metrics listener', async (t) => {
  const a = await worker(t, 'a')
  const g = await gateway(t, fleet([
    { name: 'a', port: a.port, models: ['m'] },
    { name: 'down', port: await closedPort(), models: ['other'] }
  ]))
  t.not(g.metricsPort, g.httpPort)
  await infer(g, 'm')
  await infer(g, 'm')
  await infer(g, 'other')
  const scrape = await send(g.metricsPort, 'GET', '/metrics')
  t.equal(scrape.status, 200)
  t.match(scrape.headers['content-type'], /^text\/plain/)
  t.match(scrape.body, /^flotilla_requests_total\{model="m",endpoint="a",code="200",protocol="http"\} 2$/m)
  t.match(scrape.body, /^flotilla_requests_total\{model="other",endpoint="down",code="502",protocol="http"\} 1$/m)
  t.match(scrape.body, /^flotilla_request_duration_seconds_count\{model="m",endpoint="a",protocol="http"\} 2$/m)
  t.match(scrape.body, /^flotilla_upstream_in_flight\{endpoint="a"\} 0$/m)
  t.match(scrape.body, /^process_cpu_user_seconds_total /m, 'default process metrics are there')

  const wrongPath = await send(g.metricsPort, 'GET', '/v2/health/live')
  t.equal(wrongPath.status, 404)
  const wrongMethod = await send(g.metricsPort, 'POST', '/metrics')
  t.equal(wrongMethod.status, 405)
})

t.test('two gateways in one process keep their own metrics', async (t) => {
  const a = await worker(t, 'a')
  const config = fleet([{ name: 'a', port: a.port, models: ['m'] }])
  const g1 = await gateway(t, config)
  const g2 = await gateway(t, config)
  await infer(g1, 'm')
  const s2 = await send(g2.metricsPort, 'GET', '/metrics')
  t.notMatch(s2.body, /flotilla_requests_total\{/, 'a request through one gateway is not counted by the other')
})

t.test('close() lets requests in flight finish, then stops listening', async (t) => {
  const slow = await worker(t, 'slow', { inferDelayMs: 300 })
  const g = await startGateway({ grpcPort: -1, config: fleet([{ name: 'slow', port: slow.port, models: ['m'] }]), logger: silentLogger(), adminPort: -1 })
  const pending = infer(g, 'm')
  await new Promise((resolve) => setTimeout(resolve, 50))
  const closed = g.close()
  const answer = await pending
  t.equal(answer.status, 200, 'the request accepted before close() completed')
  await closed
  t.equal(g.close(), closed, 'close() is idempotent')
  await t.rejects(send(g.httpPort, 'GET', '/v2/health/live'), { code: 'ECONNREFUSED' })
  await t.rejects(send(g.metricsPort, 'GET', '/metrics'), { code: 'ECONNREFUSED' })
})

t.test('options override the gateway section; a negative metrics port disables the listener', async (t) => {
  const a = await worker(t, 'a')
  const config = fleet([{ name: 'a', port: a.port, models: ['m'] }], { http_port: 1, metrics_port: 2 })
  const g = await startGateway({ grpcPort: -1, config, host: '127.0.0.1', httpPort: 0, metricsPort: -1, adminPort: -1, logger: silentLogger() })
  t.teardown(() => g.close())
  t.equal(g.metricsPort, -1)
  t.equal(g.url, `http://127.0.0.1:${g.httpPort}`)
  t.equal((await send(g.httpPort, 'GET', '/v2/health/live')).status, 200)
})

t.test('a port in use is reported and nothing is left listening', async (t) => {
  const a = await worker(t, 'a')
  const first = await gateway(t, fleet([{ name: 'a', port: a.port, models: ['m'] }]))
  await t.rejects(startGateway({
    grpcPort: -1,
    config: fleet([{ name: 'a', port: a.port, models: ['m'] }]),
    httpPort: 0,
    metricsPort: first.metricsPort,
    adminPort: -1,
    logger: silentLogger()
  }), { code: 'EADDRINUSE' })
})

t.test('ready only while every model has a usable server; the 400 says which model has none', async (t) => {
  const a = await worker(t, 'a')
  const dead = await closedPort()
  const config = parseFleetConfig([
    'inference_servers:',
    `  - { name: a, host: 127.0.0.1, port: ${a.port}, models: [m] }`,
    `  - { name: gone, host: 127.0.0.1, port: ${dead}, models: [solo] }`,
    'load_balancer: { type: round_robin }',
    'health_check: { interval_ms: 100, timeout_ms: 100, healthy_threshold: 1, unhealthy_threshold: 1, jitter_percent: 0 }',
    'gateway: { http_port: 0, metrics_port: 0 }'
  ].join('\n') + '\n', { file: 'test-fleet.yaml', isKnownStrategy: hasBalancer })
  const g = await gateway(t, config)
  let ready = await send(g.httpPort, 'GET', '/v2/health/ready')
  for (let i = 0; i < 50 && ready.status === 200; i++) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    ready = await send(g.httpPort, 'GET', '/v2/health/ready')
  }
  t.equal(ready.status, 400, 'a model whose only server is down makes the gateway not ready')
  t.match(ready.headers['content-type'], /application\/json/)
  t.match(JSON.parse(ready.body), { error: /no usable server for model 'solo'/ })
})
