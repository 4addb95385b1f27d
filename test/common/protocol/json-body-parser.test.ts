import t from 'tap'
import { BytesDataBuilder, type BytesData } from '../../../common/protocol/bytes-data.ts'
import {
  JsonDataRange, MAX_PARSE_DEPTH, PARSE_FAILED, leafKind, nextLeaf, parseJsonBody, pushBytesString, readDouble, readInteger,
  readNarrowed, scanNumber, tokenEnd
} from '../../../common/protocol/json-body-parser.ts'
import { float32ToBf16Bits, float32ToFp16Bits } from '../../../common/protocol/datatypes.ts'
import { seededRandom } from '../../../common/seeded-random.ts'

const parse = (text: string): unknown => parseJsonBody(Buffer.from(text))

t.test('documents without tensors parse exactly as JSON.parse parses them', async t => {
  const docs = [
    '{}', '[]', '0', '-0', '"x"', 'true', 'false', 'null', ' \t\n\r{ } ',
    '{"a":1,"b":[1,2.5,-3e-7,1E+300,0.1],"c":{"d":null,"e":[true,false]},"f":"g"}',
    '{"s":"\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\ud83d\\ude00\\ud800","t":"日本 é"}',
    '{"a":1,"b":2,"a":3}', '{"2":"x","1":"y","b":1,"0":2}', '{"__proto__":{"x":1},"y":2}',
    '[1e400,-1e400,1e-400,123456789012345678901234567890,0.30000000000000004,9007199254740993]',
    '{"inputs":5,"outputs":{"data":[1]}}', '{"x":{"inputs":[{"data":[1,2]}]}}',
    '{"inputs":[1,"a",[{"data":[1]}],null]}',
    JSON.stringify({ deep: JSON.parse('['.repeat(500) + ']'.repeat(500)) })
  ]
  for (const doc of docs) {
    const ours = parse(doc)
    t.same(ours, JSON.parse(doc), doc.slice(0, 60))
    t.equal(JSON.stringify(ours), JSON.stringify(JSON.parse(doc)), `${doc.slice(0, 60)}: key order`)
  }
  const proto = parse('{"__proto__":{"x":1}}') as Record<string, unknown>
  t.ok(Object.hasOwn(proto, '__proto__'), '__proto__ is an own key')
  t.equal(Object.getPrototypeOf(proto), Object.prototype)
  t.same(parse('{"n":NaN,"i":[Infinity,-Infinity]}'), { n: NaN, i: [Infinity, -Infinity] }, 'RapidJSON\'s tokens')
})

t.test('many distinct short strings: the string cache never mixes them up', async t => {
  const random = seededRandom(5)
  const keys: string[] = []
  for (let i = 0; i < 5000; i++) {
    let k = ''
    for (let j = 0; j < 1 + (i % 12); j++) k += String.fromCharCode(0x41 + Math.floor(random() * 6))
    keys.push(k)
  }
  const doc = JSON.stringify(keys.map((k, i) => ({ [k]: k, v: i })))
  t.same(parse(doc), JSON.parse(doc))
  t.same(parse(doc), JSON.parse(doc), 'and again, from the cache')
})

t.test('the data arrays of the root\'s inputs and outputs are left in place', async t => {
  const text = '{"inputs":[{"name":"A","data":[[1, 2],[],[[3]]]},{"name":"B","data":"x"},{"data":[]}],' +
    '"outputs":[{"data":["a",{"b":[1]},null]}],"data":[1],"x":[{"data":[1]}]}'
  const doc = parse(text) as { inputs: Array<{ data: unknown }>, outputs: Array<{ data: unknown }>, data: unknown, x: unknown }
  const a = doc.inputs[0]?.data as JsonDataRange
  t.ok(a instanceof JsonDataRange)
  t.equal(text.slice(a.start, a.end), '[[1, 2],[],[[3]]]')
  t.equal(a.leafCount, 3)
  t.equal(a.depth, 3)
  t.equal(doc.inputs[1]?.data, 'x', 'a data member that is not an array is a plain value')
  const empty = doc.inputs[2]?.data as JsonDataRange
  t.same([empty.leafCount, empty.depth], [0, 1])
  const out = doc.outputs[0]?.data as JsonDataRange
  t.same([out.leafCount, out.depth], [3, 1], 'objects are leaves')
  t.same(doc.data, [1], 'data elsewhere is built')
  t.same(doc.x, [{ data: [1] }])

  const deep = '{"inputs":[{"data":' + '['.repeat(5000) + '7' + ']'.repeat(5000) + '}]}'
  const range = (parse(deep) as { inputs: Array<{ data: JsonDataRange }> }).inputs[0]?.data
  t.same([range?.leafCount, range?.depth], [1, 5000], 'no depth limit inside data arrays (the codec has its own)')
})

