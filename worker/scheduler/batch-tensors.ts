/**
 * Batch tensors for backends that run a batch as one tensor per input (ONNX models, native kernels), as Triton's
 * backends do: a batch's inputs are concatenated along the batch dimension, and each output is split back to its
 * requests.
 *
 * Copies: merging copies each request's elements once, into one new buffer per input; a batch of one request is
 * handed back as it is. Splitting copies nothing: each request's part is a `subarray` view of the batch output
 * (BYTES, an array of per-element buffers, gets a new array of the same buffers). The dynamic batcher uses it for
 * instances that set `mergedBatches` (identity and simulated do); the others get the list of requests.
 *
 * Ragged inputs (`allow_ragged_batch`, shapes that differ beyond the batch dimension) are merged as Triton's
 * backends merge them: into one 1-D tensor of all the elements, in request order.
 */
import { BytesData } from '../../common/protocol/bytes-data.ts'
import { type Tensor, type TensorData } from '../../common/protocol/types.ts'
import { type BackendRequest } from '../backends/types.ts'

type TypedTensorData = Exclude<TensorData, BytesData>
type TypedArrayConstructor = new (length: number) => TypedTensorData

/** Merges input `name` of every request of a batch into one tensor. Throws when a request lacks it. */
export function mergeInput (requests: readonly BackendRequest[], name: string): Tensor {
  const first = requests[0]?.inputs.get(name)
  if (first === undefined) throw new Error(`input '${name}' is missing from request 0 of the batch`)
  if (requests.length === 1) return first

  const tensors = new Array<Tensor>(requests.length)
  let uniform = true
  let batch = 0
  let elements = 0
  for (let r = 0; r < requests.length; r++) {
    const t = (requests[r] as BackendRequest).inputs.get(name)
    if (t === undefined) throw new Error(`input '${name}' is missing from request ${r} of the batch`)
    if (t.datatype !== first.datatype) {
      throw new Error(`input '${name}' is ${t.datatype} in request ${r} of the batch but ${first.datatype} in request 0`)
    }
    tensors[r] = t
    if (uniform && !sameTrailingDims(first.shape, t.shape)) uniform = false
    batch += t.shape[0] ?? 0
    elements += t.data.length
  }
  const shape = uniform ? [batch, ...first.shape.slice(1)] : [elements]
  return { name, datatype: first.datatype, shape, data: concatData(tensors, elements) }
}

/** Merges every input the first request has (a batch's requests have the same inputs). */
export function mergeInputs (requests: readonly BackendRequest[]): Map<string, Tensor> {
  const merged = new Map<string, Tensor>()
  const first = requests[0]
  if (first === undefined) return merged
  for (const name of first.inputs.keys()) merged.set(name, mergeInput(requests, name))
  return merged
}

/**
 * Splits a batch output (leading dimension = the batch) into one tensor per request, by each request's batch size
 * (`max(1, batchSize)`), as views on the output's buffer. Throws when the output's batch dimension does not add up.
 */
export function splitOutput (output: Tensor, requests: readonly BackendRequest[]): Tensor[] {
  if (requests.length === 1) return [output]
  const total = output.shape[0] ?? 0
  let sum = 0
  for (const r of requests) sum += Math.max(1, r.batchSize)
  if (output.shape.length === 0 || total !== sum) {
    throw new Error(`output '${output.name}' has shape [${output.shape.join(',')}], but the batch holds ${sum} ` +
      `inferences from ${requests.length} requests; its first dimension must be ${sum}`)
  }
  const rest = output.shape.slice(1)
  let perItem = 1
  for (const d of rest) perItem *= d
  const parts = new Array<Tensor>(requests.length)
  let offset = 0
  for (let r = 0; r < requests.length; r++) {
    const b = Math.max(1, (requests[r] as BackendRequest).batchSize)
    const start = offset * perItem
    const end = (offset + b) * perItem
    const data = output.data.subarray(start, end)
    const part: Tensor = { name: output.name, datatype: output.datatype, shape: [b, ...rest], data }
    if (output.parameters !== undefined) part.parameters = output.parameters
    parts[r] = part
    offset += b
  }
  return parts
}

/** Splits every output of a batch: result[r] holds request r's outputs, in the order of `outputs`. */
export function splitOutputs (outputs: readonly Tensor[], requests: readonly BackendRequest[]): Tensor[][] {
  const perRequest: Tensor[][] = requests.map(() => [])
  for (const output of outputs) {
    const parts = splitOutput(output, requests)
    for (let r = 0; r < parts.length; r++) (perRequest[r] as Tensor[]).push(parts[r] as Tensor)
  }
  return perRequest
}

function sameTrailingDims (a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false
  for (let i = 1; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

/** One buffer holding every tensor's elements in order: the only copy merging makes. */
function concatData (tensors: readonly Tensor[], elements: number): TensorData {
  const first = (tensors[0] as Tensor).data
  if (first instanceof BytesData) return BytesData.concat(tensors.map(t => t.data as BytesData))
  const out = new (first.constructor as TypedArrayConstructor)(elements)
  let offset = 0
  for (const t of tensors) {
    const data = t.data as TypedTensorData
    ;(out as { set: (source: ArrayLike<number | bigint>, offset: number) => void }).set(data, offset)
    offset += data.length
  }
  return out
}
