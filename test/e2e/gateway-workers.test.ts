/** The gateway in front of real worker processes: round-robin across them, and a killed worker is skipped. */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { post } from '../helpers/http.ts'
import { spawnFlotilla, spawnWorker, stop } from '../helpers/processes.ts'

const simpleRequest = {
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => 2) }
  ]
}

t.test('routes across two real workers and skips a killed one', async t => {
  const [a, b] = await Promise.all([spawnWorker(t), spawnWorker(t)])
  const dir = t.testdir({})
  const fleet = join(dir, 'fleet.yaml')
  writeFileSync(fleet, [
    'inference_servers:',
    `  - { name: worker-a, host: 127.0.0.1, port: ${a.httpPort}, models: [simple, identity] }`,
    `  - { name: worker-b, host: 127.0.0.1, port: ${b.httpPort}, models: [simple] }`,
    'load_balancer:',
    '  type: round_robin'
  ].join('\n'))
  const gw = await spawnFlotilla(t, ['gateway', '--config', fleet, '--http-port', '0', '--grpc-port', '0', '--metrics-port', '0', '--admin-port', '-1'])

  const served: string[] = []
  for (let i = 0; i < 6; i++) {
    const res = await post(`${gw.url}/v2/models/simple/infer`, simpleRequest)
    t.equal(res.status, 200, res.text)
    t.strictSame(res.json.outputs[0].data, simpleRequest.inputs[0]!.data.map(x => x + 2))
    served.push(String(res.headers['x-flotilla-endpoint']))
  }
  t.strictSame(new Set(served), new Set(['worker-a', 'worker-b']), 'both workers serve')
  for (let i = 1; i < served.length; i++) t.not(served[i], served[i - 1], 'round-robin alternates')

  const identity = await post(`${gw.url}/v2/models/identity/infer`, {
    inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 2], data: [1, 2] }]
  })
  t.equal(identity.headers['x-flotilla-endpoint'], 'worker-a', 'only servers listing the model get it')

  const unknown = await post(`${gw.url}/v2/models/resnet/infer`, simpleRequest)
  t.equal(unknown.status, 404)
  t.match(unknown.json.error, /resnet/)

  await stop(b.child, 'SIGKILL')
  for (let i = 0; i < 4; i++) {
    const res = await post(`${gw.url}/v2/models/simple/infer`, simpleRequest)
    t.equal(res.status, 200, 'a killed worker is skipped')
    t.equal(res.headers['x-flotilla-endpoint'], 'worker-a')
  }

  await stop(a.child, 'SIGKILL')
  const none = await post(`${gw.url}/v2/models/simple/infer`, simpleRequest)
  t.equal(none.status, 502)
  t.match(none.json.error, /worker-a/)
  t.match(none.json.error, /worker-b/)
})
