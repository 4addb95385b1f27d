'use strict'
// Prints the files of a directory with an extension, one per line, relative to the working directory (binding.gyp
// runs it from native/), sorted: `node scripts/list-sources.cjs src .cc --exclude cuda_stub.cc`, or only the named
// ones that exist (`--only cuda_stub.cc`). binding.gyp and native/test/build.sh use it so every native/src/*.cc (and
// native/src/cuda/*.cu) is built without being listed.
const fs = require('node:fs')
const path = require('node:path')

function listSources (dir, ext, { exclude = [], only } = {}) {
  let names
  try {
    names = fs.readdirSync(dir)
  } catch {
    return []
  }
  return names
    .filter(name => name.endsWith(ext) && !exclude.includes(name) && (only === undefined || only.includes(name)))
    .filter(name => fs.statSync(path.join(dir, name)).isFile())
    .sort()
    .map(name => path.posix.join(dir.split(path.sep).join('/'), name))
}

module.exports = { listSources }

if (require.main === module) {
  const [dir, ext, ...rest] = process.argv.slice(2)
  if (dir === undefined || ext === undefined) {
    process.stderr.write('usage: list-sources.cjs <dir> <ext> [--exclude name... | --only name...]\n')
    process.exit(2)
  }
  const names = rest.slice(1)
  const files = listSources(dir, ext, rest[0] === '--only' ? { only: names } : { exclude: rest[0] === '--exclude' ? names : [] })
  if (files.length > 0) process.stdout.write(files.join('\n') + '\n')
}
