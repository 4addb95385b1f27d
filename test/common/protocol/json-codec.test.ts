import t from 'tap'
import { type ErrorCode, isFlotillaError } from '../../../common/errors.ts'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import {
  DEFAULT_MAX_INPUT_BYTES,
  decodeInferRequest,
  decodeInferResponse,
  encodeInferRequest,
  encodeInferResponse,
  requestIdPrefix
} from '../../../common/protocol/json-codec.ts'
import { type InferRequest, type InferResponse, type Tensor } from '../../../common/protocol/types.ts'
import { bytes as bytesData, elementsOf, stringsOf } from '../../helpers/bytes-data.ts'
import { type Asserts, throwsCoded } from '../../helpers/coded-error.ts'

/** Asserts that `fn` throws a coded error with exactly this code and message. */
function fails (t: Asserts, fn: () => unknown, code: ErrorCode, message: string, what?: string): void {
  throwsCoded(t, fn, { code, message }, what)
}

const body = (request: unknown): string => JSON.stringify(request)

/** A one-input request body. */
function oneInput (input: Record<string, unknown>, extra: Record<string, unknown> = {}): string {
  return body({ ...extra, inputs: [{ name: 'INPUT0', ...input }] })
}

function decodeOne (input: Record<string, unknown>, options?: { maxInputBytes?: number }): Tensor {
  const request = decodeInferRequest(oneInput(input), options)
  return request.inputs[0] as Tensor
}

function response (outputs: Tensor[], extra: Partial<InferResponse> = {}): InferResponse {
  return { model_name: 'm', model_version: '1', ...extra, outputs }
}

/** The `data` text of the first output, as encodeInferResponse prints it. */
function encodedData (tensor: Tensor): string {
  const text = encodeInferResponse(response([tensor]))
  const m = /"data":\[(.*)\]\}\]\}$/.exec(text)
  if (m === null) throw new Error(`no data in ${text}`)
  return m[1] as string
}

const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s)

t.test('every datatype decodes to its storage and encodes back', async t => {
  const cases: Array<{ datatype: string, data: unknown[], ctor: unknown, stored: unknown[], encoded: string }> = [
    { datatype: 'BOOL', data: [true, false, true], ctor: Uint8Array, stored: [1, 0, 1], encoded: 'true,false,true' },
    { datatype: 'UINT8', data: [0, 255, 44], ctor: Uint8Array, stored: [0, 255, 44], encoded: '0,255,44' },
    { datatype: 'UINT16', data: [65535, 0, 7], ctor: Uint16Array, stored: [65535, 0, 7], encoded: '65535,0,7' },
    {
      datatype: 'UINT32',
      data: [4294967295, 5, 1],
      ctor: Uint32Array,
      stored: [4294967295, 5, 1],
      encoded: '4294967295,5,1'
    },
    {
      datatype: 'UINT64',
      data: [0, 9007199254740991, 42],
      ctor: BigUint64Array,
      stored: [0n, 9007199254740991n, 42n],
      encoded: '0,9007199254740991,42'
    },
    { datatype: 'INT8', data: [-128, 127, -1], ctor: Int8Array, stored: [-128, 127, -1], encoded: '-128,127,-1' },
    {
      datatype: 'INT16',
      data: [-32768, 32767, 0],
      ctor: Int16Array,
      stored: [-32768, 32767, 0],
      encoded: '-32768,32767,0'
    },
    {
      datatype: 'INT32',
      data: [-1, 2147483647, -2147483648],
      ctor: Int32Array,
      stored: [-1, 2147483647, -2147483648],
      encoded: '-1,2147483647,-2147483648'
    },
    {
      datatype: 'INT64',
      data: [-9007199254740991, 0, 42],
      ctor: BigInt64Array,
      stored: [-9007199254740991n, 0n, 42n],
      encoded: '-9007199254740991,0,42'
    },
    { datatype: 'FP16', data: [1, 0.5, -2], ctor: Uint16Array, stored: [0x3c00, 0x3800, 0xc000], encoded: '1,0.5,-2' },
    {
      datatype: 'BF16',
      data: [1, -2, 0.1],
      ctor: Uint16Array,
      stored: [0x3f80, 0xc000, 0x3dcd],
      encoded: '1,-2,0.10009765625'
    },
    {
      datatype: 'FP32',
      data: [0.1, 1.5, -3],
      ctor: Float32Array,
      stored: [Math.fround(0.1), 1.5, -3],
      encoded: '0.10000000149011612,1.5,-3'
    },
    { datatype: 'FP64', data: [0.1, 1e300, -2.5], ctor: Float64Array, stored: [0.1, 1e300, -2.5], encoded: '0.1,1e+300,-2.5' }
  ]
  for (const c of cases) {
    const tensor = decodeOne({ datatype: c.datatype, shape: [3], data: c.data })
    t.equal(tensor.datatype, c.datatype)
    t.same(tensor.shape, [3])
    t.equal(tensor.data.constructor, c.ctor, `${c.datatype} storage`)
    t.same(Array.from(tensor.data as ArrayLike<unknown>), c.stored, `${c.datatype} values`)
    t.equal(encodedData(tensor), c.encoded, `${c.datatype} encoded`)
  }

  const bytes = decodeOne({ datatype: 'BYTES', shape: [4], data: ['hello', '', '日本', 'a"b\\c\n'] })
  t.ok(bytes.data instanceof BytesData, 'BYTES is a BytesData of byte strings')
  t.same(elementsOf(bytes.data).map(b => Array.from(b)), [
    Array.from(utf8('hello')), [], Array.from(utf8('日本')), Array.from(utf8('a"b\\c\n'))
  ], 'BYTES elements are UTF-8 bytes')
  t.ok(elementsOf(bytes.data).every(b => b instanceof Uint8Array))
  t.equal(encodedData(bytes), '"hello","","日本","a\\"b\\\\c\\n"', 'BYTES encoded as escaped JSON strings')
})

t.test('flat and nested data are equivalent; the nesting structure is not checked', async t => {
  const flat = decodeOne({ datatype: 'INT32', shape: [2, 3], data: [1, 2, 3, 4, 5, 6] })
  const nested = decodeOne({ datatype: 'INT32', shape: [2, 3], data: [[1, 2, 3], [4, 5, 6]] })
  const odd = decodeOne({ datatype: 'INT32', shape: [2, 3], data: [[[1], [2, [3]]], 4, [], [[5, 6]]] })
  t.same(Array.from(flat.data as Int32Array), [1, 2, 3, 4, 5, 6])
  t.same(nested.data, flat.data)
  t.same(odd.data, flat.data, 'any nesting that flattens to the right count is accepted, as in Triton')
  const bytes = decodeOne({ datatype: 'BYTES', shape: [2, 1], data: [['a'], ['b']] })
  t.same(elementsOf(bytes.data).map(b => Array.from(b)), [[97], [98]])
  t.equal(encodedData(nested), '1,2,3,4,5,6', 'output data is always flattened')
})

t.test('nesting depth limit', async t => {
  const nest = (levels: number): unknown => {
    let v: unknown = 7
    for (let i = 0; i < levels; i++) v = [v]
    return v
  }
  const ok = decodeOne({ datatype: 'INT64', shape: [1, 1], data: nest(99) })
  t.same(Array.from(ok.data as BigInt64Array), [7n], '99 levels are accepted')
  fails(t, () => decodeOne({ datatype: 'INT64', shape: [1, 1], data: nest(100) }), 'PROTO_ERR_INVALID_REQUEST',
    "Unable to parse 'data' for input 'INPUT0': JSON nesting depth exceeds maximum allowed limit (100)")
  fails(t, () => decodeOne({ datatype: 'BYTES', shape: [1, 1], data: nest(120) }), 'PROTO_ERR_INVALID_REQUEST',
    "Unable to parse 'data' for input 'INPUT0': JSON nesting depth exceeds maximum allowed limit (100)")
})

