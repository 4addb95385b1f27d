/**
 * The gRPC transport against a fake `inference.GRPCInferenceService` (in this process), for what the real worker
 * cannot be made to do: counters beyond 2^53, a server that never answers, one that answers UNAVAILABLE or has no
 * statistics. The runs against the real worker are in bench-command.test.ts.
 */
import * as grpc from '@grpc/grpc-js'
import t, { type Test } from 'tap'
import { runBenchCommand, type BenchIo } from '../../../bin/perf/bench-command.ts'
import { statisticsCounters } from '../../../bin/perf/grpc-transport.ts'
import { addInferenceService, type InferenceServiceHandlers } from '../../../common/protocol/grpc/grpc-service.ts'
import { type ModelInferRequestMessage, type ModelStatisticsResponse } from '../../../common/protocol/grpc/messages.ts'

const FAST = ['--warmup-ms', '100', '--measurement-interval', '200']

function capture (): { io: BenchIo, out: () => string, err: () => string } {
  let out = ''
  let err = ''
  const io: BenchIo = {
    stdout: { write: (s: string) => { out += s } },
    stderr: { write: (s: string) => { err += s } },
    readFile: () => { throw new Error('no files here') },
    writeFile: () => {}
  }
  return { io, out: () => out, err: () => err }
}

const TWO_60 = 1n << 60n
const TWO_62 = 1n << 62n

/**
 * The fake: model `m` (input X, FP32 [-1, 2], max_batch_size 4) answers every ModelInfer at once; `slow` never
 * answers; `busy` is not ready; `nostats` has no statistics. Each statistics read moves the counters on by 10
 * requests of 250 us queued and 1 ms computing, from a base past 2^60, so only exact arithmetic gets the split.
 */
async function fakeServer (tt: Test): Promise<{ address: string, received: ModelInferRequestMessage[] }> {
  const received: ModelInferRequestMessage[] = []
  let reads = 0n
  const unanswered: Array<() => void> = []
  const handlers: Partial<InferenceServiceHandlers> = {
    ModelMetadata: (call, callback) => {
      if (call.request.name === 'busy') {
        callback({ code: grpc.status.UNAVAILABLE, details: "model 'busy' is not ready" })
        return
      }
      callback(null, {
        name: call.request.name, versions: ['1'], platform: 'fake',
        inputs: [{ name: 'X', datatype: 'FP32', shape: [-1, 2n] }], outputs: [{ name: 'Y', datatype: 'FP32', shape: [-1, 2] }]
      })
    },
    ModelConfig: (call, callback) => callback(null, { config: { name: call.request.name, max_batch_size: 4 } }),
    ModelStatistics: (call, callback) => {
      if (call.request.name === 'nostats') {
        callback({ code: grpc.status.UNIMPLEMENTED, details: 'statistics are off' })
        return
      }
      const k = reads++ * 10n
      const duration = (count: bigint, ns: bigint): { count: bigint, ns: bigint } => ({ count, ns })
      const answer: ModelStatisticsResponse = {
        model_stats: [{
          name: call.request.name ?? '', version: '1', last_inference: 0,
          inference_count: TWO_60 + k * 2n,
          execution_count: Number(k),
          inference_stats: {
            success: duration(TWO_60 + k, TWO_62 + k * 1_300_000n),
            fail: duration(0n, 0n),
            queue: duration(TWO_60 + k, TWO_62 + k * 250_000n),
            compute_input: duration(TWO_60 + k, TWO_62 + k * 20_000n),
            compute_infer: duration(TWO_60 + k, TWO_62 + k * 1_000_000n),
            compute_output: duration(TWO_60 + k, TWO_62 + k * 30_000n),
            cache_hit: duration(0n, 0n),
            cache_miss: duration(0n, 0n)
          },
          batch_stats: [], memory_usage: [], response_stats: {}
        }]
      }
      callback(null, answer)
    },
    ModelInfer: (call, callback) => {
      received.push(call.request)
      // Held until the test ends: the client's deadline must end the call, not the server.
      if (call.request.model_name === 'slow') unanswered.push(() => callback({ code: grpc.status.CANCELLED, details: 'test over' }))
      else callback(null, { model_name: call.request.model_name ?? '', model_version: '1', outputs: [], raw_output_contents: [] })
    }
  }
  const server = new grpc.Server()
  addInferenceService(server, handlers)
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => { if (err === null) resolve(p); else reject(err) })
  })
  tt.teardown(() => {
    for (const end of unanswered) end()
    server.forceShutdown()
  })
  return { address: `127.0.0.1:${port}`, received }
}

