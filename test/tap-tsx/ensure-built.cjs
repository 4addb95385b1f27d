'use strict'
/**
 * Builds tap with this plugin before the tests when its build lacks it (a fresh `npm ci`). tap rebuilds itself when
 * its plugin list changes, but only for the run after the one that noticed: that first run would load TypeScript
 * through @tapjs/typescript's ts-node (slow, and resolving modules differently). `npm test`'s pretest runs this.
 */
const { spawnSync } = require('node:child_process')
const { readFileSync } = require('node:fs')
const { dirname, join } = require('node:path')

let built = ''
try {
  const root = dirname(require.resolve('@tapjs/test/package.json', { paths: [process.cwd()] }))
  built = readFileSync(join(root, 'test-built', 'dist', 'esm', 'index.js'), 'utf8')
} catch {}
if (!built.includes('flotilla-tap-tsx')) {
  const result = spawnSync('npx', ['tap', 'build'], { stdio: 'inherit' })
  process.exitCode = result.status ?? 1
}
