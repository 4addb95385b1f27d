/**
 * config.pbtxt → validated, normalised {@link ModelConfig}, and back out as the config endpoint's JSON.
 *
 * Three steps, each with its own failure code:
 * 1. `parsePbtxt` reads the text format into a schema-free tree (syntax errors: WRK_ERR_CONFIG_PARSE).
 * 2. A schema table of Triton's `inference.ModelConfig` (common/protobuf/model_config.proto, every message and
 *    field, in declaration order) converts the tree into protobuf-JSON shape: unknown field names, wrong value kinds,
 *    bad enum names, out-of-range integers, a non-repeated field given twice and two members of one oneof are
 *    rejected here, as protobuf's text parser rejects them (also WRK_ERR_CONFIG_PARSE: Triton reports all of these
 *    as "failed to read text proto"). Primitive, repeated and map fields get their defaults, as Triton's
 *    `always_print_primitive_fields` JSON shows them; unset sub-messages and oneof members stay absent.
 * 3. Triton's semantic checks (core `ValidateModelConfig`, `ValidateIOShape`, `ValidateInstanceGroup`, warmup) with
 *    Triton's wording, then Flotilla's normalisation (WRK_ERR_CONFIG_INVALID).
 *
 * Every converted object remembers the tree node it came from, so a validation error can still name
 * `file:line:col`.
 */

import { createError, type FlotillaError } from '../../common/errors.ts'
import { DATATYPE_NAMES, dataTypeToConfigType } from '../../common/protocol/datatypes.ts'
import {
  describePbValue, parsePbtxt, pbLocation, type PbMessage, type PbPosition, type PbValue
} from './pbtxt.ts'
import {
  type ConfigDataType, type DynamicBatching, type InstanceGroup, type InstanceKind, type ModelConfig, type ModelInput,
  type ModelOutput, type ModelParameter, type ModelTensorReshape, type ModelWarmup, type QueuePolicy,
  type TensorFormat, type TimeoutAction, type VersionPolicy, type WarmupInput
} from './types.ts'

/** Where a config came from: `file` prefixes messages, `modelName` is the model's directory name. */
export interface ParseModelConfigOptions {
  file: string
  modelName: string
}

// ---------------------------------------------------------------------------------------------------------------
// Schema: model_config.proto as data. Field order is declaration order, which is the order Triton's JSON prints.

type ScalarType = 'string' | 'bool' | 'int32' | 'int64' | 'uint32' | 'uint64' | 'float' | 'double'

interface EnumType {
  readonly enumName: string
  /** Index = enum number (all of model_config.proto's enums are dense from 0). */
  readonly values: readonly string[]
}

interface MessageType {
  readonly messageName: string
  readonly fields: ReadonlyMap<string, FieldSpec>
}

type ValueType = ScalarType | EnumType | MessageType

interface FieldSpec {
  readonly type: ValueType
  readonly repeated: boolean
  /** Set for `map<K, V>` fields; `type` is then V. */
  readonly mapKey: ScalarType | null
  readonly oneof: string | null
  /** Printed only when set: a renamed field kept as an alias so configs for either Triton version parse. */
  readonly alias: boolean
}

function isMessageType (t: ValueType): t is MessageType {
  return typeof t === 'object' && 'fields' in t
}

function isEnumType (t: ValueType): t is EnumType {
  return typeof t === 'object' && 'values' in t
}

const spec = (type: ValueType): FieldSpec => ({ type, repeated: false, mapKey: null, oneof: null, alias: false })
const rep = (type: ValueType): FieldSpec => ({ ...spec(type), repeated: true })
const mapOf = (key: ScalarType, type: ValueType): FieldSpec => ({ ...spec(type), mapKey: key })
const oneofOf = (oneof: string, type: ValueType): FieldSpec => ({ ...spec(type), oneof })
const enumOf = (enumName: string, values: readonly string[]): EnumType => ({ enumName, values })
const message = (messageName: string, fields: Record<string, FieldSpec>): MessageType =>
  ({ messageName, fields: new Map(Object.entries(fields)) })

// The enum's values in number order, from the one datatype table (TYPE_INVALID is 0, the rest their enum value).
const DATA_TYPE = enumOf('inference.DataType', ['TYPE_INVALID', ...DATATYPE_NAMES.map(dataTypeToConfigType)])

const RATE_LIMITER = message('inference.ModelRateLimiter', {
  resources: rep(message('inference.ModelRateLimiter.Resource', {
    name: spec('string'), global: spec('bool'), count: spec('uint32')
  })),
  priority: spec('uint32')
})

const INSTANCE_GROUP = message('inference.ModelInstanceGroup', {
  name: spec('string'),
  kind: spec(enumOf('inference.ModelInstanceGroup.Kind', ['KIND_AUTO', 'KIND_GPU', 'KIND_CPU', 'KIND_MODEL'])),
  count: spec('int32'),
  rate_limiter: spec(RATE_LIMITER),
  gpus: rep('int32'),
  secondary_devices: rep(message('inference.ModelInstanceGroup.SecondaryDevice', {
    kind: spec(enumOf('inference.ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind', ['KIND_NVDLA'])),
    device_id: spec('int64')
  })),
  profile: rep('string'),
  passive: spec('bool'),
  host_policy: spec('string')
})

const RESHAPE = message('inference.ModelTensorReshape', { shape: rep('int64') })

const MODEL_INPUT = message('inference.ModelInput', {
  name: spec('string'),
  data_type: spec(DATA_TYPE),
  format: spec(enumOf('inference.ModelInput.Format', ['FORMAT_NONE', 'FORMAT_NHWC', 'FORMAT_NCHW'])),
  dims: rep('int64'),
  reshape: spec(RESHAPE),
  is_shape_tensor: spec('bool'),
  allow_ragged_batch: spec('bool'),
  optional: spec('bool'),
  is_non_linear_format_io: spec('bool')
})

const MODEL_OUTPUT = message('inference.ModelOutput', {
  name: spec('string'),
  data_type: spec(DATA_TYPE),
  dims: rep('int64'),
  reshape: spec(RESHAPE),
  label_filename: spec('string'),
  is_shape_tensor: spec('bool'),
  is_non_linear_format_io: spec('bool')
})

const BATCH_INPUT = message('inference.BatchInput', {
  kind: spec(enumOf('inference.BatchInput.Kind', [
    'BATCH_ELEMENT_COUNT', 'BATCH_ACCUMULATED_ELEMENT_COUNT', 'BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO',
    'BATCH_MAX_ELEMENT_COUNT_AS_SHAPE', 'BATCH_ITEM_SHAPE', 'BATCH_ITEM_SHAPE_FLATTEN'
  ])),
  target_name: rep('string'),
  data_type: spec(DATA_TYPE),
  source_input: rep('string')
})

const BATCH_OUTPUT = message('inference.BatchOutput', {
  target_name: rep('string'),
  kind: spec(enumOf('inference.BatchOutput.Kind', ['BATCH_SCATTER_WITH_INPUT_SHAPE'])),
  source_input: rep('string')
})

const VERSION_POLICY = message('inference.ModelVersionPolicy', {
  latest: oneofOf('policy_choice', message('inference.ModelVersionPolicy.Latest', { num_versions: spec('uint32') })),
  all: oneofOf('policy_choice', message('inference.ModelVersionPolicy.All', {})),
  specific: oneofOf('policy_choice', message('inference.ModelVersionPolicy.Specific', { versions: rep('int64') }))
})

