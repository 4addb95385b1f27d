/** `flotilla worker`'s Consul flags as options: each refusal names its flag, the environment fills in as Consul's CLI. */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { consulOptionsFromFlags } from '../../../worker/registration/flags.ts'

t.test('no agent named: no registration, though bad values are still refused', async t => {
  t.equal(consulOptionsFromFlags({ label: ['zone=a'] }, {}), undefined)
  t.equal(consulOptionsFromFlags({}, { CONSUL_HTTP_ADDR: '' }), undefined)
  t.throws(() => consulOptionsFromFlags({ label: ['zone'] }, {}), { code: 'FLT_ERR_CONSUL_CONFIG', message: "--label 'zone' is not key=value" })
})

t.test('the flags, or Consul\'s environment variables, as options', async t => {
  const dir = t.testdir({ token: 'from-file\n' })
  t.strictSame(consulOptionsFromFlags({
    'consul-addr': 'agent:8500', 'consul-service': 'edge', 'consul-token-file': join(dir, 'token'), 'advertise-host': '10.0.0.5',
    label: ['zone=eu-1', 'gpu=a100'], 'consul-tag': ['pool-a', 'env=prod'], checkIntervalMs: 1000, deregisterAfterMs: 90_000
  }, { CONSUL_HTTP_TOKEN: 'from-env' }), {
    address: 'agent:8500', labels: { zone: 'eu-1', gpu: 'a100' }, tags: ['pool-a', 'env=prod'], service: 'edge', token: 'from-file', advertiseHost: '10.0.0.5',
    checkIntervalMs: 1000, deregisterAfterMs: 90_000
  }, 'the flag\'s file wins over CONSUL_HTTP_TOKEN')
  t.strictSame(consulOptionsFromFlags({}, { CONSUL_HTTP_ADDR: 'https://consul.internal', CONSUL_HTTP_TOKEN: 'from-env' }),
    { address: 'https://consul.internal', labels: {}, tags: [], token: 'from-env' })
  t.strictSame(consulOptionsFromFlags({ 'consul-addr': 'a:1' }, { CONSUL_HTTP_ADDR: 'b:2' }), { address: 'a:1', labels: {}, tags: [] }, 'the flag wins')
})

t.test('bad values: the message starts with the flag or variable at fault', async t => {
  const dir = t.testdir({ empty: '' })
  writeFileSync(join(dir, 'empty'), '  \n')
  const cases: Array<[Parameters<typeof consulOptionsFromFlags>[0], NodeJS.ProcessEnv, RegExp]> = [
    [{ 'consul-addr': 'ftp://agent:8500' }, {}, /^--consul-addr: 'ftp:\/\/agent:8500' uses ftp/],
    [{ 'consul-addr': 'http://agent/v1' }, {}, /^--consul-addr: 'http:\/\/agent\/v1' is not a Consul address/],
    [{}, { CONSUL_HTTP_ADDR: 'ftp://agent' }, /^CONSUL_HTTP_ADDR: 'ftp:\/\/agent' uses ftp/],
    [{ 'consul-addr': 'a', label: ['a b=1'] }, {}, /^--label key 'a b': a label key is 1 to 64/],
    [{ 'consul-addr': 'a', label: ['zone=a', 'zone=b'] }, {}, /^--label key 'zone' is given twice/],
    [{ 'consul-addr': 'a', 'consul-tag': ['model=fake'] }, {}, /^--consul-tag 'model=fake' starts with 'model=', which names the models/],
    [{ 'consul-addr': 'a', 'consul-tag': ['two words'] }, {}, /^--consul-tag 'two words' must be 1 to 255 printable ASCII characters without spaces/],
    [{ 'consul-addr': 'a', 'consul-tag': ['x', 'x'] }, {}, /^--consul-tag 'x' is given twice/],
    [{ 'consul-addr': 'a', 'advertise-host': '0.0.0.0' }, {}, /^--advertise-host: '0.0.0.0' is a wildcard/],
    [{ 'consul-addr': 'a', 'consul-service': 'my service' }, {}, /^--consul-service: 'my service' is not a Consul service name/],
    [{ 'consul-addr': 'a', 'consul-token-file': '/nonexistent/token' }, {}, /^--consul-token-file: cannot read the Consul token file '\/nonexistent\/token'/],
    [{ 'consul-addr': 'a', 'consul-token-file': join(dir, 'empty') }, {}, /^--consul-token-file: the Consul token file '.*' is empty/],
    [{ 'consul-addr': 'a' }, { CONSUL_HTTP_TOKEN_FILE: '/nonexistent/token' }, /^CONSUL_HTTP_TOKEN_FILE: cannot read the Consul token file/]
  ]
  for (const [flags, env, message] of cases) {
    t.throws(() => consulOptionsFromFlags(flags, env), { code: 'FLT_ERR_CONSUL_CONFIG', message }, JSON.stringify({ ...flags, ...env }))
  }
})
