/**
 * Triton's gRPC services as grpc-js definitions, built once from Flotilla's .proto files (grpc_service.proto,
 * model_config.proto, health.proto in this folder): `inference.GRPCInferenceService`, `grpc.health.v1.Health`,
 * server reflection that describes both, and clients for tests and load generators. Both tiers serve these; the
 * behaviour behind each RPC is theirs (grpc-codec.ts turns messages into Flotilla's types and back).
 *
 * Why protobufjs directly rather than @grpc/proto-loader:
 * - ModelInfer is the hot path. Its messages go through protobufjs's generated decoder and encoder with no
 *   `toObject`/`fromObject` pass, so `raw_input_contents` arrive as Buffer views into the received message.
 * - 64-bit integers: protobufjs makes a `Long` for each (or a rounded number, with proto-loader's `longs: Number`).
 *   Our reader returns an exact `number` when the value fits in ±(2^53 − 1) and a `bigint` beyond, and our writer
 *   takes both, for every message; no `Long` reaches callers (messages.ts).
 * - Reflection: proto-loader's descriptors merge the files of one package into one file named after the package
 *   (`inference.proto`, no `model_config.proto`), and protobufjs names map-entry messages `Parameters` where protoc
 *   writes `ParametersEntry` (Go's protodesc, which grpcurl builds on, checks that name). We serve one descriptor
 *   per .proto file, named as Triton's files are, built the way protoc builds them.
 */
import { basename, join } from 'node:path'
import * as grpc from '@grpc/grpc-js'
import type { PackageDefinition } from '@grpc/proto-loader'
import { ReflectionService } from '@grpc/reflection'
import protobuf from 'protobufjs'
import descriptor from 'protobufjs/ext/descriptor/index.js'
import { PACKAGE_ROOT } from '../../package-root.ts'
import {
  type CudaSharedMemoryRegisterRequest, type CudaSharedMemoryRegisterResponse, type CudaSharedMemoryStatusRequest,
  type CudaSharedMemoryStatusResponse, type CudaSharedMemoryUnregisterRequest,
  type CudaSharedMemoryUnregisterResponse, type HealthCheckRequest, type HealthCheckResponse, type Int64,
  type LogSettingsRequest, type LogSettingsResponse, type ModelConfigRequest, type ModelConfigResponse,
  type ModelInferRequestMessage, type ModelInferResponseMessage, type ModelMetadataRequest,
  type ModelMetadataResponse, type ModelReadyRequest, type ModelReadyResponse, type ModelStatisticsRequest,
  type ModelStatisticsResponse, type ModelStreamInferResponseMessage, type RepositoryIndexRequest,
  type RepositoryIndexResponse, type RepositoryModelLoadRequest, type RepositoryModelLoadResponse,
  type RepositoryModelUnloadRequest, type RepositoryModelUnloadResponse, type ServerLiveRequest,
  type ServerLiveResponse, type ServerMetadataRequest, type ServerMetadataResponse, type ServerReadyRequest,
  type ServerReadyResponse, type SystemSharedMemoryRegisterRequest, type SystemSharedMemoryRegisterResponse,
  type SystemSharedMemoryStatusRequest, type SystemSharedMemoryStatusResponse,
  type SystemSharedMemoryUnregisterRequest, type SystemSharedMemoryUnregisterResponse, type TraceSettingRequest,
  type TraceSettingResponse
} from './messages.ts'

/** Where the .proto files live: the package's own tree, from the sources and from dist/ alike. */
export const PROTO_DIR = join(PACKAGE_ROOT, 'common', 'protocol', 'grpc')

/** The .proto files, by the names Triton gives them (imports and reflection use these names). */
export const PROTO_FILES = ['grpc_service.proto', 'model_config.proto', 'health.proto'] as const

/** Full name of Triton's inference service. */
export const INFERENCE_SERVICE_NAME = 'inference.GRPCInferenceService'

/** Full name of gRPC's standard health service. */
export const HEALTH_SERVICE_NAME = 'grpc.health.v1.Health'

