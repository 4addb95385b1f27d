import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PACKAGE_ROOT } from '../../../common/package-root.ts'
import { SERVER_NAME_RULE } from '../../../gateway/admin/api.ts'
import { balancerNames, hasBalancer, validateBalancerOptions } from '../../../gateway/balancer/registry.ts'
import {
  consulWaitMs,
  DEFAULT_GATEWAY_SETTINGS, DEFAULT_RETRY_SETTINGS, loadFleetFile, parseFleetConfig, toBalancerOptions, type FleetConfig,
  type ModelPolicyConfig, type RetryConfig, type StrategyOptionsConfig
} from '../../../gateway/fleet/fleet-config.ts'

// The seed fleet file, copied into the repository unchanged (nothing here reads outside it).
const SEED = join(PACKAGE_ROOT, 'test', 'fixtures', 'triton_config.yaml')
const FIXTURES = join(PACKAGE_ROOT, 'test', 'fixtures', 'fleets') + '/'

// What the gateway passes: strategy-dependent option checks included.
const options = { isKnownStrategy: hasBalancer, knownStrategies: balancerNames(), strategyOptionProblems: validateBalancerOptions }

function parse (text: string): FleetConfig {
  return parseFleetConfig(text, { file: 'fleet.yaml', ...options })
}

/** The message of the GW_ERR_FLEET_INVALID that parsing `text` throws. */
function problems (t: Test, text: string): string {
  try {
    parse(text)
  } catch (err) {
    t.equal((err as { code?: string }).code, 'GW_ERR_FLEET_INVALID')
    return (err as Error).message
  }
  t.fail('expected the fleet file to be rejected')
  return ''
}

function isDeepFrozen (value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return true
  return Object.isFrozen(value) && Object.values(value).every(isDeepFrozen)
}

// A valid fleet to mutate in the cases below, one key per line so lines are easy to count.
const BASE = `inference_servers:
  - name: a
    host: 127.0.0.1
    port: 8001
    models: [m]
load_balancer:
  type: round_robin
`

const TOP = 'model_repository, inference_servers, load_balancer, models, canary, retries, cache, health_check, outlier_detection, gateway, discovery'
const CACHE_DEFAULTS = { max_bytes: 268435456, max_entry_bytes: 1048576, ttl_ms: 0, coalesce: false, coalesce_timeout_ms: 5000 }
const SERVER_KEYS = 'name, host, port, grpc_port, models, weight, protocol, labels, versions, max_in_flight'
const GATEWAY_KEYS = 'host, http_port, grpc_port, metrics_port, max_body_bytes, request_timeout_ms, max_header_bytes, ' +
  'max_header_count, header_timeout_ms, body_timeout_ms, idle_timeout_ms, ready_when, max_in_flight_per_server, max_queued_requests, queue_timeout_ms, admin_host, admin_port, admin_token_file, ' +
  'admin_allowed_hosts, shutdown_timeout_ms, drain_timeout_ms, slow_start_ms, watch'
/** What a refused server name is told. */
const NAME_RULE = "a server name is 1 to 63 characters, ASCII letters, digits, '.', '_', ':' and '-', starting with a " +
  'letter or digit (it is sent in URLs, metric labels, logs and the x-flotilla-endpoint header)'
/** The normalised `gateway` section of a file that has none. */
const GATEWAY_DEFAULTS = {
  host: '127.0.0.1',
  http_port: 8000,
  grpc_port: 8001,
  metrics_port: 8002,
  max_body_bytes: 67108864,
  request_timeout_ms: 60000,
  max_header_bytes: 16384,
  max_header_count: 100,
  header_timeout_ms: 10000,
  body_timeout_ms: 300000,
  idle_timeout_ms: 72000,
  ready_when: 'every_model',
  max_in_flight_per_server: 0,
  max_queued_requests: 1024,
  queue_timeout_ms: 5000,
  admin_host: '127.0.0.1',
  admin_port: 9000,
  shutdown_timeout_ms: 30000,
  drain_timeout_ms: 30000,
  slow_start_ms: 0,
  watch: true
}
const RETRY_DEFAULTS = {
  max_retries: 2,
  budget_percent: 20,
  min_concurrent: 3,
  backoff_base_ms: 25,
  backoff_max_ms: 250,
  per_try_timeout: { p99_multiple: 5, min_ms: 1000, max_ms: 30000, window_ms: 30000, min_samples: 20 }
}

t.test('the seed fleet file loads unchanged', async (t) => {
  const config = loadFleetFile(SEED, options)
  t.strictSame(config, {
    model_repository: '/path/to/models',
    inference_servers: [
      {
        name: 'image-classifier-server-1',
        host: '10.0.1.10',
        port: 8001,
        models: ['ImageClassifier'],
        weight: 1,
        protocol: 'http',
        labels: {}
      },
      {
        name: 'image-classifier-server-2',
        host: '10.0.1.11',
        port: 8001,
        models: ['ImageClassifier'],
        weight: 1,
        protocol: 'http',
        labels: {}
      }
    ],
    load_balancer: {
      type: 'round_robin',
      panic_threshold_percent: 50,
      servers: [{ name: 'image-classifier-server-1' }, { name: 'image-classifier-server-2' }]
    },
    models: {},
    canary: {},
    retries: RETRY_DEFAULTS,
    cache: CACHE_DEFAULTS,
    health_check: { enabled: true, interval_ms: 2000, timeout_ms: 1000, jitter_percent: 10, healthy_threshold: 2, unhealthy_threshold: 3 },
    outlier_detection: { enabled: true, consecutive_failures: 5, base_ejection_time_ms: 30000, max_ejection_time_ms: 300000, max_ejection_percent: 10 },
    gateway: GATEWAY_DEFAULTS,
    discovery: {}
  })
  t.strictSame(Object.keys(config), TOP.split(', '))
  t.strictSame(DEFAULT_GATEWAY_SETTINGS, GATEWAY_DEFAULTS)
  t.strictSame(DEFAULT_RETRY_SETTINGS, RETRY_DEFAULTS)
  t.notOk('max_in_flight' in (config.inference_servers[0] ?? {}), 'max_in_flight stays absent: the consumer applies the default')
  t.notOk('options' in config.load_balancer || 'hash_header' in config.load_balancer, 'options and hash_header stay absent')
  t.ok(isDeepFrozen(config), 'the config is frozen all the way down')
  t.throws(() => { (config.inference_servers[0] as { port: number }).port = 1 }, TypeError)
})

