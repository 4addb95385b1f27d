import { createServer } from 'node:http'
import t from 'tap'
import { Pool } from 'undici'
import { parseQueueDepth } from '../../../common/protocol/headers.ts'
import { createHttpProbe } from '../../../gateway/health/http-probe.ts'
import { type Endpoint } from '../../../gateway/fleet/types.ts'
import { closedPort } from '../fixtures/fake-worker.ts'
import { endpoints } from '../fixtures/helpers.ts'

t.test('queue depth header', async t => {
  t.equal(parseQueueDepth('7'), 7)
  t.equal(parseQueueDepth('0'), 0)
  for (const bad of [undefined, '', '-1', '1.5', 'x', ['1', '2'], '12345678901']) t.equal(parseQueueDepth(bad), undefined, String(bad))
})

t.test('probes /v2/health/ready and model readiness over real HTTP', async t => {
  const answers: Record<string, number> = { '/v2/health/ready': 200, '/v2/models/m/ready': 400, '/v2/models/a%2Fb/ready': 200 }
  const server = createServer((req, res) => {
    if (req.url === '/v2/models/slow/ready') return // never answers
    res.writeHead(answers[req.url ?? ''] ?? 404, { 'x-flotilla-queue-depth': '3' }).end()
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const port = (server.address() as { port: number }).port
  const endpoint: Endpoint = { ...endpoints('w')[0]!, port, origin: `http://127.0.0.1:${port}` }
  const pool = new Pool(endpoint.origin)
  t.teardown(() => pool.destroy())
  const probe = createHttpProbe(() => pool)

  t.strictSame(await probe(endpoint, undefined, 1000), { ok: true, queueDepth: 3 })
  t.strictSame(await probe(endpoint, 'm', 1000), { ok: false, reason: 'GET /v2/models/m/ready answered 400' })
  t.strictSame(await probe(endpoint, 'a/b', 1000), { ok: true, queueDepth: 3 }, 'model names are one path segment')
  t.strictSame(await probe(endpoint, 'slow', 100), { ok: false, reason: 'GET /v2/models/slow/ready: no answer within 100 ms' })

  const deadPort = await closedPort()
  const dead: Endpoint = { ...endpoint, port: deadPort, origin: `http://127.0.0.1:${deadPort}` }
  const deadPool = new Pool(dead.origin)
  t.teardown(() => deadPool.destroy())
  t.strictSame(await createHttpProbe(() => deadPool)(dead, undefined, 1000), { ok: false, reason: 'GET /v2/health/ready: ECONNREFUSED' })
})