/**
 * Channel options for Flotilla's gRPC clients. Triton accepts and sends messages up to INT32_MAX bytes;
 * grpc-js refuses to receive more than 4 MiB unless told otherwise (its send limit is already unlimited), which
 * would cut off any tensor past a 1024x1024 FP32 image.
 */
export const GRPC_MESSAGE_SIZE_OPTIONS: Readonly<grpc.ChannelOptions> = Object.freeze({
  'grpc.max_receive_message_length': 2147483647,
  'grpc.max_send_message_length': 2147483647,
  // A 4 MiB HTTP/2 window instead of 64 KiB, as our servers set theirs (common/grpc-server.ts): a large answer
  // arrives without a wait for a window update every 64 KiB.
  'grpc-node.flow_control_window': 4 * 1024 * 1024
})

// ---------------------------------------------------------------------------------------------------------------
// 64-bit integers: read as exact numbers or bigints, written from either.

interface ReaderState { buf: Uint8Array, pos: number, len: number }

const TWO_POW_32 = 4294967296
// The two halves of the varint just read. One pair is enough: decoding is synchronous and never re-entrant.
let varintLo = 0
let varintHi = 0

function outOfRange (r: ReaderState): RangeError {
  return new RangeError(`index out of range: ${r.pos} + 1 > ${r.len}`)
}

/** Reads a varint of up to 64 bits into `varintLo`/`varintHi` (protobufjs's own reader keeps this private). */
function readVarint64 (r: ReaderState): void {
  const buf = r.buf
  let lo = 0
  let b = 0
  for (let shift = 0; shift < 28; shift += 7) {
    if (r.pos >= r.len) throw outOfRange(r)
    b = buf[r.pos++] as number
    lo |= (b & 0x7f) << shift
    if (b < 0x80) {
      varintLo = lo >>> 0
      varintHi = 0
      return
    }
  }
  // The fifth byte straddles the halves: 4 bits to the low word, 3 to the high word.
  if (r.pos >= r.len) throw outOfRange(r)
  b = buf[r.pos++] as number
  lo |= (b & 0x0f) << 28
  let hi = (b & 0x7f) >>> 4
  for (let shift = 3; b >= 0x80 && shift < 32; shift += 7) {
    if (r.pos >= r.len) throw outOfRange(r)
    b = buf[r.pos++] as number
    hi |= (b & 0x7f) << shift
  }
  if (b >= 0x80) throw new Error('invalid varint encoding')
  varintLo = lo >>> 0
  varintHi = hi >>> 0
}

function readInt64 (this: ReaderState): Int64 {
  readVarint64(this)
  const lo = varintLo
  const hi = varintHi
  if (hi < 0x200000) return hi * TWO_POW_32 + lo // below 2^53
  if (hi >= 0xffe00000) {
    // Negative with a magnitude up to 2^53: (hi - 2^32) * 2^32 + lo is exact in a double.
    const value = (hi - TWO_POW_32) * TWO_POW_32 + lo
    if (value > -9007199254740992) return value
  }
  return BigInt.asIntN(64, (BigInt(hi) << 32n) | BigInt(lo))
}

function readUint64 (this: ReaderState): Int64 {
  readVarint64(this)
  if (varintHi < 0x200000) return varintHi * TWO_POW_32 + varintLo
  return (BigInt(varintHi) << 32n) | BigInt(varintLo)
}

/**
 * protobufjs's Buffer reader with int64/uint64 read as {@link Int64}. The generated decoders call `reader.int64()`
 * and `reader.uint64()`; protobufjs's typings say those return Long, so the methods are set here rather than
 * overridden in the class body.
 */
class Int64Reader extends protobuf.BufferReader {}
Object.assign(Int64Reader.prototype, { int64: readInt64, uint64: readUint64 })

type WriterInt64 = Parameters<protobuf.Writer['int64']>[0]

/** `{ low, high }` words of a bigint, the form protobufjs's writer takes for 64-bit values. */
function bigintBits (value: bigint): { low: number, high: number } {
  const u = BigInt.asUintN(64, value)
  return { low: Number(u & 0xffffffffn), high: Number(u >> 32n) }
}

