/**
 * Operating a live fleet with real processes: drain, add and remove workers through the admin API under a steady
 * load, reload the fleet file (valid and invalid) under load, and stop a gateway and a worker with SIGTERM. The
 * measure every time is the same: no client request fails.
 *
 * Workers are started once for the file (process start-up is most of an e2e test's time); each test starts its own
 * gateway, on port 0, with its admin listener on port 0.
 */
import { renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { type AdminEndpointView, type DrainStatus, type RemoveResult } from '../../gateway/admin/api.ts'
import { ClosedLoop, countBy, exchange, showSome, waitFor, type Exchange, type RequestSpec } from '../helpers/load.ts'
import { simulatedConfig } from '../helpers/model-repo.ts'
import { spawnFlotilla, spawnWorker, stop, type FlotillaProcess } from '../helpers/processes.ts'
import { scrape, sumOf } from '../helpers/scrape.ts'

const CLIENT_TIMEOUT_MS = 10_000
const BODY = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] })
/** Health checks every 500 ms, two passes to come in: an added worker takes traffic within about one interval. */
const INTERVAL_MS = 500

const model = (name: string, fixedMs: number): string => simulatedConfig(name, fixedMs, 4)

// `fast` keeps a few requests in flight on every worker under load; `slow` holds one in flight for long enough to
// remove a worker or stop a gateway under it.
const repository = t.testdir({
  fast: { 'config.pbtxt': model('fast', 15), 1: { '.gitkeep': '' } },
  slow: { 'config.pbtxt': model('slow', 1500), 1: { '.gitkeep': '' } }
})
const [workerA, workerB, workerC] = await Promise.all([0, 1, 2].map(() => spawnWorker(t, repository))) as
  [FlotillaProcess, FlotillaProcess, FlotillaProcess]

function server (name: string, worker: FlotillaProcess, weight = 1): string {
  return `  - { name: ${name}, host: 127.0.0.1, port: ${worker.httpPort}, models: [fast, slow], weight: ${weight} }`
}

function fleetText (servers: readonly string[], type = 'round_robin'): string {
  return [
    'inference_servers:',
    ...servers,
    `load_balancer: { type: ${type} }`,
    `health_check: { interval_ms: ${INTERVAL_MS}, timeout_ms: 400, jitter_percent: 0 }`
  ].join('\n') + '\n'
}

interface Gateway extends FlotillaProcess { admin: string, file: string }

async function startGateway (tt: Test, text: string): Promise<Gateway> {
  const file = join(tt.testdir({}), 'fleet.yaml')
  writeFileSync(file, text)
  const gw = await spawnFlotilla(tt, ['gateway', '--config', file, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0', '--admin-port', '0'])
  return { ...gw, admin: `http://127.0.0.1:${gw.adminPort}`, file }
}

/** Replaces the fleet file the way config tools do: write a new file, rename it over the old. */
function replaceFile (file: string, text: string): void {
  writeFileSync(`${file}.tmp`, text)
  renameSync(`${file}.tmp`, file)
}

async function admin<T> (gw: Gateway, method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, body?: unknown): Promise<{ status: number, json: T }> {
  const res = await request(`${gw.admin}${path}`, {
    method,
    // Every change says it is JSON, body or not: the admin API refuses one that does not (a browser's cross-site POST).
    ...(method === 'GET' ? {} : { headers: { 'content-type': 'application/json' } }),
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS)
  })
  const text = await res.body.text()
  return { status: res.statusCode, json: JSON.parse(text) as T }
}

function spec (gw: FlotillaProcess, name = 'fast'): RequestSpec {
  return { url: `${gw.url}/v2/models/${name}/infer`, body: BODY, timeoutMs: CLIENT_TIMEOUT_MS }
}

const failures = (list: readonly Exchange[]): Exchange[] => list.filter((x) => x.status !== 200)
const served = (list: readonly Exchange[], name: string): number => list.filter((x) => x.endpoint === name).length

t.test('draining a worker under steady load: no request fails, and it gets none after the drain call returned', async (t) => {
  const gw = await startGateway(t, fleetText([server('worker-a', workerA), server('worker-b', workerB)]))
  const load = new ClosedLoop(spec(gw), 6)
  t.teardown(() => load.stop())
  t.ok(await waitFor(() => served(load.exchanges, 'worker-b') >= 20 && served(load.exchanges, 'worker-a') >= 20, 15_000), 'both serve')

  // What a web page in the operator's browser can send (CSRF, or DNS rebinding with a foreign Host): refused, and
  // nothing changes. The real drain below is the same call from the command line.
  for (const headers of [
    { 'content-type': 'text/plain', origin: 'http://evil.example' },
    { 'content-type': 'text/plain', host: 'evil.example' },
    { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'cross-site' }
  ]) {
    const forged = await request(`${gw.admin}/v1/endpoints/worker-b/drain`, { method: 'POST', headers, body: '{}', signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS) })
    t.equal(forged.statusCode, 403, `a browser's drain is refused: ${JSON.stringify(headers)}`)
    await forged.body.text()
  }
  t.match((await admin<{ endpoints: AdminEndpointView[] }>(gw, 'GET', '/v1/endpoints')).json.endpoints.find((e) => e.name === 'worker-b'),
    { state: 'active' }, 'worker-b still active after the forged calls')

  const drain = await admin<DrainStatus>(gw, 'POST', '/v1/endpoints/worker-b/drain', { timeout_ms: 10_000 })
  const returnedAt = performance.now()
  t.equal(drain.status, 202)
  // Drained at once when none of the six connections had a request on worker-b at that instant (seen in CI).
  t.match(drain.json.state, /^(draining|drained)$/, `state ${drain.json.state}`)
  let status = drain.json
  const pollDeadline = performance.now() + 12_000
  while (!status.done && performance.now() < pollDeadline) {
    await sleep(20)
    status = (await admin<DrainStatus>(gw, 'GET', '/v1/endpoints/worker-b/drain')).json
  }
  await waitFor(() => load.exchanges.filter((x) => x.sentAt > returnedAt).length >= 60, 15_000)
  const all = await load.stop()

  t.match(status, { state: 'drained', done: true, completed: true, in_flight: 0 }, 'the drain completed: nothing left in flight')
  const failed = failures(all)
  t.equal(failed.length, 0, `no request failed (${all.length} sent)`, { failures: showSome(failed) })
  const after = all.filter((x) => x.sentAt > returnedAt)
  t.equal(served(after, 'worker-b'), 0, `worker-b got no request sent after the drain call returned (${JSON.stringify(countBy(after))})`)
  t.ok(after.length >= 60, 'the load went on')
  const listed = (await admin<{ endpoints: AdminEndpointView[] }>(gw, 'GET', '/v1/endpoints')).json.endpoints
  t.match(listed.find((e) => e.name === 'worker-b'), { state: 'drained', in_flight: 0, drain: { completed: true } })

  // And back: undrained, it takes traffic again.
  t.equal((await admin(gw, 'POST', '/v1/endpoints/worker-b/undrain')).status, 200)
  const again = await Promise.all(Array.from({ length: 8 }, (_, i) => exchange(spec(gw), i)))
  t.ok(served(again, 'worker-b') > 0, 'undrained, worker-b serves again')
})

