/** Scraping a Prometheus text endpoint in tests: every sample, and sums by label. */
import { request } from 'undici'

/** One sample of the Prometheus text format. */
export interface MetricSample { name: string, labels: Record<string, string>, value: number }

/** Scrapes a metrics port (a process with `metricsPort`, or the port): the text, and every sample in it. */
export async function scrape (target: { metricsPort: number } | number): Promise<{ text: string, samples: MetricSample[] }> {
  const port = typeof target === 'number' ? target : target.metricsPort
  const res = await request(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) })
  const text = await res.body.text()
  if (res.statusCode !== 200) throw new Error(`GET /metrics answered ${res.statusCode}: ${text}`)
  const samples: MetricSample[] = []
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line)
    if (m === null) continue
    const labels: Record<string, string> = {}
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!
    samples.push({ name: m[1]!, labels, value: Number(m[3]) })
  }
  return { text, samples }
}

/** The sum of the samples of `name` whose labels include `labels`. */
export function sumOf (samples: readonly MetricSample[], name: string, labels: Record<string, string>): number {
  return samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0)
}

/** The sample lines of `name` in a scrape, for a failure's diagnostics. */
export function linesOf (text: string, name: string): string[] {
  return text.split('\n').filter((l) => l.startsWith(name))
}