/** protobufjs's Buffer writer that also takes bigints for int64/uint64 (its own turns a bigint into 0). */
class Int64Writer extends protobuf.BufferWriter {
  override int64 (value: WriterInt64 | bigint): protobuf.Writer {
    return super.int64(typeof value === 'bigint' ? bigintBits(value) as WriterInt64 : value)
  }

  override uint64 (value: WriterInt64 | bigint): protobuf.Writer {
    return super.uint64(typeof value === 'bigint' ? bigintBits(value) as WriterInt64 : value)
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Message conversion for the RPCs off the hot path.

const INT64_TYPES = new Set(['int64', 'uint64', 'sint64', 'fixed64', 'sfixed64'])
const EMPTY_BYTES = Buffer.alloc(0)

function setOwn (target: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') {
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })
  } else {
    target[key] = value
  }
}

function plainValue (field: protobuf.Field | protobuf.MapField, value: unknown): unknown {
  const resolved = field.resolvedType
  // A map entry may leave its message value out: that is the value's default, an empty message.
  if (resolved instanceof protobuf.Type) return toPlain(resolved, (value ?? resolved.create()) as protobuf.Message)
  if (resolved instanceof protobuf.Enum) return resolved.valuesById[value as number] ?? value
  return value
}

/**
 * A decoded message as a plain object in the shape Triton prints JSON: every scalar, repeated and map field
 * present (defaults included), enums by name, unset sub-messages and oneof members absent.
 */
function toPlain (type: protobuf.Type, message: protobuf.Message): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  const m = message as unknown as Record<string, unknown>
  for (const field of type.fieldsArray) {
    const name = field.name
    const own = Object.hasOwn(m, name)
    const value = m[name]
    if (field.map) {
      const map: Record<string, unknown> = {}
      if (own && value !== null && typeof value === 'object') {
        const entries = value as Record<string, unknown>
        for (const key of Object.keys(entries)) setOwn(map, key, plainValue(field, entries[key]))
      }
      out[name] = map
    } else if (field.repeated) {
      out[name] = own && Array.isArray(value) ? value.map(v => plainValue(field, v)) : []
    } else if (field.partOf !== null) {
      if (own && value !== null && value !== undefined) out[name] = plainValue(field, value)
    } else if (field.resolvedType instanceof protobuf.Type) {
      if (own && value !== null && value !== undefined) out[name] = plainValue(field, value)
    } else if (own) {
      out[name] = plainValue(field, value)
    } else if (INT64_TYPES.has(field.type)) {
      out[name] = 0 // the prototype's default is a Long
    } else if (field.type === 'bytes') {
      out[name] = EMPTY_BYTES
    } else {
      out[name] = plainValue(field, value)
    }
  }
  return out
}

/** Serializer and deserializer of one message type. */
interface MessageCodec {
  serialize (value: unknown): Buffer
  deserialize (bytes: Buffer): unknown
}

/** The hot path: generated code only, message instances out, encode-ready objects in. */
function directCodec (type: protobuf.Type): MessageCodec {
  return {
    serialize: (value) => type.encode(value as protobuf.Message, new Int64Writer()).finish() as Buffer,
    deserialize: (bytes) => type.decode(new Int64Reader(bytes))
  }
}

/** Everything else: enum names and loose values in through `fromObject`, plain objects out. */
function plainCodec (type: protobuf.Type): MessageCodec {
  return {
    serialize: (value) => {
      const message = type.fromObject(value as Record<string, unknown>)
      return type.encode(message, new Int64Writer()).finish() as Buffer
    },
    deserialize: (bytes) => toPlain(type, type.decode(new Int64Reader(bytes)))
  }
}

const DIRECT_TYPES = new Set([
  '.inference.ModelInferRequest', '.inference.ModelInferResponse', '.inference.ModelStreamInferResponse'
])

function lowerFirst (name: string): string {
  return name.charAt(0).toLowerCase() + name.slice(1)
}

