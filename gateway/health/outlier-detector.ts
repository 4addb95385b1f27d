/**
 * Passive outlier detection, after Envoy's consecutive-5xx detector: every answer (or failure to get one) from
 * an endpoint is recorded, and `consecutiveFailures` failures in a row eject it. An ejection lasts
 * `baseEjectionTimeMs` × the number of ejections in a row (capped at `maxEjectionTimeMs`), so a server that keeps
 * failing stays out longer each time; the count decays by one for every base time it then stays in.
 *
 * At most `maxEjectionPercent` of the endpoints serving any one model are ejected at once, and at least one
 * always may be (Envoy's rule): health checks and outlier detection can be wrong, and ejecting most of a model's
 * servers would turn a partial failure into a total one. An ejection the cap refuses is retried at the next
 * failure.
 *
 * What counts as a failure: a connection that could not be made, and a 5xx answer other than 503. A 503 is a
 * worker saying "my queue is full" or "not ready": backpressure that retries handle, not a broken server.
 *
 * The detector is pure logic over injected timers: ejections end on a timer, and every start and end is reported.
 */
import { type Endpoint } from '../fleet/types.ts'
import { type EjectionEvent, type OutlierSettings, type Outcome, type Timers } from './types.ts'

export interface OutlierDetectorOptions {
  settings: OutlierSettings
  timers: Timers
  /** The candidate sets `endpoint` belongs to (one per model it serves): the ejection cap applies to each. */
  peers: (endpoint: Endpoint) => Iterable<readonly Endpoint[]>
  onEjection: (event: EjectionEvent) => void
}

interface Record {
  consecutiveFailures: number
  /** Ejections in a row, after decay. */
  ejections: number
  ejected: boolean
  timer: unknown
  /** Monotonic ms when the last ejection ended, for decay. */
  returnedAt: number
}

/** Maps an HTTP status (or none: the connection failed) to what the detector counts. */
export function outcomeOf (status: number | undefined): Outcome {
  if (status === undefined) return 'connect_failure'
  return status >= 500 && status !== 503 ? 'server_error' : 'success'
}

export class OutlierDetector {
  readonly #options: OutlierDetectorOptions
  readonly #records = new Map<Endpoint, Record>()

  constructor (options: OutlierDetectorOptions) {
    this.#options = options
  }

  /** Records one exchange. Called on the request path: a map lookup and a counter, nothing more, on success. */
  record (endpoint: Endpoint, outcome: Outcome): void {
    let record = this.#records.get(endpoint)
    if (outcome === 'success') {
      if (record !== undefined) record.consecutiveFailures = 0
      return
    }
    if (record === undefined) {
      record = { consecutiveFailures: 0, ejections: 0, ejected: false, timer: undefined, returnedAt: Number.NEGATIVE_INFINITY }
      this.#records.set(endpoint, record)
    }
    record.consecutiveFailures++
    if (!record.ejected && record.consecutiveFailures >= this.#options.settings.consecutiveFailures && this.#mayEject(endpoint)) {
      this.#eject(endpoint, record, outcome)
    }
  }

  isEjected (endpoint: Endpoint): boolean {
    return this.#records.get(endpoint)?.ejected === true
  }

  /** Forgets an endpoint that left the fleet, cancelling its ejection timer (no event). */
  remove (endpoint: Endpoint): void {
    const record = this.#records.get(endpoint)
    if (record === undefined) return
    this.#options.timers.clearTimeout(record.timer)
    this.#records.delete(endpoint)
  }

  stop (): void {
    for (const record of this.#records.values()) this.#options.timers.clearTimeout(record.timer)
    this.#records.clear()
  }

  #mayEject (endpoint: Endpoint): boolean {
    const { maxEjectionPercent } = this.#options.settings
    for (const set of this.#options.peers(endpoint)) {
      let ejected = 0
      for (const peer of set) if (peer !== endpoint && this.isEjected(peer)) ejected++
      const allowed = Math.max(1, Math.floor(set.length * maxEjectionPercent / 100))
      if (ejected + 1 > allowed) return false
    }
    return true
  }

  #eject (endpoint: Endpoint, record: Record, outcome: Outcome): void {
    const { baseEjectionTimeMs, maxEjectionTimeMs } = this.#options.settings
    const { timers } = this.#options
    const now = timers.now()
    const decay = Number.isFinite(record.returnedAt) ? Math.floor((now - record.returnedAt) / baseEjectionTimeMs) : 0
    record.ejections = Math.max(0, record.ejections - decay) + 1
    const durationMs = Math.min(baseEjectionTimeMs * record.ejections, maxEjectionTimeMs)
    record.ejected = true
    record.timer = timers.setTimeout(() => {
      record.ejected = false
      record.consecutiveFailures = 0
      record.returnedAt = timers.now()
      this.#options.onEjection({ endpoint, ejected: false, reason: 'ejection time over', durationMs })
    }, durationMs)
    const what = outcome === 'connect_failure' ? 'a connection failure' : 'a 5xx answer'
    this.#options.onEjection({
      endpoint,
      ejected: true,
      reason: `${record.consecutiveFailures} consecutive failures (last: ${what}), ejection ${record.ejections} in a row`,
      durationMs
    })
  }
}
