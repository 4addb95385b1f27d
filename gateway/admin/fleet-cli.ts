/**
 * `flotilla fleet …`: the operator's side of the admin API (`api.ts` is the wire contract). Each command is one
 * call, or for `drain` one call and a poll, printed as plain aligned text for a person or, with `--json`, as the
 * server's own JSON for a script.
 *
 * Input that is obviously wrong (a port of 70000, a weight of 1.5, a name for `add` that breaks the server-name rule)
 * is refused here with a usage error, because a round trip would only say the same thing later; everything that
 * needs the fleet's state (a duplicate name, an unknown model) is left to the server, which is the one place that
 * knows.
 *
 * What the admin API asks of its clients so that browsers cannot use it (`admin-guard.ts`), this command does by
 * construction: every POST, PUT and DELETE carries `Content-Type: application/json`, body or not; undici sends the
 * URL's host and port as `Host`, and never `Origin` or `Sec-Fetch-Site`.
 *
 * All I/O but HTTP comes through {@link FleetCliIo}, so tests run the real command against a fake admin server
 * without touching the process's streams, environment or clock.
 */
import { parseArgs } from 'node:util'
import { Agent, request, type Dispatcher } from 'undici'
import { createError, errorCodes, isFlotillaError } from '../../common/errors.ts'
import {
  ADMIN_TOKEN_ENV, DEFAULT_ADMIN_URL, DEFAULT_DRAIN_TIMEOUT_MS, SERVER_NAME_RULE,
  type AddEndpointBody, type AdminEndpointView, type CanaryBody, type CanaryList, type CanarySideStats,
  type CanaryView, type DrainBody, type DrainStatus, type EndpointList, type RemoveResult, type WeightBody
} from './api.ts'

/** What the command reads and writes, injected so that tests need neither a terminal nor real time. */
export interface FleetCliIo {
  /** `isTTY`: drain progress rewrites one line in place instead of printing a line per change. */
  stdout: { write (s: string): unknown, isTTY?: boolean }
  stderr: { write (s: string): unknown }
  env: Record<string, string | undefined>
  /** Reads `--token-file`; may throw (the message is shown). */
  readFile: (path: string) => string
  /** Sleep between drain polls; injected so tests run fast. */
  sleep: (ms: number) => Promise<void>
}

/** The text `flotilla fleet --help` prints. */
export const FLEET_USAGE = `Usage: flotilla fleet <command> [flags]

Change the running gateway's fleet through its admin API.

Commands:
  list                               every endpoint: state, weight, models, load, health
  add NAME HOST:PORT                 add an endpoint (IPv6 as [::1]:8000)
      [--models a,b | --discover]    the models it serves (default: ask the worker for its READY models)
      [--weight N] [--versions 1,2] [--max-in-flight N] [--label k=v]...
  drain NAME [--timeout-ms N]        stop sending it new requests and wait for the ones in flight
      [--no-wait]                    start the drain and return at once
  undrain NAME                       take it back into rotation
  remove NAME [--force]              drain it (unless --force), then take it out of the fleet
      [--timeout-ms N]
  weight NAME N                      set its weight, 0-1000
  canary                             every model with a canary
  canary MODEL [show]                the canary of MODEL and both sides' figures
  canary MODEL set --percent P       split MODEL's traffic
      (--version V --baseline-version B | --servers a,b)
      [--force-header name=value] [--sticky-header NAME] [--no-auto-rollback]
  canary MODEL clear|promote|rollback
  cache [stats]                      the response cache: its tiers, and per model whether it is cached
  cache purge [MODEL]                drop every cached answer (of MODEL only, when given), in Redis too

  (\`flotilla cache ...\` is the same as \`flotilla fleet cache ...\`.)

Flags for every command:
  --admin URL          the admin API (default ${DEFAULT_ADMIN_URL})
  --token-file FILE    read the bearer token from FILE (default: $${ADMIN_TOKEN_ENV})
  --json               print the admin API's JSON answer instead of a table
  --help               this text

Exit status: 0 done, 1 the call failed (or a drain timed out), 2 usage error.
`

/** The admin API answers at once; anything slower than this is a hung gateway, not a busy one. */
const REQUEST_TIMEOUT_MS = 10_000
const POLL_INTERVAL_MS = 250
/**
 * A drain ends on the server at its timeout at the latest; past that plus this grace the poll stops trusting the
 * server to ever say "done" rather than loop forever.
 */
const DRAIN_GRACE_MS = 10_000

