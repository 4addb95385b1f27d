/** The scheduler without dynamic_batching, and createScheduler's choice between the two. */
import t from 'tap'
import { type BackendInstance } from '../../../worker/backends/types.ts'
import { createScheduler } from '../../../worker/scheduler/create-scheduler.ts'
import { DefaultScheduler } from '../../../worker/scheduler/default-scheduler.ts'
import { DynamicBatcher } from '../../../worker/scheduler/dynamic-batcher.ts'
import { FakeInstance, FakeSchedulerClock, model, queuePolicy, RecordingObserver, Submitter, us } from './fixtures/helpers.ts'

function setup (instanceCount = 1) {
  const clock = new FakeSchedulerClock()
  const observer = new RecordingObserver()
  const log: string[][] = []
  const instances = Array.from({ length: instanceCount }, (_, i) => new FakeInstance(`i${i}`, log))
  const scheduler = new DefaultScheduler({ modelName: 'm', version: 1, config: model(), instances, observer, clock })
  return { clock, observer, log, instances, scheduler, s: new Submitter(scheduler) }
}

t.test('one request at a time per instance, in arrival order; priority and timeout are ignored', async t => {
  const h = setup()
  const [i0] = h.instances as [FakeInstance]
  void h.s.submit('a')
  void h.s.submit('b', { priority: 1, timeout: 1 })
  void h.s.submit('c', { priority: 1 })
  await h.clock.to(us(1))
  t.same(h.log, [['a']], 'never batched')
  t.equal(h.scheduler.queueDepth, 2)
  t.equal(h.scheduler.executing, 1)
  await h.clock.to(us(10_000))
  t.same(h.s.settled, [], 'b did not time out: no queue policy applies')
  i0.complete()
  await h.clock.to(us(10_001))
  i0.complete()
  await h.clock.to(us(10_002))
  t.same(h.log, [['a'], ['b'], ['c']])
  t.same(h.s.settled, ['a', 'b'])
})

t.test('several instances: each takes the next request when it frees up', async t => {
  const h = setup(2)
  const [i0, i1] = h.instances as [FakeInstance, FakeInstance]
  for (const tag of ['a', 'b', 'c']) void h.s.submit(tag)
  await h.clock.to(0n)
  t.same(h.log, [['a'], ['b']])
  i1.complete() // i1 took a (the idle list is a stack)
  await h.clock.to(us(1))
  t.same(h.log, [['a'], ['b'], ['c']])
  i0.complete()
  i1.complete()
  await h.clock.to(us(2))
  t.same(h.s.settled, ['a', 'b', 'c'])
})

t.test('observer: queue time, execute() time, one batch per request', async t => {
  const h = setup()
  const [i0] = h.instances as [FakeInstance]
  void h.s.submit('a', { batch: 3 })
  void h.s.submit('b')
  await h.clock.to(us(100))
  i0.complete()
  await h.clock.to(us(300))
  i0.complete()
  await h.clock.to(us(300))
  t.same(h.observer.batches, [
    { size: 3, computeInputNs: 0n, computeInferNs: us(100), computeOutputNs: 0n },
    { size: 1, computeInputNs: 0n, computeInferNs: us(200), computeOutputNs: 0n }
  ])
  t.same(h.observer.requests, [
    { ok: true, reason: undefined, batchSize: 3, totalNs: us(100), timing: { queueNs: 0n, computeInputNs: 0n, computeInferNs: us(100), computeOutputNs: 0n } },
    { ok: true, reason: undefined, batchSize: 1, totalNs: us(300), timing: { queueNs: us(100), computeInputNs: 0n, computeInferNs: us(200), computeOutputNs: 0n } }
  ])
})

