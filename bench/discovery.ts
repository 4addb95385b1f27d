/**
 * How fast a fleet over Consul follows its workers, under the default settings (issue 16): the time from a worker's
 * registration in Consul to the first request the gateway sends it, and from a worker's SIGKILL to its removal from
 * the gateway's fleet. The anchor, in the same run and the same gateway: the same worker added and killed without
 * Consul, through the admin API (`POST /v1/endpoints`), where only the gateway's own health checks and outlier
 * detection see it come and go.
 *
 * Consul is the test double (test/helpers/consul-double.ts), in this process: its HTTP checks really probe the
 * workers, on the interval the worker registers (its default, 2 s), and its blocking queries answer on each change,
 * as an agent's do. A light open-loop load (BENCH_RATE requests/s) runs through the gateway throughout, so "first
 * request" and "no more requests" are what clients see.
 *
 *   npx tsc -p . && node dist/bench/discovery.js
 *
 * Environment: BENCH_ROUNDS (3), BENCH_RATE (50), BENCH_PATHS (consul,admin: which paths run).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { Agent, request } from 'undici'
import { startConsulDouble, type ConsulDouble } from '../test/helpers/consul-double.ts'
import { intEnv, median, printTable, round, sleep, startFlotilla, stop, stopAll, stopAllOnSignals } from './support.ts'

const ROUNDS = intEnv('BENCH_ROUNDS', 3, 1)
const RATE = intEnv('BENCH_RATE', 50, 1)
const PATHS = (process.env.BENCH_PATHS ?? 'consul,admin').split(',').map((p) => p.trim())
for (const p of PATHS) if (p !== 'consul' && p !== 'admin') throw new Error(`BENCH_PATHS: unknown path '${p}' (consul, admin)`)
const STEP_TIMEOUT_MS = 30_000
const POLL_MS = 5

const MODEL_CONFIG = [
  'name: "simulated"', 'backend: "simulated"', 'max_batch_size: 8',
  'input { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }',
  'output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }',
  'parameters { key: "fixed_ms" value: { string_value: "2" } }'
].join('\n')
const BODY = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] })

/** When the gateway's answers first and last named each endpoint (x-flotilla-endpoint), and the failures. */
class Load {
  readonly first = new Map<string, number>()
  readonly last = new Map<string, number>()
  failed = 0
  sent = 0
  readonly #agent = new Agent({ connections: 64 })
  readonly #timer: NodeJS.Timeout
  readonly #pending = new Set<Promise<void>>()

  constructor (url: string, rate: number) {
    const started = performance.now()
    this.#timer = setInterval(() => {
      const due = Math.floor((performance.now() - started) * rate / 1000)
      while (this.sent < due) this.#send(url)
    }, 5)
  }

  #send (url: string): void {
    this.sent++
    const p = (async () => {
      try {
        const res = await request(url, { method: 'POST', body: BODY, headers: { 'content-type': 'application/json' }, dispatcher: this.#agent })
        await res.body.dump()
        const endpoint = res.headers['x-flotilla-endpoint']
        if (res.statusCode !== 200 || typeof endpoint !== 'string') {
          this.failed++
          return
        }
        const now = performance.now()
        if (!this.first.has(endpoint)) this.first.set(endpoint, now)
        this.last.set(endpoint, now)
      } catch {
        this.failed++
      }
    })().finally(() => this.#pending.delete(p))
    this.#pending.add(p)
  }

  async stop (): Promise<void> {
    clearInterval(this.#timer)
    await Promise.all(this.#pending)
    await this.#agent.close()
  }
}

async function until<T> (what: string, check: () => T | undefined | false | Promise<T | undefined | false>): Promise<T> {
  const deadline = performance.now() + STEP_TIMEOUT_MS
  for (;;) {
    const value = await check()
    if (value !== undefined && value !== false) return value
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(POLL_MS)
  }
}

interface FleetView { endpoints: Array<{ name: string, state: string, healthy: boolean, ejected: boolean }> }

async function fleetView (gatewayUrl: string): Promise<FleetView> {
  const res = await request(`${gatewayUrl}/v2/fleet`)
  return await res.body.json() as FleetView
}

interface Round { path: 'consul' | 'admin', joinMs: number, leaveMs: number }

/** One worker through Consul: registration → first request, SIGKILL → out of the gateway's fleet. */
async function consulRound (consul: ConsulDouble, gatewayUrl: string, load: Load, repository: string): Promise<Round> {
  const worker = await startFlotilla(['worker', '--model-repository', repository, '--http-port', '0', '--grpc-port', '-1', '--metrics-port', '-1',
    '--consul-addr', consul.url])
  const id = `flotilla-worker-127.0.0.1-${worker.httpPort}`
  // The worker registers right after it listens; the double is in this process, so this sees it within POLL_MS.
  const registeredAt = await until('the registration', () => consul.services().some((s) => s.ID === id) && performance.now())
  const firstAt = await until('its first request', () => load.first.get(id))
  const killedAt = performance.now()
  worker.child.kill('SIGKILL')
  const removedAt = await until('its removal', async () => !(await fleetView(gatewayUrl)).endpoints.some((e) => e.name === id) && performance.now())
  return { path: 'consul', joinMs: Math.max(0, firstAt - registeredAt), leaveMs: removedAt - killedAt }
}

/**
 * The anchor: a worker added through the admin API (health-checked in as a Consul one is), then SIGKILLed, where
 * "removed" is the moment the gateway stops counting it usable (health checks or outlier detection): the admin
 * endpoint itself stays in the fleet until an operator removes it.
 */
async function adminRound (admin: string, gatewayUrl: string, load: Load, repository: string, n: number): Promise<Round> {
  const worker = await startFlotilla(['worker', '--model-repository', repository, '--http-port', '0', '--grpc-port', '-1', '--metrics-port', '-1'])
  const name = `admin-${n}`
  const addedAt = performance.now()
  const res = await request(`${admin}/v1/endpoints`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, host: '127.0.0.1', port: worker.httpPort, models: ['simulated'] })
  })
  if (res.statusCode !== 201) throw new Error(`admin add answered ${res.statusCode}: ${await res.body.text()}`)
  await res.body.dump()
  const firstAt = await until('its first request', () => load.first.get(name))
  const killedAt = performance.now()
  worker.child.kill('SIGKILL')
  const outAt = await until('it leaving rotation', async () => {
    const e = (await fleetView(gatewayUrl)).endpoints.find((x) => x.name === name)
    return (e === undefined || !e.healthy || e.ejected) && performance.now()
  })
  const gone = await request(`${admin}/v1/endpoints/${name}?force=1`, { method: 'DELETE', headers: { 'content-type': 'application/json' } })
  await gone.body.dump()
  return { path: 'admin', joinMs: firstAt - addedAt, leaveMs: outAt - killedAt }
}

