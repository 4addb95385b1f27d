/** Shared by the registration tests: a log sink, a condition wait, a recording proxy in front of the Consul double. */
import { createServer, request, type IncomingHttpHeaders } from 'node:http'
import { type AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { type Test } from 'tap'
import { createLogger, type Logger } from '../../../common/logger.ts'
import { identityConfig } from '../../helpers/model-repo.ts'

export interface LogLine { level: number, msg: string, at: number, [field: string]: unknown }

export const INFO = 30
export const WARN = 40
export const ERROR = 50

/** A logger at debug whose lines are kept, parsed, and as raw text (to search for what must never appear). */
export function capture (): { logger: Logger, lines: LogLine[], text: () => string } {
  const lines: LogLine[] = []
  let raw = ''
  const destination = { write (line: string) { raw += line; lines.push({ ...JSON.parse(line), at: performance.now() }); return true } }
  return { logger: createLogger({ level: 'debug', destination: destination as unknown as NodeJS.WritableStream }), lines, text: () => raw }
}

/** Polls `check` every 10 ms until it returns something truthy, which it resolves with; fails after `ms`. */
export async function until<T> (what: string, check: () => T | Promise<T>, ms = 3000): Promise<NonNullable<T>> {
  const deadline = performance.now() + ms
  for (;;) {
    const value = await check()
    if (value !== undefined && value !== null && value !== false) return value as NonNullable<T>
    if (performance.now() > deadline) throw new Error(`${what}: not within ${ms} ms`)
    await sleep(10)
  }
}

/** A repository with `echo` (identity; versions 1 and 2, of which Triton's default policy loads only 2) and `add`. */
export function repository (t: Test): string {
  return t.testdir({
    echo: { 'config.pbtxt': identityConfig('echo', 'TYPE_FP32', [1]), 1: {}, 2: {} },
    add: { 'config.pbtxt': identityConfig('add', 'TYPE_INT32', [2]), 1: {} }
  })
}

export interface Recorded { method: string, path: string, headers: IncomingHttpHeaders, body: string }

/** An HTTP proxy to `target` that keeps every request, so that a test can read what the client really sent. */
export async function recordingProxy (t: Test, target: string): Promise<{ url: string, requests: Recorded[] }> {
  const requests: Recorded[] = []
  const to = new URL(target)
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      requests.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: body.toString() })
      const upstream = request({ host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers }, answer => {
        res.writeHead(answer.statusCode ?? 502, answer.headers)
        answer.pipe(res)
      })
      upstream.on('error', () => res.destroy())
      upstream.end(body)
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests }
}