t.test('leaf count must match the shape', async t => {
  fails(t, () => decodeOne({ datatype: 'INT32', shape: [2, 8], data: [1, 2, 3] }), 'PROTO_ERR_DATA_MISMATCH',
    "Failed to parse 'data' field: shape does not match true shape " +
    "(input 'INPUT0', shape [2,8]: expected 16 elements, got 3)")
  fails(t, () => decodeOne({ datatype: 'INT32', shape: [2], data: [[1, 2], [3]] }), 'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data': Shape does not match true shape of 'data' field " +
    "(input 'INPUT0', shape [2]: expected 2 elements, got 3)")
  fails(t, () => decodeOne({ datatype: 'BYTES', shape: [3], data: ['a', 'b'] }), 'PROTO_ERR_DATA_MISMATCH',
    "Failed to parse 'data' field: shape does not match true shape " +
    "(input 'INPUT0', shape [3]: expected 3 elements, got 2)")
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [], data: [] }), 'PROTO_ERR_DATA_MISMATCH',
    "Failed to parse 'data' field: shape does not match true shape " +
    "(input 'INPUT0', shape []: expected 1 elements, got 0)")
  const scalar = decodeOne({ datatype: 'FP32', shape: [], data: [2.5] })
  t.same(Array.from(scalar.data as Float32Array), [2.5], 'a scalar shape holds one element')
})

t.test('zero-element shapes read no data, as Triton', async t => {
  for (const datatype of ['FP32', 'INT64', 'BYTES', 'BOOL']) {
    const tensor = decodeOne({ datatype, shape: [2, 0], data: [] })
    t.equal(tensor.data.length, 0, `${datatype} empty`)
    t.same(tensor.shape, [2, 0])
  }
  const ignored = decodeOne({ datatype: 'INT32', shape: [0], data: [1, 2, 3] })
  t.equal(ignored.data.length, 0, 'data is not read at all for a zero-element shape')
  t.equal(encodedData(ignored), '')
})

t.test('per-datatype leaf rules', async t => {
  const prefix = "Unable to parse 'data' for input 'INPUT0': "
  const cases: Array<[string, unknown[], string]> = [
    ['BOOL', [true, 1], 'BOOL element at index 1 must be true or false, got 1'],
    ['BOOL', ['true'], 'BOOL element at index 0 must be true or false, got string "true"'],
    ['BOOL', [null], 'BOOL element at index 0 must be true or false, got null'],
    ['UINT8', [1, -1], 'UINT8 element at index 1 must be an integer in [0, 255], got -1'],
    ['UINT32', [1.5], 'UINT32 element at index 0 must be an integer in [0, 4294967295], got 1.5'],
    ['UINT16', [true], 'UINT16 element at index 0 must be an integer in [0, 65535], got true'],
    ['UINT64', [2 ** 65], 'UINT64 element at index 0 must be an integer in [0, 18446744073709551615], got 36893488147419103000'],
    ['UINT64', [-5], 'UINT64 element at index 0 must be an integer in [0, 18446744073709551615], got -5'],
    ['INT32', [1, 2, 1.5], 'INT32 element at index 2 must be an integer in [-2147483648, 2147483647], got 1.5'],
    ['INT32', ['3'], 'INT32 element at index 0 must be an integer in [-2147483648, 2147483647], got string "3"'],
    ['INT8', [{}], 'INT8 element at index 0 must be an integer in [-128, 127], got an object'],
    ['INT8', [[1], [null]], 'INT8 element at index 1 must be an integer in [-128, 127], got null'],
    ['INT64', [2 ** 64],
      'INT64 element at index 0 must be an integer in [-9223372036854775808, 9223372036854775807], got 18446744073709552000'],
    ['INT64', [0.5], 'INT64 element at index 0 must be an integer in [-9223372036854775808, 9223372036854775807], got 0.5'],
    ['UINT64', ['x'], 'UINT64 element at index 0 must be an integer in [0, 18446744073709551615], got string "x"'],
    ['FP32', ['x'], 'FP32 element at index 0 must be a number, got string "x"'],
    ['FP64', [1, null], 'FP64 element at index 1 must be a number, got null'],
    ['FP16', [false], 'FP16 element at index 0 must be a number, got false'],
    ['BF16', ['1'], 'BF16 element at index 0 must be a number, got string "1"'],
    ['BYTES', ['a', 5], 'BYTES element at index 1 must be a string, got 5'],
    ['BYTES', [['a'], [null]], 'BYTES element at index 1 must be a string, got null']
  ]
  for (const [datatype, data, message] of cases) {
    const shape = [data.length]
    fails(t, () => decodeOne({ datatype, shape, data }), 'PROTO_ERR_DATA_MISMATCH', prefix + message)
  }
  const long = 'x'.repeat(100)
  fails(t, () => decodeOne({ datatype: 'INT32', shape: [1], data: [long] }), 'PROTO_ERR_DATA_MISMATCH',
    `${prefix}INT32 element at index 0 must be an integer in [-2147483648, 2147483647], got string "${'x'.repeat(40)}..."`,
    'long strings are cut short in messages')
})

/** A one-input request body whose `data` is written as given (number tokens as they are, not through doubles). */
function rawDataBody (datatype: string, data: string, shape = `[${data.split(',').length}]`): string {
  return `{"inputs":[{"name":"X","datatype":"${datatype}","shape":${shape},"data":[${data}]}]}`
}

const INTEGER_RANGES: Array<[string, bigint, bigint]> = [
  ['INT8', -128n, 127n], ['INT16', -32768n, 32767n], ['INT32', -2147483648n, 2147483647n],
  ['INT64', -9223372036854775808n, 9223372036854775807n],
  ['UINT8', 0n, 255n], ['UINT16', 0n, 65535n], ['UINT32', 0n, 4294967295n], ['UINT64', 0n, 18446744073709551615n]
]

t.test('64-bit integers are exact: min, max and 2^53 + 1 through decode and encode', async t => {
  const text = '{"inputs":[' +
    '{"name":"A","datatype":"INT64","shape":[6],"data":[9223372036854775807,-9223372036854775808,9007199254740993,' +
    '-9007199254740993,-1,1234567890123456789]},' +
    '{"name":"B","datatype":"UINT64","shape":[2,2],"data":[[18446744073709551615,9007199254740993],[9223372036854775808,0]]}]}'
  const request = decodeInferRequest(text)
  const a = request.inputs[0]?.data as BigInt64Array
  const b = request.inputs[1]?.data as BigUint64Array
  t.same(Array.from(a), [9223372036854775807n, -9223372036854775808n, 9007199254740993n, -9007199254740993n, -1n,
    1234567890123456789n], 'INT64: every value as sent')
  t.same(Array.from(b), [18446744073709551615n, 9007199254740993n, 9223372036854775808n, 0n], 'UINT64: every value as sent')
  t.equal(encodedData({ name: 'A', datatype: 'INT64', shape: [6], data: a }),
    '9223372036854775807,-9223372036854775808,9007199254740993,-9007199254740993,-1,1234567890123456789', 'printed exactly')
  t.equal(encodedData({ name: 'B', datatype: 'UINT64', shape: [4], data: b }),
    '18446744073709551615,9007199254740993,9223372036854775808,0')

  // encodeInferRequest -> decodeInferRequest keeps them too.
  const round: InferRequest = {
    parameters: {},
    inputs: [
      { name: 'I', datatype: 'INT64', shape: [4], data: new BigInt64Array([-(2n ** 63n), 2n ** 63n - 1n, 2n ** 53n + 1n, -(2n ** 53n) - 1n]) },
      { name: 'U', datatype: 'UINT64', shape: [3], data: new BigUint64Array([2n ** 64n - 1n, 2n ** 53n + 1n, 2n ** 63n]) }
    ]
  }
  t.same(decodeInferRequest(encodeInferRequest(round)), round, 'request round trip')
  const response = decodeInferResponse(encodeInferResponse({ model_name: 'm', model_version: '1', outputs: round.inputs }))
  t.same(response.outputs, round.inputs, 'response round trip')
})

