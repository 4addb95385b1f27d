/**
 * The DynamicBatcher's queue policies, priorities, preserve_ordering, failures, stop() and what it reports to the
 * observer (triton-behaviour.md §6.5-6.7), driven by a fake clock.
 */
import t from 'tap'
import { isFlotillaError } from '../../../common/errors.ts'
import { type BackendInstance, type BackendRequest, type BackendResponse } from '../../../worker/backends/types.ts'
import { type ModelConfig } from '../../../worker/repository/types.ts'
import { DynamicBatcher } from '../../../worker/scheduler/dynamic-batcher.ts'
import {
  echo, FakeInstance, FakeSchedulerClock, type ModelOptions, model, queuePolicy, RecordingObserver, request, Submitter, tagOf, us
} from './fixtures/helpers.ts'

function setup (config: ModelConfig, instanceCount = 1) {
  const clock = new FakeSchedulerClock()
  const observer = new RecordingObserver()
  const log: string[][] = []
  const instances = Array.from({ length: instanceCount }, (_, i) => new FakeInstance(`i${i}`, log))
  const scheduler = new DynamicBatcher({ modelName: 'm', version: 1, config, instances, observer, clock })
  return { clock, observer, log, instances, scheduler, s: new Submitter(scheduler), i0: instances[0] as FakeInstance }
}

function batching (options: ModelOptions['batching'], rest: Omit<ModelOptions, 'batching'> = {}): ModelConfig {
  return model({ ...rest, batching: options ?? {} })
}

/** Occupies the only instance with request 'x' so later requests queue. */
async function occupy (h: ReturnType<typeof setup>): Promise<void> {
  void h.s.submit('x')
  await h.clock.to(h.clock.now())
  if (!h.i0.busy) throw new Error('x did not start')
}

t.test('priorities: level 1 first, FIFO within a level, the default level for priority 0 or > N', async t => {
  const config = batching({ priority_levels: 2, default_priority_level: 2 })
  const h = setup(config)
  await occupy(h)
  void h.s.submit('a', { priority: 2 })
  void h.s.submit('b', { priority: 0 })
  void h.s.submit('c', { priority: 1 })
  void h.s.submit('d', { priority: 5 })
  void h.s.submit('e', { priority: 1 })
  void h.s.submit('f')
  await h.clock.to(us(1))
  h.i0.complete()
  await h.clock.to(us(2))
  t.same(h.log, [['x'], ['c', 'e', 'a', 'b', 'd', 'f']])

  t.test('one level per batch boundary: max_batch_size 2 serves them in the same order', async t => {
    const h = setup(batching({ priority_levels: 2, default_priority_level: 2 }, { maxBatchSize: 2 }))
    await occupy(h)
    void h.s.submit('a', { priority: 2 })
    void h.s.submit('b', { priority: 0 })
    void h.s.submit('c', { priority: 1 })
    void h.s.submit('d', { priority: 1 })
    await h.clock.to(us(1))
    for (let i = 0; i < 2; i++) {
      h.i0.complete()
      await h.clock.to(us(2 + i))
    }
    t.same(h.log, [['x'], ['c', 'd'], ['a', 'b']])
  })

  t.test('default_priority_level 1 puts unprioritised requests first', async t => {
    const h = setup(batching({ priority_levels: 2, default_priority_level: 1 }))
    await occupy(h)
    void h.s.submit('a', { priority: 2 })
    void h.s.submit('b')
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    t.same(h.log, [['x'], ['b', 'a']])
  })

  t.test('priority_levels 0: the priority parameter is ignored', async t => {
    const h = setup(batching({}))
    await occupy(h)
    void h.s.submit('a', { priority: 2 })
    void h.s.submit('b', { priority: 1 })
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    t.same(h.log, [['x'], ['a', 'b']])
  })
})

