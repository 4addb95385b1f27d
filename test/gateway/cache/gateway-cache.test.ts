/**
 * The response cache in a running gateway in front of a real worker: the header, hits across the HTTP JSON, HTTP
 * binary and gRPC fronts, a model cached because its config.pbtxt says so, `GET /v2/fleet`, the metrics, and
 * `flotilla cache stats | purge` through the admin API.
 */
import * as grpc from '@grpc/grpc-js'
import t from 'tap'
import { request } from 'undici'
import { silentLogger } from '../../../common/logger.ts'
import { encodeModelInferRequest } from '../../../common/protocol/grpc/grpc-codec.ts'
import { createInferenceClient } from '../../../common/protocol/grpc/grpc-service.ts'
import { runFleetCommand } from '../../../gateway/admin/fleet-cli.ts'
import { hasBalancer } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { startGateway } from '../../../gateway/main.ts'
import { startWorker } from '../../../worker/main.ts'
import { identityConfig } from '../../helpers/model-repo.ts'

const dir = t.testdir({
  echo: { 'config.pbtxt': identityConfig('echo', 'TYPE_FP32', [-1]), 1: {} },
  // Cached because its own config says so (Triton's response_cache), with nothing in the fleet file.
  byconfig: { 'config.pbtxt': identityConfig('byconfig', 'TYPE_FP32', [-1]) + '\nresponse_cache { enable: true }', 1: {} },
  plain: { 'config.pbtxt': identityConfig('plain', 'TYPE_FP32', [-1]), 1: {} }
})
const worker = await startWorker({ modelRepository: dir, httpPort: 0, grpcPort: -1, metricsPort: -1, logger: silentLogger(), shutdownQuietMs: 0 })
t.teardown(() => worker.close())
const config = parseFleetConfig([
  'inference_servers:',
  `  - { name: w, host: 127.0.0.1, port: ${worker.httpPort}, models: [echo, byconfig, plain] }`,
  'load_balancer: { type: round_robin }',
  'cache: { models: { echo: { enabled: true } } }',
  'gateway: { http_port: 0, grpc_port: 0, metrics_port: 0, admin_port: 0 }'
].join('\n') + '\n', { file: 'fleet.yaml', isKnownStrategy: hasBalancer })
const gw = await startGateway({ config, logger: silentLogger() })
t.teardown(() => gw.close())
const base = `http://127.0.0.1:${gw.httpPort}`

