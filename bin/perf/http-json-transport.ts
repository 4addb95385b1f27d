/**
 * `-i http --encoding json`: KServe v2 inference with JSON bodies, as `curl` would send them. The slowest encoding
 * for large tensors (every element is text), which is why Triton's own clients default to the binary extension;
 * useful to measure what a JSON client sees, and the one every server accepts.
 */
import { encodeInferRequest } from '../../common/protocol/json-codec.ts'
import { createHttpTransport } from './http-transport.ts'
import { type Transport, type TransportOptions } from './transport.ts'

const JSON_HEADERS: Readonly<Record<string, string>> = Object.freeze({ 'content-type': 'application/json' })

/** The HTTP JSON transport (see `http-transport.ts` for the connection handling). */
export function createHttpJsonTransport (options: TransportOptions): Transport {
  return createHttpTransport('http/json', options, (request) => ({
    body: Buffer.from(encodeInferRequest(request), 'utf8'),
    headers: { ...JSON_HEADERS }
  }))
}
