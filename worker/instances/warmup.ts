/**
 * `model_warmup`, as Triton's core runs it (backend_model_instance.cc `GenerateWarmupData` / `WarmUp`;
 * triton-behaviour.md §2): each sample becomes `batch_size` batch-1 requests that execute together as one batch,
 * `count` times (0 counts as once), on every instance, before the version is READY. Inputs are zeros, random bytes
 * (from the injected random; BOOL gets 0/1, BYTES falls back to zeros as in Triton) or a file under `<model>/warmup/`
 * (raw little-endian elements; BYTES in the length-prefixed layout). Warmup goes to the instances directly, not through
 * the scheduler, so every instance (each GPU) is warmed and the statistics count only real traffic, as in Triton.
 * Any failure fails the load: `failed to run warmup sample '<name>': <reasons>`.
 */
import { readFile } from 'node:fs/promises'
import { isAbsolute, join, relative, resolve } from 'node:path'
import { createError, type FlotillaError } from '../../common/errors.ts'
import { allocateTensorData, configTypeToDataType, DATATYPES, elementCount } from '../../common/protocol/datatypes.ts'
import { BytesData } from '../../common/protocol/bytes-data.ts'
import { type Tensor, type TensorData } from '../../common/protocol/types.ts'
import { type BackendInstance, type BackendRequest } from '../backends/types.ts'
import { validateInferRequest } from '../inference/validate-request.ts'
import { type ModelConfig, type ModelWarmup, type WarmupInput } from '../repository/types.ts'

/** Folder under the model directory that `input_data_file` names are relative to. */
export const WARMUP_DATA_FOLDER = 'warmup'

/** One sample, ready to execute: its requests form one batch. */
export interface WarmupSample {
  readonly name: string
  readonly requests: readonly BackendRequest[]
  /** Executions per instance, at least 1. */
  readonly count: number
}

export interface WarmupOptions {
  readonly modelName: string
  /** `<repository>/<model>`: `input_data_file` is read from its `warmup/` folder. */
  readonly modelDir: string
  /** Source of random_data bytes; `Math.random` in production, a fixed sequence in tests. */
  readonly random: () => number
}

function message (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

function warmupError (modelName: string, sample: string, detail: string): FlotillaError {
  return createError('WRK_ERR_MODEL_LOAD', modelName, `failed to run warmup sample '${sample}': ${detail}`)
}

/** Bytes of a typed array, to fill it from raw little-endian bytes (every platform Node runs on is little-endian). */
function bytesOf (data: Exclude<TensorData, BytesData>): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
}

async function fileElements (
  options: WarmupOptions, inputName: string, input: WarmupInput, file: string, count: number
): Promise<TensorData> {
  const folder = join(options.modelDir, WARMUP_DATA_FOLDER)
  const path = resolve(folder, file)
  const rel = relative(folder, path)
  if (rel === '' || rel.startsWith('..') || isAbsolute(rel)) {
    throw new Error(`input_data_file '${file}' of input '${inputName}' must name a file inside ${folder}`)
  }
  let bytes: Buffer
  try {
    bytes = await readFile(path)
  } catch (err) {
    throw new Error(`cannot read input_data_file '${path}' for input '${inputName}': ${message(err)}`)
  }
  const datatype = configTypeToDataType(input.data_type)!
  const size = DATATYPES[datatype].byteSize
  if (size === 0) {
    // BYTES: each element is a 4-byte little-endian length and that many bytes; views of the file's contents.
    const spans = new Uint32Array(2 * count)
    let offset = 0
    for (let i = 0; i < count; i++) {
      if (offset + 4 > bytes.length) {
        throw new Error(`warmup setting expects ${count} elements for input '${inputName}', but the data provided ` +
          `from ${file} holds ${i} (each element is a 4-byte little-endian length ` +
          'followed by its bytes)')
      }
      const length = bytes.readUInt32LE(offset)
      offset += 4
      if (offset + length > bytes.length) {
        throw new Error(`element ${i} of input '${inputName}' in ${file} declares ` +
          `${length} bytes, but only ${bytes.length - offset} remain`)
      }
      spans[2 * i] = offset
      offset += length
      spans[2 * i + 1] = offset
    }
    return new BytesData(bytes, spans)
  }
  const need = count * size
  if (bytes.length < need) {
    throw new Error(`warmup setting expects ${need} bytes, but the data provided from ${file} ` +
      `only has ${bytes.length} bytes`)
  }
  const data = allocateTensorData(datatype, count) as Exclude<TensorData, BytesData>
  bytesOf(data).set(bytes.subarray(0, need))
  return data
}

