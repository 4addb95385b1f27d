import t from 'tap'
import { createError } from '../../../common/errors.ts'
import { mergeIndexes, mergeStatistics, type FanOutAnswer } from '../../../gateway/server/merge.ts'
import { endpoints } from '../fixtures/helpers.ts'

const [a, b, c] = endpoints('a', 'b', 'c')

function answer (endpoint: typeof a, status: number, body: unknown): FanOutAnswer {
  return {
    ok: true,
    endpoint: endpoint!,
    response: { statusCode: status, headers: {}, body: Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)) }
  }
}

function d (count: number, ns: number): { count: number, ns: number } {
  return { count, ns }
}

/** One model version's statistics as a worker writes them. */
function stats (name: string, version: string, n: number, last: number): Record<string, unknown> {
  return {
    name,
    version,
    last_inference: last,
    inference_count: n * 2,
    execution_count: n,
    inference_stats: {
      success: d(n, n * 1000), fail: d(0, 0), queue: d(n, n * 100), compute_input: d(n, n * 10),
      compute_infer: d(n, n * 500), compute_output: d(n, n * 20), cache_hit: d(0, 0), cache_miss: d(0, 0)
    },
    response_stats: {},
    batch_stats: [{ batch_size: 2, compute_input: d(n, n * 10), compute_infer: d(n, n * 500), compute_output: d(n, n * 20) }],
    memory_usage: []
  }
}

t.test('statistics: counts and times summed per model and version, so ns / count stays the fleet mean', async (t) => {
  const merged = mergeStatistics([
    answer(a, 200, { model_stats: [stats('simple', '1', 3, 100), stats('mlp', '1', 1, 50)] }),
    answer(b, 200, { model_stats: [stats('simple', '1', 5, 300)] })
  ])
  if (!('body' in merged)) throw new Error('expected a merged body')
  t.strictSame(merged.answered, ['a', 'b'])
  const body = JSON.parse(merged.body) as { model_stats: Array<Record<string, any>> }
  t.strictSame(body.model_stats.map((s) => s.name), ['mlp', 'simple'], 'sorted by name, as Triton')
  const simple = body.model_stats[1]!
  t.equal(simple.last_inference, 300, 'the latest inference of any server')
  t.equal(simple.inference_count, 16)
  t.equal(simple.execution_count, 8)
  t.strictSame(simple.inference_stats.queue, d(8, 800))
  t.strictSame(simple.inference_stats.success, d(8, 8000))
  t.equal(simple.inference_stats.queue.ns / simple.inference_stats.queue.count, 100, 'the mean per request is kept')
  t.strictSame(simple.batch_stats, [{ batch_size: 2, compute_input: d(8, 80), compute_infer: d(8, 4000), compute_output: d(8, 160) }])
  t.strictSame(body.model_stats[0], stats('mlp', '1', 1, 50), 'a model only one server has is passed on as it is')
})

t.test('statistics: batch sizes, response indexes and memory merge by key', async (t) => {
  const one = { ...stats('m', '1', 1, 1), batch_stats: [{ batch_size: 1, compute_input: d(1, 1), compute_infer: d(1, 1), compute_output: d(1, 1) }], response_stats: { 0: { success: d(1, 5) } }, memory_usage: [{ type: 'CPU', id: 0, byte_size: 10 }] }
  const two = { ...stats('m', '1', 1, 1), batch_stats: [{ batch_size: 4, compute_input: d(1, 2), compute_infer: d(1, 2), compute_output: d(1, 2) }], response_stats: { 0: { success: d(2, 5) }, 1: { success: d(1, 1) } }, memory_usage: [{ type: 'CPU', id: 0, byte_size: 5 }, { type: 'GPU', id: 0, byte_size: 7 }] }
  const merged = mergeStatistics([answer(a, 200, { model_stats: [one] }), answer(b, 200, { model_stats: [two] })])
  if (!('body' in merged)) throw new Error('expected a merged body')
  const m = (JSON.parse(merged.body) as { model_stats: Array<Record<string, any>> }).model_stats[0]!
  t.strictSame(m.batch_stats.map((s: { batch_size: number }) => s.batch_size), [1, 4])
  t.strictSame(m.response_stats, { 0: { success: d(3, 10) }, 1: { success: d(1, 1) } })
  t.strictSame(m.memory_usage, [{ type: 'CPU', id: 0, byte_size: 15 }, { type: 'GPU', id: 0, byte_size: 7 }])
})

t.test('statistics: servers that fail or answer otherwise are left out; none usable passes the first answer on', async (t) => {
  const down: FanOutAnswer = { ok: false, endpoint: c, error: createError('GW_ERR_UPSTREAM_UNREACHABLE', 'c', 'connect ECONNREFUSED') }
  const merged = mergeStatistics([answer(a, 400, { error: "requested model 'm' is not available" }), down, answer(b, 200, { model_stats: [stats('m', '1', 1, 1)] })])
  t.ok('body' in merged && merged.answered.length === 1, 'the one usable answer is used')

  const passOn = mergeStatistics([answer(a, 400, { error: "requested model 'm' is not available" }), down])
  t.ok('passOn' in passOn && passOn.passOn.statusCode === 400, "a worker's own error is passed on when no server had statistics")

  const none = mergeStatistics([down])
  t.ok('error' in none && none.error.code === 'GW_ERR_STATS_UNAVAILABLE')
  t.match('error' in none ? none.error.message : '', /tried: c\): server 'c' could not be reached/)
  t.equal('error' in none ? none.error.statusCode : 0, 502)
})

t.test('index: union of every server, READY wins, sorted by name then version', async (t) => {
  const merged = mergeIndexes([
    answer(a, 200, [{ name: 'm', version: '2', state: 'UNAVAILABLE', reason: 'x' }, { name: 'b', version: '1', state: 'READY' }]),
    answer(b, 200, [{ name: 'm', version: '2', state: 'READY' }, { name: 'm', version: '1', state: 'READY' }]),
    answer(c, 200, 'not json')
  ])
  if (!('body' in merged)) throw new Error('expected a merged body')
  t.strictSame(JSON.parse(merged.body), [
    { name: 'b', version: '1', state: 'READY' },
    { name: 'm', version: '1', state: 'READY' },
    { name: 'm', version: '2', state: 'READY' }
  ])
  t.strictSame(merged.answered, ['a', 'b'])
})
