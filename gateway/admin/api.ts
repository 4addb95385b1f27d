/**
 * The admin API's wire contract: paths, request bodies and answers, as JSON. The server (`admin-server.ts`) and the
 * `flotilla fleet` command line (`fleet-cli.ts`) both import these types, so the two cannot drift apart.
 *
 * Every call takes and returns JSON. An error answer is `{ "error": "<what to fix>" }` with a 4xx status: 400 for a
 * malformed body, a value out of range or a name in the path that breaks {@link SERVER_NAME_RULE}, 401 without
 * `Authorization: Bearer <token>` when a token is configured (with `WWW-Authenticate: Bearer`), 403 for a wrong
 * token, 404 for an unknown endpoint or model, 409 for a conflict (a duplicate name, undraining a removed endpoint),
 * 415 for a POST, PUT or DELETE without `Content-Type: application/json` (body or not).
 *
 * The API is for programs, never for browsers: a call that carries `Origin`, or `Sec-Fetch-Site` other than `none`,
 * or a `Host` that is not an IP address, `localhost`, the listener's own host name or a name listed in
 * `gateway.admin_allowed_hosts`, is refused with 403 before anything else, whatever the method (see
 * `admin-guard.ts`). `flotilla fleet`, curl and undici send none of those headers and the Host of the URL they call.
 *
 * | Method and path | Body | Answer |
 * |---|---|---|
 * | `GET /v1/endpoints` | | 200 {@link EndpointList} |
 * | `GET /v1/endpoints/:name` | | 200 {@link AdminEndpointView} |
 * | `POST /v1/endpoints` | {@link AddEndpointBody} | 201 {@link AdminEndpointView} |
 * | `POST /v1/endpoints/:name/drain[?wait=1]` | {@link DrainBody} (optional) | 202 {@link DrainStatus}; with `wait=1`, 200 once the drain is over |
 * | `GET /v1/endpoints/:name/drain` | | 200 {@link DrainStatus} |
 * | `POST /v1/endpoints/:name/undrain` | | 200 {@link AdminEndpointView} |
 * | `DELETE /v1/endpoints/:name[?force=1][&timeout_ms=N]` | | 200 {@link RemoveResult} once removed (drains first unless `force`) |
 * | `PUT /v1/endpoints/:name/weight` | {@link WeightBody} | 200 {@link AdminEndpointView} |
 * | `GET /v1/canaries` | | 200 {@link CanaryList} |
 * | `GET /v1/models/:model/canary` | | 200 {@link CanaryView} |
 * | `PUT /v1/models/:model/canary` | {@link CanaryBody} | 200 {@link CanaryView} |
 * | `DELETE /v1/models/:model/canary` | | 200 `{ "cleared": "<model>" }` |
 * | `POST /v1/models/:model/canary/promote` | | 200 {@link CanaryView} (all traffic to the canary side) |
 * | `POST /v1/models/:model/canary/rollback` | | 200 {@link CanaryView} (canary share set to 0) |
 * | `GET /v1/config` | | 200 the effective fleet config (the file plus runtime changes), keys as in the YAML |
 */
import type { EndpointView } from '../server/fleet-view.ts'

/** The admin listener's defaults: loopback only, so that no token is needed on a developer's machine. */
export const DEFAULT_ADMIN_HOST = '127.0.0.1'
export const DEFAULT_ADMIN_PORT = 9000
/** Where `flotilla fleet` looks for the admin API, and the environment variable it (and the gateway) read the token from. */
export const DEFAULT_ADMIN_URL = `http://${DEFAULT_ADMIN_HOST}:${DEFAULT_ADMIN_PORT}`
export const ADMIN_TOKEN_ENV = 'FLOTILLA_ADMIN_TOKEN'
/** How long a drain waits for in-flight requests when the call names no timeout. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000

/**
 * What a server name may be, in the fleet file (`inference_servers[].name`) and in `POST /v1/endpoints`: 1 to 63
 * ASCII letters, digits, `.`, `_`, `:` and `-`, starting with a letter or digit. A name is a path segment of this
 * API (`/v1/endpoints/<name>/drain`), a Prometheus label value, a log field and the `x-flotilla-endpoint` header on
 * every answer, so it is kept to characters that need no escaping in any of them; starting with a letter or digit
 * rules out `.` and `..` (which URL clients collapse), and names that read as flags (`-x`) on the command line. 63 is
 * a DNS label's limit, so a host name or a Kubernetes pod name fits, `host:port` fits, and a name stays far below
 * the router's limit on one path segment (100). `:` is allowed for names made of an address (`10.0.0.5:8000`).
 */
