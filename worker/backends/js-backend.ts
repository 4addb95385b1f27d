/**
 * `js`: pre- and post-processing code, or whole small models, written in JavaScript. The version folder holds a
 * module (`model.js`, or `default_model_filename`) exporting, after Triton's Python backend:
 *
 *   export async function initialize (args)  // optional; args: { modelName, version, config, versionDir, parameters }
 *   export async function execute (requests) // required; one response per request, in order
 *   export async function finalize ()        // optional; on unload
 *
 * A request is `{ inputs: { NAME: { name, datatype, shape, data } }, requestedOutputs, parameters, batchSize }`
 * with typed-array data (BYTES: an array of Uint8Array, views of the request). A response is
 * `{ outputs: [{ name, shape, data, datatype? }] }` or `{ error: 'message' }`; `data` may be a typed array or a plain
 * array (BYTES: strings or Uint8Arrays), and is converted to the datatype the config declares for that output. Everything a module returns is checked here, so a mistake in
 * model code fails that request with a message naming the output, never the worker.
 */
import { stat } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { createError, wrapError } from '../../common/errors.ts'
import { allocateTensorData, configTypeToDataType, elementCount, float32ToBf16Bits, float32ToFp16Bits } from '../../common/protocol/datatypes.ts'
import { BytesData, BytesDataBuilder } from '../../common/protocol/bytes-data.ts'
import { type DataType, type Tensor, type TensorData } from '../../common/protocol/types.ts'
import { type ModelConfig } from '../repository/types.ts'
import {
  type Backend, type BackendInstance, type BackendModel, type BackendRequest, type BackendResponse, type LoadContext
} from './types.ts'

/** What a model module exports. */
export interface JsModelModule {
  initialize?: (args: JsModelInitArgs) => unknown
  execute: (requests: JsModelRequest[]) => unknown
  finalize?: () => unknown
}

export interface JsModelInitArgs {
  modelName: string
  version: number
  versionDir: string
  config: ModelConfig
  parameters: Record<string, string>
}

/** A tensor as a module sees it: BYTES elements as an array of Uint8Array, plain to write model code against. */
export interface JsModelTensor extends Omit<Tensor, 'data'> {
  data: Exclude<TensorData, BytesData> | Uint8Array[]
}

export interface JsModelRequest {
  inputs: Record<string, JsModelTensor>
  requestedOutputs: readonly string[]
  parameters: Readonly<Record<string, string | number | boolean>>
  batchSize: number
}

const DEFAULT_FILENAME = 'model.js'

async function importModule (file: string, modelName: string): Promise<JsModelModule> {
  let info
  try {
    info = await stat(file)
  } catch {
    throw createError('WRK_ERR_MODEL_LOAD', modelName, `the js backend needs ${file}; create it or set default_model_filename`)
  }
  // The mtime in the URL makes a changed file load afresh instead of coming from the ESM cache.
  const url = `${pathToFileURL(file).href}?mtime=${info.mtimeMs}`
  let mod: Record<string, unknown>
  try {
    mod = await import(url) as Record<string, unknown>
  } catch (err) {
    throw wrapError('WRK_ERR_MODEL_LOAD', err, modelName, `${file} failed to import: ${(err as Error).message}`)
  }
  if (typeof mod.execute !== 'function') {
    throw createError('WRK_ERR_MODEL_LOAD', modelName, `${file} must export a function named 'execute'`)
  }
  for (const name of ['initialize', 'finalize']) {
    if (mod[name] !== undefined && typeof mod[name] !== 'function') {
      throw createError('WRK_ERR_MODEL_LOAD', modelName, `${file} exports '${name}' but it is not a function`)
    }
  }
  return mod as unknown as JsModelModule
}

/** Converts one element to the storage of `datatype`; returns undefined when it cannot. */
function convertElement (datatype: Exclude<DataType, 'BYTES'>, v: unknown): number | bigint | undefined {
  switch (datatype) {
    case 'BOOL':
      return typeof v === 'boolean' || typeof v === 'number' ? (v ? 1 : 0) : undefined
    case 'INT64': case 'UINT64':
      if (typeof v === 'bigint') return v
      return typeof v === 'number' && Number.isInteger(v) ? BigInt(v) : undefined
    case 'FP16':
      return typeof v === 'number' ? float32ToFp16Bits(v) : undefined
    case 'BF16':
      return typeof v === 'number' ? float32ToBf16Bits(v) : undefined
    default:
      if (typeof v === 'number') return v
      return typeof v === 'bigint' ? Number(v) : undefined
  }
}

