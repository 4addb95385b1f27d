/**
 * bench/native: the native module against onnxruntime-node, measured in the same run on the same shapes.
 *
 * 1. SGEMM GFLOP/s, C = A.B with fresh fp32 operands, at 256, 512, 1024 and 2048 (square) and at the matrix
 *    products the example models make at batch 8 and 32: `native.sgemm` (the packed, blocked AVX-512/AVX2 kernel
 *    on every core) beside onnxruntime's MatMul on the same shapes (a two-input MatMul session, both operands fed,
 *    intra-op threads = cores, so neither side can pack B ahead of time), and beside the machine's peak.
 * 2. Inferences per second of each example model (config/models/{mlp,transformer,cnn}) at batch 1, 8 and 32: a
 *    native session built by the native backend's planner against an onnxruntime session of the same model.onnx,
 *    both run back to back from this thread on the same random inputs, each call awaited (no pipelining).
 * 3. With a CUDA device (native.devices() not empty): the device GEMM at 256..4096 in fp32, fp16 and bf16, the
 *    models on the device, and, when python3 has torch, torch.matmul on the same shapes (ratio to PyTorch).
 *
 * Each cell is the median of BENCH_REPEATS timed windows of BENCH_WINDOW_MS, native and onnxruntime alternating
 * window by window so drift in the machine hits both. Ends with one JSON line of every figure.
 * Targets (issue 6): SGEMM >= 1.0x onnxruntime at 1024 and above; models >= 1.0x at batch 8 and 32, >= 0.8x at
 * batch 1; GPU fp32 GEMM >= 0.7x PyTorch at 2048.
 *
 *   npx tsc -p . && node dist/bench/native.js
 *   BENCH_REPEATS [5]  BENCH_WINDOW_MS [400]  BENCH_SIZES [256,512,1024,2048]  BENCH_MODELS [mlp,transformer,cnn]
 *   BENCH_BATCHES [1,8,32]
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { cpus } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { DEFAULT_MODELS_DIR } from '../bin/make-example-models.ts'
import { seededRandom } from '../common/seeded-random.ts'
import { loadNative, type NativeArray, type NativeModule, type NativeSession } from '../native/index.ts'
import { planFromOnnx, type LoweredModel } from '../worker/backends/native/planner.ts'
import { intEnv, median, printTable, round } from './support.ts'

const REPEATS = intEnv('BENCH_REPEATS', 5, 1)
const WINDOW_MS = intEnv('BENCH_WINDOW_MS', 400, 10)
const SIZES = (process.env.BENCH_SIZES ?? '256,512,1024,2048').split(',').map(Number)
const MODELS = (process.env.BENCH_MODELS ?? 'mlp,transformer,cnn').split(',')
const BATCHES = (process.env.BENCH_BATCHES ?? '1,8,32').split(',').map(Number)
const MAX_BATCH = 32

type Ort = typeof import('onnxruntime-node')

/** Deterministic values in [-2, 2), a sum of four uniforms (roughly normal), so runs compare. */
function randomArray (length: number, seed: number): Float32Array {
  const uniform = seededRandom(seed)
  const out = new Float32Array(length)
  for (let i = 0; i < length; i++) out[i] = uniform() + uniform() + uniform() + uniform() - 2
  return out
}

/** Runs `fn` repeatedly for `ms`; returns calls per second. */
async function rate (fn: () => unknown, ms: number): Promise<number> {
  let calls = 0
  const start = performance.now()
  let now = start
  while (now - start < ms) {
    await fn()
    calls++
    now = performance.now()
  }
  return calls / ((now - start) / 1000)
}

/** Medians of alternating windows of `a` and `b` (calls per second each). */
async function alternate (a: () => unknown, b: () => unknown): Promise<[number, number]> {
  await a(); await b()
  const ra: number[] = []
  const rb: number[] = []
  for (let i = 0; i < REPEATS; i++) {
    ra.push(await rate(a, WINDOW_MS))
    rb.push(await rate(b, WINDOW_MS))
  }
  return [median(ra), median(rb)]
}

