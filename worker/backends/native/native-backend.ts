/**
 * `native`: ONNX models on Flotilla's own engine (native/). The version folder holds `model.onnx` (or
 * `default_model_filename`); loading plans it (planner.ts) with config.pbtxt's max_batch_size and input dims, checks
 * config.pbtxt against the model, and loads the addon. Each instance compiles its own session: on the instance's GPU
 * for KIND_GPU, on the CPU otherwise. Instances take merged batches: the dynamic batcher hands them one request whose
 * inputs are the batch concatenated, and the session runs it in one pass.
 *
 * config.pbtxt parameters:
 *   precision: fp32 (default) | fp16 | bf16 - matrix products on tensor cores in half precision (CUDA only).
 *
 * A run that rejects with code NATIVE_INVALID_INPUT (bad request data, such as a Gather index out of range) fails that
 * request with WRK_ERR_INVALID_INPUT (400); any other failure with WRK_ERR_EXECUTION_FAILED (500).
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createError, isFlotillaError, wrapError } from '../../../common/errors.ts'
import { type DataType, type Tensor } from '../../../common/protocol/types.ts'
import {
  loadNative, type NativeArray, type NativeDType, type NativeModule, type NativeSession, type SessionOptions
} from '../../../native/index.ts'
import { type ConfigDataType, type ModelConfig } from '../../repository/types.ts'
import {
  type Backend, type BackendInstance, type BackendModel, type BackendRequest, type BackendResponse, type InstanceSpec,
  type LoadContext
} from '../types.ts'
import { elementCount, resolveDims } from './batch-dims.ts'
import { planFromOnnx, type LoweredModel, type PlanIo } from './planner.ts'

const DEFAULT_FILENAME = 'model.onnx'

type Precision = NonNullable<SessionOptions['precision']>
const PRECISIONS: readonly Precision[] = ['fp32', 'fp16', 'bf16']

const CONFIG_TYPES: Readonly<Record<NativeDType, ConfigDataType>> = {
  float32: 'TYPE_FP32',
  int32: 'TYPE_INT32',
  int64: 'TYPE_INT64'
}

const PROTOCOL_TYPES: Readonly<Record<NativeDType, DataType>> = {
  float32: 'FP32',
  int32: 'INT32',
  int64: 'INT64'
}

function storageMatches (dtype: NativeDType, data: unknown): data is NativeArray {
  switch (dtype) {
    case 'float32': return data instanceof Float32Array
    case 'int32': return data instanceof Int32Array
    case 'int64': return data instanceof BigInt64Array
  }
}

const pbtxtDims = (dims: readonly number[]): string => `[ ${dims.join(', ')} ]`

/** config.pbtxt's `precision` parameter; an unknown value fails the load. */
export function sessionPrecision (config: ModelConfig): Precision {
  const raw = config.parameters.precision?.string_value
  if (raw === undefined || raw === '') return 'fp32'
  if (!(PRECISIONS as readonly string[]).includes(raw)) {
    throw createError('WRK_ERR_MODEL_LOAD', config.name,
      `parameter 'precision' of the native backend must be one of ${PRECISIONS.join(', ')}, got '${raw}'`)
  }
  return raw as Precision
}

/** Per input, the dims config.pbtxt gives the model (its reshape when it has one), for the planner's symbolic dims. */
export function configInputDims (config: ModelConfig): Record<string, number[]> {
  return Object.fromEntries(config.input.map(i => [i.name, [...(i.reshape?.shape ?? i.dims)]]))
}

/**
 * Checks config.pbtxt's inputs and outputs against the planned model: names, data types and dims (without the batch
 * dimension when max_batch_size > 0). A config that declares no inputs or outputs is fine (Triton's auto-complete
 * fills them); one that declares inputs must declare all of them, since only declared inputs reach the backend.
 */
