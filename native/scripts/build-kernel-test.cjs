'use strict'
// Builds the C++ kernel test program (native/test/build.sh: native/build/test/kernels_test) at install time, with
// the addon, so that `npm test` (test/native/native-core.test.ts) finds it up to date and only runs it: compiling
// the engine a second time is most of a minute on a 2-core machine. CPU-only unless FLOTILLA_NATIVE_CUDA says
// otherwise, as the test builds it. FLOTILLA_SKIP_NATIVE_TESTS=1 skips it (the Dockerfiles: images run no tests).
// A failure here is reported and left to the test, which builds again and says what failed: an install never fails
// for the test program's sake.
const { spawnSync } = require('node:child_process')
const path = require('node:path')

if (process.env.FLOTILLA_SKIP_NATIVE_TESTS === '1') process.exit(0)
const script = path.resolve(__dirname, '..', 'test', 'build.sh')
const env = { ...process.env, FLOTILLA_NATIVE_CUDA: process.env.FLOTILLA_NATIVE_CUDA ?? '0' }
const built = spawnSync('bash', [script], { env, stdio: 'inherit' })
if (built.status !== 0) process.stdout.write('flotilla native: the kernel test program did not build; npm test will say why\n')
