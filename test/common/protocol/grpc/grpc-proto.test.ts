/**
 * Pins the wire contract: every message, field number, type and RPC that Triton's clients rely on, written out by
 * hand from Triton's own protos (triton-inference-server/common protobuf/grpc_service.proto, model_config.proto,
 * health.proto) and checked against the Root Flotilla loads. A renumbered, retyped or renamed field fails here.
 */
import t from 'tap'
import protobuf from 'protobufjs'
import descriptor from 'protobufjs/ext/descriptor/index.js'
import {
  HEALTH_SERVICE_NAME, INFERENCE_SERVICE_NAME, PROTO_FILES, healthServiceDefinition, inferenceServiceDefinition,
  protoFileDescriptors, protoRoot
} from '../../../../common/protocol/grpc/grpc-service.ts'

/**
 * field name → [number, type, shape]. Types: scalar names, or full names of messages and enums. Shape: 'repeated',
 * 'map<key>' (the type is then the value's), or 'oneof:<name>'.
 */
type FieldSpec = readonly [number, string, string?]
type MessageSpec = Readonly<Record<string, FieldSpec>>

const SD = 'inference.StatisticDuration'
const PARAM = 'inference.InferParameter'

const MESSAGES: Readonly<Record<string, MessageSpec>> = {
  // grpc_service.proto
  'inference.ServerLiveRequest': {},
  'inference.ServerLiveResponse': { live: [1, 'bool'] },
  'inference.ServerReadyRequest': {},
  'inference.ServerReadyResponse': { ready: [1, 'bool'] },
  'inference.ModelReadyRequest': { name: [1, 'string'], version: [2, 'string'] },
  'inference.ModelReadyResponse': { ready: [1, 'bool'] },
  'inference.ServerMetadataRequest': {},
  'inference.ServerMetadataResponse': { name: [1, 'string'], version: [2, 'string'], extensions: [3, 'string', 'repeated'] },
  'inference.ModelMetadataRequest': { name: [1, 'string'], version: [2, 'string'] },
  'inference.ModelMetadataResponse': {
    name: [1, 'string'],
    versions: [2, 'string', 'repeated'],
    platform: [3, 'string'],
    inputs: [4, 'inference.ModelMetadataResponse.TensorMetadata', 'repeated'],
    outputs: [5, 'inference.ModelMetadataResponse.TensorMetadata', 'repeated']
  },
  'inference.ModelMetadataResponse.TensorMetadata': {
    name: [1, 'string'], datatype: [2, 'string'], shape: [3, 'int64', 'repeated']
  },
  'inference.InferParameter': {
    bool_param: [1, 'bool', 'oneof:parameter_choice'],
    int64_param: [2, 'int64', 'oneof:parameter_choice'],
    string_param: [3, 'string', 'oneof:parameter_choice'],
    double_param: [4, 'double', 'oneof:parameter_choice'],
    uint64_param: [5, 'uint64', 'oneof:parameter_choice']
  },
  'inference.InferTensorContents': {
    bool_contents: [1, 'bool', 'repeated'],
    int_contents: [2, 'int32', 'repeated'],
    int64_contents: [3, 'int64', 'repeated'],
    uint_contents: [4, 'uint32', 'repeated'],
    uint64_contents: [5, 'uint64', 'repeated'],
    fp32_contents: [6, 'float', 'repeated'],
    fp64_contents: [7, 'double', 'repeated'],
    bytes_contents: [8, 'bytes', 'repeated']
  },
  'inference.ModelInferRequest': {
    model_name: [1, 'string'],
    model_version: [2, 'string'],
    id: [3, 'string'],
    parameters: [4, PARAM, 'map<string>'],
    inputs: [5, 'inference.ModelInferRequest.InferInputTensor', 'repeated'],
    outputs: [6, 'inference.ModelInferRequest.InferRequestedOutputTensor', 'repeated'],
    raw_input_contents: [7, 'bytes', 'repeated']
  },
  'inference.ModelInferRequest.InferInputTensor': {
    name: [1, 'string'],
    datatype: [2, 'string'],
    shape: [3, 'int64', 'repeated'],
    parameters: [4, PARAM, 'map<string>'],
    contents: [5, 'inference.InferTensorContents']
  },
  'inference.ModelInferRequest.InferRequestedOutputTensor': { name: [1, 'string'], parameters: [2, PARAM, 'map<string>'] },
  'inference.ModelInferResponse': {
    model_name: [1, 'string'],
    model_version: [2, 'string'],
    id: [3, 'string'],
    parameters: [4, PARAM, 'map<string>'],
    outputs: [5, 'inference.ModelInferResponse.InferOutputTensor', 'repeated'],
    raw_output_contents: [6, 'bytes', 'repeated']
  },
  'inference.ModelInferResponse.InferOutputTensor': {
    name: [1, 'string'],
    datatype: [2, 'string'],
    shape: [3, 'int64', 'repeated'],
    parameters: [4, PARAM, 'map<string>'],
    contents: [5, 'inference.InferTensorContents']
  },
  'inference.ModelStreamInferResponse': { error_message: [1, 'string'], infer_response: [2, 'inference.ModelInferResponse'] },
  'inference.ModelConfigRequest': { name: [1, 'string'], version: [2, 'string'] },
  'inference.ModelConfigResponse': { config: [1, 'inference.ModelConfig'] },
  'inference.ModelStatisticsRequest': { name: [1, 'string'], version: [2, 'string'] },
  'inference.StatisticDuration': { count: [1, 'uint64'], ns: [2, 'uint64'] },
  'inference.InferStatistics': {
    success: [1, SD], fail: [2, SD], queue: [3, SD], compute_input: [4, SD], compute_infer: [5, SD],
    compute_output: [6, SD], cache_hit: [7, SD], cache_miss: [8, SD]
  },
  'inference.InferResponseStatistics': {
    compute_infer: [1, SD], compute_output: [2, SD], success: [3, SD], fail: [4, SD], empty_response: [5, SD], cancel: [6, SD]
  },
  'inference.InferBatchStatistics': {
    batch_size: [1, 'uint64'], compute_input: [2, SD], compute_infer: [3, SD], compute_output: [4, SD]
  },
  'inference.MemoryUsage': { type: [1, 'string'], id: [2, 'int64'], byte_size: [3, 'uint64'] },
  'inference.ModelStatistics': {
    name: [1, 'string'],
    version: [2, 'string'],
    last_inference: [3, 'uint64'],
    inference_count: [4, 'uint64'],
    execution_count: [5, 'uint64'],
    inference_stats: [6, 'inference.InferStatistics'],
    batch_stats: [7, 'inference.InferBatchStatistics', 'repeated'],
    memory_usage: [8, 'inference.MemoryUsage', 'repeated'],
    response_stats: [9, 'inference.InferResponseStatistics', 'map<string>']
  },
  'inference.ModelStatisticsResponse': { model_stats: [1, 'inference.ModelStatistics', 'repeated'] },
  'inference.ModelRepositoryParameter': {
    bool_param: [1, 'bool', 'oneof:parameter_choice'],
    int64_param: [2, 'int64', 'oneof:parameter_choice'],
    string_param: [3, 'string', 'oneof:parameter_choice'],
    bytes_param: [4, 'bytes', 'oneof:parameter_choice']
  },
  'inference.RepositoryIndexRequest': { repository_name: [1, 'string'], ready: [2, 'bool'] },
  'inference.RepositoryIndexResponse': { models: [1, 'inference.RepositoryIndexResponse.ModelIndex', 'repeated'] },
  'inference.RepositoryIndexResponse.ModelIndex': {
    name: [1, 'string'], version: [2, 'string'], state: [3, 'string'], reason: [4, 'string']
  },
  'inference.RepositoryModelLoadRequest': {
    repository_name: [1, 'string'], model_name: [2, 'string'], parameters: [3, 'inference.ModelRepositoryParameter', 'map<string>']
  },
  'inference.RepositoryModelLoadResponse': {},
  'inference.RepositoryModelUnloadRequest': {
    repository_name: [1, 'string'], model_name: [2, 'string'], parameters: [3, 'inference.ModelRepositoryParameter', 'map<string>']
  },
  'inference.RepositoryModelUnloadResponse': {},
  'inference.SystemSharedMemoryStatusRequest': { name: [1, 'string'] },
  'inference.SystemSharedMemoryStatusResponse': {
    regions: [1, 'inference.SystemSharedMemoryStatusResponse.RegionStatus', 'map<string>']
  },
  'inference.SystemSharedMemoryStatusResponse.RegionStatus': {
    name: [1, 'string'], key: [2, 'string'], offset: [3, 'uint64'], byte_size: [4, 'uint64']
  },
  'inference.SystemSharedMemoryRegisterRequest': {
    name: [1, 'string'], key: [2, 'string'], offset: [3, 'uint64'], byte_size: [4, 'uint64']
  },
  'inference.SystemSharedMemoryRegisterResponse': {},
  'inference.SystemSharedMemoryUnregisterRequest': { name: [1, 'string'] },
  'inference.SystemSharedMemoryUnregisterResponse': {},
  'inference.CudaSharedMemoryStatusRequest': { name: [1, 'string'] },
  'inference.CudaSharedMemoryStatusResponse': {
    regions: [1, 'inference.CudaSharedMemoryStatusResponse.RegionStatus', 'map<string>']
  },
  'inference.CudaSharedMemoryStatusResponse.RegionStatus': {
    name: [1, 'string'], device_id: [2, 'uint64'], byte_size: [3, 'uint64']
  },
  'inference.CudaSharedMemoryRegisterRequest': {
    name: [1, 'string'], raw_handle: [2, 'bytes'], device_id: [3, 'int64'], byte_size: [4, 'uint64']
  },
  'inference.CudaSharedMemoryRegisterResponse': {},
  'inference.CudaSharedMemoryUnregisterRequest': { name: [1, 'string'] },
  'inference.CudaSharedMemoryUnregisterResponse': {},
  'inference.TraceSettingRequest': {
    settings: [1, 'inference.TraceSettingRequest.SettingValue', 'map<string>'], model_name: [2, 'string']
  },
  'inference.TraceSettingRequest.SettingValue': { value: [1, 'string', 'repeated'] },
  'inference.TraceSettingResponse': { settings: [1, 'inference.TraceSettingResponse.SettingValue', 'map<string>'] },
  'inference.TraceSettingResponse.SettingValue': { value: [1, 'string', 'repeated'] },
  'inference.LogSettingsRequest': { settings: [1, 'inference.LogSettingsRequest.SettingValue', 'map<string>'] },
  'inference.LogSettingsRequest.SettingValue': {
    bool_param: [1, 'bool', 'oneof:parameter_choice'],
    uint32_param: [2, 'uint32', 'oneof:parameter_choice'],
    string_param: [3, 'string', 'oneof:parameter_choice']
  },
  'inference.LogSettingsResponse': { settings: [1, 'inference.LogSettingsResponse.SettingValue', 'map<string>'] },
  'inference.LogSettingsResponse.SettingValue': {
    bool_param: [1, 'bool', 'oneof:parameter_choice'],
    uint32_param: [2, 'uint32', 'oneof:parameter_choice'],
    string_param: [3, 'string', 'oneof:parameter_choice']
  },

  // model_config.proto
  'inference.ModelConfig': {
    name: [1, 'string'],
    platform: [2, 'string'],
    backend: [17, 'string'],
    runtime: [25, 'string'],
    version_policy: [3, 'inference.ModelVersionPolicy'],
    max_batch_size: [4, 'int32'],
    input: [5, 'inference.ModelInput', 'repeated'],
    output: [6, 'inference.ModelOutput', 'repeated'],
    batch_input: [20, 'inference.BatchInput', 'repeated'],
    batch_output: [21, 'inference.BatchOutput', 'repeated'],
    optimization: [12, 'inference.ModelOptimizationPolicy'],
    dynamic_batching: [11, 'inference.ModelDynamicBatching', 'oneof:scheduling_choice'],
    sequence_batching: [13, 'inference.ModelSequenceBatching', 'oneof:scheduling_choice'],
    ensemble_scheduling: [15, 'inference.ModelEnsembling', 'oneof:scheduling_choice'],
    instance_group: [7, 'inference.ModelInstanceGroup', 'repeated'],
    default_model_filename: [8, 'string'],
    cc_model_filenames: [9, 'string', 'map<string>'],
    metric_tags: [10, 'string', 'map<string>'],
    parameters: [14, 'inference.ModelParameter', 'map<string>'],
    model_warmup: [16, 'inference.ModelWarmup', 'repeated'],
    model_operations: [18, 'inference.ModelOperations'],
    model_transaction_policy: [19, 'inference.ModelTransactionPolicy'],
    model_repository_agents: [23, 'inference.ModelRepositoryAgents'],
    response_cache: [24, 'inference.ModelResponseCache'],
    model_metrics: [26, 'inference.ModelMetrics']
  },
  'inference.ModelInput': {
    name: [1, 'string'],
    data_type: [2, 'inference.DataType'],
    format: [3, 'inference.ModelInput.Format'],
    dims: [4, 'int64', 'repeated'],
    reshape: [5, 'inference.ModelTensorReshape'],
    is_shape_tensor: [6, 'bool'],
    allow_ragged_batch: [7, 'bool'],
    optional: [8, 'bool'],
    is_non_linear_format_io: [9, 'bool']
  },
  'inference.ModelOutput': {
    name: [1, 'string'],
    data_type: [2, 'inference.DataType'],
    dims: [3, 'int64', 'repeated'],
    reshape: [5, 'inference.ModelTensorReshape'],
    label_filename: [4, 'string'],
    is_shape_tensor: [6, 'bool'],
    is_non_linear_format_io: [7, 'bool']
  },
  'inference.ModelTensorReshape': { shape: [1, 'int64', 'repeated'] },
  'inference.ModelInstanceGroup': {
    name: [1, 'string'],
    kind: [4, 'inference.ModelInstanceGroup.Kind'],
    count: [2, 'int32'],
    rate_limiter: [6, 'inference.ModelRateLimiter'],
    gpus: [3, 'int32', 'repeated'],
    secondary_devices: [8, 'inference.ModelInstanceGroup.SecondaryDevice', 'repeated'],
    profile: [5, 'string', 'repeated'],
    passive: [7, 'bool'],
    host_policy: [9, 'string']
  },
  'inference.ModelInstanceGroup.SecondaryDevice': {
    kind: [1, 'inference.ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind'], device_id: [2, 'int64']
  },
  'inference.ModelRateLimiter': { resources: [1, 'inference.ModelRateLimiter.Resource', 'repeated'], priority: [2, 'uint32'] },
  'inference.ModelRateLimiter.Resource': { name: [1, 'string'], global: [2, 'bool'], count: [3, 'uint32'] },
  'inference.ModelDynamicBatching': {
    preferred_batch_size: [1, 'int32', 'repeated'],
    max_queue_delay_microseconds: [2, 'uint64'],
    preserve_ordering: [3, 'bool'],
    priority_levels: [4, 'uint64'],
    default_priority_level: [5, 'uint64'],
    default_queue_policy: [6, 'inference.ModelQueuePolicy'],
    priority_queue_policy: [7, 'inference.ModelQueuePolicy', 'map<uint64>']
  },
  'inference.ModelQueuePolicy': {
    timeout_action: [1, 'inference.ModelQueuePolicy.TimeoutAction'],
    default_timeout_microseconds: [2, 'uint64'],
    allow_timeout_override: [3, 'bool'],
    max_queue_size: [4, 'uint32']
  },
  'inference.ModelVersionPolicy': {
    latest: [1, 'inference.ModelVersionPolicy.Latest', 'oneof:policy_choice'],
    all: [2, 'inference.ModelVersionPolicy.All', 'oneof:policy_choice'],
    specific: [3, 'inference.ModelVersionPolicy.Specific', 'oneof:policy_choice']
  },
  'inference.ModelVersionPolicy.Latest': { num_versions: [1, 'uint32'] },
  'inference.ModelVersionPolicy.Specific': { versions: [1, 'int64', 'repeated'] },
  'inference.ModelParameter': { string_value: [1, 'string'] },
  'inference.ModelWarmup': {
    name: [1, 'string'], batch_size: [2, 'uint32'], inputs: [3, 'inference.ModelWarmup.Input', 'map<string>'], count: [4, 'uint32']
  },
  'inference.ModelWarmup.Input': {
    data_type: [1, 'inference.DataType'],
    dims: [2, 'int64', 'repeated'],
    zero_data: [3, 'bool', 'oneof:input_data_type'],
    random_data: [4, 'bool', 'oneof:input_data_type'],
    input_data_file: [5, 'string', 'oneof:input_data_type']
  },
  'inference.ModelEnsembling.Step': {
    model_name: [1, 'string'],
    model_version: [2, 'int64'],
    input_map: [3, 'string', 'map<string>'],
    output_map: [4, 'string', 'map<string>'],
    model_namespace: [5, 'string']
  },
  'inference.ModelTransactionPolicy': { decoupled: [1, 'bool'] },
  'inference.ModelResponseCache': { enable: [1, 'bool'] },

  // health.proto
  'grpc.health.v1.HealthCheckRequest': { service: [1, 'string'] },
  'grpc.health.v1.HealthCheckResponse': { status: [1, 'grpc.health.v1.HealthCheckResponse.ServingStatus'] }
}

