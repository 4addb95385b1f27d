/**
 * A closed-loop load driver for end-to-end tests: `concurrency` clients, each sending its next request as soon as
 * the previous one is answered, until stopped. Every exchange is recorded (when it was sent and answered, the
 * status, the `x-flotilla-endpoint` that answered, the body) so a test can ask what happened around an event, such
 * as a worker being killed. Nothing here throws on a failed request: failures are recorded, for the test to judge.
 *
 * Every request carries its own deadline, so stopping the load is bounded even if the gateway never answers.
 */
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { Agent, request, type Dispatcher } from 'undici'

/** One request and what came of it. Times are `performance.now()` milliseconds. */
export interface Exchange {
  /** Order in which the requests were sent, from 0. */
  readonly id: number
  readonly sentAt: number
  readonly doneAt: number
  /** The HTTP status, or 0 when no answer came (see `error`). */
  readonly status: number
  /** `x-flotilla-endpoint` of the answer, when it had one. */
  readonly endpoint: string | undefined
  readonly body: string
  /** Why no answer came (connection error, deadline), when none did. */
  readonly error: string | undefined
}

/** What to send; the same request every time. */
export interface RequestSpec {
  readonly url: string
  /** JSON text, sent as `application/json`. */
  readonly body: string
  /** Deadline for one exchange, in ms. */
  readonly timeoutMs: number
}

/** One POST, recorded as an {@link Exchange}; never throws. */
export async function exchange (spec: RequestSpec, id = 0, dispatcher?: Dispatcher): Promise<Exchange> {
  const sentAt = performance.now()
  try {
    const res = await request(spec.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: spec.body,
      signal: AbortSignal.timeout(spec.timeoutMs),
      ...(dispatcher === undefined ? {} : { dispatcher })
    })
    const body = await res.body.text()
    const endpoint = res.headers['x-flotilla-endpoint']
    return {
      id,
      sentAt,
      doneAt: performance.now(),
      status: res.statusCode,
      endpoint: Array.isArray(endpoint) ? endpoint.join(', ') : endpoint,
      body,
      error: undefined
    }
  } catch (err) {
    const e = err as { name?: string, code?: string, message?: string }
    const error = e.name === 'TimeoutError' ? `no answer within ${spec.timeoutMs} ms` : `${e.code ?? e.name}: ${e.message}`
    return { id, sentAt, doneAt: performance.now(), status: 0, endpoint: undefined, body: '', error }
  }
}

/** A running closed loop. */
export class ClosedLoop {
  readonly #spec: RequestSpec
  readonly #agent: Agent
  readonly #exchanges: Exchange[] = []
  readonly #clients: Promise<void>[]
  #nextId = 0
  #stopping = false
  #stopped: Promise<Exchange[]> | undefined

  /**
   * Starts `concurrency` clients at once.
   *
   * @param spec the request every client sends
   * @param concurrency how many requests are in flight at any time
   */
  constructor (spec: RequestSpec, concurrency: number) {
    this.#spec = spec
    // Its own connections, one per client, so the load neither shares sockets with nor queues behind the test's
    // other requests.
    this.#agent = new Agent({ connections: concurrency })
    this.#clients = Array.from({ length: concurrency }, () => this.#client())
  }

  /** Everything answered (or failed) so far, in the order it finished. */
  get exchanges (): readonly Exchange[] {
    return this.#exchanges
  }

  /** How many requests have been sent, answered or not. */
  get sent (): number {
    return this.#nextId
  }

  /**
   * Sends no more requests, waits for those in flight (each bounded by its deadline), closes the connections.
   *
   * Calling it again returns the same promise, so a test can stop the load and also leave it to teardown.
   *
   * @returns every exchange, in the order they were sent
   */
  stop (): Promise<Exchange[]> {
    this.#stopped ??= this.#stop()
    return this.#stopped
  }

  async #stop (): Promise<Exchange[]> {
    this.#stopping = true
    await Promise.all(this.#clients)
    await this.#agent.close()
    return [...this.#exchanges].sort((a, b) => a.id - b.id)
  }

  async #client (): Promise<void> {
    while (!this.#stopping) {
      this.#exchanges.push(await exchange(this.#spec, this.#nextId++, this.#agent))
    }
  }
}

/** One exchange, as a failure shows it. */
export function show (x: Exchange): string {
  const status = x.status === 0 ? 'no answer' : String(x.status)
  return `#${x.id} ${status} from ${x.endpoint ?? '(no x-flotilla-endpoint)'}: ${x.error ?? x.body.slice(0, 200)}`
}

/** The first 10 of `list`, for a failure's diagnostics. */
export function showSome (list: readonly Exchange[]): string[] {
  return [...list.slice(0, 10).map(show), ...(list.length > 10 ? [`... and ${list.length - 10} more`] : [])]
}

export function countBy (list: readonly Exchange[]): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const x of list) counts[x.endpoint ?? '(none)'] = (counts[x.endpoint ?? '(none)'] ?? 0) + 1
  return counts
}

/** Polls `check` every 20 ms until it holds or `ms` have passed; returns whether it held. */
export async function waitFor (check: () => boolean, ms: number): Promise<boolean> {
  const deadline = performance.now() + ms
  while (!check()) {
    if (performance.now() > deadline) return false
    await sleep(20)
  }
  return true
}

/**
 * An open-loop load: a request every `1000 / rate` ms whatever happens to the ones before (as real clients arrive),
 * so a server that stops answering shows up as requests that wait, not as a load that slows down with it.
 */
export class OpenLoop {
  readonly #spec: RequestSpec
  readonly #agent: Agent
  readonly #pending = new Set<Promise<void>>()
  readonly #exchanges: Exchange[] = []
  readonly #timer: NodeJS.Timeout
  #nextId = 0
  #stopped: Promise<Exchange[]> | undefined

  /** @param rate requests per second */
  constructor (spec: RequestSpec, rate: number) {
    this.#spec = spec
    // Connections enough that the load never queues in the client: a request waits only for the gateway.
    this.#agent = new Agent({ connections: 256 })
    const started = performance.now()
    // Sends what is due on each tick, so a late timer does not lower the rate.
    this.#timer = setInterval(() => {
      const due = Math.floor((performance.now() - started) * rate / 1000)
      while (this.#nextId < due) this.#send()
    }, 5)
  }

  get exchanges (): readonly Exchange[] {
    return this.#exchanges
  }

  /** Sends no more, waits for those in flight, closes the connections; every exchange in the order sent. */
  stop (): Promise<Exchange[]> {
    this.#stopped ??= (async () => {
      clearInterval(this.#timer)
      await Promise.all(this.#pending)
      await this.#agent.close()
      return [...this.#exchanges].sort((a, b) => a.id - b.id)
    })()
    return this.#stopped
  }

  #send (): void {
    const sent = exchange(this.#spec, this.#nextId++, this.#agent).then((x) => {
      this.#exchanges.push(x)
      this.#pending.delete(sent)
    })
    this.#pending.add(sent)
  }
}
