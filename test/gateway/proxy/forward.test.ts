import t from 'tap'
import { type Dispatcher } from 'undici'
import { createRoundRobin } from '../../../gateway/balancer/round-robin.ts'
import { Fleet } from '../../../gateway/fleet/fleet.ts'
import { type Endpoint } from '../../../gateway/fleet/types.ts'
import { AttemptTimeouts, DEFAULT_ATTEMPT_TIMEOUT_SETTINGS } from '../../../gateway/proxy/attempt-timeout.ts'
import { Forwarder, type ForwarderOptions } from '../../../gateway/proxy/forward.ts'
import { type ForwardObserver, type ForwardRequest, type ForwardTarget, type RoutePolicy } from '../../../gateway/proxy/types.ts'
import { UpstreamPool } from '../../../gateway/proxy/upstream-pool.ts'
import { WORKER_DRAINING_HEADER } from '../../../common/protocol/headers.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'
import { endpoints } from '../fixtures/helpers.ts'

/** A dispatcher that fails or answers as scripted per origin, to drive the forwarder without sockets. */
type Step = { error: Error & { code?: string } } | { status: number, body: string, bodyError?: Error, headers?: Record<string, string> }
type Script = (attempt: number) => Step | Promise<Step>

function fakePool (scripts: Record<string, Script>, calls: string[]): UpstreamPool {
  return new UpstreamPool({
    factory: (origin) => {
      let attempt = 0
      const fake = {
        // undici's handler protocol: onRequestStart once the request is under way, then the head, the body and the
        // end, or onResponseError; an abort through the controller ends the exchange with onResponseError.
        dispatch (opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
          calls.push(`${origin} ${opts.method} ${opts.path}`)
          const scripted = Promise.resolve(scripts[origin]?.(attempt++) ?? { status: 500, body: 'unscripted' })
          let done = false
          let reason: Error | null = null
          const fail = (err: Error): void => {
            if (done) return
            done = true
            handler.onResponseError?.(controller, err)
          }
          const controller: Dispatcher.DispatchController = {
            get aborted () { return reason !== null },
            get paused () { return false },
            get reason () { return reason },
            abort (err: Error) {
              if (done || reason !== null) return
              reason = err
              fail(err)
            },
            pause () {},
            resume () {}
          }
          handler.onRequestStart?.(controller, {})
          scripted.then((step) => {
            if (done) return
            if ('error' in step) {
              fail(step.error)
              return
            }
            handler.onResponseStart?.(controller, step.status, { 'content-type': 'text/plain', connection: 'keep-alive', ...step.headers }, 'OK')
            if (done) return
            if (step.bodyError !== undefined) {
              fail(step.bodyError)
              return
            }
            if (step.body !== '') handler.onResponseData?.(controller, Buffer.from(step.body))
            if (done) return
            done = true
            handler.onResponseEnd?.(controller, {})
          }, (err: Error) => { fail(err) })
          return true
        },
        async close () {},
        async destroy () {}
      }
      return fake as unknown as Dispatcher
    }
  })
}

const REQUEST: ForwardRequest = { method: 'POST', path: '/v2/models/m/infer', headers: {}, body: Buffer.from('{}'), requestId: 'r' }

function policy (overrides: Partial<RoutePolicy> = {}): RoutePolicy {
  return { balancer: createRoundRobin({ now: () => 0, random: () => 0 }), timeoutMs: 1000, maxRetries: 2, ...overrides }
}

function target (overrides: Partial<RoutePolicy> = {}): ForwardTarget {
  return { model: 'm', version: undefined, hashKey: undefined, policy: policy(overrides) }
}

function forwarderWith (pool: UpstreamPool, options: Omit<ForwarderOptions, 'pool'> = {}): Forwarder {
  return new Forwarder({ pool, random: () => 0, ...options })
}

function coded (message: string, code: string): Error & { code: string } {
  return Object.assign(new Error(message), { code })
}

t.test('refused connections move on to the next server; never the same one twice', async (t) => {
  const [a, b, c] = endpoints('a', 'b', 'c')
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ error: coded('connect ECONNREFUSED 127.0.0.1:1', 'ECONNREFUSED') }),
    [b!.origin]: () => ({ error: coded('connect EHOSTUNREACH 10.0.0.1:1', 'EHOSTUNREACH') }),
    [c!.origin]: () => ({ status: 200, body: 'from c' })
  }, calls)
  const forwarder = forwarderWith(pool)
  const result = await forwarder.forward(endpoints('a', 'b', 'c'), target(), REQUEST)
  t.equal(result.ok, true)
  if (result.ok) {
    t.equal(result.endpoint.name, 'c')
    t.equal(result.response.body.toString(), 'from c')
    t.strictSame(result.response.headers, { 'content-type': 'text/plain', 'x-flotilla-endpoint': 'c' })
  }
  t.equal(calls.length, 3)
})

