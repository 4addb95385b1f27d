/**
 * A parser for the protobuf TEXT format (what `config.pbtxt` is written in), producing a schema-free tree.
 *
 * Why our own: protobuf's text format is small, and a schema-free tree that remembers where every field and value
 * was written lets the model-config layer report `file:line:col` for type and validation errors too, which a
 * generic protobuf library would not give us.
 *
 * Grammar accepted (protobuf's `TextFormat::Parser`, minus extensions and `Any` expansion):
 *
 *   message := field*                                  (top level runs to end of input)
 *   field   := name ( ':' value | ':'? msg | ':'? '[' msgs? ']' | ':' '[' values? ']' ) ( ',' | ';' )?
 *   msg     := '{' message '}' | '<' message '>'
 *   value   := msg | string+ | '-'? number | '-'? identifier
 *
 * A list of scalars needs the colon (`dims: [1, 2]`), as in protobuf; a list of messages does not. Booleans, enums,
 * `inf` and `nan` are all identifiers here; which identifiers a field accepts is the schema's business.
 * Comments run from `#` to end of line. Positions are 1-based; columns count UTF-16 code units.
 */

import { createError, type FlotillaError } from '../../common/errors.ts'

/** A 1-based place in the source text. */
export interface PbPosition {
  line: number
  column: number
}

/** A string literal; adjacent literals (`"a" "b"`) are already concatenated. Escapes are decoded as UTF-8 bytes. */
export interface PbString extends PbPosition {
  kind: 'string'
  value: string
}

/** A numeric literal, with its sign folded in. */
export interface PbNumber extends PbPosition {
  kind: 'number'
  /** As written, including a leading `-` (e.g. `-0x10`, `1.5f`); used in error messages. */
  text: string
  /** The value as a double (hex and octal integers converted). */
  value: number
  /**
   * The exact value when the literal is an integer (decimal, hex or octal, no fraction, exponent or `f` suffix);
   * null for float literals. Range checks use this so 64-bit values are not rounded first.
   */
  integer: bigint | null
}

/** A bare identifier: an enum name, `true`/`false`/`t`/`f`, `inf`, `nan`, ... */
export interface PbIdentifier extends PbPosition {
  kind: 'identifier'
  value: string
  /** Written with a leading `-` (only meaningful for `-inf`). */
  negative: boolean
}

/** A message: `{ ... }`, `< ... >`, or the whole file. */
export interface PbMessage extends PbPosition {
  kind: 'message'
  /** In order of first appearance. */
  fields: Map<string, PbField>
}

export type PbValue = PbString | PbNumber | PbIdentifier | PbMessage

/** One place a field name was written. */
export interface PbOccurrence extends PbPosition {
  /** Written in list form (`field: [ ... ]`). */
  list: boolean
}

/**
 * Every value given to one field name in one message, whatever syntax was used: `input {..} input {..}` and
 * `input [ {..}, {..} ]` both give two values. The position is where the name was first written.
 */
export interface PbField extends PbPosition {
  name: string
  values: PbValue[]
  occurrences: PbOccurrence[]
}

/** `file:line:col`, the prefix every positioned message uses. */
export function pbLocation (file: string, pos: PbPosition): string {
  return `${file}:${pos.line}:${pos.column}`
}

/** How a value reads in an error message: `a message`, `string "x"`, `number 12`, `identifier FOO`. */
export function describePbValue (value: PbValue): string {
  switch (value.kind) {
    case 'message': return 'a message'
    case 'string': return `string ${JSON.stringify(clip(value.value))}`
    case 'number': return `number ${value.text}`
    case 'identifier': return `identifier ${value.negative ? '-' : ''}${value.value}`
  }
}

/**
 * Parses protobuf text format into a tree.
 *
 * @param text the file contents
 * @param file the name used in error messages (`<file>:<line>:<col>: ...`)
 * @throws FlotillaError `WRK_ERR_CONFIG_PARSE` on the first syntax error, with its position
 */
export function parsePbtxt (text: string, file: string = 'config.pbtxt'): PbMessage {
  return new Parser(text, file).parseFile()
}

