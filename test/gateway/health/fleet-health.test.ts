/** Health through a running gateway: real HTTP upstreams whose readiness the test flips. */
import { createServer, type Server } from 'node:http'
import t, { type Test } from 'tap'
import { silentLogger } from '../../../common/logger.ts'
import { hasBalancer } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { startGateway } from '../../../gateway/main.ts'
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
  const g = await startGateway({ config, logger: silentLogger(), metricsPort: -1 })
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
  const g = await startGateway({ config, logger: silentLogger(), metricsPort: -1 })
  t.teardown(() => g.close())

  b.failInfer = true
  const statuses: number[] = []
  for (let i = 0; i < 30; i++) statuses.push((await post(`${g.url}/v2/models/m/infer`, '{"inputs":[]}')).status)
  t.equal(statuses.filter(s => s === 500).length, 5, 'exactly the five failures that ejected b reached a client')
  t.equal(b.infers, 5, 'b got nothing after its ejection')
  const last = statuses.slice(-10)
  t.ok(last.every(s => s === 200), 'the rest is served by a and c')
})