t.test("a preferred server (a gRPC stream's pinned worker) takes the request while it can; a retry goes elsewhere", async (t) => {
  const list = endpoints('a', 'b', 'c')
  const [a, b, c] = list
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ status: 200, body: 'from a' }),
    [b!.origin]: () => ({ error: coded('read ECONNRESET', 'ECONNRESET') }),
    [c!.origin]: () => ({ status: 200, body: 'from c' })
  }, calls)
  const forwarder = forwarderWith(pool)
  for (let i = 0; i < 3; i++) {
    const result = await forwarder.forward(list, { ...target(), preferred: c }, REQUEST)
    t.equal(result.ok && result.endpoint.name, 'c', 'the preferred server, not the round-robin turn')
  }
  const reset = await forwarder.forward(list, { ...target(), preferred: b }, REQUEST)
  t.equal(reset.ok && reset.endpoint.name, 'a', 'the preferred server reset: retried on another, as any request')
  t.strictSame(calls.slice(-2).map((call) => call.split(' ')[0]), [b!.origin, a!.origin])
  const elsewhere = await forwarder.forward(list.filter((e) => e !== c), { ...target(), preferred: c }, REQUEST)
  t.not(elsewhere.ok && elsewhere.endpoint.name, 'c', 'a preferred server that is no longer a candidate is not used')
})

t.test('a reset moves on once; a second reset ends the request instead of replaying it on the whole fleet', async (t) => {
  const [a, b, c] = endpoints('a', 'b', 'c')
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ error: coded('other side closed', 'UND_ERR_SOCKET') }),
    [b!.origin]: () => ({ error: coded('read ECONNRESET', 'ECONNRESET') }),
    [c!.origin]: () => ({ status: 200, body: 'from c' })
  }, calls)
  const forwarder = forwarderWith(pool)
  const result = await forwarder.forward(endpoints('a', 'b', 'c'), target(), REQUEST)
  t.equal(result.ok, false)
  if (!result.ok) {
    t.equal(result.error.code, 'GW_ERR_UPSTREAM_BROKEN')
    t.equal(result.error.statusCode, 502)
    t.equal(result.error.message, "server 'b' failed while answering a request for model 'm': read ECONNRESET")
    t.equal(result.endpoint?.name, 'b')
  }
  t.equal(calls.length, 2, 'the third server never sees a request that two servers died of')

  const calls2: string[] = []
  const pool2 = fakePool({
    [a!.origin]: () => ({ error: coded('other side closed', 'UND_ERR_SOCKET') }),
    [b!.origin]: () => ({ status: 200, body: 'from b' })
  }, calls2)
  const forwarder2 = forwarderWith(pool2)
  const retried = await forwarder2.forward(endpoints('a', 'b'), target(), REQUEST)
  t.equal(retried.ok && retried.endpoint.name, 'b', 'one reset (a stale keep-alive connection, say) is retried elsewhere')
})

t.test('connect timeouts fail over too; the 502 names every server tried and the last error', async (t) => {
  const list = endpoints('a', 'b')
  const [a, b] = list
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ error: coded('Connect Timeout Error', 'UND_ERR_CONNECT_TIMEOUT') }),
    [b!.origin]: () => ({ error: coded('getaddrinfo ENOTFOUND nowhere', 'ENOTFOUND') })
  }, calls)
  const forwarder = forwarderWith(pool)
  const result = await forwarder.forward(list, target(), REQUEST)
  t.equal(result.ok, false)
  if (!result.ok) {
    t.equal(result.error.code, 'GW_ERR_NO_UPSTREAM')
    t.equal(result.error.statusCode, 502)
    t.equal(result.error.message, "no server serving model 'm' could be reached (tried: a, b): b: getaddrinfo ENOTFOUND nowhere")
    t.equal(result.endpoint?.name, 'b')
  }
  t.equal(calls.length, 2)
  t.equal(a!.inFlight + b!.inFlight, 0, 'in-flight counts are back to zero')
})

