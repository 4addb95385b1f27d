/**
 * bench/json-memory: how much memory a worker needs to decode one infer request body, per byte of body (issue 14,
 * part 10: a 28 MiB JSON request once took a worker to 541 MB RSS, 19x its body).
 *
 * For each case (a datatype and its values) and body size, one request is built and written to a file. A fresh child
 * process (`node --expose-gc`) reads it into a Buffer, warms the decoder up on a small body of the same kind,
 * collects garbage, resets the kernel's peak-RSS mark (`/proc/self/clear_refs`), decodes the body as the worker does
 * (`decodeHttpInferRequest`, keeping the result) and reads the peak back (`VmHWM`). The growth over the RSS before
 * the decode, divided by the body's size, is the figure: the body itself is not counted, the decoded tensors are.
 * Three forms of the same tensor:
 * - `json`: the JSON body (`data` arrays). Target: growth < 6x the body.
 * - `binary`: the binary tensor extension (`Inference-Header-Content-Length`), against its own (smaller) body;
 *   fixed-size tensors are views over the body, so it should be near 0x.
 * - `JSON.parse`: only `JSON.parse(body.toString())` of the JSON body, kept alive: what the first step of the decode
 *   cost before it read `data` arrays in place, for reference.
 * BYTES elements are packed (BytesData: views of the body where they need no unescaping, 8 bytes of index each), so
 * their ratio still depends a little on the element length (BENCH_BYTES_LENGTH); 8 is the short-string case.
 *
 *   npx tsc -p . && node dist/bench/json-memory.js
 *   BENCH_SIZES_KIB [1024,8192,28672]  BENCH_FORMS [json,binary,JSON.parse]
 *   BENCH_CASES [FP32-pixels,FP32-random,INT64-ids,INT64-full,BYTES,BYTES-escaped] (see CASES below)
 *   BENCH_BYTES_LENGTH [8] (mean BYTES element length, characters)
 *   BENCH_CODEC [this tree's binary-codec] path of another binary-codec module to measure instead (an older build)
 *
 * Not a test: figures depend on the machine, the Node version and the allocator. Linux only (reads /proc); elsewhere
 * the peak is the process's lifetime maximum (`process.resourceUsage().maxRSS`), which overstates small bodies.
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { decodeHttpInferRequest, encodeHttpInferRequest } from '../common/protocol/binary-codec.ts'
import { BytesDataBuilder } from '../common/protocol/bytes-data.ts'
import { type InferRequest, type Tensor } from '../common/protocol/types.ts'
import { seededRandom } from '../common/seeded-random.ts'
import { printTable, round } from './support.ts'

type Form = 'json' | 'binary' | 'JSON.parse'
const FORMS: readonly Form[] = ['json', 'binary', 'JSON.parse']

/** A kind of tensor: its datatype and values, and about how many bytes of JSON one element takes. */
interface Case {
  readonly datatype: 'FP32' | 'INT64' | 'BYTES'
  readonly jsonBytesPerElement: (bytesLength: number) => number
  readonly fill: (count: number, random: () => number, bytesLength: number) => Tensor['data']
}

const CASES: Readonly<Record<string, Case>> = {
  // Image pixels sent as numbers: the shortest tokens, so the most elements (and JS values) per byte of body.
  'FP32-pixels': {
    datatype: 'FP32',
    jsonBytesPerElement: () => 3.5,
    fill: (count, random) => {
      const data = new Float32Array(count)
      for (let i = 0; i < count; i++) data[i] = Math.floor(random() * 256)
      return data
    }
  },
  // Full-precision float32 values, as a client prints them: ~20 characters each.
  'FP32-random': {
    datatype: 'FP32',
    jsonBytesPerElement: () => 20,
    fill: (count, random) => {
      const data = new Float32Array(count)
      for (let i = 0; i < count; i++) data[i] = random() * 2 - 1
      return data
    }
  },
  // Token ids.
  'INT64-ids': {
    datatype: 'INT64',
    jsonBytesPerElement: () => 6,
    fill: (count, random) => {
      const data = new BigInt64Array(count)
      for (let i = 0; i < count; i++) data[i] = BigInt(Math.floor(random() * 50_000))
      return data
    }
  },
  // The whole INT64 range: most values need all 19 digits (the decoder's long-integer path).
  'INT64-full': {
    datatype: 'INT64',
    jsonBytesPerElement: () => 20,
    fill: (count, random) => {
      const data = new BigInt64Array(count)
      for (let i = 0; i < count; i++) {
        data[i] = (BigInt(Math.floor(random() * 2 ** 32)) << 32n | BigInt(Math.floor(random() * 2 ** 32))) - (1n << 63n)
      }
      return data
    }
  },
  // Strings of 1 to 2 x BENCH_BYTES_LENGTH - 1 lowercase letters: JSON strings that need no unescaping.
  BYTES: {
    datatype: 'BYTES',
    jsonBytesPerElement: (bytesLength) => bytesLength + 3,
    fill: (count, random, bytesLength) => letters(count, random, bytesLength, false)
  },
  // The same, each ending in a newline (`\n` in JSON): every string is decoded and copied, none stays in the body.
  'BYTES-escaped': {
    datatype: 'BYTES',
    jsonBytesPerElement: (bytesLength) => bytesLength + 5,
    fill: (count, random, bytesLength) => letters(count, random, bytesLength, true)
  }
}

