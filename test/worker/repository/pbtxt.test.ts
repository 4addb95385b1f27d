import t from 'tap'
import { isFlotillaError } from '../../../common/errors.ts'
import { describePbValue, parsePbtxt, type PbMessage, type PbValue } from '../../../worker/repository/pbtxt.ts'

/** The tree without positions: field → values; scalars as `kind:value`, numbers with their exact integer. */
type Plain = string | { [field: string]: Plain[] }

function plain (value: PbValue): Plain {
  switch (value.kind) {
    case 'message': return plainMessage(value)
    case 'string': return `string:${value.value}`
    case 'identifier': return `identifier:${value.negative ? '-' : ''}${value.value}`
    case 'number': return `number:${value.value}${value.integer === null ? '' : `:${value.integer}n`}`
  }
}

function plainMessage (message: PbMessage): { [field: string]: Plain[] } {
  const out: { [field: string]: Plain[] } = {}
  for (const [name, field] of message.fields) out[name] = field.values.map(plain)
  return out
}

function first (text: string, field = 'a'): PbValue {
  const value = parsePbtxt(text).fields.get(field)?.values[0]
  if (value === undefined) throw new Error(`no value for ${field}`)
  return value
}

function parseError (text: string, file = 'config.pbtxt'): string {
  try {
    parsePbtxt(text, file)
  } catch (err) {
    if (isFlotillaError(err) && err.code === 'WRK_ERR_CONFIG_PARSE') return err.message
    throw err
  }
  throw new Error('expected a parse error')
}

t.test('scalar values keep their kind; interpretation is left to the schema', async t => {
  const cases: Array<[string, Plain]> = [
    ['a: "x"', 'string:x'],
    ["a: 'x'", 'string:x'],
    ['a: TYPE_FP32', 'identifier:TYPE_FP32'],
    ['a: KIND_CPU', 'identifier:KIND_CPU'],
    ['a: true', 'identifier:true'],
    ['a: True', 'identifier:True'],
    ['a: t', 'identifier:t'],
    ['a: f', 'identifier:f'],
    ['a: False', 'identifier:False'],
    ['a: inf', 'identifier:inf'],
    ['a: -inf', 'identifier:-inf'],
    ['a: nan', 'identifier:nan']
  ]
  for (const [text, expected] of cases) t.same(plain(first(text)), expected, text)
})

t.test('numbers: decimal, negative, hex, octal, floats; integers keep their exact value', async t => {
  const cases: Array<[string, number, bigint | null]> = [
    ['a: 0', 0, 0n],
    ['a: 42', 42, 42n],
    ['a: -7', -7, -7n],
    ['a: - 7', -7, -7n],
    ['a: 0x1F', 31, 31n],
    ['a: 0X10', 16, 16n],
    ['a: -0x10', -16, -16n],
    ['a: 017', 15, 15n],
    ['a: 1.5', 1.5, null],
    ['a: 1e-3', 0.001, null],
    ['a: 2E+2', 200, null],
    ['a: .5', 0.5, null],
    ['a: 5.', 5, null],
    ['a: 1.5f', 1.5, null],
    ['a: 2F', 2, null],
    ['a: -2.5e1', -25, null],
    ['a: 18446744073709551615', 18446744073709552000, 18446744073709551615n]
  ]
  for (const [text, value, integer] of cases) {
    const v = first(text)
    t.equal(v.kind, 'number', text)
    if (v.kind !== 'number') continue
    t.equal(v.value, value, `${text} value`)
    t.equal(v.integer, integer, `${text} integer`)
  }
  const v = first('a: -0x10')
  t.equal(v.kind === 'number' && v.text, '-0x10', 'text keeps the spelling and the sign')
})

t.test('strings: escapes, quotes, unicode, raw bytes as UTF-8, concatenation', async t => {
  const cases: Array<[string, string]> = [
    [String.raw`a: "line\nnext"`, 'line\nnext'],
    [String.raw`a: "\t\r\a\b\f\v"`, '\t\r\x07\b\f\v'],
    [String.raw`a: "back\\slash"`, 'back\\slash'],
    [String.raw`a: "dq \" sq \' q \?"`, 'dq " sq \' q ?'],
    [String.raw`a: 'it\'s "fine"'`, 'it\'s "fine"'],
    [String.raw`a: "\101\102\103"`, 'ABC'],
    [String.raw`a: "\0"`, '\0'],
    [String.raw`a: "\x41\x4a\x4B"`, 'AJK'],
    [String.raw`a: "\u00e9\u4e2d"`, 'é中'],
    [String.raw`a: "\U0001F600"`, '😀'],
    [String.raw`a: "\ud83d\ude00"`, '😀'],
    [String.raw`a: "\303\251"`, 'é'],
    [String.raw`a: "\xc3\xa9t\xc3\xa9"`, 'été'],
    ['a: "café ünïcode"', 'café ünïcode'],
    ['a: "a" "b" \'c\'', 'abc'],
    ['a: "multi"\n   "line"', 'multiline'],
    ['a: ""', ''],
    ['a: "# not a comment"', '# not a comment']
  ]
  for (const [text, expected] of cases) {
    const v = first(text)
    t.equal(v.kind === 'string' && v.value, expected, text)
  }
})

