/**
 * Starts a gateway from a validated fleet config: the HTTP and gRPC fronts, the metrics listener, one connection
 * pool per server. No process-level side effects (signals, exit, global metrics): the CLI owns those, and tests
 * start as many gateways in one process as they like.
 */
import { type Server } from 'node:http'
import { performance } from 'node:perf_hooks'
import { Agent } from 'undici'
import { closeGrpc, listenGrpc } from '../common/grpc-server.ts'
import { closeServer, listen, listenServer, originOf } from '../common/http-server.ts'
import { createLogger, type Logger } from '../common/logger.ts'
import { WORKER_DRAINING_HEADER } from '../common/protocol/headers.ts'
import { balancerNames, hasBalancer, validateBalancerOptions } from './balancer/registry.ts'
import { type BalancerDeps } from './balancer/types.ts'
import { loadFleetFile, type FleetConfig } from './fleet/fleet-config.ts'
import { Fleet } from './fleet/fleet.ts'
import { FleetHealth } from './health/fleet-health.ts'
import { createHttpProbe } from './health/http-probe.ts'
import { type Timers } from './health/types.ts'
import { AttemptTimeouts, attemptTimeoutSettingsOf } from './proxy/attempt-timeout.ts'
import { Forwarder, REAL_TIMERS } from './proxy/forward.ts'
import { ModelPolicies } from './proxy/model-policy.ts'
import { ModelPipeline } from './proxy/pipeline.ts'
import { retrySettingsOf } from './proxy/retry-policy.ts'
import { UpstreamPool, type PoolFactory } from './proxy/upstream-pool.ts'
import { adminToken, buildAdminServer } from './admin/admin-server.ts'
import { Canaries } from './canary/canaries.ts'
import { FleetController } from './fleet/fleet-controller.ts'
import { FleetWatcher } from './fleet/fleet-watcher.ts'
import { buildGatewayGrpc } from './server/grpc.ts'
import { buildGatewayHttp } from './server/http.ts'
import { readinessOf, type Readiness } from './server/readiness.ts'
import { registerCacheMetrics } from './cache/cache-metrics.ts'
import { LocalStore } from './cache/local-store.ts'
import { ModelCacheConfigs } from './cache/model-cache-config.ts'
import { RedisStore } from './cache/redis-store.ts'
import { ResponseCache } from './cache/response-cache.ts'
import { GatewayMetrics } from './server/metrics.ts'
import { ConsulDiscovery } from './discovery/consul-discovery.ts'
import { registerDiscoveryMetrics } from './discovery/discovery-metrics.ts'

/** Options for {@link startGateway}; everything but `config` is optional. */
export interface GatewayOptions {
  config: FleetConfig
  /** Overrides `gateway.host`. */
  host?: string
  /** Overrides `gateway.http_port`; 0 binds an ephemeral port (see {@link RunningGateway.httpPort}). */
  httpPort?: number
  /** Overrides `gateway.grpc_port`; 0 binds an ephemeral port, a negative value disables the gRPC listener. */
  grpcPort?: number
  /** Overrides `gateway.metrics_port`; 0 binds an ephemeral port, a negative value disables the listener. */
  metricsPort?: number
  logger?: Logger
  /** Time and randomness for the balancer and durations; `performance.now` and `Math.random` by default. */
  deps?: Partial<BalancerDeps>
  /** Builds each server's connection pool; undici's `Pool` by default. For tests. */
  poolFactory?: PoolFactory
  /** Overrides `gateway.admin_port`; 0 binds an ephemeral port, a negative value disables the admin listener. */
  adminPort?: number
  /** Overrides `gateway.admin_host`. */
  adminHost?: string
  /**
   * Where the admin token comes from when `gateway.admin_token_file` is not set (`FLOTILLA_ADMIN_TOKEN`), and
   * discovery's Consul address and token when the fleet file does not name them (`CONSUL_HTTP_ADDR`,
   * `CONSUL_HTTP_TOKEN`). Default `process.env`.
   */
  env?: NodeJS.ProcessEnv
  /**
   * The fleet file `config` was loaded from: {@link RunningGateway.reload} re-reads it, and with `gateway.watch`
   * (the default) a change on disk reloads it. Without it, reload has nothing to read.
   */
  configPath?: string
}

