/**
 * The model repository in Triton's layout: `<root>/<model>/config.pbtxt` plus numbered version folders.
 * Loads every model at start (Triton's `none` control mode), applies each model's version policy, and keeps a
 * state per version (READY, UNAVAILABLE with a reason, ...). A model that fails to parse, validate or load is
 * UNAVAILABLE with its reason, visible in the repository index; it never takes the worker down.
 */
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createError, isFlotillaError } from '../../common/errors.ts'
import { type Logger } from '../../common/logger.ts'
import { getBackend as defaultGetBackend } from '../backends/registry.ts'
import { type Backend, type BackendInstance, type BackendModel } from '../backends/types.ts'
import { backendSupportsGpu, type DeviceLister, noDevices, placeInstances } from '../instances/instance-groups.ts'
import { buildWarmupSamples, warmUp } from '../instances/warmup.ts'
import { createScheduler } from '../scheduler/create-scheduler.ts'
import { type Scheduler, type SchedulerObserver, type SchedulerOptions } from '../scheduler/types.ts'
import { parseModelConfig } from './model-config.ts'
import { type ModelConfig, type VersionPolicy } from './types.ts'

/** Version states, as Triton names them. */
export type ModelState = 'UNKNOWN' | 'READY' | 'UNAVAILABLE' | 'LOADING' | 'UNLOADING'

/** One entry of `POST /v2/repository/index`. */
export interface IndexEntry {
  name: string
  version?: string
  state?: ModelState
  reason?: string
}

/** A version that can serve requests. */
export interface LoadedVersion {
  readonly name: string
  readonly version: number
  readonly config: ModelConfig
  readonly scheduler: Scheduler
}

interface VersionRecord {
  version: number
  state: ModelState
  reason: string
  loaded?: LoadedVersion
  backendModel?: BackendModel
  instances?: BackendInstance[]
}

interface ModelRecord {
  name: string
  /** Set when the model as a whole failed before any version could be considered. */
  error?: string
  config?: ModelConfig
  versions: Map<number, VersionRecord>
  /** Highest READY version first; rebuilt on every state change, read per request. */
  ready: LoadedVersion[]
}

export interface ModelRepositoryOptions {
  root: string
  logger: Logger
  random?: () => number
  getBackend?: (name: string, modelName: string) => Backend
  /**
   * The statistics observer of one version, asked once when the version gets its scheduler (after warmup, so
   * warmup is not counted), with the version's config (whether it uses the response cache, for one); undefined:
   * none.
   */
  observer?: (model: string, version: number, config: ModelConfig) => SchedulerObserver | undefined
  /** The GPUs instances may use (the native module's `devices()`); none by default. */
  devices?: DeviceLister
}

const VERSION_DIR = /^(0|[1-9][0-9]*)$/

/** Which of the available versions a policy selects (Triton's version_policy semantics). */
export function selectVersions (policy: VersionPolicy, available: readonly number[]): number[] {
  const sorted = [...available].sort((a, b) => a - b)
  if ('all' in policy) return sorted
  if ('specific' in policy) return sorted.filter(v => policy.specific.versions.includes(v))
  return sorted.slice(Math.max(0, sorted.length - policy.latest.num_versions))
}

