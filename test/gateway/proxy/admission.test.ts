import t from 'tap'
import { Fleet } from '../../../gateway/fleet/fleet.ts'
import { Admission, hasRoom } from '../../../gateway/proxy/admission.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'

function limited (limit: number, ...names: string[]): ReturnType<Fleet['endpointsServing']> {
  return new Fleet(names.map((name, i) => ({ name, host: '127.0.0.1', port: 9200 + i, models: ['m'], weight: 1, labels: {}, max_in_flight: limit })))
    .endpointsServing('m')
}

t.test('hasRoom: under the limit, or no limit at all', async (t) => {
  const [a] = limited(2, 'a')
  const [u] = limited(0, 'u')
  t.ok(hasRoom(a!))
  a!.inFlight = 2
  t.notOk(hasRoom(a!))
  u!.inFlight = 1e6
  t.ok(hasRoom(u!), 'max_in_flight 0 is no limit')
})

t.test('waiters are served first come first served, each by a server it may use', async (t) => {
  const clock = new FakeClock()
  const admission = new Admission({ maxQueued: 10, queueTimeoutMs: 1000 }, clock)
  const [a, b] = limited(1, 'a', 'b')
  admission.acquire(a!)
  admission.acquire(b!)
  const order: string[] = []
  const onlyA = admission.wait([a!], undefined, 5000).then((r) => { order.push(`onlyA ${r.outcome} ${'endpoint' in r ? r.endpoint.name : ''}`) })
  const notB = admission.wait([a!, b!], new Set([a!]), 5000).then((r) => { order.push(`notA ${r.outcome} ${'endpoint' in r ? r.endpoint.name : ''}`) })
  const any = admission.wait([a!, b!], undefined, 5000).then((r) => { order.push(`any ${r.outcome} ${'endpoint' in r ? r.endpoint.name : ''}`) })
  t.equal(admission.waiting, 3)
  admission.release(b!)
  await clock.advance(0)
  t.strictSame(order, ['notA admitted b'], 'b goes to the first waiter that may use b, skipping one that may not')
  t.equal(b!.inFlight, 1, 'the slot moved without dropping below the limit')
  admission.release(a!)
  await clock.advance(0)
  admission.release(a!)
  await clock.advance(0)
  await Promise.all([onlyA, notB, any])
  t.strictSame(order, ['notA admitted b', 'onlyA admitted a', 'any admitted a'])
  t.equal(admission.waiting, 0)
})

t.test('timeouts, the request deadline, a full queue, and a client that leaves', async (t) => {
  const clock = new FakeClock()
  const admission = new Admission({ maxQueued: 2, queueTimeoutMs: 300 }, clock)
  const [a] = limited(1, 'a')
  admission.acquire(a!)
  const byQueueTimeout = admission.wait([a!], undefined, 10_000)
  const byDeadline = admission.wait([a!], undefined, 100)
  t.strictSame(await admission.wait([a!], undefined, 10_000), { outcome: 'full' })
  await clock.advance(100)
  t.strictSame(await byDeadline, { outcome: 'timeout' }, 'the shorter of the queue timeout and what is left of the deadline')
  await clock.advance(200)
  t.strictSame(await byQueueTimeout, { outcome: 'timeout' })
  t.equal(admission.waiting, 0)
  t.equal(clock.pending, 0, 'no timer left behind')

  const controller = new AbortController()
  const leaving = admission.wait([a!], undefined, 10_000, controller.signal)
  controller.abort()
  t.strictSame(await leaving, { outcome: 'aborted' })
  t.equal(admission.waiting, 0)
  t.strictSame(await admission.wait([a!], undefined, 10_000, controller.signal), { outcome: 'aborted' }, 'already gone')
  admission.release(a!)
  t.equal(a!.inFlight, 0, 'nobody waiting: the slot is simply free')
})

t.test('a slot freed on an endpoint that is no longer active is not handed to a waiter', async (t) => {
  const clock = new FakeClock()
  const admission = new Admission({ maxQueued: 10, queueTimeoutMs: 1000 }, clock)
  const [a, b] = limited(1, 'a', 'b')
  admission.acquire(a!)
  admission.acquire(b!)
  let result: string | undefined
  void admission.wait([a!, b!], undefined, 5000).then((r) => { result = `${r.outcome} ${'endpoint' in r ? r.endpoint.name : ''}` })
  a!.state = 'draining'
  admission.release(a!)
  await clock.advance(0)
  t.equal(result, undefined, 'a is draining: its freed slot goes to nobody')
  t.equal(a!.inFlight, 0, 'the slot is simply free')
  t.equal(admission.waiting, 1, 'the request keeps waiting')
  admission.release(b!)
  await clock.advance(0)
  t.equal(result, 'admitted b', 'it takes the first slot on an active endpoint')
  t.equal(b!.inFlight, 1)

  admission.acquire(a!)
  a!.state = 'drained'
  let second: string | undefined
  void admission.wait([a!], undefined, 500).then((r) => { second = r.outcome })
  admission.release(a!)
  await clock.advance(0)
  t.equal(second, undefined, 'nor a drained one')
  await clock.advance(500)
  t.equal(second, 'timeout')
  t.equal(a!.inFlight, 0)
})
