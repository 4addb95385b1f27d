/**
 * A double of the Consul HTTP API for tests: a real node:http server on 127.0.0.1 that answers the endpoints
 * Flotilla uses the way a single-node `consul agent -dev` (Consul 1.16–1.20, CE) does, so that the same contract
 * tests run against it and, when CONSUL_HTTP_ADDR is set, against a real agent.
 *
 * Written from Consul's source rather than only its docs, because tests care about the details the docs skip.
 * What it models, and where from (hashicorp/consul):
 *
 *   agent local state ──sync──▶ catalog ──▶ /v1/health/service (blocking on the service's index)
 *   (agent/services, agent/checks)          (Node, Service, Checks; X-Consul-Index)
 *
 * - Two views, as in a real agent. `/v1/agent/*` answers the agent's local state (`agent/local/state.go`);
 *   `/v1/health/service` answers the catalog, which the agent syncs to (`syncChanges`, synchronously at the end of
 *   each agent write, as `agent/agent_endpoint.go` does). Check output changes alone are *deferred* to the catalog by
 *   `check_update_interval` (default 5 min; `UpdateCheck`): agent/checks shows the new output at once, health/service
 *   keeps the old one and its X-Consul-Index does not move.
 * - Raft indexes. One counter; a write that changes nothing in the catalog (an identical re-registration, a check
 *   update that `HealthCheck.IsSame` deems equal) takes no index. A service name's index is the index of the last
 *   change to its instances or their checks; a name with no instances answers the last "service extinction" index,
 *   else the catalog's max index (`maxIndexAndWatchChForService`). X-Consul-Index is never 0 (`setIndex`).
 * - Blocking queries (`blockingquery`, `rpcclient/health`): with `index` > 0 the answer is held until the service's
 *   index exceeds it or `wait` elapses (default 5 min, at most 10 min, plus up to wait/16 of jitter), then it is the
 *   current state and index, even if that index is below the one asked for (the client resets, per the docs). As with
 *   the streaming backend a dev agent uses for them, only writes to that service name wake a parked query.
 * - Checks (`agent/checks/check.go`): new checks start critical unless `Status` is given; HTTP checks run on their
 *   interval (floored at 1 s, `checks.MinInterval`) after a random stagger, with a 10 s default timeout: 2xx passing,
 *   429 warning, else critical, output "HTTP GET <url>: 200 OK Output: <body>"; TCP checks connect; TTL checks go
 *   critical with "TTL expired" when not updated. Script/Docker checks are refused as on a default agent.
 * - Reaping (`reapServicesInternal`): every `reapInterval` (Consul: 30 s), a service one of whose checks has been
 *   critical (as reported by its runner, not since registration) longer than its DeregisterCriticalServiceAfter
 *   (floored at `check_deregister_interval_min`, 1 min) is deregistered.
 * - ACLs, when `token` is set: default policy deny, `token` the one (management) token, read from ?token=,
 *   X-Consul-Token or `Authorization: Bearer`, in that order (`parseTokenInternal`). An unknown token is 403
 *   "ACL not found" everywhere; no token is the anonymous token, whose writes are 403 "Permission denied: anonymous
 *   token lacks permission 'service:write' on …" and whose *reads are filtered*, not refused (200 with [] / {}).
 * - Errors are Consul's status codes and plain-text bodies (`HTTPError`, `handleErr`); JSON is pretty-printed like a
 *   dev agent's, with Go's map-key order and HTML-safe escapes.
 *
 * Not modelled (a test that needs them gets a 400 saying so, never a silent difference): ?filter, ?near,
 * ?node-meta, Connect (Kind/Proxy/Connect), and check kinds other than HTTP/TCP/TTL (registered but never run).
 */
import { randomUUID } from 'node:crypto'
import { createServer, request as httpRequest, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { connect as netConnect, isIPv4, isIPv6, type Socket } from 'node:net'
import { hostname } from 'node:os'

export type CheckStatus = 'passing' | 'warning' | 'critical'

export interface ConsulDoubleOptions {
  /** Turns ACLs on (default policy deny) with this as the one, management, token. Off by default, as in `-dev`. */
  token?: string
  /** Default 'dc1'. */
  datacenter?: string
  /** The node's name; default os.hostname(), as a dev agent. */
  nodeName?: string
  /** ms between reaper passes (Consul's check_reap_interval is 30 s); make it small in tests. */
  reapInterval?: number
  /** ms floor on DeregisterCriticalServiceAfter (Consul's check_deregister_interval_min, 1 min). */
  deregisterIntervalMin?: number
  /** ms floor on check intervals (Consul's checks.MinInterval, 1 s). */
  minCheckInterval?: number
  /** ms by which output-only check changes are deferred to the catalog (check_update_interval, 5 min); 0: at once. */
  checkUpdateInterval?: number
  /** [0, 1): check start stagger, blocking-query jitter, deferred-sync stagger. Default Math.random. */
  random?: () => number
  /** Indented JSON, as a dev agent answers (default true); `?pretty` always indents. */
  pretty?: boolean
}

/** One service as the agent holds it, with its checks: what `services()` returns. */
export interface ConsulDoubleService {
  ID: string
  Service: string
  Tags: string[]
  Address: string
  Port: number
  Meta: Record<string, string>
  Checks: Array<{ CheckID: string, Name: string, Status: CheckStatus, Output: string, Type: string }>
}

export interface FailNextOptions {
  /** Answer body; default "No cluster leader" for 500, else the status text. */
  body?: string
  /** Only requests to this route count (the keys of `requests()`, e.g. 'GET /v1/health/service/:service'). */
  route?: string
}

export interface ConsulDouble {
  /** http://127.0.0.1:<port>, no trailing slash. */
  readonly url: string
  readonly port: number
  /** Stops checks, timers and the server; parked blocking queries are cut. */
  close (): Promise<void>
  /** Stops answering: closes the listener and destroys every socket (parked queries included). State is kept. */
  outage (): Promise<void>
  /** Listens again on the same port. */
  restore (): Promise<void>
  /** The next `n` requests (to `options.route` only, if given) are answered `status` instead. */
  failNext (n: number, status?: number, options?: FailNextOptions): void
  /** Reports a status for a check as its runner would (a status change reaches the catalog at once). */
  setCheckStatus (checkId: string, status: CheckStatus, output?: string): void
  /** The agent's services and their checks, sorted by ID. */
  services (): ConsulDoubleService[]
  /** Requests served so far, by route: 'PUT /v1/agent/service/register', 'GET /v1/health/service/:service', … */
  requests (): Record<string, number>
  /** The X-Consul-Index a /v1/health/service/<name> answer carries now. */
  index (service: string): number
  /** Blocking queries parked now. */
  readonly blocked: number
  /** Resolves once at least `n` blocking queries are parked; rejects after `timeoutMs`. */
  waitForBlocked (n?: number, timeoutMs?: number): Promise<void>
}

const DEFAULT_QUERY_TIME_MS = 300_000
const MAX_QUERY_TIME_MS = 600_000
const JITTER_FRACTION = 16
const DEFAULT_CHECK_TIMEOUT_MS = 10_000
const DEFAULT_OUTPUT_MAX_SIZE = 4096
const MAX_REDIRECTS = 10
const SERVICE_MAINT_PREFIX = '_service_maintenance:'
const DEFAULT_SERVICE_MAINT_REASON = 'Maintenance mode is enabled for this service, but no reason was provided. This is a default message.'
const ANONYMOUS_HINT = 'The anonymous token is used implicitly when a request does not specify a token.'
const INVALID_CHECK_INTERVAL = 'Interval must be > 0 for Script, HTTP, H2PING, TCP, UDP or OSService checks'

// ---------------------------------------------------------------------------------------------------------------
// Go's formats: durations, quoting, booleans, JSON

const UNIT_NS: Record<string, number> = { ns: 1, us: 1e3, 'µs': 1e3, 'μs': 1e3, ms: 1e6, s: 1e9, m: 6e10, h: 3.6e12 }

const goQuote = (s: string): string => JSON.stringify(s)

/** Go's time.ParseDuration, in ms (fractional), with its error texts. */
export function parseGoDuration (text: string): number {
  const invalid = (): Error => new Error(`time: invalid duration ${goQuote(text)}`)
  let s = text
  let sign = 1
  if (s.startsWith('-') || s.startsWith('+')) {
    sign = s.startsWith('-') ? -1 : 1
    s = s.slice(1)
  }
  if (s === '0') return 0
  if (s === '') throw invalid()
  let ns = 0
  while (s !== '') {
    const num = /^(\d*)(?:\.(\d*))?/.exec(s)
    const whole = num?.[1] ?? ''
    const frac = num?.[2] ?? ''
    if (whole === '' && frac === '') throw invalid()
    s = s.slice(num?.[0].length ?? 0)
    const unit = /^[^\d.]*/.exec(s)?.[0] ?? ''
    if (unit === '') throw new Error(`time: missing unit in duration ${goQuote(text)}`)
    const scale = UNIT_NS[unit]
    if (scale === undefined) throw new Error(`time: unknown unit ${goQuote(unit)} in duration ${goQuote(text)}`)
    s = s.slice(unit.length)
    ns += Number(`${whole === '' ? '0' : whole}.${frac === '' ? '0' : frac}`) * scale
  }
  return (sign * Math.trunc(ns)) / 1e6
}

/** Go's time.Duration.String, from ms. */
export function formatGoDuration (ms: number): string {
  let ns = Math.trunc(Math.round(ms * 1e6))
  if (ns === 0) return '0s'
  const sign = ns < 0 ? '-' : ''
  ns = Math.abs(ns)
  const fixed = (value: number, digits: number): string => {
    const scale = 10 ** digits
    const whole = Math.floor(value / scale)
    const frac = String(value % scale).padStart(digits, '0').replace(/0+$/, '')
    return frac === '' ? String(whole) : `${whole}.${frac}`
  }
  if (ns < 1e3) return `${sign}${ns}ns`
  if (ns < 1e6) return `${sign}${fixed(ns, 3)}µs`
  if (ns < 1e9) return `${sign}${fixed(ns, 6)}ms`
  const h = Math.floor(ns / 3.6e12)
  ns -= h * 3.6e12
  const m = Math.floor(ns / 6e10)
  ns -= m * 6e10
  return `${sign}${h > 0 ? `${h}h` : ''}${h > 0 || m > 0 ? `${m}m` : ''}${fixed(ns, 9)}s`
}

/** Go's strconv.ParseBool; undefined when it would fail. */
function parseGoBool (s: string): boolean | undefined {
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(s)) return true
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(s)) return false
  return undefined
}