t.test('integer datatypes: min and max are taken, min - 1 and max + 1 are a 400 naming the input and the value', async t => {
  for (const [datatype, min, max] of INTEGER_RANGES) {
    const ok = decodeInferRequest(rawDataBody(datatype, `${min},${max}`)).inputs[0]?.data as ArrayLike<number | bigint>
    t.same(Array.from(ok).map(BigInt), [min, max], `${datatype} ends`)
    for (const [index, value] of [[1, min - 1n], [1, max + 1n]] as const) {
      fails(t, () => decodeInferRequest(rawDataBody(datatype, `0,${value}`)), 'PROTO_ERR_DATA_MISMATCH',
        `Unable to parse 'data' for input 'X': ${datatype} element at index ${index} must be an integer in [${min}, ${max}], ` +
        `got ${value}`, `${datatype} ${value}`)
    }
  }
  // Far out of range, in both directions, and the message keeps long tokens short.
  fails(t, () => decodeInferRequest(rawDataBody('INT32', '1' + '0'.repeat(60))), 'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'X': INT32 element at index 0 must be an integer in [-2147483648, 2147483647], " +
    `got 1${'0'.repeat(39)}...`)
  fails(t, () => decodeInferRequest(rawDataBody('UINT64', '-18446744073709551616')), 'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'X': UINT64 element at index 0 must be an integer in [0, 18446744073709551615], " +
    'got -18446744073709551616')
  fails(t, () => decodeInferRequest(rawDataBody('INT64', '100000000000000000000')), 'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'X': INT64 element at index 0 must be an integer in " +
    '[-9223372036854775808, 9223372036854775807], got 100000000000000000000')
  t.same(Array.from(decodeInferRequest(rawDataBody('UINT8', '-0')).inputs[0]?.data as Uint8Array), [0], '-0 is 0')
  t.same(Array.from(decodeInferRequest(rawDataBody('UINT64', '-0')).inputs[0]?.data as BigUint64Array), [0n], '-0 is 0')
  // Responses follow the same rules, naming the output.
  fails(t, () => decodeInferResponse(
    '{"model_name":"m","model_version":"1","outputs":[{"name":"O","datatype":"INT32","shape":[1],"data":[2147483648]}]}'
  ), 'PROTO_ERR_DATA_MISMATCH',
  "Unable to parse 'data' for output 'O': INT32 element at index 0 must be an integer in [-2147483648, 2147483647], " +
  'got 2147483648')
})

t.test('integer datatypes refuse numbers not written as integers (1.0, 1e2), as Triton does', async t => {
  for (const [datatype, min, max] of INTEGER_RANGES) {
    for (const token of ['1.0', '1e2', '1E0', '-2.5', '0.0']) {
      fails(t, () => decodeInferRequest(rawDataBody(datatype, `1,${token}`)), 'PROTO_ERR_DATA_MISMATCH',
        `Unable to parse 'data' for input 'X': ${datatype} element at index 1 must be an integer in [${min}, ${max}], ` +
        `got ${token}`, `${datatype} ${token}`)
    }
  }
  t.same(Array.from(decodeInferRequest(rawDataBody('FP32', '1.0,1e2,1')).inputs[0]?.data as Float32Array), [1, 100, 1],
    'float datatypes take any number')
})

t.test('float datatypes: a finite number that rounds to infinity is a 400; rounding to the largest value is not', async t => {
  const refused: Array<[string, string]> = [
    ['FP32', '1e39'], ['FP32', '-3.5e38'], ['FP32', '3.4028235677973366e38'], ['FP16', '65520'], ['FP16', '-70000'],
    ['BF16', '3.4e39'], ['FP64', '1e400'], ['FP64', '-2e308'], ['FP32', '1e400']
  ]
  for (const [datatype, token] of refused) {
    fails(t, () => decodeInferRequest(rawDataBody(datatype, `0,${token}`)), 'PROTO_ERR_DATA_MISMATCH',
      `Unable to parse 'data' for input 'X': ${datatype} element at index 1 must be a number within the ${datatype} range, ` +
      `got ${token} (which rounds to infinity)`, `${datatype} ${token}`)
  }
  const f32 = decodeInferRequest(rawDataBody('FP32', '3.4028235e38,-3.4028234663852886e38,1e-46')).inputs[0]?.data as Float32Array
  t.same(Array.from(f32), [3.4028234663852886e38, -3.4028234663852886e38, 0], 'FP32: rounds to its largest value, or to 0')
  const f16 = decodeInferRequest(rawDataBody('FP16', '65504,65519,-65519')).inputs[0]?.data as Uint16Array
  t.same(Array.from(f16), [0x7bff, 0x7bff, 0xfbff], 'FP16: 65519 rounds down to 65504')
  const f64 = decodeInferRequest(rawDataBody('FP64', '1.7976931348623157e308,1e-400,-0.0')).inputs[0]?.data as Float64Array
  t.ok(f64[0] === Number.MAX_VALUE && f64[1] === 0 && Object.is(f64[2], -0), 'FP64: its largest value, underflow to 0, -0')
})

