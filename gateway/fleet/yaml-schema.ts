/**
 * A small schema language for YAML files that validates the parsed YAML *nodes* rather than the plain JavaScript
 * they turn into, so that every problem can point at the key or value it is about (`file:line:col`). A schema is
 * written once with the combinators below and the TypeScript type of the validated value is derived from it
 * ({@link Infer}), so the shape never has to be written twice.
 *
 * Why not TypeBox or JSON Schema: their error paths carry no source positions, and turning "additionalProperties"
 * failures into "unknown key 'wieght' (allowed: …)" at the right line needs the same walk over the YAML nodes anyway.
 * The language only covers what config files need: mappings with required, optional and defaulted keys (unknown keys
 * are always errors) and rules between those keys, mappings with free-form keys, lists, strings, integers, finite
 * numbers and closed sets of words.
 *
 * Validation never stops at the first problem: every problem is recorded on the {@link SchemaContext} and the
 * caller reports them all at once. A value with any problem inside it reads as {@link INVALID}. Values that pass
 * are frozen.
 */
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument, type Document, type Node } from 'yaml'

/** Marks a value that failed validation; its problems are already on the context. */
export const INVALID: unique symbol = Symbol('flotilla.yaml-schema.invalid')

/** A validated value, or {@link INVALID}. */
export type Checked<T> = T | typeof INVALID

/** One problem, at a character offset in the source. */
export interface SchemaProblem {
  readonly offset: number
  readonly message: string
}

/** More alias uses than any hand-written config file needs. */
export const MAX_ALIAS_USES = 1000

/** Collects problems while one document is validated. */
export class SchemaContext {
  readonly problems: SchemaProblem[] = []
  readonly #doc: Document.Parsed
  readonly #lineCounter: LineCounter
  #aliasUses = 0

  /** `lineCounter` must be the one `doc` was parsed with. */
  constructor (doc: Document.Parsed, lineCounter: LineCounter) {
    this.#doc = doc
    this.#lineCounter = lineCounter
  }

  /** `line:col` of a node, for messages that refer to a second place in the file ("first at 3:5"). */
  positionOf (node: Node): string {
    const { line, col } = this.#lineCounter.linePos(node.range?.[0] ?? 0)
    return `${line}:${col}`
  }

  /**
   * Records a problem about `node`. When the node carries no text of its own (a key written with no value), the
   * problem points at `fallback` instead, usually the key, because an empty node's position is the end of a line.
   */
  report (node: Node | null, fallback: Node | null, message: string): void {
    const target = hasOwnText(node) ? node : (fallback ?? node)
    this.problems.push({ offset: target?.range?.[0] ?? 0, message })
  }

