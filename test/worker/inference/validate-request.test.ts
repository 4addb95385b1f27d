import t from 'tap'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { type DataType, type InferRequest, type Tensor } from '../../../common/protocol/types.ts'
import { type ConfigDataType, type ModelConfig, type ModelInput } from '../../../worker/repository/types.ts'
import { validateInferRequest } from '../../../worker/inference/validate-request.ts'
import { type Asserts, throwsCoded } from '../../helpers/coded-error.ts'

function input (name: string, dataType: ConfigDataType, dims: number[], extra: Partial<ModelInput> = {}): ModelInput {
  return {
    name,
    data_type: dataType,
    format: 'FORMAT_NONE',
    dims,
    is_shape_tensor: false,
    allow_ragged_batch: false,
    optional: false,
    ...extra
  }
}

function model (name: string, maxBatchSize: number, inputs: ModelInput[], outputs: string[] = ['OUTPUT0']): ModelConfig {
  return {
    name,
    platform: '',
    backend: 'js',
    runtime: '',
    version_policy: { latest: { num_versions: 1 } },
    max_batch_size: maxBatchSize,
    input: inputs,
    output: outputs.map(o => ({
      name: o, data_type: 'TYPE_FP32', dims: [-1], label_filename: '', is_shape_tensor: false
    })),
    instance_group: [{ name, kind: 'KIND_CPU', count: 1, gpus: [] }],
    default_model_filename: '',
    parameters: {},
    model_warmup: [],
    metric_tags: {},
    passthrough: {}
  }
}

/** A tensor with zero-filled data of the right length (the validator never reads data). */
function tensor (name: string, datatype: DataType, shape: number[]): Tensor {
  const count = shape.reduce((a, b) => a * b, 1)
  return { name, datatype, shape, data: new Float32Array(Math.max(0, count)) }
}

function request (inputs: Tensor[], extra: Partial<InferRequest> = {}): InferRequest {
  return { parameters: {}, inputs, ...extra }
}

function fails (t: Asserts, fn: () => unknown, message: string, what?: string): void {
  throwsCoded(t, fn, { code: 'WRK_ERR_INVALID_INPUT', status: 400, message }, what)
}

const NOTE = 'NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended ' +
  'to each input shape. If you want to specify the full shape including the batch dim in your input dims config, ' +
  'try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size.'

// Triton's qa "simple" model: two INT32 [16] inputs, batching up to 8.
const simple = model('simple', 8, [input('INPUT0', 'TYPE_INT32', [16]), input('INPUT1', 'TYPE_INT32', [16])],
  ['OUTPUT0', 'OUTPUT1'])
const nobatch = model('nobatch', 0, [input('INPUT0', 'TYPE_FP32', [2, 3])])

t.test('valid requests return the batch size', async t => {
  t.equal(validateInferRequest(simple, request([tensor('INPUT0', 'INT32', [4, 16]), tensor('INPUT1', 'INT32', [4, 16])]),
    'simple'), 4)
  t.equal(validateInferRequest(simple, request([tensor('INPUT1', 'INT32', [1, 16]), tensor('INPUT0', 'INT32', [1, 16])],
    { outputs: [{ name: 'OUTPUT1' }] }), 'simple'), 1, 'input order does not matter; known outputs pass')
  t.equal(validateInferRequest(simple, request([tensor('INPUT0', 'INT32', [8, 16]), tensor('INPUT1', 'INT32', [8, 16])]),
    'simple'), 8, 'max_batch_size itself is allowed')
  t.equal(validateInferRequest(nobatch, request([tensor('INPUT0', 'FP32', [2, 3])]), 'nobatch'), 0,
    'non-batching models have batch size 0')
})

t.test('unknown requested output', async t => {
  fails(t, () => validateInferRequest(simple, request(
    [tensor('INPUT0', 'INT32', [1, 16]), tensor('INPUT1', 'INT32', [1, 16])],
    { id: '9', outputs: [{ name: 'OUTPUT0' }, { name: 'NOPE' }] }), 'simple'),
  "unexpected inference output 'NOPE' for model 'simple'", 'no request-id prefix, as Triton')
})

