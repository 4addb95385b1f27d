/**
 * `gateway/admin/admin-guard.ts` on its own: which headers refuse a call and with what message, the names a listener
 * answers to (its own host name, `gateway.admin_allowed_hosts`), the Content-Type rule, and the rate-limited log.
 * `admin-server.test.ts` checks the same rules through a real gateway.
 */
import { Writable } from 'node:stream'
import t from 'tap'
import { AdminGuard, contentTypeRefusal, REFUSAL_LOG_INTERVAL_MS, RefusalLog, shown } from '../../../gateway/admin/admin-guard.ts'
import { createLogger } from '../../../common/logger.ts'

t.test('Origin and Sec-Fetch-Site other than none are refused, whatever else the call carries', async (t) => {
  const guard = new AdminGuard()
  const ok = { host: '127.0.0.1:9000' }
  t.equal(guard.check(ok), undefined)
  t.equal(guard.check({ ...ok, 'sec-fetch-site': 'none' }), undefined, 'a URL typed into the address bar')
  t.equal(guard.check({ ...ok, 'sec-fetch-site': ' NONE ' }), undefined)
  for (const origin of ['http://evil.example', 'null', 'http://127.0.0.1:9000', '']) {
    const refusal = guard.check({ ...ok, origin })
    t.equal(refusal?.kind, 'origin', `Origin: '${origin}'`)
    t.equal(refusal?.error.code, 'GW_ERR_ADMIN_CROSS_SITE')
    t.equal(refusal?.error.statusCode, 403)
  }
  t.match(guard.check({ ...ok, origin: 'o'.repeat(5000) })?.error.message, /an Origin header \(o{100}\.\.\. \(5000 characters\)\)/)
  for (const site of ['cross-site', 'same-site', 'same-origin', 'anything']) {
    const refusal = guard.check({ ...ok, 'sec-fetch-site': site })
    t.equal(refusal?.kind, 'sec-fetch-site', site)
    t.match(refusal?.error.message, `this call carries Sec-Fetch-Site: ${site}, which browsers send`)
  }
  t.equal(guard.check({ host: 'evil.example', origin: 'http://evil.example' })?.kind, 'origin', 'Origin is named first')
})

t.test('Host: addresses and localhost on any port; names only when they are the listener\'s or listed', async (t) => {
  const plain = new AdminGuard({ host: '127.0.0.1' })
  for (const host of ['127.0.0.1:9000', '127.0.0.1', '10.0.0.5:19000', 'localhost:9000', 'LOCALHOST', '[::1]:9000', '[::1]', '[FD00::1]:80']) {
    t.equal(plain.check({ host }), undefined, host)
  }
  for (const host of ['evil.example:9000', 'gw.internal:9000', 'localhost.evil.example', '127.0.0.1.nip.io', 'localhost.:9000', '[evil]:9000',
    '[::1', '::1', 'a:b', ':9000', '', 'host name:9000']) {
    const refusal = plain.check({ host })
    t.equal(refusal?.kind, 'host', `'${host}'`)
    t.equal(refusal?.error.code, 'GW_ERR_ADMIN_HOST')
  }
  t.equal(plain.check({})?.error.message, 'the admin API does not answer to a call without a Host header, only to IP addresses, localhost ' +
    '(a web page that points its own name at this machine, DNS rebinding, sends a foreign Host); call it by address, or list the ' +
    'name in gateway.admin_allowed_hosts')

  const named = new AdminGuard({ host: 'Admin.Local', allowedHosts: ['gw.internal', 'Flotilla-Admin'] })
  for (const host of ['admin.local:9000', 'ADMIN.LOCAL', 'gw.internal:9000', 'gw.internal', 'flotilla-admin:19000', '127.0.0.1:9000']) {
    t.equal(named.check({ host }), undefined, host)
  }
  const refused = named.check({ host: 'evil.example:9000' })
  t.match(refused?.error.message, "does not answer to Host 'evil.example:9000', only to IP addresses, localhost and admin.local, gw.internal, flotilla-admin (")
  t.equal(named.check({ host: 'sub.gw.internal' })?.kind, 'host', 'a listed name does not cover its subdomains')
  t.equal(new AdminGuard({ host: '0.0.0.0' }).check({ host: 'evil.example' })?.kind, 'host', 'a wildcard address adds no name')
})

t.test('Content-Type: application/json (any case, with parameters) on a change, body or not', async (t) => {
  for (const type of ['application/json', 'Application/JSON', 'application/json; charset=utf-8', ' application/json ;charset=UTF-8']) {
    t.equal(contentTypeRefusal('POST', '/v1/endpoints/a/undrain', type), undefined, type)
  }
  for (const type of [undefined, '', 'text/plain', 'text/plain; charset=utf-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x',
    'application/jsonx', 'application/json-seq', 'application/problem+json', 'json']) {
    const refusal = contentTypeRefusal('DELETE', '/v1/endpoints/a', type)
    t.equal(refusal?.kind, 'content-type', String(type))
    t.equal(refusal?.error.statusCode, 415)
    t.equal(refusal?.error.code, 'GW_ERR_ADMIN_CONTENT_TYPE')
  }
  t.equal(contentTypeRefusal('POST', '/v1/endpoints/a/drain', 'text/plain')?.error.message,
    "POST /v1/endpoints/a/drain needs the header Content-Type: application/json, got 'text/plain'; send it on every POST, PUT and " +
    "DELETE, even one without a body (curl: -H 'content-type: application/json')")
  t.match(contentTypeRefusal('POST', '/v1/endpoints/a/drain', undefined)?.error.message, 'got none;')
})

t.test('the refusal log: the first of each kind at once, then one line a minute with the count in between', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const destination = new Writable({
    write (chunk: Buffer, _encoding, callback) {
      lines.push(JSON.parse(chunk.toString('utf8')) as Record<string, unknown>)
      callback()
    }
  })
  let now = 1000
  const log = new RefusalLog(createLogger({ level: 'warn', destination }), () => now)
  const guard = new AdminGuard()
  const origin = guard.check({ origin: 'http://evil.example', host: 'localhost' })!
  const host = guard.check({ host: 'evil.example' })!
  log.record(origin, { ip: '127.0.0.1', method: 'POST', url: '/v1/endpoints' })
  log.record(origin, { ip: '127.0.0.1' })
  log.record(host, { ip: '127.0.0.1' })
  now += REFUSAL_LOG_INTERVAL_MS - 1
  log.record(origin, { ip: '127.0.0.1' })
  t.equal(lines.length, 2, 'one line per kind within the interval')
  t.match(lines[0], { level: 40, refused: 'origin', ip: '127.0.0.1', method: 'POST', url: '/v1/endpoints', msg: /^admin call refused: the admin API does not answer web pages/ })
  t.notOk('suppressed' in lines[0]!, 'the first line of a kind has nothing to count')
  t.match(lines[1], { refused: 'host' })
  now += 1
  log.record(origin, { ip: '127.0.0.2' })
  t.equal(lines.length, 3)
  t.match(lines[2], { refused: 'origin', ip: '127.0.0.2', suppressed: 2 }, 'the two refused since the last line are counted')
})

t.test('shown: long values are cut, with their length', async (t) => {
  t.equal(shown('abc'), 'abc')
  t.equal(shown('x'.repeat(100)), 'x'.repeat(100))
  t.equal(shown('x'.repeat(101)), `${'x'.repeat(100)}... (101 characters)`)
  t.equal(shown('x'.repeat(50), 10), `${'x'.repeat(10)}... (50 characters)`)
})
