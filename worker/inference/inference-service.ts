/**
 * The worker's KServe v2 API without a transport: what the HTTP front (`server/http.ts`) and the gRPC front
 * (`server/grpc.ts`) both call, so that one request gets the same validation, scheduling, statistics, metrics and
 * errors whichever protocol it came by. The fronts only decode their wire form into `common/protocol/types.ts`
 * shapes, call this, and encode the answer (triton-behaviour.md sections 1, 3 and 4 describe the two wire forms of
 * each call).
 */
import { createError, isFlotillaError, wrapError } from '../../common/errors.ts'
import { configTypeToDataType } from '../../common/protocol/datatypes.ts'
import { requestKey, type RequestKeyOptions } from '../../common/protocol/request-key.ts'
import { type InferRequest, type InferResponse, type Tensor } from '../../common/protocol/types.ts'
import { FLOTILLA_VERSION } from '../../common/package-root.ts'
import { type CachedResponse, type ResponseCache } from '../cache/response-cache.ts'
import { type IndexEntry, type LoadedVersion, type ModelRepository } from '../repository/model-repository.ts'
import { type ModelConfig, type ModelInput, type ModelOutput } from '../repository/types.ts'
import { type ModelStatistics, type VersionStatistics } from './statistics.ts'
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
  /**
   * The worker's response cache (`--cache-config local,size=N`), used by the versions whose config enables
   * `response_cache`; absent: no version caches, whatever its config says, as in Triton without a cache.
   */
  readonly responseCache?: ResponseCache
  /** Monotonic nanoseconds for the cache statistics (`process.hrtime.bigint` by default). */
  readonly now?: () => bigint
}

const DIGITS = /^[0-9]+$/

/**
 * The cache keys of the worker: it stores decoded answers, which any wire form can encode, so the parameters that
 * only choose the form (`binary_data`, `binary_data_output`) are left out and a JSON client and a binary one share
 * an entry, as in Triton, whose key has no parameters at all.
 */
const KEY_OPTIONS: RequestKeyOptions = Object.freeze({ answerForm: false })

/** What a caching version needs per request, found once per loaded version. */
interface CacheUse {
  readonly cache: ResponseCache
  readonly version: string
  readonly stats: VersionStatistics | undefined
}

/**
 * Whether a version with this config uses `cache`: Triton caches only when the server has a cache and the model's
 * config enables it (core src/dynamic_batch_scheduler.cc: `response_cache_enable && server->ResponseCacheEnabled()`).
 * A model that enables it on a worker without a cache loads and runs uncached. Decoupled and sequence-batching
 * models never get here: their config is refused at load (worker/repository/model-config.ts), with Triton's texts.
 */
export function usesResponseCache (config: ModelConfig, cache: ResponseCache | undefined): boolean {
  return cache !== undefined && config.response_cache?.enable === true
}

export class InferenceService {
  readonly #repository: ModelRepository
  readonly #statistics: ModelStatistics
  readonly #draining: () => boolean
  readonly #cache: ResponseCache | undefined
  readonly #now: () => bigint
  /** Per loaded version: how it caches, or null when it does not. A version loaded again is a new object. */
  readonly #cacheUse = new WeakMap<LoadedVersion, CacheUse | null>()

  constructor (options: InferenceServiceOptions) {
    this.#repository = options.repository
    this.#statistics = options.statistics
    this.#draining = options.draining
    this.#cache = options.responseCache
    this.#now = options.now ?? process.hrtime.bigint
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
   * outputs in the order requested (all of the model's, in config order, when none were named). `signal`: the
   * client's; aborted while the request is queued, the request is dropped (see {@link Scheduler.enqueue}).
   */
  async infer (loaded: LoadedVersion, request: InferRequest, signal?: AbortSignal): Promise<InferResponse> {
    const batchSize = validateInferRequest(loaded.config, request, loaded.name)
    const use = this.#cacheUseOf(loaded)
    if (use === null) return this.#execute(loaded, request, batchSize, signal)

    // Triton's order (core src/dynamic_batch_scheduler.cc Enqueue and CacheLookUp): the key, then the lookup, before
    // the request is queued; a hit is answered at once and never reaches the scheduler.
    const now = this.#now
    const startNs = now()
    const { key, check } = requestKey(loaded.name, use.version, request, KEY_OPTIONS)
    const lookupStartNs = now()
    const entry = use.cache.lookup(key, check)
    const lookupNs = use.cache.lastNs
    if (entry !== undefined) {
      const out = answerFromCache(loaded, request, entry)
      use.stats?.cacheHit(now() - startNs, lookupStartNs - startNs, lookupNs)
      return out
    }
    // A failure throws past this: it is counted as a failure, never as a miss, and nothing is stored.
    const out = await this.#execute(loaded, request, batchSize, signal)
    const stored = use.cache.insert(key, check, out.outputs, out.parameters)
    // Two identical requests that both missed: the second finds the first's answer stored and, as in Triton (its
    // insert answers ALREADY_EXISTS), is not counted as a miss.
    if (stored !== 'exists') use.stats?.cacheMiss(lookupNs + use.cache.lastNs)
    return out
  }

  /** How `loaded` caches (null: it does not), worked out on its first request. */
  #cacheUseOf (loaded: LoadedVersion): CacheUse | null {
    let use = this.#cacheUse.get(loaded)
    if (use === undefined) {
      use = usesResponseCache(loaded.config, this.#cache)
        ? { cache: this.#cache!, version: String(loaded.version), stats: this.#statistics.get(loaded.name, loaded.version) }
        : null
      this.#cacheUse.set(loaded, use)
    }
    return use
  }

  /** Hands a validated request to the version's scheduler and shapes its answer. */
  async #execute (loaded: LoadedVersion, request: InferRequest, batchSize: number, signal: AbortSignal | undefined): Promise<InferResponse> {
    const requested = request.outputs?.map(o => o.name) ?? loaded.config.output.map(o => o.name)

    // Statistics and metrics are the scheduler's to report (its observer): only requests that reach it count.
    let response
    try {
      response = await loaded.scheduler.enqueue({
        inputs: new Map(request.inputs.map(t => [t.name, t])),
        requestedOutputs: requested,
        parameters: request.parameters,
        batchSize
      }, signal)
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

/**
 * A cached answer for one request: the stored outputs (never copied: nothing downstream writes to a response's
 * tensors) under this request's own id.
 */
function answerFromCache (loaded: LoadedVersion, request: InferRequest, entry: CachedResponse): InferResponse {
  const out: InferResponse = { model_name: loaded.name, model_version: String(loaded.version), outputs: entry.outputs.slice() }
  if (request.id !== undefined && request.id !== '') out.id = request.id
  if (entry.parameters !== undefined) out.parameters = entry.parameters
  return out
}