const GRAPH_SHAPE = message('inference.ModelOptimizationPolicy.Cuda.GraphSpec.Shape', { dim: rep('int64') })
const ACCELERATOR = message('inference.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator', {
  name: spec('string'),
  parameters: mapOf('string', 'string')
})
const PINNED_MEMORY = message('inference.ModelOptimizationPolicy.PinnedMemoryBuffer', { enable: spec('bool') })

const OPTIMIZATION = message('inference.ModelOptimizationPolicy', {
  graph: spec(message('inference.ModelOptimizationPolicy.Graph', { level: spec('int32') })),
  priority: spec(enumOf('inference.ModelOptimizationPolicy.ModelPriority',
    ['PRIORITY_DEFAULT', 'PRIORITY_MAX', 'PRIORITY_MIN'])),
  cuda: spec(message('inference.ModelOptimizationPolicy.Cuda', {
    graphs: spec('bool'),
    busy_wait_events: spec('bool'),
    graph_spec: rep(message('inference.ModelOptimizationPolicy.Cuda.GraphSpec', {
      batch_size: spec('int32'),
      input: mapOf('string', GRAPH_SHAPE),
      graph_lower_bound: spec(message('inference.ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound', {
        batch_size: spec('int32'),
        input: mapOf('string', GRAPH_SHAPE)
      }))
    })),
    output_copy_stream: spec('bool')
  })),
  execution_accelerators: spec(message('inference.ModelOptimizationPolicy.ExecutionAccelerators', {
    gpu_execution_accelerator: rep(ACCELERATOR),
    cpu_execution_accelerator: rep(ACCELERATOR)
  })),
  input_pinned_memory: spec(PINNED_MEMORY),
  output_pinned_memory: spec(PINNED_MEMORY),
  gather_kernel_buffer_threshold: spec('uint32'),
  eager_batching: spec('bool')
})

const QUEUE_POLICY = message('inference.ModelQueuePolicy', {
  timeout_action: spec(enumOf('inference.ModelQueuePolicy.TimeoutAction', ['REJECT', 'DELAY'])),
  default_timeout_microseconds: spec('uint64'),
  allow_timeout_override: spec('bool'),
  max_queue_size: spec('uint32')
})

const DYNAMIC_BATCHING = message('inference.ModelDynamicBatching', {
  preferred_batch_size: rep('int32'),
  max_queue_delay_microseconds: spec('uint64'),
  preserve_ordering: spec('bool'),
  priority_levels: spec('uint64'),
  default_priority_level: spec('uint64'),
  default_queue_policy: spec(QUEUE_POLICY),
  priority_queue_policy: mapOf('uint64', QUEUE_POLICY)
})

const SEQUENCE_INITIAL_STATE = message('inference.ModelSequenceBatching.InitialState', {
  data_type: spec(DATA_TYPE),
  dims: rep('int64'),
  zero_data: oneofOf('state_data', 'bool'),
  data_file: oneofOf('state_data', 'string'),
  name: spec('string')
})

const SEQUENCE_BATCHING = message('inference.ModelSequenceBatching', {
  direct: oneofOf('strategy_choice', message('inference.ModelSequenceBatching.StrategyDirect', {
    max_queue_delay_microseconds: spec('uint64'),
    minimum_slot_utilization: spec('float')
  })),
  oldest: oneofOf('strategy_choice', message('inference.ModelSequenceBatching.StrategyOldest', {
    max_candidate_sequences: spec('int32'),
    preferred_batch_size: rep('int32'),
    max_queue_delay_microseconds: spec('uint64'),
    preserve_ordering: spec('bool')
  })),
  max_sequence_idle_microseconds: spec('uint64'),
  control_input: rep(message('inference.ModelSequenceBatching.ControlInput', {
    name: spec('string'),
    control: rep(message('inference.ModelSequenceBatching.Control', {
      kind: spec(enumOf('inference.ModelSequenceBatching.Control.Kind', [
        'CONTROL_SEQUENCE_START', 'CONTROL_SEQUENCE_READY', 'CONTROL_SEQUENCE_END', 'CONTROL_SEQUENCE_CORRID'
      ])),
      int32_false_true: rep('int32'),
      fp32_false_true: rep('float'),
      bool_false_true: rep('bool'),
      data_type: spec(DATA_TYPE)
    }))
  })),
  state: rep(message('inference.ModelSequenceBatching.State', {
    input_name: spec('string'),
    output_name: spec('string'),
    data_type: spec(DATA_TYPE),
    dims: rep('int64'),
    initial_state: rep(SEQUENCE_INITIAL_STATE),
    use_same_buffer_for_input_output: spec('bool'),
    use_growable_memory: spec('bool')
  })),
  iterative_sequence: spec('bool')
})

const ENSEMBLE_SCHEDULING = message('inference.ModelEnsembling', {
  step: rep(message('inference.ModelEnsembling.Step', {
    model_name: spec('string'),
    model_version: spec('int64'),
    input_map: mapOf('string', 'string'),
    output_map: mapOf('string', 'string'),
    model_namespace: spec('string')
  })),
  // Field 2 was renamed between Triton releases; accept both spellings.
  max_inflight_responses: spec('uint32'),
  max_inflight_requests: { ...spec('uint32'), alias: true }
})

const MODEL_WARMUP = message('inference.ModelWarmup', {
  name: spec('string'),
  batch_size: spec('uint32'),
  inputs: mapOf('string', message('inference.ModelWarmup.Input', {
    data_type: spec(DATA_TYPE),
    dims: rep('int64'),
    zero_data: oneofOf('input_data_type', 'bool'),
    random_data: oneofOf('input_data_type', 'bool'),
    input_data_file: oneofOf('input_data_type', 'string')
  })),
  count: spec('uint32')
})

const MODEL_METRICS = message('inference.ModelMetrics', {
  metric_control: rep(message('inference.ModelMetrics.MetricControl', {
    metric_identifier: spec(message('inference.ModelMetrics.MetricControl.MetricIdentifier', {
      family: spec('string')
    })),
    histogram_options: oneofOf('metric_options', message('inference.ModelMetrics.MetricControl.HistogramOptions', {
      buckets: rep('double')
    }))
  }))
})

const MODEL_CONFIG = message('inference.ModelConfig', {
  name: spec('string'),
  platform: spec('string'),
  backend: spec('string'),
  runtime: spec('string'),
  version_policy: spec(VERSION_POLICY),
  max_batch_size: spec('int32'),
  input: rep(MODEL_INPUT),
  output: rep(MODEL_OUTPUT),
  batch_input: rep(BATCH_INPUT),
  batch_output: rep(BATCH_OUTPUT),
  optimization: spec(OPTIMIZATION),
  dynamic_batching: oneofOf('scheduling_choice', DYNAMIC_BATCHING),
  sequence_batching: oneofOf('scheduling_choice', SEQUENCE_BATCHING),
  ensemble_scheduling: oneofOf('scheduling_choice', ENSEMBLE_SCHEDULING),
  instance_group: rep(INSTANCE_GROUP),
  default_model_filename: spec('string'),
  cc_model_filenames: mapOf('string', 'string'),
  metric_tags: mapOf('string', 'string'),
  parameters: mapOf('string', message('inference.ModelParameter', { string_value: spec('string') })),
  model_warmup: rep(MODEL_WARMUP),
  model_operations: spec(message('inference.ModelOperations', { op_library_filename: rep('string') })),
  model_transaction_policy: spec(message('inference.ModelTransactionPolicy', { decoupled: spec('bool') })),
  model_repository_agents: spec(message('inference.ModelRepositoryAgents', {
    agents: rep(message('inference.ModelRepositoryAgents.Agent', {
      name: spec('string'),
      parameters: mapOf('string', 'string')
    }))
  })),
  response_cache: spec(message('inference.ModelResponseCache', { enable: spec('bool') })),
  model_metrics: spec(MODEL_METRICS)
})