t.test('malformed bodies, and nesting beyond the limit, are left to JSON.parse', async t => {
  const bad = [
    '', ' ', '{', '}', '{"a"}', '{"a":}', '{"a":1,}', '[1,]', '[,1]', '{a:1}', "{'a':1}", '01', '1.', '.5', '+1', '1e', '1e+',
    '-', '--1', 'nan', 'NaNa', 'Infinity1', '-NaN', 'tru', 'nul', '"a', '"\\x"', '"\\u12g4"', '"a\tb"', '"a\nb"', '{} {}',
    '[1] x', '{"inputs":[{"data":[1,,2]}]}', '{"inputs":[{"data":[1 2]}]}', '{"inputs":[{"data":[1,[2]}]}',
    '{"inputs":[{"data":[1]]}]}', '{"inputs":[{"data":["\\q"]}]}', '{"inputs":[{"data":[{"a":}]}]}',
    '{"inputs":[{"data":[', '\ufeff{}'
  ]
  for (const text of bad) t.equal(parse(text), PARSE_FAILED, JSON.stringify(text))
  t.not(parse('['.repeat(MAX_PARSE_DEPTH) + ']'.repeat(MAX_PARSE_DEPTH)), PARSE_FAILED, 'at the limit')
  t.equal(parse('['.repeat(MAX_PARSE_DEPTH + 2) + ']'.repeat(MAX_PARSE_DEPTH + 2)), PARSE_FAILED, 'beyond it')
  t.equal(parseJsonBody(Buffer.from([0x7b, 0xff, 0x7d])), PARSE_FAILED, 'a byte that is not UTF-8 outside a string')
})

/** Decimal tokens of every shape the readers handle differently. */
function tokens (count: number): string[] {
  const random = seededRandom(11)
  const digits = (n: number): string => {
    let s = String(1 + Math.floor(random() * 9))
    for (let i = 1; i < n; i++) s += Math.floor(random() * 10)
    return s
  }
  const out = ['0', '-0', '0.0', '-0.0', '1', '5e-324', '2e-324', '1.7976931348623157e308', '1.7976931348623159e308',
    '9007199254740993', '0.1', '3.4028235677973366e38', '3.4028235677973362e38', '65519.99', '65520', '1e23', '1e22', '1e-22']
  while (out.length < count) {
    const kind = out.length % 6
    if (kind === 0) out.push(String(Math.fround(random() * 10 ** Math.floor(random() * 20 - 10))))
    else if (kind === 1) out.push(String(random() * 10 ** Math.floor(random() * 80 - 40)))
    else if (kind === 2) {
      const d = digits(1 + Math.floor(random() * 25))
      const k = Math.floor(random() * d.length)
      out.push(d.slice(0, k) + (k > 0 ? '.' : '0.') + d.slice(k))
    } else if (kind === 3) out.push(digits(1 + Math.floor(random() * 22)) + (random() < 0.5 ? 'e' : 'E-') + Math.floor(random() * 60))
    else if (kind === 4) out.push('-' + String(Math.fround(random() * 70000)))
    else out.push('0.' + '0'.repeat(Math.floor(random() * 30)) + digits(1 + Math.floor(random() * 20)))
  }
  return out
}

t.test('readDouble gives JSON.parse\'s double; readNarrowed gives that double narrowed', async t => {
  let doubles = 0
  let narrowed = 0
  let ends = 0
  const all = tokens(60000)
  // Exact float32 midpoints, where narrowing the approximate value could go either way.
  const random = seededRandom(3)
  for (let i = 0; i < 5000; i++) {
    const f = new Float32Array([random() * 100])
    const bits = new Uint32Array(f.buffer)
    const low = f[0] as number
    bits[0] = (bits[0] as number) + 1
    const mid = (low + (f[0] as number)) / 2
    all.push(String(mid), mid.toPrecision(21))
  }
  for (const token of all) {
    const b = Buffer.from(token + ',')
    const want = Number(token)
    if (!Object.is(readDouble(b, 0), want)) doubles++
    if (tokenEnd !== token.length) ends++
    for (const round of [Math.fround, float32ToFp16Bits, float32ToBf16Bits]) {
      if (!Object.is(readNarrowed(b, 0, round), round(want))) narrowed++
    }
  }
  t.equal(doubles, 0, `readDouble matches Number() on ${all.length} tokens`)
  t.equal(narrowed, 0, 'readNarrowed matches narrowing Number()')
  t.equal(ends, 0, 'tokenEnd is just past each token')
})

