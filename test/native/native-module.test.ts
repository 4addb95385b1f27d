/**
 * The addon from JavaScript (native/index.ts loadNative): what it reports about the machine, sessions from hand-written
 * plans run at several batches with poisoning on, every way a caller can get a run or a plan wrong (each a rejection
 * or a TypeError that says what was expected, never a crash), that a run leaves the event loop free, and that runs
 * in flight hold the process open (and idle sessions do not) and outlive close().
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import {
  loadNative, nativeAddonPath, nativeAvailable, nativeLoadError, type NativeArray, type NativePlan
} from '../../native/index.ts'

const native = loadNative()

const f32 = (...xs: number[]): Float32Array => Float32Array.from(xs)

/** Deterministic values in [-1, 1). */
function values (n: number, seed: number): Float32Array {
  let s = seed >>> 0
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    return s / 2 ** 31 - 1
  })
}

const K = 4
const N = 3
const W = values(K * N, 1)
const B = f32(0.1, -0.2, 0.3)
const EMB = values(5 * 2, 2)

/** Y = relu(X W + B) for X [batch, 4]; E = EMB[ids] for ids [batch, 2] (int64). */
function tinyPlan (maxBatch = 8): NativePlan {
  return {
    tensors: [
      { name: 'X', dtype: 'float32', dims: [-1, K] },
      { name: 'W', dtype: 'float32', dims: [K, N], data: W },
      { name: 'B', dtype: 'float32', dims: [N], data: B },
      { name: 'Y', dtype: 'float32', dims: [-1, N] },
      { name: 'EMB', dtype: 'float32', dims: [5, 2], data: EMB },
      { name: 'ids', dtype: 'int64', dims: [-1, 2] },
      { name: 'E', dtype: 'float32', dims: [-1, 2, 2] }
    ],
    ops: [
      { op: 'MatMul', name: 'fc', inputs: [0, 1, 2], outputs: [3], attrs: { activation: 'relu' } },
      { op: 'Gather', name: 'embedding', inputs: [4, 5], outputs: [6], attrs: { axis: 0 } }
    ],
    inputs: [0, 5],
    outputs: [3, 6],
    maxBatch
  }
}

function reference (x: Float32Array, ids: BigInt64Array, batch: number): { y: number[], e: number[] } {
  const y: number[] = []
  for (let r = 0; r < batch; r++) {
    for (let j = 0; j < N; j++) {
      let s = B[j]!
      for (let k = 0; k < K; k++) s += x[r * K + k]! * W[k * N + j]!
      y.push(Math.max(0, s))
    }
  }
  const e: number[] = []
  for (const id of ids) {
    const i = Number(id < 0n ? id + 5n : id)
    e.push(EMB[i * 2]!, EMB[i * 2 + 1]!)
  }
  return { y, e }
}

const close = (got: ArrayLike<number>, want: number[]): boolean =>
  got.length === want.length && want.every((v, i) => Math.abs(got[i]! - v) <= 1e-5 * Math.max(1, Math.abs(v)))

/** The rejection of a promise that must reject. */
async function rejection (p: Promise<unknown>): Promise<Error & { code?: string }> {
  try {
    await p
  } catch (err) {
    return err as Error & { code?: string }
  }
  throw new Error('expected a rejection')
}

function thrown (fn: () => unknown): Error & { code?: string } {
  try {
    fn()
  } catch (err) {
    return err as Error & { code?: string }
  }
  throw new Error('expected a throw')
}

t.test('loads, once, from the package root', async t => {
  t.ok(nativeAvailable(), 'nativeAvailable()')
  t.equal(nativeLoadError(), undefined, 'no load error')
  t.equal(loadNative(), native, 'memoised')
  t.match(nativeAddonPath(), /native\/build\/Release\/flotilla_native\.node$/)
})

t.test('cpu(), devices(), cudaCompiledIn, cudaReason()', async t => {
  const cpu = native.cpu()
  t.ok(['avx512', 'avx2', 'generic'].includes(cpu.isa), `isa ${cpu.isa}`)
  t.ok(Number.isInteger(cpu.threads) && cpu.threads >= 1, `threads ${cpu.threads}`)
  t.type(native.cudaCompiledIn, 'boolean')
  const devices = native.devices()
  t.ok(Array.isArray(devices), 'devices() is an array')
  if (devices.length === 0) {
    t.not(native.cudaReason(), '', `cudaReason says why there is no device: ${native.cudaReason()}`)
  } else {
    t.equal(native.cudaReason(), '')
    for (const d of devices) t.match(d, { id: Number, name: String, totalMemory: Number, computeCapability: /^\d+\.\d+$/ })
  }
})

