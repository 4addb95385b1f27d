/**
 * What the process-driving benchmarks (`proxy-vs-haproxy`, `routing-quality`) share: reading parameters from the
 * environment, starting and always stopping child processes, waiting for ports with a time limit, the CPU
 * accounting behind their `cpu %`, `other %` and `steal %` columns, and printing a table. Everything listens on
 * 127.0.0.1 only.
 *
 * The child registry is module state on purpose: a benchmark is one process, and every exit path (the end of
 * `main`, a failure, Ctrl-C) has to reach every child it started, wherever it was started from.
 */
import { fork, spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { readFileSync, readdirSync } from 'node:fs'
import { request } from 'node:http'
import { createConnection, createServer } from 'node:net'
import { fileURLToPath } from 'node:url'
// `import type`: open-loop.ts is a program, and a value import would run it here.
import type { OpenLoopConfig, OpenLoopResult } from './open-loop.ts'

/** The only address the benchmarks listen on or connect to. */
export const HOST = '127.0.0.1'

/**
 * An integer from the environment, or `fallback` when unset or empty.
 *
 * @throws Error naming the variable when the value is not an integer >= `min`
 */
export function intEnv (name: string, fallback: number, min: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer >= ${min}, got '${raw}'`)
  return n
}

/**
 * A number from the environment, or `fallback` when unset or empty.
 *
 * @throws Error naming the variable when the value is not a finite number in [`min`, `max`]
 */
export function numberEnv (name: string, fallback: number, min: number, max = Number.MAX_VALUE): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isFinite(n) || n < min || n > max) {
    throw new Error(`${name} must be a number in [${min}, ${max === Number.MAX_VALUE ? '∞' : max}], got '${raw}'`)
  }
  return n
}

// ---------------------------------------------------------------------------------------------------------------
// Processes: every child is tracked from spawn, so that any exit path can stop it.

const children = new Set<ChildProcess>()

/** Registers `child` so that {@link stopAll} stops it; returns it, for `track(spawn(...))`. */
export function track (child: ChildProcess): ChildProcess {
  children.add(child)
  child.once('exit', () => children.delete(child))
  return child
}

/** Stops one child: SIGTERM, then SIGKILL if it is still there after `graceMs`. */
export async function stop (child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs)
  await exited
  clearTimeout(timer)
}

/** Stops every tracked child that is still running. */
export async function stopAll (): Promise<void> {
  await Promise.all([...children].map((c) => stop(c)))
}

/**
 * On Ctrl-C or a kill: stop every tracked child, run `cleanup` (remove the scratch folder), then leave with the
 * conventional status. `cleanup` is called at signal time, so it may be replaced after this is installed.
 */
export function stopAllOnSignals (cleanup: () => void): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      stopAll().finally(() => {
        cleanup()
        process.exit(130)
      })
    })
  }
}

/** A port that was free a moment ago (bound to port 0 and released). */
export function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, HOST, () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

/** An answer as {@link httpOnce} gives it. */
export interface HttpAnswer { status: number, headers: Record<string, string | string[] | undefined>, body: string }

/** One request to 127.0.0.1:`port` on a fresh connection (5 s deadline): status, headers and body. */
export function httpOnce (port: number, method: 'GET' | 'POST', path: string, body?: string): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = body === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
    const req = request({ host: HOST, port, method, path, agent: false, timeout: 5000, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }))
      res.on('error', reject)
    })
    req.on('timeout', () => req.destroy(new Error(`${method} ${path} on port ${port} timed out`)))
    req.on('error', reject)
    req.end(body)
  })
}

/** A `flotilla` process this bench started, with the ports it reported. */
export interface FlotillaChild {
  child: ChildProcess
  httpPort: number
  grpcPort: number
  metricsPort: number
  /** The gateway's admin port (-1 when off); absent for workers. */
  adminPort?: number
  url: string
}

/**
 * Forks the compiled `flotilla <args>` (tracked: {@link stopAll} stops it) with warnings-only logs, and resolves once
 * it reports its ports over IPC; rejects if it exits first or is not ready within 60 s.
 */
export function startFlotilla (args: readonly string[]): Promise<FlotillaChild> {
  const cli = fileURLToPath(new URL('../bin/flotilla.js', import.meta.url))
  const child = track(fork(cli, [...args], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, LOG_LEVEL: 'warn' } }))
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`flotilla ${args[0]} did not start within 60 s`)), 60_000)
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`flotilla ${args[0]} exited (${code}) before it was ready`)) })
    child.on('message', (m: { type?: string } & Omit<FlotillaChild, 'child'>) => {
      if (m.type !== 'flotilla:ready') return
      clearTimeout(timer)
      child.removeAllListeners('exit')
      resolve({ child, httpPort: m.httpPort, grpcPort: m.grpcPort, metricsPort: m.metricsPort, url: m.url, ...(m.adminPort !== undefined ? { adminPort: m.adminPort } : {}) })
    })
  })
}

/**
 * Runs the open-loop generator (`script`, open-loop.js, in its own process) with `config`; resolves with its result
 * line, or throws with its output when it fails. A guard kills it if it outlives its schedule by 30 s.
 */
export async function runOpenLoop (script: string, config: OpenLoopConfig): Promise<OpenLoopResult> {
  const child = track(spawn(process.execPath, [script, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'pipe'] }))
  let out = ''
  child.stdout?.on('data', (c: Buffer) => { out += c.toString('utf8') })
  child.stderr?.on('data', (c: Buffer) => { out += c.toString('utf8') })
  // The generator ends on its own once every request is answered or past its deadline; the guard is for a hang.
  const guard = setTimeout(() => child.kill('SIGKILL'), (config.warmupS + config.durationS) * 1000 + config.timeoutMs + 30_000)
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)))
  clearTimeout(guard)
  const line = out.split('\n').find((l) => l.startsWith('OPEN_LOOP_JSON '))
  if (code !== 0 || line === undefined) throw new Error(`the open-loop generator against port ${config.port} failed (exit ${code}):\n${out}`)
  return JSON.parse(line.slice('OPEN_LOOP_JSON '.length)) as OpenLoopResult
}

/** Resolves after `ms` milliseconds. */
export function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/**
 * Resolves once something accepts connections on `port`; throws after `timeoutMs` or if `child` exits first. The
 * default is generous: a child that is alive is starting, and a worker once took over 10 s to listen while the
 * test suite loaded both cores of a CI machine.
 */
export async function waitForPort (port: number, child: ChildProcess, what: string, timeoutMs = 30000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${what} exited (${child.exitCode ?? child.signalCode}) before listening on ${port}`)
    const open = await new Promise<boolean>((resolve) => {
      const socket = createConnection({ host: HOST, port })
      socket.once('connect', () => { socket.destroy(); resolve(true) })
      socket.once('error', () => resolve(false))
    })
    if (open) return
    await sleep(50)
  }
  throw new Error(`${what} did not listen on ${port} within ${timeoutMs} ms`)
}

