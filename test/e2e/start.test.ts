/** The README's commands, for real: `flotilla start` brings up the demo fleet and an inference goes through. */
import { execFileSync, spawn } from 'node:child_process'
import { createServer } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { get, post } from '../helpers/http.ts'
import { CLI, childEnv, stop } from '../helpers/processes.ts'
import { identityConfig } from '../helpers/model-repo.ts'

t.test('flotilla start on free ports serves the README curl', async t => {
  // `npm start` is `node dist/bin/flotilla.js start`; free ports keep the test off 8000 and out of other runs' way.
  const child = spawn(process.execPath, [CLI, 'start', '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0', '--admin-port', '0', '--worker-ports', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'], env: childEnv({ LOG_LEVEL: 'warn' })
  })
  t.teardown(() => stop(child))
  let out = ''
  child.stderr.on('data', (d: Buffer) => { out += d.toString() })
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner in 30 s:\n${out}`)), 30_000)
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString()
      const m = /gateway\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(out)
      if (m !== null) { clearTimeout(timer); resolve(m[1]!) }
    })
    child.once('exit', code => { clearTimeout(timer); reject(new Error(`flotilla start exited ${code}:\n${out}`)) })
  })
  t.match(out, /Flotilla demo fleet is up/)
  t.match(out, /worker-1 .*gRPC \d+ .*models: simple, identity, simulated, mlp, transformer, cnn/, 'every worker has a gRPC port and serves every model')
  t.match(out, /gateway .*gRPC 127\.0\.0\.1:\d+/)
  t.match(out, /worker-2 /)

  t.equal((await get(`${url}/v2/health/ready`)).status, 200)
  // The README's curl, verbatim in content.
  const res = await post(`${url}/v2/models/simple/infer`, {
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16] },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1] }
    ]
  })
  t.equal(res.status, 200, res.text)
  t.strictSame(res.json, {
    model_name: 'simple',
    model_version: '1',
    outputs: [
      { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], data: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17] },
      { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], data: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] }
    ]
  })
  const endpoints = new Set<string>()
  for (let i = 0; i < 4; i++) {
    endpoints.add(String((await post(`${url}/v2/models/identity/infer`, {
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 1], data: [1] }]
    })).headers['x-flotilla-endpoint']))
  }
  t.strictSame(endpoints, new Set(['worker-1', 'worker-2']), 'the demo fleet balances across both workers')

  // A client's bad input is a 400 and never counts against the worker that refused it: twenty token ids out of the
  // vocabulary (four times outlier detection's five in a row, on each worker) and the fleet is still whole.
  const badIds = Array.from({ length: 64 }, (_, i) => i === 3 ? 99_999 : i)
  for (let i = 0; i < 20; i++) {
    const bad = await post(`${url}/v2/models/transformer/infer`, { inputs: [{ name: 'input_ids', datatype: 'INT64', shape: [1, 64], data: badIds }] })
    t.equal(bad.status, 400, bad.text)
    if (i === 0) t.match(bad.json, { error: /index 99999 .*is out of range/ }, 'the 400 names the index and the range')
  }
  const fleetView = (await get(`${url}/v2/fleet`)).json as { endpoints: Array<{ name: string, ejected: boolean }> }
  t.strictSame(fleetView.endpoints.map((e) => [e.name, e.ejected]), [['worker-1', false], ['worker-2', false]], 'no worker was ejected for a client\'s mistakes')
  const good = new Set<string>()
  for (let i = 0; i < 2; i++) {
    const ok = await post(`${url}/v2/models/transformer/infer`, { inputs: [{ name: 'input_ids', datatype: 'INT64', shape: [1, 64], data: badIds.map((v) => v % 1000) }] })
    t.equal(ok.status, 200, ok.text)
    good.add(String(ok.headers['x-flotilla-endpoint']))
  }
  t.strictSame(good, new Set(['worker-1', 'worker-2']), 'both workers still take requests')

  const exited = new Promise<number | null>(resolve => child.once('exit', code => resolve(code)))
  child.kill('SIGTERM')
  t.equal(await exited, 0, 'SIGTERM stops the fleet cleanly')
})

t.test('the CLI explains its usage and refuses bad flags', async t => {
  const run = (args: string[], env: Record<string, string> = {}): Promise<{ code: number | null, out: string }> => new Promise(resolve => {
    const c = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv(env) })
    let out = ''
    c.stdout.on('data', (d: Buffer) => { out += d.toString() })
    c.stderr.on('data', (d: Buffer) => { out += d.toString() })
    c.once('exit', code => resolve({ code, out }))
  })
  const help = await run(['--help'])
  t.equal(help.code, 0)
  t.match(help.out, /flotilla start/)
  t.match(help.out, /flotilla gateway --config FILE/)
  t.match(help.out, /flotilla worker\s+--model-repository DIR/)
  t.match(help.out, /\[--consul-addr ADDR\] \[--consul-service NAME\] \[--consul-token-file F\] \[--advertise-host H\]/)
  t.match(help.out, /\[--label KEY=VALUE\]\.\.\. \[--consul-tag TAG\]\.\.\. \[--consul-check-interval-ms N\]/)

  // Every Consul refusal is tested in process (test/worker/registration/flags.test.ts); here one of each kind the
  // CLI makes: a value from the environment, and an integer flag.
  const cases: Array<[string[], RegExp, Record<string, string>?]> = [
    [['worker', '--model-repository', '.', '--label', 'zone=a'], /flotilla: CONSUL_HTTP_ADDR: 'ftp:\/\/agent:8500' uses ftp/, { CONSUL_HTTP_ADDR: 'ftp://agent:8500' }],
    [['worker', '--model-repository', '.', '--consul-addr', 'agent', '--consul-check-interval-ms', '500'], /--consul-check-interval-ms must be an integer from 1000 to 600000, got '500'/],
    [['bogus'], /unknown command 'bogus'/],
    [['worker'], /needs --model-repository/],
    [['gateway'], /needs --config/],
    [['worker', '--model-repository', '.', '--http-port', '70000'], /--http-port must be an integer from 0 to 65535/],
    [['gateway', '--config', 'x.yaml', '--model-repository', 'y'], /does not take --model-repository/],
    [['worker', '--nope'], /Unknown option '--nope'/],
    [['start', '--worker-ports', '1,2,3'], /--worker-ports takes 0 or 2/]
  ]
  // At once: each is a process start, most of this test's time.
  const [results, missing] = await Promise.all([Promise.all(cases.map(([args, , env]) => run(args, env))), run(['gateway', '--config', '/nonexistent/fleet.yaml'])])
  cases.forEach(([args, message], i) => {
    t.equal(results[i]!.code, 2, `${args.join(' ')} exits 2`)
    t.match(results[i]!.out, message, args.join(' '))
  })
  t.equal(missing.code, 1)
  t.match(missing.out, /fleet\.yaml/, 'a missing fleet file is named')
})

t.test('a worker that cannot start takes the whole start down, leaving no process behind', async t => {
  // A repository path unique to this test, so the processes it starts can be found (and told apart) by pgrep.
  const dir = t.testdir({ repo: { echo: { 'config.pbtxt': identityConfig('echo', 'TYPE_FP32', [1]), 1: {} } } })
  const busy = createServer()
  await new Promise<void>(resolve => busy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise(resolve => busy.close(resolve)))
  const busyPort = (busy.address() as { port: number }).port
  const fleet = join(dir, 'fleet.yaml')
  const { writeFileSync } = await import('node:fs')
  writeFileSync(fleet, [
    'model_repository: repo',
    'inference_servers:',
    '  - { name: w1, host: 127.0.0.1, port: 1, models: [echo] }',
    '  - { name: w2, host: 127.0.0.1, port: 2, models: [echo] }',
    'load_balancer: { type: round_robin }'
  ].join('\n'))
  const child = spawn(process.execPath, [CLI, 'start', '--config', fleet, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0', '--admin-port', '-1',
    '--worker-ports', `0,${busyPort}`], { stdio: ['ignore', 'pipe', 'pipe'], env: childEnv({ LOG_LEVEL: 'warn' }) })
  t.teardown(() => stop(child))
  let out = ''
  child.stdout.on('data', (d: Buffer) => { out += d.toString() })
  child.stderr.on('data', (d: Buffer) => { out += d.toString() })
  const code = await new Promise<number | null>(resolve => child.once('exit', c => resolve(c)))
  t.equal(code, 1, 'start fails')
  t.match(out, /worker 'w2' exited before it was ready/)
  t.match(out, /EADDRINUSE/, 'the cause is in the log')
  const running = (): string => {
    try { return execFileSync('pgrep', ['-f', join(dir, 'repo')], { encoding: 'utf8' }) } catch { return '' }
  }
  for (let i = 0; i < 50 && running() !== ''; i++) await new Promise(resolve => setTimeout(resolve, 100))
  t.equal(running(), '', 'no worker outlives a failed start')
})
