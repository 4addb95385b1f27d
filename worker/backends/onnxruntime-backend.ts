/**
 * `onnxruntime`: ONNX models on onnxruntime-node's CPU execution provider, for what the native backend's op list
 * cannot run (Triton's ORT backend has the same name). The package is imported only when a model asks for this
 * backend, and only on the instances' threads: each instance owns a worker_thread with its own session
 * (onnxruntime-thread.ts), because a session's run blocks the thread that calls it.
 *
 * Loading starts the first instance's thread, which creates the session; the model's inputs and outputs are then
 * checked against config.pbtxt (names, data types, ranks and fixed dimensions) before the model is READY, so a
 * config that does not fit fails the load with what to change instead of failing every request. That thread is
 * kept for the first instance. Config parameters `intra_op_thread_count` and `inter_op_thread_count` (Triton's
 * ORT backend names) set the session's thread pools. onnxruntime here is CPU-only: its CUDA provider is not
 * installed (the package's install script, which downloads it, is denied), so a KIND_GPU instance fails the load.
 *
 * Instances set mergedBatches: the dynamic batcher hands them one request whose inputs hold the whole batch.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { createError, type FlotillaError } from '../../common/errors.ts'
import { configTypeToDataType } from '../../common/protocol/datatypes.ts'
import { type DataType, type Tensor } from '../../common/protocol/types.ts'
import { type ConfigDataType, type ModelConfig } from '../repository/types.ts'
import type {
  OrtElementType, OrtTensorData, OrtThreadData, OrtThreadReply, OrtThreadRequest, OrtValueInfo, OrtWireTensor
} from './onnxruntime-thread.ts'
import {
  type Backend, type BackendInstance, type BackendModel, type BackendRequest, type BackendResponse, type InstanceSpec,
  type LoadContext
} from './types.ts'

const DEFAULT_FILENAME = 'model.onnx'
const INSTALL_HINT = 'install it with `ONNXRUNTIME_NODE_INSTALL=skip npm install onnxruntime-node` ' +
  '(the CPU provider is bundled; its install script only downloads the CUDA provider)'

/** The thread's file beside this one: .ts when running from source (tap), .js from dist/. */
const THREAD_URL = new URL(`./onnxruntime-thread${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url)

/** Config data types this backend takes, and their onnxruntime names. */
const ELEMENT_TYPES: Partial<Record<ConfigDataType, OrtElementType>> = {
  TYPE_FP32: 'float32',
  TYPE_INT64: 'int64',
  TYPE_INT32: 'int32'
}

const STORAGE: Record<OrtElementType, new (buffer: ArrayBufferLike) => OrtTensorData> = {
  float32: Float32Array,
  int64: BigInt64Array,
  int32: Int32Array
}

/** onnxruntime's messages for a run that failed because of the request's data, not the model (HTTP 400). */
const INPUT_ERRORS = /out of data bounds|out of range|Invalid rank for input|invalid dimensions for input|Unexpected input data type/i

export interface OnnxruntimeBackendOptions {
  /** The package to import on the instance threads; default 'onnxruntime-node'. */
  moduleSpecifier?: string
}

interface ThreadSettings {
  intraOpNumThreads?: number
  interOpNumThreads?: number
}

/** A config parameter that must be a non-negative integer (0: onnxruntime's default). */
function threadCount (config: ModelConfig, key: string): number | undefined {
  const raw = config.parameters[key]?.string_value
  if (raw === undefined) return undefined
  if (!/^\d+$/.test(raw.trim())) {
    throw createError('WRK_ERR_MODEL_LOAD', config.name,
      `parameter '${key}' must be a non-negative integer (0: onnxruntime's default), got '${raw}'`)
  }
  return Number(raw.trim())
}

function threadSettings (config: ModelConfig): ThreadSettings {
  const intra = threadCount(config, 'intra_op_thread_count')
  const inter = threadCount(config, 'inter_op_thread_count')
  return {
    ...(intra !== undefined && intra > 0 ? { intraOpNumThreads: intra } : {}),
    ...(inter !== undefined && inter > 0 ? { interOpNumThreads: inter } : {})
  }
}

function cpuOnlyError (modelName: string, group: string): FlotillaError {
  return createError('WRK_ERR_MODEL_LOAD', modelName,
    `instance group '${group}' has kind KIND_GPU, but the onnxruntime backend here is CPU-only (onnxruntime-node's ` +
    'CUDA provider is not installed); use kind KIND_CPU, or backend "native" to run the model on a GPU')
}

