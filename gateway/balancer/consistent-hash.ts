/**
 * Consistent hashing with bounded load: requests with the same affinity key (`ctx.hashKey`, from a configured
 * header) go to the same endpoint, so a worker's response cache or session state is reused, unless that endpoint
 * already carries more than its fair share, in which case the request walks on to the next endpoint on the ring.
 *
 * The ring (Karger et al., 1997; Envoy's ring hash, NGINX's `hash … consistent`):
 *
 *     0 ────●a────●c──●b─────●a───●b────●c─────── 2^32 (wraps)
 *                  ▲ hash(key): the first point at or after it owns the key
 *
 * - Each endpoint with weight > 0 gets `160 × weight / g` points (ketama's and NGINX's 160 per unit of weight; `g`
 *   is the gcd of the positive weights, so equal weights of any size cost 160 points each). A point's position
 *   depends only on the endpoint's name and the point's number, never on the other endpoints, so removing one of
 *   N equal endpoints moves only the keys it owned (about 1/N), and every gateway replica builds the same ring.
 *   Above 2^17 points in all (more than ~800 equal endpoints), every count is scaled down to fit, at the cost of
 *   some extra movement when the fleet changes size. Weight 0 has no points and takes no traffic.
 * - Hash: FNV-1a (32-bit) over the key's UTF-16 code units, low byte first, followed by MurmurHash3's fmix32
 *   finaliser. FNV-1a ends in multiplications only, so keys that differ only in their last character
 *   ("user-1" … "user-9") land on a lattice (their differences are small multiples of a fixed constant modulo
 *   2^32) rather than at independent points; the finaliser makes positions behave like random ones, which the
 *   ring's balance relies on. Fast, no allocation, the same in every process and release (the tests pin it); not
 *   meant to resist crafted keys (bounded load caps what those can do to one endpoint).
 * - The ring is two Uint32Arrays (point positions, sorted, and their owners), built once per candidate array and
 *   kept in a WeakMap; a pick is a binary search, O(log points).
 *
 * Bounded load (Mirrokni, Thorup and Zadimoghaddam, "Consistent Hashing with Bounded Loads", 2018; Envoy
 * `hash_balance_factor`, HAProxy `hash-balance-factor`): with T requests in flight over the ring's endpoints,
 * total weight W and factor c (default 1.25), an endpoint of weight w may take the request only while
 * `inFlight < ceil(c × (T + 1) × w / W)`, its weighted share of the load including this request. Otherwise the
 * walk goes on round the ring (the paper's "forwarding"). Since the capacities add up to at least T + 1, some
 * endpoint always has room, so the walk ends; excluded endpoints are skipped, and if only full endpoints remain it
 * returns the first non-excluded one it met (the key's usual endpoint, when that one is not excluded). A key stays
 * on its endpoint as long as that endpoint is under the bound. Counting T is one O(n) pass a pick. Factor 0 turns
 * bounded load off (pure consistent hashing). The load is this gateway's in-flight count, so the bound holds per
 * replica.
 *
 * No key (or an empty one): the request starts the walk at a random point (one draw of the injected `random`), so
 * keyless requests spread in proportion to weight and still respect the bound, rather than all landing on the
 * endpoint that owns the hash of the empty string.
 */
import { fmix32 } from '../../common/hash.ts'
import { scanCopy } from './copy.ts'
import { checkedOptions, DEFAULT_HASH_BALANCE_FACTOR, type BalancerOptionKey } from './options.ts'
import { type Balancer, type BalancerDeps, type BalancerOptions, type Endpoint, type PickContext } from './types.ts'

export const CONSISTENT_HASH = 'consistent_hash'
/** Consistent hashing takes `hashBalanceFactor`. */
export const CONSISTENT_HASH_OPTION_KEYS: readonly BalancerOptionKey[] = Object.freeze(['hashBalanceFactor'])

/** Points per unit of weight, as ketama and NGINX place them. */
export const POINTS_PER_WEIGHT = 160
/** The most points a ring holds (1 MiB of typed arrays); larger rings are scaled down to this. */
export const MAX_RING_POINTS = 1 << 17
/** Ring positions and owner indices are packed into one float64 to sort natively: owner below 2^21. */
const OWNER_BITS = 2 ** 21

/** One candidate set's ring. */
interface Ring {
  /** The plain copy of the set that picks read (see `copy.ts`); `owners` index into it. */
  readonly list: readonly Endpoint[]
  /** Point positions, ascending. */
  readonly positions: Uint32Array
  /** `owners[i]` is the index in the candidate array of the endpoint owning `positions[i]`. */
  readonly owners: Uint32Array
  /** Σ weight over the endpoints on the ring. */
  readonly totalWeight: number
}

/**
 * The 32-bit hash of `key` that places it on the ring: FNV-1a over its UTF-16 code units (low byte first), then
 * MurmurHash3's fmix32. Exported so the tests and the config docs can show where a key lands.
 */
export function hash32 (key: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < key.length; i++) {
    const unit = key.charCodeAt(i)
    h = Math.imul(h ^ (unit & 0xff), 0x01000193)
    h = Math.imul(h ^ (unit >>> 8), 0x01000193)
  }
  return fmix32(h)
}

