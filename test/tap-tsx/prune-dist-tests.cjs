'use strict'
/**
 * Removes test files from dist/test whose source is gone (a test renamed or deleted): `npm test` runs the build in
 * dist/, and tsc never deletes what it once emitted, so a stale test would go on running. npm test's pretest runs
 * this after tsc.
 */
const { existsSync, readdirSync, rmSync } = require('node:fs')
const { join, relative } = require('node:path')

const root = process.cwd()
const built = join(root, 'dist', 'test')

function walk (dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) {
      walk(path)
    } else if (entry.name.endsWith('.test.js')) {
      const source = join(root, relative(join(root, 'dist'), path)).replace(/\.js$/, '.ts')
      if (!existsSync(source)) {
        for (const suffix of ['', '.map']) rmSync(path + suffix, { force: true })
      }
    }
  }
}

if (existsSync(built)) walk(built)