t.test('a failure after the response started is not retried', async (t) => {
  const list = endpoints('a', 'b')
  const [a] = list
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ status: 200, body: '', bodyError: coded('other side closed', 'UND_ERR_SOCKET') })
  }, calls)
  const forwarder = forwarderWith(pool)
  const result = await forwarder.forward(list, target(), REQUEST)
  t.equal(result.ok, false)
  if (!result.ok) {
    t.equal(result.error.statusCode, 502)
    t.equal(result.error.message, "server 'a' failed while answering a request for model 'm': other side closed")
  }
  t.equal(calls.length, 1)
})

t.test('an error that is not about reaching the server is not retried', async (t) => {
  const list = endpoints('a', 'b')
  const calls: string[] = []
  const pool = fakePool({ [list[0]!.origin]: () => ({ error: coded('Parse Error: Expected HTTP/', 'HPE_INVALID_CONSTANT') }) }, calls)
  const forwarder = forwarderWith(pool)
  const result = await forwarder.forward(list, target(), REQUEST)
  t.equal(result.ok, false)
  t.equal(calls.length, 1)
})

t.test('no candidates', async (t) => {
  const forwarder = forwarderWith(fakePool({}, []))
  const result = await forwarder.forward([], target(), REQUEST)
  t.equal(result.ok, false)
  if (!result.ok) t.equal(result.error.message, "no server serving model 'm' could be reached (tried: none): no server was available")
})

t.test('upstream pool: one dispatcher per endpoint, reused; a moved endpoint gets a new one', async (t) => {
  const origins: string[] = []
  let closed = 0
  const pool = new UpstreamPool({
    factory: (origin) => {
      origins.push(origin)
      return { close: async () => { closed++ }, destroy: async () => {} } as unknown as Dispatcher
    }
  })
  const [a, b] = endpoints('a', 'b')
  t.equal(pool.dispatcherFor(a!), pool.dispatcherFor(a!))
  pool.dispatcherFor(b!)
  t.strictSame(origins, [a!.origin, b!.origin])
  pool.dispatcherFor({ ...a!, origin: 'http://127.0.0.1:1' })
  t.equal(closed, 1, 'the old pool of a moved endpoint is closed')
  await pool.remove('b')
  t.equal(closed, 2)
  await pool.close()
  t.equal(closed, 3)
  t.throws(() => pool.dispatcherFor(b!), /closed/)
})

/** Records what the forwarder reports. */
function recorder (): { observer: ForwardObserver, events: string[] } {
  const events: string[] = []
  return {
    events,
    observer: {
      retry: (model, cause) => events.push(`retry ${model} ${cause}`),
      retryDenied: (model, reason) => events.push(`denied ${model} ${reason}`),
      queued: (model, waitedMs, outcome) => events.push(`queued ${model} ${waitedMs} ${outcome}`),
      attempt: (endpoint, status) => events.push(`attempt ${endpoint.name} ${String(status)}`)
    }
  }
}

const QUEUE_FULL_BODY = '{"error":"[request id: r] Exceeds maximum queue size"}'

t.test('a 503 is retried on another server, after a jittered backoff', async (t) => {
  const [a, b] = endpoints('a', 'b')
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ status: 503, body: QUEUE_FULL_BODY }),
    [b!.origin]: () => ({ status: 200, body: 'from b' })
  }, calls)
  const clock = new FakeClock()
  const { observer, events } = recorder()
  const delays: number[] = []
  const timers = { ...clock, now: clock.now, clearTimeout: clock.clearTimeout, setTimeout: (fn: () => void, ms: number) => { delays.push(ms); return clock.setTimeout(fn, ms) } }
  const forwarder = forwarderWith(pool, { observer, timers, random: () => 0.5 })
  const pending = forwarder.forward(endpoints('a', 'b'), target(), REQUEST)
  await clock.advance(12)
  const result = await pending
  t.equal(result.ok && result.endpoint.name, 'b')
  t.equal(result.ok && result.response.body.toString(), 'from b')
  t.strictSame(events, ['attempt a 503', 'retry m unavailable', 'attempt b 200'])
  t.ok(delays.includes(12), `full jitter: half of the 25 ms base for the first retry (timers set: ${delays.join(', ')})`)
  t.equal(forwarder.budget.requests, 0, 'nothing left in progress')
  t.equal(forwarder.budget.retries, 0)
})

t.test('when every server answers 503, the last worker answer is passed on as it is', async (t) => {
  const list = endpoints('a', 'b', 'c')
  const calls: string[] = []
  const pool = fakePool(Object.fromEntries(list.map((e) => [e.origin, () => ({ status: 503, body: `${e.name} full` })])), calls)
  const { observer, events } = recorder()
  const forwarder = forwarderWith(pool, { observer, random: () => 0 })
  const result = await forwarder.forward(list, target(), REQUEST)
  t.equal(result.ok, true)
  if (result.ok) {
    t.equal(result.response.statusCode, 503)
    t.equal(result.response.body.toString(), 'c full')
    t.equal(result.endpoint.name, 'c')
  }
  t.equal(calls.length, 3, 'two retries, each on a server not tried before')
  t.equal(events.filter((e) => e.startsWith('retry')).length, 2)
})

