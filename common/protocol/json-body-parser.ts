/**
 * A JSON parser over the bytes of a KServe v2 body that leaves every tensor's `data` array where it is.
 *
 * Why: JSON.parse turns each element of a `data` array into a JS value (a boxed double for most numbers, a string for
 * BYTES) before the codec copies them into a typed array, and it needs the whole body as a string first. A 28 MiB
 * FP32 request took a worker to 19x its size that way. Doubles also cannot carry INT64/UINT64 values beyond 2^53,
 * nor tell `1.0` from `1`, which integer datatypes must.
 *
 * What: {@link parseJsonBody} builds the document as JSON.parse would (objects, arrays, strings, numbers as doubles,
 * `__proto__` as an own key, the last of duplicate keys winning), except for the `data` member of each object in the
 * root's `inputs` or `outputs` array: when that member is an array, its syntax is checked, its leaves counted and its
 * nesting measured, and it becomes a {@link JsonDataRange} that says where it lies in the body. The codec reads the
 * leaves from there straight into the tensor's typed array once it knows the datatype and shape
 * (json-tensor-data.ts), with the token readers below: so the extra memory for a decode is the typed arrays.
 *
 * Syntax: strict JSON (RFC 8259) plus the bare tokens `NaN`, `Infinity` and `-Infinity` that Triton's RapidJSON reads
 * and writes, which is what the codec accepted before (JSON.parse, then a NaN-tolerant retry). Anything else, and
 * nesting beyond {@link MAX_PARSE_DEPTH} outside `data` arrays, returns {@link PARSE_FAILED}: the caller then hands
 * the body to JSON.parse for its verdict and its exact message (an error path, where memory does not matter).
 *
 * Strings are decoded as `Buffer#toString('utf8')` of the whole body would decode them (invalid UTF-8 becomes
 * U+FFFD), since their delimiters are ASCII and UTF-8 decoding never lets an invalid sequence swallow an ASCII byte.
 */
import { isUtf8 } from 'node:buffer'
import { type BytesDataBuilder } from './bytes-data.ts'

/** Returned by {@link parseJsonBody} for anything that is not JSON (plus NaN/Infinity) or nests too deeply. */
export const PARSE_FAILED: unique symbol = Symbol('flotilla.json-body.parse-failed')

/**
 * Nesting depth beyond which {@link parseJsonBody} gives up outside `data` arrays (inside them there is no limit):
 * it recurses, and a body nested this deeply is for JSON.parse, which does not, to judge.
 */
export const MAX_PARSE_DEPTH = 1000

/** A tensor's `data` array, syntax checked but not built: where it lies in the body, and its leaves. */
export class JsonDataRange {
  /** The body (or the JSON part of it) the array lies in. */
  readonly bytes: Buffer
  /** Offset of the array's `[`. */
  readonly start: number
  /** Offset just past its `]`. */
  readonly end: number
  /** Leaves (values that are not arrays), nested arrays flattened. */
  readonly leafCount: number
  /** How deeply arrays nest: 1 for a flat array. */
  readonly depth: number

  constructor (bytes: Buffer, start: number, end: number, leafCount: number, depth: number) {
    this.bytes = bytes
    this.start = start
    this.end = end
    this.leafCount = leafCount
    this.depth = depth
  }
}

// The syntax failure, thrown from deep in the recursion and caught once at the top; preallocated, it is only a signal.
const FAIL = new Error('flotilla.json-body.syntax')

// What a value is to the tensor lookup: only `data` of an object in the root's inputs/outputs is left unbuilt.
const ROLE_PLAIN = 0
const ROLE_ROOT = 1
const ROLE_TENSOR_LIST = 2
const ROLE_TENSOR = 3

interface State {
  readonly buf: Buffer
  pos: number
}

/**
 * Parses `bytes` (see the module comment); `data` arrays of the tensors under the root's `inputs` and `outputs`
 * become {@link JsonDataRange}s over `bytes`, which they keep alive.
 * @returns the document, or {@link PARSE_FAILED}
 */
