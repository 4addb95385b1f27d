/**
 * The identity of an inference request, for response caches: the worker's (Triton's `response_cache`,
 * worker/cache/response-cache.ts) and the gateway's. Protocol-neutral: it reads the decoded {@link InferRequest}, so
 * one tensor sent as JSON, as binary HTTP (Triton's binary tensor extension or a raw body) or over gRPC (raw or typed
 * contents) gets one key.
 *
 * What is hashed (SHA-256, node:crypto), each field length-prefixed so that no two different requests serialize
 * alike:
 *
 * - the model name and the version that answers (Triton hashes `ModelName()` and `ActualModelVersion()`);
 * - every input, in input-name order (Triton sorts them by name too): its name, datatype, shape, parameters other than
 *   `binary_data_size`, and its elements as raw bytes: fixed-size elements little-endian (the typed array's own
 *   bytes, whatever the array type and offset), BYTES elements each with a 4-byte little-endian length before it
 *   (Triton's raw layout);
 * - the outputs asked for, in the order asked (the answer lists them in that order), each with its parameters, or
 *   "every output" when the request names none;
 * - the request's parameters, except `priority` and `timeout`, which only decide when the request runs.
 *
 * Not hashed: the request id (every answer carries its own), `priority`, `timeout`, and an input's `binary_data_size`
 * (where its bytes were in a binary body, not what they are).
 *
 * Triton's own key (core src/cache_manager.cc `TritonCache::Hash`) is narrower: a 64-bit boost `hash_combine` of the
 * model name, the version and each input's name and bytes, nothing else. Its documentation (server
 * docs/user_guide/response_cache.md) says a request is identified by its inputs' "name, shape, datatype and tensor
 * data"; the implementation leaves the shape and datatype out, so two requests with the same bytes and another shape
 * share an answer of the wrong shape. This key follows the documentation: datatype and shape are in. Triton's key
 * also leaves out the requested outputs and the parameters, so there two requests that ask for different outputs, or
 * pass the backend different parameters, share one entry and the second gets the first's answer. Here both are in:
 * the answer depends on them (custom parameters reach the backend; `classification` changes the outputs), and the
 * gateway caches encoded answers, whose form `binary_data` and `binary_data_output` decide. A cache that stores
 * decoded answers (the worker's) leaves those two out with {@link RequestKeyOptions.answerForm}. Unknown parameters
 * are kept: one that changes nothing costs a hit, one that changes the answer and is left out would serve a wrong
 * one.
 *
 * Cost: no string is made of any data. Small fields, BYTES elements and tensors up to 4 KiB are packed into a
 * reused 16 KiB scratch buffer, so a tensor of many short strings is not a native call per element; a request that
 * fits in it is hashed in one `crypto.hash` call. A larger tensor is handed to the hash straight from its own memory
 * (no copy).
 */
import { createHash, hash as oneShot, type Hash } from 'node:crypto'
import { BytesData } from './bytes-data.ts'
import { LITTLE_ENDIAN_HOST, rawBytes } from './raw-layout.ts'
import { type InferRequest, type Parameters, type ParameterValue, type Tensor } from './types.ts'

/** A request's cache identity. */
export interface RequestKey {
  /** The lookup key: the first 128 bits of the digest, as 32 lowercase hex characters. */
  readonly key: string
  /**
   * The whole SHA-256 digest, 64 lowercase hex characters: kept with an entry so that a hit whose `check` differs
   * (two requests whose keys collide) is taken for a miss.
   */
  readonly check: string
}

export interface RequestKeyOptions {
  /**
   * Whether the parameters that only choose how the answer is encoded, `binary_data` on an output and
   * `binary_data_output` on the request, are part of the key (default true: a cache of encoded answers needs them).
   * A cache of decoded answers passes false, so that a JSON client and a binary one share an entry.
   */
  readonly answerForm?: boolean
}

/** Request parameters that decide when a request runs, never what it answers. */
const SCHEDULING_PARAMETERS: ReadonlySet<string> = new Set(['priority', 'timeout'])
/** Request parameter choosing binary outputs for every output (answer form only). */
const BINARY_DATA_OUTPUT = 'binary_data_output'
/** Output parameter choosing a binary output (answer form only). */
const BINARY_DATA = 'binary_data'
/** Input parameter of the binary extension: where the bytes were, not what they are. */
const BINARY_DATA_SIZE = 'binary_data_size'

