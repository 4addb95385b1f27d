/**
 * The gRPC plumbing both tiers share, where it reaches past grpc-js's public API (flow control) and what is not
 * covered through the fronts' own tests: version strings, health watching.
 */
import { connect, type ClientHttp2Session, type Settings } from 'node:http2'
import * as grpc from '@grpc/grpc-js'
import t from 'tap'
import { GRPC_MAX_FRAME_BYTES, GRPC_STREAM_WINDOW_BYTES, modelVersionOf } from '../../common/grpc-server.ts'
import { silentLogger } from '../../common/logger.ts'
import { createHealthClient } from '../../common/protocol/grpc/grpc-service.ts'
import { type HealthCheckResponse } from '../../common/protocol/grpc/messages.ts'
import { startWorker } from '../../worker/main.ts'
import { identityConfig } from '../helpers/model-repo.ts'

t.test("every connection gets the wide HTTP/2 windows and frames, not Node's 64 KiB / 16 KiB", async (t) => {
  const dir = t.testdir({ echo: { 'config.pbtxt': identityConfig('echo', 'TYPE_FP32', [4]), 1: {} } })
  const w = await startWorker({ modelRepository: dir, httpPort: 0, grpcPort: 0, metricsPort: -1, logger: silentLogger(), shutdownQuietMs: 0 })
  t.teardown(() => w.close())
  for (let i = 0; i < 2; i++) {
    const session: ClientHttp2Session = connect(`http://127.0.0.1:${w.grpcPort}`)
    // The server's first SETTINGS frame is Node's; ours follows as soon as the session exists.
    const settings = await new Promise<Settings>((resolve, reject) => {
      const timer = setTimeout(() => resolve(session.remoteSettings), 2000)
      session.on('remoteSettings', (received: Settings) => {
        if (received.initialWindowSize !== GRPC_STREAM_WINDOW_BYTES) return
        clearTimeout(timer)
        resolve(received)
      })
      session.once('error', reject)
    })
    session.close()
    t.equal(settings.initialWindowSize, GRPC_STREAM_WINDOW_BYTES, `connection ${i + 1}: stream window`)
    t.equal(settings.maxFrameSize, GRPC_MAX_FRAME_BYTES, `connection ${i + 1}: frame size`)
  }
})

t.test("a gRPC model_version: '' is the latest, digits are a version, anything else Triton's invalid argument", async (t) => {
  t.equal(modelVersionOf(undefined), undefined)
  t.equal(modelVersionOf(''), undefined)
  t.equal(modelVersionOf('12'), '12')
  for (const bad of ['v1', '-1', '1.5', ' 1']) {
    t.throws(() => modelVersionOf(bad), {
      code: 'PROTO_ERR_INVALID_REQUEST',
      message: `failed to get model version from specified version string '${bad}' (details: not a decimal integer), ` +
        'version should be an integral value > 0'
    })
  }
})

t.test('Health/Watch sends the status, then each change: NOT_SERVING once the worker drains', async (t) => {
  const dir = t.testdir({ echo: { 'config.pbtxt': identityConfig('echo', 'TYPE_FP32', [4]), 1: {} } })
  const w = await startWorker({ modelRepository: dir, httpPort: 0, grpcPort: 0, metricsPort: -1, logger: silentLogger(), shutdownQuietMs: 1500 })
  const health = createHealthClient(`127.0.0.1:${w.grpcPort}`)
  t.teardown(() => { health.close() })
  const seen: string[] = []
  const watch = health.Watch({ service: '' })
  watch.on('error', () => {})
  const changed = new Promise<void>((resolve) => {
    watch.on('data', (m: HealthCheckResponse) => {
      seen.push(String(m.status))
      if (seen.length === 2) resolve()
    })
  })
  while (seen.length === 0) await new Promise((resolve) => setTimeout(resolve, 10))
  const closing = w.close()
  await changed
  watch.cancel()
  await closing
  t.strictSame(seen, ['SERVING', 'NOT_SERVING'])
  const unknown = await new Promise<grpc.status>((resolve) => {
    health.Check({ service: 'nope' }, (err) => { resolve(err?.code ?? grpc.status.OK) })
  })
  t.equal(unknown, grpc.status.UNAVAILABLE, 'the worker is gone: the check cannot connect')
})