/** How a reload went. */
export type ReloadResult =
  | { readonly applied: true, readonly summary: string }
  | { readonly applied: false, readonly error: string }

/** A started gateway: where it listens, and how to stop it. */
export interface RunningGateway {
  /** The bound HTTP port. */
  readonly httpPort: number
  /** The bound gRPC port, or -1 when the gRPC listener is disabled. */
  readonly grpcPort: number
  /** The bound metrics port, or -1 when the metrics listener is disabled. */
  readonly metricsPort: number
  /** The bound admin port, or -1 when the admin listener is disabled. */
  readonly adminPort: number
  /** `http://host:port` of the HTTP front. */
  readonly url: string
  /**
   * Re-reads the fleet file and applies it as a diff (see `fleet/fleet-controller.ts`). An invalid file is
   * rejected with its problems logged, and the running fleet stays as it was. Reloads run one at a time.
   */
  reload (): Promise<ReloadResult>
  /**
   * Graceful stop: stop listening (requests arriving on open connections meanwhile get 503 with `Connection:
   * close`), let requests in flight finish for up to `gateway.shutdown_timeout_ms` (then cut them), close the
   * upstream connections and the other listeners. Calling it again returns the same promise.
   */
  close (): Promise<void>
}

/**
 * Loads and validates a fleet file against the registered balancing strategies. What the CLI and tests call
 * before {@link startGateway}.
 *
 * @throws FlotillaError `GW_ERR_FLEET_INVALID` listing every problem in the file
 */
export function loadGatewayConfig (path: string): FleetConfig {
  return loadFleetFile(path, {
    isKnownStrategy: hasBalancer,
    knownStrategies: balancerNames(),
    strategyOptionProblems: validateBalancerOptions
  })
}

/**
 * Starts a gateway and resolves once both listeners are bound.
 *
 * @throws FlotillaError `GW_ERR_FLEET_INVALID` when `load_balancer.type` names no registered strategy
 */
