/**
 * The fleet file's runtime sections: `canary.<model>` (defaults, the split rules, the checks against the servers) and
 * the `gateway` keys the admin API, shutdown, drains, slow start and the file watcher read. Each refusal names the
 * file, line and column and says what to fix.
 */
import t, { type Test } from 'tap'
import { balancerNames, hasBalancer, validateBalancerOptions } from '../../../gateway/balancer/registry.ts'
import {
  DEFAULT_AUTO_ROLLBACK_SETTINGS, DEFAULT_GATEWAY_SETTINGS, parseFleetConfig, type FleetConfig
} from '../../../gateway/fleet/fleet-config.ts'

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

// m is served by a (versions 1 and 2) and b (every version); n by a and c (version 1). 17 lines: a section added after
// them starts on line 18, its first entry on line 19.
const SERVERS = `inference_servers:
  - name: a
    host: 127.0.0.1
    port: 8001
    models: [m, n]
    versions: [1, 2]
  - name: b
    host: 127.0.0.1
    port: 8002
    models: [m]
  - name: c
    host: 127.0.0.1
    port: 8003
    models: [n]
    versions: [1]
load_balancer:
  type: round_robin
`

const AUTO_ROLLBACK_DEFAULTS = {
  enabled: true, window_ms: 60000, min_requests: 100, error_rate_factor: 2, min_error_rate: 0.01, p99_factor: 2, min_p99_increase_ms: 10
}
const CANARY_KEYS = 'baseline_version, canary_version, canary_servers, percent, force_header, sticky_header, auto_rollback'

t.test('no canary section: an empty mapping', async (t) => {
  const config = parse(SERVERS)
  t.strictSame(config.canary, {})
  t.ok(Object.isFrozen(config.canary))
})

t.test('a valid canary section loads with its defaults filled in', async (t) => {
  t.strictSame(DEFAULT_AUTO_ROLLBACK_SETTINGS, AUTO_ROLLBACK_DEFAULTS, 'the documented defaults')
  const config = parse(`${SERVERS}canary:
  m:
    baseline_version: 1
    canary_version: 2
    percent: 12.5
    force_header: { name: X-Canary, value: 'yes' }
    sticky_header: X-User-Id
    auto_rollback:
      min_requests: 20
      window_ms: 10000
  n:
    canary_servers: [c]
    percent: 0
`)
  t.strictSame(config.canary, {
    m: {
      baseline_version: 1,
      canary_version: 2,
      percent: 12.5,
      force_header: { name: 'x-canary', value: 'yes' },
      sticky_header: 'x-user-id',
      auto_rollback: { ...AUTO_ROLLBACK_DEFAULTS, min_requests: 20, window_ms: 10000 }
    },
    n: { canary_servers: ['c'], percent: 0, auto_rollback: AUTO_ROLLBACK_DEFAULTS }
  }, 'header names lower-cased, auto_rollback completed, absent keys left absent')
  t.ok(isDeepFrozen(config.canary), 'frozen all the way down')

  const full = parse(`${SERVERS}canary:
  m:
    canary_servers: [b]
    percent: 100
    auto_rollback: { enabled: false, error_rate_factor: 1, min_error_rate: 1, p99_factor: 1000, min_p99_increase_ms: 0 }
`)
  t.strictSame(full.canary.m?.auto_rollback, {
    enabled: false, window_ms: 60000, min_requests: 100, error_rate_factor: 1, min_error_rate: 1, p99_factor: 1000, min_p99_increase_ms: 0
  }, 'the range ends are allowed')
  t.equal(full.canary.m?.percent, 100)
  t.equal(parse(`${SERVERS}canary:\n  m: { baseline_version: 2, canary_version: 7, percent: 1 }\n`).canary.m?.canary_version, 7,
    'b serves every version, so version 7 has a server')
})