t.test('messages: braces, colon before braces, angle brackets, nesting, empty', async t => {
  t.same(plainMessage(parsePbtxt('a { b: 1 }')), { a: [{ b: ['number:1:1n'] }] })
  t.same(plainMessage(parsePbtxt('a: { b: 1 }')), { a: [{ b: ['number:1:1n'] }] })
  t.same(plainMessage(parsePbtxt('a < b: 1 >')), { a: [{ b: ['number:1:1n'] }] })
  t.same(plainMessage(parsePbtxt('a: < b < c: "x" > >')), { a: [{ b: [{ c: ['string:x'] }] }] })
  t.same(plainMessage(parsePbtxt('a {}')), { a: [{}] })
  t.same(plainMessage(parsePbtxt('')), {})
  t.same(plainMessage(parsePbtxt('  # only a comment\n\n')), {})
})

t.test('repeated fields: list form and repeated-key form collect into one field', async t => {
  const tree = parsePbtxt(`
    dims: [ 1, -1, 3 ]
    empty: []
    input [ { name: "a" }, { name: "b" } ]
    output: [ < name: "c" > ]
    input { name: "d" }
    output { name: "e" }
    tag: "x"
    tag: "y"
  `)
  t.same(plainMessage(tree), {
    dims: ['number:1:1n', 'number:-1:-1n', 'number:3:3n'],
    empty: [],
    input: [{ name: ['string:a'] }, { name: ['string:b'] }, { name: ['string:d'] }],
    output: [{ name: ['string:c'] }, { name: ['string:e'] }],
    tag: ['string:x', 'string:y']
  })
  t.same(tree.fields.get('input')?.occurrences.map(o => o.list), [true, false], 'each occurrence records its syntax')
  t.same([...tree.fields.keys()], ['dims', 'empty', 'input', 'output', 'tag'], 'fields in order of first appearance')
})

t.test('map fields are plain repeated entry messages', async t => {
  const tree = parsePbtxt('parameters { key: "k1" value: { string_value: "v1" } }\n' +
    'parameters: [ { key: "k2", value { string_value: "v2" } } ]')
  t.same(plainMessage(tree), {
    parameters: [
      { key: ['string:k1'], value: [{ string_value: ['string:v1'] }] },
      { key: ['string:k2'], value: [{ string_value: ['string:v2'] }] }
    ]
  })
})

t.test('comments and optional , or ; separators', async t => {
  const tree = parsePbtxt(`# header
    name: "m", # trailing comment
    max_batch_size: 8; platform: "p"
    input { name: "x"; dims: [ 1, # comment inside a list
      2 ] },
    # dims: [ 99 ]
  `)
  t.same(plainMessage(tree), {
    name: ['string:m'],
    max_batch_size: ['number:8:8n'],
    platform: ['string:p'],
    input: [{ name: ['string:x'], dims: ['number:1:1n', 'number:2:2n'] }]
  })
})

t.test('every field and value remembers its 1-based line and column', async t => {
  const tree = parsePbtxt('name: "m"\ninput {\n\tname: "x"\n  dims: [ 4,\n -1 ]\n}\n')
  const name = tree.fields.get('name')
  t.match(name, { line: 1, column: 1, values: [{ line: 1, column: 7 }] })
  const input = tree.fields.get('input')
  t.match(input, { line: 2, column: 1, values: [{ kind: 'message', line: 2, column: 7 }] })
  const inner = input?.values[0]
  if (inner?.kind !== 'message') throw new Error('expected a message')
  t.match(inner.fields.get('name'), { line: 3, column: 2, values: [{ line: 3, column: 8 }] })
  t.match(inner.fields.get('dims'), { line: 4, column: 3, values: [{ line: 4, column: 11 }, { line: 5, column: 2 }] })
  t.match(parsePbtxt('\uFEFFa: 1').fields.get('a'), { line: 1, column: 1 }, 'a byte-order mark is skipped')
})

