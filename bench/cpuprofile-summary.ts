/**
 * Summarises a V8 `.cpuprofile` (from `node --cpu-prof`) as two tables: where the samples landed (self time) and
 * which functions they were under (inclusive time), by function and file. What bench/README.md's profile figures
 * come from:
 *
 *   BENCH_TARGETS=gateway BENCH_GATEWAY_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" node dist/bench/proxy-vs-haproxy.js
 *   node dist/bench/cpuprofile-summary.js /tmp/prof/*.cpuprofile [rows]
 */
import { readFileSync } from 'node:fs'

interface ProfileNode {
  id: number
  callFrame: { functionName: string, url: string, lineNumber: number }
  children?: number[]
}

interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

function label (node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame
  const file = url === '' ? '' : url.replace(/^file:\/\//, '').replace(/^.*\/node_modules\//, '~/').replace(/^.*\/dist\//, 'dist/')
  return `${functionName === '' ? '(anonymous)' : functionName} ${file}${file === '' ? '' : `:${lineNumber + 1}`}`
}

function summarise (path: string, rows: number): void {
  const profile = JSON.parse(readFileSync(path, 'utf8')) as Profile
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)

  const self = new Map<string, number>()
  const inclusive = new Map<string, number>()
  let total = 0
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = profile.timeDeltas[i] ?? 0
    total += dt
    let id: number | undefined = profile.samples[i]
    const leaf = byId.get(id!)
    if (leaf === undefined) continue
    self.set(label(leaf), (self.get(label(leaf)) ?? 0) + dt)
    // Each label counts once per sample even when it recurses.
    const seen = new Set<string>()
    while (id !== undefined) {
      const node = byId.get(id)
      if (node === undefined) break
      const l = label(node)
      if (!seen.has(l)) {
        seen.add(l)
        inclusive.set(l, (inclusive.get(l) ?? 0) + dt)
      }
      id = parent.get(id)
    }
  }
  const print = (title: string, map: Map<string, number>): void => {
    console.log(`\n${title} (of ${(total / 1000).toFixed(0)} ms sampled)`)
    for (const [l, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, rows)) {
      console.log(`${(100 * us / total).toFixed(1).padStart(5)}%  ${l}`)
    }
  }
  console.log(path)
  print('self', self)
  print('inclusive', inclusive)
}

const [file, rowsArg] = process.argv.slice(2)
if (file === undefined) {
  console.error('usage: node dist/bench/cpuprofile-summary.js FILE.cpuprofile [rows]')
  process.exitCode = 2
} else {
  summarise(file, Number(rowsArg ?? 40))
}
