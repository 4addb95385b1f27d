import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

/** The package version, read once from package.json (found from the source tree and from dist/ alike). */
function readVersion (): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 4; i++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string, version?: string }
      if (pkg.name === 'flotilla' && typeof pkg.version === 'string') return pkg.version
    } catch {}
    dir = dirname(dir)
  }
  return '0.0.0'
}

export const FLOTILLA_VERSION = readVersion()