const options = {
  help: { type: 'boolean', short: 'h' },
  admin: { type: 'string' },
  'token-file': { type: 'string' },
  json: { type: 'boolean' },
  models: { type: 'string' },
  discover: { type: 'boolean' },
  weight: { type: 'string' },
  versions: { type: 'string' },
  'max-in-flight': { type: 'string' },
  label: { type: 'string', multiple: true },
  'timeout-ms': { type: 'string' },
  'no-wait': { type: 'boolean' },
  force: { type: 'boolean' },
  percent: { type: 'string' },
  version: { type: 'string' },
  'baseline-version': { type: 'string' },
  servers: { type: 'string' },
  'force-header': { type: 'string' },
  'sticky-header': { type: 'string' },
  'no-auto-rollback': { type: 'boolean' }
} as const

type Flags = ReturnType<typeof parseArgs<{ options: typeof options, allowPositionals: true }>>['values']
type FlagName = keyof Flags

const GLOBAL_FLAGS: readonly FlagName[] = ['help', 'admin', 'token-file', 'json']
const CANARY_SET_FLAGS: readonly FlagName[] = [
  'percent', 'version', 'baseline-version', 'servers', 'force-header', 'sticky-header', 'no-auto-rollback'
]
/** The flags each command takes besides the global ones. */
const COMMAND_FLAGS: Record<string, readonly FlagName[]> = {
  list: [],
  add: ['models', 'discover', 'weight', 'versions', 'max-in-flight', 'label'],
  drain: ['timeout-ms', 'no-wait'],
  undrain: [],
  remove: ['force', 'timeout-ms'],
  weight: [],
  canary: CANARY_SET_FLAGS,
  cache: []
}
const CANARY_ACTIONS = ['show', 'set', 'clear', 'promote', 'rollback']

/** Everything a command needs once the global flags are read. */
interface Context {
  io: FleetCliIo
  /** The admin API's base, as shown in messages (no trailing slash). */
  admin: string
  base: URL
  token: { value: string, source: string } | undefined
  json: boolean
  dispatcher: Dispatcher
}

function usage (message: string): never {
  throw createError('CLI_ERR_USAGE', message)
}

/** A call that was made and failed; the message is printed as is, and the exit status is 1. */
function failure (message: string): Error {
  return new Error(message)
}

/**
 * Runs `flotilla fleet <argv...>` (argv starts after "fleet"); resolves with the exit status. Never throws for bad
 * input: prints a message to stderr and returns 2 (usage) or 1 (the call failed).
 *
 * @param argv the arguments after `fleet`
 * @param io where output goes and where the environment, the token file and time come from
 * @returns 0 on success, 1 when the call failed (or a drain timed out), 2 for a usage error
 */
export async function runFleetCommand (argv: readonly string[], io: FleetCliIo): Promise<number> {
  let agent: Agent | undefined
  try {
    const { values: flags, positionals } = parse(argv)
    if (flags.help === true || positionals[0] === 'help') {
      io.stdout.write(FLEET_USAGE)
      return 0
    }
    const command = positionals[0] ?? usage(`flotilla fleet needs a command: ${Object.keys(COMMAND_FLAGS).join(', ')}`)
    const allowed = COMMAND_FLAGS[command] ??
      usage(`unknown fleet command '${command}'; the commands are ${Object.keys(COMMAND_FLAGS).join(', ')}`)
    for (const key of Object.keys(flags) as FlagName[]) {
      if (!GLOBAL_FLAGS.includes(key) && !allowed.includes(key)) usage(`flotilla fleet ${command} does not take --${key}`)
    }
    // Checked before any I/O, so a usage error never depends on whether the gateway is up.
    const run = plan(command, positionals.slice(1), flags)
    // One agent per run, closed at the end: no keep-alive socket outlives the command, and whatever global
    // dispatcher the embedding process set up (the gateway's own, in tests) is left alone.
    agent = new Agent({ keepAliveTimeout: 1000 })
    const context = contextFrom(flags, io, agent)
    return await run(context)
  } catch (err) {
    if (isFlotillaError(err) && err.code === 'CLI_ERR_USAGE') {
      io.stderr.write(`flotilla fleet: ${err.message}\nRun 'flotilla fleet --help' for usage.\n`)
      return 2
    }
    io.stderr.write(`flotilla fleet: ${err instanceof Error ? err.message : String(err)}\n`)
    return 1
  } finally {
    await agent?.close().catch(() => {})
  }
}

function parse (argv: readonly string[]): ReturnType<typeof parseArgs<{ options: typeof options, allowPositionals: true }>> {
  const args: string[] = []
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    const next = argv[i + 1]
    const name = arg.startsWith('--') ? arg.slice(2) : ''
    // parseArgs reads `--percent -5` as two options; join them so the value check names the real problem.
    if (name in options && options[name as FlagName].type === 'string' && next !== undefined && /^-[0-9]/.test(next)) {
      args.push(`${arg}=${next}`)
      i++
    } else if (/^-[0-9]/.test(arg)) {
      usage(`'${arg}' is not a valid argument here: weights, ports, versions and counts are never negative`)
    } else {
      args.push(arg)
    }
  }
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true })
  } catch (err) {
    usage((err as Error).message)
  }
}