// Protobuf's default recursion limit; also keeps a hostile file from overflowing our stack.
const MAX_DEPTH = 100

type TokenType = 'identifier' | 'number' | 'string' | 'symbol' | 'eof'

interface Token {
  type: TokenType
  /** Source text of the token (symbols: the character). */
  text: string
  /** Decoded value of a string literal. */
  value: string
  line: number
  column: number
}

// Character codes the scanner tests against.
const TAB = 9
const NL = 10
const VT = 11
const FF = 12
const CR = 13
const SPACE = 32
const QUOTE = 34
const HASH = 35
const APOS = 39
const DOT = 46
const ZERO = 48
const SEVEN = 55
const NINE = 57
const BACKSLASH = 92
const UNDERSCORE = 95

const SYMBOLS = '{}<>[]:,;-'

function isDigit (c: number): boolean {
  return c >= ZERO && c <= NINE
}

function isHexDigit (c: number): boolean {
  return isDigit(c) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102)
}

function isIdentStart (c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === UNDERSCORE
}

function isIdentPart (c: number): boolean {
  return isIdentStart(c) || isDigit(c)
}

function clip (s: string): string {
  return s.length > 40 ? s.slice(0, 37) + '...' : s
}

const utf8Decoder = new TextDecoder('utf-8')
const utf8Encoder = new TextEncoder()

/**
 * Tokenizer and recursive-descent parser in one class: one token of lookahead, produced on demand, so the input is
 * scanned exactly once.
 */
class Parser {
  readonly #text: string
  readonly #file: string
  #pos = 0
  #line = 1
  #lineStart = 0
  #peeked: Token | undefined

  constructor (text: string, file: string) {
    // A UTF-8 BOM is not part of the text format, but editors write one.
    this.#text = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text
    this.#file = file
  }

  parseFile (): PbMessage {
    const root: PbMessage = { kind: 'message', fields: new Map(), line: 1, column: 1 }
    this.#parseFields(root, null, 0)
    return root
  }

  // ---- parser ----