t.test('max_queue_size: a full queue refuses at once with 503 "Exceeds maximum queue size"', async t => {
  const h = setup(batching({ default_queue_policy: queuePolicy({ max_queue_size: 2 }) }))
  await occupy(h)
  void h.s.submit('a')
  void h.s.submit('b')
  await h.s.submit('c')
  t.same(h.s.settled, ['c:Exceeds maximum queue size'], 'refused synchronously, before anything ran')
  const err = h.s.errors.get('c')
  t.ok(isFlotillaError(err))
  if (isFlotillaError(err)) {
    t.equal(err.code, 'WRK_ERR_QUEUE_FULL')
    t.equal(err.statusCode, 503)
    t.equal(err.grpcStatus, 'UNAVAILABLE')
  }
  t.equal(h.scheduler.queueDepth, 2, 'executing requests do not count, queued ones do')
  t.match(h.observer.requests, [{ ok: false, reason: 'REJECTED', batchSize: 1, totalNs: 0n }],
    'a refused request is counted as a REJECTED failure with no time (the issue asks for it; Triton leaves it out)')

  h.i0.complete()
  await h.clock.to(us(1))
  t.same(h.log, [['x'], ['a', 'b']])
  void h.s.submit('d')
  await h.clock.to(us(2))
  t.equal(h.scheduler.queueDepth, 1, 'room again once the queue drained')
  t.same(h.s.settled, ['c:Exceeds maximum queue size', 'x'])

  t.test('per level: priority_queue_policy limits one level only', async t => {
    const h = setup(batching({
      priority_levels: 2,
      default_priority_level: 2,
      priority_queue_policy: { 1: queuePolicy({ max_queue_size: 1 }) }
    }))
    await occupy(h)
    void h.s.submit('a', { priority: 1 })
    await h.s.submit('b', { priority: 1 })
    void h.s.submit('c', { priority: 2 })
    void h.s.submit('d', { priority: 2 })
    await h.clock.to(us(1))
    t.same(h.s.settled, ['b:Exceeds maximum queue size'])
    t.equal(h.scheduler.queueDepth, 3)
  })
})

t.test('REJECT timeout: 503 "Request timeout expired" when the timeout passes, with no other event', async t => {
  const h = setup(batching({ default_queue_policy: queuePolicy({ default_timeout_microseconds: 1000 }) }))
  await occupy(h)
  void h.s.submit('a')
  await h.clock.to(us(500))
  void h.s.submit('b')
  await h.clock.to(us(1000))
  void h.s.submit('c')
  await h.clock.to(us(1000))
  t.same(h.s.settled, [], 'not at 1000 µs, even with an arrival then: Triton expires a request once now > enqueue + timeout')
  await h.clock.to(us(1000) + 1n)
  t.same(h.s.settled, ['a:Request timeout expired'], 'the timer fired: the instance is still busy and nothing arrived')
  const err = h.s.errors.get('a')
  t.ok(isFlotillaError(err) && err.code === 'WRK_ERR_REQUEST_TIMEOUT' && err.statusCode === 503)
  t.equal(h.scheduler.queueDepth, 2)
  t.same(h.observer.requests, [{
    ok: false,
    reason: 'REJECTED',
    batchSize: 1,
    totalNs: us(1000) + 1n,
    timing: { queueNs: us(1000) + 1n, computeInputNs: 0n, computeInferNs: 0n, computeOutputNs: 0n }
  }])
  await h.clock.to(us(1500) + 1n)
  t.same(h.s.settled, ['a:Request timeout expired', 'b:Request timeout expired'])
  await h.clock.to(us(2000) + 1n)
  t.same(h.s.settled, ['a:Request timeout expired', 'b:Request timeout expired', 'c:Request timeout expired'])
  t.equal(h.scheduler.queueDepth, 0)
  t.equal(h.clock.pendingTimers, 0, 'no timer left once the queue is empty')
  t.same(h.log, [['x']], 'none reached an instance')

  t.test('a request handed to an instance no longer times out', async t => {
    const h = setup(batching({ default_queue_policy: queuePolicy({ default_timeout_microseconds: 1000 }) }))
    void h.s.submit('a')
    await h.clock.to(0n)
    await h.clock.to(us(5000))
    h.i0.complete()
    await h.clock.to(us(5001))
    t.same(h.s.settled, ['a'])
  })
})

