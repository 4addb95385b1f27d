// Index arithmetic shared by the CUDA kernels and their host-side checks. Every per-element mapping a kernel uses
// (broadcast offsets, transpose sources, im2col taps, pool windows, gather sources, conversions to padded fp16/bf16
// layouts) is a FLOTILLA_HD function here, so native/test/cuda_test.cc can run the very same code on the CPU against
// naive loops on machines without a GPU. The host-only builders (make*/plan*, in index_math.cu) turn plan shapes
// into the small by-value structs the kernels take, validate them, and coalesce dimensions so ranks above kMaxRank
// still fit when their layout allows.
//
// This header compiles with a plain C++ compiler too (FLOTILLA_HD is then `inline`): it includes no CUDA header.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../plan.h"

#ifdef __CUDACC__
#define FLOTILLA_HD __host__ __device__ __forceinline__
#else
#define FLOTILLA_HD inline
#endif

namespace flotilla {
namespace gpu {

/** Rank limit of the by-value index structs, after coalescing (dims of size 1 dropped, contiguous runs merged). */
constexpr int kMaxRank = 6;

/**
 * A multi-dimensional index space walked in row-major order, with one stride per dimension for each of `Ops`
 * operands (0 where an operand broadcasts). Passed to kernels by value.
 */
template <int Ops>
struct StridedIndex {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[Ops][kMaxRank] = {};
};

/** The element offsets of linear index `i` (row-major over dims) in each operand. */
template <int Ops>
FLOTILLA_HD void stridedOffsets(const StridedIndex<Ops>& m, int64_t i, int64_t* off) {
  for (int o = 0; o < Ops; ++o) off[o] = 0;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t n = m.dims[d];
    const int64_t q = i / n;
    const int64_t r = i - q * n;
    for (int o = 0; o < Ops; ++o) off[o] += r * m.strides[o][d];
    i = q;
  }
}

/**
 * Builds a StridedIndex from per-dimension sizes and per-operand strides of any rank: drops size-1 dimensions and
 * merges a dimension into the one before it when every operand is contiguous across the pair (a broadcast operand,
 * stride 0 in both, merges too). Returns false when more than kMaxRank dimensions remain.
 */
template <int Ops>
inline bool coalesce(const std::vector<int64_t>& dims, const std::vector<std::vector<int64_t>>& strides,
                     StridedIndex<Ops>* out) {
  std::vector<int64_t> d;
  std::vector<std::vector<int64_t>> s(Ops);
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1) continue;
    bool merge = !d.empty();
    for (int o = 0; o < Ops && merge; ++o) merge = s[o].back() == strides[o][k] * dims[k];
    if (merge) {
      d.back() *= dims[k];
      for (int o = 0; o < Ops; ++o) s[o].back() = strides[o][k];
    } else {
      d.push_back(dims[k]);
      for (int o = 0; o < Ops; ++o) s[o].push_back(strides[o][k]);
    }
  }
  if (d.size() > static_cast<size_t>(kMaxRank)) return false;
  *out = StridedIndex<Ops>{};
  out->rank = static_cast<int>(d.size());
  for (size_t k = 0; k < d.size(); ++k) {
    out->dims[k] = d[k];
    for (int o = 0; o < Ops; ++o) out->strides[o][k] = s[o][k];
  }
  return true;
}

inline int64_t product(const std::vector<int64_t>& dims, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < dims.size() && i < to; ++i) n *= dims[i];
  return n;
}

/** Row-major strides of a contiguous tensor. */
inline std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

/** "[2, 3, 4]" */
std::string shapeString(const std::vector<int64_t>& dims);

FLOTILLA_HD int64_t roundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// ---------------------------------------------------------------------------------------------------------------
// Binary element-wise ops with numpy broadcasting, walked over Y's shape: operand 0 is A's offset, 1 is B's.

/** Fails (with `error` set) unless A and B broadcast to exactly `out`. */
bool makeBroadcast(const std::vector<int64_t>& out, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                   StridedIndex<2>* map, std::string* error);

// ---------------------------------------------------------------------------------------------------------------
// Transpose, walked over Y's shape: operand 0 is X's offset.

bool makeTranspose(const std::vector<int64_t>& in, const std::vector<int32_t>& perm, const std::vector<int64_t>& out,
                   StridedIndex<1>* map, std::string* error);

// ---------------------------------------------------------------------------------------------------------------
// Matrix products.

struct GemmPlan {
  int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  /** Matrices in A's and B's storage (the product of their leading dims). */
  int64_t batchA = 1, batchB = 1;
  /** Y's batch count: the broadcast of A's and B's leading dims (1 once A's batch folded into M). */
  int64_t batch = 1;
  /**
   * Y's batches walked in order; operands 0 A, 1 B, 2 Y, 3 the row bias (unused by MatMul: 0), with strides in
   * whole matrices (scaledBatch turns them into elements for a given layout).
   */
  StridedIndex<4> batchMap;
};

