/**
 * The fleet file: which inference servers exist, which models each serves, how traffic is balanced (for the whole
 * fleet and per model), how requests are retried, and the gateway's own listeners and limits. The seed format
 * (`model_repository`, `inference_servers[] {name, host, port, models}`, `load_balancer {type, servers}`) loads
 * unchanged; everything else is an optional extension:
 *
 * - `inference_servers[]`: `weight`, `protocol`, `labels`, `versions`, `max_in_flight`
 * - `load_balancer`: `panic_threshold_percent`, `options` (strategy tuning), `hash_header` (consistent_hash only)
 * - `models.<name>`: a per-model `load_balancer`, `request_timeout_ms`, `max_retries` and `per_try_timeout_ms`
 * - `retries`, `health_check`, `outlier_detection`, `gateway`, `cache`: sections with every key defaulted
 * - `discovery.consul`: servers found in Consul (see `gateway/discovery/`); with it, `inference_servers` may be
 *   empty or absent
 *
 * Absent sections and keys are filled in with their defaults, except the few whose absence means something
 * (`versions`: every version; `max_in_flight`: the gateway-wide cap; `options`, `hash_header`: the strategy's own
 * defaults; `servers`: every server), which stay absent.
 *
 * The schema below is the single definition of the format: the TypeScript types are derived from it. The file is
 * validated once, here, and every problem found is reported at once, each with `file:line:col` and the key path, so
 * a broken fleet file is fixed in one round. Past this point the gateway trusts the config (design: "validate at
 * the boundary"), which is why the result is normalised (defaults filled in) and frozen.
 */
import { readFileSync } from 'node:fs'
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Node } from 'yaml'
import { DEFAULT_CONSUL_SERVICE, parseConsulAddress } from '../../common/consul.ts'
import { createError, wrapError } from '../../common/errors.ts'
import {
  DEFAULT_BODY_TIMEOUT_MS, DEFAULT_HEADER_COUNT_LIMIT, DEFAULT_HEADER_TIMEOUT_MS, DEFAULT_IDLE_TIMEOUT_MS
} from '../../common/http-server.ts'
import { DEFAULT_ADMIN_HOST, DEFAULT_ADMIN_PORT, DEFAULT_DRAIN_TIMEOUT_MS, SERVER_NAME_RULE } from '../admin/api.ts'
import { type BalancerOptions } from '../balancer/types.ts'
import { DEFAULT_AUTO_ROLLBACK } from '../canary/canary.ts'
import {
  INVALID, SchemaContext, boolean, formatProblem, integer, list, mapOf, number, object, oneOf, optional, required,
  string, stringMap, withDefault, type Infer
} from './yaml-schema.ts'

export const DEFAULT_GATEWAY_HOST = '127.0.0.1'
export const DEFAULT_HTTP_PORT = 8000
export const DEFAULT_METRICS_PORT = 8002
/** Triton's gRPC port: the gateway serves `inference.GRPCInferenceService` there. */
export const DEFAULT_GRPC_PORT = 8001
/** 64 MiB: room for a batch of large image tensors in JSON, while still bounding what one request can pin. */
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000
/** 16 KiB, Node's own `--max-http-header-size` default: enough for bearer tokens and tracing headers. */
export const DEFAULT_MAX_HEADER_BYTES = 16 * 1024
/** 0: no cap on the requests in flight to one server unless the file sets one. */
export const DEFAULT_MAX_IN_FLIGHT_PER_SERVER = 0
/** Requests allowed to wait for a server under its cap; 0 turns the queue off (503 at once when all are full). */
export const DEFAULT_MAX_QUEUED_REQUESTS = 1024
/** How long a queued request waits for a free slot before it is answered 503. */
export const DEFAULT_QUEUE_TIMEOUT_MS = 5000
/** How long SIGTERM waits for requests in flight before the gateway exits anyway. */
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = 30_000
/** 0: an endpoint that becomes healthy takes its full weight at once (HAProxy's default; set to ramp it up). */
export const DEFAULT_SLOW_START_MS = 0
export const DEFAULT_SERVER_WEIGHT = 1
export const MAX_SERVER_WEIGHT = 1000
/** `gateway.ready_when`: what must be servable for `/v2/health/ready` to say 200 (see `server/readiness.ts`). */
export const READY_WHEN = ['every_model', 'any_model'] as const
export type ReadyWhen = typeof READY_WHEN[number]
/** The `gateway` section when the file has none. */
export const DEFAULT_GATEWAY_SETTINGS = Object.freeze({
  host: DEFAULT_GATEWAY_HOST,
  http_port: DEFAULT_HTTP_PORT,
  grpc_port: DEFAULT_GRPC_PORT,
  metrics_port: DEFAULT_METRICS_PORT,
  max_body_bytes: DEFAULT_MAX_BODY_BYTES,
  request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
  max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
  max_header_count: DEFAULT_HEADER_COUNT_LIMIT,
  header_timeout_ms: DEFAULT_HEADER_TIMEOUT_MS,
  body_timeout_ms: DEFAULT_BODY_TIMEOUT_MS,
  idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
  ready_when: 'every_model' as ReadyWhen,
  max_in_flight_per_server: DEFAULT_MAX_IN_FLIGHT_PER_SERVER,
  max_queued_requests: DEFAULT_MAX_QUEUED_REQUESTS,
  queue_timeout_ms: DEFAULT_QUEUE_TIMEOUT_MS,
  admin_host: DEFAULT_ADMIN_HOST,
  admin_port: DEFAULT_ADMIN_PORT,
  shutdown_timeout_ms: DEFAULT_SHUTDOWN_TIMEOUT_MS,
  drain_timeout_ms: DEFAULT_DRAIN_TIMEOUT_MS,
  slow_start_ms: DEFAULT_SLOW_START_MS,
  watch: true
})
/**
 * The `retries` section when the file has none. The budget follows Envoy's retry budget (`budget_percent` 20,
 * `min_retry_concurrency` 3): retries may add at most that share of the requests in flight, but a quiet gateway may
 * always retry a few, so a brown-out is not made worse by a retry storm. The backoff is Envoy's (25 ms base, 10x cap),
 * with jitter applied by the consumer.
 */