function randomElements (datatype: Tensor['datatype'], count: number, random: () => number): TensorData {
  const data = allocateTensorData(datatype, count)
  // Triton fills random_data with random bytes; BYTES cannot take arbitrary bytes and gets zeros (empty strings).
  if (data instanceof BytesData) return data
  const bytes = bytesOf(data)
  if (datatype === 'BOOL') {
    for (let i = 0; i < bytes.length; i++) bytes[i] = random() < 0.5 ? 0 : 1
  } else {
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(random() * 256)
  }
  return data
}

async function inputTensor (config: ModelConfig, options: WarmupOptions, name: string, input: WarmupInput): Promise<Tensor> {
  const datatype = configTypeToDataType(input.data_type)
  if (datatype === undefined) throw new Error(`input '${name}' has data_type ${input.data_type}, which has no data`)
  const count = elementCount(input.dims)
  let data: TensorData
  if (input.zero_data !== undefined) data = allocateTensorData(datatype, count)
  else if (input.random_data !== undefined) data = randomElements(datatype, count, options.random)
  else if (input.input_data_file !== undefined) data = await fileElements(options, name, input, input.input_data_file, count)
  else throw new Error(`warmup setting expects input '${name}' to have input_data_type set`)
  // A batching model's inputs get the batch dimension of a batch-1 request; names the model does not declare are
  // passed as given (Triton's override inputs), and request validation below rejects them.
  const declared = config.input.some(i => i.name === name)
  const shape = config.max_batch_size > 0 && declared ? [1, ...input.dims] : [...input.dims]
  return { name, datatype, shape, data }
}

async function buildSample (config: ModelConfig, options: WarmupOptions, warmup: ModelWarmup): Promise<WarmupSample> {
  const inputs: Tensor[] = []
  for (const [name, input] of Object.entries(warmup.inputs)) inputs.push(await inputTensor(config, options, name, input))
  // Triton prepares warmup requests as it prepares client requests (InferenceRequest::PrepareForInference).
  const batchSize = validateInferRequest(config, { parameters: {}, inputs }, options.modelName)
  const request: BackendRequest = {
    inputs: new Map(inputs.map(t => [t.name, t])),
    requestedOutputs: config.output.map(o => o.name),
    parameters: {},
    batchSize
  }
  const requests = Array.from({ length: warmup.batch_size }, () => ({ ...request }))
  return { name: warmup.name, requests, count: Math.max(1, warmup.count) }
}

/**
 * The samples of `config.model_warmup`, in config order; a sample with batch_size 0 is skipped, as in Triton.
 * Rejects with WRK_ERR_MODEL_LOAD when a sample's data cannot be built or does not fit the model.
 */
export async function buildWarmupSamples (config: ModelConfig, options: WarmupOptions): Promise<WarmupSample[]> {
  const samples: WarmupSample[] = []
  for (const warmup of config.model_warmup) {
    if (warmup.batch_size === 0) continue
    try {
      samples.push(await buildSample(config, options, warmup))
    } catch (err) {
      throw warmupError(options.modelName, warmup.name, message(err))
    }
  }
  return samples
}

async function warmInstance (modelName: string, instance: BackendInstance, samples: readonly WarmupSample[]): Promise<void> {
  for (const sample of samples) {
    for (let i = 0; i < sample.count; i++) {
      let responses
      try {
        responses = await instance.execute(sample.requests)
      } catch (err) {
        throw warmupError(modelName, sample.name, message(err))
      }
      const errors = new Set<string>()
      if (responses.length !== sample.requests.length) {
        errors.add(`the backend returned ${responses.length} responses for ${sample.requests.length} requests`)
      }
      for (const r of responses) if ('error' in r) errors.add(message(r.error))
      if (errors.size > 0) throw warmupError(modelName, sample.name, [...errors].join('; '))
    }
  }
}

/**
 * Runs every sample on every instance (instances in parallel, samples in order). Resolves when all are done;
 * otherwise rejects, once no instance is still executing, with the first failure.
 */
export async function warmUp (
  modelName: string, instances: readonly BackendInstance[], samples: readonly WarmupSample[]
): Promise<void> {
  if (samples.length === 0) return
  const results = await Promise.allSettled(instances.map(instance => warmInstance(modelName, instance, samples)))
  for (const r of results) if (r.status === 'rejected') throw r.reason
}
