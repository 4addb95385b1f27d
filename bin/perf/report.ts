/**
 * What a step's log adds up to, and how it is printed: the table on stdout, perf_analyzer's CSV, the one-line
 * JSON summary. Pure functions over {@link StepSamples}, so every figure is checked on hand-made logs.
 *
 * The arithmetic, exactly:
 * - A request counts in a step's window when it *completed* inside [windowStart, windowEnd), wherever it started
 *   (perf_analyzer counts only those that also started inside; in a steady state both estimate the same rate, and
 *   this one does not leave out the requests that straddle the window's start).
 * - Throughput: successful requests counted in the window / the window's length in seconds; inferences/second is
 *   that times the batch size (perf_analyzer's "infer/sec").
 * - Latency: from send to the last byte of the answer, of the successful requests counted in the window.
 *   Percentiles by nearest rank: the p-th percentile of n sorted samples is the ceil(p/100 × n)-th smallest, always
 *   one of the samples. The average is their arithmetic mean. Both are rounded only when printed (to whole
 *   microseconds, as perf_analyzer prints them).
 * - Errors: failed requests counted in the window; the distinct messages are listed over the whole step.
 */
import { type ErrorKind, type LoadMode, type StepSamples } from './load-generator.ts'
import { type ServerSplit } from './server-stats.ts'

/** Client latency figures of one window, in microseconds. */
export interface LatencySummary {
  count: number
  p50: number
  p90: number
  p95: number
  p99: number
  avg: number
  min: number
  max: number
}

/** An error message and how often the step saw it. */
export interface ErrorCount extends ErrorKind {
  count: number
}

/** Everything reported for one step. */
export interface StepResult {
  mode: LoadMode
  /** The concurrency, or the offered request rate (per second). */
  value: number
  batchSize: number
  windowMs: number
  /** Successful requests completed in the window. */
  requests: number
  /** Failed requests completed in the window. */
  errors: number
  requestsPerSecond: number
  inferencesPerSecond: number
  /** Absent when no request succeeded in the window. */
  latency?: LatencySummary
  /** Over the whole step (warm-up and drain included), most frequent first. */
  errorCounts: ErrorCount[]
  /** Requests of the whole step, successful and failed. */
  totalOk: number
  totalFailed: number
  /** The server's split for the window; absent when its statistics could not be read. */
  server?: ServerSplit
  /** Open loop only: the offered and achieved send rates, and the arrivals dropped or sent late. */
  openLoop?: {
    offered: number
    offeredPerSecond: number
    sentPerSecond: number
    dropped: number
    late: number
    maxOutstanding: number
  }
}

/**
 * The nearest-rank percentile: the ceil(p/100 × n)-th smallest of the n samples (p = 0 gives the smallest).
 *
 * @param sorted the samples, ascending
 * @param p the percentile, 0 to 100
 * @throws Error when there are no samples or p is out of range
 */
export function percentile (sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) throw new Error('percentile of no samples')
  if (!(p >= 0 && p <= 100)) throw new Error(`percentile must be from 0 to 100, got ${p}`)
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length))
  return sorted[rank - 1]!
}

/**
 * Sums up one step.
 *
 * @param samples what the load generator logged
 * @param batchSize `-b`, to turn requests into inferences
 */
export function summarizeStep (samples: StepSamples, batchSize: number): StepResult {
  const { log, windowStart, windowEnd, step } = samples
  const latencies: number[] = []
  let errors = 0
  const perKind = new Array<number>(log.errorKinds.length).fill(0)
  for (let i = 0; i < log.length; i++) {
    const code = log.code(i)
    if (code >= 0) perKind[code]!++
    const end = log.end(i)
    if (end < windowStart || end >= windowEnd) continue
    if (code >= 0) errors++
    else latencies.push((end - log.start(i)) * 1000)
  }
  const seconds = step.windowMs / 1000
  const result: StepResult = {
    mode: step.mode,
    value: step.value,
    batchSize,
    windowMs: step.windowMs,
    requests: latencies.length,
    errors,
    requestsPerSecond: latencies.length / seconds,
    inferencesPerSecond: (latencies.length * batchSize) / seconds,
    errorCounts: log.errorKinds
      .map((kind, i) => ({ ...kind, count: perKind[i]! }))
      .sort((a, b) => b.count - a.count),
    totalOk: log.ok,
    totalFailed: log.failed
  }
  if (latencies.length > 0) result.latency = latencySummary(Float64Array.from(latencies).sort())
  if (samples.arrivals !== undefined) {
    const a = samples.arrivals
    result.openLoop = {
      offered: a.offered,
      offeredPerSecond: a.offered / seconds,
      sentPerSecond: (a.offered - a.dropped) / seconds,
      dropped: a.dropped,
      late: a.late,
      maxOutstanding: a.maxOutstanding
    }
  }
  return result
}

