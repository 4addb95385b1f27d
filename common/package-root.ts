import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

interface PackageJson { name?: string, version?: string }

/**
 * The package's root directory and its package.json, found once by walking up from this file to the first
 * package.json named `flotilla`: from the source tree (common/..) and from dist/ (dist/common/../..) alike, since
 * dist mirrors the tree. Everything that needs a path in the package (config/, the native addon) starts here.
 */
function findRoot (): { root: string, pkg: PackageJson } {
  const here = dirname(fileURLToPath(import.meta.url))
  for (let dir = here; ; dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as PackageJson
      if (pkg.name === 'flotilla') return { root: dir, pkg }
    } catch {}
    // No package.json above (a copied dist/): the tree's own layout says where the root is.
    if (dirname(dir) === dir) return { root: dirname(here), pkg: {} }
  }
}

const found = findRoot()

/** The package's root directory. */
export const PACKAGE_ROOT = found.root

/** The package version from package.json ('0.0.0' when it cannot be read). */
export const FLOTILLA_VERSION = typeof found.pkg.version === 'string' ? found.pkg.version : '0.0.0'
