/**
 * The HTTP half every HTTP transport shares: the KServe v2 control calls (metadata, config, statistics) and the
 * inference POST, over undici. A body encoding is only an {@link HttpEncoder}: `http-json-transport.ts` is this
 * plus `encodeInferRequest`, and `http-binary-transport.ts` is this plus the binary tensor codec and its
 * `Inference-Header-Content-Length` header.
 *
 * Two dispatchers, so that a statistics read at a window's edge never waits behind inference traffic: a Pool with
 * one connection per request the run may have in flight (closed loop: the top concurrency; open loop: the cap on
 * outstanding requests), so no request queues inside the client and every wait measured is the server's; and a
 * single Client for the control calls.
 */
import { Client, Pool, type Dispatcher } from 'undici'
import { isDataType } from '../../common/protocol/datatypes.ts'
import { type InferRequest } from '../../common/protocol/types.ts'
import { parseStatistics } from './server-stats.ts'
import {
  type ModelMetadata, type Outcome, type PreparedRequest, type StatsResult, type TensorMetadata, type Transport,
  type TransportOptions
} from './transport.ts'

/** An encoded inference request: the body and the headers that go with it. */
export interface HttpBody {
  body: Buffer
  headers: Record<string, string>
}

/** Encodes a request for one HTTP body format. Runs once per distinct request, before any load. */
export type HttpEncoder = (request: InferRequest) => HttpBody

/** Control calls answer at once; anything slower than this is a hung server. */
const CONTROL_TIMEOUT_MS = 10_000
/** The longest server error text kept for the report. */
const MAX_ERROR_TEXT = 300

const OK: Outcome = Object.freeze({ ok: true })

interface HttpPrepared extends PreparedRequest {
  readonly body: Buffer
  readonly headers: Record<string, string>
}

/**
 * Builds an HTTP transport for one body encoding.
 *
 * @param name the transport's name in the report (`http/json`)
 * @param options the server, model and limits
 * @param encode the body encoding
 */
export function createHttpTransport (name: string, options: TransportOptions, encode: HttpEncoder): Transport {
  const base = new URL(options.url)
  const origin = base.origin
  // A path on -u (a server behind a prefix) is kept in front of /v2.
  const prefix = base.pathname.replace(/\/+$/, '')
  const modelPath = `${prefix}/v2/models/${encodeURIComponent(options.model)}` +
    (options.version === undefined ? '' : `/versions/${encodeURIComponent(options.version)}`)
  const inferPath = `${modelPath}/infer`
  const pool = new Pool(origin, {
    connections: options.maxInFlight,
    pipelining: 1,
    headersTimeout: options.timeoutMs,
    bodyTimeout: options.timeoutMs,
    keepAliveTimeout: 60_000,
    keepAliveMaxTimeout: 600_000
  })
  const control = new Client(origin, { headersTimeout: CONTROL_TIMEOUT_MS, bodyTimeout: CONTROL_TIMEOUT_MS })

  /** GET a control path: the body on 200, else an Error saying what was asked and what came back. */
  const get = async (path: string): Promise<string> => {
    let res: Dispatcher.ResponseData
    try {
      res = await control.request({ path, method: 'GET' })
    } catch (err) {
      throw new Error(`cannot reach ${origin} (GET ${path}): ${errorText(err)}`)
    }
    const text = await res.body.text()
    if (res.statusCode !== 200) throw new Error(`GET ${path} answered ${res.statusCode}: ${serverMessage(text, res.statusCode)}`)
    return text
  }
  const getJson = async (path: string): Promise<unknown> => {
    const text = await get(path)
    try {
      return JSON.parse(text)
    } catch {
      throw new Error(`GET ${path} answered 200 with a body that is not JSON`)
    }
  }

  return {
    name,
    async metadata (): Promise<ModelMetadata> {
      return checkMetadata(await getJson(modelPath), `GET ${modelPath}`)
    },
    async maxBatchSize (): Promise<number> {
      const path = `${modelPath}/config`
      const config = await getJson(path)
      const raw = (config as { max_batch_size?: unknown } | null)?.max_batch_size
      // Triton's JSON omits zero-valued fields; absent means 0.
      if (raw === undefined) return 0
      if (typeof raw !== 'number' || !Number.isInteger(raw) || raw < 0) {
        throw new Error(`GET ${path}: max_batch_size is not a non-negative integer`)
      }
      return raw
    },
    async statistics (): Promise<StatsResult> {
      const path = `${modelPath}/stats`
      try {
        return { ok: true, counters: parseStatistics(await get(path)) }
      } catch (err) {
        return { ok: false, reason: (err as Error).message }
      }
    },
    prepare (request: InferRequest): HttpPrepared {
      const { body, headers } = encode(request)
      return { body, headers, bytes: body.length }
    },
    async send (prepared: PreparedRequest): Promise<Outcome> {
      const p = prepared as HttpPrepared
      try {
        const res = await pool.request({ path: inferPath, method: 'POST', headers: p.headers, body: p.body })
        if (res.statusCode === 200) {
          // Read to the end: a response cut short must count as a failure, and the connection must be reusable.
          await consume(res.body)
          return OK
        }
        const text = await res.body.text()
        return { ok: false, status: res.statusCode, message: serverMessage(text, res.statusCode) }
      } catch (err) {
        return { ok: false, status: errorCode(err), message: plainMessage(err) }
      }
    },
    async close (): Promise<void> {
      await Promise.all([pool.close(), control.close()])
    }
  }
}