export const DEFAULT_RETRY_SETTINGS = Object.freeze({
  max_retries: 2,
  budget_percent: 20,
  min_concurrent: 3,
  backoff_base_ms: 25,
  backoff_max_ms: 250,
  per_try_timeout: Object.freeze({
    p99_multiple: 5,
    min_ms: 1000,
    max_ms: 30_000,
    window_ms: 30_000,
    min_samples: 20
  })
})
/** A canary's `auto_rollback` when it sets none: {@link DEFAULT_AUTO_ROLLBACK} (see `canary/canary.ts`), as YAML spells it. */
export const DEFAULT_AUTO_ROLLBACK_SETTINGS = Object.freeze({
  enabled: DEFAULT_AUTO_ROLLBACK.enabled,
  window_ms: DEFAULT_AUTO_ROLLBACK.windowMs,
  min_requests: DEFAULT_AUTO_ROLLBACK.minRequests,
  error_rate_factor: DEFAULT_AUTO_ROLLBACK.errorRateFactor,
  min_error_rate: DEFAULT_AUTO_ROLLBACK.minErrorRate,
  p99_factor: DEFAULT_AUTO_ROLLBACK.p99Factor,
  min_p99_increase_ms: DEFAULT_AUTO_ROLLBACK.minP99IncreaseMs
})
/** The `health_check` section when the file has none: HAProxy's defaults (inter 2 s, rise 2, fall 3), 1 s timeout. */
export const DEFAULT_HEALTH_CHECK_SETTINGS = Object.freeze({
  enabled: true,
  interval_ms: 2000,
  timeout_ms: 1000,
  jitter_percent: 10,
  healthy_threshold: 2,
  unhealthy_threshold: 3
})
/** The `outlier_detection` section when the file has none: Envoy's consecutive-5xx defaults. */
export const DEFAULT_OUTLIER_DETECTION_SETTINGS = Object.freeze({
  enabled: true,
  consecutive_failures: 5,
  base_ejection_time_ms: 30_000,
  max_ejection_time_ms: 300_000,
  max_ejection_percent: 10
})
/**
 * The `cache` section when the file has none (`gateway/cache/`): which models are cached comes from each model's
 * `response_cache` in its config.pbtxt unless `cache.models` says otherwise; the budget is the local LRU's.
 */
export const DEFAULT_CACHE_SETTINGS = Object.freeze({
  // 256 MiB: thousands of typical answers; an answer larger than max_entry_bytes is never stored.
  max_bytes: 256 * 1024 * 1024,
  max_entry_bytes: 1024 * 1024,
  // 0: an entry lives until evicted, purged, or its model's versions change.
  ttl_ms: 0,
  // Identical requests for a model that is not cached wait for the first one too (off: a model that samples would
  // give every client the same answer).
  coalesce: false,
  coalesce_timeout_ms: 5000
})
/** `cache.redis` defaults: a lookup that takes longer than this counts as a miss. */
export const DEFAULT_CACHE_REDIS_TIMEOUT_MS = 50
export const DEFAULT_CACHE_REDIS_KEY_PREFIX = 'flotilla:cache:'
/** Envoy's healthy_panic_threshold: below this share of usable endpoints, a model's traffic goes to all of them. */
export const DEFAULT_PANIC_THRESHOLD_PERCENT = 50
/**
 * How long a Consul blocking query waits for a change before answering anyway. Shorter than Consul's 5 minutes:
 * a connection to an agent whose host vanished without a reset is noticed within this (plus the request's margin).
 */
export const DEFAULT_DISCOVERY_WAIT = '60s'
/** setTimeout clamps longer delays to 1 ms, so a larger timeout would silently become "fire at once". */
const MAX_TIMER_MS = 2 ** 31 - 1
/** Buffers above this size are not possible on every platform Node supports. */
const MAX_BODY_LIMIT = 2 ** 31 - 1
/** More retries than this only multiply load on a fleet that is already failing. */
const MAX_RETRIES = 10
/** A retry that waits longer than a minute has outlived any caller still waiting for it. */
const MAX_BACKOFF_MS = 60_000
/** Caps on counts of requests; far above what one gateway process can hold, so only typos are refused. */
const MAX_REQUEST_COUNT = 1_000_000
/** The strategy names (with the registry's kebab-case alias) that hash a request key, so `hash_header` means something. */
const HASH_STRATEGIES: readonly string[] = ['consistent_hash', 'consistent-hash']

/** What {@link parseFleetConfig} and {@link loadFleetFile} need from the rest of the gateway. */
export interface FleetConfigOptions {
  /** Whether `load_balancer.type` names a registered balancing strategy (see `gateway/balancer/registry.ts`). */
  isKnownStrategy (name: string): boolean
  /** The registered strategy names, listed in the message when `load_balancer.type` is unknown. */
  knownStrategies?: readonly string[]
  /**
   * The problems with a strategy's `options` that depend on the strategy, such as an option it does not take (the
   * gateway passes `validateBalancerOptions` from `gateway/balancer/registry.ts`). Called once per `options`
   * mapping whose values and `type` are valid, with the options in camelCase ({@link toBalancerOptions}); each
   * message is reported at that `options` mapping. Left out, only the values' own ranges are checked.
   *
   * @param type the strategy name as written (a known strategy or alias)
   * @param options the options, camelCase, as {@link BalancerOptions}
   * @returns one message per problem; empty when the options fit the strategy
   */
  strategyOptionProblems?(type: string, options: Record<string, unknown>): string[]
}

/** Options for {@link parseFleetConfig}. */
export interface ParseFleetConfigOptions extends FleetConfigOptions {
  /** The file name that messages start with. */
  file: string
}

/** A `redis://` or `rediss://` URL; a password in it belongs in the environment instead, but is not refused. */
function redisUrlCheck (value: string): string | undefined {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return `'${value}' is not a URL (expected redis://host:port)`
  }
  return url.protocol === 'redis:' || url.protocol === 'rediss:' ? undefined : `'${value}' is not a redis:// or rediss:// URL`
}

function consulAddressCheck (value: string): string | undefined {
  try {
    parseConsulAddress(value)
    return undefined
  } catch (err) {
    return (err as Error).message
  }
}

/** Consul's duration syntax as a blocking query's `wait` takes it, whole units only (`90s`, `5m`, `500ms`). */
const CONSUL_WAIT = /^(\d+)(ms|s|m)$/
/** Consul caps a blocking query's wait at 10 minutes. */
const MAX_CONSUL_WAIT_MS = 600_000

