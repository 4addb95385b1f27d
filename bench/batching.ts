/**
 * bench/batching: what dynamic batching buys a worker, and what the scheduler costs.
 *
 * 1. Closed-loop load (wrk, `c` connections each sending its next request as soon as the previous is answered) at
 *    concurrency 1, 4, 16, 64 and 128 against one worker process, on each model twice: without `dynamic_batching`
 *    (one request at a time per instance, the anchor) and with it. Models:
 *    - `simulated` (5 ms + 0.1 ms per item, no jitter, max_batch_size 64): a GPU model's latency curve at no CPU cost.
 *      Its latency model allows about 28x at concurrency 64 (one request per 5.1 ms unbatched, 64 per 11.4 ms).
 *    - `mlp` (js backend: FP32 64 -> 256 -> 64 with ReLU, max_batch_size 64): the heaviest CPU model the worker
 *      has until the native backend lands; its compute does not get cheaper per item in a batch, so its
 *      multiplier shows what batching saves around the compute (HTTP, scheduling), not in it.
 *    Prints rps and p50/p99 per cell and the on/off rps multiplier per concurrency.
 * 2. The scheduler's own overhead per request: the identity backend in this process, batching on, `enqueue()`
 *    against a direct `instance.execute([request])`, one at a time and 64 at a time.
 *
 * Ends with one JSON line of every figure. Targets (issue 5): at concurrency 64, simulated on/off >= 15x; scheduler
 * overhead < 50 µs per request.
 *
 *   npx tsc -p . && node dist/bench/batching.js
 *   BENCH_DURATION_S [5]  BENCH_WARMUP_S [1]  BENCH_CONCURRENCY [1,4,16,64,128]  BENCH_MODELS [simulated,mlp]
 *   BENCH_OVERHEAD_N [20000]
 */
import { fork } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { silentLogger } from '../common/logger.ts'
import { identityBackend } from '../worker/backends/identity-backend.ts'
import { type BackendRequest } from '../worker/backends/types.ts'
import { parseModelConfig } from '../worker/repository/model-config.ts'
import { createScheduler } from '../worker/scheduler/create-scheduler.ts'
import { HOST, intEnv, printTable, round, runWrkScript, stopAll, stopAllOnSignals, track, wrkPostScript, type WrkResult } from './support.ts'

const DURATION_S = intEnv('BENCH_DURATION_S', 5, 1)
const WARMUP_S = intEnv('BENCH_WARMUP_S', 1, 0)
const OVERHEAD_N = intEnv('BENCH_OVERHEAD_N', 20_000, 100)
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? '1,4,16,64,128').split(',').map(Number)
const MODELS = (process.env.BENCH_MODELS ?? 'simulated,mlp').split(',')
/** Where the targets are judged. */
const TARGET_CONCURRENCY = 64

const io = (type: string, n: number): string => [
  `input { name: "INPUT0" data_type: ${type} dims: [ ${n} ] }`,
  `output { name: "OUTPUT0" data_type: ${type} dims: [ ${n} ] }`
].join('\n')

/** The same model with and without dynamic batching (delay 100 µs: a burst arriving together goes as one batch). */
function variants (name: string, body: string): Record<string, string> {
  return {
    [`${name}_off`]: `name: "${name}_off"\n${body}`,
    [`${name}_on`]: `name: "${name}_on"\n${body}\ndynamic_batching { max_queue_delay_microseconds: 100 }`
  }
}

const SIMULATED = ['backend: "simulated"', 'max_batch_size: 64', io('TYPE_FP32', 16),
  'parameters { key: "fixed_ms" value: { string_value: "5" } }',
  'parameters { key: "per_item_ms" value: { string_value: "0.1" } }',
  'parameters { key: "jitter_ms" value: { string_value: "0" } }'].join('\n')
const MLP = ['backend: "js"', 'max_batch_size: 64', io('TYPE_FP32', 64)].join('\n')

