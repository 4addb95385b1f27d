import t from 'tap'
import { Coalescer } from '../../../gateway/cache/coalescer.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'

t.test('followers get the leader\'s answer; the next request after it leads again', async (t) => {
  const clock = new FakeClock()
  const c = new Coalescer<string>(clock, 1000)
  const leader = c.join('k')
  t.equal(leader.role, 'leader')
  const a = c.join('k')
  const b = c.join('k')
  t.equal(c.waiting, 2)
  if (leader.role !== 'leader' || a.role !== 'follower' || b.role !== 'follower') throw new Error('roles')
  leader.settle('answer')
  t.same(await a.outcome, { kind: 'answer', value: 'answer' })
  t.same(await b.outcome, { kind: 'answer', value: 'answer' })
  t.equal(c.waiting, 0)
  t.equal(c.join('k').role, 'leader', 'a settled flight is gone')
  t.equal(c.join('other').role, 'leader', 'another key has its own flight')
})

t.test('a failing leader sends its followers on their own; a slow one times them out; a client that leaves stops waiting', async (t) => {
  const clock = new FakeClock()
  const c = new Coalescer<string>(clock, 1000)
  const leader = c.join('k')
  const follower = c.join('k')
  if (leader.role !== 'leader' || follower.role !== 'follower') throw new Error('roles')
  leader.settle(undefined)
  t.same(await follower.outcome, { kind: 'alone', why: 'leader_failed' })

  const slow = c.join('s')
  const waiting = c.join('s')
  if (waiting.role !== 'follower' || slow.role !== 'leader') throw new Error('roles')
  await clock.advance(999)
  let settled = false
  void waiting.outcome.then(() => { settled = true })
  await clock.advance(0)
  t.notOk(settled)
  await clock.advance(1)
  t.same(await waiting.outcome, { kind: 'alone', why: 'timeout' })
  slow.settle('late')

  const controller = new AbortController()
  const lead = c.join('a')
  const gone = c.join('a', controller.signal)
  if (gone.role !== 'follower' || lead.role !== 'leader') throw new Error('roles')
  controller.abort()
  t.same(await gone.outcome, { kind: 'alone', why: 'aborted' })
  t.equal(c.waiting, 0, 'nothing left waiting, no timer left behind')
  lead.settle('x')
  t.equal(clock.pending, 0)
})

t.test('a leader that left tells its followers to join again', async (t) => {
  const c = new Coalescer<string>(new FakeClock(), 1000)
  const leader = c.join('k')
  const follower = c.join('k')
  if (leader.role !== 'leader' || follower.role !== 'follower') throw new Error('roles')
  leader.settle(undefined, true)
  t.same(await follower.outcome, { kind: 'rejoin' })
  t.equal(c.join('k').role, 'leader', 'the next to join leads a new flight')
})
