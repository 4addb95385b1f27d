import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { isFlotillaError } from '../../../common/errors.ts'
import { PACKAGE_ROOT } from '../../../common/package-root.ts'
import { modelConfigToJson, parseModelConfig } from '../../../worker/repository/model-config.ts'
import { type ModelConfig } from '../../../worker/repository/types.ts'

const FILE = 'config.pbtxt'

function parse (text: string, modelName = 'm'): ModelConfig {
  return parseModelConfig(text, { file: FILE, modelName })
}

function failure (text: string, modelName = 'm'): { code: string, message: string } {
  try {
    parse(text, modelName)
  } catch (err) {
    if (isFlotillaError(err)) return { code: err.code, message: err.message }
    throw err
  }
  throw new Error(`expected ${JSON.stringify(text)} to be rejected`)
}

/** Triton's optimization block after normalisation, for every non-ensemble model. */
const DEFAULT_OPTIMIZATION = {
  priority: 'PRIORITY_DEFAULT',
  input_pinned_memory: { enable: true },
  output_pinned_memory: { enable: true },
  gather_kernel_buffer_threshold: 0,
  eager_batching: false
}

const DEFAULT_PASSTHROUGH = {
  batch_input: [],
  batch_output: [],
  cc_model_filenames: {},
  optimization: DEFAULT_OPTIMIZATION
}

t.test('a minimal config gets every field, with defaults', async t => {
  t.strictSame(parse('backend: "simulated"'), {
    name: 'm',
    platform: '',
    backend: 'simulated',
    runtime: '',
    version_policy: { latest: { num_versions: 1 } },
    max_batch_size: 0,
    input: [],
    output: [],
    instance_group: [{ name: 'm', kind: 'KIND_CPU', count: 1, gpus: [] }],
    default_model_filename: '',
    parameters: {},
    model_warmup: [],
    metric_tags: {},
    passthrough: DEFAULT_PASSTHROUGH
  })
})

t.test('a typical config (triton-behaviour.md §5 and §3.2 shapes)', async t => {
  const config = parse(`
    name: "simple"
    backend: "simulated"
    max_batch_size: 8
    input [
      { name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] },
      { name: "INPUT1", data_type: TYPE_STRING, dims: [ 16 ], reshape: { shape: [ 16 ] } }
    ]
    output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 4 ] }
    version_policy: { specific { versions: [ 1 ] } }
    dynamic_batching { }
    parameters { key: "fixed_ms" value: { string_value: "5" } }
  `, 'simple')
  t.strictSame(config, {
    name: 'simple',
    platform: '',
    backend: 'simulated',
    runtime: '',
    version_policy: { specific: { versions: [1] } },
    max_batch_size: 8,
    input: [
      {
        name: 'INPUT0', data_type: 'TYPE_INT32', format: 'FORMAT_NONE', dims: [16],
        is_shape_tensor: false, allow_ragged_batch: false, optional: false
      },
      {
        name: 'INPUT1', data_type: 'TYPE_STRING', format: 'FORMAT_NONE', dims: [16], reshape: { shape: [16] },
        is_shape_tensor: false, allow_ragged_batch: false, optional: false
      }
    ],
    output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [-1, 4], label_filename: '', is_shape_tensor: false }],
    instance_group: [{ name: 'simple', kind: 'KIND_CPU', count: 1, gpus: [] }],
    dynamic_batching: {
      preferred_batch_size: [8],
      max_queue_delay_microseconds: 0,
      preserve_ordering: false,
      priority_levels: 0,
      default_priority_level: 0,
      default_queue_policy: {
        timeout_action: 'REJECT', default_timeout_microseconds: 0, allow_timeout_override: false, max_queue_size: 0
      },
      priority_queue_policy: {}
    },
    default_model_filename: '',
    parameters: { fixed_ms: { string_value: '5' } },
    model_warmup: [],
    metric_tags: {},
    passthrough: DEFAULT_PASSTHROUGH
  })
  const json = modelConfigToJson(config)
  t.equal(json, '{"name":"simple","platform":"","backend":"simulated","runtime":"",' +
    '"version_policy":{"specific":{"versions":[1]}},"max_batch_size":8,' +
    '"input":[{"name":"INPUT0","data_type":"TYPE_INT32","format":"FORMAT_NONE","dims":[16],"is_shape_tensor":false,' +
    '"allow_ragged_batch":false,"optional":false},{"name":"INPUT1","data_type":"TYPE_STRING","format":"FORMAT_NONE",' +
    '"dims":[16],"reshape":{"shape":[16]},"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false}],' +
    '"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[-1,4],"label_filename":"","is_shape_tensor":false}],' +
    '"batch_input":[],"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT",' +
    '"input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},"gather_kernel_buffer_threshold":0,' +
    '"eager_batching":false},"dynamic_batching":{"preferred_batch_size":[8],"max_queue_delay_microseconds":0,' +
    '"preserve_ordering":false,"priority_levels":0,"default_priority_level":0,"priority_queue_policy":{}},' +
    '"instance_group":[{"name":"simple","kind":"KIND_CPU","count":1,"gpus":[]}],"default_model_filename":"",' +
    '"cc_model_filenames":{},"metric_tags":{},"parameters":{"fixed_ms":{"string_value":"5"}},"model_warmup":[]}')
  // What qa L0_config_json greps for in Triton's output.
  for (const needle of ['"dims":[16]', '"reshape":{"shape":[16]}', '"version_policy":{"specific":{"versions":[1]}}']) {
    t.ok(json.includes(needle), needle)
  }
})

