/** What a worker puts in the catalog (ID, tags, meta) and how its Consul settings are checked: pure functions. */
import t from 'tap'
import { type NetworkInterfaceInfo } from 'node:os'
import {
  checkAdvertiseHost, defaultAdvertiseHost, modelTags, parseLabels, registrationSettings, serviceId, serviceMeta, SERVICE_ID,
  type HostInfo
} from '../../../worker/registration/service-definition.ts'

const nic = (address: string, family: 'IPv4' | 'IPv6', internal: boolean): NetworkInterfaceInfo =>
  ({ address, family, internal, netmask: '', mac: '', cidr: null, ...(family === 'IPv6' ? { scopeid: 0 } : {}) }) as NetworkInterfaceInfo

const HOST: HostInfo = {
  networkInterfaces: () => ({ lo: [nic('127.0.0.1', 'IPv4', true)], eth0: [nic('fe80::1', 'IPv6', false), nic('10.0.0.5', 'IPv4', false)] }),
  hostname: () => 'node-7'
}

t.test('the service ID: stable per address, sanitised, at most 63 characters, starting with a letter or digit', async t => {
  t.equal(serviceId('flotilla-worker', '10.0.0.5', 8000), 'flotilla-worker-10.0.0.5-8000')
  t.equal(serviceId('flotilla-worker', 'fe80::1%eth0', 8000), 'flotilla-worker-fe80::1-eth0-8000', 'IPv6 keeps its colons; % is replaced')
  t.equal(serviceId('_w', 'h', 1), 'w-h-1', 'never starts with anything but a letter or digit')
  const long = 'a'.repeat(40) + '.example.internal.cluster.local'
  const id = serviceId('flotilla-worker', long, 8000)
  t.equal(id.length, 63)
  t.match(id, /^flotilla-worker-a+-[0-9a-f]{8}-8000$/, 'a long one keeps its start and its port, with a hash between')
  t.not(id, serviceId('flotilla-worker', long.replace('cluster', 'clusteR'), 8000), 'two long names give two IDs')
  t.equal(serviceId('flotilla-worker', long, 8000), id, 'stable')
  for (const x of [id, serviceId('flotilla-worker', 'fe80::1%eth0', 8000), serviceId('w', 'h', 1)]) t.match(x, SERVICE_ID.regex)
})

t.test('tags: model=<name> and model=<name>:<version> per ready version, sorted, no duplicates', async t => {
  t.strictSame(modelTags([
    { name: 'resnet', version: '2' }, { name: 'resnet', version: '1' }, { name: 'bert', version: '3' }, { name: 'broken' }
  ]), ['model=bert', 'model=bert:3', 'model=resnet', 'model=resnet:1', 'model=resnet:2'])
  t.strictSame(modelTags([]), [])
})

t.test('meta: the ports of the listeners that are on, and each label as label_<key>', async t => {
  t.strictSame(serviceMeta({ grpcPort: 8001, metricsPort: 8002 }, { zone: 'eu-1', gpu: 'a100' }),
    { grpc_port: '8001', metrics_port: '8002', label_zone: 'eu-1', label_gpu: 'a100' })
  t.strictSame(serviceMeta({ grpcPort: -1, metricsPort: -1 }, {}), {}, 'listeners that are off are left out')
})

t.test('the advertise host: given, the bind host, or for a wildcard this machine\'s first external IPv4, else its name', async t => {
  t.equal(defaultAdvertiseHost('127.0.0.1', HOST), '127.0.0.1')
  t.equal(defaultAdvertiseHost('0.0.0.0', HOST), '10.0.0.5')
  t.equal(defaultAdvertiseHost('::', HOST), '10.0.0.5')
  t.equal(defaultAdvertiseHost('0.0.0.0', { networkInterfaces: () => ({ lo: [nic('127.0.0.1', 'IPv4', true)] }), hostname: () => 'node-7' }), 'node-7')
  t.equal(checkAdvertiseHost('[::1]'), '::1')
  t.equal(checkAdvertiseHost('worker-3.example.com'), 'worker-3.example.com')
  t.throws(() => checkAdvertiseHost('0.0.0.0'), { code: 'FLT_ERR_CONSUL_CONFIG', message: /wildcard/ })
  t.throws(() => checkAdvertiseHost('http://x'), { code: 'FLT_ERR_CONSUL_CONFIG', message: /neither an IP address nor a host name/ })
})

t.test('labels: key=value, keys fit a meta key, none twice', async t => {
  t.strictSame(parseLabels(['zone=eu-1', 'gpu=a100', 'note=a=b']), { zone: 'eu-1', gpu: 'a100', note: 'a=b' })
  t.throws(() => parseLabels(['zone'], '--label'), { code: 'FLT_ERR_CONSUL_CONFIG', message: "--label 'zone' is not key=value" })
  t.throws(() => parseLabels(['a b=1']), { message: /label key 'a b': a label key is 1 to 64/ })
  t.throws(() => parseLabels(['zone=a', 'zone=b']), { message: /label key 'zone' is given twice/ })
  t.throws(() => parseLabels([`x=${'v'.repeat(513)}`]), { message: /longer than 512/ })
})

t.test('settings: defaults filled in, bad values refused before anything starts', async t => {
  const s = registrationSettings({ address: '127.0.0.1:8500' }, '0.0.0.0', HOST)
  t.match(s, { service: 'flotilla-worker', token: undefined, advertiseHost: '10.0.0.5', labels: {}, checkIntervalMs: 2000, deregisterAfterMs: 60_000 })
  t.match(s.address, { host: '127.0.0.1', port: 8500, secure: false })
  t.throws(() => registrationSettings({ address: 'ftp://x' }, '127.0.0.1'), { code: 'FLT_ERR_CONSUL_CONFIG' })
  t.throws(() => registrationSettings({ address: 'http://[::1]:8500' }, '127.0.0.1'), { code: 'FLT_ERR_CONSUL_CONFIG', message: /IPv6 literal/ })
  t.throws(() => registrationSettings({ address: 'x', service: 'a b' }, '127.0.0.1'), { message: /not a Consul service name/ })
  t.throws(() => registrationSettings({ address: 'x', labels: { 'a.b': '1' } }, '127.0.0.1'), { message: /label key 'a.b'/ })
  t.throws(() => registrationSettings({ address: 'x', checkIntervalMs: 0 }, '127.0.0.1'), { message: /check interval must be a positive/ })
})
