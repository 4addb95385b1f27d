/** Small, fixed hash functions: the same on every process and replica, so hashed decisions agree across them. */

/** MurmurHash3's 32-bit finaliser: every input bit moves every output bit, so nearby inputs land far apart. */
export function fmix32 (h: number): number {
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}
