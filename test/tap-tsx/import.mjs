// Loads TypeScript through tsx in this thread. Given to node with --import, so worker threads inherit it (their
// execArgv is the process's) and run it too: tsx's own `--import tsx` registers itself in the main thread only on
// Node 20, and the onnxruntime backend runs its model on a worker thread loaded from a .ts file under test.
import { register } from 'tsx/esm/api'

register()
