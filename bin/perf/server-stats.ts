/**
 * The server's side of a measurement: Triton's statistics JSON (`GET /v2/models/{m}[/versions/{v}]/stats`) read
 * into exact counters, and two reads, taken at the start and the end of a measurement window, turned into the
 * average time a request spent queued and in each compute phase, as perf_analyzer reports it.
 *
 * Counters are cumulative since the version loaded, and a server's nanosecond totals pass 2^53 (about 104 days of
 * summed request time) on a busy, long-lived server, so they are read as bigint straight from the JSON text rather
 * than through JSON.parse's doubles; only the differences, which are small, become numbers.
 */
import { type StatDuration, type StatsCounters } from './transport.ts'

/** The server's split of one window, per successful request; durations in microseconds. */
export interface ServerSplit {
  /** Requests the server completed successfully during the window (Δ `success.count`). */
  requests: number
  /** Requests it failed (Δ `fail.count`). */
  failures: number
  /** Inferences (batch items) it ran (Δ `inference_count`). */
  inferences: number
  /** Model executions (Δ `execution_count`): fewer than `requests` when the dynamic batcher merged requests. */
  executions: number
  /** Average per request: Δns / Δcount of each phase; `undefined` when the phase counted nothing. */
  queueUs: number | undefined
  computeInputUs: number | undefined
  computeInferUs: number | undefined
  computeOutputUs: number | undefined
}

// The counters' keys, whose integer values are quoted before JSON.parse so that they survive as exact text. Inside
// a JSON string (a model named `"count":1`) the quotes are escaped, so the pattern cannot match there.
const COUNTER_RE = /("(?:count|ns|inference_count|execution_count)"\s*:\s*)(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/g

/**
 * Reads Triton's statistics JSON into counters, summed over every entry of `model_stats` (a request that names no
 * version gets every ready version's entry, and a benchmark's requests may go to any of them).
 *
 * @param text the response body
 * @returns the counters
 * @throws Error naming what is missing when the body is not Triton's statistics shape
 */
export function parseStatistics (text: string): StatsCounters {
  let json: unknown
  try {
    json = JSON.parse(text.replace(COUNTER_RE, '$1"$2"'))
  } catch (err) {
    throw new Error(`the statistics are not JSON: ${(err as Error).message}`)
  }
  const entries = (json as { model_stats?: unknown } | null)?.model_stats
  if (!Array.isArray(entries)) throw new Error('the statistics have no model_stats array')
  const total = zeroCounters()
  for (const [i, entry] of entries.entries()) {
    const where = `model_stats[${i}]`
    const stats = field(entry, 'inference_stats', where)
    add(total.success, duration(stats, 'success', where))
    add(total.fail, duration(stats, 'fail', where))
    add(total.queue, duration(stats, 'queue', where))
    add(total.computeInput, duration(stats, 'compute_input', where))
    add(total.computeInfer, duration(stats, 'compute_infer', where))
    add(total.computeOutput, duration(stats, 'compute_output', where))
    total.inferenceCount += counter(entry, 'inference_count', where)
    total.executionCount += counter(entry, 'execution_count', where)
  }
  return total
}

/** Counters all at zero. */
export function zeroCounters (): StatsCounters {
  const d = (): StatDuration => ({ count: 0n, ns: 0n })
  return {
    success: d(), fail: d(), queue: d(), computeInput: d(), computeInfer: d(), computeOutput: d(),
    inferenceCount: 0n, executionCount: 0n
  }
}

/**
 * The window's split: `after` minus `before`. Each phase's average is its Δns divided by its own Δcount (on
 * Triton and Flotilla both count successful requests), rounded to the nearest microsecond only when printed.
 *
 * @returns the split, or `undefined` when a counter went backwards (the model was reloaded during the window, so
 *   the difference means nothing)
 */
export function diffStatistics (before: StatsCounters, after: StatsCounters): ServerSplit | undefined {
  const phases = [before.success, before.fail, before.queue, before.computeInput, before.computeInfer, before.computeOutput]
  const later = [after.success, after.fail, after.queue, after.computeInput, after.computeInfer, after.computeOutput]
  for (let i = 0; i < phases.length; i++) {
    if (later[i]!.count < phases[i]!.count || later[i]!.ns < phases[i]!.ns) return undefined
  }
  if (after.inferenceCount < before.inferenceCount || after.executionCount < before.executionCount) return undefined
  return {
    requests: Number(after.success.count - before.success.count),
    failures: Number(after.fail.count - before.fail.count),
    inferences: Number(after.inferenceCount - before.inferenceCount),
    executions: Number(after.executionCount - before.executionCount),
    queueUs: averageUs(before.queue, after.queue),
    computeInputUs: averageUs(before.computeInput, after.computeInput),
    computeInferUs: averageUs(before.computeInfer, after.computeInfer),
    computeOutputUs: averageUs(before.computeOutput, after.computeOutput)
  }
}

function averageUs (before: StatDuration, after: StatDuration): number | undefined {
  const count = after.count - before.count
  if (count === 0n) return undefined
  // Both differences are far below 2^53 for any real window, so the division in doubles is exact to the last bit
  // that matters.
  return Number(after.ns - before.ns) / Number(count) / 1000
}

function add (into: StatDuration, d: StatDuration): void {
  into.count += d.count
  into.ns += d.ns
}

function field (parent: unknown, key: string, where: string): unknown {
  if (typeof parent !== 'object' || parent === null || !(key in parent)) {
    throw new Error(`the statistics have no ${where}.${key}`)
  }
  return (parent as Record<string, unknown>)[key]
}

function duration (parent: unknown, key: string, where: string): StatDuration {
  const d = field(parent, key, `${where}.inference_stats`)
  return { count: counter(d, 'count', `${where}.inference_stats.${key}`), ns: counter(d, 'ns', `${where}.inference_stats.${key}`) }
}

function counter (parent: unknown, key: string, where: string): bigint {
  const raw = field(parent, key, where)
  if (typeof raw !== 'string' || !/^\d+$/.test(raw)) {
    throw new Error(`the statistics' ${where}.${key} is not a non-negative integer`)
  }
  return BigInt(raw)
}