function contextFrom (flags: Flags, io: FleetCliIo, dispatcher: Dispatcher): Context {
  const raw = flags.admin ?? DEFAULT_ADMIN_URL
  let base: URL
  try {
    base = new URL(raw.includes('://') ? raw : `http://${raw}`)
  } catch {
    usage(`--admin must be a URL such as ${DEFAULT_ADMIN_URL}, got '${raw}'`)
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') usage(`--admin must be an http:// or https:// URL, got '${raw}'`)
  const admin = `${base.origin}${base.pathname.replace(/\/+$/, '')}`
  return { io, admin, base, token: tokenFrom(flags, io), json: flags.json === true, dispatcher }
}

function tokenFrom (flags: Flags, io: FleetCliIo): Context['token'] {
  const file = flags['token-file']
  if (file !== undefined) {
    let text: string
    try {
      text = io.readFile(file)
    } catch (err) {
      usage(`cannot read --token-file ${file}: ${(err as Error).message}`)
    }
    const value = text.trim()
    if (value === '') usage(`--token-file ${file} is empty`)
    return { value, source: `--token-file ${file}` }
  }
  const value = io.env[ADMIN_TOKEN_ENV]?.trim()
  return value === undefined || value === '' ? undefined : { value, source: `$${ADMIN_TOKEN_ENV}` }
}

/** Checks a command's arguments and returns what runs it, so that every usage error comes before any call. */
function plan (command: string, args: string[], flags: Flags): (c: Context) => Promise<number> {
  const max = (n: number, shape: string): void => {
    if (args.length > n) usage(`unexpected argument '${args[n]}'; the form is: flotilla fleet ${shape}`)
  }
  const need = (i: number, what: string, shape: string): string =>
    args[i] ?? usage(`flotilla fleet ${command} needs ${what}; the form is: flotilla fleet ${shape}`)
  switch (command) {
    case 'list':
      max(0, 'list')
      return (c) => list(c)
    case 'add': {
      const shape = 'add NAME HOST:PORT [--models a,b | --discover] [--weight N] ...'
      max(2, shape)
      const body = addBody(need(0, 'a name', shape), need(1, 'HOST:PORT', shape), flags)
      return (c) => add(c, body)
    }
    case 'drain': {
      const shape = 'drain NAME [--timeout-ms N] [--no-wait]'
      max(1, shape)
      const name = need(0, 'an endpoint name', shape)
      const timeoutMs = optionalInt(flags['timeout-ms'], '--timeout-ms', 0, Number.MAX_SAFE_INTEGER)
      return (c) => drain(c, name, timeoutMs, flags['no-wait'] !== true)
    }
    case 'undrain': {
      max(1, 'undrain NAME')
      const name = need(0, 'an endpoint name', 'undrain NAME')
      return (c) => undrain(c, name)
    }
    case 'remove': {
      const shape = 'remove NAME [--force] [--timeout-ms N]'
      max(1, shape)
      const name = need(0, 'an endpoint name', shape)
      const timeoutMs = optionalInt(flags['timeout-ms'], '--timeout-ms', 0, Number.MAX_SAFE_INTEGER)
      return (c) => remove(c, name, flags.force === true, timeoutMs)
    }
    case 'weight': {
      max(2, 'weight NAME N')
      const name = need(0, 'an endpoint name', 'weight NAME N')
      const weight = int(need(1, 'a weight', 'weight NAME N'), 'the weight', 0, 1000)
      return (c) => setWeight(c, name, weight)
    }
    case 'cache': {
      const action = args[0] ?? 'stats'
      if (action === 'stats') {
        max(1, 'cache [stats]')
        return (c) => cacheStats(c)
      }
      if (action !== 'purge') usage(`unknown cache action '${action}'; the actions are stats, purge`)
      max(2, 'cache purge [MODEL]')
      const model = args[1]
      return (c) => cachePurge(c, model)
    }
    default:
      return planCanary(args, flags)
  }
}

function planCanary (args: string[], flags: Flags): (c: Context) => Promise<number> {
  const model = args[0]
  const action = args[1] ?? 'show'
  const setFlags = CANARY_SET_FLAGS.filter((f) => flags[f] !== undefined)
  if (model === undefined || action !== 'set') {
    const first = setFlags[0]
    if (first !== undefined) usage(`--${first} goes with 'flotilla fleet canary MODEL set'`)
  }
  if (model === undefined) return (c) => canaryList(c)
  if (!CANARY_ACTIONS.includes(action)) {
    usage(`unknown canary action '${action}'; the actions are ${CANARY_ACTIONS.join(', ')}`)
  }
  if (args.length > 2) usage(`unexpected argument '${args[2]}'; the form is: flotilla fleet canary MODEL ${action}`)
  const path = `/v1/models/${encodeURIComponent(model)}/canary`
  switch (action) {
    case 'show':
      return async (c) => { printCanary(c, await call<CanaryView>(c, 'GET', path)); return 0 }
    case 'set': {
      const body = canaryBody(flags)
      return async (c) => { printCanary(c, await call<CanaryView>(c, 'PUT', path, body), `set the canary of ${model}`); return 0 }
    }
    case 'promote':
      return async (c) => {
        printCanary(c, await call<CanaryView>(c, 'POST', `${path}/promote`), `promoted the canary of ${model}: all its traffic goes to the canary`)
        return 0
      }
    case 'rollback':
      return async (c) => {
        printCanary(c, await call<CanaryView>(c, 'POST', `${path}/rollback`), `rolled back the canary of ${model}: its share is 0`)
        return 0
      }
    default:
      return async (c) => {
        const answer = await call<{ cleared: string }>(c, 'DELETE', path)
        out(c, answer, () => `cleared the canary of ${model}: its traffic is routed as if there never was one\n`)
        return 0
      }
  }
}

// ---- argument checks ----

function int (raw: string, what: string, min: number, max: number): number {
  const n = Number(raw)
  if (!/^[0-9]+$/.test(raw) || n < min || n > max) {
    usage(max === Number.MAX_SAFE_INTEGER
      ? `${what} must be an integer of at least ${min}, got '${raw}'`
      : `${what} must be an integer from ${min} to ${max}, got '${raw}'`)
  }
  return n
}

function optionalInt (raw: string | undefined, what: string, min: number, max: number): number | undefined {
  return raw === undefined ? undefined : int(raw, what, min, max)
}

function commaList (raw: string, what: string): string[] {
  const items = raw.split(',').map((s) => s.trim())
  if (items.some((s) => s === '')) usage(`${what} takes a comma-separated list with no empty items, got '${raw}'`)
  return items
}

/** `HOST:PORT`, with IPv6 literals in brackets as in a URL; the body carries the bare address, as the fleet file does. */
function hostPort (raw: string): { host: string, port: number } {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(raw)) usage(`give the endpoint as HOST:PORT without a scheme, got '${raw}'`)
  let host: string
  let port: string
  const v6 = /^\[([^\]]*)\]:(.*)$/.exec(raw)
  if (v6 !== null) {
    host = v6[1]!
    port = v6[2]!
  } else {
    const colon = raw.lastIndexOf(':')
    if (raw.startsWith('[') || (colon >= 0 && raw.slice(0, colon).includes(':'))) {
      usage(`write an IPv6 address in brackets, as in [::1]:8000, got '${raw}'`)
    }
    if (colon < 0) usage(`'${raw}' has no port; give the endpoint as HOST:PORT, as in 10.0.0.5:8000`)
    host = raw.slice(0, colon)
    port = raw.slice(colon + 1)
  }
  if (host === '') usage(`'${raw}' has no host; give the endpoint as HOST:PORT, as in 10.0.0.5:8000`)
  return { host, port: int(port, 'the port', 1, 65535) }
}

