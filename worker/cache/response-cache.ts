/**
 * Triton's response cache in the worker (triton-behaviour.md §7; server docs/user_guide/response_cache.md; the
 * `local` cache, triton-inference-server/local_cache src/local_cache.cc): one LRU bounded in bytes, shared by every
 * model and version of the worker (`--cache-config local,size=N`), used by the models whose config.pbtxt says
 * `response_cache { enable: true }`. Entries are looked up by `common/protocol/request-key.ts` keys (model, version,
 * inputs, requested outputs, parameters) and hold a successful answer's outputs as computed; the inference service
 * (worker/inference/inference-service.ts) looks up before the scheduler, as Triton's schedulers do at enqueue, and
 * inserts after a successful execution.
 *
 * As Triton's local cache:
 * - the least recently used entries are evicted to make room (a lookup that hits makes its entry the most recent);
 * - an answer larger than the whole cache is not stored ("Requested byte_size: N is greater than total cache size:
 *   M"), and the request still counts as a miss;
 * - inserting a key that is already there (two identical requests that both missed) keeps the entry there and reports
 *   it, so that the second is not counted as a miss (core src/dynamic_batch_scheduler.cc counts a miss only when
 *   the insert did not answer ALREADY_EXISTS).
 *
 * Sizes are what an entry keeps alive: its tensors' bytes (BYTES elements in one block), plus a fixed allowance per
 * entry, tensor and BYTES element for the objects around them ({@link entryBytes}). Triton's cache counts its own
 * serialization inside a preallocated block; the two budgets are alike, not equal.
 */
import { LRUCache } from 'lru-cache'
import { createError } from '../../common/errors.ts'
import { type Logger } from '../../common/logger.ts'
import { BytesData } from '../../common/protocol/bytes-data.ts'
import { type Parameters, type Tensor, type TensorData } from '../../common/protocol/types.ts'
import { type ModelRepository } from '../repository/model-repository.ts'

/** What `--cache-config` configures: the one cache implementation the worker has, Triton's `local`. */
export interface ResponseCacheConfig {
  readonly kind: 'local'
  /** The byte budget (`size=`). */
  readonly sizeBytes: number
}

/** Allowance for one entry's own objects (the entry, its key strings, the LRU's node). */
export const ENTRY_OVERHEAD_BYTES = 256
/** Allowance for one output tensor's objects (the tensor, its shape array, its typed array). */
export const TENSOR_OVERHEAD_BYTES = 128
/** Each BYTES element's place in its tensor's index (BytesData: a start and an end, 4 bytes each). */
export const BYTES_ELEMENT_OVERHEAD_BYTES = 8

/** One stored answer. Frozen in spirit: nothing that reads it may change it. */
export interface CachedResponse {
  /** The request's full digest (`requestKey(...).check`): a lookup whose check differs is a miss. */
  readonly check: string
  readonly outputs: readonly Tensor[]
  readonly parameters?: Parameters
  /** What the entry counts against the budget ({@link entryBytes}). */
  readonly bytes: number
}

/** What {@link ResponseCache.insert} did. */
export type InsertResult = 'inserted' | 'exists' | 'too-large'

/** The cache's own counters: what Triton 2.x before 23.03 exported as its server-wide `nv_cache_*` gauges. */
export interface ResponseCacheStats {
  /** Entries held now. */
  readonly entries: number
  /** Bytes held now ({@link entryBytes} of every entry). */
  readonly bytes: number
  /** The budget. */
  readonly sizeBytes: number
  readonly lookups: number
  readonly hits: number
  readonly misses: number
  /** Entries dropped to make room. */
  readonly evictions: number
  /** Answers not stored because they are larger than the whole cache. */
  readonly insertFailures: number
  /** Cumulative lookup and insertion time, whole microseconds truncated per operation, as Triton's counters. */
  readonly lookupUs: number
  readonly insertionUs: number
}

export interface ResponseCacheOptions {
  readonly sizeBytes: number
  /** Monotonic nanoseconds (`process.hrtime.bigint` by default); a fake one in tests. */
  readonly now?: () => bigint
  /** Where an answer too large to store is reported (the 1st, 2nd, 4th, 8th, ... of them: a full log never floods). */
  readonly logger?: Logger
}

const NAME = /^[A-Za-z0-9_]+$/