t.test('every optional key', async (t) => {
  const config = loadFleetFile(`${FIXTURES}good-extended.yaml`, options)
  t.strictSame(config, {
    model_repository: './models',
    inference_servers: [
      {
        name: 'gpu-1',
        host: '127.0.0.1',
        port: 9001,
        models: ['resnet', 'bert'],
        weight: 3,
        protocol: 'http',
        labels: { zone: 'eu-1', gpu: 'a100' },
        versions: [1, 2]
      },
      { name: 'cpu-1', host: 'localhost', port: 9002, models: ['bert'], weight: 0, protocol: 'http', labels: {} }
    ],
    load_balancer: { type: 'round_robin', panic_threshold_percent: 30 },
    models: {},
    canary: {},
    retries: RETRY_DEFAULTS,
    cache: CACHE_DEFAULTS,
    health_check: { enabled: true, interval_ms: 500, timeout_ms: 200, jitter_percent: 0, healthy_threshold: 1, unhealthy_threshold: 2 },
    outlier_detection: { enabled: false, consecutive_failures: 3, base_ejection_time_ms: 1000, max_ejection_time_ms: 5000, max_ejection_percent: 50 },
    gateway: { ...GATEWAY_DEFAULTS, host: '0.0.0.0', http_port: 0, metrics_port: 0, max_body_bytes: 1024, request_timeout_ms: 500 },
    discovery: {
      consul: { address: 'https://consul.internal:8501', service: 'gpu-workers', tag: 'zone=a', datacenter: 'dc2', token_file: '/etc/flotilla/consul-token', wait: '2m' }
    }
  })
  t.ok(isDeepFrozen(config))
})

t.test('defaults fill a partial gateway section; anchors and aliases work', async (t) => {
  const config = parse(`inference_servers:
  - &server
    name: a
    host: 127.0.0.1
    port: 8001
    models: &models [m, n]
  - name: b
    host: 127.0.0.1
    port: 8002
    models: *models
load_balancer: { type: round-robin }
gateway:
  request_timeout_ms: 5
`)
  t.strictSame(config.gateway, { ...GATEWAY_DEFAULTS, request_timeout_ms: 5 })
  t.strictSame(config.inference_servers[1]?.models, ['m', 'n'])
  t.equal(config.load_balancer.type, 'round-robin', 'the kebab-case alias is a known strategy too')
})

t.test('fixtures: each problem names the file, line, column and key', async (t) => {
  const cases: Array<[string, string[]]> = [
    ['bad-unknown-key.yaml', [
      `7:5: unknown key 'wieght' in inference_servers[1] (allowed: ${SERVER_KEYS})`
    ]],
    ['bad-syntax.yaml', [
      '6:1: YAML syntax error: Flow sequence in block collection must be sufficiently indented and end with a ]'
    ]],
    ['bad-empty.yaml', ["1:1: the fleet file is empty; it needs at least 'inference_servers' and 'load_balancer'"]],
    ['bad-comments-only.yaml', ["1:1: the fleet file is empty; it needs at least 'inference_servers' and 'load_balancer'"]],
    ['bad-duplicate-key.yaml', ["6:5: duplicate key 'port' in inference_servers[0] (first at 4:5)"]],
    ['bad-many.yaml', [
      '2:19: model_repository must not be empty',
      "6:11: inference_servers[0].port must be an integer in 1..65535, got '8001' (a string)",
      '7:13: inference_servers[0].models must not be empty (a server must serve at least one model)',
      "8:11: duplicate server name 'a' at inference_servers[1].name (first at 4:11)",
      '10:11: inference_servers[1].port must be an integer in 1..65535, got 70000',
      "12:15: inference_servers[1].protocol 'grpc' is not supported yet: gRPC upstreams come in a later release (supported: http)",
      `14:9: load_balancer.type 'least_magic' is not a known balancing strategy (known: ${balancerNames().join(', ')})`,
      "17:13: load_balancer.servers[1].name 'c' is not the name of any inference_servers entry (known: a)",
      '18:30: health_check.interval_ms must be an integer in 100..2147483647, got 10',
      "18:34: unknown key 'healthy' in health_check (allowed: enabled, interval_ms, timeout_ms, jitter_percent, healthy_threshold, unhealthy_threshold)",
      '19:73: outlier_detection.max_ejection_time_ms (1000) must be at least base_ejection_time_ms (5000)',
      `20:1: unknown key 'response_cache' at the top level (allowed: ${TOP})`
    ]]
  ]
  for (const [file, expected] of cases) {
    const path = `${FIXTURES}${file}`
    t.throws(() => loadFleetFile(path, options), {
      code: 'GW_ERR_FLEET_INVALID',
      message: expected.map((line) => `${path}:${line}`).join('\n')
    }, file)
  }
})

t.test('the fleet files in config/ load, and every server name in them and in the seed keeps to the name rule', async (t) => {
  const dir = join(PACKAGE_ROOT, 'config')
  const files = readdirSync(dir).filter((f) => f.endsWith('.yaml')).map((f) => join(dir, f))
  t.ok(files.length > 0, 'config/ has a fleet file')
  for (const file of [SEED, ...files]) {
    const config = loadFleetFile(file, options)
    for (const server of config.inference_servers) t.match(server.name, SERVER_NAME_RULE.regex, `${file}: ${server.name}`)
  }
})

t.test('server names: every character the rule allows, up to 63 of them', async (t) => {
  const names = ['a', 'A', '7', 'worker-1.rack_2', '10.0.0.5:8000', 'triton-0.triton.default.svc', 'x'.repeat(63)]
  const config = parse(`inference_servers:\n${names.map((n, i) => `  - { name: '${n}', host: h, port: ${8000 + i}, models: [m] }\n`).join('')}` +
    'load_balancer: { type: round_robin }\n')
  t.strictSame(config.inference_servers.map((s) => s.name), names)
})