/** Bumped whenever the serialization below changes, so that keys of two layouts never meet in a shared store. */
const LAYOUT = 'flotilla.request-key.v1'

const SCRATCH_BYTES = 16 * 1024

const TAG_STRING = 0x73 // 's'
const TAG_NUMBER = 0x6e // 'n'
const TAG_BOOLEAN = 0x62 // 'b'

/**
 * Packs small fields into one scratch buffer. A request that fits in it is hashed in one call (`crypto.hash`, about
 * a quarter of the cost of a `Hash` object); a larger one gets a `Hash` when the scratch first fills, and large views
 * go to it directly. One per module: {@link requestKey} is synchronous and finishes before anyone else can use it.
 */
class KeyWriter {
  readonly #scratch = Buffer.allocUnsafe(SCRATCH_BYTES)
  #pos = 0
  #hash: Hash | undefined

  begin (): void {
    this.#hash = undefined
    this.#pos = 0
  }

  /** The SHA-256 of everything written since {@link begin}, as lowercase hex. */
  digest (): string {
    const packed = this.#scratch.subarray(0, this.#pos)
    const hash = this.#hash
    this.#hash = undefined
    this.#pos = 0
    if (hash === undefined) return oneShot('sha256', packed, 'hex')
    hash.update(packed)
    return hash.digest('hex')
  }

  /** Hands what is packed to the hash (created now if need be); the scratch is reused (update copies it). */
  #flush (): Hash {
    const hash = this.#hash ?? (this.#hash = createHash('sha256'))
    if (this.#pos > 0) hash.update(this.#scratch.subarray(0, this.#pos))
    this.#pos = 0
    return hash
  }

  #room (bytes: number): void {
    if (this.#pos + bytes > SCRATCH_BYTES) this.#flush()
  }

  u8 (v: number): void {
    this.#room(1)
    this.#scratch[this.#pos++] = v
  }

  u32 (v: number): void {
    this.#room(4)
    this.#putU32(this.#pos, v)
    this.#pos += 4
  }

  #putU32 (p: number, v: number): void {
    const b = this.#scratch
    b[p] = v & 0xff
    b[p + 1] = (v >>> 8) & 0xff
    b[p + 2] = (v >>> 16) & 0xff
    b[p + 3] = v >>> 24
  }

  f64 (v: number): void {
    this.#room(8)
    this.#scratch.writeDoubleLE(v, this.#pos)
    this.#pos += 8
  }

  /** UTF-8 bytes with their length before them. */
  string (s: string): void {
    // UTF-8 takes at most 3 bytes per UTF-16 unit.
    const most = 4 + 3 * s.length
    if (most > SCRATCH_BYTES) {
      const bytes = Buffer.from(s, 'utf8')
      this.u32(bytes.length)
      this.bytes(bytes)
      return
    }
    this.#room(most)
    const b = this.#scratch
    const start = this.#pos + 4
    // Names and datatypes are short ASCII: copied by hand, which is several times cheaper than Buffer#write.
    let i = 0
    if (s.length <= 64) {
      for (; i < s.length; i++) {
        const c = s.charCodeAt(i)
        if (c >= 0x80) break
        b[start + i] = c
      }
    }
    const n = i === s.length ? i : b.write(s, start, 'utf8')
    this.#putU32(start - 4, n)
    this.#pos = start + n
  }

  /** BYTES elements in Triton's raw layout (each with its 4-byte little-endian length), a scratch-full at a time. */
  elements (data: BytesData): void {
    let start = 0
    while (start < data.length) {
      let end = start
      let size = 0
      while (end < data.length && size + 4 + data.elementLength(end) <= SCRATCH_BYTES) {
        size += 4 + data.elementLength(end++)
      }
      if (end === start) {
        // One element larger than the scratch: it goes to the hash directly.
        const e = data.get(start++)
        this.u32(e.length)
        this.bytes(e)
        continue
      }
      this.#room(size)
      this.#pos = data.subarray(start, end).writeRaw(this.#scratch, this.#pos)
      start = end
    }
  }

  /** Raw bytes, without a length: the caller wrote it. */
  bytes (v: Uint8Array): void {
    const n = v.length
    if (n > SCRATCH_BYTES / 4) {
      this.#flush().update(v)
      return
    }
    this.#room(n)
    const b = this.#scratch
    const p = this.#pos
    if (n <= 16) {
      for (let i = 0; i < n; i++) b[p + i] = v[i]!
    } else {
      b.set(v, p)
    }
    this.#pos = p + n
  }
}

