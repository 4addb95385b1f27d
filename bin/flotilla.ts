#!/usr/bin/env node
/**
 * `flotilla`: the one command line. `start` brings up the demo fleet (workers as child processes, the gateway in
 * this process), `gateway` and `worker` run one tier each. Flags override the files they point at.
 */
import { fork, type ChildProcess } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { dirname, isAbsolute, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { CONSUL_ADDR_ENV } from '../common/consul.ts'
import { createError, isFlotillaError } from '../common/errors.ts'
import { isLoopbackHost } from '../common/http-server.ts'
import { createLogger, type Logger } from '../common/logger.ts'
import { FLOTILLA_VERSION, PACKAGE_ROOT } from '../common/package-root.ts'
import { type FleetConfig } from '../gateway/fleet/fleet-config.ts'
// Each command imports what it runs when it runs (below): a worker process never loads the gateway's modules (Redis,
// discovery, the balancers), nor a gateway the worker's (the native addon, onnxruntime), nor either the load
// generator. That halves a worker's start-up CPU, which every process start of a fleet (and of the tests) pays.

const SELF = fileURLToPath(import.meta.url)
const DEFAULT_FLEET = join(PACKAGE_ROOT, 'config', 'fleet.yaml')

const USAGE = `flotilla ${FLOTILLA_VERSION}: an inference gateway and worker fleet (KServe v2 / Triton HTTP and gRPC)

Usage:
  flotilla start   [--config FILE] [--host H] [--http-port N] [--grpc-port N] [--metrics-port N] [--admin-port N]
                   [--worker-ports N,N|0]
  flotilla gateway --config FILE [--host H] [--http-port N] [--grpc-port N] [--metrics-port N] [--admin-port N]
  flotilla worker  --model-repository DIR [--host H] [--http-port N] [--grpc-port N] [--metrics-port N]
                   [--max-body-bytes N] [--grpc-max-message-bytes N] [--max-header-bytes N] [--max-header-count N]
                   [--header-timeout-ms N] [--body-timeout-ms N] [--idle-timeout-ms N]
                   [--cache-config local,size=BYTES]
                   [--consul-addr ADDR] [--consul-service NAME] [--consul-token-file F] [--advertise-host H]
                   [--label KEY=VALUE]... [--consul-tag TAG]... [--consul-check-interval-ms N]
                   [--consul-deregister-after-ms N]
  flotilla fleet   list|add|drain|undrain|remove|weight|canary|cache ... [--admin URL] [--token-file F]
  flotilla cache   stats | purge [MODEL]   (the running gateway's response cache; flags as fleet's)
  flotilla bench   -m MODEL [-u URL] [-i http|grpc] [--concurrency-range A:B[:S|:xF] | --request-rate-range A:B[:S]]
                   [-f CSV] [--plot SVG] [--json]
  flotilla --help | --version

Commands:
  start     The demo fleet on this machine: one worker per server of the fleet file (default
            config/fleet.yaml), serving its model_repository, and the gateway in front of them.
            --worker-ports 0 puts every worker on a free port; a list sets their HTTP ports in order (each
            worker's gRPC port is its HTTP port + 1, or the server's grpc_port).
  gateway   The routing tier, from a fleet file (ports default to its 'gateway' section, else HTTP 8000,
            gRPC 8001, metrics 8002, admin API on 127.0.0.1:9000). It reloads the file when it changes, and on
            SIGHUP.
  fleet     Changes a running fleet through the gateway's admin API ('flotilla fleet --help').
  worker    A worker serving a Triton-style model repository (ports default to HTTP 8000, gRPC 8001, metrics
            8002, as Triton's). --cache-config local,size=BYTES gives it Triton's response cache, for the
            models whose config.pbtxt has response_cache { enable: true }.
            --consul-addr (else $CONSUL_HTTP_ADDR) registers it in Consul for gateways that discover workers
            there: service --consul-service (default flotilla-worker) at --advertise-host (default the bind
            host, or this machine's address for 0.0.0.0), its ready models and each --consul-tag as tags
            (a gateway's discovery.consul.tag watches one), each --label as meta;
            Consul checks /v2/health/ready every --consul-check-interval-ms (default 2000) and drops it after
            --consul-deregister-after-ms critical (default 60000). The ACL token is read from
            --consul-token-file, else $CONSUL_HTTP_TOKEN or $CONSUL_HTTP_TOKEN_FILE. On SIGTERM it goes into
            maintenance first, and is deregistered once stopped.
  bench     Measures a server (gateway or worker) as perf_analyzer does ('flotilla bench --help').

Common flags:
  --log-level LEVEL   trace, debug, info, warn, error, fatal or silent (default: $LOG_LEVEL, else info)
  --metrics-port -1   turns the metrics listener off (port 0 picks a free port); --grpc-port and --admin-port
                      likewise
`

const options = {
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'v' },
  config: { type: 'string' },
  'model-repository': { type: 'string' },
  host: { type: 'string' },
  'http-port': { type: 'string' },
  'grpc-port': { type: 'string' },
  'metrics-port': { type: 'string' },
  'admin-port': { type: 'string' },
  'worker-ports': { type: 'string' },
  'max-body-bytes': { type: 'string' },
  'grpc-max-message-bytes': { type: 'string' },
  'max-header-bytes': { type: 'string' },
  'max-header-count': { type: 'string' },
  'header-timeout-ms': { type: 'string' },
  'body-timeout-ms': { type: 'string' },
  'idle-timeout-ms': { type: 'string' },
  'cache-config': { type: 'string', multiple: true },
  'consul-addr': { type: 'string' },
  'consul-service': { type: 'string' },
  'consul-token-file': { type: 'string' },
  'advertise-host': { type: 'string' },
  label: { type: 'string', multiple: true },
  'consul-tag': { type: 'string', multiple: true },
  'consul-check-interval-ms': { type: 'string' },
  'consul-deregister-after-ms': { type: 'string' },
  'log-level': { type: 'string' }
} as const

