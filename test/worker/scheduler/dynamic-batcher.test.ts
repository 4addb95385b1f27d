/**
 * Triton's batch-forming rule through the DynamicBatcher, as exact sequences: arrival times in (fake clock),
 * batches out (what each instance's execute() received). Rules from triton-behaviour.md §6.4 and qa L0_batcher.
 */
import t from 'tap'
import { type BackendInstance, type BackendRequest } from '../../../worker/backends/types.ts'
import { type ModelConfig } from '../../../worker/repository/types.ts'
import { DynamicBatcher } from '../../../worker/scheduler/dynamic-batcher.ts'
import { FakeInstance, FakeSchedulerClock, type ModelOptions, model, RecordingObserver, request, Submitter, us } from './fixtures/helpers.ts'

const SECONDS_10 = 10_000_000

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

t.test('preferred sizes [2, 6], delay 10 s (qa L0_batcher)', async t => {
  const config = batching({ preferred_batch_size: [2, 6], max_queue_delay_microseconds: SECONDS_10 })

  t.test('two requests reaching a preferred size go together at once', async t => {
    const h = setup(config)
    void h.s.submit('a')
    await h.clock.to(0n)
    t.same(h.log, [], 'a waits: 1 is not a preferred size')
    void h.s.submit('b')
    await h.clock.to(us(5))
    t.same(h.log, [['a', 'b']], 'a and b make 2, sent when b arrives')
  })

  t.test('a single request of a preferred size goes at once; 1 and 3 wait the whole delay; 7 (> max preferred) goes at once', async t => {
    const h = setup(config)
    void h.s.submit('two', { batch: 2 })
    await h.clock.to(0n)
    t.same(h.log, [['two']])
    h.i0.complete()

    await h.clock.to(us(10))
    void h.s.submit('three', { batch: 3 })
    await h.clock.to(us(20))
    t.same(h.log, [['two']], 'size 3 waits')
    await h.clock.to(us(10 + SECONDS_10) - 1n)
    t.same(h.log, [['two']], 'still waiting 1 ns before the delay is over')
    await h.clock.to(us(10 + SECONDS_10))
    t.same(h.log, [['two'], ['three']], 'sent exactly when the delay is over, with no other arrival')
    h.i0.complete()

    void h.s.submit('seven', { batch: 7 })
    await h.clock.to(us(20 + SECONDS_10))
    t.same(h.log, [['two'], ['three'], ['seven']])
  })

  t.test('the largest preferred size actually reached wins: [1,1,1,1,1,3] sends 2, then 1+1+1+3 = 6', async t => {
    const h = setup(config)
    void h.s.submit('x', { batch: 2 })
    await h.clock.to(0n)
    for (const [i, tag] of ['a', 'b', 'c', 'd', 'e'].entries()) {
      void h.s.submit(tag)
      await h.clock.to(us(i + 1))
    }
    void h.s.submit('f', { batch: 3 })
    await h.clock.to(us(10))
    t.same(h.log, [['x']], 'queued while the instance is busy')
    h.i0.complete()
    await h.clock.to(us(11))
    t.same(h.log, [['x'], ['a', 'b']], 'pending 8 would pass 6: the cut at the preferred size 2 goes')
    h.i0.complete()
    await h.clock.to(us(12))
    t.same(h.log, [['x'], ['a', 'b'], ['c', 'd', 'e', 'f']], '1+1+1+3 = 6, a preferred size')
  })
})

t.test('preferred sizes [4, 6], no delay: the largest reachable preferred size wins', async t => {
  const config = batching({ preferred_batch_size: [4, 6] })
  for (const [queued, expected] of [
    [7, [6, 1]],
    [5, [4, 1]],
    [4, [4]],
    [3, [3]]
  ] as const) {
    t.test(`${queued} queued -> ${expected.join(' then ')}`, async t => {
      const h = setup(config)
      void h.s.submit('x', { batch: 4 })
      await h.clock.to(0n)
      const tags = Array.from({ length: queued }, (_, i) => `r${i}`)
      for (const tag of tags) void h.s.submit(tag)
      await h.clock.to(us(1))
      t.same(h.log, [['x']])
      const sizes: number[] = []
      for (let i = 0; i < expected.length; i++) {
        h.i0.complete()
        await h.clock.to(us(2 + i))
        sizes.push((h.log[i + 1] ?? []).length)
      }
      t.same(sizes, expected)
      t.same(h.log.slice(1).flat(), tags, 'arrival order kept across batches')
    })
  }
})