/**
 * numpy matmul of A and B (the transposes apply to the last two dims; a rank-1 A is a row, a rank-1 B a column),
 * giving `out` (its element count is checked). When B has no batch of its own and A is not transposed, A's batch
 * folds into M: one tall product instead of many small ones.
 */
bool planGemm(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>& out,
              bool transA, bool transB, GemmPlan* plan, std::string* error);

/** The plan's batch walk with strides in elements: one A matrix is matA elements apart, B matB, Y matC. */
inline StridedIndex<4> scaledBatch(const GemmPlan& p, int64_t matA, int64_t matB, int64_t matC) {
  StridedIndex<4> s = p.batchMap;
  for (int d = 0; d < s.rank; ++d) {
    s.strides[0][d] *= matA;
    s.strides[1][d] *= matB;
    s.strides[2][d] *= matC;
    s.strides[3][d] = 0;
  }
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Convolution (im2col + GEMM) and pooling, NCHW.

struct ConvGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;     // X
  int64_t m = 0;                          // output channels (pools: c)
  int64_t kh = 1, kw = 1;
  int64_t oh = 0, ow = 0;
  int64_t sh = 1, sw = 1;
  int64_t padT = 0, padL = 0, padB = 0, padR = 0;
  int64_t dh = 1, dw = 1;
  int64_t group = 1;
  int64_t cg = 0, mg = 0;                 // channels per group, in and out
  int64_t kg = 0;                         // cg * kh * kw: the GEMM's K
  /** A 1x1 kernel, stride 1, no padding: X already is the GEMM's B, no im2col needed. */
  bool pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && padT == 0 && padL == 0 && padB == 0 && padR == 0;
  }
};

/** X [N,C,H,W], W [M,C/group,kH,kW], Y [N,M,oH,oW]; checks that Y's dims are the ones the attributes give. */
bool planConv(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const std::vector<int64_t>& y,
              const OpAttrs& attrs, ConvGeometry* g, std::string* error);

/**
 * X [N,C,H,W] -> Y [N,C,oH,oW] with attrs.kernelShape. Y's spatial dims may be the floor or the ceil form
 * (ceil_mode); windows that run past the padded edge are clipped.
 */
bool planPool(const std::vector<int64_t>& x, const std::vector<int64_t>& y, const OpAttrs& attrs, ConvGeometry* g,
              std::string* error);

/**
 * im2col over images [n0, n0 + count): element `i` of the column buffer, laid out [image][group][cg*kh*kw][oh*ow]
 * (so each group's block is that group's GEMM B, [Kg, oH*oW]), reads X at the returned offset, or is 0 when the tap
 * falls in the padding (-1).
 */
FLOTILLA_HD int64_t im2colSource(const ConvGeometry& g, int64_t n0, int64_t i) {
  const int64_t ohw = g.oh * g.ow;
  const int64_t taps = g.kh * g.kw;
  const int64_t pix = i % ohw;
  int64_t t = i / ohw;
  const int64_t tap = t % taps;
  t /= taps;                               // image * C + channel, channel = group * cg + c
  const int64_t ch = t % g.c;
  const int64_t img = n0 + t / g.c;
  const int64_t oy = pix / g.ow, ox = pix % g.ow;
  const int64_t ky = tap / g.kw, kx = tap % g.kw;
  const int64_t y = oy * g.sh - g.padT + ky * g.dh;
  const int64_t x = ox * g.sw - g.padL + kx * g.dw;
  if (y < 0 || y >= g.h || x < 0 || x >= g.w) return -1;
  return ((img * g.c + ch) * g.h + y) * g.w + x;
}

/**
 * One pool output (index `i` over [N,C,oH,oW]): the max, or the average over the taps inside X (plus, with
 * countIncludePad, the pad taps inside the padded extent, as onnxruntime counts them). `load(offset)` reads X.
 */
template <typename Load>
FLOTILLA_HD float poolValue(const ConvGeometry& g, int64_t i, bool isMax, bool countIncludePad, Load load) {
  const int64_t ox = i % g.ow;
  const int64_t oy = (i / g.ow) % g.oh;
  const int64_t plane = i / (g.ow * g.oh);   // n * C + c
  const int64_t base = plane * g.h * g.w;
  float best = -3.402823466e+38f;
  float sum = 0.0f;
  int64_t count = 0;
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const int64_t y = oy * g.sh - g.padT + ky * g.dh;
    const bool yIn = y >= 0 && y < g.h;
    const bool yPadded = y >= -g.padT && y < g.h + g.padB;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t x = ox * g.sw - g.padL + kx * g.dw;
      if (yIn && x >= 0 && x < g.w) {
        const float v = load(base + y * g.w + x);
        best = (v > best || v != v) ? v : best;   // NaN wins, as in onnxruntime and the CPU device
        sum += v;
        ++count;
      } else if (countIncludePad && yPadded && x >= -g.padL && x < g.w + g.padR) {
        ++count;
      }
    }
  }
  if (isMax) return best;
  return count > 0 ? sum / static_cast<float>(count) : 0.0f;
}

