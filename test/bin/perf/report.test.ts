import t from 'tap'
import { SampleLog, type StepSamples } from '../../../bin/perf/load-generator.ts'
import { formatCsv, formatTable, percentile, stepJson, summarizeStep } from '../../../bin/perf/report.ts'
import { diffStatistics, parseStatistics } from '../../../bin/perf/server-stats.ts'

const OK = { ok: true } as const
const FULL = { ok: false, status: 503, message: 'Exceeds maximum queue size' } as const

t.test('nearest-rank percentiles are exact on known samples', async t => {
  const hundred = Float64Array.from({ length: 100 }, (_, i) => i + 1) // 1..100
  t.equal(percentile(hundred, 50), 50)
  t.equal(percentile(hundred, 90), 90)
  t.equal(percentile(hundred, 99), 99)
  t.equal(percentile(hundred, 100), 100)
  t.equal(percentile(hundred, 0), 1, 'p0 is the smallest')
  t.equal(percentile(hundred, 99.5), 100, 'ceil(99.5) = 100th')

  const ten = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
  t.equal(percentile(ten, 50), 50, 'ceil(5) = 5th')
  t.equal(percentile(ten, 51), 60, 'ceil(5.1) = 6th: never interpolated')
  t.equal(percentile(ten, 95), 100)
  t.equal(percentile([7], 1), 7)
  t.equal(percentile([7], 99), 7)
  t.equal(percentile([1, 2, 3], 34), 2, 'ceil(1.02) = 2nd')
  t.throws(() => percentile([], 50), /no samples/)
  t.throws(() => percentile([1], 101), /from 0 to 100/)
})

/** A step whose window is [1000, 2000) ms, with requests placed by hand. */
function samples (log: SampleLog, extra: Partial<StepSamples> = {}): StepSamples {
  return { step: { mode: 'concurrency', value: 2, warmupMs: 1000, windowMs: 1000 }, log, windowStart: 1000, windowEnd: 2000, ...extra }
}

t.test('a step counts what completed inside the window, exactly', async t => {
  const log = new SampleLog()
  log.record(900, 999.999, OK) // warm-up: out
  log.record(990, 1000, OK) // began in the warm-up, completes exactly at the window's start: in
  log.record(1000, 1001, OK)
  log.record(1500, 1503, OK)
  log.record(1900, 1999.5, OK)
  log.record(1990, 2000, OK) // completes at the end: out
  log.record(1200, 1210, FULL)
  log.record(100, 200, FULL) // a warm-up error: listed, not counted in the window
  log.record(1300, 1301, { ok: false, status: 'ECONNRESET', message: 'socket hang up' })
  const r = summarizeStep(samples(log), 3)
  t.equal(r.requests, 4)
  t.equal(r.errors, 2)
  t.equal(r.requestsPerSecond, 4)
  t.equal(r.inferencesPerSecond, 12, 'times the batch size')
  t.strictSame(r.latency, { count: 4, p50: 3000, p90: 99500, p95: 99500, p99: 99500, avg: (10000 + 1000 + 3000 + 99500) / 4, min: 1000, max: 99500 })
  t.equal(r.totalOk, 6)
  t.equal(r.totalFailed, 3)
  t.strictSame(r.errorCounts, [
    { status: 503, message: 'Exceeds maximum queue size', count: 2 },
    { status: 'ECONNRESET', message: 'socket hang up', count: 1 }
  ], 'distinct errors over the whole step, most frequent first')

  const empty = summarizeStep(samples(new SampleLog()), 1)
  t.equal(empty.latency, undefined)
  t.equal(empty.requestsPerSecond, 0)
})

t.test('the SampleLog grows past its first arrays', async t => {
  const log = new SampleLog()
  for (let i = 0; i < 5000; i++) log.record(i, i + 0.5, i % 1000 === 0 ? FULL : OK)
  t.equal(log.length, 5000)
  t.equal(log.failed, 5)
  t.equal(log.errorKinds.length, 1, 'one distinct error')
  t.equal(log.end(4999), 4999.5)
  t.equal(log.code(3000), 0)
  t.equal(log.code(3001), -1)
})

const STATS = (success: bigint, ns: bigint, executions: bigint): string => `{"model_stats":[{"name":"m","version":"1",` +
  `"last_inference":1,"inference_count":${success * 2n},"execution_count":${executions},"inference_stats":{` +
  `"success":{"count":${success},"ns":${ns * 10n}},"fail":{"count":1,"ns":5},"queue":{"count":${success},"ns":${ns}},` +
  `"compute_input":{"count":${success},"ns":${ns * 2n}},"compute_infer":{"count":${success},"ns":${ns * 3n}},` +
  `"compute_output":{"count":${success},"ns":${ns * 4n}},"cache_hit":{"count":0,"ns":0},"cache_miss":{"count":0,"ns":0}},` +
  '"response_stats":{},"batch_stats":[],"memory_usage":[]}]}'

