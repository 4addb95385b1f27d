import t from 'tap'
import { BytesData, BytesDataBuilder } from '../../../common/protocol/bytes-data.ts'
import { bytesElements } from '../../../common/protocol/raw-layout.ts'

const text = new TextDecoder()
const strings = (data: BytesData): string[] => data.toArray().map((e) => text.decode(e))

const noErrors = {
  tooMany: () => new Error('tooMany'),
  incompleteData: () => new Error('incompleteData'),
  incompleteLength: () => new Error('incompleteLength'),
  tooFew: () => new Error('tooFew')
}

t.test('from: byte strings and text, read back element by element', async (t) => {
  const data = BytesData.from(['ab', new Uint8Array([1, 2, 3]), '', 'é😀'])
  t.equal(data.length, 4)
  t.same([...data.get(1)], [1, 2, 3])
  t.equal(data.get(2).length, 0)
  t.equal(text.decode(data.get(3)), 'é😀')
  t.equal(data.elementLength(3), 6, 'é is 2 bytes of UTF-8, 😀 4')
  t.equal(data.byteLength, 4 * 4 + 2 + 3 + 0 + 6, "Triton's size: a 4-byte length and the bytes, per element")
  t.same([...data].map((e) => e.length), [2, 3, 0, 6], 'iterates the elements')
  t.equal(data.get(0).constructor, Uint8Array, 'elements are plain Uint8Arrays, not Buffers')
  t.throws(() => data.get(4), RangeError)
  t.throws(() => data.get(-1), RangeError)
})

t.test('empty: count empty elements', async (t) => {
  const data = BytesData.empty(3)
  t.equal(data.length, 3)
  t.same(strings(data), ['', '', ''])
  t.equal(data.byteLength, 12)
  t.equal(BytesData.empty(0).byteLength, 0)
})

t.test('subarray shares memory; slice packs a copy of its own', async (t) => {
  const data = BytesData.from(['zero', 'one', 'two', 'three'])
  const view = data.subarray(1, 3)
  t.same(strings(view), ['one', 'two'])
  t.equal(view.get(0).buffer, data.get(0).buffer)
  t.equal(view.byteLength, 4 + 3 + 4 + 3)
  t.same(strings(data.subarray(2)), ['two', 'three'], 'end defaults to the length')

  const copy = data.slice(1, 3)
  t.not(copy.get(0).buffer, data.get(0).buffer)
  data.get(1)[0] = 0x4f // 'O'
  t.same(strings(view), ['One', 'two'], 'a view sees the change')
  t.same(strings(copy), ['one', 'two'], 'a copy does not')
  t.same(strings(data.slice()), ['zero', 'One', 'two', 'three'])
})

t.test('concat packs every part in order', async (t) => {
  const a = BytesData.from(['a', 'bb'])
  const b = BytesData.from([])
  const c = BytesData.from(['ccc']).subarray(0, 1)
  const all = BytesData.concat([a, b, c])
  t.same(strings(all), ['a', 'bb', 'ccc'])
  t.equal(all.byteLength, a.byteLength + c.byteLength)
})

t.test("writeRaw writes Triton's layout, which bytesElements reads back as views", async (t) => {
  const data = BytesData.from(['hi', '', 'x'.repeat(40), 'é'])
  const raw = new Uint8Array(data.byteLength + 3)
  const end = data.writeRaw(raw, 3)
  t.equal(end, raw.length)
  t.same([...raw.subarray(3, 9)], [2, 0, 0, 0, 0x68, 0x69])
  const back = bytesElements(raw.subarray(3), 4, noErrors)
  t.same(strings(back), ['hi', '', 'x'.repeat(40), 'é'])
  t.equal(back.get(0).buffer, raw.buffer, 'no copy')
})

t.test('the constructor takes a start and an end per element', async (t) => {
  t.throws(() => new BytesData(new Uint8Array(4), new Uint32Array(3)), RangeError)
  const data = new BytesData(Buffer.from('abcdef'), new Uint32Array([4, 6, 0, 2]))
  t.same(strings(data), ['ef', 'ab'], 'spans may point anywhere in the buffer')
})

t.test('builder: views of one buffer stay views', async (t) => {
  const body = Buffer.from('xx"alpha","beta"')
  const sub = body.subarray(2)
  const b = new BytesDataBuilder(2)
  t.equal(b.pushView(sub, 1, 6), 5)
  t.equal(b.pushView(sub, 9, 13), 4)
  const data = b.finish()
  t.same(strings(data), ['alpha', 'beta'])
  t.equal(data.get(0).buffer, body.buffer, 'no copy')
  t.equal(data.get(1).byteOffset, body.byteOffset + 2 + 9)
})

t.test('builder: the first copied element moves the views before it into the buffer', async (t) => {
  const body = Buffer.from('one two')
  const b = new BytesDataBuilder(4)
  b.pushView(body, 0, 3)
  b.pushString('ünï')
  b.pushView(body, 4, 7) // after a copy: copied too
  b.pushView(Buffer.from('other'), 0, 5)
  const data = b.finish()
  t.same(strings(data), ['one', 'ünï', 'two', 'other'])
  for (let i = 0; i < data.length; i++) t.not(data.get(i).buffer, body.buffer, `element ${i} is in the builder's buffer`)
})

t.test('builder: a view of another buffer is copied', async (t) => {
  const b = new BytesDataBuilder(2)
  b.pushView(Buffer.from('first'), 0, 5)
  b.pushView(new Uint8Array([1, 2]), 0, 2)
  t.same(strings(b.finish()), ['first', '\u0001\u0002'])
})

t.test('builder: grows past its first size, and holds exactly the elements it was made for', async (t) => {
  const b = new BytesDataBuilder(1000, 10)
  for (let i = 0; i < 1000; i++) b.push(new TextEncoder().encode(String(i)))
  const data = b.finish()
  t.equal(data.length, 1000)
  t.equal(text.decode(data.get(999)), '999')
  t.equal(text.decode(data.get(10)), '10')

  const short = new BytesDataBuilder(2)
  short.pushString('a')
  t.throws(() => short.finish(), /made for 2 elements, got 1/)
  t.same(strings(new BytesDataBuilder(0).finish()), [])
})