const ENUMS: Readonly<Record<string, Readonly<Record<string, number>>>> = {
  'inference.DataType': {
    TYPE_INVALID: 0, TYPE_BOOL: 1, TYPE_UINT8: 2, TYPE_UINT16: 3, TYPE_UINT32: 4, TYPE_UINT64: 5, TYPE_INT8: 6,
    TYPE_INT16: 7, TYPE_INT32: 8, TYPE_INT64: 9, TYPE_FP16: 10, TYPE_FP32: 11, TYPE_FP64: 12, TYPE_STRING: 13, TYPE_BF16: 14
  },
  'inference.ModelInstanceGroup.Kind': { KIND_AUTO: 0, KIND_GPU: 1, KIND_CPU: 2, KIND_MODEL: 3 },
  'inference.ModelInput.Format': { FORMAT_NONE: 0, FORMAT_NHWC: 1, FORMAT_NCHW: 2 },
  'inference.ModelQueuePolicy.TimeoutAction': { REJECT: 0, DELAY: 1 },
  'grpc.health.v1.HealthCheckResponse.ServingStatus': { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 }
}

/** RPC → [request type, response type, client streams, server streams]. */
type MethodSpec = readonly [string, string, boolean, boolean]
const unary = (name: string): MethodSpec => [`inference.${name}Request`, `inference.${name}Response`, false, false]

