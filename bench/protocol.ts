/**
 * bench/protocol: what each wire form of Triton's protocol costs, direct to a worker and through the gateway
 * (issue 13, "Performance").
 *
 * 1. Two models, each over HTTP JSON, HTTP binary (the binary tensor extension) and gRPC, direct to a worker and
 *    through a gateway in front of two workers (real processes), under a closed loop of `flotilla bench` (the load
 *    generator users run, in a process of its own): requests/s, client p50/p99, body bytes on the wire per request
 *    (request + answer, without HTTP or HTTP/2 framing), and the CPU per request of the process measured (the gateway
 *    for gateway rows, the worker for direct rows, from /proc over the whole run and the gateway's own request
 *    counter).
 *    - `image`: a 1x3x224x224 FP32 tensor (588 KiB) through the `identity` backend.
 *    - `simple`: Triton's example (two INT32 [1,16] in, two out), where the per-request cost is all protocol.
 * 2. `mlp` (784 FP32 in, native backend, dynamic batching) on one worker at 16 concurrent clients, JSON against
 *    binary.
 * 3. The upstream leg, in this process: what it costs the gateway to send a ModelInfer on to a worker over gRPC
 *    (grpc-js, the request's bytes passed through unparsed, the cheapest gRPC forwarding can be) against as the
 *    binary HTTP request the gateway builds (undici, with the translation from the gRPC message included): client
 *    CPU per call. It is why the gateway forwards gRPC as binary HTTP.
 *
 * 4. The gateway's CPU per request for HTTP binary and gRPC at the same offered load (open loop, `simple` at
 *    BENCH_SIMPLE_RATE/s and `image` at BENCH_IMAGE_RATE/s): in the closed loop each protocol runs at its own
 *    throughput, and the slower one is charged its idle process's per-wake-up costs on fewer requests.
 *
 * Ends with one JSON line. Targets: through the gateway, `image` in binary >= 5x its JSON requests/s; the gateway's
 * gRPC CPU per request <= 1.5x its HTTP binary CPU per request at the same load (both models); `mlp` on a worker at
 * c=16, binary >= 2x JSON requests/s.
 *
 *   npx tsc -p . && node dist/bench/protocol.js
 *   BENCH_DURATION_S [5]  BENCH_WARMUP_S [1]  BENCH_CONCURRENCY [8]  BENCH_MLP_CONCURRENCY [16]  BENCH_UPSTREAM_N [2000]
 *   BENCH_SIMPLE_RATE [800]  BENCH_IMAGE_RATE [40]  BENCH_ROUNDS [2]  BENCH_CASES [all: image,simple,mlp,upstream]
 *   BENCH_TARGETS [gateway,worker] (the closed-loop table's)
 */
import { spawn } from 'node:child_process'
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import { Pool, request } from 'undici'
import { encodeHttpInferRequest, encodeRawHttpInferRequest, INFERENCE_HEADER_CONTENT_LENGTH } from '../common/protocol/binary-codec.ts'
import { encodeModelInferRequest, modelInferRequestToRaw } from '../common/protocol/grpc/grpc-codec.ts'
import { GRPC_MESSAGE_SIZE_OPTIONS, inferenceServiceDefinition } from '../common/protocol/grpc/grpc-service.ts'
import { type ModelInferRequestMessage } from '../common/protocol/grpc/messages.ts'
import { encodeInferRequest } from '../common/protocol/json-codec.ts'
import { type InferRequest } from '../common/protocol/types.ts'
import { seededRandom } from '../common/seeded-random.ts'
import {
  CLOCK_TICKS, cpuTicks, HOST, intEnv, printTable, round, selfTicks, startFlotilla, stopAll, stopAllOnSignals, track, type FlotillaChild
} from './support.ts'

