/**
 * The backend contract, after Triton's TRITONBACKEND lifecycle: a Backend loads one model version into a
 * BackendModel, which creates BackendInstances; an instance executes a batch of requests at a time.
 * The scheduler owns ordering and batching; a backend only computes. Implementations register in `registry.ts`
 * under the name config.pbtxt uses in `backend: "..."`.
 */
import { type Logger } from '../../common/logger.ts'
import { type Parameters, type Tensor } from '../../common/protocol/types.ts'
import { type ModelConfig } from '../repository/types.ts'

/** What a backend is told about the version it loads. */
export interface LoadContext {
  modelName: string
  version: number
  /** The model's directory: `<repository>/<model>`. */
  modelDir: string
  /** The version's directory: `<repository>/<model>/<version>`. */
  versionDir: string
  config: ModelConfig
  logger: Logger
  /** Injected so latency models and random data are deterministic in tests. */
  random: () => number
}

/** Where an instance runs; the scheduler creates one per `instance_group` count. */
export interface InstanceSpec {
  name: string
  kind: 'KIND_CPU' | 'KIND_GPU' | 'KIND_MODEL'
  /** Device id for KIND_GPU; -1 otherwise. */
  deviceId: number
}

/** One request as a backend sees it: validated inputs by name, and the outputs to produce. */
export interface BackendRequest {
  inputs: ReadonlyMap<string, Tensor>
  /** Names of the outputs this request wants; the backend may produce more, the worker drops the rest. */
  requestedOutputs: readonly string[]
  parameters: Readonly<Parameters>
  /** Leading dimension for batching models, 0 for models with max_batch_size 0. */
  batchSize: number
}

/** A backend's answer for one request: its outputs, or an error that fails only this request. */
export type BackendResponse =
  | { outputs: Tensor[], parameters?: Parameters }
  | { error: Error }

export interface BackendInstance {
  /**
   * Set by instances that run a batch as one tensor per input (Triton's backends do): the dynamic batcher then
   * hands them a batch of several requests as one request, its inputs concatenated along the batch dimension, and
   * splits each output back to the requests without copying (`scheduler/batch-tensors.ts`). Absent: they get the
   * list of requests.
   */
  readonly mergedBatches?: boolean
  /**
   * Executes a batch. Resolves with exactly one response per request, in order. A rejection fails every
   * request of the batch. Called with at most one batch in flight per instance.
   */
  execute (requests: readonly BackendRequest[]): Promise<BackendResponse[]>
  close (): Promise<void>
}

export interface BackendModel {
  createInstance (spec: InstanceSpec): Promise<BackendInstance>
  unload (): Promise<void>
}

export interface Backend {
  readonly name: string
  /**
   * Whether its instances can run on a GPU (given a device id in {@link InstanceSpec}): KIND_AUTO groups then get
   * GPU instances when the worker has GPUs. Absent: CPU only.
   */
  readonly supportsGpu?: boolean
  /** Loads one version; rejects with a message that says what is wrong with the model. */
  loadModel (ctx: LoadContext): Promise<BackendModel>
}
