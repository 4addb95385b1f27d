/**
 * Finds the fleet's servers in Consul: a blocking query on `/v1/health/service/<service>?passing` that the agent
 * holds until the set of passing instances changes, each answer turned into {@link FleetServer}s and handed to the
 * fleet controller, which health-checks new servers in and drains the ones that left (see
 * `fleet/fleet-controller.ts`, `setDiscovered`). Workers describe themselves as `worker/registration/` registers
 * them: models as `model=<name>` and `model=<name>:<version>` tags, labels as `label_<key>` meta (`common/consul.ts`).
 *
 * Consul's rules for blocking queries (developer docs, "Blocking Queries"), followed here:
 * - the first query has no index and answers at once; each next one sends the last `X-Consul-Index`;
 * - an index that goes backwards (a restored snapshot, a new cluster) resets to 0, so the next answer comes at once;
 *   an index below 1 is treated as 1 rather than 0, which would not block;
 * - a wake-up that changed nothing (same index) is followed by a short pause, so a flapping agent cannot make a
 *   busy loop of the gateway;
 * - after a failure, the next query does not block, so the end of an outage is seen as soon as Consul answers;
 * - `stale` reads are fine here (any server answers; a stale view is at most a few hundred ms behind), and the
 *   request's own deadline is the wait plus Consul's jitter (wait/16) plus a margin.
 *
 * **Consul going away changes nothing.** A failed query (refused, reset, timed out, a 5xx, an answer that is not
 * JSON) keeps the servers last discovered, which the gateway goes on health-checking as it does every server; the
 * query is retried with exponential back-off and jitter; the outage is logged once when it starts and once when it
 * ends, counted in `flotilla_discovery_errors_total` and shown in `GET /v2/fleet`. Two answers are also treated as
 * "Consul said nothing" rather than "there are no servers": one whose results an ACL filtered out (a token that
 * cannot read the service gets 200 with an empty list, not a 403; Consul adds `X-Consul-Results-Filtered-By-ACLs:
 * true` when it says so), and an empty list after a non-empty one. The second keeps the last servers too: a server that really is down fails its
 * gateway health checks and takes no traffic either way, while a wrong token, a registration wiped by an agent
 * restart or a service renamed by mistake would otherwise take the whole fleet out at once.
 */
import { EventEmitter } from 'node:events'
import {
  consulClient, consulErrorText, META_LABEL_PREFIX, MODEL_TAG_PREFIX, parseConsulAddress, readConsulToken, retryDelay,
  CONSUL_ADDR_ENV, DEFAULT_CONSUL_ADDR, type ConsulAddress
} from '../../common/consul.ts'
import { type Logger } from '../../common/logger.ts'
import { SERVER_NAME_RULE } from '../admin/api.ts'
import { consulWaitMs, DEFAULT_SERVER_WEIGHT, type ConsulDiscoveryConfig } from '../fleet/fleet-config.ts'
import { type FleetServer } from '../fleet/fleet.ts'
import { type Timers } from '../health/types.ts'

/** Added to a blocking query's wait (and Consul's wait/16 jitter) before the gateway gives up on the answer. */
const QUERY_MARGIN_MS = 5000
/** The pause after an answer that changed nothing, so that spurious wake-ups cannot spin. */
const SAME_INDEX_PAUSE_MS = 100

/** Where discovery stands, for `GET /v2/fleet` and the metrics. */
export interface DiscoveryStatus {
  readonly source: 'consul'
  readonly address: string
  readonly service: string
  readonly tag: string | null
  /** `starting` until the first answer; `ok` while answers come; `failing` during an outage (the last fleet stays). */
  readonly state: 'starting' | 'ok' | 'failing'
  /** Servers in the last answer that was applied. */
  readonly servers: number
  /** The X-Consul-Index the next query waits on. */
  readonly index: number
  /** Wall-clock time of the last successful answer, ms since the epoch; `null` before the first. */
  readonly lastSuccessAt: number | null
  readonly errors: number
  /** Failures since the last success. */
  readonly consecutiveErrors: number
  /** The last failure, as Consul or the network said it; `null` when the last query succeeded. */
  readonly lastError: string | null
}