function addBody (name: string, address: string, flags: Flags): AddEndpointBody {
  if (!SERVER_NAME_RULE.regex.test(name)) {
    const quoted = name.length > 100 ? `'${name.slice(0, 40)}...' (${name.length} characters)` : `'${name}'`
    usage(`${quoted} cannot be a server name: ${SERVER_NAME_RULE.text}`)
  }
  const { host, port } = hostPort(address)
  if (flags.models !== undefined && flags.discover === true) usage('give either --models or --discover, not both')
  const body: AddEndpointBody = {
    name,
    host,
    port,
    models: flags.models === undefined ? 'discover' : commaList(flags.models, '--models')
  }
  if (flags.weight !== undefined) body.weight = int(flags.weight, '--weight', 0, 1000)
  if (flags.versions !== undefined) {
    body.versions = commaList(flags.versions, '--versions').map((v) => int(v, 'each of --versions', 0, Number.MAX_SAFE_INTEGER))
  }
  if (flags['max-in-flight'] !== undefined) {
    body.max_in_flight = int(flags['max-in-flight'], '--max-in-flight', 0, Number.MAX_SAFE_INTEGER)
  }
  if (flags.label !== undefined) {
    const labels: Record<string, string> = {}
    for (const raw of flags.label) {
      const eq = raw.indexOf('=')
      if (eq <= 0) usage(`--label takes KEY=VALUE, got '${raw}'`)
      const key = raw.slice(0, eq)
      if (key in labels) usage(`--label ${key} is given twice`)
      labels[key] = raw.slice(eq + 1)
    }
    body.labels = labels
  }
  return body
}

