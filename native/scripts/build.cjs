'use strict'
// Builds the native module (native/build/Release/flotilla_native.node) with node-gyp: with CUDA when nvcc is found
// and native/src/cuda/ has sources, CPU-only otherwise, and CPU-only again when the CUDA build fails: a build never
// fails for lack of CUDA. FLOTILLA_NATIVE_CUDA=0 forces CPU-only. Incremental when build/ was configured for the same
// binding.gyp and mode; a full rebuild otherwise. `npm install` runs it (prepare), `npm run build:native` too.
const { spawnSync } = require('node:child_process')
const crypto = require('node:crypto')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { findNvcc } = require('./find-nvcc.cjs')
const { cudaHome } = require('./cuda-home.cjs')
const { listSources } = require('./list-sources.cjs')

const nativeDir = path.resolve(__dirname, '..')
const buildDir = path.join(nativeDir, 'build')
const stampFile = path.join(buildDir, 'flotilla-build.json')
const addon = path.join(buildDir, 'Release', 'flotilla_native.node')

function log (line) {
  process.stdout.write(`flotilla native: ${line}\n`)
}

function nodeGypPath () {
  try {
    return require.resolve('node-gyp/bin/node-gyp.js', { paths: [nativeDir] })
  } catch {
    return undefined
  }
}

function sourcesIn (dir, ext) {
  return listSources(path.join(nativeDir, dir), ext).map(f => path.relative(nativeDir, f))
}

function readStamp () {
  try {
    return JSON.parse(fs.readFileSync(stampFile, 'utf8'))
  } catch {
    return undefined
  }
}

/** What a configured build/ depends on: a change in `config` means a clean rebuild, in `sources` a reconfigure. */
function fingerprint (mode, nvcc) {
  const gyp = fs.readFileSync(path.join(nativeDir, 'binding.gyp'))
  const config = crypto.createHash('sha256')
    .update(gyp).update(mode).update(nvcc).update(process.version).update(process.execPath).digest('hex')
  const sources = [...sourcesIn('src', '.cc'), ...sourcesIn('src/cuda', '.cu'), ...sourcesIn('binding', '.cc')].join('\n')
  return { config, sources }
}

function nodeGyp (nodeGypJs, args, env) {
  // Without --nodedir node-gyp downloads the headers (no network here); the running node's prefix has them.
  const nodedir = path.resolve(process.execPath, '..', '..')
  const result = spawnSync(process.execPath, [nodeGypJs, ...args, `--nodedir=${nodedir}`, '--loglevel=warn'], {
    cwd: nativeDir, env, stdio: 'inherit'
  })
  return result.status === 0
}

/** Loads the built module in a child process: a link that left a symbol undefined only shows at load time. */
function loads () {
  const result = spawnSync(process.execPath, ['-e', `require(${JSON.stringify(addon)})`], { encoding: 'utf8' })
  if (result.status === 0) return true
  log(`the built module does not load: ${(result.stderr || '').trim().split('\n').slice(-1)[0]}`)
  return false
}

function build (nodeGypJs, mode, nvcc) {
  const env = { ...process.env, FLOTILLA_NATIVE_CUDA: mode === 'cuda' ? '1' : '0' }
  if (mode === 'cuda') env.NVCC = nvcc
  const want = fingerprint(mode, nvcc)
  const have = readStamp()
  const jobs = String(typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length)
  const configured = fs.existsSync(path.join(buildDir, 'Makefile')) && have !== undefined
  let ok
  if (configured && have.config === want.config) {
    ok = (have.sources === want.sources || nodeGyp(nodeGypJs, ['configure'], env)) &&
      nodeGyp(nodeGypJs, ['build', '--jobs', jobs], env)
  } else {
    // A clean build, but not `node-gyp rebuild`: its clean removes all of build/, where other things live too (the
    // test program's build/test). Only node-gyp's own outputs go.
    if (fs.existsSync(buildDir)) {
      for (const entry of fs.readdirSync(buildDir)) {
        if (/^(Release|Debug|Makefile|binding\.Makefile|config\.gypi|.*\.target\.mk|flotilla-build\.json)$/.test(entry)) {
          fs.rmSync(path.join(buildDir, entry), { recursive: true, force: true })
        }
      }
    }
    ok = nodeGyp(nodeGypJs, ['configure'], env) && nodeGyp(nodeGypJs, ['build', '--jobs', jobs], env)
  }
  ok = ok && loads()
  if (ok) {
    fs.writeFileSync(stampFile, JSON.stringify(want) + '\n')
  } else {
    fs.rmSync(stampFile, { force: true })
  }
  return ok
}

function main () {
  const started = Date.now()
  const seconds = () => `${((Date.now() - started) / 1000).toFixed(1)} s`
  const nodeGypJs = nodeGypPath()
  if (nodeGypJs === undefined) {
    log('node-gyp is not installed (a dev dependency): run `npm install` first')
    return 1
  }
  let why
  let nvcc = ''
  if (process.env.FLOTILLA_NATIVE_CUDA === '0') {
    why = 'FLOTILLA_NATIVE_CUDA=0'
  } else {
    nvcc = findNvcc()
    if (!nvcc) why = 'nvcc not found (put it on PATH, or set NVCC or CUDA_PATH)'
    else if (sourcesIn('src/cuda', '.cu').length === 0) why = 'no CUDA sources in native/src/cuda'
  }
  if (why === undefined) {
    if (build(nodeGypJs, 'cuda', nvcc)) {
      log(`built with CUDA (nvcc at ${nvcc}, toolkit ${cudaHome(nvcc)}) in ${seconds()}: ${addon}`)
      return 0
    }
    log(`the CUDA build with nvcc at ${nvcc} failed (the errors are above); building CPU-only`)
    why = `the CUDA build with ${nvcc} failed`
  }
  if (build(nodeGypJs, 'cpu', '')) {
    log(`built CPU only (${why}) in ${seconds()}: ${addon}`)
    return 0
  }
  log(`the build failed (the errors are above); the native backend is unavailable until \`npm run build:native\` succeeds`)
  return 1
}

process.exitCode = main()