/** A two-layer perceptron with fixed weights, item by item: plain JS compute, as a custom js model would do it. */
const MLP_JS = `const IN = 64, HIDDEN = 256
let seed = 7
const rand = () => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return seed / 4294967296 - 0.5 }
const w1 = Float32Array.from({ length: IN * HIDDEN }, rand)
const w2 = Float32Array.from({ length: HIDDEN * IN }, rand)
const h = new Float32Array(HIDDEN)
export async function execute (requests) {
  return requests.map(({ inputs }) => {
    const x = inputs.INPUT0.data
    const items = x.length / IN
    const y = new Float32Array(x.length)
    for (let b = 0; b < items; b++) {
      for (let j = 0; j < HIDDEN; j++) {
        let s = 0
        for (let i = 0; i < IN; i++) s += x[b * IN + i] * w1[i * HIDDEN + j]
        h[j] = s > 0 ? s : 0
      }
      for (let k = 0; k < IN; k++) {
        let s = 0
        for (let j = 0; j < HIDDEN; j++) s += h[j] * w2[j * IN + k]
        y[b * IN + k] = s
      }
    }
    return { outputs: [{ name: 'OUTPUT0', shape: inputs.INPUT0.shape, data: y }] }
  })
}
`

function body (n: number): string {
  return JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, n], data: Array.from({ length: n }, (_, i) => (i % 8) / 8) }] })
}

function writeRepository (dir: string): void {
  const models: Record<string, string> = { ...variants('simulated', SIMULATED), ...variants('mlp', MLP) }
  for (const [name, config] of Object.entries(models)) {
    mkdirSync(join(dir, name, '1'), { recursive: true })
    writeFileSync(join(dir, name, 'config.pbtxt'), config + '\n')
    if (name.startsWith('mlp')) writeFileSync(join(dir, name, '1', 'model.js'), MLP_JS)
  }
}

/** Starts `flotilla worker` on a free port and resolves with it once it listens. */
function startWorker (cli: string, repository: string): Promise<number> {
  const child = track(fork(cli, ['worker', '--model-repository', repository, '--http-port', '0', '--grpc-port', '-1', '--metrics-port', '-1',
    '--log-level', 'warn'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }))
  return new Promise((resolvePort, reject) => {
    const timer = setTimeout(() => reject(new Error('the worker did not start within 30 s')), 30_000)
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`the worker exited (${code}) before it was ready`)) })
    child.on('message', (m: { type?: string, httpPort?: number }) => {
      if (m.type === 'flotilla:ready' && m.httpPort !== undefined) { clearTimeout(timer); resolvePort(m.httpPort) }
    })
  })
}

interface Cell { model: string, batching: 'off' | 'on', concurrency: number, rps: number, p50Ms: number, p99Ms: number, errors: number }

async function loadCell (scriptDir: string, port: number, model: string, concurrency: number, n: number): Promise<WrkResult> {
  const script = join(scriptDir, `${model}.lua`)
  writeFileSync(script, wrkPostScript(body(n)))
  const url = `http://${HOST}:${port}/v2/models/${model}/infer`
  // One thread: wrk shares the two cores with the worker; one thread drives 128 connections easily at these rates.
  if (WARMUP_S > 0) await runWrkScript({ threads: 1, connections: concurrency, seconds: WARMUP_S, script, url })
  return runWrkScript({ threads: 1, connections: concurrency, seconds: DURATION_S, script, url })
}

/** µs per request: `run` called `n` times, `batch` at a time. */
async function perRequestUs (n: number, batch: number, run: () => Promise<unknown>): Promise<number> {
  const started = performance.now()
  for (let done = 0; done < n; done += batch) {
    const pending: Array<Promise<unknown>> = []
    for (let i = 0; i < batch; i++) pending.push(run())
    await Promise.all(pending)
  }
  return (performance.now() - started) * 1000 / n
}

/** The scheduler's own cost: identity backend, batching on, against calling the instance directly. */
async function schedulerOverhead (): Promise<Record<string, number>> {
  const config = parseModelConfig(['name: "identity"', 'backend: "identity"', 'max_batch_size: 64', io('TYPE_FP32', 16),
    'dynamic_batching { }'].join('\n'), { file: 'bench', modelName: 'identity' })
  const model = await identityBackend.loadModel({
    modelName: 'identity', version: 1, modelDir: '.', versionDir: '.', config, logger: silentLogger(), random: Math.random
  })
  const instance = await model.createInstance({ name: 'identity_0', kind: 'KIND_CPU', deviceId: -1 })
  const scheduler = createScheduler({ modelName: 'identity', version: 1, config, instances: [instance] })
  const data = new Float32Array(16)
  const request: BackendRequest = {
    inputs: new Map([['INPUT0', { name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data }]]),
    requestedOutputs: ['OUTPUT0'],
    parameters: {},
    batchSize: 1
  }
  const out: Record<string, number> = {}
  for (const batch of [1, TARGET_CONCURRENCY]) {
    // Alternating rounds, median of five: the two paths see the same machine.
    const direct: number[] = []
    const scheduled: number[] = []
    for (let round = 0; round < 5; round++) {
      direct.push(await perRequestUs(OVERHEAD_N, batch, () => instance.execute([request])))
      scheduled.push(await perRequestUs(OVERHEAD_N, batch, () => scheduler.enqueue(request)))
    }
    const med = (xs: number[]): number => [...xs].sort((a, b) => a - b)[2]!
    out[`direct_us_c${batch}`] = round(med(direct), 2)
    out[`scheduled_us_c${batch}`] = round(med(scheduled), 2)
    out[`overhead_us_c${batch}`] = round(med(scheduled) - med(direct), 2)
  }
  await scheduler.stop()
  await instance.close()
  await model.unload()
  return out
}

