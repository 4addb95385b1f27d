import t from 'tap'
import { type ErrorCode } from '../../../common/errors.ts'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { JsonDataRange, parseJsonBody } from '../../../common/protocol/json-body-parser.ts'
import { decodeTensorData, describeValue } from '../../../common/protocol/json-tensor-data.ts'
import { type DataType, type TensorData } from '../../../common/protocol/types.ts'
import { elementsOf, stringsOf } from '../../helpers/bytes-data.ts'
import { type Asserts, throwsCoded } from '../../helpers/coded-error.ts'

function fails (t: Asserts, fn: () => unknown, code: ErrorCode, message: string, what?: string): void {
  throwsCoded(t, fn, { code, message }, what)
}

/** `data` as the byte parser leaves it: a range over the text of a one-input body. */
function range (data: string): JsonDataRange {
  const doc = parseJsonBody(Buffer.from(`{"inputs":[{"data":${data}}]}`)) as { inputs: Array<{ data: JsonDataRange }> }
  return doc.inputs[0]?.data as JsonDataRange
}

const decode = (datatype: DataType, data: unknown, count: number, maxBytes = Infinity): TensorData =>
  decodeTensorData('X', 'input', datatype, [count], data, maxBytes)

const values = (data: TensorData): unknown[] => data instanceof BytesData ? stringsOf(data) : Array.from(data as ArrayLike<unknown>)

t.test('arrays JSON.parse built (bodies nested beyond the byte parser) follow the same rules as ranges', async t => {
  const cases: Array<[DataType, unknown[]]> = [
    ['BOOL', [true, false]], ['UINT8', [0, 255]], ['INT8', [-128, 127]], ['UINT16', [65535, 1]], ['INT16', [-32768, 2]],
    ['UINT32', [4294967295, 0]], ['INT32', [-2147483648, 2147483647]], ['UINT64', [9007199254740991, 0]],
    ['INT64', [-9007199254740991, 5]], ['FP16', [1, 65519]], ['BF16', [1, -2]], ['FP32', [0.1, 3.4028235e38]],
    ['FP64', [Number.MAX_VALUE, -0]], ['BYTES', ['a', 'é']]
  ]
  for (const [datatype, data] of cases) {
    const fromArray = decode(datatype, data, 2)
    const fromRange = decode(datatype, range(JSON.stringify(data)), 2)
    t.equal(fromArray.constructor, fromRange.constructor, `${datatype} storage`)
    t.same(values(fromArray), values(fromRange), `${datatype} values`)
  }
  const refused: Array<[DataType, unknown, string]> = [
    ['UINT8', 256, 'an integer in [0, 255], got 256'],
    ['INT16', -32769, 'an integer in [-32768, 32767], got -32769'],
    ['UINT64', -1, 'an integer in [0, 18446744073709551615], got -1'],
    ['INT64', 2 ** 64, 'an integer in [-9223372036854775808, 9223372036854775807], got 18446744073709552000'],
    ['INT32', 1.5, 'an integer in [-2147483648, 2147483647], got 1.5'],
    ['INT32', 'x', 'an integer in [-2147483648, 2147483647], got string "x"'],
    ['BOOL', 0, 'true or false, got 0'],
    ['FP32', 1e39, 'a number within the FP32 range, got 1e+39 (which rounds to infinity)'],
    ['FP16', 70000, 'a number within the FP16 range, got 70000 (which rounds to infinity)'],
    ['BF16', 1e39, 'a number within the BF16 range, got 1e+39 (which rounds to infinity)'],
    ['FP64', null, 'a number, got null'],
    ['BYTES', 1, 'a string, got 1']
  ]
  for (const [datatype, value, message] of refused) {
    fails(t, () => decode(datatype, [[value]], 1), 'PROTO_ERR_DATA_MISMATCH',
      `Unable to parse 'data' for input 'X': ${datatype} element at index 0 must be ${message}`, `${datatype} ${String(value)}`)
  }
  t.strictSame(values(decode('BYTES', ['a', 'é'], 2)), ['a', 'é'], 'BYTES as UTF-8')
  t.ok(Number.isNaN((decode('FP32', [NaN], 1) as Float32Array)[0]), 'NaN for floats')
  t.same(values(decode('FP64', [Infinity], 1)), [Infinity], 'Infinity for floats (JSON.parse cannot tell 1e400 from it)')
  fails(t, () => decode('BYTES', ['abc', 'de'], 2, 12), 'PROTO_ERR_INVALID_REQUEST',
    "JSON input 'X' has a byte_size (13 bytes) that exceeds the maximum allowed value of 12 bytes. Use the worker flag " +
    '--max-body-bytes to increase the limit.')
  fails(t, () => decode('BYTES', range('["abc","de"]'), 2, 12), 'PROTO_ERR_INVALID_REQUEST',
    "JSON input 'X' has a byte_size (13 bytes) that exceeds the maximum allowed value of 12 bytes. Use the worker flag " +
    '--max-body-bytes to increase the limit.', 'the same from a range')
})

t.test('BYTES from a range: views of the body while no string needs decoding', async t => {
  const plain = range('["ab","","日本"]')
  const views = decode('BYTES', plain, 3)
  t.strictSame(stringsOf(views), ['ab', '', '日本'])
  t.ok(elementsOf(views).every(e => e.buffer === plain.bytes.buffer), 'every element a view of the body, none copied')
  t.equal(elementsOf(views)[0]!.byteOffset, plain.bytes.byteOffset + plain.start + 2, 'the first at its token\'s contents')

  // One string with an escape: it is decoded, and the elements before it move with it into a buffer of their own.
  const escaped = range('["ab","c\\n","d"]')
  const copied = decode('BYTES', escaped, 3)
  t.strictSame(stringsOf(copied), ['ab', 'c\n', 'd'])
  t.ok(elementsOf(copied).every(e => e.buffer !== escaped.bytes.buffer), 'none a view of the body')
})

t.test('describeValue', async t => {
  t.equal(describeValue(-0), '-0')
  t.equal(describeValue([1]), 'an array')
  t.equal(describeValue({}), 'an object')
  t.equal(describeValue('x'.repeat(41)), `string "${'x'.repeat(40)}..."`)
})
