/**
 * The one place a protocol flag pair (`-i http|grpc`, `--encoding json|binary`) becomes a transport. The command
 * never branches on the protocol: it asks this table, and a protocol that has no implementation yet is a usage
 * error from here, with the same message wherever it is asked for.
 */
import { createError } from '../../common/errors.ts'
import { createGrpcTransport } from './grpc-transport.ts'
import { createHttpBinaryTransport } from './http-binary-transport.ts'
import { createHttpJsonTransport } from './http-json-transport.ts'
import { type TransportFactory } from './transport.ts'

/** `-i` values, perf_analyzer's. */
export const PROTOCOLS = ['http', 'grpc'] as const
export type Protocol = typeof PROTOCOLS[number]

/** `--encoding` values, for `-i http`. */
export const HTTP_ENCODINGS = ['json', 'binary'] as const
export type HttpEncoding = typeof HTTP_ENCODINGS[number]

/**
 * The encoding `-i http` uses when `--encoding` is not given: binary tensors, as Triton's own clients and
 * perf_analyzer send them, so that the default measures the server rather than JSON number formatting.
 */
export const DEFAULT_HTTP_ENCODING: HttpEncoding = 'binary'

/**
 * Transport name → factory; `undefined` marks a transport that is planned but not written. Plugging one in is
 * one line here (and one file beside this one).
 */
export const TRANSPORTS: Readonly<Record<'http/json' | 'http/binary' | 'grpc', TransportFactory | undefined>> = {
  'http/json': createHttpJsonTransport,
  'http/binary': createHttpBinaryTransport,
  grpc: createGrpcTransport
}

/**
 * The factory for a protocol and encoding.
 *
 * @throws FlotillaError CLI_ERR_USAGE when that transport is not available yet, or `--encoding` was given with gRPC
 */
export function transportFactory (protocol: Protocol, encoding: HttpEncoding | undefined): TransportFactory {
  if (protocol === 'grpc' && encoding !== undefined) {
    throw createError('CLI_ERR_USAGE', '--encoding applies to -i http only (gRPC has one encoding)')
  }
  const name = protocol === 'grpc' ? 'grpc' : `http/${encoding ?? DEFAULT_HTTP_ENCODING}` as const
  const factory = TRANSPORTS[name]
  if (factory === undefined) {
    const available = Object.entries(TRANSPORTS).filter(([, f]) => f !== undefined).map(([n]) => n)
    throw createError('CLI_ERR_USAGE', `the ${name} transport is not available yet; available: ${available.join(', ')}`)
  }
  return factory
}