const INFERENCE_METHODS: Readonly<Record<string, MethodSpec>> = {
  ServerLive: unary('ServerLive'),
  ServerReady: unary('ServerReady'),
  ModelReady: unary('ModelReady'),
  ServerMetadata: unary('ServerMetadata'),
  ModelMetadata: unary('ModelMetadata'),
  ModelInfer: unary('ModelInfer'),
  ModelStreamInfer: ['inference.ModelInferRequest', 'inference.ModelStreamInferResponse', true, true],
  ModelConfig: unary('ModelConfig'),
  ModelStatistics: unary('ModelStatistics'),
  RepositoryIndex: unary('RepositoryIndex'),
  RepositoryModelLoad: unary('RepositoryModelLoad'),
  RepositoryModelUnload: unary('RepositoryModelUnload'),
  SystemSharedMemoryStatus: unary('SystemSharedMemoryStatus'),
  SystemSharedMemoryRegister: unary('SystemSharedMemoryRegister'),
  SystemSharedMemoryUnregister: unary('SystemSharedMemoryUnregister'),
  CudaSharedMemoryStatus: unary('CudaSharedMemoryStatus'),
  CudaSharedMemoryRegister: unary('CudaSharedMemoryRegister'),
  CudaSharedMemoryUnregister: unary('CudaSharedMemoryUnregister'),
  TraceSetting: unary('TraceSetting'),
  LogSettings: unary('LogSettings')
}

