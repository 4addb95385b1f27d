/**
 * `--plot FILE`: client latency (p50 and p99) against throughput, one point per step, as a self-contained SVG
 * (no script, no external font or stylesheet), so it opens in any browser and embeds in a report as is.
 *
 * Both axes start at zero, so the chart never exaggerates a difference, and end at a "nice" value (1, 2 or 5 ×
 * 10^k steps, five or so ticks). Points are joined in the order the steps ran: a server past saturation shows up
 * as the line bending back (more load, no more throughput, more latency), which is the knee the chart is for.
 */

/** One step on the chart. */
export interface PlotPoint {
  /** Shown beside the point and in its tooltip: "c=4", "250/s". */
  label: string
  /** Inferences per second. */
  throughput: number
  p50Ms: number
  p99Ms: number
}

/** The chart's texts. */
export interface PlotOptions {
  title: string
  /** A second, smaller line under the title (the run's settings). */
  subtitle?: string
}

const WIDTH = 820
const HEIGHT = 534
const MARGIN = { left: 80, right: 50, top: 84, bottom: 64 }
const SERIES = [
  { key: 'p50Ms', name: 'p50 latency', color: '#1f77b4', dash: '' },
  { key: 'p99Ms', name: 'p99 latency', color: '#d62728', dash: '6 4' }
] as const

/** Escapes text for XML content and attribute values. */
export function escapeXml (s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]!)
}

/**
 * Evenly spaced ticks from 0 covering `max`: the step is 1, 2 or 5 × 10^k, chosen for about `target` intervals.
 *
 * @returns the tick values (the last one is at least `max`) and the decimals needed to print them
 */
export function niceTicks (max: number, target = 5): { ticks: number[], decimals: number } {
  const top = max > 0 && Number.isFinite(max) ? max : 1
  const raw = top / target
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)))
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw)!
  const decimals = Math.max(0, -Math.floor(Math.log10(step)))
  const count = Math.ceil(top / step - 1e-9)
  // Each tick from its index, rounded to the step's decimals: no 0.30000000000000004.
  const ticks = Array.from({ length: count + 1 }, (_, i) => Number((i * step).toFixed(decimals)))
  return { ticks, decimals }
}

const fmt = (n: number): string => String(Math.round(n * 100) / 100)

/**
 * Draws the chart.
 *
 * @param points the steps, in the order they ran; at least one
 * @param options the title and subtitle
 * @returns the SVG document
 */