t.test('a session runs MatMul + bias + relu and a Gather at several batches, poison on', async t => {
  const session = native.createSession(tinyPlan(), { poison: true })
  t.equal(session.device, -1)
  t.ok(session.arenaBytes > 0, `arenaBytes ${session.arenaBytes}`)
  for (const batch of [1, 3, 8]) {
    const x = values(batch * K, 10 + batch)
    const ids = BigInt64Array.from({ length: batch * 2 }, (_, i) => BigInt((i * 3) % 10 - 5))
    const [y, e] = await session.run([x, ids], batch)
    const want = reference(x, ids, batch)
    t.ok(y instanceof Float32Array && e instanceof Float32Array, 'outputs are Float32Arrays')
    t.ok(close(y as Float32Array, want.y), `batch ${batch}: Y`)
    t.ok(close(e as Float32Array, want.e), `batch ${batch}: E (negative ids wrap)`)
  }
  // Two runs at once on one session serialise and both answer right.
  const x1 = values(8 * K, 99)
  const x2 = values(2 * K, 98)
  const ids8 = new BigInt64Array(16)
  const ids2 = new BigInt64Array(4).fill(4n)
  const [r1, r2] = await Promise.all([session.run([x1, ids8], 8), session.run([x2, ids2], 2)])
  t.ok(close(r1![0] as Float32Array, reference(x1, ids8, 8).y) && close(r2![0] as Float32Array, reference(x2, ids2, 2).y),
    'concurrent runs')
  session.close()
})

t.test('runs that are wrong reject with a message saying what was expected', async t => {
  const session = native.createSession(tinyPlan())
  const x = values(2 * K, 3)
  const ids = new BigInt64Array(4)

  let err = await rejection(session.run([x], 2))
  t.equal(err.name, 'TypeError')
  t.match(err.message, 'the model takes 2 inputs, got 1')

  err = await rejection(session.run([Float64Array.from(x) as unknown as NativeArray, ids], 2))
  t.equal(err.name, 'TypeError')
  t.match(err.message, "input 0 ('X') must be a Float32Array, got a Float64Array")

  err = await rejection(session.run([x, Int32Array.from([0, 1, 2, 3])], 2))
  t.match(err.message, "input 1 ('ids') must be a BigInt64Array, got an Int32Array")

  err = await rejection(session.run([values(3 * K, 3), ids], 2))
  t.equal(err.name, 'TypeError')
  t.match(err.message, "input 0 ('X') must hold 8 elements at batch 2, got 12")

  err = await rejection(session.run([x, ids], 0))
  t.equal(err.name, 'RangeError')
  t.match(err.message, 'batch 0 is out of range [1, 8]')
  err = await rejection(session.run([x, ids], 9))
  t.match(err.message, 'batch 9 is out of range [1, 8]')
  err = await rejection(session.run([x, ids], 1.5))
  t.equal(err.name, 'TypeError')
  t.match(err.message, 'batch must be an integer')

  err = await rejection(session.run('nope' as unknown as NativeArray[], 2))
  t.match(err.message, 'inputs must be an array of typed arrays, got a string')

  // A Gather index out of range is the request's fault: NATIVE_INVALID_INPUT, naming the op, the index, the range.
  err = await rejection(session.run([x, BigInt64Array.from([0n, 1n, 5n, 2n])], 2))
  t.equal(err.code, 'NATIVE_INVALID_INPUT')
  t.match(err.message, "Gather 'embedding': index 5 (element 2 of the indices) is out of range [-5, 5)")
  err = await rejection(session.run([x, BigInt64Array.from([0n, -6n, 1n, 2n])], 2))
  t.equal(err.code, 'NATIVE_INVALID_INPUT')

  // The session still works after all that.
  const [y] = await session.run([x, ids], 2)
  t.ok(close(y as Float32Array, reference(x, ids, 2).y), 'a good run after the bad ones')

  session.close()
  session.close()
  err = await rejection(session.run([x, ids], 2))
  t.equal(err.code, 'NATIVE_SESSION_CLOSED', 'a run after close() rejects')
  t.match(err.message, 'the session is closed')
})