function serviceDefinition (service: protobuf.Service): grpc.ServiceDefinition {
  const codecs = new Map<protobuf.Type, MessageCodec>()
  const codecOf = (type: protobuf.Type): MessageCodec => {
    let codec = codecs.get(type)
    if (codec === undefined) {
      codec = DIRECT_TYPES.has(type.fullName) ? directCodec(type) : plainCodec(type)
      codecs.set(type, codec)
    }
    return codec
  }
  const definition: Record<string, grpc.MethodDefinition<unknown, unknown>> = {}
  for (const method of service.methodsArray) {
    method.resolve()
    const request = codecOf(method.resolvedRequestType as protobuf.Type)
    const response = codecOf(method.resolvedResponseType as protobuf.Type)
    definition[method.name] = {
      path: `/${service.fullName.slice(1)}/${method.name}`,
      requestStream: method.requestStream === true,
      responseStream: method.responseStream === true,
      requestSerialize: request.serialize,
      requestDeserialize: request.deserialize,
      responseSerialize: response.serialize,
      responseDeserialize: response.deserialize,
      // grpc-js also accepts handlers (and makes client methods) under this name, as for proto-loader services.
      originalName: lowerFirst(method.name)
    }
  }
  return definition
}

// ---------------------------------------------------------------------------------------------------------------
// Descriptors for reflection, one FileDescriptorProto per .proto file, as protoc writes them.

// FieldDescriptorProto.Type numbers of the scalar types (descriptor.proto).
const SCALAR_TYPE_CODES: Readonly<Record<string, number>> = {
  double: 1, float: 2, int64: 3, uint64: 4, int32: 5, fixed64: 6, fixed32: 7, bool: 8, string: 9, bytes: 12,
  uint32: 13, sfixed32: 15, sfixed64: 16, sint32: 17, sint64: 18
}
const LABEL_OPTIONAL = 1
const LABEL_REPEATED = 3
const TYPE_MESSAGE = 11
const TYPE_ENUM = 14

/** protoc's json_name: snake_case to lowerCamelCase. */
function jsonName (name: string): string {
  return name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase())
}

/** protoc's name for a map field's entry message: `priority_queue_policy` → `PriorityQueuePolicyEntry`. */
function mapEntryName (name: string): string {
  return name.split('_').map(p => p.charAt(0).toUpperCase() + p.slice(1)).join('') + 'Entry'
}

function valueType (type: string, resolved: protobuf.ReflectionObject | null): { type: number, typeName?: string } {
  if (resolved instanceof protobuf.Type) return { type: TYPE_MESSAGE, typeName: resolved.fullName }
  if (resolved instanceof protobuf.Enum) return { type: TYPE_ENUM, typeName: resolved.fullName }
  const code = SCALAR_TYPE_CODES[type]
  if (code === undefined) throw new Error(`no descriptor type for '${type}'`)
  return { type: code }
}

function enumDescriptor (e: protobuf.Enum): object {
  return { name: e.name, value: Object.entries(e.values).map(([name, number]) => ({ name, number })) }
}

function messageDescriptor (t: protobuf.Type): object {
  const field: object[] = []
  const nestedType: object[] = []
  const enumType: object[] = []
  const oneofs = t.oneofsArray
  for (const f of t.fieldsArray) {
    f.resolve()
    if (f instanceof protobuf.MapField) {
      const entry = mapEntryName(f.name)
      nestedType.push({
        name: entry,
        field: [
          { name: 'key', number: 1, label: LABEL_OPTIONAL, jsonName: 'key', ...valueType(f.keyType, null) },
          { name: 'value', number: 2, label: LABEL_OPTIONAL, jsonName: 'value', ...valueType(f.type, f.resolvedType) }
        ],
        options: { mapEntry: true }
      })
      field.push({
        name: f.name, number: f.id, label: LABEL_REPEATED, type: TYPE_MESSAGE, typeName: `${t.fullName}.${entry}`,
        jsonName: jsonName(f.name)
      })
      continue
    }
    const d: Record<string, unknown> = {
      name: f.name,
      number: f.id,
      label: f.repeated ? LABEL_REPEATED : LABEL_OPTIONAL,
      jsonName: jsonName(f.name),
      ...valueType(f.type, f.resolvedType)
    }
    if (f.partOf !== null) d.oneofIndex = oneofs.indexOf(f.partOf)
    field.push(d)
  }
  for (const nested of t.nestedArray) {
    if (nested instanceof protobuf.Type) nestedType.push(messageDescriptor(nested))
    else if (nested instanceof protobuf.Enum) enumType.push(enumDescriptor(nested))
  }
  return { name: t.name, field, nestedType, enumType, oneofDecl: oneofs.map(o => ({ name: o.name })) }
}

