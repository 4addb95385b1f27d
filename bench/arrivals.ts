/**
 * A seeded, bursty arrival schedule for open-loop load: when each request is due, computed before the first one is
 * sent, so that every target of a benchmark is offered exactly the same requests at exactly the same offsets.
 *
 * The shape is an on/off modulated Poisson process. Time is cut into periods of `periodMs`; the first
 * `burstDuty` of each period is a burst at `burstFactor × rate`, the rest runs at the lower rate that keeps the
 * mean at `rate`:
 *
 *     rate ▲  ┌──┐        ┌──┐        ┌──┐
 *   burst │  │  │        │  │        │  │
 *    mean │- │- │- - - - │- │- - - - │- │- - -
 *    base │  │  └────────┘  └────────┘  └─────
 *         └──┴───────────┴───────────┴────────▶ t
 *            ◀── period ──▶
 *
 * Within each phase arrivals are Poisson (exponential gaps), so requests also bunch up at random inside a phase,
 * as independent clients do. A gap that runs past the end of a phase is redrawn from the boundary at the next
 * phase's rate; for exponential gaps that is exact (they have no memory), so the process is a true piecewise
 * Poisson process. Why bursts at all: a steady Poisson load at 60-75% of capacity hides what a strategy does when
 * demand briefly exceeds it, which is where routing decides the tail.
 */
import { seededRandom } from '../common/seeded-random.ts'

/** The load's shape; every field is validated by {@link arrivalSchedule}. */
export interface ArrivalShape {
  /** Mean arrivals per second over a whole period. */
  readonly rate: number
  /** The rate during a burst, as a multiple of `rate`; 1 is a plain Poisson process. */
  readonly burstFactor: number
  /** The share of each period spent in a burst, in (0, 1]; `burstFactor × burstDuty` must be at most 1. */
  readonly burstDuty: number
  /** The length of one burst-plus-rest period, in milliseconds. */
  readonly periodMs: number
  /** Seeds the arrival times: the same shape and seed give the same schedule on every run. */
  readonly seed: number
}

/** The arrival rates (per second) inside and outside a burst. */
export function phaseRates (shape: ArrivalShape): { burst: number, base: number } {
  const burst = shape.rate * shape.burstFactor
  // The rest of the period makes up the difference so that the mean stays `rate`.
  const base = shape.burstDuty >= 1 ? burst : shape.rate * (1 - shape.burstFactor * shape.burstDuty) / (1 - shape.burstDuty)
  return { burst, base }
}

/**
 * The offsets, in milliseconds from the start and ascending, at which requests are due during `seconds`.
 *
 * @throws Error when the shape is out of range (the message names the field)
 */
export function arrivalSchedule (shape: ArrivalShape, seconds: number): Float64Array {
  if (!(shape.rate > 0) || !Number.isFinite(shape.rate)) throw new Error(`rate must be > 0, got ${shape.rate}`)
  if (!(shape.burstFactor >= 1)) throw new Error(`burstFactor must be >= 1, got ${shape.burstFactor}`)
  if (!(shape.burstDuty > 0 && shape.burstDuty <= 1)) throw new Error(`burstDuty must be in (0, 1], got ${shape.burstDuty}`)
  if (shape.burstFactor * shape.burstDuty > 1 + 1e-9) {
    throw new Error(`burstFactor × burstDuty must be at most 1 (the rest of the period cannot go below 0 rps), got ${shape.burstFactor * shape.burstDuty}`)
  }
  if (!(shape.periodMs > 0)) throw new Error(`periodMs must be > 0, got ${shape.periodMs}`)
  const random = seededRandom(shape.seed)
  const { burst, base } = phaseRates(shape)
  const endMs = seconds * 1000
  const burstMs = shape.periodMs * shape.burstDuty
  const times: number[] = []
  // Phase by phase, each from its own boundary (computed from the period index, so no rounding drift builds up).
  for (let start = 0, k = 0; start < endMs; k++, start = k * shape.periodMs) {
    poissonInto(times, random, start, Math.min(endMs, start + burstMs), burst)
    poissonInto(times, random, Math.min(endMs, start + burstMs), Math.min(endMs, start + shape.periodMs), base)
  }
  return Float64Array.from(times)
}

/** Appends Poisson arrivals at `perSecond` in [`fromMs`, `toMs`) to `times`. */
function poissonInto (times: number[], random: () => number, fromMs: number, toMs: number, perSecond: number): void {
  if (!(perSecond > 0)) return
  const perMs = perSecond / 1000
  // 1 - random() is in (0, 1], so the log is finite.
  for (let t = fromMs - Math.log(1 - random()) / perMs; t < toMs; t -= Math.log(1 - random()) / perMs) times.push(t)
}