function consulWaitCheck (value: string): string | undefined {
  const ms = consulWaitMs(value)
  if (ms === undefined) return `'${value}' is not a Consul wait: write a whole number of ms, s or m ('60s', '5m')`
  if (ms < 1000 || ms > MAX_CONSUL_WAIT_MS) return `'${value}' is out of range: a Consul wait is 1s to 10m`
  return undefined
}

/** A `discovery.consul.wait` value in milliseconds; `undefined` when it is not one. */
export function consulWaitMs (value: string): number | undefined {
  const m = CONSUL_WAIT.exec(value)
  if (m === null) return undefined
  return Number(m[1]) * (m[2] === 'ms' ? 1 : m[2] === 's' ? 1000 : 60_000)
}

function hostCheck (value: string): string | undefined {
  if (/[\s/[\]]/.test(value)) {
    return `'${value}' must be a host name or IP address alone: no scheme, path, spaces or brackets (write IPv6 addresses bare)`
  }
  return undefined
}

// Server names are admin URL path segments, metric label values, log fields and the x-flotilla-endpoint header; the
// rule and its reasons are in admin/api.ts, shared with the admin API so both refuse the same names.
const SERVER_NAME = { regex: SERVER_NAME_RULE.regex, hint: SERVER_NAME_RULE.text }

// A name as a browser sends it in Host: letters, digits, '-', '_' and inner dots, without a port (ports are not
// compared; see gateway/admin/admin-guard.ts). At most 253 characters, DNS's limit.
const ALLOWED_HOST = {
  regex: /^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$/,
  hint: 'give a host name as it appears in the admin URL (gateway.internal), without a scheme, port or path; ' +
    'IP addresses and localhost need no entry'
}

// A model name is one URL path segment (/v2/models/<name>/...), as in Triton, where it is a directory name.
const MODEL_NAME = { regex: /^[^/\s]+$/, hint: 'model names cannot contain slashes or whitespace' }

// Consul's rule for service and datacenter names that resolve in DNS: letters, digits and dashes.
const CONSUL_SERVICE_NAME = { regex: /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/, hint: 'a Consul service or datacenter name is letters, digits, - and _' }

// RFC 9110 section 5.1: a field name is a token. Anything else could never arrive on a request, so it is a typo.
const HEADER_NAME = {
  regex: /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/,
  hint: 'an HTTP header name is letters, digits and !#$%&\'*+-.^_`|~ only (no spaces or colons)'
}

/**
 * The YAML spelling of each {@link BalancerOptions} key. Keyed by the camelCase name so the compiler insists on an
 * entry for every option the balancers take.
 */
const YAML_OPTION_NAMES: { readonly [K in keyof BalancerOptions]-?: keyof StrategyOptionsConfig } = {
  hashBalanceFactor: 'hash_balance_factor',
  staleAfterMs: 'stale_after_ms',
  choices: 'choices'
}
const CAMEL_OPTION_NAME = new RegExp(`\\b(${Object.keys(YAML_OPTION_NAMES).join('|')})\\b`, 'g')

/**
 * `load_balancer.options` and `models.<name>.load_balancer.options`. Each strategy takes only some of these
 * (`FleetConfigOptions.strategyOptionProblems` says which); the ranges here are those of every strategy.
 */
const strategyOptions = object({
  // 0 turns bounded load off; below 1 would cap every endpoint under the average, which no ring can satisfy.
  hash_balance_factor: optional(number(1, Infinity, { alsoAllowed: [0] })),
  stale_after_ms: optional(integer(0, Number.MAX_SAFE_INTEGER)),
  // Past a few dozen samples, power-of-choices is a full least-request scan with extra steps.
  choices: optional(integer(2, 64))
})

/**
 * Converts a validated `options` mapping to what balancer factories take.
 *
 * @param options `load_balancer.options` or a model's, as normalised (snake_case); `undefined` when absent
 * @returns the same options in camelCase, frozen; `{}` for `undefined`
 */
export function toBalancerOptions (options: StrategyOptionsConfig | undefined): BalancerOptions {
  const out: Record<string, number> = {}
  for (const [camel, snake] of Object.entries(YAML_OPTION_NAMES)) {
    const value = options?.[snake]
    if (value !== undefined) out[camel] = value
  }
  return Object.freeze(out) as BalancerOptions
}

/**
 * The rules a balancer mapping has between its keys, for the fleet-wide one and each model's. Both need a valid
 * `type`: an unknown strategy is already reported, and cannot say which options or keys it takes.
 */
function balancerRules (options: FleetConfigOptions) {
  return (
    value: { readonly type?: string, readonly options?: StrategyOptionsConfig, readonly hash_header?: string },
    report: (key: 'options' | 'hash_header', message: string) => void,
    path: string
  ): void => {
    const type = value.type
    if (type === undefined) return
    if (value.hash_header !== undefined && !HASH_STRATEGIES.includes(type)) {
      report('hash_header', `${path}.hash_header applies only to consistent_hash, not to '${type}' ` +
        '(remove it, or set type: consistent_hash)')
    }
    if (value.options !== undefined && options.strategyOptionProblems !== undefined) {
      const problems = options.strategyOptionProblems(type, { ...toBalancerOptions(value.options) })
      // The balancers speak camelCase; the reader is editing YAML, so the option names are put back as written there.
      for (const problem of problems) {
        report('options', `${path}.options: ` +
          problem.replace(CAMEL_OPTION_NAME, (name) => YAML_OPTION_NAMES[name as keyof BalancerOptions]))
      }
    }
  }
}

/** One `inference_servers` entry; also what `POST /v1/endpoints` on the admin API is checked against. */
export const inferenceServerSpec = object({
  name: required(string({ pattern: SERVER_NAME })),
  host: required(string({ check: hostCheck })),
  port: required(integer(1, 65535)),
  // Absent: port + 1, Triton's layout (HTTP 8000, gRPC 8001); see grpcPortOf.
  grpc_port: optional(integer(1, 65535)),
  models: required(list(string({ pattern: MODEL_NAME }), { nonEmpty: 'a server must serve at least one model', unique: { what: 'model' } })),
  weight: withDefault(integer(0, MAX_SERVER_WEIGHT), DEFAULT_SERVER_WEIGHT),
  protocol: withDefault(oneOf(['http'], { grpc: 'gRPC upstreams come in a later release' }), 'http'),
  labels: withDefault(stringMap(), Object.freeze({})),
  versions: optional(list(integer(0, Number.MAX_SAFE_INTEGER), {
    nonEmpty: 'omit it to serve every version',
    unique: { what: 'version' }
  })),
  // Absent, not defaulted: the consumer falls back to gateway.max_in_flight_per_server, which may change on reload.
  max_in_flight: optional(integer(0, MAX_REQUEST_COUNT))
})