const DURATION_S = intEnv('BENCH_DURATION_S', 5, 1)
const WARMUP_S = intEnv('BENCH_WARMUP_S', 1, 0)
const CONCURRENCY = intEnv('BENCH_CONCURRENCY', 8, 1)
const MLP_CONCURRENCY = intEnv('BENCH_MLP_CONCURRENCY', 16, 1)
const UPSTREAM_N = intEnv('BENCH_UPSTREAM_N', 2000, 10)
/** Open-loop rates for the CPU comparison at equal load, below what either protocol sustains here. */
const SIMPLE_RATE = intEnv('BENCH_SIMPLE_RATE', 800, 1)
const IMAGE_RATE = intEnv('BENCH_IMAGE_RATE', 40, 1)
/** Alternating runs of each compared pair, averaged. */
const ROUNDS = intEnv('BENCH_ROUNDS', 2, 1)
const CASES = new Set((process.env.BENCH_CASES ?? 'image,simple,mlp,upstream').split(','))
const TARGETS = new Set((process.env.BENCH_TARGETS ?? 'gateway,worker').split(','))

const HERE = dirname(fileURLToPath(import.meta.url))
const ROOT = resolve(HERE, '..', '..')
const CLI = join(ROOT, 'dist', 'bin', 'flotilla.js')

type Protocol = 'http-json' | 'http-binary' | 'grpc'
const PROTOCOLS: readonly Protocol[] = ['http-json', 'http-binary', 'grpc']

/** A worker or gateway process and where it listens. */
type Server = FlotillaChild

/** A closed loop at a concurrency, or an open loop at a rate. */
type Load = { readonly concurrency: number } | { readonly rate: number }

/** One measured cell of the table. */
interface Cell {
  model: string
  target: 'gateway' | 'worker'
  protocol: Protocol
  /** `c=N`: closed loop at concurrency N; `R/s`: open loop at R requests/s. */
  load: string
  rps: number
  p50Ms: number
  p99Ms: number
  errors: number
  bytesPerRequest: number
  cpuUsPerRequest: number
}

/** The bench's model repository: the demo's `simple` and `mlp`, and `image`, a 3x224x224 FP32 identity. */
function writeRepository (dir: string): string {
  const repo = join(dir, 'models')
  mkdirSync(join(repo, 'image', '1'), { recursive: true })
  writeFileSync(join(repo, 'image', 'config.pbtxt'), [
    'name: "image"', 'backend: "identity"', 'max_batch_size: 8',
    'input { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }',
    'output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }'
  ].join('\n') + '\n')
  for (const model of ['simple', 'mlp']) cpSync(join(ROOT, 'config', 'models', model), join(repo, model), { recursive: true })
  return repo
}

/** The gateway's count of answered requests for `model` over `protocol` (all codes), from its metrics. */
async function gatewayRequests (gateway: Server, model: string, protocol: 'http' | 'grpc'): Promise<number> {
  const res = await request(`http://${HOST}:${gateway.metricsPort}/metrics`)
  const text = await res.body.text()
  let total = 0
  const pattern = new RegExp(`^flotilla_requests_total\\{model="${model}",[^}]*protocol="${protocol}"\\} (\\d+)$`, 'gm')
  for (const m of text.matchAll(pattern)) total += Number(m[1])
  return total
}

/** A worker's count of inferences of `model` (success and failure), from its statistics. */
async function workerRequests (worker: Server, model: string): Promise<number> {
  const res = await request(`http://${HOST}:${worker.httpPort}/v2/models/${model}/stats`)
  const stats = await res.body.json() as { model_stats: Array<{ inference_stats: { success: { count: number }, fail: { count: number } } }> }
  return stats.model_stats.reduce((n, s) => n + s.inference_stats.success.count + s.inference_stats.fail.count, 0)
}

interface BenchStep { requests_per_second: number, errors: number, latency_us: { p50: number, p99: number } | null }

