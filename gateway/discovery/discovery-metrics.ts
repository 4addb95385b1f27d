/**
 * Discovery's metrics, on the gateway's registry: failed queries (`flotilla_discovery_errors_total`), when the
 * source last answered (`flotilla_discovery_last_success_timestamp_seconds`, 0 before the first answer) and how
 * many servers it lists. An alert on `time() - flotilla_discovery_last_success_timestamp_seconds` says the gateway
 * is running on the last fleet it knew. Values are read at scrape time, except the error counter.
 */
import { Counter, Gauge, type Registry } from 'prom-client'
import { type DiscoveryStatus } from './consul-discovery.ts'

export interface DiscoveryMetrics {
  /** One failed query (refused, timed out, an error status, an answer that cannot be used). */
  error (): void
}

export function registerDiscoveryMetrics (registry: Registry, status: () => DiscoveryStatus): DiscoveryMetrics {
  const registers = [registry]
  const errors = new Counter({
    name: 'flotilla_discovery_errors_total',
    help: 'Failed service-discovery queries; the gateway keeps the servers it knew meanwhile',
    labelNames: ['source'] as const,
    registers
  })
  new Gauge({
    name: 'flotilla_discovery_last_success_timestamp_seconds',
    help: 'When service discovery last answered, in seconds since the epoch (0: never)',
    labelNames: ['source'] as const,
    registers,
    collect () {
      const s = status()
      this.set({ source: s.source }, s.lastSuccessAt === null ? 0 : s.lastSuccessAt / 1000)
    }
  })
  new Gauge({
    name: 'flotilla_discovery_servers',
    help: 'Servers service discovery lists now (passing in the catalog, usable by the gateway)',
    labelNames: ['source'] as const,
    registers,
    collect () {
      const s = status()
      this.set({ source: s.source }, s.servers)
    }
  })
  const source = status().source
  // Present from the start at 0, so that rate() works before the first failure.
  errors.inc({ source }, 0)
  return { error: () => { errors.inc({ source }) } }
}
