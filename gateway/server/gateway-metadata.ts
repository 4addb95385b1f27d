/** What the gateway says of itself, on both fronts (`GET /v2`, gRPC ServerMetadata). */
import { FLOTILLA_VERSION } from '../../common/package-root.ts'

/**
 * What `GET /v2` reports: what works end to end through the gateway, which is no more than the workers support, in
 * Triton's order. `model_repository` is left out until load/unload are routed (only the index is).
 */
export const GATEWAY_EXTENSIONS: readonly string[] = Object.freeze([
  'schedule_policy', 'model_configuration', 'binary_tensor_data', 'parameters', 'statistics'
])

/** `GET /v2` / ServerMetadata. */
export function gatewayMetadata (): { name: string, version: string, extensions: readonly string[] } {
  return { name: 'flotilla', version: FLOTILLA_VERSION, extensions: GATEWAY_EXTENSIONS }
}
