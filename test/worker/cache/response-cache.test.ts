import { Writable } from 'node:stream'
import t from 'tap'
import { isFlotillaError } from '../../../common/errors.ts'
import { createLogger } from '../../../common/logger.ts'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { type Tensor } from '../../../common/protocol/types.ts'
import {
  BYTES_ELEMENT_OVERHEAD_BYTES, ENTRY_OVERHEAD_BYTES, entryBytes, parseCacheConfig, ResponseCache, TENSOR_OVERHEAD_BYTES
} from '../../../worker/cache/response-cache.ts'
import { elementsOf, stringsOf } from '../../helpers/bytes-data.ts'

/** A clock that moves `step` ns at every reading. */
function stepClock (step: bigint): () => bigint {
  let now = 0n
  return () => { now += step; return now }
}

const KEY = (i: number): string => i.toString(16).padStart(32, '0')
const CHECK = (i: number): string => KEY(i) + 'f'.repeat(32)

const fp32 = (n: number, fill = 1): Tensor => ({ name: 'OUT', datatype: 'FP32', shape: [n], data: new Float32Array(n).fill(fill) })

t.test('--cache-config values as Triton parses them', async t => {
  t.strictSame(parseCacheConfig(['local,size=1048576']), { kind: 'local', sizeBytes: 1048576 })
  t.strictSame(parseCacheConfig(['local,size=10', 'local,size=20']), { kind: 'local', sizeBytes: 20 }, 'a setting again: the last one')
  const refused: Array<[string[], RegExp]> = [
    [['size=10'], /^No cache specified\. --cache-config option format is <cache name>,<setting>=<value>\. Got size=10$/],
    [[',size=10'], /^No cache specified/],
    [['local'], /^No cache specified/],
    [['local,size'], /^--cache-config option format is '<cache name>,<setting>=<value>'\. Got local,size$/],
    [['local,=10'], /^--cache-config option format is/],
    [['local,size='], /^--cache-config option format is/],
    [['local,size=8192', 'redis,host=localhost'], /multiple cache configurations/],
    [['redis,host=localhost'], /only the 'local' cache .*not 'redis'/],
    [['local,size=0'], /Failed to initialize LocalCache: config didn't contain a valid 'size' field\..*got '0'/],
    [['local,size=1k'], /valid 'size' field/],
    [['local,size=-5'], /valid 'size' field/],
    [['local,size=99999999999999999999'], /valid 'size' field/],
    [['local,max=5'], /one setting, size \(bytes\); got 'max'/],
    [[], /needs a value/]
  ]
  for (const [values, message] of refused) {
    const err = (() => { try { parseCacheConfig(values); return undefined } catch (e) { return e } })()
    t.equal(isFlotillaError(err) ? err.code : err, 'WRK_ERR_CONFIG_INVALID', values.join(' '))
    t.match((err as Error).message, message, values.join(' '))
  }
  t.throws(() => new ResponseCache({ sizeBytes: 0 }), RangeError)
})

t.test('an entry counts its bytes and allowances', async t => {
  const bytes: Tensor = { name: 'S', datatype: 'BYTES', shape: [2], data: BytesData.from(['abc', '']) }
  t.equal(entryBytes('k', 'c', [fp32(4), bytes]),
    ENTRY_OVERHEAD_BYTES + 2 +
    TENSOR_OVERHEAD_BYTES + 3 + 8 + 16 +
    TENSOR_OVERHEAD_BYTES + 1 + 8 + 3 + 2 * BYTES_ELEMENT_OVERHEAD_BYTES)
})

t.test('lookups, inserts and their counters', async t => {
  const cache = new ResponseCache({ sizeBytes: 1 << 20, now: stepClock(1500n) })
  t.equal(cache.lookup(KEY(1), CHECK(1)), undefined, 'empty: a miss')
  t.equal(cache.lastNs, 1500n, 'the lookup took one clock step')
  t.equal(cache.insert(KEY(1), CHECK(1), [fp32(4)], { p: 1 }), 'inserted')
  t.equal(cache.insert(KEY(1), CHECK(1), [fp32(4, 9)]), 'exists', 'the same request again: left as it is')
  const hit = cache.lookup(KEY(1), CHECK(1))
  t.ok(hit)
  t.strictSame(Array.from(hit!.outputs[0]!.data as Float32Array), [1, 1, 1, 1], 'the first answer stays')
  t.strictSame(hit!.parameters, { p: 1 })
  t.equal(cache.lookup(KEY(1), CHECK(2)), undefined, 'a key collision (another check) is a miss')
  t.equal(cache.insert(KEY(1), CHECK(2), [fp32(2)]), 'inserted', 'and its answer replaces the entry')
  t.equal(cache.lookup(KEY(1), CHECK(1)), undefined)
  t.strictSame(cache.stats, {
    entries: 1,
    bytes: entryBytes(KEY(1), CHECK(2), [fp32(2)]),
    sizeBytes: 1 << 20,
    lookups: 4,
    hits: 1,
    misses: 3,
    evictions: 0,
    insertFailures: 0,
    lookupUs: 4,
    insertionUs: 3
  })
})

t.test('the cache owns what it stores: later changes to the answer or the request do not reach it', async t => {
  const cache = new ResponseCache({ sizeBytes: 1 << 20 })
  const input = new Float32Array([1, 2, 3])
  const shape = [3]
  const strings = BytesData.from(['ab', 'c'])
  const params = { tag: 'x' }
  cache.insert(KEY(1), CHECK(1), [
    { name: 'A', datatype: 'FP32', shape, data: input, parameters: params },
    { name: 'B', datatype: 'BYTES', shape: [2], data: strings }
  ])
  input[0] = 99
  shape[0] = 7
  strings.get(0)[0] = 0x7a // get is a view: this writes the answer's own memory
  params.tag = 'y'
  const hit = cache.lookup(KEY(1), CHECK(1))!
  t.strictSame(Array.from(hit.outputs[0]!.data as Float32Array), [1, 2, 3])
  t.strictSame(hit.outputs[0]!.shape, [3])
  t.strictSame(hit.outputs[0]!.parameters, { tag: 'x' })
  t.strictSame(stringsOf(hit.outputs[1]!.data), ['ab', 'c'])
  t.not((hit.outputs[0]!.data as Float32Array).buffer, input.buffer)
  t.not(elementsOf(hit.outputs[1]!.data)[0]!.buffer, strings.get(0).buffer, 'BYTES elements copied too')
})

t.test('the byte budget: least recently used entries are evicted, an answer bigger than the cache is not stored', async t => {
  const one = entryBytes(KEY(1), CHECK(1), [fp32(100)])
  const cache = new ResponseCache({ sizeBytes: 3 * one })
  for (let i = 1; i <= 3; i++) t.equal(cache.insert(KEY(i), CHECK(i), [fp32(100, i)]), 'inserted')
  t.equal(cache.stats.bytes, 3 * one, 'full to the byte')
  t.ok(cache.lookup(KEY(1), CHECK(1)), 'entry 1 used: now the most recent')
  t.equal(cache.insert(KEY(4), CHECK(4), [fp32(100, 4)]), 'inserted')
  t.equal(cache.lookup(KEY(2), CHECK(2)), undefined, 'entry 2, the least recently used, was evicted')
  t.ok(cache.lookup(KEY(1), CHECK(1)))
  t.ok(cache.lookup(KEY(3), CHECK(3)))
  t.ok(cache.lookup(KEY(4), CHECK(4)))
  t.equal(cache.stats.evictions, 1)
  t.equal(cache.stats.entries, 3)

  // A bigger answer takes the room of several.
  t.ok(entryBytes(KEY(5), CHECK(5), [fp32(500)]) > 2 * one)
  t.equal(cache.insert(KEY(5), CHECK(5), [fp32(500)]), 'inserted')
  t.ok(cache.stats.bytes <= 3 * one, 'never over the budget')
  t.equal(cache.stats.entries, 1, 'it needed all the room')
  t.equal(cache.stats.evictions, 4)

  t.equal(cache.insert(KEY(6), CHECK(6), [fp32(1000)]), 'too-large')
  t.equal(cache.lookup(KEY(6), CHECK(6)), undefined)
  t.ok(cache.lookup(KEY(5), CHECK(5)), 'what was there stays')
  t.equal(cache.stats.insertFailures, 1)
})

t.test('an answer too large to store is logged (1st, 2nd, 4th, ...) in Triton\'s words, and counted', async t => {
  const lines: any[] = []
  const sink = new Writable({ write (chunk, _enc, done) { lines.push(JSON.parse(chunk.toString())); done() } })
  const cache = new ResponseCache({ sizeBytes: 1024, logger: createLogger({ level: 'warn', destination: sink }) })
  for (let i = 0; i < 5; i++) t.equal(cache.insert(KEY(i), CHECK(i), [fp32(1000)]), 'too-large')
  t.equal(cache.stats.insertFailures, 5)
  t.equal(cache.stats.entries, 0)
  t.strictSame(lines.map(l => l.failures), [1, 2, 4])
  t.match(lines[0].msg, /^Failed to insert key \[0{32}\] into response cache: Requested byte_size: \d+ is greater than total cache size: 1024; raise --cache-config local,size=<bytes>/)
  t.equal(lines[0].level, 40)
})
