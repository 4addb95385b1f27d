import { pino, type Logger, type LoggerOptions } from 'pino'

export type { Logger }

/** Options for {@link createLogger}. */
export interface CreateLoggerOptions {
  /** pino level; defaults to `LOG_LEVEL` from the environment, else `info`. */
  level?: string
  /** Bound into every line, e.g. `{ component: 'gateway' }`. */
  bindings?: Record<string, unknown>
  /** Where lines go; defaults to stdout. Tests pass a sink. */
  destination?: NodeJS.WritableStream
}

/** One JSON line per event, as pino writes them; the tiers bind `component` so merged logs stay readable. */
export function createLogger (options: CreateLoggerOptions = {}): Logger {
  const opts: LoggerOptions = {
    level: options.level ?? process.env.LOG_LEVEL ?? 'info',
    base: { pid: process.pid, ...options.bindings }
  }
  return options.destination === undefined ? pino(opts) : pino(opts, options.destination)
}

/** A logger that drops everything, for tests and benchmarks. */
export function silentLogger (): Logger {
  return pino({ level: 'silent' })
}
