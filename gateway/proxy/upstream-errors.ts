/**
 * What an upstream transport error means for the request: a failed connect (the request never left, so any other
 * server may take it) or a connection reset (the server may have received it, and died of it).
 */
import { type FlotillaError } from '../../common/errors.ts'
import { type UpstreamResponse } from './types.ts'

// Errors of connecting: the request was never sent, so any other server may take it.
export const UNREACHABLE = new Set([
  'ECONNREFUSED', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT'
])
// Errors of a connection that was up: the server may have received the request (and died of it).
export const RESET = new Set(['ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'UND_ERR_SOCKET'])

/**
 * Why an attempt failed, as the proxy decides what to do next: `unreachable` (never sent), `reset` (the connection
 * broke before an answer), `timeout` (the per-try timeout passed with no answer), `final` (nothing to retry).
 */
export type AttemptFailure =
  | { readonly kind: 'unreachable' | 'reset', readonly cause: unknown, readonly error: FlotillaError }
  | { readonly kind: 'timeout' | 'final', readonly error: FlotillaError }

export type AttemptResult = { readonly ok: true, readonly response: UpstreamResponse } | ({ readonly ok: false } & AttemptFailure)

/** A short, readable account of a transport error ("connect ECONNREFUSED 127.0.0.1:9"). */
export function describeError (err: unknown): string {
  // Happy-eyeballs connects (localhost → ::1 and 127.0.0.1) fail with an AggregateError whose message is empty.
  if (err instanceof AggregateError && err.errors.length > 0 && err.message === '') return describeError(err.errors[0])
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code
    if (err.message !== '') return err.message
    if (typeof code === 'string') return code
  }
  return String(err)
}

export function errorCode (err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code
  if (typeof code === 'string') return code
  if (err instanceof AggregateError) return errorCode(err.errors[0])
  return undefined
}