t.test('NaN and Infinity: taken for float datatypes, a 400 for every other datatype', async t => {
  for (const datatype of ['FP16', 'BF16', 'FP32', 'FP64']) {
    const data = decodeInferRequest(rawDataBody(datatype, 'NaN,Infinity,-Infinity')).inputs[0]?.data as ArrayLike<number>
    t.equal(encodedData({ name: 'X', datatype: datatype as Tensor['datatype'], shape: [3], data: data as Float32Array }),
      'NaN,Infinity,-Infinity', `${datatype} stores them and prints them back`)
  }
  for (const [datatype, min, max] of INTEGER_RANGES) {
    for (const token of ['NaN', 'Infinity', '-Infinity']) {
      fails(t, () => decodeInferRequest(rawDataBody(datatype, `1,${token}`)), 'PROTO_ERR_DATA_MISMATCH',
        `Unable to parse 'data' for input 'X': ${datatype} element at index 1 must be an integer in [${min}, ${max}], ` +
        `got ${token}`, `${datatype} ${token}`)
    }
  }
  fails(t, () => decodeInferRequest(rawDataBody('BOOL', 'true,-Infinity')), 'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'X': BOOL element at index 1 must be true or false, got -Infinity")
  fails(t, () => decodeInferRequest(rawDataBody('BYTES', '"a",NaN')), 'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'X': BYTES element at index 1 must be a string, got NaN")
})

t.test('BOOL takes true and false only; 0 and 1 are a 400, as in Triton', async t => {
  t.same(Array.from(decodeInferRequest(rawDataBody('BOOL', 'true,false,[true]')).inputs[0]?.data as Uint8Array), [1, 0, 1])
  for (const token of ['0', '1', '"true"', 'null']) {
    fails(t, () => decodeInferRequest(rawDataBody('BOOL', `true,${token}`)), 'PROTO_ERR_DATA_MISMATCH',
      `Unable to parse 'data' for input 'X': BOOL element at index 1 must be true or false, got ${
        token === '"true"' ? 'string "true"' : token}`, token)
  }
})

t.test('data read from the body: nesting, whitespace, escapes and duplicates as JSON.parse reads them', async t => {
  const text = ' { "inputs" : [ { "name" : "A" , "datatype" : "INT16" , "shape" : [ 2 , 3 ] , "data" : [ [ 1 , -2 ] , ' +
    '[ ] , [ [ 3 ] , 4 , [ [ 5 ] ] ] , 6 ] } , {"name":"B","datatype":"BYTES","shape":[4],' +
    '"data":["pl\\u00e4in","\\"q\\"\\n","日本","\\ud83d\\ude00"]},' +
    '{"name":"C","datatype":"FP32","shape":[2],"data":[9],"d\\u0061ta":[1.5e0,-0.25E+1]},' +
    '{"name":"D","datatype":"FP64","shape":[1],"data":[1],"data":"x","data":[2.5]}] } '
  const request = decodeInferRequest(text)
  t.same(Array.from(request.inputs[0]?.data as Int16Array), [1, -2, 3, 4, 5, 6], 'nested and empty arrays, any spacing')
  t.same(stringsOf(request.inputs[1]?.data), ['pläin', '"q"\n', '日本', '😀'],
    'escapes and UTF-8 in BYTES')
  t.same(Array.from(request.inputs[2]?.data as Float32Array), [1.5, -2.5], 'a key written with escapes is the same key')
  t.same(Array.from(request.inputs[3]?.data as Float64Array), [2.5], 'the last of duplicate keys wins, as in JSON.parse')

  // Invalid UTF-8 in a BYTES string becomes U+FFFD, as Buffer#toString made it before.
  const bad = Buffer.concat([Buffer.from('{"inputs":[{"name":"S","datatype":"BYTES","shape":[1],"data":["a'),
    Buffer.from([0xff, 0xc3]), Buffer.from('b"]}]}')])
  t.same(elementsOf(decodeInferRequest(bad).inputs[0]?.data).map(e => Array.from(e)),
    [Array.from(Buffer.from('a\ufffd\ufffdb'))], 'invalid UTF-8 is replaced')

  // Objects in `data` are checked as JSON, then refused as elements.
  fails(t, () => decodeInferRequest(rawDataBody('FP32', '1,{"a":[1,{}]}', '[2]')), 'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'X': FP32 element at index 1 must be a number, got an object")
  fails(t, () => decodeInferRequest(rawDataBody('BYTES', '"a",{"b":"c"}')), 'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'X': BYTES element at index 1 must be a string, got an object")
  fails(t, () => decodeInferRequest(rawDataBody('INT32', '1,"\\u0041"')), 'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'X': INT32 element at index 1 must be an integer in [-2147483648, 2147483647], " +
    'got string "A"')

  // Malformed data arrays are malformed JSON, with JSON.parse's own message.
  for (const data of ['1,,2', '1,', '01', '1.', '.5', '+1', '1e', '-', 'nan', '"\\x"', '"a\tb"', '[1', '1]', 'tru', 'NaNa']) {
    const body = rawDataBody('FP32', data, '[1]')
    fails(t, () => decodeInferRequest(body), 'PROTO_ERR_INVALID_JSON',
      `failed to parse the request JSON body: ${jsonParseMessage(body)}`, data)
  }
})

t.test('a body nested beyond the byte parser\'s limit goes through JSON.parse, with the same data rules', async t => {
  const deep = '['.repeat(1500) + ']'.repeat(1500)
  const request = decodeInferRequest(`{"extra":${deep},"inputs":[{"name":"X","datatype":"INT64","shape":[2],"data":[5,-6]}]}`)
  t.same(Array.from(request.inputs[0]?.data as BigInt64Array), [5n, -6n])
  fails(t, () => decodeInferRequest(`{"extra":${deep},"inputs":[{"name":"X","datatype":"UINT8","shape":[1],"data":[256]}]}`),
    'PROTO_ERR_DATA_MISMATCH', "Unable to parse 'data' for input 'X': UINT8 element at index 0 must be an integer in [0, 255], got 256")
  fails(t, () => decodeInferRequest(`{"extra":${deep},"inputs":[{"name":"X","datatype":"FP32","shape":[1],"data":[1e39]}]}`),
    'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'X': FP32 element at index 0 must be a number within the FP32 range, got 1e+39 " +
    '(which rounds to infinity)')
})

t.test('NaN and Infinity tokens', async t => {
  const text = '{"inputs":[{"name":"F","datatype":"FP32","shape":[3],"data":[NaN, Infinity, -Infinity]},' +
    '{"name":"D","datatype":"FP64","shape":[2],"data":[[-Infinity],[1.5]]}]}'
  const request = decodeInferRequest(text)
  const f = Array.from(request.inputs[0]?.data as Float32Array)
  t.ok(Number.isNaN(f[0]), 'NaN accepted for FP32')
  t.same(f.slice(1), [Infinity, -Infinity])
  t.same(Array.from(request.inputs[1]?.data as Float64Array), [-Infinity, 1.5])

  fails(t, () => decodeInferRequest('{"inputs":[{"name":"I","datatype":"INT32","shape":[1],"data":[NaN]}]}'),
    'PROTO_ERR_DATA_MISMATCH',
    "Unable to parse 'data' for input 'I': INT32 element at index 0 must be an integer in [-2147483648, 2147483647], got NaN")
  fails(t, () => decodeInferRequest('{"inputs":[{"name":"I","datatype":"FP32","shape":[1],"data":[NaN]]}'),
    'PROTO_ERR_INVALID_JSON',
    `failed to parse the request JSON body: ${jsonParseMessage('{"inputs":[{"name":"I","datatype":"FP32","shape":[1],"data":[NaN]]}')}`,
    'a body that is malformed apart from NaN still reports JSON.parse\'s message')
  const params = decodeInferRequest('{"parameters":{"x":NaN,"s":"NaN"},"inputs":[]}').parameters
  t.ok(Number.isNaN(params.x), 'NaN parameter value')
  t.equal(params.s, 'NaN', 'NaN inside a string is untouched')
})

t.test('the NaN-tolerant fallback parser is otherwise strict JSON', async t => {
  const okText = ' {\n "id" : "a\\"b\\u00e9\\n" , "parameters" : { "x" : -Infinity }, "extra": { "y": [ ] , "z": {}, "n": null, "t": true },\t' +
    '"inputs":[{"name":"F","datatype":"FP64","shape":[4],"data":[[NaN],[-0.5e-3, 1E2],[0]]}] , "outputs" : [ ] } '
  const request = decodeInferRequest(okText)
  t.equal(request.id, 'a"bé\n', 'escapes in strings are decoded')
  t.same(Array.from(request.inputs[0]?.data as Float64Array).slice(1), [-0.0005, 100, 0])
  t.ok(Number.isNaN((request.inputs[0]?.data as Float64Array)[0]))
  t.same(request.outputs, [])
  t.equal(request.parameters.x, -Infinity)

  const bad = [
    '{"inputs":[],"x":NaN,}',
    "{'inputs':[],\"x\":NaN}",
    '{"inputs":[],"x":[NaN,01]}',
    '{"inputs":[],"x":[NaN,+1]}',
    '{"inputs":[],"x":[NaN,.5]}',
    '{"inputs":[],"x":NaNa}',
    '{"inputs":[],"x":Infinity1}',
    '{"inputs":[],"x":-NaN}',
    '{"inputs":[],"x":nan}',
    '{"inputs":[],"x":"a\tb","y":NaN}',
    '{"inputs":[],"x":"\\x","y":NaN}',
    '{"inputs":[],"x":NaN} {}',
    '{"inputs":[],"x":NaN',
    '{"inputs":[],"x":"NaN',
    '{"inputs" [],"x":NaN}',
    '[NaN'
  ]
  for (const text of bad) {
    fails(t, () => decodeInferRequest(text), 'PROTO_ERR_INVALID_JSON',
      `failed to parse the request JSON body: ${jsonParseMessage(text)}`, text)
  }
  const deep = '{"x":' + '['.repeat(2000) + 'NaN' + ']'.repeat(2000) + ',"inputs":[]}'
  fails(t, () => decodeInferRequest(deep), 'PROTO_ERR_INVALID_JSON',
    `failed to parse the request JSON body: ${jsonParseMessage(deep)}`, 'absurd nesting in the fallback parser')
  const proto = decodeInferRequest('{"parameters":{"__proto__":NaN},"inputs":[]}').parameters
  t.ok(Object.hasOwn(proto, '__proto__') && Number.isNaN(proto.__proto__), '__proto__ keys stay own keys there too')
})

function jsonParseMessage (text: string): string {
  try {
    JSON.parse(text)
  } catch (err) {
    return (err as Error).message
  }
  throw new Error('parsed')
}

t.test('malformed JSON is a 400 naming the parse problem', async t => {
  for (const text of ['{"inputs": [', '', 'nope', '{"inputs":[],}', '{\'inputs\':[]}']) {
    fails(t, () => decodeInferRequest(text), 'PROTO_ERR_INVALID_JSON',
      `failed to parse the request JSON body: ${jsonParseMessage(text)}`, JSON.stringify(text))
  }
  let status = 0
  try { decodeInferRequest('{') } catch (err) { if (isFlotillaError(err)) status = err.statusCode }
  t.equal(status, 400, 'answers 400 where Triton answers 500')
})

t.test('request structure', async t => {
  const R = 'PROTO_ERR_INVALID_REQUEST'
  fails(t, () => decodeInferRequest('[]'), R, 'Unable to parse the request: expected a JSON object, got array')
  fails(t, () => decodeInferRequest('null'), R, 'Unable to parse the request: expected a JSON object, got null')
  fails(t, () => decodeInferRequest('{}'), R,
    "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'")
  fails(t, () => decodeInferRequest('{"inputs":{}}'), R, "Unable to parse 'inputs': attempt to access JSON non-array as array")
  fails(t, () => decodeInferRequest('{"inputs":[1]}'), R, "Unable to parse 'inputs': attempt to access JSON non-object as object")
  fails(t, () => decodeInferRequest('{"id":5,"inputs":[]}'), R, "Unable to parse 'id': attempt to access JSON non-string as string")
  fails(t, () => decodeInferRequest('{"id":null,"inputs":[]}'), R, "Unable to parse 'id': attempt to access JSON non-string as string")
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [1], data: [1], name: undefined }), R,
    "Unable to parse 'name': attempt to access non-existing object member 'name'")
  fails(t, () => decodeOne({ name: 7, datatype: 'FP32', shape: [1], data: [1] }), R,
    "Unable to parse 'name': attempt to access JSON non-string as string")
  fails(t, () => decodeOne({ shape: [1], data: [1] }), R,
    "Unable to parse 'datatype': attempt to access non-existing object member 'datatype'")
  fails(t, () => decodeOne({ datatype: 5, shape: [1], data: [1] }), R,
    "Unable to parse 'datatype': attempt to access JSON non-string as string")
  fails(t, () => decodeOne({ datatype: 'FP32', data: [1] }), R,
    "Unable to parse 'shape': attempt to access non-existing object member 'shape'")
  fails(t, () => decodeOne({ datatype: 'FP32', shape: 1, data: [1] }), R,
    "Unable to parse 'shape': attempt to access JSON non-array as array")
  for (const shape of [[-1], [1.5], ['1'], [null]]) {
    fails(t, () => decodeOne({ datatype: 'FP32', shape, data: [1] }), R,
      "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer", `shape ${JSON.stringify(shape)}`)
  }
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [1], data: 1 }), R,
    "Unable to parse 'data': attempt to access JSON non-array as array")
  fails(t, () => decodeOne({ datatype: 'BYTES', shape: [2 ** 30, 2 ** 30, 2 ** 30], data: [] }), R,
    "invalid shape for input 'INPUT0': shape [1073741824,1073741824,1073741824] causes total element count to " +
    'exceed maximum size of 9007199254740991')
})

