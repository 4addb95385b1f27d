// Loads TypeScript through tsx in this thread. Given to node with --import, so worker threads inherit it (their
// execArgv is the process's) and run it too: tsx's own `--import tsx` registers itself in the main thread only on
// Node 20, and the onnxruntime backend runs its model on a worker thread loaded from a .ts file under test.
//
// Only for a TypeScript test file (`npx tap test/x.test.ts`): `npm test` runs the build in dist/ (pretest compiles
// it anyway), and tsx's loader thread costs every test process about half a second of CPU.
if (process.argv[1]?.endsWith('.ts')) {
  const { register } = await import('tsx/esm/api')
  register()
}
