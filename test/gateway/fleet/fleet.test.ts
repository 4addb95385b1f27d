import t from 'tap'
import { hasBalancer } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { originOf } from '../../../common/http-server.ts'
import { Fleet, trafficServers, type FleetServer } from '../../../gateway/fleet/fleet.ts'

function server (name: string, models: string[], extra: Partial<FleetServer> = {}): FleetServer {
  return { name, host: '127.0.0.1', port: 9000, models, weight: 1, labels: {}, ...extra }
}

const names = (list: readonly { name: string }[]): string[] => list.map((e) => e.name)

t.test('candidates per model, in fleet order, computed once', async (t) => {
  const fleet = new Fleet([server('a', ['m', 'n']), server('b', ['n']), server('c', ['m'])])
  t.strictSame(names(fleet.endpointsServing('m')), ['a', 'c'])
  t.strictSame(names(fleet.endpointsServing('n')), ['a', 'b'])
  t.strictSame(fleet.endpointsServing('nope'), [])
  t.equal(fleet.endpointsServing('m'), fleet.endpointsServing('m'), 'the same array every time')
  t.ok(Object.isFrozen(fleet.endpointsServing('m')))
  t.strictSame(fleet.models, ['m', 'n'])
  t.ok(fleet.servesModel('m'))
  t.notOk(fleet.servesModel('nope'))
  t.notOk(fleet.servesModel('constructor'))
  const a = fleet.get('a')
  t.match(a, { name: 'a', origin: 'http://127.0.0.1:9000', state: 'active', inFlight: 0, versions: undefined })
})

t.test('versions', async (t) => {
  const fleet = new Fleet([
    server('v1', ['m'], { versions: [1] }),
    server('any', ['m']),
    server('v12', ['m'], { versions: [1, 2] })
  ])
  t.strictSame(names(fleet.endpointsServing('m')), ['v1', 'any', 'v12'], 'no version: every server of the model')
  t.strictSame(names(fleet.endpointsServing('m', '1')), ['v1', 'any', 'v12'])
  t.strictSame(names(fleet.endpointsServing('m', '2')), ['any', 'v12'])
  t.strictSame(names(fleet.endpointsServing('m', '002')), ['any', 'v12'], 'leading zeros are the same version')
  t.strictSame(names(fleet.endpointsServing('m', '7')), ['any'], 'a version no server names: the any-version servers')
  t.equal(fleet.endpointsServing('m', '7'), fleet.endpointsServing('m', '8'))
  t.equal(fleet.versionsOf('m'), undefined, 'some server serves every version')

  const pinned = new Fleet([server('v1', ['m'], { versions: [1] }), server('v3', ['m'], { versions: [3, 1] })])
  t.strictSame(pinned.endpointsServing('m', '2'), [])
  t.strictSame(pinned.endpointsServing('m', '0'), [])
  t.strictSame(pinned.versionsOf('m'), [1, 3])
})

t.test('load_balancer.servers picks the servers that take traffic', async (t) => {
  const config = parseFleetConfig(`inference_servers:
  - { name: a, host: 127.0.0.1, port: 1, models: [m] }
  - { name: b, host: 127.0.0.1, port: 2, models: [m] }
  - { name: c, host: 127.0.0.1, port: 3, models: [m] }
load_balancer:
  type: round_robin
  servers: [{ name: c }, { name: a }]
`, { file: 'f.yaml', isKnownStrategy: hasBalancer })
  t.strictSame(names(trafficServers(config)), ['a', 'c'], 'in inference_servers order')
  t.strictSame(names(Fleet.fromConfig(config).endpointsServing('m')), ['a', 'c'])
  const all = { ...config, load_balancer: { type: 'round_robin', panic_threshold_percent: 50 } }
  t.strictSame(names(Fleet.fromConfig(all).endpoints), ['a', 'b', 'c'])
})

t.test('update keeps unchanged endpoints and rebuilds candidate lists', async (t) => {
  const fleet = new Fleet([server('a', ['m']), server('b', ['m'])])
  const a = fleet.get('a')
  const b = fleet.get('b')
  const before = fleet.endpointsServing('m')
  if (a !== undefined) a.inFlight = 3
  fleet.update([server('a', ['m']), server('b', ['m'], { port: 9100 }), server('c', ['x'])])
  t.equal(fleet.get('a'), a, 'same config: same endpoint, in-flight count kept')
  t.equal(fleet.get('a')?.inFlight, 3)
  t.not(fleet.get('b'), b, 'changed config: a new endpoint')
  t.equal(fleet.get('b')?.origin, 'http://127.0.0.1:9100')
  t.not(fleet.endpointsServing('m'), before, 'a new candidate array, so balancers start a new rotation')
  t.strictSame(fleet.models, ['m', 'x'])
  fleet.update([server('c', ['x'])])
  t.equal(fleet.get('a'), undefined)
  t.strictSame(fleet.endpointsServing('m'), [])
})