const headerName = string({ pattern: HEADER_NAME, normalize: (name) => name.toLowerCase() })

/**
 * One model's canary (`canary.<model>`, or the body of `PUT /v1/models/:model/canary`): the split by version or by
 * servers, the share, the header that forces the canary, the sticky header, and automatic rollback.
 */
export const canarySpec = object({
  baseline_version: optional(integer(0, Number.MAX_SAFE_INTEGER)),
  canary_version: optional(integer(0, Number.MAX_SAFE_INTEGER)),
  canary_servers: optional(list(string({ pattern: SERVER_NAME }), {
    nonEmpty: 'name the servers that make up the canary',
    unique: { what: 'server' }
  })),
  percent: required(number(0, 100)),
  force_header: optional(object({ name: required(headerName), value: required(string()) })),
  sticky_header: optional(headerName),
  auto_rollback: withDefault(object({
    enabled: withDefault(boolean(), DEFAULT_AUTO_ROLLBACK_SETTINGS.enabled),
    // Shorter than a few seconds, p99 rests on a handful of requests whatever min_requests says.
    window_ms: withDefault(integer(1000, MAX_TIMER_MS), DEFAULT_AUTO_ROLLBACK_SETTINGS.window_ms),
    min_requests: withDefault(integer(1, MAX_REQUEST_COUNT), DEFAULT_AUTO_ROLLBACK_SETTINGS.min_requests),
    error_rate_factor: withDefault(number(1, 1000), DEFAULT_AUTO_ROLLBACK_SETTINGS.error_rate_factor),
    min_error_rate: withDefault(number(0, 1), DEFAULT_AUTO_ROLLBACK_SETTINGS.min_error_rate),
    p99_factor: withDefault(number(1, 1000), DEFAULT_AUTO_ROLLBACK_SETTINGS.p99_factor),
    min_p99_increase_ms: withDefault(number(0, MAX_TIMER_MS), DEFAULT_AUTO_ROLLBACK_SETTINGS.min_p99_increase_ms)
  }), DEFAULT_AUTO_ROLLBACK_SETTINGS)
}, {
  check (value, report, path) {
    const versions = value.baseline_version !== undefined || value.canary_version !== undefined
    if (versions && value.canary_servers !== undefined) {
      report('canary_servers', `${path} splits by version or by servers, not both: remove canary_servers or the versions`)
    } else if (!versions && value.canary_servers === undefined) {
      report('percent', `${path} needs either baseline_version and canary_version, or canary_servers`)
    } else if (versions && (value.baseline_version === undefined || value.canary_version === undefined)) {
      report(value.baseline_version === undefined ? 'canary_version' : 'baseline_version',
        `${path} needs both baseline_version and canary_version to split by version`)
    } else if (versions && value.baseline_version === value.canary_version) {
      report('canary_version', `${path}.canary_version must differ from baseline_version (both are ${value.canary_version})`)
    }
  }
})

