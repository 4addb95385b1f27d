/**
 * Every benchmark still runs at HEAD: each is started from dist/ (built by npm test's pretest) with its shortest
 * settings, about a second of load, and must exit 0 with its one JSON line last. The figures are not judged: this
 * only catches a bench that broke (a flag a child process no longer takes, a moved module), as
 * bench/routing-quality once did without anyone noticing.
 *
 * Some benches need HAProxy, NGINX and wrk (Debian packages). Without them those are skipped with the command to
 * install them; `.ci/run` installs them and sets FLOTILLA_BENCH_TOOLS=required, so in CI a missing tool fails.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../common/package-root.ts'
import { childEnv } from '../helpers/processes.ts'

const ROOT = PACKAGE_ROOT
const DIST = join(ROOT, 'dist', 'bench')

interface Smoke {
  /** Environment that makes the run short. */
  readonly env: Record<string, string>
  /** Debian tools it starts. */
  readonly tools?: readonly string[]
  readonly args?: readonly string[]
}

const SMOKE: Record<string, Smoke> = {
  'balancer-pick': { env: { BENCH_PICKS: '1000', BENCH_SIZES: '3', BENCH_ROUNDS: '1' } },
  native: { env: { BENCH_MODELS: 'mlp', BENCH_BATCHES: '1', BENCH_SIZES: '64', BENCH_REPEATS: '1', BENCH_WINDOW_MS: '100' } },
  batching: {
    env: { BENCH_DURATION_S: '1', BENCH_WARMUP_S: '0', BENCH_CONCURRENCY: '1', BENCH_MODELS: 'simulated', BENCH_OVERHEAD_N: '100' },
    tools: ['wrk']
  },
  'proxy-vs-haproxy': {
    env: { BENCH_TARGETS: 'haproxy,nginx,gateway', BENCH_DURATION_S: '1', BENCH_WARMUP_S: '0', BENCH_ROUNDS: '1', BENCH_CONNECTIONS: '4', BENCH_THREADS: '1' },
    tools: ['haproxy', 'nginx', 'wrk']
  },
  'routing-quality': {
    env: { BENCH_TARGETS: 'haproxy-roundrobin,round_robin', BENCH_DURATION_S: '1', BENCH_WARMUP_S: '0', BENCH_ROUNDS: '1', BENCH_CONNECTIONS: '16' },
    tools: ['haproxy']
  },
  protocol: {
    env: { BENCH_CASES: 'simple,upstream', BENCH_TARGETS: 'gateway', BENCH_DURATION_S: '1', BENCH_WARMUP_S: '0', BENCH_ROUNDS: '1', BENCH_SIMPLE_RATE: '50', BENCH_UPSTREAM_N: '20', BENCH_CONCURRENCY: '1' }
  },
  cache: {
    env: {
      BENCH_DURATION_S: '1', BENCH_WARMUP_S: '0', BENCH_OVERLOAD: '0.5', BENCH_CACHED_FACTOR: '1', BENCH_CAPACITY_S: '0',
      BENCH_CPU_DURATION_S: '1', BENCH_CPU_ROUNDS: '1', BENCH_CPU_LOADED_RPS: '0',
      BENCH_CPU_IDLE_S: '0', BENCH_COALESCE_N: '8', BENCH_REDIS: 'skip'
    }
  },
  discovery: { env: { BENCH_ROUNDS: '1', BENCH_RATE: '20', BENCH_PATHS: 'consul' } },
  'json-memory': { env: { BENCH_SIZES_KIB: '256', BENCH_CASES: 'FP32-pixels,BYTES', BENCH_FORMS: 'json,binary' } }
}

/** Modules of the benches above, not benches themselves (open-loop is routing-quality's and cache's load generator). */
const NOT_BENCHES = new Set(['support', 'arrivals', 'open-loop', 'cpuprofile-summary'])

function missingTools (tools: readonly string[]): string[] {
  return tools.filter((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0)
}

/** Runs a bench to its end; resolves with its exit code and output. */
function runBench (name: string, env: Record<string, string>, args: readonly string[] = []): Promise<{ code: number | null, out: string, err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(DIST, `${name}.js`), ...args], { env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d: Buffer) => { out += d.toString() })
    child.stderr.on('data', (d: Buffer) => { err += d.toString() })
    const timer = setTimeout(() => child.kill('SIGTERM'), 90_000)
    child.once('exit', (code) => {
      clearTimeout(timer)
      resolve({ code, out, err })
    })
  })
}

t.test('every bench in bench/ has a smoke run here', async (t) => {
  const benches = readdirSync(join(ROOT, 'bench')).filter((f) => f.endsWith('.ts')).map((f) => f.slice(0, -3))
  t.strictSame(benches.filter((b) => !NOT_BENCHES.has(b) && SMOKE[b] === undefined), [], 'a new bench needs a line in SMOKE')
})

t.test('each bench runs for a second and ends with its JSON line', async (t) => {
  const required = process.env.FLOTILLA_BENCH_TOOLS === 'required'
  // Three lanes at once, each bench in a lane after the other: they are short and mostly wait for the processes they
  // start, but those that pick free ports for HAProxy and NGINX must not race each other for them (one lane), and
  // protocol, the longest (a load-generator process per cell), gets a lane to itself. The loads are light (few
  // connections): this checks that each bench runs to its JSON line, not what it measures, and the suite shares two
  // cores with other test files.
  const one = async ([name, smoke]: [string, Smoke]): Promise<void> => {
    if (!existsSync(join(DIST, `${name}.js`))) {
      t.fail(`dist/bench/${name}.js is missing: run 'npm run build' (npm test does it first)`)
      return
    }
    const missing = missingTools(smoke.tools ?? [])
    if (missing.length > 0) {
      const why = `${name} needs ${missing.join(', ')} (apt-get install -y haproxy nginx wrk)`
      if (required) t.fail(why)
      else t.ok(true, why, { skip: why })
      return
    }
    const started = Date.now()
    const { code, out, err } = await runBench(name, smoke.env, smoke.args)
    t.equal(code, 0, `${name} exits 0 (${((Date.now() - started) / 1000).toFixed(1)} s)`, { stderr: err.split('\n').slice(-15).join('\n') })
    const last = out.trim().split('\n').at(-1) ?? ''
    let parsed: { bench?: unknown } | undefined
    try {
      parsed = JSON.parse(last) as { bench?: unknown }
    } catch {
      parsed = undefined
    }
    t.equal(parsed?.bench, name, `${name} ends with its JSON line`, { last: last.slice(0, 200) })
  }
  const lane = async (entries: Array<[string, Smoke]>): Promise<void> => {
    for (const entry of entries) await one(entry)
  }
  const all = Object.entries(SMOKE)
  const alone = (name: string): boolean => name === 'protocol'
  await Promise.all([
    lane(all.filter(([, s]) => s.tools !== undefined)),
    lane(all.filter(([name, s]) => s.tools === undefined && alone(name))),
    lane(all.filter(([name, s]) => s.tools === undefined && !alone(name)))
  ])
})

t.test('cpuprofile-summary reads a profile', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'flotilla-profile-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  execFileSync(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${dir}`, '-e', 'let x = 0; for (let i = 0; i < 1e6; i++) x += i'])
  const profile = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'))
  t.ok(profile !== undefined, 'node wrote a profile')
  const { code, out } = await runBench('cpuprofile-summary', {}, [join(dir, profile!), '5'])
  t.equal(code, 0)
  t.match(out, /inclusive/)
})