async function consume (body: AsyncIterable<Buffer>): Promise<number> {
  let bytes = 0
  for await (const chunk of body) bytes += chunk.length
  return bytes
}

/** The text of a KServe v2 error body (`{"error": "..."}`), else the body itself, shortened. */
function serverMessage (text: string, status: number): string {
  try {
    const json = JSON.parse(text) as { error?: unknown }
    if (typeof json?.error === 'string') return json.error
  } catch {}
  const trimmed = text.trim()
  if (trimmed === '') return `HTTP ${status}`
  return trimmed.length > MAX_ERROR_TEXT ? `${trimmed.slice(0, MAX_ERROR_TEXT)}...` : trimmed
}

function errorCode (err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code
  if (typeof code === 'string') return code
  return err instanceof Error ? err.name : 'Error'
}

/** The error's message alone (an outcome carries the code beside it). */
function plainMessage (err: unknown): string {
  if (!(err instanceof Error)) return String(err)
  // A refused connect to "localhost" is an AggregateError (one per address) with an empty message.
  if (err.message === '' && err instanceof AggregateError && err.errors.length > 0) return plainMessage(err.errors[0])
  return err.message
}

/** The message with the code in front, for a sentence of its own. */
function errorText (err: unknown): string {
  const message = plainMessage(err)
  const code = errorCode(err)
  return message.includes(code) ? message : `${code}: ${message}`
}

/**
 * Checks the metadata answer's shape; what the benchmark relies on later (names, datatypes, dims) is checked here
 * once, so a server answering something odd fails with one clear message instead of a crash mid-run.
 */
export function checkMetadata (json: unknown, what: string): ModelMetadata {
  const fail = (problem: string): never => { throw new Error(`${what}: ${problem}`) }
  if (typeof json !== 'object' || json === null) fail('the answer is not a JSON object')
  const m = json as Record<string, unknown>
  const tensors = (key: 'inputs' | 'outputs'): TensorMetadata[] => {
    const list = m[key] ?? []
    if (!Array.isArray(list)) fail(`'${key}' is not an array`)
    return (list as unknown[]).map((t, i) => {
      const { name, datatype, shape } = (t ?? {}) as Record<string, unknown>
      if (typeof name !== 'string' || name === '') fail(`${key}[${i}] has no name`)
      if (typeof datatype !== 'string' || !isDataType(datatype)) fail(`${key}[${i}] ('${String(name)}') has an unknown datatype '${String(datatype)}'`)
      if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= -1)) {
        fail(`${key}[${i}] ('${String(name)}') has no valid shape`)
      }
      return { name: name as string, datatype: datatype as TensorMetadata['datatype'], shape: [...shape as number[]] }
    })
  }
  const versions = Array.isArray(m.versions) ? m.versions.map(String) : []
  return { name: typeof m.name === 'string' ? m.name : '', versions, inputs: tensors('inputs'), outputs: tensors('outputs') }
}