t.test('a file that cannot be read', async (t) => {
  const path = `${FIXTURES}does-not-exist.yaml`
  t.throws(() => loadFleetFile(path, options), {
    code: 'GW_ERR_FLEET_INVALID',
    message: new RegExp(`^cannot read the fleet file '${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}': ENOENT`)
  })
})

t.test('inline bad fleets', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['a list at the top level', '- 1\n', 'fleet.yaml:1:1: the file must hold a mapping at the top level, got a list'],
    ['missing inference_servers', 'load_balancer:\n  type: round_robin\n',
      "fleet.yaml:1:1: the fleet needs servers: list them under 'inference_servers', or find them in Consul with 'discovery.consul'"],
    ['missing load_balancer', BASE.replace('load_balancer:\n  type: round_robin\n', ''),
      "fleet.yaml:1:1: missing required top-level key 'load_balancer'"],
    ['no servers', 'inference_servers: []\nload_balancer: { type: round_robin }\n',
      "fleet.yaml:1:20: inference_servers must not be empty (the gateway needs at least one server), unless 'discovery.consul' finds them"],
    ['servers not a list', 'inference_servers: { a: 1 }\nload_balancer: { type: round_robin }\n',
      'fleet.yaml:1:20: inference_servers must be a list, got a mapping'],
    ['a server that is not a mapping', 'inference_servers: [a]\nload_balancer: { type: round_robin }\n',
      "fleet.yaml:1:21: inference_servers[0] must be a mapping, got 'a' (a string)"],
    ['missing port', BASE.replace('    port: 8001\n', ''),
      "fleet.yaml:2:5: inference_servers[0] is missing required key 'port'"],
    ['port with no value', BASE.replace('port: 8001', 'port:'),
      'fleet.yaml:4:5: inference_servers[0].port must be an integer in 1..65535, got nothing (null)'],
    ['port 0 for a server', BASE.replace('port: 8001', 'port: 0'),
      'fleet.yaml:4:11: inference_servers[0].port must be an integer in 1..65535, got 0'],
    ['fractional port', BASE.replace('port: 8001', 'port: 80.5'),
      'fleet.yaml:4:11: inference_servers[0].port must be an integer in 1..65535, got 80.5'],
    ['empty name', BASE.replace('name: a', 'name: ""'), 'fleet.yaml:2:11: inference_servers[0].name must not be empty'],
    ['blank name', BASE.replace('name: a', 'name: "  "'), 'fleet.yaml:2:11: inference_servers[0].name must not be empty'],
    ['numeric name', BASE.replace('name: a', 'name: 7'),
      'fleet.yaml:2:11: inference_servers[0].name must be a non-empty string, got 7 (put it in quotes to make it a string)'],
    ['name with a space', BASE.replace('name: a', 'name: my server'),
      `fleet.yaml:2:11: inference_servers[0].name 'my server' is not allowed: ${NAME_RULE}`],
    ['name with a slash', BASE.replace('name: a', 'name: rack/1'),
      `fleet.yaml:2:11: inference_servers[0].name 'rack/1' is not allowed: ${NAME_RULE}`],
    ['name with a quote', BASE.replace('name: a', 'name: "a\'b"'),
      `fleet.yaml:2:11: inference_servers[0].name 'a'b' is not allowed: ${NAME_RULE}`],
    ['name that is not ASCII', BASE.replace('name: a', 'name: wörker'),
      `fleet.yaml:2:11: inference_servers[0].name 'wörker' is not allowed: ${NAME_RULE}`],
    ['name starting with a dot', BASE.replace('name: a', 'name: ..'),
      `fleet.yaml:2:11: inference_servers[0].name '..' is not allowed: ${NAME_RULE}`],
    ['name starting with a dash', BASE.replace('name: a', 'name: -a'),
      `fleet.yaml:2:11: inference_servers[0].name '-a' is not allowed: ${NAME_RULE}`],
    ['name of 64 characters', BASE.replace('name: a', `name: ${'n'.repeat(64)}`),
      `fleet.yaml:2:11: inference_servers[0].name '${'n'.repeat(64)}' is not allowed: ${NAME_RULE}`],
    ['name of 10 KB, quoted short', BASE.replace('name: a', `name: ${'n'.repeat(10240)}`),
      `fleet.yaml:2:11: inference_servers[0].name '${'n'.repeat(40)}...' (10240 characters) is not allowed: ${NAME_RULE}`],
    ['host with a scheme', BASE.replace('host: 127.0.0.1', 'host: http://10.0.0.1'),
      "fleet.yaml:3:11: inference_servers[0].host 'http://10.0.0.1' must be a host name or IP address alone: no scheme, " +
      'path, spaces or brackets (write IPv6 addresses bare)'],
    ['models not a list', BASE.replace('models: [m]', 'models: m'),
      "fleet.yaml:5:13: inference_servers[0].models must be a list, got 'm' (a string)"],
    ['model name with a slash', BASE.replace('models: [m]', 'models: [a/b]'),
      "fleet.yaml:5:14: inference_servers[0].models[0] 'a/b' is not allowed: model names cannot contain slashes or whitespace"],
    ['duplicate model', BASE.replace('models: [m]', 'models: [m, m]'),
      "fleet.yaml:5:17: duplicate model 'm' at inference_servers[0].models[1] (first at 5:14)"],
    ['weight too large', BASE.replace('models: [m]', 'models: [m]\n    weight: 1001'),
      'fleet.yaml:6:13: inference_servers[0].weight must be an integer in 0..1000, got 1001'],
    ['negative weight', BASE.replace('models: [m]', 'models: [m]\n    weight: -1'),
      'fleet.yaml:6:13: inference_servers[0].weight must be an integer in 0..1000, got -1'],
    ['unknown protocol', BASE.replace('models: [m]', 'models: [m]\n    protocol: ftp'),
      "fleet.yaml:6:15: inference_servers[0].protocol must be 'http', got 'ftp' (a string)"],
    ['label value not a string', BASE.replace('models: [m]', 'models: [m]\n    labels: { rack: 4 }'),
      'fleet.yaml:6:21: inference_servers[0].labels.rack must be a string, got 4 (put it in quotes to make it a string)'],
    ['duplicate label', BASE.replace('models: [m]', 'models: [m]\n    labels: { a: x, a: y }'),
      "fleet.yaml:6:21: duplicate key 'a' in inference_servers[0].labels (first at 6:15)"],
    ['numeric label key', BASE.replace('models: [m]', 'models: [m]\n    labels: { 1: x }'),
      'fleet.yaml:6:15: inference_servers[0].labels keys must be non-empty strings, got 1'],
    ['boolean name', BASE.replace('name: a', 'name: true'),
      'fleet.yaml:2:11: inference_servers[0].name must be a non-empty string, got true (a boolean) (put it in quotes to make it a string)'],
    ['labels not a mapping', BASE.replace('models: [m]', 'models: [m]\n    labels: [a]'),
      'fleet.yaml:6:13: inference_servers[0].labels must be a mapping of strings to strings, got a list'],
    ['negative version', BASE.replace('models: [m]', 'models: [m]\n    versions: [1, -2]'),
      'fleet.yaml:6:19: inference_servers[0].versions[1] must be an integer >= 0, got -2'],
    ['empty versions', BASE.replace('models: [m]', 'models: [m]\n    versions: []'),
      'fleet.yaml:6:15: inference_servers[0].versions must not be empty (omit it to serve every version)'],
    ['versions as a string', BASE.replace('models: [m]', 'models: [m]\n    versions: "1"'),
      "fleet.yaml:6:15: inference_servers[0].versions must be a list, got '1' (a string)"],
    ['unknown strategy', BASE.replace('type: round_robin', 'type: fastest'),
      `fleet.yaml:7:9: load_balancer.type 'fastest' is not a known balancing strategy (known: ${balancerNames().join(', ')})`],
    ['missing strategy', BASE.replace('  type: round_robin\n', '  servers: [{ name: a }]\n'),
      "fleet.yaml:7:3: load_balancer is missing required key 'type'"],
    ['load_balancer not a mapping', BASE.replace('load_balancer:\n  type: round_robin', 'load_balancer: round_robin'),
      "fleet.yaml:6:16: load_balancer must be a mapping, got 'round_robin' (a string)"],
    ['unknown key in load_balancer', BASE + '  sticky: true\n',
      "fleet.yaml:8:3: unknown key 'sticky' in load_balancer (allowed: type, panic_threshold_percent, servers, options, hash_header)"],
    ['balancer names an unknown server', BASE + '  servers:\n    - name: b\n',
      "fleet.yaml:9:13: load_balancer.servers[0].name 'b' is not the name of any inference_servers entry (known: a)"],
    ['balancer names a server twice', BASE + '  servers: [{ name: a }, { name: a }]\n',
      "fleet.yaml:8:34: duplicate server 'a' at load_balancer.servers[1].name (first at 8:21)"],
    ['empty balancer server list', BASE + '  servers: []\n',
      'fleet.yaml:8:12: load_balancer.servers must not be empty (omit it to send traffic to every inference server)'],
    ['unknown key in a balancer server', BASE + '  servers: [{ name: a, weight: 2 }]\n',
      "fleet.yaml:8:24: unknown key 'weight' in load_balancer.servers[0] (allowed: name)"],
    ['unknown key in cache', BASE + 'cache: { size: 5 }\n',
      "fleet.yaml:8:10: unknown key 'size' in cache (allowed: max_bytes, max_entry_bytes, ttl_ms, coalesce, coalesce_timeout_ms, models, redis)"],
    ['cache.redis.url not a redis URL', BASE + 'cache: { redis: { url: "http://x:1" } }\n',
      "fleet.yaml:8:24: cache.redis.url 'http://x:1' is not a redis:// or rediss:// URL"],
    ['health check enabled is not a boolean', BASE + 'health_check: { enabled: yes }\n',
      "fleet.yaml:8:26: health_check.enabled must be true or false, got 'yes' (a string)"],
    ['panic threshold over 100', BASE + '  panic_threshold_percent: 101\n',
      'fleet.yaml:8:28: load_balancer.panic_threshold_percent must be an integer in 0..100, got 101'],
    ['ejection percent over 100', BASE + 'outlier_detection:\n  max_ejection_percent: 150\n',
      'fleet.yaml:9:25: outlier_detection.max_ejection_percent must be an integer in 0..100, got 150'],
    ['unknown key in gateway', BASE + 'gateway:\n  grpc_prot: 8001\n',
      `fleet.yaml:9:3: unknown key 'grpc_prot' in gateway (allowed: ${GATEWAY_KEYS})`],
    ['gRPC port equal to the HTTP port', BASE + 'gateway:\n  http_port: 8001\n',
      'fleet.yaml:9:14: gateway.grpc_port must differ from gateway.http_port (both are 8001)'],
    ['gRPC port equal to the metrics port', BASE + 'gateway:\n  grpc_port: 8002\n',
      'fleet.yaml:9:14: gateway.grpc_port must differ from gateway.metrics_port (both are 8002)'],
    ['server gRPC port equal to its port', BASE.replace('port: 8001', 'port: 8001\n    grpc_port: 8001'),
      'fleet.yaml:5:16: inference_servers[0].grpc_port must differ from its port (both are 8001)'],
    ['server port 65535 without a gRPC port', BASE.replace('port: 8001', 'port: 65535'),
      'fleet.yaml:4:11: inference_servers[0] has port 65535, so its gRPC port cannot default to port + 1: set grpc_port'],
    ['gateway port out of range', BASE + 'gateway:\n  http_port: 65536\n',
      'fleet.yaml:9:14: gateway.http_port must be an integer in 0..65535, got 65536'],
    ['zero body limit', BASE + 'gateway:\n  max_body_bytes: 0\n',
      'fleet.yaml:9:19: gateway.max_body_bytes must be an integer in 1..2147483647, got 0'],
    ['zero timeout', BASE + 'gateway:\n  request_timeout_ms: 0\n',
      'fleet.yaml:9:23: gateway.request_timeout_ms must be an integer in 1..2147483647, got 0'],
    ['same port twice', BASE + 'gateway:\n  http_port: 9000\n  metrics_port: 9000\n',
      'fleet.yaml:10:17: gateway.metrics_port must differ from gateway.http_port (both are 9000)'],
    ['http port on the default metrics port', BASE + 'gateway:\n  http_port: 8002\n',
      'fleet.yaml:9:14: gateway.metrics_port must differ from gateway.http_port (both are 8002)'],
    ['gateway not a mapping', BASE + 'gateway: 8000\n', 'fleet.yaml:8:10: gateway must be a mapping, got 8000'],
    ['duplicate top-level key', BASE + 'load_balancer:\n  type: round_robin\n',
      "fleet.yaml:8:1: duplicate key 'load_balancer' at the top level (first at 6:1)"],
    ['a non-scalar key', BASE + '[a]: 1\n',
      `fleet.yaml:8:1: keys at the top level must be plain words, got a list (allowed: ${TOP})`],
    ['two documents', BASE + '---\n' + BASE,
      'fleet.yaml:8:1: YAML syntax error: Source contains multiple documents; please use YAML.parseAllDocuments()'],
    ['tab indentation', 'inference_servers:\n\t- name: a\n', 'fleet.yaml:2:1: YAML syntax error: Tabs are not allowed as indentation']
  ]
  for (const [name, text, expected] of cases) {
    t.equal(problems(t, text), expected, name)
  }
})