function letters (count: number, random: () => number, bytesLength: number, newline: boolean): Tensor['data'] {
  const data = new BytesDataBuilder(count)
  const bytes = new Uint8Array(2 * bytesLength + 1)
  for (let i = 0; i < count; i++) {
    const length = 1 + Math.floor(random() * (2 * bytesLength - 1))
    for (let j = 0; j < length; j++) bytes[j] = 0x61 + Math.floor(random() * 26)
    if (newline) bytes[length] = 0x0a
    data.push(bytes.subarray(0, newline ? length + 1 : length))
  }
  return data.finish()
}
const CASE_NAMES = Object.keys(CASES)

/** Growth per byte of JSON body the decode must stay under (issue 14). */
const TARGET_RATIO = 6

function listEnv<T extends string> (name: string, all: readonly T[]): T[] {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return [...all]
  const values = raw.split(',').map((v) => v.trim())
  for (const v of values) {
    if (!(all as readonly string[]).includes(v)) throw new Error(`${name}: '${v}' is not one of ${all.join(', ')}`)
  }
  return values as T[]
}

function sizesEnv (): number[] {
  const raw = process.env.BENCH_SIZES_KIB ?? '1024,8192,28672'
  return raw.split(',').map((v) => {
    const n = Number(v)
    if (!Number.isInteger(n) || n < 1) throw new Error(`BENCH_SIZES_KIB must be integers >= 1, got '${raw}'`)
    return n * 1024
  })
}

function bytesLengthEnv (): number {
  const raw = process.env.BENCH_BYTES_LENGTH ?? '8'
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1) throw new Error(`BENCH_BYTES_LENGTH must be an integer >= 1, got '${raw}'`)
  return n
}

/** A one-input request of case `name` whose JSON body is about `bodyBytes` long; seeded, so every run is the same. */
function buildRequest (name: string, bodyBytes: number, bytesLength: number): InferRequest {
  const c = CASES[name] as Case
  const count = Math.max(1, Math.floor(bodyBytes / c.jsonBytesPerElement(bytesLength)))
  const tensor: Tensor = { name: 'INPUT0', datatype: c.datatype, shape: [1, count], data: c.fill(count, seededRandom(bodyBytes), bytesLength) }
  return { parameters: {}, inputs: [tensor], outputs: [{ name: 'OUTPUT0' }] }
}

/** The body of `form` for `request`, and its Inference-Header-Content-Length (undefined for JSON). */
function encode (request: InferRequest, form: Form): { body: Buffer, headerLength: number | undefined } {
  const encoded = encodeHttpInferRequest(request, { binaryInputs: form === 'binary', binaryOutputs: false })
  const body = typeof encoded.body === 'string' ? Buffer.from(encoded.body) : encoded.body
  return { body, headerLength: encoded.headerLength }
}

// ---------------------------------------------------------------------------------------------------------------
// Child: one decode in a fresh process

interface ChildResult { rssBeforeKiB: number, peakKiB: number, decodeMs: number, elements: number, peakSource: string }

function procStatusKiB (field: string): number | undefined {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'))
    return m === null ? undefined : Number(m[1])
  } catch {
    return undefined
  }
}

/** Resets the kernel's peak-RSS mark to the current RSS (Linux >= 4.0); false where that is not possible. */
function resetPeak (): boolean {
  try {
    writeFileSync('/proc/self/clear_refs', '5')
    return true
  } catch {
    return false
  }
}

