/** A worker's close(): not-ready at once, a draining phase that serves everything and marks it, then the close. */
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { createLogger } from '../../../common/logger.ts'
import { WORKER_DRAINING_HEADER } from '../../../common/protocol/headers.ts'
import { startWorker, type RunningWorker, type WorkerOptions } from '../../../worker/main.ts'
import { get, post, type HttpResult } from '../../helpers/http.ts'
import { identityConfig } from '../../helpers/model-repo.ts'

const SLOW_MS = 300

/** A repository with `slow` (simulated, SLOW_MS per execution) and `fast` (identity) models. */
function repository (t: Test): string {
  return t.testdir({
    slow: {
      'config.pbtxt': `${identityConfig('slow', 'TYPE_FP32', [1]).replace('"identity"', '"simulated"')}\n` +
        `parameters { key: "fixed_ms" value: { string_value: "${SLOW_MS}" } }`,
      1: {}
    },
    fast: { 'config.pbtxt': identityConfig('fast', 'TYPE_FP32', [1]), 1: {} }
  })
}

interface LogLine { msg: string, reason?: string, inFlight?: number, durationMs?: number, at: number }

async function worker (t: Test, extra: Partial<WorkerOptions> = {}): Promise<{ w: RunningWorker, logs: LogLine[] }> {
  const logs: LogLine[] = []
  const destination = { write (line: string) { logs.push({ ...JSON.parse(line), at: performance.now() }); return true } }
  const logger = createLogger({ level: 'info', destination: destination as unknown as NodeJS.WritableStream })
  const w = await startWorker({ modelRepository: repository(t), httpPort: 0, grpcPort: 0, metricsPort: -1, logger, ...extra })
  t.teardown(() => w.close())
  return { w, logs }
}

const infer = (w: RunningWorker, model: 'slow' | 'fast', x: number): Promise<HttpResult> =>
  post(`${w.url}/v2/models/${model}/infer`, { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [x] }] })

/** Waits until the worker holds `n` requests (queued or executing), so that "in flight" is a fact, not a guess. */
async function pending (w: RunningWorker, n: number): Promise<void> {
  const until = performance.now() + 2000
  while (w.repository.pendingRequests() !== n) {
    if (performance.now() > until) throw new Error(`never ${n} pending`)
    await sleep(2)
  }
}

t.test('close: not-ready at once, serves in-flight and new requests with the header, ends after the quiet period', async t => {
  const quietMs = 200
  const { w, logs } = await worker(t, { shutdownQuietMs: quietMs })

  const before = await get(`${w.url}/v2/health/ready`)
  t.equal(before.status, 200)
  t.equal(before.headers[WORKER_DRAINING_HEADER], undefined, 'no draining header before close()')
  t.equal((await infer(w, 'fast', 1)).headers[WORKER_DRAINING_HEADER], undefined)

  const inflight = infer(w, 'slow', 7)
  await pending(w, 1)
  const closeAt = performance.now()
  let closedAt: number | undefined
  const closed = w.close().then(() => { closedAt = performance.now() })
  t.equal(w.close(), w.close(), 'repeated calls return the same promise')

  const ready = await get(`${w.url}/v2/health/ready`)
  t.equal(ready.status, 400, 'not ready as soon as close() is called')
  t.equal(ready.headers[WORKER_DRAINING_HEADER], '1')
  t.equal(closedAt, undefined, 'answered at once, during the drain')
  t.equal((await get(`${w.url}/v2/nope`)).headers[WORKER_DRAINING_HEADER], '1', 'every response carries it, a 404 too')

  // A request that arrives while the first still runs, after a gateway could have noticed: still served.
  await sleep(SLOW_MS - 50 - (performance.now() - closeAt))
  const lateAt = performance.now()
  const late = await infer(w, 'fast', 3)
  t.equal(late.status, 200, 'a new request during the drain is served')
  t.strictSame(late.json.outputs[0].data, [3])
  t.equal(late.headers[WORKER_DRAINING_HEADER], '1')
  t.equal(closedAt, undefined, 'close() has not resolved while requests keep coming')

  const first = await inflight
  t.equal(first.status, 200, 'the request in flight when close() began completes')
  t.strictSame(first.json.outputs[0].data, [7])
  t.equal(first.headers[WORKER_DRAINING_HEADER], '1', 'and its response, sent during the drain, carries the header')

  await closed
  t.ok(closedAt! - lateAt >= quietMs, `close() resolves ${quietMs} ms after the last arrival at the earliest (${Math.round(closedAt! - lateAt)} ms)`)
  t.ok(closedAt! - closeAt >= SLOW_MS, 'and after the request in flight finished')
  t.ok(closedAt! - lateAt < quietMs + 1000, 'but not much later')

  const start = logs.find(l => l.msg.startsWith('draining'))
  const end = logs.find(l => l.msg.startsWith('drained'))
  t.match(start, { inFlight: 1 }, 'one line when draining starts, with the count in flight')
  t.match(end, { reason: 'quiet', inFlight: 0 }, 'one when it ends, with why')
  await t.rejects(get(`${w.url}/v2/health/ready`), 'the listener is closed once close() resolves')
})

