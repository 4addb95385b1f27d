/**
 * Whether the gateway is ready (`GET /v2/health/ready`, gRPC `ServerReady` and `grpc.health.v1`): what a load
 * balancer or Kubernetes in front of the gateway asks before sending it traffic. A gateway whose servers are all down
 * answers every request with a 503, so it must not say it is ready; one replica that can serve must not be passed
 * over for one that cannot.
 *
 * `gateway.ready_when` says what "can serve" means:
 * - `every_model` (the default): every model the fleet routes has at least one usable server (active, passing its
 *   checks, not ejected). A gateway that would 503 one model's requests is not ready; the answer names the models.
 * - `any_model`: at least one model has a usable server: for fleets where a model without servers is expected (one
 *   being rolled out by hand) and should not take the whole gateway out of rotation.
 *
 * A fleet with no servers at all is never ready.
 */
import { type ReadyWhen } from '../fleet/fleet-config.ts'
import { type Fleet } from '../fleet/fleet.ts'

/** The answer to "ready?": when not, why, in words that say what to look at. */
export type Readiness = { readonly ready: true } | { readonly ready: false, readonly reason: string }

const READY: Readiness = Object.freeze({ ready: true })

/** Whether `fleet` can serve, under `readyWhen`. */
export function readinessOf (fleet: Fleet, readyWhen: ReadyWhen): Readiness {
  const models = fleet.models
  if (models.length === 0) return { ready: false, reason: 'the fleet has no servers (list them in inference_servers, add one with `flotilla fleet add`, or register workers in the Consul service discovery.consul watches)' }
  const unserved = fleet.unservedModels()
  if (unserved.length === 0) return READY
  if (readyWhen === 'any_model' && unserved.length < models.length) return READY
  const which = unserved.length === models.length ? 'any model' : `model${unserved.length > 1 ? 's' : ''} ${unserved.map((m) => `'${m}'`).join(', ')}`
  return {
    ready: false,
    reason: `not ready: no usable server for ${which} (every server is down, failing its health checks, ejected or draining; ` +
      `see GET /v2/fleet; gateway.ready_when: ${readyWhen})`
  }
}
