/**
 * The response cache over a scripted upstream: what is a hit, what shares an entry and what never does, the byte
 * budget, TTL, Cache-Control, coalescing (a failing leader included), canary sides and version changes.
 */
import t from 'tap'
import { createError } from '../../../common/errors.ts'
import { encodeRawHttpInferRequest } from '../../../common/protocol/binary-codec.ts'
import { LocalStore } from '../../../gateway/cache/local-store.ts'
import { ResponseCache } from '../../../gateway/cache/response-cache.ts'
import { DEFAULT_CACHE_SETTINGS, type CacheConfig } from '../../../gateway/fleet/fleet-config.ts'
import { type Endpoint } from '../../../gateway/fleet/types.ts'
import { REAL_TIMERS } from '../../../gateway/proxy/forward.ts'
import { type ForwardRequest, type ForwardResult } from '../../../gateway/proxy/types.ts'
import { endpoints } from '../fixtures/helpers.ts'

const [WORKER] = endpoints('w') as [Endpoint]

function jsonRequest (data: number[], extra: Record<string, unknown> = {}): ForwardRequest {
  const body = JSON.stringify({ ...extra, inputs: [{ name: 'x', datatype: 'FP32', shape: [1, data.length], data }] })
  return { method: 'POST', path: '/v2/models/m/infer', headers: { 'content-type': 'application/json' }, body: Buffer.from(body), requestId: 'r' }
}

/** An upstream that answers with the sum of the input, counting its calls. */
function upstream (version = '1'): { send: (request: ForwardRequest) => () => Promise<ForwardResult>, calls: () => number, fail: (n: number) => void, hold: () => () => void } {
  let calls = 0
  let failing = 0
  let gate: Promise<void> | undefined
  return {
    calls: () => calls,
    fail: (n) => { failing = n },
    hold: () => {
      let open!: () => void
      gate = new Promise((resolve) => { open = resolve })
      return () => { gate = undefined; open() }
    },
    send: (request) => async () => {
      calls++
      if (gate !== undefined) await gate
      if (failing > 0) {
        failing--
        return { ok: true, endpoint: WORKER, response: { statusCode: 500, headers: {}, body: Buffer.from('{"error":"boom"}') } }
      }
      const parsed = JSON.parse(request.body!.toString()) as { id?: string, inputs: Array<{ data: number[] }> }
      const sum = parsed.inputs[0]!.data.reduce((a, b) => a + b, 0)
      const id = parsed.id === undefined ? '' : `"id":${JSON.stringify(parsed.id)},`
      const body = `{${id}"model_name":"m","model_version":"${version}","outputs":[{"name":"y","datatype":"FP32","shape":[1],"data":[${sum}]}]}`
      return { ok: true, endpoint: WORKER, response: { statusCode: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from(body) } }
    }
  }
}

function cacheWith (settings: Partial<CacheConfig> = {}, enabled: boolean | undefined = true): ResponseCache {
  const full = { ...DEFAULT_CACHE_SETTINGS, ...settings }
  return new ResponseCache({ settings: full, local: new LocalStore(full.max_bytes), enabledByModelConfig: () => enabled, timers: REAL_TIMERS })
}

const call = (request: ForwardRequest, extra: { target?: string, cacheControl?: string } = {}) =>
  ({ model: 'm', target: extra.target, request, cacheControl: extra.cacheControl })

t.test('a repeated request is a hit, answered with its own id; another input or parameter is a miss', async (t) => {
  const cache = cacheWith()
  const up = upstream()
  const first = jsonRequest([1, 2], { id: 'first' })
  const a = await cache.serve(call(first), up.send(first))
  t.equal(a.cache, 'miss')
  const again = jsonRequest([1, 2], { id: 'second' })
  const b = await cache.serve(call(again), up.send(again))
  t.equal(b.cache, 'hit')
  t.equal(up.calls(), 1, 'the hit reached no worker')
  t.equal(b.endpoint, undefined)
  t.match(JSON.parse(b.ok ? b.response.body.toString() : '{}'), { id: 'second', outputs: [{ data: [3] }] })
  for (const other of [jsonRequest([2, 1]), jsonRequest([1, 2], { parameters: { temperature: 1 } }), jsonRequest([1, 2, 0])]) {
    t.equal((await cache.serve(call(other), up.send(other))).cache, 'miss', other.body!.toString())
  }
  t.equal(up.calls(), 4)
})