t.test('datatypes are case-sensitive protocol names', async t => {
  for (const datatype of ['fp32', 'STRING', 'TYPE_FP32', 'FLOAT', 'constructor']) {
    fails(t, () => decodeOne({ datatype, shape: [1], data: [1] }), 'PROTO_ERR_INVALID_DATATYPE',
      'invalid datatype for input INPUT0', datatype)
  }
})

t.test('data sources: exactly one; binary needs its bytes, which a JSON-only body does not have', async t => {
  const R = 'PROTO_ERR_INVALID_REQUEST'
  const lead = "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', " +
    "'shared_memory_region' in 'parameters'. But"
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [1] }), R, `${lead} no field is set`)
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [1], parameters: { other: 1 } }), R, `${lead} no field is set`)
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [1], data: [1], parameters: { binary_data_size: 4 } }), R,
    `${lead} set 'data' 'binary_data_size'`)
  fails(t, () => decodeOne({
    datatype: 'FP32', shape: [1], data: [1], parameters: { binary_data_size: 4, shared_memory_region: 'r' }
  }), R, `${lead} set 'data' 'binary_data_size' 'shared_memory_region'`)
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [1], parameters: { binary_data_size: 4 } }), 'PROTO_ERR_BINARY_DATA',
    "unexpected size for input 'INPUT0', expecting 4 additional bytes (binary_data_size is 4, but the request has no " +
    'Inference-Header-Content-Length header, so its body holds no binary data)')
  fails(t, () => decodeInferRequest(oneInput({ datatype: 'FP32', shape: [1], parameters: { binary_data_size: 4 } }),
    { modelName: 'simple' }), 'PROTO_ERR_BINARY_DATA',
  "unexpected size for input 'INPUT0', expecting 4 additional bytes for model 'simple' (binary_data_size is 4, but " +
    'the request has no Inference-Header-Content-Length header, so its body holds no binary data)', 'with the model name')
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [1], parameters: { shared_memory_region: 'r' } }), R,
    "input 'INPUT0' sets 'shared_memory_region' in 'parameters', but the shared-memory extension is not supported; " +
    "send the tensor as JSON in the 'data' field")
})

