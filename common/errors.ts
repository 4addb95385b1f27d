/**
 * The one registry of coded errors. Every error Flotilla raises on purpose has a code here, with the HTTP status
 * and gRPC status it maps to and a printf-style message (`%s` placeholders filled in order). Callers branch on
 * `err.code`, never on `instanceof`, so two copies of the module (tests, bundling) still agree.
 *
 * Prefixes: `FLT_` shared, `PROTO_` the KServe v2 codec, `WRK_` the worker, `GW_` the gateway, `CLI_` the command line.
 * A retired code is never reused.
 */

/** gRPC status names, as in grpc/status.h. */
export type GrpcStatusName =
  | 'OK' | 'CANCELLED' | 'UNKNOWN' | 'INVALID_ARGUMENT' | 'DEADLINE_EXCEEDED' | 'NOT_FOUND' | 'ALREADY_EXISTS'
  | 'PERMISSION_DENIED' | 'RESOURCE_EXHAUSTED' | 'FAILED_PRECONDITION' | 'ABORTED' | 'OUT_OF_RANGE'
  | 'UNIMPLEMENTED' | 'INTERNAL' | 'UNAVAILABLE' | 'DATA_LOSS' | 'UNAUTHENTICATED'

/** What a code maps to on each wire. */
export interface ErrorSpec {
  readonly http: number
  readonly grpc: GrpcStatusName
  readonly message: string
}