/** Checks the config's types before anything is started: this backend moves FP32, INT64 and INT32 tensors. */
function checkConfigTypes (config: ModelConfig): void {
  for (const [what, list] of [['input', config.input], ['output', config.output]] as const) {
    for (const io of list) {
      if (ELEMENT_TYPES[io.data_type] === undefined) {
        throw createError('WRK_ERR_MODEL_LOAD', config.name,
          `${what} '${io.name}' is ${io.data_type}; the onnxruntime backend takes TYPE_FP32, TYPE_INT64 and TYPE_INT32 tensors`)
      }
    }
  }
  for (const group of config.instance_group) {
    if (group.kind === 'KIND_GPU') throw cpuOnlyError(config.name, group.name)
  }
}

const shapeText = (shape: ReadonlyArray<number | string>): string => `[${shape.map(d => typeof d === 'string' ? d || '?' : d).join(', ')}]`
const isFixed = (d: number | string): d is number => typeof d === 'number' && d >= 0

/**
 * Checks the session's inputs and outputs against the config: every input the model has is declared, every
 * declared output exists, types match, and, where the model fixes a dimension, the config agrees. With
 * max_batch_size > 0 the model's first dimension is the batch and must not be fixed.
 */
export function checkModelAgainstConfig (config: ModelConfig, inputs: readonly OrtValueInfo[], outputs: readonly OrtValueInfo[]): void {
  const fail = (why: string): never => { throw createError('WRK_ERR_MODEL_LOAD', config.name, why) }
  const batching = config.max_batch_size > 0
  const check = (what: 'input' | 'output', declared: { name: string, data_type: ConfigDataType, dims: number[] }, info: OrtValueInfo): void => {
    if (!info.isTensor) fail(`model ${what} '${info.name}' is not a tensor; the onnxruntime backend takes tensors only`)
    const type = ELEMENT_TYPES[declared.data_type]!
    if (info.type !== type) {
      fail(`${what} '${declared.name}' is ${declared.data_type} in config.pbtxt but ${info.type} in the model; ` +
        `give it the model's type`)
    }
    if (info.shape.length === 0 && declared.dims.length > 0) return // the model leaves the shape open
    const configShape: Array<number | string> = batching ? ['batch', ...declared.dims] : [...declared.dims]
    if (info.shape.length !== configShape.length) {
      fail(`${what} '${declared.name}' has shape ${shapeText(info.shape)} in the model, and config.pbtxt's dims ` +
        `${shapeText(declared.dims)}${batching ? ' with the batch dimension (max_batch_size > 0)' : ''} make ` +
        `${shapeText(configShape)}; ` + (batching && info.shape.length === declared.dims.length
        ? 'set max_batch_size: 0 for a model without a batch dimension, or give the model one'
        : 'make the ranks agree'))
    }
    if (batching && isFixed(info.shape[0]!) && info.shape[0] !== 1) {
      fail(`${what} '${declared.name}' has a fixed first dimension ${info.shape[0]} in the model, so it cannot ` +
        'batch; set max_batch_size: 0 and declare the full shape in dims')
    }
    info.shape.forEach((d, i) => {
      const c = configShape[i]!
      if (batching && i === 0) return
      if (isFixed(d) && typeof c === 'number' && c >= 0 && c !== d) {
        fail(`${what} '${declared.name}' has shape ${shapeText(info.shape)} in the model, but config.pbtxt declares ` +
          `dims ${shapeText(declared.dims)}; dimension ${i} differs (${d} against ${c})`)
      }
    })
  }
  const modelInputs = new Map(inputs.map(i => [i.name, i]))
  const modelOutputs = new Map(outputs.map(o => [o.name, o]))
  const names = (xs: readonly OrtValueInfo[]): string => xs.map(x => `'${x.name}'`).join(', ') || 'none'
  for (const declared of config.input) {
    const info = modelInputs.get(declared.name)
    if (info === undefined) fail(`config.pbtxt declares input '${declared.name}', which the model does not have (its inputs: ${names(inputs)})`)
    else check('input', declared, info)
  }
  for (const info of inputs) {
    if (!config.input.some(i => i.name === info.name)) {
      fail(`the model has input '${info.name}', which config.pbtxt does not declare; onnxruntime needs every input`)
    }
  }
  for (const declared of config.output) {
    const info = modelOutputs.get(declared.name)
    if (info === undefined) fail(`config.pbtxt declares output '${declared.name}', which the model does not have (its outputs: ${names(outputs)})`)
    else check('output', declared, info)
  }
}