// ---------------------------------------------------------------------------------------------------------------
// The ONNX of a two-input MatMul, for onnxruntime.

async function matmulSession (ort: Ort): Promise<import('onnxruntime-node').InferenceSession> {
  const { OnnxBuilder } = await import('../worker/backends/native/onnx-builder.ts')
  const bytes = new OnnxBuilder({ name: 'matmul', opset: 13 })
    .input('A', 'float32', ['m', 'k'])
    .input('B', 'float32', ['k', 'n'])
    .node('MatMul', ['A', 'B'], ['C'])
    .output('C', 'float32', ['m', 'n'])
    .build()
  return await ort.InferenceSession.create(bytes, ortOptions())
}

function ortOptions (): import('onnxruntime-node').InferenceSession.SessionOptions {
  return { executionProviders: ['cpu'], intraOpNumThreads: cpus().length, interOpNumThreads: 1, graphOptimizationLevel: 'all' }
}

interface GemmRow { shape: string, m: number, n: number, k: number, native: number, ort: number, ratio: number }

async function benchGemm (native: NativeModule, ort: Ort, shapes: Array<[string, number, number, number]>): Promise<GemmRow[]> {
  const session = await matmulSession(ort)
  const rows: GemmRow[] = []
  for (const [label, m, n, k] of shapes) {
    const a = randomArray(m * k, 1)
    const b = randomArray(k * n, 2)
    const c = new Float32Array(m * n)
    const feeds = { A: new ort.Tensor('float32', a, [m, k]), B: new ort.Tensor('float32', b, [k, n]) }
    const [nativeRate, ortRate] = await alternate(
      () => { native.sgemm(false, false, m, n, k, 1, a, b, 0, c) },
      async () => await session.run(feeds))
    const flop = 2 * m * n * k
    rows.push({ shape: label, m, n, k, native: flop * nativeRate / 1e9, ort: flop * ortRate / 1e9, ratio: nativeRate / ortRate })
  }
  await session.release()
  return rows
}

// ---------------------------------------------------------------------------------------------------------------
// Models.

interface ModelRow { model: string, batch: number, native: number, ort: number, ratio: number, device?: string }

function modelInputs (lowered: LoweredModel, batch: number, seed: number): NativeArray[] {
  return lowered.inputs.map((io, i) => {
    const count = io.dims.reduce((n, d) => n * (d < 0 ? -d * batch : d), 1)
    if (io.dtype === 'float32') return randomArray(count, seed + i)
    // Integer inputs are token ids into the first Gather's table: ids drawn below its row count.
    const index = lowered.plan.tensors.findIndex((t) => t.name === io.name)
    const gather = lowered.plan.ops.find((op) => op.op === 'Gather' && op.inputs[1] === index)
    const table = gather !== undefined ? lowered.plan.tensors[gather.inputs[0]!] : undefined
    const rowsInTable = table?.dims[gather?.attrs.axis ?? 0] ?? 2
    const ids = Array.from(randomArray(count, seed + i), (v) => Math.floor(((v + 2) / 4) * Math.max(1, rowsInTable - 1)))
    return io.dtype === 'int64' ? BigInt64Array.from(ids, (v) => BigInt(v)) : Int32Array.from(ids)
  })
}

function ortFeeds (ort: Ort, lowered: LoweredModel, inputs: NativeArray[], batch: number): Record<string, import('onnxruntime-node').Tensor> {
  const feeds: Record<string, import('onnxruntime-node').Tensor> = {}
  lowered.inputs.forEach((io, i) => {
    const dims = io.dims.map((d) => d < 0 ? -d * batch : d)
    feeds[io.name] = new ort.Tensor(io.dtype, inputs[i]!, dims)
  })
  return feeds
}

