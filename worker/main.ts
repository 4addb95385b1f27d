/**
 * Starts a worker: load the model repository, then serve KServe v2 HTTP and gRPC, and Prometheus metrics.
 * No process-level side effects here (signals, exit): the CLI owns those.
 */
import { type Server } from 'node:http'
import { resolve } from 'node:path'
import { closeGrpc, listenGrpc } from '../common/grpc-server.ts'
import { closeServer, listen, listenServer, originOf } from '../common/http-server.ts'
import { createLogger, type Logger } from '../common/logger.ts'
import { loadNative, nativeLoadError } from '../native/index.ts'
import { logCacheUse, ResponseCache, type ResponseCacheConfig } from './cache/response-cache.ts'
import { InferenceService, usesResponseCache } from './inference/inference-service.ts'
import { type GpuDevice } from './instances/instance-groups.ts'
import { ConsulRegistration } from './registration/consul-registration.ts'
import { registrationSettings, type WorkerConsulOptions } from './registration/service-definition.ts'
import { ModelRepository } from './repository/model-repository.ts'
import { DrainTracker } from './server/drain.ts'
import { WorkerMetrics, type PendingCount } from './server/metrics.ts'
import { buildWorkerGrpc, DEFAULT_GRPC_MAX_MESSAGE_BYTES } from './server/grpc.ts'
import { buildWorkerHttp } from './server/http.ts'
import { ModelStatistics } from './inference/statistics.ts'

export const DEFAULT_WORKER_HTTP_PORT = 8000
export const DEFAULT_WORKER_GRPC_PORT = 8001
export const DEFAULT_WORKER_METRICS_PORT = 8002
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
export const DEFAULT_SHUTDOWN_QUIET_MS = 300
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000
/**
 * A little above the gateway's default (100): a gateway passes a client's headers on and adds its own, so a request
 * the gateway accepts is never refused by the worker behind it.
 */
export const DEFAULT_WORKER_HEADER_COUNT = 128
/**
 * After the drain, gRPC calls still open get this long to end before they are cancelled: by then none is working
 * on a request (the drain counts those), so what is left is streams a client keeps open with nothing in them.
 */
const GRPC_CLOSE_GRACE_MS = 200

export interface WorkerOptions {
  modelRepository: string
  host?: string
  /** 0 binds an ephemeral port; the bound one is in {@link RunningWorker.httpPort}. */
  httpPort?: number
  /** 0 binds an ephemeral port; -1 disables the gRPC listener. Default 8001, Triton's. */
  grpcPort?: number
  /** 0 binds an ephemeral port; -1 disables the metrics listener. */
  metricsPort?: number
  maxBodyBytes?: number
  /** Time for a request's head to arrive, in ms (default 10 s; see `common/http-server.ts`). */
  headerTimeoutMs?: number
  /** Time for a whole request to arrive, in ms (default 300 s). */
  bodyTimeoutMs?: number
  /** How long an idle keep-alive connection stays open, in ms (default 72 s). */
  idleTimeoutMs?: number
  /** Largest request head in bytes (default 16 KiB, Node's). */
  maxHeaderBytes?: number
  /** Most header fields in a request (default {@link DEFAULT_WORKER_HEADER_COUNT}). */
  maxHeaderCount?: number
  /** Largest gRPC request message, in bytes (default 64 MiB). */
  grpcMaxMessageBytes?: number
  /**
   * On {@link RunningWorker.close}, the draining phase ends once no request has been in progress and none has
   * arrived for this many milliseconds (default 300): long enough for a gateway that is about to send one more
   * request to send it, or to see the draining header or the failing readiness check first.
   */
  shutdownQuietMs?: number
  /**
   * The draining phase ends at the latest this many milliseconds after {@link RunningWorker.close} began (default
   * 30 000), whatever is still in progress; requests still running then are waited for all the same.
   */
  drainTimeoutMs?: number
  /**
   * Triton's response cache (`--cache-config local,size=N`, parsed by `parseCacheConfig` in
   * worker/cache/response-cache.ts), for the models whose config enables `response_cache`. Absent: no cache, and
   * those models load and run uncached, as in Triton.
   */
  responseCache?: ResponseCacheConfig
  /**
   * Registers the worker in Consul once it listens, for gateways that discover their workers there (see
   * worker/registration/): its ready models as tags, kept up to date while it runs; Consul checks
   * `/v2/health/ready`. Consul being unreachable never stops the worker from starting or serving: it registers
   * once the agent answers. Absent: no registration. Settings that cannot work throw `FLT_ERR_CONSUL_CONFIG`
   * before any model loads.
   */
  consul?: WorkerConsulOptions
  logger?: Logger
  random?: () => number
}