t.test('overshoot: a request that would pass the largest preferred size sends the batch formed so far', async t => {
  // P = {4}, queue [3, 2]: 3 goes at once even though it is not a preferred size; the 2 then waits the delay.
  const h = setup(batching({ preferred_batch_size: [4], max_queue_delay_microseconds: 1000 }))
  void h.s.submit('x', { batch: 4 })
  await h.clock.to(us(10))
  void h.s.submit('a', { batch: 3 })
  await h.clock.to(us(20))
  void h.s.submit('b', { batch: 2 })
  await h.clock.to(us(100))
  h.i0.complete()
  await h.clock.to(us(100))
  t.same(h.log, [['x'], ['a']], 'only a: adding b would make 5 > 4')
  await h.clock.to(us(200))
  h.i0.complete()
  await h.clock.to(us(200))
  t.same(h.log, [['x'], ['a']], 'b alone (2) waits for its delay')
  await h.clock.to(us(1020) - 1n)
  t.same(h.log, [['x'], ['a']])
  await h.clock.to(us(1020))
  t.same(h.log, [['x'], ['a'], ['b']], 'b goes when it has waited 1000 µs (it arrived at 20 µs)')
})

t.test('when the delay is over the largest compatible batch goes, not the preferred cut', async t => {
  const config = batching({ preferred_batch_size: [2, 6], max_queue_delay_microseconds: 1000 })
  /** x (size 2) executes from 0; a, b, c, d, e arrive at 10, 20, 30, 40, 50 µs. */
  const queueFive = async (h: ReturnType<typeof setup>): Promise<void> => {
    void h.s.submit('x', { batch: 2 })
    for (const [i, tag] of ['a', 'b', 'c', 'd', 'e'].entries()) {
      await h.clock.to(us(10 * (i + 1)))
      void h.s.submit(tag)
    }
    await h.clock.to(us(50))
  }

  t.test('instance free before the delay: preferred cuts go, the remainder waits its delay', async t => {
    const h = setup(config)
    await queueFive(h)
    await h.clock.to(us(500))
    h.i0.complete()
    await h.clock.to(us(500))
    t.same(h.log, [['x'], ['a', 'b']], '5 queued, not expired: the cut at 2')
    await h.clock.to(us(600))
    h.i0.complete()
    await h.clock.to(us(600))
    t.same(h.log, [['x'], ['a', 'b'], ['c', 'd']], '3 queued: the cut at 2 again')
    await h.clock.to(us(700))
    h.i0.complete()
    await h.clock.to(us(1050) - 1n)
    t.same(h.log.length, 3, 'e alone waits')
    await h.clock.to(us(1050))
    t.same(h.log, [['x'], ['a', 'b'], ['c', 'd'], ['e']], 'e goes when it has waited 1000 µs')
  })

  t.test('instance free after the delay: all five go', async t => {
    const h = setup(config)
    await queueFive(h)
    await h.clock.to(us(2000))
    t.same(h.log, [['x']], 'nothing forms while the instance is busy')
    h.i0.complete()
    await h.clock.to(us(2000))
    t.same(h.log, [['x'], ['a', 'b', 'c', 'd', 'e']])
  })
})