/** encoding/json output: map keys sorted (callers build maps with `sortedMap`), <>& escaped, dev-mode indent. */
function goJson (value: unknown, pretty: boolean): string {
  const text = pretty ? `${JSON.stringify(value, null, 4)}\n` : JSON.stringify(value)
  return text.replace(/[<>&\u2028\u2029]/g, c => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

function sortedMap<T> (map: Record<string, T>): Record<string, T> {
  const out: Record<string, T> = {}
  for (const key of Object.keys(map).sort()) out[key] = map[key] as T
  return out
}

/** A key-order-independent serialisation, for "did this change" comparisons. */
function stable (value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stable).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const rec = value as Record<string, unknown>
    return `{${Object.keys(rec).sort().map(k => `${JSON.stringify(k)}:${stable(rec[k])}`).join(',')}}`
  }
  return JSON.stringify(value) ?? 'null'
}

// ---------------------------------------------------------------------------------------------------------------
// Decoding a registration body the way lib.DecodeJSON (DisallowUnknownFields) and the custom UnmarshalJSONs do

class DecodeError extends Error {}

type FieldKind = 'string' | 'int' | 'bool' | 'strings' | 'stringMap' | 'headerMap' | 'taggedAddresses' | 'weights' |
  'duration' | 'check' | 'checks' | 'object'

const GO_TYPE: Record<FieldKind, string> = {
  string: 'string', int: 'int', bool: 'bool', strings: '[]string', stringMap: 'map[string]string',
  headerMap: 'map[string][]string', taggedAddresses: 'map[string]structs.ServiceAddress', weights: 'structs.Weights',
  duration: 'interface {}', check: 'structs.CheckType', checks: 'structs.CheckTypes', object: 'struct'
}

const SERVICE_FIELDS: Record<string, FieldKind> = {
  Kind: 'string', ID: 'string', Name: 'string', Tags: 'strings', Address: 'string', TaggedAddresses: 'taggedAddresses',
  Meta: 'stringMap', Port: 'int', SocketPath: 'string', Check: 'check', Checks: 'checks', Weights: 'weights',
  Token: 'string', EnableTagOverride: 'bool', Proxy: 'object', Connect: 'object', Locality: 'object',
  enable_tag_override: 'bool', tagged_addresses: 'taggedAddresses'
}

const CHECK_FIELDS: Record<string, FieldKind> = {
  CheckID: 'string', Name: 'string', Status: 'string', Notes: 'string', ScriptArgs: 'strings', HTTP: 'string',
  H2PING: 'string', H2PingUseTLS: 'bool', Header: 'headerMap', Method: 'string', Body: 'string',
  DisableRedirects: 'bool', TCP: 'string', UDP: 'string', Interval: 'duration', AliasNode: 'string',
  AliasService: 'string', DockerContainerID: 'string', Shell: 'string', GRPC: 'string', GRPCUseTLS: 'bool',
  OSService: 'string', TLSServerName: 'string', TLSSkipVerify: 'bool', Timeout: 'duration', TTL: 'duration',
  SuccessBeforePassing: 'int', FailuresBeforeWarning: 'int', FailuresBeforeCritical: 'int', ProxyHTTP: 'string',
  ProxyGRPC: 'string', DeregisterCriticalServiceAfter: 'duration', OutputMaxSize: 'int', args: 'strings',
  script_args: 'strings', deregister_critical_service_after: 'duration', docker_container_id: 'string',
  tls_server_name: 'string', tls_skip_verify: 'bool', grpc_use_tls: 'bool', h2ping_use_tls: 'bool',
  ServiceID: 'string', service_id: 'string'
}

const jsonKind = (v: unknown): string =>
  Array.isArray(v) ? 'array' : v === null ? 'null' : typeof v === 'number' ? 'number' : typeof v === 'boolean' ? 'bool' : typeof v

function typeError (value: unknown, field: string, goType: string): DecodeError {
  const what = typeof value === 'number' && !Number.isInteger(value) && goType === 'int' ? `number ${value}` : jsonKind(value)
  return new DecodeError(`json: cannot unmarshal ${what} into Go struct field .${field} of type ${goType}`)
}

interface CheckDef {
  CheckID: string
  Name: string
  Status: string
  Notes: string
  ScriptArgs: string[]
  HTTP: string
  Header: Record<string, string[]>
  Method: string
  Body: string
  DisableRedirects: boolean
  TCP: string
  UDP: string
  GRPC: string
  H2PING: string
  OSService: string
  AliasNode: string
  AliasService: string
  DockerContainerID: string
  TLSServerName: string
  TLSSkipVerify: boolean
  Interval: number
  Timeout: number
  TTL: number
  DeregisterCriticalServiceAfter: number
  SuccessBeforePassing: number
  FailuresBeforeWarning: number
  FailuresBeforeCritical: number
  OutputMaxSize: number
  empty: boolean
}

interface ServiceDef {
  Kind: string
  ID: string
  Name: string
  Tags: string[] | null
  Address: string
  TaggedAddresses: Record<string, TaggedAddress> | null
  Meta: Record<string, string> | null
  Port: number
  Weights: { Passing: number, Warning: number } | null
  EnableTagOverride: boolean
  Check: CheckDef
  Checks: CheckDef[]
  Proxy: unknown
  Connect: unknown
}

interface TaggedAddress { Address: string, Port: number }

/** Go's encoding/json field matching: the exact name, else a case-insensitive one; unknown fields are errors. */
function decodeFields (raw: Record<string, unknown>, fields: Record<string, FieldKind>): Map<string, unknown> {
  const out = new Map<string, unknown>()
  for (const [key, value] of Object.entries(raw)) {
    const name = key in fields ? key : Object.keys(fields).find(f => f.toLowerCase() === key.toLowerCase())
    if (name === undefined) throw new DecodeError(`json: unknown field ${goQuote(key)}`)
    const kind = fields[name] as FieldKind
    out.set(name, decodeValue(value, kind, name))
  }
  return out
}

function decodeValue (value: unknown, kind: FieldKind, field: string): unknown {
  if (value === null) return undefined // Go leaves the zero value
  switch (kind) {
    case 'string':
      if (typeof value !== 'string') throw typeError(value, field, 'string')
      return value
    case 'int':
      if (typeof value !== 'number' || !Number.isInteger(value)) throw typeError(value, field, 'int')
      return value
    case 'bool':
      if (typeof value !== 'boolean') throw typeError(value, field, 'bool')
      return value
    case 'strings':
      if (!Array.isArray(value)) throw typeError(value, field, GO_TYPE.strings)
      return value.map(v => { if (typeof v !== 'string') throw typeError(v, field, 'string'); return v })
    case 'stringMap':
    case 'headerMap':
    case 'taggedAddresses': {
      if (typeof value !== 'object' || Array.isArray(value)) throw typeError(value, field, GO_TYPE[kind])
      const out: Record<string, unknown> = {}
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
        if (kind === 'stringMap') out[k] = decodeValue(v, 'string', field) ?? ''
        else if (kind === 'headerMap') out[k] = decodeValue(v, 'strings', field) ?? []
        else {
          if (typeof v !== 'object' || v === null || Array.isArray(v)) throw typeError(v, field, 'structs.ServiceAddress')
          const f = decodeFields(v as Record<string, unknown>, { Address: 'string', Port: 'int' })
          out[k] = { Address: f.get('Address') ?? '', Port: f.get('Port') ?? 0 }
        }
      }
      return out
    }
    case 'weights': {
      if (typeof value !== 'object' || Array.isArray(value)) throw typeError(value, field, GO_TYPE.weights)
      const f = decodeFields(value as Record<string, unknown>, { Passing: 'int', Warning: 'int' })
      return { Passing: f.get('Passing') ?? 0, Warning: f.get('Warning') ?? 0 }
    }
    case 'duration':
      // CheckType.UnmarshalJSON: a string is parsed, a number is nanoseconds, anything else is ignored.
      if (typeof value === 'string') {
        try { return parseGoDuration(value) } catch (err) { throw new DecodeError((err as Error).message) }
      }
      return typeof value === 'number' ? Math.trunc(value) / 1e6 : undefined
    case 'check':
      if (typeof value !== 'object' || Array.isArray(value)) throw typeError(value, field, GO_TYPE.check)
      return decodeCheck(value as Record<string, unknown>)
    case 'checks':
      if (!Array.isArray(value)) throw typeError(value, field, GO_TYPE.checks)
      return value.map(v => {
        if (v !== null && (typeof v !== 'object' || Array.isArray(v))) throw typeError(v, field, GO_TYPE.check)
        return decodeCheck((v ?? {}) as Record<string, unknown>)
      })
    case 'object':
      if (typeof value !== 'object' || Array.isArray(value)) throw typeError(value, field, 'struct')
      return value
  }
}

