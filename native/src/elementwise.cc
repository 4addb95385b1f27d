// Add, Sub, Mul, Div with numpy broadcasting, and the unary ops (Relu .. Gelu), as plain loops the compiler
// vectorises (cpu_kernels.h: FLOTILLA_MULTIVERSION); the transcendental ones with AVX-512 intrinsics where the CPU
// has it (cpu_math_avx512.h).
#include <algorithm>
#include <vector>

#include "cpu_kernels.h"
#include "cpu_math.h"
#include "cpu_math_avx512.h"

namespace flotilla {
namespace cpu {

namespace {

enum BinaryKind : int { kAdd = 0, kSub = 1, kMul = 2, kDiv = 3 };

template <typename F>
inline __attribute__((always_inline)) void binaryLoop(F f, const float* __restrict a, bool aStep,
                                                      const float* __restrict b, bool bStep, float* __restrict y,
                                                      int64_t n) {
  if (aStep && bStep) {
    for (int64_t i = 0; i < n; i++) y[i] = f(a[i], b[i]);
  } else if (aStep) {
    const float bv = b[0];
    for (int64_t i = 0; i < n; i++) y[i] = f(a[i], bv);
  } else if (bStep) {
    const float av = a[0];
    for (int64_t i = 0; i < n; i++) y[i] = f(av, b[i]);
  } else {
    const float v = f(a[0], b[0]);
    for (int64_t i = 0; i < n; i++) y[i] = v;
  }
}

/** y[i] = a[i * aStep] op b[i * bStep] for i < n (steps 0 or 1). */
FLOTILLA_MULTIVERSION
void binaryRun(int kind, const float* a, bool aStep, const float* b, bool bStep, float* y, int64_t n) {
  switch (kind) {
    case kAdd: binaryLoop([](float p, float q) { return p + q; }, a, aStep, b, bStep, y, n); break;
    case kSub: binaryLoop([](float p, float q) { return p - q; }, a, aStep, b, bStep, y, n); break;
    case kMul: binaryLoop([](float p, float q) { return p * q; }, a, aStep, b, bStep, y, n); break;
    default: binaryLoop([](float p, float q) { return p / q; }, a, aStep, b, bStep, y, n); break;
  }
}

FLOTILLA_MULTIVERSION
void unaryRun(int kind, float alpha, const float* x, float* y, int64_t n) {
  switch (static_cast<Unary>(kind)) {
    case Unary::Relu:
      for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : (x[i] == x[i] ? 0.0f : x[i]);
      break;
    case Unary::LeakyRelu:
      for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? x[i] * alpha : x[i];
      break;
    case Unary::Sigmoid:
      for (int64_t i = 0; i < n; i++) y[i] = fastSigmoid(x[i]);
      break;
    case Unary::Tanh:
      for (int64_t i = 0; i < n; i++) y[i] = fastTanh(x[i]);
      break;
    case Unary::Erf:
      for (int64_t i = 0; i < n; i++) y[i] = fastErf(x[i]);
      break;
    case Unary::Gelu:
      for (int64_t i = 0; i < n; i++) y[i] = fastGelu(x[i]);
      break;
    case Unary::GeluTanh:
      for (int64_t i = 0; i < n; i++) y[i] = fastGeluTanh(x[i]);
      break;
  }
}

/** The unary ops that call exp or erf, 16 lanes at a time; the tail is a masked load and store. */
template <__m512 (*F)(__m512)>
__attribute__((target("avx512f"))) void unaryAvx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

/** The AVX-512 kernel for `kind`, or null (Relu and LeakyRelu vectorise well as plain loops). */
void (*avx512Unary(Unary kind))(const float*, float*, int64_t) {
  if (gemmIsa() != Isa::Avx512) return nullptr;
  switch (kind) {
    case Unary::Sigmoid: return &unaryAvx512<sigmoid512>;
    case Unary::Tanh: return &unaryAvx512<tanh512>;
    case Unary::Erf: return &unaryAvx512<erf512>;
    case Unary::Gelu: return &unaryAvx512<gelu512>;
    case Unary::GeluTanh: return &unaryAvx512<geluTanh512>;
    default: return nullptr;
  }
}

}  // namespace

void unary(Unary kind, float alpha, const float* x, float* y, int64_t n, ThreadPool* pool) {
  const int64_t cost = kind == Unary::Relu || kind == Unary::LeakyRelu ? 1 : 8;
  if (auto* kernel = avx512Unary(kind)) {
    parallelRange(pool, n, cost, [&](int64_t begin, int64_t end) { kernel(x + begin, y + begin, end - begin); });
    return;
  }
  parallelRange(pool, n, cost, [&](int64_t begin, int64_t end) {
    unaryRun(static_cast<int>(kind), alpha, x + begin, y + begin, end - begin);
  });
}

void activateInPlace(Activation act, float* y, int64_t n, ThreadPool* pool) {
  switch (act) {
    case Activation::Sigmoid: unary(Unary::Sigmoid, 0.0f, y, y, n, pool); break;
    case Activation::Tanh: unary(Unary::Tanh, 0.0f, y, y, n, pool); break;
    case Activation::Gelu: unary(Unary::Gelu, 0.0f, y, y, n, pool); break;
    case Activation::GeluTanh: unary(Unary::GeluTanh, 0.0f, y, y, n, pool); break;
    default: break;
  }
}

void binary(OpType type, const TensorRef& a, const TensorRef& b, const TensorRef& y, ThreadPool* pool) {
  const int kind = type == OpType::Add ? kAdd : type == OpType::Sub ? kSub : type == OpType::Mul ? kMul : kDiv;
  const int64_t n = y.numel();
  if (n == 0) return;
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* py = y.f32();
  const int64_t na = a.numel(), nb = b.numel();
  // Flat cases: same shape, or one side a single value.
  if ((na == n || na == 1) && (nb == n || nb == 1)) {
    parallelRange(pool, n, 1, [&](int64_t begin, int64_t end) {
      binaryRun(kind, na == 1 ? pa : pa + begin, na != 1, nb == 1 ? pb : pb + begin, nb != 1, py + begin,
                end - begin);
    });
    return;
  }
  // General broadcasting: align the shapes right, give broadcast dims stride 0, merge dims that are contiguous in
  // all three, then loop over the outer dims with the innermost as one vector loop.
  const size_t rank = y.shape.size();
  std::vector<int64_t> dims(rank), sa(rank), sb(rank);
  {
    int64_t strideA = 1, strideB = 1;
    for (size_t k = rank; k-- > 0;) {
      dims[k] = y.shape[k];
      const size_t offA = rank - a.shape.size(), offB = rank - b.shape.size();
      const int64_t da = k >= offA ? a.shape[k - offA] : 1;
      const int64_t db = k >= offB ? b.shape[k - offB] : 1;
      sa[k] = da == 1 ? 0 : strideA;
      sb[k] = db == 1 ? 0 : strideB;
      strideA *= da;
      strideB *= db;
    }
  }
  // Merge from the innermost outwards; drop size-1 dims.
  std::vector<int64_t> md, ma, mb;   // innermost first
  for (size_t k = rank; k-- > 0;) {
    if (dims[k] == 1) continue;
    if (!md.empty() && sa[k] == ma.back() * md.back() && sb[k] == mb.back() * md.back()) {
      md.back() *= dims[k];
      continue;
    }
    md.push_back(dims[k]);
    ma.push_back(sa[k]);
    mb.push_back(sb[k]);
  }
  const int64_t inner = md.empty() ? 1 : md[0];
  const bool aStep = !ma.empty() && ma[0] != 0;
  const bool bStep = !mb.empty() && mb[0] != 0;
  const int64_t outer = n / inner;
  parallelRange(pool, outer, inner, [&](int64_t begin, int64_t end) {
    // Position of `begin` in the outer dims (md[1..]).
    std::vector<int64_t> idx(md.size(), 0);
    int64_t offA = 0, offB = 0;
    {
      int64_t rest = begin;
      for (size_t d = 1; d < md.size(); d++) {
        idx[d] = rest % md[d];
        rest /= md[d];
        offA += idx[d] * ma[d];
        offB += idx[d] * mb[d];
      }
    }
    for (int64_t o = begin; o < end; o++) {
      binaryRun(kind, pa + offA, aStep, pb + offB, bStep, py + o * inner, inner);
      for (size_t d = 1; d < md.size(); d++) {
        offA += ma[d];
        offB += mb[d];
        if (++idx[d] < md[d]) break;
        offA -= ma[d] * md[d];
        offB -= mb[d] * md[d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace cpu
}  // namespace flotilla