export const errorCodes = {
  // shared
  FLT_ERR_NOT_FOUND: { http: 404, grpc: 'NOT_FOUND', message: 'Not Found' },
  FLT_ERR_METHOD_NOT_ALLOWED: { http: 405, grpc: 'UNIMPLEMENTED', message: 'Method Not Allowed' },
  FLT_ERR_BODY_TOO_LARGE: {
    http: 413, grpc: 'RESOURCE_EXHAUSTED',
    message: 'request body %s exceeds the limit of %s bytes; send a smaller request or raise %s'
  },
  FLT_ERR_HEADERS_TOO_LARGE: {
    http: 431, grpc: 'RESOURCE_EXHAUSTED',
    message: 'request headers exceed the limit of %s bytes; send fewer or smaller headers, or raise %s'
  },
  FLT_ERR_TOO_MANY_HEADERS: {
    http: 431, grpc: 'RESOURCE_EXHAUSTED',
    message: 'request has %s header fields, more than the limit of %s; send fewer headers, or raise %s'
  },
  FLT_ERR_REQUEST_TOO_SLOW: {
    http: 408, grpc: 'DEADLINE_EXCEEDED',
    message: 'the request did not arrive in time (headers within %s ms, the whole request within %s ms); send it faster, or raise %s'
  },
  FLT_ERR_MALFORMED_HTTP: { http: 400, grpc: 'INVALID_ARGUMENT', message: 'malformed HTTP request (%s): %s' },
  // Triton answers 501 for an unknown Content-Encoding; RFC 9110 §15.5.16 says 415 (with Accept-Encoding), so we do.
  FLT_ERR_UNSUPPORTED_CONTENT_ENCODING: {
    http: 415, grpc: 'UNIMPLEMENTED',
    message: "Unsupported compression type '%s': send the request body with Content-Encoding gzip, deflate or identity%s"
  },
  FLT_ERR_CONTENT_DECODING: {
    http: 400, grpc: 'INVALID_ARGUMENT', message: 'the request body is not valid %s data (Content-Encoding: %s): %s'
  },
  FLT_ERR_INTERNAL: { http: 500, grpc: 'INTERNAL', message: 'internal error: %s' },
  // A Consul address, token file or service setting that cannot work (worker flags, the fleet file's discovery).
  FLT_ERR_CONSUL_CONFIG: { http: 500, grpc: 'FAILED_PRECONDITION', message: '%s' },
  FLT_ERR_MESSAGE_TOO_LARGE: {
    http: 413, grpc: 'RESOURCE_EXHAUSTED',
    message: 'gRPC message of %s bytes exceeds the limit of %s bytes; send a smaller request or raise %s'
  },
  // Features Triton has and Flotilla does not: answered with Triton's own words for them compiled out or disabled.
  FLT_ERR_SHARED_MEMORY_DISABLED: {
    http: 501, grpc: 'UNIMPLEMENTED',
    message: 'Client shared memory is disabled: Flotilla takes tensors in the request itself (binary HTTP, or gRPC ' +
      'raw_input_contents), not through shared-memory regions'
  },
  FLT_ERR_TRACE_UNSUPPORTED: { http: 503, grpc: 'UNAVAILABLE', message: 'the server does not support trace' },
  FLT_ERR_LOGGING_UNSUPPORTED: { http: 503, grpc: 'UNAVAILABLE', message: 'the server does not support dynamic logging' },

  // KServe v2 codec: the request body itself is malformed
  PROTO_ERR_INVALID_JSON: { http: 400, grpc: 'INVALID_ARGUMENT', message: 'failed to parse the request JSON body: %s' },
  PROTO_ERR_INVALID_REQUEST: { http: 400, grpc: 'INVALID_ARGUMENT', message: '%s' },
  PROTO_ERR_INVALID_DATATYPE: { http: 400, grpc: 'INVALID_ARGUMENT', message: 'invalid datatype for input %s' },
  PROTO_ERR_DATA_MISMATCH: { http: 400, grpc: 'INVALID_ARGUMENT', message: '%s' },
  // A request that asks for something Triton does not support either (a repository name): Triton's UNSUPPORTED.
  PROTO_ERR_UNSUPPORTED: { http: 501, grpc: 'UNIMPLEMENTED', message: '%s' },
  // The binary tensor data extension's framing: Inference-Header-Content-Length, binary_data_size, the bytes after the JSON.
  PROTO_ERR_BINARY_DATA: { http: 400, grpc: 'INVALID_ARGUMENT', message: '%s' },

  // worker: request does not fit the model (messages follow Triton's text where Triton has one)
  WRK_ERR_INVALID_INPUT: { http: 400, grpc: 'INVALID_ARGUMENT', message: '%s' },
  WRK_ERR_MODEL_NOT_FOUND: { http: 404, grpc: 'NOT_FOUND', message: "Request for unknown model: '%s' is not found" },
  WRK_ERR_MODEL_VERSION_NOT_FOUND: {
    http: 404, grpc: 'NOT_FOUND', message: "Request for unknown model: '%s' version %s is not found"
  },
  WRK_ERR_MODEL_VERSION_NOT_READY: {
    http: 503, grpc: 'UNAVAILABLE', message: "Request for unknown model: '%s' version %s is not at ready state"
  },
  WRK_ERR_MODEL_NO_AVAILABLE_VERSIONS: {
    http: 404, grpc: 'NOT_FOUND', message: "Request for unknown model: '%s' has no available versions"
  },
  WRK_ERR_SERVER_NOT_READY: { http: 503, grpc: 'UNAVAILABLE', message: 'Server not ready' },
  // Triton's answer to load/unload in its default (polling) control mode; the message says "polling" in every mode.
  WRK_ERR_MODEL_CONTROL_DISABLED: {
    http: 503, grpc: 'UNAVAILABLE', message: 'explicit model load / unload is not allowed if polling is enabled'
  },
  // Triton's scheduler texts (dynamic_batch_scheduler.cc), so clients that match on them keep working.
  // The statistics extension words its misses differently from the other model routes, and answers 400.
  WRK_ERR_STATS_MODEL_NOT_AVAILABLE: { http: 400, grpc: 'INVALID_ARGUMENT', message: "requested model '%s' is not available" },
  WRK_ERR_STATS_VERSION_NOT_AVAILABLE: {
    http: 400, grpc: 'INVALID_ARGUMENT', message: "requested model version is not available for model '%s'"
  },
  WRK_ERR_QUEUE_FULL: { http: 503, grpc: 'UNAVAILABLE', message: 'Exceeds maximum queue size' },
  WRK_ERR_REQUEST_TIMEOUT: { http: 503, grpc: 'UNAVAILABLE', message: 'Request timeout expired' },
  // Triton answers a cancelled request CANCELLED (HTTP 400); nobody reads it, the client is gone.
  WRK_ERR_REQUEST_CANCELLED: { http: 400, grpc: 'CANCELLED', message: 'Request was cancelled: its client went away while it was queued' },
  WRK_ERR_EXECUTION_FAILED: { http: 500, grpc: 'INTERNAL', message: "model '%s' failed to execute: %s" },
  WRK_ERR_CONFIG_PARSE: { http: 500, grpc: 'INTERNAL', message: '%s' },
  WRK_ERR_CONFIG_INVALID: { http: 500, grpc: 'INTERNAL', message: '%s' },
  WRK_ERR_MODEL_LOAD: { http: 500, grpc: 'INTERNAL', message: "failed to load model '%s': %s" },
  WRK_ERR_UNKNOWN_BACKEND: {
    http: 500, grpc: 'INTERNAL', message: "unknown backend '%s' for model '%s'; known backends: %s"
  },
  WRK_ERR_NATIVE_UNAVAILABLE: {
    http: 500, grpc: 'INTERNAL',
    message: 'the native module (native/) could not be loaded: %s; build it with `npm run build:native`'
  },
  WRK_ERR_ONNX_INVALID: { http: 500, grpc: 'INTERNAL', message: "failed to load model '%s': %s is not a valid ONNX model: %s" },
  WRK_ERR_ONNX_UNSUPPORTED_OP: {
    http: 500, grpc: 'INTERNAL',
    message: "failed to load model '%s': the native backend cannot run op %s (node '%s'); it runs %s. " +
      'Set backend: "onnxruntime" in config.pbtxt to run this model with onnxruntime'
  },
  WRK_ERR_ONNXRUNTIME_UNAVAILABLE: {
    http: 500, grpc: 'INTERNAL',
    message: "failed to load model '%s': the onnxruntime backend needs the onnxruntime-node package: %s"
  },

  // gateway
  GW_ERR_FLEET_INVALID: { http: 500, grpc: 'INTERNAL', message: '%s' },
  GW_ERR_MODEL_NOT_SERVED: {
    http: 404, grpc: 'NOT_FOUND',
    message: "Request for unknown model: '%s' is not served by any server in the fleet (served models: %s)"
  },
  GW_ERR_MODEL_VERSION_NOT_SERVED: {
    http: 404, grpc: 'NOT_FOUND',
    message: "Request for unknown model: '%s' version %s is not served by any server in the fleet (versions served: %s)"
  },
  GW_ERR_NO_UPSTREAM: {
    http: 502, grpc: 'UNAVAILABLE', message: "no server serving model '%s' could be reached (tried: %s): %s"
  },
  GW_ERR_UPSTREAM_UNREACHABLE: { http: 502, grpc: 'UNAVAILABLE', message: "server '%s' could not be reached: %s" },
  GW_ERR_UPSTREAM_BROKEN: {
    http: 502, grpc: 'UNAVAILABLE', message: "server '%s' failed while answering a request for model '%s': %s"
  },
  GW_ERR_INDEX_UNAVAILABLE: {
    http: 502, grpc: 'UNAVAILABLE', message: 'no server in the fleet could be reached for the repository index (tried: %s)%s'
  },
  GW_ERR_NOT_ROUTED: {
    http: 501, grpc: 'UNIMPLEMENTED', message: '%s is not routed through the gateway; call the worker that should do it'
  },
  GW_ERR_STATS_UNAVAILABLE: {
    http: 502, grpc: 'UNAVAILABLE', message: 'no server serving the model could be reached for its statistics (tried: %s)%s'
  },
  GW_ERR_UPSTREAM_TIMEOUT: { http: 504, grpc: 'DEADLINE_EXCEEDED', message: "server '%s' did not answer within %s ms" },
  // An attempt abandoned at its per-try timeout, when no other server could take the request after it.
  GW_ERR_ATTEMPT_TIMEOUT: {
    http: 504,
    grpc: 'DEADLINE_EXCEEDED',
    message: "server '%s' did not answer within the per-try timeout of %s ms for model '%s' (set retries.per_try_timeout_ms, or models.<name>.per_try_timeout_ms, to change it)"
  },
  GW_ERR_REQUEST_TIMEOUT: {
    http: 504, grpc: 'DEADLINE_EXCEEDED', message: "request for model '%s' was not answered within %s ms (%s)"
  },
  // Envoy's "no healthy upstream": every server of the model is failing its checks or ejected, and panic is off.
  GW_ERR_NO_HEALTHY_UPSTREAM: {
    http: 503, grpc: 'UNAVAILABLE',
    message: "no healthy server for model '%s': %s failing health checks or ejected; try again later"
  },
  GW_ERR_QUEUE_FULL: {
    http: 503, grpc: 'UNAVAILABLE',
    message: "every server for model '%s' is at its in-flight limit and the gateway queue is full (%s requests waiting); try again later"
  },
  // NGINX's 499: the client went away before its answer was ready; logged and counted, never sent.
  GW_ERR_CLIENT_CLOSED: { http: 499, grpc: 'CANCELLED', message: "the client closed the request for model '%s' before it was answered" },
  GW_ERR_QUEUE_TIMEOUT: {
    http: 503, grpc: 'UNAVAILABLE',
    message: "every server for model '%s' stayed at its in-flight limit for %s ms (gateway.queue_timeout_ms); try again later"
  },

  // gateway admin API: what an operator asked for cannot be done as asked
  GW_ERR_ADMIN_INVALID: { http: 400, grpc: 'INVALID_ARGUMENT', message: '%s' },
  GW_ERR_CACHE_OFF: { http: 404, grpc: 'NOT_FOUND', message: 'this gateway has no response cache' },
  GW_ERR_ADMIN_UNAUTHORIZED: {
    http: 401, grpc: 'UNAUTHENTICATED',
    message: 'the admin API needs an Authorization: Bearer <token> header (the token the gateway was started with)'
  },
  GW_ERR_ADMIN_FORBIDDEN: { http: 403, grpc: 'PERMISSION_DENIED', message: 'the admin token does not match' },
  GW_ERR_ADMIN_UNKNOWN_ENDPOINT: { http: 404, grpc: 'NOT_FOUND', message: "no endpoint named '%s' in the fleet (endpoints: %s)" },
  GW_ERR_ADMIN_UNKNOWN_CANARY: { http: 404, grpc: 'NOT_FOUND', message: "model '%s' has no canary (canaries: %s)" },
  GW_ERR_ADMIN_CONFLICT: { http: 409, grpc: 'ALREADY_EXISTS', message: '%s' },
  GW_ERR_ADMIN_DISCOVERY: {
    http: 502, grpc: 'UNAVAILABLE',
    message: "could not discover the models of '%s' from its repository index: %s; name them with 'models' instead"
  },
  // Refused at start: an admin listener anyone on the network could reach, with nothing to tell friend from foe.
  GW_ERR_ADMIN_TOKEN_REQUIRED: {
    http: 500, grpc: 'FAILED_PRECONDITION',
    message: 'the admin listener on %s is not loopback-only, so it needs a token: set gateway.admin_token_file or FLOTILLA_ADMIN_TOKEN, or bind it to 127.0.0.1'
  },
  GW_ERR_ADMIN_TOKEN_FILE: { http: 500, grpc: 'FAILED_PRECONDITION', message: "cannot read the admin token file '%s': %s" },
  // Refused before the token and the route: a call made by a web page (CSRF), or one that reached the admin listener
  // under a name a web page controls (DNS rebinding). See gateway/admin/admin-guard.ts.
  GW_ERR_ADMIN_CROSS_SITE: {
    http: 403, grpc: 'PERMISSION_DENIED',
    message: "the admin API does not answer web pages: this call carries %s, which browsers send and 'flotilla fleet' " +
      'and curl do not; make admin calls from the command line, not from a browser'
  },
  GW_ERR_ADMIN_HOST: {
    http: 403, grpc: 'PERMISSION_DENIED',
    message: 'the admin API does not answer to %s, only to IP addresses, localhost%s (a web page that points its own ' +
      'name at this machine, DNS rebinding, sends a foreign Host); call it by address, or list the name in ' +
      'gateway.admin_allowed_hosts'
  },
  GW_ERR_ADMIN_CONTENT_TYPE: {
    http: 415, grpc: 'INVALID_ARGUMENT',
    message: "%s %s needs the header Content-Type: application/json, got %s; send it on every POST, PUT and DELETE, " +
      "even one without a body (curl: -H 'content-type: application/json')"
  },

  // command line
  CLI_ERR_USAGE: { http: 400, grpc: 'INVALID_ARGUMENT', message: '%s' }
} as const satisfies Record<string, ErrorSpec>