export async function startGateway (options: GatewayOptions): Promise<RunningGateway> {
  const config = options.config
  const settings = config.gateway
  const host = options.host ?? settings.host
  const logger = options.logger ?? createLogger({ bindings: { component: 'gateway' } })
  const deps: BalancerDeps = {
    now: options.deps?.now ?? (() => performance.now()),
    random: options.deps?.random ?? Math.random
  }

  const wantedAdminPort = options.adminPort ?? settings.admin_port
  const adminHost = options.adminHost ?? settings.admin_host
  // Read before anything starts: a missing token must not leave a half-started gateway behind.
  const token = wantedAdminPort >= 0 ? adminToken(adminHost, settings.admin_token_file, options.env) : undefined

  let current = config
  const policies = new ModelPolicies(config, deps)
  const canaries = new Canaries({
    now: deps.now,
    random: deps.random,
    onRollback: (event) => {
      const what = { model: event.model, reason: event.reason, baseline: event.baseline, canary: event.canary }
      if (event.automatic) logger.warn(what, 'canary rolled back automatically: it did worse than the baseline')
      else logger.info(what, 'canary rolled back')
      metrics.canaryRollback(event.model, event.automatic)
    }
  })
  const pool = new UpstreamPool(options.poolFactory === undefined ? {} : { factory: options.poolFactory })
  const timers: Timers = {
    now: deps.now,
    // Unref'd: health timers alone never keep a process alive (the listeners do, while the gateway runs).
    setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
    clearTimeout: (handle) => { clearTimeout(handle as NodeJS.Timeout) }
  }
  // Created before health and the forwarder, whose events it counts. Its gauges read them (declared below) only
  // at scrape time, once the listeners are up.
  const metrics = new GatewayMetrics({
    endpoints: () => fleet.endpoints,
    queueWaiting: () => forwarder.admission.waiting,
    health: (endpoint) => {
      const view = fleetHealth.view(endpoint)
      return { healthy: view.healthy ?? true, ejected: view.ejected }
    },
    canaryPercents: () => canaries.list().map((c) => ({ model: c.canary.model, percent: c.canary.percent }))
  })
  // Probes get their own keep-alive agent: a check must not wait behind, or be counted with, traffic.
  const probeAgent = new Agent({ connections: 1 })
  const fleetHealth = new FleetHealth({
    config,
    probe: createHttpProbe(() => probeAgent),
    timers,
    random: deps.random,
    logger,
    onTransition: (t) => {
      metrics.healthTransition(t.endpoint.name, t.model, t.healthy)
      controller.healthChanged(t)
    },
    onEjection: (e) => { if (e.ejected) metrics.ejection(e.endpoint.name) }
  })
  const fleet = Fleet.fromConfig(config, { usable: fleetHealth.usable })
  fleetHealth.attach(fleet)
  const controller = new FleetController({
    fleet,
    health: fleetHealth,
    pool,
    timers,
    logger,
    drainTimeoutMs: settings.drain_timeout_ms,
    slowStartMs: settings.slow_start_ms
  })
  canaries.applyFile(config.canary)
  const forwarder = new Forwarder({
    pool,
    retries: retrySettingsOf(config.retries),
    attemptTimeouts: new AttemptTimeouts(attemptTimeoutSettingsOf(config.retries), { ...REAL_TIMERS, now: deps.now }),
    admission: { maxQueued: settings.max_queued_requests, queueTimeoutMs: settings.queue_timeout_ms },
    // Request deadlines must not be unref'd, unlike health timers: they end requests a listener is serving.
    timers: { ...REAL_TIMERS, now: deps.now },
    random: deps.random,
    observer: {
      attempt: (endpoint, status, queueDepth) => { fleetHealth.record(endpoint, status, queueDepth) },
      retry: (model, cause) => { metrics.retry(model, cause) },
      retryDenied: (model, reason) => { metrics.retryDenied(model, reason) },
      draining: (endpoint) => { fleetHealth.failNow(endpoint, `it answered ${WORKER_DRAINING_HEADER}: shutting down`) },
      queued: (model, waitedMs, outcome) => { metrics.queueWait(model, outcome, waitedMs / 1000) }
    }
  })
  const localCache = new LocalStore(config.cache.max_bytes)
  const cacheMetrics = registerCacheMetrics(metrics.registry, () => localCache)
  const modelCacheConfigs = new ModelCacheConfigs({ fleet, dispatcherFor: (e) => pool.dispatcherFor(e), logger })
  const redis = config.cache.redis
  // Never fails the start: a Redis that is down is retried in the background, and until then every look-up misses.
  const sharedCache = redis === undefined
    ? undefined
    : new RedisStore({
      url: redis.url,
      timeoutMs: redis.timeout_ms,
      keyPrefix: redis.key_prefix,
      logger,
      onError: (kind) => { cacheMetrics.redisError(kind) }
    })
  const cache = new ResponseCache({
    settings: config.cache,
    local: localCache,
    shared: sharedCache,
    enabledByModelConfig: (model) => modelCacheConfigs.enabled(model),
    timers,
    observer: cacheMetrics
  })
  // Built before anything listens: a discovery section that cannot work (address, token file) refuses the start.
  const consul = config.discovery.consul
  const discovery = consul === undefined
    ? undefined
    : new ConsulDiscovery({
      config: consul,
      env: options.env ?? process.env,
      timers,
      random: deps.random,
      logger,
      onServers: (servers) => {
        const changes = controller.setDiscovered(servers)
        if (changes.added.length + changes.leaving.length + changes.replaced.length > 0) {
          logger.info({ source: 'consul', servers: servers.length, ...changes }, 'fleet changed by discovery')
        }
      },
      onError: () => { discoveryMetrics?.error() }
    })
  const discoveryMetrics = discovery === undefined ? undefined : registerDiscoveryMetrics(metrics.registry, () => discovery.status)
  const pipeline = new ModelPipeline({ fleet, forwarder, policies, canaries, metrics, now: deps.now, cache })
  const readiness = (): Readiness => readinessOf(fleet, settings.ready_when)
  const app = buildGatewayHttp({
    fleet,
    pipeline,
    forwarder,
    policies,
    health: (endpoint) => fleetHealth.view(endpoint),
    logger,
    bodyLimit: settings.max_body_bytes,
    headerLimit: settings.max_header_bytes,
    limits: {
      headerCountLimit: settings.max_header_count,
      headerTimeoutMs: settings.header_timeout_ms,
      bodyTimeoutMs: settings.body_timeout_ms,
      idleTimeoutMs: settings.idle_timeout_ms
    },
    fanOutTimeoutMs: settings.request_timeout_ms,
    now: deps.now,
    readiness,
    cache,
    sourceOf: (endpoint) => controller.sourceOf(endpoint),
    discovery: discovery === undefined ? undefined : () => discovery.status
  })

  const wantedGrpcPort = options.grpcPort ?? settings.grpc_port
  const grpcServer = wantedGrpcPort >= 0
    ? buildGatewayGrpc({
      pipeline,
      forwarder,
      logger,
      maxMessageBytes: settings.max_body_bytes,
      fanOutTimeoutMs: settings.request_timeout_ms,
      readiness
    })
    : undefined

  const admin = buildAdminServer({
    fleet,
    controller,
    canaries,
    health: (endpoint) => fleetHealth.view(endpoint),
    logger,
    token,
    host: adminHost,
    ...(settings.admin_allowed_hosts !== undefined ? { allowedHosts: settings.admin_allowed_hosts } : {}),
    config: () => effectiveConfig(current, fleet, canaries, (name) => {
      const endpoint = fleet.get(name)
      return endpoint !== undefined && controller.sourceOf(endpoint) !== 'consul'
    }),
    cache,
    now: deps.now
  })

  let metricsServer: Server | undefined
  let watcher: FleetWatcher | undefined
  let adminStarted = false
  const shutdownMs = settings.shutdown_timeout_ms
  /**
   * Releases everything, in order: no more reloads, probes, ejection or drain timers, admin calls; then fastify's
   * close waits for requests in flight (up to the shutdown timeout, then their connections are cut), whose
   * upstream exchanges still need the pools. The same steps serve a failed start and close().
   */
  const teardown = async (): Promise<void> => {
    await discovery?.stop()
    watcher?.close()
    modelCacheConfigs.stop()
    fleetHealth.stop()
    controller.stop()
    await probeAgent.destroy()
    if (adminStarted) await admin.close()
    const cut = setTimeout(() => {
      logger.warn({ timeoutMs: shutdownMs }, 'shutdown timeout passed: cutting the requests still in flight')
      app.server.closeAllConnections()
      pool.destroy().catch(() => {})
    }, shutdownMs)
    try {
      await Promise.all([app.close(), grpcServer === undefined ? undefined : closeGrpc(grpcServer, shutdownMs)])
      await pool.close()
    } finally {
      clearTimeout(cut)
    }
    await closeServer(metricsServer)
    await cache.close()
  }
  let httpPort: number
  let grpcPort = -1
  let metricsPort = -1
  let adminPort = -1
  try {
    httpPort = await listen(app, host, options.httpPort ?? settings.http_port)
    if (grpcServer !== undefined) grpcPort = await listenGrpc(grpcServer, host, wantedGrpcPort)
    const wantedMetricsPort = options.metricsPort ?? settings.metrics_port
    if (wantedMetricsPort >= 0) {
      metricsServer = metrics.createServer()
      metricsPort = await listenServer(metricsServer, host, wantedMetricsPort)
    }
    if (wantedAdminPort >= 0) {
      adminPort = await listen(admin, adminHost, wantedAdminPort)
      adminStarted = true
    }
  } catch (err) {
    // One listener bound and the other not (port in use): release what was taken before reporting.
    await teardown()
    throw err
  }
  // Asking the workers for their configs is an active check like the health probes, and off with them.
  if (config.health_check.enabled) modelCacheConfigs.start()
  discovery?.start()
  const url = originOf(host, httpPort)
  logger.info({
    url,
    grpcPort,
    metricsPort,
    adminPort,
    balancer: config.load_balancer.type,
    servers: fleet.endpoints.map((e) => `${e.name}=${e.origin}`),
    models: fleet.models
  }, 'gateway listening')

  let reloading: Promise<ReloadResult> = Promise.resolve({ applied: true, summary: '' })
  const reloadOnce = async (): Promise<ReloadResult> => {
    const path = options.configPath
    if (path === undefined) return { applied: false, error: 'the gateway was started without a fleet file path' }
    let next: FleetConfig
    try {
      next = loadGatewayConfig(path)
    } catch (err) {
      const error = (err as Error).message
      logger.error({ file: path, problems: error.split('\n') }, 'fleet file rejected; the running fleet is unchanged')
      metrics.reload(false)
      return { applied: false, error }
    }
    const changes = controller.applyFile(next)
    policies.apply(next)
    const canaryChanges = canaries.applyFile(next.canary)
    const restart: string[] = RESTART_SECTIONS.filter((k) => JSON.stringify(next[k]) !== JSON.stringify(current[k]))
    // The fleet computes panic with the threshold it was built with.
    if (next.load_balancer.panic_threshold_percent !== current.load_balancer.panic_threshold_percent) {
      restart.push('load_balancer.panic_threshold_percent')
    }
    current = next
    metrics.reload(true)
    const summary = { ...changes, canaries: canaryChanges }
    logger.info({ file: path, ...summary }, 'fleet file reloaded')
    if (restart.length > 0) {
      logger.warn({ sections: restart }, 'fleet file sections changed that apply only at the next start')
    }
    return { applied: true, summary: JSON.stringify(summary) }
  }
  const reload = (): Promise<ReloadResult> => {
    reloading = reloading.then(reloadOnce, reloadOnce)
    return reloading
  }
  if (options.configPath !== undefined && settings.watch) {
    try {
      watcher = new FleetWatcher(options.configPath, timers, () => { reload().catch(() => {}) })
    } catch (err) {
      logger.warn({ err, file: options.configPath }, 'cannot watch the fleet file; reload it with SIGHUP')
    }
  }

  let closing: Promise<void> | undefined
  return {
    httpPort,
    grpcPort,
    metricsPort,
    adminPort,
    url,
    reload,
    close () {
      closing ??= teardown()
      return closing
    }
  }
}

/**
 * Sections a reload does not apply: listeners, limits and settings the running proxy and checkers were built with
 * (and `load_balancer.panic_threshold_percent`, checked apart). A change to them is logged, and applies at the next
 * start.
 */
const RESTART_SECTIONS = ['gateway', 'retries', 'health_check', 'outlier_detection', 'cache', 'discovery'] as const

/**
 * The config as it runs now: the file's, with the live servers (admin changes included) and canaries. Servers found
 * by discovery are not among `inference_servers`: the `discovery` section stands for them, so the answer still
 * reads as a fleet file that would start this fleet.
 */
function effectiveConfig (config: FleetConfig, fleet: Fleet, canaries: Canaries, listed: (name: string) => boolean): unknown {
  return {
    ...config,
    inference_servers: fleet.servers().filter((s) => listed(s.name)).map((s) => ({ ...s, protocol: 'http' })),
    load_balancer: { ...config.load_balancer, servers: undefined },
    canary: Object.fromEntries(canaries.list().map((c) => [c.canary.model, c.config]))
  }
}