t.test('a plan that does not batch runs at batch 0', async t => {
  const plan = tinyPlan(0)
  for (const tensor of plan.tensors) tensor.dims = tensor.dims.map(d => (d < 0 ? 2 : d))
  const session = native.createSession(plan)
  const x = values(2 * K, 5)
  const ids = BigInt64Array.from([1n, 2n, 3n, 4n])
  const [y] = await session.run([x, ids], 0)
  t.ok(close(y as Float32Array, reference(x, ids, 2).y))
  const err = await rejection(session.run([x, ids], 1))
  t.match(err.message, 'this model does not batch')
  session.close()
})

t.test('malformed plans throw a TypeError naming the field', async t => {
  const cases: Array<[string, (p: NativePlan) => void, string | RegExp]> = [
    ['dtype', p => { (p.tensors[1] as { dtype: string }).dtype = 'float16' },
      "plan.tensors[1] ('W').dtype must be 'float32', 'int32' or 'int64', got 'float16'"],
    ['dims', p => { (p.tensors[0] as { dims: unknown }).dims = [-1, 'four'] },
      "plan.tensors[0] ('X').dims[1] must be an integer"],
    ['data kind', p => { (p.tensors[1] as { data: unknown }).data = new Float64Array(12) },
      "plan.tensors[1] ('W').data must be a Float32Array, got a Float64Array"],
    ['data length', p => { p.tensors[1]!.data = new Float32Array(11) },
      "plan.tensors[1] ('W').data has 11 elements but its dims hold 12"],
    ['op name', p => { (p.ops[0] as { op: string }).op = 'Gemm' },
      /plan\.ops\[0\] \('fc'\)\.op 'Gemm' is not an op the engine runs \(MatMul, Add/],
    ['input index', p => { p.ops[0]!.inputs = [0, 1, 99] }, "plan.ops[0] ('fc').inputs[2] must be an integer in [-1, 6]"],
    ['attr type', p => { (p.ops[0]!.attrs as { transA: unknown }).transA = 1 },
      "plan.ops[0] ('fc').attrs.transA must be a boolean, got the number 1"],
    ['activation', p => { (p.ops[0]!.attrs as { activation: string }).activation = 'swish' },
      "plan.ops[0] ('fc').attrs.activation must be one of"],
    ['perm', p => { (p.ops[1]!.attrs as { perm: unknown }).perm = 'x' }, "plan.ops[1] ('embedding').attrs.perm must be an array"],
    ['maxBatch', p => { p.maxBatch = -1 }, 'plan.maxBatch must be an integer in [0, 2147483647], got the number -1'],
    ['outputs', p => { (p as { outputs: unknown }).outputs = undefined }, 'plan.outputs must be an array, got undefined']
  ]
  for (const [what, mutate, message] of cases) {
    const plan = tinyPlan()
    mutate(plan)
    const err = thrown(() => native.createSession(plan))
    t.equal(err.name, 'TypeError', `${what}: TypeError`)
    t.match(err.message, message, `${what}: names the field`)
  }
  t.match(thrown(() => native.createSession(null as unknown as NativePlan)).message, 'plan must be an object, got null')
  t.match(thrown(() => native.createSession(tinyPlan(), { precision: 'fp8' as 'fp16' })).message,
    "options.precision must be 'fp32', 'fp16' or 'bf16', got 'fp8'")
})

t.test('plans the engine rejects throw NATIVE_INVALID_PLAN naming the op', async t => {
  const plan = tinyPlan()
  plan.tensors[1]!.dims = [N, K]
  plan.tensors[1]!.data = W
  let err = thrown(() => native.createSession(plan))
  t.equal(err.code, 'NATIVE_INVALID_PLAN')
  t.match(err.message, "MatMul 'fc': inner dimensions differ")

  const early = tinyPlan()
  early.ops.reverse()
  early.ops[0]!.inputs = [4, 3]
  err = thrown(() => native.createSession(early))
  t.equal(err.code, 'NATIVE_INVALID_PLAN')
  t.match(err.message, "'Y' is used before any op computes it")

  err = thrown(() => native.createSession(tinyPlan(), { device: 0 }))
  t.equal(err.code, native.devices().length === 0 ? 'NATIVE_SESSION_FAILED' : undefined)
})

t.test('sgemm and cudaGemmSeconds', async t => {
  const a = values(2 * 3, 7)
  const b = values(3 * 4, 8)
  const c = new Float32Array(2 * 4).fill(1)
  native.sgemm(false, false, 2, 4, 3, 2, a, b, 0.5, c)
  const want: number[] = []
  for (let i = 0; i < 2; i++) {
    for (let j = 0; j < 4; j++) {
      let s = 0
      for (let k = 0; k < 3; k++) s += a[i * 3 + k]! * b[k * 4 + j]!
      want.push(2 * s + 0.5)
    }
  }
  t.ok(close(c, want), 'C = 2 A.B + 0.5 C')
  t.match(thrown(() => native.sgemm(false, false, 2, 4, 3, 1, a, b, 0, new Float32Array(7))).message,
    'c must hold m*n = 8 elements')
  if (native.devices().length === 0) {
    // Without CUDA in the build, or without a GPU or driver: an Error saying which, never a crash.
    const err = thrown(() => native.cudaGemmSeconds(0, 64, 64, 64, 'fp32', 1))
    t.equal(err.code, 'NATIVE_EXECUTION_FAILED')
    t.match(err.message, /^cudaGemmSeconds: ./, err.message)
  }
  t.match(thrown(() => native.cudaGemmSeconds(0, 64, 64, 64, 'fp64' as 'fp32', 1)).message,
    "precision must be 'fp32', 'fp16' or 'bf16', got 'fp64'")
})

t.test('run() does not block the event loop', async t => {
  // Eight 1024x1024 products of a [batch, 1024] input: about 8.6 GFLOP at batch 512.
  const size = 1024
  const layers = 8
  const plan: NativePlan = { tensors: [{ name: 'x', dtype: 'float32', dims: [-1, size] }], ops: [], inputs: [0], outputs: [], maxBatch: 512 }
  let prev = 0
  for (let i = 0; i < layers; i++) {
    plan.tensors.push({ name: `w${i}`, dtype: 'float32', dims: [size, size], data: values(size * size, 100 + i).map(v => v / 32) })
    plan.tensors.push({ name: `h${i}`, dtype: 'float32', dims: [-1, size] })
    plan.ops.push({ op: 'MatMul', name: `layer${i}`, inputs: [prev, plan.tensors.length - 2], outputs: [plan.tensors.length - 1], attrs: { activation: 'tanh' } })
    prev = plan.tensors.length - 1
  }
  plan.outputs.push(prev)
  const session = native.createSession(plan)
  const x = values(512 * size, 5)
  let ticks = 0
  let last = performance.now()
  let maxGap = 0
  const timer = setInterval(() => {
    const now = performance.now()
    maxGap = Math.max(maxGap, now - last)
    last = now
    ticks++
  }, 5)
  const started = performance.now()
  const [y] = await session.run([x], 512)
  const took = performance.now() - started
  clearInterval(timer)
  t.equal(y!.length, 512 * size)
  t.ok(took > 30, `the run took ${took.toFixed(0)} ms`)
  t.ok(ticks >= Math.min(5, Math.floor(took / 20)), `a 5 ms timer fired ${ticks} times during it (largest gap ${maxGap.toFixed(0)} ms)`)
  session.close()
})

t.test('runs in flight finish after close(); later ones reject', async t => {
  const session = native.createSession(tinyPlan())
  const x = values(8 * K, 7)
  const ids = new BigInt64Array(16)
  const pending = [session.run([x, ids], 8), session.run([x, ids], 8)]
  session.close()
  for (const [y] of await Promise.all(pending)) t.ok(close(y as Float32Array, reference(x, ids, 8).y), 'answered right')
  await t.rejects(session.run([x, ids], 8), { code: 'NATIVE_SESSION_CLOSED' })
})

t.test('a run in flight holds the process open until it settles; an idle session does not', async t => {
  // A child with nothing else to do: it must print the result (the run kept its event loop alive) and then exit by
  // itself although the session is never closed (the idle session keeps nothing alive).
  const script = `
    const native = require(process.argv[1])
    const plan = {
      tensors: [{ name: 'x', dtype: 'float32', dims: [-1, 2] }, { name: 'y', dtype: 'float32', dims: [-1, 2] }],
      ops: [{ op: 'Relu', name: 'relu', inputs: [0], outputs: [1] }], inputs: [0], outputs: [1], maxBatch: 4
    }
    const session = native.createSession(plan)
    session.run([Float32Array.of(-1, 2)], 1).then(([y]) => console.log('settled', Array.from(y).join(',')))
  `
  const { stdout } = await promisify(execFile)(process.execPath, ['-e', script, nativeAddonPath()], { timeout: 20_000 })
  t.equal(stdout.trim(), 'settled 0,2')
})