export type ErrorCode = keyof typeof errorCodes

const kFlotillaError = Symbol.for('flotilla.error')

/** An error with a registered code. `statusCode` is what an HTTP front answers with. */
export class FlotillaError extends Error {
  readonly code: ErrorCode
  readonly statusCode: number
  readonly grpcStatus: GrpcStatusName
  readonly [kFlotillaError] = true

  constructor (code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'FlotillaError'
    this.code = code
    this.statusCode = errorCodes[code].http
    this.grpcStatus = errorCodes[code].grpc
  }
}

/** Builds the error for `code`, filling the registry's `%s` placeholders with `args` in order. */
export function createError (code: ErrorCode, ...args: ReadonlyArray<string | number | bigint>): FlotillaError {
  let i = 0
  const message = errorCodes[code].message.replace(/%s/g, () => (i < args.length ? String(args[i++]) : '%s'))
  return new FlotillaError(code, message)
}

/** Like {@link createError}, chaining the underlying cause. */
export function wrapError (code: ErrorCode, cause: unknown, ...args: ReadonlyArray<string | number | bigint>): FlotillaError {
  const err = createError(code, ...args)
  Object.defineProperty(err, 'cause', { value: cause, enumerable: false, configurable: true, writable: true })
  return err
}

export function isFlotillaError (err: unknown): err is FlotillaError {
  return typeof err === 'object' && err !== null && (err as Record<symbol, unknown>)[kFlotillaError] === true
}

/** The KServe v2 / Triton HTTP error body: a single-key compact JSON object. */
export function errorBody (message: string): string {
  return JSON.stringify({ error: message })
}