/** One session on its own thread; requests go out as messages, one at a time (the scheduler's contract). */
class OrtThread {
  readonly #worker: Worker
  readonly #pending = new Map<number, { resolve: (outputs: OrtWireTensor[]) => void, reject: (err: Error) => void }>()
  #nextId = 0
  #exit: Error | undefined
  readonly #exited: Promise<void>
  readonly ready: Promise<{ inputs: OrtValueInfo[], outputs: OrtValueInfo[] }>

  constructor (data: OrtThreadData) {
    this.#worker = new Worker(THREAD_URL, { workerData: data, transferList: [data.model.buffer as ArrayBuffer] })
    this.#exited = new Promise(resolve => this.#worker.once('exit', () => resolve()))
    this.ready = new Promise((resolve, reject) => {
      this.#worker.on('message', (reply: OrtThreadReply) => {
        switch (reply.type) {
          case 'ready': resolve({ inputs: reply.inputs, outputs: reply.outputs }); break
          case 'failed': reject(Object.assign(new Error(reply.message), { stage: reply.stage, code: reply.code })); break
          case 'result': this.#settle(reply.id)?.resolve(reply.outputs); break
          case 'error': this.#settle(reply.id)?.reject(new Error(reply.message)); break
        }
      })
      this.#worker.once('error', err => { this.#fail(err); reject(err) })
      this.#worker.once('exit', code => {
        const err = new Error(`the onnxruntime thread exited (code ${code})`)
        this.#fail(err)
        reject(err)
      })
    })
    // A rejection nobody awaits yet (the instance is created later) must not crash the process.
    this.ready.catch(() => {})
  }

  #settle (id: number): { resolve: (outputs: OrtWireTensor[]) => void, reject: (err: Error) => void } | undefined {
    const p = this.#pending.get(id)
    this.#pending.delete(id)
    return p
  }

  #fail (err: Error): void {
    this.#exit ??= err
    for (const p of this.#pending.values()) p.reject(err)
    this.#pending.clear()
  }

  run (inputs: OrtWireTensor[], outputs: string[]): Promise<OrtWireTensor[]> {
    if (this.#exit !== undefined) return Promise.reject(this.#exit)
    const id = this.#nextId++
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject })
      const request: OrtThreadRequest = { type: 'run', id, inputs, outputs }
      this.#worker.postMessage(request, inputs.map(t => t.data.buffer as ArrayBuffer))
    })
  }

  /** Releases the session and ends the thread; terminates it if it does not end within a second. */
  async close (): Promise<void> {
    if (this.#exit === undefined) {
      this.#worker.postMessage({ type: 'close' } satisfies OrtThreadRequest)
      const timer = setTimeout(() => { void this.#worker.terminate() }, 1000)
      await this.#exited
      clearTimeout(timer)
    } else {
      await this.#worker.terminate()
    }
  }
}

/** A request's input as onnxruntime takes it: one copy, out of the request's buffer into one the thread can own. */
function wireInput (tensor: Tensor, type: OrtElementType): OrtWireTensor {
  const data = tensor.data as OrtTensorData
  return { name: tensor.name, type, data: data.slice(), dims: tensor.shape }
}

class OnnxruntimeInstance implements BackendInstance {
  readonly mergedBatches = true
  readonly #thread: OrtThread
  readonly #config: ModelConfig
  readonly #inputTypes: ReadonlyArray<readonly [string, OrtElementType]>
  readonly #outputs: Array<{ name: string, datatype: DataType, type: OrtElementType }>

  constructor (thread: OrtThread, config: ModelConfig) {
    this.#thread = thread
    this.#config = config
    this.#inputTypes = config.input.map(i => [i.name, ELEMENT_TYPES[i.data_type]!] as const)
    this.#outputs = config.output.map(o => ({
      name: o.name, datatype: configTypeToDataType(o.data_type)!, type: ELEMENT_TYPES[o.data_type]!
    }))
  }

  async execute (requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    const responses: BackendResponse[] = []
    for (const request of requests) responses.push(await this.#run(request))
    return responses
  }

  async #run (request: BackendRequest): Promise<BackendResponse> {
    const inputs: OrtWireTensor[] = []
    for (const [name, type] of this.#inputTypes) {
      const tensor = request.inputs.get(name)
      if (tensor !== undefined) inputs.push(wireInput(tensor, type))
    }
    let results: OrtWireTensor[]
    try {
      results = await this.#thread.run(inputs, this.#outputs.map(o => o.name))
    } catch (err) {
      const message = (err as Error).message
      const error = INPUT_ERRORS.test(message)
        ? createError('WRK_ERR_INVALID_INPUT', `model '${this.#config.name}': ${message}`)
        : createError('WRK_ERR_EXECUTION_FAILED', this.#config.name, message)
      return { error }
    }
    const outputs: Tensor[] = results.map((r, i) => {
      const spec = this.#outputs[i]!
      // Structured clone keeps the typed array's class; rebuild only if a runtime ever hands back another view.
      const data = r.data instanceof STORAGE[spec.type] ? r.data : new STORAGE[spec.type](r.data.buffer)
      return { name: spec.name, datatype: spec.datatype, shape: r.dims, data }
    })
    return { outputs }
  }

  async close (): Promise<void> {
    await this.#thread.close()
  }
}

