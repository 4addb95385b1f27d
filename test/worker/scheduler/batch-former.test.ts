/**
 * The pure batch-forming rule and the queue it walks, without a scheduler: queue contents and `now` in, a decision
 * out. The DynamicBatcher tests cover the same rules as timed sequences.
 */
import t from 'tap'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { type Tensor } from '../../../common/protocol/types.ts'
import { type BackendRequest } from '../../../worker/backends/types.ts'
import { type ModelInput } from '../../../worker/repository/types.ts'
import { batchRules, type FormableItem, formBatch, ShapeCheck } from '../../../worker/scheduler/batch-former.ts'
import {
  NO_DEADLINE, PriorityRequestQueue, requestPriority, requestTimeoutUs
} from '../../../worker/scheduler/priority-queue.ts'
import { model, queuePolicy, request, us } from './fixtures/helpers.ts'

interface Item extends FormableItem {
  readonly tag: string
}

function item (tag: string, size: number, enqueueNs = 0n, dims?: number[]): Item {
  return { tag, size, enqueueNs, deadlineNs: NO_DEADLINE, request: request(tag, { batch: size, ...(dims !== undefined ? { dims } : {}) }) }
}

/** A one-level queue holding `sizes`, items named r0, r1, ... enqueued at 0. */
function queueOf (sizes: number[]): PriorityRequestQueue<Item> {
  const q = new PriorityRequestQueue<Item>(model({ batching: {} }).dynamic_batching!)
  sizes.forEach((size, i) => { q.push(item(`r${i}`, size), 0) })
  return q
}

t.test('formBatch: Triton GetDynamicBatch decisions (max_batch_size 8)', async t => {
  const cases: Array<[string, { preferred: number[], delayUs: number, queued: number[], nowUs?: number }, string]> = [
    ['empty queue', { preferred: [2, 6], delayUs: 0, queued: [] }, 'empty'],
    ['a preferred size reached', { preferred: [2, 6], delayUs: 1000, queued: [1, 1] }, 'send 2 (2)'],
    ['short of a preferred size, delay pending', { preferred: [2, 6], delayUs: 1000, queued: [1] }, 'wait 1000'],
    ['short of a preferred size, no delay', { preferred: [2, 6], delayUs: 0, queued: [1] }, 'send 1 (1)'],
    ['largest reachable preferred wins', { preferred: [2, 6], delayUs: 1000, queued: [1, 1, 1, 1, 1, 1, 1] }, 'send 6 (6)'],
    ['largest preferred actually hit', { preferred: [2, 6], delayUs: 1000, queued: [1, 1, 1, 1, 1, 3] }, 'send 2 (2)'],
    ['overshoot sends what is formed', { preferred: [4], delayUs: 1000, queued: [3, 2] }, 'send 1 (3)'],
    ['a single request above max preferred', { preferred: [2, 6], delayUs: 1000, queued: [7] }, 'send 1 (7)'],
    ['max_batch_size stops the walk', { preferred: [], delayUs: 0, queued: [5, 4] }, 'send 1 (5)'],
    ['no preferred sizes means max_batch_size', { preferred: [], delayUs: 1000, queued: [4, 4, 1] }, 'send 2 (8)'],
    ['no preferred sizes, under max, delay pending', { preferred: [], delayUs: 1000, queued: [4, 3] }, 'wait 1000'],
    ['delay over: the largest batch, not the cut', { preferred: [2, 6], delayUs: 1000, queued: [1, 1, 1, 1, 1], nowUs: 1000 }, 'send 5 (5)'],
    ['delay not quite over: the cut', { preferred: [2, 6], delayUs: 1000, queued: [1, 1, 1, 1, 1], nowUs: 999 }, 'send 2 (2)'],
    ['delay over, capped by max_batch_size', { preferred: [2, 6], delayUs: 1000, queued: [5, 4], nowUs: 2000 }, 'send 1 (5)']
  ]
  for (const [name, c, expected] of cases) {
    const config = model({ batching: { preferred_batch_size: c.preferred, max_queue_delay_microseconds: c.delayUs } })
    const q = queueOf(c.queued)
    const f = formBatch(q.levels, us(c.nowUs ?? 0), batchRules(config), undefined)
    const got = f.kind === 'send' ? `send ${f.count} (${f.size})` : f.kind === 'wait' ? `wait ${f.untilNs / 1000n}` : 'empty'
    t.equal(got, expected, name)
  }
})

