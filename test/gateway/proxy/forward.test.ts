import t from 'tap'
import { type Dispatcher } from 'undici'
import { createRoundRobin } from '../../../gateway/balancer/round-robin.ts'
import { clientResponseHeaders, describeError, Forwarder, upstreamRequestHeaders, type ForwardRequest } from '../../../gateway/proxy/forward.ts'
import { UpstreamPool } from '../../../gateway/proxy/upstream-pool.ts'
import { endpoints } from '../fixtures/helpers.ts'

t.test('request headers: hop-by-hop stripped, x-request-id set', async (t) => {
  const out = upstreamRequestHeaders({
    host: 'gateway:8000',
    connection: 'keep-alive, X-Private',
    'keep-alive': 'timeout=5',
    'transfer-encoding': 'chunked',
    te: 'trailers',
    trailer: 'x-checksum',
    upgrade: 'h2c',
    'proxy-authorization': 'secret',
    'proxy-connection': 'keep-alive',
    'x-private': 'named in Connection',
    'content-length': '12',
    expect: '100-continue',
    'content-type': 'application/octet-stream',
    'inference-header-content-length': '8',
    traceparent: '00-abc-def-01',
    tracestate: 'vendor=1',
    'x-request-id': 'from-client',
    'set-cookie': ['a=1', 'b=2']
  }, 'req-1')
  t.strictSame(out, {
    'content-type': 'application/octet-stream',
    'inference-header-content-length': '8',
    traceparent: '00-abc-def-01',
    tracestate: 'vendor=1',
    'x-request-id': 'req-1',
    'set-cookie': ['a=1', 'b=2']
  })
})

t.test('a client cannot use Connection to strip what the gateway adds', async (t) => {
  const out = upstreamRequestHeaders({ connection: 'x-request-id' }, 'req-2')
  t.equal(out['x-request-id'], 'req-2')
})

t.test('response headers: hop-by-hop and content-length stripped, endpoint named', async (t) => {
  const out = clientResponseHeaders({
    connection: 'x-hop',
    'x-hop': '1',
    'keep-alive': 'timeout=5',
    'transfer-encoding': 'chunked',
    'content-length': '10',
    'proxy-authenticate': 'Basic',
    'content-type': 'application/json',
    'inference-header-content-length': '42',
    'x-missing': undefined
  }, 'worker-1')
  t.strictSame(out, {
    'content-type': 'application/json',
    'inference-header-content-length': '42',
    'x-flotilla-endpoint': 'worker-1'
  })
})

t.test('describeError', async (t) => {
  t.equal(describeError(Object.assign(new Error('connect ECONNREFUSED 1.2.3.4:5'), { code: 'ECONNREFUSED' })), 'connect ECONNREFUSED 1.2.3.4:5')
  t.equal(describeError(Object.assign(new Error(''), { code: 'ECONNRESET' })), 'ECONNRESET')
  t.equal(describeError(new AggregateError([new Error('connect ECONNREFUSED ::1:5')], '')), 'connect ECONNREFUSED ::1:5')
  t.equal(describeError('plain'), 'plain')
})

/** A dispatcher that fails or answers as scripted per origin, to drive the forwarder without sockets. */
type Script = (attempt: number) => { error: Error & { code?: string } } | { status: number, body: string, bodyError?: Error }

function fakePool (scripts: Record<string, Script>, calls: string[]): UpstreamPool {
  return new UpstreamPool({
    factory: (origin) => {
      let attempt = 0
      const fake = {
        async request (opts: Dispatcher.RequestOptions) {
          calls.push(`${origin} ${opts.method} ${opts.path}`)
          const step = scripts[origin]?.(attempt++) ?? { status: 500, body: 'unscripted' }
          if ('error' in step) throw step.error
          return {
            statusCode: step.status,
            headers: { 'content-type': 'text/plain', connection: 'keep-alive' },
            body: {
              async arrayBuffer () {
                if (step.bodyError !== undefined) throw step.bodyError
                const b = Buffer.from(step.body)
                return b.buffer.slice(b.byteOffset, b.byteOffset + b.length)
              }
            }
          }
        },
        async close () {},
        async destroy () {}
      }
      return fake as unknown as Dispatcher
    }
  })
}

const REQUEST: ForwardRequest = { method: 'POST', path: '/v2/models/m/infer', headers: {}, body: Buffer.from('{}'), requestId: 'r' }

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
  const forwarder = new Forwarder({ pool, balancer: createRoundRobin({ now: () => 0, random: () => 0 }), timeoutMs: 1000 })
  const result = await forwarder.forward(endpoints('a', 'b', 'c'), 'm', undefined, REQUEST)
  t.equal(result.ok, true)
  if (result.ok) {
    t.equal(result.endpoint.name, 'c')
    t.equal(result.response.body.toString(), 'from c')
    t.strictSame(result.response.headers, { 'content-type': 'text/plain', 'x-flotilla-endpoint': 'c' })
  }
  t.equal(calls.length, 3)
})

t.test('a reset moves on once; a second reset ends the request instead of replaying it on the whole fleet', async (t) => {
  const [a, b, c] = endpoints('a', 'b', 'c')
  const calls: string[] = []
  const pool = fakePool({
    [a!.origin]: () => ({ error: coded('other side closed', 'UND_ERR_SOCKET') }),
    [b!.origin]: () => ({ error: coded('read ECONNRESET', 'ECONNRESET') }),
    [c!.origin]: () => ({ status: 200, body: 'from c' })
  }, calls)
  const forwarder = new Forwarder({ pool, balancer: createRoundRobin({ now: () => 0, random: () => 0 }), timeoutMs: 1000 })
  const result = await forwarder.forward(endpoints('a', 'b', 'c'), 'm', undefined, REQUEST)
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
  const forwarder2 = new Forwarder({ pool: pool2, balancer: createRoundRobin({ now: () => 0, random: () => 0 }), timeoutMs: 1000 })
  const retried = await forwarder2.forward(endpoints('a', 'b'), 'm', undefined, REQUEST)
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
  const forwarder = new Forwarder({ pool, balancer: createRoundRobin({ now: () => 0, random: () => 0 }), timeoutMs: 1000 })
  const result = await forwarder.forward(list, 'm', undefined, REQUEST)
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
  const forwarder = new Forwarder({ pool, balancer: createRoundRobin({ now: () => 0, random: () => 0 }), timeoutMs: 1000 })
  const result = await forwarder.forward(list, 'm', undefined, REQUEST)
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
  const forwarder = new Forwarder({ pool, balancer: createRoundRobin({ now: () => 0, random: () => 0 }), timeoutMs: 1000 })
  const result = await forwarder.forward(list, 'm', undefined, REQUEST)
  t.equal(result.ok, false)
  t.equal(calls.length, 1)
})

t.test('no candidates', async (t) => {
  const forwarder = new Forwarder({ pool: fakePool({}, []), balancer: createRoundRobin({ now: () => 0, random: () => 0 }), timeoutMs: 1000 })
  const result = await forwarder.forward([], 'm', undefined, REQUEST)
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