const writer = new KeyWriter()

function writeValue (w: KeyWriter, v: ParameterValue): void {
  if (typeof v === 'string') {
    w.u8(TAG_STRING)
    w.string(v)
  } else if (typeof v === 'number') {
    w.u8(TAG_NUMBER)
    w.f64(v)
  } else {
    w.u8(TAG_BOOLEAN)
    w.u8(v ? 1 : 0)
  }
}

/** Parameters in key order, without the names `skip` says to leave out. */
function writeParameters (w: KeyWriter, parameters: Parameters | undefined, skip: (name: string) => boolean): void {
  if (parameters === undefined) {
    w.u32(0)
    return
  }
  const names = Object.keys(parameters).filter(n => !skip(n)).sort()
  w.u32(names.length)
  for (const name of names) {
    w.string(name)
    writeValue(w, parameters[name]!)
  }
}

const skipInputParameter = (name: string): boolean => name === BINARY_DATA_SIZE
const skipNothing = (): boolean => false
const skipBinaryData = (name: string): boolean => name === BINARY_DATA
const skipScheduling = (name: string): boolean => SCHEDULING_PARAMETERS.has(name)
const skipSchedulingAndForm = (name: string): boolean => SCHEDULING_PARAMETERS.has(name) || name === BINARY_DATA_OUTPUT

function writeTensor (w: KeyWriter, t: Tensor): void {
  w.string(t.name)
  w.string(t.datatype)
  w.u32(t.shape.length)
  for (const d of t.shape) w.f64(d)
  writeParameters(w, t.parameters, skipInputParameter)
  const data = t.data
  if (data instanceof BytesData) {
    // BYTES: the element count, then Triton's raw layout (a length before each element).
    w.u8(1)
    w.u32(data.length)
    w.elements(data)
    return
  }
  // Fixed-size elements: their byte count, then the bytes, little-endian. The hash reads the typed array's own
  // memory, so a Float32Array and a Uint8Array over the same bytes (or the same bytes at another offset) agree.
  w.u8(0)
  w.f64(data.byteLength)
  w.bytes(LITTLE_ENDIAN_HOST ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : rawBytes(data))
}

const byName = (a: Tensor, b: Tensor): number => a.name < b.name ? -1 : a.name > b.name ? 1 : 0

/**
 * The cache key of `request` to `model` at `version` (see the module comment for what is in it and why).
 * Synchronous and allocation-light; the request is not changed.
 *
 * @param model the model name the request addresses
 * @param version the version that answers it (the resolved one, not the one the client may have left empty), as a
 *   decimal string
 * @param request the decoded request
 * @param options {@link RequestKeyOptions}
 * @returns the 128-bit lookup key and the full digest, both lowercase hex
 */
export function requestKey (model: string, version: string, request: InferRequest, options: RequestKeyOptions = {}): RequestKey {
  const answerForm = options.answerForm ?? true
  const w = writer
  w.begin()
  w.string(LAYOUT)
  w.string(model)
  w.string(version)

  const inputs = request.inputs.length < 2 ? request.inputs : [...request.inputs].sort(byName)
  w.u32(inputs.length)
  for (const t of inputs) writeTensor(w, t)

  const outputs = request.outputs
  if (outputs === undefined) {
    w.u8(0)
  } else {
    w.u8(1)
    w.u32(outputs.length)
    for (const o of outputs) {
      w.string(o.name)
      writeParameters(w, o.parameters, answerForm ? skipNothing : skipBinaryData)
    }
  }

  writeParameters(w, request.parameters, answerForm ? skipScheduling : skipSchedulingAndForm)
  const check = w.digest()
  return { key: check.slice(0, 32), check }
}