function fleetSchema (options: FleetConfigOptions) {
  const known = options.knownStrategies
  const strategy = string({
    check: (value) => options.isKnownStrategy(value)
      ? undefined
      : `'${value}' is not a known balancing strategy` + (known === undefined ? '' : ` (known: ${known.join(', ')})`)
  })

  const hashHeader = headerName
  const rules = { check: balancerRules(options) }

  const loadBalancer = object({
    type: required(strategy),
    panic_threshold_percent: withDefault(integer(0, 100), DEFAULT_PANIC_THRESHOLD_PERCENT),
    servers: optional(list(object({ name: required(string()) }), {
      nonEmpty: 'omit it to send traffic to every inference server',
      unique: { what: 'server', key: 'name' }
    })),
    options: optional(strategyOptions),
    hash_header: optional(hashHeader)
  }, rules)

  // A model's own strategy over the same servers: which servers take traffic and when to panic stay fleet-wide.
  const modelPolicy = object({
    load_balancer: optional(object({
      type: required(strategy),
      options: optional(strategyOptions),
      hash_header: optional(hashHeader)
    }, rules)),
    request_timeout_ms: optional(integer(1, MAX_TIMER_MS)),
    max_retries: optional(integer(0, MAX_RETRIES)),
    // 0: no per-try limit for this model.
    per_try_timeout_ms: optional(integer(0, MAX_TIMER_MS))
  })

  const perTry = DEFAULT_RETRY_SETTINGS.per_try_timeout
  const perTryTimeout = object({
    // Below 1x a p99, one request in a hundred would be retried for no fault of the server.
    p99_multiple: withDefault(number(1, 1000), perTry.p99_multiple),
    min_ms: withDefault(integer(1, MAX_TIMER_MS), perTry.min_ms),
    max_ms: withDefault(integer(1, MAX_TIMER_MS), perTry.max_ms),
    window_ms: withDefault(integer(100, MAX_TIMER_MS), perTry.window_ms),
    min_samples: withDefault(integer(1, MAX_REQUEST_COUNT), perTry.min_samples)
  })

  const retries = object({
    max_retries: withDefault(integer(0, MAX_RETRIES), DEFAULT_RETRY_SETTINGS.max_retries),
    budget_percent: withDefault(integer(0, 100), DEFAULT_RETRY_SETTINGS.budget_percent),
    min_concurrent: withDefault(integer(0, 100_000), DEFAULT_RETRY_SETTINGS.min_concurrent),
    backoff_base_ms: withDefault(integer(0, MAX_BACKOFF_MS), DEFAULT_RETRY_SETTINGS.backoff_base_ms),
    backoff_max_ms: withDefault(integer(0, MAX_BACKOFF_MS), DEFAULT_RETRY_SETTINGS.backoff_max_ms),
    // A fixed per-try timeout for every model (0: none); absent: each model's own latency decides.
    per_try_timeout_ms: optional(integer(0, MAX_TIMER_MS)),
    per_try_timeout: withDefault(perTryTimeout, DEFAULT_RETRY_SETTINGS.per_try_timeout)
  })

  const gateway = object({
    host: withDefault(string({ check: hostCheck }), DEFAULT_GATEWAY_HOST),
    http_port: withDefault(integer(0, 65535), DEFAULT_HTTP_PORT),
    // -1 turns the gRPC listener off.
    grpc_port: withDefault(integer(-1, 65535), DEFAULT_GRPC_PORT),
    metrics_port: withDefault(integer(0, 65535), DEFAULT_METRICS_PORT),
    max_body_bytes: withDefault(integer(1, MAX_BODY_LIMIT), DEFAULT_MAX_BODY_BYTES),
    request_timeout_ms: withDefault(integer(1, MAX_TIMER_MS), DEFAULT_REQUEST_TIMEOUT_MS),
    // Below 1 KiB a browser's ordinary headers would be refused; above 1 MiB, headers are a memory attack.
    max_header_bytes: withDefault(integer(1024, 1024 * 1024), DEFAULT_MAX_HEADER_BYTES),
    max_header_count: withDefault(integer(1, 10_000), DEFAULT_HEADER_COUNT_LIMIT),
    header_timeout_ms: withDefault(integer(1, MAX_TIMER_MS), DEFAULT_HEADER_TIMEOUT_MS),
    body_timeout_ms: withDefault(integer(1, MAX_TIMER_MS), DEFAULT_BODY_TIMEOUT_MS),
    idle_timeout_ms: withDefault(integer(1, MAX_TIMER_MS), DEFAULT_IDLE_TIMEOUT_MS),
    ready_when: withDefault(oneOf(READY_WHEN), DEFAULT_GATEWAY_SETTINGS.ready_when),
    max_in_flight_per_server: withDefault(integer(0, MAX_REQUEST_COUNT), DEFAULT_MAX_IN_FLIGHT_PER_SERVER),
    max_queued_requests: withDefault(integer(0, MAX_REQUEST_COUNT), DEFAULT_MAX_QUEUED_REQUESTS),
    queue_timeout_ms: withDefault(integer(1, MAX_TIMER_MS), DEFAULT_QUEUE_TIMEOUT_MS),
    admin_host: withDefault(string({ check: hostCheck }), DEFAULT_ADMIN_HOST),
    // -1 turns the admin listener off.
    admin_port: withDefault(integer(-1, 65535), DEFAULT_ADMIN_PORT),
    // A path, never the token itself: a fleet file is shared and committed; a token is a secret.
    admin_token_file: optional(string()),
    // Names the admin API answers to besides addresses, localhost and admin_host: any other Host is refused, so a
    // web page cannot point its own name at the listener (DNS rebinding). Absent: none.
    admin_allowed_hosts: optional(list(string({ pattern: ALLOWED_HOST, normalize: (name) => name.toLowerCase() }), {
      nonEmpty: 'omit it to allow addresses, localhost and admin_host only',
      unique: { what: 'host name' }
    })),
    shutdown_timeout_ms: withDefault(integer(0, MAX_TIMER_MS), DEFAULT_SHUTDOWN_TIMEOUT_MS),
    drain_timeout_ms: withDefault(integer(0, MAX_TIMER_MS), DEFAULT_DRAIN_TIMEOUT_MS),
    slow_start_ms: withDefault(integer(0, MAX_TIMER_MS), DEFAULT_SLOW_START_MS),
    // Reload the fleet file when it changes on disk (SIGHUP reloads it either way).
    watch: withDefault(boolean(), true)
  })

  const cache = object({
    max_bytes: withDefault(integer(0, Number.MAX_SAFE_INTEGER), DEFAULT_CACHE_SETTINGS.max_bytes),
    max_entry_bytes: withDefault(integer(1, MAX_BODY_LIMIT), DEFAULT_CACHE_SETTINGS.max_entry_bytes),
    ttl_ms: withDefault(integer(0, MAX_TIMER_MS), DEFAULT_CACHE_SETTINGS.ttl_ms),
    coalesce: withDefault(boolean(), DEFAULT_CACHE_SETTINGS.coalesce),
    coalesce_timeout_ms: withDefault(integer(1, MAX_TIMER_MS), DEFAULT_CACHE_SETTINGS.coalesce_timeout_ms),
    // Per model, over what its config.pbtxt's response_cache says.
    models: optional(mapOf(object({
      enabled: optional(boolean()),
      ttl_ms: optional(integer(0, MAX_TIMER_MS))
    }), { key: MODEL_NAME, expected: 'a mapping of model names to cache settings' })),
    redis: optional(object({
      url: required(string({ check: redisUrlCheck })),
      timeout_ms: withDefault(integer(1, 60_000), DEFAULT_CACHE_REDIS_TIMEOUT_MS),
      key_prefix: withDefault(string(), DEFAULT_CACHE_REDIS_KEY_PREFIX)
    }))
  })

  const healthCheck = object({
    enabled: withDefault(boolean(), DEFAULT_HEALTH_CHECK_SETTINGS.enabled),
    interval_ms: withDefault(integer(100, MAX_TIMER_MS), DEFAULT_HEALTH_CHECK_SETTINGS.interval_ms),
    timeout_ms: withDefault(integer(1, MAX_TIMER_MS), DEFAULT_HEALTH_CHECK_SETTINGS.timeout_ms),
    jitter_percent: withDefault(integer(0, 50), DEFAULT_HEALTH_CHECK_SETTINGS.jitter_percent),
    healthy_threshold: withDefault(integer(1, 100), DEFAULT_HEALTH_CHECK_SETTINGS.healthy_threshold),
    unhealthy_threshold: withDefault(integer(1, 100), DEFAULT_HEALTH_CHECK_SETTINGS.unhealthy_threshold)
  })

  const outlierDetection = object({
    enabled: withDefault(boolean(), DEFAULT_OUTLIER_DETECTION_SETTINGS.enabled),
    consecutive_failures: withDefault(integer(1, 10_000), DEFAULT_OUTLIER_DETECTION_SETTINGS.consecutive_failures),
    base_ejection_time_ms: withDefault(integer(1, MAX_TIMER_MS), DEFAULT_OUTLIER_DETECTION_SETTINGS.base_ejection_time_ms),
    max_ejection_time_ms: withDefault(integer(1, MAX_TIMER_MS), DEFAULT_OUTLIER_DETECTION_SETTINGS.max_ejection_time_ms),
    max_ejection_percent: withDefault(integer(0, 100), DEFAULT_OUTLIER_DETECTION_SETTINGS.max_ejection_percent)
  })

  // Servers found in Consul, beside (or instead of) inference_servers: see gateway/discovery/consul-discovery.ts.
  const discovery = object({
    consul: optional(object({
      // Absent: CONSUL_HTTP_ADDR, else the local agent (127.0.0.1:8500), as Consul's own CLI.
      address: optional(string({ check: consulAddressCheck })),
      service: withDefault(string({ pattern: CONSUL_SERVICE_NAME }), DEFAULT_CONSUL_SERVICE),
      // Only instances with this tag (Consul's ?tag=), e.g. 'model=resnet50' or a pool name the workers carry.
      tag: optional(string()),
      datacenter: optional(string({ pattern: CONSUL_SERVICE_NAME })),
      // A path, never the token itself (as admin_token_file); absent: CONSUL_HTTP_TOKEN / CONSUL_HTTP_TOKEN_FILE.
      token_file: optional(string()),
      wait: withDefault(string({ check: consulWaitCheck }), DEFAULT_DISCOVERY_WAIT)
    }))
  })

  return object({
    model_repository: optional(string()),
    // Required unless discovery finds the servers; crossCheck says so when neither is there.
    inference_servers: withDefault(list(inferenceServerSpec, {
      unique: { what: 'server name', key: 'name' }
    }), Object.freeze([])),
    load_balancer: required(loadBalancer),
    // Defaulted to {} so consumers look a model up without first asking whether the section exists.
    models: withDefault(mapOf(modelPolicy, {
      key: MODEL_NAME,
      expected: 'a mapping of model names to per-model settings'
    }), Object.freeze({})),
    canary: withDefault(mapOf(canarySpec, {
      key: MODEL_NAME,
      expected: 'a mapping of model names to canary settings'
    }), Object.freeze({})),
    retries: withDefault(retries, DEFAULT_RETRY_SETTINGS),
    cache: withDefault(cache, DEFAULT_CACHE_SETTINGS),
    health_check: withDefault(healthCheck, DEFAULT_HEALTH_CHECK_SETTINGS),
    outlier_detection: withDefault(outlierDetection, DEFAULT_OUTLIER_DETECTION_SETTINGS),
    gateway: withDefault(gateway, DEFAULT_GATEWAY_SETTINGS),
    discovery: withDefault(discovery, Object.freeze({}))
  })
}