t.test('origins', async (t) => {
  t.equal(originOf('10.0.0.1', 80), 'http://10.0.0.1:80')
  t.equal(originOf('::1', 8000), 'http://[::1]:8000')
  t.equal(originOf('worker.local', 8000), 'http://worker.local:8000')
})

t.test('health narrows the candidate lists on refresh; panic keeps them all', async (t) => {
  const servers: FleetServer[] = ['a', 'b', 'c', 'd'].map((name, i) => ({
    name, host: '127.0.0.1', port: 9000 + i, models: ['m', 'n'], weight: 1, labels: {}
  }))
  const down = new Set<string>()
  const fleet = new Fleet(servers, { usable: (e, model) => !down.has(e.name) && !down.has(`${e.name}/${model}`) })
  const first = fleet.endpointsServing('m')
  t.strictSame(names(first), ['a', 'b', 'c', 'd'])
  fleet.refresh()
  t.equal(fleet.endpointsServing('m'), first, 'nothing changed: the same array, so balancer state survives')

  down.add('b')
  t.equal(fleet.endpointsServing('m'), first, 'health is read on refresh, never per request')
  fleet.refresh()
  t.strictSame(names(fleet.endpointsServing('m')), ['a', 'c', 'd'])
  t.strictSame(names(fleet.endpointsServing('m', '3')), ['a', 'c', 'd'], 'version lists narrow too')

  down.add('c/m')
  fleet.refresh()
  t.strictSame(names(fleet.endpointsServing('m')), ['a', 'd'], 'a model that is not ready on one server')
  t.strictSame(names(fleet.endpointsServing('n')), ['a', 'c', 'd'], 'leaves that server serving its other models')
  t.notOk(fleet.panicking('m'), '2 of 4 usable is not below 50%')

  down.add('d')
  fleet.refresh()
  t.strictSame(names(fleet.endpointsServing('m')), ['a', 'b', 'c', 'd'], '1 of 4 usable: panic, traffic goes to all')
  t.ok(fleet.panicking('m'))
  t.notOk(fleet.panicking('n'), '2 of 4 usable for n')

  const strict = new Fleet(servers, { usable: () => false, panicThresholdPercent: 0 })
  t.strictSame(names(strict.endpointsServing('m')), [], 'panic off: nothing usable means nothing to route to')
  t.notOk(strict.panicking('m'))
})

t.test('update applies a changed weight in place: same endpoint, new weight, rebuilt lists', async (t) => {
  const fleet = new Fleet([server('a', ['m']), server('b', ['m'], { port: 9001 })])
  const a = fleet.get('a')!
  a.inFlight = 2
  a.state = 'draining'
  const before = fleet.endpointsServing('m')
  fleet.update([server('a', ['m'], { weight: 7 }), server('b', ['m'], { port: 9001 })])
  t.equal(fleet.get('a'), a, 'only the weight changed: the same endpoint')
  t.equal(a.weight, 7)
  t.equal(a.configuredWeight, 7)
  t.equal(a.inFlight, 2, 'its in-flight count kept')
  t.equal(a.state, 'draining', 'and its state')
  t.not(fleet.endpointsServing('m'), before, 'the lists are rebuilt, so weighted balancers see the new weight')
  t.strictSame(names(fleet.endpointsServing('m')), ['b'])

  fleet.update([server('a', ['m'], { weight: 7, labels: { zone: 'x' } }), server('b', ['m'], { port: 9001 })])
  t.not(fleet.get('a'), a, 'a label changed: a new endpoint')
  t.equal(fleet.get('a')?.configuredWeight, 7)
  const v = new Fleet([server('v', ['m'], { versions: [1] })])
  const first = v.get('v')
  v.update([server('v', ['m'], { versions: [1, 2] })])
  t.not(v.get('v'), first, 'versions changed: a new endpoint')
  const limitedFleet = new Fleet([server('l', ['m'], { max_in_flight: 1 })])
  const l = limitedFleet.get('l')
  limitedFleet.update([server('l', ['m'], { max_in_flight: 2 })])
  t.equal(limitedFleet.get('l'), l, 'limit changed: the same endpoint, its limit changed in place')
  t.equal(l?.maxInFlight, 2)
})