/** What discovery needs around it; time and randomness injected for tests. */
export interface ConsulDiscoveryOptions {
  config: ConsulDiscoveryConfig
  /** The servers Consul lists now (passing, parsed); called on every change. */
  onServers: (servers: readonly FleetServer[]) => void
  logger: Logger
  timers: Timers
  random: () => number
  /** Wall clock for {@link DiscoveryStatus.lastSuccessAt}; default `Date.now`. */
  wallClock?: () => number
  /** `CONSUL_HTTP_ADDR` and `CONSUL_HTTP_TOKEN`(`_FILE`) are read from here; default `process.env`. */
  env?: NodeJS.ProcessEnv
  /** Told of each failed query (the metrics' error counter). */
  onError?: () => void
}

/** A Consul health entry, as much of it as discovery reads. */
interface HealthEntry {
  Node?: { Node?: string, Address?: string }
  Service?: { ID?: string, Service?: string, Address?: string, Port?: number, Tags?: string[] | null, Meta?: Record<string, string> | null }
}

/**
 * The servers described by a `/v1/health/service` answer. Entries that cannot be routed to are left out, each
 * with the reason (an ID that is not a valid server name, no port, no model tag), for the caller to log.
 */
export function serversFromHealth (entries: unknown): { servers: FleetServer[], skipped: Array<{ id: string, reason: string }> } {
  const servers: FleetServer[] = []
  const skipped: Array<{ id: string, reason: string }> = []
  if (!Array.isArray(entries)) return { servers, skipped: [{ id: '?', reason: 'the answer is not a JSON array' }] }
  const seen = new Set<string>()
  for (const raw of entries as HealthEntry[]) {
    const service = raw?.Service
    const id = typeof service?.ID === 'string' ? service.ID : ''
    if (!SERVER_NAME_RULE.regex.test(id)) {
      skipped.push({ id, reason: `its service ID is not a valid server name: ${SERVER_NAME_RULE.text}` })
      continue
    }
    if (seen.has(id)) {
      skipped.push({ id, reason: 'another node registered the same service ID; IDs must be unique across the fleet' })
      continue
    }
    const host = service?.Address !== undefined && service.Address !== '' ? service.Address : raw.Node?.Address
    const port = service?.Port
    if (typeof host !== 'string' || host === '' || typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
      skipped.push({ id, reason: 'it has no address and port to send requests to' })
      continue
    }
    const { models, versions } = modelsFromTags(service?.Tags ?? [])
    if (models.length === 0) {
      skipped.push({ id, reason: `it lists no model (no '${MODEL_TAG_PREFIX}<name>' tag): it has none ready` })
      continue
    }
    const labels: Record<string, string> = {}
    for (const [key, value] of Object.entries(service?.Meta ?? {})) {
      if (key.startsWith(META_LABEL_PREFIX) && key.length > META_LABEL_PREFIX.length && typeof value === 'string') {
        labels[key.slice(META_LABEL_PREFIX.length)] = value
      }
    }
    seen.add(id)
    servers.push({ name: id, host, port, models, ...(versions !== undefined ? { versions } : {}), weight: DEFAULT_SERVER_WEIGHT, labels })
  }
  return { servers, skipped }
}

/**
 * Models and versions from a worker's tags. `model=<name>:<digits>` is a version of `<name>` when `model=<name>`
 * is there too (a worker always registers both), else it is a model whose name ends that way. The endpoint's
 * versions are those of all its models together, or every version when some model has no version tag: the fleet
 * keeps one version list per server (as `inference_servers[].versions` does).
 */