/** A validated, normalised, deeply frozen fleet file. Keys are spelled as in the YAML. */
export type FleetConfig = Infer<ReturnType<typeof fleetSchema>>
/** One entry of `inference_servers`. `versions` absent means the server serves every version. */
export type InferenceServerConfig = FleetConfig['inference_servers'][number]
/**
 * The `load_balancer` section. `servers` absent means every inference server takes traffic; `options` absent means
 * the strategy's defaults; `hash_header` (lower case, consistent_hash only) absent means the strategy's own key.
 */
export type LoadBalancerConfig = FleetConfig['load_balancer']
/**
 * A strategy's `options` as written (snake_case keys, each present only when set); {@link toBalancerOptions}
 * converts it for the balancer factories.
 */
export type StrategyOptionsConfig = Infer<typeof strategyOptions>
/**
 * One entry of `models`: what differs for that model. An absent key means the fleet-wide setting
 * (`load_balancer`, `gateway.request_timeout_ms`, `retries.max_retries`).
 */
export type ModelPolicyConfig = FleetConfig['models'][string]
/** One model's canary as written (`canary.<model>`), defaults filled in. */
export type CanaryConfig = Infer<typeof canarySpec>
/** The `retries` section, with defaults filled in. */
export type RetryConfig = FleetConfig['retries']
/** The `cache` section (see `gateway/cache/`). */
export type CacheConfig = FleetConfig['cache']
/** The `gateway` section (listeners and limits), with defaults filled in. */
export type GatewaySettings = FleetConfig['gateway']
/** The `health_check` section (active checks), with defaults filled in. */
export type HealthCheckConfig = FleetConfig['health_check']
/** `discovery.consul`, when set (defaults filled in). */
export type ConsulDiscoveryConfig = NonNullable<FleetConfig['discovery']['consul']>
/** The `outlier_detection` section (passive ejection), with defaults filled in. */
export type OutlierDetectionConfig = FleetConfig['outlier_detection']

/** A server's gRPC port: its `grpc_port`, else `port` + 1 (Triton's layout: HTTP 8000, gRPC 8001). */
export function grpcPortOf (server: Pick<InferenceServerConfig, 'port' | 'grpc_port'>): number {
  return server.grpc_port ?? server.port + 1
}

/**
 * Parses and validates fleet YAML.
 *
 * @param text the file's contents
 * @param options `file` names the source in messages; `isKnownStrategy` validates `load_balancer.type`
 * @returns the normalised, frozen config
 * @throws FlotillaError `GW_ERR_FLEET_INVALID` listing every problem, one per line, as `file:line:col: message`
 */
export function parseFleetConfig (text: string, options: ParseFleetConfigOptions): FleetConfig {
  const lineCounter = new LineCounter()
  // uniqueKeys off: duplicate keys are reported by the schema walk, with the key path and where the first one is.
  const doc = parseDocument(text, { lineCounter, uniqueKeys: false, prettyErrors: false })
  const file = options.file
  const fail = (lines: string[]): never => { throw createError('GW_ERR_FLEET_INVALID', lines.join('\n')) }

  if (doc.errors.length > 0) {
    // A syntax error can make everything after it mean something else, so the schema is not checked.
    fail(doc.errors.map((err) => formatProblem(file, lineCounter, {
      offset: err.pos[0],
      message: `YAML syntax error: ${err.message.split('\n')[0] ?? err.message}`
    })))
  }
  if (doc.contents === null) {
    fail([`${file}:1:1: the fleet file is empty; it needs at least 'inference_servers' and 'load_balancer'`])
  }

  const ctx = new SchemaContext(doc, lineCounter)
  const config = fleetSchema(options).read(doc.contents, '', ctx, null)
  crossCheck(doc.contents, ctx)

  if (ctx.problems.length > 0 || config === INVALID) {
    const problems = [...ctx.problems].sort((a, b) => a.offset - b.offset)
    fail(problems.map((p) => formatProblem(file, lineCounter, p)))
  }
  return config as FleetConfig
}

/**
 * Reads and validates a fleet file.
 *
 * @throws FlotillaError `GW_ERR_FLEET_INVALID` when the file cannot be read or is invalid (see {@link parseFleetConfig})
 */
export function loadFleetFile (path: string, options: FleetConfigOptions): FleetConfig {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    throw wrapError('GW_ERR_FLEET_INVALID', err, `cannot read the fleet file '${path}': ${(err as Error).message}`)
  }
  return parseFleetConfig(text, { ...options, file: path })
}

