/**
 * From ONNX bytes to a NativePlan (native/index.ts), in five steps:
 *  1. decode (onnx-graph.ts) and give every graph input its dims, the batch symbolic: with max_batch_size > 0 the
 *     first dimension of every input is the batch (-1), other symbolic dimensions come from config.pbtxt's dims;
 *  2. keep the nodes the outputs need, in execution order;
 *  3. walk them once: fold what is known at load (constant-folding.ts), infer the shapes of the rest
 *     (shape-inference.ts);
 *  4. rewrite Erf-decomposed GELU into Gelu (gelu-fusion.ts) and lower to the engine's ops with its fusions
 *     (lowering.ts);
 *  5. number the tensors: graph inputs first, constants stored once, and an explicit copy for an output that is an
 *     input, a constant or another output, so every output is written by an op of its own.
 *
 * Errors are coded: WRK_ERR_ONNX_INVALID for what ONNX itself forbids, WRK_ERR_ONNX_UNSUPPORTED_OP for an op outside
 * the list (with the suggestion to use onnxruntime), WRK_ERR_MODEL_LOAD for valid models the backend cannot plan
 * (a fixed batch dimension, an unresolved symbolic dimension, a type it does not compute with). Each names the node,
 * the input or the output concerned.
 */
import { createError, type FlotillaError } from '../../../common/errors.ts'
import { type NativeDType, type NativePlan, type PlanTensor } from '../../../native/index.ts'
import { dimsProduct, formatDims } from './batch-dims.ts'
import { constantValue, foldNode } from './constant-folding.ts'
import { fuseGelu } from './gelu-fusion.ts'
import { GraphFailure } from './graph-failure.ts'
import { dropDeadOps, Lowerer, type LoweredOp } from './lowering.ts'
import {
  dataTypeName, engineDType, isConstTensor, loadOnnxGraph, type GraphNode, type GraphValueInfo, type OnnxGraphModel
} from './onnx-graph.ts'
import { inferNode, type TensorType, type Value } from './shape-inference.ts'

export interface PlanIo {
  name: string
  dtype: NativeDType
  /** Batch-scaled as in native/index.ts: -1 is the batch. */
  dims: number[]
}

export interface LoweredModel {
  plan: NativePlan
  /** In plan.inputs order. */
  inputs: PlanIo[]
  /** In plan.outputs order (the graph's output order). */
  outputs: PlanIo[]
  /** Plan ops by type, after fusion ('MatMul': 3). */
  opCounts: Record<string, number>
}

export interface PlanFromOnnxOptions {
  modelName: string
  /** config.pbtxt's max_batch_size: > 0 makes every input's first dimension the batch. */
  maxBatch: number
  /** Per input, config.pbtxt's dims (without the batch dimension when maxBatch > 0): sizes of symbolic dimensions. */
  dims?: Record<string, number[]>
  /** What messages call the model file; default 'model.onnx'. */
  file?: string
}

/** The ONNX ops the native backend runs, for WRK_ERR_ONNX_UNSUPPORTED_OP. */
export const NATIVE_ONNX_OPS = [
  'MatMul', 'Gemm', 'Add', 'Sub', 'Mul', 'Div', 'Relu', 'LeakyRelu', 'Sigmoid', 'Tanh', 'Erf', 'Gelu', 'Softmax',
  'LayerNormalization', 'BatchNormalization', 'Gather', 'Reshape', 'Flatten', 'Squeeze', 'Unsqueeze', 'Identity',
  'Dropout', 'Transpose', 'Concat', 'Conv', 'MaxPool', 'AveragePool', 'GlobalAveragePool'
] as const

/** Plan ops that take integer tensors (indices, and data they only move). */
const INTEGER_OPS: ReadonlySet<string> = new Set(['Gather', 'Reshape', 'Transpose', 'Concat'])

const OP_LIST = `${NATIVE_ONNX_OPS.join(', ')} (and Shape, Cast, ConstantOfShape, Range, Constant where they fold to constants)`

class Planner {
  readonly #options: PlanFromOnnxOptions
  readonly #file: string
  readonly #graph: OnnxGraphModel
  readonly #values = new Map<string, Value>()