/** Runs `flotilla bench` as users do, and returns its one step. */
async function runBench (args: string[]): Promise<BenchStep> {
  const child = track(spawn(process.execPath, [CLI, 'bench', ...args, '--json', '-q',
    '--warmup-ms', String(WARMUP_S * 1000), '-p', String(DURATION_S * 1000)], { stdio: ['ignore', 'pipe', 'inherit'] }))
  let out = ''
  child.stdout!.on('data', (d: Buffer) => { out += d.toString() })
  const code = await new Promise<number | null>((resolveCode) => child.once('exit', resolveCode))
  const last = out.trim().split('\n').at(-1) ?? ''
  if (code !== 0) throw new Error(`flotilla bench ${args.join(' ')} exited ${code}:\n${out}`)
  return (JSON.parse(last) as { steps: BenchStep[] }).steps[0]!
}

function protocolArgs (protocol: Protocol, server: Server): string[] {
  return protocol === 'grpc'
    ? ['-i', 'grpc', '-u', `${HOST}:${server.grpcPort}`]
    : ['-u', `http://${HOST}:${server.httpPort}`, '--encoding', protocol === 'http-json' ? 'json' : 'binary']
}

/** The request `flotilla bench` sends for `model` (same sizes: its data is random too), for the bytes column. */
function sampleRequest (model: string): InferRequest {
  const random = seededRandom(1)
  if (model === 'simple') {
    const ints = (): Int32Array => Int32Array.from({ length: 16 }, () => Math.floor(random() * 100))
    return { parameters: {}, inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: ints() }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: ints() }] }
  }
  const [name, shape] = model === 'image' ? ['INPUT0', [1, 3, 224, 224]] : ['input', [1, 784]]
  const n = shape.reduce((a, b) => a * b, 1)
  return { parameters: {}, inputs: [{ name, datatype: 'FP32', shape, data: Float32Array.from({ length: n }, () => random() * 2 - 1) }] }
}

/** Body bytes of one request and its answer, sent once to `server` in `protocol`. */
async function wireBytes (model: string, protocol: Protocol, server: Server): Promise<number> {
  const sample = sampleRequest(model)
  if (protocol === 'grpc') {
    const definition = inferenceServiceDefinition().ModelInfer!
    const body = definition.requestSerialize(encodeModelInferRequest(model, '', sample))
    const client = new grpc.Client(`${HOST}:${server.grpcPort}`, grpc.credentials.createInsecure(), GRPC_MESSAGE_SIZE_OPTIONS)
    try {
      const answer = await new Promise<Buffer>((resolveAnswer, reject) => {
        client.makeUnaryRequest<Buffer, Buffer>(definition.path, (b) => b, (b) => b, body, (err, value) => {
          if (err !== null) reject(err)
          else resolveAnswer(value!)
        })
      })
      return body.length + answer.length
    } finally {
      client.close()
    }
  }
  const encoded = protocol === 'http-json'
    ? { body: encodeInferRequest(sample), headerLength: undefined }
    : encodeHttpInferRequest(sample, { binaryInputs: true, binaryOutputs: true })
  const res = await request(`http://${HOST}:${server.httpPort}/v2/models/${model}/infer`, {
    method: 'POST',
    body: encoded.body,
    headers: encoded.headerLength === undefined ? {} : { [INFERENCE_HEADER_CONTENT_LENGTH]: String(encoded.headerLength) }
  })
  const answer = Buffer.from(await res.body.arrayBuffer())
  if (res.statusCode !== 200) throw new Error(`${model} over ${protocol} answered ${res.statusCode}: ${answer.toString().slice(0, 200)}`)
  return Buffer.byteLength(encoded.body) + answer.length
}

