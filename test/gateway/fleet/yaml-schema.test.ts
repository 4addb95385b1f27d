import t from 'tap'
import { LineCounter, parseDocument } from 'yaml'
import {
  INVALID, SchemaContext, formatProblem, integer, mapOf, number, object, optional, quote, string, stringMap, withDefault,
  type Spec
} from '../../../gateway/fleet/yaml-schema.ts'

/** Reads `text` with `spec` at path `v`: the value (or INVALID) and the problems as `line:col: message`. */
function read<T> (spec: Spec<T>, text: string): { value: T | typeof INVALID, problems: string[] } {
  const lineCounter = new LineCounter()
  const doc = parseDocument(text, { lineCounter, uniqueKeys: false })
  const ctx = new SchemaContext(doc, lineCounter)
  const value = spec.read(ctx.resolve(doc.contents), 'v', ctx, null)
  return { value, problems: ctx.problems.map((p) => formatProblem('f', lineCounter, p).slice(2)) }
}

t.test('number: finite, inclusive bounds, extra allowed values', async (t) => {
  const spec = number(0.5, 2)
  t.equal(spec.expected, 'a number in 0.5..2')
  t.equal(read(spec, '0.5').value, 0.5)
  t.equal(read(spec, '2').value, 2)
  t.equal(read(spec, '1.25').value, 1.25)
  t.strictSame(read(spec, '2.01').problems, ['1:1: v must be a number in 0.5..2, got 2.01'])
  t.strictSame(read(spec, '.nan').problems, ['1:1: v must be a number in 0.5..2, got NaN'])
  t.strictSame(read(spec, '"1"').problems, ["1:1: v must be a number in 0.5..2, got '1' (a string)"])

  const open = number(1, Infinity, { alsoAllowed: [0] })
  t.equal(open.expected, '0 or a number >= 1')
  t.equal(read(open, '0').value, 0)
  t.equal(read(open, '1e6').value, 1e6)
  t.strictSame(read(open, '.inf').problems, ['1:1: v must be 0 or a number >= 1, got Infinity'], 'no upper bound, but finite')
  t.strictSame(read(open, '0.999').problems, ['1:1: v must be 0 or a number >= 1, got 0.999'])
})

t.test('mapOf: free-form keys, file order, frozen, __proto__ kept as a key', async (t) => {
  const spec = mapOf(integer(0, 9), { key: { regex: /^[a-z_]+$/, hint: 'lower-case letters only' } })
  t.equal(spec.expected, 'a mapping of names to integer in 0..9 values')
  const { value, problems } = read(spec, 'b: 1\n__proto__: 2\na: 3\n')
  t.strictSame(problems, [])
  if (value === INVALID) throw new Error('expected a value')
  t.strictSame(Object.keys(value), ['b', '__proto__', 'a'])
  t.equal(Object.getPrototypeOf(value), Object.prototype, 'the prototype is untouched')
  t.equal(Object.getOwnPropertyDescriptor(value, '__proto__')?.value, 2)
  t.ok(Object.isFrozen(value))

  t.strictSame(read(spec, 'a: 1\nB: 2\na: 10\n7: 1\n').problems, [
    "2:1: v key 'B' is not allowed: lower-case letters only",
    "3:1: duplicate key 'a' in v (first at 1:1)",
    '4:1: v keys must be non-empty strings, got 7'
  ])
  t.strictSame(read(spec, 'a: 10\nb:\n').problems, [
    '1:4: v.a must be an integer in 0..9, got 10',
    '2:1: v.b must be an integer in 0..9, got nothing (null)'
  ], 'a value with no text points at its key')
  t.strictSame(read(spec, '[1]').problems, ['1:1: v must be a mapping of names to integer in 0..9 values, got a list'])
  t.strictSame(read(mapOf(integer(0, 9), { expected: 'a mapping of digits' }), '1').problems,
    ['1:1: v must be a mapping of digits, got 1'])
})

t.test('stringMap keeps its messages', async (t) => {
  const spec = stringMap()
  t.strictSame(read(spec, 'a: ""\nb: x\n').value, { a: '', b: 'x' }, 'empty values are allowed')
  t.strictSame(read(spec, 'a: 4\nb: true\nc: [x]\n').problems, [
    '1:4: v.a must be a string, got 4 (put it in quotes to make it a string)',
    '2:4: v.b must be a string, got true (a boolean) (put it in quotes to make it a string)',
    '3:4: v.c must be a string, got a list'
  ])
  t.strictSame(read(spec, '"": x\n').problems, ['1:1: v keys must be non-empty strings, got an empty string'])
  t.strictSame(read(spec, 'x').problems, ["1:1: v must be a mapping of strings to strings, got 'x' (a string)"])
})

t.test('string normalize: applied only to values that pass', async (t) => {
  const spec = string({ pattern: { regex: /^[A-Za-z-]+$/, hint: 'letters and dashes' }, normalize: (v) => v.toLowerCase() })
  t.equal(read(spec, 'X-User').value, 'x-user')
  t.strictSame(read(spec, 'X User').problems, ["1:1: v 'X User' is not allowed: letters and dashes"])
})

t.test('object check: rules between keys see the valid keys, even when another key is invalid', async (t) => {
  const seen: unknown[] = []
  const spec = object({
    low: withDefault(integer(0, 100), 10),
    high: optional(integer(0, 100)),
    other: optional(integer(0, 1))
  }, {
    check (value, report, path) {
      seen.push(value)
      if (value.high !== undefined && value.low !== undefined && value.high < value.low) {
        report('high', `${path}.high must be at least low`)
        report('low', `${path}.low is above high`)
      }
    }
  })
  // In the order recorded: the keys' own problems first, then the rule's (the fleet loader sorts by position).
  t.strictSame(read(spec, 'high: 5\nother: 7\n').problems, [
    '2:8: v.other must be an integer in 0..1, got 7',
    '1:7: v.high must be at least low',
    '1:1: v.low is above high'
  ], 'a defaulted key is reported at the mapping')
  t.strictSame(seen, [{ low: 10, high: 5 }], 'the invalid key is left out of what the rule sees')
  t.equal(read(spec, 'high: 5\n').value, INVALID, 'a rule that reports makes the object invalid')
  t.strictSame(read(spec, 'high: 50\n').value, { low: 10, high: 50 })
})

t.test('long values are quoted cut short, with their length, in every message that echoes them', async (t) => {
  t.equal(quote('abc'), "'abc'")
  t.equal(quote('x'.repeat(100)), `'${'x'.repeat(100)}'`)
  t.equal(quote('x'.repeat(101)), `'${'x'.repeat(40)}...' (101 characters)`)
  const long = 'y'.repeat(5000)
  t.strictSame(read(string({ pattern: { regex: /^a$/, hint: 'only a' } }), long).problems, [`1:1: v '${'y'.repeat(40)}...' (5000 characters) is not allowed: only a`])
  t.strictSame(read(integer(0, 1), long).problems, [`1:1: v must be an integer in 0..1, got '${'y'.repeat(40)}...' (5000 characters) (a string)`])
  t.strictSame(read(mapOf(integer(0, 1), { key: { regex: /^a$/, hint: 'only a' } }), `${long}: 1`).problems,
    [`1:1: v key '${'y'.repeat(40)}...' (5000 characters) is not allowed: only a`])
})
