import { createGzip, deflateSync, gunzipSync, gzipSync, inflateSync } from 'node:zlib'
import t from 'tap'
import { type ErrorCode, isFlotillaError } from '../../../common/errors.ts'
import {
  SUPPORTED_CONTENT_CODINGS,
  decodeRequestBody,
  encodeResponseBody,
  negotiateResponseEncoding
} from '../../../common/protocol/compression.ts'
import { type Asserts } from '../../helpers/coded-error.ts'

const MiB = 1024 * 1024
const SETTING = 'the worker flag --max-body-bytes'

/** Asserts that `promise` rejects with a coded error with exactly this code, status and message. */
async function rejects (
  t: Asserts, promise: Promise<unknown>, code: ErrorCode, status: number, message: string, what = message
): Promise<void> {
  let caught: unknown
  try {
    await promise
  } catch (err) {
    caught = err
  }
  if (!isFlotillaError(caught)) {
    t.fail(`${what}: expected a coded error, got ${String(caught)}`)
    return
  }
  t.equal(caught.code, code, `${what}: code`)
  t.equal(caught.statusCode, status, `${what}: status`)
  t.equal(caught.message, message, `${what}: message`)
}

const payload = Buffer.from(JSON.stringify({ inputs: [{ name: 'X', datatype: 'FP32', shape: [1000], data: new Array(1000).fill(0.5) }] }))

t.test('identity, an empty value and no header give the body itself', async t => {
  for (const encoding of [undefined, 'identity', 'IDENTITY', '', ' ', ['identity'], [], 'identity, identity']) {
    t.equal(await decodeRequestBody(payload, encoding, 10, SETTING), payload, `Content-Encoding ${JSON.stringify(encoding)}`)
  }
  t.equal(await decodeRequestBody(payload, 'identity', 10, SETTING), payload, 'no limit applies to a body that is not decoded here')
})

t.test('gzip and deflate round trips', async t => {
  for (const coding of ['gzip', 'deflate'] as const) {
    const compressed = await encodeResponseBody(payload, coding)
    t.ok(compressed.length < payload.length, `${coding} compresses`)
    t.same(await decodeRequestBody(compressed, coding, MiB, SETTING), payload, `${coding}: our own`)
    t.same(await decodeRequestBody(compressed, coding.toUpperCase(), MiB, SETTING), payload, `${coding}: any case`)
    t.same(await decodeRequestBody(compressed, [` ${coding} `], MiB, SETTING), payload, `${coding}: as an array, with spaces`)
    t.same(await decodeRequestBody(compressed, `identity, ${coding}`, MiB, SETTING), payload, `${coding}: identity in the list`)
    const fromString = await encodeResponseBody(payload.toString(), coding, { level: 1 })
    t.same(coding === 'gzip' ? gunzipSync(fromString) : inflateSync(fromString), payload, `${coding}: a string body, level 1`)
  }
  t.same(await decodeRequestBody(gzipSync(payload), 'gzip', MiB, SETTING), payload, 'gzip from zlib')
  t.same(await decodeRequestBody(deflateSync(payload), 'deflate', MiB, SETTING), payload, 'deflate (zlib format) from zlib')
  t.same(await decodeRequestBody(gzipSync(payload), 'x-gzip', MiB, SETTING), payload, 'x-gzip is gzip (RFC 9110 §8.4.1.3)')
  t.same(await decodeRequestBody(gzipSync(deflateSync(payload)), 'deflate, gzip', MiB, SETTING), payload,
    'stacked codings come off last first')
  const twoMembers = Buffer.concat([gzipSync(payload.subarray(0, 100)), gzipSync(payload.subarray(100))])
  t.same(await decodeRequestBody(twoMembers, 'gzip', MiB, SETTING), payload, 'a gzip stream of two members')
  t.same(await decodeRequestBody(gzipSync(Buffer.alloc(0)), 'gzip', 0, SETTING), Buffer.alloc(0), 'empty within a 0 limit')
})

