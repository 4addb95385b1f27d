import t from 'tap'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { type Tensor } from '../../../common/protocol/types.ts'
import { type BackendRequest } from '../../../worker/backends/types.ts'
import { mergeInput, mergeInputs, splitOutput, splitOutputs } from '../../../worker/scheduler/batch-tensors.ts'
import { elementsOf, stringsOf } from '../../helpers/bytes-data.ts'

function req (inputs: Tensor[], batchSize: number): BackendRequest {
  return { inputs: new Map(inputs.map(i => [i.name, i])), requestedOutputs: [], parameters: {}, batchSize }
}

function f32 (name: string, shape: number[], values: number[]): Tensor {
  return { name, datatype: 'FP32', shape, data: Float32Array.from(values) }
}

t.test('merge: concatenated along the batch dimension into one new buffer', async t => {
  const a = req([f32('X', [1, 2], [1, 2]), { name: 'Y', datatype: 'INT64', shape: [1], data: BigInt64Array.from([7n]) }], 1)
  const b = req([f32('X', [2, 2], [3, 4, 5, 6]), { name: 'Y', datatype: 'INT64', shape: [2], data: BigInt64Array.from([8n, 9n]) }], 2)
  const merged = mergeInputs([a, b])
  const x = merged.get('X') as Tensor
  t.same(x.shape, [3, 2])
  t.ok(x.data instanceof Float32Array)
  t.same(Array.from(x.data as Float32Array), [1, 2, 3, 4, 5, 6])
  t.not((x.data as Float32Array).buffer, ((a.inputs.get('X') as Tensor).data as Float32Array).buffer, 'a new buffer')
  const y = merged.get('Y') as Tensor
  t.same(y.shape, [3])
  t.ok(y.data instanceof BigInt64Array)
  t.same(Array.from(y.data as BigInt64Array), [7n, 8n, 9n])
})

t.test('merge: a batch of one is handed back without a copy', async t => {
  const x = f32('X', [1, 2], [1, 2])
  t.equal(mergeInput([req([x], 1)], 'X'), x)
})

t.test('merge: ragged inputs become one 1-D tensor of all elements', async t => {
  const merged = mergeInput([req([f32('X', [1, 3], [1, 2, 3])], 1), req([f32('X', [1, 1], [4])], 1)], 'X')
  t.same(merged.shape, [4])
  t.same(Array.from(merged.data as Float32Array), [1, 2, 3, 4])
})

t.test('merge: BYTES elements are gathered in request order, packed into one buffer', async t => {
  const first = BytesData.from(['ab'])
  const second = BytesData.from(['c', ''])
  const merged = mergeInput([
    req([{ name: 'S', datatype: 'BYTES', shape: [1], data: first }], 1),
    req([{ name: 'S', datatype: 'BYTES', shape: [2], data: second }], 2)
  ], 'S')
  t.same(merged.shape, [3])
  t.ok(merged.data instanceof BytesData)
  t.strictSame(stringsOf(merged.data), ['ab', 'c', ''])
  // Merging is the one copy a batch makes (as for typed data): the elements leave the requests' memory.
  const data = elementsOf(merged.data)
  t.ok(data.every(e => e.buffer === data[0]!.buffer), 'one buffer for all the elements')
  t.not(data[0]!.buffer, first.get(0).buffer, 'not the first request\'s memory')
  t.not(data[1]!.buffer, second.get(0).buffer, 'nor the second\'s')
})

t.test('merge: mistakes are named', async t => {
  t.throws(() => mergeInput([req([f32('X', [1], [1])], 1), req([], 1)], 'X'), { message: "input 'X' is missing from request 1 of the batch" })
  t.throws(() => mergeInput([], 'X'), { message: "input 'X' is missing from request 0 of the batch" })
  t.throws(() => mergeInput([req([f32('X', [1], [1])], 1), req([{ name: 'X', datatype: 'INT32', shape: [1], data: Int32Array.from([1]) }], 1)], 'X'),
    { message: "input 'X' is INT32 in request 1 of the batch but FP32 in request 0" })
  t.same(mergeInputs([]), new Map())
})

t.test('split: per-request views on the output buffer, no copy', async t => {
  const requests = [req([], 1), req([], 2), req([], 1)]
  const output: Tensor = { name: 'OUT', datatype: 'FP32', shape: [4, 2], data: Float32Array.from([0, 1, 2, 3, 4, 5, 6, 7]), parameters: { p: 1 } }
  const parts = splitOutput(output, requests)
  t.same(parts.map(p => p.shape), [[1, 2], [2, 2], [1, 2]])
  t.same(parts.map(p => Array.from(p.data as Float32Array)), [[0, 1], [2, 3, 4, 5], [6, 7]])
  for (const p of parts) t.equal((p.data as Float32Array).buffer, (output.data as Float32Array).buffer, 'same buffer')
  t.same(parts[1]?.parameters, { p: 1 })
  ;(output.data as Float32Array)[2] = 42
  t.equal((parts[1]?.data as Float32Array)[0], 42, 'a view, not a copy')
})

t.test('split: a batch of one gets the output itself; BYTES are split by element', async t => {
  const output = f32('OUT', [1, 2], [1, 2])
  t.equal(splitOutput(output, [req([], 1)])[0], output)
  const e = BytesData.from(['a', 'b', 'c'])
  const parts = splitOutput({ name: 'S', datatype: 'BYTES', shape: [3], data: e }, [req([], 2), req([], 1)])
  t.same(parts.map(p => p.shape), [[2], [1]])
  t.strictSame(parts.map(p => stringsOf(p.data)), [['a', 'b'], ['c']])
  // Views of the output's elements, as typed outputs are split: the same bytes at the same place.
  const split = elementsOf(parts[1]?.data)[0]!
  t.equal(split.buffer, e.get(2).buffer, 'a view of the output\'s memory')
  t.equal(split.byteOffset, e.get(2).byteOffset)
})

t.test('split: a batch dimension that does not add up is an error', async t => {
  t.throws(() => splitOutput(f32('OUT', [3, 1], [1, 2, 3]), [req([], 1), req([], 1)]), {
    message: "output 'OUT' has shape [3,1], but the batch holds 2 inferences from 2 requests; its first dimension must be 2"
  })
})

t.test('splitOutputs: every output, per request', async t => {
  const requests = [req([], 1), req([], 1)]
  const perRequest = splitOutputs([f32('A', [2], [1, 2]), f32('B', [2, 1], [3, 4])], requests)
  t.same(perRequest.map(ts => ts.map(x => [x.name, Array.from(x.data as Float32Array)])), [
    [['A', [1]], ['B', [3]]],
    [['A', [2]], ['B', [4]]]
  ])
})

t.test('round trip: merge then split gives each request its own data back', async t => {
  const requests = [req([f32('X', [2, 3], [1, 2, 3, 4, 5, 6])], 2), req([f32('X', [1, 3], [7, 8, 9])], 1)]
  const merged = mergeInput(requests, 'X')
  const back = splitOutput({ ...merged, name: 'Y' }, requests)
  t.same(back.map(b => [b.shape, Array.from(b.data as Float32Array)]), [[[2, 3], [1, 2, 3, 4, 5, 6]], [[1, 3], [7, 8, 9]]])
})