function serviceDescriptor (s: protobuf.Service): object {
  return {
    name: s.name,
    method: s.methodsArray.map(m => {
      m.resolve()
      return {
        name: m.name,
        inputType: (m.resolvedRequestType as protobuf.Type).fullName,
        outputType: (m.resolvedResponseType as protobuf.Type).fullName,
        clientStreaming: m.requestStream === true,
        serverStreaming: m.responseStream === true
      }
    })
  }
}

/** The .proto file a (possibly nested) reflection object was declared in. */
function fileOf (obj: protobuf.ReflectionObject): string {
  let top = obj
  while (top.parent instanceof protobuf.Type || top.parent instanceof protobuf.Service) top = top.parent
  return basename(top.filename ?? '')
}

interface FileParts {
  package: string
  dependency: Set<string>
  messageType: object[]
  enumType: object[]
  service: object[]
}

function collectDependencies (t: protobuf.Type, file: string, deps: Set<string>): void {
  for (const f of t.fieldsArray) {
    if (f.resolvedType !== null && fileOf(f.resolvedType) !== file) deps.add(fileOf(f.resolvedType))
  }
  for (const nested of t.nestedArray) if (nested instanceof protobuf.Type) collectDependencies(nested, file, deps)
}

function fileDescriptors (root: protobuf.Root): Buffer[] {
  const files = new Map<string, FileParts>()
  const partsOf = (file: string, pkg: string): FileParts => {
    let parts = files.get(file)
    if (parts === undefined) {
      parts = { package: pkg, dependency: new Set(), messageType: [], enumType: [], service: [] }
      files.set(file, parts)
    }
    return parts
  }
  const visit = (ns: protobuf.NamespaceBase): void => {
    for (const obj of ns.nestedArray) {
      if (obj instanceof protobuf.Type) {
        const file = fileOf(obj)
        const parts = partsOf(file, ns.fullName.slice(1))
        parts.messageType.push(messageDescriptor(obj))
        collectDependencies(obj, file, parts.dependency)
      } else if (obj instanceof protobuf.Enum) {
        partsOf(fileOf(obj), ns.fullName.slice(1)).enumType.push(enumDescriptor(obj))
      } else if (obj instanceof protobuf.Service) {
        const file = fileOf(obj)
        const parts = partsOf(file, ns.fullName.slice(1))
        parts.service.push(serviceDescriptor(obj))
        for (const m of obj.methodsArray) {
          for (const t of [m.resolvedRequestType, m.resolvedResponseType]) {
            if (t !== null && fileOf(t) !== file) parts.dependency.add(fileOf(t))
          }
        }
      } else if (obj instanceof protobuf.Namespace) {
        visit(obj)
      }
    }
  }
  visit(root)
  const out: Buffer[] = []
  for (const name of PROTO_FILES) {
    const parts = files.get(name)
    if (parts === undefined) continue
    const file = descriptor.FileDescriptorProto.fromObject({
      name,
      package: parts.package,
      dependency: [...parts.dependency],
      messageType: parts.messageType,
      enumType: parts.enumType,
      service: parts.service,
      syntax: 'proto3'
    })
    out.push(Buffer.from(descriptor.FileDescriptorProto.encode(file).finish()))
  }
  return out
}

// ---------------------------------------------------------------------------------------------------------------
// Loading, once.

interface Loaded {
  readonly root: protobuf.Root
  readonly inference: grpc.ServiceDefinition
  readonly health: grpc.ServiceDefinition
}

