/**
 * A real `redis-server` for tests (Debian's `redis-server` package, from PATH), never a mock: on a free port of
 * 127.0.0.1, without persistence, in a temp dir, stopped in teardown. `.ci/run` installs the package when it is
 * missing; elsewhere a missing server fails the tests with the command that installs it, unless
 * `FLOTILLA_REDIS=optional`, which skips them.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { type Test } from 'tap'

export interface RedisServer {
  url: string
  port: number
  /** SIGTERM (SIGKILL after 5 s), and waits for it to exit. */
  stop: () => Promise<void>
  /** SIGKILL, and waits for it to exit: connections drop at once. */
  kill: () => Promise<void>
  /** Stops it if it runs, then starts it again on the same port (empty: nothing is persisted). */
  restart: () => Promise<void>
  /** SIGSTOP: connections stay open and nothing answers. */
  pause: () => void
  /** SIGCONT. */
  resume: () => void
  /** Everything it wrote to stdout and stderr so far. */
  output: () => string
}

/**
 * Whether the tests that need `redis-server` can run: `false` when it is installed. When it is not, the reason to
 * pass as each test's `skip`; and unless `FLOTILLA_REDIS=optional`, a failure of `t` saying how to install it, so
 * that a machine without it (CI among them) cannot pass by skipping.
 */
export function redisServerSkip (t: Test): string | false {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' })
  if (probe.error === undefined && probe.status === 0) return false
  const missing = 'redis-server is not installed (or not on PATH): apt-get install redis-server'
  if (process.env.FLOTILLA_REDIS === 'optional') return `${missing} (skipped: FLOTILLA_REDIS=optional)`
  t.fail(`${missing}; or set FLOTILLA_REDIS=optional to skip the tests that need it`)
  return missing
}

/** Redis 7 turned DEBUG off by default and added `enable-debug-command`, which Redis 6 refuses as unknown. */
function majorVersion (): number {
  const out = spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout ?? ''
  const m = /v=(\d+)\./.exec(out)
  return m?.[1] === undefined ? 0 : Number(m[1])
}

async function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      srv.close(() => resolve(port))
    })
  })
}

/** One PING over a raw socket: true on `+PONG`. */
function ping (port: number): Promise<boolean> {
  return new Promise(resolve => {
    const socket = connect(port, '127.0.0.1')
    let got = ''
    const done = (ok: boolean): void => { socket.destroy(); resolve(ok) }
    socket.setTimeout(500, () => done(false))
    socket.once('error', () => done(false))
    socket.once('connect', () => socket.write('PING\r\n'))
    socket.on('data', d => {
      got += d.toString('latin1')
      if (got.includes('\r\n')) done(got.startsWith('+PONG'))
    })
  })
}

async function exited (child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const gone = new Promise(resolve => child.once('exit', resolve))
  child.kill('SIGCONT') // a paused server cannot act on SIGTERM
  child.kill(signal)
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
  await gone
  clearTimeout(timer)
}

/** Starts `redis-server` on a free port and resolves once it answers PING; stopped in `t`'s teardown. */
export async function startRedisServer (t: Test): Promise<RedisServer> {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'flotilla-redis-'))
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no']
  if (majorVersion() >= 7) args.push('--enable-debug-command', 'local')
  let child: ChildProcess | undefined
  let out = ''

  const start = async (): Promise<void> => {
    const proc = spawn('redis-server', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
    child = proc
    proc.stdout?.on('data', (d: Buffer) => { out += d.toString() })
    proc.stderr?.on('data', (d: Buffer) => { out += d.toString() })
    const deadline = Date.now() + 10_000
    while (Date.now() < deadline) {
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`redis-server on port ${port} exited at start:\n${out}`)
      if (await ping(port)) return
      await sleep(20)
    }
    await exited(proc, 'SIGKILL')
    throw new Error(`redis-server on port ${port} did not answer PING within 10 s:\n${out}`)
  }

  const stopWith = async (signal: NodeJS.Signals): Promise<void> => {
    if (child !== undefined) await exited(child, signal)
  }

  await start()
  t.teardown(async () => {
    await stopWith('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  })
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop: () => stopWith('SIGTERM'),
    kill: () => stopWith('SIGKILL'),
    restart: async () => {
      await stopWith('SIGTERM')
      await start()
    },
    pause: () => { child?.kill('SIGSTOP') },
    resume: () => { child?.kill('SIGCONT') },
    output: () => out
  }
}