t.test('unknown input', async t => {
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'INT32', [1, 16]), tensor('BOGUS', 'INT32', [1, 16])]),
    'simple'), "unexpected inference input 'BOGUS' for model 'simple'", 'batching model')
  fails(t, () => validateInferRequest(nobatch, request([tensor('BOGUS', 'FP32', [2, 3])]), 'nobatch'),
    "unexpected inference input 'BOGUS' for model 'nobatch'", 'non-batching model')
})

t.test('missing required inputs', async t => {
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'INT32', [1, 16])]), 'simple'),
    "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], " +
    "but missing required input(s) ['INPUT1']. Please provide all required input(s).")
  fails(t, () => validateInferRequest(simple, request([], { id: 'abc' }), 'simple'),
    "[request id: abc] expected 2 inputs but got 0 inputs for model 'simple'. Got input(s) [], " +
    "but missing required input(s) ['INPUT0','INPUT1']. Please provide all required input(s).")

  const three = model('input_all_required', 0, [
    input('INPUT0', 'TYPE_FP32', [1]), input('INPUT1', 'TYPE_FP32', [1]), input('INPUT2', 'TYPE_FP32', [1])
  ])
  fails(t, () => validateInferRequest(three, request([]), 'input_all_required'),
    "[request id: <id_unknown>] expected 3 inputs but got 0 inputs for model 'input_all_required'. Got input(s) [], " +
    "but missing required input(s) ['INPUT0','INPUT1','INPUT2']. Please provide all required input(s).",
    "Triton's qa L0_input_validation text")
})

t.test('optional inputs', async t => {
  const optional = model('input_optional', 0, [
    input('INPUT0', 'TYPE_FP32', [1]), input('INPUT1', 'TYPE_FP32', [1]), input('INPUT2', 'TYPE_FP32', [1]),
    input('INPUT3', 'TYPE_FP32', [1], { optional: true })
  ])
  fails(t, () => validateInferRequest(optional, request([]), 'input_optional'),
    "[request id: <id_unknown>] expected number of inputs between 3 and 4 but got 0 inputs for model " +
    "'input_optional'. Got input(s) [], but missing required input(s) ['INPUT0','INPUT1','INPUT2']. " +
    'Please provide all required input(s).')
  fails(t, () => validateInferRequest(optional, request([tensor('INPUT3', 'FP32', [1]), tensor('INPUT0', 'FP32', [1])]),
    'input_optional'),
  "[request id: <id_unknown>] expected number of inputs between 3 and 4 but got 2 inputs for model " +
    "'input_optional'. Got input(s) ['INPUT3','INPUT0'], but missing required input(s) ['INPUT1','INPUT2']. " +
    'Please provide all required input(s).')
  const required = ['INPUT0', 'INPUT1', 'INPUT2'].map(n => tensor(n, 'FP32', [1]))
  t.equal(validateInferRequest(optional, request(required), 'input_optional'), 0, 'the optional input may be left out')
  t.equal(validateInferRequest(optional, request([...required, tensor('INPUT3', 'FP32', [1])]), 'input_optional'), 0)
})

t.test('an extra input is named, not counted (Triton would print an empty missing list)', async t => {
  fails(t, () => validateInferRequest(simple, request([
    tensor('INPUT0', 'INT32', [1, 16]), tensor('INPUT1', 'INT32', [1, 16]), tensor('EXTRA', 'INT32', [1, 16])
  ]), 'simple'),
  "unexpected inference input 'EXTRA' for model 'simple'")
})

