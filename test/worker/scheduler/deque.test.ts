import t from 'tap'
import { Deque } from '../../../worker/scheduler/deque.ts'

t.test('FIFO across wrap-around and growth', async t => {
  const q = new Deque<number>(4)
  const out: number[] = []
  let next = 0
  // Interleave pushes and shifts so the head walks around the ring several times, then grow past the capacity.
  for (let round = 0; round < 10; round++) {
    for (let i = 0; i < 3; i++) q.push(next++)
    for (let i = 0; i < 2; i++) out.push(q.shift() as number)
  }
  t.equal(q.length, 10, 'grew from 4 with items in place')
  t.equal(q.peek(), 20)
  t.equal(q.at(0), 20)
  t.equal(q.at(9), 29)
  t.equal(q.at(10), undefined)
  t.equal(q.at(-1), undefined)
  while (q.length > 0) out.push(q.shift() as number)
  t.same(out, Array.from({ length: 30 }, (_, i) => i))
  t.equal(q.shift(), undefined)
  t.equal(q.peek(), undefined)
})

t.test('removeWhere keeps the order of the rest, across the wrap', async t => {
  const q = new Deque<number>(8)
  for (let i = 0; i < 6; i++) q.push(i)
  for (let i = 0; i < 5; i++) q.shift()
  for (let i = 6; i < 12; i++) q.push(i) // head near the end of the buffer: items wrap
  const removed: number[] = []
  q.removeWhere(n => {
    if (n % 3 === 0) {
      removed.push(n)
      return true
    }
    return false
  })
  t.same(removed, [6, 9])
  const rest: number[] = []
  for (let i = 0; i < q.length; i++) rest.push(q.at(i) as number)
  t.same(rest, [5, 7, 8, 10, 11])
  q.push(12)
  t.equal(q.at(5), 12, 'pushes after a removal land behind the kept items')
})