t.test('max_retries bounds the retries; 0 turns them off', async (t) => {
  const list = endpoints('a', 'b', 'c', 'd')
  const calls: string[] = []
  const pool = fakePool(Object.fromEntries(list.map((e) => [e.origin, () => ({ error: coded('connect ECONNREFUSED', 'ECONNREFUSED') })])), calls)
  const { observer, events } = recorder()
  const forwarder = forwarderWith(pool, { observer })
  const result = await forwarder.forward(list, target({ maxRetries: 1 }), REQUEST)
  t.equal(result.ok, false)
  if (!result.ok) t.equal(result.error.message, "no server serving model 'm' could be reached (tried: a, b): b: connect ECONNREFUSED")
  t.equal(calls.length, 2)
  t.strictSame(events.filter((e) => !e.startsWith('attempt')), ['retry m connect_failure', 'denied m max_retries'])

  const calls2: string[] = []
  const pool2 = fakePool({ [list[0]!.origin]: () => ({ status: 503, body: 'full' }) }, calls2)
  const none = await forwarderWith(pool2).forward(list, target({ maxRetries: 0 }), REQUEST)
  t.equal(none.ok && none.response.statusCode, 503, 'no retry: the worker answer goes back')
  t.equal(calls2.length, 1)
})

t.test('the retry budget: retries in progress stay within budget_percent of requests, at least min_concurrent', async (t) => {
  const list = endpoints('a', 'b')
  const [a, b] = list
  const release: Array<() => void> = []
  const calls: string[] = []
  // b holds every request until released, so retries pile up in progress.
  const pool = fakePool({
    [a!.origin]: () => ({ status: 503, body: 'full' }),
    [b!.origin]: () => new Promise<Step>((resolve) => { release.push(() => resolve({ status: 200, body: 'b' })) })
  }, calls)
  const { observer, events } = recorder()
  const forwarder = forwarderWith(pool, {
    observer,
    random: () => 0,
    retries: { maxRetries: 2, budgetPercent: 20, minConcurrent: 2, backoffBaseMs: 0, backoffMaxMs: 0 }
  })
  // Always start at a: a round robin that restarts per request.
  const firstA = (): ForwardTarget => target({ balancer: createRoundRobin({ now: () => 0, random: () => 0 }) })
  const results = [1, 2, 3, 4].map(() => forwarder.forward(list, firstA(), REQUEST))
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(forwarder.budget.retries, 2, 'max(2, 20% of 4 requests) retries at once')
  t.equal(forwarder.budget.requests, 2, 'the two denied requests are already answered')
  t.equal(events.filter((e) => e === 'denied m budget').length, 2)
  for (const r of release) r()
  const settled = await Promise.all(results)
  t.strictSame(settled.map((r) => r.ok && r.response.statusCode), [200, 200, 503, 503], 'the denied ones get the worker\'s 503')
  t.equal(forwarder.budget.retries, 0)
  t.equal(forwarder.budget.requests, 0)
})

/** Endpoints with an in-flight limit, serving model `m`. */
function limited (limit: number, ...names: string[]): readonly Endpoint[] {
  return new Fleet(names.map((name, i) => ({ name, host: '127.0.0.1', port: 9100 + i, models: ['m'], weight: 1, labels: {}, max_in_flight: limit })))
    .endpointsServing('m')
}

