import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { FLOTILLA_VERSION, PACKAGE_ROOT } from '../../common/package-root.ts'

t.test('the package root holds our package.json, config/ and native/; the version is its version', async t => {
  const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { name: string, version: string }
  t.equal(pkg.name, 'flotilla')
  t.equal(FLOTILLA_VERSION, pkg.version)
  t.ok(existsSync(join(PACKAGE_ROOT, 'config', 'fleet.yaml')), 'config/fleet.yaml')
  t.ok(existsSync(join(PACKAGE_ROOT, 'native', 'binding.gyp')), 'native/binding.gyp')
})
