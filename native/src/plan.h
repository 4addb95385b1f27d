// The plan: what the TypeScript planner (worker/backends/native/planner.ts) hands the engine after loading an ONNX
// model, folding constants and lowering ONNX ops to the engine's own smaller op set. It is the contract between the
// two halves: native/index.ts declares the same shapes for JavaScript, native/binding/ converts one into the other.
//
// Shapes carry the batch symbolically so one plan serves every batch size up to max_batch: a dimension d >= 0 is
// fixed, d < 0 means (-d) x batch (so -1 is the batch itself, -64 is 64 x batch after a Reshape to [-1, 128] of a
// [batch, 64, 128] tensor). A session resolves them per run; the arena is sized for max_batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flotilla {

enum class DType : int32_t { F32 = 0, I32 = 1, I64 = 2 };

inline size_t dtypeSize(DType t) { return t == DType::I64 ? 8 : 4; }
const char* dtypeName(DType t);

/** One value of the graph: an input, an intermediate, an output or a constant (weights). */
struct TensorDesc {
  std::string name;
  DType dtype = DType::F32;
  /** d >= 0: fixed; d < 0: (-d) x batch. */
  std::vector<int64_t> dims;
  /** Constants only: the elements, little-endian, dtype-sized. Empty for everything computed or fed. */
  std::vector<uint8_t> data;
  bool isConstant() const { return !data.empty(); }
};

/**
 * The engine's op set. ONNX ops map onto these in the planner: Gemm/MatMul(+Add bias)(+activation) -> MatMul,
 * Reshape/Flatten/Squeeze/Unsqueeze -> Reshape, Identity -> Reshape (same dims), BatchNormalization -> folded into
 * the Conv or Gemm before it, or Mul + Add with per-channel constants, Gelu's Erf decomposition -> Gelu.
 */
enum class OpType : int32_t {
  MatMul = 0,     // in: A, B, bias?  out: Y.  numpy matmul semantics over rank >= 2, leading dims broadcast.
  Add, Sub, Mul, Div,                 // in: A, B (numpy broadcasting)   out: Y
  Relu, LeakyRelu, Sigmoid, Tanh, Erf, Gelu,   // in: X  out: Y
  Softmax,        // in: X  out: Y   (attr axis)
  LayerNorm,      // in: X, scale, bias?  out: Y   normalises over dims [axis, rank)
  Gather,         // in: data, indices (I32 or I64)  out: Y   (attr axis); an index out of range fails the run
  Reshape,        // in: X  out: Y   same elements, Y's dims; the engine may alias instead of copying
  Transpose,      // in: X  out: Y   (attr perm)
  Concat,         // in: X0..Xn  out: Y   (attr axis)
  Conv,           // in: X [N,C,H,W], W [M, C/group, kH, kW], B? [M]  out: Y [N,M,oH,oW]
  MaxPool,        // in: X [N,C,H,W]  out: Y
  AveragePool,    // in: X [N,C,H,W]  out: Y
  GlobalAveragePool,  // in: X [N,C,H,W]  out: Y [N,C,1,1]
  Count
};

const char* opTypeName(OpType t);

/** Activation fused into MatMul and Conv (and what the element-wise unary ops compute). */
enum class Activation : int32_t { None = 0, Relu, LeakyRelu, Sigmoid, Tanh, Gelu, GeluTanh };

/**
 * Attributes of every op type in one struct; each op reads only its own. Axes are already normalised to
 * [0, rank) by the planner; pads are [top, left, bottom, right].
 */
struct OpAttrs {
  // MatMul
  bool transA = false;
  bool transB = false;
  float alpha = 1.0f;       // MatMul: scale of A.B; LeakyRelu: slope
  float beta = 1.0f;        // MatMul: scale of bias
  Activation activation = Activation::None;   // MatMul, Conv: fused; Gelu: Gelu (erf) or GeluTanh
  float activationAlpha = 0.01f;              // LeakyRelu slope when fused
  // Softmax, LayerNorm, Gather, Concat
  int32_t axis = 0;
  float epsilon = 1e-5f;    // LayerNorm
  // Transpose
  std::vector<int32_t> perm;
  // Conv, pools
  std::vector<int32_t> kernelShape;   // [kH, kW]
  std::vector<int32_t> strides;       // [sH, sW]
  std::vector<int32_t> pads;          // [top, left, bottom, right]
  std::vector<int32_t> dilations;     // [dH, dW]
  int32_t group = 1;
  bool countIncludePad = false;       // AveragePool
};

struct OpDesc {
  OpType type = OpType::MatMul;
  /** The ONNX node's name (or its first output's), for error messages. */
  std::string name;
  /** Tensor indices into Plan::tensors; -1 for an absent optional input. */
  std::vector<int32_t> inputs;
  std::vector<int32_t> outputs;
  OpAttrs attrs;
};

/** Whether a session computes matrix products in fp32 or lets the device use fp16/bf16 tensor cores (CUDA only). */
enum class Precision : int32_t { F32 = 0, F16, BF16 };

struct Plan {
  std::vector<TensorDesc> tensors;
  /** In execution order; every input of an op is a constant, a graph input or an earlier op's output. */
  std::vector<OpDesc> ops;
  std::vector<int32_t> inputs;
  std::vector<int32_t> outputs;
  /** Largest batch a run accepts; 0 when the model does not batch (then every dim is fixed). */
  int32_t maxBatch = 0;
};

/** A dimension of a tensor at a given batch size. */
inline int64_t resolveDim(int64_t d, int64_t batch) { return d >= 0 ? d : -d * batch; }

}  // namespace flotilla
