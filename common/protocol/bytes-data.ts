/**
 * The elements of a BYTES tensor, packed: one byte buffer and, per element, where it starts and ends in it.
 *
 * Why not an array of Uint8Array: every Uint8Array is a JS object of ~100 bytes whatever its length, so a tensor of
 * short strings (token texts, labels) took 12x its JSON body in memory and as much in its binary form. Here an element
 * costs 8 bytes of index beside its own bytes, and those bytes can stay where they arrived: a view of the binary
 * body's length-prefixed layout, or of the JSON body's string tokens, without a copy per element.
 *
 * The class offers what code reading a tensor's `data` uses from a typed array, so most callers need not tell the two
 * apart: `length`, `byteLength` (for BYTES Triton's size: a 4-byte length prefix and the bytes, per element),
 * `subarray` (a view) and `slice` (a packed copy that owns its bytes). Elements come out as plain `Uint8Array` views
 * through {@link BytesData.get} or iteration.
 */

const EMPTY = new Uint8Array(0)
const utf8 = new TextEncoder()

/** A plain Uint8Array over the same memory (a Buffer's `subarray` would make every element a Buffer). */
function plain (bytes: Uint8Array): Uint8Array {
  return bytes.constructor === Uint8Array ? bytes : new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)
}

/** The elements of a BYTES tensor; see the module comment. */
export class BytesData implements Iterable<Uint8Array> {
  /** How many elements. */
  readonly length: number
  readonly #bytes: Uint8Array
  /** Element i is `#bytes[#spans[2i], #spans[2i + 1])`. */
  readonly #spans: Uint32Array
  #byteLength = -1

  /**
   * Elements over `bytes` at the `[start, end)` pairs of `spans` (2 numbers per element), which must lie within
   * `bytes`; neither is copied. Most callers want {@link BytesData.from} or {@link BytesDataBuilder}.
   */
  constructor (bytes: Uint8Array, spans: Uint32Array) {
    if (spans.length % 2 !== 0) throw new RangeError('BytesData spans hold a start and an end per element')
    this.#bytes = plain(bytes)
    this.#spans = spans
    this.length = spans.length / 2
  }

  /** Packs `elements` (byte strings, or text stored as UTF-8) into one buffer: one copy. */
  static from (elements: ReadonlyArray<Uint8Array | string>): BytesData {
    const builder = new BytesDataBuilder(elements.length)
    for (const e of elements) {
      if (typeof e === 'string') builder.pushString(e)
      else builder.push(e)
    }
    return builder.finish()
  }

  /** `count` empty elements. */
  static empty (count: number): BytesData {
    return new BytesData(EMPTY, new Uint32Array(2 * count))
  }

  /** Every element of `parts`, in order, packed into one buffer: one copy. */
  static concat (parts: readonly BytesData[]): BytesData {
    let count = 0
    let bytes = 0
    for (const p of parts) {
      count += p.length
      bytes += p.byteLength - 4 * p.length
    }
    const builder = new BytesDataBuilder(count, bytes)
    for (const p of parts) for (let i = 0; i < p.length; i++) builder.push(p.get(i))
    return builder.finish()
  }

  /** Element `i`, a view (0 <= i < length). */
  get (i: number): Uint8Array {
    if (!(i >= 0 && i < this.length)) {
      throw new RangeError(`BYTES element ${i} is out of range (${this.length} elements)`)
    }
    return this.#bytes.subarray(this.#spans[2 * i], this.#spans[2 * i + 1])
  }