type Flags = ReturnType<typeof parseArgs<{ options: typeof options, allowPositionals: true }>>['values']

const ALLOWED: Record<string, ReadonlyArray<keyof Flags>> = {
  start: ['config', 'host', 'http-port', 'grpc-port', 'metrics-port', 'admin-port', 'worker-ports', 'log-level'],
  gateway: ['config', 'host', 'http-port', 'grpc-port', 'metrics-port', 'admin-port', 'log-level'],
  worker: [
    'model-repository', 'host', 'http-port', 'grpc-port', 'metrics-port', 'max-body-bytes', 'grpc-max-message-bytes',
    'max-header-bytes', 'max-header-count', 'header-timeout-ms', 'body-timeout-ms', 'idle-timeout-ms', 'cache-config',
    'consul-addr', 'consul-service', 'consul-token-file', 'advertise-host', 'label', 'consul-tag', 'consul-check-interval-ms',
    'consul-deregister-after-ms', 'log-level'
  ]
}

const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']

function usage (message: string): never {
  throw createError('CLI_ERR_USAGE', `${message}\nRun 'flotilla --help' for usage.`)
}

function port (flags: Flags, name: 'http-port' | 'grpc-port' | 'metrics-port' | 'admin-port', min = 0): number | undefined {
  const raw = flags[name]
  if (raw === undefined) return undefined
  const n = Number(raw)
  if (!/^-?[0-9]+$/.test(raw) || n < min || n > 65535) {
    usage(`--${name} must be an integer from ${min} to 65535, got '${raw}'`)
  }
  return n
}

/** Sends the parent (`flotilla start`) the bound ports, when this process was forked by it and it is still there. */
function announce (message: Record<string, unknown>): void {
  if (process.connected) process.send?.({ type: 'flotilla:ready', ...message })
}

/** What a signal stops; replaced as the process brings more up. Until set, a signal just exits. */
let shutdown: (() => Promise<void>) | undefined

/**
 * SIGINT/SIGTERM run {@link shutdown}, then exit 0; a second signal exits at once. Installed before anything
 * starts, so a signal during start-up never leaves a half-started process (or its children) behind.
 */
