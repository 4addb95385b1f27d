/**
 * A tap plugin in place of @tapjs/typescript: test files are TypeScript, loaded through tsx (esbuild) instead of
 * ts-node. ts-node loads the whole TypeScript compiler into every test process, about 4 s each on a 2-core machine
 * over some 90 files; tsx strips the types in milliseconds. Nothing is lost: `npm test` type-checks the whole tree
 * first (pretest: tsc), which ts-node in tap's transpile-only mode never did either.
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
