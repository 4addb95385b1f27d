/**
 * bench/proxy-vs-haproxy: the same wrk load against two fast backends directly, through HAProxy, through NGINX and
 * through the Flotilla gateway, in one run, so the gateway's cost is read against the proxies it has to hold its own
 * against (issue 3, "Performance"). Everything listens on 127.0.0.1 only; every process started here is stopped at
 * the end, on failure and on Ctrl-C alike, and every wait is bounded.
 *
 *   npx tsc -p . && node dist/bench/proxy-vs-haproxy.js
 *
 * Parameters come from the environment (defaults in brackets):
 *   BENCH_DURATION_S [10]   measured seconds per target
 *   BENCH_WARMUP_S [3]      unmeasured seconds of the same load before each measured run (JIT, pools, caches)
 *   BENCH_CONNECTIONS [64]  wrk connections
 *   BENCH_THREADS [2]       wrk threads
 *   BENCH_ROUNDS [1]        runs per target; with more than one, each figure is the median over rounds, and the
 *                           targets take turns (round 1: every target, round 2: every target, ...) so that a
 *                           slow spell of this shared machine does not land on one target only
 *   BENCH_TARGETS [direct-a,direct-b,haproxy,nginx,(baselines),gateway]   which targets, in this order
 *   BENCH_GATEWAY_NODE_ARGS []   extra node flags for the gateway process, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"
 *   BENCH_BASELINE_DIST []  other builds' dist/ folders (copies of dist/ from before a change), as `label=path`
 *                           or `path` (label `baseline`), comma-separated: each one's gateway is measured too, in the
 *                           same run, as target `gateway@label`. A copy outside the repository needs a
 *                           node_modules it can resolve (a symlink next to it will do).
 *   BENCH_BACKEND_WORKERS [2]    nginx worker processes serving the two backends
 *   BENCH_KEEP_TMP [0]      1 keeps the generated configs and logs (the path is printed)
 *
 * Prints a table, the gateway/HAProxy ratios, and ends with one JSON line of every figure.
 */
