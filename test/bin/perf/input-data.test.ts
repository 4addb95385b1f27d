import t, { type Test } from 'tap'
import {
  fileRequests, parseInputDataFile, parseShapeFlag, randomRequests, resolveInputs, zeroRequests, type ResolvedInput
} from '../../../bin/perf/input-data.ts'
import { type ModelMetadata } from '../../../bin/perf/transport.ts'
import { isFlotillaError } from '../../../common/errors.ts'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { fp16BitsToFloat32 } from '../../../common/protocol/datatypes.ts'
import { elementsOf, stringsOf } from '../../helpers/bytes-data.ts'

/** The demo `simple` model's metadata: two INT32 [-1,16] inputs, batching. */
const SIMPLE: ModelMetadata = {
  name: 'simple',
  versions: ['1'],
  inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] }, { name: 'INPUT1', datatype: 'INT32', shape: [-1, 16] }],
  outputs: []
}
const MIXED: ModelMetadata = {
  name: 'mixed',
  versions: ['1'],
  inputs: [
    { name: 'F', datatype: 'FP16', shape: [-1, 2] },
    { name: 'S', datatype: 'BYTES', shape: [-1, 1] },
    { name: 'I', datatype: 'INT64', shape: [-1, -1] },
    { name: 'B', datatype: 'BOOL', shape: [-1, 1] }
  ],
  outputs: []
}
const NONE = new Map<string, number[]>()
const GEN = { poolSize: 4, seed: 7, intRange: [0, 100] as const, stringLength: 5 }

/** `fn` throws CLI_ERR_USAGE with exactly `message` (a string), or a message matching it (a RegExp). */
function usageError (t: Test, fn: () => unknown, message: string | RegExp): void {
  let caught: unknown
  try {
    fn()
  } catch (err) {
    caught = err
  }
  if (!isFlotillaError(caught) || caught.code !== 'CLI_ERR_USAGE') {
    t.fail(`expected a usage error, got ${String(caught)}`)
    return
  }
  if (typeof message === 'string') t.equal(caught.message, message)
  else t.match(caught.message, message)
}

t.test('shapes: the batch dimension from -b, the rest from the model and --shape', async t => {
  const inputs = resolveInputs(SIMPLE, 8, 4, NONE)
  t.strictSame(inputs.map((i) => [i.name, i.batched, i.sampleShape]), [['INPUT0', true, [16]], ['INPUT1', true, [16]]])
  const [request] = zeroRequests(inputs, 4)
  t.strictSame(request!.inputs.map((i) => i.shape), [[4, 16], [4, 16]])
  t.equal(request!.inputs[0]!.data.length, 64)

  // A model that does not batch keeps its leading -1 as an ordinary variable dimension.
  const plain = resolveInputs({ ...SIMPLE, inputs: [{ name: 'X', datatype: 'FP32', shape: [-1, 3] }] }, 0, 1, new Map([['X', [2, 3]]]))
  t.strictSame(plain[0], { name: 'X', datatype: 'FP32', batched: false, sampleShape: [2, 3] })

  t.strictSame(parseShapeFlag('a:b:1,2'), ['a:b', [1, 2]], 'the last colon separates the name')
  usageError(t, () => parseShapeFlag('X:1,,2'), /--shape takes NAME:d1,d2/)
  usageError(t, () => parseShapeFlag('X:0'), /every dimension must be at least 1/)
  usageError(t, () => resolveInputs(SIMPLE, 0, 2, NONE), "model 'simple' does not batch (max_batch_size 0), so -b must be 1, got 2")
  usageError(t, () => resolveInputs(SIMPLE, 8, 9, NONE), "-b 9 is more than model 'simple''s max_batch_size 8")
  usageError(t, () => resolveInputs(SIMPLE, 8, 1, new Map([['INPUT2', [16]]])), "--shape names 'INPUT2', which is not an input of model 'simple' (its inputs: INPUT0, INPUT1)")
  usageError(t, () => resolveInputs(SIMPLE, 8, 1, new Map([['INPUT0', [4, 4]]])), /--shape INPUT0:4,4 has 2 dimension\(s\), but input 'INPUT0' has 1 per sample \(shape \[16\], batch dimension excluded\)/)
  usageError(t, () => resolveInputs(SIMPLE, 8, 1, new Map([['INPUT0', [15]]])), "--shape INPUT0:15 gives dimension 0 as 15, but input 'INPUT0' fixes it at 16 (shape [16])")
  usageError(t, () => zeroRequests(resolveInputs(MIXED, 8, 1, NONE), 1), "input 'I' has a variable dimension (shape [-1] per sample); give it with --shape I:N")
})

