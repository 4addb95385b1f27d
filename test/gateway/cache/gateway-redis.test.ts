/**
 * The shared tier for real: two gateway replicas in front of one worker share entries through a real redis-server,
 * and Redis killed under load fails no request; its hits resume when it is back.
 */
import t from 'tap'
import { request } from 'undici'
import { silentLogger } from '../../../common/logger.ts'
import { hasBalancer } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { startGateway, type RunningGateway } from '../../../gateway/main.ts'
import { startWorker } from '../../../worker/main.ts'
import { identityConfig } from '../../helpers/model-repo.ts'
import { redisServerSkip, startRedisServer } from '../../helpers/redis-server.ts'

const skip = redisServerSkip(t)

t.test('replicas share hits through Redis; Redis killed under load fails nothing, and hits come back with it', { skip }, async (t) => {
  const redis = await startRedisServer(t)
  const dir = t.testdir({ echo: { 'config.pbtxt': identityConfig('echo', 'TYPE_FP32', [-1]), 1: {} } })
  const worker = await startWorker({ modelRepository: dir, httpPort: 0, grpcPort: -1, metricsPort: -1, logger: silentLogger(), shutdownQuietMs: 0 })
  t.teardown(() => worker.close())
  const replica = async (): Promise<RunningGateway> => {
    const config = parseFleetConfig([
      'inference_servers:',
      `  - { name: w, host: 127.0.0.1, port: ${worker.httpPort}, models: [echo] }`,
      'load_balancer: { type: round_robin }',
      `cache: { models: { echo: { enabled: true } }, redis: { url: "${redis.url}", timeout_ms: 50 } }`,
      'gateway: { http_port: 0, grpc_port: -1, metrics_port: 0, admin_port: -1 }'
    ].join('\n') + '\n', { file: 'fleet.yaml', isKnownStrategy: hasBalancer })
    const gw = await startGateway({ config, logger: silentLogger() })
    t.teardown(() => gw.close())
    return gw
  }
  const [a, b] = [await replica(), await replica()]
  const infer = async (gw: RunningGateway, value: number): Promise<{ status: number, cache: string }> => {
    const res = await request(`http://127.0.0.1:${gw.httpPort}/v2/models/echo/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [value] }] })
    })
    await res.body.dump()
    return { status: res.statusCode, cache: String(res.headers['x-flotilla-cache']) }
  }
  const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 100))

  for (let i = 0; i < 20; i++) t.equal((await infer(a, i)).cache, 'miss')
  await settle()
  const fromB = await Promise.all(Array.from({ length: 20 }, (_, i) => infer(b, i)))
  t.same(fromB.map((r) => r.cache), Array(20).fill('hit'), 'replica B serves every answer replica A stored')

  // Redis killed while both replicas take requests: every request still answered 200.
  const results: Array<{ status: number, cache: string }> = []
  let running = true
  const load = (async () => {
    for (let i = 0; running; i++) results.push(await infer(i % 2 === 0 ? a : b, 1000 + (i % 50)))
  })()
  await new Promise((resolve) => setTimeout(resolve, 200))
  await redis.kill()
  await new Promise((resolve) => setTimeout(resolve, 500))
  running = false
  await load
  t.ok(results.length > 20, `${results.length} requests across the outage`)
  t.same(results.filter((r) => r.status !== 200), [], 'no request failed while Redis was down')

  await redis.restart()
  let resumed = false
  for (let i = 0; i < 50 && !resumed; i++) {
    await infer(a, 5000 + i)
    await settle()
    resumed = (await infer(b, 5000 + i)).cache === 'hit'
  }
  t.ok(resumed, 'once Redis is back, B hits on what A stores again')
})