/** ModelConfig fields Flotilla keeps verbatim in `passthrough`, in the order Triton prints them. */
const PASSTHROUGH_FIELDS = [
  'batch_input', 'batch_output', 'optimization', 'sequence_batching', 'ensemble_scheduling', 'cc_model_filenames',
  'model_operations', 'model_repository_agents', 'model_metrics'
] as const

// ---------------------------------------------------------------------------------------------------------------
// Tree → protobuf-JSON conversion.

type Json = null | boolean | number | string | Json[] | JsonObject
interface JsonObject { [key: string]: Json }

const INT_RANGES: Record<'int32' | 'int64' | 'uint32' | 'uint64', readonly [bigint, bigint]> = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n]
}
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)

/** Sets an own enumerable property even for keys like `__proto__`, which map fields may legitimately use. */
function setKey (target: JsonObject, key: string, value: Json): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })
}

function camel (name: string): string {
  return name.replace(/(^|_)([a-z])/g, (_m, _u: string, c: string) => c.toUpperCase())
}

class Converter {
  readonly file: string
  readonly root: PbMessage
  /** Converted message object → the tree node it came from. */
  readonly sources = new WeakMap<object, PbMessage>()
  /** Converted map object → each key's entry node. */
  readonly mapEntries = new WeakMap<object, Map<string, PbMessage>>()
  readonly #entryTypes = new WeakMap<FieldSpec, MessageType>()

  constructor (file: string, root: PbMessage) {
    this.file = file
    this.root = root
  }

  error (pos: PbPosition, msg: string): FlotillaError {
    return createError('WRK_ERR_CONFIG_PARSE', `${pbLocation(this.file, pos)}: ${msg}`)
  }

  message (msg: PbMessage, type: MessageType): JsonObject {
    const oneofSeen = new Map<string, string>()
    for (const field of msg.fields.values()) {
      const fieldSpec = type.fields.get(field.name)
      if (fieldSpec === undefined) {
        throw this.error(field, `message type '${type.messageName}' has no field named '${field.name}'`)
      }
      if (!fieldSpec.repeated && fieldSpec.mapKey === null) {
        const second = field.occurrences[1]
        if (second !== undefined) {
          throw this.error(second, `non-repeated field '${field.name}' is specified multiple times`)
        }
        if (field.occurrences[0]?.list === true) {
          throw this.error(field, `field '${field.name}' is not repeated, so it cannot be given a list [ ... ]`)
        }
      }
      if (fieldSpec.oneof !== null) {
        const other = oneofSeen.get(fieldSpec.oneof)
        if (other !== undefined) {
          throw this.error(field, `field '${field.name}' is specified along with field '${other}', ` +
            `another member of oneof '${fieldSpec.oneof}'`)
        }
        oneofSeen.set(fieldSpec.oneof, field.name)
      }
    }

    const out: JsonObject = {}
    for (const [name, fieldSpec] of type.fields) {
      const field = msg.fields.get(name)
      if (fieldSpec.mapKey !== null) {
        out[name] = this.#map(field?.values ?? [], name, fieldSpec, type)
      } else if (fieldSpec.repeated) {
        out[name] = field === undefined ? [] : field.values.map(v => this.#value(v, fieldSpec.type, name))
      } else if (field !== undefined) {
        const first = field.values[0]
        if (first !== undefined) out[name] = this.#value(first, fieldSpec.type, name)
      } else if (fieldSpec.oneof === null && !fieldSpec.alias && !isMessageType(fieldSpec.type)) {
        out[name] = defaultValue(fieldSpec.type)
      }
    }
    this.sources.set(out, msg)
    return out
  }

  /** A message with every field at its default, tied to `at` for error positions. */
  empty (type: MessageType, at: PbPosition): JsonObject {
    return this.message({ kind: 'message', fields: new Map(), line: at.line, column: at.column }, type)
  }

  #map (entries: PbValue[], name: string, fieldSpec: FieldSpec, parent: MessageType): JsonObject {
    const out: JsonObject = {}
    const byKey = new Map<string, PbMessage>()
    let entryType = this.#entryTypes.get(fieldSpec)
    if (entryType === undefined) {
      entryType = message(`${parent.messageName}.${camel(name)}Entry`, {
        key: spec(fieldSpec.mapKey ?? 'string'),
        value: spec(fieldSpec.type)
      })
      this.#entryTypes.set(fieldSpec, entryType)
    }
    for (const entry of entries) {
      if (entry.kind !== 'message') {
        throw this.error(entry, `field '${name}' is a map; write each entry as { key: ... value: ... }, ` +
          `got ${describePbValue(entry)}`)
      }
      const converted = this.message(entry, entryType)
      const key = String(converted.key)
      const valueType = fieldSpec.type
      // Later entries with the same key replace earlier ones, as protobuf's map parsing does.
      const value = converted.value ?? (isMessageType(valueType) ? this.empty(valueType, entry) : defaultValue(valueType))
      setKey(out, key, value)
      byKey.set(key, entry)
    }
    this.mapEntries.set(out, byKey)
    return out
  }

  #value (v: PbValue, type: ValueType, name: string): Json {
    if (isMessageType(type)) {
      if (v.kind !== 'message') {
        throw this.error(v, `field '${name}' expects a message { ... }, got ${describePbValue(v)}`)
      }
      return this.message(v, type)
    }
    if (v.kind === 'message') {
      throw this.error(v, `field '${name}' expects ${isEnumType(type) ? `a ${type.enumName} value` : `a ${type} value`}` +
        ', got a message')
    }
    if (isEnumType(type)) return this.#enum(v, type, name)
    switch (type) {
      case 'string':
        if (v.kind !== 'string') {
          throw this.error(v, `field '${name}' expects a string in quotes, got ${describePbValue(v)}`)
        }
        return v.value
      case 'bool':
        if (v.kind === 'identifier' && !v.negative) {
          if (v.value === 'true' || v.value === 'True' || v.value === 't') return true
          if (v.value === 'false' || v.value === 'False' || v.value === 'f') return false
        } else if (v.kind === 'number' && (v.text === '0' || v.text === '1')) {
          return v.text === '1'
        }
        throw this.error(v, `field '${name}' expects true or false, got ${describePbValue(v)}`)
      case 'float':
      case 'double':
        if (v.kind === 'number') return jsonNumber(v.value)
        if (v.kind === 'identifier') {
          const lower = v.value.toLowerCase()
          if (lower === 'inf' || lower === 'infinity') return jsonNumber(v.negative ? -Infinity : Infinity)
          if (lower === 'nan') return jsonNumber(NaN)
        }
        throw this.error(v, `field '${name}' expects a number, got ${describePbValue(v)}`)
      default: {
        if (v.kind !== 'number' || v.integer === null) {
          throw this.error(v, `field '${name}' expects an integer (${type}), got ${describePbValue(v)}`)
        }
        const [min, max] = INT_RANGES[type]
        if (v.integer < min || v.integer > max) {
          throw this.error(v, `value ${v.text} for field '${name}' is out of range for ${type} (${min} to ${max})`)
        }
        if (v.integer > MAX_SAFE || v.integer < -MAX_SAFE) {
          throw this.error(v, `value ${v.text} for field '${name}' is too large; ` +
            `Flotilla supports magnitudes up to ${MAX_SAFE} for ${type} fields`)
        }
        return Number(v.integer)
      }
    }
  }

  #enum (v: PbValue, type: EnumType, name: string): string {
    if (v.kind === 'identifier' && !v.negative && type.values.includes(v.value)) return v.value
    if (v.kind === 'number' && v.integer !== null && v.integer >= 0n && v.integer < BigInt(type.values.length)) {
      return type.values[Number(v.integer)] as string
    }
    const shown = v.kind === 'identifier' ? `'${v.negative ? '-' : ''}${v.value}'` : describePbValue(v)
    throw this.error(v, `unknown value ${shown} for enum field '${name}' (${type.enumName}); ` +
      `expected one of ${type.values.join(', ')}`)
  }
}