function toTensorData (datatype: DataType, data: unknown, count: number): TensorData | string {
  if (datatype === 'BYTES' && data instanceof BytesData) {
    return data.length === count ? data : `has ${data.length} elements, but its shape holds ${count}`
  }
  if (!Array.isArray(data) && !ArrayBuffer.isView(data)) return 'data must be an array or a typed array'
  const source = data as ArrayLike<unknown>
  if (source.length !== count) return `has ${source.length} elements, but its shape holds ${count}`
  if (datatype === 'BYTES') return toBytesData(source)
  const out = allocateTensorData(datatype, count)
  // Typed arrays of exactly the storage type pass through without a copy (FP16/BF16 bits included).
  if (!Array.isArray(data) && Object.getPrototypeOf(out) === Object.getPrototypeOf(data)) {
    return data as TensorData
  }
  for (let i = 0; i < count; i++) {
    const v = convertElement(datatype, source[i])
    if (v === undefined) return `element ${i} (${String(source[i])}) is not a valid ${datatype} value`
    ;(out as unknown as Array<unknown>)[i] = v
  }
  return out
}

/** BYTES elements from strings (stored as UTF-8) or byte arrays, packed. */
function toBytesData (source: ArrayLike<unknown>): BytesData | string {
  const out = new BytesDataBuilder(source.length)
  for (let i = 0; i < source.length; i++) {
    const v = source[i]
    if (typeof v === 'string') out.pushString(v)
    else if (v instanceof Uint8Array) out.push(v)
    else return `element ${i} (${String(v)}) is not a valid BYTES value`
  }
  return out.finish()
}

/** Checks and converts one response a module returned; exported for tests. */
export function convertJsResponse (config: ModelConfig, raw: unknown): BackendResponse {
  if (typeof raw !== 'object' || raw === null) return { error: new Error('execute must return an object per request') }
  const r = raw as Record<string, unknown>
  if (r.error !== undefined) return { error: r.error instanceof Error ? r.error : new Error(String(r.error)) }
  if (!Array.isArray(r.outputs)) return { error: new Error("a response must have an 'outputs' array or an 'error'") }
  const outputs: Tensor[] = []
  for (const o of r.outputs as unknown[]) {
    const out = o as Record<string, unknown>
    const declared = config.output.find(c => c.name === out.name)
    if (declared === undefined) {
      return { error: new Error(`returned output '${String(out.name)}', which the config does not declare`) }
    }
    const datatype = configTypeToDataType(declared.data_type)!
    if (out.datatype !== undefined && out.datatype !== datatype) {
      return { error: new Error(`returned output '${declared.name}' as ${String(out.datatype)}, the config declares ${datatype}`) }
    }
    const shape = out.shape
    if (!Array.isArray(shape) || !shape.every(d => Number.isInteger(d) && d >= 0)) {
      return { error: new Error(`output '${declared.name}' needs a shape of non-negative integers`) }
    }
    const data = toTensorData(datatype, out.data, elementCount(shape as number[]))
    if (typeof data === 'string') return { error: new Error(`output '${declared.name}' ${data}`) }
    outputs.push({ name: declared.name, datatype, shape: shape as number[], data })
  }
  return { outputs }
}

function toJsTensor (t: Tensor): JsModelTensor {
  return t.data instanceof BytesData ? { ...t, data: t.data.toArray() } : t as JsModelTensor
}

class JsInstance implements BackendInstance {
  readonly #module: JsModelModule
  readonly #config: ModelConfig

  constructor (module: JsModelModule, config: ModelConfig) {
    this.#module = module
    this.#config = config
  }

  async execute (requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    const jsRequests: JsModelRequest[] = requests.map(r => ({
      inputs: Object.fromEntries([...r.inputs].map(([name, t]) => [name, toJsTensor(t)])),
      requestedOutputs: r.requestedOutputs,
      parameters: r.parameters,
      batchSize: r.batchSize
    }))
    const result = await this.#module.execute(jsRequests)
    if (!Array.isArray(result) || result.length !== requests.length) {
      throw new Error(`execute must return an array with one response per request (${requests.length}), ` +
        `got ${Array.isArray(result) ? `${result.length} responses` : typeof result}`)
    }
    return result.map(raw => convertJsResponse(this.#config, raw))
  }

  async close (): Promise<void> {}
}

export const jsBackend: Backend = {
  name: 'js',
  async loadModel (ctx: LoadContext): Promise<BackendModel> {
    const file = join(ctx.versionDir, ctx.config.default_model_filename || DEFAULT_FILENAME)
    const module = await importModule(file, ctx.modelName)
    if (module.initialize !== undefined) {
      const parameters = Object.fromEntries(Object.entries(ctx.config.parameters).map(([k, v]) => [k, v.string_value]))
      try {
        await module.initialize({
          modelName: ctx.modelName, version: ctx.version, versionDir: ctx.versionDir, config: ctx.config, parameters
        })
      } catch (err) {
        throw wrapError('WRK_ERR_MODEL_LOAD', err, ctx.modelName, `initialize() in ${file} threw: ${(err as Error).message}`)
      }
    }
    return {
      async createInstance () { return new JsInstance(module, ctx.config) },
      async unload () { await module.finalize?.() }
    }
  }
}