/**
 * Consistent hashing on `ctx.hashKey`, with bounded load.
 *
 * @param options `hashBalanceFactor` (default {@link DEFAULT_HASH_BALANCE_FACTOR}; 0 = no bound); other keys are a
 *   `GW_ERR_FLEET_INVALID`
 */
export function createConsistentHash (deps: BalancerDeps, options?: BalancerOptions): Balancer {
  const factor = checkedOptions(CONSISTENT_HASH, CONSISTENT_HASH_OPTION_KEYS, options).hashBalanceFactor ??
    DEFAULT_HASH_BALANCE_FACTOR
  const rings = new WeakMap<readonly Endpoint[], Ring>()

  function ringFor (candidates: readonly Endpoint[]): Ring {
    let ring = rings.get(candidates)
    if (ring === undefined) {
      // Built once per candidate set, not per pick.
      ring = buildRing(candidates)
      rings.set(candidates, ring)
    }
    return ring
  }

  return {
    name: CONSISTENT_HASH,
    pick (candidates: readonly Endpoint[], ctx: PickContext): Endpoint | undefined {
      if (candidates.length === 0) return undefined
      const { list, positions, owners, totalWeight } = ringFor(candidates)
      const size = positions.length
      if (size === 0) return undefined
      const key = ctx.hashKey
      const h = key === undefined || key === '' ? (deps.random() * 4294967296) >>> 0 : hash32(key)
      // The first point at or after h, wrapping past the top.
      let lo = 0
      let hi = size
      while (lo < hi) {
        const mid = (lo + hi) >>> 1
        if ((positions[mid] ?? 0) < h) lo = mid + 1
        else hi = mid
      }
      const start = lo === size ? 0 : lo

      // The bound per unit of weight, c × (T + 1) / W, shared by every endpoint the walk meets.
      let share = 0
      if (factor > 0) {
        let total = 0
        for (let i = 0; i < list.length; i++) {
          const endpoint = list[i]
          if (endpoint !== undefined && endpoint.weight > 0) total += endpoint.inFlight
        }
        share = factor * (total + 1) / totalWeight
      }

      const exclude = ctx.exclude
      let fallback: Endpoint | undefined
      let rejected = -1
      for (let k = 0; k < size; k++) {
        const i = start + k < size ? start + k : start + k - size
        const owner = owners[i] ?? 0
        // Consecutive points of one endpoint that was just turned away need no second look.
        if (owner === rejected) continue
        const endpoint = list[owner]
        if (endpoint === undefined || (exclude !== undefined && exclude.has(endpoint))) {
          rejected = owner
          continue
        }
        if (factor === 0) return endpoint
        fallback ??= endpoint
        const capacity = share * endpoint.weight
        // A hair under, so that float error in an exact multiple (5.000000001 for 5) does not round up.
        if (endpoint.inFlight < Math.ceil(capacity - capacity * 1e-12)) return endpoint
        rejected = owner
      }
      return fallback
    }
  }
}

/** The ring of `candidates`: see the rationale above for the point counts and positions. */
function buildRing (candidates: readonly Endpoint[]): Ring {
  const list = scanCopy(candidates)
  let gcdWeight = 0
  let integral = true
  let totalWeight = 0
  for (const endpoint of candidates) {
    const weight = endpoint.weight
    if (!(weight > 0)) continue
    totalWeight += weight
    if (Number.isInteger(weight)) gcdWeight = gcd(gcdWeight, weight)
    else integral = false
  }
  // Fleet-file weights are integers; a fractional one (from discovery, say) just skips the normalisation.
  const unit = integral && gcdWeight > 0 ? gcdWeight : 1
  const counts = new Uint32Array(candidates.length)
  let points = 0
  for (let i = 0; i < candidates.length; i++) {
    const weight = candidates[i]?.weight ?? 0
    if (!(weight > 0) || i >= OWNER_BITS) continue
    const count = Math.max(1, Math.round(POINTS_PER_WEIGHT * weight / unit))
    counts[i] = count
    points += count
  }
  if (points > MAX_RING_POINTS) {
    const scale = MAX_RING_POINTS / points
    points = 0
    for (let i = 0; i < counts.length; i++) {
      const count = counts[i] ?? 0
      if (count === 0) continue
      counts[i] = Math.max(1, Math.floor(count * scale))
      points += counts[i] ?? 0
    }
  }
  // Position and owner packed into one exact float64 (position × 2^21 + owner), so a native numeric sort orders
  // by position, and by owner (fleet order) in the unlikely case of two equal positions.
  const packed = new Float64Array(points)
  let k = 0
  for (let i = 0; i < candidates.length; i++) {
    const count = counts[i] ?? 0
    if (count === 0) continue
    const base = hash32(candidates[i]?.name ?? '')
    for (let j = 0; j < count; j++) {
      packed[k++] = fmix32((base ^ Math.imul(j + 1, 0x9e3779b9)) >>> 0) * OWNER_BITS + i
    }
  }
  packed.sort()
  const positions = new Uint32Array(points)
  const owners = new Uint32Array(points)
  for (let p = 0; p < points; p++) {
    const value = packed[p] ?? 0
    const owner = value % OWNER_BITS
    owners[p] = owner
    positions[p] = (value - owner) / OWNER_BITS
  }
  return { list, positions, owners, totalWeight }
}

function gcd (a: number, b: number): number {
  while (b !== 0) {
    const r = a % b
    a = b
    b = r
  }
  return a
}