let loaded: Loaded | undefined
let descriptors: Buffer[] | undefined

function load (): Loaded {
  if (loaded !== undefined) return loaded
  const root = new protobuf.Root()
  // keepCase: the protos' snake_case names, as Triton's JSON and clients use them. Imports resolve beside the importer.
  root.loadSync(PROTO_FILES.map(file => join(PROTO_DIR, file)), { keepCase: true })
  root.resolveAll()
  loaded = {
    root,
    inference: serviceDefinition(root.lookupService(INFERENCE_SERVICE_NAME)),
    health: serviceDefinition(root.lookupService(HEALTH_SERVICE_NAME))
  }
  return loaded
}

/** The protobufjs Root with all three files loaded (tests pin field numbers against it). */
export function protoRoot (): protobuf.Root {
  return load().root
}

/**
 * `inference.GRPCInferenceService` as a grpc-js ServiceDefinition, every RPC, loaded once. ModelInfer and
 * ModelStreamInfer (de)serialize with protobufjs's generated code directly: requests arrive as protobufjs message
 * instances whose bytes fields are Buffer views into the received message (not copies), and responses are encoded
 * from plain objects as grpc-codec.ts builds them. Every other RPC takes and gives plain objects (messages.ts).
 * Field names are the protos' snake_case; handlers may be registered as `ModelInfer` or `modelInfer`.
 */
export function inferenceServiceDefinition (): grpc.ServiceDefinition {
  return load().inference
}

/** `grpc.health.v1.Health` (Check and Watch), with the same message handling as the plain RPCs above. */
export function healthServiceDefinition (): grpc.ServiceDefinition {
  return load().health
}

/**
 * Adds gRPC server reflection (grpc.reflection.v1 and v1alpha, from @grpc/reflection) describing the inference and
 * health services, so `grpcurl list` / `grpcurl describe` work without the .proto files. The descriptors are the
 * three files as named here (grpc_service.proto depends on model_config.proto).
 */
export function addReflection (server: grpc.Server): void {
  // @grpc/reflection only reads `fileDescriptorProtos` from the package definition it is given.
  const definition = {
    'flotilla.grpc.descriptors': {
      format: 'Protocol Buffer 3 FileDescriptorProto', type: {}, fileDescriptorProtos: protoFileDescriptors()
    }
  } as unknown as PackageDefinition
  new ReflectionService(definition).addToServer(server)
}

/** The encoded FileDescriptorProtos that reflection serves, in PROTO_FILES order (for tests and tooling). */
export function protoFileDescriptors (): Buffer[] {
  descriptors ??= fileDescriptors(load().root)
  return descriptors
}

// ---------------------------------------------------------------------------------------------------------------
// Typed handlers and clients.

/**
 * The handlers of the inference service, by RPC name (see {@link addInferenceService}). A type alias rather than an
 * interface so that it is assignable to grpc-js's untyped implementation map.
 */
