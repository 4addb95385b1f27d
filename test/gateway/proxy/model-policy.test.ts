import t from 'tap'
import { balancerNames, hasBalancer, validateBalancerOptions } from '../../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../../gateway/fleet/fleet-config.ts'
import { ModelPolicies } from '../../../gateway/proxy/model-policy.ts'

const deps = { now: () => 0, random: () => 0 }

function parse (text: string): ReturnType<typeof parseFleetConfig> {
  return parseFleetConfig(text, {
    file: 'policy.yaml', isKnownStrategy: hasBalancer, knownStrategies: balancerNames(), strategyOptionProblems: validateBalancerOptions
  })
}

t.test('a model without its own section shares the fleet-wide policy and balancer instance', async (t) => {
  const policies = new ModelPolicies(parse(`
inference_servers:
  - { name: a, host: h, port: 1, models: [m, n, k] }
load_balancer: { type: p2c, options: { choices: 3 } }
gateway: { request_timeout_ms: 9000 }
retries: { max_retries: 1 }
models:
  n: { request_timeout_ms: 100 }
  k:
    load_balancer: { type: consistent_hash, hash_header: X-Session, options: { hash_balance_factor: 2 } }
    max_retries: 0
`), deps)
  const m = policies.for('m')
  const n = policies.for('n')
  const k = policies.for('k')
  t.match(m, { timeoutMs: 9000, maxRetries: 1, hashHeader: undefined })
  t.equal(m.balancer.name, 'p2c')
  t.equal(policies.for('unknown'), m, 'a model named nowhere gets the default')
  t.match(n, { timeoutMs: 100, maxRetries: 1 })
  t.equal(n.balancer, m.balancer, 'only the timeout differs: same balancer instance, same state')
  t.match(k, { timeoutMs: 9000, maxRetries: 0, hashHeader: 'x-session' })
  t.equal(k.balancer.name, 'consistent_hash')
  t.ok(Object.isFrozen(k))
})
