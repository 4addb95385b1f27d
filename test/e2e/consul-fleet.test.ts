/**
 * A fleet over Consul, with real processes: workers register in the Consul double (whose HTTP checks really probe
 * them), a gateway whose fleet file lists no server discovers them, and under a steady open-loop load through the
 * gateway, one after the other: a worker is SIGKILLed (Consul's check goes critical, it leaves), a new worker
 * registers (it takes traffic within seconds), a worker is SIGTERMed (it leaves before it stops answering), and
 * Consul goes away for a while and comes back (nothing changes meanwhile). Not one client request may fail.
 *
 * One scenario in one test: each step starts from the fleet the step before left, as in production, and process
 * start-up is most of an e2e test's time.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { countBy, OpenLoop, showSome, waitFor } from '../helpers/load.ts'
import { startConsulDouble } from '../helpers/consul-double.ts'
import { get } from '../helpers/http.ts'
import { simulatedConfig } from '../helpers/model-repo.ts'
import { scrape, sumOf } from '../helpers/scrape.ts'
import { spawnFlotilla, type FlotillaProcess } from '../helpers/processes.ts'

/**
 * How long Consul is away: 12 s by default, past the 10 s ceiling of the retry back-off (both tiers), so the capped
 * back-off runs; FLOTILLA_E2E_CONSUL_OUTAGE_MS=30000 runs the 30 s (nothing else differs: the wait is idle,
 * and npm test has a time budget).
 */
const OUTAGE_MS = Number(process.env.FLOTILLA_E2E_CONSUL_OUTAGE_MS ?? 12_000)

const INPUT = Array.from({ length: 16 }, (_, i) => i / 4)
const BODY = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: INPUT }] })
const MODEL_CONFIG = simulatedConfig('simulated', 10)

interface FleetEndpoint { name: string, source: string, state: string }
interface FleetAnswer { endpoints: FleetEndpoint[], discovery: { state: string, servers: number, errors: number } | null }

