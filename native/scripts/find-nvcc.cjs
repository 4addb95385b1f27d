'use strict'
// Prints the path of a working nvcc, or nothing (then binding.gyp builds CPU-only). FLOTILLA_NATIVE_CUDA=0 forces
// nothing; NVCC and CUDA_PATH point at a toolkit the PATH does not have.
const { execFileSync } = require('node:child_process')
const { existsSync } = require('node:fs')

function findNvcc () {
  if (process.env.FLOTILLA_NATIVE_CUDA === '0') return ''
  const candidates = []
  if (process.env.NVCC) candidates.push(process.env.NVCC)
  if (process.env.CUDA_PATH) candidates.push(process.env.CUDA_PATH + '/bin/nvcc')
  try {
    candidates.push(execFileSync('sh', ['-c', 'command -v nvcc'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim())
  } catch {}
  candidates.push('/usr/local/cuda/bin/nvcc')
  for (const candidate of candidates) {
    if (!candidate || !existsSync(candidate)) continue
    try {
      execFileSync(candidate, ['--version'], { stdio: 'ignore' })
      return candidate
    } catch {}
  }
  return ''
}

module.exports = { findNvcc }

if (require.main === module) process.stdout.write(findNvcc())
