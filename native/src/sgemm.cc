// Packed, blocked SGEMM after Goto & van de Geijn ("Anatomy of High-Performance Matrix Multiplication") and BLIS:
// A is packed into MR-row panels, B into NR-column panels, and a register-blocked microkernel computes an MR x NR
// tile of C from one panel of each. Row-major C puts the vector lanes along N (B's panels are loaded, A's values
// broadcast). The microkernels are compiled with per-function target attributes, so the module itself needs no
// -mavx512f and still runs on AVX2-only (or older) machines; the ISA is chosen once at run time.
//
// Loop order (per thread, over its own column range of C):
//   for pc (KC of K)            A[:, pc] packed whole: M x KC, a panel of MR x KC (18 KB at KC 384) sits in L1
//     for jc (NC of N)          B[pc, jc] packed (or prepacked): KC x NC, 1.5 MB in the 2 MB L2
//       for ir (MR rows)        one A panel...
//         for jr (NR columns)   ...against every B panel, streamed from L2
#include "sgemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "thread_pool.h"

namespace flotilla {

namespace {

// Blocking per ISA. MR x NR is the register tile: AVX-512 12 x 32 (24 zmm accumulators + 2 for B + 1 broadcast of
// the 32 registers), AVX2 6 x 16 (12 ymm accumulators of 16), generic 4 x 16 (the compiler vectorises it).
struct Blocking {
  int mr, nr;
  int64_t kc, nc;
};

constexpr Blocking kAvx512{12, 32, 384, 1024};
constexpr Blocking kAvx2{6, 16, 256, 512};
constexpr Blocking kGeneric{4, 16, 256, 512};

const Blocking& blockingFor(Isa isa) {
  return isa == Isa::Avx512 ? kAvx512 : isa == Isa::Avx2 ? kAvx2 : kGeneric;
}

Isa detectIsa() {
  __builtin_cpu_init();
  Isa best = Isa::Generic;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::Avx2;
  if (best == Isa::Avx2 && __builtin_cpu_supports("avx512f")) best = Isa::Avx512;
  const char* env = std::getenv("FLOTILLA_NATIVE_ISA");
  if (env != nullptr) {
    Isa asked = std::strcmp(env, "generic") == 0 ? Isa::Generic : std::strcmp(env, "avx2") == 0 ? Isa::Avx2 : best;
    if (asked < best) best = asked;
  }
  return best;
}

Isa& supportedIsa() {
  static Isa isa = detectIsa();
  return isa;
}

Isa& currentIsa() {
  static Isa isa = supportedIsa();
  return isa;
}

/** 64-byte aligned scratch that grows and is kept per thread: packing buffers are reused across products. */
class Scratch {
 public:
  ~Scratch() { std::free(data_); }
  float* get(size_t floats) {
    if (floats > capacity_) {
      std::free(data_);
      size_t bytes = ((floats * sizeof(float)) + 63) / 64 * 64;
      data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (data_ == nullptr) throw std::bad_alloc();
      capacity_ = floats;
    }
    return data_;
  }
 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

thread_local Scratch tlsPackA;
thread_local Scratch tlsPackB;

/** What a microkernel does with the tile it computed. */
struct TileStore {
  float alpha;        // scales the product
  float cScale;       // 0: C is overwritten (never read); otherwise C = cScale * C + product
  bool last;          // the last K block: apply the epilogue
  const GemmEpilogue* epi;
};

inline bool simpleActivation(Activation a) {
  return a == Activation::None || a == Activation::Relu || a == Activation::LeakyRelu;
}

/** The activations the vector stores don't do: applied to a finished tile, while it is in L1. */
void activateTile(float* c, int64_t ldc, int rows, int cols, const GemmEpilogue& epi) {
  if (simpleActivation(epi.activation)) return;
  for (int r = 0; r < rows; r++) {
    float* row = c + r * ldc;
    for (int j = 0; j < cols; j++) row[j] = activate(epi.activation, row[j], epi.activationAlpha);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Packing.

/**
 * Four source rows, each contiguous along k, written interleaved: dst[k * stride + r] = src_r[k] for r < 4. 4x4 SSE
 * transposes (SSE is the x86-64 baseline): packing with scalar stores cost 40% of a [2048 x 128] . [128 x 128].
 */
void interleave4(const float* s0, const float* s1, const float* s2, const float* s3, int64_t kc, float* dst,
                 int64_t stride) {
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    __m128 x0 = _mm_loadu_ps(s0 + k), x1 = _mm_loadu_ps(s1 + k), x2 = _mm_loadu_ps(s2 + k), x3 = _mm_loadu_ps(s3 + k);
    _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
    _mm_storeu_ps(dst + (k + 0) * stride, x0);
    _mm_storeu_ps(dst + (k + 1) * stride, x1);
    _mm_storeu_ps(dst + (k + 2) * stride, x2);
    _mm_storeu_ps(dst + (k + 3) * stride, x3);
  }
  for (; k < kc; k++) {
    float* out = dst + k * stride;
    out[0] = s0[k];
    out[1] = s1[k];
    out[2] = s2[k];
    out[3] = s3[k];
  }
}

/** A[i0 : i0+rows, k0 : k0+kc] into panels of mr rows: panel p holds, for each k, mr values (zero beyond rows). */
void packA(bool transA, const float* a, int64_t lda, int64_t i0, int64_t rows, int64_t k0, int64_t kc, int mr,
           float* dst) {
  for (int64_t p = 0; p < rows; p += mr) {
    int64_t h = std::min<int64_t>(mr, rows - p);
    float* panel = dst + p * kc;
    if (!transA) {
      int64_t r = 0;
      for (; r + 4 <= h; r += 4) {
        const float* src = a + (i0 + p + r) * lda + k0;
        interleave4(src, src + lda, src + 2 * lda, src + 3 * lda, kc, panel + r, mr);
      }
      for (; r < h; r++) {
        const float* src = a + (i0 + p + r) * lda + k0;
        for (int64_t k = 0; k < kc; k++) panel[k * mr + r] = src[k];
      }
    } else {
      for (int64_t k = 0; k < kc; k++) {
        const float* src = a + (k0 + k) * lda + i0 + p;
        for (int64_t r = 0; r < h; r++) panel[k * mr + r] = src[r];
      }
    }
    for (int64_t r = h; r < mr; r++) {
      for (int64_t k = 0; k < kc; k++) panel[k * mr + r] = 0.0f;
    }
  }
}

/** B[k0 : k0+kc, j0 : j0+cols] into panels of nr columns: panel q holds, for each k, nr values (zero beyond cols). */
void packB(bool transB, const float* b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t cols, int nr,
           float* dst) {
  for (int64_t q = 0; q < cols; q += nr) {
    int64_t w = std::min<int64_t>(nr, cols - q);
    float* panel = dst + q * kc;
    if (!transB) {
      for (int64_t k = 0; k < kc; k++) {
        const float* src = b + (k0 + k) * ldb + j0 + q;
        float* out = panel + k * nr;
        std::memcpy(out, src, static_cast<size_t>(w) * sizeof(float));
        for (int64_t j = w; j < nr; j++) out[j] = 0.0f;
      }
    } else {
      int64_t j = 0;
      for (; j + 4 <= w; j += 4) {
        const float* src = b + (j0 + q + j) * ldb + k0;
        interleave4(src, src + ldb, src + 2 * ldb, src + 3 * ldb, kc, panel + j, nr);
      }
      for (; j < w; j++) {
        const float* src = b + (j0 + q + j) * ldb + k0;
        for (int64_t k = 0; k < kc; k++) panel[k * nr + j] = src[k];
      }
      for (int64_t k = 0; k < kc; k++) {
        for (int64_t j = w; j < nr; j++) panel[k * nr + j] = 0.0f;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Microkernels: C[rows x cols] (op)= alpha * Ap[kc x MR] . Bp[kc x NR], rows <= MR and cols <= NR.

template <int R>
__attribute__((target("avx512f,avx512vl,fma"))) void kernelAvx512(int64_t kc, const float* ap, const float* bp,
                                                                  float* c, int64_t ldc, int cols,
                                                                  const TileStore& ts, int64_t row0,
                                                                  int64_t col0) {
  constexpr int MR = 12;
  __m512 acc0[R], acc1[R];
  for (int r = 0; r < R; r++) {
    acc0[r] = _mm512_setzero_ps();
    acc1[r] = _mm512_setzero_ps();
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; k++) {
    const __m512 b0 = _mm512_load_ps(bp + k * 32);
    const __m512 b1 = _mm512_load_ps(bp + k * 32 + 16);
    const float* ak = ap + k * MR;
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
      const __m512 av = _mm512_set1_ps(ak[r]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
  }
  const __mmask16 m0 = cols >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32   ? static_cast<__mmask16>(0xFFFF)
                       : cols <= 16 ? static_cast<__mmask16>(0)
                                    : static_cast<__mmask16>((1u << (cols - 16)) - 1);
  const __m512 alpha = _mm512_set1_ps(ts.alpha);
  const __m512 cScale = _mm512_set1_ps(ts.cScale);
  const GemmEpilogue& e = *ts.epi;
  __m512 cb0 = _mm512_setzero_ps(), cb1 = _mm512_setzero_ps();
  const bool colBias = ts.last && e.colBias != nullptr;
  if (colBias) {
    const __m512 s = _mm512_set1_ps(e.biasScale);
    cb0 = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m0, e.colBias + col0));
    cb1 = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m1, e.colBias + col0 + 16));
  }
  const bool relu = ts.last && e.activation == Activation::Relu;
  const bool leaky = ts.last && e.activation == Activation::LeakyRelu;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 slope = _mm512_set1_ps(e.activationAlpha);
#pragma GCC unroll 12
  for (int r = 0; r < R; r++) {
    float* row = c + r * ldc;
    __m512 v0 = _mm512_mul_ps(acc0[r], alpha);
    __m512 v1 = _mm512_mul_ps(acc1[r], alpha);
    if (ts.cScale != 0.0f) {
      v0 = _mm512_fmadd_ps(cScale, _mm512_maskz_loadu_ps(m0, row), v0);
      v1 = _mm512_fmadd_ps(cScale, _mm512_maskz_loadu_ps(m1, row + 16), v1);
    }
    if (ts.last) {
      if (colBias) {
        v0 = _mm512_add_ps(v0, cb0);
        v1 = _mm512_add_ps(v1, cb1);
      }
      if (e.rowBias != nullptr) {
        const __m512 rb = _mm512_set1_ps(e.biasScale * e.rowBias[row0 + r]);
        v0 = _mm512_add_ps(v0, rb);
        v1 = _mm512_add_ps(v1, rb);
      }
      if (relu) {
        v0 = _mm512_max_ps(v0, zero);
        v1 = _mm512_max_ps(v1, zero);
      } else if (leaky) {
        v0 = _mm512_mask_mul_ps(v0, _mm512_cmp_ps_mask(v0, zero, _CMP_LT_OQ), v0, slope);
        v1 = _mm512_mask_mul_ps(v1, _mm512_cmp_ps_mask(v1, zero, _CMP_LT_OQ), v1, slope);
      }
    }
    _mm512_mask_storeu_ps(row, m0, v0);
    _mm512_mask_storeu_ps(row + 16, m1, v1);
  }
}

__attribute__((target("avx2,fma"))) inline __m256i avx2Mask(int n) {
  // Lanes [0, n) set.
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

template <int R>
__attribute__((target("avx2,fma"))) void kernelAvx2(int64_t kc, const float* ap, const float* bp, float* c,
                                                    int64_t ldc, int cols, const TileStore& ts, int64_t row0,
                                                    int64_t col0) {
  constexpr int MR = 6;
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; r++) {
    acc0[r] = _mm256_setzero_ps();
    acc1[r] = _mm256_setzero_ps();
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_load_ps(bp + k * 16);
    const __m256 b1 = _mm256_load_ps(bp + k * 16 + 8);
    const float* ak = ap + k * MR;
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      const __m256 av = _mm256_broadcast_ss(ak + r);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
  }
  const __m256i m0 = avx2Mask(std::min(cols, 8));
  const __m256i m1 = avx2Mask(std::max(cols - 8, 0));
  const __m256 alpha = _mm256_set1_ps(ts.alpha);
  const __m256 cScale = _mm256_set1_ps(ts.cScale);
  const GemmEpilogue& e = *ts.epi;
  __m256 cb0 = _mm256_setzero_ps(), cb1 = _mm256_setzero_ps();
  const bool colBias = ts.last && e.colBias != nullptr;
  if (colBias) {
    const __m256 s = _mm256_set1_ps(e.biasScale);
    cb0 = _mm256_mul_ps(s, _mm256_maskload_ps(e.colBias + col0, m0));
    cb1 = _mm256_mul_ps(s, _mm256_maskload_ps(e.colBias + col0 + 8, m1));
  }
  const bool relu = ts.last && e.activation == Activation::Relu;
  const bool leaky = ts.last && e.activation == Activation::LeakyRelu;
  const __m256 zero = _mm256_setzero_ps();
  const __m256 slope = _mm256_set1_ps(e.activationAlpha);
  for (int r = 0; r < R; r++) {
    float* row = c + r * ldc;
    __m256 v0 = _mm256_mul_ps(acc0[r], alpha);
    __m256 v1 = _mm256_mul_ps(acc1[r], alpha);
    if (ts.cScale != 0.0f) {
      v0 = _mm256_fmadd_ps(cScale, _mm256_maskload_ps(row, m0), v0);
      v1 = _mm256_fmadd_ps(cScale, _mm256_maskload_ps(row + 8, m1), v1);
    }
    if (ts.last) {
      if (colBias) {
        v0 = _mm256_add_ps(v0, cb0);
        v1 = _mm256_add_ps(v1, cb1);
      }
      if (e.rowBias != nullptr) {
        const __m256 rb = _mm256_set1_ps(e.biasScale * e.rowBias[row0 + r]);
        v0 = _mm256_add_ps(v0, rb);
        v1 = _mm256_add_ps(v1, rb);
      }
      if (relu) {
        v0 = _mm256_max_ps(v0, zero);
        v1 = _mm256_max_ps(v1, zero);
      } else if (leaky) {
        v0 = _mm256_blendv_ps(v0, _mm256_mul_ps(v0, slope), _mm256_cmp_ps(v0, zero, _CMP_LT_OQ));
        v1 = _mm256_blendv_ps(v1, _mm256_mul_ps(v1, slope), _mm256_cmp_ps(v1, zero, _CMP_LT_OQ));
      }
    }
    _mm256_maskstore_ps(row, m0, v0);
    _mm256_maskstore_ps(row + 8, m1, v1);
  }
}

/** Portable kernel: plain loops over a 4 x 16 tile (SSE2 by default on x86-64, whatever the compiler has elsewhere). */
void kernelGeneric(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int rows, int cols,
                   const TileStore& ts, int64_t row0, int64_t col0) {
  constexpr int MR = 4, NR = 16;
  float acc[MR][NR] = {};
  for (int64_t k = 0; k < kc; k++) {
    const float* bk = bp + k * NR;
    for (int r = 0; r < MR; r++) {
      const float av = ap[k * MR + r];
      for (int j = 0; j < NR; j++) acc[r][j] += av * bk[j];
    }
  }
  const GemmEpilogue& e = *ts.epi;
  for (int r = 0; r < rows; r++) {
    float* row = c + r * ldc;
    for (int j = 0; j < cols; j++) {
      float v = acc[r][j] * ts.alpha;
      if (ts.cScale != 0.0f) v += ts.cScale * row[j];
      if (ts.last) {
        if (e.colBias != nullptr) v += e.biasScale * e.colBias[col0 + j];
        if (e.rowBias != nullptr) v += e.biasScale * e.rowBias[row0 + r];
        if (e.activation == Activation::Relu) v = v > 0.0f ? v : 0.0f;
        else if (e.activation == Activation::LeakyRelu) v = v < 0.0f ? v * e.activationAlpha : v;
      }
      row[j] = v;
    }
  }
}

using Avx512Kernel = void (*)(int64_t, const float*, const float*, float*, int64_t, int, const TileStore&, int64_t,
                              int64_t);

template <int... Rs>
constexpr std::array<Avx512Kernel, sizeof...(Rs)> avx512Table(std::integer_sequence<int, Rs...>) {
  return {&kernelAvx512<Rs + 1>...};
}
template <int... Rs>
constexpr std::array<Avx512Kernel, sizeof...(Rs)> avx2Table(std::integer_sequence<int, Rs...>) {
  return {&kernelAvx2<Rs + 1>...};
}

const auto kAvx512Kernels = avx512Table(std::make_integer_sequence<int, 12>{});
const auto kAvx2Kernels = avx2Table(std::make_integer_sequence<int, 6>{});

void runKernel(Isa isa, int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int rows, int cols,
               const TileStore& ts, int64_t row0, int64_t col0) {
  switch (isa) {
    case Isa::Avx512:
      kAvx512Kernels[rows - 1](kc, ap, bp, c, ldc, cols, ts, row0, col0);
      break;
    case Isa::Avx2:
      kAvx2Kernels[rows - 1](kc, ap, bp, c, ldc, cols, ts, row0, col0);
      break;
    default:
      kernelGeneric(kc, ap, bp, c, ldc, rows, cols, ts, row0, col0);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The blocked product over one column range of C.

struct Problem {
  bool transA, transB;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;     // null when packed
  int64_t ldb;
  const PackedB* packed;
  float beta;
  float* c;
  int64_t ldc;
  const GemmEpilogue* epi;
};

void gemmColumns(const Problem& p, Isa isa, int64_t j0, int64_t j1) {
  const Blocking& bl = blockingFor(isa);
  const int64_t kcMax = bl.kc;
  float* ap = tlsPackA.get(static_cast<size_t>(((p.m + bl.mr - 1) / bl.mr) * bl.mr * kcMax));
  float* bpBuf = p.packed == nullptr ? tlsPackB.get(static_cast<size_t>(kcMax * bl.nc)) : nullptr;
  for (int64_t pc = 0; pc < p.k; pc += kcMax) {
    const int64_t kc = std::min(kcMax, p.k - pc);
    packA(p.transA, p.a, p.lda, 0, p.m, pc, kc, bl.mr, ap);
    const TileStore ts{p.alpha, pc == 0 ? p.beta : 1.0f, pc + kc >= p.k, p.epi};
    for (int64_t jc = j0; jc < j1; jc += bl.nc) {
      const int64_t nc = std::min(bl.nc, j1 - jc);
      const float* bp;
      int64_t panelStride = kc * bl.nr;
      if (p.packed != nullptr) {
        bp = nullptr;  // per panel below
      } else {
        packB(p.transB, p.b, p.ldb, pc, kc, jc, nc, bl.nr, bpBuf);
        bp = bpBuf;
      }
      for (int64_t ir = 0; ir < p.m; ir += bl.mr) {
        const int rows = static_cast<int>(std::min<int64_t>(bl.mr, p.m - ir));
        const float* apanel = ap + ir * kc;
        for (int64_t jr = 0; jr < nc; jr += bl.nr) {
          const int cols = static_cast<int>(std::min<int64_t>(bl.nr, nc - jr));
          const float* bpanel = p.packed != nullptr ? p.packed->panel(pc / kcMax, (jc + jr) / bl.nr)
                                                    : bp + (jr / bl.nr) * panelStride;
          float* ctile = p.c + ir * p.ldc + jc + jr;
          runKernel(isa, kc, apanel, bpanel, ctile, p.ldc, rows, cols, ts, ir, jc + jr);
          if (ts.last) activateTile(ctile, p.ldc, rows, cols, *p.epi);
        }
      }
    }
  }
}

/** Products below this many multiply-adds run on one thread: waking another costs more than it saves... */
constexpr double kParallelMacs = 1 << 21;
/**
 * ...unless B is large: a product with few rows (batch 1 or 8 through a layer's weights) streams B from L3 once and
 * is bound by one core's bandwidth, so two cores reading half of B each take about half the time.
 */
constexpr double kParallelBElements = 1 << 17;

void gemmRows(const Problem& p, Isa isa, ThreadPool* pool) {
  const Blocking& bl = blockingFor(isa);
  const double macs = static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  const int threads = pool == nullptr ? 1 : pool->size();
  const double bElements = static_cast<double>(p.k) * static_cast<double>(p.n);
  if (threads <= 1 || (macs < kParallelMacs && bElements < kParallelBElements)) {
    gemmColumns(p, isa, 0, p.n);
    return;
  }
  // Split C by columns or by rows, whichever packs less twice: by columns each thread packs all of A (M x K), by
  // rows all of B (K x N), unless B was packed ahead of time, when rows cost nothing extra.
  const int64_t panels = (p.n + bl.nr - 1) / bl.nr;
  const int64_t rowPanels = (p.m + bl.mr - 1) / bl.mr;
  const bool rowsPossible = rowPanels >= threads * 2;
  const bool columnsPossible = panels >= threads * 2;
  const bool byRows = rowsPossible && (!columnsPossible || p.packed != nullptr || p.m >= p.n);
  if (!byRows && columnsPossible) {
    const int64_t per = (panels + threads - 1) / threads;
    pool->parallelFor(threads, [&](int64_t t) {
      const int64_t j0 = std::min(p.n, t * per * bl.nr);
      const int64_t j1 = std::min(p.n, (t + 1) * per * bl.nr);
      if (j0 < j1) gemmColumns(p, isa, j0, j1);
    });
    return;
  }
  if (!byRows) {
    gemmColumns(p, isa, 0, p.n);
    return;
  }
  // By rows (whole MR panels), each part a product of its own.
  const int64_t per = (rowPanels + threads - 1) / threads;
  pool->parallelFor(threads, [&](int64_t t) {
    const int64_t i0 = std::min(p.m, t * per * bl.mr);
    const int64_t i1 = std::min(p.m, (t + 1) * per * bl.mr);
    if (i0 >= i1) return;
    Problem part = p;
    part.m = i1 - i0;
    part.a = p.transA ? p.a + i0 : p.a + i0 * p.lda;
    part.c = p.c + i0 * p.ldc;
    GemmEpilogue epi = *p.epi;
    if (epi.rowBias != nullptr) epi.rowBias += i0;
    part.epi = &epi;
    gemmColumns(part, isa, 0, p.n);
  });
}

/** C = beta * C (then the epilogue) when there is nothing to multiply (K = 0), as BLAS does. */
void scaleOnly(int64_t m, int64_t n, float beta, float* c, int64_t ldc, const GemmEpilogue& epi) {
  for (int64_t i = 0; i < m; i++) {
    float* row = c + i * ldc;
    for (int64_t j = 0; j < n; j++) {
      float v = beta == 0.0f ? 0.0f : beta * row[j];
      if (epi.colBias != nullptr) v += epi.biasScale * epi.colBias[j];
      if (epi.rowBias != nullptr) v += epi.biasScale * epi.rowBias[i];
      row[j] = activate(epi.activation, v, epi.activationAlpha);
    }
  }
}

}  // namespace

// -----------------------------------------------------------------------------------------------------------------

Isa gemmIsa() { return currentIsa(); }

void setGemmIsa(Isa isa) { currentIsa() = std::min(isa, supportedIsa()); }

const char* isaName(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "generic";
  }
}

float activate(Activation act, float x, float alpha) {
  switch (act) {
    case Activation::None: return x;
    case Activation::Relu: return x > 0.0f ? x : 0.0f;
    case Activation::LeakyRelu: return x < 0.0f ? x * alpha : x;
    case Activation::Sigmoid: {
      // Split by sign so exp never overflows.
      if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
      const float e = std::exp(x);
      return e / (1.0f + e);
    }
    case Activation::Tanh: return std::tanh(x);
    case Activation::Gelu: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Activation::GeluTanh: {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
  }
  return x;
}

PackedB::PackedB(bool transB, int64_t k, int64_t n, const float* b, int64_t ldb)
    : k_(k), n_(n), isa_(gemmIsa()) {
  const Blocking& bl = blockingFor(isa_);
  nr_ = bl.nr;
  kc_ = bl.kc;
  panels_ = (n + nr_ - 1) / nr_;
  kBlocks_ = (k + kc_ - 1) / kc_;
  packed_.assign(static_cast<size_t>(panels_ * kBlocks_ * kc_ * nr_) + 16, 0.0f);
  // Panels must be 64-byte aligned for the aligned loads: offset into the vector to the first aligned float.
  for (int64_t kb = 0; kb < kBlocks_; kb++) {
    const int64_t kc = std::min(kc_, k - kb * kc_);
    for (int64_t q = 0; q < panels_; q++) {
      const int64_t cols = std::min(nr_, n - q * nr_);
      packB(transB, b, ldb, kb * kc_, kc, q * nr_, cols, static_cast<int>(nr_), const_cast<float*>(panel(kb, q)));
    }
  }
}

const float* PackedB::panel(int64_t kBlock, int64_t nPanel) const {
  const uintptr_t base = reinterpret_cast<uintptr_t>(packed_.data());
  const float* aligned = reinterpret_cast<const float*>((base + 63) & ~static_cast<uintptr_t>(63));
  // Within a K block the panels are each kc_ x nr_ (kc_ rows reserved even in a short last block).
  return aligned + (kBlock * panels_ + nPanel) * kc_ * nr_;
}

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue,
           ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    scaleOnly(m, n, beta, c, ldc, epilogue);
    return;
  }
  const Problem p{transA, transB, m, n, k, alpha, a, lda, b, ldb, nullptr, beta, c, ldc, &epilogue};
  gemmRows(p, gemmIsa(), pool);
}

void sgemmPacked(bool transA, int64_t m, float alpha, const float* a, int64_t lda, const PackedB& b, float* c,
                 int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool) {
  if (m <= 0 || b.n() <= 0) return;
  if (b.k() <= 0) {
    scaleOnly(m, b.n(), 0.0f, c, ldc, epilogue);
    return;
  }
  // Packed for the ISA of its time: the panels' width is the microkernel's. Only tests switch ISAs in a process.
  if (b.isa() != gemmIsa()) {
    throw std::logic_error(std::string("B was packed for ") + isaName(b.isa()) + " but the ISA is now " +
                           isaName(gemmIsa()) + "; pack it again");
  }
  const Problem p{transA, false, m, b.n(), b.k(), alpha, a, lda, nullptr, 0, &b, 0.0f, c, ldc, &epilogue};
  gemmRows(p, b.isa(), pool);
}

}  // namespace flotilla