/** One cell: `flotilla bench` against `server`, with the CPU the measured process spent per request. */
async function measure (model: string, target: 'gateway' | 'worker', protocol: Protocol, server: Server, load: Load): Promise<Cell> {
  const bytesPerRequest = await wireBytes(model, protocol, server)
  const count = (): Promise<number> => target === 'gateway'
    ? gatewayRequests(server, model, protocol === 'grpc' ? 'grpc' : 'http')
    : workerRequests(server, model)
  const requestsBefore = await count()
  const ticksBefore = cpuTicks(server.child.pid)
  const step = await runBench(['-m', model, ...protocolArgs(protocol, server),
    ...('concurrency' in load ? ['--concurrency', String(load.concurrency)] : ['--request-rate', String(load.rate)])])
  const ticks = cpuTicks(server.child.pid) - ticksBefore
  const requests = (await count()) - requestsBefore
  const cell: Cell = {
    model,
    target,
    protocol,
    load: 'concurrency' in load ? `c=${load.concurrency}` : `${load.rate}/s`,
    rps: round(step.requests_per_second, 0),
    p50Ms: round((step.latency_us?.p50 ?? NaN) / 1000, 2),
    p99Ms: round((step.latency_us?.p99 ?? NaN) / 1000, 2),
    errors: step.errors,
    bytesPerRequest,
    cpuUsPerRequest: round(requests > 0 ? ticks / CLOCK_TICKS * 1e6 / requests : NaN, 0)
  }
  process.stderr.write(`${model} ${target} ${protocol}: ${cell.rps} rps, p99 ${cell.p99Ms} ms, ${cell.cpuUsPerRequest} µs CPU/req\n`)
  return cell
}

/** `protocols` against `server` in {@link ROUNDS} alternating rounds: one cell per protocol, figures averaged. */
async function paired (model: string, target: 'gateway' | 'worker', server: Server, protocols: readonly Protocol[], load: Load): Promise<Cell[]> {
  const runs = new Map<Protocol, Cell[]>(protocols.map((p) => [p, []]))
  for (let r = 0; r < ROUNDS; r++) {
    for (const protocol of protocols) runs.get(protocol)!.push(await measure(model, target, protocol, server, load))
  }
  const mean = (cells: readonly Cell[], key: 'rps' | 'p50Ms' | 'p99Ms' | 'cpuUsPerRequest'): number =>
    round(cells.reduce((sum, c) => sum + c[key], 0) / cells.length, key === 'rps' || key === 'cpuUsPerRequest' ? 0 : 2)
  return protocols.map((protocol) => {
    const cells = runs.get(protocol)!
    return {
      ...cells[0]!,
      load: `${cells[0]!.load} x${cells.length}`,
      rps: mean(cells, 'rps'),
      p50Ms: mean(cells, 'p50Ms'),
      p99Ms: mean(cells, 'p99Ms'),
      errors: cells.reduce((n, c) => n + c.errors, 0),
      cpuUsPerRequest: mean(cells, 'cpuUsPerRequest')
    }
  })
}

/**
 * The upstream leg, measured from this process (the gateway's seat): a ModelInfer for `simple` or `image` sent on to
 * `worker` over gRPC with its bytes passed through, and as binary HTTP translated from the message per call.
 */