async function infer (model: string, data: number[], extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): Promise<{ status: number, cache: unknown, endpoint: unknown, json: { id?: string, outputs: Array<{ data: number[] }> } }> {
  const res = await request(`${base}/v2/models/${model}/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ ...extra, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [data.length], data }] })
  })
  return { status: res.statusCode, cache: res.headers['x-flotilla-cache'], endpoint: res.headers['x-flotilla-endpoint'], json: await res.body.json() as never }
}

t.test('x-flotilla-cache: miss then hit, with the request\'s own id; models not cached carry no header', async (t) => {
  const first = await infer('echo', [1, 2, 3], { id: 'one' })
  t.match(first, { status: 200, cache: 'miss', endpoint: 'w', json: { id: 'one', outputs: [{ data: [1, 2, 3] }] } })
  const second = await infer('echo', [1, 2, 3], { id: 'two' })
  t.match(second, { status: 200, cache: 'hit', json: { id: 'two', outputs: [{ data: [1, 2, 3] }] } })
  t.equal(second.endpoint, undefined, 'no server answered a hit')
  t.equal((await infer('echo', [1, 2, 3], {}, { 'cache-control': 'no-store' })).cache, 'bypass')
  const plain = await infer('plain', [1])
  t.equal(plain.cache, undefined)
  t.equal((await infer('plain', [1])).cache, undefined)
})

t.test('a model whose config.pbtxt enables response_cache is cached by the gateway', async (t) => {
  // The configs are asked at start; wait for the answer rather than for a fixed time.
  let view: { models: Array<{ name: string, cache: { cached: boolean, decided_by: string } | null }> } = { models: [] }
  for (let i = 0; i < 50; i++) {
    view = await (await request(`${base}/v2/fleet`)).body.json() as typeof view
    if (view.models.find((m) => m.name === 'byconfig')?.cache?.cached === true) break
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  t.match(view.models.find((m) => m.name === 'byconfig')?.cache, { cached: true, decided_by: 'config.pbtxt response_cache' })
  t.match(view.models.find((m) => m.name === 'echo')?.cache, { cached: true, decided_by: 'fleet file (cache.models)' })
  t.match(view.models.find((m) => m.name === 'plain')?.cache, { cached: false })
  t.equal((await infer('byconfig', [4])).cache, 'miss')
  t.equal((await infer('byconfig', [4])).cache, 'hit')
})

t.test('a gRPC client gets hits too, named in the response metadata', async (t) => {
  const client = createInferenceClient(`127.0.0.1:${gw.grpcPort}`)
  t.teardown(() => { client.close() })
  const msg = encodeModelInferRequest('echo', '', { parameters: {}, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2], data: new Float32Array([5, 6]) }] })
  const call = (): Promise<{ cache: unknown }> => new Promise((resolve, reject) => {
    let cache: unknown
    const c = client.ModelInfer(msg, new grpc.Metadata(), (err) => { if (err !== null) reject(err); else resolve({ cache }) })
    c.on('metadata', (m: grpc.Metadata) => { cache = m.get('x-flotilla-cache')[0] })
  })
  t.equal((await call()).cache, 'miss')
  t.equal((await call()).cache, 'hit')
})

t.test('stats and purge through the admin API and the CLI; the metrics count what happened', async (t) => {
  const io = (): { stdout: { write: (s: string) => boolean }, stderr: { write: (s: string) => boolean }, text: () => string, env: NodeJS.ProcessEnv, readFile: () => string, sleep: () => Promise<void> } => {
    let text = ''
    return { stdout: { write: (s) => { text += s; return true } }, stderr: { write: (s) => { text += s; return true } }, text: () => text, env: {}, readFile: () => '', sleep: async () => {} }
  }
  const admin = `http://127.0.0.1:${gw.adminPort}`
  const stats = io()
  t.equal(await runFleetCommand(['cache', 'stats', '--admin', admin], stats as never), 0, stats.text())
  t.match(stats.text(), /local: \d+ entr(y|ies)/)
  t.match(stats.text(), /echo\s+cached\s+fleet file/)
  const purge = io()
  t.equal(await runFleetCommand(['cache', 'purge', 'echo', '--admin', admin], purge as never), 0, purge.text())
  t.match(purge.text(), /purged echo: [1-9]\d* local entr/)
  t.equal((await infer('echo', [1, 2, 3])).cache, 'miss', 'purged')
  const unknown = io()
  t.equal(await runFleetCommand(['cache', 'purge', 'nope', '--admin', admin], unknown as never), 1)
  t.match(unknown.text(), /nope/)

  const metrics = await (await request(`http://127.0.0.1:${gw.metricsPort}/metrics`)).body.text()
  t.match(metrics, /flotilla_cache_requests_total\{model="echo",result="hit"\} [1-9]/)
  t.match(metrics, /flotilla_cache_requests_total\{model="echo",result="miss"\} [1-9]/)
  t.match(metrics, /flotilla_cache_entries [0-9]/)
  t.match(metrics, /flotilla_cache_bytes [0-9]/)
})

t.test('a canary split by versions: each side is served its own cached answers, never the other side\'s', async (t) => {
  const versioned = t.testdir({
    split: { 'config.pbtxt': identityConfig('split', 'TYPE_FP32', [-1]) + '\nversion_policy: { all: {} }', 1: {}, 2: {} }
  })
  const w = await startWorker({ modelRepository: versioned, httpPort: 0, grpcPort: -1, metricsPort: -1, logger: silentLogger(), shutdownQuietMs: 0 })
  t.teardown(() => w.close())
  const g = await startGateway({
    config: parseFleetConfig([
      'inference_servers:',
      `  - { name: w, host: 127.0.0.1, port: ${w.httpPort}, models: [split] }`,
      'load_balancer: { type: round_robin }',
      'cache: { models: { split: { enabled: true } } }',
      'canary: { split: { baseline_version: 1, canary_version: 2, percent: 50, force_header: { name: x-canary, value: "1" } } }',
      'gateway: { http_port: 0, grpc_port: -1, metrics_port: 0, admin_port: -1 }'
    ].join('\n') + '\n', { file: 'fleet.yaml', isKnownStrategy: hasBalancer }),
    logger: silentLogger()
  })
  t.teardown(() => g.close())
  const seen: Array<{ forced: boolean, cache: unknown, version: string }> = []
  for (let i = 0; i < 40; i++) {
    const forced = i % 4 === 0
    const res = await request(`http://127.0.0.1:${g.httpPort}/v2/models/split/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(forced ? { 'x-canary': '1' } : {}) },
      body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [7] }] })
    })
    const body = await res.body.json() as { model_version: string }
    seen.push({ forced, cache: res.headers['x-flotilla-cache'], version: body.model_version })
  }
  t.ok(seen.filter((s) => s.forced).every((s) => s.version === '2'), 'every forced request answered by the canary, hits included')
  const hits = seen.filter((s) => s.cache === 'hit')
  t.ok(hits.some((s) => s.version === '1') && hits.some((s) => s.version === '2'), 'both sides served hits')
  t.equal(seen.filter((s) => s.cache === 'miss').length, 2, 'one miss per side, then hits')
})