t.test('max_batch_size caps a batch; with no preferred sizes max_batch_size is the target', async t => {
  t.test('6 queued, max 4, no delay -> 4 then 2', async t => {
    const h = setup(batching({}, { maxBatchSize: 4 }))
    void h.s.submit('x')
    await h.clock.to(0n)
    t.same(h.log, [['x']], 'no delay: a lone request goes at once')
    for (const tag of ['a', 'b', 'c', 'd', 'e', 'f']) void h.s.submit(tag)
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    h.i0.complete()
    await h.clock.to(us(3))
    t.same(h.log, [['x'], ['a', 'b', 'c', 'd'], ['e', 'f']])
  })

  t.test('a request that would pass max_batch_size is left for the next batch', async t => {
    const h = setup(batching({ preferred_batch_size: [2] }, { maxBatchSize: 4 }))
    void h.s.submit('x', { batch: 2 })
    await h.clock.to(0n)
    void h.s.submit('a', { batch: 3 })
    void h.s.submit('b', { batch: 2 })
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    t.same(h.log, [['x'], ['a']], '3 + 2 > 4')
  })

  t.test('no preferred sizes, a delay: a batch goes when it reaches max_batch_size, else when the delay is over', async t => {
    const h = setup(batching({ max_queue_delay_microseconds: 1000 }, { maxBatchSize: 4 }))
    for (const [i, tag] of ['a', 'b', 'c'].entries()) {
      void h.s.submit(tag)
      await h.clock.to(us(i))
    }
    t.same(h.log, [], '3 of 4: waiting')
    void h.s.submit('d')
    await h.clock.to(us(3))
    t.same(h.log, [['a', 'b', 'c', 'd']], 'the fourth makes max_batch_size: sent at once')
    h.i0.complete()
    void h.s.submit('e')
    await h.clock.to(us(10))
    t.same(h.log.length, 1)
    await h.clock.to(us(1010))
    t.same(h.log, [['a', 'b', 'c', 'd'], ['e']], 'alone, after the delay')
  })

  t.test('max_batch_size 0 with dynamic_batching: requests execute one by one', async t => {
    const h = setup(batching({}, { maxBatchSize: 0 }))
    void h.s.submit('x', { batch: 0 })
    await h.clock.to(0n)
    for (const tag of ['a', 'b']) void h.s.submit(tag, { batch: 0 })
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    h.i0.complete()
    await h.clock.to(us(3))
    t.same(h.log, [['x'], ['a'], ['b']])
  })
})

t.test('requests that arrive in the same turn are looked at together', async t => {
  const h = setup(batching({}))
  for (const tag of ['a', 'b', 'c']) void h.s.submit(tag)
  await h.clock.to(0n)
  t.same(h.log, [['a', 'b', 'c']])
})

t.test('shapes: requests batch together only when their non-batch shapes match', async t => {
  const variable = { dims: [-1] }
  const config = batching({ preferred_batch_size: [4], max_queue_delay_microseconds: SECONDS_10 }, variable)

  t.test('queued [3], [3], [5]: the first two go, the third starts the next batch', async t => {
    const h = setup(config)
    void h.s.submit('x', { batch: 4, dims: [3] })
    await h.clock.to(0n)
    void h.s.submit('a', { dims: [3] })
    void h.s.submit('b', { dims: [3] })
    void h.s.submit('c', { dims: [5] })
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    t.same(h.log, [['x'], ['a', 'b']], 'c differs: a and b are sent now, without waiting')
    h.i0.complete()
    await h.clock.to(us(3))
    t.same(h.log, [['x'], ['a', 'b']], 'c waits its delay')
    await h.clock.to(us(1 + SECONDS_10))
    t.same(h.log, [['x'], ['a', 'b'], ['c']])
  })

  t.test('idle instance: a request of another shape sends the waiting one at once', async t => {
    const h = setup(config)
    void h.s.submit('a', { dims: [3] })
    await h.clock.to(0n)
    t.same(h.log, [])
    void h.s.submit('b', { dims: [5] })
    await h.clock.to(us(10))
    t.same(h.log, [['a']])
  })

  t.test('allow_ragged_batch: different shapes batch together', async t => {
    const h = setup(batching({ preferred_batch_size: [4], max_queue_delay_microseconds: SECONDS_10 }, { ...variable, ragged: true }))
    void h.s.submit('x', { batch: 4, dims: [3] })
    await h.clock.to(0n)
    void h.s.submit('a', { dims: [3] })
    void h.s.submit('b', { dims: [3] })
    void h.s.submit('c', { dims: [5] })
    void h.s.submit('d', { dims: [7] })
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    t.same(h.log, [['x'], ['a', 'b', 'c', 'd']])
  })

  t.test('fixed dims never block batching', async t => {
    const h = setup(batching({ preferred_batch_size: [3] }))
    void h.s.submit('x', { batch: 3 })
    await h.clock.to(0n)
    for (const tag of ['a', 'b', 'c']) void h.s.submit(tag)
    await h.clock.to(us(1))
    h.i0.complete()
    await h.clock.to(us(2))
    t.same(h.log, [['x'], ['a', 'b', 'c']])
  })
})