t.test('binary_data_size 0 in a JSON-only body: an empty tensor, as in Triton', async t => {
  const empty = decodeOne({ datatype: 'FP32', shape: [2, 0], parameters: { binary_data_size: 0, note: 'x' } })
  t.same(empty, { name: 'INPUT0', datatype: 'FP32', shape: [2, 0], data: new Float32Array(0), parameters: { note: 'x' } },
    'binary_data_size is framing: it is taken out of the parameters')
  t.ok(empty.data instanceof Float32Array)
  const bytes = decodeOne({ datatype: 'BYTES', shape: [0], parameters: { binary_data_size: 0 } })
  t.ok(bytes.data instanceof BytesData)
  t.strictSame(elementsOf(bytes.data), [])
  t.notOk('parameters' in bytes, 'no parameters left, none kept')
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [2], parameters: { binary_data_size: 0 } }), 'PROTO_ERR_DATA_MISMATCH',
    "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0'. Expected 8, got 0 " +
    '(shape [2] of FP32 is 2 elements of 4 bytes)')
  fails(t, () => decodeInferRequest(oneInput({ datatype: 'BYTES', shape: [3], parameters: { binary_data_size: 0 } },
    { id: 'r9' }), { modelName: 'm' }), 'PROTO_ERR_DATA_MISMATCH',
  "expected 3 string elements for inference input 'INPUT0' for model 'm', got 0")
  for (const bad of [-1, 1.5, '4', true]) {
    fails(t, () => decodeOne({ datatype: 'FP32', shape: [1], parameters: { binary_data_size: bad } }), 'PROTO_ERR_BINARY_DATA',
      `Unable to parse 'binary_data_size' for input 'INPUT0': expected a non-negative integer, got ${
        typeof bad === 'string' ? `string "${bad}"` : String(bad)}`, `binary_data_size ${JSON.stringify(bad)}`)
  }
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [1], parameters: { binary_data_size: 2 ** 53 } }), 'PROTO_ERR_BINARY_DATA',
    "Unable to parse 'binary_data_size' for input 'INPUT0': expected a non-negative integer, got 9007199254740992")
  fails(t, () => decodeOne({ datatype: 'fp32', shape: [1], parameters: { binary_data_size: 0 } }), 'PROTO_ERR_INVALID_DATATYPE',
    'invalid datatype for input INPUT0')
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [4096, 4096, 2], parameters: { binary_data_size: 134217728 } }),
    'PROTO_ERR_INVALID_REQUEST',
    "binary input 'INPUT0' has a byte_size (134217728 bytes) that exceeds the maximum allowed value of 67108864 bytes. " +
    'Use the worker flag --max-body-bytes to increase the limit.', 'the byte limit applies to binary inputs')
})

t.test('duplicate inputs and outputs', async t => {
  const R = 'PROTO_ERR_INVALID_REQUEST'
  const input = { name: 'X', datatype: 'FP32', shape: [1], data: [1] }
  fails(t, () => decodeInferRequest(body({ inputs: [input, input] })), R,
    "[request id: <id_unknown>] input 'X' already exists in request")
  fails(t, () => decodeInferRequest(body({ id: '42', inputs: [input, input] })), R,
    "[request id: 42] input 'X' already exists in request")
  fails(t, () => decodeInferRequest(body({ id: '', inputs: [input, input] })), R,
    "[request id: <id_unknown>] input 'X' already exists in request", 'an empty id counts as no id')
  fails(t, () => decodeInferRequest(body({ inputs: [input], outputs: [{ name: 'Y' }, { name: 'Y' }] })), R,
    "[request id: <id_unknown>] output 'Y' already exists in request")
  fails(t, () => decodeInferRequest(body({ id: 'r1', inputs: [input], outputs: [{ name: 'Y' }, { name: 'Y' }] })), R,
    "[request id: r1] output 'Y' already exists in request")
  fails(t, () => decodeInferRequest(body({ inputs: [input], outputs: { name: 'Y' } })), R,
    "Unable to parse 'outputs': attempt to access JSON non-array as array")
  fails(t, () => decodeInferRequest(body({ inputs: [input], outputs: [{}] })), R,
    "Unable to parse 'name': attempt to access non-existing object member 'name'")
  fails(t, () => decodeInferRequest(body({ inputs: [input], outputs: ['Y'] })), R,
    "Unable to parse 'outputs': attempt to access JSON non-object as object")
  fails(t, () => decodeInferRequest(body({ inputs: [input], outputs: [{ name: 'Y', parameters: { x: [] } }] })), R,
    "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'.")
})

t.test('request parameters', async t => {
  const R = 'PROTO_ERR_INVALID_REQUEST'
  const request = decodeInferRequest(body({
    id: 'abc',
    parameters: { priority: 2, timeout: 100, sequence_id: 'seq-1', sequence_start: true, custom: 'x', ratio: 0.5 },
    inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: [1], parameters: { note: 'in' } }],
    outputs: [{ name: 'Y', parameters: { binary_data: false, classification: 3 } }]
  }))
  t.equal(request.id, 'abc')
  t.same(request.parameters,
    { priority: 2, timeout: 100, sequence_id: 'seq-1', sequence_start: true, custom: 'x', ratio: 0.5 })
  t.same(request.inputs[0]?.parameters, { note: 'in' })
  t.same(request.outputs, [{ name: 'Y', parameters: { binary_data: false, classification: 3 } }])
  t.same(decodeInferRequest('{"inputs":[]}'), { parameters: {}, inputs: [] }, 'no id, no outputs: keys are absent')
  t.notOk('outputs' in decodeInferRequest('{"inputs":[]}'))

  const proto = decodeInferRequest('{"parameters":{"__proto__":"x"},"inputs":[]}').parameters
  t.ok(Object.hasOwn(proto, '__proto__'), '__proto__ stays an own key')
  t.equal(Object.getPrototypeOf(proto), Object.prototype, 'and does not replace the prototype')

  fails(t, () => decodeInferRequest('{"parameters":[],"inputs":[]}'), R,
    "Unable to parse 'parameters': attempt to access JSON non-object as object")
  fails(t, () => decodeInferRequest('{"parameters":null,"inputs":[]}'), R,
    "Unable to parse 'parameters': attempt to access JSON non-object as object")
  for (const bad of ['[1]', '{"a":1}', 'null']) {
    fails(t, () => decodeInferRequest(`{"parameters":{"k":${bad}},"inputs":[]}`), R,
      "parameter 'k' has invalid type. It should be either 'int', 'bool', or 'string'.", `value ${bad}`)
  }
  fails(t, () => decodeInferRequest('{"parameters":{"triton_enable_empty_final_response":true},"inputs":[]}'), R,
    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.")
  fails(t, () => decodeInferRequest('{"parameters":{"priority":-1},"inputs":[]}'), R,
    "Unable to parse 'priority': expected a non-negative integer, got -1")
  fails(t, () => decodeInferRequest('{"parameters":{"timeout":"10"},"inputs":[]}'), R,
    "Unable to parse 'timeout': expected a non-negative integer, got string \"10\"")
  fails(t, () => decodeInferRequest('{"parameters":{"sequence_start":1},"inputs":[]}'), R,
    "Unable to parse 'sequence_start': expected a boolean, got 1")
  fails(t, () => decodeInferRequest('{"parameters":{"sequence_id":1.5},"inputs":[]}'), R,
    "Unable to parse 'sequence_id': expected a non-negative integer or a string, got 1.5")
  fails(t, () => decodeInferRequest('{"parameters":{"binary_data_output":"yes"},"inputs":[]}'), R,
    "Unable to parse 'binary_data_output': expected a boolean, got string \"yes\"")
  t.same(decodeInferRequest('{"parameters":{"sequence_id":7},"inputs":[]}').parameters, { sequence_id: 7 })
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [1], data: [1], parameters: { x: null } }), R,
    "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'.", 'input parameters too')
  t.same(decodeOne({ datatype: 'FP32', shape: [1], data: [1], parameters: { triton_x: 1 } }).parameters,
    { triton_x: 1 }, "triton_ keys are only reserved at request level")
})

