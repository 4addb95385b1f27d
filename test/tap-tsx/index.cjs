/**
 * A tap plugin in place of @tapjs/typescript: a TypeScript test file run on its own (`npx tap test/x.test.ts`) is
 * loaded through tsx (esbuild) instead of ts-node, which loads the whole TypeScript compiler into every test
 * process (about 4 s each on a 2-core machine). `npm test` runs the build in dist/ instead (its pretest compiles
 * and type-checks the whole tree with tsc, tests included), and the loader stays out of those processes
 * (import.mjs): tsx's loader thread cost each of some 110 test processes half a second of CPU.
 *
 * `ensure-built.cjs` (npm test's pretest) builds tap with it on a fresh install.
 *
 * A package of its own (a `file:` devDependency, named in tap's config by its file so that tap does not look for it
 * in the registry) because tap resolves plugins by module name from its own folder. CommonJS: tap require()s it.
 */
'use strict'
exports.importLoader = 'flotilla-tap-tsx/import.mjs'
exports.testFileExtensions = ['ts']
// Ahead of the other loaders (tap's mock among them), as @tapjs/typescript's was, so theirs see resolved modules.
exports.preload = true