t.test('in-flight limits: a request that finds every server full waits, and takes the first slot to free', async (t) => {
  const list = limited(1, 'a', 'b')
  const [a, b] = list
  const release = new Map<string, Array<() => void>>([['a', []], ['b', []]])
  const hold = (name: string) => () => new Promise<Step>((resolve) => { release.get(name)!.push(() => resolve({ status: 200, body: name })) })
  const pool = fakePool({ [a!.origin]: hold('a'), [b!.origin]: hold('b') }, [])
  const clock = new FakeClock()
  const { observer, events } = recorder()
  const forwarder = forwarderWith(pool, { observer, timers: clock, admission: { maxQueued: 10, queueTimeoutMs: 500 } })
  const first = forwarder.forward(list, target(), REQUEST)
  const second = forwarder.forward(list, target(), REQUEST)
  await clock.advance(0)
  t.strictSame([a!.inFlight, b!.inFlight], [1, 1], 'one each: the limit steers the second request to b')
  const third = forwarder.forward(list, target(), REQUEST)
  await clock.advance(100)
  t.equal(forwarder.admission.waiting, 1, 'the third waits in the gateway queue')
  release.get('b')!.shift()!()
  t.equal((await second).ok, true)
  await clock.advance(0)
  t.equal(forwarder.admission.waiting, 0)
  t.strictSame([a!.inFlight, b!.inFlight], [1, 1], 'the freed slot on b went straight to the waiting request')
  release.get('a')!.shift()!()
  release.get('b')!.shift()!()
  const results = await Promise.all([first, third])
  t.strictSame(results.map((r) => r.ok && r.endpoint.name), ['a', 'b'])
  t.ok(events.includes('queued m 100 admitted'), events.join('; '))
  t.strictSame([a!.inFlight, b!.inFlight], [0, 0])
})

t.test('a full queue refuses at once; a wait longer than queue_timeout_ms ends in a 503', async (t) => {
  const list = limited(1, 'a')
  const releases: Array<() => void> = []
  const pool = fakePool({ [list[0]!.origin]: () => new Promise<Step>((resolve) => { releases.push(() => resolve({ status: 200, body: 'a' })) }) }, [])
  const clock = new FakeClock()
  const { observer, events } = recorder()
  const forwarder = forwarderWith(pool, { observer, timers: clock, admission: { maxQueued: 1, queueTimeoutMs: 500 } })
  const holding = forwarder.forward(list, target(), REQUEST)
  await clock.advance(0)
  const waiting = forwarder.forward(list, target(), REQUEST)
  await clock.advance(0)
  const refused = await forwarder.forward(list, target(), REQUEST)
  t.equal(!refused.ok && refused.error.code, 'GW_ERR_QUEUE_FULL')
  t.equal(!refused.ok && refused.error.statusCode, 503)
  t.match(!refused.ok && refused.error.message, /at its in-flight limit and the gateway queue is full \(1 requests waiting\)/)
  await clock.advance(500)
  const timedOut = await waiting
  t.equal(!timedOut.ok && timedOut.error.code, 'GW_ERR_QUEUE_TIMEOUT')
  t.equal(!timedOut.ok && timedOut.error.message,
    "every server for model 'm' stayed at its in-flight limit for 500 ms (gateway.queue_timeout_ms); try again later")
  t.ok(events.includes('queued m 0 full') && events.includes('queued m 500 timeout'), events.join('; '))
  releases[0]!()
  t.equal((await holding).ok, true)
  t.equal(list[0]!.inFlight, 0)
})

t.test('one deadline covers queueing and the attempt: the request timeout wins over a longer queue timeout', async (t) => {
  const list = limited(1, 'a')
  const releases: Array<() => void> = []
  const pool = fakePool({ [list[0]!.origin]: () => new Promise<Step>((resolve) => { releases.push(() => resolve({ status: 200, body: 'a' })) }) }, [])
  const clock = new FakeClock()
  const forwarder = forwarderWith(pool, { timers: clock, admission: { maxQueued: 5, queueTimeoutMs: 10_000 } })
  const holding = forwarder.forward(list, target({ timeoutMs: 300 }), REQUEST)
  await clock.advance(0)
  const waiting = forwarder.forward(list, target({ timeoutMs: 200 }), REQUEST)
  await clock.advance(200)
  const late = await waiting
  t.equal(!late.ok && late.error.code, 'GW_ERR_REQUEST_TIMEOUT')
  t.equal(!late.ok && late.error.statusCode, 504)
  await clock.advance(100)
  const timedOut = await holding
  t.equal(!timedOut.ok && timedOut.error.code, 'GW_ERR_UPSTREAM_TIMEOUT', 'the attempt itself is cut at the deadline')
  t.equal(!timedOut.ok && timedOut.error.message, "server 'a' did not answer within 300 ms")
  releases.forEach((r) => { r() })
})