const HEALTH_METHODS: Readonly<Record<string, MethodSpec>> = {
  Check: ['grpc.health.v1.HealthCheckRequest', 'grpc.health.v1.HealthCheckResponse', false, false],
  Watch: ['grpc.health.v1.HealthCheckRequest', 'grpc.health.v1.HealthCheckResponse', false, true]
}

function typeName (field: protobuf.Field): string {
  const resolved = field.resolvedType
  return resolved === null ? field.type : resolved.fullName.slice(1)
}

function shapeOf (field: protobuf.Field): string | undefined {
  if (field instanceof protobuf.MapField) return `map<${field.keyType}>`
  if (field.repeated) return 'repeated'
  if (field.partOf !== null) return `oneof:${field.partOf.name}`
  return undefined
}

t.test('every pinned message has exactly the pinned fields', async t => {
  const root = protoRoot()
  for (const [messageName, fields] of Object.entries(MESSAGES)) {
    const type = root.lookupType(messageName)
    t.same(Object.keys(type.fields).sort(), Object.keys(fields).sort(), `${messageName}: field names`)
    for (const [fieldName, [id, expectedType, shape]] of Object.entries(fields)) {
      const field = type.fields[fieldName]
      if (field === undefined) continue // reported above
      field.resolve()
      t.equal(field.id, id, `${messageName}.${fieldName}: number`)
      t.equal(typeName(field), expectedType, `${messageName}.${fieldName}: type`)
      t.equal(shapeOf(field), shape, `${messageName}.${fieldName}: repeated / map / oneof`)
    }
  }
})