import { spawn } from 'node:child_process'
import { closeSync, existsSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs'
import { request } from 'node:http'
import { cpus, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  CLOCK_TICKS, HOST, cpuTicks, freePort, intEnv, machineTicks, median, printTable, round, runWrkScript, selfTicks,
  stopAll, stopAllOnSignals, track, versionOf, waitForPort, wrkPostScript, type WrkResult
} from './support.ts'

const MODEL = 'simple'
const INFER_PATH = `/v2/models/${MODEL}/infer`
/** A small KServe v2 JSON tensor request, as a client would send for a 1x4 FP32 input. */
const REQUEST_BODY = '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],"data":[1.0,2.0,3.0,4.0]}]}'
/** What the fast backends answer: a plausible infer response of the same size class. */
const RESPONSE_BODY = '{"model_name":"simple","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[1,4],"data":[1.0,2.0,3.0,4.0]}]}'

const FIXED_TARGETS = ['direct-a', 'direct-b', 'haproxy', 'nginx', 'gateway'] as const
/** One of {@link FIXED_TARGETS}, or `gateway@<label>` for a baseline build. */
type TargetName = string

interface Params {
  durationS: number
  warmupS: number
  connections: number
  threads: number
  rounds: number
  targets: TargetName[]
  gatewayNodeArgs: string[]
  baselines: Array<{ label: string, dist: string }>
  backendWorkers: number
  keepTmp: boolean
}

/** One target's figures (medians over rounds when there are several). */
interface TargetFigures {
  rps: number
  p50Ms: number
  p90Ms: number
  p99Ms: number
  maxMs: number
  errors: number
  requests: number
  /** CPU the proxy (or backend, for direct targets) used during the measured run, in % of one core. */
  cpuPct: number
  /**
   * CPU used meanwhile by processes this bench did not start (other work on a shared machine), in % of one core:
   * the figures are only comparable between runs where this stayed low.
   */
  otherCpuPct: number
  /** Time the hypervisor gave this machine's CPUs to someone else, in % of one core. */
  stealPct: number
}

function readParams (): Params {
  const baselines = (process.env.BENCH_BASELINE_DIST ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '').map((entry) => {
    const eq = entry.indexOf('=')
    return eq < 0 ? { label: 'baseline', dist: resolve(entry) } : { label: entry.slice(0, eq), dist: resolve(entry.slice(eq + 1)) }
  })
  const known = [...FIXED_TARGETS, ...baselines.map((b) => `gateway@${b.label}`)]
  const defaults = [...FIXED_TARGETS.slice(0, -1), ...baselines.map((b) => `gateway@${b.label}`), 'gateway']
  const targets = (process.env.BENCH_TARGETS ?? defaults.join(',')).split(',').map((s) => s.trim()).filter((s) => s !== '')
  for (const t of targets) {
    if (!known.includes(t)) throw new Error(`BENCH_TARGETS: unknown target '${t}' (known: ${known.join(', ')}; gateway@<label> needs BENCH_BASELINE_DIST)`)
  }
  return {
    durationS: intEnv('BENCH_DURATION_S', 10, 1),
    warmupS: intEnv('BENCH_WARMUP_S', 3, 0),
    connections: intEnv('BENCH_CONNECTIONS', 64, 1),
    threads: intEnv('BENCH_THREADS', 2, 1),
    rounds: intEnv('BENCH_ROUNDS', 1, 1),
    targets,
    gatewayNodeArgs: (process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(' ').filter((s) => s !== ''),
    baselines,
    backendWorkers: intEnv('BENCH_BACKEND_WORKERS', 2, 1),
    keepTmp: process.env.BENCH_KEEP_TMP === '1'
  }
}

/** One POST to `port` on a fresh connection: status, the endpoint header and the body. */
function probe (port: number): Promise<{ status: number, endpoint: string | undefined, body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: HOST, port, method: 'POST', path: INFER_PATH, agent: false, timeout: 5000,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(REQUEST_BODY) }
    }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const endpoint = res.headers['x-flotilla-endpoint']
        resolve({ status: res.statusCode ?? 0, endpoint: Array.isArray(endpoint) ? endpoint[0] : endpoint, body: Buffer.concat(chunks).toString('utf8') })
      })
      res.on('error', reject)
    })
    req.on('timeout', () => req.destroy(new Error(`probe of port ${port} timed out`)))
    req.on('error', reject)
    req.end(REQUEST_BODY)
  })
}

// ---------------------------------------------------------------------------------------------------------------
// Configs.

function backendConfig (dir: string, ports: readonly [number, number], workers: number): string {
  // `return` answers from the config with no upstream, no file and no body parsing, and (with access_log off)
  // does nothing per request but HTTP/1.1 parsing and one write: about as cheap as an HTTP server gets.
  const server = (port: number, name: string): string => `
  server {
    listen ${HOST}:${port} backlog=4096;
    location / {
      default_type application/json;
      add_header x-backend ${name};
      return 200 '${RESPONSE_BODY}';
    }
  }`
  return `worker_processes ${workers};
pid ${join(dir, 'backend.pid')};
error_log ${join(dir, 'backend-error.log')} warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'backend-body')};
  # Keep-alive for as long as the run lasts, as HAProxy's http-reuse and the gateway's pools assume.
  keepalive_requests 100000000;
  keepalive_timeout 60s;
${server(ports[0], 'a')}
${server(ports[1], 'b')}
}
`
}

function nginxProxyConfig (dir: string, port: number, backends: readonly [number, number]): string {
  return `worker_processes auto;
pid ${join(dir, 'nginx-proxy.pid')};
error_log ${join(dir, 'nginx-proxy-error.log')} warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'proxy-body')};
  proxy_temp_path ${join(dir, 'proxy-temp')};
  keepalive_requests 100000000;
  keepalive_timeout 60s;
  upstream backends {
    server ${HOST}:${backends[0]};
    server ${HOST}:${backends[1]};
    keepalive 64;
    keepalive_requests 100000000;
  }
  server {
    listen ${HOST}:${port} backlog=4096;
    location / {
      proxy_pass http://backends;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`
}

