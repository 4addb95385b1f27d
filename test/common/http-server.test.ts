/**
 * The plumbing both tiers share, over real sockets: every error in our JSON shape (fastify's and Node's own
 * included) and the slow-client timeouts.
 */
import { connect, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { createKServeServer, listen, route, type KServeServerOptions } from '../../common/http-server.ts'
import { silentLogger } from '../../common/logger.ts'

async function server (t: Test, options: Partial<KServeServerOptions> = {}): Promise<number> {
  const app = createKServeServer({ logger: silentLogger(), bodyLimit: 1024, bodyLimitSetting: '--max-body', ...options })
  route(app, 'POST', '/v2/models/:model/infer', async (request, reply) => reply.send({ model: (request.params as { model: string }).model, bytes: (request.body as Buffer | undefined)?.length ?? 0 }))
  const port = await listen(app, '127.0.0.1', 0)
  t.teardown(() => app.close())
  return port
}

interface Raw { status: number, head: string, body: string, closed: boolean, elapsedMs: number }

/** Writes `chunks` (strings, or pauses in ms) on a fresh connection and reads until the server closes or `waitMs`. */
async function raw (port: number, chunks: Array<string | number>, waitMs = 3000): Promise<Raw> {
  const started = performance.now()
  const socket: Socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  let data = ''
  let closed = false
  socket.on('data', (chunk: Buffer) => { data += chunk.toString('latin1') })
  const ended = new Promise<void>((resolve) => { socket.once('close', () => { closed = true; resolve() }) })
  await new Promise((resolve) => socket.once('connect', resolve))
  for (const chunk of chunks) {
    if (typeof chunk === 'number') await new Promise((resolve) => setTimeout(resolve, chunk))
    else if (!socket.destroyed) socket.write(chunk)
  }
  await Promise.race([ended, new Promise((resolve) => setTimeout(resolve, waitMs))])
  socket.destroy()
  const [head = '', body = ''] = data.split('\r\n\r\n')
  return { status: Number(head.split(' ')[1]), head, body, closed, elapsedMs: performance.now() - started }
}

t.test('more header fields than the limit: 431 naming the setting, not a request with its Content-Length dropped', async (t) => {
  const port = await server(t, { headerCountLimit: 20, headerCountSetting: 'gateway.max_header_count', headerLimit: 64 * 1024 })
  const many = Array.from({ length: 1100 }, (_, i) => `X-H${i}: v\r\n`).join('')
  const answer = await raw(port, [`POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n${many}Content-Length: 2\r\nConnection: close\r\n\r\n{}`])
  t.equal(answer.status, 431)
  t.same(JSON.parse(answer.body), { error: 'request has 1103 header fields, more than the limit of 20; send fewer headers, or raise gateway.max_header_count' })
  const few = Array.from({ length: 17 }, (_, i) => `X-H${i}: v\r\n`).join('')
  const ok = await raw(port, [`POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n${few}Content-Length: 2\r\nConnection: close\r\n\r\n{}`])
  t.equal(ok.status, 200, 'at the limit (17 + Host, Content-Length and Connection) is fine')
})

t.test("fastify's own errors come in our shape, without echoing the path", async (t) => {
  const port = await server(t)
  const long = await raw(port, [`POST /v2/models/${'a'.repeat(5000)}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`])
  t.equal(long.status, 414)
  t.same(JSON.parse(long.body), { error: 'a path segment (a model name or version) is longer than 256 characters' })
  const name = 'm'.repeat(200)
  const fine = await raw(port, [`POST /v2/models/${name}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`])
  t.equal(fine.status, 200, 'a 200-character model name routes')
  const bad = await raw(port, ['POST /v2/models/%E0%A4%A/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}'])
  t.equal(bad.status, 400)
  t.match(JSON.parse(bad.body), { error: /^malformed HTTP request \(FST_ERR_BAD_URL\)/ })
})

t.test('an oversized chunked body: 413 in words, naming the setting', async (t) => {
  const port = await server(t)
  const chunk = 'x'.repeat(800)
  const answer = await raw(port, [
    'POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n',
    `${chunk.length.toString(16)}\r\n${chunk}\r\n`, `${chunk.length.toString(16)}\r\n${chunk}\r\n`, '0\r\n\r\n'
  ])
  t.equal(answer.status, 413)
  t.same(JSON.parse(answer.body), { error: 'request body (sent chunked) exceeds the limit of 1024 bytes; send a smaller request or raise --max-body' })
  const declared = await raw(port, [`POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\nConnection: close\r\n\r\n${'x'.repeat(2000)}`])
  t.equal(declared.status, 413)
  t.match(JSON.parse(declared.body), { error: /^request body of 2000 bytes exceeds the limit of 1024 bytes/ })
})

t.test('header timeout: a slowloris head is cut with a 408', async (t) => {
  const port = await server(t, { headerTimeoutMs: 300, bodyTimeoutMs: 5000, timeoutSettings: '--header-timeout-ms or --body-timeout-ms' })
  const answer = await raw(port, ['POST /v2/models/m/infer HTTP/1.1\r\n', 100, 'Host: x\r\n', 100, 'X-A: 1\r\n', 100, 'X-B: 2\r\n', 100, 'X-C: 3\r\n'])
  t.equal(answer.status, 408)
  t.ok(answer.closed, 'the connection is closed')
  t.match(JSON.parse(answer.body), { error: /headers within 300 ms, the whole request within 5000 ms\); send it faster, or raise --header-timeout-ms or --body-timeout-ms/ })
  t.ok(answer.elapsedMs < 2000, `cut within the timeout and a check interval (${Math.round(answer.elapsedMs)} ms)`)
})

t.test('body timeout: a body that stops halfway is cut with a 408, not held', async (t) => {
  const port = await server(t, { headerTimeoutMs: 200, bodyTimeoutMs: 400 })
  const answer = await raw(port, ['POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"inputs":'])
  t.equal(answer.status, 408)
  t.ok(answer.closed)
  t.ok(answer.elapsedMs < 2000, `cut after about 400 ms (${Math.round(answer.elapsedMs)} ms)`)
})

t.test('idle timeout: a keep-alive connection with nothing to do is closed', async (t) => {
  const port = await server(t, { idleTimeoutMs: 300 })
  const answer = await raw(port, ['POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}'], 3000)
  t.equal(answer.status, 200)
  t.ok(answer.closed, 'closed by the server')
  t.ok(answer.elapsedMs >= 250 && answer.elapsedMs < 2000, `after about 300 ms idle (${Math.round(answer.elapsedMs)} ms)`)
  t.match(answer.head, /Keep-Alive: timeout=0/i, 'and the client was told how long it may idle')
})