function installSignalHandlers (logger: Logger): void {
  let stopping = false
  const handler = (signal: string): void => {
    if (stopping) process.exit(1)
    stopping = true
    if (shutdown === undefined) process.exit(0)
    logger.info({ signal }, 'shutting down: finishing in-flight requests')
    shutdown().then(() => process.exit(0), err => {
      logger.error({ err }, 'shutdown failed')
      process.exit(1)
    })
  }
  process.on('SIGINT', handler)
  process.on('SIGTERM', handler)
  // Forked by `flotilla start`: a parent that dies without stopping us (kill -9) closes the IPC channel.
  if (process.send !== undefined) process.on('disconnect', () => handler('disconnect'))
}

/** A positive byte count from a flag; undefined when the flag is absent. */
function byteCount (flags: Flags, name: 'max-body-bytes' | 'grpc-max-message-bytes'): number | undefined {
  const raw = flags[name]
  if (raw === undefined) return undefined
  // Buffers and gRPC messages stop at 2 GiB - 1 (grpc-js takes a 32-bit signed limit).
  if (!/^[1-9][0-9]*$/.test(raw) || Number(raw) > 0x7fffffff) usage(`--${name} must be a positive integer up to 2147483647, got '${raw}'`)
  return Number(raw)
}

/** An integer flag within [min, max]; undefined when the flag is absent. */
function boundedInteger (flags: Flags, name: 'max-header-bytes' | 'max-header-count' | 'header-timeout-ms' | 'body-timeout-ms' | 'idle-timeout-ms' |
  'consul-check-interval-ms' | 'consul-deregister-after-ms', min: number, max: number): number | undefined {
  const raw = flags[name]
  if (raw === undefined) return undefined
  if (!/^[0-9]+$/.test(raw) || Number(raw) < min || Number(raw) > max) usage(`--${name} must be an integer from ${min} to ${max}, got '${raw}'`)
  return Number(raw)
}

/** setTimeout's largest delay: a longer timeout would fire at once. */
const MAX_TIMEOUT_MS = 2 ** 31 - 1

async function runWorker (flags: Flags, logger: Logger): Promise<void> {
  const repo = flags['model-repository'] ?? usage('flotilla worker needs --model-repository DIR')
  const [{ parseCacheConfig }, { DEFAULT_MAX_BODY_BYTES, startWorker }, { CONSUL_ONLY_FLAGS, consulOptionsFromFlags }] = await Promise.all([
    import('../worker/cache/response-cache.ts'), import('../worker/main.ts'), import('../worker/registration/flags.ts')
  ])
  const maxBodyBytes = byteCount(flags, 'max-body-bytes')
  const grpcMaxMessageBytes = byteCount(flags, 'grpc-max-message-bytes')
  const httpPort = port(flags, 'http-port')
  const grpcPort = port(flags, 'grpc-port', -1)
  const metricsPort = port(flags, 'metrics-port', -1)
  const limits = {
    // As the gateway's gateway.max_header_bytes: below 1 KiB ordinary headers fail, above 1 MiB headers are an attack.
    maxHeaderBytes: boundedInteger(flags, 'max-header-bytes', 1024, 1024 * 1024),
    maxHeaderCount: boundedInteger(flags, 'max-header-count', 1, 10_000),
    headerTimeoutMs: boundedInteger(flags, 'header-timeout-ms', 1, MAX_TIMEOUT_MS),
    bodyTimeoutMs: boundedInteger(flags, 'body-timeout-ms', 1, MAX_TIMEOUT_MS),
    idleTimeoutMs: boundedInteger(flags, 'idle-timeout-ms', 1, MAX_TIMEOUT_MS)
  }
  if (limits.headerTimeoutMs !== undefined && limits.bodyTimeoutMs !== undefined && limits.headerTimeoutMs > limits.bodyTimeoutMs) {
    usage('--header-timeout-ms must not be longer than --body-timeout-ms (the whole request includes its headers)')
  }
  let responseCache
  try {
    responseCache = flags['cache-config'] === undefined ? undefined : parseCacheConfig(flags['cache-config'])
  } catch (err) {
    usage((err as Error).message)
  }
  // Consul floors check intervals at 1 s and DeregisterCriticalServiceAfter at 1 min: below those it would differ.
  const checkIntervalMs = boundedInteger(flags, 'consul-check-interval-ms', 1000, 600_000)
  const deregisterAfterMs = boundedInteger(flags, 'consul-deregister-after-ms', 60_000, MAX_TIMEOUT_MS)
  let consul
  try {
    consul = consulOptionsFromFlags({ ...flags, checkIntervalMs, deregisterAfterMs })
  } catch (err) {
    usage((err as Error).message)
  }
  const strays = CONSUL_ONLY_FLAGS.filter(name => flags[name] !== undefined)
  if (consul === undefined && strays.length > 0) {
    logger.warn({ flags: strays.map(name => `--${name}`) }, 'no --consul-addr or CONSUL_HTTP_ADDR: not registering in Consul')
  }
  const worker = await startWorker({
    modelRepository: repo,
    logger,
    ...(consul !== undefined ? { consul } : {}),
    ...(responseCache !== undefined ? { responseCache } : {}),
    maxBodyBytes: maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
    ...(grpcMaxMessageBytes !== undefined ? { grpcMaxMessageBytes } : {}),
    ...(flags.host !== undefined ? { host: flags.host } : {}),
    ...(httpPort !== undefined ? { httpPort } : {}),
    ...(grpcPort !== undefined ? { grpcPort } : {}),
    ...(metricsPort !== undefined ? { metricsPort } : {}),
    ...Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== undefined))
  })
  shutdown = () => worker.close()
  announce({ role: 'worker', httpPort: worker.httpPort, grpcPort: worker.grpcPort, metricsPort: worker.metricsPort, url: worker.url })
}