function haproxyConfig (port: number, backends: readonly [number, number]): string {
  // nbthread is left at its default (one thread per CPU), as an operator would run it.
  return `global
  maxconn 4096
defaults
  mode http
  option http-keep-alive
  http-reuse always
  timeout connect 3s
  timeout client 30s
  timeout server 30s
  timeout http-keep-alive 60s
frontend fe
  bind ${HOST}:${port}
  default_backend be
backend be
  balance roundrobin
  server a ${HOST}:${backends[0]}
  server b ${HOST}:${backends[1]}
`
}

function fleetFile (httpPort: number, metricsPort: number, backends: readonly [number, number]): string {
  return `inference_servers:
  - name: backend-a
    host: ${HOST}
    port: ${backends[0]}
    models: [${MODEL}]
  - name: backend-b
    host: ${HOST}
    port: ${backends[1]}
    models: [${MODEL}]
load_balancer:
  type: round_robin
gateway:
  host: ${HOST}
  http_port: ${httpPort}
  metrics_port: ${metricsPort}
`
}

function wrkScript (): string {
  return wrkPostScript(REQUEST_BODY)
}

// ---------------------------------------------------------------------------------------------------------------
// Load.

function runWrk (params: Params, script: string, port: number, seconds: number): Promise<WrkResult> {
  return runWrkScript({ threads: params.threads, connections: params.connections, seconds, script, url: `http://${HOST}:${port}${INFER_PATH}` })
}

// ---------------------------------------------------------------------------------------------------------------

interface Started { port: number, pid: number | undefined }

/** Removes the scratch folder (configs, logs); replaced once it exists. */
let cleanupDir = (): void => {}

