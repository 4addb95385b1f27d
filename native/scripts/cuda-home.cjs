'use strict'
// `node scripts/cuda-home.cjs <nvcc>` prints the CUDA toolkit's root (include/ and lib64/ under it). Follows a
// wrapper script such as /usr/local/bin/nvcc that execs the real .../bin/nvcc; CUDA_PATH wins when set.
const { realpathSync, existsSync, readFileSync } = require('node:fs')
const path = require('node:path')

function cudaHome (nvcc) {
  if (process.env.CUDA_PATH) return process.env.CUDA_PATH
  if (!nvcc) return ''
  let real = realpathSync(nvcc)
  const text = readFileSync(real, 'latin1')
  const wrapped = text.length < 4096 && text.match(/exec\s+(\S+\/bin\/nvcc)/)
  if (wrapped) real = realpathSync(wrapped[1])
  const home = path.dirname(path.dirname(real))
  return existsSync(path.join(home, 'include', 'cuda_runtime.h')) ? home : '/usr/local/cuda'
}

module.exports = { cudaHome }

if (require.main === module) process.stdout.write(cudaHome(process.argv[2] ?? ''))