t.test('formBatch: flush (a stopping batcher) treats the delay as over', async t => {
  const config = model({ batching: { preferred_batch_size: [2, 6], max_queue_delay_microseconds: 1000 } })
  const f = formBatch(queueOf([1, 1, 1]).levels, 0n, batchRules(config), undefined, true)
  t.same(f, { kind: 'send', count: 3, size: 3 })
})

t.test('formBatch: the wait is measured from the oldest request of the pending batch', async t => {
  const config = model({ batching: { priority_levels: 2, default_priority_level: 2, max_queue_delay_microseconds: 1000 } })
  const q = new PriorityRequestQueue<Item>(config.dynamic_batching!)
  q.push(item('old', 1, us(100)), 1)
  q.push(item('new', 1, us(300)), 0)
  t.same(formBatch(q.levels, us(400), batchRules(config), undefined), { kind: 'wait', untilNs: us(1100) })
})

t.test('formBatch: shapes stop the walk at the first mismatch', async t => {
  const config = model({ dims: [-1], batching: { preferred_batch_size: [4], max_queue_delay_microseconds: 1000 } })
  const q = new PriorityRequestQueue<Item>(config.dynamic_batching!)
  q.push(item('a', 1, 0n, [3]), 0)
  q.push(item('b', 1, 0n, [3]), 0)
  q.push(item('c', 1, 0n, [5]), 0)
  q.push(item('d', 1, 0n, [3]), 0)
  const shapes = ShapeCheck.fromConfig(config)
  t.ok(shapes)
  t.same(formBatch(q.levels, 0n, batchRules(config), shapes), { kind: 'send', count: 2, size: 2 })
  t.same(formBatch(q.levels, 0n, batchRules(config), undefined), { kind: 'send', count: 4, size: 4 }, 'without the check all four')
})

t.test('batchRules: Triton normalisation', async t => {
  t.same(batchRules(model({ maxBatchSize: 8, batching: {} })),
    { maxBatchSize: 8, preferred: new Set([8]), maxPreferred: 8, delayNs: 0n }, 'empty preferred -> [max_batch_size]')
  t.same(batchRules(model({ maxBatchSize: 0, batching: { max_queue_delay_microseconds: 5 } })),
    { maxBatchSize: 1, preferred: new Set(), maxPreferred: 0, delayNs: 5000n }, 'max_batch_size 0 -> batches of 1')
  t.same(batchRules(model({ maxBatchSize: 8, batching: { preferred_batch_size: [4, 2, 4] } })).maxPreferred, 4)
})

function input (name: string, dims: number[], extra: Partial<ModelInput> = {}): ModelInput {
  return { name, data_type: 'TYPE_INT32', format: 'FORMAT_NONE', dims, is_shape_tensor: false, allow_ragged_batch: false, optional: false, ...extra }
}

function req (inputs: Record<string, { shape: number[], data?: number[] }>): BackendRequest {
  const map = new Map<string, Tensor>()
  for (const [name, { shape, data }] of Object.entries(inputs)) {
    const count = shape.reduce((a, b) => a * b, 1)
    map.set(name, { name, datatype: 'INT32', shape, data: Int32Array.from(data ?? new Array<number>(count).fill(0)) })
  }
  return { inputs: map, requestedOutputs: [], parameters: {}, batchSize: inputs.A?.shape[0] ?? 1 }
}