t.test('each invalid canary is refused with file:line:col and what to fix', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['a model no server serves', 'canary:\n  nope: { canary_servers: [a], percent: 5 }\n',
      "fleet.yaml:19:9: canary.nope: model 'nope' is not served by any inference server"],
    ['a canary server that does not serve the model', 'canary:\n  m: { canary_servers: [c], percent: 5 }\n',
      "fleet.yaml:19:6: canary.m: canary_servers 'c' do not serve 'm' (servers serving it: a, b)"],
    ['a canary server that does not exist', 'canary:\n  m: { canary_servers: [a, zz], percent: 5 }\n',
      "fleet.yaml:19:6: canary.m: canary_servers 'zz' do not serve 'm' (servers serving it: a, b)"],
    ['every server of the model', 'canary:\n  m: { canary_servers: [a, b], percent: 5 }\n',
      "fleet.yaml:19:6: canary.m: canary_servers names every server of 'm', which leaves none for the baseline"],
    ['a version no server serves', 'canary:\n  n: { baseline_version: 1, canary_version: 3, percent: 5 }\n',
      "fleet.yaml:19:6: canary.n: no server of 'n' serves version 3 (set versions on a server, or omit them to serve every version)"],
    ['both splits', 'canary:\n  m:\n    baseline_version: 1\n    canary_version: 2\n    canary_servers: [b]\n    percent: 5\n',
      'fleet.yaml:22:21: canary.m splits by version or by servers, not both: remove canary_servers or the versions'],
    ['neither split', 'canary:\n  m:\n    percent: 5\n',
      'fleet.yaml:20:14: canary.m needs either baseline_version and canary_version, or canary_servers'],
    ['only the canary version', 'canary:\n  m:\n    canary_version: 2\n    percent: 5\n',
      'fleet.yaml:20:21: canary.m needs both baseline_version and canary_version to split by version'],
    ['the same version twice', 'canary:\n  m:\n    baseline_version: 1\n    canary_version: 1\n    percent: 5\n',
      'fleet.yaml:21:21: canary.m.canary_version must differ from baseline_version (both are 1)'],
    ['percent 101', 'canary:\n  m:\n    canary_servers: [b]\n    percent: 101\n',
      'fleet.yaml:21:14: canary.m.percent must be a number in 0..100, got 101'],
    ['percent -1', 'canary:\n  m:\n    canary_servers: [b]\n    percent: -1\n',
      'fleet.yaml:21:14: canary.m.percent must be a number in 0..100, got -1'],
    ['no percent', 'canary:\n  m:\n    canary_servers: [b]\n',
      "fleet.yaml:20:5: canary.m is missing required key 'percent'"],
    ['an unknown key', 'canary:\n  m:\n    canary_servers: [b]\n    percent: 5\n    share: 5\n',
      `fleet.yaml:22:5: unknown key 'share' in canary.m (allowed: ${CANARY_KEYS})`],
    ['a model name with a slash', 'canary:\n  a/b: { canary_servers: [b], percent: 5 }\n',
      "fleet.yaml:19:3: canary key 'a/b' is not allowed: model names cannot contain slashes or whitespace"],
    ['a header name with a space', 'canary:\n  m: { canary_servers: [b], percent: 5, sticky_header: x user }\n',
      "fleet.yaml:19:56: canary.m.sticky_header 'x user' is not allowed: an HTTP header name is letters, digits and !#$%&'*+-.^_`|~ only (no spaces or colons)"],
    ['a force header without a value', 'canary:\n  m: { canary_servers: [b], percent: 5, force_header: { name: x-c } }\n',
      "fleet.yaml:19:55: canary.m.force_header is missing required key 'value'"],
    ['a window under a second', 'canary:\n  m: { canary_servers: [b], percent: 5, auto_rollback: { window_ms: 999 } }\n',
      'fleet.yaml:19:69: canary.m.auto_rollback.window_ms must be an integer in 1000..2147483647, got 999'],
    ['min_requests 0', 'canary:\n  m: { canary_servers: [b], percent: 5, auto_rollback: { min_requests: 0 } }\n',
      'fleet.yaml:19:72: canary.m.auto_rollback.min_requests must be an integer in 1..1000000, got 0'],
    ['an error rate over 1', 'canary:\n  m: { canary_servers: [b], percent: 5, auto_rollback: { min_error_rate: 1.5 } }\n',
      'fleet.yaml:19:74: canary.m.auto_rollback.min_error_rate must be a number in 0..1, got 1.5'],
    ['a factor under 1', 'canary:\n  m: { canary_servers: [b], percent: 5, auto_rollback: { p99_factor: 0.5 } }\n',
      'fleet.yaml:19:70: canary.m.auto_rollback.p99_factor must be a number in 1..1000, got 0.5'],
    ['not a mapping', 'canary: [m]\n', 'fleet.yaml:18:9: canary must be a mapping of model names to canary settings, got a list']
  ]
  for (const [what, section, expected] of cases) {
    t.equal(problems(t, SERVERS + section), expected, what)
  }
})