/** The latency figures of ascending samples (microseconds). */
export function latencySummary (sorted: Float64Array): LatencySummary {
  let sum = 0
  for (let i = 0; i < sorted.length; i++) sum += sorted[i]!
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    avg: sum / sorted.length,
    min: sorted[0]!,
    max: sorted[sorted.length - 1]!
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Printing

const us = (n: number | undefined): string => n === undefined ? '' : String(Math.round(n))
/** Rates: at most three decimals, no trailing zeros (69.2, not 69.200). */
export const rate = (n: number): string => String(Math.round(n * 1000) / 1000)

/** The first column's title: perf_analyzer's. */
function modeTitle (mode: LoadMode): string {
  return mode === 'concurrency' ? 'Concurrency' : 'Request Rate'
}

/** How a step is named in messages: "concurrency 4", "request rate 250/s". */
export function stepName (mode: LoadMode, value: number): string {
  return mode === 'concurrency' ? `concurrency ${value}` : `request rate ${rate(value)}/s`
}

/**
 * The table printed on stdout: one row per step in the order run, latencies in microseconds (the server's as an
 * average per request), then each step's distinct errors.
 */
export function formatTable (results: readonly StepResult[]): string {
  if (results.length === 0) return ''
  const mode = results[0]!.mode
  const open = mode === 'request-rate'
  const groups: Array<[string, number]> = [
    ['', open ? 5 : 2], ['Client latency (us)', 5], ['Server, per request (us)', 4], ['', 1]
  ]
  const header = [
    modeTitle(mode), 'Infer/s', ...(open ? ['Sent/s', 'Dropped', 'Late'] : []),
    'p50', 'p90', 'p95', 'p99', 'avg', 'queue', 'input', 'infer', 'output', 'Errors'
  ]
  const rows = results.map((r) => [
    rate(r.value), rate(r.inferencesPerSecond),
    ...(open ? [rate(r.openLoop?.sentPerSecond ?? 0), String(r.openLoop?.dropped ?? 0), String(r.openLoop?.late ?? 0)] : []),
    us(r.latency?.p50), us(r.latency?.p90), us(r.latency?.p95), us(r.latency?.p99), us(r.latency?.avg),
    us(r.server?.queueUs), us(r.server?.computeInputUs), us(r.server?.computeInferUs), us(r.server?.computeOutputUs),
    String(r.errors)
  ].map((cell) => cell === '' ? '-' : cell))
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((row) => row[c]!.length)))
  // A group title spans its columns (and the two-space gaps between them), centred over them.
  let groupLine = ''
  let col = 0
  for (const [title, span] of groups) {
    const width = widths.slice(col, col + span).reduce((a, b) => a + b, 0) + 2 * (span - 1)
    const text = title === '' ? '' : ` ${title} `
    const pad = Math.max(0, width - text.length)
    // Dashes mark the span only where there is room for them on both sides.
    const fill = title === '' || pad < 4 ? ' ' : '-'
    groupLine += (col === 0 ? '' : '  ') + fill.repeat(Math.floor(pad / 2)) + text + fill.repeat(pad - Math.floor(pad / 2))
    col += span
  }
  const line = (cells: readonly string[]): string => cells.map((cell, c) => cell.padStart(widths[c]!)).join('  ')
  const out = [groupLine.trimEnd(), line(header), ...rows.map(line)]
  for (const r of results) {
    if (r.errorCounts.length === 0) continue
    out.push('', `Errors at ${stepName(r.mode, r.value)}: ${r.errors} in the window, ${r.totalFailed} of ${r.totalOk + r.totalFailed} requests in all`)
    for (const e of r.errorCounts.slice(0, 3)) out.push(`  ${e.count} x ${e.status} ${e.message}`)
    if (r.errorCounts.length > 3) out.push(`  ... and ${r.errorCounts.length - 3} more distinct error(s)`)
  }
  return out.join('\n') + '\n'
}

