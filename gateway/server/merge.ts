/**
 * Calls the gateway answers by asking several servers and merging what they say: the repository index and the
 * statistics extension. Each server's answer is what a worker (or Triton) sends; the merged answer has the same
 * shape, so a client cannot tell it from one server's.
 *
 * Statistics merge, per model and version over the servers that answered for it:
 * - every count is summed (`inference_count`, `execution_count`, each `{count, ns}`'s count);
 * - every duration is summed too (`ns`): Triton's durations are totals over the requests counted, so the sum over
 *   servers divided by the summed count is the fleet-wide mean per request (`queue.ns / queue.count`), exactly what
 *   one server's figures mean for that server. Maximums or means of means would not keep that property.
 * - `last_inference` is the latest of the servers'; `batch_stats` are merged by batch size, `response_stats` by
 *   response index, `memory_usage` by memory type and device id (bytes summed), each the same way.
 * Values go through JSON doubles, so totals beyond 2^53 (104 days of summed nanoseconds) lose their last digits.
 */
import { createError, type FlotillaError } from '../../common/errors.ts'
import { type ForwardResult, type UpstreamResponse } from '../proxy/types.ts'

/** One server's answer to a fan-out call (or why it gave none). */
export type FanOutAnswer = ForwardResult

/** A merged answer, the first server answer to pass on when none could be merged, or the error to answer with. */
export type Merged =
  | { readonly body: string, readonly answered: readonly string[] }
  | { readonly passOn: UpstreamResponse }
  | { readonly error: FlotillaError }

interface IndexEntry { name: string, version?: string, state?: string, reason?: string }

function isIndexEntry (value: unknown): value is IndexEntry {
  return typeof value === 'object' && value !== null && typeof (value as { name?: unknown }).name === 'string'
}

/**
 * The answers with a 200 and a body `accept` takes, parsed; the others as what to pass on or report. Servers that
 * cannot be reached or answer with something else are left out; if none answered usably, the first error answer is
 * passed on (a 400 for a bad body, say), else `unavailable` is built from the failures.
 */
function collect<T> (
  answers: readonly FanOutAnswer[],
  accept: (parsed: unknown) => T | undefined,
  unavailable: (tried: string, failures: string) => FlotillaError
): { readonly parsed: ReadonlyArray<{ readonly endpoint: string, readonly value: T }> } | { readonly passOn: UpstreamResponse } | { readonly error: FlotillaError } {
  const parsed: Array<{ endpoint: string, value: T }> = []
  let firstAnswer: UpstreamResponse | undefined
  const failures: string[] = []
  for (const answer of answers) {
    if (!answer.ok) {
      failures.push(answer.error.message)
      continue
    }
    let value: T | undefined
    try {
      value = answer.response.statusCode === 200 ? accept(JSON.parse(answer.response.body.toString('utf8'))) : undefined
    } catch {
      value = undefined
    }
    if (value === undefined) {
      firstAnswer ??= answer.response
      continue
    }
    parsed.push({ endpoint: answer.endpoint.name, value })
  }
  if (parsed.length > 0) return { parsed }
  if (firstAnswer !== undefined) return { passOn: firstAnswer }
  const tried = answers.map((a) => a.endpoint?.name ?? '?').join(', ') || 'none'
  return { error: unavailable(tried, failures.length > 0 ? `: ${failures.join('; ')}` : '') }
}

/**
 * One index for the fleet: the union of every server's index, one entry per model and version (a READY entry wins
 * over any other state, since the model can be served), sorted by name then version as Triton sorts it.
 */
export function mergeIndexes (answers: readonly FanOutAnswer[]): Merged {
  const got = collect(answers, (v) => Array.isArray(v) ? v as unknown[] : undefined,
    (tried, failures) => createError('GW_ERR_INDEX_UNAVAILABLE', tried, failures))
  if (!('parsed' in got)) return got
  const merged = new Map<string, IndexEntry>()
  for (const { value } of got.parsed) {
    for (const entry of value) {
      if (!isIndexEntry(entry)) continue
      const key = `${entry.name}\u0000${entry.version ?? ''}`
      const seen = merged.get(key)
      if (seen === undefined || (seen.state !== 'READY' && entry.state === 'READY')) merged.set(key, entry)
    }
  }
  const list = [...merged.values()].sort((a, b) => compareNameVersion(a.name, a.version, b.name, b.version))
  return { body: JSON.stringify(list), answered: got.parsed.map((p) => p.endpoint) }
}

