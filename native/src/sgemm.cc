// Packed, blocked SGEMM after Goto & van de Geijn ("Anatomy of High-Performance Matrix Multiplication") and BLIS:
// A is packed into MR-row panels, B into NR-column panels, and a register-blocked microkernel computes an MR x NR
// tile of C from one panel of each. Row-major C puts the vector lanes along N (B's panels are loaded, A's values
// broadcast). The microkernels are compiled with per-function target attributes, so the module itself needs no
// -mavx512f and still runs on AVX2-only (or older) machines; the ISA is chosen once at run time.
//
// The SIMD microkernels also read either operand in place, unpacked, where packing would cost more than it saves:
// a row-major A (its rows are the panel's rows, read with a stride), and a small row-major B (its rows are the
// panel's rows). The example models' products are small (K = 32..784): packing A for a [2048 x 128] . [128 x 128]
// cost as much as a fifth of the product, and packing both operands of an attention head's 64 x 64 x 32 a third.
//
// One product is cut into chunks of whole panels along the longer side of C: row chunks (B shared: packed ahead of
// time, read in place, or packed once up front; each chunk packs its own rows of A) or column chunks (A shared: read
// in place or packed once up front; each chunk packs its own columns of B). Per chunk:
//   for pc (KC of K)              the chunk's rows of A (MC x KC, in L2) or columns of B (KC x NC) packed
//     for jc (NC of N)
//       for ir (MR rows)          one A panel (MR x KC, 18 KB at KC 384) stays in L1...
//         for jr (NR columns)     ...against the B panels, streamed from L2
// Chunks are spread over the pool by parallelItems: each thread owns a contiguous share of them and takes
// the others' leftovers from the back when it is done, so a helper thread that was asleep when the product started
// (waking one costs 10-50 us here) delays nothing: the caller has taken its work by the time it arrives.
#include "sgemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "cpu_math.h"
#include "cpu_math_avx512.h"
#include "thread_pool.h"

