// fp32 matrix products on the CPU: a packed, blocked SGEMM (after BLIS/GotoBLAS) with AVX-512 and AVX2 FMA
// microkernels chosen at run time, a portable C++ kernel for anything else, and both cores for large products.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "plan.h"

namespace flotilla {

class ThreadPool;

/** The instruction set the microkernels use; FLOTILLA_NATIVE_ISA=avx2|generic lowers it (tests use that). */
enum class Isa : int32_t { Generic = 0, Avx2 = 1, Avx512 = 2 };
Isa gemmIsa();
/** Forces an ISA (clamped to what the CPU has), so one test process can check every microkernel. */
void setGemmIsa(Isa isa);
const char* isaName(Isa isa);

/**
 * Applied to C after the product: C = act(C + colBias[j] + rowBias[i]) (either bias may be null). Every activation
 * is applied to each tile as it is stored (Sigmoid, Tanh and the GELUs with cpu_math.h's vectorised functions).
 */
struct GemmEpilogue {
  const float* colBias = nullptr;   // [N]: a MatMul's bias
  const float* rowBias = nullptr;   // [M]: a convolution's bias (rows are output channels)
  float biasScale = 1.0f;           // beta of Gemm's C
  Activation activation = Activation::None;
  float activationAlpha = 0.01f;
};

/**
 * B packed once for many products (weights): panels of the microkernel's width, zero-padded, K-blocked. Made for the
 * ISA of its time; sgemmPacked throws std::logic_error when setGemmIsa changed it since (pack again after a switch).
 */
class PackedB {
 public:
  PackedB(bool transB, int64_t k, int64_t n, const float* b, int64_t ldb);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  Isa isa() const { return isa_; }
  const float* panel(int64_t kBlock, int64_t nPanel) const;
 private:
  int64_t k_, n_;
  Isa isa_;
  int64_t nr_, kc_, panels_, kBlocks_;
  std::vector<float> packed_;
};

/**
 * C[M,N] = alpha * op(A)[M,K] . op(B)[K,N] + beta * C, then the epilogue. Row-major with leading dimensions (row
 * strides) lda, ldb, ldc; op(X) = X^T when trans. beta = 0 never reads C (it may hold NaN). `pool` may be null
 * (one thread).
 */
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue,
           ThreadPool* pool);

/** The same with B packed ahead of time (beta = 0). */
void sgemmPacked(bool transA, int64_t m, float alpha, const float* a, int64_t lda, const PackedB& b, float* c,
                 int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool);

/**
 * Calls fn(item) for every item in [0, items) on the pool's threads. Each thread owns an equal contiguous share,
 * which it works through from the front, then takes what is left of the others' from their backs: a helper that
 * is late (asleep when the region opened) costs little, and threads that are on time keep to their shares. The
 * caller always owns the first share. `pool` may be null (all on the caller).
 */
void parallelItems(ThreadPool* pool, int64_t items, const std::function<void(int64_t)>& fn);

/** The epilogue's activation on one value (element-wise ops and tests use the same definition). */
float activate(Activation act, float x, float alpha);

}  // namespace flotilla
