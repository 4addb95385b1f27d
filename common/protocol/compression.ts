/**
 * HTTP compression of inference bodies as Triton does it (triton-behaviour.md §1.10): a request body may come with
 * `Content-Encoding: gzip` or `deflate`, and a response is compressed with the best-weighted of identity, gzip and
 * deflate in `Accept-Encoding`. `Inference-Header-Content-Length` always counts the uncompressed JSON, so callers
 * decode the body here first and parse the binary extension after.
 *
 * All zlib work runs on libuv's thread pool, never on the event loop. Inflating stops as soon as the output passes
 * the body limit, so a small zip bomb costs about `limit` bytes of memory, not what it would expand to.
 */
import { constants as zlibConstants, deflate, gunzip, gzip, inflate } from 'node:zlib'
import { kMaxLength } from 'node:buffer'
import { createError, type FlotillaError } from '../errors.ts'

/** A content coding Flotilla can decode and produce. */
export type ContentCoding = 'gzip' | 'deflate'

/**
 * Stacked codings beyond this are refused: each layer may inflate up to the limit, so a long list of them would be a
 * way to make one request cost many times the limit in CPU. Real clients send one.
 */
const MAX_CODINGS = 2

/** The codings {@link decodeRequestBody} reads: the `Accept-Encoding` value to send with its 415 (RFC 9110 §15.5.16). */
export const SUPPORTED_CONTENT_CODINGS = 'gzip, deflate'

function unsupported (coding: string, detail = ''): FlotillaError {
  return createError('FLT_ERR_UNSUPPORTED_CONTENT_ENCODING', coding, detail)
}

/**
 * The codings of a Content-Encoding header in the order they were applied, without identity; `x-gzip` is gzip
 * (RFC 9110 §8.4.1.3).
 */
function parseContentEncoding (value: string | string[]): string[] {
  const text = typeof value === 'string' ? value : value.join(',')
  const codings: string[] = []
  for (const part of text.split(',')) {
    const coding = part.trim().toLowerCase()
    if (coding === '' || coding === 'identity') continue
    codings.push(coding === 'x-gzip' ? 'gzip' : coding)
  }
  return codings
}

/**
 * The request body after its Content-Encoding. `identity`, an empty value or no header give `body` itself. gzip and
 * deflate (the zlib format, as Triton reads it), case-insensitive, `x-gzip` for gzip, and at most two of them one on
 * top of the other (RFC 9110 §8.4), are inflated off the main thread with a hard output limit: a body that inflates
 * past `limit` bytes is a 413 (FLT_ERR_BODY_TOO_LARGE, naming `limitSetting`) and the inflater stops there.
 * Any other coding is a 415 (FLT_ERR_UNSUPPORTED_CONTENT_ENCODING): Triton answers 501 `Unsupported compression type`,
 * but RFC 9110 §15.5.16 makes it a 415, which we choose on purpose, keeping Triton's words; the HTTP front adds
 * `Accept-Encoding: gzip, deflate` ({@link SUPPORTED_CONTENT_CODINGS}) to that answer. A corrupt or truncated stream
 * is a 400 (FLT_ERR_CONTENT_DECODING) naming the coding.
 */
export async function decodeRequestBody (
  body: Buffer, contentEncoding: string | string[] | undefined, limit: number, limitSetting: string
): Promise<Buffer> {
  if (contentEncoding === undefined) return body
  const codings = parseContentEncoding(contentEncoding)
  if (codings.length === 0) return body
  for (const coding of codings) {
    if (coding !== 'gzip' && coding !== 'deflate') throw unsupported(coding)
  }
  if (codings.length > MAX_CODINGS) {
    throw unsupported(codings.join(', '), ` (at most ${MAX_CODINGS} codings, one on top of the other)`)
  }
  let out = body
  // The last coding listed was applied last, so it comes off first.
  for (let i = codings.length - 1; i >= 0; i--) {
    out = await inflateBody(out, codings[i] as ContentCoding, limit, limitSetting)
  }
  return out
}