t.test('DELAY timeout: an expired request moves behind the unexpired ones of its level and is still served', async t => {
  const h = setup(batching({ default_queue_policy: queuePolicy({ timeout_action: 'DELAY', default_timeout_microseconds: 1000 }) }))
  await occupy(h)
  void h.s.submit('a')
  await h.clock.to(us(500))
  void h.s.submit('b')
  await h.clock.to(us(600))
  void h.s.submit('c')
  await h.clock.to(us(1200))
  h.i0.complete()
  await h.clock.to(us(1201))
  t.same(h.log, [['x'], ['b', 'c', 'a']])
  h.i0.complete()
  await h.clock.to(us(1202))
  t.same(h.s.settled, ['x', 'b', 'c', 'a'])
  t.same(h.observer.requests.map(r => r.ok), [true, true, true, true])

  t.test('max_batch_size 1: the delayed request is served last, one by one', async t => {
    const h = setup(batching({ default_queue_policy: queuePolicy({ timeout_action: 'DELAY', default_timeout_microseconds: 1000 }) },
      { maxBatchSize: 1 }))
    await occupy(h)
    void h.s.submit('a')
    await h.clock.to(us(500))
    void h.s.submit('b')
    await h.clock.to(us(1001))
    void h.s.submit('c')
    await h.clock.to(us(1100))
    for (let i = 0; i < 3; i++) {
      h.i0.complete()
      await h.clock.to(us(1101 + i))
    }
    t.same(h.log, [['x'], ['b'], ['c'], ['a']])
  })
})

t.test('allow_timeout_override: a request timeout only ever shortens the default', async t => {
  const cases: Array<[string, { default: number, allow: boolean, timeout: number }, number | undefined]> = [
    ['shorter request timeout is used', { default: 1000, allow: true, timeout: 500 }, 500],
    ['longer request timeout is ignored', { default: 1000, allow: true, timeout: 2000 }, 1000],
    ['no override allowed: ignored', { default: 1000, allow: false, timeout: 500 }, 1000],
    ['default 0 (none): any request timeout is ignored', { default: 0, allow: true, timeout: 500 }, undefined],
    ['timeout 0 means none given', { default: 1000, allow: true, timeout: 0 }, 1000]
  ]
  for (const [name, c, expiresAfterUs] of cases) {
    t.test(name, async t => {
      const h = setup(batching({
        default_queue_policy: queuePolicy({ default_timeout_microseconds: c.default, allow_timeout_override: c.allow })
      }))
      await occupy(h)
      void h.s.submit('a', { timeout: c.timeout })
      if (expiresAfterUs === undefined) {
        await h.clock.to(us(100_000))
        t.same(h.s.settled, [], 'still queued after 100 ms')
        return
      }
      await h.clock.to(us(expiresAfterUs))
      t.same(h.s.settled, [], `queued at ${expiresAfterUs} µs`)
      await h.clock.to(us(expiresAfterUs) + 1n)
      t.same(h.s.settled, ['a:Request timeout expired'], `expired just after ${expiresAfterUs} µs`)
    })
  }
})

t.test('per-level queue policies: each priority level times out by its own policy', async t => {
  const h = setup(batching({
    priority_levels: 2,
    default_priority_level: 2,
    priority_queue_policy: { 2: queuePolicy({ default_timeout_microseconds: 100 }) }
  }))
  await occupy(h)
  void h.s.submit('a', { priority: 1 })
  void h.s.submit('b', { priority: 2 })
  await h.clock.to(us(1000))
  t.same(h.s.settled, ['b:Request timeout expired'], 'level 1 (default policy) never times out')
})