t.test('a batch forms only when an instance is idle; the first to free up takes what accumulated', async t => {
  const h = setup(batching({}), 2)
  const [i0, i1] = h.instances as [FakeInstance, FakeInstance]
  void h.s.submit('a')
  await h.clock.to(0n)
  void h.s.submit('b')
  await h.clock.to(us(1))
  t.same(h.log, [['a'], ['b']], 'one instance each')
  t.ok(i0.busy && i1.busy)
  for (const tag of ['c', 'd', 'e']) {
    void h.s.submit(tag)
    await h.clock.to(us(2))
  }
  t.same(h.log.length, 2, 'both busy: c, d, e accumulate')
  t.equal(h.scheduler.queueDepth, 3)
  t.equal(h.scheduler.executing, 2)
  i0.complete()
  await h.clock.to(us(3))
  t.same(h.log, [['a'], ['b'], ['c', 'd', 'e']])
  t.equal(h.scheduler.queueDepth, 0)
  t.equal(h.scheduler.executing, 4)
  t.same(h.s.settled, ['b'], 'b (on i0) answered')
})

t.test('an instance that takes merged batches gets one request with the inputs concatenated, and each request its own view of the output', async t => {
  const { identityBackend } = await import('../../../worker/backends/identity-backend.ts')
  const { silentLogger } = await import('../../../common/logger.ts')
  const config = batching({ max_queue_delay_microseconds: SECONDS_10 }, { maxBatchSize: 8 })
  const loaded = await identityBackend.loadModel({ modelName: 'm', version: 1, modelDir: '.', versionDir: '.', config, logger: silentLogger(), random: Math.random })
  const identity = await loaded.createInstance({ name: 'm_0', kind: 'KIND_CPU', deviceId: -1 })
  const seen: BackendRequest[][] = []
  const instance: BackendInstance = {
    mergedBatches: true,
    execute: (requests) => { seen.push([...requests]); return identity.execute(requests) },
    close: async () => {}
  }
  const clock = new FakeSchedulerClock()
  const observer = new RecordingObserver()
  const scheduler = new DynamicBatcher({ modelName: 'm', version: 1, config, instances: [instance], observer, clock })
  const filled = (tag: string, batch: number, first: number): BackendRequest => {
    const r = request(tag, { batch })
    const data = r.inputs.get('INPUT0')!.data as Float32Array
    for (let i = 0; i < data.length; i++) data[i] = first + i
    return r
  }
  // 1 + 3 + 4 = 8: the preferred size (max_batch_size) is reached, so the batch goes at once.
  const answers = Promise.all([filled('a', 1, 0), filled('b', 3, 100), filled('c', 4, 200)].map((r) => scheduler.enqueue(r)))
  await clock.to(us(1))
  const responses = await answers

  t.equal(seen.length, 1, 'one execution')
  t.equal(seen[0]!.length, 1, 'of one merged request')
  const merged = seen[0]![0]!
  t.equal(merged.batchSize, 8)
  t.strictSame(merged.inputs.get('INPUT0')!.shape, [8, 4], 'inputs concatenated along the batch dimension')
  const outputs = responses.map((r) => ('outputs' in r ? r.outputs[0]! : undefined))
  t.strictSame(outputs.map((o) => o?.shape), [[1, 4], [3, 4], [4, 4]], 'each request gets its own part')
  t.strictSame(Array.from(outputs[1]!.data as Float32Array).slice(0, 3), [100, 101, 102], 'with its own values')
  t.equal((outputs[1]!.data as Float32Array).buffer, (outputs[2]!.data as Float32Array).buffer, 'parts are views of one output: no copy')
  t.strictSame(observer.batches.map((b) => b.size), [8])
  t.strictSame(observer.requests.map((r) => r.ok), [true, true, true])
})

t.test('merged batches are not used for a batch whose requests give different inputs, nor for one request', async t => {
  const config = batching({}, { maxBatchSize: 2 })
  const seen: number[] = []
  const instance: BackendInstance = {
    mergedBatches: true,
    execute: async (requests) => { seen.push(requests.length); return requests.map(() => ({ outputs: [] })) },
    close: async () => {}
  }
  const own = new DynamicBatcher({ modelName: 'm', version: 1, config, instances: [instance], clock: new FakeSchedulerClock() })
  const lone = request('x')
  await own.enqueue(lone)
  const a = request('a')
  const b = request('b')
  const extra = b.inputs as Map<string, unknown>
  extra.set('EXTRA', { name: 'EXTRA', datatype: 'FP32', shape: [1, 1], data: new Float32Array(1) })
  await Promise.all([own.enqueue(a), own.enqueue(b)])
  t.strictSame(seen, [1, 2], 'one request as is; two with different inputs as a list')
})