  #parseFields (message: PbMessage, closer: '}' | '>' | null, depth: number): void {
    for (;;) {
      const tok = this.#peek()
      if (tok.type === 'eof') {
        if (closer === null) return
        throw this.#error(tok, `expected '${closer}' to close the message opened at ` +
          `${message.line}:${message.column}, got end of file`)
      }
      if (tok.type === 'symbol' && tok.text === closer) {
        this.#next()
        return
      }
      if (tok.type === 'symbol' && closer !== null && (tok.text === '}' || tok.text === '>')) {
        throw this.#error(tok, `expected '${closer}' to close the message opened at ` +
          `${message.line}:${message.column}, got '${tok.text}'`)
      }
      if (tok.type !== 'identifier') {
        throw this.#error(tok, `expected a field name${closer === null ? '' : ` or '${closer}'`}, got ${describe(tok)}`)
      }
      this.#next()
      this.#parseFieldValue(message, tok, depth)
      const sep = this.#peek()
      if (sep.type === 'symbol' && (sep.text === ',' || sep.text === ';')) this.#next()
    }
  }

  #parseFieldValue (message: PbMessage, nameTok: Token, depth: number): void {
    const name = nameTok.text
    let tok = this.#peek()
    let colon = false
    if (tok.type === 'symbol' && tok.text === ':') {
      colon = true
      this.#next()
      tok = this.#peek()
    }
    if (tok.type === 'symbol' && (tok.text === '{' || tok.text === '<')) {
      const field = this.#field(message, nameTok, false)
      field.values.push(this.#parseMessage(depth))
      return
    }
    if (tok.type === 'symbol' && tok.text === '[') {
      const field = this.#field(message, nameTok, true)
      this.#parseList(field, colon, depth)
      return
    }
    if (!colon) {
      throw this.#error(tok, `expected ':' or '{' after field name '${name}', got ${describe(tok)}`)
    }
    const field = this.#field(message, nameTok, false)
    field.values.push(this.#parseScalar(name))
  }

  #field (message: PbMessage, nameTok: Token, list: boolean): PbField {
    let field = message.fields.get(nameTok.text)
    if (field === undefined) {
      field = { name: nameTok.text, values: [], occurrences: [], line: nameTok.line, column: nameTok.column }
      message.fields.set(nameTok.text, field)
    }
    field.occurrences.push({ line: nameTok.line, column: nameTok.column, list })
    return field
  }

  #parseMessage (depth: number): PbMessage {
    const open = this.#next()
    if (depth + 1 > MAX_DEPTH) {
      throw this.#error(open, `messages are nested more than ${MAX_DEPTH} levels deep`)
    }
    const message: PbMessage = { kind: 'message', fields: new Map(), line: open.line, column: open.column }
    this.#parseFields(message, open.text === '{' ? '}' : '>', depth + 1)
    return message
  }

  #parseList (field: PbField, colon: boolean, depth: number): void {
    this.#next() // '['
    let tok = this.#peek()
    if (tok.type === 'symbol' && tok.text === ']') {
      this.#next()
      return
    }
    for (;;) {
      tok = this.#peek()
      if (tok.type === 'symbol' && (tok.text === '{' || tok.text === '<')) {
        field.values.push(this.#parseMessage(depth))
      } else if (!colon) {
        throw this.#error(tok, `expected '{' to start a message in the list for field '${field.name}', ` +
          `got ${describe(tok)} (a list of values needs ':' after the field name)`)
      } else {
        field.values.push(this.#parseScalar(field.name))
      }
      tok = this.#next()
      if (tok.type === 'symbol' && tok.text === ']') return
      if (!(tok.type === 'symbol' && tok.text === ',')) {
        throw this.#error(tok, `expected ',' or ']' in the list for field '${field.name}', got ${describe(tok)}`)
      }
    }
  }

  #parseScalar (name: string): PbString | PbNumber | PbIdentifier {
    const tok = this.#next()
    if (tok.type === 'string') {
      let value = tok.value
      // Adjacent literals concatenate, as in C.
      while (this.#peek().type === 'string') value += this.#next().value
      return { kind: 'string', value, line: tok.line, column: tok.column }
    }
    let negative = false
    let valueTok = tok
    if (tok.type === 'symbol' && tok.text === '-') {
      negative = true
      valueTok = this.#next()
    }
    if (valueTok.type === 'number') {
      return this.#number(valueTok, negative, tok)
    }
    if (valueTok.type === 'identifier') {
      return { kind: 'identifier', value: valueTok.text, negative, line: tok.line, column: tok.column }
    }
    throw this.#error(valueTok, negative
      ? `expected a number after '-' for field '${name}', got ${describe(valueTok)}`
      : `expected a value for field '${name}', got ${describe(valueTok)}`)
  }

  #number (tok: Token, negative: boolean, at: Token): PbNumber {
    const raw = tok.text
    let integer: bigint | null = null
    let value: number
    const lower = raw.toLowerCase()
    if (lower.startsWith('0x')) {
      integer = BigInt(raw)
    } else if (/^[0-9]+$/.test(raw)) {
      if (raw.length > 1 && raw.charCodeAt(0) === ZERO) {
        if (/[89]/.test(raw)) throw this.#error(tok, `numbers starting with a leading zero must be in octal, got '${raw}'`)
        integer = BigInt('0o' + raw.slice(1))
      } else {
        integer = BigInt(raw)
      }
    }
    if (integer !== null) {
      if (negative) integer = -integer
      value = Number(integer)
    } else {
      value = Number(lower.endsWith('f') ? raw.slice(0, -1) : raw)
      if (negative) value = -value
    }
    return { kind: 'number', text: (negative ? '-' : '') + raw, value, integer, line: at.line, column: at.column }
  }

  // ---- tokenizer ----

  #peek (): Token {
    this.#peeked ??= this.#scan()
    return this.#peeked
  }

  #next (): Token {
    const tok = this.#peek()
    this.#peeked = undefined
    return tok
  }

  #scan (): Token {
    const text = this.#text
    const n = text.length
    let i = this.#pos
    // Whitespace and comments; the only places a newline can occur outside an error.
    while (i < n) {
      const c = text.charCodeAt(i)
      if (c === NL) {
        i++
        this.#line++
        this.#lineStart = i
      } else if (c === SPACE || c === TAB || c === CR || c === VT || c === FF) {
        i++
      } else if (c === HASH) {
        while (i < n && text.charCodeAt(i) !== NL) i++
      } else {
        break
      }
    }
    this.#pos = i
    const line = this.#line
    const column = i - this.#lineStart + 1
    if (i >= n) return { type: 'eof', text: '', value: '', line, column }

    const c = text.charCodeAt(i)
    if (isIdentStart(c)) {
      let j = i + 1
      while (j < n && isIdentPart(text.charCodeAt(j))) j++
      this.#pos = j
      return { type: 'identifier', text: text.slice(i, j), value: '', line, column }
    }
    if (isDigit(c) || (c === DOT && isDigit(text.charCodeAt(i + 1)))) {
      return this.#scanNumber(i, line, column)
    }
    if (c === QUOTE || c === APOS) {
      return this.#scanString(i, line, column)
    }
    const ch = text[i] as string
    if (SYMBOLS.includes(ch)) {
      this.#pos = i + 1
      return { type: 'symbol', text: ch, value: '', line, column }
    }
    const cp = text.codePointAt(i) ?? c
    throw this.#errorAt(line, column, `unexpected character ${JSON.stringify(String.fromCodePoint(cp))}`)
  }

  #scanNumber (start: number, line: number, column: number): Token {
    const text = this.#text
    const n = text.length
    let i = start
    const c1 = text.charCodeAt(i + 1)
    if (text.charCodeAt(i) === ZERO && (c1 === 120 || c1 === 88)) { // 0x / 0X
      i += 2
      const digits = i
      while (i < n && isHexDigit(text.charCodeAt(i))) i++
      if (i === digits) throw this.#errorAt(line, column, `'${text.slice(start, i)}' needs hex digits after '0x'`)
    } else {
      while (i < n && isDigit(text.charCodeAt(i))) i++
      if (text.charCodeAt(i) === DOT) {
        i++
        while (i < n && isDigit(text.charCodeAt(i))) i++
      }
      const e = text.charCodeAt(i)
      if (e === 101 || e === 69) { // e / E
        let j = i + 1
        const sign = text.charCodeAt(j)
        if (sign === 43 || sign === 45) j++
        const digits = j
        while (j < n && isDigit(text.charCodeAt(j))) j++
        if (j === digits) {
          throw this.#errorAt(line, column, `'${text.slice(start, j)}' needs digits in its exponent`)
        }
        i = j
      }
      const f = text.charCodeAt(i)
      if (f === 102 || f === 70) i++ // protobuf accepts a C-style float suffix
    }
    const next = text.charCodeAt(i)
    if (i < n && (isIdentPart(next) || next === DOT)) {
      let j = i
      while (j < n && (isIdentPart(text.charCodeAt(j)) || text.charCodeAt(j) === DOT)) j++
      throw this.#errorAt(line, column, `invalid number '${text.slice(start, j)}'`)
    }
    this.#pos = i
    return { type: 'number', text: text.slice(start, i), value: '', line, column }
  }

  #scanString (start: number, line: number, column: number): Token {
    const text = this.#text
    const n = text.length
    const quote = text.charCodeAt(start)
    let i = start + 1
    let runStart = i
    // Most strings have no escapes: slice them directly and only build bytes when a backslash appears.
    let bytes: number[] | null = null
    const flush = (end: number): void => {
      if (bytes !== null && end > runStart) for (const b of utf8Encoder.encode(text.slice(runStart, end))) bytes.push(b)
    }
    for (;;) {
      if (i >= n) throw this.#errorAt(line, column, 'string literal is not terminated before end of file')
      const c = text.charCodeAt(i)
      if (c === quote) break
      if (c === NL) {
        throw this.#errorAt(line, column, 'string literal is not terminated before end of line ' +
          '(a string cannot span lines; use \\n, or adjacent strings "a" "b")')
      }
      if (c !== BACKSLASH) {
        i++
        continue
      }
      if (bytes === null) bytes = []
      flush(i)
      const escCol = i - this.#lineStart + 1
      i = this.#scanEscape(i + 1, bytes, line, escCol)
      runStart = i
    }
    let value: string
    if (bytes === null) {
      value = text.slice(start + 1, i)
    } else {
      flush(i)
      value = utf8Decoder.decode(new Uint8Array(bytes))
    }
    this.#pos = i + 1
    return { type: 'string', text: text.slice(start, i + 1), value, line, column }
  }

  /** Decodes one escape starting after the backslash at `i`; returns the index after it. */
  #scanEscape (i: number, bytes: number[], line: number, column: number): number {
    const text = this.#text
    const c = text[i]
    switch (c) {
      case 'n': bytes.push(10); return i + 1
      case 't': bytes.push(9); return i + 1
      case 'r': bytes.push(13); return i + 1
      case 'a': bytes.push(7); return i + 1
      case 'b': bytes.push(8); return i + 1
      case 'f': bytes.push(12); return i + 1
      case 'v': bytes.push(11); return i + 1
      case '\\': case '"': case "'": case '?':
        bytes.push(c.charCodeAt(0))
        return i + 1
      case 'x': case 'X': {
        let j = i + 1
        while (j < i + 3 && isHexDigit(text.charCodeAt(j))) j++
        if (j === i + 1) throw this.#errorAt(line, column, "'\\x' must be followed by 1 or 2 hex digits")
        bytes.push(parseInt(text.slice(i + 1, j), 16))
        return j
      }
      case 'u': case 'U': {
        const len = c === 'u' ? 4 : 8
        const hex = text.slice(i + 1, i + 1 + len)
        if (hex.length !== len || ![...hex].every(h => isHexDigit(h.charCodeAt(0)))) {
          throw this.#errorAt(line, column, `'\\${c}' must be followed by exactly ${len} hex digits`)
        }
        let cp = parseInt(hex, 16)
        let end = i + 1 + len
        if (cp >= 0xd800 && cp <= 0xdbff) {
          // A surrogate pair written as two \u escapes, as protobuf accepts.
          const low = /^\\u([dD][c-fC-F][0-9a-fA-F]{2})/.exec(text.slice(end, end + 6))
          if (low?.[1] === undefined) throw this.#errorAt(line, column, `'\\${c}${hex}' is an unpaired surrogate`)
          cp = 0x10000 + ((cp - 0xd800) << 10) + (parseInt(low[1], 16) - 0xdc00)
          end += 6
        } else if ((cp >= 0xdc00 && cp <= 0xdfff) || cp > 0x10ffff) {
          throw this.#errorAt(line, column, `'\\${c}${hex}' is not a valid Unicode code point`)
        }
        for (const b of utf8Encoder.encode(String.fromCodePoint(cp))) bytes.push(b)
        return end
      }
      default: {
        const d = text.charCodeAt(i)
        if (d >= ZERO && d <= SEVEN) {
          let j = i + 1
          while (j < i + 3 && text.charCodeAt(j) >= ZERO && text.charCodeAt(j) <= SEVEN) j++
          const v = parseInt(text.slice(i, j), 8)
          if (v > 255) throw this.#errorAt(line, column, `octal escape '\\${text.slice(i, j)}' is larger than one byte`)
          bytes.push(v)
          return j
        }
        if (i >= text.length || d === NL) throw this.#errorAt(line, column, 'a backslash must be followed by an escape')
        throw this.#errorAt(line, column, `invalid escape sequence '\\${String.fromCodePoint(text.codePointAt(i) ?? d)}'`)
      }
    }
  }

  #error (tok: Token, message: string): FlotillaError {
    return this.#errorAt(tok.line, tok.column, message)
  }

  #errorAt (line: number, column: number, message: string): FlotillaError {
    return createError('WRK_ERR_CONFIG_PARSE', `${this.#file}:${line}:${column}: ${message}`)
  }
}

function describe (tok: Token): string {
  if (tok.type === 'eof') return 'end of file'
  return `'${clip(tok.text)}'`
}