t.test('alias uses are capped', async (t) => {
  const uses = Array(1001).fill('*srv').join(', ')
  const message = problems(t, `inference_servers: [&srv { name: a, host: h, port: 1, models: [m] }, ${uses}]
load_balancer: { type: round_robin }
`)
  t.match(message, /^fleet\.yaml:1:\d+: too many alias uses \(more than 1000\); write the values out instead$/m)
})

t.test('zero gateway ports (ephemeral) are allowed', async (t) => {
  const config = parse(BASE + 'gateway:\n  http_port: 0\n  metrics_port: 0\n')
  t.equal(config.gateway.http_port, 0)
  t.equal(config.gateway.metrics_port, 0)
})

t.test('several problems in one server are all reported, one per line', async (t) => {
  const message = problems(t, `inference_servers:
  - name: a
    host: ""
    port: -1
    models: []
    colour: red
load_balancer:
  type: round_robin
`)
  t.equal(message, [
    'fleet.yaml:3:11: inference_servers[0].host must not be empty',
    'fleet.yaml:4:11: inference_servers[0].port must be an integer in 1..65535, got -1',
    'fleet.yaml:5:13: inference_servers[0].models must not be empty (a server must serve at least one model)',
    `fleet.yaml:6:5: unknown key 'colour' in inference_servers[0] (allowed: ${SERVER_KEYS})`
  ].join('\n'))
})