function modelsFromTags (tags: readonly unknown[]): { models: string[], versions: number[] | undefined } {
  const named = new Set<string>()
  for (const tag of tags) {
    if (typeof tag === 'string' && tag.startsWith(MODEL_TAG_PREFIX) && tag.length > MODEL_TAG_PREFIX.length) named.add(tag.slice(MODEL_TAG_PREFIX.length))
  }
  const versionsOf = new Map<string, Set<number>>()
  for (const name of named) {
    const m = /^(.+):(\d{1,15})$/.exec(name)
    if (m === null || !named.has(m[1]!)) continue
    named.delete(name)
    const set = versionsOf.get(m[1]!) ?? new Set<number>()
    set.add(Number(m[2]))
    versionsOf.set(m[1]!, set)
  }
  const models = [...named].filter((n) => !/[/\s]/.test(n)).sort()
  const everyModelVersioned = models.length > 0 && models.every((m) => versionsOf.has(m))
  const versions = everyModelVersioned ? [...new Set(models.flatMap((m) => [...versionsOf.get(m)!]))].sort((a, b) => a - b) : undefined
  return { models, versions }
}

/** Watches one Consul service and reports its passing instances as fleet servers. */
export class ConsulDiscovery {
  readonly #options: ConsulDiscoveryOptions
  readonly #address: ConsulAddress
  readonly #token: string | undefined
  readonly #waitMs: number
  readonly #wallClock: () => number
  #client: ReturnType<typeof consulClient> | undefined
  #running = false
  #inFlight: EventEmitter | undefined
  #sleep: { timer: unknown, wake: () => void } | undefined
  #loop: Promise<void> | undefined
  #index = 0
  #servers: readonly FleetServer[] = []
  #state: DiscoveryStatus['state'] = 'starting'
  #lastSuccessAt: number | null = null
  #errors = 0
  #consecutiveErrors = 0
  #lastError: string | null = null
  /** An empty answer came after a non-empty one, and the servers known before were kept. */
  #keepingLast = false
  /** Service IDs already reported as skipped, so each is logged once, not on every answer. */
  readonly #reportedSkips = new Set<string>()

  /**
   * @throws FlotillaError `FLT_ERR_CONSUL_CONFIG` for an address or token file that cannot work (before anything
   *   starts, so a gateway with a broken discovery section does not start half-configured)
   */
  constructor (options: ConsulDiscoveryOptions) {
    this.#options = options
    const env = options.env ?? process.env
    const config = options.config
    this.#address = parseConsulAddress(config.address ?? env[CONSUL_ADDR_ENV] ?? DEFAULT_CONSUL_ADDR)
    this.#token = readConsulToken(config.token_file, env)
    // Checked at load (fleet-config.ts): always a valid wait here.
    this.#waitMs = consulWaitMs(config.wait)!
    this.#wallClock = options.wallClock ?? Date.now
  }