export const SERVER_NAME_RULE = Object.freeze({
  regex: /^[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$/,
  text: "a server name is 1 to 63 characters, ASCII letters, digits, '.', '_', ':' and '-', starting with a letter or " +
    'digit (it is sent in URLs, metric labels, logs and the x-flotilla-endpoint header)'
})
/** The longest server name {@link SERVER_NAME_RULE} allows. */
export const MAX_SERVER_NAME_LENGTH = 63

export type { EndpointSource } from '../fleet/types.ts'

/** An endpoint as the admin API shows it: `GET /v2/fleet`'s view plus what only operators need. */
export interface AdminEndpointView extends EndpointView {
  /** `joining` (added, not yet through its health checks), `active`, `draining` or `drained`. */
  state: 'joining' | 'active' | 'draining' | 'drained'
  /** The weight set in the file or by the admin API; `weight` is the effective one (lower during slow start). */
  configured_weight: number
  /** The drain in progress or last finished, `null` when never drained (or undrained since). */
  drain: DrainStatus | null
}

export interface EndpointList {
  endpoints: AdminEndpointView[]
}

/** `POST /v1/endpoints`. */
export interface AddEndpointBody {
  /** Unique in the fleet; see {@link SERVER_NAME_RULE}. */
  name: string
  host: string
  /** 1-65535. */
  port: number
  /** Only `http` so far. */
  protocol?: 'http'
  /** The models it serves, or `"discover"` (the default): ask the worker's repository index for its READY models. */
  models?: string[] | 'discover'
  /** Versions it serves; absent: every version. */
  versions?: number[]
  /** 0-1000, default 1. */
  weight?: number
  labels?: Record<string, string>
  /** In-flight cap; absent: the gateway-wide `max_in_flight_per_server`. */
  max_in_flight?: number
}

/** `POST /v1/endpoints/:name/drain`. */
export interface DrainBody {
  /** How long to wait for in-flight requests before marking the endpoint drained anyway; default 30 s. */
  timeout_ms?: number
}

/** Where a drain stands. */
export interface DrainStatus {
  name: string
  /** The endpoint's state now. */
  state: 'joining' | 'active' | 'draining' | 'drained'
  /** Requests from this gateway still in flight to it. */
  in_flight: number
  started_ms_ago: number
  timeout_ms: number
  /** The drain is over: the in-flight count reached zero, or the timeout passed. */
  done: boolean
  /** It reached zero in-flight requests (false while running, and when the timeout cut it short). */
  completed: boolean
}

/** `DELETE /v1/endpoints/:name`. */
export interface RemoveResult {
  removed: string
  /** Whether a drain ran to zero in-flight requests first (false with `force`, or when the drain timed out). */
  drained: boolean
  /** Requests still in flight when it left the fleet; they finish on their connections. */
  in_flight: number
}

/** `PUT /v1/endpoints/:name/weight`. */
export interface WeightBody {
  /** 0-1000. */
  weight: number
}

/** `PUT /v1/models/:model/canary`: split a model's traffic between two versions or two groups of servers. */
export interface CanaryBody {
  /** Requests naming no version go to this version (the baseline) ... */
  baseline_version?: number
  /** ... or to this one (the canary). Set both versions, or `canary_servers`. */
  canary_version?: number
  /** The canary is these servers; the baseline is the model's other servers. */
  canary_servers?: string[]
  /** Share of requests for the canary, 0-100 (fractions allowed). */
  percent: number
  /** A request with this header set to this value always goes to the canary. */
  force_header?: { name: string, value: string }
  /** Requests with the same value of this header (a user id, say) always land on the same side. */
  sticky_header?: string
  /** Automatic rollback; absent: on, with the defaults. */
  auto_rollback?: {
    enabled?: boolean
    window_ms?: number
    min_requests?: number
    error_rate_factor?: number
    min_error_rate?: number
    p99_factor?: number
    min_p99_increase_ms?: number
  }
}

/** One side's figures over the rollback window. */
export interface CanarySideStats {
  requests: number
  errors: number
  error_rate: number
  /** `null` without requests in the window. */
  p50_ms: number | null
  p99_ms: number | null
}

export interface CanaryView {
  model: string
  /** `version` or `servers`. */
  split: 'version' | 'servers'
  baseline_version: number | null
  canary_version: number | null
  canary_servers: string[] | null
  /** The canary's share now (0 after a rollback, 100 after a promote). */
  percent: number
  /** The share it was set to. */
  configured_percent: number
  promoted: boolean
  /** The last rollback, manual or automatic; `null` when none since the canary was set. */
  rolled_back: { automatic: boolean, reason: string, ms_ago: number } | null
  force_header: { name: string, value: string } | null
  sticky_header: string | null
  auto_rollback: {
    enabled: boolean
    window_ms: number
    min_requests: number
    error_rate_factor: number
    min_error_rate: number
    p99_factor: number
    min_p99_increase_ms: number
  }
  baseline: CanarySideStats
  canary: CanarySideStats
}

export interface CanaryList {
  canaries: CanaryView[]
}