t.test('datatype mismatch', async t => {
  const f32 = model('m', 0, [input('X', 'TYPE_FP32', [2])])
  fails(t, () => validateInferRequest(f32, request([tensor('X', 'INT32', [2])]), 'm'),
    "[request id: <id_unknown>] inference input 'X' data-type is 'INT32', but model 'm' expects 'FP32'")
  fails(t, () => validateInferRequest(f32, request([tensor('X', 'FP64', [2])], { id: '42' }), 'm'),
    "[request id: 42] inference input 'X' data-type is 'FP64', but model 'm' expects 'FP32'")

  const str = model('s', 0, [input('TEXT', 'TYPE_STRING', [1])])
  t.equal(validateInferRequest(str, request([{ name: 'TEXT', datatype: 'BYTES', shape: [1], data: BytesData.from([new Uint8Array(1)]) }]),
    's'), 0, 'TYPE_STRING accepts BYTES')
  fails(t, () => validateInferRequest(str, request([tensor('TEXT', 'INT32', [1])]), 's'),
    "[request id: <id_unknown>] inference input 'TEXT' data-type is 'INT32', but model 's' expects 'BYTES'",
    'TYPE_STRING is printed as BYTES')
  const half = model('h', 0, [input('H', 'TYPE_FP16', [1])])
  fails(t, () => validateInferRequest(half, request([tensor('H', 'BF16', [1])]), 'h'),
    "[request id: <id_unknown>] inference input 'H' data-type is 'BF16', but model 'h' expects 'FP16'")
})

t.test('shape mismatch, batching model: batch dim shown as -1 plus the NOTE', async t => {
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'INT32', [1, 8]), tensor('INPUT1', 'INT32', [1, 8])]),
    'simple'),
  `[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]. ${NOTE}`)
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'INT32', [4]), tensor('INPUT1', 'INT32', [4])]),
    'simple'),
  `[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [4]. ${NOTE}`,
  'a missing batch dimension (the leading dim is taken as the batch)')
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'INT32', [16]), tensor('INPUT1', 'INT32', [16])]),
    'simple'),
  "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'simple'",
  'without a batch dimension, [16] reads as batch 16, which Triton reports first')
  fails(t, () => validateInferRequest(simple, request(
    [tensor('INPUT0', 'INT32', [2, 16]), tensor('INPUT1', 'INT32', [2, 16, 1])], { id: 'x' }), 'simple'),
  `[request id: x] unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [2,16,1]. ${NOTE}`)
})

t.test('shape mismatch, non-batching model: no NOTE (Triton leaves a trailing space)', async t => {
  fails(t, () => validateInferRequest(nobatch, request([tensor('INPUT0', 'FP32', [2, 4])]), 'nobatch'),
    "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'nobatch'. Expected [2,3], got [2,4]. ")
  fails(t, () => validateInferRequest(nobatch, request([tensor('INPUT0', 'FP32', [1, 2, 3])]), 'nobatch'),
    "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'nobatch'. Expected [2,3], got [1,2,3]. ",
    'rank mismatch')
})

t.test('-1 dims are wildcards', async t => {
  const wild = model('w', 4, [input('X', 'TYPE_FP32', [-1, 3])])
  t.equal(validateInferRequest(wild, request([tensor('X', 'FP32', [2, 5, 3])]), 'w'), 2)
  t.equal(validateInferRequest(wild, request([tensor('X', 'FP32', [1, 0, 3])]), 'w'), 1, 'a zero-length variable dim')
  fails(t, () => validateInferRequest(wild, request([tensor('X', 'FP32', [2, 5, 4])]), 'w'),
    `[request id: <id_unknown>] unexpected shape for input 'X' for model 'w'. Expected [-1,-1,3], got [2,5,4]. ${NOTE}`)
  fails(t, () => validateInferRequest(wild, request([{ name: 'X', datatype: 'FP32', shape: [2, -1, 3], data: new Float32Array(6) }]), 'w'),
    "[request id: <id_unknown>] All input dimensions should be specified for input 'X' for model 'w', got [2,-1,3]",
    'a -1 in the request (possible via gRPC)')
})

t.test('batching model: empty shape', async t => {
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'INT32', []), tensor('INPUT1', 'INT32', [1, 16])]),
    'simple'),
  "[request id: <id_unknown>] input 'INPUT0' has no shape but model requires batch dimension for 'simple'")
})

t.test('batching model: inputs disagree on the batch size', async t => {
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'INT32', [2, 16]), tensor('INPUT1', 'INT32', [3, 16])]),
    'simple'),
  "[request id: <id_unknown>] input 'INPUT1' batch size does not match other inputs for 'simple'")
})