  constructor (graph: OnnxGraphModel, options: PlanFromOnnxOptions) {
    this.#graph = graph
    this.#options = options
    this.#file = options.file ?? 'model.onnx'
  }

  #invalid (reason: string): FlotillaError {
    return createError('WRK_ERR_ONNX_INVALID', this.#options.modelName, this.#file, reason)
  }

  #refused (reason: string): FlotillaError {
    return createError('WRK_ERR_MODEL_LOAD', this.#options.modelName, reason)
  }

  /** A GraphFailure at `node` as its coded error. */
  #nodeError (node: GraphNode, err: unknown): unknown {
    if (!(err instanceof GraphFailure)) return err
    const where = `node '${node.name}' (${node.opType})`
    switch (err.kind) {
      case 'invalid': return this.#invalid(`${where}: ${err.message}`)
      case 'refused': return this.#refused(`${where}: ${err.message}`)
      case 'unsupported': {
        const op = err.message === '' ? node.opType : `${node.opType} (${err.message})`
        return createError('WRK_ERR_ONNX_UNSUPPORTED_OP', this.#options.modelName, op, node.name, OP_LIST)
      }
    }
  }

  plan (): LoweredModel {
    const inputs = this.#graph.inputs.map(v => this.#input(v))
    for (const [name, c] of this.#graph.initializers) if (isConstTensor(c)) this.#values.set(name, constantValue(c))
    const outputNames = this.#graph.outputs.map(o => o.name)
    const irNodes = this.#walk(this.#order(outputNames), new Set(outputNames))
    const outputs = this.#graph.outputs.map(o => this.#output(o))
    const fused = fuseGelu(irNodes, this.#values, new Set(outputNames))
    const consumers = new Map<string, number>()
    const read = (name: string): void => { if (name !== '') consumers.set(name, (consumers.get(name) ?? 0) + 1) }
    for (const n of fused) n.inputs.forEach(read)
    outputNames.forEach(read)
    const lowerer = new Lowerer({ values: this.#values, consumers, opset: this.#graph.opset })
    for (const node of fused) {
      try {
        lowerer.lower(node)
      } catch (err) {
        throw this.#nodeError(node, err)
      }
    }
    return this.#emit(inputs, outputs, lowerer.ops)
  }

  /** A graph input's dtype and batch-scaled dims, symbolic dimensions resolved. */
  #input (v: GraphValueInfo): PlanIo {
    const { maxBatch } = this.#options
    const dtype = engineDType(v.elemType)
    if (dtype === undefined) {
      throw this.#refused(`input '${v.name}' is ${dataTypeName(v.elemType)}; the native backend takes float32 inputs, ` +
        'and int32 or int64 ones as Gather indices')
    }
    const given = this.#options.dims?.[v.name]
    let declared = v.dims
    if (declared === undefined) {
      if (given === undefined) {
        throw this.#refused(`input '${v.name}' declares no shape; give its dims in config.pbtxt`)
      }
      declared = [...(maxBatch > 0 ? [null] : []), ...given.map(d => (d > 0 ? d : null))]
    }
    const dims: number[] = []
    for (const [i, d] of declared.entries()) {
      if (i === 0 && maxBatch > 0) {
        if (typeof d === 'number') {
          throw this.#refused(`input '${v.name}' has a fixed first dimension (${d}), but max_batch_size ${maxBatch} makes ` +
            'it the batch: export the model with a dynamic batch axis (torch.onnx.export(..., dynamic_axes=' +
            `{'${v.name}': {0: 'batch'}})), or set max_batch_size: 0 in config.pbtxt`)
        }
        dims.push(-1)
        continue
      }
      if (typeof d === 'number') {
        dims.push(d)
        continue
      }
      const size = given?.[maxBatch > 0 ? i - 1 : i]
      if (size === undefined || !(size > 0)) {
        const what = typeof d === 'string' ? `'${d}'` : 'of unknown size'
        throw this.#refused(`input '${v.name}' dimension ${i} is symbolic (${what}); give its size in config.pbtxt's ` +
          `dims for input '${v.name}'${maxBatch > 0 ? ' (dims exclude the batch dimension)' : (i === 0 ? ', or set max_batch_size > 0 if it is the batch' : '')}`)
      }
      dims.push(size)
    }
    if (maxBatch > 0 && dims.length === 0) {
      throw this.#refused(`input '${v.name}' is a scalar, but max_batch_size ${maxBatch} needs a batch dimension`)
    }
    this.#values.set(v.name, { dtype, dims })
    return { name: v.name, dtype, dims }
  }