export function parseJsonBody (bytes: Buffer): unknown {
  const s: State = { buf: bytes, pos: 0 }
  try {
    const value = parseValue(s, 0, ROLE_ROOT)
    skipWhitespace(s)
    return s.pos === bytes.length ? value : PARSE_FAILED
  } catch (err) {
    if (err === FAIL) return PARSE_FAILED
    // A string's escapes are checked before JSON.parse decodes it, so this is not expected; fail the same way.
    /* c8 ignore next 2 */
    if (err instanceof SyntaxError) return PARSE_FAILED
    throw err
  }
}

function skipWhitespace (s: State): void {
  const b = s.buf
  const n = b.length
  let p = s.pos
  while (p < n) {
    const c = b[p] as number
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break
    p++
  }
  s.pos = p
}

/** `literal`'s bytes at `p` (ASCII), or a failure. */
function expectLiteral (b: Buffer, p: number, literal: string): number {
  const n = literal.length
  if (p + n > b.length) throw FAIL
  for (let i = 0; i < n; i++) {
    if (b[p + i] !== literal.charCodeAt(i)) throw FAIL
  }
  return p + n
}

function parseValue (s: State, depth: number, role: number): unknown {
  if (depth > MAX_PARSE_DEPTH) throw FAIL
  skipWhitespace(s)
  const b = s.buf
  const p = s.pos
  if (p >= b.length) throw FAIL
  switch (b[p]) {
    case 0x7b: return parseObject(s, depth, role) // {
    case 0x5b: return parseArray(s, depth, role) // [
    case 0x22: return parseString(s) // "
    case 0x74: s.pos = expectLiteral(b, p, 'true'); return true
    case 0x66: s.pos = expectLiteral(b, p, 'false'); return false
    case 0x6e: s.pos = expectLiteral(b, p, 'null'); return null
    case 0x4e: s.pos = expectLiteral(b, p, 'NaN'); return NaN
    case 0x49: s.pos = expectLiteral(b, p, 'Infinity'); return Infinity
    default: {
      if (b[p] === 0x2d && b[p + 1] === 0x49) { s.pos = expectLiteral(b, p, '-Infinity'); return -Infinity }
      const end = scanNumber(b, p)
      if (end < 0) throw FAIL
      const value = readDouble(b, p)
      s.pos = end
      return value
    }
  }
}

function parseObject (s: State, depth: number, role: number): Record<string, unknown> {
  const b = s.buf
  s.pos++
  const obj: Record<string, unknown> = {}
  skipWhitespace(s)
  if (b[s.pos] === 0x7d) { s.pos++; return obj }
  for (;;) {
    skipWhitespace(s)
    if (b[s.pos] !== 0x22) throw FAIL
    const key = parseString(s)
    skipWhitespace(s)
    if (b[s.pos] !== 0x3a) throw FAIL
    s.pos++
    skipWhitespace(s)
    let value: unknown
    if (role === ROLE_TENSOR && key === 'data' && b[s.pos] === 0x5b) {
      value = scanDataArray(s, depth)
    } else {
      const childRole = role === ROLE_ROOT && (key === 'inputs' || key === 'outputs') ? ROLE_TENSOR_LIST : ROLE_PLAIN
      value = parseValue(s, depth + 1, childRole)
    }
    if (key === '__proto__') {
      // JSON.parse makes it an own key; plain assignment would set the prototype.
      Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true })
    } else {
      obj[key] = value
    }
    skipWhitespace(s)
    const c = b[s.pos++]
    if (c === 0x7d) return obj
    if (c !== 0x2c) throw FAIL
  }
}

function parseArray (s: State, depth: number, role: number): unknown[] {
  const b = s.buf
  s.pos++
  const arr: unknown[] = []
  skipWhitespace(s)
  if (b[s.pos] === 0x5d) { s.pos++; return arr }
  const childRole = role === ROLE_TENSOR_LIST ? ROLE_TENSOR : ROLE_PLAIN
  for (;;) {
    arr.push(parseValue(s, depth + 1, childRole))
    skipWhitespace(s)
    const c = b[s.pos++]
    if (c === 0x5d) return arr
    if (c !== 0x2c) throw FAIL
  }
}

