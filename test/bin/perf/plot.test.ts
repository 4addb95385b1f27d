import t from 'tap'
import { escapeXml, niceTicks, renderLatencyPlot } from '../../../bin/perf/plot.ts'
import { checkWellFormedXml } from './xml.ts'

t.test('nice ticks: 1, 2 or 5 x 10^k steps from 0, covering the maximum', async t => {
  t.strictSame(niceTicks(187), { ticks: [0, 50, 100, 150, 200], decimals: 0 })
  t.strictSame(niceTicks(1000), { ticks: [0, 200, 400, 600, 800, 1000], decimals: 0 })
  t.strictSame(niceTicks(0.9), { ticks: [0, 0.2, 0.4, 0.6, 0.8, 1], decimals: 1 })
  t.strictSame(niceTicks(0.03), { ticks: [0, 0.01, 0.02, 0.03], decimals: 2 }, 'no 0.030000000000000002')
  t.strictSame(niceTicks(0), { ticks: [0, 0.2, 0.4, 0.6, 0.8, 1], decimals: 1 }, 'an empty chart still has axes')
  t.strictSame(niceTicks(7), { ticks: [0, 2, 4, 6, 8], decimals: 0 })
})

t.test('the chart is well-formed, self-contained SVG with every point, axes, ticks and a legend', async t => {
  const points = [
    { label: 'c=1', throughput: 180, p50Ms: 5.2, p99Ms: 7.9 },
    { label: 'c=2', throughput: 350.5, p50Ms: 5.6, p99Ms: 9.1 },
    { label: 'c=4', throughput: 402, p50Ms: 9.9, p99Ms: 21.4 }
  ]
  const svg = renderLatencyPlot(points, { title: 'sim <&> "model"', subtitle: "http/json, batch 1, 'quoted'" })
  t.doesNotThrow(() => checkWellFormedXml(svg))
  t.match(svg, /^<\?xml version="1\.0" encoding="UTF-8"\?>\n<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" /)
  t.notMatch(svg, /<script|href=|@import|url\(/, 'nothing external, nothing executable')
  t.match(svg, 'sim &lt;&amp;&gt; &quot;model&quot;')
  t.match(svg, 'http/json, batch 1, &apos;quoted&apos;')

  for (const name of ['p50 latency', 'p99 latency']) {
    const series = svg.slice(svg.indexOf(`data-series="${name}"`))
    const group = series.slice(0, series.indexOf('</g>'))
    t.equal(group.match(/<circle /g)?.length, 3, `${name}: a marker per step`)
    t.equal(group.match(/<polyline /g)?.length, 1, `${name}: one line through them`)
  }
  t.match(svg, '<title>c=4: 402 infer/s, p99 latency 21.400 ms</title>')
  // x axis to 500 (step 100), y axis to 25 ms (step 5).
  for (const tick of ['>0<', '>100<', '>500<', '>25<']) t.match(svg, tick)
  t.match(svg, 'Throughput (inferences/second)')
  t.match(svg, 'Client latency (ms)')
  t.match(svg, /class="legend"[\s\S]*p50 latency[\s\S]*p99 latency/)
  // The c=1 point, in pixels: x = 80 + 180/500 × 690, y = 84 + 386 - 7.9/25 × 386.
  t.match(svg, '<circle cx="328.4" cy="348.02" r="4" fill="#d62728">')

  const one = renderLatencyPlot([points[0]!], { title: 'one' })
  t.doesNotThrow(() => checkWellFormedXml(one))
  t.notMatch(one, '<polyline', 'a single point has no line')
  t.doesNotThrow(() => checkWellFormedXml(renderLatencyPlot([], { title: 'none' })))
  t.equal(escapeXml(`<a href="x">'&'</a>`), '&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;')
})

t.test('the test\'s XML checker rejects what is not well-formed', async t => {
  for (const bad of ['<a><b></a></b>', '<a>', '<a x="1" x="2"/>', '<a>&nope</a>', '<a/><b/>', '<a x=1/>']) {
    t.throws(() => checkWellFormedXml(bad), bad)
  }
  t.doesNotThrow(() => checkWellFormedXml('<?xml version="1.0"?>\n<a x="1"><b/>text &amp; more<!-- c --></a>\n'))
})