  /**
   * Follows an alias (`*name`) to the node it names. Each use re-walks the aliased node, so nested aliases could
   * make the walk exponential ("billion laughs"); past {@link MAX_ALIAS_USES} they stop being followed.
   */
  resolve (node: unknown): Node | null {
    if (isAlias(node)) {
      if (++this.#aliasUses > MAX_ALIAS_USES) {
        if (this.#aliasUses === MAX_ALIAS_USES + 1) {
          this.report(node, null, `too many alias uses (more than ${MAX_ALIAS_USES}); write the values out instead`)
        }
        return null
      }
      return node.resolve(this.#doc) ?? null
    }
    return isNode(node) ? node : null
  }
}

function isNode (value: unknown): value is Node {
  return isScalar(value) || isMap(value) || isSeq(value) || isAlias(value)
}

function hasOwnText (node: Node | null): node is Node {
  if (node === null || node.range === undefined || node.range === null) return false
  return !(isScalar(node) && node.value === null && node.source === '')
}

/** `file:line:col: message`, with 1-based line and column as editors show them. */
export function formatProblem (file: string, lineCounter: LineCounter, problem: SchemaProblem): string {
  const { line, col } = lineCounter.linePos(problem.offset)
  return `${file}:${line}:${col}: ${problem.message}`
}

/**
 * Validates one node. `node` has been resolved through aliases; it is `null` when the key has no value node at all.
 * `at` is where to point when the node itself has no text (see {@link SchemaContext.report}).
 */
export interface Spec<T> {
  /** What a valid value is, as a noun phrase for messages: "an integer in 1..65535". */
  readonly expected: string
  read (node: Node | null, path: string, ctx: SchemaContext, at: Node | null): Checked<T>
}

/** The type a spec produces. */
export type Infer<S> = S extends Spec<infer T> ? T : never

/** Longer values are cut in messages, so that a 10 KB name yields a readable message, not a 10 KB one. */
const MAX_QUOTED_LENGTH = 100

/** A string value as messages quote it: `'value'`, cut after {@link MAX_QUOTED_LENGTH} characters with its length. */
export function quote (value: string): string {
  return value.length <= MAX_QUOTED_LENGTH ? `'${value}'` : `'${value.slice(0, 40)}...' (${value.length} characters)`
}

/** Describes what was found, for "must be X, got Y" messages. */
export function describeNode (node: Node | null): string {
  if (node === null) return 'nothing'
  if (isMap(node)) return 'a mapping'
  if (isSeq(node)) return 'a list'
  if (isScalar(node)) {
    const value = node.value
    if (value === null) return 'nothing (null)'
    if (typeof value === 'string') return value === '' ? 'an empty string' : `${quote(value)} (a string)`
    if (typeof value === 'number') return String(value)
    if (typeof value === 'boolean') return `${value} (a boolean)`
    return typeof value
  }
  return 'an unsupported YAML node'
}

function mustBe (path: string, expected: string, node: Node | null): string {
  return `${path} must be ${expected}, got ${describeNode(node)}`
}

/** Options for {@link string}. */
export interface StringOptions {
  /** Checked after the non-empty check; `hint` says what is allowed when it fails. */
  readonly pattern?: { readonly regex: RegExp, readonly hint: string }
  /** A further rule; returns the problem (without the path) or `undefined`. */
  readonly check?: (value: string) => string | undefined
  /**
   * Rewrites a value that passed every check into its canonical spelling (HTTP header names to lower case, say), so
   * consumers compare values without normalising them again.
   */
  readonly normalize?: (value: string) => string
}

/** A non-empty string (whitespace-only counts as empty). Numbers and booleans are not strings: quote them. */
export function string (options: StringOptions = {}): Spec<string> {
  const expected = 'a non-empty string'
  return {
    expected,
    read (node, path, ctx, at) {
      if (!isScalar(node) || typeof node.value !== 'string') {
        const quoteHint = isScalar(node) && (typeof node.value === 'number' || typeof node.value === 'boolean')
          ? ` (put it in quotes to make it a string)`
          : ''
        ctx.report(node, at, mustBe(path, expected, node) + quoteHint)
        return INVALID
      }
      const value = node.value
      if (value.trim() === '') {
        ctx.report(node, at, `${path} must not be empty`)
        return INVALID
      }
      if (options.pattern !== undefined && !options.pattern.regex.test(value)) {
        ctx.report(node, at, `${path} ${quote(value)} is not allowed: ${options.pattern.hint}`)
        return INVALID
      }
      const problem = options.check?.(value)
      if (problem !== undefined) {
        ctx.report(node, at, `${path} ${problem}`)
        return INVALID
      }
      return options.normalize === undefined ? value : options.normalize(value)
    }
  }
}

/** An integer in `min..max` inclusive (`1.0` counts as the integer 1, as YAML reads it). */
export function integer (min: number, max: number): Spec<number> {
  const expected = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer in ${min}..${max}`
  return {
    expected,
    read (node, path, ctx, at) {
      if (!isScalar(node) || typeof node.value !== 'number' || !Number.isInteger(node.value) ||
        node.value < min || node.value > max) {
        ctx.report(node, at, mustBe(path, expected, node))
        return INVALID
      }
      return node.value
    }
  }
}

/** Options for {@link number}. */
export interface NumberOptions {
  /**
   * Values accepted outside `min..max`: a switch-off value such as 0 next to a range that starts at 1. They are
   * listed first in messages ("0 or a number >= 1").
   */
  readonly alsoAllowed?: readonly number[]
}

/**
 * A finite number (integers included) in `min..max` inclusive; `max` may be `Infinity` for "no upper bound".
 * `.inf` and `.nan` are refused: no setting in these files means "forever" by being infinite, so they are mistakes.
 */
export function number (min: number, max: number, options: NumberOptions = {}): Spec<number> {
  const also = options.alsoAllowed ?? []
  const range = Number.isFinite(max) ? `a number in ${min}..${max}` : `a number >= ${min}`
  const expected = also.length === 0 ? range : `${also.join(', ')} or ${range}`
  return {
    expected,
    read (node, path, ctx, at) {
      if (!isScalar(node) || typeof node.value !== 'number' || !Number.isFinite(node.value) ||
        !(also.includes(node.value) || (node.value >= min && node.value <= max))) {
        ctx.report(node, at, mustBe(path, expected, node))
        return INVALID
      }
      return node.value
    }
  }
}

/** `true` or `false` (YAML 1.2 core schema: `yes`/`on` are strings, and refused, as they are in JSON). */
export function boolean (): Spec<boolean> {
  const expected = 'true or false'
  return {
    expected,
    read (node, path, ctx, at) {
      if (!isScalar(node) || typeof node.value !== 'boolean') {
        ctx.report(node, at, mustBe(path, expected, node))
        return INVALID
      }
      return node.value
    }
  }
}

/**
 * One of a closed set of words. `notYet` names words that are planned but not implemented, with the reason, so
 * the message can say so instead of calling them unknown.
 */
export function oneOf<const W extends string> (
  words: readonly W[],
  notYet: Readonly<Record<string, string>> = {}
): Spec<W> {
  const expected = words.length === 1 ? `'${words[0] ?? ''}'` : `one of ${words.map((w) => `'${w}'`).join(', ')}`
  return {
    expected,
    read (node, path, ctx, at) {
      if (isScalar(node) && typeof node.value === 'string') {
        const value = node.value
        if ((words as readonly string[]).includes(value)) return value as W
        if (Object.hasOwn(notYet, value)) {
          ctx.report(node, at, `${path} '${value}' is not supported yet: ${notYet[value] ?? ''} (supported: ${words.join(', ')})`)
          return INVALID
        }
      }
      ctx.report(node, at, mustBe(path, expected, node))
      return INVALID
    }
  }
}

/** Options for {@link list}. */
export interface ListOptions {
  /** Reject an empty list, with this explanation ("omit it to …"). */
  readonly nonEmpty?: string
  /**
   * Reject duplicates. Scalar items are compared by value; mapping items by the value of `key`. `what` names the
   * thing in the message ("server name").
   */
  readonly unique?: { readonly what: string, readonly key?: string }
}

/** A YAML sequence whose items all satisfy `item`. */
export function list<T> (item: Spec<T>, options: ListOptions = {}): Spec<readonly T[]> {
  const expected = `a list of ${item.expected.replace(/^an? /, '')} values`
  return {
    expected,
    read (node, path, ctx, at) {
      if (!isSeq(node)) {
        ctx.report(node, at, mustBe(path, `a list`, node))
        return INVALID
      }
      if (node.items.length === 0 && options.nonEmpty !== undefined) {
        ctx.report(node, at, `${path} must not be empty (${options.nonEmpty})`)
        return INVALID
      }
      const out: T[] = []
      let ok = true
      const seen = options.unique === undefined ? undefined : new Map<string, Node>()
      for (let i = 0; i < node.items.length; i++) {
        const itemNode = ctx.resolve(node.items[i])
        const itemPath = `${path}[${i}]`
        const value = item.read(itemNode, itemPath, ctx, node)
        if (value === INVALID) ok = false
        else out.push(value)
        if (seen !== undefined && options.unique !== undefined) {
          const keyNode = options.unique.key === undefined
            ? itemNode
            : (isMap(itemNode) ? ctx.resolve(itemNode.get(options.unique.key, true)) : null)
          if (isScalar(keyNode) && (typeof keyNode.value === 'string' || typeof keyNode.value === 'number')) {
            const id = String(keyNode.value)
            const first = seen.get(id)
            if (first === undefined) {
              seen.set(id, keyNode)
            } else {
              const where = options.unique.key === undefined ? itemPath : `${itemPath}.${options.unique.key}`
              ctx.report(keyNode, null, `duplicate ${options.unique.what} '${id}' at ${where} (first at ${ctx.positionOf(first)})`)
              ok = false
            }
          }
        }
      }
      return ok ? Object.freeze(out) : INVALID
    }
  }
}

/** Options for {@link mapOf}. */
export interface MapOfOptions {
  /** Checked after the non-empty check on each key; `hint` says what is allowed when it fails. */
  readonly key?: { readonly regex: RegExp, readonly hint: string }
  /** What a valid mapping is, for "must be X" messages; `a mapping of names to <value> values` when left out. */
  readonly expected?: string
}

/**
 * A mapping whose keys are chosen by the file's author (labels, model names) and whose values all satisfy `value`.
 * Keys must be non-empty strings: a number or boolean key is refused rather than turned into text, as values are.
 * Duplicate keys are problems pointing at the second one. The result keeps the file's key order.
 */
export function mapOf<T> (value: Spec<T>, options: MapOfOptions = {}): Spec<Readonly<Record<string, T>>> {
  const expected = options.expected ?? `a mapping of names to ${value.expected.replace(/^an? /, '')} values`
  return {
    expected,
    read (node, path, ctx, at) {
      if (!isMap(node)) {
        ctx.report(node, at, mustBe(path, expected, node))
        return INVALID
      }
      const out: Record<string, T> = {}
      let ok = true
      const seen = new Map<string, Node>()
      for (const pair of node.items) {
        const keyNode = ctx.resolve(pair.key)
        if (!isScalar(keyNode) || typeof keyNode.value !== 'string' || keyNode.value.trim() === '') {
          ctx.report(keyNode, at, `${path} keys must be non-empty strings, got ${describeNode(keyNode)}`)
          ok = false
          continue
        }
        const key = keyNode.value
        const first = seen.get(key)
        if (first !== undefined) {
          ctx.report(keyNode, null, `duplicate key '${key}' in ${path} (first at ${ctx.positionOf(first)})`)
          ok = false
          continue
        }
        seen.set(key, keyNode)
        if (options.key !== undefined && !options.key.regex.test(key)) {
          ctx.report(keyNode, null, `${path} key ${quote(key)} is not allowed: ${options.key.hint}`)
          ok = false
          continue
        }
        const item = value.read(ctx.resolve(pair.value), `${path}.${key}`, ctx, keyNode)
        if (item === INVALID) {
          ok = false
          continue
        }
        // defineProperty, not assignment: a key named `__proto__` must stay an ordinary key.
        Object.defineProperty(out, key, { value: item, enumerable: true, writable: true, configurable: true })
      }
      return ok ? Object.freeze(out) : INVALID
    }
  }
}

/**
 * Any string, the empty one included (a label may be set to nothing). Numbers and booleans are refused with a hint
 * to quote them, so `rack: 4` does not silently become `'4'`.
 */
function anyString (): Spec<string> {
  const expected = 'a string'
  return {
    expected,
    read (node, path, ctx, at) {
      if (!isScalar(node) || typeof node.value !== 'string') {
        const hint = isScalar(node) && (typeof node.value === 'number' || typeof node.value === 'boolean')
          ? ' (put it in quotes to make it a string)'
          : ''
        ctx.report(node, at, mustBe(path, expected, node) + hint)
        return INVALID
      }
      return node.value
    }
  }
}

/** A mapping of non-empty string keys to string values (numbers must be quoted, so nothing is coerced silently). */
export function stringMap (): Spec<Readonly<Record<string, string>>> {
  return mapOf(anyString(), { expected: 'a mapping of strings to strings' })
}

/** A key that must be present. */
export interface RequiredProp<T> { readonly kind: 'required', readonly spec: Spec<T> }
/** A key that may be absent; the validated object then has no such key. */
export interface OptionalProp<T> { readonly kind: 'optional', readonly spec: Spec<T> }
/** A key that may be absent; the validated object then holds `value`. */
export interface DefaultProp<T> { readonly kind: 'default', readonly spec: Spec<T>, readonly value: T }
export type Prop<T> = RequiredProp<T> | OptionalProp<T> | DefaultProp<T>

export function required<T> (spec: Spec<T>): RequiredProp<T> {
  return { kind: 'required', spec }
}

export function optional<T> (spec: Spec<T>): OptionalProp<T> {
  return { kind: 'optional', spec }
}

/** `NoInfer`: the type comes from the spec alone, so a default of `{}` does not narrow a mapping's type to `{}`. */
export function withDefault<T> (spec: Spec<T>, value: NoInfer<T>): DefaultProp<T> {
  return { kind: 'default', spec, value }
}

type Props = Readonly<Record<string, Prop<unknown>>>
type PresentKeys<P extends Props> = { [K in keyof P]: P[K] extends OptionalProp<unknown> ? never : K }[keyof P]
type AbsentKeys<P extends Props> = Exclude<keyof P, PresentKeys<P>>
type PropValue<P> = P extends { readonly spec: Spec<infer T> } ? T : never
type Simplify<T> = { [K in keyof T]: T[K] } & {}

/** The validated shape of an {@link object} spec: required and defaulted keys present, optional ones maybe. */
export type ObjectOf<P extends Props> = Simplify<
  { readonly [K in PresentKeys<P>]: PropValue<P[K]> } & { readonly [K in AbsentKeys<P>]?: PropValue<P[K]> }
>

/** Options for {@link object}. */
export interface ObjectOptions<P extends Props> {
  /**
   * Rules between keys ("`hash_header` only with a hashing `type`"), run once the keys have been read. `value` holds
   * the keys that are valid (defaults filled in) and lacks the ones that are absent or invalid, so a rule between two
   * keys is still checked when a third key is wrong, and every problem is reported in one round.
   *
   * @param value the valid keys
   * @param report records `message` (which should start with the key's path) at `key`'s value, or at the key when
   *   the value has no text, or at the mapping for a key that took its default; the object is then invalid
   * @param path the mapping's own path, to build messages with
   */
  readonly check?: (value: Partial<ObjectOf<P>>, report: (key: keyof P & string, message: string) => void,
    path: string) => void
}

/**
 * A mapping with exactly the keys in `props` (in that order in the result). Unknown keys, duplicate keys and
 * missing required keys are problems, each pointing at the key concerned.
 */
export function object<const P extends Props> (props: P, options: ObjectOptions<P> = {}): Spec<ObjectOf<P>> {
  const names = Object.keys(props)
  const allowed = names.join(', ')
  return {
    expected: 'a mapping',
    read (node, path, ctx, at) {
      if (!isMap(node)) {
        ctx.report(node, at, path === '' ? `the file must hold a mapping at the top level, got ${describeNode(node)}` : mustBe(path, 'a mapping', node))
        return INVALID
      }
      const where = path === '' ? 'at the top level' : `in ${path}`
      const found = new Map<string, { key: Node, value: Node | null }>()
      let ok = true
      for (const pair of node.items) {
        const keyNode = ctx.resolve(pair.key)
        const key = isScalar(keyNode) && keyNode.value !== null ? String(keyNode.value) : undefined
        if (key === undefined || keyNode === null) {
          ctx.report(keyNode, node, `keys ${where} must be plain words, got ${describeNode(keyNode)} (allowed: ${allowed})`)
          ok = false
          continue
        }
        const first = found.get(key)
        if (first !== undefined) {
          ctx.report(keyNode, null, `duplicate key '${key}' ${where} (first at ${ctx.positionOf(first.key)})`)
          ok = false
          continue
        }
        if (!Object.hasOwn(props, key)) {
          ctx.report(keyNode, null, `unknown key '${key}' ${where} (allowed: ${allowed})`)
          ok = false
          continue
        }
        found.set(key, { key: keyNode, value: ctx.resolve(pair.value) })
      }
      const out: Record<string, unknown> = {}
      for (const name of names) {
        const prop = props[name]
        if (prop === undefined) continue
        const entry = found.get(name)
        if (entry === undefined) {
          if (prop.kind === 'required') {
            ctx.report(node, at, path === '' ? `missing required top-level key '${name}'` : `${path} is missing required key '${name}'`)
            ok = false
          } else if (prop.kind === 'default') {
            out[name] = prop.value
          }
          continue
        }
        const value = prop.spec.read(entry.value, path === '' ? name : `${path}.${name}`, ctx, entry.key)
        if (value === INVALID) ok = false
        else out[name] = value
      }
      if (options.check !== undefined) {
        options.check(out as Partial<ObjectOf<P>>, (key, message) => {
          const entry = found.get(key)
          if (entry === undefined) ctx.report(node, at, message)
          else ctx.report(entry.value, entry.key, message)
          ok = false
        }, path)
      }
      return ok ? Object.freeze(out) as ObjectOf<P> : INVALID
    }
  }
}

/**
 * Validates a value that arrived as JSON (an admin API body) with the same spec as the fleet file, so both accept
 * and refuse the same things with the same messages. JSON is YAML, so the value goes through the same reader; the
 * messages carry the key path (`path` first) but no line numbers, which mean nothing to an API caller.
 *
 * @returns the normalised value, or every problem found
 */
export function readJson<T> (spec: Spec<T>, value: unknown, path: string): { ok: true, value: T } | { ok: false, problems: string[] } {
  const lineCounter = new LineCounter()
  const doc = parseDocument(JSON.stringify(value ?? null), { lineCounter, uniqueKeys: false })
  const ctx = new SchemaContext(doc, lineCounter)
  const read = spec.read(doc.contents, path, ctx, null)
  if (ctx.problems.length > 0 || read === INVALID) {
    return { ok: false, problems: ctx.problems.length > 0 ? ctx.problems.map((p) => p.message) : [`${path} is invalid`] }
  }
  return { ok: true, value: read }
}
