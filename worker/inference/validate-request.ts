/**
 * Checks a decoded inference request against the model's configuration before it is queued, with Triton's messages
 * (core `InferenceRequest::Normalize`, triton-behaviour.md §1.9) and in Triton's order, so a client sees the same
 * first error from Flotilla as from Triton. Wire-level problems (element counts, leaf types) were already caught by
 * the codec.
 */
import { createError, type FlotillaError } from '../../common/errors.ts'
import { configTypeToDataType } from '../../common/protocol/datatypes.ts'
import { requestIdPrefix } from '../../common/protocol/json-codec.ts'
import { type InferRequest, type Tensor } from '../../common/protocol/types.ts'
import { type ModelConfig, type ModelInput } from '../repository/types.ts'

function invalidInput (message: string): FlotillaError {
  return createError('WRK_ERR_INVALID_INPUT', message)
}

/** Triton's `DimsListToString`: `[a,b]`, no spaces. */
function dimsString (dims: readonly number[]): string {
  return `[${dims.join(',')}]`
}

/** Triton's `"[" + "'a'," ... pop_back() + "]"` list rendering. */
function quotedList (names: readonly string[]): string {
  let s = '['
  for (const name of names) s += `'${name}',`
  // Triton drops the last character: the trailing comma (callers never pass an empty list).
  return s.slice(0, -1) + ']'
}

function lookupInput (config: ModelConfig, name: string, modelName: string): ModelInput {
  for (const input of config.input) {
    if (input.name === name) return input
  }
  throw invalidInput(`unexpected inference input '${name}' for model '${modelName}'`)
}

/** The protocol name of a config data_type, as Triton's `DataTypeToProtocolString` prints it. */
function protocolName (configType: string): string {
  return configTypeToDataType(configType) ?? '<invalid>'
}

/**
 * Validates `request` for the model `config` (named `modelName` in messages) and returns its batch size: the shared
 * leading dimension for a batching model (max_batch_size > 0), 0 otherwise. Throws WRK_ERR_INVALID_INPUT.
 * A configured `reshape` is for the backend; the request is checked against `dims`.
 */
export function validateInferRequest (config: ModelConfig, request: InferRequest, modelName: string): number {
  // 0. The parameters the scheduler reads (Triton's frontends check them while parsing, before anything else).
  checkSchedulingParameters(request.parameters)
  const prefix = requestIdPrefix(request.id)

  // 1. Requested outputs must exist (Model::GetOutput; no request-id prefix).
  if (request.outputs !== undefined) {
    for (const output of request.outputs) {
      if (!config.output.some((o) => o.name === output.name)) {
        throw invalidInput(`unexpected inference output '${output.name}' for model '${modelName}'`)
      }
    }
  }

  // 2. Every input must be one the model declares. Checked before the count (Triton counts first, and for a
  //    request with an extra input prints "missing required input(s) ]", which names nothing): the client learns
  //    which input is wrong.
  const inputs = request.inputs
  for (const t of inputs) lookupInput(config, t.name, modelName)

  // 3. Input count: every required input present. Names are known and unique (the codec refuses duplicates), so
  //    only missing inputs can make the count wrong here.
  let requiredCount = 0
  for (const input of config.input) if (!input.optional) requiredCount++
  if (inputs.length < requiredCount) {
    const given = new Set<string>()
    for (const t of inputs) given.add(t.name)
    const missing: string[] = []
    for (const input of config.input) {
      if (!input.optional && !given.has(input.name)) missing.push(input.name)
    }
    const got = inputs.length === 0 ? '[]' : quotedList(inputs.map((t) => t.name))
    const tail = `inputs for model '${modelName}'. Got input(s) ${got}, but missing required input(s) ` +
      `${quotedList(missing)}. Please provide all required input(s).`
    if (requiredCount === config.input.length) {
      throw invalidInput(`${prefix}expected ${config.input.length} inputs but got ${inputs.length} ${tail}`)
    }
    throw invalidInput(
      `${prefix}expected number of inputs between ${requiredCount} and ${config.input.length} but got ` +
      `${inputs.length} ${tail}`
    )
  }

  // 4. Batch size: the leading dimension, shared by every non-shape-tensor input of a batching model.
  const batching = config.max_batch_size > 0
  let batchSize = 0
  if (batching) {
    for (const t of inputs) {
      const inputConfig = lookupInput(config, t.name, modelName)
      if (inputConfig.is_shape_tensor) continue
      if (t.shape.length === 0) {
        throw invalidInput(
          `${prefix}input '${t.name}' has no shape but model requires batch dimension for '${modelName}'`
        )
      }
      const leading = t.shape[0] as number
      // Triton treats a batch size of 0 as "not yet set", so a leading 0 never conflicts; kept for parity.
      if (batchSize === 0) {
        batchSize = leading
      } else if (leading !== batchSize) {
        throw invalidInput(
          `${prefix}input '${t.name}' batch size does not match other inputs for '${modelName}'`
        )
      }
    }
  }
  if (batchSize > config.max_batch_size) {
    throw invalidInput(
      `${prefix}inference request batch-size must be <= ${config.max_batch_size} for '${modelName}'`
    )
  }

  // 5. Per input: datatype, then shape against dims (batch dimension removed for batching models).
  for (const t of inputs) {
    const inputConfig = lookupInput(config, t.name, modelName)
    checkDatatype(t, inputConfig, modelName, prefix)
    const stripBatch = batching && !inputConfig.is_shape_tensor
    checkShape(t, inputConfig, stripBatch, config.max_batch_size, modelName, prefix)
  }
  return batchSize
}