// ---------------------------------------------------------------------------------------------------------------
// CPU accounting, from /proc.

/** CPU time (user + system, in clock ticks) of `pid` and its direct children, from /proc. */
export function cpuTicks (pid: number | undefined): number {
  if (pid === undefined) return 0
  let total = 0
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    let stat: string
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
    } catch {
      continue // exited meanwhile
    }
    // Fields after the parenthesised command name: state(3) ppid(4) ... utime(14) stime(15).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    const self = Number(entry) === pid
    if (self || Number(fields[1]) === pid) total += Number(fields[11]) + Number(fields[12])
  }
  return total
}

/** Clock ticks per second, the unit of every figure /proc gives. */
export const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100

/** This process's CPU time and that of its children it has reaped (a load generator, once it exited), in clock ticks. */
export function selfTicks (): number {
  const stat = readFileSync('/proc/self/stat', 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  // utime(14) stime(15) cutime(16) cstime(17), counted from state(3).
  return Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])
}

/** Whole-machine busy and steal time, in clock ticks summed over all CPUs (from /proc/stat). */
export function machineTicks (): { busy: number, steal: number, total: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number)
  // user nice system idle iowait irq softirq steal
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = fields
  return { busy: user + nice + system + irq + softirq, steal, total: user + nice + system + idle + iowait + irq + softirq + steal }
}

/** The version `command` prints, by `pattern`'s first group; throws, with the apt-get line, when it is missing. */
export function versionOf (command: string, args: string[], pattern: RegExp): string {
  const out = spawnSync(command, args, { encoding: 'utf8' })
  if (out.error !== undefined) throw new Error(`${command} is not installed (apt-get install -y haproxy nginx wrk): ${out.error.message}`)
  return pattern.exec(`${out.stdout}${out.stderr}`)?.[1] ?? 'unknown'
}

// ---------------------------------------------------------------------------------------------------------------
// Figures.

/** The median of `values` (the mean of the middle two for an even count); `values` is not reordered. */
export function median (values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** `n` rounded to `digits` decimals, for figures in tables and JSON. */
export function round (n: number, digits: number): number {
  const f = 10 ** digits
  return Math.round(n * f) / f
}

/** Prints rows of cells as aligned columns: the first column left-aligned, the others right-aligned. */
export function printTable (table: ReadonlyArray<readonly string[]>): void {
  const widths = (table[0] ?? []).map((_, i) => Math.max(...table.map((row) => (row[i] ?? '').length)))
  for (const row of table) console.log(row.map((cell, i) => i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)).join('  '))
}

/** One wrk run, as the Lua `done` hook reports it. */
export interface WrkResult {
  requests: number
  durationUs: number
  errors: { connect: number, read: number, write: number, status: number, timeout: number }
  p50Us: number
  p90Us: number
  p99Us: number
  maxUs: number
}

/**
 * A wrk Lua script that POSTs `body` (JSON) and reports the run as one `WRK_JSON {...}` line from its `done()` hook,
 * so nothing depends on wrk's human-readable units; latencies are in microseconds.
 */
export function wrkPostScript (body: string): string {
  return `wrk.method = "POST"
wrk.body = '${body}'
wrk.headers["Content-Type"] = "application/json"

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"durationUs":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"p50Us":%d,"p90Us":%d,"p99Us":%d,"maxUs":%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
`
}

/** One wrk run of `script` (see {@link wrkPostScript}) against `url`: closed-loop, `connections` at a time. */
export async function runWrkScript (options: { threads: number, connections: number, seconds: number, script: string, url: string }): Promise<WrkResult> {
  const child = track(spawn('wrk', [
    '-t', String(options.threads), '-c', String(options.connections), '-d', `${options.seconds}s`, '--timeout', '5s',
    '-s', options.script, options.url
  ], { stdio: ['ignore', 'pipe', 'pipe'] }))
  let out = ''
  child.stdout?.on('data', (c: Buffer) => { out += c.toString('utf8') })
  child.stderr?.on('data', (c: Buffer) => { out += c.toString('utf8') })
  // wrk stops itself after `seconds`; the guard only matters if it hangs.
  const guard = setTimeout(() => child.kill('SIGKILL'), (options.seconds + 20) * 1000)
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)))
  clearTimeout(guard)
  const line = out.split('\n').find((l) => l.startsWith('WRK_JSON '))
  if (code !== 0 || line === undefined) throw new Error(`wrk against ${options.url} failed (exit ${code}):\n${out}`)
  return JSON.parse(line.slice('WRK_JSON '.length)) as WrkResult
}
