/**
 * The part of onnx.proto (upstream `onnx/onnx.proto3`, same field numbers) the native backend reads and the model
 * builder writes, parsed once with protobufjs. Fields outside this subset are skipped by the decoder, as protobuf
 * does; what the loader needs and cannot find (external data, sparse initializers) it refuses by name.
 */
import protobuf from 'protobufjs'

const ONNX_SUBSET = `
syntax = "proto3";
package onnx;
message OperatorSetIdProto { string domain = 1; int64 version = 2; }
message StringStringEntryProto { string key = 1; string value = 2; }
message AttributeProto {
  string name = 1; float f = 2; int64 i = 3; bytes s = 4; TensorProto t = 5; GraphProto g = 6;
  repeated float floats = 7; repeated int64 ints = 8; repeated bytes strings = 9; repeated TensorProto tensors = 10;
  int32 type = 20; string ref_attr_name = 21;
}
message NodeProto {
  repeated string input = 1; repeated string output = 2; string name = 3; string op_type = 4;
  repeated AttributeProto attribute = 5; string doc_string = 6; string domain = 7;
}
message TensorShapeProto {
  message Dimension { oneof value { int64 dim_value = 1; string dim_param = 2; } string denotation = 3; }
  repeated Dimension dim = 1;
}
message TypeProto {
  message Tensor { int32 elem_type = 1; TensorShapeProto shape = 2; }
  oneof value { Tensor tensor_type = 1; }
}
message ValueInfoProto { string name = 1; TypeProto type = 2; string doc_string = 3; }
message TensorProto {
  repeated int64 dims = 1; int32 data_type = 2;
  repeated float float_data = 4 [packed = true]; repeated int32 int32_data = 5 [packed = true];
  repeated bytes string_data = 6; repeated int64 int64_data = 7 [packed = true];
  string name = 8; bytes raw_data = 9; repeated double double_data = 10 [packed = true];
  repeated uint64 uint64_data = 11 [packed = true];
  repeated StringStringEntryProto external_data = 13; int32 data_location = 14;
}
message GraphProto {
  repeated NodeProto node = 1; string name = 2; repeated TensorProto initializer = 5; string doc_string = 10;
  repeated ValueInfoProto input = 11; repeated ValueInfoProto output = 12; repeated ValueInfoProto value_info = 13;
}
message ModelProto {
  int64 ir_version = 1; string producer_name = 2; string producer_version = 3; string domain = 4;
  int64 model_version = 5; string doc_string = 6; GraphProto graph = 7; repeated OperatorSetIdProto opset_import = 8;
}
`

const root = protobuf.parse(ONNX_SUBSET, { keepCase: false }).root

/** onnx.ModelProto; decode with `ModelProto.decode(bytes)` and `ModelProto.toObject(msg, { longs: Number, ... })`. */
export const ModelProto = root.lookupType('onnx.ModelProto')

/** TensorProto.DataType values the backends know. */
export const OnnxDataType = {
  FLOAT: 1,
  UINT8: 2,
  INT8: 3,
  INT32: 6,
  INT64: 7,
  BOOL: 9,
  FLOAT16: 10,
  DOUBLE: 11,
  BFLOAT16: 16
} as const

/** AttributeProto.AttributeType values. */
export const OnnxAttributeType = {
  FLOAT: 1,
  INT: 2,
  STRING: 3,
  TENSOR: 4,
  GRAPH: 5,
  FLOATS: 6,
  INTS: 7,
  STRINGS: 8
} as const

/** TensorProto.DataLocation.EXTERNAL: the weights live in a side file, which the native loader does not read. */
export const ONNX_DATA_LOCATION_EXTERNAL = 1

// Plain-object shapes of the decoded messages (protobufjs toObject with longs as Number, bytes as Uint8Array).
export interface OnnxDimension { dimValue?: number, dimParam?: string }
export interface OnnxValueInfo {
  name?: string
  type?: { tensorType?: { elemType?: number, shape?: { dim?: OnnxDimension[] } } }
}
export interface OnnxTensor {
  dims?: number[]
  dataType?: number
  floatData?: number[]
  int32Data?: number[]
  int64Data?: number[]
  doubleData?: number[]
  uint64Data?: number[]
  name?: string
  rawData?: Uint8Array
  externalData?: Array<{ key?: string, value?: string }>
  dataLocation?: number
}
export interface OnnxAttribute {
  name?: string
  f?: number
  i?: number
  s?: Uint8Array
  t?: OnnxTensor
  floats?: number[]
  ints?: number[]
  strings?: Uint8Array[]
  type?: number
}
export interface OnnxNode {
  input?: string[]
  output?: string[]
  name?: string
  opType?: string
  attribute?: OnnxAttribute[]
  domain?: string
}
export interface OnnxGraph {
  node?: OnnxNode[]
  name?: string
  initializer?: OnnxTensor[]
  input?: OnnxValueInfo[]
  output?: OnnxValueInfo[]
  valueInfo?: OnnxValueInfo[]
}
export interface OnnxModel {
  irVersion?: number
  producerName?: string
  graph?: OnnxGraph
  opsetImport?: Array<{ domain?: string, version?: number }>
}

/** Decodes model bytes into plain objects; throws protobufjs's error on bytes that are not a ModelProto. */
export function decodeOnnxModel (bytes: Uint8Array): OnnxModel {
  const message = ModelProto.decode(bytes)
  return ModelProto.toObject(message, { longs: Number, bytes: Uint8Array, defaults: false, arrays: true }) as OnnxModel
}

/** Encodes a model given as plain objects (the builder's output). */
export function encodeOnnxModel (model: OnnxModel): Uint8Array {
  const problem = ModelProto.verify(model)
  if (problem !== null) throw new Error(`invalid ONNX model object: ${problem}`)
  return ModelProto.encode(ModelProto.fromObject(model)).finish()
}
