/**
 * `identity`: output i is input i, as Triton's identity backend pairs them by position. Used by tests, benchmarks
 * and as the base of the `simulated` backend. The pairing is checked once at load so execution never has to.
 */
import { createError } from '../../common/errors.ts'
import { type Tensor } from '../../common/protocol/types.ts'
import { type ModelConfig } from '../repository/types.ts'
import {
  type Backend, type BackendInstance, type BackendModel, type BackendRequest, type BackendResponse, type LoadContext
} from './types.ts'

/** Output name → the input it echoes. */
export type IdentityPairs = ReadonlyArray<readonly [output: string, input: string]>

/** Pairs outputs with inputs by position; throws when a pair cannot echo (count or datatype mismatch). */
export function identityPairs (config: ModelConfig): IdentityPairs {
  if (config.output.length > config.input.length) {
    throw createError('WRK_ERR_MODEL_LOAD', config.name,
      `the identity backend echoes input i as output i, but the config declares ${config.output.length} outputs ` +
      `and only ${config.input.length} inputs`)
  }
  return config.output.map((output, i) => {
    const input = config.input[i]!
    if (input.data_type !== output.data_type) {
      throw createError('WRK_ERR_MODEL_LOAD', config.name,
        `the identity backend echoes input '${input.name}' (${input.data_type}) as output '${output.name}', ` +
        `which is declared ${output.data_type}; give both the same data_type`)
    }
    return [output.name, input.name] as const
  })
}

/** Echoes one request; an absent optional input yields no output. */
export function echo (pairs: IdentityPairs, request: BackendRequest): BackendResponse {
  const outputs: Tensor[] = []
  for (const [outputName, inputName] of pairs) {
    const input = request.inputs.get(inputName)
    if (input !== undefined) outputs.push({ name: outputName, datatype: input.datatype, shape: input.shape, data: input.data })
  }
  return { outputs }
}

class IdentityInstance implements BackendInstance {
  // Echoing a batch as one tensor costs one copy in (the merge) and none out: the same as per request, and it
  // makes the batcher's merge and split part of every batched run of these models (benchmarks included).
  readonly mergedBatches = true
  readonly #pairs: IdentityPairs
  constructor (pairs: IdentityPairs) { this.#pairs = pairs }

  async execute (requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    return requests.map(r => echo(this.#pairs, r))
  }

  async close (): Promise<void> {}
}

export const identityBackend: Backend = {
  name: 'identity',
  async loadModel (ctx: LoadContext): Promise<BackendModel> {
    const pairs = identityPairs(ctx.config)
    return {
      async createInstance () { return new IdentityInstance(pairs) },
      async unload () {}
    }
  }
}