t.test('input byte-size limit', async t => {
  t.equal(DEFAULT_MAX_INPUT_BYTES, 64 * 1024 * 1024)
  const R = 'PROTO_ERR_INVALID_REQUEST'
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [5], data: [1, 2, 3, 4, 5] }, { maxInputBytes: 16 }), R,
    "JSON input 'INPUT0' has a byte_size (20 bytes) that exceeds the maximum allowed value of 16 bytes. " +
    'Use the worker flag --max-body-bytes to increase the limit.')
  t.equal(decodeOne({ datatype: 'FP32', shape: [4], data: [1, 2, 3, 4] }, { maxInputBytes: 16 }).data.length, 4,
    'exactly at the limit is fine')
  fails(t, () => decodeOne({ datatype: 'FP32', shape: [4096, 4096, 2] , data: [] }), R,
    "JSON input 'INPUT0' has a byte_size (134217728 bytes) that exceeds the maximum allowed value of 67108864 bytes. " +
    'Use the worker flag --max-body-bytes to increase the limit.', 'checked against the shape before reading data')
  fails(t, () => decodeOne({ datatype: 'BYTES', shape: [2], data: ['abcd', 'efgh'] }, { maxInputBytes: 15 }), R,
    "JSON input 'INPUT0' has a byte_size (16 bytes) that exceeds the maximum allowed value of 15 bytes. " +
    'Use the worker flag --max-body-bytes to increase the limit.', 'BYTES count 4 + length per element')
  t.equal(decodeOne({ datatype: 'BYTES', shape: [2], data: ['abcd', 'efgh'] }, { maxInputBytes: 16 }).data.length, 2)
  fails(t, () => decodeInferRequest(oneInput({ datatype: 'INT8', shape: [3], data: [1, 2, 3] }),
    { maxInputBytes: 2, maxInputBytesSetting: 'the flag --my-limit' }), R,
  "JSON input 'INPUT0' has a byte_size (3 bytes) that exceeds the maximum allowed value of 2 bytes. " +
    'Use the flag --my-limit to increase the limit.', 'the caller names its own setting')
  fails(t, () => decodeInferRequest(oneInput({ datatype: 'INT8', shape: [3], parameters: { binary_data_size: 3 } }),
    { maxInputBytes: 2, maxInputBytesSetting: 'the flag --my-limit' }), R,
  "binary input 'INPUT0' has a byte_size (3 bytes) that exceeds the maximum allowed value of 2 bytes. " +
    'Use the flag --my-limit to increase the limit.', 'binary inputs too')
})

t.test('Buffer bodies are read as UTF-8', async t => {
  const request = decodeInferRequest(Buffer.from(oneInput({ datatype: 'BYTES', shape: [1], data: ['héllo'] })))
  t.same(elementsOf(request.inputs[0]?.data).map(e => Array.from(e)), [Array.from(utf8('héllo'))])
})

t.test('encodeInferResponse: layout and key order', async t => {
  const output: Tensor = { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 3], data: new Int32Array([2, 4, 6]) }
  t.equal(encodeInferResponse(response([output], { id: '42' })),
    '{"id":"42","model_name":"m","model_version":"1","outputs":' +
    '[{"name":"OUTPUT0","datatype":"INT32","shape":[1,3],"data":[2,4,6]}]}')
  t.equal(encodeInferResponse(response([output], { id: '' })),
    '{"model_name":"m","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[1,3],"data":[2,4,6]}]}',
    'an empty id is left out')
  t.equal(encodeInferResponse(response([], { parameters: { a: 1, b: 'x', c: true, d: 0.25 } })),
    '{"model_name":"m","model_version":"1","parameters":{"a":1,"b":"x","c":true,"d":0.25},"outputs":[]}')
  t.equal(encodeInferResponse(response([{ ...output, parameters: { classification: 2 } }])),
    '{"model_name":"m","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[1,3],' +
    '"parameters":{"classification":2},"data":[2,4,6]}]}', 'output parameters come before data')
  const text = encodeInferResponse(response([output, { name: 'B', datatype: 'BOOL', shape: [2], data: new Uint8Array([0, 7]) }]))
  t.same(JSON.parse(text).outputs[1], { name: 'B', datatype: 'BOOL', shape: [2], data: [false, true] })
})

t.test('encodeInferResponse: names and strings are escaped', async t => {
  const nasty = 'a"b\\c\n\u0001\u2028é😀'
  const text = encodeInferResponse({
    id: nasty,
    model_name: nasty,
    model_version: '1',
    parameters: { [nasty]: nasty },
    outputs: [{ name: nasty, datatype: 'BYTES', shape: [1], data: bytesData(nasty) }]
  })
  const parsed = JSON.parse(text)
  t.equal(parsed.id, nasty)
  t.equal(parsed.model_name, nasty)
  t.equal(parsed.parameters[nasty], nasty)
  t.equal(parsed.outputs[0].name, nasty)
  t.same(parsed.outputs[0].data, [nasty])
})

t.test('encodeInferResponse: NaN and Infinity are bare tokens, -0 keeps its sign', async t => {
  const f32: Tensor = { name: 'F', datatype: 'FP32', shape: [5], data: new Float32Array([NaN, Infinity, -Infinity, 1, 0]) }
  t.equal(encodedData(f32), 'NaN,Infinity,-Infinity,1,0')
  const f64: Tensor = { name: 'D', datatype: 'FP64', shape: [3], data: new Float64Array([-0, NaN, 0.1]) }
  t.equal(encodedData(f64), '-0,NaN,0.1')
  const f16: Tensor = { name: 'H', datatype: 'FP16', shape: [4], data: new Uint16Array([0x7e00, 0x7c00, 0xfc00, 0x8000]) }
  t.equal(encodedData(f16), 'NaN,Infinity,-Infinity,-0')
  const bf16: Tensor = { name: 'B', datatype: 'BF16', shape: [3], data: new Uint16Array([0x7fc0, 0xff80, 0x3f80]) }
  t.equal(encodedData(bf16), 'NaN,-Infinity,1')
  t.equal(encodeInferResponse(response([], { parameters: { n: NaN } })),
    '{"model_name":"m","model_version":"1","parameters":{"n":NaN},"outputs":[]}')
})

t.test('encodeInferResponse: 64-bit integers are printed exactly', async t => {
  const i64: Tensor = {
    name: 'I', datatype: 'INT64', shape: [4],
    data: new BigInt64Array([9223372036854775807n, -9223372036854775808n, 9007199254740993n, -1n])
  }
  t.equal(encodedData(i64), '9223372036854775807,-9223372036854775808,9007199254740993,-1')
  const u64: Tensor = { name: 'U', datatype: 'UINT64', shape: [2], data: new BigUint64Array([18446744073709551615n, 0n]) }
  t.equal(encodedData(u64), '18446744073709551615,0')
  const u32: Tensor = { name: 'U', datatype: 'UINT32', shape: [1], data: new Uint32Array([4294967295]) }
  t.equal(encodedData(u32), '4294967295')
})