t.test('server statistics: exact counters past 2^53, diffed into per-request averages', async t => {
  const base = 2n ** 60n // far past what a double holds exactly
  const before = parseStatistics(STATS(1000n, base, 500n))
  t.equal(before.queue.ns, base)
  t.equal(before.success.ns, base * 10n)
  const after = parseStatistics(STATS(1100n, base + 150_000_000n, 540n))
  t.strictSame(diffStatistics(before, after), {
    requests: 100,
    failures: 0,
    inferences: 200,
    executions: 40,
    queueUs: 1500, // 150 ms over 100 requests
    computeInputUs: 3000,
    computeInferUs: 4500,
    computeOutputUs: 6000
  })
  t.equal(diffStatistics(after, before), undefined, 'counters that went backwards (a reload) give nothing')
  t.equal(diffStatistics(before, before)!.queueUs, undefined, 'no requests: no average')

  // Two versions' entries are summed.
  const two = JSON.parse(STATS(1n, 10n, 1n))
  two.model_stats.push(two.model_stats[0])
  t.equal(parseStatistics(JSON.stringify(two)).queue.ns, 20n)
  t.throws(() => parseStatistics('{"model_stats":[{"name":"m"}]}'), /the statistics have no model_stats\[0\]\.inference_stats/)
  t.throws(() => parseStatistics('{}'), /no model_stats array/)
  t.throws(() => parseStatistics('nope'), /not JSON/)
  t.throws(() => parseStatistics(STATS(1n, 1n, 1n).replace('"execution_count":1', '"execution_count":1.5')), /execution_count is not a non-negative integer/)
  t.equal(parseStatistics('{"model_stats":[{"name":"\\"count\\":5","inference_count":0,"execution_count":0,"inference_stats":' +
    JSON.stringify(JSON.parse(STATS(1n, 1n, 1n)).model_stats[0].inference_stats) + '}]}').queue.count, 1n, 'a key-like model name is left alone')
})

t.test('table, CSV and JSON of a sweep', async t => {
  const step = (value: number, ms: number[], errors = 0): StepSamples => {
    const log = new SampleLog()
    for (const m of ms) log.record(1000, 1000 + m, OK)
    for (let i = 0; i < errors; i++) log.record(1500, 1501, FULL)
    return { ...samples(log), step: { mode: 'concurrency', value, warmupMs: 1000, windowMs: 1000 } }
  }
  const results = [summarizeStep(step(1, [1, 2, 3]), 1), summarizeStep(step(2, [2, 2, 4, 4, 4], 2), 1)]
  results[1]!.server = { requests: 5, failures: 2, inferences: 5, executions: 3, queueUs: 100.4, computeInputUs: 10, computeInferUs: 2000.5, computeOutputUs: undefined }

  t.equal(formatCsv(results), [
    'Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,' +
      'Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,Errors',
    '1,3,0,,,,,,0,2000,3000,3000,3000,2000,0',
    // avg 3200 - (100.4 + 10 + 2000.5) = 1089.1
    '2,5,0,1089,100,10,2001,,0,4000,4000,4000,4000,3200,2',
    ''
  ].join('\n'))

  const table = formatTable(results)
  t.equal(table, [
    '                      --- Client latency (us) ----   Server, per request (us)',
    'Concurrency  Infer/s   p50   p90   p95   p99   avg  queue  input  infer  output  Errors',
    '          1        3  2000  3000  3000  3000  2000      -      -      -       -       0',
    '          2        5  4000  4000  4000  4000  3200    100     10   2001       -       2',
    '',
    'Errors at concurrency 2: 2 in the window, 2 of 7 requests in all',
    '  2 x 503 Exceeds maximum queue size',
    ''
  ].join('\n'))

  t.strictSame(stepJson(results[1]!), {
    concurrency: 2,
    inferences_per_second: 5,
    requests_per_second: 5,
    requests: 5,
    errors: 2,
    latency_us: { p50: 4000, p90: 4000, p95: 4000, p99: 4000, avg: 3200, min: 2000, max: 4000 },
    server: {
      requests: 5, failures: 2, inferences: 5, executions: 3,
      queue_us: 100.4, compute_input_us: 10, compute_infer_us: 2000.5, compute_output_us: null
    },
    error_messages: [{ status: 503, message: 'Exceeds maximum queue size', count: 2 }]
  })

  const open = summarizeStep({ ...samples(new SampleLog()), step: { mode: 'request-rate', value: 12.5, warmupMs: 0, windowMs: 1000 }, arrivals: { offered: 12, dropped: 2, late: 1, maxOutstanding: 3 } }, 1)
  t.match(formatCsv([open]), /^Request Rate,.*,Errors,Sent Rate,Dropped,Late\n12\.5,0,0,,,,,,0,,,,,,0,10,2,1\n$/)
  t.match(formatTable([open]), /Request Rate {2}Infer\/s {2}Sent\/s {2}Dropped {2}Late/)
  t.match(stepJson(open), { request_rate: 12.5, offered_per_second: 12, sent_per_second: 10, dropped: 2, late: 1, max_outstanding: 3 })
  t.equal(formatTable([]), '')
  t.equal(formatCsv([]), '')
})
