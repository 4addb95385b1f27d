/**
 * Starts a gateway from a validated fleet config: the HTTP front, the metrics listener, one connection pool per
 * server. No process-level side effects (signals, exit, global metrics): the CLI owns those, and tests start as
 * many gateways in one process as they like.
 */
import { type Server } from 'node:http'
import { performance } from 'node:perf_hooks'
import { Agent } from 'undici'
import { closeServer, listen, listenServer, originOf } from '../common/http-server.ts'
import { createLogger, type Logger } from '../common/logger.ts'
import { balancerNames, hasBalancer, validateBalancerOptions } from './balancer/registry.ts'
import { type BalancerDeps } from './balancer/types.ts'
import { loadFleetFile, type FleetConfig } from './fleet/fleet-config.ts'
import { Fleet } from './fleet/fleet.ts'
import { FleetHealth } from './health/fleet-health.ts'
import { createHttpProbe } from './health/http-probe.ts'
import { type Timers } from './health/types.ts'
import { Forwarder, REAL_TIMERS } from './proxy/forward.ts'
import { ModelPolicies } from './proxy/model-policy.ts'
import { retrySettingsOf } from './proxy/retry-policy.ts'
import { UpstreamPool, type PoolFactory } from './proxy/upstream-pool.ts'
import { buildGatewayHttp } from './server/http.ts'
import { GatewayMetrics } from './server/metrics.ts'

/** Options for {@link startGateway}; everything but `config` is optional. */
export interface GatewayOptions {
  config: FleetConfig
  /** Overrides `gateway.host`. */
  host?: string
  /** Overrides `gateway.http_port`; 0 binds an ephemeral port (see {@link RunningGateway.httpPort}). */
  httpPort?: number
  /** Overrides `gateway.metrics_port`; 0 binds an ephemeral port, a negative value disables the listener. */
  metricsPort?: number
  logger?: Logger
  /** Time and randomness for the balancer and durations; `performance.now` and `Math.random` by default. */
  deps?: Partial<BalancerDeps>
  /** Builds each server's connection pool; undici's `Pool` by default. For tests. */
  poolFactory?: PoolFactory
}

/** A started gateway: where it listens, and how to stop it. */
export interface RunningGateway {
  /** The bound HTTP port. */
  readonly httpPort: number
  /** The bound metrics port, or -1 when the metrics listener is disabled. */
  readonly metricsPort: number
  /** `http://host:port` of the HTTP front. */
  readonly url: string
  /**
   * Graceful stop: stop listening (new requests get 503 meanwhile), let requests in flight finish, then close the
   * upstream connections and the metrics listener. Calling it again returns the same promise.
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

  const policies = new ModelPolicies(config, deps)
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
    }
  })
  // Probes get their own keep-alive agent: a check must not wait behind, or be counted with, traffic.
  const probeAgent = new Agent({ connections: 1 })
  const fleetHealth = new FleetHealth({
    config,
    probe: createHttpProbe(() => probeAgent),
    timers,
    random: deps.random,
    logger,
    onTransition: (t) => { metrics.healthTransition(t.endpoint.name, t.model, t.healthy) },
    onEjection: (e) => { if (e.ejected) metrics.ejection(e.endpoint.name) }
  })
  const fleet = Fleet.fromConfig(config, { usable: fleetHealth.usable })
  fleetHealth.attach(fleet)
  const forwarder = new Forwarder({
    pool,
    retries: retrySettingsOf(config.retries),
    admission: { maxQueued: settings.max_queued_requests, queueTimeoutMs: settings.queue_timeout_ms },
    // Request deadlines must not be unref'd, unlike health timers: they end requests a listener is serving.
    timers: { ...REAL_TIMERS, now: deps.now },
    random: deps.random,
    observer: {
      attempt: (endpoint, status, queueDepth) => { fleetHealth.record(endpoint, status, queueDepth) },
      retry: (model, cause) => { metrics.retry(model, cause) },
      retryDenied: (model, reason) => { metrics.retryDenied(model, reason) },
      queued: (model, waitedMs, outcome) => { metrics.queueWait(model, outcome, waitedMs / 1000) }
    }
  })
  const app = buildGatewayHttp({
    fleet,
    forwarder,
    policies,
    health: (endpoint) => fleetHealth.view(endpoint),
    metrics,
    logger,
    bodyLimit: settings.max_body_bytes,
    headerLimit: settings.max_header_bytes,
    fanOutTimeoutMs: settings.request_timeout_ms,
    now: deps.now
  })

  let metricsServer: Server | undefined
  /**
   * Releases everything, in order: no more probes or ejection timers; then fastify's close waits for requests in
   * flight, whose upstream exchanges still need the pools. The same steps serve a failed start and close().
   */
  const teardown = async (): Promise<void> => {
    fleetHealth.stop()
    await probeAgent.destroy()
    await app.close()
    await pool.close()
    await closeServer(metricsServer)
  }
  let httpPort: number
  let metricsPort = -1
  try {
    httpPort = await listen(app, host, options.httpPort ?? settings.http_port)
    const wantedMetricsPort = options.metricsPort ?? settings.metrics_port
    if (wantedMetricsPort >= 0) {
      metricsServer = metrics.createServer()
      metricsPort = await listenServer(metricsServer, host, wantedMetricsPort)
    }
  } catch (err) {
    // One listener bound and the other not (port in use): release what was taken before reporting.
    await teardown()
    throw err
  }

  const url = originOf(host, httpPort)
  logger.info({
    url,
    metricsPort,
    balancer: config.load_balancer.type,
    servers: fleet.endpoints.map((e) => `${e.name}=${e.origin}`),
    models: fleet.models
  }, 'gateway listening')

  let closing: Promise<void> | undefined
  return {
    httpPort,
    metricsPort,
    url,
    close () {
      closing ??= teardown()
      return closing
    }
  }
}