t.test('add appends one server; a taken name throws', async (t) => {
  const fleet = new Fleet([server('a', ['m']), server('b', ['n'])], { defaultMaxInFlight: 4 })
  const before = fleet.endpointsServing('m')
  const c = fleet.add(server('c', ['m', 'x'], { port: 9100, weight: 3 }))
  t.equal(fleet.get('c'), c)
  t.match(c, { name: 'c', origin: 'http://127.0.0.1:9100', weight: 3, configuredWeight: 3, state: 'active', inFlight: 0, maxInFlight: 4 })
  t.strictSame(names(fleet.endpoints), ['a', 'b', 'c'], 'at the end')
  t.strictSame(names(fleet.endpointsServing('m')), ['a', 'c'])
  t.not(fleet.endpointsServing('m'), before)
  t.strictSame(names(fleet.endpointsServing('x')), ['c'], 'a model only it serves')
  t.strictSame(fleet.models, ['m', 'n', 'x'])
  t.equal(fleet.add(server('d', ['m'], { max_in_flight: 9 })).maxInFlight, 9, 'its own limit over the default')
  t.throws(() => fleet.add(server('a', ['m'], { port: 9200 })), { message: "a server named 'a' is already in the fleet" })
  t.equal(fleet.get('a')?.port, 9000, 'the first a stays')
  t.equal(fleet.endpoints.length, 4)
})

t.test('remove takes one server out; unknown names give undefined', async (t) => {
  const fleet = new Fleet([server('a', ['m']), server('b', ['m', 'x']), server('c', ['m'])])
  const b = fleet.get('b')!
  b.inFlight = 1
  t.equal(fleet.remove('b'), b)
  t.equal(b.inFlight, 1, 'its requests in flight are not touched')
  t.equal(fleet.get('b'), undefined)
  t.strictSame(names(fleet.endpoints), ['a', 'c'])
  t.strictSame(names(fleet.endpointsServing('m')), ['a', 'c'])
  t.strictSame(fleet.models, ['m'], 'a model nobody serves any more is gone')
  t.notOk(fleet.servesModel('x'))
  t.equal(fleet.remove('b'), undefined)
  t.equal(fleet.remove('nope'), undefined)
  t.ok(Object.isFrozen(fleet.endpoints))
})

t.test('setState: only active endpoints are candidates; the fleet still lists the others', async (t) => {
  const fleet = new Fleet([server('a', ['m']), server('b', ['m'], { versions: [1] }), server('c', ['m'])])
  const [a, b] = [fleet.get('a')!, fleet.get('b')!]
  fleet.setState(a, 'draining')
  t.equal(a.state, 'draining')
  t.strictSame(names(fleet.endpointsServing('m')), ['b', 'c'])
  fleet.setState(b, 'drained')
  t.strictSame(names(fleet.endpointsServing('m', '1')), ['c'], 'version lists too')
  t.strictSame(names(fleet.endpoints), ['a', 'b', 'c'])
  t.ok(fleet.servesModel('m'))
  const lists = fleet.endpointsServing('m')
  fleet.setState(b, 'drained')
  t.equal(fleet.endpointsServing('m'), lists, 'no change: the lists keep their identity')
  fleet.setState(a, 'active')
  fleet.setState(b, 'active')
  t.strictSame(names(fleet.endpointsServing('m')), ['a', 'b', 'c'], 'back in fleet order')
})

t.test('setWeight sets the configured and the effective weight', async (t) => {
  const fleet = new Fleet([server('a', ['m'], { weight: 10 })])
  const a = fleet.get('a')!
  const lists = fleet.endpointsServing('m')
  fleet.setWeight(a, 10)
  t.equal(fleet.endpointsServing('m'), lists, 'no change: no rebuild')
  fleet.setWeight(a, 20, 2)
  t.equal(a.configuredWeight, 20)
  t.equal(a.weight, 2, 'effective weight below the configured one, as slow start sets it')
  t.not(fleet.endpointsServing('m'), lists, 'a change rebuilds the lists')
  fleet.setWeight(a, 20)
  t.equal(a.weight, 20, 'effective defaults to configured')
  t.equal(fleet.get('a'), a)
})

t.test('servers() gives the fleet back as servers, with configured weights', async (t) => {
  const fleet = new Fleet([
    server('a', ['m'], { weight: 4, labels: { zone: 'x' }, versions: [1, 2] }),
    server('b', ['m', 'n'], { port: 9001 })
  ], { defaultMaxInFlight: 3 })
  fleet.setWeight(fleet.get('a')!, 4, 1)
  const servers = fleet.servers()
  t.strictSame(servers, [
    { name: 'a', host: '127.0.0.1', port: 9000, models: ['m'], weight: 4, labels: { zone: 'x' }, versions: [1, 2], max_in_flight: 3 },
    { name: 'b', host: '127.0.0.1', port: 9001, models: ['m', 'n'], weight: 1, labels: {}, max_in_flight: 3 }
  ])
  t.notOk('versions' in servers[1]!, 'no versions key for a server of every version')
  const again = new Fleet(servers)
  t.strictSame(again.servers(), servers, 'a fleet built from them is the same fleet')
})