const FULL = readFileSync(join(PACKAGE_ROOT, 'test', 'fixtures', 'model-configs', 'full', 'config.pbtxt'), 'utf8')

const FULL_EXPECTED: ModelConfig = {
  name: 'full',
  platform: 'onnxruntime_onnx',
  backend: 'onnxruntime',
  runtime: 'libtriton_onnxruntime.so',
  version_policy: { latest: { num_versions: 2 } },
  max_batch_size: 8,
  input: [
    {
      name: 'IMAGE', data_type: 'TYPE_FP32', format: 'FORMAT_NCHW', dims: [3, 224, 224],
      is_shape_tensor: false, allow_ragged_batch: false, optional: false
    },
    {
      name: 'MASK', data_type: 'TYPE_BOOL', format: 'FORMAT_NONE', dims: [-1],
      is_shape_tensor: false, allow_ragged_batch: true, optional: true
    },
    {
      name: 'FLAT', data_type: 'TYPE_INT64', format: 'FORMAT_NONE', dims: [2, -1, 8], reshape: { shape: [2, -1, 2, 4] },
      is_shape_tensor: false, allow_ragged_batch: false, optional: false
    }
  ],
  output: [
    { name: 'PROBS', data_type: 'TYPE_FP16', dims: [1000], label_filename: 'labels.txt', is_shape_tensor: false },
    { name: 'TEXT', data_type: 'TYPE_STRING', dims: [1], reshape: { shape: [] }, label_filename: '', is_shape_tensor: false }
  ],
  instance_group: [
    { name: 'full_0', kind: 'KIND_CPU', count: 2, gpus: [] },
    { name: 'gpu_group', kind: 'KIND_GPU', count: 1, gpus: [0, 1] },
    { name: 'full_2', kind: 'KIND_AUTO', count: 1, gpus: [] }
  ],
  dynamic_batching: {
    preferred_batch_size: [4, 8],
    max_queue_delay_microseconds: 100,
    preserve_ordering: false,
    priority_levels: 2,
    default_priority_level: 2,
    default_queue_policy: {
      timeout_action: 'DELAY', default_timeout_microseconds: 5000, allow_timeout_override: true, max_queue_size: 16
    },
    priority_queue_policy: {
      1: { timeout_action: 'REJECT', default_timeout_microseconds: 0, allow_timeout_override: false, max_queue_size: 4 }
    }
  },
  default_model_filename: 'model.onnx',
  parameters: { fixed_ms: { string_value: '5' }, jitter_ms: { string_value: '1' } },
  model_warmup: [
    {
      name: 'zeros',
      batch_size: 4,
      inputs: {
        IMAGE: { data_type: 'TYPE_FP32', dims: [3, 224, 224], zero_data: true },
        MASK: { data_type: 'TYPE_BOOL', dims: [5], random_data: true }
      },
      count: 3
    },
    {
      name: 'from_file',
      batch_size: 1,
      inputs: { FLAT: { data_type: 'TYPE_INT64', dims: [2, 3, 8], input_data_file: 'flat.bin' } },
      count: 0
    }
  ],
  metric_tags: { team: 'vision' },
  response_cache: { enable: true },
  model_transaction_policy: { decoupled: false },
  passthrough: {
    batch_input: [
      { kind: 'BATCH_ELEMENT_COUNT', target_name: ['MASK_COUNT'], data_type: 'TYPE_INT32', source_input: ['MASK'] }
    ],
    batch_output: [{ target_name: ['PROBS'], kind: 'BATCH_SCATTER_WITH_INPUT_SHAPE', source_input: ['IMAGE'] }],
    optimization: {
      graph: { level: 1 },
      priority: 'PRIORITY_DEFAULT',
      execution_accelerators: {
        gpu_execution_accelerator: [{ name: 'tensorrt', parameters: { precision_mode: 'FP16' } }],
        cpu_execution_accelerator: [{ name: 'openvino', parameters: {} }]
      },
      input_pinned_memory: { enable: false },
      output_pinned_memory: { enable: true },
      gather_kernel_buffer_threshold: 0,
      eager_batching: false
    },
    cc_model_filenames: { 7.5: 'model_t4.onnx' },
    model_operations: { op_library_filename: ['libcustom_ops.so'] },
    model_repository_agents: { agents: [{ name: 'checksum', parameters: { 'MD5:model.onnx': '0123abcd' } }] },
    model_metrics: {
      metric_control: [
        { metric_identifier: { family: 'nv_inference_request_duration' }, histogram_options: { buckets: [1, 10.5, 100] } }
      ]
    }
  }
}

t.test('a full Triton-style config with every section normalises to the exact object', async t => {
  t.strictSame(parseModelConfig(FULL, { file: 'full/config.pbtxt', modelName: 'full' }), FULL_EXPECTED)
})

