/**
 * The thread an `onnxruntime` instance runs its session on (onnxruntime-backend.ts starts it): onnxruntime-node's
 * `InferenceSession.create` and `run` do their work on the calling thread, so on the main thread a long run would
 * stall every socket of the worker. This thread imports onnxruntime-node, creates the session from the model's
 * bytes, reports the model's inputs and outputs, then runs one request at a time as messages arrive.
 *
 * Messages are plain data. Tensors travel as typed arrays whose buffers are transferred, not copied: the backend
 * copies each input once (out of the request's buffer, which it does not own) and receives outputs as they are.
 * Nothing here is imported by the main thread except types.
 */
import { parentPort, workerData, type MessagePort } from 'node:worker_threads'
import type * as Ort from 'onnxruntime-node'

export type OrtElementType = 'float32' | 'int64' | 'int32'
export type OrtTensorData = Float32Array | BigInt64Array | Int32Array

export interface OrtThreadData {
  /** The model file's bytes. */
  model: Uint8Array
  /** What to import: 'onnxruntime-node' (tests name a missing package to see the failure). */
  moduleSpecifier: string
  intraOpNumThreads?: number
  interOpNumThreads?: number
}

export interface OrtWireTensor {
  name: string
  type: string
  data: OrtTensorData
  dims: number[]
}

/** An input or output as the session describes it; symbolic dimensions are strings. */
export interface OrtValueInfo {
  name: string
  isTensor: boolean
  type: string
  shape: Array<number | string>
}

export type OrtThreadRequest =
  | { type: 'run', id: number, inputs: OrtWireTensor[], outputs: string[] }
  | { type: 'close' }

export type OrtThreadReply =
  | { type: 'ready', inputs: OrtValueInfo[], outputs: OrtValueInfo[] }
  /** `import`: onnxruntime-node could not be imported; `create`: it refused the model. */
  | { type: 'failed', stage: 'import' | 'create', message: string, code?: string }
  | { type: 'result', id: number, outputs: OrtWireTensor[] }
  | { type: 'error', id: number, message: string }

const describe = (m: Ort.InferenceSession.ValueMetadata): OrtValueInfo => m.isTensor
  ? { name: m.name, isTensor: true, type: m.type, shape: [...m.shape] }
  : { name: m.name, isTensor: false, type: '', shape: [] }

/** A buffer that holds exactly this view can be transferred as is; anything else is copied first. */
function ownBuffer (data: OrtTensorData): OrtTensorData {
  return data.byteOffset === 0 && data.byteLength === data.buffer.byteLength ? data : data.slice()
}

async function serve (port: MessagePort, init: OrtThreadData): Promise<void> {
  let ort: typeof Ort
  try {
    ort = await import(init.moduleSpecifier) as typeof Ort
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    port.postMessage({ type: 'failed', stage: 'import', message: e.message, ...(e.code !== undefined ? { code: e.code } : {}) })
    return
  }
  let session: Ort.InferenceSession
  try {
    session = await ort.InferenceSession.create(init.model, {
      executionProviders: ['cpu'],
      // Errors come back to the request that caused them; onnxruntime's own copy on stderr would only be noise.
      logSeverityLevel: 4,
      ...(init.intraOpNumThreads !== undefined ? { intraOpNumThreads: init.intraOpNumThreads } : {}),
      ...(init.interOpNumThreads !== undefined ? { interOpNumThreads: init.interOpNumThreads } : {})
    })
  } catch (err) {
    port.postMessage({ type: 'failed', stage: 'create', message: (err as Error).message })
    return
  }
  port.postMessage({ type: 'ready', inputs: session.inputMetadata.map(describe), outputs: session.outputMetadata.map(describe) })

  port.on('message', (request: OrtThreadRequest) => {
    if (request.type === 'close') {
      session.release().catch(() => {}).finally(() => port.close())
      return
    }
    const feeds: Record<string, Ort.Tensor> = {}
    for (const t of request.inputs) feeds[t.name] = new ort.Tensor(t.type as OrtElementType, t.data, t.dims)
    session.run(feeds, request.outputs).then(results => {
      const outputs: OrtWireTensor[] = []
      const transfer: ArrayBuffer[] = []
      for (const name of request.outputs) {
        const tensor = results[name]!
        const data = ownBuffer(tensor.data as OrtTensorData)
        outputs.push({ name, type: tensor.type, data, dims: [...tensor.dims] })
        transfer.push(data.buffer as ArrayBuffer)
      }
      port.postMessage({ type: 'result', id: request.id, outputs } satisfies OrtThreadReply, transfer)
    }, (err: unknown) => {
      port.postMessage({ type: 'error', id: request.id, message: (err as Error).message } satisfies OrtThreadReply)
    })
  })
}

if (parentPort !== null) void serve(parentPort, workerData as OrtThreadData)