t.test('pinned enums have exactly the pinned values', async t => {
  const root = protoRoot()
  for (const [enumName, values] of Object.entries(ENUMS)) t.same(root.lookupEnum(enumName).values, values, enumName)
})

t.test('services: every RPC with its types and streaming flags', async t => {
  const root = protoRoot()
  const check = (serviceName: string, methods: Readonly<Record<string, MethodSpec>>): void => {
    const service = root.lookupService(serviceName)
    t.same(Object.keys(service.methods).sort(), Object.keys(methods).sort(), `${serviceName}: RPC names`)
    for (const [name, [request, response, clientStreams, serverStreams]] of Object.entries(methods)) {
      const method = service.methods[name]
      if (method === undefined) continue
      method.resolve()
      t.equal(method.resolvedRequestType?.fullName, `.${request}`, `${name}: request type`)
      t.equal(method.resolvedResponseType?.fullName, `.${response}`, `${name}: response type`)
      t.equal(method.requestStream === true, clientStreams, `${name}: client streaming`)
      t.equal(method.responseStream === true, serverStreams, `${name}: server streaming`)
    }
  }
  check(INFERENCE_SERVICE_NAME, INFERENCE_METHODS)
  check(HEALTH_SERVICE_NAME, HEALTH_METHODS)
})