function defaultValue (type: ScalarType | EnumType): Json {
  if (isEnumType(type)) return type.values[0] as string
  switch (type) {
    case 'string': return ''
    case 'bool': return false
    default: return 0
  }
}

/** JSON has no Infinity or NaN; protobuf's JSON mapping spells them as strings. */
function jsonNumber (n: number): number | string {
  if (Number.isFinite(n)) return n
  return Number.isNaN(n) ? 'NaN' : n > 0 ? 'Infinity' : '-Infinity'
}

// ---------------------------------------------------------------------------------------------------------------
// Validation and normalisation.

// The schema guarantees each field's JSON type, so these casts only restate it.
const str = (o: JsonObject, k: string): string => o[k] as string
const num = (o: JsonObject, k: string): number => o[k] as number
const bool = (o: JsonObject, k: string): boolean => o[k] as boolean
const nums = (o: JsonObject, k: string): number[] => o[k] as number[]
const objs = (o: JsonObject, k: string): JsonObject[] => o[k] as JsonObject[]
const obj = (o: JsonObject, k: string): JsonObject | undefined => o[k] as JsonObject | undefined
const entries = (o: JsonObject, k: string): Array<[string, JsonObject]> =>
  Object.entries(o[k] as Record<string, JsonObject>)

/** Backends whose platform Triton checks (core `GetBackendType` / `GetBackendTypeFromPlatform`). */
const KNOWN_BACKEND_PLATFORMS: Readonly<Record<string, readonly string[]>> = {
  tensorrt: ['tensorrt_plan'],
  tensorflow: ['tensorflow_graphdef', 'tensorflow_savedmodel'],
  onnxruntime: ['onnxruntime_onnx'],
  pytorch: ['pytorch_libtorch']
}

const ENSEMBLE_PLATFORM = 'ensemble'
const TENSORRT_PLATFORM = 'tensorrt_plan'
const SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1000000

class Validator {
  readonly #conv: Converter
  readonly #raw: JsonObject
  readonly #dir: string
  #name = ''

  constructor (conv: Converter, raw: JsonObject, dir: string) {
    this.#conv = conv
    this.#raw = raw
    this.#dir = dir
  }