export type InferenceServiceHandlers = {
  ServerLive: grpc.handleUnaryCall<ServerLiveRequest, ServerLiveResponse>
  ServerReady: grpc.handleUnaryCall<ServerReadyRequest, ServerReadyResponse>
  ModelReady: grpc.handleUnaryCall<ModelReadyRequest, ModelReadyResponse>
  ServerMetadata: grpc.handleUnaryCall<ServerMetadataRequest, ServerMetadataResponse>
  ModelMetadata: grpc.handleUnaryCall<ModelMetadataRequest, ModelMetadataResponse>
  ModelInfer: grpc.handleUnaryCall<ModelInferRequestMessage, ModelInferResponseMessage>
  ModelStreamInfer: grpc.handleBidiStreamingCall<ModelInferRequestMessage, ModelStreamInferResponseMessage>
  ModelConfig: grpc.handleUnaryCall<ModelConfigRequest, ModelConfigResponse>
  ModelStatistics: grpc.handleUnaryCall<ModelStatisticsRequest, ModelStatisticsResponse>
  RepositoryIndex: grpc.handleUnaryCall<RepositoryIndexRequest, RepositoryIndexResponse>
  RepositoryModelLoad: grpc.handleUnaryCall<RepositoryModelLoadRequest, RepositoryModelLoadResponse>
  RepositoryModelUnload: grpc.handleUnaryCall<RepositoryModelUnloadRequest, RepositoryModelUnloadResponse>
  SystemSharedMemoryStatus: grpc.handleUnaryCall<SystemSharedMemoryStatusRequest, SystemSharedMemoryStatusResponse>
  SystemSharedMemoryRegister: grpc.handleUnaryCall<SystemSharedMemoryRegisterRequest, SystemSharedMemoryRegisterResponse>
  SystemSharedMemoryUnregister: grpc.handleUnaryCall<SystemSharedMemoryUnregisterRequest, SystemSharedMemoryUnregisterResponse>
  CudaSharedMemoryStatus: grpc.handleUnaryCall<CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse>
  CudaSharedMemoryRegister: grpc.handleUnaryCall<CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse>
  CudaSharedMemoryUnregister: grpc.handleUnaryCall<CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse>
  TraceSetting: grpc.handleUnaryCall<TraceSettingRequest, TraceSettingResponse>
  LogSettings: grpc.handleUnaryCall<LogSettingsRequest, LogSettingsResponse>
}

/** The handlers of `grpc.health.v1.Health` (see {@link addHealthService}). */
export type HealthServiceHandlers = {
  Check: grpc.handleUnaryCall<HealthCheckRequest, HealthCheckResponse>
  Watch: grpc.handleServerStreamingCall<HealthCheckRequest, HealthCheckResponse>
}

/**
 * Registers the inference service's handlers on a server. RPCs left out answer UNIMPLEMENTED (grpc-js's default
 * handler). To fail a call, pass `grpcErrorFrom(err)` (grpc-codec.ts) to the callback, not the error itself: grpc-js
 * turns an error whose `code` is not a number into UNKNOWN.
 */
export function addInferenceService (server: grpc.Server, handlers: Partial<InferenceServiceHandlers>): void {
  server.addService(inferenceServiceDefinition(), handlers as grpc.UntypedServiceImplementation)
}

/** Registers `grpc.health.v1.Health`'s handlers on a server (Watch may be left out: UNIMPLEMENTED). */
export function addHealthService (
  server: grpc.Server, handlers: Pick<HealthServiceHandlers, 'Check'> & Partial<HealthServiceHandlers>
): void {
  server.addService(healthServiceDefinition(), handlers as grpc.UntypedServiceImplementation)
}

/** A unary client method, as grpc-js generic clients take their arguments. */
export interface UnaryMethod<Req, Res> {
  (request: Req, callback: grpc.requestCallback<Res>): grpc.ClientUnaryCall
  (request: Req, metadata: grpc.Metadata, callback: grpc.requestCallback<Res>): grpc.ClientUnaryCall
  (
    request: Req, metadata: grpc.Metadata, options: Partial<grpc.CallOptions>, callback: grpc.requestCallback<Res>
  ): grpc.ClientUnaryCall
}

/** A bidirectional-streaming client method. */
export type BidiMethod<Req, Res> =
  (metadata?: grpc.Metadata, options?: Partial<grpc.CallOptions>) => grpc.ClientDuplexStream<Req, Res>

/** A server-streaming client method. */
export type ServerStreamMethod<Req, Res> =
  (request: Req, metadata?: grpc.Metadata, options?: Partial<grpc.CallOptions>) => grpc.ClientReadableStream<Res>

/**
 * A client of `inference.GRPCInferenceService`. Requests are plain objects (messages.ts); ModelInfer responses
 * arrive as protobufjs message instances, the others as plain objects. The camelCase aliases grpc-js also makes
 * (`modelInfer`) exist at run time but are not typed here.
 */
