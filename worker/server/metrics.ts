/**
 * Worker metrics with Triton's names and labels (triton-behaviour.md section 8), so dashboards built for Triton
 * work unchanged. Durations are cumulative microseconds, as Triton's counters are.
 */
import { createServer, type Server } from 'node:http'
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client'

export class WorkerMetrics {
  readonly registry = new Registry()
  readonly success: Counter<'model' | 'version'>
  readonly failure: Counter<'model' | 'version' | 'reason'>
  readonly inferenceCount: Counter<'model' | 'version'>
  readonly execCount: Counter<'model' | 'version'>
  readonly requestDurationUs: Counter<'model' | 'version'>
  readonly pending: Gauge

  constructor (pendingRequests: () => number) {
    const registers = [this.registry]
    this.success = new Counter({
      name: 'nv_inference_request_success', help: 'Number of successful inference requests, all batch sizes',
      labelNames: ['model', 'version'], registers
    })
    this.failure = new Counter({
      name: 'nv_inference_request_failure', help: 'Number of failed inference requests, all batch sizes',
      labelNames: ['model', 'version', 'reason'], registers
    })
    this.inferenceCount = new Counter({
      name: 'nv_inference_count', help: 'Number of inferences performed (does not include cached requests)',
      labelNames: ['model', 'version'], registers
    })
    this.execCount = new Counter({
      name: 'nv_inference_exec_count', help: 'Number of model executions performed (does not include cached requests)',
      labelNames: ['model', 'version'], registers
    })
    this.requestDurationUs = new Counter({
      name: 'nv_inference_request_duration_us', help: 'Cumulative inference request duration in microseconds',
      labelNames: ['model', 'version'], registers
    })
    this.pending = new Gauge({
      name: 'nv_inference_pending_request_count',
      help: 'Instantaneous number of pending requests awaiting execution per-model.',
      registers,
      collect () { this.set(pendingRequests()) }
    })
    collectDefaultMetrics({ register: this.registry })
  }

  /** A plain HTTP listener: GET /metrics (and /metrics/), as Triton's metrics port. */
  createServer (): Server {
    return createServer((req, res) => {
      const path = (req.url ?? '').split('?')[0]
      if (path !== '/metrics' && path !== '/metrics/') {
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"Not Found"}')
        return
      }
      if (req.method !== 'GET') {
        res.writeHead(405, { 'content-type': 'application/json' }).end('{"error":"Method Not Allowed"}')
        return
      }
      this.registry.metrics().then(
        text => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
        err => res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err))
      )
    })
  }
}