t.test('the grpc-js definitions use the official paths and streaming flags', async t => {
  const inference = inferenceServiceDefinition()
  t.same(Object.keys(inference).sort(), Object.keys(INFERENCE_METHODS).sort())
  for (const [name, [, , clientStreams, serverStreams]] of Object.entries(INFERENCE_METHODS)) {
    const def = inference[name]
    t.equal(def?.path, `/inference.GRPCInferenceService/${name}`, `${name}: path`)
    t.equal(def?.requestStream, clientStreams, `${name}: requestStream`)
    t.equal(def?.responseStream, serverStreams, `${name}: responseStream`)
    t.equal(def?.originalName, name.charAt(0).toLowerCase() + name.slice(1), `${name}: camelCase alias`)
  }
  const health = healthServiceDefinition()
  t.equal(health.Check?.path, '/grpc.health.v1.Health/Check')
  t.equal(health.Watch?.path, '/grpc.health.v1.Health/Watch')
  t.equal(health.Watch?.responseStream, true)
  t.equal(inferenceServiceDefinition(), inference, 'loaded once')
})

t.test('reflection descriptors: one per file, protoc-shaped', async t => {
  const files = protoFileDescriptors().map(b => descriptor.FileDescriptorProto.toObject(descriptor.FileDescriptorProto.decode(b)))
  t.same(files.map(f => f.name), PROTO_FILES, 'named as Triton names its files')
  const [service, config, health] = files as Array<Record<string, any>>
  t.equal(service?.package, 'inference')
  t.same(service?.dependency, ['model_config.proto'], 'grpc_service.proto imports model_config.proto')
  t.equal(service?.syntax, 'proto3')
  t.equal(config?.package, 'inference')
  t.notOk(config?.dependency?.length, 'model_config.proto imports nothing')
  t.equal(health?.package, 'grpc.health.v1')
  t.same(service?.service?.map((s: { name: string }) => s.name), ['GRPCInferenceService'])
  t.same(health?.service?.map((s: { name: string }) => s.name), ['Health'])

  const infer = service?.messageType.find((m: { name: string }) => m.name === 'ModelInferRequest')
  const parameters = infer.field.find((f: { name: string }) => f.name === 'parameters')
  t.equal(parameters.typeName, '.inference.ModelInferRequest.ParametersEntry', 'map fields point at <Field>Entry, fully qualified')
  const entry = infer.nestedType.find((m: { name: string }) => m.name === 'ParametersEntry')
  t.equal(entry.options.mapEntry, true)
  t.same(entry.field.map((f: { name: string, number: number }) => [f.name, f.number]), [['key', 1], ['value', 2]])
  t.equal(infer.field.find((f: { name: string }) => f.name === 'raw_input_contents').jsonName, 'rawInputContents')

  const batching = config?.messageType.find((m: { name: string }) => m.name === 'ModelDynamicBatching')
  t.ok(batching.nestedType.find((m: { name: string }) => m.name === 'PriorityQueuePolicyEntry'), 'multi-word map entry name')

  // The descriptors alone rebuild the same field numbers (what a reflection client sees).
  // protobufjs/ext/descriptor adds Root.fromDescriptor without typing it.
  const fromDescriptor = (protobuf.Root as unknown as { fromDescriptor: (set: protobuf.Message) => protobuf.Root }).fromDescriptor
  const rebuilt = fromDescriptor(descriptor.FileDescriptorSet.fromObject({ file: files }))
  for (const [messageName, fields] of Object.entries(MESSAGES)) {
    const type = rebuilt.lookupType(messageName)
    for (const [fieldName, [id]] of Object.entries(fields)) t.equal(type.fields[fieldName]?.id, id, `reflected ${messageName}.${fieldName}`)
  }
})