async function benchModels (native: NativeModule, ort: Ort, device: number): Promise<ModelRow[]> {
  const rows: ModelRow[] = []
  for (const model of MODELS) {
    const bytes = readFileSync(join(DEFAULT_MODELS_DIR, model, '1', 'model.onnx'))
    const lowered = planFromOnnx(bytes, { modelName: model, maxBatch: MAX_BATCH })
    const session: NativeSession = native.createSession(lowered.plan, { device })
    const ortSession = await ort.InferenceSession.create(bytes, ortOptions())
    for (const batch of BATCHES) {
      const inputs = modelInputs(lowered, batch, 7)
      const feeds = ortFeeds(ort, lowered, inputs, batch)
      const [nativeRate, ortRate] = await alternate(
        async () => await session.run(inputs, batch),
        async () => await ortSession.run(feeds))
      rows.push({ model, batch, native: nativeRate * batch, ort: ortRate * batch, ratio: nativeRate / ortRate, ...(device >= 0 ? { device: `cuda:${device}` } : {}) })
    }
    session.close()
    await ortSession.release()
  }
  return rows
}

// ---------------------------------------------------------------------------------------------------------------
// GPU.

interface GpuGemmRow { size: number, precision: string, gflops: number, torch?: number, ratio?: number }

/** torch.matmul GFLOP/s at `size` in `dtype`, or undefined when python3 or torch or CUDA is missing. */
function torchGemm (size: number, dtype: string): number | undefined {
  const script = [
    'import torch, time, sys',
    `n=${size}; a=torch.randn(n,n,device="cuda",dtype=torch.${dtype}); b=torch.randn(n,n,device="cuda",dtype=torch.${dtype})`,
    'torch.backends.cuda.matmul.allow_tf32=False',
    'torch.matmul(a,b); torch.cuda.synchronize(); it=50; t=time.perf_counter()',
    'for _ in range(it): torch.matmul(a,b)',
    'torch.cuda.synchronize(); print(2*n**3*it/(time.perf_counter()-t)/1e9)'
  ].join('\n')
  const out = spawnSync('python3', ['-c', script], { encoding: 'utf8', timeout: 120_000 })
  const value = Number.parseFloat(out.stdout)
  return out.status === 0 && Number.isFinite(value) ? value : undefined
}

function benchGpuGemm (native: NativeModule, device: number): GpuGemmRow[] {
  const rows: GpuGemmRow[] = []
  const torchNames = { fp32: 'float32', fp16: 'float16', bf16: 'bfloat16' } as const
  for (const size of [256, 512, 1024, 2048, 4096]) {
    for (const precision of ['fp32', 'fp16', 'bf16'] as const) {
      const seconds = native.cudaGemmSeconds(device, size, size, size, precision, 50)
      const gflops = 2 * size ** 3 / seconds / 1e9
      const torch = torchGemm(size, torchNames[precision])
      rows.push({ size, precision, gflops, ...(torch !== undefined ? { torch, ratio: gflops / torch } : {}) })
    }
  }
  return rows
}

// ---------------------------------------------------------------------------------------------------------------

/** The CPU's nominal clock in GHz (/proc/cpuinfo's first "cpu MHz"). */
function nominalGhz (): number {
  try {
    const m = /cpu MHz\s*:\s*([\d.]+)/.exec(readFileSync('/proc/cpuinfo', 'utf8'))
    if (m !== null) return Number(m[1]) / 1000
  } catch {}
  return (cpus()[0]?.speed ?? 0) / 1000
}