  /** The nodes the outputs depend on, in an execution order (inputs before readers). */
  #order (outputNames: readonly string[]): GraphNode[] {
    const producer = new Map<string, GraphNode>()
    for (const n of this.#graph.nodes) {
      for (const o of n.outputs) {
        if (o === '') continue
        if (producer.has(o) || this.#values.has(o) || this.#graph.initializers.has(o)) {
          throw this.#invalid(`'${o}' is written by node '${n.name}' and also by another node, an input or an initializer`)
        }
        producer.set(o, n)
      }
    }
    const defined = (name: string): boolean => this.#values.has(name) || this.#graph.initializers.has(name)
    for (const o of outputNames) {
      if (!producer.has(o) && !defined(o)) throw this.#invalid(`graph output '${o}' is not computed by any node`)
    }
    const ordered: GraphNode[] = []
    const state = new Map<GraphNode, 'visiting' | 'done'>()
    // Iterative depth-first post-order, so deep graphs do not exhaust the stack.
    for (const o of outputNames) {
      const root = producer.get(o)
      if (root === undefined || state.has(root)) continue
      const stack: Array<{ node: GraphNode, next: number }> = [{ node: root, next: 0 }]
      state.set(root, 'visiting')
      while (stack.length > 0) {
        const top = stack[stack.length - 1]!
        if (top.next < top.node.inputs.length) {
          const name = top.node.inputs[top.next++]!
          if (name === '') continue
          const p = producer.get(name)
          if (p === undefined) {
            if (!defined(name)) throw this.#invalid(`node '${top.node.name}' reads '${name}', which no node, input or initializer defines`)
            continue
          }
          const s = state.get(p)
          if (s === 'visiting') throw this.#invalid(`node '${p.name}' depends on its own output (a cycle)`)
          if (s === undefined) {
            state.set(p, 'visiting')
            stack.push({ node: p, next: 0 })
          }
        } else {
          state.set(top.node, 'done')
          ordered.push(top.node)
          stack.pop()
        }
      }
    }
    return ordered
  }

  /** Folds or infers each node; returns the ones the engine runs. */
  #walk (ordered: readonly GraphNode[], outputNames: ReadonlySet<string>): GraphNode[] {
    const read = new Set(outputNames)
    for (const n of ordered) for (const i of n.inputs) read.add(i)
    const engine: GraphNode[] = []
    for (const node of ordered) {
      try {
        const inputs = node.inputs.map(name => {
          if (name === '') return undefined
          const c = this.#graph.initializers.get(name)
          if (c !== undefined && !isConstTensor(c)) {
            throw this.#refused(`node '${node.name}' (${node.opType}) reads initializer '${name}' of type ` +
              `${c.unsupportedType}; the native backend computes with float32 (float16 and bfloat16 weights are ` +
              'converted at load), int32 and int64')
          }
          return this.#values.get(name)!
        })
        let outs: Array<Value | TensorType | undefined> | undefined = foldNode(node, inputs, this.#graph.opset)
        if (outs === undefined) {
          outs = inferNode(node, inputs, this.#graph.opset)
          engine.push(node)
        }
        for (const [i, name] of node.outputs.entries()) {
          if (name === '') continue
          const out = outs[i]
          if (out === undefined) {
            if (read.has(name)) throw new GraphFailure('unsupported', `with output #${i} ('${name}') in use`)
            continue
          }
          if (dimsProduct(out.dims) === undefined) {
            throw new GraphFailure('refused', `its output ${formatDims(out.dims)} would scale with batch²`)
          }
          this.#values.set(name, out)
        }
      } catch (err) {
        throw this.#nodeError(node, err)
      }
    }
    return engine
  }

  /** Checks a graph output against its declaration and the batch rule; its PlanIo. */
  #output (o: GraphValueInfo): PlanIo {
    const v = this.#values.get(o.name)!
    if (o.elemType !== 0 && engineDType(o.elemType) !== v.dtype) {
      throw this.#invalid(`output '${o.name}' is declared ${dataTypeName(o.elemType)}, the graph computes ${v.dtype}`)
    }
    if (o.dims !== undefined) {
      const declared = o.dims
      const mismatch = declared.length !== v.dims.length ||
        declared.some((d, i) => typeof d === 'number' && d !== v.dims[i])
      if (mismatch) {
        const shown = `[${declared.map(d => (d === null ? '?' : String(d))).join(', ')}]`
        throw this.#invalid(`output '${o.name}' is declared ${shown}, the graph computes ${formatDims(v.dims)}`)
      }
    }
    if (this.#options.maxBatch > 0 && (v.dims[0] !== -1 || v.dims.slice(1).some(d => d < 0))) {
      throw this.#refused(`output '${o.name}' has dims ${formatDims(v.dims)}; with max_batch_size > 0 every output ` +
        'needs the batch as its first dimension and fixed sizes after it')
    }
    return { name: o.name, dtype: v.dtype, dims: [...v.dims] }
  }

  #emit (inputs: PlanIo[], outputs: PlanIo[], lowered: LoweredOp[]): LoweredModel {
    const ops = [...lowered]
    const producedBy = new Set(ops.flatMap(op => op.outputs))
    // An output that no op of its own writes (an input, a constant, a repeated output) gets a copy.
    const outputTensors: string[] = []
    const taken = new Set<string>()
    for (const o of outputs) {
      let name = o.name
      if (!producedBy.has(name) || taken.has(name)) {
        const copy = `${o.name}#output${outputTensors.length}`
        this.#values.set(copy, { dtype: o.dtype, dims: [...o.dims] })
        ops.push({ op: 'Reshape', name: `${o.name}/output_copy`, inputs: [name], outputs: [copy], attrs: {} })
        name = copy
      }
      taken.add(name)
      outputTensors.push(name)
    }
    const live = dropDeadOps(ops, outputTensors)

    const tensors: PlanTensor[] = []
    const index = new Map<string, number>()
    const tensorOf = (name: string): number => {
      const known = index.get(name)
      if (known !== undefined) return known
      const v = this.#values.get(name)!
      const t: PlanTensor = { name, dtype: v.dtype, dims: [...v.dims] }
      if (v.constant !== undefined) t.data = v.constant.data
      index.set(name, tensors.length)
      tensors.push(t)
      return tensors.length - 1
    }
    const inputIndices = inputs.map(i => tensorOf(i.name))
    const inputDtypes = new Map(inputs.map(i => [i.name, i.dtype]))
    const opCounts: Record<string, number> = {}
    const planOps = live.map(op => {
      for (const [slot, name] of op.inputs.entries()) {
        if (name === '') continue
        const v = this.#values.get(name)!
        if (v.dtype !== 'float32' && !INTEGER_OPS.has(op.op)) {
          const what = inputDtypes.has(name) ? `input '${name}'` : `'${name}'`
          throw this.#refused(`${what} (${v.dtype}) feeds op '${op.name}' (${op.op}) as input #${slot}; the native ` +
            'backend computes in float32 and moves integer tensors only through Gather, Reshape, Transpose and Concat')
        }
      }
      opCounts[op.op] = (opCounts[op.op] ?? 0) + 1
      return {
        op: op.op,
        name: op.name,
        inputs: op.inputs.map(n => (n === '' ? -1 : tensorOf(n))),
        outputs: op.outputs.map(tensorOf),
        attrs: op.attrs
      }
    })
    const plan: NativePlan = {
      tensors,
      ops: planOps,
      inputs: inputIndices,
      outputs: outputTensors.map(tensorOf),
      maxBatch: this.#options.maxBatch > 0 ? this.#options.maxBatch : 0
    }
    return { plan, inputs, outputs, opCounts }
  }
}

/**
 * Decodes, folds, infers and lowers an ONNX model into a NativePlan. Throws coded errors (see the file header) that
 * name what is wrong and, where it can, what to change.
 */
export function planFromOnnx (bytes: Uint8Array, options: PlanFromOnnxOptions): LoweredModel {
  const graph = loadOnnxGraph(bytes, { modelName: options.modelName, file: options.file ?? 'model.onnx' })
  return new Planner(graph, options).plan()
}