/**
 * Rules that span sections, checked on the YAML nodes so they are reported even when other parts are invalid.
 */
function crossCheck (root: Node | null, ctx: SchemaContext): void {
  const servers = ctx.resolve(childOf(root, 'inference_servers', ctx))
  // With discovery, which servers and models exist is known only at run time, so the checks against them wait too.
  const discovered = isMap(ctx.resolve(childOf(ctx.resolve(childOf(root, 'discovery', ctx)), 'consul', ctx)))
  if (isMap(root) && !discovered && (servers === null || (isSeq(servers) && servers.items.length === 0))) {
    ctx.report(servers ?? root, null, servers === null
      ? "the fleet needs servers: list them under 'inference_servers', or find them in Consul with 'discovery.consul'"
      : "inference_servers must not be empty (the gateway needs at least one server), unless 'discovery.consul' finds them")
  }
  const balancer = ctx.resolve(childOf(root, 'load_balancer', ctx))
  const picked = ctx.resolve(childOf(balancer, 'servers', ctx))
  if (isSeq(servers) && isSeq(picked)) {
    const names: string[] = []
    for (const item of servers.items) {
      const name = ctx.resolve(childOf(ctx.resolve(item), 'name', ctx))
      if (isScalar(name) && typeof name.value === 'string' && !names.includes(name.value)) names.push(name.value)
    }
    picked.items.forEach((item, i) => {
      const name = ctx.resolve(childOf(ctx.resolve(item), 'name', ctx))
      if (isScalar(name) && typeof name.value === 'string' && name.value.trim() !== '' && !names.includes(name.value)) {
        ctx.report(name, null, `load_balancer.servers[${i}].name '${name.value}' is not the name of any ` +
          `inference_servers entry (known: ${names.join(', ')})`)
      }
    })
  }

  // Checked on the nodes too, so that a clash is reported alongside problems elsewhere in the file.
  const gateway = ctx.resolve(childOf(root, 'gateway', ctx))
  const httpNode = childOf(gateway, 'http_port', ctx)
  const metricsNode = childOf(gateway, 'metrics_port', ctx)
  const httpPort = httpNode === null ? DEFAULT_HTTP_PORT : integerOf(httpNode)
  const metricsPort = metricsNode === null ? DEFAULT_METRICS_PORT : integerOf(metricsNode)
  if (httpPort !== undefined && httpPort !== 0 && httpPort === metricsPort) {
    ctx.report(metricsNode ?? httpNode, null, `gateway.metrics_port must differ from gateway.http_port (both are ${httpPort})`)
  }
  const grpcNode = childOf(gateway, 'grpc_port', ctx)
  const grpcPort = grpcNode === null ? DEFAULT_GRPC_PORT : integerOf(grpcNode)
  if (grpcPort !== undefined && grpcPort > 0) {
    for (const [name, other] of [['http_port', httpPort], ['metrics_port', metricsPort]] as const) {
      if (grpcPort === other) ctx.report(grpcNode ?? childOf(gateway, name, ctx), null, `gateway.grpc_port must differ from gateway.${name} (both are ${grpcPort})`)
    }
  }
  if (isSeq(servers)) {
    servers.items.forEach((item, i) => {
      const server = ctx.resolve(item)
      const portNode = childOf(server, 'port', ctx)
      const serverGrpcNode = childOf(server, 'grpc_port', ctx)
      const port = portNode === null ? undefined : integerOf(portNode)
      const serverGrpc = serverGrpcNode === null ? undefined : integerOf(serverGrpcNode)
      if (port !== undefined && serverGrpc !== undefined && port === serverGrpc) {
        ctx.report(serverGrpcNode, null, `inference_servers[${i}].grpc_port must differ from its port (both are ${port})`)
      } else if (port === 65535 && serverGrpcNode === null) {
        ctx.report(portNode, null, `inference_servers[${i}] has port 65535, so its gRPC port cannot default to port + 1: set grpc_port`)
      }
    })
  }

  const outlier = ctx.resolve(childOf(root, 'outlier_detection', ctx))
  const baseNode = childOf(outlier, 'base_ejection_time_ms', ctx)
  const maxNode = childOf(outlier, 'max_ejection_time_ms', ctx)
  const base = integerOfOr(baseNode, DEFAULT_OUTLIER_DETECTION_SETTINGS.base_ejection_time_ms)
  const max = integerOfOr(maxNode, DEFAULT_OUTLIER_DETECTION_SETTINGS.max_ejection_time_ms)
  if (base !== undefined && max !== undefined && max < base) {
    ctx.report(maxNode ?? baseNode, null,
      `outlier_detection.max_ejection_time_ms (${max}) must be at least base_ejection_time_ms (${base})`)
  }

  const retries = ctx.resolve(childOf(root, 'retries', ctx))
  const backoffBaseNode = childOf(retries, 'backoff_base_ms', ctx)
  const backoffMaxNode = childOf(retries, 'backoff_max_ms', ctx)
  const backoffBase = integerOfOr(backoffBaseNode, DEFAULT_RETRY_SETTINGS.backoff_base_ms)
  const backoffMax = integerOfOr(backoffMaxNode, DEFAULT_RETRY_SETTINGS.backoff_max_ms)
  // Out-of-range values are already reported; comparing them would only add a second message about the same typo.
  if (backoffBase !== undefined && backoffMax !== undefined && backoffMax < backoffBase &&
    backoffBase <= MAX_BACKOFF_MS && backoffMax >= 0) {
    ctx.report(backoffMaxNode ?? backoffBaseNode, null,
      `retries.backoff_max_ms (${backoffMax}) must be at least backoff_base_ms (${backoffBase})`)
  }

  const perTryNode = ctx.resolve(childOf(retries, 'per_try_timeout', ctx))
  const perTryMinNode = childOf(perTryNode, 'min_ms', ctx)
  const perTryMaxNode = childOf(perTryNode, 'max_ms', ctx)
  const perTryMin = integerOfOr(perTryMinNode, DEFAULT_RETRY_SETTINGS.per_try_timeout.min_ms)
  const perTryMax = integerOfOr(perTryMaxNode, DEFAULT_RETRY_SETTINGS.per_try_timeout.max_ms)
  if (perTryMin !== undefined && perTryMax !== undefined && perTryMax < perTryMin && perTryMin >= 1) {
    ctx.report(perTryMaxNode ?? perTryMinNode, null,
      `retries.per_try_timeout.max_ms (${perTryMax}) must be at least min_ms (${perTryMin})`)
  }

  // Node refuses a server whose head timeout is longer than its whole-request timeout.
  const gatewayNode = ctx.resolve(childOf(root, 'gateway', ctx))
  const headerTimeoutNode = childOf(gatewayNode, 'header_timeout_ms', ctx)
  const bodyTimeoutNode = childOf(gatewayNode, 'body_timeout_ms', ctx)
  const headerTimeout = integerOfOr(headerTimeoutNode, DEFAULT_HEADER_TIMEOUT_MS)
  const bodyTimeout = integerOfOr(bodyTimeoutNode, DEFAULT_BODY_TIMEOUT_MS)
  if (headerTimeout !== undefined && bodyTimeout !== undefined && bodyTimeout < headerTimeout && bodyTimeout >= 1) {
    ctx.report(bodyTimeoutNode ?? headerTimeoutNode, null,
      `gateway.body_timeout_ms (${bodyTimeout}) must be at least header_timeout_ms (${headerTimeout}): the whole request includes its head`)
  }

  if (!discovered) checkCanaries(servers, ctx.resolve(childOf(root, 'canary', ctx)), ctx)

  // A policy for a model no server lists would never apply; almost always a misspelt model name.
  const models = ctx.resolve(childOf(root, 'models', ctx))
  if (!discovered && isSeq(servers) && isMap(models)) {
    const known: string[] = []
    for (const item of servers.items) {
      const served = ctx.resolve(childOf(ctx.resolve(item), 'models', ctx))
      if (!isSeq(served)) continue
      for (const model of served.items) {
        const name = ctx.resolve(model)
        if (isScalar(name) && typeof name.value === 'string' && !known.includes(name.value)) known.push(name.value)
      }
    }
    for (const pair of models.items) {
      const key = ctx.resolve(pair.key)
      // Keys that are not valid model names are already reported by the schema.
      if (!isScalar(key) || typeof key.value !== 'string' || !MODEL_NAME.regex.test(key.value)) continue
      if (!known.includes(key.value)) {
        ctx.report(key, null, `models.${key.value} is not served by any inference server, so its settings would ` +
          `never apply (${known.length === 0 ? 'no server lists a valid model' : `known models: ${known.join(', ')}`})`)
      }
    }
  }
}

