import t from 'tap'
import { silentLogger } from '../../../common/logger.ts'
import { BytesData } from '../../../common/protocol/bytes-data.ts'
import { type Tensor } from '../../../common/protocol/types.ts'
import { identityBackend, identityPairs } from '../../../worker/backends/identity-backend.ts'
import { convertJsResponse } from '../../../worker/backends/js-backend.ts'
import { backendNames, getBackend } from '../../../worker/backends/registry.ts'
import { latencyModel, simulatedBackend, simulatedLatencyMs } from '../../../worker/backends/simulated-backend.ts'
import { type BackendRequest } from '../../../worker/backends/types.ts'
import { parseModelConfig } from '../../../worker/repository/model-config.ts'
import { stringsOf } from '../../helpers/bytes-data.ts'

const config = (body: string, name = 'm') => parseModelConfig(`name: "${name}"\n${body}`, { file: 'config.pbtxt', modelName: name })
const io = (type = 'TYPE_FP32', outType = type): string =>
  `input { name: "IN" data_type: ${type} dims: [ 2 ] }\noutput { name: "OUT" data_type: ${outType} dims: [ 2 ] }`

const request = (data: Float32Array, batchSize = 0): BackendRequest => ({
  inputs: new Map<string, Tensor>([['IN', { name: 'IN', datatype: 'FP32', shape: [2], data }]]),
  requestedOutputs: ['OUT'],
  parameters: {},
  batchSize
})

const ctx = (cfg: ReturnType<typeof config>, random = () => 0.5) => ({
  modelName: cfg.name, version: 1, modelDir: '/x', versionDir: '/x/1', config: cfg, logger: silentLogger(), random
})

t.test('registry', async t => {
  t.strictSame(backendNames(), ['identity', 'js', 'native', 'onnxruntime', 'simulated'])
  t.equal(getBackend('js', 'm').name, 'js')
  t.throws(() => getBackend('tensorrt', 'm'), { code: 'WRK_ERR_UNKNOWN_BACKEND', message: "unknown backend 'tensorrt' for model 'm'; known backends: identity, js, native, onnxruntime, simulated" })
})

t.test('identity pairs outputs with inputs by position and checks them at load', async t => {
  t.strictSame(identityPairs(config(`backend: "identity"\n${io()}`)), [['OUT', 'IN']])
  t.throws(() => identityPairs(config(`backend: "identity"\n${io('TYPE_FP32', 'TYPE_INT32')}`)), /echoes input 'IN' \(TYPE_FP32\) as output 'OUT', which is declared TYPE_INT32/)
  t.throws(() => identityPairs(config('backend: "identity"\noutput { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }')), /declares 1 outputs and only 0 inputs/)
  const model = await identityBackend.loadModel(ctx(config(`backend: "identity"\n${io()}`)))
  const instance = await model.createInstance({ name: 'm_0', kind: 'KIND_CPU', deviceId: -1 })
  const data = new Float32Array([1, 2])
  const [res] = await instance.execute([request(data)])
  t.ok(res !== undefined && 'outputs' in res && res.outputs[0]!.data === data, 'echo shares the input buffer, no copy')
})

t.test('simulated latency model', async t => {
  const lm = latencyModel(config(`backend: "simulated"\n${io()}\n` +
    'parameters { key: "fixed_ms" value: { string_value: "5" } }\n' +
    'parameters { key: "per_item_ms" value: { string_value: "0.1" } }\n' +
    'parameters { key: "jitter_ms" value: { string_value: "2" } }'))
  t.strictSame(lm, { fixedMs: 5, perItemMs: 0.1, jitterMs: 2 })
  t.equal(simulatedLatencyMs(lm, 64, () => 0.5), 5 + 6.4, 'mid-range random: no jitter')
  t.equal(simulatedLatencyMs(lm, 1, () => 0), 5 + 0.1 - 2, 'lowest jitter')
  t.equal(simulatedLatencyMs(lm, 1, () => 0.75), 5 + 0.1 + 1, 'upper jitter')
  t.equal(simulatedLatencyMs({ fixedMs: 0, perItemMs: 0, jitterMs: 3 }, 1, () => 0), 0, 'never negative')
  t.strictSame(latencyModel(config(`backend: "simulated"\n${io()}`)), { fixedMs: 0, perItemMs: 0, jitterMs: 0 }, 'all optional')
  for (const bad of ['-1', 'fast', '', 'Infinity']) {
    t.throws(() => latencyModel(config(`backend: "simulated"\n${io()}\nparameters { key: "fixed_ms" value: { string_value: "${bad}" } }`)),
      { code: 'WRK_ERR_MODEL_LOAD', message: new RegExp(`parameter 'fixed_ms' of the simulated backend must be a non-negative number of milliseconds, got '${bad}'`) })
  }
  const model = await simulatedBackend.loadModel(ctx(config(`backend: "simulated"\nmax_batch_size: 8\n${io()}`)))
  const instance = await model.createInstance({ name: 'm_0', kind: 'KIND_CPU', deviceId: -1 })
  const res = await instance.execute([request(new Float32Array([3, 4]), 2), request(new Float32Array([5, 6]), 1)])
  t.equal(res.length, 2, 'one response per request of the batch')
})

