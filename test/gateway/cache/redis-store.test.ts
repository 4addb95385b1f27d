/**
 * RedisStore against a real redis-server (test/helpers/redis-server.ts), one per test: binary round trip, TTL, purge
 * by model, corrupt values, and what the gateway must survive — Redis killed, restarted, slow, paused, down at start,
 * or a server that accepts and never answers — each answered as a miss within the deadline and logged once.
 */
import { createServer, type Socket } from 'node:net'
import { Writable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { createClient, type RedisArgument } from '@redis/client'
import t, { type Test } from 'tap'
import { createLogger } from '../../../common/logger.ts'
import {
  RedisStore, decodeEntry, encodeEntry, modelKey, redactUrl, type RedisErrorKind, type RedisStoreOptions
} from '../../../gateway/cache/redis-store.ts'
import { type CachedAnswer } from '../../../gateway/cache/types.ts'
import { redisServerSkip, startRedisServer, type RedisServer } from '../../helpers/redis-server.ts'

const skip = redisServerSkip(t)
const PREFIX = 'flotilla:cache:'
/**
 * How late past its deadline a call may resolve on a loaded 2-core CI machine: generous, since the suite runs two
 * files at once on two cores and a busy event loop is not a slow store; a store that hangs is seconds late.
 */
const SLACK_MS = 400

interface LogLine { level: number, msg: string, [k: string]: unknown }

/** A store on `url` whose errors and log lines the test reads; closed in teardown. */
function storeOn (t: Test, url: string, options: Partial<RedisStoreOptions> = {}): {
  store: RedisStore
  errors: Array<{ kind: RedisErrorKind, err: Error & { code?: string } }>
  lines: LogLine[]
  warns: () => LogLine[]
} {
  const errors: Array<{ kind: RedisErrorKind, err: Error & { code?: string } }> = []
  const lines: LogLine[] = []
  const destination = new Writable({
    write (chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line) as LogLine)
      cb()
    }
  })
  const store = new RedisStore({
    url,
    onError: (kind, err) => { errors.push({ kind, err }) },
    logger: createLogger({ level: 'info', destination }),
    // Generous unless a test is about the deadline: a loaded CI machine took the default 50 ms for one SET.
    timeoutMs: 2000,
    ...options
  })
  t.teardown(() => store.close())
  return { store, errors, lines, warns: () => lines.filter(l => l.level === 40) }
}

/** A second, plain client, to look at and tamper with what the store wrote. */
async function rawClient (t: Test, url: string): Promise<ReturnType<typeof createClient<{}, {}, {}, 2, {}>>> {
  const client = createClient({ url, RESP: 2 })
  client.on('error', () => {})
  await client.connect()
  t.teardown(() => client.destroy())
  return client
}

async function eventually (what: string, cond: () => boolean | Promise<boolean>, withinMs = 3000): Promise<number> {
  const started = Date.now()
  while (!(await cond())) {
    if (Date.now() - started > withinMs) throw new Error(`not within ${withinMs} ms: ${what}`)
    await sleep(10)
  }
  return Date.now() - started
}

async function timed<T> (p: Promise<T>): Promise<[T, number]> {
  const started = performance.now()
  const value = await p
  return [value, performance.now() - started]
}

function answer (model: string, body: Buffer, extra: Partial<CachedAnswer> = {}): CachedAnswer {
  return {
    model,
    version: '3',
    check: 'sha256:' + 'ab'.repeat(32),
    headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': '42' },
    body,
    storedAt: 1_760_000_000_123,
    ...extra
  }
}

const ALL_BYTES = Buffer.from(Array.from({ length: 256 }, (_, i) => i))

async function started (t: Test): Promise<RedisServer> {
  return startRedisServer(t)
}