t.test('several canaries that do not fit the servers are all reported, in file order', async (t) => {
  t.equal(problems(t, `${SERVERS}canary:
  m: { canary_servers: [c], percent: 5 }
  n: { baseline_version: 1, canary_version: 3, percent: 5 }
  x: { canary_servers: [a], percent: 5 }
`), [
    "fleet.yaml:19:6: canary.m: canary_servers 'c' do not serve 'm' (servers serving it: a, b)",
    "fleet.yaml:20:6: canary.n: no server of 'n' serves version 3 (set versions on a server, or omit them to serve every version)",
    "fleet.yaml:21:6: canary.x: model 'x' is not served by any inference server"
  ].join('\n'))
})

t.test('a canary that does not fit the servers is reported alongside problems elsewhere', async (t) => {
  const message = problems(t, SERVERS.replace('port: 8001', 'port: 70000') + `canary:
  nope: { canary_servers: [a], percent: 5 }
  m: { baseline_version: 1, canary_version: 1, percent: 5 }
`)
  t.match(message, /fleet\.yaml:4:11: inference_servers\[0\]\.port must be an integer in 1\.\.65535, got 70000/)
  t.match(message, /fleet\.yaml:20:45: canary\.m\.canary_version must differ from baseline_version/)
  t.match(message, /fleet\.yaml:19:9: canary\.nope: model 'nope' is not served by any inference server/)
})

t.test('gateway runtime keys: defaults, explicit values, and the range ends', async (t) => {
  const defaults = parse(SERVERS).gateway
  t.match(defaults, { admin_host: '127.0.0.1', admin_port: 9000, shutdown_timeout_ms: 30000, drain_timeout_ms: 30000, slow_start_ms: 0, watch: true })
  t.notOk('admin_token_file' in defaults, 'no token file unless set')
  t.strictSame(defaults, DEFAULT_GATEWAY_SETTINGS)

  const set = parse(`${SERVERS}gateway:
  admin_host: 0.0.0.0
  admin_port: 9100
  admin_token_file: /run/secrets/flotilla-admin
  shutdown_timeout_ms: 0
  drain_timeout_ms: 2147483647
  slow_start_ms: 15000
  watch: false
`).gateway
  t.strictSame(set, {
    ...DEFAULT_GATEWAY_SETTINGS,
    admin_host: '0.0.0.0',
    admin_port: 9100,
    admin_token_file: '/run/secrets/flotilla-admin',
    shutdown_timeout_ms: 0,
    drain_timeout_ms: 2147483647,
    slow_start_ms: 15000,
    watch: false
  })
  t.equal(parse(`${SERVERS}gateway: { admin_port: -1 }\n`).gateway.admin_port, -1, '-1 turns the admin listener off')
  t.equal(parse(`${SERVERS}gateway: { admin_port: 0 }\n`).gateway.admin_port, 0, '0: an ephemeral port')
  t.equal(parse(`${SERVERS}gateway: { admin_host: '::1' }\n`).gateway.admin_host, '::1')
  t.notOk('admin_allowed_hosts' in defaults, 'no further admin host names unless listed')
  t.strictSame(parse(`${SERVERS}gateway: { admin_allowed_hosts: [Gateway.Internal, flotilla-admin, gw_1.corp.example] }\n`).gateway.admin_allowed_hosts,
    ['gateway.internal', 'flotilla-admin', 'gw_1.corp.example'], 'names as listed, in lower case (Host is matched without case)')
})

