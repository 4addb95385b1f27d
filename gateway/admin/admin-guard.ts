/**
 * What keeps web pages off the admin API. The admin listener is on loopback and, there, often without a token, so
 * "only this machine can reach it" is the whole of its protection; a browser on this machine breaks that in two
 * ways, and both end in a page re-pointing inference traffic:
 *
 * - **Cross-site requests (CSRF).** Any page may make the browser send a "simple" request to 127.0.0.1:9000: a
 *   POST with a `text/plain` (or form, or no) body, without asking the server first. The page cannot read the
 *   answer, but the endpoint is added all the same.
 * - **DNS rebinding.** A page on `evil.example` points that name at 127.0.0.1 once it has loaded; its requests are
 *   then same-origin for the browser, so it may send anything and read the answers. They arrive with
 *   `Host: evil.example:9000`.
 *
 * The defences, all independent of one another, all checked before the token:
 *
 * 1. A call carrying `Origin` is refused (any method): browsers send it on every cross-origin request and on every
 *    POST, PUT and DELETE, while `flotilla fleet`, curl and undici never send one.
 * 2. A call carrying `Sec-Fetch-Site` other than `none` is refused: browsers send it on every request to a
 *    trustworthy origin, loopback included (`none` is a URL the user typed into the address bar, which is
 *    harmless); programs do not.
 * 3. A call whose `Host` is not an IP address, `localhost`, the listener's own host name or a name the operator
 *    lists (`gateway.admin_allowed_hosts`) is refused. Only a name can be rebound: a browser that sends
 *    `Host: 127.0.0.1:9000` was told to open exactly that address, so the page it runs for is the admin API's own
 *    origin, which serves no pages. For the same reason the port is not compared: whatever port a client used (a
 *    container's published port, `kubectl port-forward`), an address or `localhost` names no page's origin but
 *    this listener's. This check is what stops rebinding even in a browser that sends neither header above.
 * 4. (In `admin-server.ts`.) Every POST, PUT and DELETE needs `Content-Type: application/json`, body-less ones
 *    included (undrain, promote, a drain without options, a removal). A page can send a cross-origin POST with a
 *    `text/plain` body, or with no body and no Content-Type (`fetch(url, {method: 'POST', mode: 'no-cors'})`), but
 *    it cannot send `application/json` to another origin without a CORS preflight, which this API never grants. 1
 *    and 2 would stop those requests in today's browsers, but they rest on headers the browser volunteers (older
 *    ones send no `Sec-Fetch-*`, and a privacy extension may strip `Origin`); the Content-Type rule rests only on
 *    what a page is not able to send, so it holds for body-less calls too, and costs a client one header.
 *
 * Each refused call is logged at warn, rate-limited per kind ({@link RefusalLog}): a page retrying in a loop must
 * not flood the log, and one line tells the operator that something is knocking.
 */
import { type IncomingHttpHeaders } from 'node:http'
import { isIP } from 'node:net'
import { createError, type FlotillaError } from '../../common/errors.ts'
import { type Logger } from '../../common/logger.ts'

/** Which rule refused a call. */
export type RefusalKind = 'origin' | 'sec-fetch-site' | 'host' | 'content-type'

export interface Refusal {
  readonly kind: RefusalKind
  readonly error: FlotillaError
}

export interface AdminGuardOptions {
  /** The admin listener's host as configured (`gateway.admin_host`); when it is a name, calls to that name pass. */
  host?: string | undefined
  /** `gateway.admin_allowed_hosts`: further names the admin API answers to (matched without regard to case). */
  allowedHosts?: readonly string[] | undefined
}

/** A header value as it is quoted in a message: long values are cut, so a refusal never echoes kilobytes. */
export function shown (value: string, max = 100): string {
  return value.length <= max ? value : `${value.slice(0, max)}... (${value.length} characters)`
}

/** `Host`'s name part, lower case, without brackets; `undefined` when the value is not `name[:port]` or `[v6][:port]`. */
function hostName (host: string): string | undefined {
  const bracketed = /^\[([^\]]*)\](?::[0-9]*)?$/.exec(host)
  if (bracketed !== null) return isIP(bracketed[1]!) === 6 ? bracketed[1]!.toLowerCase() : undefined
  const plain = /^([^:[\]]+)(?::[0-9]*)?$/.exec(host)
  return plain === null ? undefined : plain[1]!.toLowerCase()
}

