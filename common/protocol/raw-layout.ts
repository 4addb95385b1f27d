/**
 * Triton's raw tensor layout, which the binary HTTP extension (binary-codec.ts) and gRPC's raw contents
 * (grpc/grpc-codec.ts) share: elements little-endian, row-major, no padding; BOOL one byte; FP16/BF16 their 16-bit
 * patterns; BYTES a 4-byte little-endian length before each element. From bytes to typed data (views where the
 * alignment allows) and back (the typed array's own bytes), once for both codecs; each keeps its own error texts.
 */
import { BytesData } from './bytes-data.ts'
import { DATATYPES } from './datatypes.ts'
import { type DataType, type TensorData } from './types.ts'

/** x86 and ARM are little-endian; a big-endian host would need every element swapped, which the code below does. */
export const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1

/* c8 ignore start */
/** Reverses the byte order of each `size`-byte element in place (big-endian hosts only; x86 and ARM never get here). */
function swapBytes (bytes: Uint8Array, size: number): void {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  if (size === 2) b.swap16()
  else if (size === 4) b.swap32()
  else if (size === 8) b.swap64()
}
/* c8 ignore stop */

/**
 * The first `count` elements of `bytes` as `datatype`'s typed array (not BYTES): a view over the same memory when
 * it can be. A typed array's byte offset must be a multiple of its element size and Triton's layout has no padding
 * (the JSON part before it, or the protobuf fields, have any length), so a misaligned tensor, and every tensor on a
 * big-endian host, is copied once: one block copy, plus the byte swap on big-endian.
 */
export function typedElements (datatype: DataType, bytes: Uint8Array, count: number): TensorData {
  const size = DATATYPES[datatype].byteSize
  let buffer: ArrayBufferLike = bytes.buffer
  let at = bytes.byteOffset
  if (size > 1 && (!LITTLE_ENDIAN_HOST || at % size !== 0)) {
    // Not zero-filled first: every byte is written by the copy.
    const copy = Buffer.allocUnsafeSlow(count * size)
    copy.set(bytes.subarray(0, count * size))
    /* c8 ignore next */
    if (!LITTLE_ENDIAN_HOST) swapBytes(copy, size)
    buffer = copy.buffer
    at = 0
  }
  switch (DATATYPES[datatype].storage) {
    case 'uint8': return new Uint8Array(buffer, at, count)
    case 'uint16': return new Uint16Array(buffer, at, count)
    case 'uint32': return new Uint32Array(buffer, at, count)
    case 'biguint64': return new BigUint64Array(buffer, at, count)
    case 'int8': return new Int8Array(buffer, at, count)
    case 'int16': return new Int16Array(buffer, at, count)
    case 'int32': return new Int32Array(buffer, at, count)
    case 'bigint64': return new BigInt64Array(buffer, at, count)
    case 'float32': return new Float32Array(buffer, at, count)
    case 'float64': return new Float64Array(buffer, at, count)
    /* c8 ignore next 2 */ // callers send BYTES to bytesElements
    case 'bytes': throw new Error('BYTES tensors have no typed view')
  }
}

/** The texts each codec gives the ways a BYTES tensor's bytes can be wrong. */
export interface BytesElementErrors {
  /** More elements than the shape holds (the one after the last it holds begins). */
  tooMany (): Error
  /** An element's length runs past the end; `index` is the element's. */
  incompleteData (length: number, available: number, index: number): Error
  /** 1 to 3 bytes left where a length should be; `index` is the element it would begin. */
  incompleteLength (available: number, index: number): Error
  /** Fewer elements than the shape holds. */
  tooFew (got: number): Error
}

/**
 * The elements of a BYTES tensor from its length-prefixed bytes, as views into them; `count` undefined: as many as
 * there are. Checks as Triton's core does (ValidateBytesInputs), in its order.
 */
export function bytesElements (raw: Uint8Array, count: number | undefined, errors: BytesElementErrors): BytesData {
  const end = raw.length
  // Two walks: the first checks the layout and counts, so the index is allocated once at its size.
  let n = 0
  let pos = 0
  while (end - pos >= 4) {
    if (count !== undefined && n >= count) throw errors.tooMany()
    const length = lengthAt(raw, pos)
    pos += 4
    if (length > end - pos) throw errors.incompleteData(length, end - pos, n)
    pos += length
    n++
  }
  if (pos !== end) throw errors.incompleteLength(end - pos, n)
  if (count !== undefined && n < count) throw errors.tooFew(n)
  const spans = new Uint32Array(2 * n)
  pos = 0
  for (let i = 0; i < 2 * n; i += 2) {
    const length = lengthAt(raw, pos)
    spans[i] = pos + 4
    pos += 4 + length
    spans[i + 1] = pos
  }
  return new BytesData(raw, spans)
}

function lengthAt (b: Uint8Array, pos: number): number {
  return ((b[pos] as number) | (b[pos + 1] as number) << 8 | (b[pos + 2] as number) << 16 |
    (b[pos + 3] as number) << 24) >>> 0
}

/** Writes a tensor's raw bytes into `out` at `pos`; returns the position after them. */
export function writeRawBytes (out: Uint8Array, pos: number, data: TensorData): number {
  // BYTES: each element needs its length prefix.
  if (data instanceof BytesData) return data.writeRaw(out, pos)
  const typed = data
  out.set(new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength), pos)
  /* c8 ignore next */
  if (!LITTLE_ENDIAN_HOST) swapBytes(out.subarray(pos, pos + typed.byteLength), typed.BYTES_PER_ELEMENT)
  return pos + typed.byteLength
}

/** A tensor's elements in the raw layout: the typed array's own bytes (no copy), or BYTES serialized once. */
export function rawBytes (data: TensorData): Uint8Array {
  if (!(data instanceof BytesData) && (LITTLE_ENDIAN_HOST || data.BYTES_PER_ELEMENT === 1)) {
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
  }
  // BytesData's byteLength is its raw size.
  const out = Buffer.allocUnsafe(data.byteLength)
  writeRawBytes(out, 0, data)
  return out
}