t.test('ShapeCheck: which inputs must agree (RequiredEqualInputs)', async t => {
  t.equal(ShapeCheck.fromConfig(model({ inputs: [input('A', [4])] })), undefined, 'fixed dims: no check at all')
  t.equal(ShapeCheck.fromConfig(model({ inputs: [input('A', [-1], { allow_ragged_batch: true })] })), undefined, 'ragged: no check')

  const variable = ShapeCheck.fromConfig(model({ inputs: [input('A', [-1, 2]), input('B', [3])] }))!
  t.ok(variable.matches(req({ A: { shape: [1, 5, 2] }, B: { shape: [1, 3] } }), req({ A: { shape: [4, 5, 2] }, B: { shape: [4, 3] } })),
    'the batch dimension may differ')
  t.notOk(variable.matches(req({ A: { shape: [1, 5, 2] } }), req({ A: { shape: [1, 6, 2] } })), 'a variable dim differs')

  const shapeTensor = ShapeCheck.fromConfig(model({ inputs: [input('A', [2]), input('S', [2], { is_shape_tensor: true })] }))!
  t.ok(shapeTensor.matches(req({ A: { shape: [1, 2] }, S: { shape: [2], data: [3, 4] } }), req({ A: { shape: [1, 2] }, S: { shape: [2], data: [3, 4] } })))
  t.notOk(shapeTensor.matches(req({ A: { shape: [1, 2] }, S: { shape: [2], data: [3, 4] } }), req({ A: { shape: [1, 2] }, S: { shape: [2], data: [3, 5] } })),
    'shape tensors must have equal contents')
  // A BYTES shape tensor (the config does not refuse one) compares element by element, wherever its bytes are.
  const withBytes = (...s: string[]): BackendRequest => {
    const r = req({ A: { shape: [1, 2] } })
    ;(r.inputs as Map<string, Tensor>).set('S', { name: 'S', datatype: 'BYTES', shape: [s.length], data: BytesData.from(s) })
    return r
  }
  t.ok(shapeTensor.matches(withBytes('x', 'yz'), withBytes('x', 'yz')))
  t.notOk(shapeTensor.matches(withBytes('x', 'yz'), withBytes('xy', 'z')), 'the same bytes split otherwise differ')
  t.notOk(shapeTensor.matches(withBytes('x', 'yz'), req({ A: { shape: [1, 2] }, S: { shape: [2], data: [3, 4] } })))

  const optional = ShapeCheck.fromConfig(model({ inputs: [input('A', [2]), input('O', [2], { optional: true })] }))!
  t.ok(optional.matches(req({ A: { shape: [1, 2] } }), req({ A: { shape: [1, 2] } })))
  t.notOk(optional.matches(req({ A: { shape: [1, 2] } }), req({ A: { shape: [1, 2] }, O: { shape: [1, 2] } })),
    'with optional inputs the set of inputs must be the same')
  t.notOk(optional.matches(req({ A: { shape: [1, 2] }, O: { shape: [1, 2] } }), req({ A: { shape: [1, 2] } })))
})

t.test('PriorityRequestQueue: levels, sizes, deadlines', async t => {
  const batching = model({
    batching: {
      priority_levels: 3,
      default_priority_level: 2,
      default_queue_policy: queuePolicy({ default_timeout_microseconds: 100, allow_timeout_override: true }),
      priority_queue_policy: { 3: queuePolicy({ max_queue_size: 1 }) }
    }
  }).dynamic_batching!
  const q = new PriorityRequestQueue<Item>(batching)
  t.same([0, 1, 2, 3, 4].map(p => q.levelIndexOf(p)), [1, 0, 1, 2, 1], 'priority -> level index, default for 0 and > N')
  t.equal(q.deadlineFor(0, 0, us(10)), us(110), 'default timeout')
  t.equal(q.deadlineFor(0, 40, us(10)), us(50), 'shorter override')
  t.equal(q.deadlineFor(0, 400, us(10)), us(110), 'longer override ignored')
  t.equal(q.deadlineFor(2, 40, us(10)), NO_DEADLINE, 'level 3 has its own policy, without a timeout')
  t.notOk(q.isFull(2))
  q.push(item('a', 1), 2)
  t.ok(q.isFull(2), 'max_queue_size 1 on level 3')
  t.notOk(q.isFull(1), 'other levels unbounded')
  t.equal(q.size, 1)
  t.equal(q.shift()?.tag, 'a')
  t.equal(q.shift(), undefined)
  t.equal(q.size, 0)
})

t.test('request parameters as the scheduler reads them', async t => {
  t.equal(requestPriority({ priority: 3 }), 3)
  t.equal(requestPriority({}), 0)
  t.equal(requestPriority({ priority: -1 }), 0)
  t.equal(requestPriority({ priority: '3' }), 0)
  t.equal(requestTimeoutUs({ timeout: 250 }), 250)
  t.equal(requestTimeoutUs({ timeout: -5 }), 0, 'negative: never shortens (a huge uint64 in Triton)')
  t.equal(requestTimeoutUs({ timeout: 1.5 }), 0)
  t.equal(requestTimeoutUs({}), 0)
})
