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
