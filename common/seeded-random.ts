/**
 * A seeded random source for everything that must be reproducible: tests of strategies that draw, and benchmark
 * inputs and arrival schedules. Production code takes `Math.random` through injection (style: randomness is
 * injected), and tests and benches inject this instead.
 */

/**
 * mulberry32: uniform in [0, 1), the same sequence for the same seed on every run and machine. Small and fast; not
 * for anything that must be unpredictable.
 */
export function seededRandom (seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let z = state
    z = Math.imul(z ^ (z >>> 15), z | 1)
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61)
    return ((z ^ (z >>> 14)) >>> 0) / 4294967296
  }
}