  /**
   * Position of `field` (or its `index`-th value) in the message `o` came from; the message itself when the field
   * was not written; nothing for file-level problems.
   */
  #pos (o: JsonObject | undefined, field?: string, index?: number): PbPosition | undefined {
    if (o === undefined) return undefined
    const src = this.#conv.sources.get(o)
    if (src === undefined) return undefined
    if (field === undefined) return src === this.#conv.root ? undefined : src
    const f = src.fields.get(field)
    if (f === undefined) return src === this.#conv.root ? undefined : src
    if (index !== undefined) return f.values[index] ?? f
    return f
  }

  #invalid (msg: string, pos: PbPosition | undefined): FlotillaError {
    const where = pos === undefined ? this.#conv.file : pbLocation(this.#conv.file, pos)
    return createError('WRK_ERR_CONFIG_INVALID', `${where}: ${msg}`)
  }

  build (): ModelConfig {
    const raw = this.#raw
    const written = str(raw, 'name')
    if (written !== '' && written !== this.#dir) {
      throw this.#invalid(`unexpected directory name '${this.#dir}' for model '${written}', ` +
        'directory name must equal model name', this.#pos(raw, 'name'))
    }
    const name = this.#name = this.#dir
    const platform = str(raw, 'platform')
    const backend = str(raw, 'backend')
    const maxBatchSize = num(raw, 'max_batch_size')
    const ensemble = obj(raw, 'ensemble_scheduling')

    this.#checkPlatform(platform, backend)
    if (maxBatchSize < 0) {
      throw this.#invalid(`'max_batch_size' must be non-negative value for ${name}`, this.#pos(raw, 'max_batch_size'))
    }
    const versionPolicy = this.#versionPolicy(obj(raw, 'version_policy'))
    const dynamicBatching = this.#dynamicBatching(obj(raw, 'dynamic_batching'), maxBatchSize)
    const sequenceBatching = this.#sequenceBatching(obj(raw, 'sequence_batching'), maxBatchSize)
    this.#checkEnsemble(platform, ensemble)
    this.#checkTransactionPolicy()
    this.#checkModelMetrics(obj(raw, 'model_metrics'))

    const inputs = objs(raw, 'input').map((io, i) => this.#input(io, i, maxBatchSize, platform))
    const outputs = objs(raw, 'output').map((io, i) => this.#output(io, i, maxBatchSize, platform))
    this.#checkBatchIO(inputs, outputs)
    const instanceGroups = ensemble === undefined ? this.#instanceGroups(platform) : []
    const warmups = objs(raw, 'model_warmup').map(w => this.#warmup(w, maxBatchSize))

    const config: ModelConfig = {
      name,
      platform,
      backend,
      runtime: str(raw, 'runtime'),
      version_policy: versionPolicy,
      max_batch_size: maxBatchSize,
      input: inputs,
      output: outputs,
      instance_group: instanceGroups,
      default_model_filename: str(raw, 'default_model_filename'),
      parameters: Object.fromEntries(entries(raw, 'parameters').map(([k, p]): [string, ModelParameter] =>
        [k, { string_value: str(p, 'string_value') }])),
      model_warmup: warmups,
      metric_tags: { ...(raw.metric_tags as Record<string, string>) },
      passthrough: this.#passthrough(ensemble !== undefined, sequenceBatching)
    }
    if (dynamicBatching !== undefined) config.dynamic_batching = dynamicBatching
    const cache = obj(raw, 'response_cache')
    if (cache !== undefined) config.response_cache = { enable: bool(cache, 'enable') }
    const transaction = obj(raw, 'model_transaction_policy')
    if (transaction !== undefined) config.model_transaction_policy = { decoupled: bool(transaction, 'decoupled') }
    return config
  }

  #checkPlatform (platform: string, backend: string): void {
    const name = this.#name
    if (platform === '' && backend === '') {
      throw this.#invalid(`must specify 'platform' or 'backend' for '${name}'`, undefined)
    }
    if (platform === ENSEMBLE_PLATFORM && backend !== '') {
      throw this.#invalid(`Ensemble model '${name}' must have platform type '${platform}' and empty backend type`,
        this.#pos(this.#raw, 'backend'))
    }
    const platforms = Object.hasOwn(KNOWN_BACKEND_PLATFORMS, backend) ? KNOWN_BACKEND_PLATFORMS[backend] : undefined
    // Triton fills an empty platform from the backend before this check; only a contradiction is an error here.
    if (platforms !== undefined && platform !== '' && !platforms.includes(platform)) {
      throw this.#invalid(`unexpected 'platform' and 'backend' pair, got:${platform}, ${backend}`,
        this.#pos(this.#raw, 'platform'))
    }
  }

  #versionPolicy (vp: JsonObject | undefined): VersionPolicy {
    const name = this.#name
    if (vp === undefined) return { latest: { num_versions: 1 } }
    const latest = obj(vp, 'latest')
    if (latest !== undefined) {
      const n = num(latest, 'num_versions')
      if (n < 1) {
        throw this.#invalid(`version_policy 'latest' must serve at least 1 version ('num_versions' is ${n}) for ${name}`,
          this.#pos(latest, 'num_versions') ?? this.#pos(latest))
      }
      return { latest: { num_versions: n } }
    }
    const specific = obj(vp, 'specific')
    if (specific !== undefined) {
      const versions = nums(specific, 'versions')
      versions.forEach((v, i) => {
        if (v < 0) {
          throw this.#invalid(`version_policy 'specific' versions must be non-negative, got ${v} for ${name}`,
            this.#pos(specific, 'versions', i))
        }
      })
      return { specific: { versions: [...versions] } }
    }
    // `version_policy {}` and `all {}` both serve every version (core model_lifecycle `VersionsToLoad`).
    return { all: {} }
  }

  #queuePolicy (p: JsonObject | undefined): QueuePolicy {
    if (p === undefined) {
      return { timeout_action: 'REJECT', default_timeout_microseconds: 0, allow_timeout_override: false, max_queue_size: 0 }
    }
    return {
      timeout_action: str(p, 'timeout_action') as TimeoutAction,
      default_timeout_microseconds: num(p, 'default_timeout_microseconds'),
      allow_timeout_override: bool(p, 'allow_timeout_override'),
      max_queue_size: num(p, 'max_queue_size')
    }
  }

  #dynamicBatching (db: JsonObject | undefined, maxBatchSize: number): DynamicBatching | undefined {
    if (db === undefined) return undefined
    const name = this.#name
    const preferred = nums(db, 'preferred_batch_size')
    preferred.forEach((size, i) => {
      if (size <= 0) {
        throw this.#invalid(`dynamic batching preferred size must be positive for ${name}`,
          this.#pos(db, 'preferred_batch_size', i))
      }
      if (size > maxBatchSize) {
        throw this.#invalid(`dynamic batching preferred size must be <= max batch size for ${name}`,
          this.#pos(db, 'preferred_batch_size', i))
      }
    })
    const levels = num(db, 'priority_levels')
    const defaultLevel = num(db, 'default_priority_level')
    const pqpObject = db.priority_queue_policy as JsonObject
    const pqpEntries = this.#conv.mapEntries.get(pqpObject)
    const pqp = entries(db, 'priority_queue_policy')
    if (levels !== 0) {
      if (defaultLevel === 0 || defaultLevel > levels) {
        throw this.#invalid(`default priority level must be in range [1, ${levels}] for ${name}`,
          this.#pos(db, 'default_priority_level'))
      }
      for (const [key] of pqp) {
        const level = Number(key)
        if (level === 0 || level > levels) {
          throw this.#invalid(`priority queue policy must have priority level in range [1, ${levels}] for ${name}`,
            pqpEntries?.get(key))
        }
      }
    }
    const defaultPolicy = obj(db, 'default_queue_policy')
    if (bool(db, 'preserve_ordering')) {
      if (levels > 1) {
        throw this.#invalid(`Only one priority level is allowed when 'preserve_ordering' is true for ${name}`,
          this.#pos(db, 'priority_levels'))
      }
      const delays = (p: JsonObject | undefined): boolean =>
        p !== undefined && str(p, 'timeout_action') === 'DELAY' && num(p, 'default_timeout_microseconds') !== 0
      const offender = delays(defaultPolicy) ? defaultPolicy : pqp.find(([, p]) => delays(p))?.[1]
      if (offender !== undefined) {
        throw this.#invalid(`Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for ${name}`,
          this.#pos(offender, 'timeout_action'))
      }
    }
    return {
      preferred_batch_size: preferred.length === 0 && maxBatchSize > 0 ? [maxBatchSize] : [...preferred],
      max_queue_delay_microseconds: num(db, 'max_queue_delay_microseconds'),
      preserve_ordering: bool(db, 'preserve_ordering'),
      priority_levels: levels,
      default_priority_level: defaultLevel,
      default_queue_policy: this.#queuePolicy(defaultPolicy),
      priority_queue_policy: Object.fromEntries(pqp.map(([k, p]) => [k, this.#queuePolicy(p)]))
    }
  }

  /** Checks Triton applies to sequence batching that Flotilla can state without running it; normalises as Triton. */
  #sequenceBatching (sb: JsonObject | undefined, maxBatchSize: number): JsonObject | undefined {
    if (sb === undefined) return undefined
    const name = this.#name
    const cache = obj(this.#raw, 'response_cache')
    if (cache !== undefined && bool(cache, 'enable')) {
      throw this.#invalid(`Response Cache does not currently support model ${name} with sequence batching ` +
        'scheduler. Please disable the response cache.', this.#pos(this.#raw, 'response_cache'))
    }
    const oldest = obj(sb, 'oldest')
    const out: JsonObject = { ...sb }
    if (oldest !== undefined) {
      const preferred = nums(oldest, 'preferred_batch_size')
      preferred.forEach((size, i) => {
        if (size <= 0) {
          throw this.#invalid(`sequence batching preferred batch size must be positive for ${name}`,
            this.#pos(oldest, 'preferred_batch_size', i))
        }
        if (size > maxBatchSize) {
          throw this.#invalid(`sequence batching preferred batch size must be <= max batch size for ${name}`,
            this.#pos(oldest, 'preferred_batch_size', i))
        }
      })
      if (preferred.length === 0 && maxBatchSize > 0) out.oldest = { ...oldest, preferred_batch_size: [maxBatchSize] }
    }
    const direct = obj(sb, 'direct')
    if (direct !== undefined) {
      const utilization = direct.minimum_slot_utilization
      if (typeof utilization !== 'number' || utilization < 0 || utilization > 1) {
        throw this.#invalid(`sequence batching minimum slot utilization must be in range (0.0, 1.0] for ${name}`,
          this.#pos(direct, 'minimum_slot_utilization'))
      }
    }
    if (num(sb, 'max_sequence_idle_microseconds') === 0) {
      out.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
    }
    return out
  }

  #checkEnsemble (platform: string, ensemble: JsonObject | undefined): void {
    const raw = this.#raw
    const name = this.#name
    if (ensemble === undefined) {
      if (platform === ENSEMBLE_PLATFORM) {
        throw this.#invalid(`ensemble scheduling must be set for ensemble ${name} whose platform is ${ENSEMBLE_PLATFORM}`,
          this.#pos(raw, 'platform'))
      }
      return
    }
    if (platform !== ENSEMBLE_PLATFORM) {
      throw this.#invalid(`ensemble scheduling cannot be set for model '${name}' whose platform is not ` +
        ENSEMBLE_PLATFORM, this.#pos(raw, 'ensemble_scheduling'))
    }
    if (objs(raw, 'instance_group').length !== 0) {
      throw this.#invalid(`instance group should not be specified for ensemble '${name}'`,
        this.#pos(raw, 'instance_group'))
    }
    if (obj(raw, 'optimization') !== undefined) {
      throw this.#invalid(`optimization should not be specified for ensemble '${name}'`, this.#pos(raw, 'optimization'))
    }
    if (objs(raw, 'model_warmup').length !== 0) {
      throw this.#invalid(`model_warmup can not be specified for ensemble '${name}'`, this.#pos(raw, 'model_warmup'))
    }
    const steps = objs(ensemble, 'step')
    if (steps.length === 0) {
      throw this.#invalid(`must specify 'step' for ensemble '${name}'`, this.#pos(raw, 'ensemble_scheduling'))
    }
    steps.forEach((step, i) => {
      for (const [field, empty] of [
        ['model_name', str(step, 'model_name') === ''],
        ['input_map', Object.keys(step.input_map as JsonObject).length === 0],
        ['output_map', Object.keys(step.output_map as JsonObject).length === 0]
      ] as const) {
        if (empty) {
          throw this.#invalid(`must specify '${field}' in step ${i} of ensemble '${name}'`, this.#pos(step))
        }
      }
    })
  }

  #checkTransactionPolicy (): void {
    const transaction = obj(this.#raw, 'model_transaction_policy')
    const cache = obj(this.#raw, 'response_cache')
    if (transaction !== undefined && bool(transaction, 'decoupled') && cache !== undefined && bool(cache, 'enable')) {
      throw this.#invalid(`Response Cache does not currently support model ${this.#name} with 'decoupled' ` +
        'transaction policy. Please disable the response cache.', this.#pos(this.#raw, 'response_cache'))
    }
  }

  #checkModelMetrics (metrics: JsonObject | undefined): void {
    if (metrics === undefined) return
    for (const control of objs(metrics, 'metric_control')) {
      const identifier = obj(control, 'metric_identifier')
      if (identifier === undefined) {
        throw this.#invalid("metric control must specify 'metric_identifier'", this.#pos(control))
      }
      if (str(identifier, 'family') === '') {
        throw this.#invalid("metric identifier must specify non-empty 'family'", this.#pos(identifier))
      }
      const histogram = obj(control, 'histogram_options')
      if (histogram === undefined) {
        throw this.#invalid("metric control must specify 'histogram_options'", this.#pos(control))
      }
      if ((histogram.buckets as Json[]).length === 0) {
        throw this.#invalid("histogram options must specify non-empty 'buckets'", this.#pos(histogram))
      }
    }
  }

  /** Triton's `ValidateIOShape`, in its order, with its messages; `kind` is `input` or `output`. */
  #checkIOShape (io: JsonObject, kind: 'input' | 'output', maxBatchSize: number): void {
    const model = this.#name
    const ioName = str(io, 'name')
    const fail = (msg: string, pos: PbPosition | undefined): FlotillaError =>
      this.#invalid(`${msg} for ${model}`, pos ?? this.#pos(io))
    if (ioName === '') throw fail(`model ${kind} must specify 'name'`, undefined)
    const prefix = `model ${kind} '${ioName}'`
    if (str(io, 'data_type') === 'TYPE_INVALID') throw fail(`${prefix} must specify 'data_type'`, undefined)
    const dims = nums(io, 'dims')
    if (dims.length === 0) throw fail(`${prefix} must specify 'dims'`, undefined)
    const reshape = obj(io, 'reshape')
    const shape = reshape === undefined ? [] : nums(reshape, 'shape')
    if (reshape !== undefined && shape.length === 0 && maxBatchSize === 0) {
      throw fail(`${prefix} cannot have empty reshape for non-batching model as scalar tensors are not supported`,
        this.#pos(io, 'reshape'))
    }
    dims.forEach((d, i) => {
      if (d < 1 && d !== -1) {
        throw fail(`${prefix} dimension must be integer >= 1, or -1 to indicate a variable-size dimension`,
          this.#pos(io, 'dims', i))
      }
    })
    if (reshape === undefined) return
    shape.forEach((d, i) => {
      if (d < 1 && d !== -1) {
        throw fail(`${prefix} reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension`,
          this.#pos(reshape, 'shape', i))
      }
    })
    const dimsCount = elementCount(dims)
    const reshapeCount = elementCount(shape)
    const at = this.#pos(io, 'reshape')
    // Equal counts, or an empty reshape of a one-element tensor.
    if (dimsCount !== reshapeCount && (reshapeCount !== 0 || dimsCount !== 1)) {
      throw fail(`${prefix} has different size for dims and reshape`, at)
    }
    if (dimsCount === -1) {
      // With variable dims, each run of fixed dims between -1s must hold the same number of elements.
      const a = runProducts(dims)
      const b = runProducts(shape)
      if (a.length !== b.length) {
        throw fail(`${prefix} has different number of variable-size dimensions for dims and reshape`, at)
      }
      if (a.some((p, i) => p !== b[i])) throw fail(`${prefix} has different size for dims and reshape`, at)
    }
  }

  #checkNonLinearIO (io: JsonObject, kind: 'input' | 'output', platform: string): void {
    if (!bool(io, 'is_non_linear_format_io')) return
    const at = this.#pos(io, 'is_non_linear_format_io')
    if (platform !== TENSORRT_PLATFORM) {
      throw this.#invalid(`Non-linear IO format is only supported for the TensorRT platform for ${this.#name}`, at)
    }
    if (nums(io, 'dims').length !== 3) {
      throw this.#invalid(`Non-linear IO format ${kind} requires 3 dims for ${this.#name}`, at)
    }
  }

  #input (io: JsonObject, index: number, maxBatchSize: number, platform: string): ModelInput {
    this.#checkIOShape(io, 'input', maxBatchSize)
    const format = str(io, 'format') as TensorFormat
    if (format !== 'FORMAT_NONE' && nums(io, 'dims').length !== 3) {
      throw this.#invalid(`model input NHWC/NCHW require 3 dims for ${this.#name}`, this.#pos(io, 'format'))
    }
    this.#checkNonLinearIO(io, 'input', platform)
    this.#checkUnique(io, 'input', index)
    const input: ModelInput = {
      name: str(io, 'name'),
      data_type: str(io, 'data_type') as ConfigDataType,
      format,
      dims: [...nums(io, 'dims')],
      is_shape_tensor: bool(io, 'is_shape_tensor'),
      allow_ragged_batch: bool(io, 'allow_ragged_batch'),
      optional: bool(io, 'optional')
    }
    const reshape = obj(io, 'reshape')
    if (reshape !== undefined) input.reshape = { shape: [...nums(reshape, 'shape')] }
    return input
  }

  #output (io: JsonObject, index: number, maxBatchSize: number, platform: string): ModelOutput {
    this.#checkIOShape(io, 'output', maxBatchSize)
    this.#checkNonLinearIO(io, 'output', platform)
    this.#checkUnique(io, 'output', index)
    const output: ModelOutput = {
      name: str(io, 'name'),
      data_type: str(io, 'data_type') as ConfigDataType,
      dims: [...nums(io, 'dims')],
      label_filename: str(io, 'label_filename'),
      is_shape_tensor: bool(io, 'is_shape_tensor')
    }
    const reshape = obj(io, 'reshape')
    if (reshape !== undefined) output.reshape = { shape: [...nums(reshape, 'shape')] }
    return output
  }

  #checkUnique (io: JsonObject, kind: 'input' | 'output', index: number): void {
    const ioName = str(io, 'name')
    if (objs(this.#raw, kind).findIndex(other => str(other, 'name') === ioName) !== index) {
      throw this.#invalid(`model ${kind} '${ioName}' is declared more than once for ${this.#name}; ` +
        `${kind} names must be unique`, this.#pos(io))
    }
  }

  /** Triton's `ValidateBatchIO`. */
  #checkBatchIO (inputs: ModelInput[], outputs: ModelOutput[]): void {
    const model = this.#name
    const inputNames = new Set(inputs.map(i => i.name))
    const outputNames = new Set(outputs.map(o => o.name))
    for (const [kind, list] of [['input', objs(this.#raw, 'batch_input')], ['output', objs(this.#raw, 'batch_output')]] as const) {
      for (const b of list) {
        const sources = b.source_input as string[]
        if (sources.length !== 1) {
          throw this.#invalid(`batch ${kind} kind '${str(b, 'kind')}' expects 1 source input, got ${sources.length} ` +
            `for ${model}`, this.#pos(b))
        }
        if (kind === 'input' && str(b, 'data_type') !== 'TYPE_INT32' && str(b, 'data_type') !== 'TYPE_FP32') {
          throw this.#invalid(`batch input data type must be TYPE_INT32 or TYPE_FP32 for ${model}`,
            this.#pos(b, 'data_type'))
        }
        for (const source of sources) {
          if (!inputNames.has(source)) {
            throw this.#invalid(`unknown source input name '${source}' for ${model}`, this.#pos(b, 'source_input'))
          }
        }
        if (kind === 'output') {
          const seen = new Set<string>()
          for (const target of b.target_name as string[]) {
            if (!outputNames.has(target)) {
              throw this.#invalid(`unknown target output name '${target}' for ${model}`, this.#pos(b, 'target_name'))
            }
            if (seen.has(target)) {
              throw this.#invalid(`target output name '${target}' can only be specified once for ${model}`,
                this.#pos(b, 'target_name'))
            }
            seen.add(target)
          }
        }
      }
    }
  }

  #instanceGroups (platform: string): InstanceGroup[] {
    const model = this.#name
    const groups = objs(this.#raw, 'instance_group')
    if (groups.length === 0) return [{ name: model, kind: 'KIND_CPU', count: 1, gpus: [] }]
    return groups.map((g, i): InstanceGroup => {
      const written = str(g, 'name')
      const name = written !== '' ? written : groups.length === 1 ? model : `${model}_${i}`
      const kind = str(g, 'kind') as InstanceKind
      const gpus = nums(g, 'gpus')
      const prefix = `instance group ${name} of model ${model}`
      gpus.forEach((id, j) => {
        if (id < 0) {
          throw this.#invalid(`${prefix} specifies invalid gpu id ${id}; gpu ids are non-negative`,
            this.#pos(g, 'gpus', j))
        }
      })
      if ((kind === 'KIND_CPU' || kind === 'KIND_MODEL') && gpus.length > 0) {
        throw this.#invalid(`${prefix} has kind ${kind} but specifies one or more GPUs`, this.#pos(g, 'gpus'))
      }
      if ((g.profile as string[]).length > 0 && platform !== TENSORRT_PLATFORM) {
        throw this.#invalid(`${prefix} and platform ${platform} specifies profile field which is only supported ` +
          'for TensorRT models', this.#pos(g, 'profile'))
      }
      const count = num(g, 'count')
      // Triton replaces a count below 1 by the default (qa L0_model_update test_rm_instance_to_zero).
      return { name, kind, count: count < 1 ? 1 : count, gpus: [...gpus] }
    })
  }

  #warmup (w: JsonObject, maxBatchSize: number): ModelWarmup {
    const model = this.#name
    const warmupName = str(w, 'name')
    const batchSize = num(w, 'batch_size')
    const inputs = entries(w, 'inputs')
    const inputEntries = this.#conv.mapEntries.get(w.inputs as JsonObject)
    // Triton skips a sample with batch_size 0 entirely, so its contents are never checked.
    if (batchSize !== 0) {
      if (maxBatchSize === 0 && batchSize !== 1) {
        throw this.#invalid(`model_warmup '${warmupName}' has batch_size ${batchSize}, but a non-batching model ` +
          `(max_batch_size 0) can only warm up with batch_size 1 for ${model}`, this.#pos(w, 'batch_size'))
      }
      if (maxBatchSize > 0 && batchSize > maxBatchSize) {
        throw this.#invalid(`model_warmup '${warmupName}' has batch_size ${batchSize}, larger than max_batch_size ` +
          `${maxBatchSize} for ${model}`, this.#pos(w, 'batch_size'))
      }
      for (const [inputName, input] of inputs) {
        const at = this.#pos(input) ?? inputEntries?.get(inputName)
        if (str(input, 'data_type') === 'TYPE_INVALID') {
          throw this.#invalid(`warmup setting expects input '${inputName}' to specify 'data_type'`, at)
        }
        nums(input, 'dims').forEach((d, i) => {
          if (d === -1) {
            throw this.#invalid('warmup setting expects all variable-size dimensions are specified for input ' +
              `'${inputName}'`, this.#pos(input, 'dims', i))
          }
          if (d < 0) {
            throw this.#invalid(`warmup setting expects dimensions >= 0 for input '${inputName}'`,
              this.#pos(input, 'dims', i))
          }
        })
        if (!('zero_data' in input) && !('random_data' in input) && !('input_data_file' in input)) {
          throw this.#invalid(`warmup setting expects input '${inputName}' to have input_data_type set`, at)
        }
      }
    }
    return {
      name: warmupName,
      batch_size: batchSize,
      inputs: Object.fromEntries(inputs.map(([k, input]) => [k, warmupInput(input)])),
      count: num(w, 'count')
    }
  }

  #passthrough (ensemble: boolean, sequenceBatching: JsonObject | undefined): Record<string, unknown> {
    const raw = this.#raw
    const out: Record<string, unknown> = {}
    for (const field of PASSTHROUGH_FIELDS) {
      const value = raw[field]
      if (value !== undefined) out[field] = value
    }
    if (sequenceBatching !== undefined) out.sequence_batching = sequenceBatching
    // Triton's NormalizeModelConfig turns pinned-memory buffers on for every non-ensemble model.
    if (!ensemble) {
      const optimization = obj(raw, 'optimization') ?? this.#conv.empty(OPTIMIZATION, { line: 0, column: 0 })
      const normalised: JsonObject = {}
      for (const key of OPTIMIZATION.fields.keys()) {
        const value = key === 'input_pinned_memory' || key === 'output_pinned_memory'
          ? optimization[key] ?? { enable: true }
          : optimization[key]
        if (value !== undefined) normalised[key] = value
      }
      out.optimization = normalised
    }
    return out
  }
}

