import t from 'tap'
import {
  Canary,
  DEFAULT_AUTO_ROLLBACK,
  stickyPoint,
  type AutoRollbackSettings,
  type CanarySettings,
  type RollbackEvent
} from '../../../gateway/canary/canary.ts'
import { seededRandom } from '../../../common/seeded-random.ts'

interface Options {
  settings?: Partial<CanarySettings>
  autoRollback?: Partial<AutoRollbackSettings>
  random?: () => number
}

/** A canary on a fake clock (`clock.now`, moved by hand), recording every rollback event. */
function setup (options: Options = {}) {
  const clock = { now: 0 }
  const events: RollbackEvent[] = []
  const settings: CanarySettings = {
    split: { kind: 'version', baselineVersion: 1, canaryVersion: 2 },
    percent: 10,
    forceHeader: undefined,
    stickyHeader: undefined,
    ...options.settings,
    autoRollback: { ...DEFAULT_AUTO_ROLLBACK, ...options.autoRollback }
  }
  const canary = new Canary('resnet50', settings, {
    now: () => clock.now,
    random: options.random ?? seededRandom(1),
    onRollback: (event) => events.push(event)
  })
  return { clock, canary, events }
}

/** A header lookup for a request carrying `headers` (lower-case names). */
function headers (values: Record<string, string> = {}): (name: string) => string | undefined {
  return (name) => values[name]
}

const none = headers()

function repeat (n: number, fn: () => void): void {
  for (let i = 0; i < n; i++) fn()
}

t.test('DEFAULT_AUTO_ROLLBACK is frozen with the documented values', async t => {
  t.strictSame(DEFAULT_AUTO_ROLLBACK, {
    enabled: true,
    windowMs: 60_000,
    minRequests: 100,
    errorRateFactor: 2,
    minErrorRate: 0.01,
    p99Factor: 2,
    minP99IncreaseMs: 10
  })
  t.ok(Object.isFrozen(DEFAULT_AUTO_ROLLBACK))
})

t.test('a 10% canary gets 10% of 2000 requests, within 4 sigma; fractional shares work too', async t => {
  const { canary } = setup({ random: seededRandom(42) })
  let hits = 0
  repeat(2000, () => { if (canary.side(none) === 'canary') hits++ })
  const sigma = Math.sqrt(2000 * 0.1 * 0.9)
  t.ok(Math.abs(hits - 200) <= 4 * sigma, `${hits} canary requests of 2000, expected 200 ± ${(4 * sigma).toFixed(0)}`)

  const half = setup({ settings: { percent: 0.5 }, random: seededRandom(7) }).canary
  let halfHits = 0
  repeat(20_000, () => { if (half.side(none) === 'canary') halfHits++ })
  const halfSigma = Math.sqrt(20_000 * 0.005 * 0.995)
  t.ok(Math.abs(halfHits - 100) <= 4 * halfSigma, `${halfHits} canary requests of 20000 at 0.5%, expected 100 ± ${(4 * halfSigma).toFixed(0)}`)
})

t.test('the force header sends its value to the canary, other values not; it still does after a rollback', async t => {
  const asked: string[] = []
  // random 0.99 would send everything else to the baseline; percent 0 would too.
  const { canary } = setup({
    settings: { percent: 0, forceHeader: { name: 'x-canary', value: 'yes' } },
    random: () => 0.99
  })
  const lookup = (values: Record<string, string>) => (name: string) => { asked.push(name); return values[name] }
  t.equal(canary.side(lookup({ 'x-canary': 'yes' })), 'canary')
  t.equal(canary.side(lookup({ 'x-canary': 'no' })), 'baseline')
  t.equal(canary.side(lookup({ 'x-canary': 'YES' })), 'baseline', 'the value is compared exactly')
  t.equal(canary.side(lookup({})), 'baseline')
  t.ok(asked.every(name => name === 'x-canary'), 'the header is asked for by its lower-case name')

  // random 0 would send every request to a live 50% canary, so only the rollback keeps them off it.
  const rolled = setup({ settings: { percent: 50, forceHeader: { name: 'x-canary', value: 'yes' } }, random: () => 0 }).canary
  t.equal(rolled.side(none), 'canary', 'before the rollback, random 0 is on the canary')
  rolled.rollback('by hand')
  t.equal(rolled.side(none), 'baseline')
  t.equal(rolled.side(headers({ 'x-canary': 'no' })), 'baseline')
  t.equal(rolled.side(headers({ 'x-canary': 'yes' })), 'canary', 'an operator still reaches a rolled-back canary')
})

