/**
 * `flotilla worker`'s Consul flags, through the compiled CLI: bad values are usage errors naming the flag (exit 2),
 * and the usage lists them. A worker registering through these flags, and leaving on SIGTERM, is exercised by
 * test/e2e/consul-fleet.test.ts; the options themselves by test/worker/registration/.
 */
import { spawn } from 'node:child_process'
import t from 'tap'
import { CLI } from '../helpers/processes.ts'

/** The CLI's exit code and output; CONSUL_HTTP_* cleared unless given, so that the caller's environment stays out. */
function run (args: string[], env: Record<string, string> = {}): Promise<{ code: number | null, out: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('CONSUL_HTTP_')))
  return new Promise(resolve => {
    const c = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...base, ...env } })
    let out = ''
    c.stdout.on('data', (d: Buffer) => { out += d.toString() })
    c.stderr.on('data', (d: Buffer) => { out += d.toString() })
    c.once('exit', code => resolve({ code, out }))
  })
}

t.test('bad Consul flags are usage errors (exit 2) that name the flag, and the usage lists them', async t => {
  // One of each kind of check the CLI makes (each case is a process start, most of this test's time);
  // test/worker/registration/flags.test.ts has every refusal, in process.
  const worker = ['worker', '--model-repository', '.']
  const cases: Array<[string[], Record<string, string>, RegExp]> = [
    [['--label', 'zone=a'], { CONSUL_HTTP_ADDR: 'ftp://agent:8500' }, /flotilla: CONSUL_HTTP_ADDR: 'ftp:\/\/agent:8500' uses ftp/],
    [['--consul-addr', 'agent', '--consul-check-interval-ms', '500'], {}, /--consul-check-interval-ms must be an integer from 1000 to 600000, got '500'/]
  ]
  const [results, help] = await Promise.all([Promise.all(cases.map(([args, env]) => run([...worker, ...args], env))), run(['--help'])])
  cases.forEach(([args, env, message], i) => {
    const what = [...Object.entries(env).map(([k, v]) => `${k}=${v}`), ...args].join(' ')
    t.equal(results[i]!.code, 2, `${what} exits 2`)
    t.match(results[i]!.out, message, what)
  })
  t.match(help.out, /\[--consul-addr ADDR\] \[--consul-service NAME\] \[--consul-token-file F\] \[--advertise-host H\]/)
  t.match(help.out, /\[--label KEY=VALUE\]\.\.\. \[--consul-check-interval-ms N\] \[--consul-deregister-after-ms N\]/)
})
