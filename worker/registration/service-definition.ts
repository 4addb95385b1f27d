/**
 * What a worker puts in the Consul catalog, as pure functions: its settings (validated once, before anything
 * listens), its service ID, the tags that name its ready models and the meta that carries its ports and labels.
 * The gateway's discovery (gateway/discovery/) reads the same shapes back through common/consul.ts's constants.
 */
import { createHash } from 'node:crypto'
import { isIP } from 'node:net'
import { hostname, networkInterfaces, type NetworkInterfaceInfo } from 'node:os'
import {
  DEFAULT_CONSUL_SERVICE, LABEL_KEY, META_GRPC_PORT, META_LABEL_PREFIX, META_METRICS_PORT, MODEL_TAG_PREFIX,
  parseConsulAddress, type ConsulAddress
} from '../../common/consul.ts'
import { createError } from '../../common/errors.ts'

export const DEFAULT_CHECK_INTERVAL_MS = 2000
/** Consul's own floor on DeregisterCriticalServiceAfter (check_deregister_interval_min). */
export const DEFAULT_DEREGISTER_AFTER_MS = 60_000

/**
 * The gateway names an endpoint after its service ID and holds endpoint names to this rule (as it does the fleet
 * file's server names), so every ID a worker makes must pass it.
 */
export const SERVICE_ID = Object.freeze({ regex: /^[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$/, maxLength: 63 })

/** A service name that is also a DNS label part (Consul warns of names it cannot serve over DNS). */
const SERVICE_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/
const HOST_NAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/
const UNSPECIFIED = new Set(['0.0.0.0', '::', '0:0:0:0:0:0:0:0', ''])
/** Consul's limits on service meta: 64 pairs, values up to 512 characters; two pairs are the ports. */
const MAX_LABELS = 62
const MAX_META_VALUE = 512

/** How a worker registers itself in Consul (`WorkerOptions.consul`). */
export interface WorkerConsulOptions {
  /** The agent: `host:port`, `http://host:port` or `https://host:port`, as `CONSUL_HTTP_ADDR` takes it. */
  address: string
  /** The service name gateways watch (default {@link DEFAULT_CONSUL_SERVICE}). */
  service?: string
  /** The ACL token sent with every call; never logged. */
  token?: string
  /**
   * The address put in the catalog, which gateways and Consul's check connect to. Default: the bind host, or for a
   * wildcard bind (0.0.0.0, ::) this machine's first non-internal IPv4 address, else its host name.
   */
  advertiseHost?: string
  /** Free-form labels (zone, gpu, ...), as service meta `label_<key>`; keys per LABEL_KEY. */
  labels?: Readonly<Record<string, string>>
  /**
   * Tags added to the model tags (a pool, a zone), which a gateway can watch alone (`discovery.consul.tag`); none
   * may start with `model=`, which names models.
   */
  tags?: readonly string[]
  /** How often Consul checks `/v2/health/ready` (default 2000 ms; Consul floors it at 1 s). */
  checkIntervalMs?: number
  /** How long the check may stay critical before Consul drops the service (default 60 000 ms, Consul's floor). */
  deregisterAfterMs?: number
}

/** {@link WorkerConsulOptions}, validated and with every default filled in. */
export interface RegistrationSettings {
  readonly address: ConsulAddress
  readonly service: string
  readonly token: string | undefined
  readonly advertiseHost: string
  readonly labels: Readonly<Record<string, string>>
  readonly tags: readonly string[]
  readonly checkIntervalMs: number
  readonly deregisterAfterMs: number
}

/** Where the default advertise host comes from; injected in tests. */
export interface HostInfo {
  networkInterfaces (): NodeJS.Dict<NetworkInterfaceInfo[]>
  hostname (): string
}

const OS_HOST_INFO: HostInfo = { networkInterfaces, hostname }

const configError = (message: string): Error => createError('FLT_ERR_CONSUL_CONFIG', message)

/**
 * Validates and completes the options, so that a worker refuses a setting that cannot work before it loads a
 * model or binds a port.
 *
 * @throws FlotillaError `FLT_ERR_CONSUL_CONFIG` naming the bad value
 */
export function registrationSettings (options: WorkerConsulOptions, bindHost: string, host: HostInfo = OS_HOST_INFO): RegistrationSettings {
  const positive = (name: string, value: number | undefined, fallback: number): number => {
    if (value === undefined) return fallback
    if (!Number.isInteger(value) || value <= 0) throw configError(`${name} must be a positive whole number of milliseconds, got ${value}`)
    return value
  }
  const address = parseConsulAddress(options.address)
  return Object.freeze({
    address,
    service: checkServiceName(options.service ?? DEFAULT_CONSUL_SERVICE),
    token: options.token === '' ? undefined : options.token,
    advertiseHost: options.advertiseHost === undefined ? defaultAdvertiseHost(bindHost, host) : checkAdvertiseHost(options.advertiseHost),
    labels: Object.freeze(checkLabels(options.labels ?? {})),
    tags: Object.freeze(checkTags(options.tags ?? [])),
    checkIntervalMs: positive('the Consul check interval', options.checkIntervalMs, DEFAULT_CHECK_INTERVAL_MS),
    deregisterAfterMs: positive('the Consul deregister-after time', options.deregisterAfterMs, DEFAULT_DEREGISTER_AFTER_MS)
  })
}

/**
 * Extra tags: 1 to 255 printable ASCII characters without spaces, each once, none naming a model.
 *
 * @throws FlotillaError `FLT_ERR_CONSUL_CONFIG`
 */
export function checkTags (tags: readonly string[], what = 'tag'): string[] {
  const seen = new Set<string>()
  for (const tag of tags) {
    if (!/^[!-~]{1,255}$/.test(tag)) throw configError(`${what} '${tag}' must be 1 to 255 printable ASCII characters without spaces`)
    if (tag.startsWith(MODEL_TAG_PREFIX)) throw configError(`${what} '${tag}' starts with '${MODEL_TAG_PREFIX}', which names the models a worker serves; the worker adds those itself`)
    if (seen.has(tag)) throw configError(`${what} '${tag}' is given twice`)
    seen.add(tag)
  }
  return [...seen]
}

/** @throws FlotillaError `FLT_ERR_CONSUL_CONFIG` */
export function checkServiceName (name: string): string {
  if (!SERVICE_NAME.test(name)) {
    throw configError(`'${name}' is not a Consul service name: 1 to 63 ASCII letters, digits, _ and -, starting with a letter or digit`)
  }
  return name
}

/** An address other machines can connect to: an IP address or a host name (IPv6 may come bracketed). */
export function checkAdvertiseHost (text: string): string {
  const host = /^\[.*\]$/.test(text) ? text.slice(1, -1) : text
  if (UNSPECIFIED.has(host)) throw configError(`'${text}' is a wildcard, not an address a gateway can connect to; name this machine's address`)
  if (isIP(host) === 0 && !HOST_NAME.test(host)) throw configError(`'${text}' is neither an IP address nor a host name`)
  return host
}

/**
 * The bind host, unless it is a wildcard: then the first non-internal IPv4 address (what a gateway on another
 * machine most likely reaches), else the host name.
 */
export function defaultAdvertiseHost (bindHost: string, host: HostInfo = OS_HOST_INFO): string {
  const bare = /^\[.*\]$/.test(bindHost) ? bindHost.slice(1, -1) : bindHost
  if (!UNSPECIFIED.has(bare)) return bare
  for (const addresses of Object.values(host.networkInterfaces())) {
    // Node 18.0-18.3 said 4 instead of 'IPv4'.
    const found = addresses?.find(a => !a.internal && (a.family === 'IPv4' || (a.family as unknown) === 4))
    if (found !== undefined) return found.address
  }
  return host.hostname()
}

/**
 * `key=value` items (the repeatable `--label`) as a record; a key given twice is refused. Errors call a label
 * `what` (the flag, from the CLI).
 */
export function parseLabels (items: readonly string[], what = 'label'): Record<string, string> {
  const labels: Record<string, string> = {}
  for (const item of items) {
    const eq = item.indexOf('=')
    if (eq === -1) throw configError(`${what} '${item}' is not key=value`)
    const key = item.slice(0, eq)
    if (Object.hasOwn(labels, key)) throw configError(`${what} key '${key}' is given twice`)
    labels[key] = item.slice(eq + 1)
  }
  return checkLabels(labels, what)
}

function checkLabels (labels: Readonly<Record<string, string>>, what = 'label'): Record<string, string> {
  const entries = Object.entries(labels)
  if (entries.length > MAX_LABELS) throw configError(`${entries.length} of ${what}: at most ${MAX_LABELS} fit in Consul's service meta`)
  for (const [key, value] of entries) {
    if (!LABEL_KEY.regex.test(key)) throw configError(`${what} key '${key}': ${LABEL_KEY.text}`)
    if (value.length > MAX_META_VALUE) throw configError(`${what} '${key}' is longer than ${MAX_META_VALUE} characters (Consul's limit on a meta value)`)
  }
  return { ...labels }
}

/**
 * The service ID: stable for one worker address (the same worker restarted replaces its own entry, never adds a
 * second), `<service>-<host>-<port>` made to fit {@link SERVICE_ID}. One too long keeps its start and its port,
 * with a hash of the whole in between, so that two long host names still give two IDs.
 */
export function serviceId (service: string, advertiseHost: string, httpPort: number): string {
  const id = `${service}-${advertiseHost}-${httpPort}`.replace(/[^A-Za-z0-9._:-]/g, '-').replace(/^[^A-Za-z0-9]+/, '')
  if (id.length <= SERVICE_ID.maxLength) return id
  const tail = `-${createHash('sha256').update(id).digest('hex').slice(0, 8)}-${httpPort}`
  return id.slice(0, SERVICE_ID.maxLength - tail.length) + tail
}

/**
 * The tags for the ready models: `model=<name>` and `model=<name>:<version>` for each READY version (entries as
 * `repository.index(true)` lists them), sorted and without duplicates, so that equal sets compare equal.
 */
export function modelTags (ready: Iterable<{ name: string, version?: string | undefined }>): string[] {
  const tags = new Set<string>()
  for (const { name, version } of ready) {
    if (version === undefined) continue
    tags.add(`${MODEL_TAG_PREFIX}${name}`)
    tags.add(`${MODEL_TAG_PREFIX}${name}:${version}`)
  }
  return [...tags].sort()
}

/** The meta: the gRPC and metrics ports when those listeners are on (a port of -1 is off), and each label. */
export function serviceMeta (ports: { grpcPort: number, metricsPort: number }, labels: Readonly<Record<string, string>>): Record<string, string> {
  const meta: Record<string, string> = {}
  if (ports.grpcPort >= 0) meta[META_GRPC_PORT] = String(ports.grpcPort)
  if (ports.metricsPort >= 0) meta[META_METRICS_PORT] = String(ports.metricsPort)
  for (const [key, value] of Object.entries(labels)) meta[`${META_LABEL_PREFIX}${key}`] = value
  return meta
}