type Json = Record<string, unknown>

function isObject (v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/**
 * One statistics answer for the fleet (see the header for how figures combine), in Triton's shape
 * (`{"model_stats":[...]}`), sorted by model name then version.
 */
export function mergeStatistics (answers: readonly FanOutAnswer[]): Merged {
  const got = collect(answers,
    (v) => isObject(v) && Array.isArray(v.model_stats) ? v.model_stats as unknown[] : undefined,
    (tried, failures) => createError('GW_ERR_STATS_UNAVAILABLE', tried, failures))
  if (!('parsed' in got)) return got
  const merged = new Map<string, Json>()
  for (const { value } of got.parsed) {
    for (const entry of value) {
      if (!isObject(entry) || typeof entry.name !== 'string') continue
      const key = `${entry.name}\u0000${String(entry.version ?? '')}`
      const seen = merged.get(key)
      merged.set(key, seen === undefined ? structuredClone(entry) : mergeModelStats(seen, entry))
    }
  }
  const list = [...merged.values()].sort((a, b) =>
    compareNameVersion(a.name as string, a.version as string | undefined, b.name as string, b.version as string | undefined))
  return { body: JSON.stringify({ model_stats: list }), answered: got.parsed.map((p) => p.endpoint) }
}

/** Adds `other`'s figures into `into` (a clone owned by the merge), field by field as the header says. */
function mergeModelStats (into: Json, other: Json): Json {
  into.last_inference = Math.max(num(into.last_inference), num(other.last_inference))
  into.inference_count = num(into.inference_count) + num(other.inference_count)
  into.execution_count = num(into.execution_count) + num(other.execution_count)
  into.inference_stats = sumDurations(into.inference_stats, other.inference_stats)
  into.response_stats = mergeKeyed(into.response_stats, other.response_stats)
  into.batch_stats = mergeList(into.batch_stats, other.batch_stats, (e) => String(e.batch_size),
    (a, b) => ({ ...sumDurations(a, b), batch_size: a.batch_size }))
  into.memory_usage = mergeList(into.memory_usage, other.memory_usage, (e) => `${String(e.type)}\u0000${String(e.id)}`,
    (a, b) => ({ ...a, byte_size: num(a.byte_size) + num(b.byte_size) }))
  return into
}

function num (v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 0
}

function isDuration (v: unknown): v is { count: unknown, ns: unknown } {
  return isObject(v) && 'count' in v && 'ns' in v
}

/** Sums every `{count, ns}` member of two objects (members only one of them has are kept as they are). */
function sumDurations (a: unknown, b: unknown): Json {
  const out: Json = isObject(a) ? { ...a } : {}
  if (!isObject(b)) return out
  for (const [key, value] of Object.entries(b)) {
    const mine = out[key]
    if (isDuration(value) && isDuration(mine)) out[key] = { count: num(mine.count) + num(value.count), ns: num(mine.ns) + num(value.ns) }
    else if (mine === undefined) out[key] = value
  }
  return out
}

/** `response_stats`: an object keyed by response index, each a set of durations. */
function mergeKeyed (a: unknown, b: unknown): Json {
  const out: Json = isObject(a) ? { ...a } : {}
  if (!isObject(b)) return out
  for (const [key, value] of Object.entries(b)) out[key] = out[key] === undefined ? value : sumDurations(out[key], value)
  return out
}

function mergeList (a: unknown, b: unknown, keyOf: (e: Json) => string, combine: (a: Json, b: Json) => Json): Json[] {
  const byKey = new Map<string, Json>()
  for (const list of [a, b]) {
    if (!Array.isArray(list)) continue
    for (const e of list) {
      if (!isObject(e)) continue
      const key = keyOf(e)
      const seen = byKey.get(key)
      byKey.set(key, seen === undefined ? e : combine(seen, e))
    }
  }
  return [...byKey.values()]
}

function compareNameVersion (an: string, av: string | undefined, bn: string, bv: string | undefined): number {
  if (an !== bn) return an < bn ? -1 : 1
  return (av === undefined ? -1 : Number(av)) - (bv === undefined ? -1 : Number(bv))
}