export function checkConfigAgainstModel (config: ModelConfig, model: LoweredModel): void {
  const fail = (reason: string): Error => createError('WRK_ERR_MODEL_LOAD', config.name, reason)
  const batching = config.max_batch_size > 0
  const modelDims = (io: PlanIo): number[] => (batching ? io.dims.slice(1) : io.dims)
  const check = (kind: 'input' | 'output', declared: ModelConfig['input'] | ModelConfig['output'], ios: PlanIo[]): void => {
    for (const c of declared) {
      const io = ios.find(i => i.name === c.name)
      if (io === undefined) {
        throw fail(`config.pbtxt declares ${kind} '${c.name}', which the model does not have; its ${kind}s are ` +
          ios.map(i => `'${i.name}'`).join(', '))
      }
      const wanted = CONFIG_TYPES[io.dtype]
      if (c.data_type !== wanted) {
        throw fail(`${kind} '${c.name}' is ${c.data_type} in config.pbtxt, the model's is ${io.dtype}: set data_type: ${wanted}`)
      }
      const dims = modelDims(io)
      const given = c.reshape?.shape ?? c.dims
      const wildcardOk = kind === 'output'
      const same = given.length === dims.length && given.every((d, i) => d === dims[i] || (wildcardOk && d === -1))
      if (!same) {
        const field = c.reshape === undefined ? 'dims' : 'reshape { shape }'
        throw fail(`${kind} '${c.name}' has ${field} ${pbtxtDims(given)} in config.pbtxt, the model's ${kind} is ` +
          `${pbtxtDims(dims)}${batching ? ' after the batch dimension' : ''}: set ${field === 'dims' ? 'dims' : 'reshape: { shape'}: ` +
          `${pbtxtDims(dims)}${field === 'dims' ? '' : ' }'}`)
      }
      if (c.reshape !== undefined && !c.dims.includes(-1) && elementCount(c.dims) !== elementCount(dims)) {
        throw fail(`${kind} '${c.name}' has dims ${pbtxtDims(c.dims)}, which do not hold the ${elementCount(dims)} ` +
          `elements of its reshape ${pbtxtDims(dims)}`)
      }
    }
  }
  check('input', config.input, model.inputs)
  check('output', config.output, model.outputs)
  if (config.input.length > 0) {
    for (const io of model.inputs) {
      if (!config.input.some(c => c.name === io.name)) {
        throw fail(`the model's input '${io.name}' is not declared in config.pbtxt; add input { name: "${io.name}" ` +
          `data_type: ${CONFIG_TYPES[io.dtype]} dims: ${pbtxtDims(modelDims(io))} }`)
      }
    }
  }
}

class NativeInstance implements BackendInstance {
  readonly mergedBatches = true
  readonly #session: NativeSession
  readonly #model: LoweredModel
  readonly #config: ModelConfig
  readonly #onClose: () => void
  #closed = false

  constructor (session: NativeSession, model: LoweredModel, config: ModelConfig, onClose: () => void) {
    this.#session = session
    this.#model = model
    this.#config = config
    this.#onClose = onClose
  }