/**
 * Checks the string token at `p` (its `"`): no raw control characters, valid escapes. Returns the offset just past
 * its closing quote; {@link stringFlags} says whether it had escapes and bytes above 0x7f.
 */
function scanString (b: Buffer, p: number): number {
  const n = b.length
  let q = p + 1
  let high = 0
  let escaped = false
  for (;;) {
    if (q >= n) throw FAIL
    const c = b[q] as number
    if (c === 0x22) break
    if (c === 0x5c) {
      escaped = true
      q = skipEscape(b, q)
    } else {
      if (c < 0x20) throw FAIL
      high |= c
      q++
    }
  }
  stringFlags = (escaped ? STRING_ESCAPED : 0) | (high >= 0x80 ? STRING_HIGH : 0)
  return q + 1
}

const STRING_ESCAPED = 1
const STRING_HIGH = 2
/** Set by {@link scanString}: STRING_ESCAPED and STRING_HIGH of the string it just scanned. */
let stringFlags = 0

function isHexDigit (c: number | undefined): boolean {
  return c !== undefined && ((c >= 0x30 && c <= 0x39) || ((c | 0x20) >= 0x61 && (c | 0x20) <= 0x66))
}

/** Checks the escape at `p` (its backslash); returns the offset after it. */
function skipEscape (b: Buffer, p: number): number {
  switch (b[p + 1]) {
    case 0x22: case 0x5c: case 0x2f: case 0x62: case 0x66: case 0x6e: case 0x72: case 0x74:
      return p + 2
    case 0x75:
      if (isHexDigit(b[p + 2]) && isHexDigit(b[p + 3]) && isHexDigit(b[p + 4]) && isHexDigit(b[p + 5])) return p + 6
      throw FAIL
    default:
      throw FAIL
  }
}

// Strings outside `data` arrays are mostly the same few (member names, datatypes, tensor names) request after request:
// short ASCII ones are kept in a small direct-mapped cache, keyed by a hash of their bytes, and reused when the bytes
// match, which saves making a string for each. Bounded: at most STRING_CACHE_SIZE strings of up to 32 characters.
const STRING_CACHE_SIZE = 512
const STRING_CACHE_MAX_LENGTH = 32
const stringCache: Array<string | undefined> = new Array<string | undefined>(STRING_CACHE_SIZE).fill(undefined)

function parseString (s: State): string {
  const b = s.buf
  const n = b.length
  const start = s.pos + 1
  let p = start
  let hash = 0
  let high = 0
  for (;;) {
    if (p >= n) throw FAIL
    const c = b[p] as number
    if (c === 0x22) break
    if (c === 0x5c || c < 0x20) {
      // Escapes (or a control character, which scanString refuses): the general path.
      const end = scanString(b, start - 1)
      s.pos = end
      return decodeStringToken(b, start - 1, end, stringFlags)
    }
    hash = (Math.imul(hash, 31) + c) | 0
    high |= c
    p++
  }
  s.pos = p + 1
  const length = p - start
  if (high >= 0x80) return b.toString('utf8', start, p)
  if (length > STRING_CACHE_MAX_LENGTH) return b.toString('latin1', start, p)
  const slot = hash & (STRING_CACHE_SIZE - 1)
  const cached = stringCache[slot]
  if (cached !== undefined && cached.length === length) {
    let same = true
    for (let i = 0; i < length; i++) {
      if (cached.charCodeAt(i) !== b[start + i]) { same = false; break }
    }
    if (same) return cached
  }
  const str = b.toString('latin1', start, p)
  stringCache[slot] = str
  return str
}

function decodeStringToken (b: Buffer, start: number, end: number, flags: number): string {
  // Escapes are rare in practice and JSON.parse decodes them exactly (surrogate pairs, lone surrogates).
  if ((flags & STRING_ESCAPED) !== 0) return JSON.parse(b.toString('utf8', start, end)) as string
  return b.toString((flags & STRING_HIGH) !== 0 ? 'utf8' : 'latin1', start + 1, end - 1)
}