async function main (): Promise<void> {
  const native = loadNative()
  const ort = await import('onnxruntime-node') as Ort
  const cores = cpus().length
  const cpu = native.cpu()
  const ghz = nominalGhz()
  // The figure counts one 512-bit FMA a cycle (16 lanes x 2 FLOP); Xeon Scalable parts with AVX-512 from
  // Skylake-SP Gold 6xxx on (and Sapphire Rapids, which this machine's flags, amx_tile and avx512_bf16, say it is)
  // issue two, so 64 FLOP a cycle is the hardware's ceiling. Both are printed; the SGEMM table uses the larger.
  const peak32 = cores * ghz * 32
  const peak64 = cores * ghz * 64
  console.log(`cpu: ${cpus()[0]?.model ?? '?'}, ${cores} cores at ${ghz.toFixed(2)} GHz nominal; microkernels ${cpu.isa}, ${cpu.threads} threads`)
  console.log(`peak fp32: ${peak32.toFixed(0)} GFLOP/s at 32 FLOP/cycle (one AVX-512 FMA port, the issue's figure), ` +
    `${peak64.toFixed(0)} GFLOP/s at 64 FLOP/cycle (two FMA ports, this CPU); onnxruntime-node ${ort.env.versions.common}`)

  const shapes: Array<[string, number, number, number]> = SIZES.map((s) => [`${s}^3`, s, s, s])
  shapes.push(
    ['mlp b32 784x512', 32, 512, 784], ['mlp b32 512x256', 32, 256, 512],
    ['transformer b8 qkv', 512, 128, 128], ['transformer b8 ffn-up', 512, 512, 128], ['transformer b8 ffn-down', 512, 128, 512],
    ['transformer b32 ffn-up', 2048, 512, 128], ['transformer b8 scores', 64, 64, 32])
  const gemm = await benchGemm(native, ort, shapes)
  console.log('\nSGEMM (GFLOP/s; native = native.sgemm, ort = onnxruntime MatMul of two fed inputs)')
  printTable([['shape', 'M', 'N', 'K', 'native', 'ort', 'native/ort', '% of 64/cycle peak'],
    ...gemm.map((r) => [r.shape, String(r.m), String(r.n), String(r.k), r.native.toFixed(1), r.ort.toFixed(1),
      `${r.ratio.toFixed(2)}x`, `${(100 * r.native / peak64).toFixed(0)}%`])])

  const models = await benchModels(native, ort, -1)
  console.log('\nModels on the CPU (inferences/s; each call awaited; ort = onnxruntime-node, same model.onnx)')
  printTable([['model', 'batch', 'native', 'ort', 'native/ort'],
    ...models.map((r) => [r.model, String(r.batch), r.native.toFixed(0), r.ort.toFixed(0), `${r.ratio.toFixed(2)}x`])])

  const devices = native.devices()
  let gpu: { device: string, gemm: GpuGemmRow[], models: ModelRow[] } | undefined
  if (devices.length > 0) {
    const d = devices[0]!
    const gpuGemm = benchGpuGemm(native, d.id)
    console.log(`\nGEMM on ${d.name} (GFLOP/s; torch = torch.matmul, TF32 off)`)
    printTable([['size', 'precision', 'native', 'torch', 'native/torch'],
      ...gpuGemm.map((r) => [String(r.size), r.precision, r.gflops.toFixed(0), r.torch?.toFixed(0) ?? '-', r.ratio !== undefined ? `${r.ratio.toFixed(2)}x` : '-'])])
    const gpuModels = await benchModels(native, ort, d.id)
    console.log(`\nModels on ${d.name} against onnxruntime on the CPU (inferences/s)`)
    printTable([['model', 'batch', 'native gpu', 'ort cpu', 'ratio'],
      ...gpuModels.map((r) => [r.model, String(r.batch), r.native.toFixed(0), r.ort.toFixed(0), `${r.ratio.toFixed(2)}x`])])
    gpu = { device: d.name, gemm: gpuGemm, models: gpuModels }
  } else {
    console.log(`\nGPU: none (${native.cudaReason() || 'no CUDA device'}); the device section is skipped`)
  }

  console.log(JSON.stringify({
    bench: 'native',
    cpu: { model: cpus()[0]?.model, cores, ghz, isa: cpu.isa, peak32: round(peak32, 1), peak64: round(peak64, 1) },
    sgemm: gemm.map((r) => ({ shape: r.shape, m: r.m, n: r.n, k: r.k, native: round(r.native, 1), ort: round(r.ort, 1), ratio: round(r.ratio, 3) })),
    models: models.map((r) => ({ model: r.model, batch: r.batch, native: round(r.native, 1), ort: round(r.ort, 1), ratio: round(r.ratio, 3) })),
    ...(gpu !== undefined ? { gpu } : {})
  }))
}

await main()