function decodeCheck (raw: Record<string, unknown>): CheckDef {
  const f = decodeFields(raw, CHECK_FIELDS)
  const str = (k: string): string => (f.get(k) as string | undefined) ?? ''
  const num = (k: string): number => (f.get(k) as number | undefined) ?? 0
  const bool = (k: string): boolean => (f.get(k) as boolean | undefined) ?? false
  const scriptArgs = (f.get('ScriptArgs') ?? f.get('args') ?? f.get('script_args') ?? []) as string[]
  return {
    CheckID: str('CheckID'),
    Name: str('Name'),
    Status: str('Status'),
    Notes: str('Notes'),
    ScriptArgs: scriptArgs,
    HTTP: str('HTTP'),
    Header: (f.get('Header') ?? {}) as Record<string, string[]>,
    Method: str('Method'),
    Body: str('Body'),
    DisableRedirects: bool('DisableRedirects'),
    TCP: str('TCP'),
    UDP: str('UDP'),
    GRPC: str('GRPC'),
    H2PING: str('H2PING'),
    OSService: str('OSService'),
    AliasNode: str('AliasNode'),
    AliasService: str('AliasService'),
    DockerContainerID: str('DockerContainerID') || str('docker_container_id'),
    TLSServerName: str('TLSServerName') || str('tls_server_name'),
    TLSSkipVerify: bool('TLSSkipVerify') || bool('tls_skip_verify'),
    Interval: num('Interval'),
    Timeout: num('Timeout'),
    TTL: num('TTL'),
    DeregisterCriticalServiceAfter: f.has('DeregisterCriticalServiceAfter') ? num('DeregisterCriticalServiceAfter') : num('deregister_critical_service_after'),
    SuccessBeforePassing: num('SuccessBeforePassing'),
    FailuresBeforeWarning: num('FailuresBeforeWarning'),
    FailuresBeforeCritical: num('FailuresBeforeCritical'),
    OutputMaxSize: num('OutputMaxSize'),
    // CheckType.Empty(): every field at its zero value
    empty: [...f.values()].every(v => v === undefined || v === '' || v === 0 || v === false ||
      (Array.isArray(v) && v.length === 0) || (typeof v === 'object' && v !== null && Object.keys(v).length === 0))
  }
}

/** `decodeBody` of a register request: what the handler answers as "Request decode failed: <this>". */
function decodeServiceDefinition (body: string): ServiceDef {
  if (body.trim() === '') throw new DecodeError('EOF')
  let raw: unknown
  try {
    raw = JSON.parse(body)
  } catch (err) {
    const msg = (err as Error).message
    if (/end of (JSON )?input|Unterminated/i.test(msg)) throw new DecodeError('unexpected EOF')
    const at = /position (\d+)/.exec(msg)
    const ch = at?.[1] === undefined ? body.trim()[0] : body[Number(at[1])]
    throw new DecodeError(`invalid character '${ch ?? ''}' looking for beginning of value`)
  }
  if (raw === null) raw = {}
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    throw new DecodeError(`json: cannot unmarshal ${jsonKind(raw)} into Go value of type structs.ServiceDefinition`)
  }
  const f = decodeFields(raw as Record<string, unknown>, SERVICE_FIELDS)
  const tagged = (f.get('TaggedAddresses') ?? f.get('tagged_addresses') ?? null) as Record<string, TaggedAddress> | null
  return {
    Kind: (f.get('Kind') as string | undefined) ?? '',
    ID: (f.get('ID') as string | undefined) ?? '',
    Name: (f.get('Name') as string | undefined) ?? '',
    Tags: (f.get('Tags') as string[] | undefined) ?? null,
    Address: (f.get('Address') as string | undefined) ?? '',
    TaggedAddresses: tagged !== null && Object.keys(tagged).length > 0 ? tagged : null,
    Meta: (f.get('Meta') as Record<string, string> | undefined) ?? null,
    Port: (f.get('Port') as number | undefined) ?? 0,
    Weights: (f.get('Weights') as { Passing: number, Warning: number } | undefined) ?? null,
    EnableTagOverride: ((f.get('EnableTagOverride') as boolean | undefined) ?? false) || ((f.get('enable_tag_override') as boolean | undefined) ?? false),
    Check: (f.get('Check') as CheckDef | undefined) ?? decodeCheck({}),
    Checks: (f.get('Checks') as CheckDef[] | undefined) ?? [],
    Proxy: f.get('Proxy'),
    Connect: f.get('Connect')
  }
}

// structs.CheckType.Validate
function validateCheckType (c: CheckDef): string | undefined {
  const intervalCheck = c.ScriptArgs.length > 0 || c.HTTP !== '' || c.TCP !== '' || c.UDP !== '' || c.GRPC !== '' ||
    c.H2PING !== '' || c.OSService !== ''
  const alias = c.AliasNode !== '' || c.AliasService !== ''
  if (c.Interval > 0 && c.TTL > 0) return 'Interval and TTL cannot both be specified'
  if (intervalCheck && c.Interval <= 0) return INVALID_CHECK_INTERVAL
  if (intervalCheck && alias) return 'Interval cannot be set for Alias checks'
  if (alias && c.TTL > 0) return 'TTL must be not be set for Alias checks'
  if (!intervalCheck && !alias && c.TTL <= 0) return 'TTL must be > 0 for TTL checks'
  if (c.OutputMaxSize < 0) return 'MaxOutputMaxSize must be positive'
  if (c.FailuresBeforeWarning > c.FailuresBeforeCritical) return "FailuresBeforeWarning can't be higher than FailuresBeforeCritical"
  return undefined
}

// structs.CheckType.Type
function checkKind (c: CheckDef): string {
  const interval = c.Interval > 0
  if (c.GRPC !== '' && interval) return 'grpc'
  if (c.HTTP !== '' && interval) return 'http'
  if (c.TTL > 0) return 'ttl'
  if (c.TCP !== '' && interval) return 'tcp'
  if (c.UDP !== '' && interval) return 'udp'
  if (c.AliasNode !== '' || c.AliasService !== '') return 'alias'
  if (c.ScriptArgs.length > 0 && c.DockerContainerID !== '' && interval) return 'docker'
  if (c.ScriptArgs.length > 0) return 'script'
  if (c.H2PING !== '' && interval) return 'h2ping'
  if (c.OSService !== '' && interval) return 'os_service'
  return ''
}

// structs.validateMetadata / validateMetaPair
function validateMeta (meta: Record<string, string> | null): string | undefined {
  if (meta === null) return undefined
  const entries = Object.entries(meta)
  if (entries.length > 64) return 'Node metadata cannot contain more than 64 key/value pairs'
  for (const [key, value] of entries) {
    let why: string | undefined
    if (key === '') why = 'Key cannot be blank'
    else if (!/^[a-zA-Z0-9_-]+$/.test(key)) why = 'Key contains invalid characters'
    else if (key.length > 128) why = 'Key is too long (limit: 128 characters)'
    else if (key.startsWith('consul-')) why = "Key prefix 'consul-' is reserved for internal use"
    else if (Buffer.byteLength(value) > 512) why = 'Value is too long (limit: 512 characters)'
    if (why !== undefined) return `Couldn't load metadata pair ('${key}', '${value}'): ${why}`
  }
  return undefined
}

// structs.ValidateWeights
function validateWeights (w: { Passing: number, Warning: number }): string | undefined {
  if (w.Passing < 1) return 'Passing must be greater than 0'
  if (w.Warning < 0) return 'Warning must be greater or equal than 0'
  if (w.Passing > 65535 || w.Warning > 65535) return 'DNS Weight must be between 0 and 65535'
  return undefined
}

// ---------------------------------------------------------------------------------------------------------------
// Probes, as agent/checks runs them

interface Probe { status: CheckStatus, output: string }

interface HttpProbeDef {
  url: string
  method: string
  header: Record<string, string[]>
  body: string
  timeoutMs: number
  disableRedirects: boolean
  tlsSkipVerify: boolean
  tlsServerName: string
  outputMaxSize: number
}

/** Go's error text for a failed http.Client.Do: `Get "<url>": <reason>`. */
function goUrlError (method: string, url: string, err: NodeJS.ErrnoException & { address?: string, port?: number }): string {
  const op = method.slice(0, 1) + method.slice(1).toLowerCase()
  let reason = err.message
  if (err.code === 'ECONNREFUSED') reason = `dial tcp ${err.address ?? ''}:${err.port ?? ''}: connect: connection refused`
  else if (err.code === 'ETIMEDOUT_HEADERS') reason = 'context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
  else if (err.code === 'ECONNRESET') reason = 'EOF'
  else if (err.code === 'ENOTFOUND') reason = `dial tcp: lookup ${new URL(url).hostname}: no such host`
  else if (err.code === 'ERR_SCHEME') reason = `unsupported protocol scheme ${goQuote(new URL(url).protocol.replace(/:$/, ''))}`
  return `${op} ${goQuote(url)}: ${reason}`
}

interface HttpAnswer { statusCode: number, statusMessage: string, location: string | undefined, output: string }