t.test('a client that leaves while queued frees its place and is counted as 499', async (t) => {
  const list = limited(1, 'a')
  const releases: Array<() => void> = []
  const pool = fakePool({ [list[0]!.origin]: () => new Promise<Step>((resolve) => { releases.push(() => resolve({ status: 200, body: 'a' })) }) }, [])
  const clock = new FakeClock()
  const forwarder = forwarderWith(pool, { timers: clock, admission: { maxQueued: 5, queueTimeoutMs: 10_000 } })
  const holding = forwarder.forward(list, target(), REQUEST)
  await clock.advance(0)
  const controller = new AbortController()
  const leaving = forwarder.forward(list, target(), { ...REQUEST, signal: controller.signal })
  await clock.advance(0)
  t.equal(forwarder.admission.waiting, 1)
  controller.abort()
  const gone = await leaving
  t.equal(!gone.ok && gone.error.code, 'GW_ERR_CLIENT_CLOSED')
  t.equal(!gone.ok && gone.error.statusCode, 499)
  t.equal(forwarder.admission.waiting, 0)
  releases[0]!()
  await holding
  t.equal(list[0]!.inFlight, 0)
})

t.test('sendTo asks one server, with no limit and no retry', async (t) => {
  const list = limited(1, 'a')
  const calls: string[] = []
  const pool = fakePool({ [list[0]!.origin]: () => ({ status: 503, body: 'busy' }) }, calls)
  const forwarder = forwarderWith(pool)
  const result = await forwarder.sendTo(list[0]!, REQUEST, {}, 1000)
  t.equal(result.ok && result.response.statusCode, 503)
  t.equal(calls.length, 1)
  t.equal(list[0]!.inFlight, 0)
  t.ok(Number.isFinite(list[0]!.latencyMs), 'recent latency is recorded')
})

t.test('a refused connect is retried even with no retry budget left: it cost no server anything', async (t) => {
  const [a, b] = endpoints('a', 'b')
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ error: coded('connect ECONNREFUSED', 'ECONNREFUSED') }),
    [b!.origin]: () => ({ status: 200, body: 'from b' })
  }, calls)
  const { observer, events } = recorder()
  const forwarder = forwarderWith(pool, { observer, retries: { maxRetries: 2, budgetPercent: 0, minConcurrent: 0, backoffBaseMs: 25, backoffMaxMs: 250 } })
  const result = await forwarder.forward(endpoints('a', 'b'), target(), REQUEST)
  t.equal(result.ok && result.endpoint.name, 'b')
  t.ok(events.includes('retry m connect_failure'))
  t.equal(forwarder.budget.retries, 0)
})

t.test('a reset is retried with no retry budget left: one host going away is not a failing fleet', async (t) => {
  const [a, b] = endpoints('a', 'b')
  const pool = fakePool({
    [a!.origin]: () => ({ error: coded('read ECONNRESET', 'ECONNRESET') }),
    [b!.origin]: () => ({ status: 200, body: 'from b' })
  }, [])
  const forwarder = forwarderWith(pool, { retries: { maxRetries: 2, budgetPercent: 0, minConcurrent: 0, backoffBaseMs: 0, backoffMaxMs: 0 } })
  const result = await forwarder.forward(endpoints('a', 'b'), target(), REQUEST)
  t.equal(result.ok && result.endpoint.name, 'b')
  t.equal(forwarder.budget.retries, 0, 'no budget slot was taken')
})

t.test('a candidate that is no longer active (drained after the list was taken) is skipped', async (t) => {
  const list = endpoints('a', 'b', 'c')
  const [a, b] = list
  const calls: string[] = []
  const pool = fakePool(Object.fromEntries(list.map((e) => [e.origin, () => ({ status: 200, body: e.name })])), calls)
  a!.state = 'draining'
  const result = await forwarderWith(pool).forward(list, target(), REQUEST)
  t.equal(result.ok && result.endpoint.name, 'b', 'the balancer picked a first; the request went to the next one')
  t.strictSame(calls, [`${b!.origin} POST /v2/models/m/infer`], 'a got nothing')
  t.equal(a!.inFlight, 0, 'no slot taken on a')
})

t.test('an endpoint that starts draining while a request waits to retry is skipped for the retry', async (t) => {
  const list = endpoints('a', 'b', 'c')
  const [a, b, c] = list
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ status: 503, body: 'a full' }),
    [b!.origin]: () => ({ status: 200, body: 'from b' }),
    [c!.origin]: () => ({ status: 200, body: 'from c' })
  }, calls)
  const { observer, events } = recorder()
  const forwarder = forwarderWith(pool, { observer: { ...observer, retry: (model, cause) => { b!.state = 'draining'; observer.retry?.(model, cause) } } })
  const result = await forwarder.forward(list, target(), REQUEST)
  t.equal(result.ok && result.endpoint.name, 'c')
  t.strictSame(events, ['attempt a 503', 'retry m unavailable', 'attempt c 200'])
  t.equal(calls.length, 2)
  t.equal(b!.inFlight, 0)
  t.equal(forwarder.budget.retries, 0)
})