function message (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

export class ModelRepository {
  readonly #root: string
  readonly #logger: Logger
  readonly #random: () => number
  readonly #getBackend: (name: string, modelName: string) => Backend
  readonly #observer: ((model: string, version: number, config: ModelConfig) => SchedulerObserver | undefined) | undefined
  readonly #devices: DeviceLister
  readonly #models = new Map<string, ModelRecord>()

  constructor (options: ModelRepositoryOptions) {
    this.#root = options.root
    this.#logger = options.logger
    this.#random = options.random ?? Math.random
    this.#getBackend = options.getBackend ?? defaultGetBackend
    this.#observer = options.observer
    this.#devices = options.devices ?? noDevices
  }

  get root (): string { return this.#root }

  /** Scans the repository and loads every model; resolves when each version is READY or UNAVAILABLE. */
  async loadAll (): Promise<void> {
    let entries
    try {
      entries = await readdir(this.#root, { withFileTypes: true })
    } catch (err) {
      throw createError('WRK_ERR_CONFIG_INVALID',
        `cannot read model repository '${this.#root}': ${message(err)}; pass an existing directory to --model-repository`)
    }
    const names = entries.filter(e => e.isDirectory() && !e.name.startsWith('.')).map(e => e.name).sort()
    await Promise.all(names.map(name => this.#loadModel(name)))
  }

  async #loadModel (name: string): Promise<void> {
    const record: ModelRecord = { name, versions: new Map(), ready: [] }
    this.#models.set(name, record)
    const log = this.#logger.child({ model: name })
    const dir = join(this.#root, name)
    const configFile = join(dir, 'config.pbtxt')

    let config: ModelConfig
    let versionNumbers: number[]
    try {
      let text: string
      try {
        text = await readFile(configFile, 'utf8')
      } catch {
        throw createError('WRK_ERR_CONFIG_INVALID', `model '${name}' has no config.pbtxt; create ${configFile}`)
      }
      config = parseModelConfig(text, { file: configFile, modelName: name })
      record.config = config
      const available: number[] = []
      for (const e of await readdir(dir, { withFileTypes: true })) {
        if (!e.isDirectory()) continue
        if (VERSION_DIR.test(e.name)) available.push(Number(e.name))
        else if (!['warmup', 'configs', 'initial_state'].includes(e.name)) {
          log.warn({ dir: e.name }, 'ignoring folder that is not a version number')
        }
      }
      versionNumbers = selectVersions(config.version_policy, available)
      if (versionNumbers.length === 0) {
        throw createError('WRK_ERR_CONFIG_INVALID',
          `at least one version must be available under the version policy of model '${name}'`)
      }
    } catch (err) {
      record.error = message(err)
      log.error({ reason: record.error }, 'model is UNAVAILABLE')
      return
    }

    for (const v of versionNumbers) record.versions.set(v, { version: v, state: 'LOADING', reason: '' })
    await Promise.all(versionNumbers.map(v => this.#loadVersion(record, config, v)))
    this.#refreshReady(record)
  }

  async #loadVersion (record: ModelRecord, config: ModelConfig, version: number): Promise<void> {
    const vr = record.versions.get(version)!
    const modelDir = join(this.#root, record.name)
    const log = this.#logger.child({ model: record.name, version })
    try {
      const backend = this.#getBackend(config.backend || config.platform, record.name)
      const placement = placeInstances(config.instance_group, {
        modelName: record.name,
        devices: this.#devices(),
        backendSupportsGpu: backendSupportsGpu(backend),
        backendName: backend.name
      })
      for (const warning of placement.warnings) log.warn(warning)
      const backendModel = await backend.loadModel({
        modelName: record.name, version, modelDir, versionDir: join(modelDir, String(version)), config, logger: log,
        random: this.#random
      })
      vr.backendModel = backendModel
      const created = await Promise.allSettled(placement.specs.map(s => backendModel.createInstance(s)))
      const instances = created.flatMap(r => r.status === 'fulfilled' ? [r.value] : [])
      vr.instances = instances
      const failed = created.find(r => r.status === 'rejected')
      if (failed !== undefined) throw failed.reason
      // Not READY before every instance ran every warmup sample.
      const samples = await buildWarmupSamples(config, { modelName: record.name, modelDir, random: this.#random })
      await warmUp(record.name, instances, samples)
      const observer = this.#observer?.(record.name, version, config)
      const options: SchedulerOptions = {
        modelName: record.name, version, config, instances, ...(observer !== undefined ? { observer } : {})
      }
      vr.loaded = { name: record.name, version, config, scheduler: createScheduler(options) }
      vr.state = 'READY'
      log.info({ backend: backend.name, instances: instances.length, warmupSamples: samples.length }, 'model version READY')
    } catch (err) {
      vr.state = 'UNAVAILABLE'
      vr.reason = isFlotillaError(err) ? err.message : `Internal: ${message(err)}`
      log.error({ reason: vr.reason }, 'model version is UNAVAILABLE')
      // The instances that did start hold resources (threads, device memory): release them with the model.
      await Promise.all((vr.instances ?? []).map(i => i.close().catch(() => {})))
      vr.instances = []
      await vr.backendModel?.unload().catch(() => {})
    }
  }

  #refreshReady (record: ModelRecord): void {
    record.ready = [...record.versions.values()]
      .filter(v => v.state === 'READY' && v.loaded !== undefined)
      .sort((a, b) => b.version - a.version)
      .map(v => v.loaded!)
  }

  /**
   * The version a request addresses: the given one, or the highest READY one. Throws Triton's resolution
   * errors: unknown model 404, unknown version 404, version not ready 503, no ready version 404.
   */
  resolve (name: string, version?: string): LoadedVersion {
    const record = this.#models.get(name)
    if (record === undefined) throw createError('WRK_ERR_MODEL_NOT_FOUND', name)
    if (version === undefined || version === '') {
      const latest = record.ready[0]
      if (latest === undefined) throw createError('WRK_ERR_MODEL_NO_AVAILABLE_VERSIONS', name)
      return latest
    }
    const vr = record.versions.get(Number(version))
    if (vr === undefined) throw createError('WRK_ERR_MODEL_VERSION_NOT_FOUND', name, version)
    if (vr.state !== 'READY' || vr.loaded === undefined) throw createError('WRK_ERR_MODEL_VERSION_NOT_READY', name, version)
    return vr.loaded
  }

  /** READY versions of a model, ascending, as model metadata lists them. */
  readyVersions (name: string): number[] {
    return (this.#models.get(name)?.ready ?? []).map(v => v.version).sort((a, b) => a - b)
  }

  /**
   * Triton's strict readiness: every version known is READY (or was unloaded). A model that failed to load makes
   * the worker not ready, so a gateway's health check stops sending it traffic it would fail.
   */
  isReady (): boolean {
    for (const record of this.#models.values()) {
      if (record.error !== undefined) return false
      for (const v of record.versions.values()) if (v.state !== 'READY') return false
    }
    return true
  }

  /** The repository index, sorted by name then version, as `POST /v2/repository/index` answers. */
  index (readyOnly = false): IndexEntry[] {
    const entries: IndexEntry[] = []
    for (const name of [...this.#models.keys()].sort()) {
      const record = this.#models.get(name)!
      if (record.error !== undefined) {
        if (!readyOnly) entries.push({ name, state: 'UNAVAILABLE', reason: record.error })
        continue
      }
      for (const v of [...record.versions.values()].sort((a, b) => a.version - b.version)) {
        if (readyOnly && v.state !== 'READY') continue
        const entry: IndexEntry = { name, version: String(v.version), state: v.state }
        if (v.reason !== '') entry.reason = v.reason
        entries.push(entry)
      }
    }
    return entries
  }

  /** Requests queued or executing across all models; the worker reports it to the gateway. */
  pendingRequests (): number {
    let n = 0
    for (const record of this.#models.values()) for (const v of record.ready) n += v.scheduler.queueDepth + v.scheduler.executing
    return n
  }

  /** Lets queued and executing requests finish, then unloads every version. */
  async unloadAll (): Promise<void> {
    const work: Array<Promise<void>> = []
    for (const record of this.#models.values()) {
      for (const v of record.versions.values()) {
        if (v.state !== 'READY') continue
        v.state = 'UNLOADING'
        work.push((async () => {
          await v.loaded?.scheduler.stop()
          await Promise.all((v.instances ?? []).map(i => i.close()))
          await v.backendModel?.unload()
          v.state = 'UNAVAILABLE'
          v.reason = 'unloaded'
        })())
      }
      record.ready = []
    }
    await Promise.all(work)
  }
}