async function upstreamLeg (model: string, worker: Server): Promise<{ grpcUs: number, httpUs: number, ratio: number }> {
  const message: ModelInferRequestMessage = encodeModelInferRequest(model, '', sampleRequest(model))
  const definition = inferenceServiceDefinition().ModelInfer!
  const bytes = definition.requestSerialize(message)
  const client = new grpc.Client(`${HOST}:${worker.grpcPort}`, grpc.credentials.createInsecure(), GRPC_MESSAGE_SIZE_OPTIONS)
  const pool = new Pool(`http://${HOST}:${worker.httpPort}`, { connections: CONCURRENCY })
  const viaGrpc = (): Promise<void> => new Promise((resolveCall, reject) => {
    client.makeUnaryRequest<Buffer, Buffer>(definition.path, (b) => b, (b) => b, bytes, (err) => { if (err !== null) reject(err); else resolveCall() })
  })
  const viaHttp = async (): Promise<void> => {
    // What the gateway's gRPC front does per call: the message's tensors laid out as one binary HTTP body.
    const { request: raw } = modelInferRequestToRaw(message)
    const { body, headerLength } = encodeRawHttpInferRequest(raw)
    const res = await pool.request({ path: `/v2/models/${model}/infer`, method: 'POST', body, headers: { [INFERENCE_HEADER_CONTENT_LENGTH]: String(headerLength) } })
    await res.body.arrayBuffer()
    if (res.statusCode !== 200) throw new Error(`binary HTTP answered ${res.statusCode}`)
  }
  const cpuPerCall = async (call: () => Promise<void>, n: number): Promise<number> => {
    let sent = 0
    const before = selfTicks()
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => { while (sent++ < n) await call() }))
    return (selfTicks() - before) / CLOCK_TICKS * 1e6 / n
  }
  try {
    const n = model === 'image' ? Math.max(10, Math.floor(UPSTREAM_N / 10)) : UPSTREAM_N
    // Warm both paths, then alternate twice so that a slow phase of the machine hits both.
    await cpuPerCall(viaGrpc, Math.ceil(n / 4))
    await cpuPerCall(viaHttp, Math.ceil(n / 4))
    const grpcRuns = [await cpuPerCall(viaGrpc, n)]
    const httpRuns = [await cpuPerCall(viaHttp, n)]
    grpcRuns.push(await cpuPerCall(viaGrpc, n))
    httpRuns.push(await cpuPerCall(viaHttp, n))
    const grpcUs = round((grpcRuns[0]! + grpcRuns[1]!) / 2, 1)
    const httpUs = round((httpRuns[0]! + httpRuns[1]!) / 2, 1)
    return { grpcUs, httpUs, ratio: round(grpcUs / httpUs, 2) }
  } finally {
    client.close()
    await pool.close()
  }
}