t.test('a worker added under load takes traffic within two health-check intervals, and nothing fails', async (t) => {
  const gw = await startGateway(t, fleetText([server('worker-a', workerA)]))
  const load = new ClosedLoop(spec(gw), 4)
  t.teardown(() => load.stop())
  await waitFor(() => load.exchanges.length >= 20, 15_000)

  const added = await admin<AdminEndpointView>(gw, 'POST', '/v1/endpoints', { name: 'worker-c', host: '127.0.0.1', port: workerC.httpPort })
  const addedAt = performance.now()
  t.equal(added.status, 201, JSON.stringify(added.json))
  t.strictSame([...added.json.models].sort(), ['fast', 'slow'], 'its models were discovered from its repository index')
  t.equal(added.json.source, 'admin')
  t.equal(added.json.healthy, false, 'it starts unhealthy: no traffic before its checks pass')

  t.ok(await waitFor(() => load.exchanges.some((x) => x.endpoint === 'worker-c'), 10_000), 'worker-c takes traffic')
  const first = load.exchanges.find((x) => x.endpoint === 'worker-c')!
  const all = await load.stop()
  const waited = first.sentAt - addedAt
  t.ok(waited <= 2 * INTERVAL_MS, `its first request was sent ${waited.toFixed(0)} ms after the add (limit ${2 * INTERVAL_MS} ms)`)
  const failed = failures(all)
  t.equal(failed.length, 0, `no request failed (${all.length} sent)`, { failures: showSome(failed) })
})

t.test('removing a worker with a request in flight: the request completes', async (t) => {
  const gw = await startGateway(t, fleetText([server('worker-a', workerA), server('worker-b', workerB)]))
  // Round robin from a random start: send two so that each worker has one.
  const slow = [exchange(spec(gw, 'slow'), 0), exchange(spec(gw, 'slow'), 1)]
  const inFlight = async (name: string): Promise<number> => (await admin<AdminEndpointView>(gw, 'GET', `/v1/endpoints/${name}`)).json.in_flight
  let onB = 0
  for (const deadline = performance.now() + 1000; onB < 1 && performance.now() < deadline; await sleep(20)) onB = await inFlight('worker-b')
  t.equal(onB, 1, 'worker-b has a slow request in flight')

  // Forced: out of the fleet at once, the request still running on it.
  const removed = await admin<RemoveResult>(gw, 'DELETE', '/v1/endpoints/worker-b?force=1')
  t.equal(removed.status, 200)
  t.match(removed.json, { removed: 'worker-b', drained: false, in_flight: 1 })
  const results = await Promise.all(slow)
  t.strictSame(results.map((x) => x.status), [200, 200], 'both slow requests completed, the one on worker-b included')
  t.strictSame(results.map((x) => x.endpoint).sort(), ['worker-a', 'worker-b'])
  t.equal((await admin(gw, 'GET', '/v1/endpoints/worker-b')).status, 404, 'worker-b is gone')

  // Not forced: the call waits for the drain, which waits for the request.
  const one = exchange(spec(gw, 'slow'), 2)
  let onA = 0
  for (const deadline = performance.now() + 1000; onA < 1 && performance.now() < deadline; await sleep(20)) onA = await inFlight('worker-a')
  const removedA = await admin<RemoveResult>(gw, 'DELETE', '/v1/endpoints/worker-a?timeout_ms=5000')
  t.match(removedA.json, { removed: 'worker-a', drained: true, in_flight: 0 }, 'removed once its request had finished')
  t.equal((await one).status, 200)
})