function httpOnce (target: string, method: string, def: HttpProbeDef, deadline: number): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const url = new URL(target)
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      reject(Object.assign(new Error('unsupported protocol scheme'), { code: 'ERR_SCHEME' }))
      return
    }
    const headers: Record<string, string | string[]> = {}
    for (const [k, v] of Object.entries(def.header)) headers[k] = v
    const lower = new Set(Object.keys(headers).map(k => k.toLowerCase()))
    if (!lower.has('user-agent')) headers['User-Agent'] = 'Consul Health Check'
    if (!lower.has('accept')) headers.Accept = 'text/plain, text/*, */*'
    headers.Connection = 'close' // DisableKeepAlives
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest
    let body: Buffer[] = []
    let size = 0
    let answered: Omit<HttpAnswer, 'output'> | undefined
    const finish = (): void => {
      clearTimeout(timer)
      if (answered === undefined) return
      // armon/circbuf keeps the last OutputMaxSize bytes
      const all = Buffer.concat(body)
      resolve({ ...answered, output: all.subarray(Math.max(0, all.length - def.outputMaxSize)).toString() })
    }
    const req = send(url, {
      method,
      headers,
      agent: false,
      rejectUnauthorized: !def.tlsSkipVerify,
      ...(def.tlsServerName !== '' ? { servername: def.tlsServerName } : {})
    }, (res: IncomingMessage) => {
      answered = { statusCode: res.statusCode ?? 0, statusMessage: res.statusMessage ?? '', location: res.headers.location }
      res.on('data', (chunk: Buffer) => {
        body.push(chunk)
        size += chunk.length
        if (size > def.outputMaxSize * 4) { // keep memory bounded; only the tail is kept anyway
          const all = Buffer.concat(body)
          body = [all.subarray(all.length - def.outputMaxSize)]
          size = def.outputMaxSize
        }
      })
      res.on('end', finish)
      res.on('error', finish) // Go logs a body read error and still judges by the status code
      res.on('aborted', finish)
    })
    const timer = setTimeout(() => {
      if (answered !== undefined) { req.destroy(); finish(); return }
      req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT_HEADERS' }))
    }, Math.max(0, deadline - Date.now()))
    req.on('error', err => { clearTimeout(timer); if (answered === undefined) reject(err); else finish() })
    if (def.body !== '') req.write(def.body)
    req.end()
  })
}

// CheckHTTP.check
async function probeHttp (def: HttpProbeDef): Promise<Probe> {
  const method = def.method === '' ? 'GET' : def.method
  const deadline = Date.now() + def.timeoutMs
  let target = def.url
  let current = method
  for (let redirects = 0; ; redirects++) {
    let answer: HttpAnswer
    try {
      answer = await httpOnce(target, current, def, deadline)
    } catch (err) {
      return { status: 'critical', output: goUrlError(method, target, err as NodeJS.ErrnoException) }
    }
    const redirect = [301, 302, 303, 307, 308].includes(answer.statusCode) && answer.location !== undefined
    if (redirect && !def.disableRedirects) {
      target = new URL(answer.location ?? '', target).toString()
      if (redirects === MAX_REDIRECTS) {
        return { status: 'critical', output: `${method.slice(0, 1)}${method.slice(1).toLowerCase()} ${goQuote(target)}: stopped after 10 redirects` }
      }
      if ([301, 302, 303].includes(answer.statusCode) && current !== 'HEAD') current = 'GET'
      continue
    }
    const output = `HTTP ${method} ${def.url}: ${answer.statusCode} ${answer.statusMessage} Output: ${answer.output}`
    if (answer.statusCode >= 200 && answer.statusCode <= 299) return { status: 'passing', output }
    if (answer.statusCode === 429) return { status: 'warning', output }
    return { status: 'critical', output }
  }
}

// CheckTCP.check
function probeTcp (addr: string, timeoutMs: number): Promise<Probe> {
  return new Promise(resolve => {
    const at = addr.lastIndexOf(':')
    const host = addr.slice(0, at).replace(/^\[(.*)\]$/, '$1')
    const port = Number(addr.slice(at + 1))
    const socket = netConnect({ host, port })
    const done = (probe: Probe): void => { clearTimeout(timer); socket.destroy(); resolve(probe) }
    const timer = setTimeout(() => done({ status: 'critical', output: `dial tcp ${addr}: i/o timeout` }), timeoutMs)
    socket.once('connect', () => done({ status: 'passing', output: `TCP connect ${addr}: Success` }))
    socket.once('error', (err: NodeJS.ErrnoException) => {
      const why = err.code === 'ECONNREFUSED' ? 'connect: connection refused' : err.message
      done({ status: 'critical', output: `dial tcp ${addr}: ${why}` })
    })
  })
}

// ---------------------------------------------------------------------------------------------------------------
// State

interface ServiceRecord {
  ID: string
  Service: string
  Tags: string[] | null
  Address: string
  TaggedAddresses: Record<string, TaggedAddress>
  Meta: Record<string, string> | null
  Port: number
  Weights: { Passing: number, Warning: number }
  EnableTagOverride: boolean
}

/** structs.HealthCheck, minus the fields that are constant here (ExposedPort, Definition) and the raft indexes. */
interface CheckRecord {
  Node: string
  CheckID: string
  Name: string
  Status: CheckStatus
  Notes: string
  Output: string
  ServiceID: string
  ServiceName: string
  ServiceTags: string[] | null
  Type: string
  Interval: string
  Timeout: string
}

interface Runner { stop (): void }

interface Thresholds { successBeforePassing: number, failuresBeforeWarning: number, failuresBeforeCritical: number }

interface LocalCheck {
  rec: CheckRecord
  /** The output the catalog gets on the next sync; lags `rec.Output` while an output-only change is deferred. */
  catalogOutput: string
  /** When the check's runner first reported critical (CheckState.CriticalTime); undefined when not critical. */
  criticalSince: number | undefined
  deferTimer: NodeJS.Timeout | undefined
  /** ms; 0: never reaps (DeregisterCriticalServiceAfter, floored). */
  reapAfter: number
  runner: Runner | undefined
  ttl: TtlRunner | undefined
}

interface Indexed<T> { rec: T, createIndex: number, modifyIndex: number }

interface Waiter { name: string, minIndex: number, done: () => void }

class HttpError extends Error {
  readonly status: number
  constructor (status: number, message: string) {
    super(message)
    this.status = status
  }
}

type Auth = 'open' | 'management' | 'anonymous'

interface Ctx {
  req: IncomingMessage
  res: ServerResponse
  query: URLSearchParams
  param: string
  body: string
  token: string
}

interface Route { pattern: string, prefix: string, exact: boolean, methods: string[], handle: (ctx: Ctx) => Promise<void> | void }

/** CheckTTL: critical with "TTL expired" unless updated within the TTL. */
class TtlRunner implements Runner {
  #timer: NodeJS.Timeout | undefined
  #lastOutput = ''
  readonly #ttl: number
  readonly #expire: (output: string) => void

  constructor (ttl: number, expire: (output: string) => void) {
    this.#ttl = ttl
    this.#expire = expire
    this.#arm()
  }