function canaryBody (flags: Flags): CanaryBody {
  const rawPercent = flags.percent ?? usage('flotilla fleet canary MODEL set needs --percent P (0-100, the canary\'s share)')
  const percent = Number(rawPercent)
  if (!/^[0-9]+(\.[0-9]+)?$/.test(rawPercent) || percent > 100) usage(`--percent must be a number from 0 to 100, got '${rawPercent}'`)
  const body: CanaryBody = { percent }
  const byVersion = flags.version !== undefined || flags['baseline-version'] !== undefined
  if (byVersion && flags.servers !== undefined) {
    usage('split a canary either by version (--version and --baseline-version) or by servers (--servers), not both')
  }
  if (flags.servers !== undefined) {
    body.canary_servers = commaList(flags.servers, '--servers')
  } else if (byVersion) {
    const version = flags.version ?? usage('--baseline-version needs --version V too (the canary\'s version)')
    const baseline = flags['baseline-version'] ?? usage('--version needs --baseline-version B too (the version the rest of the traffic gets)')
    body.canary_version = int(version, '--version', 0, Number.MAX_SAFE_INTEGER)
    body.baseline_version = int(baseline, '--baseline-version', 0, Number.MAX_SAFE_INTEGER)
  } else {
    usage('say what the canary is: --version V --baseline-version B, or --servers a,b')
  }
  const force = flags['force-header']
  if (force !== undefined) {
    const eq = force.indexOf('=')
    if (eq <= 0) usage(`--force-header takes NAME=VALUE, got '${force}'`)
    body.force_header = { name: force.slice(0, eq), value: force.slice(eq + 1) }
  }
  if (flags['sticky-header'] !== undefined) {
    if (flags['sticky-header'] === '') usage('--sticky-header needs a header name')
    body.sticky_header = flags['sticky-header']
  }
  if (flags['no-auto-rollback'] === true) body.auto_rollback = { enabled: false }
  return body
}

// ---- HTTP ----

interface Answer<T> {
  data: T
  /** The body as received, for `--json`. */
  text: string
}

const UNREACHABLE = new Set([
  'ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT'
])

function errorCode (err: unknown): string {
  const e = err as { code?: unknown, errors?: Array<{ code?: unknown }>, cause?: { code?: unknown } } | null
  // Node reports a host with several addresses (localhost: ::1 and 127.0.0.1) that all refuse as an AggregateError.
  const code = e?.code ?? e?.errors?.[0]?.code ?? e?.cause?.code
  return typeof code === 'string' ? code : (err as Error)?.message ?? String(err)
}

function networkFailure (c: Context, err: unknown, method: string, path: string, timeoutMs: number): Error {
  const code = errorCode(err)
  if (UNREACHABLE.has(code)) {
    return failure(`cannot reach the admin API at ${c.admin} (${code}); is the gateway running with its admin listener on? (--admin URL)`)
  }
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return failure(`the admin API at ${c.admin} did not answer ${method} ${path} within ${seconds(timeoutMs)} s; check the gateway's log`)
  }
  return failure(`${method} ${path} to the admin API at ${c.admin} failed (${code}); check the gateway's log`)
}

function httpFailure (c: Context, status: number, text: string, path: string): Error {
  let message: string | undefined
  try {
    const body = JSON.parse(text) as { error?: unknown }
    if (typeof body?.error === 'string') message = body.error
  } catch {}
  message ??= text.trim().slice(0, 200) || 'no error message'
  let hint = ''
  // A 403 is a wrong token only when it says so; the others (a call that looks like a browser's, a Host the API does
  // not answer to) carry their own remedy, and no token would change them.
  if (status === 401 || (status === 403 && message === errorCodes.GW_ERR_ADMIN_FORBIDDEN.message)) {
    hint = c.token === undefined
      ? `\nhint: the admin API wants a token: pass --token-file FILE or set ${ADMIN_TOKEN_ENV}`
      : `\nhint: the token from ${c.token.source} was not accepted; check --token-file / ${ADMIN_TOKEN_ENV}`
  } else if (status === 404 && (path === '/v1/endpoints' || path === '/v1/canaries')) {
    // These paths always exist on the admin API, so a 404 means --admin points somewhere else.
    hint = `\nhint: is ${c.admin} the gateway's admin listener (default ${DEFAULT_ADMIN_URL}) and not its inference port? (--admin URL)`
  }
  return failure(`${message} (HTTP ${status})${hint}`)
}