t.test('workers register, a gateway with no server in its file discovers them; kill, join, stop and a Consul outage lose no request', async (t) => {
  const consul = await startConsulDouble()
  t.teardown(() => consul.close())
  // One testdir per test (a second call would replace the first): the model repository and the fleet file.
  const dir = t.testdir({ models: { simulated: { 'config.pbtxt': MODEL_CONFIG, 1: { '.gitkeep': '' } } } })
  const repository = join(dir, 'models')
  const startWorker = (): Promise<FlotillaProcess> => spawnFlotilla(t, [
    'worker', '--model-repository', repository, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '-1',
    '--consul-addr', consul.url, '--consul-check-interval-ms', '1000', '--label', 'zone=test', '--consul-tag', 'pool=e2e'
  ])
  const workers = await Promise.all([startWorker(), startWorker(), startWorker()])
  const idOf = (w: FlotillaProcess): string => `flotilla-worker-127.0.0.1-${w.httpPort}`

  const file = join(dir, 'fleet.yaml')
  writeFileSync(file, [
    'load_balancer: { type: round_robin }',
    'discovery:',
    '  consul:',
    `    address: ${consul.url}`,
    '    service: flotilla-worker',
    '    tag: pool=e2e',
    'health_check: { interval_ms: 500 }',
    'gateway: { drain_timeout_ms: 5000 }'
  ].join('\n') + '\n')
  const gw = await spawnFlotilla(t, ['gateway', '--config', file, '--http-port', '0', '--grpc-port', '-1', '--metrics-port', '0', '--admin-port', '0'])
  const fleet = async (): Promise<FleetAnswer> => (await get(`${gw.url}/v2/fleet`)).json as FleetAnswer
  let view: FleetAnswer = await fleet()
  /** Polls /v2/fleet until `check` holds; the last view stays in `view` for the assertions after. */
  const fleetUntil = async (check: (f: FleetAnswer) => boolean, ms: number): Promise<boolean> => {
    const end = performance.now() + ms
    for (;;) {
      view = await fleet()
      if (check(view)) return true
      if (performance.now() > end) return false
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  const active = (f: FleetAnswer): string[] => f.endpoints.filter((e) => e.state === 'active').map((e) => e.name).sort()

  t.ok(await fleetUntil((f) => active(f).length === 3, 15_000), 'the three workers are discovered and checked in')
  t.strictSame(active(view), workers.map(idOf).sort())
  t.ok(view.endpoints.every((e) => e.source === 'consul'), 'each shown as coming from Consul')
  t.equal(view.discovery?.state, 'ok')
  t.equal((await get(`${gw.url}/v2/health/ready`)).status, 200, 'the gateway is ready')
  const effective = (await get(`http://127.0.0.1:${gw.adminPort!}/v1/config`)).json as { inference_servers: unknown[], discovery: unknown }
  t.strictSame(effective.inference_servers, [], 'the effective config lists no discovered server: its discovery section stands for them')
  t.match(effective.discovery, { consul: { service: 'flotilla-worker', tag: 'pool=e2e' } })

  const load = new OpenLoop({ url: `${gw.url}/v2/models/simulated/infer`, body: BODY, timeoutMs: 20_000 }, 25)
  t.teardown(() => load.stop())
  const servedBy = (name: string): number => load.exchanges.filter((x) => x.endpoint === name && x.status === 200).length

  // 1. SIGKILL: Consul's check goes critical and the gateway lets it go.
  const [victim, stopped, survivor] = workers as [FlotillaProcess, FlotillaProcess, FlotillaProcess]
  await waitFor(() => servedBy(idOf(victim)) > 5, 5000)
  const killedAt = performance.now()
  victim.child.kill('SIGKILL')
  t.ok(await fleetUntil((f) => !f.endpoints.some((e) => e.name === idOf(victim)), 15_000), 'a killed worker leaves the fleet')
  t.comment(`SIGKILL to removal: ${Math.round(performance.now() - killedAt)} ms`)

  // 2. A new worker registers and takes traffic within seconds.
  const joinedAt = performance.now()
  const newcomer = await startWorker()
  t.ok(await waitFor(() => servedBy(idOf(newcomer)) > 0, 10_000), 'a new worker takes traffic within seconds')
  t.comment(`start of a new worker to its first request: ${Math.round(performance.now() - joinedAt)} ms`)

  // 3. SIGTERM: out of the fleet before it stops answering (it goes into maintenance first, then drains).
  const exited = new Promise<number>((resolve) => stopped.child.once('exit', () => { resolve(performance.now()) }))
  stopped.child.kill('SIGTERM')
  let leftAt = Number.POSITIVE_INFINITY
  const watchLeave = (async () => {
    if (await fleetUntil((f) => !active(f).includes(idOf(stopped)), 10_000)) leftAt = performance.now()
  })()
  const exitedAt = await exited
  await watchLeave
  t.ok(leftAt < exitedAt, `the gateway took it out of rotation ${Math.round(exitedAt - leftAt)} ms before it exited`)
  t.ok(await fleetUntil((f) => !f.endpoints.some((e) => e.name === idOf(stopped)), 10_000), 'and then out of the fleet')
  t.notOk(consul.services().some((s) => s.ID === idOf(stopped)), 'it deregistered on its way out')

  // 4. Consul goes away: the fleet stays, the gateway keeps checking it and serving.
  const before = active(await fleet())
  t.strictSame(before, [idOf(survivor), idOf(newcomer)].sort())
  await consul.outage()
  const outageStart = load.exchanges.length
  t.ok(await fleetUntil((f) => f.discovery?.state === 'failing', 5000), 'discovery reports the outage')
  await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS))
  view = await fleet()
  t.strictSame(active(view), before, `after ${OUTAGE_MS / 1000} s without Consul the fleet is the one it knew`)
  const duringOutage = load.exchanges.slice(outageStart)
  t.ok(duringOutage.length > OUTAGE_MS / 1000 * 10, `requests kept being served (${duringOutage.length})`)
  await consul.restore()
  t.ok(await fleetUntil((f) => f.discovery?.state === 'ok', 15_000), 'discovery resumes once Consul is back')
  t.strictSame(active(view), before)
  const { samples } = await scrape(gw)
  t.ok(sumOf(samples, 'flotilla_discovery_errors_total', { source: 'consul' }) >= 1, 'the outage\'s failed queries are counted')
  t.ok(sumOf(samples, 'flotilla_discovery_last_success_timestamp_seconds', { source: 'consul' }) > Date.now() / 1000 - 15, 'and the last answer is recent again')
  t.equal(sumOf(samples, 'flotilla_discovery_servers', { source: 'consul' }), 2)

  const all = await load.stop()
  const failed = all.filter((x) => x.status !== 200)
  t.strictSame(showSome(failed), [], `${all.length} requests, none failed`)
  t.comment(`by endpoint: ${JSON.stringify(countBy(all))}`)
})