t.test('gateway runtime keys: each invalid value refused with file:line:col', async (t) => {
  const cases: Array<[string, string]> = [
    ['admin_port: 70000', 'fleet.yaml:19:15: gateway.admin_port must be an integer in -1..65535, got 70000'],
    ['admin_port: -2', 'fleet.yaml:19:15: gateway.admin_port must be an integer in -1..65535, got -2'],
    ["admin_port: '9000'", "fleet.yaml:19:15: gateway.admin_port must be an integer in -1..65535, got '9000' (a string)"],
    ['admin_host: http://0.0.0.0', "fleet.yaml:19:15: gateway.admin_host 'http://0.0.0.0' must be a host name or IP address alone: no scheme, path, spaces or brackets (write IPv6 addresses bare)"],
    ["admin_host: '[::1]'", "fleet.yaml:19:15: gateway.admin_host '[::1]' must be a host name or IP address alone: no scheme, path, spaces or brackets (write IPv6 addresses bare)"],
    ['admin_token_file: 5', 'fleet.yaml:19:21: gateway.admin_token_file must be a non-empty string, got 5 (put it in quotes to make it a string)'],
    ["admin_token_file: ''", 'fleet.yaml:19:21: gateway.admin_token_file must not be empty'],
    ['shutdown_timeout_ms: -1', 'fleet.yaml:19:24: gateway.shutdown_timeout_ms must be an integer in 0..2147483647, got -1'],
    ['drain_timeout_ms: 2147483648', 'fleet.yaml:19:21: gateway.drain_timeout_ms must be an integer in 0..2147483647, got 2147483648'],
    ['slow_start_ms: 1.5', 'fleet.yaml:19:18: gateway.slow_start_ms must be an integer in 0..2147483647, got 1.5'],
    ['watch: yes', "fleet.yaml:19:10: gateway.watch must be true or false, got 'yes' (a string)"],
    ['admin_token: hunter2', "fleet.yaml:19:3: unknown key 'admin_token' in gateway (allowed: host, http_port, grpc_port, metrics_port, max_body_bytes, " +
      'request_timeout_ms, max_header_bytes, max_header_count, header_timeout_ms, body_timeout_ms, idle_timeout_ms, ready_when, max_in_flight_per_server, max_queued_requests, queue_timeout_ms, admin_host, admin_port, ' +
      'admin_token_file, admin_allowed_hosts, shutdown_timeout_ms, drain_timeout_ms, slow_start_ms, watch)'],
    ['admin_allowed_hosts: []', 'fleet.yaml:19:24: gateway.admin_allowed_hosts must not be empty (omit it to allow addresses, localhost and admin_host only)'],
    ['admin_allowed_hosts: gw.internal', "fleet.yaml:19:24: gateway.admin_allowed_hosts must be a list, got 'gw.internal' (a string)"],
    ...['gw.internal:9000', 'http://gw.internal', 'gw.internal/admin', '*.internal', '.internal', '[::1]'].map((name): [string, string] => [
      `admin_allowed_hosts: ['${name}']`,
      `fleet.yaml:19:25: gateway.admin_allowed_hosts[0] '${name}' is not allowed: give a host name as it appears in the admin URL ` +
        '(gateway.internal), without a scheme, port or path; IP addresses and localhost need no entry'
    ]),
    ['admin_allowed_hosts: [a, a]', "fleet.yaml:19:28: duplicate host name 'a' at gateway.admin_allowed_hosts[1] (first at 19:25)"]
  ]
  for (const [line, expected] of cases) {
    t.equal(problems(t, `${SERVERS}gateway:\n  ${line}\n`), expected, line)
  }
})