  /** Starts watching; the first answer comes as soon as Consul gives it. */
  start (): void {
    if (this.#running) return
    this.#running = true
    this.#client = consulClient(this.#address, this.#token)
    const { config, logger } = this.#options
    logger.info({ consul: this.#address.url, service: config.service, tag: config.tag, datacenter: config.datacenter }, 'discovering servers in Consul')
    this.#loop = this.#run()
  }

  /** Stops watching: the query in flight is abandoned, no timer is left. The servers found stay in the fleet. */
  async stop (): Promise<void> {
    this.#running = false
    this.#inFlight?.emit('cancel')
    if (this.#sleep !== undefined) {
      this.#options.timers.clearTimeout(this.#sleep.timer)
      this.#sleep.wake()
    }
    await this.#loop
    this.#client?.destroy()
  }

  get status (): DiscoveryStatus {
    return {
      source: 'consul',
      address: this.#address.url,
      service: this.#options.config.service,
      tag: this.#options.config.tag ?? null,
      state: this.#state,
      servers: this.#servers.length,
      index: this.#index,
      lastSuccessAt: this.#lastSuccessAt,
      errors: this.#errors,
      consecutiveErrors: this.#consecutiveErrors,
      lastError: this.#lastError
    }
  }

  async #run (): Promise<void> {
    while (this.#running) {
      let pause = 0
      try {
        const before = this.#index
        await this.#query()
        if (this.#index === before && before > 0) pause = SAME_INDEX_PAUSE_MS
      } catch (err) {
        if (!this.#running) break
        this.#failed(err)
        // The next query does not block: Consul back means an answer at once (the outage ends in the status and the
        // log then, not a wait later) with whatever changed meanwhile.
        this.#index = 0
        pause = retryDelay(this.#consecutiveErrors, this.#options.random)
      }
      if (pause > 0 && this.#running) await this.#pause(pause)
    }
  }

  async #query (): Promise<void> {
    const { config } = this.#options
    const ctx = Object.assign(new EventEmitter(), { includeResponse: true })
    this.#inFlight = ctx
    let answer: [{ headers: Record<string, string | string[] | undefined> }, unknown]
    try {
      // The client's typings lack the blocking-query fields (index, wait, ctx, timeout): consul-api.md.
      answer = await this.#client!.health.service({
        service: config.service,
        passing: true,
        stale: true,
        ...(config.tag !== undefined ? { tag: config.tag } : {}),
        ...(config.datacenter !== undefined ? { dc: config.datacenter } : {}),
        ...(this.#index > 0 ? { index: String(this.#index), wait: config.wait } : {}),
        timeout: this.#waitMs + this.#waitMs / 16 + QUERY_MARGIN_MS,
        ctx
      } as never) as unknown as typeof answer
    } finally {
      this.#inFlight = undefined
    }
    if (!this.#running) return
    const [res, body] = answer
    const header = (name: string): string | undefined => {
      const value = res.headers[name]
      return Array.isArray(value) ? value[0] : value
    }
    const index = Number(header('x-consul-index'))
    if (!Number.isSafeInteger(index)) throw new Error('Consul answered without an X-Consul-Index header, so changes cannot be watched')
    if (header('x-consul-results-filtered-by-acls') === 'true') {
      throw new Error(`the ACL token cannot read service '${config.service}' (results filtered by ACLs): ` +
        'give the gateway a token with service:read on it (discovery.consul.token_file or CONSUL_HTTP_TOKEN)')
    }
    const { servers, skipped } = serversFromHealth(body)
    // Consul's rules: below 1 is 1 (0 would not block: a busy loop); backwards means reset, so the next answer comes
    // at once rather than waiting for an index the cluster may take long to reach.
    this.#index = index < 1 ? 1 : index < this.#index ? 0 : index
    this.#succeeded()
    for (const { id, reason } of skipped) {
      if (this.#reportedSkips.has(id)) continue
      this.#reportedSkips.add(id)
      this.#options.logger.warn({ service: config.service, id, reason }, 'Consul lists a server the gateway cannot use; left out')
    }
    if (servers.length === 0 && this.#servers.length > 0) {
      if (!this.#keepingLast) {
        this.#keepingLast = true
        this.#options.logger.warn({ service: config.service, known: this.#servers.map((s) => s.name) },
          'Consul lists no passing server; keeping the ones known before (the gateway\'s own health checks still judge them)')
      }
      return
    }
    this.#keepingLast = false
    if (sameServers(servers, this.#servers)) return
    this.#servers = servers
    this.#options.onServers(servers)
  }

  #succeeded (): void {
    if (this.#state === 'failing') {
      this.#options.logger.info({ consul: this.#address.url, failures: this.#consecutiveErrors }, 'Consul answers again: discovery resumed')
    }
    this.#state = 'ok'
    this.#consecutiveErrors = 0
    this.#lastError = null
    this.#lastSuccessAt = this.#wallClock()
  }

  #failed (err: unknown): void {
    this.#errors++
    this.#consecutiveErrors++
    this.#lastError = consulErrorText(err)
    this.#options.onError?.()
    if (this.#state !== 'failing') {
      // Once per outage: the gateway keeps serving the last fleet, so this is a warning, not an error.
      this.#options.logger.warn({ consul: this.#address.url, service: this.#options.config.service, error: this.#lastError, servers: this.#servers.length },
        'Consul query failed: keeping the servers known so far, retrying with back-off')
      this.#state = 'failing'
    }
  }

  #pause (ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = (): void => {
        this.#sleep = undefined
        resolve()
      }
      this.#sleep = { timer: this.#options.timers.setTimeout(wake, ms), wake }
    })
  }
}

function sameServers (a: readonly FleetServer[], b: readonly FleetServer[]): boolean {
  return a.length === b.length && JSON.stringify(a) === JSON.stringify(b)
}