t.test('sticky: a key keeps its side on every call and on another replica, whatever the random draws', async t => {
  const settings = { percent: 50, stickyHeader: 'x-user' }
  const a = setup({ settings, random: seededRandom(1) }).canary
  const b = setup({ settings, random: seededRandom(2) }).canary
  let canaryKeys = 0
  for (let i = 0; i < 200; i++) {
    const request = headers({ 'x-user': `user-${i}` })
    const first = a.side(request)
    if (first === 'canary') canaryKeys++
    for (let k = 0; k < 20; k++) {
      if (a.side(request) !== first || b.side(request) !== first) {
        t.fail(`user-${i} changed sides`)
        return
      }
    }
  }
  t.ok(canaryKeys > 50 && canaryKeys < 150, `both sides have keys (${canaryKeys} of 200 on the canary)`)
  t.equal(a.side(headers({ 'x-user': 'user-149' })), 'canary', 'the side follows stickyPoint: user-149 is at 0.0022')

  // Without the header, or with an empty one, the draw decides: random 0 is the canary, 0.99 the baseline.
  const low = setup({ settings, random: () => 0 }).canary
  const high = setup({ settings, random: () => 0.99 }).canary
  t.equal(low.side(none), 'canary')
  t.equal(high.side(none), 'baseline')
  t.equal(low.side(headers({ 'x-user': '' })), 'canary', 'an empty key is no key')
  t.equal(high.side(headers({ 'x-user': '' })), 'baseline', 'an empty key is no key')
})

t.test('sticky: keys spread by the share, and a key on the canary stays there as the share grows', async t => {
  const keys = Array.from({ length: 10_000 }, (_, i) => headers({ 'x-user': `user-${i}` }))
  const onCanary = (percent: number): Set<number> => {
    const { canary } = setup({ settings: { percent, stickyHeader: 'x-user' }, random: () => 0 })
    const set = new Set<number>()
    keys.forEach((request, i) => { if (canary.side(request) === 'canary') set.add(i) })
    return set
  }
  const at5 = onCanary(5)
  const at10 = onCanary(10)
  const at20 = onCanary(20)
  const at50 = onCanary(50)
  for (const [percent, set] of [[5, at5], [10, at10], [20, at20], [50, at50]] as const) {
    const p = percent / 100
    const sigma = Math.sqrt(10_000 * p * (1 - p))
    t.ok(Math.abs(set.size - 10_000 * p) <= 4 * sigma, `${set.size} of 10000 keys at ${percent}%`)
  }
  const leftAt10 = [...at5].filter(i => !at10.has(i))
  const leftAt50 = [...at5].filter(i => !at50.has(i))
  t.strictSame(leftAt10, [], 'no 5% key leaves the canary at 10%')
  t.strictSame(leftAt50, [], 'no 5% key leaves the canary at 50%')
  t.strictSame([...at10].filter(i => !at20.has(i)), [], 'nor a 10% key at 20%')
})

t.test('stickyPoint: pinned values, in [0, 1), FNV-1a over UTF-8 then fmix32', async t => {
  // Pinned: a change of hash moves callers between sides, so it must be deliberate.
  t.equal(stickyPoint('user-42'), 0.48501691734418273)
  t.equal(stickyPoint('é€😀'), 0.9407682865858078)
  t.equal(stickyPoint(''), 0.6689221884589642)

  // The textbook algorithm over Node's UTF-8 bytes, checked against FNV-1a's published vectors first.
  const fnv1a = (s: string): number => {
    let h = 0x811c9dc5
    for (const byte of Buffer.from(s, 'utf8')) h = Math.imul(h ^ byte, 0x01000193)
    return h >>> 0
  }
  t.equal(fnv1a('a'), 0xe40c292c)
  t.equal(fnv1a('foobar'), 0xbf9cf968)
  const fmix32 = (h: number): number => {
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35)
    return (h ^ (h >>> 16)) >>> 0
  }
  const samples = ['', 'a', 'foobar', 'user-1', 'ÿ', '߿', 'ࠀ', '日本語', '😀x', 'a\ud800b', '\udc00', 'z\ud83d', '\uffff']
  for (const s of samples) t.equal(stickyPoint(s), fmix32(fnv1a(s)) / 2 ** 32, `${JSON.stringify(s)} as UTF-8`)

  const random = seededRandom(3)
  for (let i = 0; i < 1000; i++) {
    const key = String(random())
    const p = stickyPoint(key)
    if (!(p >= 0 && p < 1)) t.fail(`${key} -> ${p}`)
  }
  t.equal(stickyPoint('\uffff'.repeat(3)) < 1, true)
})