function warmupInput (input: JsonObject): WarmupInput {
  const out: WarmupInput = { data_type: str(input, 'data_type') as ConfigDataType, dims: [...nums(input, 'dims')] }
  if ('zero_data' in input) out.zero_data = bool(input, 'zero_data')
  if ('random_data' in input) out.random_data = bool(input, 'random_data')
  if ('input_data_file' in input) out.input_data_file = str(input, 'input_data_file')
  return out
}

/** Triton's `GetElementCount`: -1 when any dim is variable, 0 for no dims. */
function elementCount (dims: readonly number[]): number {
  if (dims.length === 0) return 0
  let count = 1
  for (const d of dims) {
    if (d === -1) return -1
    count *= d
  }
  return count
}

function runProducts (dims: readonly number[]): number[] {
  const out: number[] = []
  let current = 1
  for (const d of dims) {
    if (d === -1) {
      out.push(current)
      current = 1
    } else {
      current *= d
    }
  }
  out.push(current)
  return out
}

// ---------------------------------------------------------------------------------------------------------------
// Public API.

/**
 * Parses, converts, validates and normalises a config.pbtxt.
 *
 * @param text the file contents
 * @param options `file` prefixes every message; `modelName` is the model's directory name, which `name` must
 *   equal when given (and which fills it when not)
 * @returns the normalised config: every field present, defaults applied (see {@link ModelConfig})
 * @throws FlotillaError `WRK_ERR_CONFIG_PARSE` for text-format and schema errors (unknown field, wrong kind of value,
 *   bad enum, out-of-range number, repeated singular field, two oneof members), `WRK_ERR_CONFIG_INVALID` for
 *   Triton's semantic checks; the message starts with `file:line:col: ` when the problem has a place in the file,
 *   `file: ` otherwise
 */