/**
 * `--cache-config` values as Triton reads them (server src/command_line_parser.cc `ParseCacheConfigOption`): each
 * `<cache name>,<setting>=<value>`, repeatable for several settings of one cache. The worker has the `local` cache,
 * whose one setting is `size` (bytes, a positive integer; Triton's local cache fails to start without a valid one).
 *
 * @param values the flag's values, in order
 * @returns the configuration
 * @throws FlotillaError WRK_ERR_CONFIG_INVALID with Triton's wording for a malformed value, "multiple cache
 *   configurations" for two caches, and a message naming what to change otherwise
 */
export function parseCacheConfig (values: readonly string[]): ResponseCacheConfig {
  const invalid = (message: string): Error => createError('WRK_ERR_CONFIG_INVALID', message)
  const settings = new Map<string, string>()
  let cache: string | undefined
  for (const arg of values) {
    const comma = arg.indexOf(',')
    if (comma <= 0) {
      throw invalid(`No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got ${arg}`)
    }
    const equals = arg.indexOf('=', comma + 1)
    const name = arg.slice(0, comma)
    const setting = equals < 0 ? '' : arg.slice(comma + 1, equals)
    const value = equals < 0 ? '' : arg.slice(equals + 1)
    if (setting === '' || value === '') {
      throw invalid(`--cache-config option format is '<cache name>,<setting>=<value>'. Got ${arg}`)
    }
    if (cache !== undefined && name !== cache) {
      throw invalid(`multiple cache configurations were given ('${cache}' and '${name}'); only one cache can be used`)
    }
    cache = name
    if (!NAME.test(setting)) throw invalid(`--cache-config setting '${setting}' is not a name. Got ${arg}`)
    settings.set(setting, value)
  }
  if (cache === undefined) throw invalid('--cache-config needs a value: local,size=<bytes>')
  if (cache !== 'local') {
    throw invalid(`the worker has only the 'local' cache (Triton's in-process one), not '${cache}'; ` +
      'use --cache-config local,size=<bytes>')
  }
  for (const key of settings.keys()) {
    if (key !== 'size') throw invalid(`the 'local' cache has one setting, size (bytes); got '${key}'`)
  }
  const size = settings.get('size')
  if (size === undefined || !/^[1-9][0-9]*$/.test(size) || Number(size) > Number.MAX_SAFE_INTEGER) {
    throw invalid("Failed to initialize LocalCache: config didn't contain a valid 'size' field. " +
      `Give a positive number of bytes: --cache-config local,size=1048576${size === undefined ? '' : ` (got '${size}')`}`)
  }
  return { kind: 'local', sizeBytes: Number(size) }
}

function dataBytes (data: TensorData): number {
  if (!(data instanceof BytesData)) return data.byteLength
  // byteLength counts a 4-byte length per element; the index takes BYTES_ELEMENT_OVERHEAD_BYTES instead.
  return data.byteLength + data.length * (BYTES_ELEMENT_OVERHEAD_BYTES - 4)
}

/**
 * The bytes an entry counts against the budget: each output's element bytes (BYTES: the elements' bytes plus
 * {@link BYTES_ELEMENT_OVERHEAD_BYTES} each), name and 8 bytes per dimension, plus {@link TENSOR_OVERHEAD_BYTES} per
 * output, the key and check strings and {@link ENTRY_OVERHEAD_BYTES}.
 */
export function entryBytes (key: string, check: string, outputs: readonly Tensor[]): number {
  let total = ENTRY_OVERHEAD_BYTES + key.length + check.length
  for (const t of outputs) total += TENSOR_OVERHEAD_BYTES + t.name.length + 8 * t.shape.length + dataBytes(t.data)
  return total
}

/**
 * A copy the cache owns: a backend's outputs may be views of its inputs (the identity backend echoes them) or of a
 * reused buffer, and must neither keep a request's body alive nor change under the entry. Fixed-size data is one
 * copy; BYTES elements are packed into one block (BytesData's `slice`).
 */
function ownTensor (t: Tensor): Tensor {
  // One copy either way (BytesData's slice packs its elements into one block).
  const copy: TensorData = t.data.slice()
  const out: Tensor = { name: t.name, datatype: t.datatype, shape: [...t.shape], data: copy }
  if (t.parameters !== undefined) out.parameters = { ...t.parameters }
  return out
}

const micros = (ns: bigint): number => Math.floor(Number(ns) / 1000)

/**
 * The worker's response cache. Synchronous: a lookup or an insert runs to completion on the event loop, so no two
 * interleave. {@link lastNs} is the duration of the latest lookup or insert, for the caller's statistics.
 */