async function child (file: string, caseName: string, form: Form, headerArg: string, bytesLength: number): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc === undefined) throw new Error('the child needs node --expose-gc')
  const codec = process.env.BENCH_CODEC === undefined || process.env.BENCH_CODEC === ''
    ? { decodeHttpInferRequest }
    : await import(process.env.BENCH_CODEC) as { decodeHttpInferRequest: typeof decodeHttpInferRequest }
  const headerLength = headerArg === '-' ? undefined : Number(headerArg)
  const decode = form === 'JSON.parse'
    ? (body: Buffer): unknown => JSON.parse(body.toString('utf8'))
    : (body: Buffer, length: number | undefined): unknown => codec.decodeHttpInferRequest(body, length)
  // Warm-up on a small body of the same kind, so that compiling the decoder is not counted.
  const warm = encode(buildRequest(caseName, 64 * 1024, bytesLength), form)
  for (let i = 0; i < 3; i++) decode(warm.body, warm.headerLength)

  const body = readFileSync(file)
  gc()
  gc()
  const reset = resetPeak()
  const before = procStatusKiB('VmRSS') ?? Math.round(process.memoryUsage.rss() / 1024)
  const started = performance.now()
  const decoded = decode(body, headerLength)
  const decodeMs = performance.now() - started
  const hwm = reset ? procStatusKiB('VmHWM') : undefined
  const peak = hwm ?? process.resourceUsage().maxRSS
  let elements = 0
  if (form === 'JSON.parse') {
    elements = ((decoded as { inputs: Array<{ data: unknown[] }> }).inputs[0]?.data.length) ?? 0
  } else {
    elements = (decoded as InferRequest).inputs[0]?.data.length ?? 0
  }
  const result: ChildResult = { rssBeforeKiB: before, peakKiB: peak, decodeMs, elements, peakSource: hwm !== undefined ? 'VmHWM' : 'maxRSS' }
  process.stdout.write(JSON.stringify(result) + '\n')
}

// ---------------------------------------------------------------------------------------------------------------
// Parent

interface Row {
  case: string
  form: Form
  bodyBytes: number
  elements: number
  growthMiB: number
  ratio: number
  decodeMs: number
  peakSource: string
}

function measure (file: string, caseName: string, form: Form, headerLength: number | undefined, bytesLength: number): ChildResult {
  const self = fileURLToPath(import.meta.url)
  const out = spawnSync(process.execPath, [
    ...process.execArgv, '--expose-gc', self, 'child', file, caseName, form, headerLength === undefined ? '-' : String(headerLength),
    String(bytesLength)
  ], { encoding: 'utf8', maxBuffer: 1 << 20 })
  if (out.status !== 0) throw new Error(`child for ${caseName} ${form} failed (${out.status ?? out.signal}):\n${out.stderr}`)
  const line = out.stdout.trim().split('\n').at(-1) ?? ''
  return JSON.parse(line) as ChildResult
}

function main (): void {
  const sizes = sizesEnv()
  const cases = listEnv('BENCH_CASES', CASE_NAMES)
  const forms = listEnv('BENCH_FORMS', FORMS)
  const bytesLength = bytesLengthEnv()
  const dir = mkdtempSync(join(tmpdir(), 'flotilla-json-memory-'))
  const rows: Row[] = []
  try {
    for (const caseName of cases) {
      for (const size of sizes) {
        const request = buildRequest(caseName, size, bytesLength)
        for (const form of forms) {
          const { body, headerLength } = encode(request, form)
          const file = join(dir, 'body')
          writeFileSync(file, body)
          const r = measure(file, caseName, form, headerLength, bytesLength)
          const growth = Math.max(0, r.peakKiB - r.rssBeforeKiB) * 1024
          rows.push({
            case: caseName, form, bodyBytes: body.length, elements: r.elements, growthMiB: round(growth / 2 ** 20, 1),
            ratio: round(growth / body.length, 2), decodeMs: round(r.decodeMs, 1), peakSource: r.peakSource
          })
        }
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  console.log(`json-memory: peak RSS growth while decoding one infer request, per byte of its body (node ${process.version})`)
  printTable([
    ['case', 'form', 'body MiB', 'elements', 'growth MiB', 'growth/body', 'decode ms'],
    ...rows.map((r) => [r.case, r.form, String(round(r.bodyBytes / 2 ** 20, 2)), String(r.elements),
      String(r.growthMiB), `${r.ratio}x`, String(r.decodeMs)])
  ])
  const json = rows.filter((r) => r.form === 'json')
  const worst = json.reduce((m, r) => Math.max(m, r.ratio), 0)
  console.log(`\nworst JSON growth/body ${worst}x (target < ${TARGET_RATIO}x)`)
  console.log(JSON.stringify({
    bench: 'json-memory',
    node: process.version,
    bytesLength,
    rows,
    worstJsonRatio: worst,
    met: json.length === 0 ? null : worst < TARGET_RATIO
  }))
}

if (process.argv[2] === 'child') {
  const [, , , file, caseName, form, headerArg, bytesLength] = process.argv
  child(file as string, caseName as string, form as Form, headerArg as string, Number(bytesLength)).catch((err: unknown) => {
    console.error(err)
    process.exit(1)
  })
} else {
  main()
}