t.test('extensions: per-model policies, strategy options, hash_header, retries, queueing and caps', async (t) => {
  const config = parse(`inference_servers:
  - { name: a, host: 127.0.0.1, port: 8001, models: [resnet, bert, gpt], max_in_flight: 8 }
  - { name: b, host: 127.0.0.1, port: 8002, models: [bert], max_in_flight: 0 }
load_balancer:
  type: consistent_hash
  options: { hash_balance_factor: 1.5 }
  hash_header: X-Session-ID
models:
  resnet:
    load_balancer:
      type: p2c
      options: { choices: 3 }
    request_timeout_ms: 120000
    max_retries: 0
  bert:
    load_balancer: { type: consistent-hash, hash_header: x-user, options: { hash_balance_factor: 0 } }
  gpt: {}
retries:
  max_retries: 10
  budget_percent: 0
  min_concurrent: 100000
  backoff_base_ms: 0
  backoff_max_ms: 0
gateway:
  max_header_bytes: 1024
  max_in_flight_per_server: 64
  max_queued_requests: 0
  queue_timeout_ms: 1
`)
  t.strictSame(config.load_balancer, {
    type: 'consistent_hash',
    panic_threshold_percent: 50,
    options: { hash_balance_factor: 1.5 },
    hash_header: 'x-session-id'
  }, 'hash_header is lower-cased; options keep their YAML spelling')
  const resnet: ModelPolicyConfig | undefined = config.models['resnet']
  t.strictSame(resnet, { load_balancer: { type: 'p2c', options: { choices: 3 } }, request_timeout_ms: 120000, max_retries: 0 })
  t.strictSame(config.models['bert'], { load_balancer: { type: 'consistent-hash', options: { hash_balance_factor: 0 }, hash_header: 'x-user' } })
  t.strictSame(config.models['gpt'], {}, 'an empty policy is allowed: every setting is the fleet-wide one')
  t.strictSame(Object.keys(config.models), ['resnet', 'bert', 'gpt'], 'models keep the file order')
  const retries: RetryConfig = config.retries
  t.strictSame(retries, { max_retries: 10, budget_percent: 0, min_concurrent: 100000, backoff_base_ms: 0, backoff_max_ms: 0, per_try_timeout: RETRY_DEFAULTS.per_try_timeout })
  t.strictSame(config.gateway, { ...GATEWAY_DEFAULTS, max_header_bytes: 1024, max_in_flight_per_server: 64, max_queued_requests: 0, queue_timeout_ms: 1 })
  t.equal(config.inference_servers[0]?.max_in_flight, 8)
  t.equal(config.inference_servers[1]?.max_in_flight, 0, '0 (unlimited) is kept, distinct from absent')
  t.ok(isDeepFrozen(config))
})

