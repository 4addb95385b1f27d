/**
 * The native module's only entry point: the addon built from native/ (C++17 core, CUDA when nvcc was found), its
 * types, and the reason it could not load when it could not. Everything else imports from here.
 *
 * The plan types mirror native/src/plan.h: the planner (worker/backends/native/planner.ts) lowers an ONNX graph to a
 * {@link NativePlan}, and {@link NativeModule.createSession} compiles one.
 */

import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { type FlotillaError, wrapError } from '../common/errors.ts'
import { PACKAGE_ROOT } from '../common/package-root.ts'

/** Element types the engine computes with; int64 and int32 only as indices (Gather) and integer inputs. */
export type NativeDType = 'float32' | 'int32' | 'int64'

/** Storage per dtype. */
export type NativeArray = Float32Array | Int32Array | BigInt64Array

/** The engine's op set (plan.h OpType), as the planner names them. */
export type NativeOpType =
  | 'MatMul' | 'Add' | 'Sub' | 'Mul' | 'Div'
  | 'Relu' | 'LeakyRelu' | 'Sigmoid' | 'Tanh' | 'Erf' | 'Gelu'
  | 'Softmax' | 'LayerNorm' | 'Gather' | 'Reshape' | 'Transpose' | 'Concat'
  | 'Conv' | 'MaxPool' | 'AveragePool' | 'GlobalAveragePool'

/** Activations fused into MatMul and Conv; `Gelu` ops use 'gelu' (erf) or 'gelu_tanh'. */
export type NativeActivation = 'none' | 'relu' | 'leaky_relu' | 'sigmoid' | 'tanh' | 'gelu' | 'gelu_tanh'

export interface PlanTensor {
  name: string
  dtype: NativeDType
  /** A dimension d >= 0 is fixed; d < 0 means (-d) x batch (-1: the batch; -64: 64 x batch). */
  dims: number[]
  /** Constants (weights) only: their elements, row-major. */
  data?: NativeArray
}

/** Attributes; each op reads only its own (plan.h OpAttrs). Axes are normalised to [0, rank). */
export interface PlanOpAttrs {
  transA?: boolean
  transB?: boolean
  /** MatMul: scale of A.B; LeakyRelu: slope. */
  alpha?: number
  /** MatMul: scale of the bias. */
  beta?: number
  activation?: NativeActivation
  /** LeakyRelu slope when fused. */
  activationAlpha?: number
  axis?: number
  epsilon?: number
  perm?: number[]
  kernelShape?: number[]
  strides?: number[]
  /** [top, left, bottom, right] */
  pads?: number[]
  dilations?: number[]
  group?: number
  countIncludePad?: boolean
}

export interface PlanOp {
  op: NativeOpType
  /** The ONNX node's name, for error messages. */
  name: string
  /** Indices into {@link NativePlan.tensors}; -1 for an absent optional input. */
  inputs: number[]
  outputs: number[]
  attrs: PlanOpAttrs
}

export interface NativePlan {
  tensors: PlanTensor[]
  /** In execution order. */
  ops: PlanOp[]
  inputs: number[]
  outputs: number[]
  /** Largest batch a run accepts; 0 when the model does not batch (every dim fixed). */
  maxBatch: number
}

export interface SessionOptions {
  /** -1 (default): the CPU; otherwise a CUDA device id from {@link NativeModule.devices}. */
  device?: number
  /** fp32 (default) or fp16/bf16 tensor-core products (CUDA only; the CPU ignores it). */
  precision?: 'fp32' | 'fp16' | 'bf16'
  /** Fill the arena and the outputs with NaN before each run, so an element no kernel wrote shows (tests). */
  poison?: boolean
  /** CPU: a thread pool of its own with this many threads; 0 or absent: the process-wide pool (FLOTILLA_NATIVE_THREADS or the cores). */
  threads?: number
}

export interface NativeSession {
  /**
   * Runs the plan on `batch` items (1..maxBatch; 0 for a plan that does not batch) off the event loop. Inputs in
   * plan.inputs order, each holding exactly its resolved element count; outputs in plan.outputs order.
   */
  run (inputs: readonly NativeArray[], batch: number): Promise<NativeArray[]>
  /** Frees the arena and the device's copies of the weights; a later run rejects. */
  close (): void
  /** Bytes of the intermediate-tensor arena (sized for maxBatch). */
  readonly arenaBytes: number
  readonly device: number
}

export interface NativeDevice {
  id: number
  name: string
  totalMemory: number
  /** e.g. '9.0' */
  computeCapability: string
  multiProcessors: number
}

export interface NativeModule {
  /** CUDA devices; empty without a GPU, a driver, or CUDA in this build ({@link NativeModule.cudaReason} says). */
  devices (): NativeDevice[]
  readonly cudaCompiledIn: boolean
  /** Why {@link NativeModule.devices} is empty, or ''. */
  cudaReason (): string
  /** The CPU microkernels' instruction set ('avx512' | 'avx2' | 'generic') and the threads a product may use. */
  cpu (): { isa: string, threads: number }
  createSession (plan: NativePlan, options?: SessionOptions): NativeSession
  /**
   * C = alpha * op(A).op(B) + beta * C (row-major, fp32), synchronously on the calling thread with the pool's
   * cores: for benchmarks and tests.
   */
  sgemm (transA: boolean, transB: boolean, m: number, n: number, k: number, alpha: number, a: Float32Array,
    b: Float32Array, beta: number, c: Float32Array): void
  /** Mean seconds per device GEMM of [m,k].[k,n] over `iterations` (GPU benchmarks). */
  cudaGemmSeconds (device: number, m: number, n: number, k: number, precision: 'fp32' | 'fp16' | 'bf16',
    iterations: number): number
}

// ---------------------------------------------------------------------------------------------------------------
// Loading

/** Where the build puts the addon, relative to the package root. */
const ADDON_PATH = ['native', 'build', 'Release', 'flotilla_native.node'] as const

let loaded: NativeModule | undefined
let failure: FlotillaError | undefined

/** The path the addon is loaded from. */
export function nativeAddonPath (): string {
  return join(PACKAGE_ROOT, ...ADDON_PATH)
}

/**
 * The addon, loaded once. Throws WRK_ERR_NATIVE_UNAVAILABLE with the path tried and the loader's reason (the same
 * error on every later call: a failed load is not retried).
 */
export function loadNative (): NativeModule {
  if (loaded !== undefined) return loaded
  if (failure !== undefined) throw failure
  const path = nativeAddonPath()
  try {
    if (!existsSync(path)) throw new Error('the file does not exist (the native build has not run, or it failed)')
    const mod = createRequire(import.meta.url)(path) as Partial<NativeModule>
    if (typeof mod.createSession !== 'function' || typeof mod.devices !== 'function') {
      throw new Error('it is not the Flotilla native module (createSession and devices are missing)')
    }
    loaded = mod as NativeModule
    return loaded
  } catch (err) {
    failure = wrapError('WRK_ERR_NATIVE_UNAVAILABLE', err, `${path}: ${err instanceof Error ? err.message : String(err)}`)
    throw failure
  }
}

/** Whether the addon loads (loading it if it has not been). */
export function nativeAvailable (): boolean {
  try {
    loadNative()
    return true
  } catch {
    return false
  }
}

/** Why the addon does not load, or undefined when it does (loading it if it has not been). */
export function nativeLoadError (): string | undefined {
  return nativeAvailable() ? undefined : failure?.message
}