t.test('a binary body and its headers make the round trip, stored as raw bytes', { skip }, async t => {
  const redis = await started(t)
  const { store, errors, lines } = storeOn(t, redis.url)
  await eventually('connected', () => store.connected)
  const body = Buffer.concat([ALL_BYTES, Buffer.from(ALL_BYTES).reverse(), ALL_BYTES])
  const key = modelKey('resnet50', 'k1')
  await store.set(key, answer('resnet50', body), undefined)

  const got = await store.get(key)
  t.ok(got, 'a hit')
  t.strictSame(got?.body, body, 'every byte value survives')
  t.strictSame({ ...got, body: undefined }, { ...answer('resnet50', body), body: undefined }, 'model, version, check, headers, storedAt')

  const raw = await rawClient(t, redis.url)
  const value = await raw.sendCommand<Buffer>(['GET', PREFIX + key], { typeMapping: { 36: Buffer } })
  t.ok(value.subarray(value.length - body.length).equals(body), 'the body is the value\'s tail, byte for byte (no base64)')
  t.equal(await raw.sendCommand(['PTTL', PREFIX + key]), -1, 'no ttl given: no expiry')

  t.equal(await store.get(modelKey('resnet50', 'absent')), undefined, 'an absent key is a miss')
  t.strictSame(errors, [], 'and no error')
  t.strictSame(lines.map(l => l.msg), ['Redis cache connected'], 'one line at connect, nothing per call')
})

t.test('a ttl is a PX expiry', { skip }, async t => {
  const redis = await started(t)
  const { store } = storeOn(t, redis.url)
  await eventually('connected', () => store.connected)
  const raw = await rawClient(t, redis.url)
  const key = modelKey('bert', 'short')
  await store.set(key, answer('bert', ALL_BYTES), 300)
  const pttl = await raw.sendCommand<number>(['PTTL', PREFIX + key])
  t.ok(pttl > 0 && pttl <= 300, `PTTL ${pttl} in (0, 300]`)
  t.ok(await store.get(key), 'a hit before it expires')
  await sleep(400)
  t.equal(await store.get(key), undefined, 'a miss after')
})

t.test('purge(model) drops that model\'s entries only, over many SCAN batches; purge() everything under the prefix', { skip }, async t => {
  const redis = await started(t)
  // A generous deadline: hundreds of sets at once on a loaded machine are not what this test is about.
  const { store, errors } = storeOn(t, redis.url, { scanCount: 50, timeoutMs: 2000 })
  const other = storeOn(t, redis.url, { keyPrefix: 'other:', timeoutMs: 2000 }).store
  await eventually('connected', () => store.connected && other.connected)
  const raw = await rawClient(t, redis.url)
  const counts: Record<string, number> = { resnet50: 600, resnet: 30, 'res*': 20, 'a:b': 10, bert: 40 }
  for (const [model, n] of Object.entries(counts)) {
    await Promise.all(Array.from({ length: n }, (_, i) => store.set(modelKey(model, `k${i}`), answer(model, ALL_BYTES), undefined)))
  }
  await other.set(modelKey('resnet50', 'k0'), answer('resnet50', ALL_BYTES), undefined)
  await raw.sendCommand(['SET', 'unrelated', 'x'])
  t.equal(await raw.sendCommand(['DBSIZE']), 600 + 30 + 20 + 10 + 40 + 2, 'all stored')

  t.equal(await store.purge('resnet50'), 600, 'purge(resnet50) drops its 600 (12 SCAN batches of 50)')
  t.equal(await store.get(modelKey('resnet50', 'k7')), undefined, 'gone')
  t.ok(await store.get(modelKey('resnet', 'k7')), 'resnet (a prefix of resnet50) is kept')
  t.equal(await store.purge('res*'), 20, 'a glob character in a model name is matched literally')
  t.ok(await store.get(modelKey('resnet', 'k7')), 'so res* did not take resnet')
  t.equal(await store.purge('a'), 0, 'purge(a) does not take a:b (":" is encoded in the model part)')
  t.equal(await store.purge('nothing-here'), 0, 'an unknown model: 0')

  t.equal(await store.purge(), 30 + 10 + 40, 'purge() drops the rest under the prefix')
  t.equal(await raw.sendCommand(['DBSIZE']), 2, 'what is under another prefix, or none, stays')
  t.ok(await other.get(modelKey('resnet50', 'k0')), 'the other prefix\'s entry still answers')
  t.strictSame(errors, [])
})