export interface RunningWorker {
  readonly httpPort: number
  /** The bound gRPC port, or -1 when the gRPC listener is off. */
  readonly grpcPort: number
  readonly metricsPort: number
  readonly url: string
  readonly repository: ModelRepository
  /** Each loaded version's statistics (`GET /v2/models/stats`), which the metrics port also reports. */
  readonly statistics: ModelStatistics
  /** The worker's Consul entry ({@link WorkerOptions.consul}): its `serviceId`, whether it is `registered`. */
  readonly registration: ConsulRegistration | undefined
  /**
   * Graceful stop, so that a gateway in front loses no request. With {@link WorkerOptions.consul}, the service
   * is first put in maintenance (critical in the catalog, so gateways that discover it there stop sending; an
   * agent that does not answer is given 2 s). Then the draining phase: `/v2/health/ready`
   * answers 400 at once and every response from then on (those of requests already in flight included) carries
   * `x-flotilla-draining: 1` (WORKER_DRAINING_HEADER in common/protocol/headers.ts), while the worker keeps serving
   * everything that reaches it, new requests included. It ends when no request is in progress and none has arrived
   * for {@link WorkerOptions.shutdownQuietMs}, or {@link WorkerOptions.drainTimeoutMs} after close() began,
   * whichever comes first. Then the listener closes (new requests get 503, those still running finish), the models
   * are unloaded and the metrics listener closes, and last the service is deregistered from Consul (2 s at most).
   * With no traffic it resolves after about `shutdownQuietMs`.
   * Repeated calls return the same promise; once it resolves no timer or socket of the worker is left.
   */
  close (): Promise<void>
}