t.test('random data: seeded, within range, per datatype', async t => {
  const inputs = resolveInputs(MIXED, 8, 2, new Map([['I', [3]]]))
  const a = randomRequests(inputs, 2, GEN)
  const b = randomRequests(inputs, 2, GEN)
  t.equal(a.length, 4)
  t.strictSame(a, b, 'the same seed gives the same requests')
  t.notSame(a[0], a[1], 'the requests of the pool differ')
  t.notSame(randomRequests(inputs, 2, { ...GEN, seed: 8 })[0], a[0], 'another seed, other data')

  const [f, s, i, bool] = a[0]!.inputs
  t.strictSame([f!.shape, s!.shape, i!.shape, bool!.shape], [[2, 2], [2, 1], [2, 3], [2, 1]])
  for (const bits of f!.data as Uint16Array) {
    const v = fp16BitsToFloat32(bits)
    t.ok(v >= 0 && v <= 1, `FP16 pattern ${bits} is ${v}, in [0, 1]`)
  }
  const strings = stringsOf(s!.data)
  t.equal(strings.length, 2, 'one BYTES element per sample')
  for (const text of strings) t.match(text, /^[a-z0-9]{5}$/)
  t.notSame(strings, stringsOf(a[1]!.inputs[1]!.data), 'the BYTES input differs between requests')
  t.strictSame(stringsOf(b[0]!.inputs[1]!.data), strings, 'and is the same for the same seed')
  t.ok((i!.data as BigInt64Array).every((v) => v >= 0n && v <= 100n))
  t.ok((bool!.data as Uint8Array).every((v) => v === 0 || v === 1))

  const narrow = randomRequests(resolveInputs(SIMPLE, 8, 1, NONE), 1, { ...GEN, intRange: [-3, -3] })
  t.ok((narrow[0]!.inputs[0]!.data as Int32Array).every((v) => v === -3))
  usageError(t, () => randomRequests(resolveInputs({ ...SIMPLE, inputs: [{ name: 'U', datatype: 'UINT8', shape: [1] }] }, 0, 1, NONE), 1, { ...GEN, intRange: [-1, 5] }),
    "--int-range -1:5 does not fit input 'U' (UINT8: 0 to 255)")
})