  /** The length of element `i` in bytes (0 <= i < length, unchecked: it is for loops that know their bounds). */
  elementLength (i: number): number {
    return (this.#spans[2 * i + 1] as number) - (this.#spans[2 * i] as number)
  }

  /** Triton's size of the tensor: per element a 4-byte length prefix and its bytes (as in the raw layout). */
  get byteLength (): number {
    if (this.#byteLength < 0) {
      const s = this.#spans
      let total = 0
      for (let i = 0; i < s.length; i += 2) total += 4 + (s[i + 1] as number) - (s[i] as number)
      this.#byteLength = total
    }
    return this.#byteLength
  }

  /** Elements `[start, end)`, sharing this one's memory (as a typed array's `subarray`). */
  subarray (start: number, end: number = this.length): BytesData {
    return new BytesData(this.#bytes, this.#spans.subarray(2 * start, 2 * end))
  }

  /** Elements `[start, end)` packed into a buffer of their own (as a typed array's `slice`, a copy). */
  slice (start = 0, end: number = this.length): BytesData {
    return BytesData.concat([this.subarray(start, end)])
  }

  /** Each element as a view. */
  toArray (): Uint8Array[] {
    const out = new Array<Uint8Array>(this.length)
    for (let i = 0; i < this.length; i++) out[i] = this.get(i)
    return out
  }

  * [Symbol.iterator] (): Iterator<Uint8Array> {
    for (let i = 0; i < this.length; i++) yield this.get(i)
  }

  /** Writes the elements in Triton's raw layout (each after its 4-byte little-endian length); returns the end. */
  writeRaw (out: Uint8Array, pos: number): number {
    const b = this.#bytes
    const s = this.#spans
    for (let i = 0; i < s.length; i += 2) {
      const start = s[i] as number
      const end = s[i + 1] as number
      const n = end - start
      out[pos] = n & 0xff
      out[pos + 1] = (n >>> 8) & 0xff
      out[pos + 2] = (n >>> 16) & 0xff
      out[pos + 3] = n >>> 24
      pos += 4
      if (n > 32) {
        out.set(b.subarray(start, end), pos)
      } else {
        for (let j = 0; j < n; j++) out[pos + j] = b[start + j] as number
      }
      pos += n
    }
    return pos
  }
}

/**
 * Builds a {@link BytesData} element by element into one growing buffer. `capacity`, when known, sizes the buffer
 * once, when the first element is copied in; it grows by doubling past it (every old buffer stays resident until
 * the next garbage collection, so a good capacity matters for peak memory). Elements may also be views of other
 * memory ({@link pushView}) until the first that is not: then those before it are copied in once and the rest
 * follow (the strings of a JSON body that need no unescaping stay where they are).
 */
export class BytesDataBuilder {
  readonly #spans: Uint32Array
  #count = 0
  #buffer: Uint8Array = EMPTY
  readonly #capacity: number
  #used = 0
  /** The memory (all of its ArrayBuffer) the elements so far are views of; undefined once one was copied. */
  #viewed: Uint8Array | undefined

  /** Room for exactly `count` elements; `capacity`: about how many element bytes, when known (a bound is best). */
  constructor (count: number, capacity = 0) {
    this.#spans = new Uint32Array(2 * count)
    this.#capacity = capacity
  }

  /**
   * Room for an element of at most `maxLength` bytes, for a caller that writes it itself: into {@link target} from
   * the offset returned, then {@link commit} with the length written.
   */
  reserve (maxLength: number): number {
    return this.#reserve(maxLength)
  }

  /** The buffer {@link reserve} made room in (it may change at the next reserve). */
  get target (): Uint8Array {
    return this.#buffer
  }

  /** Ends the element begun by {@link reserve}, `length` bytes long; returns the length. */
  commit (length: number): number {
    this.#append(this.#used, this.#used + length)
    return length
  }

  /** Appends a copy of `element`; returns its length. */
  push (element: Uint8Array): number {
    const at = this.#reserve(element.length)
    if (element.length > 32) {
      this.#buffer.set(element, at)
    } else {
      for (let j = 0; j < element.length; j++) this.#buffer[at + j] = element[j] as number
    }
    this.#append(at, at + element.length)
    return element.length
  }

  /** Appends `text` as UTF-8; returns its length in bytes. */
  pushString (text: string): number {
    // UTF-8 takes at most 3 bytes per UTF-16 code unit.
    const at = this.#reserve(3 * text.length)
    const { written } = utf8.encodeInto(text, this.#buffer.subarray(at))
    this.#append(at, at + written)
    return written
  }

  /**
   * Appends `buffer[start, end)`: a view while every element so far is a view of the same memory (one ArrayBuffer),
   * else a copy. Returns its length.
   */
  pushView (buffer: Uint8Array, start: number, end: number): number {
    if (this.#count === 0 && this.#viewed === undefined) this.#viewed = new Uint8Array(buffer.buffer)
    if (this.#viewed !== undefined && this.#viewed.buffer === buffer.buffer) {
      this.#spans[2 * this.#count] = buffer.byteOffset + start
      this.#spans[2 * this.#count + 1] = buffer.byteOffset + end
      this.#count++
      return end - start
    }
    return this.push(buffer.subarray(start, end))
  }

  /** Room for `n` more bytes; returns where they go. */
  #reserve (n: number): number {
    if (this.#viewed !== undefined) this.#copyViews(this.#viewed)
    const need = this.#used + n
    if (need > this.#buffer.length) this.#grow(need)
    return this.#used
  }

  #grow (need: number): void {
    const grown = new Uint8Array(Math.max(need, 2 * this.#buffer.length, this.#capacity, 256))
    grown.set(this.#buffer.subarray(0, this.#used))
    this.#buffer = grown
  }

  /** The first copied element: the views before it move into the buffer. */
  #copyViews (viewed: Uint8Array): void {
    this.#viewed = undefined
    const s = this.#spans
    let total = 0
    for (let i = 0; i < 2 * this.#count; i += 2) total += (s[i + 1] as number) - (s[i] as number)
    if (this.#buffer.length < total) this.#grow(total)
    let pos = 0
    for (let i = 0; i < 2 * this.#count; i += 2) {
      const start = s[i] as number
      const end = s[i + 1] as number
      this.#buffer.set(viewed.subarray(start, end), pos)
      s[i] = pos
      pos += end - start
      s[i + 1] = pos
    }
    this.#used = pos
  }

  #append (start: number, end: number): void {
    this.#spans[2 * this.#count] = start
    this.#spans[2 * this.#count + 1] = end
    this.#count++
    this.#used = end
  }

  /** The elements pushed, which must be as many as the builder was made for. */
  finish (): BytesData {
    const expected = this.#spans.length / 2
    if (this.#count !== expected) {
      throw new RangeError(`BytesDataBuilder was made for ${expected} elements, got ${this.#count}`)
    }
    if (this.#viewed !== undefined) return new BytesData(this.#viewed, this.#spans)
    // Unused room at the end was never written, so it is address space rather than resident memory; a buffer more
    // than twice its contents is still copied down, so as not to hold it for the tensor's life.
    const buffer = this.#used < this.#buffer.length / 2 ? this.#buffer.slice(0, this.#used) : this.#buffer
    return new BytesData(buffer, this.#spans)
  }
}