async function runGateway (flags: Flags, logger: Logger): Promise<void> {
  const file = flags.config ?? usage('flotilla gateway needs --config FILE (a fleet file)')
  const { loadGatewayConfig, startGateway } = await import('../gateway/main.ts')
  const config = loadGatewayConfig(file)
  const httpPort = port(flags, 'http-port')
  const grpcPort = port(flags, 'grpc-port', -1)
  const metricsPort = port(flags, 'metrics-port', -1)
  const adminPort = port(flags, 'admin-port', -1)
  const gateway = await startGateway({
    config,
    configPath: file,
    logger,
    ...(flags.host !== undefined ? { host: flags.host } : {}),
    ...(httpPort !== undefined ? { httpPort } : {}),
    ...(grpcPort !== undefined ? { grpcPort } : {}),
    ...(metricsPort !== undefined ? { metricsPort } : {}),
    ...(adminPort !== undefined ? { adminPort } : {})
  })
  shutdown = () => gateway.close()
  // nginx's habit: SIGHUP re-reads the configuration (the file is watched too, unless gateway.watch is false).
  process.on('SIGHUP', () => { gateway.reload().catch(() => {}) })
  announce({ role: 'gateway', httpPort: gateway.httpPort, grpcPort: gateway.grpcPort, metricsPort: gateway.metricsPort, adminPort: gateway.adminPort, url: gateway.url })
}

interface ReadyMessage { type: string, httpPort: number, grpcPort: number, metricsPort: number, url: string }

/**
 * Forks `flotilla worker` and resolves with its ports once it listens; rejects if it exits first. The child is in
 * a process group of its own, so a Ctrl-C reaches only this process, which then stops the workers in order
 * (after the gateway has finished with them).
 */
function forkWorker (args: string[], name: string, children: ChildProcess[]): Promise<{ child: ChildProcess, ready: ReadyMessage }> {
  // The demo fleet is the fleet file's: its workers do not register in a Consul agent the shell happens to name.
  const { [CONSUL_ADDR_ENV]: _consul, ...env } = process.env
  const child = fork(SELF, ['worker', ...args], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], detached: true, env })
  children.push(child)
  return new Promise((resolveReady, reject) => {
    const onExit = (code: number | null, signal: string | null): void => {
      reject(new Error(`worker '${name}' exited before it was ready (code ${code}, signal ${signal}); see its log above`))
    }
    child.once('exit', onExit)
    child.once('error', reject)
    child.on('message', (m: ReadyMessage) => {
      if (m?.type !== 'flotilla:ready') return
      child.off('exit', onExit)
      resolveReady({ child, ready: m })
    })
  })
}