async function call<T> (c: Context, method: Dispatcher.HttpMethod, path: string, body?: unknown, timeoutMs = REQUEST_TIMEOUT_MS): Promise<Answer<T>> {
  const url = new URL(`${c.base.pathname.replace(/\/+$/, '')}${path}`, c.base.origin)
  const headers: Record<string, string> = { accept: 'application/json' }
  if (c.token !== undefined) headers.authorization = `Bearer ${c.token.value}`
  // On every call that changes something, body or not: the admin API refuses a POST, PUT or DELETE without it.
  if (method !== 'GET') headers['content-type'] = 'application/json'
  const payload = body === undefined ? undefined : JSON.stringify(body)
  let status: number
  let text: string
  try {
    const res = await request(url, {
      method,
      headers,
      dispatcher: c.dispatcher,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      ...(payload !== undefined ? { body: payload } : {})
    })
    status = res.statusCode
    text = await res.body.text()
  } catch (err) {
    throw networkFailure(c, err, method, path, timeoutMs)
  }
  if (status >= 300) throw httpFailure(c, status, text, path)
  try {
    return { data: JSON.parse(text) as T, text }
  } catch {
    throw failure(`the admin API at ${c.admin} answered ${method} ${path} with something that is not JSON; is --admin the gateway's admin listener?`)
  }
}

// ---- output ----

/** Prints the raw answer with `--json`, else what `human` makes of it. */
function out<T> (c: Context, answer: Answer<T>, human: (data: T) => string): void {
  c.io.stdout.write(c.json ? (answer.text.endsWith('\n') ? answer.text : `${answer.text}\n`) : human(answer.data))
}

function seconds (ms: number): string {
  return (ms / 1000).toFixed(1)
}