t.test('the full config prints as Triton\'s config endpoint does: proto order, enums by name, numbers', async t => {
  const json = modelConfigToJson(parseModelConfig(FULL, { file: 'full/config.pbtxt', modelName: 'full' }))
  t.equal(json, '{"name":"full","platform":"onnxruntime_onnx","backend":"onnxruntime",' +
    '"runtime":"libtriton_onnxruntime.so","version_policy":{"latest":{"num_versions":2}},"max_batch_size":8,' +
    '"input":[' +
    '{"name":"IMAGE","data_type":"TYPE_FP32","format":"FORMAT_NCHW","dims":[3,224,224],"is_shape_tensor":false,' +
    '"allow_ragged_batch":false,"optional":false},' +
    '{"name":"MASK","data_type":"TYPE_BOOL","format":"FORMAT_NONE","dims":[-1],"is_shape_tensor":false,' +
    '"allow_ragged_batch":true,"optional":true},' +
    '{"name":"FLAT","data_type":"TYPE_INT64","format":"FORMAT_NONE","dims":[2,-1,8],"reshape":{"shape":[2,-1,2,4]},' +
    '"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false}],' +
    '"output":[' +
    '{"name":"PROBS","data_type":"TYPE_FP16","dims":[1000],"label_filename":"labels.txt","is_shape_tensor":false},' +
    '{"name":"TEXT","data_type":"TYPE_STRING","dims":[1],"reshape":{"shape":[]},"label_filename":"",' +
    '"is_shape_tensor":false}],' +
    '"batch_input":[{"kind":"BATCH_ELEMENT_COUNT","target_name":["MASK_COUNT"],"data_type":"TYPE_INT32",' +
    '"source_input":["MASK"]}],' +
    '"batch_output":[{"target_name":["PROBS"],"kind":"BATCH_SCATTER_WITH_INPUT_SHAPE","source_input":["IMAGE"]}],' +
    '"optimization":{"graph":{"level":1},"priority":"PRIORITY_DEFAULT","execution_accelerators":{' +
    '"gpu_execution_accelerator":[{"name":"tensorrt","parameters":{"precision_mode":"FP16"}}],' +
    '"cpu_execution_accelerator":[{"name":"openvino","parameters":{}}]},"input_pinned_memory":{"enable":false},' +
    '"output_pinned_memory":{"enable":true},"gather_kernel_buffer_threshold":0,"eager_batching":false},' +
    '"dynamic_batching":{"preferred_batch_size":[4,8],"max_queue_delay_microseconds":100,"preserve_ordering":false,' +
    '"priority_levels":2,"default_priority_level":2,"default_queue_policy":{"timeout_action":"DELAY",' +
    '"default_timeout_microseconds":5000,"allow_timeout_override":true,"max_queue_size":16},' +
    '"priority_queue_policy":{"1":{"timeout_action":"REJECT","default_timeout_microseconds":0,' +
    '"allow_timeout_override":false,"max_queue_size":4}}},' +
    '"instance_group":[{"name":"full_0","kind":"KIND_CPU","count":2,"gpus":[]},' +
    '{"name":"gpu_group","kind":"KIND_GPU","count":1,"gpus":[0,1]},' +
    '{"name":"full_2","kind":"KIND_AUTO","count":1,"gpus":[]}],' +
    '"default_model_filename":"model.onnx","cc_model_filenames":{"7.5":"model_t4.onnx"},' +
    '"metric_tags":{"team":"vision"},' +
    '"parameters":{"fixed_ms":{"string_value":"5"},"jitter_ms":{"string_value":"1"}},' +
    '"model_warmup":[{"name":"zeros","batch_size":4,"inputs":{' +
    '"IMAGE":{"data_type":"TYPE_FP32","dims":[3,224,224],"zero_data":true},' +
    '"MASK":{"data_type":"TYPE_BOOL","dims":[5],"random_data":true}},"count":3},' +
    '{"name":"from_file","batch_size":1,"inputs":{"FLAT":{"data_type":"TYPE_INT64","dims":[2,3,8],' +
    '"input_data_file":"flat.bin"}},"count":0}],' +
    '"model_operations":{"op_library_filename":["libcustom_ops.so"]},' +
    '"model_transaction_policy":{"decoupled":false},' +
    '"model_repository_agents":{"agents":[{"name":"checksum","parameters":{"MD5:model.onnx":"0123abcd"}}]},' +
    '"response_cache":{"enable":true},' +
    '"model_metrics":{"metric_control":[{"metric_identifier":{"family":"nv_inference_request_duration"},' +
    '"histogram_options":{"buckets":[1,10.5,100]}}]}}')
})