t.test('preserve_ordering: responses are delivered in dequeue order across instances', async t => {
  for (const preserve of [true, false]) {
    t.test(`preserve_ordering ${String(preserve)}`, async t => {
      const h = setup(batching({ preserve_ordering: preserve }, { maxBatchSize: 1 }), 2)
      const [i0, i1] = h.instances as [FakeInstance, FakeInstance]
      void h.s.submit('a')
      await h.clock.to(us(1))
      void h.s.submit('b')
      await h.clock.to(us(2))
      t.same(h.log, [['a'], ['b']])
      t.ok(i1.busy && i0.busy, 'a on i1, b on i0')
      i0.complete()
      await h.clock.to(us(10))
      if (preserve) {
        t.same(h.s.settled, [], 'b finished first but waits for a')
        t.equal(h.scheduler.executing, 2, 'a held response still counts until delivered')
      } else {
        t.same(h.s.settled, ['b'])
      }
      i1.complete()
      await h.clock.to(us(20))
      t.same(h.s.settled, preserve ? ['a', 'b'] : ['b', 'a'])
      t.equal(h.scheduler.executing, 0)
      if (preserve) {
        t.same(h.observer.requests.map(r => r.totalNs), [us(10), us(9)], 'b is reported when it is delivered, not when it finished')
      }
    })
  }

  t.test('a failed batch keeps its place in the order', async t => {
    const h = setup(batching({ preserve_ordering: true }, { maxBatchSize: 1 }), 2)
    const [i0, i1] = h.instances as [FakeInstance, FakeInstance]
    void h.s.submit('a')
    await h.clock.to(us(1))
    void h.s.submit('b')
    await h.clock.to(us(2))
    i0.fail(new Error('boom'))
    await h.clock.to(us(3))
    t.same(h.s.settled, [])
    i1.complete()
    await h.clock.to(us(4))
    t.same(h.s.settled, ['a', 'b:boom'])
  })
})

t.test('backend failures', async t => {
  t.test('a rejected execute() fails every request of the batch, reason BACKEND; the instance is reused', async t => {
    const h = setup(batching({}))
    await occupy(h)
    void h.s.submit('a')
    void h.s.submit('b')
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    const boom = new Error('boom')
    h.i0.fail(boom)
    await h.clock.to(us(3))
    t.same(h.s.settled, ['x', 'a:boom', 'b:boom'])
    t.equal(h.s.errors.get('a'), boom, 'the backend error itself')
    t.same(h.observer.requests.map(r => [r.ok, r.reason]), [[true, undefined], [false, 'BACKEND'], [false, 'BACKEND']])
    t.same(h.observer.batches.map(b => b.size), [1], 'a failed execution is not a batch in the statistics')
    void h.s.submit('c')
    await h.clock.to(us(4))
    t.same(h.log, [['x'], ['a', 'b'], ['c']])
  })

  t.test('an execute() that throws synchronously fails the batch the same way', async t => {
    const clock = new FakeSchedulerClock()
    const observer = new RecordingObserver()
    let calls = 0
    const instance: BackendInstance = {
      execute (requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
        calls++
        if (calls === 1) throw new Error('sync boom')
        return Promise.resolve(echo(requests))
      },
      async close () {}
    }
    const s = new Submitter(new DynamicBatcher({ modelName: 'm', version: 1, config: batching({}), instances: [instance], observer, clock }))
    void s.submit('a')
    await clock.to(0n)
    void s.submit('b')
    await clock.to(us(1))
    t.same(s.settled, ['a:sync boom', 'b'])
    t.same(observer.requests.map(r => r.reason), ['BACKEND', undefined])
  })

  t.test('a response {error} fails only its request', async t => {
    const h = setup(batching({}))
    await occupy(h)
    void h.s.submit('a')
    void h.s.submit('b')
    void h.s.submit('c')
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    h.i0.complete(requests => requests.map(r => tagOf(r) === 'b' ? { error: new Error('bad b') } : { outputs: [], parameters: { tag: tagOf(r) } }))
    await h.clock.to(us(3))
    t.same(h.s.settled, ['x', 'a', 'b', 'c'], 'every request is answered with its own response')
    t.same(h.s.responses.get('a'), { outputs: [], parameters: { tag: 'a' } })
    t.same(h.s.responses.get('c'), { outputs: [], parameters: { tag: 'c' } })
    const b = h.s.responses.get('b')
    t.ok(b !== undefined && 'error' in b && b.error.message === 'bad b')
    t.same(h.observer.requests.slice(1).map(r => [r.ok, r.reason]), [[true, undefined], [false, 'BACKEND'], [true, undefined]])
    t.same(h.observer.batches.map(b => b.size), [1, 3])
  })

  t.test('a wrong number of responses fails the batch with WRK_ERR_EXECUTION_FAILED', async t => {
    const h = setup(batching({}))
    await occupy(h)
    void h.s.submit('a')
    void h.s.submit('b')
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    h.i0.complete(requests => echo(requests).slice(1))
    await h.clock.to(us(3))
    t.same(h.s.settled, [
      'x',
      "a:model 'm' failed to execute: the backend returned 1 responses for a batch of 2 requests",
      "b:model 'm' failed to execute: the backend returned 1 responses for a batch of 2 requests"
    ])
  })
})