/**
 * perf_analyzer's CSV (`-f`): its thirteen columns, in its order and units (microseconds), then `Avg latency` and
 * `Errors`, and for request-rate runs `Sent Rate`, `Dropped`, `Late`. Rows are sorted by throughput, ascending, as
 * perf_analyzer sorts them. `Client Send` and `Client Recv` are 0: requests are encoded before the load and
 * answers are read without decoding, so the client spends no time there that is not on the wire;
 * `Network+Server Send/Recv` is the average latency minus the server's four phases (the rest of the round trip),
 * at least 0. Server columns are empty when the server's statistics could not be read.
 */
export function formatCsv (results: readonly StepResult[]): string {
  if (results.length === 0) return ''
  const open = results[0]!.mode === 'request-rate'
  const header = [
    modeTitle(results[0]!.mode), 'Inferences/Second', 'Client Send', 'Network+Server Send/Recv', 'Server Queue',
    'Server Compute Input', 'Server Compute Infer', 'Server Compute Output', 'Client Recv',
    'p50 latency', 'p90 latency', 'p95 latency', 'p99 latency', 'Avg latency', 'Errors',
    ...(open ? ['Sent Rate', 'Dropped', 'Late'] : [])
  ]
  const sorted = [...results].sort((a, b) => a.inferencesPerSecond - b.inferencesPerSecond)
  const lines = [header.join(',')]
  for (const r of sorted) {
    const s = r.server
    const serverSum = s === undefined ? undefined : (s.queueUs ?? 0) + (s.computeInputUs ?? 0) + (s.computeInferUs ?? 0) + (s.computeOutputUs ?? 0)
    const network = serverSum === undefined || r.latency === undefined ? undefined : Math.max(0, r.latency.avg - serverSum)
    lines.push([
      rate(r.value), rate(r.inferencesPerSecond), '0', us(network), us(s?.queueUs), us(s?.computeInputUs),
      us(s?.computeInferUs), us(s?.computeOutputUs), '0',
      us(r.latency?.p50), us(r.latency?.p90), us(r.latency?.p95), us(r.latency?.p99), us(r.latency?.avg), String(r.errors),
      ...(open ? [rate(r.openLoop?.sentPerSecond ?? 0), String(r.openLoop?.dropped ?? 0), String(r.openLoop?.late ?? 0)] : [])
    ].join(','))
  }
  return lines.join('\n') + '\n'
}

/** Microseconds in JSON: to the nanosecond, which is all the clock has. */
const ns3 = (n: number | undefined): number | null => n === undefined ? null : Math.round(n * 1000) / 1000

/** One step as the `--json` summary has it (snake_case, microseconds, `null` for what was not measured). */
export function stepJson (r: StepResult): Record<string, unknown> {
  const l = r.latency
  const s = r.server
  return {
    [r.mode === 'concurrency' ? 'concurrency' : 'request_rate']: r.value,
    // Rates unrounded: each is an exact count over the window's length.
    inferences_per_second: r.inferencesPerSecond,
    requests_per_second: r.requestsPerSecond,
    requests: r.requests,
    errors: r.errors,
    latency_us: l === undefined
      ? null
      : { p50: ns3(l.p50), p90: ns3(l.p90), p95: ns3(l.p95), p99: ns3(l.p99), avg: ns3(l.avg), min: ns3(l.min), max: ns3(l.max) },
    server: s === undefined
      ? null
      : {
          requests: s.requests,
          failures: s.failures,
          inferences: s.inferences,
          executions: s.executions,
          queue_us: ns3(s.queueUs),
          compute_input_us: ns3(s.computeInputUs),
          compute_infer_us: ns3(s.computeInferUs),
          compute_output_us: ns3(s.computeOutputUs)
        },
    ...(r.openLoop === undefined
      ? {}
      : {
          offered_per_second: r.openLoop.offeredPerSecond,
          sent_per_second: r.openLoop.sentPerSecond,
          dropped: r.openLoop.dropped,
          late: r.openLoop.late,
          max_outstanding: r.openLoop.maxOutstanding
        }),
    error_messages: r.errorCounts.map((e) => ({ status: e.status, message: e.message, count: e.count }))
  }
}
