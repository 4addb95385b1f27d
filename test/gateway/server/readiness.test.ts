import t from 'tap'
import { Fleet, type FleetServer } from '../../../gateway/fleet/fleet.ts'
import { type Endpoint } from '../../../gateway/fleet/types.ts'
import { readinessOf } from '../../../gateway/server/readiness.ts'

function server (name: string, models: string[]): FleetServer {
  return { name, host: '127.0.0.1', port: 9000, models, weight: 1, labels: {} }
}

t.test('ready only when every model has a usable server (every_model)', async (t) => {
  const down = new Set<string>()
  const fleet = new Fleet([server('a', ['m', 'n']), server('b', ['m'])], { usable: (e: Endpoint) => !down.has(e.name) })
  t.same(readinessOf(fleet, 'every_model'), { ready: true })

  down.add('b')
  fleet.refresh()
  t.same(readinessOf(fleet, 'every_model'), { ready: true }, 'a still serves both models')

  down.add('a')
  fleet.refresh()
  const none = readinessOf(fleet, 'every_model')
  t.equal(none.ready, false, 'every worker down: not ready (panic routing to all of them does not make them usable)')
  t.match(!none.ready && none.reason, /no usable server for any model/)

  down.delete('b')
  fleet.refresh()
  const partial = readinessOf(fleet, 'every_model')
  t.match(!partial.ready && partial.reason, /no usable server for model 'n' .*gateway.ready_when: every_model/)
  t.same(readinessOf(fleet, 'any_model'), { ready: true }, 'any_model: one servable model is enough')
  down.add('b')
  fleet.refresh()
  t.equal(readinessOf(fleet, 'any_model').ready, false, 'any_model: none servable is still not ready')
})

t.test('a draining server is not usable; an empty fleet is never ready', async (t) => {
  const fleet = new Fleet([server('a', ['m'])])
  t.equal(readinessOf(fleet, 'every_model').ready, true)
  fleet.setState(fleet.get('a')!, 'draining')
  t.equal(readinessOf(fleet, 'every_model').ready, false)
  const empty = readinessOf(new Fleet([]), 'any_model')
  t.match(!empty.ready && empty.reason, /the fleet has no servers/)
})