t.test('stop(): refuses new requests, sends what is queued without waiting for the delay, resolves when all are answered', async t => {
  const h = setup(batching({ preferred_batch_size: [4], max_queue_delay_microseconds: 10_000_000 }))
  void h.s.submit('a')
  void h.s.submit('b')
  await h.clock.to(0n)
  t.same(h.log, [], 'waiting for the delay')
  let stopped = false
  const stopping = h.scheduler.stop().then(() => { stopped = true })
  await h.clock.to(us(1))
  t.same(h.log, [['a', 'b']], 'flushed at once: nothing else can join')
  await h.s.submit('late')
  t.same(h.s.settled, ['late:Server not ready'])
  t.notOk(stopped, 'a and b are still executing')
  h.i0.complete()
  await stopping
  t.same(h.s.settled, ['late:Server not ready', 'a', 'b'])
  t.equal(h.clock.pendingTimers, 0)

  t.test('queued behind a busy instance: stop() waits for both batches', async t => {
    const h = setup(batching({}))
    await occupy(h)
    void h.s.submit('a')
    await h.clock.to(us(1))
    let stopped = false
    const stopping = h.scheduler.stop().then(() => { stopped = true })
    h.i0.complete()
    await h.clock.to(us(2))
    t.same(h.log, [['x'], ['a']])
    t.notOk(stopped)
    h.i0.complete()
    await stopping
    t.same(h.s.settled, ['x', 'a'])
  })

  t.test('stop() on an idle batcher resolves at once', async t => {
    const h = setup(batching({}))
    await h.scheduler.stop()
    t.pass()
  })
})

t.test('observer: queue time from the fake clock, execute() time, one batchDone per execution', async t => {
  const h = setup(batching({ preferred_batch_size: [5], max_queue_delay_microseconds: 10_000_000 }))
  void h.s.submit('a', { batch: 2 })
  await h.clock.to(us(100))
  void h.s.submit('b', { batch: 3 })
  await h.clock.to(us(100))
  t.same(h.log, [['a', 'b']], '2 + 3 = 5 goes when b arrives, at 100 µs')
  await h.clock.to(us(350))
  h.i0.complete()
  await h.clock.to(us(350))
  t.same(h.observer.batches, [{ size: 5, computeInputNs: 0n, computeInferNs: us(250), computeOutputNs: 0n }])
  t.same(h.observer.requests, [
    { ok: true, reason: undefined, batchSize: 2, totalNs: us(350), timing: { queueNs: us(100), computeInputNs: 0n, computeInferNs: us(250), computeOutputNs: 0n } },
    { ok: true, reason: undefined, batchSize: 3, totalNs: us(250), timing: { queueNs: 0n, computeInputNs: 0n, computeInferNs: us(250), computeOutputNs: 0n } }
  ])

  t.test('without an observer nothing breaks', async t => {
    const clock = new FakeSchedulerClock()
    const instance = new FakeInstance('i0', [])
    const s = new Submitter(new DynamicBatcher({ modelName: 'm', version: 1, config: batching({}), instances: [instance], clock }))
    void s.submit('a')
    await clock.to(0n)
    instance.complete()
    await clock.to(1n)
    t.same(s.settled, ['a'])
  })
})