namespace flotilla {

namespace {

// Blocking per ISA. MR x NR is the register tile: AVX-512 12 x 32 (24 zmm accumulators + 2 for B + 1 broadcast of
// the 32 registers), AVX2 6 x 16 (12 ymm accumulators of 16), generic 4 x 16 (the compiler vectorises it).
// MC is the rows of A a row chunk packs at most (MC x KC stays in L2 next to the B panels).
struct Blocking {
  int mr, nr;
  int64_t kc, nc, mc;
};

constexpr Blocking kAvx512{12, 32, 384, 1024, 96};
constexpr Blocking kAvx2{6, 16, 256, 512, 96};
constexpr Blocking kGeneric{4, 16, 256, 512, 64};

const Blocking& blockingFor(Isa isa) {
  return isa == Isa::Avx512 ? kAvx512 : isa == Isa::Avx2 ? kAvx2 : kGeneric;
}

/**
 * K cut into blocks of at most KC, all about the same size: K = 784 is 264 + 264 + 256, not 384 + 384 + 16, whose
 * last block would read and write all of C again for 16 multiply-adds per element.
 */
int64_t blockK(const Blocking& bl, int64_t k) {
  const int64_t blocks = (k + bl.kc - 1) / bl.kc;
  const int64_t kc = (k + blocks - 1) / blocks;
  return (kc + 3) / 4 * 4;   // whole 4 x 4 transposes when packing (KC is a multiple of 4, so still <= KC)
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

/** One microkernel call: C[rows x cols] (op)= alpha * A[rows x kc] . B[kc x cols], rows <= MR, cols <= NR. */
struct Tile {
  int64_t kc;
  const float* a;     // packed: a[k * MR + r]; in place: a[r * lda + k]
  int64_t lda;
  const float* b;     // b[k * ldb + j]: a packed panel (ldb = NR, zero-padded to NR columns) or B in place
  int64_t ldb;
  float* c;
  int64_t ldc;
  int rows, cols;
  int64_t row0, col0;   // the tile's place in C, for the biases
};

inline bool simpleActivation(Activation a) {
  return a == Activation::None || a == Activation::Relu || a == Activation::LeakyRelu;
}

// ---------------------------------------------------------------------------------------------------------------
// The activations the vector stores don't do (Sigmoid, Tanh, the GELUs), applied to a finished tile while it is in
// L1: cpu_math_avx512.h's functions for the AVX-512 kernels, cpu_math.h's branch-free ones in loops the compiler
// vectorises for the others. A transformer's Gelu after its up-projection then needs no pass of its own over C
// and no fork-join.

#define FLOTILLA_TILE_LOOPS(F)                                                          \
  switch (act) {                                                                        \
    case Activation::Sigmoid: F(cpu::fastSigmoid); break;                               \
    case Activation::Tanh: F(cpu::fastTanh); break;                                     \
    case Activation::Gelu: F(cpu::fastGelu); break;                                     \
    case Activation::GeluTanh: F(cpu::fastGeluTanh); break;                             \
    default: break;                                                                     \
  }
#define FLOTILLA_TILE_LOOP(fn)                                                          \
  for (int r = 0; r < rows; r++) {                                                      \
    float* row = c + r * ldc;                                                           \
    _Pragma("omp simd") for (int j = 0; j < cols; j++) row[j] = fn(row[j]);             \
  }

// GCC 12's _mm512_max_ps, min, roundscale and scalef are built on _mm512_undefined_ps, which -Wmaybe-uninitialized
// and -Wuninitialized flag inside target("avx512f") functions: a false positive in the header, not in this code. Off
// for the AVX-512 code below (the activations and the kernel's epilogue).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

/** AVX-512: cpu_math_avx512.h's functions, 32 columns a row in two masked vectors. */
template <__m512 (*F)(__m512)>
__attribute__((target("avx512f"))) void mapTileAvx512(float* c, int64_t ldc, int rows, int cols) {
  const __mmask16 m0 = cols >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32   ? static_cast<__mmask16>(0xFFFF)
                       : cols <= 16 ? static_cast<__mmask16>(0)
                                    : static_cast<__mmask16>((1u << (cols - 16)) - 1);
  for (int r = 0; r < rows; r++) {
    float* row = c + r * ldc;
    _mm512_mask_storeu_ps(row, m0, F(_mm512_maskz_loadu_ps(m0, row)));
    if (m1 != 0) _mm512_mask_storeu_ps(row + 16, m1, F(_mm512_maskz_loadu_ps(m1, row + 16)));
  }
}

void activateTileAvx512(float* c, int64_t ldc, int rows, int cols, Activation act) {
  switch (act) {
    case Activation::Sigmoid: mapTileAvx512<cpu::sigmoid512>(c, ldc, rows, cols); break;
    case Activation::Tanh: mapTileAvx512<cpu::tanh512>(c, ldc, rows, cols); break;
    case Activation::Gelu: mapTileAvx512<cpu::gelu512>(c, ldc, rows, cols); break;
    case Activation::GeluTanh: mapTileAvx512<cpu::geluTanh512>(c, ldc, rows, cols); break;
    default: break;
  }
}
#pragma GCC diagnostic pop

__attribute__((target("avx2,fma"))) void activateTileAvx2(float* c, int64_t ldc, int rows, int cols,
                                                          Activation act) {
  FLOTILLA_TILE_LOOPS(FLOTILLA_TILE_LOOP)
}

void activateTileGeneric(float* c, int64_t ldc, int rows, int cols, Activation act) {
  FLOTILLA_TILE_LOOPS(FLOTILLA_TILE_LOOP)
}

#undef FLOTILLA_TILE_LOOP
#undef FLOTILLA_TILE_LOOPS

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

/**
 * A[i0 : i0+rows, k0 : k0+kc] into panels of mr rows: panel p holds, for each k, mr values. Rows past the end are
 * zeroed only for the generic kernel, which computes all mr rows; the SIMD kernels read just the tile's rows.
 */
void packA(bool transA, const float* a, int64_t lda, int64_t i0, int64_t rows, int64_t k0, int64_t kc, int mr,
           bool zeroPad, float* dst) {
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
    if (zeroPad) {
      for (int64_t r = h; r < mr; r++) {
        for (int64_t k = 0; k < kc; k++) panel[k * mr + r] = 0.0f;
      }
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
// Microkernels: C[rows x cols] (op)= alpha * A[rows x kc] . B[kc x NR], rows <= MR and cols <= NR. B's loads are
// whole NR-wide rows: a packed panel is zero-padded, and B is read in place only for whole panels.
//
// An FMA has 4 cycles of latency and two issue per cycle, so 8 or more independent accumulator chains keep both
// busy. A tile of R rows has 2R chains; with few rows (a batch-1 product, the last rows of a product) K is split S
// ways into separate accumulators over successive k, summed at the end: R = 1 ran at a quarter of the FMA
// throughput without. (Separate arrays per split rather than one [S][R]: GCC kept the latter in memory.)

/** Splits of K for an R-row tile: about 12 chains, within the registers (AVX-512: 32, AVX2: 16). */
template <int R, bool kWide>
constexpr int splitK() {
  constexpr int s = kWide ? (12 + 2 * R - 1) / (2 * R) : 12 / (2 * R);
  return s < 1 ? 1 : s > 4 ? 4 : s;
}

template <int R, bool kRowsA>
__attribute__((target("avx512f,avx512vl,fma"), always_inline)) inline void stepAvx512(const float* ap, int64_t lda,
                                                                                      const float* bk, int64_t k,
                                                                                      __m512 (&acc0)[R],
                                                                                      __m512 (&acc1)[R]) {
  constexpr int MR = 12;
  __m512 b0 = _mm512_loadu_ps(bk);
  __m512 b1 = _mm512_loadu_ps(bk + 16);
  // In registers: GCC otherwise folds the loads into each row's FMA, and a few-row tile then loads B R times.
  __asm__("" : "+v"(b0), "+v"(b1));
#pragma GCC unroll 12
  for (int r = 0; r < R; r++) {
    const __m512 av = _mm512_set1_ps(kRowsA ? ap[r * lda + k] : ap[k * MR + r]);
    acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
    acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
  }
}

#pragma GCC diagnostic push   // the same false positive from _mm512_max_ps (Relu) as above
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
template <int R, bool kRowsA>
__attribute__((target("avx512f,avx512vl,fma"))) void kernelAvx512(const Tile& t, const TileStore& ts) {
  constexpr int S = splitK<R, true>();
  __m512 p0[R], p1[R], q0[R], q1[R], u0[R], u1[R], w0[R], w1[R];
  for (int r = 0; r < R; r++) {
    p0[r] = p1[r] = q0[r] = q1[r] = u0[r] = u1[r] = w0[r] = w1[r] = _mm512_setzero_ps();
  }
  const float* ap = t.a;
  const float* bp = t.b;
  const int64_t lda = t.lda, ldb = t.ldb, kc = t.kc;
  int64_t k = 0;
  if constexpr (S > 1) {
    for (; k + S <= kc; k += S) {
      stepAvx512<R, kRowsA>(ap, lda, bp + k * ldb, k, p0, p1);
      stepAvx512<R, kRowsA>(ap, lda, bp + (k + 1) * ldb, k + 1, q0, q1);
      if constexpr (S > 2) stepAvx512<R, kRowsA>(ap, lda, bp + (k + 2) * ldb, k + 2, u0, u1);
      if constexpr (S > 3) stepAvx512<R, kRowsA>(ap, lda, bp + (k + 3) * ldb, k + 3, w0, w1);
    }
  }
#pragma GCC unroll 4
  for (; k < kc; k++) stepAvx512<R, kRowsA>(ap, lda, bp + k * ldb, k, p0, p1);
  for (int r = 0; r < R; r++) {
    if constexpr (S > 2) {
      q0[r] = _mm512_add_ps(q0[r], u0[r]);
      q1[r] = _mm512_add_ps(q1[r], u1[r]);
    }
    if constexpr (S > 3) {
      p0[r] = _mm512_add_ps(p0[r], w0[r]);
      p1[r] = _mm512_add_ps(p1[r], w1[r]);
    }
    if constexpr (S > 1) {
      p0[r] = _mm512_add_ps(p0[r], q0[r]);
      p1[r] = _mm512_add_ps(p1[r], q1[r]);
    }
  }
  const int cols = t.cols;
  const __mmask16 m0 = cols >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32   ? static_cast<__mmask16>(0xFFFF)
                       : cols <= 16 ? static_cast<__mmask16>(0)
                                    : static_cast<__mmask16>((1u << (cols - 16)) - 1);
  const bool scale = ts.alpha != 1.0f;
  const __m512 alpha = _mm512_set1_ps(ts.alpha);
  const __m512 cScale = _mm512_set1_ps(ts.cScale);
  const GemmEpilogue& e = *ts.epi;
  __m512 cb0 = _mm512_setzero_ps(), cb1 = _mm512_setzero_ps();
  const bool colBias = ts.last && e.colBias != nullptr;
  if (colBias) {
    const __m512 s = _mm512_set1_ps(e.biasScale);
    cb0 = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m0, e.colBias + t.col0));
    cb1 = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m1, e.colBias + t.col0 + 16));
  }
  const bool relu = ts.last && e.activation == Activation::Relu;
  const bool leaky = ts.last && e.activation == Activation::LeakyRelu;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 slope = _mm512_set1_ps(e.activationAlpha);
  float* c = t.c;
  const int64_t ldc = t.ldc;
#pragma GCC unroll 12
  for (int r = 0; r < R; r++) {
    float* row = c + r * ldc;
    __m512 v0 = scale ? _mm512_mul_ps(p0[r], alpha) : p0[r];
    __m512 v1 = scale ? _mm512_mul_ps(p1[r], alpha) : p1[r];
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
        const __m512 rb = _mm512_set1_ps(e.biasScale * e.rowBias[t.row0 + r]);
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
  if (ts.last && !simpleActivation(e.activation)) activateTileAvx512(c, ldc, R, cols, e.activation);
}
#pragma GCC diagnostic pop

__attribute__((target("avx2,fma"))) inline __m256i avx2Mask(int n) {
  // Lanes [0, n) set.
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

template <int R, bool kRowsA>
__attribute__((target("avx2,fma"), always_inline)) inline void stepAvx2(const float* ap, int64_t lda,
                                                                        const float* bk, int64_t k,
                                                                        __m256 (&acc0)[R], __m256 (&acc1)[R]) {
  constexpr int MR = 6;
  __m256 b0 = _mm256_loadu_ps(bk);
  __m256 b1 = _mm256_loadu_ps(bk + 8);
  // In registers: GCC otherwise folds the loads into each row's FMA, and a few-row tile then loads B R times.
  __asm__("" : "+v"(b0), "+v"(b1));
#pragma GCC unroll 6
  for (int r = 0; r < R; r++) {
    const __m256 av = _mm256_broadcast_ss(kRowsA ? ap + r * lda + k : ap + k * MR + r);
    acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
    acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
  }
}

template <int R, bool kRowsA>
__attribute__((target("avx2,fma"))) void kernelAvx2(const Tile& t, const TileStore& ts) {
  constexpr int S = splitK<R, false>();
  __m256 p0[R], p1[R], q0[R], q1[R], u0[R], u1[R], w0[R], w1[R];
  for (int r = 0; r < R; r++) {
    p0[r] = p1[r] = q0[r] = q1[r] = u0[r] = u1[r] = w0[r] = w1[r] = _mm256_setzero_ps();
  }
  const float* ap = t.a;
  const float* bp = t.b;
  const int64_t lda = t.lda, ldb = t.ldb, kc = t.kc;
  int64_t k = 0;
  if constexpr (S > 1) {
    for (; k + S <= kc; k += S) {
      stepAvx2<R, kRowsA>(ap, lda, bp + k * ldb, k, p0, p1);
      stepAvx2<R, kRowsA>(ap, lda, bp + (k + 1) * ldb, k + 1, q0, q1);
      if constexpr (S > 2) stepAvx2<R, kRowsA>(ap, lda, bp + (k + 2) * ldb, k + 2, u0, u1);
      if constexpr (S > 3) stepAvx2<R, kRowsA>(ap, lda, bp + (k + 3) * ldb, k + 3, w0, w1);
    }
  }
#pragma GCC unroll 4
  for (; k < kc; k++) stepAvx2<R, kRowsA>(ap, lda, bp + k * ldb, k, p0, p1);
  for (int r = 0; r < R; r++) {
    if constexpr (S > 2) {
      q0[r] = _mm256_add_ps(q0[r], u0[r]);
      q1[r] = _mm256_add_ps(q1[r], u1[r]);
    }
    if constexpr (S > 3) {
      p0[r] = _mm256_add_ps(p0[r], w0[r]);
      p1[r] = _mm256_add_ps(p1[r], w1[r]);
    }
    if constexpr (S > 1) {
      p0[r] = _mm256_add_ps(p0[r], q0[r]);
      p1[r] = _mm256_add_ps(p1[r], q1[r]);
    }
  }
  const int cols = t.cols;
  const __m256i m0 = avx2Mask(std::min(cols, 8));
  const __m256i m1 = avx2Mask(std::max(cols - 8, 0));
  const bool scale = ts.alpha != 1.0f;
  const __m256 alpha = _mm256_set1_ps(ts.alpha);
  const __m256 cScale = _mm256_set1_ps(ts.cScale);
  const GemmEpilogue& e = *ts.epi;
  __m256 cb0 = _mm256_setzero_ps(), cb1 = _mm256_setzero_ps();
  const bool colBias = ts.last && e.colBias != nullptr;
  if (colBias) {
    const __m256 s = _mm256_set1_ps(e.biasScale);
    cb0 = _mm256_mul_ps(s, _mm256_maskload_ps(e.colBias + t.col0, m0));
    cb1 = _mm256_mul_ps(s, _mm256_maskload_ps(e.colBias + t.col0 + 8, m1));
  }
  const bool relu = ts.last && e.activation == Activation::Relu;
  const bool leaky = ts.last && e.activation == Activation::LeakyRelu;
  const __m256 zero = _mm256_setzero_ps();
  const __m256 slope = _mm256_set1_ps(e.activationAlpha);
  float* c = t.c;
  const int64_t ldc = t.ldc;
  for (int r = 0; r < R; r++) {
    float* row = c + r * ldc;
    __m256 v0 = scale ? _mm256_mul_ps(p0[r], alpha) : p0[r];
    __m256 v1 = scale ? _mm256_mul_ps(p1[r], alpha) : p1[r];
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
        const __m256 rb = _mm256_set1_ps(e.biasScale * e.rowBias[t.row0 + r]);
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
  if (ts.last && !simpleActivation(e.activation)) activateTileAvx2(c, ldc, R, cols, e.activation);
}

/**
 * Portable kernel: plain loops over a 4 x 16 tile (SSE2 by default on x86-64, whatever the compiler has elsewhere).
 * Both operands packed, A zero-padded to 4 rows.
 */
void kernelGeneric(const Tile& t, const TileStore& ts) {
  constexpr int MR = 4, NR = 16;
  float acc[MR][NR] = {};
  for (int64_t k = 0; k < t.kc; k++) {
    const float* bk = t.b + k * NR;
    for (int r = 0; r < MR; r++) {
      const float av = t.a[k * MR + r];
      for (int j = 0; j < NR; j++) acc[r][j] += av * bk[j];
    }
  }
  const GemmEpilogue& e = *ts.epi;
  for (int r = 0; r < t.rows; r++) {
    float* row = t.c + r * t.ldc;
    for (int j = 0; j < t.cols; j++) {
      float v = acc[r][j] * ts.alpha;
      if (ts.cScale != 0.0f) v += ts.cScale * row[j];
      if (ts.last) {
        if (e.colBias != nullptr) v += e.biasScale * e.colBias[t.col0 + j];
        if (e.rowBias != nullptr) v += e.biasScale * e.rowBias[t.row0 + r];
        if (e.activation == Activation::Relu) v = v > 0.0f ? v : 0.0f;
        else if (e.activation == Activation::LeakyRelu) v = v < 0.0f ? v * e.activationAlpha : v;
      }
      row[j] = v;
    }
  }
  if (ts.last && !simpleActivation(e.activation)) activateTileGeneric(t.c, t.ldc, t.rows, t.cols, e.activation);
}

using Kernel = void (*)(const Tile&, const TileStore&);

template <bool kRowsA, int... Rs>
constexpr std::array<Kernel, sizeof...(Rs)> avx512Table(std::integer_sequence<int, Rs...>) {
  return {&kernelAvx512<Rs + 1, kRowsA>...};
}
template <bool kRowsA, int... Rs>
constexpr std::array<Kernel, sizeof...(Rs)> avx2Table(std::integer_sequence<int, Rs...>) {
  return {&kernelAvx2<Rs + 1, kRowsA>...};
}

// [A in place][rows - 1]
const std::array<Kernel, 12> kAvx512Kernels[2] = {avx512Table<false>(std::make_integer_sequence<int, 12>{}),
                                                  avx512Table<true>(std::make_integer_sequence<int, 12>{})};
const std::array<Kernel, 6> kAvx2Kernels[2] = {avx2Table<false>(std::make_integer_sequence<int, 6>{}),
                                               avx2Table<true>(std::make_integer_sequence<int, 6>{})};

inline void runKernel(Isa isa, bool rowsA, const Tile& t, const TileStore& ts) {
  switch (isa) {
    case Isa::Avx512:
      kAvx512Kernels[rowsA][t.rows - 1](t, ts);
      break;
    case Isa::Avx2:
      kAvx2Kernels[rowsA][t.rows - 1](t, ts);
      break;
    default:
      kernelGeneric(t, ts);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Work sharing.

/** A share of items, [lo, hi) in one word so that its owner (front) and thieves (back) claim items by CAS. */
struct alignas(64) Share {
  std::atomic<uint64_t> range{0};
  void set(int64_t lo, int64_t hi) {
    range.store(static_cast<uint64_t>(lo) | static_cast<uint64_t>(hi) << 32, std::memory_order_relaxed);
  }
  bool take(bool front, int64_t& item) {
    uint64_t v = range.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t lo = static_cast<uint32_t>(v), hi = static_cast<uint32_t>(v >> 32);
      if (lo >= hi) return false;
      const uint64_t next = front ? v + 1 : static_cast<uint64_t>(lo) | static_cast<uint64_t>(hi - 1) << 32;
      if (range.compare_exchange_weak(v, next, std::memory_order_relaxed)) {
        item = front ? lo : hi - 1;
        return true;
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------------------------
// The blocked product.

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

/** Where the kernels find A and B for a product, and how it is blocked. */
struct GemmPlan {
  const Problem* p;
  Isa isa;
  const Blocking* bl;
  int64_t kc;             // K block (blockK)
  int64_t kBlocks;
  bool aRows;             // A read in place (row-major)
  const float* aShared;   // else A packed whole ahead: block kb at kb * kc * mPad, panel at + i * kcb (kcb: the
  int64_t mPad;           //   block's length); null: each chunk packs its own rows
  bool bRows;             // B read in place (row-major)
  const float* bShared;   // else B packed whole ahead (PackedB's layout: panel q of block kb at (kb * nPanels + q)
  int64_t nPanels;        //   * kc * nr); null: each chunk packs its own columns
};

/** C[i0 : i1, j0 : j1] over all of K (i0 a multiple of MR, j0 of NR). */
void gemmBlock(const GemmPlan& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const Problem& p = *g.p;
  const Blocking& bl = *g.bl;
  const int mr = bl.mr, nr = bl.nr;
  float* aBuf = !g.aRows && g.aShared == nullptr
                    ? tlsPackA.get(static_cast<size_t>((i1 - i0 + mr - 1) / mr * mr * g.kc))
                    : nullptr;
  float* bBuf = !g.bRows && g.bShared == nullptr
                    ? tlsPackB.get(static_cast<size_t>((j1 - j0 + nr - 1) / nr * nr * g.kc))
                    : nullptr;
  // B in place: a last panel narrower than NR is packed (zero-padded), as the kernels load whole rows of a panel.
  const int64_t edge = g.bRows && j1 == p.n && p.n % nr != 0 ? p.n / nr * nr : -1;
  float* edgeBuf = edge >= 0 ? tlsPackB.get(static_cast<size_t>(g.kc * nr)) : nullptr;
  for (int64_t kb = 0; kb < g.kBlocks; kb++) {
    const int64_t pc = kb * g.kc;
    const int64_t kcb = std::min(g.kc, p.k - pc);
    const TileStore ts{p.alpha, kb == 0 ? p.beta : 1.0f, kb == g.kBlocks - 1, p.epi};
    if (aBuf != nullptr) packA(p.transA, p.a, p.lda, i0, i1 - i0, pc, kcb, mr, g.isa == Isa::Generic, aBuf);
    if (bBuf != nullptr) packB(p.transB, p.b, p.ldb, pc, kcb, j0, j1 - j0, nr, bBuf);
    if (edgeBuf != nullptr) packB(false, p.b, p.ldb, pc, kcb, edge, p.n - edge, nr, edgeBuf);
    Tile t;
    t.kc = kcb;
    t.lda = g.aRows ? p.lda : 0;
    t.ldc = p.ldc;
    for (int64_t jc = j0; jc < j1; jc += bl.nc) {
      const int64_t jEnd = std::min(jc + bl.nc, j1);
      for (int64_t ir = i0; ir < i1; ir += mr) {
        t.rows = static_cast<int>(std::min<int64_t>(mr, i1 - ir));
        t.row0 = ir;
        t.a = g.aRows             ? p.a + ir * p.lda + pc
              : aBuf != nullptr   ? aBuf + (ir - i0) * kcb
                                  : g.aShared + pc * g.mPad + ir * kcb;
        for (int64_t jr = jc; jr < jEnd; jr += nr) {
          t.cols = static_cast<int>(std::min<int64_t>(nr, jEnd - jr));
          t.col0 = jr;
          if (g.bRows && jr != edge) {
            t.b = p.b + pc * p.ldb + jr;
            t.ldb = p.ldb;
          } else {
            t.b = g.bRows            ? edgeBuf
                  : bBuf != nullptr  ? bBuf + (jr - j0) * kcb
                                     : g.bShared + (kb * g.nPanels + jr / nr) * g.kc * nr;
            t.ldb = nr;
          }
          t.c = p.c + ir * p.ldc + jr;
          runKernel(g.isa, g.aRows, t, ts);
        }
      }
    }
  }
}

/** Products below this many multiply-adds run on one thread: waking another costs more than it saves... */
constexpr double kParallelMacs = 1 << 21;
/**
 * ...unless B is large: a product with few rows (batch 1 or 8 through a layer's weights) streams B once and is
 * bound by one core's bandwidth, so two cores reading half of B each take about half the time.
 */
constexpr double kParallelBElements = 1 << 17;
/** B this small (floats) is read in place: it stays in L1/L2 however it is laid out (attention's heads). */
constexpr int64_t kInPlaceBElements = 16 * 1024;

void gemm(const Problem& p, Isa isa, ThreadPool* pool) {
  const Blocking& bl = blockingFor(isa);
  GemmPlan g{};
  g.p = &p;
  g.isa = isa;
  g.bl = &bl;
  g.kc = blockK(bl, p.k);
  g.kBlocks = (p.k + g.kc - 1) / g.kc;
  const int64_t mPanels = (p.m + bl.mr - 1) / bl.mr, nPanels = (p.n + bl.nr - 1) / bl.nr;
  g.mPad = mPanels * bl.mr;
  g.nPanels = nPanels;
  const bool simd = isa != Isa::Generic;
  // A in place unless its rows are a multiple of 4 KB apart: an MR-row panel would then fall in one L1 set.
  g.aRows = simd && !p.transA && (p.lda % 1024 != 0 || p.m == 1);
  g.bRows = simd && p.packed == nullptr && !p.transB && p.k * p.n <= kInPlaceBElements;
  if (p.packed != nullptr) g.bShared = p.packed->panel(0, 0);

  const double macs = static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  const double bElements = static_cast<double>(p.k) * static_cast<double>(p.n);
  int threads = pool == nullptr ? 1 : pool->size();
  if (macs < kParallelMacs && bElements < kParallelBElements) threads = 1;
  // Chunks along the longer side of C (each thread then reads all of the smaller operand and its own part of the
  // larger), as long as there are enough of them to share.
  const bool rowsOk = mPanels >= 2 * threads, colsOk = nPanels >= 2 * threads;
  const bool byRows = threads == 1 ? p.m >= p.n : rowsOk && (!colsOk || p.m >= p.n);
  if (threads > 1 && !rowsOk && !colsOk) threads = 1;
  // About four chunks per thread, so that leftovers balance, within MC rows or NC columns.
  const int64_t along = byRows ? mPanels : nPanels;
  const int64_t maxChunk = byRows ? std::max<int64_t>(1, bl.mc / bl.mr) : bl.nc / bl.nr;
  const int64_t per = std::clamp<int64_t>(along / (4 * threads), 1, maxChunk);
  const int64_t chunks = (along + per - 1) / per;

  // The shared operand, packed once up front when it is not in place or packed ahead of time.
  if (byRows && !g.bRows && g.bShared == nullptr) {
    float* buf = tlsPackB.get(static_cast<size_t>(g.kBlocks * nPanels * g.kc * bl.nr));
    auto packPanel = [&](int64_t item) {
      const int64_t kb = item / nPanels, q = item % nPanels;
      const int64_t pc = kb * g.kc;
      packB(p.transB, p.b, p.ldb, pc, std::min(g.kc, p.k - pc), q * bl.nr, std::min<int64_t>(bl.nr, p.n - q * bl.nr),
            bl.nr, buf + (kb * nPanels + q) * g.kc * bl.nr);
    };
    if (threads > 1 && bElements >= kParallelBElements) {
      parallelItems(pool, g.kBlocks * nPanels, packPanel);
    } else {
      for (int64_t item = 0; item < g.kBlocks * nPanels; item++) packPanel(item);
    }
    g.bShared = buf;
  }
  if (!byRows && !g.aRows) {
    float* buf = tlsPackA.get(static_cast<size_t>(g.mPad * p.k));
    for (int64_t kb = 0; kb < g.kBlocks; kb++) {
      const int64_t pc = kb * g.kc;
      packA(p.transA, p.a, p.lda, 0, p.m, pc, std::min(g.kc, p.k - pc), bl.mr, isa == Isa::Generic,
            buf + pc * g.mPad);
    }
    g.aShared = buf;
  }

  auto chunk = [&](int64_t i) {
    if (byRows) {
      gemmBlock(g, i * per * bl.mr, std::min(p.m, (i + 1) * per * bl.mr), 0, p.n);
    } else {
      gemmBlock(g, 0, p.m, i * per * bl.nr, std::min(p.n, (i + 1) * per * bl.nr));
    }
  };
  if (threads > 1) {
    parallelItems(pool, chunks, chunk);
  } else {
    for (int64_t i = 0; i < chunks; i++) chunk(i);
  }
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

void parallelItems(ThreadPool* pool, int64_t items, const std::function<void(int64_t)>& fn) {
  const int64_t shares = std::min<int64_t>(pool == nullptr ? 1 : pool->size(), items);
  if (shares <= 1 || items > static_cast<int64_t>(UINT32_MAX)) {
    for (int64_t i = 0; i < items; i++) fn(i);
    return;
  }
  std::unique_ptr<Share[]> share(new Share[static_cast<size_t>(shares)]);
  for (int64_t s = 0; s < shares; s++) share[s].set(items * s / shares, items * (s + 1) / shares);
  // The caller owns share 0 and helpers the others in the order they arrive, whichever task index the pool gives
  // them: a product after one of the same shape then finds its share's operands in the caches it warmed.
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int64_t> nextHelper{1};
  pool->parallelFor(shares, [&](int64_t) {
    const int64_t own = std::this_thread::get_id() == caller ? 0 : nextHelper.fetch_add(1);
    int64_t item;
    if (own < shares) {
      while (share[own].take(true, item)) fn(item);
    }
    for (int64_t d = 0; d < shares; d++) {
      // d = 0 is its own share (already empty), unless this is a second task of one helper.
      Share& other = share[(own + d) % shares];
      while (other.take(false, item)) fn(item);
    }
  });
}

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
  kc_ = blockK(bl, k);
  panels_ = (n + nr_ - 1) / nr_;
  kBlocks_ = (k + kc_ - 1) / kc_;
  packed_.assign(static_cast<size_t>(panels_ * kBlocks_ * kc_ * nr_) + 16, 0.0f);
  // Panels start 64-byte aligned (whole cache lines): offset into the vector to the first aligned float.
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
  gemm(p, gemmIsa(), pool);
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
  gemm(p, b.isa(), pool);
}

}  // namespace flotilla
