/**
 * Starts a worker: load the model repository, then serve KServe v2 HTTP and Prometheus metrics.
 * No process-level side effects here (signals, exit): the CLI owns those.
 */
import { type Server } from 'node:http'
import { resolve } from 'node:path'
import { closeServer, listen, listenServer, originOf } from '../common/http-server.ts'
import { createLogger, type Logger } from '../common/logger.ts'
import { ModelRepository } from './repository/model-repository.ts'
import { WorkerMetrics } from './server/metrics.ts'
import { buildWorkerHttp } from './server/http.ts'

export const DEFAULT_WORKER_HTTP_PORT = 8000
export const DEFAULT_WORKER_METRICS_PORT = 8002
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024

export interface WorkerOptions {
  modelRepository: string
  host?: string
  /** 0 binds an ephemeral port; the bound one is in {@link RunningWorker.httpPort}. */
  httpPort?: number
  /** 0 binds an ephemeral port; -1 disables the metrics listener. */
  metricsPort?: number
  maxBodyBytes?: number
  logger?: Logger
  random?: () => number
}

export interface RunningWorker {
  readonly httpPort: number
  readonly metricsPort: number
  readonly url: string
  readonly repository: ModelRepository
  /**
   * Graceful stop: refuse new requests (503) and report not-ready, let queued and executing requests finish,
   * unload models. (A drain window before refusing, for gateways to notice, comes with runtime fleet operations.)
   */
  close (): Promise<void>
}

export async function startWorker (options: WorkerOptions): Promise<RunningWorker> {
  const host = options.host ?? '127.0.0.1'
  const logger = options.logger ?? createLogger({ bindings: { component: 'worker' } })
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES
  const repository = new ModelRepository({
    root: resolve(options.modelRepository),
    logger,
    ...(options.random !== undefined ? { random: options.random } : {})
  })
  await repository.loadAll()

  let accepting = true
  const metrics = new WorkerMetrics(() => repository.pendingRequests())
  const app = buildWorkerHttp({ repository, metrics, logger, bodyLimit: maxBodyBytes, isAccepting: () => accepting })
  let metricsServer: Server | undefined
  /**
   * fastify's close waits for in-flight requests (return503OnClosing refuses new ones meanwhile); only then are
   * the models unloaded (js finalize() included), so nothing that was accepted loses its model mid-way. The same
   * steps serve a failed start and close().
   */
  const teardown = async (): Promise<void> => {
    await app.close()
    await repository.unloadAll()
    await closeServer(metricsServer)
  }
  let httpPort: number
  let metricsPort = -1
  try {
    httpPort = await listen(app, host, options.httpPort ?? DEFAULT_WORKER_HTTP_PORT)
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
  logger.info({ url, metricsPort, models: repository.index() }, 'worker listening')

  let closing: Promise<void> | undefined
  return {
    httpPort,
    metricsPort,
    url,
    repository,
    close () {
      closing ??= (async () => {
        accepting = false
        await teardown()
      })()
      return closing
    }
  }
}
