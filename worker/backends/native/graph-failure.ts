/**
 * Why a node cannot be planned, before the planner knows which coded error to raise for it. Shape inference, folding
 * and lowering throw these with a reason only; the planner adds the model, the file and the node and picks the code:
 * - `invalid`: the graph breaks ONNX's own rules (dimensions that do not match, a missing attribute):
 *   WRK_ERR_ONNX_INVALID;
 * - `refused`: valid ONNX the native backend cannot plan (a shape needing batch², an int64 tensor where it computes
 *   in float32): WRK_ERR_MODEL_LOAD;
 * - `unsupported`: an op (or a use of one) outside the native op list: WRK_ERR_ONNX_UNSUPPORTED_OP, which points to
 *   the onnxruntime backend.
 */
export type GraphFailureKind = 'invalid' | 'refused' | 'unsupported'

export class GraphFailure extends Error {
  readonly kind: GraphFailureKind

  constructor (kind: GraphFailureKind, message: string) {
    super(message)
    this.name = 'GraphFailure'
    this.kind = kind
  }
}

export function invalid (message: string): GraphFailure {
  return new GraphFailure('invalid', message)
}

export function refused (message: string): GraphFailure {
  return new GraphFailure('refused', message)
}

/** `detail` says which use of the op is outside the list ('its input depends on the batch size'); '' for the op itself. */
export function unsupported (detail = ''): GraphFailure {
  return new GraphFailure('unsupported', detail)
}
