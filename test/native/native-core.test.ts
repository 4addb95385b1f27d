/**
 * The C++ test program (native/test/kernels_test.cc): builds it with native/test/build.sh and runs it. `npm install`
 * has built it already (native/scripts/build-kernel-test.cjs), so the build here is incremental: only what changed
 * since is compiled again. It checks the
 * SGEMM for every ISA this CPU has, the vectorised math, and every op through a Session against double-precision
 * references (and, on a CUDA build with a GPU, the same plans on the GPU against the CPU).
 *
 * CPU-only by default, so the test does not spend minutes in nvcc; FLOTILLA_NATIVE_CUDA=1 (or unset it in the
 * environment of a GPU machine and run native/test/build.sh by hand) builds the CUDA path too.
 */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../common/package-root.ts'

const nativeDir = join(PACKAGE_ROOT, 'native')

t.setTimeout(300_000)

t.test('native/test/build.sh builds the kernel test program and it passes', async t => {
  const env = { ...process.env, FLOTILLA_NATIVE_CUDA: process.env.FLOTILLA_NATIVE_CUDA ?? '0' }
  const started = Date.now()
  const build = spawnSync('bash', [join(nativeDir, 'test', 'build.sh')], { env, encoding: 'utf8', maxBuffer: 64 << 20 })
  const buildLine = build.stdout.split('\n').find(line => line.startsWith('kernels_test: built')) ?? ''
  t.equal(build.status, 0, `build.sh exits 0\n${build.status === 0 ? '' : build.stdout + build.stderr}`)
  t.comment(`${buildLine} (${((Date.now() - started) / 1000).toFixed(1)} s in all)`)
  if (build.status !== 0) return

  const ran = Date.now()
  const run = spawnSync(join(nativeDir, 'build', 'test', 'kernels_test'), [], { env, encoding: 'utf8', maxBuffer: 64 << 20 })
  const out = run.stdout ?? ''
  const failures = out.split('\n').filter(line => line.startsWith('FAIL'))
  t.equal(run.status, 0, `kernels_test exits 0${failures.length > 0 ? '\n' + failures.join('\n') : ''}${run.stderr}`)
  const summary = /^(\d+) passed, (\d+) failed$/m.exec(out)
  t.ok(summary, 'kernels_test ends with "N passed, N failed"')
  t.equal(summary?.[2], '0', 'no check failed')
  t.ok(Number(summary?.[1]) > 500, `it ran the checks (${summary?.[1] ?? 0} passed)`)
  t.match(out, /^cuda: /m, 'it says what it did with CUDA')
  t.comment(`${summary?.[0] ?? 'no summary'} in ${((Date.now() - ran) / 1000).toFixed(1)} s; ` +
    (out.split('\n').find(line => line.startsWith('cuda:')) ?? ''))
})