t.test('a data file: flat values, content with shape, b64, and -b stacking entries', async t => {
  const file = parseInputDataFile(JSON.stringify({
    data: [
      { F: [0.5, 1], S: ['a'], I: { content: [1, 2, 3], shape: [3] }, B: [true] },
      { F: [[2, -2]], S: { content: ['bc'], shape: [1] }, I: { b64: Buffer.from(new BigInt64Array([4n, 5n, 6n]).buffer).toString('base64'), shape: [3] }, B: [0] },
      { F: [0, 0], S: { b64: Buffer.from([2, 0, 0, 0, 0x68, 0x69]).toString('base64') }, I: { content: ['9007199254740993', 0, -1], shape: [3] }, B: [false] }
    ]
  }), 'in.json')
  const inputs = resolveInputs(MIXED, 8, 1, NONE)

  const one = fileRequests(file, inputs, 1, 'mixed')
  t.equal(one.length, 3, 'one request per entry')
  t.strictSame(Array.from(one[0]!.inputs[0]!.data as Uint16Array).map(fp16BitsToFloat32), [0.5, 1])
  t.strictSame(Array.from(one[1]!.inputs[2]!.data as BigInt64Array), [4n, 5n, 6n], 'b64 holds the raw little-endian elements')
  t.strictSame(Array.from(one[2]!.inputs[2]!.data as BigInt64Array), [9007199254740993n, 0n, -1n], 'INT64 beyond 2^53 as a digit string, exactly')
  t.strictSame(stringsOf(one[0]!.inputs[1]!.data), ['a'], 'BYTES values are stored as UTF-8')
  t.strictSame(stringsOf(one[2]!.inputs[1]!.data), ['hi'], 'BYTES b64 is length-prefixed')
  t.strictSame(one[1]!.inputs[1]!.shape, [1, 1])

  const batched = fileRequests(file, inputs, 2, 'mixed')
  t.equal(batched.length, 3)
  // Request j stacks entries 2j and 2j+1, wrapping: [0,1], [2,0], [1,2].
  t.strictSame(batched.map((r) => Array.from(r.inputs[3]!.data as Uint8Array)), [[1, 0], [0, 1], [0, 0]])
  t.strictSame(batched.map((r) => stringsOf(r.inputs[1]!.data)), [['a', 'bc'], ['hi', 'a'], ['bc', 'hi']], 'BYTES entries stack too')
  t.strictSame(batched[0]!.inputs.map((i) => i.shape), [[2, 2], [2, 1], [2, 3], [2, 1]])

  // --shape fills what an entry leaves open.
  const open = parseInputDataFile(JSON.stringify({ data: [{ F: [1, 2], S: ['x'], I: [7, 8], B: [1] }] }), 'open.json')
  t.strictSame(fileRequests(open, resolveInputs(MIXED, 8, 1, new Map([['I', [2]]])), 1, 'mixed')[0]!.inputs[2]!.shape, [1, 2])
})

