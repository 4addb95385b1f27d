/**
 * The response cache's metrics, on the gateway's registry: what the cache did per model
 * (`flotilla_cache_requests_total{model,result}`), followers' waits (`flotilla_cache_coalesced_total`), the local
 * tier's size and evictions, and the shared tier's errors. Sizes are read at scrape time.
 */
import { Counter, Gauge, type Registry } from 'prom-client'
import { type CacheResult } from '../proxy/types.ts'
import { type LocalStore } from './local-store.ts'
import { type CacheObserver } from './response-cache.ts'

export interface CacheMetrics extends CacheObserver {
  /** One error of the shared tier (Redis): a look-up or store that failed or timed out, a lost connection. */
  redisError (operation: string): void
}

export function registerCacheMetrics (registry: Registry, local: () => LocalStore | undefined): CacheMetrics {
  const registers = [registry]
  const requests = new Counter({
    name: 'flotilla_cache_requests_total',
    help: 'Inference requests for cached models by what the response cache did (hit, miss, coalesced, bypass)',
    labelNames: ['model', 'result'] as const,
    registers
  })
  const coalesced = new Counter({
    name: 'flotilla_cache_coalesced_total',
    help: 'Requests that waited for an identical request in flight, by how the wait ended (answer, leader_failed, timeout, aborted)',
    labelNames: ['model', 'outcome'] as const,
    registers
  })
  const redisErrors = new Counter({
    name: 'flotilla_cache_redis_errors_total',
    help: 'Errors of the shared cache tier (Redis), by operation; each counted as a miss, never a failed request',
    labelNames: ['operation'] as const,
    registers
  })
  new Gauge({
    name: 'flotilla_cache_bytes',
    help: 'Bytes held by the gateway process\'s cache tier (bodies plus a fixed allowance per entry)',
    registers,
    collect () { this.set(local()?.stats().bytes ?? 0) }
  })
  new Gauge({
    name: 'flotilla_cache_max_bytes',
    help: 'The local cache tier\'s budget (cache.max_bytes)',
    registers,
    collect () { this.set(local()?.stats().maxBytes ?? 0) }
  })
  new Gauge({
    name: 'flotilla_cache_entries',
    help: 'Entries in the gateway process\'s cache tier',
    registers,
    collect () { this.set(local()?.stats().entries ?? 0) }
  })
  new Counter({
    name: 'flotilla_cache_evictions_total',
    help: 'Entries the local cache tier dropped to make room',
    registers,
    collect () {
      // The store counts; the counter shows its total.
      this.reset()
      this.inc(local()?.stats().evictions ?? 0)
    }
  })
  return {
    request (model: string, result: CacheResult) { requests.inc({ model, result }) },
    coalesced (model, outcome) { coalesced.inc({ model, outcome }) },
    redisError (operation) { redisErrors.inc({ operation }) }
  }
}
