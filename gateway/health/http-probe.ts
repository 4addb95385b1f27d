/**
 * The active checker's probe over KServe v2 HTTP: `GET /v2/health/ready` for the server, `GET /v2/models/{m}/ready`
 * for a model; 200 passes, anything else fails (Triton answers 400 for not ready, 404 for an unknown model). It
 * goes through the same upstream pool as traffic, so a check exercises the connections requests will use, and it
 * reads the queue depth the worker reports on every response.
 */
import { type Dispatcher } from 'undici'
import { parseQueueDepth, QUEUE_DEPTH_HEADER } from '../../common/protocol/headers.ts'
import { type Endpoint } from '../fleet/types.ts'
import { type Probe, type ProbeResult } from './types.ts'

export function createHttpProbe (dispatcherFor: (endpoint: Endpoint) => Dispatcher): Probe {
  return async (endpoint, model, timeoutMs): Promise<ProbeResult> => {
    const path = model === undefined ? '/v2/health/ready' : `/v2/models/${encodeURIComponent(model)}/ready`
    try {
      const res = await dispatcherFor(endpoint).request({
        origin: endpoint.origin, path, method: 'GET', signal: AbortSignal.timeout(timeoutMs)
      })
      // Drain the (empty) body so the connection goes back to the pool.
      await res.body.dump()
      if (res.statusCode !== 200) return { ok: false, reason: `GET ${path} answered ${res.statusCode}` }
      const depth = parseQueueDepth(res.headers[QUEUE_DEPTH_HEADER])
      return depth === undefined ? { ok: true } : { ok: true, queueDepth: depth }
    } catch (err) {
      const e = err as { name?: string, code?: string, message?: string }
      const why = e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : (e.code ?? e.message ?? String(err))
      return { ok: false, reason: `GET ${path}: ${why}` }
    }
  }
}
