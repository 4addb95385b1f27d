import t from 'tap'
import { replay, toCachedAnswer } from '../../../gateway/cache/answer.ts'

const JSON_ANSWER = '{"model_name":"m","model_version":"3","outputs":[{"name":"y","datatype":"FP32","shape":[1],"data":[1.5]}]}'

t.test('an answer is stored without its id and replayed with the id of each request', async (t) => {
  const withId = Buffer.from('{"id":"a\\"b","model_name":"m","model_version":"3","outputs":[]}')
  const entry = toCachedAnswer('m', 'check', { statusCode: 200, headers: { 'content-type': 'application/json', 'x-flotilla-endpoint': 'w1' }, body: withId }, 5)
  t.ok(entry)
  t.equal(entry!.body.toString(), '{"model_name":"m","model_version":"3","outputs":[]}')
  t.same(entry!.headers, { 'content-type': 'application/json' }, 'only what reads the body is kept, not the endpoint')
  t.equal(entry!.version, '3')
  t.equal(replay(entry!, 'new-id').body.toString(), '{"id":"new-id","model_name":"m","model_version":"3","outputs":[]}')
  t.equal(replay(entry!, undefined).body.toString(), entry!.body.toString(), 'no id: none added')
  t.same(JSON.parse(replay(entry!, 'q"uote').body.toString()).id, 'q"uote')
})

t.test('binary answers: Inference-Header-Content-Length follows the id in and out, tensor bytes untouched', async (t) => {
  const json = '{"id":"r1","model_name":"m","model_version":"1","outputs":[{"name":"y","datatype":"UINT8","shape":[3],"parameters":{"binary_data_size":3}}]}'
  const body = Buffer.concat([Buffer.from(json), Buffer.from([0, 255, 7])])
  const entry = toCachedAnswer('m', 'c', { statusCode: 200, headers: { 'inference-header-content-length': String(json.length) }, body }, 0)!
  const stripped = json.length - '"id":"r1",'.length
  t.equal(entry.headers['inference-header-content-length'], String(stripped))
  const again = replay(entry, 'another')
  const length = Number(again.headers['inference-header-content-length'])
  t.same(JSON.parse(again.body.subarray(0, length).toString()).id, 'another')
  t.same([...again.body.subarray(length)], [0, 255, 7])
})

t.test('answers in another shape are not cached', async (t) => {
  t.equal(toCachedAnswer('m', 'c', { statusCode: 200, headers: {}, body: Buffer.from('{"served_by":"x"}') }, 0), undefined)
  t.equal(toCachedAnswer('m', 'c', { statusCode: 200, headers: {}, body: Buffer.from('{"model_name":"m","outputs":[]}') }, 0), undefined, 'no version')
  t.equal(toCachedAnswer('m', 'c', { statusCode: 200, headers: { 'inference-header-content-length': '999' }, body: Buffer.from(JSON_ANSWER) }, 0), undefined)
  t.ok(toCachedAnswer('m', 'c', { statusCode: 200, headers: {}, body: Buffer.from(JSON_ANSWER) }, 0))
})