export function parseModelConfig (text: string, options: ParseModelConfigOptions): ModelConfig {
  const tree = parsePbtxt(text, options.file)
  const conv = new Converter(options.file, tree)
  const raw = conv.message(tree, MODEL_CONFIG)
  return new Validator(conv, raw, options.modelName).build()
}

/**
 * The config endpoint's body (`GET /v2/models/{m}/config`): compact protobuf JSON in Triton's style. Field names
 * and order as in model_config.proto, enums by name, 64-bit integers as numbers, every primitive/repeated/map field
 * printed, unset sub-messages omitted, `passthrough` fields merged back in their places.
 */
export function modelConfigToJson (config: ModelConfig): string {
  const pt = config.passthrough
  const out: Record<string, unknown> = {
    name: config.name,
    platform: config.platform,
    backend: config.backend,
    runtime: config.runtime,
    version_policy: config.version_policy,
    max_batch_size: config.max_batch_size,
    input: config.input.map(inputJson),
    output: config.output.map(outputJson),
    batch_input: pt.batch_input ?? [],
    batch_output: pt.batch_output ?? []
  }
  if (pt.optimization !== undefined) out.optimization = pt.optimization
  if (config.dynamic_batching !== undefined) out.dynamic_batching = dynamicBatchingJson(config.dynamic_batching)
  if (pt.sequence_batching !== undefined) out.sequence_batching = pt.sequence_batching
  if (pt.ensemble_scheduling !== undefined) out.ensemble_scheduling = pt.ensemble_scheduling
  out.instance_group = config.instance_group.map(g => ({ name: g.name, kind: g.kind, count: g.count, gpus: g.gpus }))
  out.default_model_filename = config.default_model_filename
  out.cc_model_filenames = pt.cc_model_filenames ?? {}
  out.metric_tags = config.metric_tags
  out.parameters = config.parameters
  out.model_warmup = config.model_warmup.map(warmupJson)
  if (pt.model_operations !== undefined) out.model_operations = pt.model_operations
  if (config.model_transaction_policy !== undefined) out.model_transaction_policy = config.model_transaction_policy
  if (pt.model_repository_agents !== undefined) out.model_repository_agents = pt.model_repository_agents
  if (config.response_cache !== undefined) out.response_cache = config.response_cache
  if (pt.model_metrics !== undefined) out.model_metrics = pt.model_metrics
  for (const [key, value] of Object.entries(pt)) {
    if (!(key in out)) out[key] = value
  }
  return JSON.stringify(out)
}