t.test('normalisation', async t => {
  const cases: Array<[string, string, (c: ModelConfig) => unknown, unknown]> = [
    ['name defaults to the directory name', 'backend: "b"', c => c.name, 'm'],
    ['an explicit matching name is kept', 'name: "m" backend: "b"', c => c.name, 'm'],
    ['one unnamed group is named after the model', 'backend: "b" instance_group { count: 3 }',
      c => c.instance_group, [{ name: 'm', kind: 'KIND_AUTO', count: 3, gpus: [] }]],
    ['several unnamed groups are numbered by position',
      'backend: "b" instance_group [ { kind: KIND_CPU }, { name: "g" kind: KIND_CPU }, { kind: KIND_MODEL } ]',
      c => c.instance_group.map(g => g.name), ['m_0', 'g', 'm_2']],
    ['count below 1 becomes 1', 'backend: "b" instance_group [ { count: 0 }, { count: -3 } ]',
      c => c.instance_group.map(g => g.count), [1, 1]],
    ['KIND_AUTO stays KIND_AUTO until load', 'backend: "b" instance_group { kind: KIND_AUTO gpus: [ 1 ] }',
      c => c.instance_group, [{ name: 'm', kind: 'KIND_AUTO', count: 1, gpus: [1] }]],
    ['empty preferred_batch_size becomes [max_batch_size]', 'backend: "b" max_batch_size: 4 dynamic_batching {}',
      c => c.dynamic_batching?.preferred_batch_size, [4]],
    ['a non-batching model keeps an empty preferred_batch_size', 'backend: "b" dynamic_batching {}',
      c => c.dynamic_batching?.preferred_batch_size, []],
    ['no dynamic_batching block means no dynamic batcher', 'backend: "b" max_batch_size: 4',
      c => 'dynamic_batching' in c, false],
    ['version_policy {} serves all versions, as Triton does', 'backend: "b" version_policy {}',
      c => c.version_policy, { all: {} }],
    ['version_policy all', 'backend: "b" version_policy { all { } }', c => c.version_policy, { all: {} }],
    ['warmup count 0 (run once) is kept as written',
      'backend: "b" model_warmup { name: "w" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 ' +
      'dims: 1 zero_data: true } } }',
      c => c.model_warmup[0]?.count, 0],
    ['metric_tags map', 'backend: "b" metric_tags [ { key: "a" value: "1" }, { key: "b" value: "2" } ]',
      c => c.metric_tags, { a: '1', b: '2' }],
    ['a later map entry with the same key wins',
      'backend: "b" parameters { key: "k" value { string_value: "1" } } parameters { key: "k" value {} }',
      c => c.parameters, { k: { string_value: '' } }],
    ['a map entry without a value gets the default value', 'backend: "b" parameters { key: "k" }',
      c => c.parameters, { k: { string_value: '' } }],
    ['enums may be given by number', 'backend: "b" input { name: "x" data_type: 11 format: 0 dims: 1 }',
      c => [c.input[0]?.data_type, c.input[0]?.format], ['TYPE_FP32', 'FORMAT_NONE']],
    ['booleans in every spelling protobuf accepts',
      'backend: "b" input [ { name: "a" data_type: TYPE_BOOL dims: 1 optional: t allow_ragged_batch: True },' +
      ' { name: "b" data_type: TYPE_BOOL dims: 1 optional: 1 is_shape_tensor: f allow_ragged_batch: False } ]',
      c => c.input.map(i => [i.optional, i.allow_ragged_batch, i.is_shape_tensor]), [[true, true, false], [true, false, false]]],
    ['one value may be given for a repeated field without a list', 'backend: "b" input { name: "x" data_type: TYPE_FP32 dims: 7 dims: 8 }',
      c => c.input[0]?.dims, [7, 8]],
    ['response_cache and model_transaction_policy appear only when written', 'backend: "b"',
      c => ['response_cache' in c, 'model_transaction_policy' in c], [false, false]],
    ['a map key "__proto__" is an ordinary key', 'backend: "b" parameters { key: "__proto__" value { string_value: "x" } }',
      c => Object.entries(c.parameters), [['__proto__', { string_value: 'x' }]]]
  ]
  for (const [name, text, pick, expected] of cases) t.strictSame(pick(parse(text)), expected, name)
})