t.test('hot reload of an invalid and of a valid fleet file under load: no request fails', async (t) => {
  const gw = await startGateway(t, fleetText([server('worker-a', workerA), server('worker-b', workerB)]))
  const load = new ClosedLoop(spec(gw), 6)
  t.teardown(() => load.stop())
  await waitFor(() => served(load.exchanges, 'worker-b') >= 10, 15_000)

  const reloads = async (result: string): Promise<number> =>
    sumOf((await scrape(gw)).samples, 'flotilla_config_reloads_total', { result })
  replaceFile(gw.file, fleetText([server('worker-a', workerA)]).replace('round_robin', 'no_such_strategy'))
  let rejected = 0
  for (const deadline = performance.now() + 5000; rejected < 1 && performance.now() < deadline; await sleep(50)) rejected = await reloads('rejected')
  t.equal(rejected, 1, 'the invalid file was rejected')
  const rejectedAt = performance.now()
  await waitFor(() => served(load.exchanges.filter((x) => x.sentAt > rejectedAt), 'worker-b') >= 10, 5000)
  t.ok(served(load.exchanges.filter((x) => x.sentAt > rejectedAt), 'worker-b') >= 10, 'the running fleet is unchanged: worker-b still serves')

  // worker-b leaves, worker-c joins (health-checked in), worker-a's weight changes.
  replaceFile(gw.file, fleetText([server('worker-a', workerA, 2), server('worker-c', workerC)]))
  let applied = 0
  for (const deadline = performance.now() + 5000; applied < 1 && performance.now() < deadline; await sleep(50)) applied = await reloads('applied')
  t.equal(applied, 1, 'the valid file was applied')
  const appliedAt = performance.now()
  t.ok(await waitFor(() => load.exchanges.some((x) => x.sentAt > appliedAt && x.endpoint === 'worker-c'), 10_000), 'worker-c takes traffic')
  await waitFor(() => load.exchanges.filter((x) => x.sentAt > appliedAt).length >= 60, 10_000)
  const all = await load.stop()

  const failed = failures(all)
  t.equal(failed.length, 0, `no request failed (${all.length} sent; ${JSON.stringify(countBy(all))})`, { failures: showSome(failed) })
  t.equal(served(all.filter((x) => x.sentAt > appliedAt), 'worker-b'), 0, 'worker-b got nothing after the reload')
  const listed = (await admin<{ endpoints: AdminEndpointView[] }>(gw, 'GET', '/v1/endpoints')).json.endpoints
  t.strictSame(listed.map((e) => [e.name, e.configured_weight]), [['worker-a', 2], ['worker-c', 1]])
})

t.test('SIGTERM: the gateway finishes its request in flight and exits 0; a worker behind it drains without a failure', async (t) => {
  const gw = await startGateway(t, fleetText([server('worker-a', workerA)]))
  const slow = exchange(spec(gw, 'slow'), 0)
  await sleep(300)
  const exited = new Promise<number | null>((resolve) => gw.child.once('exit', (code) => resolve(code)))
  gw.child.kill('SIGTERM')
  const result = await slow
  t.equal(result.status, 200, 'the request in flight completed')
  t.equal(await exited, 0, 'the gateway exited 0')
  const refused = await exchange(spec(gw), 1)
  t.equal(refused.status, 0, 'nothing listens any more')

  // A worker stopped under load: it says it is draining, the gateway takes it out at once, nothing fails.
  const victim = await spawnWorker(t, repository)
  const gw2 = await startGateway(t, fleetText([server('worker-c', workerC), server('victim', victim)]))
  const load = new ClosedLoop(spec(gw2), 6)
  t.teardown(() => load.stop())
  await waitFor(() => served(load.exchanges, 'victim') >= 10, 15_000)
  const victimExit = new Promise<number | null>((resolve) => victim.child.once('exit', (code) => resolve(code)))
  const termAt = performance.now()
  victim.child.kill('SIGTERM')
  t.equal(await victimExit, 0, 'the worker exited 0')
  const goneAt = performance.now()
  await waitFor(() => load.exchanges.filter((x) => x.sentAt > goneAt).length >= 30, 10_000)
  const all = await load.stop()
  const failed = failures(all)
  t.equal(failed.length, 0, `no request failed (${all.length} sent; ${JSON.stringify(countBy(all))})`, { failures: showSome(failed) })
  t.comment(`the worker took ${(goneAt - termAt).toFixed(0)} ms from SIGTERM to exit`)
  await stop(victim.child)
})
