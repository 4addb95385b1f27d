/**
 * A worker on SIGTERM reports not-ready first, finishes what it has, then exits: a real `flotilla worker` process,
 * and a worker embedded in a script that must exit by itself once close() resolves (nothing left holding it).
 */
import { spawn } from 'node:child_process'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PACKAGE_ROOT } from '../../common/package-root.ts'
import { WORKER_DRAINING_HEADER } from '../../common/protocol/headers.ts'
import { get, post, type HttpResult } from '../helpers/http.ts'
import { identityConfig } from '../helpers/model-repo.ts'
import { childEnv, spawnWorker, stop } from '../helpers/processes.ts'

const SLOW_MS = 500
const WORKER_MAIN = join(PACKAGE_ROOT, 'dist', 'worker', 'main.js')

function slowRepository (t: Test): string {
  return t.testdir({
    slow: {
      'config.pbtxt': `${identityConfig('slow', 'TYPE_FP32', [1]).replace('"identity"', '"simulated"')}\n` +
        `parameters { key: "fixed_ms" value: { string_value: "${SLOW_MS}" } }`,
      1: {}
    }
  })
}

/** Waits until the worker reports `n` pending requests in its queue-depth header. */
async function queueDepth (url: string, n: number): Promise<void> {
  const until = performance.now() + 5000
  while ((await get(`${url}/v2/health/live`)).headers['x-flotilla-queue-depth'] !== String(n)) {
    if (performance.now() > until) throw new Error(`never ${n} pending`)
    await sleep(5)
  }
}

t.test('SIGTERM: not-ready at once, the request in flight completes, exit 0', async t => {
  const w = await spawnWorker(t, slowRepository(t))
  t.equal((await get(`${w.url}/v2/health/ready`)).status, 200)
  const inflight = post(`${w.url}/v2/models/slow/infer`, { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [9] }] })
  await queueDepth(w.url, 1)

  let exitedAt: number | undefined
  const exited = new Promise<number | null>(resolve => w.child.once('exit', code => { exitedAt = performance.now(); resolve(code) }))
  const signalAt = performance.now()
  w.child.kill('SIGTERM')
  // The signal and this request race into the worker's event loop: the first answer may still be a 200.
  let ready: HttpResult | undefined
  while (performance.now() - signalAt < SLOW_MS - 100) {
    ready = await get(`${w.url}/v2/health/ready`)
    if (ready.status !== 200) break
    await sleep(5)
  }
  t.equal(ready?.status, 400, `ready answers 400 right after the signal (${Math.round(performance.now() - signalAt)} ms)`)
  t.equal(ready?.headers[WORKER_DRAINING_HEADER], '1')

  const res = await inflight
  t.equal(res.status, 200, `the request in flight completes: ${res.text}`)
  t.strictSame(res.json.outputs[0].data, [9])
  t.equal(res.headers[WORKER_DRAINING_HEADER], '1')
  t.equal(await exited, 0, 'exit code 0')
  t.ok(exitedAt! - signalAt >= SLOW_MS - 100, 'after the request finished')
})

t.test('SIGTERM with no traffic: exits 0 after the quiet period', async t => {
  const w = await spawnWorker(t, slowRepository(t))
  const exited = new Promise<number | null>(resolve => w.child.once('exit', code => resolve(code)))
  const signalAt = performance.now()
  await stop(w.child)
  t.equal(await exited, 0)
  const ms = performance.now() - signalAt
  t.ok(ms >= 300 && ms < 2000, `${Math.round(ms)} ms (the default shutdownQuietMs is 300)`)
})

t.test('an embedded worker leaves nothing behind: the process exits by itself once close() resolves', async t => {
  // A request in flight, one during the drain, the default (30 s) drain timeout: none of it may hold the process.
  const script = `
    const { startWorker } = await import(${JSON.stringify(WORKER_MAIN)})
    const w = await startWorker({ modelRepository: process.argv[1], httpPort: 0, grpcPort: 0, metricsPort: 0, shutdownQuietMs: 50 })
    const infer = () => fetch(w.url + '/v2/models/slow/infer', {
      method: 'POST', headers: { connection: 'close' },
      body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [1] }] })
    }).then(r => r.status)
    const first = infer()
    while (w.repository.pendingRequests() === 0) await new Promise(r => setTimeout(r, 2))
    const closed = w.close()
    const statuses = await Promise.all([first, infer()])
    await closed
    process.stdout.write(JSON.stringify({ statuses, closedAt: performance.timeOrigin + performance.now() }))
  `
  const child = spawn(process.execPath, ['--input-type=module', '-e', script, slowRepository(t)], {
    stdio: ['ignore', 'pipe', 'pipe'], env: childEnv({ LOG_LEVEL: 'silent' })
  })
  t.teardown(() => stop(child, 'SIGKILL'))
  let out = ''
  child.stdout.on('data', (d: Buffer) => { out += d.toString() })
  child.stderr.on('data', (d: Buffer) => { out += d.toString() })
  // Something left holding the process (a ref'd drain timer: 30 s) would keep it up: killed at 15 s, the code is null.
  // (15 s, not less: on a loaded 2-core CI machine starting the worker alone has taken 5 s.)
  const killer = setTimeout(() => child.kill('SIGKILL'), 15_000)
  const code = await new Promise<number | null>(resolve => child.once('exit', resolve))
  clearTimeout(killer)
  const exitedAt = performance.timeOrigin + performance.now()
  t.equal(code, 0, out)
  const report = JSON.parse(out) as { statuses: number[], closedAt: number }
  t.strictSame(report.statuses, [200, 200], 'both requests served')
  // ~50-80 ms on a quiet machine; 1.6 and 2.5 s were seen beside other test files on 2 busy cores. What this guards
  // against (a timer or socket left ref'd) holds the process for the 30 s drain timer, or forever.
  t.ok(exitedAt - report.closedAt < 5000, `exited ${Math.round(exitedAt - report.closedAt)} ms after close() resolved`)
})