t.test('a value that is not a cache entry is a miss, reported as a get error', { skip }, async t => {
  const redis = await started(t)
  const { store, errors } = storeOn(t, redis.url)
  await eventually('connected', () => store.connected)
  const raw = await rawClient(t, redis.url)
  const good = encodeEntry(answer('m', ALL_BYTES))
  const headLength = good.readUInt32BE(3)
  const head = (obj: unknown): Buffer => {
    const json = Buffer.from(JSON.stringify(obj))
    const out = Buffer.alloc(7 + json.length)
    out.write('FC1', 'latin1')
    out.writeUInt32BE(json.length, 3)
    json.copy(out, 7)
    return out
  }
  const valid = { model: 'm', version: '1', check: 'c', headers: {}, storedAt: 1, bodyLength: 0 }
  const corrupt: Record<string, RedisArgument> = {
    text: 'hello',
    empty: '',
    'another layout': Buffer.concat([Buffer.from('FC2'), good.subarray(3)]),
    'head longer than the value': Buffer.concat([good.subarray(0, 3), Buffer.from([0xff, 0xff, 0xff, 0xff]), good.subarray(7)]),
    'truncated body': good.subarray(0, good.length - 1),
    'extra bytes': Buffer.concat([good, Buffer.from([0])]),
    'head not JSON': Buffer.concat([good.subarray(0, 7), Buffer.alloc(headLength, 0x7b), good.subarray(7 + headLength)]),
    'head not an object': head([1, 2]),
    'a header not a string': head({ ...valid, headers: { a: 1 } }),
    'storedAt not a number': head({ ...valid, storedAt: '1' }),
    'no model': head({ ...valid, model: undefined })
  }
  t.ok(decodeEntry(head(valid)), 'the hand-made head is valid as it is')
  for (const [name, value] of Object.entries(corrupt)) {
    const key = modelKey('m', name)
    await raw.sendCommand(['SET', PREFIX + key, value])
    errors.length = 0
    t.equal(await store.get(key), undefined, `${name}: a miss`)
    t.strictSame(errors.map(e => [e.kind, e.err.code]), [['get', 'REDIS_CACHE_CORRUPT_ENTRY']], `${name}: one get error`)
  }
})

t.test('Redis killed: calls resolve within the deadline and report errors, the outage is logged once; restarted, hits resume', { skip }, async t => {
  const redis = await started(t)
  const { store, errors, warns, lines } = storeOn(t, redis.url, { timeoutMs: 50 })
  await eventually('connected', () => store.connected)
  const key = modelKey('m', 'k')
  await store.set(key, answer('m', ALL_BYTES), undefined)
  t.ok(await store.get(key), 'a hit while up')

  await redis.kill()
  let slowest = 0
  let hits = 0
  for (let i = 0; i < 40; i++) {
    const [got, ms] = await timed(store.get(key))
    const [, setMs] = await timed(store.set(key, answer('m', ALL_BYTES), undefined))
    if (got !== undefined) hits++
    slowest = Math.max(slowest, ms, setMs)
    await sleep(10)
  }
  t.equal(hits, 0, 'every get a miss')
  t.ok(slowest < 50 + SLACK_MS, `every get and set resolved within the deadline (slowest ${slowest.toFixed(1)} ms)`)
  t.ok(errors.filter(e => e.kind === 'get').length >= 39, 'gets report errors')
  t.ok(errors.filter(e => e.kind === 'set').length >= 39, 'sets report errors')
  t.equal(errors.filter(e => e.kind === 'connection').length, 1, 'one connection error for the outage')
  t.equal(warns().length, 1, 'the outage is logged once, not per call or per reconnect attempt')
  t.match(warns()[0], { url: `redis://127.0.0.1:${redis.port}`, msg: /unreachable/ })

  const restartedAt = Date.now()
  await redis.restart()
  // Nothing is persisted: the entry has to be written again once the store is back.
  await eventually('a hit after the restart', async () => {
    await store.set(key, answer('m', ALL_BYTES), undefined)
    return (await store.get(key)) !== undefined
  }, 3000)
  const backIn = Date.now() - restartedAt
  t.ok(backIn < 5000, `hits resume ${backIn} ms after the restart began`)
  t.equal(lines.filter(l => l.msg === 'Redis cache reachable again').length, 1, 'the recovery is logged once')
  t.equal(warns().length, 1, 'and no more warnings')
})