t.test('failures: a rejection, a synchronous throw, an {error} response, a missing response', async t => {
  const h = setup()
  const [i0] = h.instances as [FakeInstance]
  void h.s.submit('a')
  void h.s.submit('b')
  void h.s.submit('c')
  await h.clock.to(0n)
  i0.fail(new Error('boom'))
  await h.clock.to(us(1))
  i0.complete(() => [{ error: new Error('bad') }])
  await h.clock.to(us(2))
  i0.complete(() => [])
  await h.clock.to(us(3))
  t.same(h.s.settled, ['a:boom', 'b', "c:model 'm' failed to execute: the backend returned 0 responses for a batch of 1 request"])
  const b = h.s.responses.get('b')
  t.ok(b !== undefined && 'error' in b, 'an {error} response is handed back as it is')
  t.same(h.observer.requests.map(r => [r.ok, r.reason]), [[false, 'BACKEND'], [false, 'BACKEND'], [false, 'BACKEND']])

  const clock = new FakeSchedulerClock()
  const throwing: BackendInstance = {
    execute () { throw new Error('sync boom') },
    async close () {}
  }
  const s = new Submitter(new DefaultScheduler({ modelName: 'm', version: 1, config: model(), instances: [throwing], clock }))
  await s.submit('d')
  await s.submit('e')
  t.same(s.settled, ['d:sync boom', 'e:sync boom'], 'the instance stays usable')
})

t.test('stop(): refuses new requests and waits for queued and executing ones', async t => {
  const h = setup()
  const [i0] = h.instances as [FakeInstance]
  void h.s.submit('a')
  void h.s.submit('b')
  await h.clock.to(0n)
  let stopped = false
  const stopping = h.scheduler.stop().then(() => { stopped = true })
  await h.s.submit('late')
  i0.complete()
  await h.clock.to(us(1))
  t.notOk(stopped, 'b still to run')
  i0.complete()
  await stopping
  t.same(h.s.settled, ['late:Server not ready', 'a', 'b'])
  await h.scheduler.stop()
})

t.test('with no clock and no observer given, it runs on the real clock', async t => {
  const log: string[][] = []
  const instance = new FakeInstance('i0', log)
  const s = new Submitter(new DefaultScheduler({ modelName: 'm', version: 1, config: model(), instances: [instance] }))
  const done = s.submit('a')
  t.same(log, [['a']])
  instance.complete()
  await done
  t.same(s.settled, ['a'])
})

t.test('createScheduler: the dynamic batcher with dynamic_batching, else the default scheduler', async t => {
  const instances = [new FakeInstance('i0', [])]
  t.ok(createScheduler({ modelName: 'm', version: 1, config: model(), instances }) instanceof DefaultScheduler)
  const batcher = createScheduler({
    modelName: 'm',
    version: 1,
    config: model({ batching: { default_queue_policy: queuePolicy({ max_queue_size: 1 }) } }),
    instances
  })
  t.ok(batcher instanceof DynamicBatcher)
})

t.test("a queued request whose client goes away leaves the queue, CANCELED; a running one finishes", async t => {
  const h = setup()
  const [i0] = h.instances as [FakeInstance]
  const first = new AbortController()
  const second = new AbortController()
  void h.s.submit('a', { signal: first.signal })
  void h.s.submit('b', { signal: second.signal })
  void h.s.submit('c')
  await h.clock.to(us(1))
  t.same(h.log, [['a']])
  first.abort()
  second.abort()
  await h.clock.to(us(3))
  t.equal(h.scheduler.queueDepth, 1, 'b left the queue; a, already running, did not stop')
  t.match(h.s.settled, [/^b:Request was cancelled/])
  t.same(h.observer.requests.map((r) => [r.ok, r.reason, r.timing.queueNs]), [[false, 'CANCELED', us(1)]])
  i0.complete()
  await h.clock.to(us(4))
  t.same(h.log, [['a'], ['c']], 'c runs next; b never does')
  t.same(h.s.settled, ['b:Request was cancelled: its client went away while it was queued', 'a'])

  const before = new AbortController()
  before.abort()
  void h.s.submit('d', { signal: before.signal })
  await h.clock.to(us(5))
  t.match(h.s.settled.at(-1), /^d:Request was cancelled/, 'a client gone before enqueue: refused at once')
  i0.complete()
  let stopped = false
  const late = new AbortController()
  void h.s.submit('e', { signal: late.signal })
  void h.s.submit('f', { signal: late.signal })
  await h.clock.to(us(6))
  void h.scheduler.stop().then(() => { stopped = true })
  late.abort()
  i0.complete()
  await h.clock.to(us(7))
  t.ok(stopped, 'stop() does not wait for f, whose client went')
  t.same(h.log, [['a'], ['c'], ['e']])
})