t.test('the limit applies to the inflated size', async t => {
  const compressed = gzipSync(payload)
  t.same(await decodeRequestBody(compressed, 'gzip', payload.length, SETTING), payload, 'exactly at the limit')
  await rejects(t, decodeRequestBody(compressed, 'gzip', payload.length - 1, SETTING), 'FLT_ERR_BODY_TOO_LARGE', 413,
    `request body of ${compressed.length} gzip-compressed bytes inflating to more than ${payload.length - 1} bytes ` +
    `exceeds the limit of ${payload.length - 1} bytes; send a smaller request or raise ${SETTING}`)
  const deflated = deflateSync(payload)
  await rejects(t, decodeRequestBody(deflated, 'deflate', 0, SETTING), 'FLT_ERR_BODY_TOO_LARGE', 413,
    `request body of ${deflated.length} deflate-compressed bytes inflating to more than 0 bytes exceeds the limit of ` +
    `0 bytes; send a smaller request or raise ${SETTING}`)
  await rejects(t, decodeRequestBody(gzipSync(gzipSync(payload)), 'gzip, gzip', 1000, SETTING), 'FLT_ERR_BODY_TOO_LARGE', 413,
    `request body of ${gzipSync(payload).length} gzip-compressed bytes inflating to more than 1000 bytes exceeds the ` +
    `limit of 1000 bytes; send a smaller request or raise ${SETTING}`, 'each layer of a stack is limited')
})

/** 200 MiB of zeros through a streaming gzip: under a megabyte, built without ever holding the 200 MiB. */
async function zipBomb (): Promise<Buffer> {
  const gz = createGzip({ level: 9 })
  const chunks: Buffer[] = []
  gz.on('data', (c: Buffer) => chunks.push(c))
  const ended = new Promise((resolve) => gz.on('end', resolve))
  const zeros = Buffer.alloc(MiB)
  for (let i = 0; i < 200; i++) {
    if (!gz.write(zeros)) await new Promise((resolve) => gz.once('drain', resolve))
  }
  gz.end()
  await ended
  return Buffer.concat(chunks)
}

t.test('a zip bomb is a 413 that never holds much more than the limit', async t => {
  const bomb = await zipBomb()
  t.ok(bomb.length < MiB, `the bomb is ${bomb.length} bytes`)
  const before = process.memoryUsage()
  let peakArrayBuffers = before.arrayBuffers
  let peakRss = before.rss
  let settled = false
  const sampling = (async () => {
    while (!settled) {
      const m = process.memoryUsage()
      peakArrayBuffers = Math.max(peakArrayBuffers, m.arrayBuffers)
      peakRss = Math.max(peakRss, m.rss)
      await new Promise((resolve) => setImmediate(resolve))
    }
  })()
  const started = performance.now()
  await rejects(t, decodeRequestBody(bomb, 'gzip', MiB, SETTING), 'FLT_ERR_BODY_TOO_LARGE', 413,
    `request body of ${bomb.length} gzip-compressed bytes inflating to more than ${MiB} bytes exceeds the limit of ` +
    `${MiB} bytes; send a smaller request or raise ${SETTING}`)
  const elapsed = performance.now() - started
  settled = true
  await sampling
  t.ok(peakArrayBuffers - before.arrayBuffers < 16 * MiB,
    `Buffer memory grew by ${((peakArrayBuffers - before.arrayBuffers) / MiB).toFixed(1)} MiB, not 200`)
  t.ok(peakRss - before.rss < 100 * MiB, `RSS grew by ${((peakRss - before.rss) / MiB).toFixed(1)} MiB`)
  t.comment(`stopped after ${elapsed.toFixed(1)} ms`)
})

t.test('corrupt or truncated streams are a 400 naming the coding', async t => {
  const garbage = Buffer.from('this is not compressed')
  await rejects(t, decodeRequestBody(garbage, 'gzip', MiB, SETTING), 'FLT_ERR_CONTENT_DECODING', 400,
    'the request body is not valid gzip data (Content-Encoding: gzip): incorrect header check')
  await rejects(t, decodeRequestBody(garbage, 'deflate', MiB, SETTING), 'FLT_ERR_CONTENT_DECODING', 400,
    'the request body is not valid deflate data (Content-Encoding: deflate): incorrect header check')
  const gz = gzipSync(payload)
  await rejects(t, decodeRequestBody(gz.subarray(0, gz.length - 10), 'gzip', MiB, SETTING), 'FLT_ERR_CONTENT_DECODING', 400,
    'the request body is not valid gzip data (Content-Encoding: gzip): unexpected end of file')
  await rejects(t, decodeRequestBody(gz, 'deflate', MiB, SETTING), 'FLT_ERR_CONTENT_DECODING', 400,
    'the request body is not valid deflate data (Content-Encoding: deflate): incorrect header check')
  let cause: unknown
  try { await decodeRequestBody(garbage, 'gzip', MiB, SETTING) } catch (err) { cause = (err as Error).cause }
  t.equal((cause as { code?: string }).code, 'Z_DATA_ERROR', 'zlib\'s error is the cause')
})