class OnnxruntimeModel implements BackendModel {
  readonly #config: ModelConfig
  readonly #start: () => OrtThread
  /** The thread the load started and checked, kept for the first instance. */
  #spare: OrtThread | undefined

  constructor (config: ModelConfig, start: () => OrtThread, spare: OrtThread) {
    this.#config = config
    this.#start = start
    this.#spare = spare
  }

  async createInstance (spec: InstanceSpec): Promise<BackendInstance> {
    if (spec.kind === 'KIND_GPU') throw cpuOnlyError(this.#config.name, spec.name)
    let thread = this.#spare
    this.#spare = undefined
    if (thread === undefined) {
      thread = this.#start()
      try {
        await thread.ready
      } catch (err) {
        await thread.close()
        throw createError('WRK_ERR_MODEL_LOAD', this.#config.name, `onnxruntime instance '${spec.name}' failed to start: ${(err as Error).message}`)
      }
    }
    return new OnnxruntimeInstance(thread, this.#config)
  }

  async unload (): Promise<void> {
    const spare = this.#spare
    this.#spare = undefined
    await spare?.close()
  }
}

/** The backend, with what its threads import injectable (tests name a missing package). */
export function createOnnxruntimeBackend ({ moduleSpecifier = 'onnxruntime-node' }: OnnxruntimeBackendOptions = {}): Backend {
  return {
    name: 'onnxruntime',
    async loadModel (ctx: LoadContext): Promise<BackendModel> {
      const { config, modelName } = ctx
      checkConfigTypes(config)
      const settings = threadSettings(config)
      const file = join(ctx.versionDir, config.default_model_filename || DEFAULT_FILENAME)
      let bytes: Uint8Array
      try {
        bytes = await readFile(file)
      } catch (err) {
        throw createError('WRK_ERR_MODEL_LOAD', modelName,
          `the onnxruntime backend needs ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); ` +
          'put the model there or set default_model_filename')
      }
      // Each thread gets its own copy, transferred to it: the sessions do not share the file's buffer.
      const start = (): OrtThread => new OrtThread({ model: new Uint8Array(bytes), moduleSpecifier, ...settings })
      const thread = start()
      let io: { inputs: OrtValueInfo[], outputs: OrtValueInfo[] }
      try {
        io = await thread.ready
      } catch (err) {
        await thread.close()
        const e = err as Error & { stage?: string, code?: string }
        if (e.stage === 'import') {
          throw createError('WRK_ERR_ONNXRUNTIME_UNAVAILABLE', modelName,
            `${e.code === 'ERR_MODULE_NOT_FOUND' || /Cannot find (package|module)/.test(e.message)
              ? 'it is not installed'
              : `importing it failed (${e.message})`}; ${INSTALL_HINT}`)
        }
        throw createError('WRK_ERR_MODEL_LOAD', modelName, `onnxruntime cannot load ${file}: ${e.message}`)
      }
      try {
        checkModelAgainstConfig(config, io.inputs, io.outputs)
      } catch (err) {
        await thread.close()
        throw err
      }
      return new OnnxruntimeModel(config, start, thread)
    }
  }
}

export const onnxruntimeBackend: Backend = createOnnxruntimeBackend()