t.test('sequence batching and ensembles are kept in passthrough, normalised as Triton does', async t => {
  const seq = parse(`
    backend: "b"
    max_batch_size: 4
    sequence_batching {
      oldest { max_candidate_sequences: 4 }
      control_input [
        { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
        { name: "CORRID" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } }
      ]
      state { input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_FP32 dims: [ -1 ]
              initial_state { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "init" } }
    }
  `)
  t.strictSame(seq.passthrough.sequence_batching, {
    oldest: { max_candidate_sequences: 4, preferred_batch_size: [4], max_queue_delay_microseconds: 0, preserve_ordering: false },
    max_sequence_idle_microseconds: 1000000,
    control_input: [
      {
        name: 'START',
        control: [{ kind: 'CONTROL_SEQUENCE_START', int32_false_true: [], fp32_false_true: [0, 1], bool_false_true: [], data_type: 'TYPE_INVALID' }]
      },
      {
        name: 'CORRID',
        control: [{ kind: 'CONTROL_SEQUENCE_CORRID', int32_false_true: [], fp32_false_true: [], bool_false_true: [], data_type: 'TYPE_UINT64' }]
      }
    ],
    state: [{
      input_name: 'IN_STATE',
      output_name: 'OUT_STATE',
      data_type: 'TYPE_FP32',
      dims: [-1],
      initial_state: [{ data_type: 'TYPE_FP32', dims: [1], zero_data: true, name: 'init' }],
      use_same_buffer_for_input_output: false,
      use_growable_memory: false
    }],
    iterative_sequence: false
  })
  t.equal(seq.dynamic_batching, undefined)

  const ens = parse(`
    platform: "ensemble"
    input { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }
    output { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }
    ensemble_scheduling {
      step [
        { model_name: "pre" model_version: -1 input_map { key: "X" value: "IN" } output_map { key: "Y" value: "mid" } },
        { model_name: "post" input_map { key: "X" value: "mid" } output_map { key: "Y" value: "OUT" } }
      ]
    }
  `)
  t.strictSame(ens.instance_group, [], 'ensembles have no instance groups')
  t.strictSame(ens.passthrough, {
    batch_input: [],
    batch_output: [],
    ensemble_scheduling: {
      step: [
        { model_name: 'pre', model_version: -1, input_map: { X: 'IN' }, output_map: { Y: 'mid' }, model_namespace: '' },
        { model_name: 'post', model_version: 0, input_map: { X: 'mid' }, output_map: { Y: 'OUT' }, model_namespace: '' }
      ],
      max_inflight_responses: 0
    },
    cc_model_filenames: {}
  })
  t.match(modelConfigToJson(ens), /"batch_output":\[\],"ensemble_scheduling":\{"step":\[/)
})

t.test('schema errors: what protobuf\'s text parser rejects, with positions (WRK_ERR_CONFIG_PARSE)', async t => {
  const cases: Array<[string, string]> = [
    ['backend: "b"\nfoo: 1', "config.pbtxt:2:1: message type 'inference.ModelConfig' has no field named 'foo'"],
    ['backend: "b"\ninput {\n  name: "x"\n  dimz: [ 1 ]\n}',
      "config.pbtxt:4:3: message type 'inference.ModelInput' has no field named 'dimz'"],
    ['optimization { cuda { graphz: true } }',
      "config.pbtxt:1:23: message type 'inference.ModelOptimizationPolicy.Cuda' has no field named 'graphz'"],
    ['parameters { key: "k" value { string: "v" } }',
      "config.pbtxt:1:31: message type 'inference.ModelParameter' has no field named 'string'"],
    ['parameters { key: "k" val: "v" }',
      "config.pbtxt:1:23: message type 'inference.ModelConfig.ParametersEntry' has no field named 'val'"],
    ['input: "x"', "config.pbtxt:1:8: field 'input' expects a message { ... }, got string \"x\""],
    ['name { }', "config.pbtxt:1:6: field 'name' expects a string value, got a message"],
    ['input { data_type { } }', "config.pbtxt:1:19: field 'data_type' expects a inference.DataType value, got a message"],
    ['name: model', "config.pbtxt:1:7: field 'name' expects a string in quotes, got identifier model"],
    ['max_batch_size: "8"', "config.pbtxt:1:17: field 'max_batch_size' expects an integer (int32), got string \"8\""],
    ['max_batch_size: 1.5', "config.pbtxt:1:17: field 'max_batch_size' expects an integer (int32), got number 1.5"],
    ['max_batch_size: 2147483648',
      "config.pbtxt:1:17: value 2147483648 for field 'max_batch_size' is out of range for int32 (-2147483648 to 2147483647)"],
    ['dynamic_batching { default_queue_policy { max_queue_size: -1 } }',
      "config.pbtxt:1:59: value -1 for field 'max_queue_size' is out of range for uint32 (0 to 4294967295)"],
    ['input { dims: [ 9007199254740993 ] }',
      "config.pbtxt:1:17: value 9007199254740993 for field 'dims' is too large; Flotilla supports magnitudes up to " +
      '9007199254740991 for int64 fields'],
    ['input { data_type: TYPE_FLOAT32 }',
      "config.pbtxt:1:20: unknown value 'TYPE_FLOAT32' for enum field 'data_type' (inference.DataType); expected one of " +
      'TYPE_INVALID, TYPE_BOOL, TYPE_UINT8, TYPE_UINT16, TYPE_UINT32, TYPE_UINT64, TYPE_INT8, TYPE_INT16, TYPE_INT32, ' +
      'TYPE_INT64, TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_STRING, TYPE_BF16'],
    ['instance_group { kind: "KIND_CPU" }',
      "config.pbtxt:1:24: unknown value string \"KIND_CPU\" for enum field 'kind' (inference.ModelInstanceGroup.Kind); " +
      'expected one of KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL'],
    ['instance_group { kind: 7 }',
      "config.pbtxt:1:24: unknown value number 7 for enum field 'kind' (inference.ModelInstanceGroup.Kind); " +
      'expected one of KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL'],
    ['input { optional: yes }', "config.pbtxt:1:19: field 'optional' expects true or false, got identifier yes"],
    ['input { optional: 2 }', "config.pbtxt:1:19: field 'optional' expects true or false, got number 2"],
    ['name: "a"\nname: "b"', "config.pbtxt:2:1: non-repeated field 'name' is specified multiple times"],
    ['version_policy { all {} }\nversion_policy { all {} }',
      "config.pbtxt:2:1: non-repeated field 'version_policy' is specified multiple times"],
    ['max_batch_size: [ 8 ]', "config.pbtxt:1:1: field 'max_batch_size' is not repeated, so it cannot be given a list [ ... ]"],
    ['version_policy { latest { num_versions: 1 } all { } }',
      "config.pbtxt:1:45: field 'all' is specified along with field 'latest', another member of oneof 'policy_choice'"],
    ['dynamic_batching { }\nsequence_batching { }',
      "config.pbtxt:2:1: field 'sequence_batching' is specified along with field 'dynamic_batching', another member " +
      "of oneof 'scheduling_choice'"],
    ['model_warmup { inputs { key: "x" value { zero_data: true random_data: true } } }',
      "config.pbtxt:1:58: field 'random_data' is specified along with field 'zero_data', another member of oneof " +
      "'input_data_type'"],
    ['parameters: "x"', "config.pbtxt:1:13: field 'parameters' is a map; write each entry as { key: ... value: ... }, " +
      'got string "x"'],
    ['dynamic_batching { priority_queue_policy { key: -1 } }',
      "config.pbtxt:1:49: value -1 for field 'key' is out of range for uint64 (0 to 18446744073709551615)"],
    ['sequence_batching { direct { minimum_slot_utilization: high } }',
      "config.pbtxt:1:56: field 'minimum_slot_utilization' expects a number, got identifier high"]
  ]
  for (const [text, message] of cases) {
    t.strictSame(failure(text), { code: 'WRK_ERR_CONFIG_PARSE', message }, text)
  }
})

t.test('text-format syntax errors come from the parser with the file name', async t => {
  t.strictSame(failure('name: "m"\ninput {\n  name: "x"\n  dims }\n'), {
    code: 'WRK_ERR_CONFIG_PARSE',
    message: "config.pbtxt:4:8: expected ':' or '{' after field name 'dims', got '}'"
  })
  try {
    parseModelConfig('a {', { file: '/models/m/config.pbtxt', modelName: 'm' })
    t.fail('expected an error')
  } catch (err) {
    t.match(err, { code: 'WRK_ERR_CONFIG_PARSE', message: /^\/models\/m\/config\.pbtxt:1:4: / })
  }
})

t.test('validation errors: Triton\'s messages, with positions (WRK_ERR_CONFIG_INVALID)', async t => {
  const io = (body: string, extra = ''): string => `backend: "b"\n${extra}input {\n  ${body}\n}`
  const cases: Array<[string, string]> = [
    ['name: "other" backend: "b"',
      "config.pbtxt:1:1: unexpected directory name 'm' for model 'other', directory name must equal model name"],
    ['max_batch_size: 1', "config.pbtxt: must specify 'platform' or 'backend' for 'm'"],
    ['platform: "ensemble" backend: "b"',
      "config.pbtxt:1:22: Ensemble model 'm' must have platform type 'ensemble' and empty backend type"],
    ['platform: "tensorrt_plan" backend: "onnxruntime"',
      "config.pbtxt:1:1: unexpected 'platform' and 'backend' pair, got:tensorrt_plan, onnxruntime"],
    ['backend: "b"\nmax_batch_size: -1', "config.pbtxt:2:1: 'max_batch_size' must be non-negative value for m"],
    ['backend: "b" version_policy { latest { num_versions: 0 } }',
      "config.pbtxt:1:40: version_policy 'latest' must serve at least 1 version ('num_versions' is 0) for m"],
    ['backend: "b" version_policy { specific { versions: [ 1, -2 ] } }',
      "config.pbtxt:1:57: version_policy 'specific' versions must be non-negative, got -2 for m"],
    [io('data_type: TYPE_FP32 dims: [ 1 ]'), "config.pbtxt:2:7: model input must specify 'name' for m"],
    [io('name: "x" dims: [ 1 ]'), "config.pbtxt:2:7: model input 'x' must specify 'data_type' for m"],
    [io('name: "x" data_type: TYPE_INVALID dims: [ 1 ]'), "config.pbtxt:2:7: model input 'x' must specify 'data_type' for m"],
    [io('name: "x" data_type: TYPE_FP32'), "config.pbtxt:2:7: model input 'x' must specify 'dims' for m"],
    [io('name: "x" data_type: TYPE_FP32 dims: [ 4, 0 ]'),
      "config.pbtxt:3:45: model input 'x' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m"],
    [io('name: "x" data_type: TYPE_FP32 dims: [ -2 ]'),
      "config.pbtxt:3:42: model input 'x' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m"],
    [io('name: "x" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 0 ] }'),
      "config.pbtxt:3:68: model input 'x' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size " +
      'dimension for m'],
    [io('name: "x" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 3 ] }'),
      "config.pbtxt:3:46: model input 'x' has different size for dims and reshape for m"],
    [io('name: "x" data_type: TYPE_FP32 dims: [ 1 ] reshape { }'),
      "config.pbtxt:3:46: model input 'x' cannot have empty reshape for non-batching model as scalar tensors are not " +
      'supported for m'],
    [io('name: "x" data_type: TYPE_FP32 dims: [ 2 ] reshape { }', 'max_batch_size: 4\n'),
      "config.pbtxt:4:46: model input 'x' has different size for dims and reshape for m"],
    [io('name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] reshape { shape: [ 4, 2 ] }'),
      "config.pbtxt:3:50: model input 'x' has different size for dims and reshape for m"],
    [io('name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] reshape { shape: [ -1, -1 ] }'),
      "config.pbtxt:3:50: model input 'x' has different number of variable-size dimensions for dims and reshape for m"],
    [io('name: "x" data_type: TYPE_FP32 dims: [ 2, -1, 6 ] reshape { shape: [ 3, -1, 4 ] }'),
      "config.pbtxt:3:53: model input 'x' has different size for dims and reshape for m"],
    [io('name: "x" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 224, 224 ]'),
      'config.pbtxt:3:34: model input NHWC/NCHW require 3 dims for m'],
    [io('name: "x" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] is_non_linear_format_io: true'),
      'config.pbtxt:3:52: Non-linear IO format is only supported for the TensorRT platform for m'],
    ['backend: "b"\noutput { name: "y" data_type: TYPE_FP32 }', "config.pbtxt:2:8: model output 'y' must specify 'dims' for m"],
    ['backend: "b"\noutput { data_type: TYPE_FP32 dims: 1 }', "config.pbtxt:2:8: model output must specify 'name' for m"],
    ['backend: "b"\ninput [ { name: "x" data_type: TYPE_FP32 dims: 1 },\n  { name: "x" data_type: TYPE_FP32 dims: 1 } ]',
      "config.pbtxt:3:3: model input 'x' is declared more than once for m; input names must be unique"],
    ['backend: "b"\noutput { name: "y" data_type: TYPE_FP32 dims: 1 }\noutput { name: "y" data_type: TYPE_FP32 dims: 1 }',
      "config.pbtxt:3:8: model output 'y' is declared more than once for m; output names must be unique"],
    ['backend: "b"\ninstance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]',
      'config.pbtxt:2:35: instance group m of model m has kind KIND_CPU but specifies one or more GPUs'],
    ['backend: "b"\ninstance_group [ { name: "g" kind: KIND_MODEL gpus: 1 } ]',
      'config.pbtxt:2:47: instance group g of model m has kind KIND_MODEL but specifies one or more GPUs'],
    ['backend: "b"\ninstance_group [ { kind: KIND_GPU gpus: [ 0, -1 ] } ]',
      'config.pbtxt:2:46: instance group m of model m specifies invalid gpu id -1; gpu ids are non-negative'],
    ['backend: "b"\ninstance_group [ { profile: "0" } ]',
      'config.pbtxt:2:20: instance group m of model m and platform  specifies profile field which is only supported ' +
      'for TensorRT models'],
    ['backend: "b" max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 2, 0 ] }',
      'config.pbtxt:1:78: dynamic batching preferred size must be positive for m'],
    ['backend: "b" max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 2, 8 ] }',
      'config.pbtxt:1:78: dynamic batching preferred size must be <= max batch size for m'],
    ['backend: "b" dynamic_batching { preferred_batch_size: 1 }',
      'config.pbtxt:1:55: dynamic batching preferred size must be <= max batch size for m'],
    ['backend: "b" dynamic_batching { priority_levels: 3 }',
      'config.pbtxt:1:31: default priority level must be in range [1, 3] for m'],
    ['backend: "b" dynamic_batching { priority_levels: 3 default_priority_level: 4 }',
      'config.pbtxt:1:52: default priority level must be in range [1, 3] for m'],
    ['backend: "b" dynamic_batching { priority_levels: 2 default_priority_level: 1\n' +
      '  priority_queue_policy { key: 1 value {} }\n  priority_queue_policy { key: 3 value {} } }',
      'config.pbtxt:3:25: priority queue policy must have priority level in range [1, 2] for m'],
    ['backend: "b" dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }',
      "config.pbtxt:1:57: Only one priority level is allowed when 'preserve_ordering' is true for m"],
    ['backend: "b" dynamic_batching { preserve_ordering: true\n' +
      '  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }',
      "config.pbtxt:2:26: Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m"],
    ['backend: "b" dynamic_batching { preserve_ordering: true priority_levels: 1 default_priority_level: 1\n' +
      '  priority_queue_policy { key: 1 value { timeout_action: DELAY default_timeout_microseconds: 10 } } }',
      "config.pbtxt:2:42: Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m"],
    ['backend: "b" model_warmup { name: "w" batch_size: 2 inputs { key: "x" value { data_type: TYPE_FP32 dims: 1 ' +
      'zero_data: true } } }',
      "config.pbtxt:1:39: model_warmup 'w' has batch_size 2, but a non-batching model (max_batch_size 0) can only " +
      'warm up with batch_size 1 for m'],
    ['backend: "b" max_batch_size: 2 model_warmup { name: "w" batch_size: 3 }',
      "config.pbtxt:1:57: model_warmup 'w' has batch_size 3, larger than max_batch_size 2 for m"],
    ['backend: "b" model_warmup { name: "w" batch_size: 1\n  inputs { key: "x" value { data_type: TYPE_FP32 dims: [ 2, -1 ] zero_data: true } } }',
      "config.pbtxt:2:61: warmup setting expects all variable-size dimensions are specified for input 'x'"],
    ['backend: "b" model_warmup { name: "w" batch_size: 1\n  inputs { key: "x" value { data_type: TYPE_FP32 dims: 1 } } }',
      "config.pbtxt:2:27: warmup setting expects input 'x' to have input_data_type set"],
    ['backend: "b" model_warmup { name: "w" batch_size: 1\n  inputs { key: "x" value { dims: 1 zero_data: true } } }',
      "config.pbtxt:2:27: warmup setting expects input 'x' to specify 'data_type'"],
    ['backend: "b" response_cache { enable: true } model_transaction_policy { decoupled: true }',
      "config.pbtxt:1:14: Response Cache does not currently support model m with 'decoupled' transaction policy. " +
      'Please disable the response cache.'],
    ['backend: "b" response_cache { enable: true } sequence_batching { }',
      'config.pbtxt:1:14: Response Cache does not currently support model m with sequence batching scheduler. ' +
      'Please disable the response cache.'],
    ['platform: "ensemble"', 'config.pbtxt:1:1: ensemble scheduling must be set for ensemble m whose platform is ensemble'],
    ['backend: "b" ensemble_scheduling { }',
      "config.pbtxt:1:14: ensemble scheduling cannot be set for model 'm' whose platform is not ensemble"],
    ['platform: "ensemble" ensemble_scheduling { }', "config.pbtxt:1:22: must specify 'step' for ensemble 'm'"],
    ['platform: "ensemble" instance_group {} ensemble_scheduling { step { model_name: "a" } }',
      "config.pbtxt:1:22: instance group should not be specified for ensemble 'm'"],
    ['platform: "ensemble" ensemble_scheduling { step { model_name: "a" } }',
      "config.pbtxt:1:49: must specify 'input_map' in step 0 of ensemble 'm'"],
    ['backend: "b" batch_input { kind: BATCH_ITEM_SHAPE data_type: TYPE_FP32 source_input: [ "a", "b" ] }',
      "config.pbtxt:1:26: batch input kind 'BATCH_ITEM_SHAPE' expects 1 source input, got 2 for m"],
    ['backend: "b" batch_input { data_type: TYPE_FP32 source_input: "nope" }',
      "config.pbtxt:1:49: unknown source input name 'nope' for m"],
    ['backend: "b" model_metrics { metric_control { metric_identifier { family: "" } histogram_options { } } }',
      "config.pbtxt:1:65: metric identifier must specify non-empty 'family'"],
    ['backend: "b" model_metrics { metric_control { histogram_options { buckets: 1 } } }',
      "config.pbtxt:1:45: metric control must specify 'metric_identifier'"],
    ['backend: "b" model_metrics { metric_control { metric_identifier { family: "f" } } }',
      "config.pbtxt:1:45: metric control must specify 'histogram_options'"],
    ['backend: "b" model_metrics { metric_control { metric_identifier { family: "f" } histogram_options { } } }',
      "config.pbtxt:1:99: histogram options must specify non-empty 'buckets'"],
    ['platform: "tensorrt_plan"\ninput { name: "x" data_type: TYPE_FP32 dims: [ 8, 8 ] is_non_linear_format_io: true }',
      'config.pbtxt:2:55: Non-linear IO format input requires 3 dims for m'],
    ['backend: "b" max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: [ 0 ] } }',
      'config.pbtxt:1:85: sequence batching preferred batch size must be positive for m'],
    ['backend: "b" max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: [ 5 ] } }',
      'config.pbtxt:1:85: sequence batching preferred batch size must be <= max batch size for m'],
    ['backend: "b" sequence_batching { direct { minimum_slot_utilization: 1.5 } }',
      'config.pbtxt:1:43: sequence batching minimum slot utilization must be in range (0.0, 1.0] for m'],
    ['platform: "ensemble" optimization { } ensemble_scheduling { step { model_name: "a" } }',
      "config.pbtxt:1:22: optimization should not be specified for ensemble 'm'"],
    ['platform: "ensemble" model_warmup { } ensemble_scheduling { step { model_name: "a" } }',
      "config.pbtxt:1:22: model_warmup can not be specified for ensemble 'm'"],
    ['backend: "b" input { name: "a" data_type: TYPE_FP32 dims: 1 }\nbatch_input { data_type: TYPE_INT64 source_input: "a" }',
      'config.pbtxt:2:15: batch input data type must be TYPE_INT32 or TYPE_FP32 for m'],
    ['backend: "b" input { name: "a" data_type: TYPE_FP32 dims: 1 }\nbatch_output { target_name: "z" source_input: "a" }',
      "config.pbtxt:2:16: unknown target output name 'z' for m"],
    ['backend: "b" input { name: "a" data_type: TYPE_FP32 dims: 1 } output { name: "y" data_type: TYPE_FP32 dims: 1 }\n' +
      'batch_output { target_name: [ "y", "y" ] source_input: "a" }',
      "config.pbtxt:2:16: target output name 'y' can only be specified once for m"],
    ['backend: "b" model_warmup { name: "w" batch_size: 1\n  inputs { key: "x" value { data_type: TYPE_FP32 dims: [ -3 ] zero_data: true } } }',
      "config.pbtxt:2:58: warmup setting expects dimensions >= 0 for input 'x'"]
  ]
  for (const [text, message] of cases) {
    t.strictSame(failure(text), { code: 'WRK_ERR_CONFIG_INVALID', message }, message)
  }
})

t.test('float fields accept inf and nan, which JSON spells as strings', async t => {
  const config = parse('backend: "b" model_metrics { metric_control { metric_identifier { family: "f" } ' +
    'histogram_options { buckets: [ -inf, 0.5, 1e3, inf, nan ] } } }')
  t.strictSame(config.passthrough.model_metrics, {
    metric_control: [{
      metric_identifier: { family: 'f' },
      histogram_options: { buckets: ['-Infinity', 0.5, 1000, 'Infinity', 'NaN'] }
    }]
  })
})

t.test('modelConfigToJson orders fields itself and keeps unknown passthrough keys', async t => {
  const config: ModelConfig = {
    passthrough: { extra_field: { a: 1 }, cc_model_filenames: { 8.0: 'a.onnx' } },
    model_warmup: [],
    metric_tags: {},
    parameters: {},
    default_model_filename: 'model.bin',
    instance_group: [{ gpus: [0], count: 1, kind: 'KIND_GPU', name: 'g' }],
    output: [{ is_shape_tensor: false, label_filename: '', dims: [2], data_type: 'TYPE_UINT8', name: 'o' }],
    input: [{ optional: false, allow_ragged_batch: false, is_shape_tensor: false, dims: [2], format: 'FORMAT_NONE', data_type: 'TYPE_UINT8', name: 'i' }],
    max_batch_size: 0,
    version_policy: { all: {} },
    runtime: '',
    backend: 'b',
    platform: '',
    name: 'hand',
    model_transaction_policy: { decoupled: true }
  }
  t.equal(modelConfigToJson(config), '{"name":"hand","platform":"","backend":"b","runtime":"",' +
    '"version_policy":{"all":{}},"max_batch_size":0,' +
    '"input":[{"name":"i","data_type":"TYPE_UINT8","format":"FORMAT_NONE","dims":[2],"is_shape_tensor":false,' +
    '"allow_ragged_batch":false,"optional":false}],' +
    '"output":[{"name":"o","data_type":"TYPE_UINT8","dims":[2],"label_filename":"","is_shape_tensor":false}],' +
    '"batch_input":[],"batch_output":[],"instance_group":[{"name":"g","kind":"KIND_GPU","count":1,"gpus":[0]}],' +
    '"default_model_filename":"model.bin","cc_model_filenames":{"8":"a.onnx"},"metric_tags":{},"parameters":{},' +
    '"model_warmup":[],"model_transaction_policy":{"decoupled":true},"extra_field":{"a":1}}')
})