t.test('per-try timeouts, slow-client timeouts, header count and readiness: read, defaulted and checked', async (t) => {
  const config = parse(BASE + [
    'models:', '  m:', '    per_try_timeout_ms: 0',
    'retries:', '  per_try_timeout_ms: 2500', '  per_try_timeout: { p99_multiple: 2.5, min_ms: 50 }',
    'gateway:', '  max_header_count: 40', '  header_timeout_ms: 2000', '  body_timeout_ms: 2000', '  idle_timeout_ms: 5000', '  ready_when: any_model'
  ].join('\n') + '\n')
  t.equal(config.models['m']?.per_try_timeout_ms, 0, '0 (no per-try limit for this model) is kept, distinct from absent')
  t.equal(config.retries.per_try_timeout_ms, 2500)
  t.strictSame(config.retries.per_try_timeout, { ...RETRY_DEFAULTS.per_try_timeout, p99_multiple: 2.5, min_ms: 50 })
  t.strictSame(config.gateway, { ...GATEWAY_DEFAULTS, max_header_count: 40, header_timeout_ms: 2000, body_timeout_ms: 2000, idle_timeout_ms: 5000, ready_when: 'any_model' })
  const refused: Array<[string, string]> = [
    ['retries:\n  per_try_timeout: { min_ms: 5000, max_ms: 1000 }\n', 'retries.per_try_timeout.max_ms (1000) must be at least min_ms (5000)'],
    ['retries:\n  per_try_timeout: { p99_multiple: 0.5 }\n', 'retries.per_try_timeout.p99_multiple must be a number in 1..1000, got 0.5'],
    ['retries:\n  per_try_timeout_ms: -1\n', 'retries.per_try_timeout_ms must be an integer in 0..2147483647, got -1'],
    ['gateway:\n  header_timeout_ms: 20000\n  body_timeout_ms: 10000\n', 'gateway.body_timeout_ms (10000) must be at least header_timeout_ms (20000): the whole request includes its head'],
    ['gateway:\n  ready_when: always\n', "gateway.ready_when must be one of 'every_model', 'any_model', got 'always'"],
    ['gateway:\n  max_header_count: 0\n', 'gateway.max_header_count must be an integer in 1..10000, got 0']
  ]
  for (const [yaml, message] of refused) {
    t.throws(() => parse(BASE + yaml), { message: new RegExp(message.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')) }, message)
  }
})

t.test('retries: a partial section is filled in with the defaults', async (t) => {
  const config = parse(BASE + 'retries:\n  max_retries: 5\n  backoff_max_ms: 25\n')
  t.strictSame(config.retries, { ...RETRY_DEFAULTS, max_retries: 5, backoff_max_ms: 25 }, 'max equal to base is fine')
})

t.test('toBalancerOptions converts the YAML spelling to what balancer factories take', async (t) => {
  const options: StrategyOptionsConfig = { hash_balance_factor: 1.25, stale_after_ms: 0, choices: 2 }
  t.strictSame(toBalancerOptions(options), { hashBalanceFactor: 1.25, staleAfterMs: 0, choices: 2 })
  t.strictSame(toBalancerOptions({ choices: 4 }), { choices: 4 }, 'absent options stay absent')
  t.strictSame(toBalancerOptions(undefined), {})
  t.ok(Object.isFrozen(toBalancerOptions({ choices: 4 })))
  const config = parse(BASE.replace('round_robin', 'least_queue') + '  options: { stale_after_ms: 500 }\n')
  t.strictSame(toBalancerOptions(config.load_balancer.options), { staleAfterMs: 500 })
})

t.test('the strategy hook: called with camelCase options, its messages reported at the options mapping', async (t) => {
  const calls: Array<[string, Record<string, unknown>]> = []
  const hook = (type: string, opts: Record<string, unknown>): string[] => {
    calls.push([type, opts])
    return type === 'p2c' ? [] : ['nope']
  }
  const text = BASE.replace('round_robin', 'p2c') + `  options: { choices: 4 }
models:
  m:
    load_balancer:
      type: random
      options:
        stale_after_ms: 7
`
  t.throws(() => parseFleetConfig(text, { file: 'f.yaml', isKnownStrategy: hasBalancer, strategyOptionProblems: hook }), {
    code: 'GW_ERR_FLEET_INVALID',
    message: 'f.yaml:14:9: models.m.load_balancer.options: nope'
  })
  t.strictSame(calls, [['p2c', { choices: 4 }], ['random', { staleAfterMs: 7 }]])

  calls.length = 0
  parseFleetConfig(BASE, { file: 'f.yaml', isKnownStrategy: hasBalancer, strategyOptionProblems: hook })
  t.strictSame(calls, [], 'not called without options')
  const unchecked = parseFleetConfig(BASE + '  options: { choices: 4 }\n', { file: 'f.yaml', isKnownStrategy: hasBalancer })
  t.strictSame(unchecked.load_balancer.options, { choices: 4 }, 'without the hook only the ranges are checked')
})

t.test('inline bad extensions', async (t) => {
  const cases: Array<[string, string, string]> = [
    // load_balancer.options
    ['option that does not apply to the strategy', BASE + '  options:\n    choices: 3\n',
      "fleet.yaml:9:5: load_balancer.options: option 'choices' does not apply to balancing strategy 'round_robin' (it takes none)"],
    ['option of another strategy, named as in YAML', BASE.replace('round_robin', 'least_queue') + '  options: { hash_balance_factor: 2 }\n',
      "fleet.yaml:8:12: load_balancer.options: option 'hash_balance_factor' does not apply to balancing strategy 'least_queue' (it takes: stale_after_ms)"],
    ['options by alias', BASE.replace('round_robin', 'least-queue') + '  options: { choices: 2 }\n',
      "fleet.yaml:8:12: load_balancer.options: option 'choices' does not apply to balancing strategy 'least_queue' (it takes: stale_after_ms)"],
    ['too many choices', BASE.replace('round_robin', 'p2c') + '  options: { choices: 65 }\n',
      'fleet.yaml:8:23: load_balancer.options.choices must be an integer in 2..64, got 65'],
    ['one choice', BASE.replace('round_robin', 'p2c') + '  options: { choices: 1 }\n',
      'fleet.yaml:8:23: load_balancer.options.choices must be an integer in 2..64, got 1'],
    ['balance factor between 0 and 1', BASE.replace('round_robin', 'consistent_hash') + '  options: { hash_balance_factor: 0.5 }\n',
      'fleet.yaml:8:35: load_balancer.options.hash_balance_factor must be 0 or a number >= 1, got 0.5'],
    ['infinite balance factor', BASE.replace('round_robin', 'consistent_hash') + '  options: { hash_balance_factor: .inf }\n',
      'fleet.yaml:8:35: load_balancer.options.hash_balance_factor must be 0 or a number >= 1, got Infinity'],
    ['balance factor as a string', BASE.replace('round_robin', 'consistent_hash') + '  options: { hash_balance_factor: "1.5" }\n',
      "fleet.yaml:8:35: load_balancer.options.hash_balance_factor must be 0 or a number >= 1, got '1.5' (a string)"],
    ['negative stale_after_ms', BASE.replace('round_robin', 'least_queue') + '  options: { stale_after_ms: -1 }\n',
      'fleet.yaml:8:30: load_balancer.options.stale_after_ms must be an integer >= 0, got -1'],
    ['unknown option', BASE + '  options: { choice: 2 }\n',
      "fleet.yaml:8:14: unknown key 'choice' in load_balancer.options (allowed: hash_balance_factor, stale_after_ms, choices)"],
    ['options not a mapping', BASE + '  options: 2\n', 'fleet.yaml:8:12: load_balancer.options must be a mapping, got 2'],
    // load_balancer.hash_header
    ['hash_header with a non-hash strategy', BASE + '  hash_header: x-user\n',
      "fleet.yaml:8:16: load_balancer.hash_header applies only to consistent_hash, not to 'round_robin' (remove it, or set type: consistent_hash)"],
    ['hash_header that is not a header name', BASE.replace('round_robin', 'consistent_hash') + '  hash_header: "x-user: 1"\n',
      "fleet.yaml:8:16: load_balancer.hash_header 'x-user: 1' is not allowed: an HTTP header name is letters, digits and " +
      "!#$%&'*+-.^_`|~ only (no spaces or colons)"],
    ['numeric hash_header', BASE.replace('round_robin', 'consistent_hash') + '  hash_header: 5\n',
      'fleet.yaml:8:16: load_balancer.hash_header must be a non-empty string, got 5 (put it in quotes to make it a string)'],
    // models
    ['models not a mapping', BASE + 'models: [m]\n',
      'fleet.yaml:8:9: models must be a mapping of model names to per-model settings, got a list'],
    ['a model no server lists', BASE + 'models:\n  resnet: { max_retries: 1 }\n',
      'fleet.yaml:9:3: models.resnet is not served by any inference server, so its settings would never apply (known models: m)'],
    ['a model name with a slash', BASE + 'models:\n  a/b: {}\n',
      "fleet.yaml:9:3: models key 'a/b' is not allowed: model names cannot contain slashes or whitespace"],
    ['a numeric model name', BASE + 'models:\n  1: {}\n', 'fleet.yaml:9:3: models keys must be non-empty strings, got 1'],
    ['a model twice', BASE + 'models:\n  m: {}\n  m: {}\n', "fleet.yaml:10:3: duplicate key 'm' in models (first at 9:3)"],
    ['a model with no settings', BASE + 'models:\n  m:\n', 'fleet.yaml:9:3: models.m must be a mapping, got nothing (null)'],
    ['unknown key in a model', BASE + 'models:\n  m:\n    timeout_ms: 5\n',
      "fleet.yaml:10:5: unknown key 'timeout_ms' in models.m (allowed: load_balancer, request_timeout_ms, max_retries, per_try_timeout_ms)"],
    ['fleet-wide balancer key in a model', BASE + 'models:\n  m:\n    load_balancer: { type: random, servers: [{ name: a }] }\n',
      "fleet.yaml:10:36: unknown key 'servers' in models.m.load_balancer (allowed: type, options, hash_header)"],
    ['model balancer with no type', BASE + 'models:\n  m:\n    load_balancer: { options: { choices: 2 } }\n',
      "fleet.yaml:10:20: models.m.load_balancer is missing required key 'type'"],
    ['unknown strategy for a model', BASE + 'models:\n  m:\n    load_balancer: { type: fastest }\n',
      `fleet.yaml:10:28: models.m.load_balancer.type 'fastest' is not a known balancing strategy (known: ${balancerNames().join(', ')})`],
    ['model option that does not apply', BASE + 'models:\n  m:\n    load_balancer: { type: p2c, options: { stale_after_ms: 5 } }\n',
      "fleet.yaml:10:42: models.m.load_balancer.options: option 'stale_after_ms' does not apply to balancing strategy 'p2c' (it takes: choices)"],
    ['model hash_header with a non-hash strategy', BASE + 'models:\n  m:\n    load_balancer: { type: random, hash_header: x-user }\n',
      "fleet.yaml:10:49: models.m.load_balancer.hash_header applies only to consistent_hash, not to 'random' (remove it, or set type: consistent_hash)"],
    ['model timeout 0', BASE + 'models:\n  m:\n    request_timeout_ms: 0\n',
      'fleet.yaml:10:25: models.m.request_timeout_ms must be an integer in 1..2147483647, got 0'],
    ['model retries over 10', BASE + 'models:\n  m:\n    max_retries: 11\n',
      'fleet.yaml:10:18: models.m.max_retries must be an integer in 0..10, got 11'],
    // retries
    ['retries not a mapping', BASE + 'retries: 3\n', 'fleet.yaml:8:10: retries must be a mapping, got 3'],
    ['unknown key in retries', BASE + 'retries:\n  hedge_after_ms: 5\n',
      "fleet.yaml:9:3: unknown key 'hedge_after_ms' in retries (allowed: max_retries, budget_percent, min_concurrent, backoff_base_ms, backoff_max_ms, per_try_timeout_ms, per_try_timeout)"],
    ['negative max_retries', BASE + 'retries:\n  max_retries: -1\n',
      'fleet.yaml:9:16: retries.max_retries must be an integer in 0..10, got -1'],
    ['budget over 100', BASE + 'retries:\n  budget_percent: 101\n',
      'fleet.yaml:9:19: retries.budget_percent must be an integer in 0..100, got 101'],
    ['min_concurrent too large', BASE + 'retries:\n  min_concurrent: 100001\n',
      'fleet.yaml:9:19: retries.min_concurrent must be an integer in 0..100000, got 100001'],
    ['backoff base over a minute (and so not compared with max)', BASE + 'retries:\n  backoff_base_ms: 60001\n  backoff_max_ms: 60000\n',
      'fleet.yaml:9:20: retries.backoff_base_ms must be an integer in 0..60000, got 60001'],
    ['backoff max below base', BASE + 'retries:\n  backoff_base_ms: 100\n  backoff_max_ms: 50\n',
      'fleet.yaml:10:19: retries.backoff_max_ms (50) must be at least backoff_base_ms (100)'],
    ['backoff base above the default max', BASE + 'retries:\n  backoff_base_ms: 300\n',
      'fleet.yaml:9:20: retries.backoff_max_ms (250) must be at least backoff_base_ms (300)'],
    // gateway
    ['header limit below 1 KiB', BASE + 'gateway:\n  max_header_bytes: 512\n',
      'fleet.yaml:9:21: gateway.max_header_bytes must be an integer in 1024..1048576, got 512'],
    ['header limit above 1 MiB', BASE + 'gateway:\n  max_header_bytes: 1048577\n',
      'fleet.yaml:9:21: gateway.max_header_bytes must be an integer in 1024..1048576, got 1048577'],
    ['negative in-flight cap', BASE + 'gateway:\n  max_in_flight_per_server: -1\n',
      'fleet.yaml:9:29: gateway.max_in_flight_per_server must be an integer in 0..1000000, got -1'],
    ['queue too long', BASE + 'gateway:\n  max_queued_requests: 1000001\n',
      'fleet.yaml:9:24: gateway.max_queued_requests must be an integer in 0..1000000, got 1000001'],
    ['queue timeout 0', BASE + 'gateway:\n  queue_timeout_ms: 0\n',
      'fleet.yaml:9:21: gateway.queue_timeout_ms must be an integer in 1..2147483647, got 0'],
    // inference_servers[].max_in_flight
    ['fractional server cap', BASE.replace('models: [m]', 'models: [m]\n    max_in_flight: 1.5'),
      'fleet.yaml:6:20: inference_servers[0].max_in_flight must be an integer in 0..1000000, got 1.5'],
    ['server cap as a string', BASE.replace('models: [m]', 'models: [m]\n    max_in_flight: "8"'),
      "fleet.yaml:6:20: inference_servers[0].max_in_flight must be an integer in 0..1000000, got '8' (a string)"]
  ]
  for (const [name, text, expected] of cases) {
    t.equal(problems(t, text), expected, name)
  }
})

t.test('problems in the extensions are reported together, and alongside the rest', async (t) => {
  const message = problems(t, `inference_servers:
  - name: a
    host: 127.0.0.1
    port: 8001
    models: [resnet]
    max_in_flight: -3
load_balancer:
  type: round_robin
  panic_threshold_percent: 101
  options: { choices: 3 }
  hash_header: x-user
models:
  resnet:
    max_retries: 20
    load_balancer: { type: p2c, options: { choices: 2, hash_balance_factor: 2 } }
  resnt: {}
retries:
  backoff_base_ms: 500
  backoff_max_ms: 100
gateway:
  queue_timeout_ms: -1
`)
  t.equal(message, [
    'fleet.yaml:6:20: inference_servers[0].max_in_flight must be an integer in 0..1000000, got -3',
    'fleet.yaml:9:28: load_balancer.panic_threshold_percent must be an integer in 0..100, got 101',
    "fleet.yaml:10:12: load_balancer.options: option 'choices' does not apply to balancing strategy 'round_robin' (it takes none)",
    "fleet.yaml:11:16: load_balancer.hash_header applies only to consistent_hash, not to 'round_robin' (remove it, or set type: consistent_hash)",
    'fleet.yaml:14:18: models.resnet.max_retries must be an integer in 0..10, got 20',
    "fleet.yaml:15:42: models.resnet.load_balancer.options: option 'hash_balance_factor' does not apply to balancing strategy 'p2c' (it takes: choices)",
    'fleet.yaml:16:3: models.resnt is not served by any inference server, so its settings would never apply (known models: resnet)',
    'fleet.yaml:19:19: retries.backoff_max_ms (100) must be at least backoff_base_ms (500)',
    'fleet.yaml:21:21: gateway.queue_timeout_ms must be an integer in 1..2147483647, got -1'
  ].join('\n'))
})

t.test('discovery.consul: servers may come from Consul alone; its keys are checked at load', async (t) => {
  const consulOnly = parse('load_balancer: { type: round_robin }\ndiscovery: { consul: {} }\nmodels: { resnet: { max_retries: 1 } }\n')
  t.strictSame(consulOnly.inference_servers, [], 'no inference_servers needed')
  t.strictSame(consulOnly.discovery.consul, { service: 'flotilla-worker', wait: '60s' }, 'defaults; the address comes from CONSUL_HTTP_ADDR at start')
  t.strictSame(Object.keys(consulOnly.models), ['resnet'], 'per-model settings for models only Consul will name are not refused')
  t.equal(consulWaitMs('90s'), 90_000)
  t.equal(consulWaitMs('500ms'), 500)
  t.equal(consulWaitMs('5m'), 300_000)
  const cases: Array<[string, string, string]> = [
    ['a path in the address', 'address: "http://c:8500/v1"', "fleet.yaml:2:33: discovery.consul.address 'http://c:8500/v1' is not a Consul address: write host:port, http://host:port or https://host:port (no path, query or credentials)"],
    ['another scheme', 'address: "unix:///run/consul.sock"', "fleet.yaml:2:33: discovery.consul.address 'unix:///run/consul.sock' uses unix: only http and https Consul agents are supported"],
    ['a wait Consul would cap', 'wait: 20m', "fleet.yaml:2:30: discovery.consul.wait '20m' is out of range: a Consul wait is 1s to 10m"],
    ['a wait in hours', 'wait: 1h', "fleet.yaml:2:30: discovery.consul.wait '1h' is not a Consul wait: write a whole number of ms, s or m ('60s', '5m')"],
    ['a service name with a dot', 'service: a.b', "fleet.yaml:2:33: discovery.consul.service 'a.b' is not allowed: a Consul service or datacenter name is letters, digits, - and _"]
  ]
  for (const [what, line, message] of cases) {
    t.match(problems(t, `load_balancer: { type: round_robin }\ndiscovery: { consul: { ${line} } }\n`), message, what)
  }
  t.match(problems(t, 'load_balancer: { type: round_robin }\ndiscovery: { consul: { token: abc } }\n'), "unknown key 'token' in discovery.consul", 'a token itself is not a key (token_file is)')
})

t.test('the example fleets in config/ load', async (t) => {
  for (const file of ['fleet.yaml', 'fleet-consul.yaml']) {
    const config = loadFleetFile(join(PACKAGE_ROOT, 'config', file), options)
    t.ok(config.inference_servers.length > 0 || config.discovery.consul !== undefined, file)
  }
})