async function runStart (flags: Flags, logger: Logger): Promise<void> {
  const file = resolve(flags.config ?? DEFAULT_FLEET)
  const [{ loadGatewayConfig, startGateway }, { grpcPortOf }] = await Promise.all([import('../gateway/main.ts'), import('../gateway/fleet/fleet-config.ts')])
  const fleet = loadGatewayConfig(file)
  if (fleet.model_repository === undefined) {
    usage(`flotilla start serves the fleet file's model_repository, and ${file} has none; add one or start workers yourself`)
  }
  const repo = isAbsolute(fleet.model_repository) ? fleet.model_repository : resolve(dirname(file), fleet.model_repository)
  const servers = fleet.inference_servers
  for (const s of servers) {
    if (!isLoopbackHost(s.host)) {
      usage(`flotilla start runs every worker on this machine, but server '${s.name}' has host ${s.host}; ` +
        "use 'flotilla gateway --config' for a fleet on other hosts")
    }
  }
  let workerPorts = servers.map(s => s.port)
  let workerGrpcPorts = servers.map(s => grpcPortOf(s))
  const rawPorts = flags['worker-ports']
  if (rawPorts !== undefined) {
    const list = rawPorts.split(',').map(p => p.trim())
    if (!list.every(p => /^[0-9]+$/.test(p) && Number(p) <= 65534) || (list.length !== 1 && list.length !== servers.length)) {
      usage(`--worker-ports takes 0 or ${servers.length} comma-separated ports below 65535 (one per server), got '${rawPorts}'`)
    }
    workerPorts = list.length === 1 && list[0] === '0' ? servers.map(() => 0) : list.map(Number)
    // Triton's layout: the gRPC port next to the HTTP port; 0 stays 0 (a free port).
    workerGrpcPorts = workerPorts.map(p => p === 0 ? 0 : p + 1)
  }

  const level = flags['log-level'] ?? process.env.LOG_LEVEL ?? 'info'
  const children: ChildProcess[] = []
  let stopping = false
  const stopChildren = async (): Promise<void> => {
    stopping = true
    await Promise.all(children.map(c => c.exitCode !== null || c.signalCode !== null
      ? undefined
      : new Promise(r => { c.once('exit', r); c.kill('SIGTERM') })))
  }
  shutdown = stopChildren
  let started
  try {
    started = await Promise.all(servers.map((s, i) => forkWorker([
      '--model-repository', repo, '--host', s.host, '--http-port', String(workerPorts[i]),
      '--grpc-port', String(workerGrpcPorts[i]), '--metrics-port', '0',
      '--log-level', level
    ], s.name, children)))
  } catch (err) {
    await stopChildren()
    throw err
  }
  for (const [i, { child }] of started.entries()) {
    child.once('exit', (code, signal) => {
      const fields = { worker: servers[i]!.name, code, signal }
      if (stopping) logger.info(fields, 'worker stopped')
      else logger.warn(fields, 'worker exited; the gateway sends its requests to the other workers')
    })
  }

  const config: FleetConfig = {
    ...fleet,
    inference_servers: servers.map((s, i) => ({ ...s, port: started[i]!.ready.httpPort, grpc_port: started[i]!.ready.grpcPort }))
  }
  const httpPort = port(flags, 'http-port')
  const grpcPort = port(flags, 'grpc-port', -1)
  const metricsPort = port(flags, 'metrics-port', -1)
  const adminPort = port(flags, 'admin-port', -1)
  let gateway
  try {
    // No configPath: the workers' ports were chosen here, so the file on disk no longer describes this fleet.
    gateway = await startGateway({
      config,
      logger,
      ...(flags.host !== undefined ? { host: flags.host } : {}),
      ...(httpPort !== undefined ? { httpPort } : {}),
      ...(grpcPort !== undefined ? { grpcPort } : {}),
      ...(metricsPort !== undefined ? { metricsPort } : {}),
      ...(adminPort !== undefined ? { adminPort } : {})
    })
  } catch (err) {
    await stopChildren()
    throw err
  }
  const g = gateway
  shutdown = async () => { await g.close(); await stopChildren() }

  const lines = [
    '',
    'Flotilla demo fleet is up.',
    `  gateway   ${g.url}${g.grpcPort >= 0 ? `   gRPC 127.0.0.1:${g.grpcPort}` : ''}${g.metricsPort >= 0 ? `   metrics http://127.0.0.1:${g.metricsPort}/metrics` : ''}`,
    ...(g.adminPort >= 0 ? [`  admin     http://127.0.0.1:${g.adminPort}   (flotilla fleet list${g.adminPort === 9000 ? '' : ` --admin http://127.0.0.1:${g.adminPort}`})`] : []),
    ...servers.map((s, i) => `  worker    ${s.name.padEnd(10)} ${started[i]!.ready.url}   gRPC ${started[i]!.ready.grpcPort}   models: ${s.models.join(', ')}`),
    `Try:  curl -s ${g.url}/v2/models/simple`,
    'Stop: Ctrl-C',
    ''
  ]
  process.stdout.write(lines.join('\n') + '\n')
  announce({ role: 'gateway', httpPort: g.httpPort, grpcPort: g.grpcPort, metricsPort: g.metricsPort, adminPort: g.adminPort, url: g.url })
}

/** parseArgs reads `--metrics-port -1` as two options; join a value-taking flag with a negative number after it. */
function joinNegativeValues (argv: readonly string[]): string[] {
  const out: string[] = []
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    const next = argv[i + 1]
    const name = arg.startsWith('--') ? arg.slice(2) : ''
    if (name in options && options[name as keyof typeof options].type === 'string' && next !== undefined && /^-[0-9]+$/.test(next)) {
      out.push(`${arg}=${next}`)
      i++
    } else {
      out.push(arg)
    }
  }
  return out
}

async function main (argv: string[]): Promise<void> {
  // `bench` is a load generator, with flags of its own (perf_analyzer's).
  if (argv[0] === 'bench') {
    const { runBenchCommand } = await import('./perf/bench-command.ts')
    process.exitCode = await runBenchCommand(argv.slice(1), {
      stdout: process.stdout,
      stderr: process.stderr,
      readFile: (path) => readFileSync(path, 'utf8'),
      writeFile: (path, data) => { writeFileSync(path, data) }
    })
    return
  }
  // `fleet` is a client of a running gateway, with flags of its own; `cache` is its `fleet cache`.
  if (argv[0] === 'fleet' || argv[0] === 'cache') {
    const { runFleetCommand } = await import('../gateway/admin/fleet-cli.ts')
    process.exitCode = await runFleetCommand(argv[0] === 'cache' ? argv : argv.slice(1), {
      stdout: process.stdout,
      stderr: process.stderr,
      env: process.env,
      readFile: (path) => readFileSync(path, 'utf8'),
      sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms))
    })
    return
  }
  let parsed
  try {
    parsed = parseArgs({ args: joinNegativeValues(argv), options, allowPositionals: true, strict: true })
  } catch (err) {
    usage((err as Error).message)
  }
  const { values: flags, positionals } = parsed
  const command = positionals[0]
  if (flags.version === true) {
    process.stdout.write(`${FLOTILLA_VERSION}\n`)
    return
  }
  if (flags.help === true || command === undefined || command === 'help') {
    process.stdout.write(USAGE)
    return
  }
  const allowed = ALLOWED[command]
  if (allowed === undefined) usage(`unknown command '${command}'`)
  if (positionals.length > 1) usage(`unexpected argument '${positionals[1]}'`)
  for (const key of Object.keys(flags) as Array<keyof Flags>) {
    if (!allowed.includes(key)) usage(`flotilla ${command} does not take --${key}`)
  }
  const level = flags['log-level']
  if (level !== undefined && !LOG_LEVELS.includes(level)) usage(`--log-level must be one of ${LOG_LEVELS.join(', ')}`)
  const logger = createLogger({ ...(level !== undefined ? { level } : {}), bindings: { component: command } })
  installSignalHandlers(logger)
  if (command === 'worker') await runWorker(flags, logger)
  else if (command === 'gateway') await runGateway(flags, logger)
  else await runStart(flags, logger)
}

main(process.argv.slice(2)).catch((err: unknown) => {
  const message = isFlotillaError(err) || err instanceof Error ? err.message : String(err)
  process.stderr.write(`flotilla: ${message}\n`)
  process.exitCode = isFlotillaError(err) && err.code === 'CLI_ERR_USAGE' ? 2 : 1
  // Anything already listening (a worker forked before the failure) must not keep this process alive.
  setImmediate(() => process.exit())
})