t.test('when every untried candidate is draining, the request ends as if none were left', async (t) => {
  const list = endpoints('a', 'b')
  const calls: string[] = []
  const pool = fakePool(Object.fromEntries(list.map((e) => [e.origin, () => ({ status: 200, body: e.name })])), calls)
  for (const e of list) e.state = 'drained'
  const result = await forwarderWith(pool).forward(list, target(), REQUEST)
  t.equal(result.ok, false)
  if (!result.ok) {
    t.equal(result.error.code, 'GW_ERR_NO_UPSTREAM')
    t.equal(result.error.statusCode, 502)
    t.equal(result.error.message, "no server serving model 'm' could be reached (tried: none): no server was available")
  }
  t.strictSame(calls, [])

  const [a, b] = endpoints('a', 'b')
  const calls2: string[] = []
  const pool2 = fakePool({
    [a!.origin]: () => ({ status: 503, body: 'a full' }),
    [b!.origin]: () => ({ status: 200, body: 'from b' })
  }, calls2)
  const forwarder = forwarderWith(pool2, { observer: { retry: () => { b!.state = 'draining' } } })
  const answered = await forwarder.forward([a!, b!], target(), REQUEST)
  t.equal(answered.ok && answered.response.statusCode, 503, "a worker's 503 is passed on when the retry has nowhere to go")
  t.equal(answered.ok && answered.endpoint.name, 'a')
  t.equal(calls2.length, 1)
  t.equal(forwarder.budget.retries, 0)
  t.equal(forwarder.budget.requests, 0)
})

t.test('a draining endpoint with room is not picked when the balancer\'s first pick is full', {
}, async (t) => {
  const list = limited(1, 'a', 'b', 'c')
  const [a, b] = list
  const calls: string[] = []
  const pool = fakePool(Object.fromEntries(list.map((e) => [e.origin, () => ({ status: 200, body: e.name })])), calls)
  a!.inFlight = 1
  b!.state = 'draining'
  const result = await forwarderWith(pool).forward(list, target(), REQUEST)
  t.equal(result.ok && result.endpoint.name, 'c')
  t.notOk(calls.some((c) => c.startsWith(b!.origin)), 'b got nothing')
})

t.test(`an answer carrying ${WORKER_DRAINING_HEADER} tells the observer the server is draining`, async (t) => {
  const [a, b] = endpoints('a', 'b')
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ status: 503, body: 'shutting down', headers: { [WORKER_DRAINING_HEADER]: '1' } }),
    [b!.origin]: (n) => n === 0
      ? { status: 200, body: 'from b', headers: { [WORKER_DRAINING_HEADER]: 'true' } }
      : { status: 200, body: 'from b' }
  }, calls)
  const draining: string[] = []
  const { observer, events } = recorder()
  const forwarder = forwarderWith(pool, { observer: { ...observer, draining: (e) => draining.push(e.name) } })
  const result = await forwarder.forward([a!, b!], target(), REQUEST)
  t.equal(result.ok && result.endpoint.name, 'b', 'the 503 is retried as any other')
  t.equal(result.ok && result.response.statusCode, 200, 'an answer with the header is still the answer')
  t.strictSame(draining, ['a', 'b'], 'once per answer that carried it')
  t.strictSame(events, ['attempt a 503', 'retry m unavailable', 'attempt b 200'])

  const plain = await forwarder.forward([b!], target(), REQUEST)
  t.equal(plain.ok && plain.response.statusCode, 200)
  t.strictSame(draining, ['a', 'b'], 'no header, no call')
  t.equal(calls.length, 3)
})