export async function startWorker (options: WorkerOptions): Promise<RunningWorker> {
  const shutdownQuietMs = milliseconds('shutdownQuietMs', options.shutdownQuietMs, DEFAULT_SHUTDOWN_QUIET_MS)
  const drainTimeoutMs = milliseconds('drainTimeoutMs', options.drainTimeoutMs, DEFAULT_DRAIN_TIMEOUT_MS)
  const host = options.host ?? '127.0.0.1'
  const logger = options.logger ?? createLogger({ bindings: { component: 'worker' } })
  const consul = options.consul === undefined ? undefined : registrationSettings(options.consul, host)
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES
  const responseCache = options.responseCache === undefined ? undefined : new ResponseCache({ sizeBytes: options.responseCache.sizeBytes, logger })
  // Both read lazily (at scrape time, per loaded version), so they can exist before the repository they describe.
  const metrics: WorkerMetrics = new WorkerMetrics({
    statistics: () => statistics.all(),
    pending: () => pendingByVersion(repository),
    ...(responseCache !== undefined ? { cache: () => responseCache.stats } : {})
  })
  const statistics: ModelStatistics = new ModelStatistics({ latency: (model, version) => metrics.latency(model, version) })
  const devices = nativeDevices(logger)
  const repository = new ModelRepository({
    root: resolve(options.modelRepository),
    logger,
    devices: () => devices,
    // Each loaded version's scheduler reports to its statistics, which the metrics read.
    observer: (model, version, config) => statistics.observerFor(model, version, { cacheEnabled: usesResponseCache(config, responseCache) }),
    ...(options.random !== undefined ? { random: options.random } : {})
  })
  await repository.loadAll()
  logCacheUse(repository, responseCache, logger)

  const drain = new DrainTracker()
  const service = new InferenceService({
    repository, statistics, draining: () => drain.draining, ...(responseCache !== undefined ? { responseCache } : {})
  })
  const app = buildWorkerHttp({
    service,
    repository,
    logger,
    bodyLimit: maxBodyBytes,
    drain,
    limits: {
      headerCountLimit: options.maxHeaderCount ?? DEFAULT_WORKER_HEADER_COUNT,
      ...(options.maxHeaderBytes !== undefined ? { headerLimit: options.maxHeaderBytes } : {}),
      ...(options.headerTimeoutMs !== undefined ? { headerTimeoutMs: options.headerTimeoutMs } : {}),
      ...(options.bodyTimeoutMs !== undefined ? { bodyTimeoutMs: options.bodyTimeoutMs } : {}),
      ...(options.idleTimeoutMs !== undefined ? { idleTimeoutMs: options.idleTimeoutMs } : {})
    }
  })
  const wantedGrpcPort = options.grpcPort ?? DEFAULT_WORKER_GRPC_PORT
  const grpcServer = wantedGrpcPort >= 0
    ? buildWorkerGrpc({ service, logger, drain, maxMessageBytes: options.grpcMaxMessageBytes ?? DEFAULT_GRPC_MAX_MESSAGE_BYTES })
    : undefined
  let metricsServer: Server | undefined
  /**
   * fastify's close waits for in-flight requests (return503OnClosing refuses new ones meanwhile); only then are
   * the models unloaded (js finalize() included), so nothing that was accepted loses its model mid-way. The same
   * steps serve a failed start and close().
   */
  const teardown = async (): Promise<void> => {
    await Promise.all([app.close(), grpcServer === undefined ? undefined : closeGrpc(grpcServer, GRPC_CLOSE_GRACE_MS)])
    await repository.unloadAll()
    await closeServer(metricsServer)
  }
  let httpPort: number
  let grpcPort = -1
  let metricsPort = -1
  try {
    httpPort = await listen(app, host, options.httpPort ?? DEFAULT_WORKER_HTTP_PORT)
    if (grpcServer !== undefined) grpcPort = await listenGrpc(grpcServer, host, wantedGrpcPort)
    const wantedMetricsPort = options.metricsPort ?? DEFAULT_WORKER_METRICS_PORT
    if (wantedMetricsPort >= 0) {
      metricsServer = metrics.createServer()
      metricsPort = await listenServer(metricsServer, host, wantedMetricsPort)
    }
  } catch (err) {
    // A port in use: release the other listener and the loaded models before reporting.
    await teardown()
    throw err
  }
  const url = originOf(host, httpPort)
  logger.info({ url, grpcPort, metricsPort, models: repository.index() }, 'worker listening')
  // Only now: the entry names the bound ports, and a gateway may send as soon as it appears.
  const registration = consul === undefined ? undefined : new ConsulRegistration({
    settings: consul,
    httpPort,
    grpcPort,
    metricsPort,
    logger,
    readyModels: () => repository.index(true),
    ready: () => service.ready(),
    ...(options.random !== undefined ? { random: options.random } : {})
  })
  registration?.start()

  let closing: Promise<void> | undefined
  return {
    httpPort,
    grpcPort,
    metricsPort,
    url,
    repository,
    statistics,
    registration,
    close () {
      closing ??= (async () => {
        // Before the drain, so that its quiet period also covers gateways that learn of the stop from Consul.
        await registration?.maintenance()
        logger.info({ inFlight: drain.inFlight, shutdownQuietMs, drainTimeoutMs }, 'draining: reporting not-ready, still serving')
        const end = await drain.drain({ quietMs: shutdownQuietMs, timeoutMs: drainTimeoutMs, pending: () => repository.pendingRequests() })
        logger.info({ reason: end.reason, inFlight: end.inFlight, durationMs: Math.round(end.durationMs) },
          end.reason === 'quiet' ? 'drained: closing' : 'drain timed out: closing, still waiting for the requests in flight')
        try {
          await teardown()
        } finally {
          await registration?.close()
        }
      })()
      return closing
    }
  }
}

/** Each READY version's queued requests (received, not yet handed to an instance), for the pending-request gauge. */
function pendingByVersion (repository: ModelRepository): PendingCount[] {
  const out: PendingCount[] = []
  for (const e of repository.index(true)) {
    if (e.version === undefined) continue
    out.push({ model: e.name, version: Number(e.version), count: repository.resolve(e.name, e.version).scheduler.queueDepth })
  }
  return out
}

function milliseconds (name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback
  // A programming error in the embedding code, not an operational one: thrown like Node's own option checks.
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${name} must be a non-negative number of milliseconds, got ${value}`)
  return value
}

/**
 * The GPUs the native module sees, listed once at start (KIND_AUTO and KIND_GPU groups are placed on them). A worker
 * whose addon does not load still serves every other backend: that is logged, and models on `native` fail their load
 * with the reason.
 */
function nativeDevices (logger: Logger): GpuDevice[] {
  const reason = nativeLoadError()
  if (reason !== undefined) {
    logger.warn({ reason }, 'native module unavailable: models on the native backend will not load')
    return []
  }
  const native = loadNative()
  const devices = native.devices()
  logger.info({ cpu: native.cpu(), cuda: native.cudaCompiledIn, gpus: devices, ...(devices.length === 0 ? { why: native.cudaReason() } : {}) },
    'native module loaded')
  return devices.map(d => ({ id: d.id, name: d.name }))
}