/**
 * What is wrong with a canary given the servers (checked at load for the file, and by the admin API for a canary set
 * at run time): the model must be served, each side must have a server.
 *
 * @returns a message, or `undefined` when the canary can route
 */
export function canaryProblem (
  model: string,
  canary: CanaryConfig,
  servers: ReadonlyArray<Pick<InferenceServerConfig, 'name' | 'models' | 'versions'>>
): string | undefined {
  const serving = servers.filter((s) => s.models.includes(model))
  if (serving.length === 0) return `model '${model}' is not served by any inference server`
  if (canary.canary_servers !== undefined) {
    const names = serving.map((s) => s.name)
    const unknown = canary.canary_servers.filter((n) => !names.includes(n))
    if (unknown.length > 0) {
      return `canary_servers ${unknown.map((n) => `'${n}'`).join(', ')} do not serve '${model}' (servers serving it: ${names.join(', ')})`
    }
    if (canary.canary_servers.length === names.length) {
      return `canary_servers names every server of '${model}', which leaves none for the baseline`
    }
    return undefined
  }
  for (const version of [canary.baseline_version, canary.canary_version]) {
    if (version !== undefined && !serving.some((s) => s.versions === undefined || s.versions.includes(version))) {
      return `no server of '${model}' serves version ${version} (set versions on a server, or omit them to serve every version)`
    }
  }
  return undefined
}

/**
 * Each canary against the servers ({@link canaryProblem}), on the YAML nodes so that it is reported alongside
 * problems elsewhere. Only servers and canary keys of the right shape take part: a wrong one is reported already.
 */
function checkCanaries (serversNode: Node | null, canaries: Node | null, ctx: SchemaContext): void {
  if (!isSeq(serversNode) || !isMap(canaries)) return
  const servers: Array<Pick<InferenceServerConfig, 'name' | 'models' | 'versions'>> = []
  for (const item of serversNode.items) {
    const s = plain(ctx.resolve(item)) as { name?: unknown, models?: unknown, versions?: unknown } | undefined
    if (typeof s?.name !== 'string' || !isList(s.models, 'string')) continue
    if (s.versions !== undefined && !isList(s.versions, 'number')) continue
    servers.push({ name: s.name, models: s.models, ...(s.versions === undefined ? {} : { versions: s.versions }) })
  }
  for (const pair of canaries.items) {
    const key = ctx.resolve(pair.key)
    const value = ctx.resolve(pair.value)
    // Keys that are not valid model names are already reported by the schema.
    if (!isScalar(key) || typeof key.value !== 'string' || !MODEL_NAME.regex.test(key.value)) continue
    const c = plain(value) as { baseline_version?: unknown, canary_version?: unknown, canary_servers?: unknown } | undefined
    if (c === undefined || typeof c !== 'object') continue
    const canary = {
      ...(typeof c.baseline_version === 'number' ? { baseline_version: c.baseline_version } : {}),
      ...(typeof c.canary_version === 'number' ? { canary_version: c.canary_version } : {}),
      ...(isList(c.canary_servers, 'string') ? { canary_servers: c.canary_servers } : {})
    } as unknown as CanaryConfig
    const problem = canaryProblem(key.value, canary, servers)
    if (problem !== undefined) ctx.report(value, key, `canary.${key.value}: ${problem}`)
  }
}

/** A node as plain data (aliases resolved), or `undefined` when it cannot be. */
function plain (node: Node | null): unknown {
  try {
    return node === null ? undefined : node.toJSON()
  } catch {
    return undefined
  }
}

function isList<T extends 'string' | 'number'> (value: unknown, type: T): value is Array<T extends 'string' ? string : number> {
  return Array.isArray(value) && value.every((v) => typeof v === type)
}

function integerOfOr (node: Node | null, fallback: number): number | undefined {
  return node === null ? fallback : integerOf(node)
}

function integerOf (node: Node): number | undefined {
  return isScalar(node) && typeof node.value === 'number' && Number.isInteger(node.value) ? node.value : undefined
}

function childOf (node: Node | null, key: string, ctx: SchemaContext): Node | null {
  return isMap(node) ? ctx.resolve(node.get(key, true)) : null
}