t.test('percent 0 and 100, and promote', async t => {
  const zero = setup({ settings: { percent: 0, stickyHeader: 'x-user' }, random: () => 0 }).canary
  t.equal(zero.side(none), 'baseline', 'random 0 is not below 0%')
  t.equal(zero.side(headers({ 'x-user': 'user-149' })), 'baseline', 'nor is the lowest sticky key')
  t.equal(zero.percent, 0)

  const all = setup({ settings: { percent: 100, stickyHeader: 'x-user' }, random: () => 0.999999 }).canary
  t.equal(all.side(none), 'canary')
  t.equal(all.side(headers({ 'x-user': 'user-0' })), 'canary')
  t.equal(all.percent, 100)

  const { canary, events } = setup({ settings: { percent: 5, stickyHeader: 'x-user' }, random: () => 0.99 })
  t.equal(canary.side(none), 'baseline')
  t.equal(canary.promoted, false)
  canary.promote()
  t.equal(canary.promoted, true)
  t.equal(canary.percent, 100)
  t.equal(canary.side(none), 'canary')
  t.equal(canary.side(headers({ 'x-user': 'user-0' })), 'canary')
  repeat(500, () => canary.record('baseline', true, 5))
  repeat(500, () => canary.record('canary', false, 5))
  t.equal(events.length, 0, 'a promoted canary is not judged')
  t.equal(canary.percent, 100)

  canary.rollback('undo the promote')
  t.equal(canary.promoted, false)
  t.equal(canary.percent, 0)
  t.equal(canary.side(none), 'baseline')
})

t.test('a failing canary is rolled back as soon as both sides have minRequests, and only once', async t => {
  const { clock, canary, events } = setup({ random: () => 0 })
  repeat(1000, () => canary.record('baseline', true, 5))
  repeat(99, () => canary.record('canary', false, 5))
  t.equal(events.length, 0, 'no verdict at 99 canary requests')
  t.equal(canary.side(none), 'canary')
  canary.record('canary', false, 5)
  t.equal(events.length, 1)
  const event = events[0]!
  t.equal(event.model, 'resnet50')
  t.equal(event.automatic, true)
  t.equal(event.reason,
    'canary error rate 100.0% > 2x baseline 0.0% (min 1.0%) over the last 60 s (100 canary, 1000 baseline requests)')
  t.strictSame(event.canary, { requests: 100, errors: 100, error_rate: 1, p50_ms: event.canary.p50_ms, p99_ms: event.canary.p99_ms })
  t.equal(event.baseline.requests, 1000)
  t.equal(event.baseline.errors, 0)
  t.equal(canary.percent, 0)
  t.equal(canary.side(none), 'baseline', 'random 0 no longer reaches the canary')

  clock.now += 10_000
  repeat(500, () => canary.record('canary', false, 5))
  t.equal(events.length, 1, 'no second rollback')
  t.match(canary.view().rolled_back, { automatic: true, ms_ago: 10_000 })
})

t.test('no verdict until the baseline has minRequests too', async t => {
  const { canary, events } = setup()
  repeat(99, () => canary.record('baseline', true, 5))
  repeat(1000, () => canary.record('canary', false, 5))
  t.equal(events.length, 0)
  canary.record('baseline', true, 5)
  t.equal(events.length, 1, 'the 100th baseline request brings the verdict')
  t.match(events[0]!.reason, /^canary error rate 100\.0% .* \(1000 canary, 100 baseline requests\)$/)
})

t.test('error rule: within the factor or under the minimum error rate is no rollback', async t => {
  const within = setup()
  // baseline 2%, canary 3% (spread evenly, with a verdict every 100 canary requests): under 2 x 2%.
  for (let i = 0; i < 300; i++) within.canary.record('baseline', i % 50 !== 0, 5)
  for (let i = 0; i < 300; i++) {
    if (i % 100 === 0) within.clock.now += 3000
    within.canary.record('canary', i % 100 >= 3, 5)
  }
  const { baseline, canary } = within.canary.stats()
  t.strictSame([baseline.error_rate, canary.error_rate], [0.02, 0.03])
  t.equal(within.events.length, 0, '3% against 2% is within the factor')
  // Failures until the next verdict (throttled), which then sees 29 of 321.
  repeat(20, () => within.canary.record('canary', false, 5))
  t.equal(within.events.length, 0, 'no verdict before windowMs / 20 has passed')
  within.clock.now += 3000
  within.canary.record('canary', true, 5)
  t.equal(within.events.length, 1, 'but 9% against 2% is over the factor')

  // baseline 0%, canary 0.5%: under the 1% floor; then 2% is over it.
  const floor = setup()
  repeat(200, () => floor.canary.record('baseline', true, 5))
  floor.canary.record('canary', false, 5)
  repeat(199, () => floor.canary.record('canary', true, 5))
  t.equal(floor.events.length, 0, '0.5% against 0% is under the 1% floor')
  repeat(3, () => floor.canary.record('canary', false, 5))
  floor.clock.now += 3000 // the throttle: the next verdict comes windowMs / 20 after the last
  floor.canary.record('canary', true, 5)
  t.equal(floor.events.length, 1, '2% is over it')
  t.equal(floor.events[0]!.reason,
    'canary error rate 2.0% > 2x baseline 0.0% (min 1.0%) over the last 60 s (204 canary, 200 baseline requests)')
})

