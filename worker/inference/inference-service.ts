/**
 * The worker's KServe v2 API without a transport: what the HTTP front (`server/http.ts`) and the gRPC front
 * (`server/grpc.ts`) both call, so that one request gets the same validation, scheduling, statistics, metrics and
 * errors whichever protocol it came by. The fronts only decode their wire form into `common/protocol/types.ts`
 * shapes, call this, and encode the answer (triton-behaviour.md sections 1, 3 and 4 describe the two wire forms of
 * each call).
 */
import { createError, isFlotillaError, wrapError } from '../../common/errors.ts'
import { configTypeToDataType } from '../../common/protocol/datatypes.ts'
import { type InferRequest, type InferResponse, type Tensor } from '../../common/protocol/types.ts'
import { FLOTILLA_VERSION } from '../../common/package-root.ts'
import { type IndexEntry, type LoadedVersion, type ModelRepository } from '../repository/model-repository.ts'
import { type ModelInput, type ModelOutput } from '../repository/types.ts'
import { type ModelStatistics } from './statistics.ts'
import { validateInferRequest } from './validate-request.ts'

/**
 * The extensions a worker implements, in the order Triton lists its own (triton-behaviour.md 1.4). Load and unload
 * answer as Triton's default (polling) mode does, so `model_repository` is listed as Triton lists it there.
 */
export const WORKER_EXTENSIONS: readonly string[] = Object.freeze([
  'model_repository', 'schedule_policy', 'model_configuration', 'binary_tensor_data', 'parameters', 'statistics'
])

/** `GET /v2` / ServerMetadata. */
export interface ServerMetadata {
  readonly name: string
  readonly version: string
  readonly extensions: readonly string[]
}

/** One tensor of the model metadata: its protocol datatype and its shape with the batch dimension as -1. */
export interface TensorMetadata {
  readonly name: string
  readonly datatype: string
  readonly shape: readonly number[]
}

/** `GET /v2/models/{m}[/versions/{v}]` / ModelMetadata, in Triton's key order. */
export interface ModelMetadata {
  readonly name: string
  readonly versions: readonly string[]
  readonly platform: string
  readonly inputs: readonly TensorMetadata[]
  readonly outputs: readonly TensorMetadata[]
}

/** What the service reads; the worker builds one per process. */
export interface InferenceServiceOptions {
  readonly repository: ModelRepository
  /** The statistics the schedulers feed, which `GET .../stats` and ModelStatistics report. */
  readonly statistics: ModelStatistics
  /** True once the worker is shutting down: from then on it is not ready (gateways stop sending). */
  readonly draining: () => boolean
}

const DIGITS = /^[0-9]+$/

export class InferenceService {
  readonly #repository: ModelRepository
  readonly #statistics: ModelStatistics
  readonly #draining: () => boolean

  constructor (options: InferenceServiceOptions) {
    this.#repository = options.repository
    this.#statistics = options.statistics
    this.#draining = options.draining
  }

  /** Live as long as the process answers (Triton: once initialised). */
  live (): boolean {
    return true
  }

  /** Ready when not draining and every model version is READY (Triton's strict readiness). */
  ready (): boolean {
    return !this.#draining() && this.#repository.isReady()
  }

  serverMetadata (): ServerMetadata {
    return { name: 'flotilla', version: FLOTILLA_VERSION, extensions: WORKER_EXTENSIONS }
  }

  /**
   * The version a request addresses (the highest READY one when `version` is absent or empty), with Triton's
   * resolution errors. A version that is not all digits names no version: 404 `Not Found`, as Triton's HTTP router
   * answers (its gRPC front words it as an invalid argument, which the gRPC front checks before calling this).
   */
  resolve (model: string, version?: string): LoadedVersion {
    if (version !== undefined && version !== '' && !DIGITS.test(version)) throw createError('FLT_ERR_NOT_FOUND')
    return this.#repository.resolve(model, version)
  }