  #arm (): void {
    clearTimeout(this.#timer)
    this.#timer = setTimeout(() => {
      this.#expire(this.#lastOutput === '' ? 'TTL expired' : `TTL expired (last output before timeout follows): ${this.#lastOutput}`)
    }, this.#ttl)
    this.#timer.unref()
  }

  /** Records the output and re-arms the TTL; returns the output as stored (truncated like Consul's). */
  set (output: string, max: number): string {
    const stored = output.length > max ? `${output.slice(0, max)} ... (captured ${max} of ${output.length} bytes)` : output
    this.#lastOutput = stored
    this.#arm()
    return stored
  }

  stop (): void { clearTimeout(this.#timer) }
}

/** CheckHTTP/CheckTCP run loops: first probe after a random stagger, then one interval after each probe ends. */
class IntervalRunner implements Runner {
  #timer: NodeJS.Timeout | undefined
  #stopped = false
  #successes = 0
  #failures = 0
  readonly #probe: () => Promise<Probe>
  readonly #interval: number
  readonly #thresholds: Thresholds
  readonly #report: (status: CheckStatus, output: string) => void

  constructor (probe: () => Promise<Probe>, interval: number, thresholds: Thresholds, report: (status: CheckStatus, output: string) => void, stagger: number) {
    this.#probe = probe
    this.#interval = interval
    this.#thresholds = thresholds
    this.#report = report
    this.#schedule(stagger)
  }

  #schedule (ms: number): void {
    this.#timer = setTimeout(() => { void this.#run() }, ms)
    this.#timer.unref()
  }

  async #run (): Promise<void> {
    const { status, output } = await this.#probe()
    if (this.#stopped) return
    this.#handle(status, output)
    if (!this.#stopped) this.#schedule(this.#interval)
  }

  // checks.StatusHandler.updateCheck
  #handle (status: CheckStatus, output: string): void {
    const t = this.#thresholds
    if (status === 'passing' || status === 'warning') {
      this.#successes++
      this.#failures = 0
      if (this.#successes >= t.successBeforePassing) this.#report(status, output)
      return
    }
    this.#failures++
    this.#successes = 0
    if (this.#failures >= t.failuresBeforeCritical) this.#report('critical', output)
    else if (this.#failures >= t.failuresBeforeWarning) this.#report('warning', output)
  }

  stop (): void {
    this.#stopped = true
    clearTimeout(this.#timer)
  }
}

class ConsulDoubleServer implements ConsulDouble {
  readonly #server: Server
  readonly #sockets = new Set<Socket>()
  #port = 0
  #listening = false
  readonly #token: string | undefined
  readonly #dc: string
  readonly #nodeName: string
  readonly #nodeId = randomUUID()
  readonly #deregisterMin: number
  readonly #minInterval: number
  readonly #checkUpdateInterval: number
  readonly #random: () => number
  readonly #pretty: boolean
  readonly #reaper: NodeJS.Timeout

  // agent local state
  readonly #services = new Map<string, ServiceRecord>()
  readonly #checks = new Map<string, LocalCheck>()
  // catalog
  #raft = 10
  readonly #nodeIndex: number
  readonly #catalogServices = new Map<string, Indexed<ServiceRecord>>()
  readonly #catalogChecks = new Map<string, Indexed<CheckRecord>>()
  readonly #serviceIndexes = new Map<string, number>()
  #catalogMax: number
  #lastExtinction = 0
  /** Service names the current sync wrote to: only their parked queries are re-evaluated. */
  readonly #touched = new Set<string>()

  readonly #waiters = new Set<Waiter>()
  readonly #counts = new Map<string, number>()
  #failures: Array<{ status: number, body: string, route: string | undefined }> = []
  readonly #routes: Route[]

  constructor (options: ConsulDoubleOptions) {
    this.#token = options.token
    this.#dc = options.datacenter ?? 'dc1'
    this.#nodeName = options.nodeName ?? hostname()
    this.#deregisterMin = options.deregisterIntervalMin ?? 60_000
    this.#minInterval = options.minCheckInterval ?? 1_000
    this.#checkUpdateInterval = options.checkUpdateInterval ?? 300_000
    this.#random = options.random ?? Math.random
    this.#pretty = options.pretty ?? true
    // The leader registers the node with its serfHealth check in one write.
    this.#nodeIndex = ++this.#raft
    this.#catalogMax = this.#nodeIndex
    this.#reaper = setInterval(() => this.#reap(), options.reapInterval ?? 30_000)
    this.#reaper.unref()
    this.#routes = this.#buildRoutes()
    this.#server = createServer({ requestTimeout: 0 }, (req, res) => {
      this.#dispatch(req, res).catch(() => res.destroy()) // e.g. the client went away mid-body
    })
    this.#server.on('connection', socket => {
      this.#sockets.add(socket)
      socket.on('close', () => this.#sockets.delete(socket))
    })
  }

  get url (): string { return `http://127.0.0.1:${this.#port}` }
  get port (): number { return this.#port }
  get blocked (): number { return this.#waiters.size }

  async listen (port: number): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject)
      this.#server.listen(port, '127.0.0.1', () => {
        this.#server.off('error', reject)
        const address = this.#server.address()
        this.#port = typeof address === 'object' && address !== null ? address.port : port
        this.#listening = true
        resolve()
      })
    })
  }

  async #stopListening (): Promise<void> {
    if (!this.#listening) return
    this.#listening = false
    const closed = new Promise<void>(resolve => this.#server.close(() => resolve()))
    for (const socket of this.#sockets) socket.destroy()
    for (const waiter of [...this.#waiters]) waiter.done()
    await closed
  }

  async close (): Promise<void> {
    clearInterval(this.#reaper)
    for (const check of this.#checks.values()) this.#stopCheck(check)
    await this.#stopListening()
  }

  async outage (): Promise<void> { await this.#stopListening() }

  async restore (): Promise<void> {
    if (!this.#listening) await this.listen(this.#port)
  }

  failNext (n: number, status = 500, options: FailNextOptions = {}): void {
    const body = options.body ?? (status === 500 ? 'No cluster leader' : STATUS_CODES[status] ?? 'error')
    for (let i = 0; i < n; i++) this.#failures.push({ status, body, route: options.route })
  }

  setCheckStatus (checkId: string, status: CheckStatus, output?: string): void {
    const check = this.#checks.get(checkId)
    if (check === undefined) throw new Error(`Consul double: no check ${goQuote(checkId)}`)
    this.#updateCheck(checkId, status, output ?? check.rec.Output)
  }

  services (): ConsulDoubleService[] {
    return [...this.#services.values()].sort((a, b) => a.ID < b.ID ? -1 : 1).map(s => ({
      ID: s.ID,
      Service: s.Service,
      Tags: [...(s.Tags ?? [])],
      Address: s.Address,
      Port: s.Port,
      Meta: { ...(s.Meta ?? {}) },
      Checks: this.#checksOf(s.ID).map(c => ({ CheckID: c.rec.CheckID, Name: c.rec.Name, Status: c.rec.Status, Output: c.rec.Output, Type: c.rec.Type }))
    }))
  }

  requests (): Record<string, number> { return Object.fromEntries(this.#counts) }

  index (service: string): number { return Math.max(1, this.#serviceIndex(service)) }

  async waitForBlocked (n = 1, timeoutMs = 2000): Promise<void> {
    const deadline = Date.now() + timeoutMs
    while (this.#waiters.size < n) {
      if (Date.now() > deadline) throw new Error(`Consul double: ${this.#waiters.size} blocking queries parked, wanted ${n}`)
      await new Promise(resolve => setTimeout(resolve, 5))
    }
  }

  // ----- agent local state -------------------------------------------------------------------------------------

  #checksOf (serviceId: string): LocalCheck[] {
    return [...this.#checks.values()].filter(c => c.rec.ServiceID === serviceId).sort((a, b) => a.rec.CheckID < b.rec.CheckID ? -1 : 1)
  }

  #stopCheck (check: LocalCheck): void {
    check.runner?.stop()
    clearTimeout(check.deferTimer)
  }

  #removeCheck (checkId: string): void {
    const check = this.#checks.get(checkId)
    if (check === undefined) return
    this.#stopCheck(check)
    this.#checks.delete(checkId)
  }

  #removeService (serviceId: string): void {
    for (const check of this.#checksOf(serviceId)) this.#removeCheck(check.rec.CheckID)
    this.#services.delete(serviceId)
  }

  // local.State.UpdateCheck
  #updateCheck (checkId: string, status: CheckStatus, output: string): void {
    const check = this.#checks.get(checkId)
    if (check === undefined) return
    if (status === 'critical') check.criticalSince ??= Date.now()
    else check.criticalSince = undefined
    if (check.rec.Status === status && check.rec.Output === output) return
    if (this.#checkUpdateInterval > 0 && check.rec.Status === status) {
      check.rec.Output = output
      if (check.deferTimer === undefined) {
        const delay = this.#checkUpdateInterval / 2 + this.#random() * this.#checkUpdateInterval
        check.deferTimer = setTimeout(() => {
          check.deferTimer = undefined
          if (this.#checks.get(checkId) !== check) return
          check.catalogOutput = check.rec.Output
          this.#sync()
        }, delay)
        check.deferTimer.unref()
      }
      return
    }
    check.rec.Status = status
    check.rec.Output = output
    check.catalogOutput = output
    this.#sync()
  }

  /** Agent.addServiceInternal + addCheck: builds the service and its checks, restoring existing checks' state. */
  #addService (def: ServiceDef, replaceExistingChecks: boolean): void {
    const id = def.ID === '' ? def.Name : def.ID
    const tagged: Record<string, TaggedAddress> = { ...(def.TaggedAddresses ?? {}) }
    const v4 = isIPv4(def.Address)
    const v6 = isIPv6(def.Address)
    if (v4) {
      tagged.lan_ipv4 ??= { Address: def.Address, Port: def.Port }
      tagged.wan_ipv4 ??= { Address: def.Address, Port: def.Port }
    }
    if (v6) {
      tagged.lan_ipv6 ??= { Address: def.Address, Port: def.Port }
      tagged.wan_ipv6 ??= { Address: def.Address, Port: def.Port }
    }
    const service: ServiceRecord = {
      ID: id,
      Service: def.Name,
      Tags: def.Tags,
      Address: def.Address,
      TaggedAddresses: tagged,
      Meta: def.Meta,
      Port: def.Port,
      Weights: def.Weights ?? { Passing: 1, Warning: 1 },
      EnableTagOverride: def.EnableTagOverride
    }
    const types = [...(def.Check.empty ? [] : [def.Check]), ...def.Checks]
    for (const type of types) {
      if (type.ScriptArgs.length > 0) {
        throw new HttpError(500, "Scripts are disabled on this agent from remote calls; to enable, configure 'enable_script_checks' to true")
      }
    }
    const kept = new Set<string>()
    const built = types.map((type, i) => {
      const checkId = type.CheckID !== '' ? type.CheckID : `service:${id}${types.length > 1 ? `:${i + 1}` : ''}`
      kept.add(checkId)
      const previous = this.#checks.get(checkId)
      const rec: CheckRecord = {
        Node: this.#nodeName,
        CheckID: checkId,
        Name: type.Name !== '' ? type.Name : `Service '${def.Name}' check`,
        Status: previous?.rec.Status ?? (type.Status !== '' ? type.Status as CheckStatus : 'critical'),
        Notes: type.Notes,
        Output: previous?.rec.Output ?? '',
        ServiceID: id,
        ServiceName: def.Name,
        ServiceTags: def.Tags,
        Type: checkKind(type),
        Interval: type.Interval !== 0 ? formatGoDuration(type.Interval) : '',
        Timeout: type.Timeout !== 0 ? formatGoDuration(type.Timeout) : ''
      }
      return { type, rec }
    })
    this.#services.set(id, service)
    for (const { type, rec } of built) {
      const previous = this.#checks.get(rec.CheckID)
      if (previous !== undefined) this.#stopCheck(previous)
      const check: LocalCheck = {
        rec,
        catalogOutput: rec.Output,
        criticalSince: undefined, // a new CheckState: the reap clock restarts
        deferTimer: undefined,
        reapAfter: type.DeregisterCriticalServiceAfter > 0 ? Math.max(type.DeregisterCriticalServiceAfter, this.#deregisterMin) : 0,
        runner: undefined,
        ttl: undefined
      }
      this.#checks.set(rec.CheckID, check)
      this.#startRunner(check, type)
    }
    for (const check of this.#checksOf(id)) {
      if (replaceExistingChecks && !kept.has(check.rec.CheckID)) this.#removeCheck(check.rec.CheckID)
      else check.catalogOutput = check.rec.Output // syncService pushes every check of the service as it stands
    }
  }

  #startRunner (check: LocalCheck, type: CheckDef): void {
    const id = check.rec.CheckID
    const report = (status: CheckStatus, output: string): void => this.#updateCheck(id, status, output)
    const maxOutput = type.OutputMaxSize > 0 ? Math.min(type.OutputMaxSize, DEFAULT_OUTPUT_MAX_SIZE) : DEFAULT_OUTPUT_MAX_SIZE
    const interval = Math.max(type.Interval, this.#minInterval)
    const thresholds = {
      successBeforePassing: type.SuccessBeforePassing,
      failuresBeforeWarning: type.FailuresBeforeWarning === 0 ? type.FailuresBeforeCritical : type.FailuresBeforeWarning,
      failuresBeforeCritical: type.FailuresBeforeCritical
    }
    const timeout = type.Timeout > 0 ? type.Timeout : DEFAULT_CHECK_TIMEOUT_MS
    switch (check.rec.Type) {
      case 'ttl':
        check.ttl = new TtlRunner(type.TTL, output => report('critical', output))
        check.runner = check.ttl
        break
      case 'http': {
        const def: HttpProbeDef = {
          url: type.HTTP,
          method: type.Method,
          header: type.Header,
          body: type.Body,
          timeoutMs: timeout,
          disableRedirects: type.DisableRedirects,
          tlsSkipVerify: type.TLSSkipVerify,
          tlsServerName: type.TLSServerName,
          outputMaxSize: maxOutput
        }
        check.runner = new IntervalRunner(() => probeHttp(def), interval, thresholds, report, this.#random() * interval)
        break
      }
      case 'tcp':
        check.runner = new IntervalRunner(() => probeTcp(type.TCP, timeout), interval, thresholds, report, this.#random() * interval)
        break
      default: // grpc, udp, h2ping, alias, os_service: registered, never run by the double
    }
  }

  // Agent.reapServicesInternal
  #reap (): void {
    const now = Date.now()
    const reaped = new Set<string>()
    for (const check of this.#checks.values()) {
      const sid = check.rec.ServiceID
      if (sid === '' || check.reapAfter <= 0 || check.criticalSince === undefined) continue
      if (now - check.criticalSince > check.reapAfter) reaped.add(sid)
    }
    if (reaped.size === 0) return
    for (const sid of reaped) this.#removeService(sid)
    this.#sync()
  }

  // ----- the catalog ---------------------------------------------------------------------------------------------

  #hasInstances (name: string): boolean {
    for (const entry of this.#catalogServices.values()) if (entry.rec.Service === name) return true
    return false
  }

  /** The index a write at `idx` leaves on `name` (catalogUpdateServiceIndexes / service extinction). */
  #touch (name: string, idx: number): void {
    this.#catalogMax = idx
    this.#touched.add(name)
    if (this.#hasInstances(name)) {
      this.#serviceIndexes.set(name, idx)
    } else {
      this.#serviceIndexes.delete(name)
      this.#lastExtinction = idx
    }
  }

  // maxIndexAndWatchChForService
  #serviceIndex (name: string): number {
    if (this.#hasInstances(name)) return this.#serviceIndexes.get(name) ?? this.#catalogMax
    return this.#lastExtinction > 0 ? this.#lastExtinction : this.#catalogMax
  }

  #catalogRecord (check: LocalCheck): CheckRecord {
    return { ...check.rec, ServiceTags: check.rec.ServiceTags === null ? null : [...check.rec.ServiceTags], Output: check.catalogOutput }
  }

  /**
   * local.State.SyncChanges against the catalog: one write per deregistered service, per changed service (with its
   * checks) and per removed check. A write that changes nothing takes no index (ensureServiceTxn/ensureCheckTxn).
   */
  #sync (): void {
    let changed = false
    for (const [id, entry] of this.#catalogServices) {
      if (this.#services.has(id)) continue
      const idx = ++this.#raft
      this.#catalogServices.delete(id)
      for (const [cid, check] of this.#catalogChecks) if (check.rec.ServiceID === id) this.#catalogChecks.delete(cid)
      this.#touch(entry.rec.Service, idx)
      changed = true
    }
    for (const [id, service] of this.#services) {
      const existing = this.#catalogServices.get(id)
      const checks = this.#checksOf(id)
      const serviceChanged = existing === undefined || stable(existing.rec) !== stable(service)
      if (serviceChanged) for (const check of checks) check.catalogOutput = check.rec.Output
      const changedChecks = checks.filter(check => {
        const current = this.#catalogChecks.get(check.rec.CheckID)
        return current === undefined || !isSameCheck(current.rec, this.#catalogRecord(check))
      })
      if (!serviceChanged && changedChecks.length === 0) continue
      const idx = ++this.#raft
      const names = new Set([service.Service])
      if (serviceChanged) {
        if (existing !== undefined) names.add(existing.rec.Service)
        this.#catalogServices.set(id, { rec: structuredClone(service), createIndex: existing?.createIndex ?? idx, modifyIndex: idx })
      }
      for (const check of changedChecks) {
        const current = this.#catalogChecks.get(check.rec.CheckID)
        if (current !== undefined) names.add(current.rec.ServiceName)
        this.#catalogChecks.set(check.rec.CheckID, { rec: this.#catalogRecord(check), createIndex: current?.createIndex ?? idx, modifyIndex: idx })
      }
      for (const name of names) this.#touch(name, idx)
      changed = true
    }
    for (const [cid, check] of this.#catalogChecks) {
      if (this.#checks.has(cid)) continue
      const idx = ++this.#raft
      this.#catalogChecks.delete(cid)
      this.#touch(check.rec.ServiceName, idx)
      changed = true
    }
    if (changed) {
      // As the streaming backend a dev agent answers blocking health queries with: a parked query hears of writes
      // to its own service name only (a name with no instances is not woken by other services' changes).
      for (const waiter of [...this.#waiters]) {
        if (this.#touched.has(waiter.name) && this.#serviceIndex(waiter.name) > waiter.minIndex) waiter.done()
      }
    }
    this.#touched.clear()
  }

  // ----- JSON shapes ---------------------------------------------------------------------------------------------

  #taggedJson (tagged: Record<string, TaggedAddress>): Record<string, TaggedAddress> | undefined {
    return Object.keys(tagged).length === 0 ? undefined : sortedMap(tagged)
  }

  // api.AgentService via buildAgentService
  #agentServiceJson (s: ServiceRecord): Record<string, unknown> {
    const out: Record<string, unknown> = {
      ID: s.ID,
      Service: s.Service,
      Tags: s.Tags ?? [],
      Meta: sortedMap(s.Meta ?? {}),
      Port: s.Port,
      Address: s.Address
    }
    const tagged = this.#taggedJson(s.TaggedAddresses)
    if (tagged !== undefined) out.TaggedAddresses = tagged
    out.Weights = { Passing: s.Weights.Passing > 0 ? s.Weights.Passing : 1, Warning: s.Weights.Warning }
    out.EnableTagOverride = s.EnableTagOverride
    out.Datacenter = this.#dc
    return out
  }

  // structs.HealthCheck
  #checkJson (rec: CheckRecord, createIndex: number, modifyIndex: number): Record<string, unknown> {
    return {
      Node: rec.Node,
      CheckID: rec.CheckID,
      Name: rec.Name,
      Status: rec.Status,
      Notes: rec.Notes,
      Output: rec.Output,
      ServiceID: rec.ServiceID,
      ServiceName: rec.ServiceName,
      ServiceTags: rec.ServiceTags ?? [],
      Type: rec.Type,
      Interval: rec.Interval,
      Timeout: rec.Timeout,
      ExposedPort: 0,
      Definition: {},
      CreateIndex: createIndex,
      ModifyIndex: modifyIndex
    }
  }

  #serfHealthJson (): Record<string, unknown> {
    return this.#checkJson({
      Node: this.#nodeName,
      CheckID: 'serfHealth',
      Name: 'Serf Health Status',
      Status: 'passing',
      Notes: '',
      Output: 'Agent alive and reachable',
      ServiceID: '',
      ServiceName: '',
      ServiceTags: [],
      Type: '',
      Interval: '',
      Timeout: ''
    }, this.#nodeIndex, this.#nodeIndex)
  }

  // structs.Node
  #nodeJson (): Record<string, unknown> {
    return {
      ID: this.#nodeId,
      Node: this.#nodeName,
      Address: '127.0.0.1',
      Datacenter: this.#dc,
      TaggedAddresses: { lan: '127.0.0.1', lan_ipv4: '127.0.0.1', wan: '127.0.0.1', wan_ipv4: '127.0.0.1' },
      Meta: { 'consul-network-segment': '' },
      CreateIndex: this.#nodeIndex,
      ModifyIndex: this.#nodeIndex
    }
  }

  // structs.NodeService (from the catalog's ServiceNode)
  #nodeServiceJson (entry: Indexed<ServiceRecord>): Record<string, unknown> {
    const s = entry.rec
    const out: Record<string, unknown> = { ID: s.ID, Service: s.Service, Tags: s.Tags ?? [], Address: s.Address }
    const tagged = this.#taggedJson(s.TaggedAddresses)
    if (tagged !== undefined) out.TaggedAddresses = tagged
    out.Meta = s.Meta === null ? null : sortedMap(s.Meta)
    if (s.Port !== 0) out.Port = s.Port
    out.Weights = { ...s.Weights }
    out.EnableTagOverride = s.EnableTagOverride
    out.Proxy = { Mode: '', MeshGateway: {}, Expose: {} }
    out.Connect = {}
    out.PeerName = ''
    out.CreateIndex = entry.createIndex
    out.ModifyIndex = entry.modifyIndex
    return out
  }

  // ----- HTTP ------------------------------------------------------------------------------------------------------

  #send (res: ServerResponse, status: number, body: string, type?: string): void {
    if (res.destroyed || res.writableEnded) return
    if (type !== undefined) res.setHeader('Content-Type', type)
    res.setHeader('Content-Length', Buffer.byteLength(body))
    res.writeHead(status)
    res.end(body)
  }

  #json (ctx: Ctx, value: unknown): void {
    this.#send(ctx.res, 200, goJson(value, this.#pretty || ctx.query.has('pretty')), 'application/json')
  }

  #text (res: ServerResponse, status: number, text: string): void {
    this.#send(res, status, text, 'text/plain; charset=utf-8')
  }

  /** resolveToken: an unknown token is an error everywhere; none is the anonymous token. */
  #auth (ctx: Ctx): Auth {
    if (this.#token === undefined) return 'open'
    if (ctx.token === '') return 'anonymous'
    if (ctx.token === this.#token) return 'management'
    throw new HttpError(403, 'ACL not found')
  }

  #denied (resource: 'service' | 'node', access: 'read' | 'write', name: string): HttpError {
    return new HttpError(403, `Permission denied: anonymous token lacks permission '${resource}:${access}' on ${goQuote(name)}. ${ANONYMOUS_HINT}`)
  }

  // vetServiceUpdateWithAuthorizer
  #vetServiceUpdate (auth: Auth, serviceId: string): ServiceRecord {
    const existing = this.#services.get(serviceId)
    if (existing === undefined) {
      throw new HttpError(404, `Unknown service ID ${goQuote(serviceId)}. Ensure that the service ID is passed, not the service name.`)
    }
    if (auth === 'anonymous') throw this.#denied('service', 'write', existing.Service)
    return existing
  }

  // vetCheckUpdateWithAuthorizer
  #vetCheckUpdate (auth: Auth, checkId: string): LocalCheck {
    const existing = this.#checks.get(checkId)
    if (existing === undefined) {
      throw new HttpError(404, `Unknown check ID ${goQuote(checkId)}. Ensure that the check ID is passed, not the check name.`)
    }
    if (auth === 'anonymous') {
      throw existing.rec.ServiceName !== '' ? this.#denied('service', 'write', existing.rec.ServiceName) : this.#denied('node', 'write', this.#nodeName)
    }
    return existing
  }

  #buildRoutes (): Route[] {
    const route = (pattern: string, methods: string[], handle: Route['handle']): Route => {
      const colon = pattern.indexOf(':')
      return { pattern, prefix: colon === -1 ? pattern : pattern.slice(0, colon), exact: colon === -1, methods, handle }
    }
    return [
      route('/v1/agent/services', ['GET'], ctx => this.#agentServices(ctx)),
      route('/v1/agent/checks', ['GET'], ctx => this.#agentChecks(ctx)),
      route('/v1/agent/service/register', ['PUT'], ctx => this.#register(ctx)),
      route('/v1/agent/service/deregister/:service_id', ['PUT'], ctx => this.#deregister(ctx)),
      route('/v1/agent/service/maintenance/:service_id', ['PUT'], ctx => this.#maintenance(ctx)),
      route('/v1/agent/check/pass/:check_id', ['PUT'], ctx => this.#ttlUpdate(ctx, 'passing', ctx.query.get('note') ?? '')),
      route('/v1/agent/check/warn/:check_id', ['PUT'], ctx => this.#ttlUpdate(ctx, 'warning', ctx.query.get('note') ?? '')),
      route('/v1/agent/check/fail/:check_id', ['PUT'], ctx => this.#ttlUpdate(ctx, 'critical', ctx.query.get('note') ?? '')),
      route('/v1/agent/check/update/:check_id', ['PUT'], ctx => this.#checkUpdate(ctx)),
      route('/v1/health/service/:service', ['GET'], ctx => this.#healthService(ctx)),
      route('/v1/status/leader', ['GET'], ctx => this.#json(ctx, '127.0.0.1:8300'))
    ]
  }

  async #dispatch (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET'
    const url = new URL(req.url ?? '/', 'http://consul')
    const route = this.#routes.find(r => r.exact ? url.pathname === r.pattern : url.pathname.startsWith(r.prefix))
    const key = `${method} ${route?.pattern ?? url.pathname}`
    this.#counts.set(key, (this.#counts.get(key) ?? 0) + 1)

    const failure = this.#failures.findIndex(f => f.route === undefined || f.route === key)
    if (failure !== -1) {
      const [f] = this.#failures.splice(failure, 1)
      if (f !== undefined) { this.#text(res, f.status, f.body); return }
    }
    if (route === undefined) {
      // HTTPHandlers.Index: not wrapped, so none of the common headers
      this.#text(res, 404, url.pathname.includes('/v1/')
        ? 'Invalid URL path: not a recognized HTTP API endpoint\n'
        : "Invalid URL path: if attempting to use the HTTP API, ensure the path starts with '/v1/'\n")
      return
    }
    res.setHeader('Vary', 'Accept-Encoding')
    res.setHeader('X-Consul-Default-Acl-Policy', this.#token === undefined ? 'allow' : 'deny')
    if (method === 'OPTIONS') {
      res.setHeader('Allow', ['OPTIONS', ...route.methods].join(','))
      this.#send(res, 200, '')
      return
    }
    if (!route.methods.includes(method)) {
      res.setHeader('Allow', ['OPTIONS', ...route.methods].join(','))
      this.#text(res, 405, `method ${method} not allowed`)
      return
    }
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    let param: string
    try {
      param = decodeURIComponent(url.pathname.slice(route.prefix.length))
    } catch {
      this.#text(res, 400, '400 Bad Request')
      return
    }
    const ctx: Ctx = { req, res, query: url.searchParams, param, body: Buffer.concat(chunks).toString(), token: tokenOf(req, url.searchParams) }
    try {
      await route.handle(ctx)
    } catch (err) {
      if (err instanceof HttpError) this.#text(res, err.status, err.message)
      else this.#text(res, 500, (err as Error).message)
    }
  }

  // GET /v1/agent/services
  #agentServices (ctx: Ctx): void {
    const auth = this.#auth(ctx)
    const out: Record<string, unknown> = {}
    if (auth !== 'anonymous') {
      for (const id of [...this.#services.keys()].sort()) out[id] = this.#agentServiceJson(this.#services.get(id) as ServiceRecord)
    }
    this.#json(ctx, out)
  }

  // GET /v1/agent/checks
  #agentChecks (ctx: Ctx): void {
    const auth = this.#auth(ctx)
    const out: Record<string, unknown> = {}
    if (auth !== 'anonymous') {
      for (const id of [...this.#checks.keys()].sort()) out[id] = this.#checkJson((this.#checks.get(id) as LocalCheck).rec, 0, 0)
    }
    this.#json(ctx, out)
  }

  // PUT /v1/agent/service/register (AgentRegisterService)
  #register (ctx: Ctx): void {
    let def: ServiceDef
    try {
      def = decodeServiceDefinition(ctx.body)
    } catch (err) {
      if (err instanceof DecodeError) throw new HttpError(400, `Request decode failed: ${err.message}`)
      throw err
    }
    if (def.Name === '') throw new HttpError(400, 'Missing service name')
    if (['0.0.0.0', '::', '[::]'].includes(def.Address)) throw new HttpError(400, 'Invalid service address')
    const auth = this.#auth(ctx)
    if (def.Weights !== null) {
      const why = validateWeights(def.Weights)
      if (why !== undefined) throw new HttpError(400, `Invalid Weights: ${why}`)
    }
    const metaError = validateMeta(def.Meta)
    if (metaError !== undefined) throw new HttpError(400, `Invalid Service Meta: ${metaError}`)
    if (def.Kind !== '' || def.Proxy !== undefined || (def.Connect !== undefined && Object.keys(def.Connect as object).length > 0)) {
      throw new HttpError(400, 'Consul double: Kind, Proxy and Connect are not implemented')
    }
    for (const type of [...(def.Check.empty ? [] : [def.Check]), ...def.Checks]) {
      const why = validateCheckType(type)
      if (why !== undefined) throw new HttpError(400, `Invalid check: ${why}`)
    }
    for (const type of [def.Check, ...def.Checks]) {
      if (type.Status !== '' && !['passing', 'warning', 'critical'].includes(type.Status)) {
        throw new HttpError(400, "Status for checks must 'passing', 'warning', 'critical'")
      }
    }
    if (auth === 'anonymous') {
      throw this.#denied('service', 'write', def.Name)
    }
    const replace = ctx.query.has('replace-existing-checks') && ['', 'true'].includes(ctx.query.get('replace-existing-checks') ?? '')
    this.#addService(def, replace)
    this.#sync()
    this.#send(ctx.res, 200, '')
  }

  // PUT /v1/agent/service/deregister/:service_id
  #deregister (ctx: Ctx): void {
    const auth = this.#auth(ctx)
    this.#vetServiceUpdate(auth, ctx.param)
    this.#removeService(ctx.param)
    this.#sync()
    this.#send(ctx.res, 200, '')
  }

  // PUT /v1/agent/service/maintenance/:service_id (AgentServiceMaintenance)
  #maintenance (ctx: Ctx): void {
    if (ctx.param === '') throw new HttpError(400, 'Missing service ID')
    if (!ctx.query.has('enable')) throw new HttpError(400, 'Missing value for enable')
    const raw = ctx.query.get('enable') ?? ''
    const enable = parseGoBool(raw)
    if (enable === undefined) throw new HttpError(400, `Invalid value for enable: ${goQuote(raw)}`)
    const auth = this.#auth(ctx)
    const service = this.#vetServiceUpdate(auth, ctx.param)
    const checkId = `${SERVICE_MAINT_PREFIX}${service.ID}`
    if (enable && !this.#checks.has(checkId)) {
      const reason = ctx.query.get('reason') ?? ''
      this.#checks.set(checkId, {
        rec: {
          Node: this.#nodeName,
          CheckID: checkId,
          Name: 'Service Maintenance Mode',
          Status: 'critical',
          Notes: reason === '' ? DEFAULT_SERVICE_MAINT_REASON : reason,
          Output: '',
          ServiceID: service.ID,
          ServiceName: service.Service,
          ServiceTags: service.Tags,
          Type: 'maintenance',
          Interval: '',
          Timeout: ''
        },
        catalogOutput: '',
        criticalSince: undefined,
        deferTimer: undefined,
        reapAfter: 0,
        runner: undefined,
        ttl: undefined
      })
    } else if (!enable) {
      this.#removeCheck(checkId)
    }
    this.#sync()
    this.#send(ctx.res, 200, '')
  }

  // Agent.updateTTLCheck, after vetting
  #setTtl (ctx: Ctx, status: CheckStatus, output: string): void {
    const check = this.#vetCheckUpdate(this.#auth(ctx), ctx.param)
    if (check.ttl === undefined) throw new HttpError(500, `CheckID ${goQuote(ctx.param)} does not have associated TTL`)
    const stored = check.ttl.set(output, DEFAULT_OUTPUT_MAX_SIZE)
    this.#updateCheck(ctx.param, status, stored)
    this.#send(ctx.res, 200, '')
  }

  // PUT /v1/agent/check/pass|warn|fail/:check_id?note=
  #ttlUpdate (ctx: Ctx, status: CheckStatus, note: string): void {
    this.#setTtl(ctx, status, note)
  }

  // PUT /v1/agent/check/update/:check_id {"Status", "Output"}
  #checkUpdate (ctx: Ctx): void {
    let raw: unknown
    try {
      raw = ctx.body.trim() === '' ? undefined : JSON.parse(ctx.body)
    } catch {
      throw new HttpError(400, 'Request decode failed: invalid character looking for beginning of value')
    }
    if (raw === undefined) throw new HttpError(400, 'Request decode failed: EOF')
    let fields: Map<string, unknown>
    try {
      fields = decodeFields((raw ?? {}) as Record<string, unknown>, { Status: 'string', Output: 'string' })
    } catch (err) {
      throw new HttpError(400, `Request decode failed: ${(err as Error).message}`)
    }
    const status = (fields.get('Status') as string | undefined) ?? ''
    if (!['passing', 'warning', 'critical'].includes(status)) throw new HttpError(400, `Invalid check status: '${status}'`)
    let output = (fields.get('Output') as string | undefined) ?? ''
    if (output.length > DEFAULT_OUTPUT_MAX_SIZE) {
      output = `${output.slice(0, DEFAULT_OUTPUT_MAX_SIZE)} ... (captured ${DEFAULT_OUTPUT_MAX_SIZE} of ${output.length} bytes)`
    }
    this.#setTtl(ctx, status as CheckStatus, output)
  }

  // GET /v1/health/service/:service (healthServiceNodes; blocking via the streaming view for index > 0)
  async #healthService (ctx: Ctx): Promise<void> {
    const q = ctx.query
    for (const unsupported of ['filter', 'near', 'node-meta']) {
      if (q.has(unsupported)) throw new HttpError(400, `Consul double: ?${unsupported} is not implemented`)
    }
    const stale = q.has('stale')
    if (stale && q.has('consistent')) throw new HttpError(400, 'Cannot specify ?stale with ?consistent, conflicting semantics.')
    let waitMs = 0
    const wait = q.get('wait') ?? ''
    if (wait !== '') {
      try { waitMs = parseGoDuration(wait) } catch { throw new HttpError(400, 'Invalid wait time') }
    }
    let minIndex = 0
    const index = q.get('index') ?? ''
    if (index !== '') {
      if (!/^\d+$/.test(index) || BigInt(index) > 18446744073709551615n) throw new HttpError(400, 'Invalid index')
      minIndex = Number(index)
    }
    const tags = q.has('tag') ? q.getAll('tag') : []
    const name = ctx.param
    if (name === '') throw new HttpError(400, 'Missing service name')
    const dc = q.get('dc') ?? ''
    if (dc !== '' && dc !== this.#dc) throw new HttpError(500, 'No path to datacenter')
    const auth = this.#auth(ctx)

    if (minIndex > 0 && this.#serviceIndex(name) <= minIndex) {
      const max = waitMs > MAX_QUERY_TIME_MS ? MAX_QUERY_TIME_MS : waitMs <= 0 ? DEFAULT_QUERY_TIME_MS : waitMs
      const budget = max + this.#random() * (max / JITTER_FRACTION)
      await new Promise<void>(resolve => {
        const waiter: Waiter = {
          name,
          minIndex,
          done: () => {
            clearTimeout(timer)
            ctx.res.off('close', waiter.done)
            this.#waiters.delete(waiter)
            resolve()
          }
        }
        const timer = setTimeout(waiter.done, budget)
        ctx.res.on('close', waiter.done)
        this.#waiters.add(waiter)
      })
      if (ctx.res.destroyed) return
    }

    let nodes: Array<Record<string, unknown>> = []
    if (auth !== 'anonymous') {
      const entries = [...this.#catalogServices.values()]
        .filter(e => e.rec.Service === name)
        .filter(e => tags.every(tag => (e.rec.Tags ?? []).some(t => t.toLowerCase() === tag.toLowerCase())))
        .sort((a, b) => a.rec.ID < b.rec.ID ? -1 : a.rec.ID > b.rec.ID ? 1 : 0)
      nodes = entries.map(entry => ({
        Node: this.#nodeJson(),
        Service: this.#nodeServiceJson(entry),
        Checks: [
          this.#serfHealthJson(),
          ...[...this.#catalogChecks.values()]
            .filter(c => c.rec.ServiceID === entry.rec.ID)
            .sort((a, b) => a.rec.CheckID < b.rec.CheckID ? -1 : 1)
            .map(c => this.#checkJson(c.rec, c.createIndex, c.modifyIndex))
        ]
      }))
    }
    const res = ctx.res
    res.setHeader('X-Consul-Effective-Consistency', stale ? 'stale' : q.has('consistent') ? 'consistent' : 'leader')
    res.setHeader('X-Consul-Index', String(Math.max(1, this.#serviceIndex(name))))
    res.setHeader('X-Consul-Knownleader', 'true')
    res.setHeader('X-Consul-Lastcontact', '0')
    res.setHeader('X-Consul-Query-Backend', minIndex > 0 ? 'streaming' : 'blocking-query')

    let passing = false
    if (q.has('passing')) {
      const raw = q.get('passing') ?? ''
      const parsed = raw === '' ? true : parseGoBool(raw)
      if (parsed === undefined) throw new HttpError(400, 'Invalid value for ?passing')
      passing = parsed
    }
    if (passing) nodes = filterNonPassing(nodes)
    this.#json(ctx, nodes)
  }
}

/** ?token=, then X-Consul-Token, then `Authorization: Bearer <token>` (parseTokenInternal). */
function tokenOf (req: IncomingMessage, query: URLSearchParams): string {
  const fromQuery = query.get('token') ?? ''
  if (fromQuery !== '') return fromQuery
  const header = req.headers['x-consul-token']
  const fromHeader = Array.isArray(header) ? header[0] ?? '' : header ?? ''
  if (fromHeader !== '') return fromHeader
  const auth = req.headers.authorization ?? ''
  const parts = auth.split(' ')
  if (parts.length > 1 && (parts[0] ?? '').toLowerCase() === 'bearer') {
    return parts.slice(1).join(' ').trim().split(' ')[0]?.trim() ?? ''
  }
  return ''
}

// structs.HealthCheck.IsSame: Type, Interval and Timeout are not compared, so changing only those is no write.
function isSameCheck (a: CheckRecord, b: CheckRecord): boolean {
  return a.Node.toLowerCase() === b.Node.toLowerCase() && a.CheckID === b.CheckID && a.Name === b.Name &&
    a.Status === b.Status && a.Notes === b.Notes && a.Output === b.Output && a.ServiceID === b.ServiceID &&
    a.ServiceName === b.ServiceName && stable(a.ServiceTags) === stable(b.ServiceTags)
}

// agent/health_endpoint.go filterNonPassing, order-changing swap included
function filterNonPassing (nodes: Array<Record<string, unknown>>): Array<Record<string, unknown>> {
  const out = [...nodes]
  let n = out.length
  for (let i = 0; i < n; i++) {
    const checks = (out[i] as { Checks: Array<{ Status: string }> }).Checks
    if (checks.some(c => c.Status !== 'passing')) {
      out[i] = out[n - 1] as Record<string, unknown>
      n--
      i--
    }
  }
  return out.slice(0, n)
}

/** Starts the double on 127.0.0.1, port 0. Call `close()` when done (in `t.teardown`). */
export async function startConsulDouble (options: ConsulDoubleOptions = {}): Promise<ConsulDouble> {
  const double = new ConsulDoubleServer(options)
  await double.listen(0)
  return double
}