t.test('Redis slow (DEBUG SLEEP from another client): get is a miss within the deadline, logged once', { skip }, async t => {
  const redis = await started(t)
  const { store, errors, warns } = storeOn(t, redis.url, { timeoutMs: 50 })
  await eventually('connected', () => store.connected)
  const key = modelKey('m', 'k')
  await store.set(key, answer('m', ALL_BYTES), undefined)
  const raw = await rawClient(t, redis.url)

  const sleeping = raw.sendCommand(['DEBUG', 'SLEEP', '0.5'])
  await sleep(30) // the DEBUG is running: the server answers nothing until it ends
  for (let i = 0; i < 3; i++) {
    const [got, ms] = await timed(store.get(key))
    t.equal(got, undefined, 'a miss')
    t.ok(ms < 50 + SLACK_MS, `within the deadline (${ms.toFixed(1)} ms)`)
  }
  t.strictSame(errors.map(e => [e.kind, e.err.code]), Array(3).fill(['get', 'REDIS_CACHE_TIMEOUT']), 'each reported as a timeout')
  t.equal(warns().length, 1, 'slowness logged once')
  t.match(warns()[0], { msg: /slower than its deadline/, timeoutMs: 50 })
  await sleeping
  t.ok(await store.get(key), 'a hit once Redis answers again')
  t.ok(store.connected, 'still connected: slow is not down')
})

t.test('Redis paused (SIGSTOP): calls stay within the deadline, the hung connection is replaced; resumed, hits come back', { skip }, async t => {
  const redis = await started(t)
  const { store, errors } = storeOn(t, redis.url, { timeoutMs: 50, hangTimeoutMs: 800, reconnectMaxMs: 300, connectTimeoutMs: 300 })
  await eventually('connected', () => store.connected)
  const key = modelKey('m', 'k')
  await store.set(key, answer('m', ALL_BYTES), undefined)

  redis.pause()
  t.teardown(() => redis.resume())
  let slowest = 0
  let hits = 0
  const pausedAt = Date.now()
  while (Date.now() - pausedAt < 1500) {
    const [got, ms] = await timed(store.get(key))
    if (got !== undefined) hits++
    slowest = Math.max(slowest, ms)
    await sleep(20)
  }
  t.equal(hits, 0, 'every get a miss')
  t.ok(slowest < 50 + SLACK_MS, `every get resolved within the deadline (slowest ${slowest.toFixed(1)} ms)`)
  t.ok(errors.some(e => e.kind === 'connection' && e.err.code === 'REDIS_CACHE_HUNG'), 'the hung connection is reported, and replaced')
  t.notOk(store.connected, 'counted as down meanwhile')

  redis.resume()
  const backIn = await eventually('a hit after SIGCONT', async () => (await store.get(key)) !== undefined, 3000)
  t.ok(backIn < 5000, `hits resume ${backIn} ms after SIGCONT`)
})

t.test('a server that accepts and never answers: misses within the deadline, and the store keeps trying anew', { skip }, async t => {
  const sockets: Socket[] = []
  const server = createServer(socket => { sockets.push(socket); socket.on('error', () => {}) })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  const port = (server.address() as { port: number }).port
  const { store, errors, warns } = storeOn(t, `redis://127.0.0.1:${port}`, { timeoutMs: 50, hangTimeoutMs: 500, reconnectMaxMs: 200, connectTimeoutMs: 200 })

  const [got, ms] = await timed(store.get(modelKey('m', 'k')))
  t.equal(got, undefined, 'a miss')
  t.ok(ms < 50 + SLACK_MS, `at once (${ms.toFixed(1)} ms): never connected`)
  await eventually('a second connection', () => sockets.length >= 2, 3000)
  t.pass(`the stuck handshake is abandoned and a new connection made (${sockets.length} so far)`)
  t.equal(warns().length, 1, 'logged once')
  t.equal(errors.filter(e => e.kind === 'connection').length, 1, 'one outage')
})