t.test('js responses are checked against the config', async t => {
  const cfg = config(`backend: "js"\n${io('TYPE_INT64')}`)
  const ok = convertJsResponse(cfg, { outputs: [{ name: 'OUT', shape: [2], data: [1, 2] }] })
  t.ok('outputs' in ok && ok.outputs[0]!.data instanceof BigInt64Array, 'plain numbers become the declared INT64 storage')
  const cases: Array<[unknown, RegExp]> = [
    [null, /must return an object per request/],
    [{}, /'outputs' array or an 'error'/],
    [{ outputs: [{ name: 'NOPE', shape: [2], data: [1, 2] }] }, /returned output 'NOPE', which the config does not declare/],
    [{ outputs: [{ name: 'OUT', datatype: 'FP32', shape: [2], data: [1, 2] }] }, /returned output 'OUT' as FP32, the config declares INT64/],
    [{ outputs: [{ name: 'OUT', shape: [-2], data: [1, 2] }] }, /needs a shape of non-negative integers/],
    [{ outputs: [{ name: 'OUT', shape: [3], data: [1, 2] }] }, /has 2 elements, but its shape holds 3/],
    [{ outputs: [{ name: 'OUT', shape: [2], data: [1, 'x'] }] }, /element 1 \(x\) is not a valid INT64 value/],
    [{ outputs: [{ name: 'OUT', shape: [2], data: 'ab' }] }, /data must be an array or a typed array/],
    [{ error: 'nope' }, /nope/]
  ]
  for (const [raw, message] of cases) {
    const r = convertJsResponse(cfg, raw)
    t.ok('error' in r && message.test(r.error.message), `${JSON.stringify(raw)} → ${message}`)
  }
})

t.test('js BYTES: a module sees an array of Uint8Array and may return strings, byte arrays or a BytesData', async t => {
  const cfg = config('backend: "js"\n' +
    'input { name: "X" data_type: TYPE_STRING dims: [ -1 ] }\n' +
    'output { name: "Y" data_type: TYPE_STRING dims: [ -1 ] }\noutput { name: "Z" data_type: TYPE_STRING dims: [ 3 ] }')
  // Y: the input's texts upper-cased; Z: what the module saw, and one of the input's elements returned as it came.
  const dir = t.testdir({
    'model.js': 'const text = new TextDecoder()\n' +
      'export function execute (rs) {\n' +
      '  return rs.map(r => {\n' +
      '    const x = r.inputs.X.data\n' +
      '    return { outputs: [\n' +
      '      { name: "Y", shape: [x.length], data: x.map(e => text.decode(e).toUpperCase()) },\n' +
      '      { name: "Z", shape: [3], data: [Array.isArray(x) ? "array" : typeof x,\n' +
      '        x.every(e => e.constructor === Uint8Array) ? "Uint8Array" : "other", x[1]] }\n' +
      '    ] }\n' +
      '  })\n' +
      '}\n'
  })
  const model = await getBackend('js', 'm').loadModel({ ...ctx(cfg), modelDir: dir, versionDir: dir })
  const instance = await model.createInstance({ name: 'm_0', kind: 'KIND_CPU', deviceId: -1 })
  const input: Tensor = { name: 'X', datatype: 'BYTES', shape: [2], data: BytesData.from(['héllo', 'wörld']) }
  const [res] = await instance.execute([{ inputs: new Map([['X', input]]), requestedOutputs: ['Y', 'Z'], parameters: {}, batchSize: 0 }])
  t.ok(res !== undefined && 'outputs' in res, 'the module answered')
  const outputs = res !== undefined && 'outputs' in res ? res.outputs : []
  t.strictSame(outputs.map(o => [o.name, o.datatype, o.shape]), [['Y', 'BYTES', [2]], ['Z', 'BYTES', [3]]])
  t.ok(outputs.every(o => o.data instanceof BytesData), 'outputs are stored as BytesData')
  t.strictSame(stringsOf(outputs[0]?.data), ['HÉLLO', 'WÖRLD'], 'strings are stored as UTF-8')
  t.strictSame(stringsOf(outputs[1]?.data), ['array', 'Uint8Array', 'wörld'], 'the module saw plain Uint8Arrays in an array')

  const out = config('backend: "js"\n' + io('TYPE_STRING'))
  const packed = BytesData.from(['a', 'b'])
  const given = convertJsResponse(out, { outputs: [{ name: 'OUT', shape: [2], data: packed }] })
  t.ok('outputs' in given && given.outputs[0]!.data === packed, 'a BytesData is taken as it is')
  const cases: Array<[unknown, RegExp]> = [
    [{ outputs: [{ name: 'OUT', shape: [2], data: BytesData.from(['a']) }] }, /output 'OUT' has 1 elements, but its shape holds 2/],
    [{ outputs: [{ name: 'OUT', shape: [2], data: ['a', 5] }] }, /output 'OUT' element 1 \(5\) is not a valid BYTES value/],
    [{ outputs: [{ name: 'OUT', shape: [2], data: 'ab' }] }, /data must be an array or a typed array/]
  ]
  for (const [raw, message] of cases) {
    const r = convertJsResponse(out, raw)
    t.ok('error' in r && message.test(r.error.message), `${JSON.stringify(raw)} → ${message}`)
  }
  const numbers = convertJsResponse(config('backend: "js"\n' + io()), { outputs: [{ name: 'OUT', shape: [2], data: packed }] })
  t.ok('error' in numbers && /data must be an array or a typed array/.test(numbers.error.message), 'a BytesData for an FP32 output is refused')
})