t.test('the JSON and the binary form of a tensor share an entry', async (t) => {
  const cache = cacheWith()
  const up = upstream()
  const json = jsonRequest([0.5, 4])
  await cache.serve(call(json), up.send(json))
  // Triton's binary extension, answers asked for in JSON as the JSON request does.
  const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 2], parameters: { binary_data_size: 8 } }] }))
  const body = Buffer.concat([header, Buffer.from(new Float32Array([0.5, 4]).buffer)])
  const binary: ForwardRequest = { ...json, headers: { 'inference-header-content-length': String(header.length) }, body }
  t.equal((await cache.serve(call(binary), up.send(json))).cache, 'hit')
  // The gRPC front's form asks for binary outputs: another answer form, so another entry.
  const grpcForm = encodeRawHttpInferRequest({
    parameters: {}, inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 2], raw: new Uint8Array(new Float32Array([0.5, 4]).buffer) }]
  })
  const asGrpc: ForwardRequest = { ...json, headers: { 'inference-header-content-length': String(grpcForm.headerLength) }, body: grpcForm.body }
  t.equal((await cache.serve(call(asGrpc), up.send(json))).cache, 'miss', 'binary outputs are a different answer')
})

t.test('canary sides and named versions never share an entry', async (t) => {
  const cache = cacheWith()
  const up = upstream()
  const req = jsonRequest([7])
  t.equal((await cache.serve(call(req, { target: 'baseline' }), up.send(req))).cache, 'miss')
  t.equal((await cache.serve(call(req, { target: 'canary' }), up.send(req))).cache, 'miss', 'the canary is not served the baseline\'s answer')
  t.equal((await cache.serve(call(req, { target: '2' }), up.send(req))).cache, 'miss')
  t.equal((await cache.serve(call(req, { target: 'canary' }), up.send(req))).cache, 'hit')
})

t.test('Cache-Control: no-cache skips the look-up but stores; no-store skips both', async (t) => {
  const cache = cacheWith()
  const up = upstream()
  const req = jsonRequest([1])
  t.equal((await cache.serve(call(req, { cacheControl: 'no-store' }), up.send(req))).cache, 'bypass')
  t.equal((await cache.serve(call(req, { cacheControl: 'max-age=0, no-cache' }), up.send(req))).cache, 'miss')
  t.equal((await cache.serve(call(req), up.send(req))).cache, 'hit', 'what no-cache fetched was stored')
  t.equal((await cache.serve(call(req, { cacheControl: 'no-cache' }), up.send(req))).cache, 'miss')
  t.equal(up.calls(), 3)
})

t.test('only complete 200s are stored; models not cached are left alone', async (t) => {
  const cache = cacheWith()
  const up = upstream()
  up.fail(1)
  const req = jsonRequest([5])
  const failed = await cache.serve(call(req), up.send(req))
  t.equal(failed.ok && failed.response.statusCode, 500)
  t.equal((await cache.serve(call(req), up.send(req))).cache, 'miss', 'the 500 was not stored')
  const off = cacheWith({}, false)
  const plain = await off.serve(call(req), up.send(req))
  t.equal(plain.cache, undefined, 'no header for a model that is not cached')
  const byFile = cacheWith({ models: { m: { enabled: false } } }, true)
  t.equal((await byFile.serve(call(req), up.send(req))).cache, undefined, 'cache.models.<m>.enabled: false wins over config.pbtxt')
})

t.test('the byte budget holds under a flood of large answers', async (t) => {
  const cache = cacheWith({ max_bytes: 64 * 1024 })
  const up = upstream()
  for (let i = 0; i < 200; i++) {
    const req = jsonRequest(Array.from({ length: 500 }, (_, j) => i * 1000 + j))
    await cache.serve(call(req), up.send(req))
    t.ok(cache.local.stats().bytes <= 64 * 1024, 'within budget')
  }
  const stats = cache.local.stats()
  t.ok(stats.evictions > 0 && stats.entries > 0, `evicted ${stats.evictions}, holds ${stats.entries}`)
})

t.test('requests over max_entry_bytes are not cached', async (t) => {
  const cache = cacheWith({ max_entry_bytes: 100 })
  const up = upstream()
  const req = jsonRequest(Array.from({ length: 50 }, (_, i) => i))
  t.equal((await cache.serve(call(req), up.send(req))).cache, 'bypass')
  t.equal((await cache.serve(call(req), up.send(req))).cache, 'bypass')
})