function plural (n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`
}

/** Columns padded to their widest cell, two spaces apart; the last column unpadded so no line ends in blanks. */
function table (rows: ReadonlyArray<readonly string[]>): string {
  const widths: number[] = []
  for (const row of rows) row.forEach((cell, i) => { widths[i] = Math.max(widths[i] ?? 0, cell.length) })
  return rows.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ')).join('\n') + '\n'
}

const ENDPOINT_HEADER = ['NAME', 'ORIGIN', 'STATE', 'WEIGHT', 'MODELS', 'IN-FLIGHT', 'HEALTH', 'EJECTED', 'SOURCE']

function endpointRow (e: AdminEndpointView): string[] {
  return [
    e.name,
    e.origin,
    e.state,
    // Effective below configured: slow start is still ramping the endpoint up.
    e.weight === e.configured_weight ? String(e.weight) : `${e.weight}/${e.configured_weight}`,
    e.models.length === 0 ? '-' : e.models.join(','),
    String(e.in_flight),
    !e.healthy ? 'unhealthy' : e.unready_models.length > 0 ? `unready: ${e.unready_models.join(',')}` : 'healthy',
    e.ejected ? 'yes' : 'no',
    e.source
  ]
}

function endpointTable (endpoints: readonly AdminEndpointView[]): string {
  return table([ENDPOINT_HEADER, ...endpoints.map(endpointRow)])
}

function drainLine (s: DrainStatus): string {
  return `draining ${s.name}: ${plural(s.in_flight, 'request')} in flight, ${seconds(s.started_ms_ago)} s`
}

function canaryTarget (v: CanaryView, side: 'baseline' | 'canary'): string {
  if (v.split === 'servers') return side === 'canary' ? `servers ${(v.canary_servers ?? []).join(',')}` : 'the other servers'
  return `version ${side === 'canary' ? v.canary_version : v.baseline_version}`
}

function canaryState (v: CanaryView): string {
  if (v.promoted) return 'promoted'
  if (v.rolled_back !== null) return v.rolled_back.automatic ? 'rolled back automatically' : 'rolled back'
  return 'active'
}

function share (v: CanaryView): string {
  return v.percent === v.configured_percent ? `${v.percent}%` : `${v.percent}% (set to ${v.configured_percent}%)`
}

function ms (value: number | null): string {
  return value === null ? '-' : `${value.toFixed(1)} ms`
}

function sideRow (v: CanaryView, side: 'baseline' | 'canary', s: CanarySideStats): string[] {
  // From the counts rather than `error_rate`, so the column cannot disagree with the two before it.
  const rate = s.requests === 0 ? '-' : `${((s.errors / s.requests) * 100).toFixed(1)}%`
  return [side, canaryTarget(v, side), String(s.requests), String(s.errors), rate, ms(s.p50_ms), ms(s.p99_ms)]
}

function canaryText (v: CanaryView): string {
  const lines = [
    `canary of ${v.model}: ${canaryTarget(v, 'canary')} against ${canaryTarget(v, 'baseline')}`,
    `share:          ${share(v)} of requests to the canary`,
    `state:          ${canaryState(v)}${v.promoted ? ' (all traffic to the canary)' : ''}`
  ]
  if (v.rolled_back !== null) {
    lines.push(`rolled back:    ${seconds(v.rolled_back.ms_ago)} s ago, ${v.rolled_back.automatic ? 'automatically' : 'by hand'}: ${v.rolled_back.reason}`)
  }
  if (v.force_header !== null) lines.push(`force header:   ${v.force_header.name}: ${v.force_header.value} always goes to the canary`)
  if (v.sticky_header !== null) lines.push(`sticky header:  ${v.sticky_header}`)
  const a = v.auto_rollback
  lines.push(a.enabled
    ? `auto rollback:  on (window ${seconds(a.window_ms)} s, at least ${plural(a.min_requests, 'request')})`
    : 'auto rollback:  off')
  return `${lines.join('\n')}\n\n${table([
    ['SIDE', 'TARGET', 'REQUESTS', 'ERRORS', 'ERROR RATE', 'P50', 'P99'],
    sideRow(v, 'baseline', v.baseline),
    sideRow(v, 'canary', v.canary)
  ])}`
}

function printCanary (c: Context, answer: Answer<CanaryView>, heading?: string): void {
  out(c, answer, (v) => `${heading === undefined ? '' : `${heading}\n`}${canaryText(v)}`)
}

// ---- commands ----

interface CacheStatsAnswer {
  local: { entries: number, bytes: number, max_bytes: number, evictions: number }
  shared: { store: string } | null
  coalescing: number
  models: Record<string, { cached: boolean, decided_by: string, coalesce: boolean, ttl_ms: number | null, version: string | null }>
}

function entries (n: number, kind = ''): string {
  return `${n} ${kind}${n === 1 ? 'entry' : 'entries'}`
}

async function cacheStats (c: Context): Promise<number> {
  out(c, await call<CacheStatsAnswer>(c, 'GET', '/v1/cache'), (d) => {
    const mib = (n: number): string => (n / 1024 / 1024).toFixed(1)
    const head = `local: ${entries(d.local.entries)}, ${mib(d.local.bytes)} of ${mib(d.local.max_bytes)} MiB, ` +
      `${plural(d.local.evictions, 'eviction')}; shared: ${d.shared?.store ?? 'none'}; ${d.coalescing} waiting on identical requests\n`
    const rows = Object.entries(d.models).map(([model, m]) => [
      model, m.cached ? 'cached' : m.coalesce ? 'coalesced only' : 'off', m.decided_by,
      m.ttl_ms === null ? '-' : `${m.ttl_ms} ms`, m.version ?? '-'
    ])
    return head + (rows.length === 0 ? '' : table([['MODEL', 'CACHE', 'DECIDED BY', 'TTL', 'VERSION'], ...rows]))
  })
  return 0
}

async function cachePurge (c: Context, model: string | undefined): Promise<number> {
  const answer = await call<{ model: string | null, local: number, shared: number | null }>(c, 'POST', '/v1/cache/purge', model === undefined ? {} : { model })
  out(c, answer, (d) => `purged ${d.model === null ? 'every model' : d.model}: ${entries(d.local, 'local ')}` +
    `${d.shared === null ? '' : `, ${entries(d.shared, 'shared ')}`}\n`)
  return 0
}

async function list (c: Context): Promise<number> {
  out(c, await call<EndpointList>(c, 'GET', '/v1/endpoints'), (d) =>
    d.endpoints.length === 0 ? 'no endpoints in the fleet\n' : endpointTable(d.endpoints))
  return 0
}

async function add (c: Context, body: AddEndpointBody): Promise<number> {
  out(c, await call<AdminEndpointView>(c, 'POST', '/v1/endpoints', body), (e) =>
    `added ${e.name} (${e.origin})\n${endpointTable([e])}`)
  return 0
}

async function undrain (c: Context, name: string): Promise<number> {
  out(c, await call<AdminEndpointView>(c, 'POST', `/v1/endpoints/${encodeURIComponent(name)}/undrain`), (e) =>
    `undrained ${e.name}: ${e.state}, it takes new requests again\n`)
  return 0
}

async function setWeight (c: Context, name: string, weight: number): Promise<number> {
  const body: WeightBody = { weight }
  out(c, await call<AdminEndpointView>(c, 'PUT', `/v1/endpoints/${encodeURIComponent(name)}/weight`, body), (e) =>
    `weight of ${e.name} set to ${e.configured_weight}` +
    (e.weight === e.configured_weight ? '\n' : `; slow start has it at ${e.weight} for now\n`))
  return 0
}

async function remove (c: Context, name: string, force: boolean, timeoutMs: number | undefined): Promise<number> {
  const query = new URLSearchParams()
  if (force) query.set('force', '1')
  if (timeoutMs !== undefined) query.set('timeout_ms', String(timeoutMs))
  const q = query.toString()
  // Without --force the server drains first and answers only when that is over, so allow for the whole drain.
  const limit = force ? REQUEST_TIMEOUT_MS : (timeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS) + REQUEST_TIMEOUT_MS
  const answer = await call<RemoveResult>(c, 'DELETE', `/v1/endpoints/${encodeURIComponent(name)}${q === '' ? '' : `?${q}`}`, undefined, limit)
  out(c, answer, (r) => {
    const left = `${plural(r.in_flight, 'request')} still in flight finish on their connections`
    if (r.drained) return `removed ${r.removed} after draining it\n`
    if (force) return `removed ${r.removed} without draining it (--force)${r.in_flight > 0 ? `; ${left}` : ''}\n`
    return `removed ${r.removed}; its drain timed out and ${left}\n`
  })
  return 0
}

/** Drain progress on stdout: one line rewritten in place on a terminal, else one line per change in the count. */
class DrainProgress {
  readonly #io: FleetCliIo
  readonly #quiet: boolean
  #last = -1
  #width = 0

  constructor (io: FleetCliIo, quiet: boolean) {
    this.#io = io
    this.#quiet = quiet
  }

  show (s: DrainStatus): void {
    // A finished drain gets its verdict instead; a last "0 in flight" progress line would only repeat it.
    if (this.#quiet || s.done) return
    const line = drainLine(s)
    if (this.#io.stdout.isTTY === true) {
      this.#io.stdout.write(`\r${line.padEnd(this.#width)}`)
      this.#width = Math.max(this.#width, line.length)
    } else if (s.in_flight !== this.#last) {
      this.#io.stdout.write(`${line}\n`)
    }
    this.#last = s.in_flight
  }

  /** Clears the rewritten line, so the verdict that follows stands on a line of its own. */
  end (): void {
    if (this.#width > 0) this.#io.stdout.write(`\r${' '.repeat(this.#width)}\r`)
  }
}

async function drain (c: Context, name: string, timeoutMs: number | undefined, wait: boolean): Promise<number> {
  const path = `/v1/endpoints/${encodeURIComponent(name)}/drain`
  const body: DrainBody = timeoutMs === undefined ? {} : { timeout_ms: timeoutMs }
  let answer = await call<DrainStatus>(c, 'POST', path, body)
  if (!wait) {
    out(c, answer, (s) => s.done
      ? `${s.name} is ${s.state}: ${plural(s.in_flight, 'request')} in flight\n`
      : `${drainLine(s)} (timeout ${seconds(s.timeout_ms)} s); it takes no new requests. Watch it with 'flotilla fleet list'\n`)
    return 0
  }
  const progress = new DrainProgress(c.io, c.json)
  progress.show(answer.data)
  const maxPolls = Math.ceil((answer.data.timeout_ms + DRAIN_GRACE_MS) / POLL_INTERVAL_MS)
  let polls = 0
  while (!answer.data.done && answer.data.state !== 'active') {
    if (++polls > maxPolls) {
      progress.end()
      throw failure(`the admin API still reports the drain of ${name} in progress ${seconds(answer.data.started_ms_ago)} s after it began, ` +
        `past its ${seconds(answer.data.timeout_ms)} s timeout; stopped waiting (see 'flotilla fleet list')`)
    }
    await c.io.sleep(POLL_INTERVAL_MS)
    try {
      answer = await call<DrainStatus>(c, 'GET', path)
    } catch (err) {
      progress.end()
      throw failure(`${(err as Error).message}\nthe drain of ${name} goes on in the gateway; see 'flotilla fleet list'`)
    }
    progress.show(answer.data)
  }
  progress.end()
  const s = answer.data
  if (c.json) out(c, answer, () => '')
  if (s.completed) {
    if (!c.json) c.io.stdout.write(`drained ${name}: 0 in flight after ${seconds(s.started_ms_ago)} s\n`)
    return 0
  }
  if (s.state === 'active') {
    c.io.stderr.write(`flotilla fleet: the drain of ${name} was cancelled (undrained?); it takes new requests again\n`)
  } else {
    c.io.stderr.write(`flotilla fleet: drain of ${name} timed out after ${seconds(s.timeout_ms)} s with ${plural(s.in_flight, 'request')} in flight; ` +
      'it is marked drained and takes no new requests\n')
  }
  return 1
}

async function canaryList (c: Context): Promise<number> {
  out(c, await call<CanaryList>(c, 'GET', '/v1/canaries'), (d) => d.canaries.length === 0
    ? 'no canaries set\n'
    : table([
      ['MODEL', 'CANARY', 'BASELINE', 'SHARE', 'STATE'],
      ...d.canaries.map((v) => [v.model, canaryTarget(v, 'canary'), canaryTarget(v, 'baseline'), share(v), canaryState(v)])
    ]))
  return 0
}