export class ResponseCache {
  readonly sizeBytes: number
  readonly #lru: LRUCache<string, CachedResponse>
  readonly #now: () => bigint
  readonly #logger: Logger | undefined
  #lookups = 0
  #hits = 0
  #misses = 0
  #evictions = 0
  #insertFailures = 0
  #lookupUs = 0
  #insertionUs = 0
  #lastNs = 0n

  constructor (options: ResponseCacheOptions) {
    const size = options.sizeBytes
    // A programming error in embedding code: the CLI checked the flag already (parseCacheConfig).
    if (!Number.isSafeInteger(size) || size < 1) throw new RangeError(`sizeBytes must be a positive integer, got ${size}`)
    this.sizeBytes = size
    this.#now = options.now ?? process.hrtime.bigint
    this.#logger = options.logger
    this.#lru = new LRUCache<string, CachedResponse>({
      maxSize: size,
      sizeCalculation: (entry) => entry.bytes,
      dispose: (_entry, _key, reason) => { if (reason === 'evict') this.#evictions++ }
    })
  }

  /** Nanoseconds the latest {@link lookup} or {@link insert} took. */
  get lastNs (): bigint { return this.#lastNs }

  /**
   * The answer stored under `key`, made the most recently used; undefined on a miss, or when the entry there belongs
   * to another request (`check` differs).
   */
  lookup (key: string, check: string): CachedResponse | undefined {
    const start = this.#now()
    const found = this.#lru.get(key)
    const entry = found !== undefined && found.check === check ? found : undefined
    const ns = this.#now() - start
    this.#lastNs = ns
    this.#lookupUs += micros(ns)
    this.#lookups++
    if (entry === undefined) this.#misses++
    else this.#hits++
    return entry
  }

  /**
   * Stores a copy of a successful answer's outputs (and parameters), evicting the least recently used entries as
   * needed. 'exists' when this request's answer is already there (it is left as it is), 'too-large' when the answer
   * alone is larger than the cache (nothing stored).
   */
  insert (key: string, check: string, outputs: readonly Tensor[], parameters?: Parameters): InsertResult {
    const start = this.#now()
    let result: InsertResult
    const present = this.#lru.peek(key)
    const bytes = entryBytes(key, check, outputs)
    if (present !== undefined && present.check === check) {
      result = 'exists'
    } else if (bytes > this.sizeBytes) {
      const failures = ++this.#insertFailures
      // Triton logs each one ("Failed to insert key [...] into response cache: Requested byte_size ..."); here the
      // 1st, 2nd, 4th, 8th, ... so that a model whose every answer is too large does not fill the log.
      if ((failures & (failures - 1)) === 0) {
        this.#logger?.warn({ key, bytes, sizeBytes: this.sizeBytes, failures },
          `Failed to insert key [${key}] into response cache: Requested byte_size: ${bytes} is greater than total ` +
          `cache size: ${this.sizeBytes}; raise --cache-config local,size=<bytes> to cache answers this large`)
      }
      result = 'too-large'
    } else {
      const entry: { check: string, outputs: Tensor[], bytes: number, parameters?: Parameters } =
        { check, outputs: outputs.map(ownTensor), bytes }
      if (parameters !== undefined) entry.parameters = { ...parameters }
      this.#lru.set(key, entry)
      result = 'inserted'
    }
    const ns = this.#now() - start
    this.#lastNs = ns
    this.#insertionUs += micros(ns)
    return result
  }

  get stats (): ResponseCacheStats {
    return {
      entries: this.#lru.size,
      bytes: this.#lru.calculatedSize,
      sizeBytes: this.sizeBytes,
      lookups: this.#lookups,
      hits: this.#hits,
      misses: this.#misses,
      evictions: this.#evictions,
      insertFailures: this.#insertFailures,
      lookupUs: this.#lookupUs,
      insertionUs: this.#insertionUs
    }
  }
}

/**
 * Says once at start which models use the cache, or, on a worker without one, which models enable it and so run
 * uncached (Triton does so silently; a line saves looking for the missing flag).
 */
export function logCacheUse (repository: ModelRepository, cache: ResponseCache | undefined, logger: Logger): void {
  const models = [...new Set(repository.index(true)
    .flatMap(e => e.version === undefined ? [] : [repository.resolve(e.name, e.version)])
    .filter(v => v.config.response_cache?.enable === true)
    .map(v => v.name))]
  if (cache !== undefined) {
    logger.info({ sizeBytes: cache.sizeBytes, models }, 'response cache: local')
  } else if (models.length > 0) {
    logger.info({ models }, "response_cache is enabled in these models' configs but the worker has no cache: they run " +
      'uncached; start it with --cache-config local,size=<bytes> to cache their answers')
  }
}
