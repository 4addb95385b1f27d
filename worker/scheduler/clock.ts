/**
 * The production {@link SchedulerClock}: monotonic nanoseconds from `process.hrtime.bigint()`, timers from Node.
 *
 * Node's timers count whole milliseconds (and fire a little late), while Triton's `max_queue_delay_microseconds` is
 * often 100-500 µs: a timer would turn a 100 µs delay into 1-2 ms, and a batcher at low load would add that to
 * every request. So a wait under a millisecond is a chain of `setImmediate` turns that checks the clock each time:
 * it yields to I/O between checks (requests arriving meanwhile are read and can complete the batch), and costs a
 * few µs of CPU per turn for at most that millisecond. Longer waits use a timer, rounded up, and a scheduler that
 * wakes a little early re-checks and waits again.
 */
import { type SchedulerClock } from './types.ts'

const NS_PER_MS = 1_000_000
const ONE_MS = 1_000_000n

/** A pending wait: a timer, or a `setImmediate` chain (cancelled through its flag). */
type Wait = { kind: 'timer', timer: ReturnType<typeof setTimeout> } | { kind: 'spin', cancelled: boolean }

export const REAL_CLOCK: SchedulerClock = {
  now: () => process.hrtime.bigint(),
  setTimeout: (fn: () => void, ns: bigint): unknown => {
    if (ns >= ONE_MS) return { kind: 'timer', timer: setTimeout(fn, Math.ceil(Number(ns) / NS_PER_MS)) } satisfies Wait
    const wait: Wait = { kind: 'spin', cancelled: false }
    const at = process.hrtime.bigint() + ns
    const turn = (): void => {
      if (wait.cancelled) return
      if (process.hrtime.bigint() >= at) fn()
      else setImmediate(turn)
    }
    setImmediate(turn)
    return wait
  },
  clearTimeout: (handle: unknown): void => {
    const wait = handle as Wait | undefined
    if (wait === undefined) return
    if (wait.kind === 'timer') clearTimeout(wait.timer)
    else wait.cancelled = true
  }
}