async function main (): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'flotilla-protocol-'))
  stopAllOnSignals(() => rmSync(dir, { recursive: true, force: true }))
  try {
    const repo = writeRepository(dir)
    const workerArgs = ['worker', '--model-repository', repo, '--host', HOST, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '-1']
    const workers = await Promise.all([startFlotilla(workerArgs), startFlotilla(workerArgs)])
    const fleet = join(dir, 'fleet.yaml')
    writeFileSync(fleet, [
      'inference_servers:',
      ...workers.map((w, i) => `  - { name: worker-${i}, host: ${HOST}, port: ${w.httpPort}, grpc_port: ${w.grpcPort}, models: [image, simple, mlp] }`),
      'load_balancer: { type: round_robin }',
      // A worker busy parsing 6 MB JSON bodies can take more than the default second to answer a probe.
      'health_check: { timeout_ms: 5000 }',
      `gateway: { host: ${HOST} }`
    ].join('\n') + '\n')
    const gateway = await startFlotilla(['gateway', '--config', fleet, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0', '--admin-port', '-1'])
    const worker = workers[0]!

    // The comparisons the targets judge come first, on fresh processes (the 6 MB JSON runs below leave the
    // gateway's heap large, and every later collection costs more), each in ROUNDS alternating runs averaged, so that
    // a slow phase of this shared machine hits both sides. CPU per request is compared at the same offered load:
    // in a closed loop each protocol runs at its own throughput, and a process idle half the time pays its
    // per-wake-up costs on fewer requests.
    const compared: Cell[] = []
    for (const [model, rate] of [['simple', SIMPLE_RATE], ['image', IMAGE_RATE]] as const) {
      if (CASES.has(model)) compared.push(...await paired(model, 'gateway', gateway, ['http-binary', 'grpc'], { rate }))
    }
    if (CASES.has('mlp')) compared.push(...await paired('mlp', 'worker', worker, ['http-json', 'http-binary'], { concurrency: MLP_CONCURRENCY }))

    const cells: Cell[] = []
    for (const model of ['image', 'simple'].filter((m) => CASES.has(m))) {
      for (const [target, server] of [['gateway', gateway], ['worker', worker]] as const) {
        if (!TARGETS.has(target)) continue
        for (const protocol of PROTOCOLS) cells.push(await measure(model, target, protocol, server, { concurrency: CONCURRENCY }))
      }
    }
    cells.push(...compared)
    const upstream: Record<string, { grpcUs: number, httpUs: number, ratio: number }> = {}
    if (CASES.has('upstream')) {
      for (const model of ['simple', 'image']) upstream[model] = await upstreamLeg(model, worker)
    }

    printTable([
      ['model', 'target', 'protocol', 'load', 'rps', 'p50 ms', 'p99 ms', 'errors', 'bytes/req', 'CPU µs/req'],
      ...cells.map((c) => [c.model, c.target, c.protocol, c.load, String(c.rps), String(c.p50Ms), String(c.p99Ms),
        String(c.errors), String(c.bytesPerRequest), String(c.cpuUsPerRequest)])
    ])
    if (Object.keys(upstream).length > 0) {
      console.log('')
      printTable([
        ['upstream leg (gateway -> worker)', 'gRPC pass-through µs/call', 'binary HTTP µs/call', 'gRPC/HTTP'],
        ...Object.entries(upstream).map(([model, u]) => [model, String(u.grpcUs), String(u.httpUs), `${u.ratio}x`])
      ])
    }

    const find = (model: string, target: string, protocol: Protocol, compared = false): Cell | undefined =>
      cells.find((c) => c.model === model && c.target === target && c.protocol === protocol && c.load.includes(' x') === compared)
    const ratio = (a: number | undefined, b: number | undefined): number | null =>
      a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0 ? null : round(a / b, 2)
    const targets = {
      gatewayImageBinaryOverJson: ratio(find('image', 'gateway', 'http-binary')?.rps, find('image', 'gateway', 'http-json')?.rps),
      gatewayGrpcOverBinaryCpuSimple: ratio(find('simple', 'gateway', 'grpc', true)?.cpuUsPerRequest, find('simple', 'gateway', 'http-binary', true)?.cpuUsPerRequest),
      gatewayGrpcOverBinaryCpuImage: ratio(find('image', 'gateway', 'grpc', true)?.cpuUsPerRequest, find('image', 'gateway', 'http-binary', true)?.cpuUsPerRequest),
      gatewayGrpcOverBinaryCpuSimpleClosedLoop: ratio(find('simple', 'gateway', 'grpc')?.cpuUsPerRequest, find('simple', 'gateway', 'http-binary')?.cpuUsPerRequest),
      workerMlpBinaryOverJson: ratio(find('mlp', 'worker', 'http-binary', true)?.rps, find('mlp', 'worker', 'http-json', true)?.rps)
    }
    const met = {
      gatewayImageBinaryOverJson: targets.gatewayImageBinaryOverJson === null ? null : targets.gatewayImageBinaryOverJson >= 5,
      gatewayGrpcOverBinaryCpu: targets.gatewayGrpcOverBinaryCpuSimple === null || targets.gatewayGrpcOverBinaryCpuImage === null
        ? null
        : targets.gatewayGrpcOverBinaryCpuSimple <= 1.5 && targets.gatewayGrpcOverBinaryCpuImage <= 1.5,
      workerMlpBinaryOverJson: targets.workerMlpBinaryOverJson === null ? null : targets.workerMlpBinaryOverJson >= 2
    }
    console.log(`\ngateway image binary/JSON rps ${targets.gatewayImageBinaryOverJson}x (target >= 5); ` +
      `gateway gRPC/HTTP-binary CPU per request at the same rate ${targets.gatewayGrpcOverBinaryCpuSimple}x on simple ` +
      `(${SIMPLE_RATE}/s), ${targets.gatewayGrpcOverBinaryCpuImage}x on image (${IMAGE_RATE}/s) (target <= 1.5); ` +
      `worker mlp c=${MLP_CONCURRENCY} binary/JSON rps ${targets.workerMlpBinaryOverJson}x (target >= 2)`)
    console.log(JSON.stringify({
      bench: 'protocol',
      machine: { cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', node: process.version },
      durationS: DURATION_S,
      warmupS: WARMUP_S,
      cells,
      upstream,
      targets,
      met
    }))
  } finally {
    await stopAll()
    rmSync(dir, { recursive: true, force: true })
  }
}

main().catch(async (err: unknown) => {
  console.error(err)
  await stopAll()
  process.exit(1)
})