export function renderLatencyPlot (points: readonly PlotPoint[], options: PlotOptions): string {
  const plotW = WIDTH - MARGIN.left - MARGIN.right
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom
  const x = niceTicks(Math.max(0, ...points.map((p) => p.throughput)))
  const y = niceTicks(Math.max(0, ...points.map((p) => Math.max(p.p50Ms, p.p99Ms))))
  const xMax = x.ticks[x.ticks.length - 1]!
  const yMax = y.ticks[y.ticks.length - 1]!
  const px = (v: number): number => MARGIN.left + (v / xMax) * plotW
  const py = (v: number): number => MARGIN.top + plotH - (v / yMax) * plotH
  const bottom = MARGIN.top + plotH
  const right = MARGIN.left + plotW

  const out: string[] = []
  out.push('<?xml version="1.0" encoding="UTF-8"?>')
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" ` +
    'font-family="Helvetica, Arial, sans-serif" font-size="12">')
  out.push(`<title>${escapeXml(options.title)}</title>`)
  out.push(`<rect x="0" y="0" width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`)
  out.push(`<text x="${WIDTH / 2}" y="26" text-anchor="middle" font-size="16" font-weight="bold">${escapeXml(options.title)}</text>`)
  if (options.subtitle !== undefined) {
    out.push(`<text x="${WIDTH / 2}" y="46" text-anchor="middle" fill="#555555">${escapeXml(options.subtitle)}</text>`)
  }

  // Grid and ticks.
  out.push('<g class="grid" stroke="#e5e5e5" stroke-width="1">')
  for (const t of x.ticks) out.push(`<line x1="${fmt(px(t))}" y1="${MARGIN.top}" x2="${fmt(px(t))}" y2="${bottom}"/>`)
  for (const t of y.ticks) out.push(`<line x1="${MARGIN.left}" y1="${fmt(py(t))}" x2="${right}" y2="${fmt(py(t))}"/>`)
  out.push('</g>')
  out.push('<g class="axes" stroke="#333333" stroke-width="1">')
  out.push(`<line x1="${MARGIN.left}" y1="${bottom}" x2="${right}" y2="${bottom}"/>`)
  out.push(`<line x1="${MARGIN.left}" y1="${MARGIN.top}" x2="${MARGIN.left}" y2="${bottom}"/>`)
  for (const t of x.ticks) out.push(`<line x1="${fmt(px(t))}" y1="${bottom}" x2="${fmt(px(t))}" y2="${bottom + 5}"/>`)
  for (const t of y.ticks) out.push(`<line x1="${MARGIN.left - 5}" y1="${fmt(py(t))}" x2="${MARGIN.left}" y2="${fmt(py(t))}"/>`)
  out.push('</g>')
  out.push('<g class="tick-labels" fill="#333333">')
  for (const t of x.ticks) out.push(`<text x="${fmt(px(t))}" y="${bottom + 19}" text-anchor="middle">${t.toFixed(x.decimals)}</text>`)
  for (const t of y.ticks) out.push(`<text x="${MARGIN.left - 9}" y="${fmt(py(t) + 4)}" text-anchor="end">${t.toFixed(y.decimals)}</text>`)
  out.push('</g>')
  out.push(`<text class="x-label" x="${fmt(MARGIN.left + plotW / 2)}" y="${HEIGHT - 18}" text-anchor="middle" font-size="13">Throughput (inferences/second)</text>`)
  out.push(`<text class="y-label" transform="translate(22 ${fmt(MARGIN.top + plotH / 2)}) rotate(-90)" text-anchor="middle" font-size="13">Client latency (ms)</text>`)

  // The series: a line through the points in step order, a marker per point with its figures as a tooltip.
  for (const s of SERIES) {
    const coords = points.map((p) => `${fmt(px(p.throughput))},${fmt(py(p[s.key]))}`)
    out.push(`<g class="series" data-series="${s.name}">`)
    if (coords.length > 1) {
      out.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2"${s.dash === '' ? '' : ` stroke-dasharray="${s.dash}"`} points="${coords.join(' ')}"/>`)
    }
    for (const p of points) {
      const tip = `${p.label}: ${fmt(p.throughput)} infer/s, ${s.name} ${p[s.key].toFixed(3)} ms`
      out.push(`<circle cx="${fmt(px(p.throughput))}" cy="${fmt(py(p[s.key]))}" r="4" fill="${s.color}"><title>${escapeXml(tip)}</title></circle>`)
    }
    out.push('</g>')
  }
  // Step labels beside the p99 markers (the upper series, so they clear the p50 line).
  out.push('<g class="point-labels" fill="#555555" font-size="10">')
  for (const p of points) out.push(`<text x="${fmt(px(p.throughput) + 6)}" y="${fmt(py(p.p99Ms) - 6)}">${escapeXml(p.label)}</text>`)
  out.push('</g>')

  // Legend in the top margin, right-aligned over the plot: inside the plot it would hide whichever point landed
  // under it, and the low-throughput, high-latency corner is where a saturated step's points land.
  const itemWidth = 120
  const ly = MARGIN.top - 14
  out.push('<g class="legend">')
  for (const [i, s] of SERIES.entries()) {
    const lx = right - (SERIES.length - i) * itemWidth
    out.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 28}" y2="${ly}" stroke="${s.color}" stroke-width="2"${s.dash === '' ? '' : ` stroke-dasharray="${s.dash}"`}/>`)
    out.push(`<circle cx="${lx + 14}" cy="${ly}" r="4" fill="${s.color}"/>`)
    out.push(`<text x="${lx + 36}" y="${ly + 4}">${s.name}</text>`)
  }
  out.push('</g>')
  out.push('</svg>')
  return out.join('\n') + '\n'
}