t.test('syntax errors name file, line and column', async t => {
  const cases: Array<[string, string]> = [
    ['name: "m"\ninput {\n  name: "x"\n  dims }\n', "config.pbtxt:4:8: expected ':' or '{' after field name 'dims', got '}'"],
    ['dims 3', "config.pbtxt:1:6: expected ':' or '{' after field name 'dims', got '3'"],
    ['a: "open', 'config.pbtxt:1:4: string literal is not terminated before end of file'],
    ['a: "open\nb: 1', 'config.pbtxt:1:4: string literal is not terminated before end of line ' +
      '(a string cannot span lines; use \\n, or adjacent strings "a" "b")'],
    ['input {\n  name: "x"\n', "config.pbtxt:3:1: expected '}' to close the message opened at 1:7, got end of file"],
    ['a { b: 1 >', "config.pbtxt:1:10: expected '}' to close the message opened at 1:3, got '>'"],
    ['a < b: 1 }', "config.pbtxt:1:10: expected '>' to close the message opened at 1:3, got '}'"],
    ['}', "config.pbtxt:1:1: expected a field name, got '}'"],
    ['a: 1\n"x"', 'config.pbtxt:2:1: expected a field name, got \'"x"\''],
    ['a: [1, 2,]', "config.pbtxt:1:10: expected a value for field 'a', got ']'"],
    ['a: [1 2]', "config.pbtxt:1:7: expected ',' or ']' in the list for field 'a', got '2'"],
    ['dims [1, 2]', "config.pbtxt:1:7: expected '{' to start a message in the list for field 'dims', got '1' " +
      "(a list of values needs ':' after the field name)"],
    ['a:', "config.pbtxt:1:3: expected a value for field 'a', got end of file"],
    ['a: }', "config.pbtxt:1:4: expected a value for field 'a', got '}'"],
    ['a: -"x"', 'config.pbtxt:1:5: expected a number after \'-\' for field \'a\', got \'"x"\''],
    ['a: 1x', "config.pbtxt:1:4: invalid number '1x'"],
    ['a: 1.2.3', "config.pbtxt:1:4: invalid number '1.2.3'"],
    ['a: 0x', "config.pbtxt:1:4: '0x' needs hex digits after '0x'"],
    ['a: 1e+', "config.pbtxt:1:4: '1e+' needs digits in its exponent"],
    ['a: 09', "config.pbtxt:1:4: numbers starting with a leading zero must be in octal, got '09'"],
    ['  a: "ok\\q"', "config.pbtxt:1:9: invalid escape sequence '\\q'"],
    ['a: "\\x"', "config.pbtxt:1:5: '\\x' must be followed by 1 or 2 hex digits"],
    ['a: "\\u12"', "config.pbtxt:1:5: '\\u' must be followed by exactly 4 hex digits"],
    ['a: "\\ud800"', "config.pbtxt:1:5: '\\ud800' is an unpaired surrogate"],
    ['a: "\\400"', "config.pbtxt:1:5: octal escape '\\400' is larger than one byte"],
    ['a: "\\udc00"', "config.pbtxt:1:5: '\\udc00' is not a valid Unicode code point"],
    ['a: "\\U00110000"', "config.pbtxt:1:5: '\\U00110000' is not a valid Unicode code point"],
    ['a: 1\n  @b: 2', 'config.pbtxt:2:3: unexpected character "@"'],
    ['[ext.field]: 1', "config.pbtxt:1:1: expected a field name, got '['"],
    ['a: 1\r\nb: }', "config.pbtxt:2:4: expected a value for field 'b', got '}'"]
  ]
  for (const [text, message] of cases) t.equal(parseError(text), message, JSON.stringify(text))
})

t.test('the file name in messages is a parameter', async t => {
  t.equal(parseError('a {', 'models/resnet/config.pbtxt'),
    "models/resnet/config.pbtxt:1:4: expected '}' to close the message opened at 1:3, got end of file")
})

t.test('nesting is limited so a hostile file cannot overflow the stack', async t => {
  t.equal(parseError('a {'.repeat(101) + '}'.repeat(101)),
    'config.pbtxt:1:303: messages are nested more than 100 levels deep')
  t.doesNotThrow(() => parsePbtxt('a {'.repeat(100) + '}'.repeat(100)))
})

t.test('describePbValue words values for error messages', async t => {
  t.equal(describePbValue(first('a { }')), 'a message')
  t.equal(describePbValue(first('a: "x"')), 'string "x"')
  t.equal(describePbValue(first('a: -0x1')), 'number -0x1')
  t.equal(describePbValue(first('a: -inf')), 'identifier -inf')
})