t.test('encodeInferResponse: FP32 widened to double with shortest round-trip', async t => {
  const f32: Tensor = { name: 'F', datatype: 'FP32', shape: [4], data: new Float32Array([0.1, 1 / 3, 1e-45, 3.4028234663852886e38]) }
  t.equal(encodedData(f32), '0.10000000149011612,0.3333333432674408,1.401298464324817e-45,3.4028234663852886e+38')
})

t.test('encodeInferResponse: data must match the shape', async t => {
  const bad: Tensor = { name: 'O', datatype: 'FP32', shape: [2, 2], data: new Float32Array(3) }
  fails(t, () => encodeInferResponse(response([bad])), 'FLT_ERR_INTERNAL',
    "internal error: output tensor shape does not match size of output for 'O': shape [2,2] needs 4 elements, data has 3")
})

t.test('encodeInferRequest → decodeInferRequest round trip, every datatype', async t => {
  const request: InferRequest = {
    id: 'req-1',
    parameters: { priority: 1, custom: 'v', flag: false },
    inputs: [
      { name: 'BOOL', datatype: 'BOOL', shape: [2], data: new Uint8Array([1, 0]) },
      { name: 'U8', datatype: 'UINT8', shape: [2], data: new Uint8Array([0, 255]) },
      { name: 'U16', datatype: 'UINT16', shape: [1], data: new Uint16Array([65535]) },
      { name: 'U32', datatype: 'UINT32', shape: [1], data: new Uint32Array([4294967295]) },
      { name: 'U64', datatype: 'UINT64', shape: [1], data: new BigUint64Array([9007199254740991n]) },
      { name: 'I8', datatype: 'INT8', shape: [2], data: new Int8Array([-128, 127]) },
      { name: 'I16', datatype: 'INT16', shape: [1], data: new Int16Array([-32768]) },
      { name: 'I32', datatype: 'INT32', shape: [2, 2], data: new Int32Array([1, -2, 3, -4]) },
      { name: 'I64', datatype: 'INT64', shape: [1], data: new BigInt64Array([-9007199254740991n]) },
      { name: 'F16', datatype: 'FP16', shape: [5], data: new Uint16Array([0x3c00, 0x8000, 0x7bff, 0x0001, 0x7c00]) },
      { name: 'B16', datatype: 'BF16', shape: [3], data: new Uint16Array([0x3dcd, 0x8000, 0xff80]) },
      { name: 'F32', datatype: 'FP32', shape: [4], data: new Float32Array([0.1, -0, Infinity, 1e-45]) },
      { name: 'F64', datatype: 'FP64', shape: [3], data: new Float64Array([0.1, -Infinity, 5e-324]) },
      { name: 'STR', datatype: 'BYTES', shape: [3], data: bytesData('a', '', '日本"\n'), parameters: { p: 1 } }
    ],
    outputs: [{ name: 'OUT', parameters: { binary_data: false } }, { name: 'OUT2' }]
  }
  const decoded = decodeInferRequest(encodeInferRequest(request))
  t.same(decoded, request)
  for (let i = 0; i < request.inputs.length; i++) {
    const a = request.inputs[i] as Tensor
    const b = decoded.inputs[i] as Tensor
    t.equal(b.data.constructor, a.data.constructor, `${a.name} storage`)
    if (a.datatype !== 'BYTES') {
      const same = Array.from(a.data as ArrayLike<number | bigint>).every((v, j) => Object.is(v, (b.data as ArrayLike<number | bigint>)[j]))
      t.ok(same, `${a.name} bit-exact (including -0)`)
    } else {
      t.same(elementsOf(b.data).map(e => Array.from(e)), elementsOf(a.data).map(e => Array.from(e)), `${a.name} byte for byte`)
    }
  }
  t.equal(encodeInferRequest({ parameters: {}, inputs: [] }), '{"inputs":[]}', 'empty parts are left out')
  t.equal(encodeInferRequest({ id: '', parameters: { a: 1 }, inputs: [], outputs: [] }),
    '{"parameters":{"a":1},"inputs":[],"outputs":[]}')
})

t.test('encodeInferResponse → decodeInferResponse round trip', async t => {
  const resp: InferResponse = {
    id: '7',
    model_name: 'simple',
    model_version: '3',
    parameters: { sequence_id: 5 },
    outputs: [
      { name: 'F', datatype: 'FP32', shape: [3], data: new Float32Array([NaN, -Infinity, 0.5]) },
      { name: 'I', datatype: 'INT64', shape: [1, 1], data: new BigInt64Array([-3n]) },
      { name: 'S', datatype: 'BYTES', shape: [1], data: bytesData('ok'), parameters: { classification: 1 } }
    ]
  }
  const decoded = decodeInferResponse(encodeInferResponse(resp))
  t.equal(decoded.id, '7')
  t.equal(decoded.model_name, 'simple')
  t.equal(decoded.model_version, '3')
  t.same(decoded.parameters, { sequence_id: 5 })
  const f = decoded.outputs[0]?.data as Float32Array
  t.ok(f instanceof Float32Array && Number.isNaN(f[0]) && f[1] === -Infinity && f[2] === 0.5)
  t.same(decoded.outputs.slice(1), resp.outputs.slice(1))
  t.strictSame(stringsOf(decoded.outputs[2]?.data), ['ok'], 'BYTES contents')
  fails(t, () => decodeInferResponse(
    '{"model_name":"m","model_version":"1","outputs":[{"name":"O","datatype":"INT32","shape":[2],"data":[1]}]}'
  ), 'PROTO_ERR_DATA_MISMATCH',
  "Failed to parse 'data' field: shape does not match true shape (output 'O', shape [2]: expected 2 elements, got 1)",
  'messages name outputs as outputs')
  fails(t, () => decodeInferResponse(
    '{"model_name":"m","model_version":"1","outputs":[{"name":"O","datatype":"BOOL","shape":[1],"data":[0]}]}'
  ), 'PROTO_ERR_DATA_MISMATCH',
  "Unable to parse 'data' for output 'O': BOOL element at index 0 must be true or false, got 0")
  fails(t, () => decodeInferResponse('{"model_name":"m","outputs":[]}'), 'PROTO_ERR_INVALID_REQUEST',
    "Unable to parse 'model_version': attempt to access non-existing object member 'model_version'")
  fails(t, () => decodeInferResponse(
    '{"model_name":"m","model_version":"1","outputs":[{"name":"O","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}}]}'
  ), 'PROTO_ERR_BINARY_DATA',
  "unexpected size for output 'O', expecting 4 additional bytes (binary_data_size is 4, but the response has no " +
  'Inference-Header-Content-Length header, so its body holds no binary data)')
  t.same(decodeInferResponse(
    '{"model_name":"m","model_version":"1","outputs":[{"name":"O","datatype":"INT8","shape":[0],"parameters":{"binary_data_size":0}}]}'
  ).outputs, [{ name: 'O', datatype: 'INT8', shape: [0], data: new Int8Array(0) }], 'a 0-byte binary output in a pure JSON answer')
})

t.test('requestIdPrefix', async t => {
  t.equal(requestIdPrefix(undefined), '[request id: <id_unknown>] ')
  t.equal(requestIdPrefix(''), '[request id: <id_unknown>] ')
  t.equal(requestIdPrefix('abc'), '[request id: abc] ')
})