t.test('verdicts are throttled to one per windowMs / 20', async t => {
  const { clock, canary, events } = setup()
  repeat(100, () => canary.record('baseline', true, 5))
  repeat(100, () => canary.record('canary', true, 5))
  // That last request brought a verdict (all well); the next may come 3 s later.
  repeat(300, () => canary.record('canary', false, 5))
  t.equal(events.length, 0, 'failures right after a verdict wait for the next one')
  clock.now += 2999
  canary.record('canary', false, 5)
  t.equal(events.length, 0)
  clock.now += 1
  canary.record('canary', false, 5)
  t.equal(events.length, 1)
})

t.test('p99 rule: a slow canary is rolled back; a small absolute increase is not', async t => {
  const slow = setup()
  repeat(200, () => slow.canary.record('baseline', true, 100))
  repeat(100, () => slow.canary.record('canary', true, 250))
  t.equal(slow.events.length, 1)
  t.match(slow.events[0]!.reason,
    /^canary p99 2\d\d ms > 2x baseline p99 (9\d(\.\d)?|10\d) ms \(min \+10 ms\) over the last 60 s \(100 canary, 200 baseline requests\)$/)
  t.equal(slow.events[0]!.automatic, true)

  const within = setup()
  repeat(200, () => within.canary.record('baseline', true, 100))
  repeat(200, () => within.canary.record('canary', true, 150))
  t.equal(within.events.length, 0, '1.5x is within the factor')

  // A fast model: 1 ms against 5 ms is 5x, but only +4 ms.
  const fast = (minP99IncreaseMs: number) => {
    const { canary, events } = setup({ autoRollback: { minP99IncreaseMs } })
    repeat(200, () => canary.record('baseline', true, 1))
    repeat(200, () => canary.record('canary', true, 5))
    return events
  }
  t.equal(fast(10).length, 0, 'under minP99IncreaseMs: noise, not a regression')
  const strict = fast(3)
  t.equal(strict.length, 1, 'the same figures with a 3 ms floor are a regression')
  t.match(strict[0]!.reason, /^canary p99 .* \(min \+3 ms\)/)
})

t.test('window expiry: old failures slide out of the window', async t => {
  const { clock, canary, events } = setup()
  repeat(500, () => canary.record('canary', false, 5))
  repeat(50, () => canary.record('baseline', true, 5))
  t.equal(events.length, 0, 'the baseline is below minRequests')
  clock.now = 30_000
  t.strictSame([canary.stats().canary.requests, canary.stats().canary.errors], [500, 500], 'still in the window at 30 s')
  clock.now = 60_000
  t.strictSame(canary.stats().canary, { requests: 0, errors: 0, error_rate: 0, p50_ms: null, p99_ms: null }, 'gone at 60 s')
  repeat(100, () => canary.record('baseline', true, 5))
  repeat(100, () => canary.record('canary', true, 5))
  t.equal(events.length, 0, 'the old failures no longer count')
  t.strictSame([canary.stats().canary.requests, canary.stats().canary.errors], [100, 0])
  t.equal(canary.stats().baseline.requests, 100, 'the reused sub-bucket was cleared')
})

t.test('disabled auto rollback never triggers; a manual rollback is not automatic', async t => {
  const { clock, canary, events } = setup({ autoRollback: { enabled: false } })
  repeat(1000, () => canary.record('baseline', true, 5))
  repeat(1000, () => { clock.now += 100; canary.record('canary', false, 500) })
  t.equal(events.length, 0)
  t.equal(canary.percent, 10)

  canary.rollback('latency looks off')
  t.equal(events.length, 1)
  t.equal(events[0]!.automatic, false)
  t.equal(events[0]!.reason, 'latency looks off')
  // The figures at the time: the window is the current 6 s sub-bucket (96-102 s) and the nine before it, so from
  // 42 s to 100 s, one failure every 100 ms.
  t.equal(events[0]!.canary.errors, 581, 'the figures at the time: the window\'s canary failures')
  t.equal(canary.percent, 0)
  clock.now += 1234
  t.strictSame(canary.view().rolled_back, { automatic: false, reason: 'latency looks off', ms_ago: 1234 })
})

