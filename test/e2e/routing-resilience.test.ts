/**
 * How the gateway routes around broken workers, with real processes and servers on port 0: a worker stopped
 * (SIGSTOP) and one killed (SIGKILL) under load, a worker that accepts connections and never answers, and a worker
 * whose queue is full (503).
 *
 * Three workers are started once for the whole file (process start-up is most of an e2e test's time): the first
 * test stops worker-b and lets it go on, the second kills it, the others use only worker-a and worker-c. Each test
 * starts its own gateway.
 */
import { writeFileSync } from 'node:fs'
import { createServer as createHttpServer } from 'node:http'
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { ClosedLoop, countBy, exchange, OpenLoop, show, showSome, waitFor, type Exchange, type RequestSpec } from '../helpers/load.ts'
import { linesOf, scrape, sumOf } from '../helpers/scrape.ts'
import { simulatedConfig } from '../helpers/model-repo.ts'
import { spawnFlotilla, spawnWorker, stop, type FlotillaProcess } from '../helpers/processes.ts'

/** Generous deadline for one client request: only a gateway that is stuck reaches it. */
const CLIENT_TIMEOUT_MS = 10_000

// `simulated` echoes its input after a fixed 20 ms, long enough that a killed worker has requests in flight.
// Quarters are exact in FP32, so the echo can be compared exactly.
const INPUT = Array.from({ length: 16 }, (_, i) => i / 4)
const BODY = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: INPUT }] })
const MODEL_CONFIG = simulatedConfig('simulated', 20)

const repository = t.testdir({ simulated: { 'config.pbtxt': MODEL_CONFIG, 1: { '.gitkeep': '' } } })
const [workerA, workerB, workerC] = await Promise.all([0, 1, 2].map(() => spawnWorker(t, repository))) as
  [FlotillaProcess, FlotillaProcess, FlotillaProcess]

/** Whether `x` is a 200 whose first output echoes {@link INPUT}. */
function echoed (x: Exchange): boolean {
  if (x.status !== 200) return false
  try {
    const output = (JSON.parse(x.body) as { outputs?: Array<{ data?: unknown }> }).outputs?.[0]?.data
    return Array.isArray(output) && output.length === INPUT.length && output.every((v, i) => v === INPUT[i])
  } catch {
    return false
  }
}