t.test('a request keeps its own batch dimension and parameters through the batcher', async t => {
  const h = setup(batching({}))
  const r = request('a', { batch: 3, priority: 0 })
  const answer = h.scheduler.enqueue(r)
  await h.clock.to(0n)
  h.i0.complete(requests => {
    t.equal(requests[0], r, 'the backend gets the very request object')
    return echo(requests)
  })
  t.same(await answer, { outputs: [], parameters: { tag: 'a' } })
})

t.test('a queued request whose client goes away leaves the queue at once, CANCELED; a running one finishes', async t => {
  const config = batching({ default_queue_policy: queuePolicy({ max_queue_size: 2 }) })
  const h = setup(config)
  await occupy(h)
  const gone = new AbortController()
  void h.s.submit('a', { signal: gone.signal })
  void h.s.submit('b')
  await h.clock.to(us(1))
  t.equal(h.scheduler.queueDepth, 2)
  void h.s.submit('full')
  await h.clock.to(us(2))
  t.match(h.s.settled, ['full:Exceeds maximum queue size'], 'the queue is full with a and b')

  gone.abort()
  await h.clock.to(us(3))
  t.equal(h.scheduler.queueDepth, 1, 'a left the queue when its client went, not when an instance came for it')
  t.match(h.s.settled, ['full:Exceeds maximum queue size', /^a:Request was cancelled/])
  const error = h.s.errors.get('a')
  t.ok(isFlotillaError(error) && error.code === 'WRK_ERR_REQUEST_CANCELLED' && error.grpcStatus === 'CANCELLED' && error.statusCode === 400,
    "Triton's CANCELLED (HTTP 400)")
  const cancelled = h.observer.requests.at(-1)!
  t.same([cancelled.ok, cancelled.reason, cancelled.totalNs, cancelled.timing.queueNs, cancelled.timing.computeInferNs],
    [false, 'CANCELED', us(2), us(2), 0n], 'counted as a CANCELED failure, all of its time queue time')
  void h.s.submit('c')
  await h.clock.to(us(4))
  t.equal(h.scheduler.queueDepth, 2, 'its place is free for another')

  h.i0.complete()
  await h.clock.to(us(5))
  t.same(h.log, [['x'], ['b', 'c']], 'the next batch is formed without it')

  // Aborting after the request reached an instance changes nothing: it runs to its end and is answered.
  const late = new AbortController()
  void h.s.submit('d', { signal: late.signal })
  h.i0.complete()
  await h.clock.to(us(2000))
  t.same(h.log, [['x'], ['b', 'c'], ['d']])
  late.abort()
  h.i0.complete()
  await h.clock.to(us(2001))
  t.ok(h.s.responses.has('d'), 'd answered')

  // A client gone before the request could be queued: refused at once, counted, never queued.
  const before = new AbortController()
  before.abort()
  void h.s.submit('e', { signal: before.signal })
  await h.clock.to(us(2002))
  t.match(h.s.settled.at(-1), /^e:Request was cancelled/)
  t.same([h.observer.requests.at(-1)!.reason, h.scheduler.queueDepth], ['CANCELED', 0])
})

t.test('a stopping batcher does not wait for a request whose client went away', async t => {
  const h = setup(batching({}))
  await occupy(h)
  const gone = new AbortController()
  void h.s.submit('a', { signal: gone.signal })
  await h.clock.to(us(1))
  let stopped = false
  void h.scheduler.stop().then(() => { stopped = true })
  gone.abort()
  await h.clock.to(us(2))
  t.notOk(stopped, 'x still runs')
  h.i0.complete()
  await h.clock.to(us(3))
  t.ok(stopped, 'stop() resolved once x finished')
  t.same(h.log, [['x']], 'a never ran')
})