t.test('stats: null percentiles when empty, estimates within the histogram precision, extremes clamped', async t => {
  const { canary } = setup()
  t.strictSame(canary.stats(), {
    baseline: { requests: 0, errors: 0, error_rate: 0, p50_ms: null, p99_ms: null },
    canary: { requests: 0, errors: 0, error_rate: 0, p50_ms: null, p99_ms: null }
  })
  for (let ms = 1; ms <= 1000; ms++) canary.record('baseline', ms % 3 !== 0, ms)
  const { baseline } = canary.stats()
  t.equal(baseline.requests, 1000)
  t.equal(baseline.errors, 333)
  t.equal(baseline.error_rate, 0.333)
  t.ok(Math.abs(baseline.p50_ms! - 500) <= 25, `p50 ${baseline.p50_ms} ≈ 500`)
  t.ok(Math.abs(baseline.p99_ms! - 990) <= 50, `p99 ${baseline.p99_ms} ≈ 990`)

  canary.record('canary', true, 0)
  canary.record('canary', true, -1)
  canary.record('canary', true, Number.NaN)
  t.ok(canary.stats().canary.p99_ms! <= 0.06, 'fast and odd values land in the first bin')
  repeat(10, () => canary.record('canary', true, 1e9))
  const p99 = canary.stats().canary.p99_ms!
  t.ok(p99 >= 120_000 && p99 <= 140_000, `slow values land in the last bin (${p99})`)

  // Unclamped, 1e30 ms would be bin 755: past sub-bucket 0's bins, inside sub-bucket 4's.
  const spill = setup()
  spill.clock.now = 24_000 // sub-bucket 4
  spill.canary.record('canary', true, 1)
  spill.clock.now = 60_000 // sub-bucket 0 again, sub-bucket 4 still in the window
  spill.canary.record('canary', true, 1e30)
  const spilled = spill.canary.stats().canary
  t.equal(spilled.requests, 2)
  t.ok(spilled.p99_ms! >= 120_000, `a huge latency stays in its own sub-bucket, in the last bin (p99 ${spilled.p99_ms})`)
})

t.test('view: every field, for a version split and a server split', async t => {
  const { clock, canary } = setup({
    settings: { percent: 12.5, forceHeader: { name: 'x-canary', value: '1' }, stickyHeader: 'x-user' },
    autoRollback: { windowMs: 30_000, minRequests: 50 }
  })
  repeat(4, () => canary.record('baseline', true, 10))
  canary.record('canary', false, 20)
  t.strictSame(canary.view(), {
    model: 'resnet50',
    split: 'version',
    baseline_version: 1,
    canary_version: 2,
    canary_servers: null,
    percent: 12.5,
    configured_percent: 12.5,
    promoted: false,
    rolled_back: null,
    force_header: { name: 'x-canary', value: '1' },
    sticky_header: 'x-user',
    auto_rollback: {
      enabled: true,
      window_ms: 30_000,
      min_requests: 50,
      error_rate_factor: 2,
      min_error_rate: 0.01,
      p99_factor: 2,
      min_p99_increase_ms: 10
    },
    // Bin midpoints, to 3 digits: 10 ms and 20 ms land in [9.45, 10.4) and [18.4, 20.3).
    baseline: { requests: 4, errors: 0, error_rate: 0, p50_ms: 9.91, p99_ms: 9.91 },
    canary: { requests: 1, errors: 1, error_rate: 1, p50_ms: 19.3, p99_ms: 19.3 }
  })
  canary.rollback('checking')
  clock.now += 500
  t.match(canary.view(), { percent: 0, configured_percent: 12.5, rolled_back: { automatic: false, reason: 'checking', ms_ago: 500 } })

  const servers = setup({ settings: { split: { kind: 'servers', canaryServers: ['gpu-7', 'gpu-8'] }, percent: 5 } }).canary
  servers.promote()
  const view = servers.view()
  t.strictSame(
    [view.split, view.baseline_version, view.canary_version, view.canary_servers, view.percent, view.configured_percent,
      view.promoted, view.force_header, view.sticky_header],
    ['servers', null, null, ['gpu-7', 'gpu-8'], 100, 5, true, null, null])
  view.canary_servers!.push('gpu-9')
  t.strictSame(servers.view().canary_servers, ['gpu-7', 'gpu-8'], 'the view is a copy')
})
