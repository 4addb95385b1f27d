/**
 * `flotilla worker`'s Consul flags (and Consul's own environment variables) as {@link WorkerConsulOptions}: kept
 * apart from bin/flotilla.ts so that every refusal can be tested without starting a process. The CLI checks the
 * integer flags itself, as it does its others.
 */
import { CONSUL_ADDR_ENV, CONSUL_TOKEN_FILE_ENV, parseConsulAddress, readConsulToken } from '../../common/consul.ts'
import { createError } from '../../common/errors.ts'
import { checkAdvertiseHost, checkServiceName, checkTags, parseLabels, type WorkerConsulOptions } from './service-definition.ts'

/** The flags as parsed (strings; the two integers already checked). */
export interface ConsulFlags {
  'consul-addr'?: string | undefined
  'consul-service'?: string | undefined
  'consul-token-file'?: string | undefined
  'advertise-host'?: string | undefined
  label?: string[] | undefined
  'consul-tag'?: string[] | undefined
  checkIntervalMs?: number | undefined
  deregisterAfterMs?: number | undefined
}

/** The flags that mean nothing without an agent: the CLI warns when one comes without --consul-addr. */
export const CONSUL_ONLY_FLAGS = ['consul-service', 'consul-token-file', 'advertise-host', 'label', 'consul-tag'] as const

/**
 * The registration the flags ask for; undefined when neither `--consul-addr` nor `CONSUL_HTTP_ADDR` names an
 * agent. Each value is checked even then, so a bad one is refused whatever the environment.
 *
 * @throws FlotillaError `FLT_ERR_CONSUL_CONFIG` whose message starts with the flag (or variable) at fault
 */
export function consulOptionsFromFlags (flags: ConsulFlags, env: NodeJS.ProcessEnv = process.env): WorkerConsulOptions | undefined {
  const service = check('--consul-service', flags['consul-service'], checkServiceName)
  const advertiseHost = check('--advertise-host', flags['advertise-host'], checkAdvertiseHost)
  const labels = parseLabels(flags.label ?? [], '--label')
  const tags = checkTags(flags['consul-tag'] ?? [], '--consul-tag')
  const fromFlag = flags['consul-addr']
  const address = fromFlag ?? (env[CONSUL_ADDR_ENV] === '' ? undefined : env[CONSUL_ADDR_ENV])
  if (address === undefined) return undefined
  check(fromFlag !== undefined ? '--consul-addr' : CONSUL_ADDR_ENV, address, parseConsulAddress)
  const tokenFile = flags['consul-token-file']
  // Only reading a file can fail: the flag's, else (with no CONSUL_HTTP_TOKEN) the variable's.
  const token = tokenFile !== undefined
    ? check('--consul-token-file', tokenFile, file => readConsulToken(file, env))
    : check(CONSUL_TOKEN_FILE_ENV, '', () => readConsulToken(undefined, env))
  return {
    address,
    labels,
    tags,
    ...(service !== undefined ? { service } : {}),
    ...(token !== undefined ? { token } : {}),
    ...(advertiseHost !== undefined ? { advertiseHost } : {}),
    ...(flags.checkIntervalMs !== undefined ? { checkIntervalMs: flags.checkIntervalMs } : {}),
    ...(flags.deregisterAfterMs !== undefined ? { deregisterAfterMs: flags.deregisterAfterMs } : {})
  }
}

function check<T> (source: string, value: string | undefined, parse: (value: string) => T): T | undefined {
  if (value === undefined) return undefined
  try {
    return parse(value)
  } catch (err) {
    throw createError('FLT_ERR_CONSUL_CONFIG', `${source}: ${(err as Error).message}`)
  }
}