t.test('other codings are a 415 that names the supported ones', async t => {
  t.equal(SUPPORTED_CONTENT_CODINGS, 'gzip, deflate')
  const tail = ': send the request body with Content-Encoding gzip, deflate or identity'
  await rejects(t, decodeRequestBody(payload, 'br', MiB, SETTING), 'FLT_ERR_UNSUPPORTED_CONTENT_ENCODING', 415,
    `Unsupported compression type 'br'${tail}`)
  await rejects(t, decodeRequestBody(payload, 'gzip, zstd', MiB, SETTING), 'FLT_ERR_UNSUPPORTED_CONTENT_ENCODING', 415,
    `Unsupported compression type 'zstd'${tail}`)
  await rejects(t, decodeRequestBody(payload, 'compress', MiB, SETTING), 'FLT_ERR_UNSUPPORTED_CONTENT_ENCODING', 415,
    `Unsupported compression type 'compress'${tail}`)
  await rejects(t, decodeRequestBody(payload, 'gzip, gzip, gzip', MiB, SETTING), 'FLT_ERR_UNSUPPORTED_CONTENT_ENCODING', 415,
    `Unsupported compression type 'gzip, gzip, gzip'${tail} (at most 2 codings, one on top of the other)`)
})

t.test('negotiateResponseEncoding: Triton\'s choice among identity, gzip and deflate', async t => {
  const cases: Array<[string | string[] | undefined, string | undefined, string]> = [
    [undefined, undefined, 'no header: identity'],
    ['', undefined, 'empty: identity'],
    ['gzip', 'gzip', 'gzip'],
    ['deflate', 'deflate', 'deflate'],
    ['GZip', 'gzip', 'any case'],
    ['br', undefined, 'nothing we do: identity'],
    ['br, deflate', 'deflate', 'the one we do'],
    ['gzip, deflate', 'gzip', 'a tie goes to the first listed'],
    ['deflate, gzip', 'deflate', 'a tie goes to the first listed'],
    ['identity, gzip', undefined, 'identity first wins the tie'],
    ['gzip;q=0, deflate', 'deflate', 'q=0 excludes'],
    ['gzip;q=0', undefined, 'q=0 is never chosen'],
    ['identity;q=1, gzip;q=0.5', undefined, 'identity weighs more'],
    ['gzip;q=0.5, deflate;q=0.8', 'deflate', 'the best weight wins'],
    ['gzip; q=0.9 , deflate ;Q=0.2', 'gzip', 'spaces and case around q'],
    ['gzip;q=1.0, deflate;q=0.999', 'gzip', 'three decimals'],
    ['gzip;q=2, deflate;q=0.1', 'deflate', 'a weight that is not a qvalue: the member is skipped'],
    ['gzip;q=abc, deflate;q=0.1', 'deflate', 'an unreadable weight: the member is skipped, as Triton'],
    ['gzip;level=1;q=0.5, deflate;q=0.4', 'gzip', 'other parameters are ignored'],
    ['*', 'gzip', '* stands for gzip first'],
    ['*;q=0', undefined, '*;q=0: identity'],
    ['gzip;q=0, *', 'deflate', '* stands for what is not named: deflate'],
    ['gzip;q=0, deflate;q=0, *', undefined, '* covers only identity: identity'],
    ['deflate;q=0.5, *;q=0.1', 'deflate', 'a named coding above *'],
    ['identity;q=0.5, *;q=0.8', 'gzip', '* above identity'],
    [['deflate;q=0.5', 'gzip;q=0.7'], 'gzip', 'a header given twice'],
    [',, ;q=1, gzip', 'gzip', 'empty members are skipped']
  ]
  for (const [header, expected, what] of cases) {
    t.equal(negotiateResponseEncoding(header), expected, `${JSON.stringify(header)}: ${what}`)
  }
})

t.test('encodeResponseBody output is what clients inflate', async t => {
  const gz = await encodeResponseBody(payload, 'gzip')
  t.equal(gz[0], 0x1f, 'gzip magic')
  t.same(gunzipSync(gz), payload)
  const df = await encodeResponseBody(payload, 'deflate')
  t.equal((df[0] as number) & 0x0f, 8, 'zlib header, deflate method')
  t.same(inflateSync(df), payload)
  const fast = await encodeResponseBody(payload, 'gzip', { level: 1 })
  t.same(gunzipSync(fast), payload)
  let failed: unknown
  try { await encodeResponseBody(payload, 'gzip', { level: 42 }) } catch (err) { failed = err }
  t.ok(failed instanceof Error, 'a bad level is zlib\'s error')
})