t.test('a data file: each malformed case names the entry, the input and the fix', async t => {
  const structural: Array<[string, string | RegExp]> = [
    ['{', /^--input-data f\.json is not valid JSON: /],
    ['[]', /^--input-data f\.json must be an object with a non-empty "data" array \(perf_analyzer's format: /],
    ['{"data": []}', /must be an object with a non-empty "data" array/],
    ['{"data": [[{"X": [1]}]]}', '--input-data f.json: entry 0 is an array; sequence streams are not supported, give one object of inputs per entry'],
    ['{"data": [7]}', '--input-data f.json: entry 0 must be an object from input name to data'],
    ['{"data": [{"X": 5}]}', `--input-data f.json: entry 0, input 'X': give an array of values, {"content": [...], "shape": [...]} or {"b64": "...", "shape": [...]}`],
    ['{"data": [{"X": {"shape": [1]}}]}', `--input-data f.json: entry 0, input 'X': an object must have "content" (an array) or "b64" (a base64 string)`],
    ['{"data": [{"X": {"content": [1], "shape": [-1]}}]}', `--input-data f.json: entry 0, input 'X': "shape" must be an array of non-negative integers`],
    ['{"data": [{"X": {"b64": "!!"}}]}', `--input-data f.json: entry 0, input 'X': "b64" is not base64`]
  ]
  for (const [text, message] of structural) usageError(t, () => parseInputDataFile(text, 'f.json'), message)

  const simple = resolveInputs(SIMPLE, 8, 1, NONE)
  const sixteen = Array.from({ length: 16 }, (_, i) => i)
  const against: Array<[object, number, string]> = [
    [{ INPUT0: sixteen }, 1, "--input-data f.json: entry 0 has no data for input 'INPUT1' (the model's inputs: INPUT0, INPUT1)"],
    [{ INPUT0: sixteen, INPUT1: sixteen, INPUT2: [1] }, 1, "--input-data f.json: entry 0 names 'INPUT2', which is not an input of model 'simple' (its inputs: INPUT0, INPUT1)"],
    [{ INPUT0: sixteen.slice(1), INPUT1: sixteen }, 1, "--input-data f.json: entry 0, input 'INPUT0': 15 value(s) given, but its shape [16] needs 16"],
    [{ INPUT0: sixteen, INPUT1: { content: sixteen, shape: [4, 4] } }, 1,
      `--input-data f.json: entry 0, input 'INPUT1': "shape" [4,4] has 2 dimension(s), but input 'INPUT1' has 1 per sample (shape [16], batch dimension excluded)`],
    [{ INPUT0: sixteen, INPUT1: [...sixteen.slice(1), 1.5] }, 1,
      "--input-data f.json: entry 0, input 'INPUT1': value 15 (1.5) is not an integer from -2147483648 to 2147483647 (INT32)"],
    [{ INPUT0: sixteen, INPUT1: [...sixteen.slice(1), 2 ** 31] }, 1,
      "--input-data f.json: entry 0, input 'INPUT1': value 15 (2147483648) is not an integer from -2147483648 to 2147483647 (INT32)"],
    [{ INPUT0: sixteen, INPUT1: { b64: Buffer.alloc(60).toString('base64') } }, 1,
      `--input-data f.json: entry 0, input 'INPUT1': "b64" holds 60 bytes, but shape [16] of INT32 needs 64`]
  ]
  for (const [entry, batch, message] of against) {
    const file = parseInputDataFile(JSON.stringify({ data: [entry] }), 'f.json')
    usageError(t, () => fileRequests(file, simple, batch, 'simple'), message)
  }

  const mixed = resolveInputs(MIXED, 8, 1, NONE)
  const entry = (over: object): object => ({ F: [1, 2], S: ['x'], I: { content: [1], shape: [1] }, B: [1], ...over })
  const typed: Array<[object[], number, string]> = [
    [[entry({ S: [5] })], 1, "--input-data f.json: entry 0, input 'S': value 0 (5) is not a string (BYTES)"],
    [[entry({ B: ['yes'] })], 1, `--input-data f.json: entry 0, input 'B': value 0 ("yes") is not a boolean (BOOL)`],
    [[entry({ F: [1, 'x'] })], 1, `--input-data f.json: entry 0, input 'F': value 1 ("x") is not a number (FP16)`],
    [[entry({ I: [1] })], 1, "--input-data f.json: entry 0, input 'I': the input has a variable dimension (shape [-1] per sample); give \"shape\" in the entry, or --shape I:..."],
    [[entry({ S: { b64: Buffer.from([9, 0, 0, 0, 1]).toString('base64') } })], 1,
      `--input-data f.json: entry 0, input 'S': "b64" does not hold 1 length-prefixed BYTES element(s) for shape [1]`],
    [[entry({}), entry({ I: { content: [1, 2], shape: [2] } })], 2,
      "--input-data f.json: entries 0 and 1 give input 'I' different shapes ([1] and [2]), so they cannot share a batch of -b 2"]
  ]
  for (const [entries, batch, message] of typed) {
    const file = parseInputDataFile(JSON.stringify({ data: entries }), 'f.json')
    usageError(t, () => fileRequests(file, mixed, batch, 'mixed'), message)
  }
})

t.test('a resolved input is plain data', async t => {
  const input: ResolvedInput = { name: 'X', datatype: 'BYTES', batched: false, sampleShape: [2] }
  const [request] = zeroRequests([input], 1)
  t.strictSame(request, { parameters: {}, inputs: [{ name: 'X', datatype: 'BYTES', shape: [2], data: BytesData.empty(2) }] })
  const data = request!.inputs[0]!.data
  t.ok(data instanceof BytesData, 'BYTES data is a BytesData')
  t.strictSame(elementsOf(data), [new Uint8Array(0), new Uint8Array(0)], 'of empty elements')
})