function inflateBody (input: Buffer, coding: ContentCoding, limit: number, limitSetting: string): Promise<Buffer> {
  // zlib refuses a maxOutputLength below 1 or above kMaxLength; the check on the result covers the ends.
  const maxOutputLength = Math.max(1, Math.min(limit, kMaxLength))
  const tooLarge = (): FlotillaError => createError(
    'FLT_ERR_BODY_TOO_LARGE', `of ${input.length} ${coding}-compressed bytes inflating to more than ${limit} bytes`, limit,
    limitSetting
  )
  return new Promise((resolve, reject) => {
    const done = (err: Error | null, result: Buffer): void => {
      if (err === null) {
        if (result.length > limit) reject(tooLarge())
        else resolve(result)
      } else if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') {
        // zlib stopped once its output passed maxOutputLength and let go of what it had.
        reject(tooLarge())
      } else {
        const error = createError('FLT_ERR_CONTENT_DECODING', coding, coding, err.message)
        Object.defineProperty(error, 'cause', { value: err, enumerable: false, configurable: true, writable: true })
        reject(error)
      }
    }
    if (coding === 'gzip') gunzip(input, { maxOutputLength }, done)
    else inflate(input, { maxOutputLength }, done)
  })
}

/** One Accept-Encoding member: a coding (lower case) and its weight. */
interface WeightedCoding {
  coding: string
  q: number
}

function parseAcceptEncoding (text: string): WeightedCoding[] {
  const out: WeightedCoding[] = []
  for (const member of text.split(',')) {
    const parts = member.split(';')
    const coding = (parts[0] as string).trim().toLowerCase()
    if (coding === '') continue
    let q = 1
    let valid = true
    for (let i = 1; i < parts.length; i++) {
      const param = (parts[i] as string).trim()
      const eq = param.indexOf('=')
      if (eq === -1 || param.slice(0, eq).trim().toLowerCase() !== 'q') continue
      const value = param.slice(eq + 1).trim()
      // RFC 9110 §12.4.2 qvalue: 0 to 1, at most three decimals. Triton skips a member whose weight it cannot read.
      if (/^(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)$/.test(value)) q = Number(value)
      else valid = false
    }
    if (valid) out.push({ coding, q })
  }
  return out
}

const CANDIDATES = ['gzip', 'deflate', 'identity'] as const

/**
 * The coding for a response from Accept-Encoding, as Triton picks it (http_server.cc CompressionTypeUsed): the
 * member with the highest weight among identity, gzip and deflate, the first listed winning a tie, where identity
 * starts at weight 0 and a q=0 member is never chosen. Beyond Triton, `*` stands for each of the three not named
 * elsewhere in the header (gzip first), and names, `;` and `q` may carry spaces and any case (RFC 9110 §12.5.3).
 * Undefined means identity: send the body as it is.
 */
export function negotiateResponseEncoding (acceptEncoding: string | string[] | undefined): ContentCoding | undefined {
  if (acceptEncoding === undefined) return undefined
  const members = parseAcceptEncoding(typeof acceptEncoding === 'string' ? acceptEncoding : acceptEncoding.join(','))
  let best: string = 'identity'
  let bestQ = 0
  for (const { coding, q } of members) {
    if (coding === '*') {
      for (const candidate of CANDIDATES) {
        if (q > bestQ && !members.some((m) => m.coding === candidate)) {
          best = candidate
          bestQ = q
        }
      }
    } else if ((coding === 'gzip' || coding === 'deflate' || coding === 'identity') && q > bestQ) {
      best = coding
      bestQ = q
    }
  }
  return best === 'identity' ? undefined : best as ContentCoding
}

/**
 * `body` compressed with `coding`, on the thread pool. The response keeps its Inference-Header-Content-Length (the
 * uncompressed JSON length); the HTTP front sets `Content-Encoding: <coding>` and the compressed Content-Length.
 * `options.level` is zlib's level, 0 to 9 (default: zlib's default, 6); 1 trades size for much less CPU.
 */
export function encodeResponseBody (
  body: Buffer | string, coding: ContentCoding, options: { level?: number } = {}
): Promise<Buffer> {
  const level = options.level ?? zlibConstants.Z_DEFAULT_COMPRESSION
  return new Promise((resolve, reject) => {
    const done = (err: Error | null, result: Buffer): void => {
      if (err === null) resolve(result)
      /* c8 ignore next: compressing valid input fails only when memory runs out */
      else reject(err)
    }
    if (coding === 'gzip') gzip(body, { level }, done)
    else deflate(body, { level }, done)
  })
}