t.test('the server split from counters past 2^60, exactly; requests sent as prepared', async t => {
  const { address, received } = await fakeServer(t)
  const c = capture()
  const code = await runBenchCommand(['-m', 'm', '-i', 'grpc', '-u', address, '-b', '2', '--concurrency', '2', ...FAST, '--json', '-q'], c.io)
  t.equal(code, 0, c.err())
  t.match(c.out(), `*** flotilla bench: model 'm' (the server's version) at ${address} over grpc ***`)
  const step = JSON.parse(c.out().trimEnd().split('\n').at(-1)!).steps[0]
  t.ok(step.requests > 0 && step.errors === 0)
  t.strictSame(step.server, {
    requests: 10, failures: 0, inferences: 20, executions: 10,
    queue_us: 250, compute_input_us: 20, compute_infer_us: 1000, compute_output_us: 30
  }, 'each average exact: 10 requests per read, whatever the counters\' size')

  t.ok(received.length >= step.requests)
  const first = received[0]!
  t.equal(first.model_name, 'm')
  t.equal(first.model_version, '', 'no -x: the server picks the version')
  t.equal(first.inputs?.[0]?.name, 'X')
  t.strictSame(first.inputs?.[0]?.shape, [2, 2], '-b 2 fills the batch dimension')
  t.equal(first.raw_input_contents?.[0]?.length, 16, 'four FP32 elements as raw bytes')
})

t.test('a call with no answer within --timeout-ms ends with DEADLINE_EXCEEDED', async t => {
  const { address } = await fakeServer(t)
  const c = capture()
  const code = await runBenchCommand(['-m', 'slow', '-x', '1', '-i', 'grpc', '-u', address, '--concurrency', '2', '--shape', 'X:2',
    '--timeout-ms', '150', ...FAST, '--json'], c.io)
  t.equal(code, 1)
  const failed = /every request at concurrency 2 failed \(([0-9]+) request\(s\)\); the most frequent error: (.*)\n/.exec(c.err())
  t.equal(failed?.[2], 'DEADLINE_EXCEEDED Deadline exceeded (no answer within 150 ms)', 'one message however long each took')
  // 300 ms of load, each call ending at its 150 ms deadline: two or three calls per slot.
  t.ok(Number(failed?.[1]) >= 4 && Number(failed?.[1]) <= 6, `${failed?.[1]} calls`)
  const step = JSON.parse(c.out().trimEnd().split('\n').at(-1)!).steps[0]
  t.strictSame(step.error_messages, [{ status: 'DEADLINE_EXCEEDED', message: 'Deadline exceeded (no answer within 150 ms)', count: Number(failed?.[1]) }])
  t.match(c.out(), "model 'slow' (version 1)")
  t.ok(step.server !== null, 'the statistics were read at the window\'s edges while both calls were stuck')
})

t.test('a server\'s UNAVAILABLE answer is its answer, not "cannot reach"', async t => {
  const { address } = await fakeServer(t)
  const c = capture()
  t.equal(await runBenchCommand(['-m', 'busy', '-i', 'grpc', '-u', address, ...FAST], c.io), 1)
  t.equal(c.err(), "flotilla bench: ModelMetadata for model 'busy' answered UNAVAILABLE: model 'busy' is not ready\n")
})

t.test('no statistics: the run goes on and says so once', async t => {
  const { address } = await fakeServer(t)
  const c = capture()
  t.equal(await runBenchCommand(['-m', 'nostats', '-i', 'grpc', '-u', address, '--shape', 'X:2', ...FAST, '--json', '-q'], c.io), 0, c.err())
  t.match(c.out(), "server statistics: not available (ModelStatistics for model 'nostats' answered UNIMPLEMENTED: statistics are off); " +
    'the server columns stay empty')
  t.equal(JSON.parse(c.out().trimEnd().split('\n').at(-1)!).steps[0].server, null)
})

t.test('statisticsCounters: exact bigints, summed over entries, unset sub-messages as zero', async t => {
  const big = (1n << 53n) + 1n
  const counters = statisticsCounters({
    model_stats: [
      {
        name: 'm', version: '1', last_inference: 0, inference_count: big, execution_count: 3,
        inference_stats: {
          success: { count: big, ns: big * 1000n }, fail: { count: 1, ns: 5 }, queue: { count: 2, ns: 7 },
          compute_input: { count: 2, ns: 1 }, compute_infer: { count: 2, ns: 2 }, compute_output: { count: 2, ns: 3 },
          cache_hit: { count: 0, ns: 0 }, cache_miss: { count: 0, ns: 0 }
        },
        batch_stats: [], memory_usage: [], response_stats: {}
      },
      // A version that has served nothing: a server may leave inference_stats unset.
      { name: 'm', version: '2', last_inference: 0, inference_count: 1, execution_count: 0, batch_stats: [], memory_usage: [], response_stats: {} }
    ]
  })
  t.strictSame(counters, {
    success: { count: big, ns: big * 1000n },
    fail: { count: 1n, ns: 5n },
    queue: { count: 2n, ns: 7n },
    computeInput: { count: 2n, ns: 1n },
    computeInfer: { count: 2n, ns: 2n },
    computeOutput: { count: 2n, ns: 3n },
    inferenceCount: big + 1n,
    executionCount: 3n
  })
  t.throws(() => statisticsCounters({
    model_stats: [{ name: 'm', version: '1', last_inference: 0, inference_count: -1, execution_count: 0, batch_stats: [], memory_usage: [], response_stats: {} }]
  }), /the statistics' model_stats\[0\]\.inference_count is not a non-negative integer/)
  t.strictSame(statisticsCounters({ model_stats: [] }).success, { count: 0n, ns: 0n })
})