t.test('batch too large', async t => {
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'INT32', [9, 16]), tensor('INPUT1', 'INT32', [9, 16])],
    { id: '1' }), 'simple'),
  "[request id: 1] inference request batch-size must be <= 8 for 'simple'")
})

t.test('checks run in Triton\'s order', async t => {
  // Batch-size problems are found before datatype problems, and datatype before shape.
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'FP32', [9, 3]), tensor('INPUT1', 'INT32', [9, 16])]),
    'simple'),
  "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'simple'")
  fails(t, () => validateInferRequest(simple, request([tensor('INPUT0', 'FP32', [1, 3]), tensor('INPUT1', 'INT32', [1, 16])]),
    'simple'),
  "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'")
  // Outputs are checked before the input count.
  fails(t, () => validateInferRequest(simple, request([], { outputs: [{ name: 'X' }] }), 'simple'),
    "unexpected inference output 'X' for model 'simple'")
})

t.test('reshape: the request is checked against dims, not the reshape', async t => {
  const reshaped = model('r', 4, [input('X', 'TYPE_FP32', [16], { reshape: { shape: [4, 4] } })])
  t.equal(validateInferRequest(reshaped, request([tensor('X', 'FP32', [2, 16])]), 'r'), 2)
  fails(t, () => validateInferRequest(reshaped, request([tensor('X', 'FP32', [2, 4, 4])]), 'r'),
    `[request id: <id_unknown>] unexpected shape for input 'X' for model 'r'. Expected [-1,16], got [2,4,4]. ${NOTE}`)
  const scalar = model('s', 0, [input('X', 'TYPE_INT32', [1], { reshape: { shape: [] } })])
  t.equal(validateInferRequest(scalar, request([tensor('X', 'INT32', [1])]), 's'), 0)
})

t.test('shape tensors keep their full shape in a batching model', async t => {
  const shapeModel = model('st', 8, [
    input('DATA', 'TYPE_FP32', [-1]),
    input('SHAPE', 'TYPE_INT32', [2], { is_shape_tensor: true })
  ])
  t.equal(validateInferRequest(shapeModel, request([tensor('DATA', 'FP32', [3, 10]), tensor('SHAPE', 'INT32', [2])]), 'st'), 3,
    'the shape tensor is neither stripped nor counted for the batch size')
  fails(t, () => validateInferRequest(shapeModel, request([tensor('DATA', 'FP32', [3, 10]), tensor('SHAPE', 'INT32', [3, 2])]), 'st'),
    `[request id: <id_unknown>] unexpected shape for input 'SHAPE' for model 'st'. Expected [-1,2], got [3,2]. ${NOTE}`)
})

t.test('priority and timeout parameters, as Triton\'s gRPC frontend checks them (before anything else)', async t => {
  const valid = [tensor('INPUT0', 'INT32', [1, 16]), tensor('INPUT1', 'INT32', [1, 16])]
  for (const parameters of [{ priority: 0 }, { priority: 3 }, { timeout: 0 }, { timeout: 500 }, { timeout: -1 }, { priority: 2, timeout: 9 }]) {
    t.equal(validateInferRequest(simple, request(valid, { parameters }), 'simple'), 1, JSON.stringify(parameters))
  }
  fails(t, () => validateInferRequest(simple, request(valid, { parameters: { priority: -1 } }), 'simple'),
    "invalid value for 'priority', expected value >= 0.")
  for (const priority of ['1', true, 1.5]) {
    fails(t, () => validateInferRequest(simple, request(valid, { parameters: { priority } }), 'simple'),
      "invalid value type for 'priority' parameter, expected int64_param or uint64_param.", `priority ${JSON.stringify(priority)}`)
  }
  for (const timeout of ['100', false, 0.5]) {
    fails(t, () => validateInferRequest(simple, request(valid, { parameters: { timeout } }), 'simple'),
      "invalid value type for 'timeout' parameter, expected int64_param.", `timeout ${JSON.stringify(timeout)}`)
  }
  // Parameters are parsed before inputs are looked at: the parameter error comes first.
  fails(t, () => validateInferRequest(simple, request([], { parameters: { priority: -1 } }), 'simple'),
    "invalid value for 'priority', expected value >= 0.")
})
