/**
 * Which models enable Triton's `response_cache` in their config.pbtxt, learnt from the workers (`GET
 * /v2/models/{m}/config`, asked of one active server per model), so that a model configured for caching the Triton
 * way is cached by the gateway without a word in the fleet file. Asked at start and every `intervalMs` after, so a
 * model whose config changes (a new version rolled out with the cache turned on or off) is followed; a model no
 * server could be asked about keeps what was last known (unknown: not cached). These reads are active checks of the
 * workers, as the health probes are, and `health_check.enabled: false` turns both off (then only the fleet file's
 * `cache.models` decides).
 */
import { type Dispatcher } from 'undici'
import { type Logger } from '../../common/logger.ts'
import { type Fleet } from '../fleet/fleet.ts'
import { type Endpoint } from '../fleet/types.ts'

/** How often the configs are asked again: a model's cache switch follows its rollout within this. */
export const MODEL_CACHE_CONFIG_INTERVAL_MS = 10_000

export interface ModelCacheConfigOptions {
  readonly fleet: Fleet
  readonly dispatcherFor: (endpoint: Endpoint) => Dispatcher
  readonly logger: Logger
  readonly intervalMs?: number
  /** Deadline for one config request. */
  readonly timeoutMs?: number
}

export class ModelCacheConfigs {
  readonly #options: ModelCacheConfigOptions
  readonly #enabled = new Map<string, boolean>()
  #timer: NodeJS.Timeout | undefined
  #refreshing: Promise<void> | undefined

  constructor (options: ModelCacheConfigOptions) {
    this.#options = options
  }

  /** Whether `model`'s config enables `response_cache`; `undefined` when no server has said. */
  enabled (model: string): boolean | undefined {
    return this.#enabled.get(model)
  }

  /** Asks now, then every interval; the timer never keeps the process alive. */
  start (): void {
    void this.refresh()
    this.#timer = setInterval(() => { void this.refresh() }, this.#options.intervalMs ?? MODEL_CACHE_CONFIG_INTERVAL_MS)
    this.#timer.unref()
  }

  stop (): void {
    clearInterval(this.#timer)
    this.#timer = undefined
  }

  /** Asks one active server of every model for its config; resolves when every answer is in (never rejects). */
  refresh (): Promise<void> {
    this.#refreshing ??= this.#refresh().finally(() => { this.#refreshing = undefined })
    return this.#refreshing
  }

  async #refresh (): Promise<void> {
    const { fleet } = this.#options
    await Promise.all(fleet.models.map(async (model) => {
      const endpoint = fleet.endpoints.find((e) => e.state === 'active' && e.models.includes(model))
      if (endpoint === undefined) return
      const enabled = await this.#ask(endpoint, model)
      if (enabled === undefined) return
      const before = this.#enabled.get(model)
      this.#enabled.set(model, enabled)
      if (before !== enabled) this.#options.logger.info({ model, endpoint: endpoint.name, enabled }, 'response cache for model follows its config.pbtxt')
    }))
  }

  async #ask (endpoint: Endpoint, model: string): Promise<boolean | undefined> {
    try {
      const res = await this.#options.dispatcherFor(endpoint).request({
        origin: endpoint.origin,
        path: `/v2/models/${encodeURIComponent(model)}/config`,
        method: 'GET',
        signal: AbortSignal.timeout(this.#options.timeoutMs ?? 2000)
      })
      const text = await res.body.text()
      if (res.statusCode !== 200) return undefined
      const config = JSON.parse(text) as { response_cache?: { enable?: unknown } }
      return config.response_cache?.enable === true
    } catch {
      return undefined
    }
  }
}
