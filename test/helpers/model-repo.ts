/** Builders for model repositories on disk (through tap's t.testdir) and for config.pbtxt text. */

export interface TensorSpec { name: string, dataType: string, dims: number[], optional?: boolean }

export function tensorsPbtxt (field: 'input' | 'output', tensors: readonly TensorSpec[]): string {
  return tensors.map(t =>
    `${field} { name: "${t.name}" data_type: ${t.dataType} dims: [ ${t.dims.join(', ')} ]${t.optional === true ? ' optional: true' : ''} }`
  ).join('\n')
}

/** An identity model echoing one input of `dataType` as one output. */
export function identityConfig (name: string, dataType: string, dims: number[], maxBatchSize = 0): string {
  return [
    `name: "${name}"`,
    'backend: "identity"',
    `max_batch_size: ${maxBatchSize}`,
    tensorsPbtxt('input', [{ name: 'INPUT0', dataType, dims }]),
    tensorsPbtxt('output', [{ name: 'OUTPUT0', dataType, dims }])
  ].join('\n')
}

/**
 * A `simulated` model echoing one FP32 input of `width` elements after a fixed `fixedMs` (no jitter, batches of up
 * to 64): a model whose latency the test decides.
 */
export function simulatedConfig (name: string, fixedMs: number, width = 16): string {
  return [
    `name: "${name}"`,
    'backend: "simulated"',
    'max_batch_size: 64',
    tensorsPbtxt('input', [{ name: 'INPUT0', dataType: 'TYPE_FP32', dims: [width] }]),
    tensorsPbtxt('output', [{ name: 'OUTPUT0', dataType: 'TYPE_FP32', dims: [width] }]),
    `parameters { key: "fixed_ms" value: { string_value: "${fixedMs}" } }`,
    'parameters { key: "jitter_ms" value: { string_value: "0" } }'
  ].join('\n')
}