async function main (): Promise<void> {
  const here = dirname(fileURLToPath(import.meta.url))
  const cli = resolve(here, '..', 'bin', 'flotilla.js')
  const dir = mkdtempSync(join(tmpdir(), 'flotilla-batching-'))
  stopAllOnSignals(() => rmSync(dir, { recursive: true, force: true }))
  try {
    const repository = join(dir, 'models')
    writeRepository(repository)
    const port = await startWorker(cli, repository)
    const cells: Cell[] = []
    for (const model of MODELS) {
      const n = model === 'mlp' ? 64 : 16
      for (const concurrency of CONCURRENCY) {
        for (const batching of ['off', 'on'] as const) {
          const r = await loadCell(dir, port, `${model}_${batching}`, concurrency, n)
          const errors = r.errors.connect + r.errors.read + r.errors.write + r.errors.status + r.errors.timeout
          const cell = { model, batching, concurrency, rps: round(r.requests / (r.durationUs / 1e6), 0), p50Ms: round(r.p50Us / 1000, 2), p99Ms: round(r.p99Us / 1000, 2), errors }
          cells.push(cell)
          process.stderr.write(`${model} batching ${batching} c=${concurrency}: ${cell.rps} rps, p99 ${cell.p99Ms} ms\n`)
        }
      }
    }
    await stopAll()
    const overhead = await schedulerOverhead()

    const rows: string[][] = [['model', 'c', 'off rps', 'off p50 ms', 'off p99 ms', 'on rps', 'on p50 ms', 'on p99 ms', 'on/off rps', 'errors']]
    const multipliers: Record<string, number> = {}
    for (const model of MODELS) {
      for (const c of CONCURRENCY) {
        const off = cells.find((x) => x.model === model && x.concurrency === c && x.batching === 'off')!
        const on = cells.find((x) => x.model === model && x.concurrency === c && x.batching === 'on')!
        const x = round(on.rps / Math.max(1, off.rps), 2)
        multipliers[`${model}_c${c}`] = x
        rows.push([model, String(c), String(off.rps), String(off.p50Ms), String(off.p99Ms), String(on.rps), String(on.p50Ms), String(on.p99Ms), `${x}x`, String(off.errors + on.errors)])
      }
    }
    printTable(rows)
    console.log('')
    printTable([
      ['scheduler overhead', 'direct µs/req', 'enqueue µs/req', 'overhead µs/req'],
      ...[1, TARGET_CONCURRENCY].map((c) => [`identity, batching on, ${c} at a time`, String(overhead[`direct_us_c${c}`]),
        String(overhead[`scheduled_us_c${c}`]), String(overhead[`overhead_us_c${c}`])])
    ])
    const simX = multipliers[`simulated_c${TARGET_CONCURRENCY}`]
    const worstOverhead = Math.max(overhead.overhead_us_c1 ?? Infinity, overhead[`overhead_us_c${TARGET_CONCURRENCY}`] ?? Infinity)
    console.log(`\nsimulated at c=${TARGET_CONCURRENCY}: batching on/off ${simX}x (target >= 15x); ` +
      `scheduler overhead ${worstOverhead} µs/request (target < 50)`)
    console.log(JSON.stringify({
      bench: 'batching',
      machine: { cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', node: process.version },
      durationS: DURATION_S,
      cells,
      multipliers,
      overhead,
      targets: { simulatedMultiplierC64: simX, simulatedMet: simX !== undefined && simX >= 15, overheadUs: worstOverhead, overheadMet: worstOverhead < 50 }
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
