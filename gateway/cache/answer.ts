/**
 * A worker's answer as the cache keeps it, and back: stored without the request's own `id` (so that every request
 * with the same content shares the entry, whatever id it carries) and replayed with the id of the request it answers.
 *
 * Our workers write the JSON part as `{"id":"...","model_name":...` (the id first, and only when the request had
 * one); the binary extension's `Inference-Header-Content-Length` is adjusted for the id taken out or put in, so the
 * bytes after the JSON part (binary tensors) are kept as they are. An answer in any other shape is not cached.
 */
import { INFERENCE_HEADER_CONTENT_LENGTH } from '../../common/protocol/binary-codec.ts'
import { type UpstreamResponse } from '../proxy/types.ts'
import { type CachedAnswer } from './types.ts'

const OPEN_ID = Buffer.from('{"id":')
const OPEN_MODEL = Buffer.from('{"model_name":')
/** `"model_version":"<digits>"` near the start of the JSON part. */
const MODEL_VERSION = /"model_version":"(\d+)"/

/** The headers kept with an entry: what a client needs to read the body. */
const KEPT_HEADERS = ['content-type', INFERENCE_HEADER_CONTENT_LENGTH] as const

/**
 * `response` (a complete 200) as an entry, or `undefined` when it is not in a shape the cache can replay.
 *
 * @param check the request's full digest
 * @param storedAt wall-clock ms
 */
export function toCachedAnswer (model: string, check: string, response: UpstreamResponse, storedAt: number): CachedAnswer | undefined {
  let body = response.body
  const headerValue = response.headers[INFERENCE_HEADER_CONTENT_LENGTH]
  const jsonLength = headerValue === undefined ? body.length : Number(headerValue)
  if (!Number.isInteger(jsonLength) || jsonLength < 0 || jsonLength > body.length) return undefined
  let removed = 0
  if (startsWith(body, OPEN_ID)) {
    // Skip the id's JSON string: the closing quote is the first one not escaped.
    let i = OPEN_ID.length + 1
    for (; i < jsonLength; i++) {
      const c = body[i]
      if (c === 0x5c /* \ */) i++
      else if (c === 0x22 /* " */) break
    }
    if (body[i] !== 0x22 || body[i + 1] !== 0x2c /* , */) return undefined
    removed = i + 2 - 1
    body = Buffer.concat([body.subarray(0, 1), body.subarray(i + 2)])
  } else if (!startsWith(body, OPEN_MODEL)) {
    return undefined
  }
  const version = MODEL_VERSION.exec(body.subarray(0, Math.min(jsonLength - removed, 512)).toString('latin1'))?.[1]
  if (version === undefined) return undefined
  const headers: Record<string, string> = {}
  for (const name of KEPT_HEADERS) {
    const value = response.headers[name]
    if (typeof value === 'string') headers[name] = value
  }
  if (headerValue !== undefined) headers[INFERENCE_HEADER_CONTENT_LENGTH] = String(jsonLength - removed)
  return { model, version, check, headers, body, storedAt }
}

/** The answer `entry` replays for a request whose id is `id` (none: no id in the answer). */
export function replay (entry: CachedAnswer, id: string | undefined): UpstreamResponse {
  const headers: Record<string, string> = { ...entry.headers }
  if (id === undefined || id === '') return { statusCode: 200, headers, body: entry.body }
  const field = Buffer.from(`"id":${JSON.stringify(id)},`)
  const body = Buffer.concat([entry.body.subarray(0, 1), field, entry.body.subarray(1)])
  const jsonLength = headers[INFERENCE_HEADER_CONTENT_LENGTH]
  if (jsonLength !== undefined) headers[INFERENCE_HEADER_CONTENT_LENGTH] = String(Number(jsonLength) + field.length)
  return { statusCode: 200, headers, body }
}

function startsWith (body: Buffer, prefix: Buffer): boolean {
  return body.length >= prefix.length && body.compare(prefix, 0, prefix.length, 0, prefix.length) === 0
}