/**
 * Checks a `data` array at `s.pos` (its `[`) without building it: leaves, nested arrays (any depth) and their
 * separators. A leaf that is an object is parsed (and dropped) to check it; it is an error for every datatype later.
 */
function scanDataArray (s: State, depth: number): JsonDataRange {
  const b = s.buf
  const n = b.length
  const start = s.pos
  let p = start
  let level = 0
  let maxLevel = 0
  let leaves = 0
  for (;;) {
    // A value is expected at p (after `[` or `,`), or `]` right after `[`.
    while (p < n && isWhitespace(b[p] as number)) p++
    if (p >= n) throw FAIL
    let c = b[p] as number
    if (c === 0x5b) {
      p++
      if (++level > maxLevel) maxLevel = level
      while (p < n && isWhitespace(b[p] as number)) p++
      if (b[p] !== 0x5d) continue
      // `[]`: an empty array is a finished value; fall through to what follows it.
      p++
      level--
    } else {
      p = scanLeaf(s, b, p, depth + level)
      leaves++
    }
    // After a value: `,` for the next one, or `]` closing arrays, until the outermost one closes.
    for (;;) {
      if (level === 0) {
        s.pos = p
        return new JsonDataRange(b, start, p, leaves, maxLevel)
      }
      while (p < n && isWhitespace(b[p] as number)) p++
      if (p >= n) throw FAIL
      c = b[p++] as number
      if (c === 0x2c) break
      if (c !== 0x5d) throw FAIL
      level--
    }
  }
}

function isWhitespace (c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
}