t.test('TTL: an entry expires', async (t) => {
  const cache = cacheWith({ ttl_ms: 60 })
  const up = upstream()
  const req = jsonRequest([9])
  await cache.serve(call(req), up.send(req))
  t.equal((await cache.serve(call(req), up.send(req))).cache, 'hit')
  await new Promise((resolve) => setTimeout(resolve, 120))
  t.equal((await cache.serve(call(req), up.send(req))).cache, 'miss')
})

t.test('64 identical concurrent requests reach the upstream once', async (t) => {
  const cache = cacheWith()
  const up = upstream()
  const open = up.hold()
  const all = Array.from({ length: 64 }, (_, i) => {
    const req = jsonRequest([3, 3], { id: `r${i}` })
    return cache.serve(call(req), up.send(req))
  })
  await new Promise((resolve) => setImmediate(resolve))
  open()
  const results = await Promise.all(all)
  t.equal(up.calls(), 1)
  t.same(results.map((r) => r.cache).sort(), [...Array<string>(63).fill('coalesced'), 'miss'])
  t.ok(results.every((r, i) => r.ok && JSON.parse(r.response.body.toString()).id === `r${i}`), 'each with its own id')
})

t.test('a failing leader: its followers are sent on their own, not failed with it', async (t) => {
  const cache = cacheWith()
  const up = upstream()
  const open = up.hold()
  up.fail(1)
  const req = jsonRequest([4])
  const all = Array.from({ length: 5 }, () => cache.serve(call(req), up.send(req)))
  await new Promise((resolve) => setImmediate(resolve))
  open()
  const results = await Promise.all(all)
  t.equal(results.filter((r) => r.ok && r.response.statusCode === 500).length, 1, 'only the leader failed')
  t.equal(results.filter((r) => r.ok && r.response.statusCode === 200).length, 4)
  t.equal(up.calls(), 5, 'each follower went upstream itself')
})

t.test('coalescing for a model that is not cached (cache.coalesce), without storing', async (t) => {
  const cache = cacheWith({ coalesce: true }, false)
  const up = upstream()
  const open = up.hold()
  const req = jsonRequest([2])
  const all = Array.from({ length: 3 }, () => cache.serve(call(req), up.send(req)))
  await new Promise((resolve) => setImmediate(resolve))
  open()
  const results = await Promise.all(all)
  t.same(results.map((r) => r.cache), [undefined, 'coalesced', 'coalesced'])
  t.equal((await cache.serve(call(req), up.send(req))).cache, undefined, 'nothing was stored')
  t.equal(up.calls(), 2)
})

t.test('when the model\'s answers name another version, its entries are dropped', async (t) => {
  const cache = cacheWith()
  const v1 = upstream('1')
  const a = jsonRequest([1])
  const b = jsonRequest([2])
  await cache.serve(call(a), v1.send(a))
  t.equal((await cache.serve(call(a), v1.send(a))).cache, 'hit')
  const v2 = upstream('2')
  await cache.serve(call(b), v2.send(b))
  await new Promise((resolve) => setImmediate(resolve))
  const after = await cache.serve(call(a), v2.send(a))
  t.equal(after.cache, 'miss', 'the version 1 answer is gone')
  t.match(JSON.parse(after.ok ? after.response.body.toString() : '{}'), { model_version: '2' })
})

t.test("a leader whose client leaves: one follower leads again, the rest follow it (no stampede)", async (t) => {
  const cache = cacheWith()
  const up = upstream()
  const open = up.hold()
  const req = jsonRequest([6])
  let first = true
  const send = (): Promise<ForwardResult> => {
    if (first) {
      first = false
      // The leader's client went away: its upstream request ends as a 499.
      return Promise.resolve({ ok: false, endpoint: undefined, error: createError('GW_ERR_CLIENT_CLOSED', 'm') })
    }
    return up.send(req)()
  }
  const all = Array.from({ length: 6 }, () => cache.serve(call(req), send))
  await new Promise((resolve) => setImmediate(resolve))
  open()
  const results = await Promise.all(all)
  t.equal(up.calls(), 1, 'after the leader left, one request went upstream for the five others')
  t.same(results.map((r) => r.cache).sort(), ['coalesced', 'coalesced', 'coalesced', 'coalesced', 'miss', 'miss'])
})
