/**
 * What the worker's registration (`worker/registration/`) and the gateway's discovery (`gateway/discovery/`) share
 * about talking to Consul: where the agent is, which ACL token to send, a client with a deadline on every call, how
 * servers are described in the catalog, and the back-off between failed calls.
 *
 * The client is the `consul` npm package (2.x, see the design card). It has no default request timeout, so every
 * call made through {@link consulClient}'s helpers carries one: a hung agent must never hang a worker's shutdown or
 * a gateway's discovery loop.
 */
import { readFileSync } from 'node:fs'
import Consul from 'consul'
import { createError } from './errors.ts'

/** Consul's own environment variables, read as its CLI reads them. */
export const CONSUL_ADDR_ENV = 'CONSUL_HTTP_ADDR'
export const CONSUL_TOKEN_ENV = 'CONSUL_HTTP_TOKEN'
export const CONSUL_TOKEN_FILE_ENV = 'CONSUL_HTTP_TOKEN_FILE'
/** The service name workers register under and gateways watch, unless told otherwise. */
export const DEFAULT_CONSUL_SERVICE = 'flotilla-worker'
/** An agent's default HTTP address. */
export const DEFAULT_CONSUL_ADDR = 'http://127.0.0.1:8500'

/**
 * How a worker describes itself in the catalog, which the gateway reads back. Models are **tags**, not meta: a tag
 * has no charset or length rule (meta keys are `[A-Za-z0-9_-]`, at most 64 of them), and `?tag=model=resnet50`
 * lets a gateway watch only the servers of the models it routes. Meta holds the scalars: the gRPC and metrics
 * ports, and each label as `label_<key>`.
 */
export const MODEL_TAG_PREFIX = 'model='
export const META_GRPC_PORT = 'grpc_port'
export const META_METRICS_PORT = 'metrics_port'
export const META_LABEL_PREFIX = 'label_'
/** The rule for a label's key, so that it fits a meta key after {@link META_LABEL_PREFIX} (Consul allows 128). */
export const LABEL_KEY = Object.freeze({
  regex: /^[A-Za-z0-9_-]{1,64}$/,
  text: 'a label key is 1 to 64 ASCII letters, digits, _ and - (it becomes Consul service meta)'
})

/** An agent's address, parsed. */
export interface ConsulAddress {
  readonly secure: boolean
  readonly host: string
  readonly port: number
  /** `http(s)://host:port`, for logs and messages. */
  readonly url: string
}

/**
 * Parses an agent address as Consul's CLI takes `CONSUL_HTTP_ADDR`: `host:port`, `http://host:port` or
 * `https://host:port` (port 8500, or 443 for https, when absent).
 *
 * @throws FlotillaError `FLT_ERR_CONSUL_CONFIG` naming the forms accepted
 */
export function parseConsulAddress (text: string): ConsulAddress {
  const trimmed = text.trim()
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed) ? trimmed : `http://${trimmed}`
  let url: URL
  try {
    url = new URL(withScheme)
  } catch {
    throw createError('FLT_ERR_CONSUL_CONFIG', `'${text}' is not a Consul address: write host:port, http://host:port or https://host:port`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw createError('FLT_ERR_CONSUL_CONFIG', `'${text}' uses ${url.protocol.slice(0, -1)}: only http and https Consul agents are supported`)
  }
  if (url.hostname === '' || (url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.username !== '') {
    throw createError('FLT_ERR_CONSUL_CONFIG', `'${text}' is not a Consul address: write host:port, http://host:port or https://host:port (no path, query or credentials)`)
  }
  // The consul client (2.0.1) builds `http://<host>:<port>` unbracketed, which an IPv6 literal breaks (Invalid URL).
  if (url.hostname.startsWith('[')) {
    throw createError('FLT_ERR_CONSUL_CONFIG', `Consul address '${text}': the consul client cannot reach an IPv6 literal; name the agent by host name or IPv4 address`)
  }
  const secure = url.protocol === 'https:'
  const port = url.port === '' ? (secure ? 443 : 8500) : Number(url.port)
  return Object.freeze({ secure, host: url.hostname, port, url: `${url.protocol}//${url.host}` })
}

/**
 * The ACL token to send: the file's contents (trimmed) when a file is named, else `CONSUL_HTTP_TOKEN`, else
 * `CONSUL_HTTP_TOKEN_FILE`'s contents; `undefined` for none. A token is never taken from a command-line flag
 * (visible to every user in `ps`) and never logged.
 *
 * @throws FlotillaError `FLT_ERR_CONSUL_CONFIG` when a named file cannot be read or is empty
 */
export function readConsulToken (tokenFile: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const file = tokenFile ?? (env[CONSUL_TOKEN_ENV] === undefined || env[CONSUL_TOKEN_ENV] === '' ? env[CONSUL_TOKEN_FILE_ENV] : undefined)
  if (file === undefined || file === '') {
    const token = env[CONSUL_TOKEN_ENV]
    return token === undefined || token === '' ? undefined : token
  }
  let text: string
  try {
    text = readFileSync(file, 'utf8').trim()
  } catch (err) {
    throw createError('FLT_ERR_CONSUL_CONFIG', `cannot read the Consul token file '${file}': ${(err as Error).message}`)
  }
  if (text === '') throw createError('FLT_ERR_CONSUL_CONFIG', `the Consul token file '${file}' is empty`)
  return text
}

/** A Consul client (the `consul` package) for one agent and token. Call `destroy()` when done. */
export function consulClient (address: ConsulAddress, token: string | undefined): Consul {
  return new Consul({
    host: address.host,
    port: address.port,
    secure: address.secure,
    ...(token !== undefined ? { defaults: { token } } : {})
  })
}

/** Consul's duration syntax for a whole number of milliseconds (`1500ms`, `2s`): what `Interval`, `wait` take. */
export function consulDuration (ms: number): string {
  const whole = Math.max(0, Math.round(ms))
  return whole % 1000 === 0 ? `${whole / 1000}s` : `${whole}ms`
}

/** Back-off between failed calls to Consul, both sides: from 250 ms doubling to {@link RETRY_MAX_MS}. */
export const RETRY_BASE_MS = 250
export const RETRY_MAX_MS = 10_000

/**
 * The wait before retry number `attempt` (1 for the first): exponential, capped, with "equal jitter" (half fixed,
 * half drawn), so that the gateways and workers that lost the same agent do not come back in step, and none waits
 * less than half the nominal delay.
 */
export function retryDelay (attempt: number, random: () => number, baseMs = RETRY_BASE_MS, maxMs = RETRY_MAX_MS): number {
  const nominal = Math.min(maxMs, baseMs * 2 ** Math.min(30, Math.max(0, attempt - 1)))
  return nominal / 2 + random() * nominal / 2
}

/** The status and text of a failed Consul call, for logs: the client puts the body text in `message`. */
export function consulErrorText (err: unknown): string {
  const e = err as { statusCode?: number, message?: string, code?: string }
  const text = (e.message ?? String(err)).trim().slice(0, 300)
  return e.statusCode !== undefined ? `${e.statusCode} ${text}` : (e.code !== undefined && !text.includes(e.code) ? `${e.code} ${text}` : text)
}