/** Writes the fleet file and starts a gateway on it, with both listeners on port 0. */
function startGateway (tt: Test, fleet: readonly string[]): Promise<FlotillaProcess> {
  const file = join(tt.testdir({}), 'fleet.yaml')
  writeFileSync(file, fleet.join('\n') + '\n')
  return spawnFlotilla(tt, ['gateway', '--config', file, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0', '--admin-port', '-1'])
}

function server (name: string, port: number): string {
  return `  - { name: ${name}, host: 127.0.0.1, port: ${port}, models: [simulated] }`
}

function inferSpec (gw: FlotillaProcess): RequestSpec {
  return { url: `${gw.url}/v2/models/simulated/infer`, body: BODY, timeoutMs: CLIENT_TIMEOUT_MS }
}

t.test('a worker stopped with SIGSTOP under an open-loop load costs no request, and no request waits past its per-try timeout', async (t) => {
  // Every default: round robin keeps sending the stopped worker its share until outlier detection ejects it, so
  // the per-try timeout (for this 20 ms model the 1 s floor) is what saves those requests.
  const gw = await startGateway(t, [
    'inference_servers:',
    server('worker-a', workerA.httpPort),
    server('worker-b', workerB.httpPort),
    server('worker-c', workerC.httpPort),
    'load_balancer: { type: round_robin }'
  ])
  const load = new OpenLoop(inferSpec(gw), 40)
  t.teardown(() => load.stop())
  // Warm-up: the gateway learns the model's latency (the per-try timeout is the 30 s ceiling until it has).
  await waitFor(() => load.exchanges.length >= 60, 15_000)
  // What the gateway will allow an attempt now: 5 x the model's recent p99, at least 1 s (more on a busy machine,
  // whose p99 is longer).
  const fleetNow = await request(`${gw.url}/v2/fleet`, { signal: AbortSignal.timeout(5000) })
  const model = (await fleetNow.body.json() as { models: Array<{ name: string, per_try_timeout_ms: number | null, recent_p99_ms: number | null }> })
    .models.find((m) => m.name === 'simulated')
  const perTryMs = model?.per_try_timeout_ms ?? Number.NaN
  t.ok(perTryMs >= 1000 && perTryMs < 30_000, `the per-try timeout follows the model's p99 (${perTryMs} ms for a p99 of ${model?.recent_p99_ms} ms)`)
  const stoppedAt = performance.now()
  workerB.child.kill('SIGSTOP')
  t.teardown(() => { workerB.child.kill('SIGCONT') })
  await waitFor(() => performance.now() - stoppedAt >= 4000, 10_000)
  const all = await load.stop()
  workerB.child.kill('SIGCONT')

  const across = all.filter((x) => x.doneAt > stoppedAt)
  const slowest = across.reduce((ms, x) => Math.max(ms, x.doneAt - x.sentAt), 0)
  const failed = all.filter((x) => !echoed(x))
  const summary = `${all.length} requests at 40/s, ${across.length} answered after the stop, by endpoint ${JSON.stringify(countBy(across))}; ` +
    `slowest ${slowest.toFixed(0)} ms, per-try timeout ${perTryMs} ms`
  t.comment(summary)
  t.equal(failed.length, 0, `no request failed (${summary})`, { failures: showSome(failed) })
  // The per-try timeout plus the normal service time (20 ms), with room for a busy test machine.
  t.ok(slowest < perTryMs + 1000, `no request waited much past the per-try timeout (${summary})`)
  const { text, samples } = await scrape(gw)
  const timeouts = sumOf(samples, 'flotilla_retries_total', { cause: 'timeout' })
  t.ok(timeouts >= 1, `requests held by the stopped worker were retried elsewhere (${timeouts})`, { metrics: linesOf(text, 'flotilla_retries_total') })
  t.ok(sumOf(samples, 'flotilla_ejections_total', { endpoint: 'worker-b' }) >= 1, 'the stopped worker was ejected',
    { metrics: linesOf(text, 'flotilla_ejections_total') })
  const late = all.filter((x) => x.sentAt > stoppedAt + 2500 && x.endpoint === 'worker-b')
  t.equal(late.length, 0, 'once ejected, it was sent nothing more', { late: showSome(late) })
})

t.test('a worker killed with SIGKILL under 32 connections costs no client request', async (t) => {
  const names = ['worker-a', 'worker-b', 'worker-c']
  const gw = await startGateway(t, [
    'inference_servers:',
    server('worker-a', workerA.httpPort),
    server('worker-b', workerB.httpPort),
    server('worker-c', workerC.httpPort),
    'load_balancer: { type: least_connections }',
    'health_check: { interval_ms: 200, timeout_ms: 500 }'
  ])

  // 32 clients over three workers: about ten requests are on the victim when it dies, each reset; their one retry
  // needs no retry budget (a dead host is not a failing fleet), so none of them fails.
  const load = new ClosedLoop(inferSpec(gw), 32)
  t.teardown(() => load.stop())
  const started = performance.now()
  const served = (name: string): number => load.exchanges.filter((x) => x.endpoint === name).length
  await waitFor(() => performance.now() - started >= 1000 && names.every((n) => served(n) >= 5), 15_000)

  // Killed only once the gateway reports requests in flight on it, so that failing those over is tested too.
  let inFlightAtKill = 0
  const deadline = performance.now() + 5000
  while (inFlightAtKill < 1 && performance.now() < deadline) {
    inFlightAtKill = sumOf((await scrape(gw)).samples, 'flotilla_upstream_in_flight', { endpoint: 'worker-b' })
  }
  const killAt = performance.now()
  await stop(workerB.child, 'SIGKILL')
  const deadAt = performance.now()
  // Two seconds more, and at least 30 requests sent after the death even on a slow machine.
  await waitFor(() => performance.now() - deadAt >= 2000 && load.exchanges.filter((x) => x.sentAt > deadAt).length >= 30, 15_000)
  const all = await load.stop()

  const before = all.filter((x) => x.doneAt < killAt)
  const after = all.filter((x) => x.sentAt > deadAt)
  const summary = `${all.length} requests sent: ${before.length} answered before the kill, ${after.length} sent after ` +
    `worker-b was dead; by endpoint ${JSON.stringify(countBy(all))}`
  const slowest = all.filter((x) => x.sentAt < deadAt && x.doneAt > killAt).reduce((ms, x) => Math.max(ms, x.doneAt - x.sentAt), 0)
  t.comment(`${summary}; ${inFlightAtKill} in flight on worker-b at the kill; slowest request across it ${slowest.toFixed(0)} ms`)

  t.ok(inFlightAtKill >= 1, `the gateway had requests in flight on worker-b when it was killed (${inFlightAtKill})`)
  const failed = all.filter((x) => !echoed(x))
  t.equal(failed.length, 0, `no request failed (${summary})`, { failures: showSome(failed) })
  t.strictSame(Object.keys(countBy(before)).sort(), names, `all three workers served before the kill (${summary})`,
    { before: countBy(before), errors: showSome(before.filter((x) => !echoed(x))) })
  t.ok(after.length >= 30, `the load went on after the kill (${summary})`)
  t.strictSame(Object.keys(countBy(after.filter(echoed))).sort(), ['worker-a', 'worker-c'],
    `once dead, worker-b served nothing and the other two everything (${summary})`,
    { after: countBy(after), errors: showSome(after.filter((x) => !echoed(x))) })
})

/** A TCP server that accepts connections and reads, and never writes a byte. */
async function startHangingServer (): Promise<{ port: number, requests: () => number, close (): Promise<void> }> {
  const sockets = new Set<Socket>()
  let requests = 0
  const listener = createNetServer((socket) => {
    sockets.add(socket)
    socket.on('data', (chunk: Buffer) => {
      requests += chunk.toString('latin1').match(/^POST \/v2\/models\/simulated\/infer /gm)?.length ?? 0
    })
    socket.on('error', () => {})
    socket.on('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve))
  return {
    port: (listener.address() as AddressInfo).port,
    requests: () => requests,
    async close () {
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => listener.close(resolve))
    }
  }
}

t.test('a worker that never answers times out (504), is ejected, and the others keep serving', async (t) => {
  const hang = await startHangingServer()
  t.teardown(() => hang.close())
  const gw = await startGateway(t, [
    'inference_servers:',
    server('worker-a', workerA.httpPort),
    server('hang', hang.port),
    server('worker-c', workerC.httpPort),
    'load_balancer: { type: round_robin }',
    'gateway: { request_timeout_ms: 300 }',
    'outlier_detection: { consecutive_failures: 3, base_ejection_time_ms: 60000 }',
    // Off, so that the ejection, not the active checker, is what takes the server out.
    'health_check: { enabled: false }'
  ])
  const spec = inferSpec(gw)

  // Round robin over three servers: the third timeout comes within nine requests.
  const untilEjected: Exchange[] = []
  while (untilEjected.filter((x) => x.endpoint === 'hang').length < 3 && untilEjected.length < 12) {
    untilEjected.push(await exchange(spec, untilEjected.length))
  }
  const history = { exchanges: showSome(untilEjected) }
  const timeouts = untilEjected.filter((x) => x.endpoint === 'hang')
  t.equal(timeouts.length, 3, `three of ${untilEjected.length} requests went to the hanging server`, history)
  t.ok(untilEjected.length <= 9, `round robin sent every third request there (${untilEjected.length} sent)`, history)
  for (const x of timeouts) {
    t.equal(x.status, 504, `a request to the hanging server answers 504: ${show(x)}`)
    t.match(x.body, /'hang' did not answer within 300 ms/, `its error names the server and the timeout: ${show(x)}`)
  }
  const wrong = untilEjected.filter((x) => x.endpoint !== 'hang' && !(echoed(x) && /^worker-[ac]$/.test(x.endpoint ?? '')))
  t.equal(wrong.length, 0, 'the other requests were answered by the workers', { wrong: showSome(wrong) })
  t.equal(hang.requests(), 3, 'the hanging server received the three requests that timed out')

  const afterEjection: Exchange[] = []
  for (let i = 0; i < 20; i++) afterEjection.push(await exchange(spec, untilEjected.length + i))
  const bad = afterEjection.filter((x) => !echoed(x) || x.endpoint === 'hang')
  t.equal(bad.length, 0, 'after the ejection, 20 requests in a row were answered 200 by the workers', { bad: showSome(bad) })
  t.strictSame(countBy(afterEjection), { 'worker-a': 10, 'worker-c': 10 }, 'the two workers took them in turn')
  t.equal(hang.requests(), 3, 'the ejected server got no more requests')

  const { text, samples } = await scrape(gw)
  t.equal(sumOf(samples, 'flotilla_requests_total', { model: 'simulated', endpoint: 'hang', code: '504' }), 3,
    'flotilla_requests_total has the three 504s of hang', { metrics: linesOf(text, 'flotilla_requests_total') })

  const view = await request(`${gw.url}/v2/fleet`, { signal: AbortSignal.timeout(5000) })
  const viewText = await view.body.text()
  if (view.statusCode === 404) {
    t.comment('GET /v2/fleet answers 404 (not there yet): its ejected flag is not checked')
  } else {
    t.equal(view.statusCode, 200, 'GET /v2/fleet answers 200', { body: viewText })
    const endpoints = (JSON.parse(viewText) as { endpoints?: Array<{ name?: string, ejected?: unknown }> }).endpoints ?? []
    t.strictSame(Object.fromEntries(endpoints.map((e) => [e.name, e.ejected])), { 'worker-a': false, hang: true, 'worker-c': false },
      'GET /v2/fleet shows hang ejected and the workers not', { body: viewText })
  }
})

/** An HTTP server that answers every request with Triton's 503 for a full queue, counting model requests. */
async function startBusyServer (): Promise<{ port: number, requests: () => number, close (): Promise<void> }> {
  let requests = 0
  const listener = createHttpServer((req, res) => {
    req.resume()
    req.on('end', () => {
      if (req.url?.startsWith('/v2/models/') === true) requests++
      res.writeHead(503, { 'content-type': 'application/json' })
        .end(JSON.stringify({ error: '[request id: x] Exceeds maximum queue size' }))
    })
  })
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve))
  return {
    port: (listener.address() as AddressInfo).port,
    requests: () => requests,
    async close () {
      listener.closeAllConnections()
      await new Promise((resolve) => listener.close(resolve))
    }
  }
}

t.test('a worker whose queue is full (503) has its requests retried on another, and they succeed', async (t) => {
  const busy = await startBusyServer()
  t.teardown(() => busy.close())
  // No `retries` section: the defaults (max_retries 2) retry a 503.
  const gw = await startGateway(t, [
    'inference_servers:',
    server('busy', busy.port),
    server('worker-a', workerA.httpPort),
    'load_balancer: { type: round_robin }',
    'health_check: { enabled: false }'
  ])
  const spec = inferSpec(gw)

  const all: Exchange[] = []
  for (let i = 0; i < 20; i++) all.push(await exchange(spec, i))
  const summary = `20 requests sent, answered by ${JSON.stringify(countBy(all))}; the 503 server received ${busy.requests()}`
  const failed = all.filter((x) => !echoed(x) || x.endpoint !== 'worker-a')
  t.equal(failed.length, 0, `every request was answered 200 by worker-a (${summary})`, { failures: showSome(failed) })
  t.ok(busy.requests() > 0, `the 503 server was picked too, so with every answer from worker-a its requests were retried (${summary})`)

  const { text, samples } = await scrape(gw)
  const retries = sumOf(samples, 'flotilla_retries_total', { cause: 'unavailable' })
  t.ok(retries > 0 && retries >= busy.requests(),
    `flotilla_retries_total{cause="unavailable"} is ${retries}, at least the ${busy.requests()} 503s`,
    { metrics: linesOf(text, 'flotilla_retries_total') })
})