t.test('with no traffic, close() takes the quiet period', async t => {
  const { w, logs } = await worker(t, { shutdownQuietMs: 150 })
  const start = performance.now()
  await w.close()
  const ms = performance.now() - start
  t.ok(ms >= 150 && ms < 1000, `${Math.round(ms)} ms`)
  t.match(logs.find(l => l.msg.startsWith('drained')), { reason: 'quiet', inFlight: 0 })
})

t.test('a quiet period of 0 closes at once when nothing is in flight', async t => {
  const { w } = await worker(t, { shutdownQuietMs: 0 })
  const start = performance.now()
  await w.close()
  t.ok(performance.now() - start < 250, 'well under the default 300 ms')
})

t.test('the drain timeout ends draining, and close() still waits for the request in flight', async t => {
  const { w, logs } = await worker(t, { shutdownQuietMs: 1000, drainTimeoutMs: 50 })
  const inflight = infer(w, 'slow', 5)
  await pending(w, 1)
  const closeAt = performance.now()
  let closedAt: number | undefined
  const closed = w.close().then(() => { closedAt = performance.now() })

  const res = await inflight
  t.equal(res.status, 200, 'the request in flight completes')
  t.equal(res.headers[WORKER_DRAINING_HEADER], '1')
  await closed
  t.ok(closedAt! - closeAt >= SLOW_MS - 50, 'close() waited for it')
  t.ok(closedAt! - closeAt < 1000, 'but not for the quiet period: the timeout came first')

  const end = logs.find(l => l.msg.startsWith('drain timed out'))
  t.match(end, { reason: 'timeout', inFlight: 1 }, 'the log says timeout, with the request still in flight')
  t.ok(end!.at - closeAt < SLOW_MS - 100, 'logged at the timeout, before the request finished')
})

t.test('work whose client went away still holds the drain until it finishes', async t => {
  const { w, logs } = await worker(t, { shutdownQuietMs: 20 })
  const controller = new AbortController()
  const aborted = fetch(`${w.url}/v2/models/slow/infer`, {
    method: 'POST',
    body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [1] }] }),
    signal: controller.signal
  }).catch(() => 'aborted')
  await pending(w, 1)
  controller.abort()
  t.equal(await aborted, 'aborted')
  await sleep(20)
  await w.close()
  const end = logs.find(l => l.msg.startsWith('drained'))
  t.match(end, { reason: 'quiet' })
  t.ok(end!.durationMs! >= SLOW_MS - 100, 'the drain waited for the execution')
  t.equal(w.repository.pendingRequests(), 0)
})

t.test('the drain options must be non-negative milliseconds', async t => {
  const modelRepository = repository(t)
  await t.rejects(startWorker({ modelRepository, httpPort: 0, grpcPort: -1, metricsPort: -1, shutdownQuietMs: -1 }), RangeError)
  await t.rejects(startWorker({ modelRepository, httpPort: 0, grpcPort: -1, metricsPort: -1, drainTimeoutMs: Number.NaN }), /drainTimeoutMs/)
})