  /** @param versionGiven whether the request named a version (then only that one is listed, as Triton does) */
  modelMetadata (loaded: LoadedVersion, versionGiven: boolean): ModelMetadata {
    const { config } = loaded
    const batchDim = config.max_batch_size > 0 ? [-1] : []
    const tensor = (t: ModelInput | ModelOutput): TensorMetadata =>
      ({ name: t.name, datatype: configTypeToDataType(t.data_type) ?? 'INVALID', shape: [...batchDim, ...t.dims] })
    return {
      name: loaded.name,
      versions: versionGiven ? [String(loaded.version)] : this.#repository.readyVersions(loaded.name).map(String),
      platform: config.platform || config.backend,
      inputs: config.input.map(tensor),
      outputs: config.output.map(tensor)
    }
  }

  /**
   * Runs one inference: validates the request against the model (Triton's messages, before anything is queued, so
   * a malformed request counts in no statistic), hands it to the version's scheduler, and returns the requested
   * outputs in the order requested (all of the model's, in config order, when none were named).
   */
  async infer (loaded: LoadedVersion, request: InferRequest): Promise<InferResponse> {
    const batchSize = validateInferRequest(loaded.config, request, loaded.name)
    const requested = request.outputs?.map(o => o.name) ?? loaded.config.output.map(o => o.name)

    // Statistics and metrics are the scheduler's to report (its observer): only requests that reach it count.
    let response
    try {
      response = await loaded.scheduler.enqueue({
        inputs: new Map(request.inputs.map(t => [t.name, t])),
        requestedOutputs: requested,
        parameters: request.parameters,
        batchSize
      })
    } catch (err) {
      throw isFlotillaError(err) ? err : wrapError('WRK_ERR_EXECUTION_FAILED', err, loaded.name, err instanceof Error ? err.message : String(err))
    }
    if ('error' in response) {
      // A backend that says the request was at fault (a token id out of range) has coded it; anything else is ours.
      const error = response.error
      throw isFlotillaError(error) ? error : createError('WRK_ERR_EXECUTION_FAILED', loaded.name, error.message)
    }

    const produced = new Map(response.outputs.map(t => [t.name, t]))
    const outputs: Tensor[] = []
    for (const name of requested) {
      const t = produced.get(name)
      if (t !== undefined) outputs.push(t)
      else if (request.outputs !== undefined) {
        // The client asked for it by name: silently leaving it out would hand back a response it cannot use.
        throw createError('WRK_ERR_EXECUTION_FAILED', loaded.name, `the backend did not produce requested output '${name}'`)
      }
    }
    const out: InferResponse = { model_name: loaded.name, model_version: String(loaded.version), outputs }
    if (request.id !== undefined && request.id !== '') out.id = request.id
    if (response.parameters !== undefined) out.parameters = response.parameters
    return out
  }

  /**
   * Statistics JSON (`{"model_stats":[...]}`): every READY version of every model (no model), of one model, or one
   * version. Triton words these misses its own way, as 400s (core tritonserver.cc TRITONSERVER_ServerModelStatistics).
   */
  statisticsJson (model?: string, version?: string): string {
    if (model === undefined || model === '') {
      const versions = this.#repository.index(true)
        .flatMap(e => e.version === undefined ? [] : [{ name: e.name, version: Number(e.version) }])
      return this.#statistics.toJson(versions)
    }
    if (version !== undefined && version !== '' && !DIGITS.test(version)) throw createError('FLT_ERR_NOT_FOUND')
    const ready = this.#repository.readyVersions(model)
    if (ready.length === 0) throw createError('WRK_ERR_STATS_MODEL_NOT_AVAILABLE', model)
    if (version === undefined || version === '') return this.#statistics.toJson(ready.map(v => ({ name: model, version: v })))
    if (!ready.includes(Number(version))) throw createError('WRK_ERR_STATS_VERSION_NOT_AVAILABLE', model)
    return this.#statistics.toJson([{ name: model, version: Number(version) }])
  }

  /** The repository index, as `POST /v2/repository/index` and RepositoryIndex answer it. */
  index (readyOnly: boolean): IndexEntry[] {
    return this.#repository.index(readyOnly)
  }
}