export interface InferenceClient extends grpc.Client {
  ServerLive: UnaryMethod<ServerLiveRequest, ServerLiveResponse>
  ServerReady: UnaryMethod<ServerReadyRequest, ServerReadyResponse>
  ModelReady: UnaryMethod<ModelReadyRequest, ModelReadyResponse>
  ServerMetadata: UnaryMethod<ServerMetadataRequest, ServerMetadataResponse>
  ModelMetadata: UnaryMethod<ModelMetadataRequest, ModelMetadataResponse>
  ModelInfer: UnaryMethod<ModelInferRequestMessage, ModelInferResponseMessage>
  ModelStreamInfer: BidiMethod<ModelInferRequestMessage, ModelStreamInferResponseMessage>
  ModelConfig: UnaryMethod<ModelConfigRequest, ModelConfigResponse>
  ModelStatistics: UnaryMethod<ModelStatisticsRequest, ModelStatisticsResponse>
  RepositoryIndex: UnaryMethod<RepositoryIndexRequest, RepositoryIndexResponse>
  RepositoryModelLoad: UnaryMethod<RepositoryModelLoadRequest, RepositoryModelLoadResponse>
  RepositoryModelUnload: UnaryMethod<RepositoryModelUnloadRequest, RepositoryModelUnloadResponse>
  SystemSharedMemoryStatus: UnaryMethod<SystemSharedMemoryStatusRequest, SystemSharedMemoryStatusResponse>
  SystemSharedMemoryRegister: UnaryMethod<SystemSharedMemoryRegisterRequest, SystemSharedMemoryRegisterResponse>
  SystemSharedMemoryUnregister: UnaryMethod<SystemSharedMemoryUnregisterRequest, SystemSharedMemoryUnregisterResponse>
  CudaSharedMemoryStatus: UnaryMethod<CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse>
  CudaSharedMemoryRegister: UnaryMethod<CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse>
  CudaSharedMemoryUnregister: UnaryMethod<CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse>
  TraceSetting: UnaryMethod<TraceSettingRequest, TraceSettingResponse>
  LogSettings: UnaryMethod<LogSettingsRequest, LogSettingsResponse>
}

/** A client of `grpc.health.v1.Health`. */
export interface HealthClient extends grpc.Client {
  Check: UnaryMethod<HealthCheckRequest, HealthCheckResponse>
  Watch: ServerStreamMethod<HealthCheckRequest, HealthCheckResponse>
}

type ClientConstructor = ReturnType<typeof grpc.makeGenericClientConstructor>
let inferenceClientConstructor: ClientConstructor | undefined
let healthClientConstructor: ClientConstructor | undefined

/**
 * A grpc-js client for the inference service (tests, load generators): `makeGenericClientConstructor` over the same
 * definition. Defaults to plaintext and to Triton's message size limits ({@link GRPC_MESSAGE_SIZE_OPTIONS});
 * `options` are added on top. Close it with `client.close()`.
 */
export function createInferenceClient (
  address: string, options?: grpc.ChannelOptions, credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure()
): InferenceClient {
  inferenceClientConstructor ??= grpc.makeGenericClientConstructor(inferenceServiceDefinition(), 'GRPCInferenceService')
  const client = new inferenceClientConstructor(address, credentials, { ...GRPC_MESSAGE_SIZE_OPTIONS, ...options })
  return client as unknown as InferenceClient
}

/** A grpc-js client for `grpc.health.v1.Health`. */
export function createHealthClient (
  address: string, options?: grpc.ChannelOptions, credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure()
): HealthClient {
  healthClientConstructor ??= grpc.makeGenericClientConstructor(healthServiceDefinition(), 'Health')
  return new healthClientConstructor(address, credentials, { ...options }) as unknown as HealthClient
}

/**
 * Calls a unary client method and resolves with its response. Pass the method bound to its client:
 * `await callUnary(client.ModelInfer.bind(client), request)`. Rejects with grpc-js's ServiceError (`code`, `details`).
 */
export function callUnary<Req, Res> (
  method: UnaryMethod<Req, Res>, request: Req, metadata: grpc.Metadata = new grpc.Metadata(),
  options: Partial<grpc.CallOptions> = {}
): Promise<Res> {
  return new Promise((resolve, reject) => {
    method(request, metadata, options, (err, response) => {
      if (err !== null) reject(err)
      else resolve(response as Res)
    })
  })
}
