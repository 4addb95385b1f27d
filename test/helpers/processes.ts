/**
 * Real `flotilla` processes for end-to-end tests, run from the compiled CLI (dist/, built by `npm test`'s
 * pretest). Every process is killed in teardown, so a failing test leaves nothing behind.
 */
import { fork, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { type Test } from 'tap'
import { PACKAGE_ROOT } from '../../common/package-root.ts'

// From the package root, not this file: the tests run from dist/ as well as from the source.
export const CLI = join(PACKAGE_ROOT, 'dist', 'bin', 'flotilla.js')
export const DEMO_MODELS = join(PACKAGE_ROOT, 'config', 'models')
export const DEMO_FLEET = join(PACKAGE_ROOT, 'config', 'fleet.yaml')

export interface FlotillaProcess {
  child: ChildProcess
  httpPort: number
  /** -1 when the gRPC listener is off. */
  grpcPort: number
  metricsPort: number
  /** The gateway's admin port (-1 when off); absent for workers. */
  adminPort?: number
  url: string
  /** Everything it wrote to stdout and stderr so far. */
  output: () => string
}

type Tap = Test

/**
 * The environment for a node child process of a test. Without a Consul agent the developer's shell names (only
 * the tests that pass CONSUL_HTTP_ADDR in `extra` register anywhere), and without tap's processinfo hook in
 * NODE_OPTIONS, which records every child process for coverage: ~0.35 s of CPU per process start, and the suite
 * starts hundreds (workers, gateways, the benches' own children), for coverage no `npm test` collects.
 * `npm run test:coverage` sets FLOTILLA_TEST_COVERAGE=1, which keeps it.
 */
export function childEnv (extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const { CONSUL_HTTP_ADDR: _addr, CONSUL_HTTP_TOKEN: _token, CONSUL_HTTP_TOKEN_FILE: _tokenFile, ...env } = process.env
  if (env.FLOTILLA_TEST_COVERAGE !== '1' && env.NODE_OPTIONS !== undefined) {
    const options = env.NODE_OPTIONS.split(/\s+/).filter((o) => o !== '' && !o.includes('@tapjs/processinfo')).join(' ')
    if (options === '') delete env.NODE_OPTIONS
    else env.NODE_OPTIONS = options
  }
  return { ...env, ...extra }
}

/**
 * What a forked child runs with: nothing of this process's own flags (tap's TypeScript loader and mock hooks,
 * inherited by default): the children run the compiled JavaScript in dist/.
 */
export const CHILD_EXEC_ARGV: string[] = []

/** Kills the child (SIGKILL if it ignores SIGTERM for 5 s) and waits for it to exit. */
export async function stop (child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise(resolve => child.once('exit', resolve))
  child.kill(signal)
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
  await exited
  clearTimeout(timer)
}

/** Forks `flotilla <args>` and resolves once it reports its ports over IPC. */
export async function spawnFlotilla (tt: Tap, args: string[], env: Record<string, string> = {}): Promise<FlotillaProcess> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run 'npm run build' (npm test does it first)`)
  const child = fork(CLI, args, { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], execArgv: CHILD_EXEC_ARGV, env: childEnv({ LOG_LEVEL: 'warn', ...env }) })
  let out = ''
  child.stdout?.on('data', (d: Buffer) => { out += d.toString() })
  child.stderr?.on('data', (d: Buffer) => { out += d.toString() })
  tt.teardown(() => stop(child))
  const ready = await new Promise<{ httpPort: number, grpcPort: number, metricsPort: number, adminPort?: number, url: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`flotilla ${args.join(' ')} not ready in 30 s:\n${out}`)), 30_000)
    child.once('exit', code => { clearTimeout(timer); reject(new Error(`flotilla ${args.join(' ')} exited ${code}:\n${out}`)) })
    child.on('message', (m: { type?: string, httpPort: number, grpcPort: number, metricsPort: number, adminPort?: number, url: string }) => {
      if (m.type === 'flotilla:ready') { clearTimeout(timer); resolve(m) }
    })
  })
  return { child, ...ready, output: () => out }
}

/** A worker on a free port serving `repository` (default: the demo models). */
export function spawnWorker (tt: Tap, repository = DEMO_MODELS): Promise<FlotillaProcess> {
  return spawnFlotilla(tt, ['worker', '--model-repository', repository, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '-1'])
}