/**
 * `priority` and `timeout` as Triton's gRPC frontend accepts them (server `src/grpc/infer_handler.cc`,
 * triton-behaviour.md §4): an integer priority >= 0 (0 = the model's default level) and an integer timeout in
 * microseconds. The HTTP codec already refused other JSON types with its own messages; this covers every transport.
 * A negative timeout is accepted, as Triton accepts it (it becomes a huge uint64 and never shortens the default).
 */
export function checkSchedulingParameters (parameters: InferRequest['parameters']): void {
  if (Object.hasOwn(parameters, 'priority')) {
    const p = parameters.priority
    if (typeof p !== 'number' || !Number.isInteger(p)) {
      throw invalidInput("invalid value type for 'priority' parameter, expected int64_param or uint64_param.")
    }
    if (p < 0) throw invalidInput("invalid value for 'priority', expected value >= 0.")
  }
  if (Object.hasOwn(parameters, 'timeout')) {
    const t = parameters.timeout
    if (typeof t !== 'number' || !Number.isInteger(t)) {
      throw invalidInput("invalid value type for 'timeout' parameter, expected int64_param.")
    }
  }
}

function checkDatatype (t: Tensor, inputConfig: ModelInput, modelName: string, prefix: string): void {
  const expected = configTypeToDataType(inputConfig.data_type)
  if (t.datatype !== expected) {
    throw invalidInput(
      `${prefix}inference input '${t.name}' data-type is '${t.datatype}', but model '${modelName}' expects ` +
      `'${protocolName(inputConfig.data_type)}'`
    )
  }
}

function checkShape (
  t: Tensor, inputConfig: ModelInput, stripBatch: boolean, maxBatchSize: number, modelName: string, prefix: string
): void {
  const dims = inputConfig.dims
  const offset = stripBatch ? 1 : 0
  let match = t.shape.length - offset === dims.length
  if (match) {
    for (let i = 0; i < dims.length; i++) {
      const got = t.shape[i + offset] as number
      // Only the gRPC codec can produce -1 here; JSON shapes are non-negative.
      if (got === -1) {
        throw invalidInput(
          `${prefix}All input dimensions should be specified for input '${t.name}' for model '${modelName}', ` +
          `got ${dimsString(t.shape)}`
        )
      }
      const want = dims[i] as number
      if (want !== -1 && want !== got) {
        match = false
        break
      }
    }
  }
  if (match) return
  const expected = maxBatchSize > 0 ? [-1, ...dims] : dims
  // Triton always appends ". " and then the note, so a non-batching model's message ends in ". " (trailing space).
  const note = maxBatchSize > 0
    ? 'NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to ' +
      'each input shape. If you want to specify the full shape including the batch dim in your input dims config, ' +
      'try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size.'
    : ''
  throw invalidInput(
    `${prefix}unexpected shape for input '${t.name}' for model '${modelName}'. Expected ${dimsString(expected)}, ` +
    `got ${dimsString(t.shape)}. ${note}`
  )
}
