/**
 * `simulated`: an identity model that takes as long as a GPU model would, without using the CPU.
 * Latency per execution = fixed_ms + per_item_ms × batch ± jitter_ms (uniform), where batch is the sum of the
 * requests' batch sizes (at least 1 each). It stands in for a GPU in routing and batching benchmarks, so a
 * 2-core machine can model a fleet: the wait is a timer, the event loop stays free.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { createError } from '../../common/errors.ts'
import { type ModelConfig } from '../repository/types.ts'
import { echo, identityPairs, type IdentityPairs } from './identity-backend.ts'
import {
  type Backend, type BackendInstance, type BackendModel, type BackendRequest, type BackendResponse, type LoadContext
} from './types.ts'

/** The latency model, read from config.pbtxt `parameters`. */
export interface LatencyModel {
  fixedMs: number
  perItemMs: number
  jitterMs: number
}

const LATENCY_KEYS = { fixed_ms: 'fixedMs', per_item_ms: 'perItemMs', jitter_ms: 'jitterMs' } as const

/** Reads `fixed_ms`, `per_item_ms`, `jitter_ms` (each optional, default 0, non-negative finite numbers). */
export function latencyModel (config: ModelConfig): LatencyModel {
  const model: LatencyModel = { fixedMs: 0, perItemMs: 0, jitterMs: 0 }
  for (const [key, field] of Object.entries(LATENCY_KEYS)) {
    const raw = config.parameters[key]?.string_value
    if (raw === undefined) continue
    const value = Number(raw)
    if (raw.trim() === '' || !Number.isFinite(value) || value < 0) {
      throw createError('WRK_ERR_MODEL_LOAD', config.name,
        `parameter '${key}' of the simulated backend must be a non-negative number of milliseconds, got '${raw}'`)
    }
    model[field] = value
  }
  return model
}

/** Milliseconds one execution of `batch` items takes; `random` returns [0, 1). */
export function simulatedLatencyMs (model: LatencyModel, batch: number, random: () => number): number {
  const jitter = model.jitterMs === 0 ? 0 : (random() * 2 - 1) * model.jitterMs
  return Math.max(0, model.fixedMs + model.perItemMs * batch + jitter)
}

class SimulatedInstance implements BackendInstance {
  // Echoing a batch as one tensor costs one copy in (the merge) and none out: the same as per request, and it
  // makes the batcher's merge and split part of every batched run of these models (benchmarks included).
  readonly mergedBatches = true
  readonly #pairs: IdentityPairs
  readonly #latency: LatencyModel
  readonly #random: () => number

  constructor (pairs: IdentityPairs, latency: LatencyModel, random: () => number) {
    this.#pairs = pairs
    this.#latency = latency
    this.#random = random
  }

  async execute (requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    let batch = 0
    for (const r of requests) batch += Math.max(1, r.batchSize)
    const ms = simulatedLatencyMs(this.#latency, batch, this.#random)
    if (ms > 0) await sleep(ms)
    return requests.map(r => echo(this.#pairs, r))
  }

  async close (): Promise<void> {}
}

export const simulatedBackend: Backend = {
  name: 'simulated',
  async loadModel (ctx: LoadContext): Promise<BackendModel> {
    const pairs = identityPairs(ctx.config)
    const latency = latencyModel(ctx.config)
    return {
      async createInstance () { return new SimulatedInstance(pairs, latency, ctx.random) },
      async unload () {}
    }
  }
}