t.test('per-try timeout: a hung server is abandoned and the request moves on, once, with no retry budget', async (t) => {
  const [a, b, c] = endpoints('a', 'b', 'c')
  const calls: string[] = []
  const hung = (): Promise<Step> => new Promise<Step>(() => {})
  const pool = fakePool({ [a!.origin]: hung, [b!.origin]: () => ({ status: 200, body: 'from b' }), [c!.origin]: hung }, calls)
  const clock = new FakeClock()
  const events: string[] = []
  const forwarder = forwarderWith(pool, {
    timers: clock,
    retries: { maxRetries: 2, budgetPercent: 0, minConcurrent: 0, backoffBaseMs: 25, backoffMaxMs: 250 },
    observer: { attempt: (e, status) => { events.push(`${e.name} ${String(status)}`) }, retry: (_m, cause) => { events.push(`retry ${cause}`) } }
  })
  const pending = forwarder.forward(endpoints('a', 'b', 'c'), target({ timeoutMs: 60_000, perTryTimeoutMs: 1000 }), REQUEST)
  await clock.advance(999)
  t.same(calls.length, 1, 'still waiting on the first server')
  await clock.advance(1)
  const result = await pending
  t.equal(result.ok && result.endpoint.name, 'b', 'the request moved on to the next server at the per-try timeout')
  t.same(events, ['a 504', 'retry timeout', 'b 200'], 'the timed-out attempt counts against its server (504) and is retried at once')

  // Two hung servers in a row: the second timeout ends the request instead of walking the whole fleet.
  const pool2 = fakePool({ [a!.origin]: hung, [b!.origin]: hung, [c!.origin]: () => ({ status: 200, body: 'from c' }) }, [])
  const forwarder2 = forwarderWith(pool2, { timers: clock })
  const pending2 = forwarder2.forward(endpoints('a', 'b', 'c'), target({ timeoutMs: 60_000, perTryTimeoutMs: 500 }), REQUEST)
  await clock.advance(500)
  await clock.advance(500)
  const second = await pending2
  t.equal(!second.ok && second.error.code, 'GW_ERR_ATTEMPT_TIMEOUT')
  t.equal(!second.ok && second.error.statusCode, 504)
  t.match(!second.ok && second.error.message, /server 'b' did not answer within the per-try timeout of 500 ms for model 'm' \(set retries.per_try_timeout_ms/)
})

t.test('per-try timeout: the request deadline still wins when it comes first; 0 turns the per-try limit off', async (t) => {
  const [a] = endpoints('a')
  const pool = fakePool({ [a!.origin]: () => new Promise<Step>(() => {}) }, [])
  const clock = new FakeClock()
  const forwarder = forwarderWith(pool, { timers: clock })
  const pending = forwarder.forward(endpoints('a'), target({ timeoutMs: 300, perTryTimeoutMs: 1000 }), REQUEST)
  await clock.advance(300)
  const result = await pending
  t.equal(!result.ok && result.error.code, 'GW_ERR_UPSTREAM_TIMEOUT', 'a deadline shorter than the per-try timeout is the request deadline')

  const off = forwarder.forward(endpoints('a'), target({ timeoutMs: 5000, perTryTimeoutMs: 0 }), REQUEST)
  await clock.advance(4999)
  let settled = false
  void off.then(() => { settled = true })
  await clock.advance(0)
  t.equal(settled, false, 'no per-try limit: the attempt runs to the deadline')
  await clock.advance(1)
  t.equal(!(await off).ok && (await off as { error: { code: string } }).error.code, 'GW_ERR_UPSTREAM_TIMEOUT')
})

t.test("per-try timeout follows the model's recent p99 when nothing fixes it", async (t) => {
  const [a, b] = endpoints('a', 'b')
  const clock = new FakeClock()
  let hang = false
  const pool = fakePool({
    [a!.origin]: () => hang ? new Promise<Step>(() => {}) : new Promise<Step>((resolve) => { clock.setTimeout(() => { resolve({ status: 200, body: 'a' }) }, 40) }),
    [b!.origin]: () => new Promise<Step>((resolve) => { clock.setTimeout(() => { resolve({ status: 200, body: 'b' }) }, 40) })
  }, [])
  const timeouts = new AttemptTimeouts({ ...DEFAULT_ATTEMPT_TIMEOUT_SETTINGS, minMs: 100, p99Multiple: 5 }, clock)
  const forwarder = forwarderWith(pool, { timers: clock, attemptTimeouts: timeouts })
  t.equal(timeouts.timeoutMs('m', undefined), 30_000, 'a model with no history gets the ceiling')
  for (let i = 0; i < 30; i++) {
    const pending = forwarder.forward(endpoints('a', 'b'), target({ timeoutMs: 60_000 }), REQUEST)
    await clock.advance(40)
    t.ok((await pending).ok)
  }
  await clock.advance(100)
  const perTry = timeouts.timeoutMs('m', undefined)
  t.ok(perTry >= 200 && perTry <= 220, `5 x a 40 ms p99 (within a bucket), got ${perTry}`)
  hang = true
  const started = clock.now()
  const pending = forwarder.forward(endpoints('a', 'b'), target({ timeoutMs: 60_000 }), REQUEST)
  for (let waited = 0; waited < 400; waited += 10) await clock.advance(10)
  const result = await pending
  t.equal(result.ok && result.endpoint.name, 'b')
  t.ok(clock.now() - started <= 400, 'the hung server cost about its per-try timeout, not the request deadline')
})