/**
 * The cross-site checks (1 to 3 above) for one admin listener.
 */
export class AdminGuard {
  /** Names, besides addresses and localhost, that `Host` may carry. */
  readonly #names: ReadonlySet<string>

  constructor (options: AdminGuardOptions = {}) {
    const names = new Set<string>(['localhost'])
    const own = options.host?.toLowerCase()
    if (own !== undefined && isIP(own) === 0) names.add(own)
    for (const name of options.allowedHosts ?? []) names.add(name.toLowerCase())
    this.#names = names
  }

  /**
   * Why a call must be refused as a browser's, or `undefined` when it may go on.
   *
   * @param headers the request's headers, as Node parsed them (names in lower case)
   */
  check (headers: IncomingHttpHeaders): Refusal | undefined {
    const origin = headers.origin
    if (origin !== undefined) {
      return { kind: 'origin', error: createError('GW_ERR_ADMIN_CROSS_SITE', `an Origin header (${shown(origin)})`) }
    }
    const site = headers['sec-fetch-site']
    if (site !== undefined && (Array.isArray(site) || site.trim().toLowerCase() !== 'none')) {
      return {
        kind: 'sec-fetch-site',
        error: createError('GW_ERR_ADMIN_CROSS_SITE', `Sec-Fetch-Site: ${shown(String(site))}`)
      }
    }
    const host = headers.host
    const name = host === undefined ? undefined : hostName(host)
    if (name === undefined || !(isIP(name) !== 0 || this.#names.has(name))) {
      return { kind: 'host', error: createError('GW_ERR_ADMIN_HOST', this.#describe(host), this.#extraNames()) }
    }
    return undefined
  }

  #describe (host: string | undefined): string {
    return host === undefined ? 'a call without a Host header' : `Host '${shown(host)}'`
  }

  #extraNames (): string {
    const extra = [...this.#names].filter((n) => n !== 'localhost')
    return extra.length === 0 ? '' : ` and ${extra.join(', ')}`
  }
}

/**
 * Why a POST, PUT or DELETE must be refused for its Content-Type (rule 4 above), or `undefined`: the media type must
 * be `application/json` (parameters such as `charset` allowed, case ignored), with or without a body.
 *
 * @param method the request's method
 * @param path the request's path, for the message
 * @param contentType the `Content-Type` header, if any
 */
export function contentTypeRefusal (method: string, path: string, contentType: string | undefined): Refusal | undefined {
  const type = contentType?.split(';')[0]?.trim().toLowerCase()
  if (type === 'application/json') return undefined
  const got = contentType === undefined ? 'none' : `'${shown(contentType)}'`
  return { kind: 'content-type', error: createError('GW_ERR_ADMIN_CONTENT_TYPE', method, shown(path), got) }
}

/** How often a kind of refusal is logged once it has been logged. */
export const REFUSAL_LOG_INTERVAL_MS = 60_000

/**
 * Logs refused admin calls at warn: the first of each kind at once, later ones at most once per
 * {@link REFUSAL_LOG_INTERVAL_MS}, with the number refused since the last line (`suppressed`).
 */
export class RefusalLog {
  readonly #logger: Logger
  readonly #now: () => number
  readonly #last = new Map<RefusalKind, { at: number, suppressed: number }>()

  constructor (logger: Logger, now: () => number) {
    this.#logger = logger
    this.#now = now
  }

  /**
   * @param refusal what was refused, and why
   * @param call who called and what: `ip`, `method`, `url`, and the header concerned
   */
  record (refusal: Refusal, call: Record<string, unknown>): void {
    const now = this.#now()
    const last = this.#last.get(refusal.kind)
    if (last !== undefined && now - last.at < REFUSAL_LOG_INTERVAL_MS) {
      last.suppressed++
      return
    }
    this.#last.set(refusal.kind, { at: now, suppressed: 0 })
    this.#logger.warn({ refused: refusal.kind, ...call, ...(last === undefined ? {} : { suppressed: last.suppressed }) },
      `admin call refused: ${refusal.error.message}`)
  }
}