async function main (): Promise<void> {
  stopAllOnSignals(() => {})
  const dir = mkdtempSync(join(tmpdir(), 'flotilla-bench-discovery-'))
  const repository = join(dir, 'models')
  mkdirSync(join(repository, 'simulated', '1'), { recursive: true })
  writeFileSync(join(repository, 'simulated', 'config.pbtxt'), MODEL_CONFIG)
  const consul = await startConsulDouble()
  try {
    // One permanent worker, so that the model is always served while the measured ones come and go.
    const base = await startFlotilla(['worker', '--model-repository', repository, '--http-port', '0', '--grpc-port', '-1', '--metrics-port', '-1',
      '--consul-addr', consul.url])
    const fleetFile = join(dir, 'fleet.yaml')
    // Every default but the ports: what a user who writes only the discovery section gets.
    writeFileSync(fleetFile, `load_balancer: { type: round_robin }\ndiscovery: { consul: { address: "${consul.url}" } }\n`)
    const gateway = await startFlotilla(['gateway', '--config', fleetFile, '--http-port', '0', '--grpc-port', '-1', '--metrics-port', '0', '--admin-port', '0'])
    const admin = `http://127.0.0.1:${gateway.adminPort!}`
    await until('the first worker in the fleet', async () => (await fleetView(gateway.url)).endpoints.some((e) => e.state === 'active'))
    const load = new Load(`${gateway.url}/v2/models/simulated/infer`, RATE)
    const rounds: Round[] = []
    for (let i = 0; i < ROUNDS; i++) {
      if (PATHS.includes('consul')) rounds.push(await consulRound(consul, gateway.url, load, repository))
      if (PATHS.includes('admin')) rounds.push(await adminRound(admin, gateway.url, load, repository, i))
    }
    await load.stop()
    await stop(gateway.child)
    await stop(base.child)

    const table = [['round', 'path', 'join: registered/added -> first request ms', 'leave: SIGKILL -> removed/out ms']]
    rounds.forEach((r, i) => table.push([String(Math.floor(i / PATHS.length) + 1), r.path, String(Math.round(r.joinMs)), String(Math.round(r.leaveMs))]))
    printTable(table)
    const med = (path: Round['path'], key: 'joinMs' | 'leaveMs'): number => {
      const values = rounds.filter((r) => r.path === path).map((r) => r[key])
      return values.length === 0 ? Number.NaN : round(median(values), 0)
    }
    const summary = {
      bench: 'discovery',
      rounds: ROUNDS,
      rate: RATE,
      consul_join_ms: med('consul', 'joinMs'),
      consul_leave_ms: med('consul', 'leaveMs'),
      admin_join_ms: med('admin', 'joinMs'),
      admin_leave_ms: med('admin', 'leaveMs'),
      join_ratio: round(med('consul', 'joinMs') / Math.max(1, med('admin', 'joinMs')), 2),
      leave_ratio: round(med('consul', 'leaveMs') / Math.max(1, med('admin', 'leaveMs')), 2),
      requests: load.sent,
      failed: load.failed
    }
    console.log(`\nconsul/admin: join ${summary.join_ratio}x, leave ${summary.leave_ratio}x; ${load.sent} requests, ${load.failed} failed`)
    console.log(JSON.stringify(summary))
  } finally {
    await stopAll()
    await consul.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

main().catch(async (err: unknown) => {
  console.error(err)
  await stopAll()
  process.exit(1)
})
