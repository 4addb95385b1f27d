import t from 'tap'
import { REAL_CLOCK } from '../../../worker/scheduler/clock.ts'

t.test('REAL_CLOCK: monotonic bigint nanoseconds; timers fire and can be cancelled', async t => {
  const a = REAL_CLOCK.now()
  const b = REAL_CLOCK.now()
  t.equal(typeof a, 'bigint')
  t.ok(b >= a)
  const fired: string[] = []
  const cancelled = REAL_CLOCK.setTimeout(() => { fired.push('cancelled') }, 1n)
  REAL_CLOCK.clearTimeout(cancelled)
  const cancelledTimer = REAL_CLOCK.setTimeout(() => { fired.push('cancelled timer') }, 2_000_000n)
  REAL_CLOCK.clearTimeout(cancelledTimer)
  await new Promise<void>(resolve => { REAL_CLOCK.setTimeout(() => { fired.push('fired'); resolve() }, 1000n) })
  await new Promise<void>(resolve => { REAL_CLOCK.setTimeout(() => { fired.push('timer fired'); resolve() }, 2_000_000n) })
  await new Promise(resolve => setTimeout(resolve, 5))
  t.same(fired, ['fired', 'timer fired'])
})

t.test('REAL_CLOCK: a sub-millisecond wait never fires early (how much sooner than a timer tick it fires is bench/batching\'s business)', async t => {
  const waits: bigint[] = []
  for (let i = 0; i < 9; i++) {
    const start = REAL_CLOCK.now()
    const firedAt = await new Promise<bigint>(resolve => { REAL_CLOCK.setTimeout(() => resolve(REAL_CLOCK.now()), 200_000n) })
    waits.push(firedAt - start)
  }
  waits.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
  t.ok(waits[0]! >= 200_000n, `never before its time (shortest ${waits[0]} ns)`)
})
