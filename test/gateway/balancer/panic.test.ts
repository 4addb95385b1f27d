import t from 'tap'
import { DEFAULT_PANIC_THRESHOLD_PERCENT, panicThresholdProblem, usableOrAll } from '../../../gateway/balancer/panic.ts'
import { type Endpoint } from '../../../gateway/balancer/types.ts'
import { many } from './helpers.ts'

/** A predicate that says yes to the named endpoints. */
function only (...names: string[]): (e: Endpoint) => boolean {
  return (e) => names.includes(e.name)
}

t.test('at or above the threshold: the usable endpoints, in fleet order', async (t) => {
  const all = many(4)
  t.equal(DEFAULT_PANIC_THRESHOLD_PERCENT, 50)
  t.strictSame(usableOrAll(all, only('e3', 'e1')).map((e) => e.name), ['e1', 'e3'], '2 of 4 = 50 %: not below')
  t.strictSame(usableOrAll(all, only('e0', 'e1', 'e2')).map((e) => e.name), ['e0', 'e1', 'e2'])
  t.equal(usableOrAll(all, () => true).length, 4)
})

t.test('below the threshold: all of them (panic), as the same array', async (t) => {
  const all = many(4)
  t.equal(usableOrAll(all, only('e1')), all, '1 of 4 = 25 %')
  t.equal(usableOrAll(all, only()), all, 'none usable')
  const five = many(5)
  t.equal(usableOrAll(five, only('e0', 'e1')), five, '2 of 5 = 40 %')
  t.strictSame(usableOrAll(five, only('e0', 'e1', 'e2')).map((e) => e.name), ['e0', 'e1', 'e2'], '3 of 5 = 60 %')
})

t.test('the threshold is configurable; 0 turns panic off, 100 panics on any loss', async (t) => {
  const all = many(10)
  t.strictSame(usableOrAll(all, only(), 0), [], '0 %: no panic, nothing to route to')
  t.strictSame(usableOrAll(all, only('e9'), 0).map((e) => e.name), ['e9'])
  t.equal(usableOrAll(all, (e) => e.name !== 'e0', 100), all, '9 of 10 under 100 %')
  t.equal(usableOrAll(all, () => true, 100).length, 10)
  t.equal(usableOrAll(all, only('e0', 'e1', 'e2'), 30).length, 3, '30 % of 10 = 3: not below')
  t.equal(usableOrAll(all, only('e0', 'e1'), 30), all)
})

t.test('an empty fleet is an empty answer', async (t) => {
  t.strictSame(usableOrAll([], () => true), [])
  t.strictSame(usableOrAll([], () => false), [])
})

t.test('the same usable subset keeps its identity across calls; a change gives a new array', async (t) => {
  const all = many(6)
  const first = usableOrAll(all, only('e0', 'e2', 'e4', 'e5'))
  t.ok(Object.isFrozen(first), 'frozen: balancers key state on it and nobody may change it')
  t.equal(usableOrAll(all, only('e0', 'e2', 'e4', 'e5')), first)
  t.equal(usableOrAll(all, (e) => ['e0', 'e2', 'e4', 'e5'].includes(e.name)), first, 'another predicate, same answer')
  // Through a panic and back: all, then the unchanged subset again.
  t.equal(usableOrAll(all, only('e0')), all)
  const shrunk = usableOrAll(all, only('e0', 'e2', 'e4'))
  t.not(shrunk, first)
  t.strictSame(shrunk.map((e) => e.name), ['e0', 'e2', 'e4'])
  t.equal(usableOrAll(all, only('e0', 'e2', 'e4')), shrunk)
  const swapped = usableOrAll(all, only('e1', 'e2', 'e4'))
  t.strictSame(swapped.map((e) => e.name), ['e1', 'e2', 'e4'])
  const grown = usableOrAll(all, only('e1', 'e2', 'e4', 'e5'))
  t.strictSame(grown.map((e) => e.name), ['e1', 'e2', 'e4', 'e5'])
  t.equal(usableOrAll(all, only('e1', 'e2', 'e4', 'e5')), grown)
  // Another array with the same endpoints has its own cache entry.
  const copy = Object.freeze([...all])
  const fromCopy = usableOrAll(copy, only('e1', 'e2', 'e4', 'e5'))
  t.strictSame(fromCopy, grown)
  t.equal(usableOrAll(all, only('e1', 'e2', 'e4', 'e5')), grown)
})

t.test('isUsable is asked once per endpoint, in order', async (t) => {
  const all = many(5)
  const asked: string[] = []
  usableOrAll(all, (e) => { asked.push(e.name); return e.name !== 'e3' })
  t.strictSame(asked, ['e0', 'e1', 'e2', 'e3', 'e4'])
})

t.test('a threshold outside 0..100 is a coded error; the check is exported for the config loader', async (t) => {
  for (const bad of [-1, 101, Number.NaN]) {
    t.throws(() => usableOrAll(many(2), () => true, bad), {
      code: 'GW_ERR_FLEET_INVALID',
      message: `the panic threshold must be a percentage from 0 to 100 (0 turns panic off), got ${String(bad)}`
    })
  }
  t.equal(panicThresholdProblem(50), undefined)
  t.equal(panicThresholdProblem(0), undefined)
  t.equal(panicThresholdProblem(100), undefined)
  t.equal(panicThresholdProblem('50%'), 'the panic threshold must be a percentage from 0 to 100 (0 turns panic off), got string')
})
