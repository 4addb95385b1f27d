/**
 * A model's configuration after parsing config.pbtxt, validating and normalising it: the shape of Triton's
 * `inference.ModelConfig` (common/protobuf/model_config.proto), with proto field names kept in snake_case so the
 * config endpoint can print it as Triton does. Every field a Flotilla component reads is present after
 * normalisation; fields Triton accepts that Flotilla does not act on yet are kept verbatim in `passthrough`.
 */
import { type ConfigTypeName } from '../../common/protocol/datatypes.ts'

/** Config `data_type` enum names (model_config.proto DataType): the datatype table's, and TYPE_INVALID. */
export type ConfigDataType = 'TYPE_INVALID' | ConfigTypeName

export type TensorFormat = 'FORMAT_NONE' | 'FORMAT_NHWC' | 'FORMAT_NCHW'

export interface ModelTensorReshape {
  shape: number[]
}

export interface ModelInput {
  name: string
  data_type: ConfigDataType
  format: TensorFormat
  /** Without the batch dimension when max_batch_size > 0; -1 marks a variable-size dimension. */
  dims: number[]
  reshape?: ModelTensorReshape
  is_shape_tensor: boolean
  allow_ragged_batch: boolean
  optional: boolean
}

export interface ModelOutput {
  name: string
  data_type: ConfigDataType
  dims: number[]
  reshape?: ModelTensorReshape
  label_filename: string
  is_shape_tensor: boolean
}

/** Exactly one of the three keys is set. Default after normalisation: `{ latest: { num_versions: 1 } }`. */
export type VersionPolicy =
  | { latest: { num_versions: number } }
  | { all: Record<string, never> }
  | { specific: { versions: number[] } }

export type InstanceKind = 'KIND_AUTO' | 'KIND_GPU' | 'KIND_CPU' | 'KIND_MODEL'

export interface InstanceGroup {
  /** `<model>` for a single unnamed group, `<model>_<i>` when several are unnamed. */
  name: string
  kind: InstanceKind
  /** At least 1 after normalisation (Triton replaces count < 1 by the default, 1). */
  count: number
  gpus: number[]
}

export type TimeoutAction = 'REJECT' | 'DELAY'

export interface QueuePolicy {
  timeout_action: TimeoutAction
  default_timeout_microseconds: number
  allow_timeout_override: boolean
  max_queue_size: number
}

export interface DynamicBatching {
  /** Normalised: empty with max_batch_size > 0 becomes `[max_batch_size]`. */
  preferred_batch_size: number[]
  max_queue_delay_microseconds: number
  preserve_ordering: boolean
  priority_levels: number
  default_priority_level: number
  default_queue_policy: QueuePolicy
  /** Keys are priority levels as decimal strings, as protobuf JSON prints map keys. */
  priority_queue_policy: Record<string, QueuePolicy>
}

export interface WarmupInput {
  data_type: ConfigDataType
  dims: number[]
  zero_data?: boolean
  random_data?: boolean
  input_data_file?: string
}

export interface ModelWarmup {
  name: string
  batch_size: number
  inputs: Record<string, WarmupInput>
  count: number
}

/** `parameters { key: "fixed_ms" value: { string_value: "5" } }` */
export interface ModelParameter {
  string_value: string
}

export interface ModelConfig {
  name: string
  platform: string
  backend: string
  runtime: string
  version_policy: VersionPolicy
  max_batch_size: number
  input: ModelInput[]
  output: ModelOutput[]
  instance_group: InstanceGroup[]
  dynamic_batching?: DynamicBatching
  default_model_filename: string
  parameters: Record<string, ModelParameter>
  model_warmup: ModelWarmup[]
  metric_tags: Record<string, string>
  response_cache?: { enable: boolean }
  model_transaction_policy?: { decoupled: boolean }
  /**
   * ModelConfig fields Triton defines that Flotilla parses but does not act on yet (optimization,
   * sequence_batching, ensemble_scheduling, batch_input, batch_output, cc_model_filenames, model_operations,
   * model_repository_agents, model_metrics), as plain objects in protobuf-JSON shape.
   */
  passthrough: Record<string, unknown>
}
