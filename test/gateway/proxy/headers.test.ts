import t from 'tap'
import { clientResponseHeaders, upstreamRequestHeaders } from '../../../gateway/proxy/headers.ts'

t.test('request headers: hop-by-hop stripped, x-request-id set', async (t) => {
  const out = upstreamRequestHeaders({
    host: 'gateway:8000',
    connection: 'keep-alive, X-Private',
    'keep-alive': 'timeout=5',
    'transfer-encoding': 'chunked',
    te: 'trailers',
    trailer: 'x-checksum',
    upgrade: 'h2c',
    'proxy-authorization': 'secret',
    'proxy-connection': 'keep-alive',
    'x-private': 'named in Connection',
    'content-length': '12',
    expect: '100-continue',
    'content-type': 'application/octet-stream',
    'inference-header-content-length': '8',
    traceparent: '00-abc-def-01',
    tracestate: 'vendor=1',
    'x-request-id': 'from-client',
    'set-cookie': ['a=1', 'b=2']
  }, 'req-1')
  t.strictSame(out, {
    'content-type': 'application/octet-stream',
    'inference-header-content-length': '8',
    traceparent: '00-abc-def-01',
    tracestate: 'vendor=1',
    'x-request-id': 'req-1',
    'set-cookie': ['a=1', 'b=2']
  })
})

t.test('a client cannot use Connection to strip what the gateway adds', async (t) => {
  const out = upstreamRequestHeaders({ connection: 'x-request-id' }, 'req-2')
  t.equal(out['x-request-id'], 'req-2')
})

t.test('response headers: hop-by-hop and content-length stripped, endpoint named', async (t) => {
  const out = clientResponseHeaders({
    connection: 'x-hop',
    'x-hop': '1',
    'keep-alive': 'timeout=5',
    'transfer-encoding': 'chunked',
    'content-length': '10',
    'proxy-authenticate': 'Basic',
    'content-type': 'application/json',
    'inference-header-content-length': '42',
    'x-missing': undefined
  }, 'worker-1')
  t.strictSame(out, {
    'content-type': 'application/json',
    'inference-header-content-length': '42',
    'x-flotilla-endpoint': 'worker-1'
  })
})