t.test('Redis down at start: the store starts, misses at once, and connects when Redis comes up; the logged url has no password', { skip }, async t => {
  const redis = await started(t)
  await redis.stop()
  const url = `redis://:s3cret@127.0.0.1:${redis.port}`
  const { store, errors, warns } = storeOn(t, url, { timeoutMs: 50 })
  const [got, ms] = await timed(store.get(modelKey('m', 'k')))
  t.equal(got, undefined, 'a miss')
  t.ok(ms < 20, `at once (${ms.toFixed(1)} ms)`)
  t.match(errors[0], { kind: 'get', err: { code: 'REDIS_CACHE_OFFLINE' } })
  await eventually('the outage logged', () => warns().length === 1)
  t.equal(warns()[0]?.url, `redis://127.0.0.1:${redis.port}`, 'logged without the password')
  t.notMatch(JSON.stringify(warns()), /s3cret/)

  // Started without the password the url names: AUTH with a password the server does not have fails, so start the
  // server with it.
  await redis.restart()
  const raw = await rawClient(t, redis.url)
  await raw.sendCommand(['CONFIG', 'SET', 'requirepass', 's3cret'])
  await eventually('connected', () => store.connected, 3000)
  const key = modelKey('m', 'k')
  await store.set(key, answer('m', ALL_BYTES), undefined)
  t.ok(await store.get(key), 'a hit')
  await sleep(1200) // a few reconnect-attempt periods: none of them may log
  t.equal(warns().length, 1, 'still one warning')
})

t.test('close() with Redis dead returns promptly; calls after it are misses and report nothing', { skip }, async t => {
  const redis = await started(t)
  const { store, errors } = storeOn(t, redis.url)
  await eventually('connected', () => store.connected)
  await redis.kill()
  const inFlight = store.get(modelKey('m', 'k'))
  const [, ms] = await timed(store.close())
  t.ok(ms < 50, `close() took ${ms.toFixed(1)} ms`)
  t.equal(await inFlight, undefined)
  errors.length = 0
  t.equal(await store.get(modelKey('m', 'k')), undefined)
  await store.set(modelKey('m', 'k'), answer('m', ALL_BYTES), undefined)
  t.strictSame(errors, [])
  t.equal(await store.purge(), undefined, 'purge after close: nothing known')
})

t.test('a key that does not begin with its model is refused', { skip }, async t => {
  const redis = await started(t)
  const { store, errors } = storeOn(t, redis.url)
  await eventually('connected', () => store.connected)
  await store.set('k', answer('m', ALL_BYTES), undefined)
  await store.set(modelKey('other', 'k'), answer('m', ALL_BYTES), undefined)
  t.strictSame(errors.map(e => [e.kind, e.err.code]), [['set', 'REDIS_CACHE_BAD_KEY'], ['set', 'REDIS_CACHE_BAD_KEY']])
  const raw = await rawClient(t, redis.url)
  t.equal(await raw.sendCommand(['DBSIZE']), 0, 'nothing written')
})

t.test('entries, keys and urls without a server', async t => {
  const a = answer('m', Buffer.alloc(0), { headers: {} })
  t.strictSame(decodeEntry(encodeEntry(a)), a, 'an empty body and no headers round-trip')
  t.equal(modelKey('a:b/c', 'x'), 'a%3Ab%2Fc:x')
  t.equal(redactUrl('redis://user:pw@h:1/2'), 'redis://user@h:1/2')
  t.equal(redactUrl('redis://h:1'), 'redis://h:1')
  t.throws(() => new RedisStore({ url: 'redis://127.0.0.1:1', timeoutMs: 0 }), /timeoutMs must be a positive number/)
  t.throws(() => new RedisStore({ url: 'redis://127.0.0.1:1', hangTimeoutMs: 500 }), /hangTimeoutMs \(500\) must exceed/)
})