async function main (): Promise<void> {
  const params = readParams()
  const machine = {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    node: process.version,
    haproxy: versionOf('haproxy', ['-v'], /version (\S+)/),
    nginx: versionOf('nginx', ['-v'], /nginx\/(\S+)/),
    wrk: versionOf('wrk', ['-v'], /wrk (\S+)/)
  }
  const here = dirname(fileURLToPath(import.meta.url))
  const cli = resolve(here, '..', 'bin', 'flotilla.js')
  if (!existsSync(cli)) throw new Error(`${cli} not found: run 'npx tsc -p .' and start the bench as 'node dist/bench/proxy-vs-haproxy.js'`)

  const dir = mkdtempSync(join(tmpdir(), 'flotilla-bench-'))
  cleanupDir = () => { if (!params.keepTmp) rmSync(dir, { recursive: true, force: true }) }
  const script = join(dir, 'infer.lua')
  writeFileSync(script, wrkScript())

  try {
    const backends: [number, number] = [await freePort(), await freePort()]
    writeFileSync(join(dir, 'backend.conf'), backendConfig(dir, backends, params.backendWorkers))
    const backend = track(spawn('nginx', ['-p', dir, '-e', join(dir, 'backend-error.log'), '-c', join(dir, 'backend.conf'), '-g', 'daemon off;'], { stdio: 'ignore' }))
    await waitForPort(backends[0], backend, 'nginx (backends)')
    await waitForPort(backends[1], backend, 'nginx (backends)')

    const starters: Record<string, () => Promise<Started>> = {
      'direct-a': async () => ({ port: backends[0], pid: backend.pid }),
      'direct-b': async () => ({ port: backends[1], pid: backend.pid }),
      haproxy: async () => {
        const port = await freePort()
        writeFileSync(join(dir, 'haproxy.cfg'), haproxyConfig(port, backends))
        // -db: foreground, so the spawned process is HAProxy itself and stopping it stops everything.
        const child = track(spawn('haproxy', ['-db', '-f', join(dir, 'haproxy.cfg')], { stdio: ['ignore', 'ignore', 'inherit'] }))
        await waitForPort(port, child, 'haproxy')
        return { port, pid: child.pid }
      },
      nginx: async () => {
        const port = await freePort()
        writeFileSync(join(dir, 'nginx-proxy.conf'), nginxProxyConfig(dir, port, backends))
        const child = track(spawn('nginx', ['-p', dir, '-e', join(dir, 'nginx-proxy-error.log'), '-c', join(dir, 'nginx-proxy.conf'), '-g', 'daemon off;'], { stdio: 'ignore' }))
        await waitForPort(port, child, 'nginx (proxy)')
        return { port, pid: child.pid }
      },
      gateway: () => startGateway(cli, 'gateway'),
      ...Object.fromEntries(params.baselines.map((b) => [`gateway@${b.label}`, () => startGateway(join(b.dist, 'bin', 'flotilla.js'), `gateway@${b.label}`)]))
    }

    async function startGateway (entry: string, name: string): Promise<Started> {
      if (!existsSync(entry)) throw new Error(`${entry} not found`)
      const port = await freePort()
      const fleet = join(dir, `${name}.yaml`)
      writeFileSync(fleet, fleetFile(port, await freePort(), backends))
      const log = openSync(join(dir, `${name}.log`), 'w')
      // Builds with an admin API would all want 127.0.0.1:9000; the benchmark needs none of them.
      const noAdmin = existsSync(join(dirname(entry), '..', 'gateway', 'admin')) ? ['--admin-port', '-1'] : []
      // Likewise the gRPC listener (8001), in builds that have one.
      const noGrpc = existsSync(join(dirname(entry), '..', 'gateway', 'server', 'grpc.js')) ? ['--grpc-port', '-1'] : []
      const child = track(spawn(process.execPath, [...params.gatewayNodeArgs, entry, 'gateway', '--config', fleet, ...noAdmin, ...noGrpc],
        { stdio: ['ignore', log, log], cwd: dir }))
      closeSync(log)
      await waitForPort(port, child, name)
      return { port, pid: child.pid }
    }

    // Everything is started first (an idle proxy costs nothing), so that rounds can take turns between targets.
    const started = new Map<TargetName, Started>()
    for (const target of params.targets) {
      const s = await starters[target]!()
      started.set(target, s)
      // One request first, on its own connection: a target that answers wrongly fails here, not in the table.
      const answer = await probe(s.port)
      if (answer.status !== 200 || !answer.body.includes('"outputs"')) {
        throw new Error(`${target} answered ${answer.status}: ${answer.body.slice(0, 200)}`)
      }
      if (target.startsWith('gateway') && answer.endpoint === undefined) throw new Error(`${target} answered without x-flotilla-endpoint`)
    }

    const runs = new Map<TargetName, Array<{ wrk: WrkResult, cpuPct: number, otherCpuPct: number, stealPct: number }>>(params.targets.map((t) => [t, []]))
    for (let r = 0; r < params.rounds; r++) {
      for (const target of params.targets) {
        const s = started.get(target)!
        if (params.warmupS > 0) await runWrk(params, script, s.port, params.warmupS)
        // Ours: the target, the backends (the same processes for direct targets), this process, and wrk (in this
        // process's reaped children's time once it has exited).
        const ours = (): number => cpuTicks(s.pid) + (s.pid === backend.pid ? 0 : cpuTicks(backend.pid)) + selfTicks()
        const before = cpuTicks(s.pid)
        const oursBefore = ours()
        const machineBefore = machineTicks()
        const wrk = await runWrk(params, script, s.port, params.durationS)
        const machineAfter = machineTicks()
        const seconds = wrk.durationUs / 1e6
        const pct = (ticks: number): number => ticks / CLOCK_TICKS / seconds * 100
        const cpuPct = pct(cpuTicks(s.pid) - before)
        const otherCpuPct = Math.max(0, pct(machineAfter.busy - machineBefore.busy) - pct(ours() - oursBefore))
        const stealPct = pct(machineAfter.steal - machineBefore.steal)
        runs.get(target)!.push({ wrk, cpuPct, otherCpuPct, stealPct })
        process.stderr.write(`round ${r + 1}/${params.rounds} ${target}: ${Math.round(wrk.requests / seconds)} rps, ` +
          `p99 ${(wrk.p99Us / 1000).toFixed(2)} ms, cpu ${cpuPct.toFixed(0)}%, other ${otherCpuPct.toFixed(0)}%, steal ${stealPct.toFixed(0)}%\n`)
      }
    }

    const results: Record<string, TargetFigures> = {}
    for (const target of params.targets) {
      const list = runs.get(target)!
      const w = list.map((x) => x.wrk)
      results[target] = {
        rps: round(median(w.map((x) => x.requests / (x.durationUs / 1e6))), 0),
        p50Ms: round(median(w.map((x) => x.p50Us / 1000)), 3),
        p90Ms: round(median(w.map((x) => x.p90Us / 1000)), 3),
        p99Ms: round(median(w.map((x) => x.p99Us / 1000)), 3),
        maxMs: round(median(w.map((x) => x.maxUs / 1000)), 3),
        errors: w.reduce((n, x) => n + x.errors.connect + x.errors.read + x.errors.write + x.errors.status + x.errors.timeout, 0),
        requests: w.reduce((n, x) => n + x.requests, 0),
        cpuPct: round(median(list.map((x) => x.cpuPct)), 0),
        otherCpuPct: round(median(list.map((x) => x.otherCpuPct)), 0),
        stealPct: round(median(list.map((x) => x.stealPct)), 0)
      }
    }

    const rows = params.targets.map((t) => [t, results[t]!] as const)
    const header = ['target', 'rps', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'errors', 'cpu %', 'other %', 'steal %']
    const table = [header, ...rows.map(([t, f]) => [t, String(f.rps), f.p50Ms.toFixed(2), f.p90Ms.toFixed(2), f.p99Ms.toFixed(2),
      f.maxMs.toFixed(1), String(f.errors), String(f.cpuPct), String(f.otherCpuPct), String(f.stealPct)])]
    console.log(`\nproxy-vs-haproxy: POST ${INFER_PATH}, ${params.connections} connections, ${params.threads} wrk threads, ` +
      `${params.durationS} s measured after ${params.warmupS} s warm-up, ${params.rounds} round(s); ${machine.cpus} x ${machine.cpuModel}, node ${machine.node}`)
    printTable(table)

    const gw = results.gateway
    const ha = results.haproxy
    const ratios: Record<string, number> = {}
    if (gw !== undefined && ha !== undefined) {
      ratios.gatewayHaproxyRps = round(gw.rps / ha.rps, 3)
      ratios.gatewayHaproxyP99 = round(gw.p99Ms / ha.p99Ms, 3)
      console.log(`\ngateway/haproxy: rps ${ratios.gatewayHaproxyRps}x (target >= 0.5), p99 ${ratios.gatewayHaproxyP99}x (target <= 3)`)
    }
    for (const { label } of params.baselines) {
      const base = results[`gateway@${label}`]
      if (gw === undefined || base === undefined) continue
      ratios[`gatewayVs_${label}_Rps`] = round(gw.rps / base.rps, 3)
      ratios[`gatewayVs_${label}_P99`] = round(gw.p99Ms / base.p99Ms, 3)
      console.log(`gateway/gateway@${label}: rps ${ratios[`gatewayVs_${label}_Rps`]}x, p99 ${ratios[`gatewayVs_${label}_P99`]}x`)
    }
    if (params.keepTmp) console.log(`configs and logs kept in ${dir}`)
    console.log(JSON.stringify({
      bench: 'proxy-vs-haproxy',
      machine,
      params: { ...params, path: INFER_PATH, requestBytes: REQUEST_BODY.length, responseBytes: RESPONSE_BODY.length },
      results,
      ratios
    }))
  } finally {
    await stopAll()
    cleanupDir()
  }
}

// Ctrl-C or a kill: stop what was started, remove the scratch folder, then leave with the conventional status.
stopAllOnSignals(() => cleanupDir())

main().catch(async (err: unknown) => {
  console.error(err instanceof Error ? err.message : err)
  await stopAll()
  process.exitCode = 1
})