t.test('token helpers', async t => {
  const b = Buffer.from('[ 12 ,-7,1.5,1e2,123456789012345678,"x",NaN,-Infinity,true]')
  const ints: unknown[] = []
  let p = 0
  for (let i = 0; i < 9; i++) {
    p = nextLeaf(b, p)
    ints.push([readInteger(b, p), leafKind(b, p)])
    const end = scanNumber(b, p)
    p = end > 0 ? end : b.indexOf(',', p) > 0 ? b.indexOf(',', p) : b.length - 1
  }
  t.same(ints, [[12, 'integer'], [-7, 'integer'], [NaN, 'number'], [NaN, 'number'], [NaN, 'integer'], [NaN, 'string'],
    [NaN, 'non-finite'], [NaN, 'non-finite'], [NaN, 'other']])
  t.equal(scanNumber(Buffer.from('-'), 0), -1)
  t.equal(scanNumber(Buffer.from('1.e5'), 0), -1)

  // Four string tokens: ASCII, valid UTF-8, an escape, and invalid UTF-8 (0xff between 'a' and 'b').
  const s = Buffer.concat([Buffer.from('"plain","é","\\n","a'), Buffer.from([0xff]), Buffer.from('b",')])
  const starts = [0, 8, 13, 18]
  // Each token into a builder of its own: a builder keeps views only while every element it holds is one.
  const one = (p: number): { data: BytesData, length: number, end: number } => {
    const builder = new BytesDataBuilder(1)
    const length = pushBytesString(s, p, builder)
    return { data: builder.finish(), length, end: tokenEnd }
  }
  const plain = one(starts[0]!)
  t.equal(plain.data.get(0).buffer, s.buffer, 'ASCII without escapes: a view over the body')
  t.equal(plain.data.get(0).byteOffset, s.byteOffset + 1, 'of the token\'s contents')
  t.equal(Buffer.from(plain.data.get(0)).toString(), 'plain')
  t.equal(plain.length, 5, 'returns the element\'s length')
  t.equal(plain.end, 7, 'tokenEnd is just past the closing quote')
  const utf8 = one(starts[1]!)
  t.equal(utf8.data.get(0).buffer, s.buffer, 'valid UTF-8: a view too')
  t.equal(Buffer.from(utf8.data.get(0)).toString(), 'é')
  t.equal(utf8.length, 2, 'the length in bytes')
  t.equal(utf8.end, 12)
  const escaped = one(starts[2]!)
  t.not(escaped.data.get(0).buffer, s.buffer, 'escapes: decoded into the builder\'s own buffer')
  t.same(Array.from(escaped.data.get(0)), [0x0a])
  t.equal(escaped.length, 1)
  t.equal(escaped.end, 17)
  const invalid = one(starts[3]!)
  t.not(invalid.data.get(0).buffer, s.buffer, 'invalid UTF-8: encoded into the builder\'s own buffer')
  t.same(Array.from(invalid.data.get(0)), Array.from(new TextEncoder().encode('a\ufffdb')),
    'as TextEncoder encodes the string JSON.parse makes: U+FFFD for the invalid byte')
  t.equal(invalid.length, 5)
  t.equal(invalid.end, 23)

  // All four into one builder, as a tensor's strings go: the views before the first copy are copied in with it.
  const builder = new BytesDataBuilder(starts.length)
  t.same(starts.map(p => pushBytesString(s, p, builder)), [5, 2, 1, 5], 'each element\'s length')
  const all = builder.finish()
  t.same(all.toArray().map(e => Array.from(e)), [plain, utf8, escaped, invalid].map(r => Array.from(r.data.get(0))),
    'the same elements')
  t.ok(all.toArray().every(e => e.buffer !== s.buffer), 'none left a view of the body')
})

t.test('escaped strings are unescaped into the tensor as TextEncoder encodes what JSON.parse makes of them', async t => {
  // Escapes of every kind, written both as JSON.stringify writes them and as \uXXXX throughout: surrogate pairs,
  // lone surrogates (U+FFFD), a high surrogate before an escape that is not a low one, raw multi-byte UTF-8 beside them.
  const pieces = ['a', 'é', '😀', '\n', '"', '\\', '/', '\b', '\f', '\r', '\t', '\u0001', '\ud800', '\udc00', '\u00ff', '\u2028']
  const random = seededRandom(7)
  const encoder = new TextEncoder()
  let wrong = 0
  for (let n = 0; n < 3000; n++) {
    let text = ''
    for (let i = Math.floor(random() * 8); i > 0; i--) text += pieces[Math.floor(random() * pieces.length)]
    const token = random() < 0.5
      ? JSON.stringify(text)
      : `"${[...text].map(ch => [...Array(ch.length).keys()].map(k => `\\u${ch.charCodeAt(k).toString(16).padStart(4, '0')}`).join('')).join('')}"`
    const body = Buffer.from(` ${token},`)
    const builder = new BytesDataBuilder(1)
    const length = pushBytesString(body, 1, builder)
    const got = builder.finish().get(0)
    const want = encoder.encode(JSON.parse(token) as string)
    if (length !== want.length || !Buffer.from(got).equals(want) || tokenEnd !== body.length - 1) {
      // ASCII only in the message: a raw U+2028 in it would break the TAP stream and lose the failure.
      const shown = token.replace(/[^\x20-\x7e]/g, (c) => `<U+${c.charCodeAt(0).toString(16)}>`)
      if (wrong++ < 3) t.fail(`${shown}: got ${Buffer.from(got).toString('hex')}, want ${Buffer.from(want).toString('hex')}`)
    }
  }
  t.equal(wrong, 0, '3000 strings')
})