  async execute (requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    const responses: BackendResponse[] = []
    for (const r of requests) responses.push(await this.#run(r))
    return responses
  }

  async #run (request: BackendRequest): Promise<BackendResponse> {
    const maxBatch = this.#model.plan.maxBatch
    const batch = maxBatch > 0 ? request.batchSize : 0
    if (maxBatch > 0 && !(batch >= 1 && batch <= maxBatch)) {
      return { error: createError('WRK_ERR_INVALID_INPUT', `batch size ${batch} is outside 1..${maxBatch} for model '${this.#config.name}'`) }
    }
    const arrays: NativeArray[] = []
    for (const io of this.#model.inputs) {
      const t = request.inputs.get(io.name)
      if (t === undefined) return { error: createError('WRK_ERR_INVALID_INPUT', `input '${io.name}' is missing`) }
      const count = elementCount(resolveDims(io.dims, batch))
      if (!storageMatches(io.dtype, t.data) || t.data.length !== count) {
        return {
          error: createError('WRK_ERR_INVALID_INPUT', `input '${io.name}' must be ${PROTOCOL_TYPES[io.dtype]} with ${count} ` +
            `elements, got ${t.datatype} with ${t.data.length}`)
        }
      }
      arrays.push(t.data)
    }
    let results: NativeArray[]
    try {
      results = await this.#session.run(arrays, batch)
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err)
      if ((err as { code?: unknown }).code === 'NATIVE_INVALID_INPUT') {
        return { error: wrapError('WRK_ERR_INVALID_INPUT', err, message) }
      }
      return { error: wrapError('WRK_ERR_EXECUTION_FAILED', err, this.#config.name, message) }
    }
    const outputs: Tensor[] = this.#model.outputs.map((io, i) => {
      const declared = this.#config.output.find(c => c.name === io.name)
      const shape = declared?.reshape !== undefined
        ? [...(maxBatch > 0 ? [batch] : []), ...declared.dims]
        : resolveDims(io.dims, batch)
      return { name: io.name, datatype: PROTOCOL_TYPES[io.dtype], shape, data: results[i]! }
    })
    return { outputs }
  }

  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#onClose()
    this.#session.close()
  }
}

export interface NativeBackendOptions {
  /** Loads the addon; tests inject a fake. Default: native/index.ts loadNative. */
  load?: () => NativeModule
}

/** The addon, or WRK_ERR_NATIVE_UNAVAILABLE saying why it did not load. */
function loadAddon (load: () => NativeModule): NativeModule {
  try {
    return load()
  } catch (err) {
    if (isFlotillaError(err)) throw err
    throw wrapError('WRK_ERR_NATIVE_UNAVAILABLE', err, err instanceof Error ? err.message : String(err))
  }
}

export function createNativeBackend ({ load = loadNative }: NativeBackendOptions = {}): Backend {
  return {
    name: 'native',
    supportsGpu: true,
    async loadModel (ctx: LoadContext): Promise<BackendModel> {
      const { config, modelName } = ctx
      const file = join(ctx.versionDir, config.default_model_filename || DEFAULT_FILENAME)
      let bytes: Uint8Array
      try {
        bytes = await readFile(file)
      } catch (err) {
        throw wrapError('WRK_ERR_MODEL_LOAD', err, modelName,
          `the native backend needs ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); ` +
          'put the ONNX model there or set default_model_filename')
      }
      const precision = sessionPrecision(config)
      const lowered = planFromOnnx(bytes, {
        modelName, maxBatch: config.max_batch_size, dims: configInputDims(config), file
      })
      checkConfigAgainstModel(config, lowered)
      const native = loadAddon(load)
      ctx.logger.info({ model: modelName, version: ctx.version, ops: lowered.opCounts, tensors: lowered.plan.tensors.length },
        'native plan ready')
      const instances = new Set<NativeInstance>()
      return {
        async createInstance (spec: InstanceSpec): Promise<BackendInstance> {
          const device = spec.kind === 'KIND_GPU' ? spec.deviceId : -1
          let session: NativeSession
          try {
            session = native.createSession(lowered.plan, { device, precision })
          } catch (err) {
            throw wrapError('WRK_ERR_MODEL_LOAD', err, modelName,
              `instance '${spec.name}' could not create a session on ${device < 0 ? 'the CPU' : `GPU ${device}`}: ` +
              (err instanceof Error ? err.message : String(err)))
          }
          const instance: NativeInstance = new NativeInstance(session, lowered, config, () => instances.delete(instance))
          instances.add(instance)
          return instance
        },
        async unload (): Promise<void> {
          await Promise.all([...instances].map(i => i.close()))
        }
      }
    }
  }
}

export const nativeBackend: Backend = createNativeBackend()
