// The CPU kernels behind CpuDevice (cpu_device.cc), one function per op family, on resolved TensorRefs. They assume a
// validated plan (session.cc checked the shapes and dtypes) and never allocate on the hot path beyond a per-op or
// per-thread scratch that only grows. Bad data (a Gather index out of range) throws std::invalid_argument with a
// message the session prefixes with the op's name.
//
// Files: elementwise.cc (Add..Div, the unary ops), normalization.cc (Softmax, LayerNorm), data_movement.cc (Gather,
// Transpose, Concat, copies), matmul.cc, conv.cc (Conv via im2col + sgemm), pooling.cc (MaxPool, AveragePool,
// GlobalAveragePool).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "device.h"
#include "plan.h"
#include "sgemm.h"
#include "thread_pool.h"

// Hot loops are compiled three times (AVX-512, AVX2 + FMA, baseline x86-64) and picked at load time: the module is
// built without -march so it runs on any x86-64, and the plain loops vectorise for the CPU they run on.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLOTILLA_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FLOTILLA_MULTIVERSION
#endif

namespace flotilla {
namespace cpu {

/** Element-wise work below this many elements stays on one thread (the fork-join costs more than it saves). */
constexpr int64_t kParallelElements = 64 * 1024;

/**
 * Calls fn(begin, end) over [0, n) in contiguous chunks: one chunk on the caller when n * costPerItem is below
 * kParallelElements or there is no pool, else one chunk per pool thread. (A template, so the serial path costs no
 * std::function.)
 */
template <typename Fn>
void parallelRange(ThreadPool* pool, int64_t n, int64_t costPerItem, const Fn& fn) {
  if (n <= 0) return;
  const int threads = pool != nullptr ? pool->size() : 1;
  if (threads <= 1 || n < 2 || n * std::max<int64_t>(costPerItem, 1) < kParallelElements) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t tasks = std::min<int64_t>(threads, n);
  pool->parallelFor(tasks, [&](int64_t t) {
    const int64_t begin = n * t / tasks, end = n * (t + 1) / tasks;
    if (begin < end) fn(begin, end);
  });
}

// elementwise.cc
/** Y = A op B with numpy broadcasting (op: Add, Sub, Mul, Div). */
void binary(OpType type, const TensorRef& a, const TensorRef& b, const TensorRef& y, ThreadPool* pool);

enum class Unary { Relu, LeakyRelu, Sigmoid, Tanh, Erf, Gelu, GeluTanh };
/** y[i] = f(x[i]); `alpha` is LeakyRelu's slope. y may be x. */
void unary(Unary kind, float alpha, const float* x, float* y, int64_t n, ThreadPool* pool);

/**
 * Whether a fused activation runs after a direct convolution (conv.cc) as a pass of its own: those kernels apply
 * only Relu and LeakyRelu as they store. (sgemm's epilogue applies every activation.)
 */
inline bool activationAfterDirectConv(Activation a) {
  return a == Activation::Sigmoid || a == Activation::Tanh || a == Activation::Gelu || a == Activation::GeluTanh;
}
/** y = act(y) in place, for the activations activationAfterDirectConv picks (others: nothing to do). */
void activateInPlace(Activation act, float* y, int64_t n, ThreadPool* pool);

// normalization.cc
/** Softmax over one axis (ONNX opset 13), max-subtracted. */
void softmax(const TensorRef& x, const TensorRef& y, int axis, ThreadPool* pool);
/** Normalises over dims [axis, rank): y = (x - mean) / sqrt(var + epsilon) * scale + bias (bias may be null). */
void layerNorm(const TensorRef& x, const float* scale, const float* bias, const TensorRef& y, int axis, float epsilon,
               ThreadPool* pool);

// data_movement.cc
/** Gathers slices of `data` along `axis` (indices int32 or int64, negative ones counted from the end). */
void gather(const TensorRef& data, const TensorRef& indices, const TensorRef& y, int axis);
void transpose(const TensorRef& x, const TensorRef& y, const std::vector<int32_t>& perm, ThreadPool* pool);
void concat(const std::vector<TensorRef>& inputs, const TensorRef& y, int axis);
/** Same bytes, another shape (a Reshape the session did not alias). */
void copy(const TensorRef& x, const TensorRef& y);

// matmul.cc
struct MatMulState : OpState {
  /** B packed once when it is a constant 2-D tensor. */
  std::unique_ptr<PackedB> packed;
  /** A scalar bias spread over N (filled at prepare for a constant bias, per run otherwise). */
  std::vector<float> biasRow;
  bool biasRowReady = false;
};
std::unique_ptr<OpState> prepareMatMul(const OpDesc& op, const std::vector<const TensorDesc*>& inputs);
void matmul(const OpDesc& op, MatMulState* state, const std::vector<TensorRef>& inputs, const TensorRef& y,
            ThreadPool* pool);

// conv.cc
struct ConvState : OpState {
  /** im2col buffers, one per concurrent task. */
  std::vector<std::vector<float>> columns;
};
std::unique_ptr<OpState> prepareConv(const OpDesc& op, const std::vector<const TensorDesc*>& inputs);
void conv(const OpDesc& op, ConvState* state, const std::vector<TensorRef>& inputs, const TensorRef& y,
          ThreadPool* pool);

// pooling.cc
void maxPool(const OpAttrs& attrs, const TensorRef& x, const TensorRef& y, ThreadPool* pool);
void averagePool(const OpAttrs& attrs, const TensorRef& x, const TensorRef& y, ThreadPool* pool);
void globalAveragePool(const TensorRef& x, const TensorRef& y, ThreadPool* pool);

}  // namespace cpu
}  // namespace flotilla
