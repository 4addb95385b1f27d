/** The fleet file shown in the README is what users copy: it must load as shown. */
import { existsSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../common/package-root.ts'
import { balancerNames, hasBalancer, validateBalancerOptions } from '../../gateway/balancer/registry.ts'
import { parseFleetConfig } from '../../gateway/fleet/fleet-config.ts'

const README = join(PACKAGE_ROOT, 'README.md')

t.test('the README fleet file example loads', async (t) => {
  const text = readFileSync(README, 'utf8')
  const section = text.slice(text.indexOf('## The gateway'))
  const match = /```yaml\n([\s\S]*?)```/.exec(section)
  t.ok(match, 'the gateway section has a yaml example')
  const config = parseFleetConfig(match![1]!, {
    file: 'README.md', isKnownStrategy: hasBalancer, knownStrategies: balancerNames(), strategyOptionProblems: validateBalancerOptions
  })
  t.equal(config.inference_servers[0]?.max_in_flight, 8)
  t.ok(config.models.simple, 'the per-model example is there')
})

t.test('every relative link in the README names a file of the repository', async (t) => {
  const text = readFileSync(README, 'utf8')
  const root = PACKAGE_ROOT + '/'
  const links = [...text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) => m[1]!).filter((l) => !/^[a-z]+:/.test(l))
  t.ok(links.includes('docs/architecture.md'), 'the architecture is linked')
  for (const link of links) {
    const path = resolve(root, link)
    t.ok(path.startsWith(root) && existsSync(path), `${link} is in the repository`)
  }
  t.notMatch(text, /\.\.\/shared/, 'nothing outside the repository is referred to')
})
