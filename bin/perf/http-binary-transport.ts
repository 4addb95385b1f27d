/**
 * `-i http --encoding binary` (the default): KServe v2 inference with Triton's binary tensor data extension, as
 * Triton's own clients send it. The body is the request's JSON (each input naming its `binary_data_size`, every
 * output asked for in binary) followed by the tensors' raw bytes, and `Inference-Header-Content-Length` says where
 * the JSON ends. No element is ever written as text, so large tensors cost a block copy, once, at prepare time.
 *
 * The answer is only read to its end (`http-transport.ts`): its binary outputs are not decoded, as perf_analyzer
 * does not decode them, so the client's own cost stays out of the measured latency.
 */
import { INFERENCE_HEADER_CONTENT_LENGTH, encodeHttpInferRequest } from '../../common/protocol/binary-codec.ts'
import { createHttpTransport } from './http-transport.ts'
import { type Transport, type TransportOptions } from './transport.ts'

const BINARY_OPTIONS = Object.freeze({ binaryInputs: true, binaryOutputs: true })

/** The HTTP transport with binary tensors (see `http-transport.ts` for the connection handling). */
export function createHttpBinaryTransport (options: TransportOptions): Transport {
  return createHttpTransport('http/binary', options, (request) => {
    const { body, headerLength } = encodeHttpInferRequest(request, BINARY_OPTIONS)
    const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body
    // No binary section (every input empty): the body is plain JSON, and a header length would misdescribe it.
    if (headerLength === undefined) return { body: bytes, headers: { 'content-type': 'application/json' } }
    return {
      body: bytes,
      headers: { 'content-type': 'application/octet-stream', [INFERENCE_HEADER_CONTENT_LENGTH]: String(headerLength) }
    }
  })
}