/** Checks one leaf of a `data` array at `p`; returns the offset after it. */
function scanLeaf (s: State, b: Buffer, p: number, depth: number): number {
  switch (b[p]) {
    case 0x22: return scanString(b, p)
    case 0x74: return expectLiteral(b, p, 'true')
    case 0x66: return expectLiteral(b, p, 'false')
    case 0x6e: return expectLiteral(b, p, 'null')
    case 0x4e: return expectLiteral(b, p, 'NaN')
    case 0x49: return expectLiteral(b, p, 'Infinity')
    case 0x7b: {
      s.pos = p
      parseObject(s, depth + 1, ROLE_PLAIN)
      return s.pos
    }
    default: {
      if (b[p] === 0x2d && b[p + 1] === 0x49) return expectLiteral(b, p, '-Infinity')
      const end = scanNumber(b, p)
      if (end < 0) throw FAIL
      return end
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Token readers, for the leaves of a checked JsonDataRange (json-tensor-data.ts reads them into typed arrays)

/**
 * The offset after the JSON number token at `p` (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`), or -1 when
 * there is none there.
 */
export function scanNumber (b: Uint8Array, p: number): number {
  const n = b.length
  if (b[p] === 0x2d) p++
  const c = b[p]
  if (c === 0x30) {
    p++
  } else if (c !== undefined && c >= 0x31 && c <= 0x39) {
    p = skipDigits(b, p + 1, n)
  } else {
    return -1
  }
  if (b[p] === 0x2e) {
    const start = p + 1
    p = skipDigits(b, start, n)
    if (p === start) return -1
  }
  if (b[p] === 0x65 || b[p] === 0x45) {
    p++
    if (b[p] === 0x2b || b[p] === 0x2d) p++
    const start = p
    p = skipDigits(b, start, n)
    if (p === start) return -1
  }
  return p
}

function skipDigits (b: Uint8Array, p: number, n: number): number {
  for (; p < n; p++) {
    const c = b[p] as number
    if (c < 0x30 || c > 0x39) break
  }
  return p
}

/** Exact powers of ten as doubles: 10^0 .. 10^22 (10^23 is the first that a double cannot hold). */
const POW10 = new Float64Array(23)
for (let i = 0, v = 1; i < POW10.length; i++, v *= 10) POW10[i] = v

/**
 * Set by {@link readDouble}, {@link readInteger} and {@link pushBytesString}: the offset just past the token they
 * read. A module variable rather than a returned pair, so that the per-element loops allocate nothing.
 */
export let tokenEnd = 0

/** What {@link decimalValue} returned: the exact value, or one within a few units in the last place, or nothing. */
const EXACT = 0
const APPROXIMATE = 1
const NOT_COMPUTED = 2
let decimalPrecision = EXACT

/**
 * The value of the checked JSON number token at `p`, from its digits; sets {@link tokenEnd} and
 * {@link decimalPrecision}. Up to 15 significant digits and a decimal exponent within ±22, the result is one exact
 * operation on exact doubles, so it is the correctly rounded value (Clinger's fast path): EXACT. With more digits
 * (the first 19 kept) or an exponent within ±44 it takes up to four roundings, each within half a unit in the last
 * place: APPROXIMATE, within 2 units of the correctly rounded value. Otherwise NOT_COMPUTED (returns 0).
 */
function decimalValue (b: Buffer, p: number): number {
  const n = b.length
  let negative = false
  if (b[p] === 0x2d) { negative = true; p++ }
  let head = 0 // the first 15 significant digits
  let tail = 0 // the next 4
  let tailDigits = 0
  let significant = 0
  let exponent = 0
  // Integer part: `0`, or digits that do not start with 0 (JSON has no leading zeros).
  if (b[p] === 0x30) {
    p++
  } else {
    for (; p < n; p++) {
      const c = b[p] as number
      if (c < 0x30 || c > 0x39) break
      if (significant < 15) {
        head = head * 10 + (c - 0x30)
      } else if (significant < 19) {
        tail = tail * 10 + (c - 0x30)
        tailDigits++
      } else {
        // A digit beyond the 19th scales the value and is otherwise dropped (a relative error below 1e-18).
        exponent++
      }
      significant++
    }
  }
  if (b[p] === 0x2e) {
    p++
    if (significant === 0) {
      // Zeros before the first significant digit only move the decimal point.
      while (b[p] === 0x30) { exponent--; p++ }
    }
    for (; p < n; p++) {
      const c = b[p] as number
      if (c < 0x30 || c > 0x39) break
      if (significant < 15) {
        head = head * 10 + (c - 0x30)
        exponent--
      } else if (significant < 19) {
        tail = tail * 10 + (c - 0x30)
        tailDigits++
        exponent--
      }
      significant++
    }
  }
  if (b[p] === 0x65 || b[p] === 0x45) {
    p++
    let expNegative = false
    if (b[p] === 0x2d) { expNegative = true; p++ } else if (b[p] === 0x2b) { p++ }
    let e = 0
    for (; p < n; p++) {
      const c = b[p] as number
      if (c < 0x30 || c > 0x39) break
      if (e < 1e6) e = e * 10 + (c - 0x30)
    }
    exponent += expNegative ? -e : e
  }
  tokenEnd = p
  if (head === 0) {
    // No significant digit (head is non-zero once there is one: its first digit is not 0).
    decimalPrecision = EXACT
    return negative ? -0 : 0
  }
  let v: number
  if (significant <= 15) {
    v = head
    decimalPrecision = exponent >= -22 && exponent <= 22 ? EXACT : APPROXIMATE
  } else {
    v = head * (POW10[tailDigits] as number) + tail
    decimalPrecision = APPROXIMATE
  }
  if (exponent < -44 || exponent > 44) {
    decimalPrecision = NOT_COMPUTED
    return 0
  }
  if (exponent < -22) v = v / 1e22 / (POW10[-exponent - 22] as number)
  else if (exponent < 0) v /= POW10[-exponent] as number
  else if (exponent > 22) v = v * 1e22 * (POW10[exponent - 22] as number)
  else v *= POW10[exponent] as number
  return negative ? -v : v
}

/**
 * The double a checked JSON number token at `p` denotes, correctly rounded (the value JSON.parse gives); sets
 * {@link tokenEnd}. Tokens {@link decimalValue} cannot compute exactly go through `Number()` of their text.
 */
export function readDouble (b: Buffer, p: number): number {
  const v = decimalValue(b, p)
  return decimalPrecision === EXACT ? v : Number(b.toString('latin1', p, tokenEnd))
}

// 16 units in the last place of a double, relative: well beyond decimalValue's error bound.
const APPROXIMATION_MARGIN = 2 ** -48

/**
 * `round(double(token))` for a narrowing `round` that is monotonic (float32, fp16 and bf16 rounding): what
 * `round(readDouble(b, p))` gives, usually without the exact double. When the token's approximate value and its
 * error margin round the same way, so does the exact double, which lies within that margin; only otherwise (about
 * one token in 2^26, near a rounding boundary of the narrow type) is the exact double made. Sets {@link tokenEnd}.
 */
export function readNarrowed (b: Buffer, p: number, round: (v: number) => number): number {
  const v = decimalValue(b, p)
  if (decimalPrecision === EXACT) return round(v)
  if (decimalPrecision === APPROXIMATE) {
    const margin = Math.abs(v) * APPROXIMATION_MARGIN
    const low = round(v - margin)
    if (low === round(v + margin)) return low
  }
  return round(Number(b.toString('latin1', p, tokenEnd)))
}

/**
 * The integer a checked JSON number token at `p` denotes, when it is written as an integer (no fraction, no
 * exponent) of at most 15 digits, so that a double holds it exactly; NaN otherwise, and for a leaf that is not a
 * number. Sets {@link tokenEnd} after the digits (not after a fraction or exponent: callers refuse those).
 */
export function readInteger (b: Buffer, p: number): number {
  const n = b.length
  let q = p
  const negative = b[q] === 0x2d
  if (negative) q++
  const first = q
  let v = 0
  while (q < n) {
    const c = b[q] as number
    if (c < 0x30 || c > 0x39) break
    v = v * 10 + (c - 0x30)
    q++
  }
  tokenEnd = q
  if (q === first || q - first > 15) return NaN
  const c = b[q]
  if (c === 0x2e || c === 0x65 || c === 0x45) return NaN
  return negative ? -v : v
}

/** The kinds of leaf {@link leafKind} tells apart. */
export type LeafKind = 'integer' | 'number' | 'non-finite' | 'string' | 'other'

/**
 * What the checked leaf at `p` is: a number written as an integer, any other number (fraction or exponent), one of
 * the NaN/Infinity tokens, a string, or anything else (true, false, null, an object). For error paths.
 */
export function leafKind (b: Buffer, p: number): LeafKind {
  const c = b[p]
  if (c === 0x22) return 'string'
  if (c === 0x4e || c === 0x49 || (c === 0x2d && b[p + 1] === 0x49)) return 'non-finite'
  const end = scanNumber(b, p)
  if (end < 0) return 'other'
  for (let q = p; q < end; q++) {
    const d = b[q]
    if (d === 0x2e || d === 0x65 || d === 0x45) return 'number'
  }
  return 'integer'
}

/** The text of the checked number or NaN/Infinity token at `p`, as written. */
export function numberTokenText (b: Buffer, p: number): string {
  const c = b[p]
  if (c === 0x4e) return 'NaN'
  if (c === 0x49) return 'Infinity'
  if (c === 0x2d && b[p + 1] === 0x49) return '-Infinity'
  return b.toString('latin1', p, scanNumber(b, p))
}

/**
 * The checked leaf at `p` as the value JSON.parse would make of it, for messages: strings decoded, numbers as
 * doubles, `{}` for any object (messages only say "an object").
 */
export function leafValue (b: Buffer, p: number): unknown {
  switch (b[p]) {
    case 0x22: {
      const end = scanString(b, p)
      return decodeStringToken(b, p, end, stringFlags)
    }
    case 0x74: return true
    case 0x66: return false
    case 0x6e: return null
    case 0x7b: return {}
    case 0x4e: return NaN
    case 0x49: return Infinity
    default: return b[p + 1] === 0x49 ? -Infinity : readDouble(b, p)
  }
}

/**
 * The offset of the next leaf at or after `p` in a checked JsonDataRange: skips whitespace, commas and brackets.
 * Only call it as many times as the range has leaves.
 */
export function nextLeaf (b: Buffer, p: number): number {
  for (;;) {
    const c = b[p] as number
    if (c !== 0x2c && c !== 0x5b && c !== 0x5d && c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return p
    p++
  }
}

/**
 * Appends to `out` the UTF-8 bytes of the checked string token at `p`, as `TextEncoder` would encode the string
 * JSON.parse makes of it; returns their length. Without escapes and with valid UTF-8 (the usual case) those are the
 * token's own bytes, appended as a view of `b` (no copy, and it keeps `b` alive); otherwise encoded into `out`'s
 * buffer. Sets {@link tokenEnd}.
 */
export function pushBytesString (b: Buffer, p: number, out: BytesDataBuilder): number {
  const end = scanString(b, p)
  tokenEnd = end
  const flags = stringFlags
  // Invalid UTF-8 becomes U+FFFD, as in the string JSON.parse would make: rare enough to go through a string.
  if ((flags & STRING_HIGH) !== 0 && !isUtf8(b.subarray(p + 1, end - 1))) {
    return out.pushString(decodeStringToken(b, p, end, flags))
  }
  if ((flags & STRING_ESCAPED) === 0) return out.pushView(b, p + 1, end - 1)
  // Unescaped straight into the tensor's buffer, without a string: never longer than the token's contents.
  const at = out.reserve(end - p - 2)
  return out.commit(unescapeInto(b, p + 1, end - 1, out.target, at) - at)
}

/** The value of the 4 hex digits at `p` (checked by the scan). */
function hex4 (b: Buffer, p: number): number {
  let v = 0
  for (let i = p; i < p + 4; i++) {
    const c = b[i] as number
    v = v * 16 + (c <= 0x39 ? c - 0x30 : (c | 0x20) - 0x57)
  }
  return v
}

/**
 * Writes the UTF-8 bytes of the escaped string contents `b[from, to)` (checked by the scan) into `out` at `at`, as
 * TextEncoder would encode the string JSON.parse makes of them: surrogate pairs joined, a lone surrogate U+FFFD.
 * Returns the offset after the last byte written.
 */
function unescapeInto (b: Buffer, from: number, to: number, out: Uint8Array, at: number): number {
  let q = at
  let i = from
  while (i < to) {
    const c = b[i] as number
    if (c !== 0x5c) {
      out[q++] = c
      i++
      continue
    }
    const e = b[i + 1] as number
    i += 2
    if (e !== 0x75) {
      out[q++] = e === 0x62 ? 0x08 : e === 0x66 ? 0x0c : e === 0x6e ? 0x0a : e === 0x72 ? 0x0d : e === 0x74 ? 0x09 : e
      continue
    }
    let cp = hex4(b, i)
    i += 4
    if (cp >= 0xd800 && cp <= 0xdbff && i + 6 <= to && b[i] === 0x5c && b[i + 1] === 0x75) {
      const low = hex4(b, i + 2)
      if (low >= 0xdc00 && low <= 0xdfff) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00)
        i += 6
      }
    }
    if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd
    if (cp < 0x80) {
      out[q++] = cp
    } else if (cp < 0x800) {
      out[q++] = 0xc0 | (cp >> 6)
      out[q++] = 0x80 | (cp & 0x3f)
    } else if (cp < 0x10000) {
      out[q++] = 0xe0 | (cp >> 12)
      out[q++] = 0x80 | ((cp >> 6) & 0x3f)
      out[q++] = 0x80 | (cp & 0x3f)
    } else {
      out[q++] = 0xf0 | (cp >> 18)
      out[q++] = 0x80 | ((cp >> 12) & 0x3f)
      out[q++] = 0x80 | ((cp >> 6) & 0x3f)
      out[q++] = 0x80 | (cp & 0x3f)
    }
  }
  return q
}
