/**
 * Triton's gRPC API and the binary HTTP extension through a real gateway to two real workers (separate processes),
 * with a @grpc/grpc-js client on our protos: unary and streaming calls, binary and compressed HTTP bodies forwarded
 * as they are, a worker SIGKILLed under a unary load (no request lost) and under a stream (the stream goes on, as
 * the README says).
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import * as grpc from '@grpc/grpc-js'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { decodeHttpInferResponse, encodeHttpInferRequest, INFERENCE_HEADER_CONTENT_LENGTH } from '../../common/protocol/binary-codec.ts'
import { decodeModelInferResponse, encodeModelInferRequest } from '../../common/protocol/grpc/grpc-codec.ts'
import { createInferenceClient, type InferenceClient } from '../../common/protocol/grpc/grpc-service.ts'
import { type ModelInferRequestMessage, type ModelStreamInferResponseMessage } from '../../common/protocol/grpc/messages.ts'
import { type InferRequest } from '../../common/protocol/types.ts'
import { spawnFlotilla, spawnWorker, stop, type FlotillaProcess } from '../helpers/processes.ts'

const A = Int32Array.from({ length: 16 }, (_, i) => i)
const B = Int32Array.from({ length: 16 }, () => 2)

function simple (id: string): InferRequest {
  return {
    id,
    parameters: {},
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: A },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: B }
    ]
  }
}

/** Two demo workers and a gateway in front of them (gRPC on a free port), all real processes. */
async function fleet (t: Test): Promise<{ gateway: FlotillaProcess, workers: FlotillaProcess[] }> {
  const workers = await Promise.all([spawnWorker(t), spawnWorker(t)])
  const file = join(t.testdir({}), 'fleet.yaml')
  writeFileSync(file, [
    'inference_servers:',
    ...workers.map((w, i) => `  - { name: worker-${i}, host: 127.0.0.1, port: ${w.httpPort}, grpc_port: ${w.grpcPort}, models: [simple, identity] }`),
    'load_balancer: { type: round_robin }',
    // Quick checks, so a killed worker leaves the lists within a second whatever the traffic does.
    'health_check: { interval_ms: 200, timeout_ms: 200, unhealthy_threshold: 2 }'
  ].join('\n'))
  const gateway = await spawnFlotilla(t, ['gateway', '--config', file, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0', '--admin-port', '-1'])
  return { gateway, workers }
}

function client (t: Test, port: number): InferenceClient {
  const c = createInferenceClient(`127.0.0.1:${port}`)
  t.teardown(() => { c.close() })
  return c
}

/** A unary ModelInfer: the answer's first output and the server named in the response metadata, or the failure. */
function infer (c: InferenceClient, msg: ModelInferRequestMessage): Promise<{ ok: boolean, endpoint: string, sum: number[], error: string }> {
  return new Promise((resolve) => {
    let endpoint = ''
    const call = c.ModelInfer(msg, new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (err, response) => {
      if (err !== null) resolve({ ok: false, endpoint, sum: [], error: `${grpc.status[err.code]}: ${err.details}` })
      else resolve({ ok: true, endpoint, sum: Array.from(decodeModelInferResponse(response!).outputs[0]!.data as Int32Array), error: '' })
    })
    call.on('metadata', (m: grpc.Metadata) => { endpoint = String(m.get('x-flotilla-endpoint')[0] ?? '') })
  })
}

const EXPECTED_SUM = Array.from(A, (x) => x + 2)

t.test('unary gRPC through the gateway to two workers; binary and gzip HTTP bodies forwarded as bytes', async (t) => {
  const { gateway } = await fleet(t)
  const c = client(t, gateway.grpcPort)
  const served = new Set<string>()
  for (let i = 0; i < 4; i++) {
    const answer = await infer(c, encodeModelInferRequest('simple', '', simple(`u${i}`)))
    t.ok(answer.ok, answer.error)
    t.strictSame(answer.sum, EXPECTED_SUM)
    served.add(answer.endpoint)
  }
  t.strictSame(served, new Set(['worker-0', 'worker-1']), 'both workers serve one client connection')

  // tritonclient's default: binary inputs and outputs; and its request_compression_algorithm='gzip'.
  const binary = encodeHttpInferRequest(simple('h1'), { binaryInputs: true, binaryOutputs: true })
  for (const gzip of [false, true]) {
    const res = await request(`${gateway.url}/v2/models/simple/infer`, {
      method: 'POST',
      body: gzip ? gzipSync(Buffer.from(binary.body)) : binary.body,
      headers: { [INFERENCE_HEADER_CONTENT_LENGTH]: String(binary.headerLength), ...(gzip ? { 'content-encoding': 'gzip' } : {}) }
    })
    const body = Buffer.from(await res.body.arrayBuffer())
    t.equal(res.statusCode, 200, body.toString())
    t.equal(res.headers['content-type'], 'application/octet-stream')
    const decoded = decodeHttpInferResponse(body, Number(res.headers[INFERENCE_HEADER_CONTENT_LENGTH]))
    t.strictSame(Array.from(decoded.outputs[0]!.data as Int32Array), EXPECTED_SUM, gzip ? 'gzip + binary' : 'binary')
  }
})

t.test('a worker SIGKILLed under a unary gRPC load: no request is lost', async (t) => {
  const { gateway, workers } = await fleet(t)
  const c = client(t, gateway.grpcPort)
  const failures: string[] = []
  let done = 0
  let stopping = false
  const loop = async (n: number): Promise<void> => {
    for (let i = 0; !stopping; i++) {
      const answer = await infer(c, encodeModelInferRequest('simple', '', simple(`l${n}-${i}`)))
      if (!answer.ok || answer.sum.join() !== EXPECTED_SUM.join()) failures.push(answer.error || 'wrong answer')
      done++
    }
  }
  const clients = Array.from({ length: 4 }, (_, n) => loop(n))
  await new Promise((resolve) => setTimeout(resolve, 500))
  await stop(workers[1]!.child, 'SIGKILL')
  const atKill = done
  await new Promise((resolve) => setTimeout(resolve, 1500))
  stopping = true
  await Promise.all(clients)
  t.ok(atKill > 10 && done > atKill + 10, `traffic before (${atKill}) and after (${done - atKill}) the kill`)
  t.strictSame(failures, [], `${done} requests, none failed`)
})

t.test('ModelStreamInfer: pinned to one worker; when it dies the stream goes on, on the other', async (t) => {
  const { gateway, workers } = await fleet(t)
  const c = client(t, gateway.grpcPort)
  const stream = c.ModelStreamInfer()
  const answers = new Map<string, ModelStreamInferResponseMessage>()
  const ended = new Promise<void>((resolve, reject) => {
    stream.on('data', (m: ModelStreamInferResponseMessage) => { answers.set(m.infer_response?.id ?? '?', m) })
    stream.on('end', resolve)
    stream.on('error', reject)
  })
  const send = async (id: string): Promise<ModelStreamInferResponseMessage> => {
    stream.write(encodeModelInferRequest('simple', '', simple(id)))
    while (!answers.has(id)) await new Promise((resolve) => setTimeout(resolve, 5))
    return answers.get(id)!
  }
  for (let i = 0; i < 5; i++) t.equal((await send(`before-${i}`)).error_message, '', `before-${i}`)
  const statsOf = async (w: FlotillaProcess): Promise<number> => {
    const res = await request(`${w.url}/v2/models/simple/stats`)
    return (await res.body.json() as { model_stats: Array<{ inference_stats: { success: { count: number } } }> }).model_stats[0]!.inference_stats.success.count
  }
  const counts = await Promise.all(workers.map(statsOf))
  const pinned = counts.indexOf(5)
  t.ok(pinned >= 0 && counts[1 - pinned] === 0, `the stream's requests all went to one worker (${counts.join(', ')})`)

  // The pinned worker dies mid-stream: later requests go to the other worker; the stream stays open.
  await stop(workers[pinned]!.child, 'SIGKILL')
  for (let i = 0; i < 5; i++) {
    const answer = await send(`after-${i}`)
    t.equal(answer.error_message, '', `after-${i} answered`)
    t.strictSame(Array.from(decodeModelInferResponse(answer.infer_response!).outputs[0]!.data as Int32Array), EXPECTED_SUM)
  }
  t.equal(await statsOf(workers[1 - pinned]!), 5, 'the other worker took over the stream')
  stream.end()
  await ended
})