function reshapeJson (r: ModelTensorReshape): ModelTensorReshape {
  return { shape: r.shape }
}

function inputJson (i: ModelInput): Record<string, unknown> {
  const out: Record<string, unknown> = { name: i.name, data_type: i.data_type, format: i.format, dims: i.dims }
  if (i.reshape !== undefined) out.reshape = reshapeJson(i.reshape)
  out.is_shape_tensor = i.is_shape_tensor
  out.allow_ragged_batch = i.allow_ragged_batch
  out.optional = i.optional
  return out
}

function outputJson (o: ModelOutput): Record<string, unknown> {
  const out: Record<string, unknown> = { name: o.name, data_type: o.data_type, dims: o.dims }
  if (o.reshape !== undefined) out.reshape = reshapeJson(o.reshape)
  out.label_filename = o.label_filename
  out.is_shape_tensor = o.is_shape_tensor
  return out
}

function queuePolicyJson (p: QueuePolicy): QueuePolicy {
  return {
    timeout_action: p.timeout_action,
    default_timeout_microseconds: p.default_timeout_microseconds,
    allow_timeout_override: p.allow_timeout_override,
    max_queue_size: p.max_queue_size
  }
}

function dynamicBatchingJson (db: DynamicBatching): Record<string, unknown> {
  const out: Record<string, unknown> = {
    preferred_batch_size: db.preferred_batch_size,
    max_queue_delay_microseconds: db.max_queue_delay_microseconds,
    preserve_ordering: db.preserve_ordering,
    priority_levels: db.priority_levels,
    default_priority_level: db.default_priority_level
  }
  const p = db.default_queue_policy
  // Normalisation always fills default_queue_policy; Triton prints it only when the config set it, and a policy
  // equal to the defaults is the closest we can tell to "not set".
  if (p.timeout_action !== 'REJECT' || p.default_timeout_microseconds !== 0 || p.allow_timeout_override ||
      p.max_queue_size !== 0) {
    out.default_queue_policy = queuePolicyJson(p)
  }
  out.priority_queue_policy = Object.fromEntries(
    Object.entries(db.priority_queue_policy).map(([k, v]) => [k, queuePolicyJson(v)]))
  return out
}

function warmupJson (w: ModelWarmup): Record<string, unknown> {
  const inputs: Record<string, unknown> = {}
  for (const [k, i] of Object.entries(w.inputs)) {
    const input: Record<string, unknown> = { data_type: i.data_type, dims: i.dims }
    if (i.zero_data !== undefined) input.zero_data = i.zero_data
    if (i.random_data !== undefined) input.random_data = i.random_data
    if (i.input_data_file !== undefined) input.input_data_file = i.input_data_file
    inputs[k] = input
  }
  return { name: w.name, batch_size: w.batch_size, inputs, count: w.count }
}