// ---------------------------------------------------------------------------------------------------------------
// Gather along an axis: data viewed as [outer, n, inner], the indices flattened to [count], Y as [outer, count, inner].

struct GatherGeometry {
  int64_t outer = 1, n = 0, inner = 1, count = 0;
};

bool planGather(const std::vector<int64_t>& data, const std::vector<int64_t>& indices, int axis,
                const std::vector<int64_t>& out, GatherGeometry* g, std::string* error);

/** Which index element Y's element `i` uses. */
FLOTILLA_HD int64_t gatherPosition(const GatherGeometry& g, int64_t i) { return (i / g.inner) % g.count; }

/** The data offset of Y's element `i` given its index value, or -1 when the index is outside [-n, n). */
FLOTILLA_HD int64_t gatherSource(const GatherGeometry& g, int64_t i, int64_t index) {
  if (index < -g.n || index >= g.n) return -1;
  if (index < 0) index += g.n;
  const int64_t r = i % g.inner;
  const int64_t o = i / (g.inner * g.count);
  return (o * g.n + index) * g.inner + r;
}

// ---------------------------------------------------------------------------------------------------------------
// Softmax and the row reductions: X viewed as [outer, len, inner] around an axis.

struct AxisGeometry {
  int64_t outer = 1, len = 1, inner = 1;
};

inline AxisGeometry axisGeometry(const std::vector<int64_t>& dims, int axis) {
  const size_t a = static_cast<size_t>(axis);
  AxisGeometry g;
  g.outer = product(dims, 0, a);
  g.len = a < dims.size() ? dims[a] : 1;
  g.inner = product(dims, a + 1);
  return g;
}

// ---------------------------------------------------------------------------------------------------------------
// Concat: input k is an [outer, width_k] block (width_k = len_k * inner) written at column offset_k * inner of Y's
// [outer, outWidth] rows.

FLOTILLA_HD int64_t concatTarget(int64_t i, int64_t width, int64_t outWidth, int64_t columnOffset) {
  return (i / width) * outWidth + columnOffset + i % width;
}

// ---------------------------------------------------------------------------------------------------------------
// fp32 -> fp16/bf16 copies for the tensor-core path: op(X) as a row-major [rows, cols] matrix per batch, each row
// padded with zeros to colsPadded (a multiple of 8: 16-byte rows for vector loads, ldm a multiple of 8 for WMMA).

/** Element `i` of the padded copy [batch][rows][colsPadded]: its source offset, or -1 for padding. */
FLOTILLA_HD int64_t paddedSource(int64_t i, int64_t rows, int64_t cols, int64_t colsPadded, bool transposed,
                                 int64_t srcBatchStride) {
  const int64_t c = i % colsPadded;
  const int64_t t = i / colsPadded;
  const int64_t r = t % rows;
  const int64_t b = t / rows;
  if (c >= cols) return -1;
  // A transposed operand is stored [cols, rows]: op(X)[r][c] = X[c][r].
  return b * srcBatchStride + (transposed ? c * rows + r : r * cols + c);
}

// ---------------------------------------------------------------------------------------------------------------
// Activations (plan.h Activation), with the CPU device's definitions.

FLOTILLA_HD float applyActivation(int act, float x, float alpha) {
  switch (act) {
    case static_cast<int>(Activation::Relu): return x < 0.0f ? 0.0f : x;   // NaN passes (poisoning shows)
    case static_cast<int>(Activation::LeakyRelu): return x < 0.0f ? x * alpha : x;
    case static_cast<int>(Activation::Sigmoid): return 1.0f / (1.0f + expf(-x));
    case static_cast<int>(Activation::Tanh): return tanhf(x);
    case static_cast<int>(Activation::Gelu): return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case static_cast<int>(Activation::GeluTanh): {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + tanhf(inner));
    }
    default: return x;
  }
}

/** The unary element-wise ops are activations, plus Erf, which has no Activation value. */
constexpr int kUnaryErf = 100;

FLOTILLA_HD float applyUnary(int fn, float x, float alpha) {
  return fn == kUnaryErf ? erff(x) : applyActivation(fn, x, alpha);
}

}  // namespace gpu
}  // namespace flotilla
