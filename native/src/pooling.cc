// MaxPool, AveragePool (NCHW, kernel, strides, pads, dilations, count_include_pad) and GlobalAveragePool. The output
// size comes from the plan (ceil_mode is the planner's choice): a window that runs past the padded input is clipped,
// as onnxruntime does.
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "cpu_kernels.h"

namespace flotilla {
namespace cpu {

namespace {

struct Window {
  int64_t h, w, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
};

Window windowOf(const OpAttrs& at, const TensorRef& x, const TensorRef& y) {
  return {x.shape[2], x.shape[3], y.shape[2], y.shape[3], at.kernelShape[0], at.kernelShape[1], at.strides[0],
          at.strides[1], at.pads[0], at.pads[1], at.pads[2], at.pads[3], at.dilations[0], at.dilations[1]};
}

template <typename PlaneFn>
void forPlanes(const TensorRef& x, const TensorRef& y, ThreadPool* pool, const PlaneFn& fn) {
  const int64_t planes = x.shape[0] * x.shape[1];
  const int64_t in = x.shape[2] * x.shape[3], out = y.shape[2] * y.shape[3];
  const float* px = x.f32();
  float* py = y.f32();
  parallelRange(pool, planes, std::max(in, out), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; p++) fn(px + p * in, py + p * out);
  });
}

/**
 * fn(begin, end) over ranges of the N x C planes, for the vectorised 2x2 pools: they take ~0.1 ns an input value,
 * so they stay on one thread up to 16 times parallelRange's usual size (a batch of 32 MNIST-sized feature maps
 * took ~25 us alone; waking the pool's helper, asleep after the convolutions before, cost as much again).
 */
template <typename RangeFn>
void forPlaneRanges(const TensorRef& x, const TensorRef& y, ThreadPool* pool, const RangeFn& fn) {
  const int64_t planes = x.shape[0] * x.shape[1];
  const int64_t in = x.shape[2] * x.shape[3], out = y.shape[2] * y.shape[3];
  parallelRange(pool, planes, std::max<int64_t>(std::max(in, out) / 16, 1), fn);
}

int64_t ceilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/** ox in [lo, hi) where column ox * sw + offset lies in [first, last). (Two divisions: computed once an op.) */
inline void columnRange(const Window& g, int64_t offset, int64_t first, int64_t last, int64_t* lo, int64_t* hi) {
  *lo = std::min(g.ow, std::max<int64_t>(0, ceilDiv(first - offset, g.sw)));
  *hi = std::max(*lo, std::min(g.ow, ceilDiv(last - offset, g.sw)));
}

// Both pools go output by output with the taps in a tight loop: outputs whose window lies inside the image (in
// columns: ox in [interiorLo, interiorHi)) check nothing per tap, the others check each tap's column. Looping tap by
// tap over whole output rows instead made GCC vectorise strided loads over rows of 14: several times slower.

struct Taps {
  const int64_t* lo;      // per kernel column j: outputs whose tap j is inside the image
  const int64_t* hi;
  int64_t interiorLo;     // outputs whose every tap is inside, in columns
  int64_t interiorHi;
};

/** Rows i in [*lo, *hi) of the window of output row oy that are inside the image (they are contiguous). */
inline void rowRange(const Window& g, int64_t oy, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = g.kh;
  while (*lo < *hi && oy * g.sh - g.pt + *lo * g.dh < 0) ++*lo;
  while (*hi > *lo && oy * g.sh - g.pt + (*hi - 1) * g.dh >= g.h) --*hi;
}

inline float maxAt(const float* in, const Window& g, const Taps& t, int64_t oy, int64_t ox, int64_t ilo, int64_t ihi,
                   bool interior) {
  float m = std::numeric_limits<float>::lowest();
  for (int64_t i = ilo; i < ihi; i++) {
    const float* r = in + (oy * g.sh - g.pt + i * g.dh) * g.w + ox * g.sw - g.pl;
    for (int64_t j = 0; j < g.kw; j++) {
      if (!interior && (ox < t.lo[j] || ox >= t.hi[j])) continue;
      const float v = r[j * g.dw];
      m = v > m ? v : m;
    }
  }
  return m;
}

/** The max of a KH x KW window wholly inside the image, unrolled (2x2 and 3x3 pools are most of them). */
template <int KH, int KW>
inline float maxWindow(const float* r, int64_t rowStride, int64_t dw) {
  float m = r[0];
  for (int i = 0; i < KH; i++) {
    for (int j = 0; j < KW; j++) {
      const float v = r[i * rowStride + j * dw];
      m = v > m ? v : m;
    }
  }
  return m;
}

/** KH = KW = 0: any window size, the taps looped at run time (as averagePlaneT). */
template <int KH, int KW>
void maxPlaneT(const float* in, float* out, const Window& g, const Taps& t) {
  for (int64_t oy = 0; oy < g.oh; oy++) {
    int64_t ilo, ihi;
    rowRange(g, oy, &ilo, &ihi);
    float* row = out + oy * g.ow;
    // Columns [a, b) need no per-tap column check; the unrolled windows also need every row inside.
    const bool interior = KH == 0 || (ilo == 0 && ihi == g.kh);
    const int64_t a = interior ? std::min(t.interiorLo, g.ow) : g.ow;
    const int64_t b = interior ? std::max(a, t.interiorHi) : g.ow;
    for (int64_t ox = 0; ox < a; ox++) row[ox] = maxAt(in, g, t, oy, ox, ilo, ihi, false);
    if constexpr (KH > 0) {
      const float* top = in + (oy * g.sh - g.pt) * g.w - g.pl;
#pragma omp simd
      for (int64_t ox = a; ox < b; ox++) row[ox] = maxWindow<KH, KW>(top + ox * g.sw, g.dh * g.w, g.dw);
    } else {
      for (int64_t ox = a; ox < b; ox++) row[ox] = maxAt(in, g, t, oy, ox, ilo, ihi, true);
    }
    for (int64_t ox = b; ox < g.ow; ox++) row[ox] = maxAt(in, g, t, oy, ox, ilo, ihi, false);
  }
}

/**
 * NaN wins, as in onnxruntime. Comparisons drop NaN, so instead of tracking it per tap (a flag that cost more than
 * the max itself), a plane holding a NaN is redone with every window that covers one set to NaN.
 */
void propagateNan(const float* in, float* out, const Window& g, const Taps& t) {
  // One vectorised pass finds out whether there is anything to do.
  int any = 0;
#pragma omp simd reduction(| : any)
  for (int64_t k = 0; k < g.h * g.w; k++) any |= in[k] != in[k];
  if (any == 0) return;
  for (int64_t oy = 0; oy < g.oh; oy++) {
    int64_t ilo, ihi;
    rowRange(g, oy, &ilo, &ihi);
    for (int64_t ox = 0; ox < g.ow; ox++) {
      for (int64_t i = ilo; i < ihi; i++) {
        const float* r = in + (oy * g.sh - g.pt + i * g.dh) * g.w + ox * g.sw - g.pl;
        for (int64_t j = 0; j < g.kw; j++) {
          if (ox >= t.lo[j] && ox < t.hi[j] && r[j * g.dw] != r[j * g.dw]) out[oy * g.ow + ox] = r[j * g.dw];
        }
      }
    }
  }
}

/** A 2x2 window with stride 2, no padding or dilation, every window inside the image: the most common pool. */
bool plain2x2(const Window& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.dh == 1 && g.dw == 1 && g.pt == 0 && g.pl == 0 &&
         2 * g.oh <= g.h && 2 * g.ow <= g.w && gemmIsa() == Isa::Avx512;
}

/**
 * plain2x2 pools with AVX-512, 16 outputs at a time: the two input rows' 32 values combined vertically, then even
 * and odd lanes deinterleaved and combined (a scalar window loop cost ~2.5 ns an output). Average: the four values
 * times 0.25. `rows` output rows, row r reading input rows at in + r * inStride and w past it: a whole batch of
 * planes in one loop when their heights are even (the rows of consecutive planes follow each other), no per-plane
 * or per-row set-up. Max: NaN is caught on the way and handled by the caller (comparisons drop NaN); the result
 * says whether the rows may hold one: a running sum of products of the loaded values, which a NaN (or an inf, or an
 * overflow: then the caller's exact check finds nothing) turns into NaN, costs two multiply-adds a row where
 * tracking it per value cost more than the max itself.
 */
// GCC 12's _mm512_max_ps is built on _mm512_undefined_ps, which -Wmaybe-uninitialized flags inside target("avx512f")
// functions: a false positive in the header, not in this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <bool Max>
__attribute__((target("avx512f"))) bool pool2x2Avx512(const float* in, float* out, int64_t rows, int64_t inStride,
                                                      int64_t w, int64_t ow) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 quarter = _mm512_set1_ps(0.25f);
  __m512 check0 = _mm512_setzero_ps(), check1 = _mm512_setzero_ps();
  const int64_t chunks = (ow + 15) / 16;
  // Per chunk of 16 outputs: the masks of its two 16-value input halves and of its outputs.
  constexpr int kMaxChunks = 8;
  __mmask16 masks[3 * kMaxChunks];
  for (int64_t c0 = 0; c0 < chunks; c0 += kMaxChunks) {
    const int64_t cn = std::min<int64_t>(kMaxChunks, chunks - c0);
    for (int64_t k = 0; k < cn; k++) {
      const int64_t left = std::min<int64_t>(16, ow - 16 * (c0 + k));   // outputs in this chunk
      masks[3 * k] = left >= 8 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (2 * left)) - 1);
      masks[3 * k + 1] = left <= 8    ? static_cast<__mmask16>(0)
                         : left >= 16 ? static_cast<__mmask16>(0xFFFF)
                                      : static_cast<__mmask16>((1u << (2 * left - 16)) - 1);
      masks[3 * k + 2] = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
    }
    for (int64_t r = 0; r < rows; r++) {
      const float* r0 = in + r * inStride + 32 * c0;
      const float* r1 = r0 + w;
      float* row = out + r * ow + 16 * c0;
      for (int64_t k = 0; k < cn; k++) {
        const __mmask16 m0 = masks[3 * k], m1 = masks[3 * k + 1];
        const __m512 a0 = _mm512_maskz_loadu_ps(m0, r0 + 32 * k), b0 = _mm512_maskz_loadu_ps(m0, r1 + 32 * k);
        // Chunks of at most 8 outputs (rows of 7 after a 14 x 14 map) have no second half to load.
        const __m512 a1 = m1 != 0 ? _mm512_maskz_loadu_ps(m1, r0 + 32 * k + 16) : _mm512_setzero_ps();
        const __m512 b1 = m1 != 0 ? _mm512_maskz_loadu_ps(m1, r1 + 32 * k + 16) : _mm512_setzero_ps();
        __m512 r;
        if constexpr (Max) {
          const __m512 v0 = _mm512_max_ps(a0, b0), v1 = _mm512_max_ps(a1, b1);
          r = _mm512_max_ps(_mm512_permutex2var_ps(v0, even, v1), _mm512_permutex2var_ps(v0, odd, v1));
          check0 = _mm512_fmadd_ps(a0, b0, check0);
          check1 = _mm512_fmadd_ps(a1, b1, check1);
        } else {
          const __m512 v0 = _mm512_add_ps(a0, b0), v1 = _mm512_add_ps(a1, b1);
          r = _mm512_mul_ps(quarter, _mm512_add_ps(_mm512_permutex2var_ps(v0, even, v1),
                                                   _mm512_permutex2var_ps(v0, odd, v1)));
        }
        _mm512_mask_storeu_ps(row + 16 * k, masks[3 * k + 2], r);
      }
    }
  }
  const __m512 check = _mm512_add_ps(check0, check1);
  return _mm512_cmp_ps_mask(check, check, _CMP_UNORD_Q) != 0;
}
#pragma GCC diagnostic pop

/**
 * Planes [begin, end) of a plain2x2 pool: with an even height the rows of consecutive planes follow each other, so
 * all of them go through pool2x2Avx512 as one run of rows. Max: NaN is put back afterwards where it may be.
 */
template <bool Max>
void pool2x2Planes(const float* px, float* py, int64_t begin, int64_t end, const Window& g, const Taps& t) {
  const int64_t in = g.h * g.w, out = g.oh * g.ow;
  bool nan = false;
  if (g.h == 2 * g.oh) {
    nan = pool2x2Avx512<Max>(px + begin * in, py + begin * out, (end - begin) * g.oh, 2 * g.w, g.w, g.ow);
  } else {
    for (int64_t p = begin; p < end; p++) {
      nan |= pool2x2Avx512<Max>(px + p * in, py + p * out, g.oh, 2 * g.w, g.w, g.ow);
    }
  }
  if (Max && nan) {
    for (int64_t p = begin; p < end; p++) propagateNan(px + p * in, py + p * out, g, t);
  }
}

void maxPlane(const float* in, float* out, const Window& g, const Taps& t) {
  if (g.kh == 2 && g.kw == 2) maxPlaneT<2, 2>(in, out, g, t);
  else if (g.kh == 3 && g.kw == 3) maxPlaneT<3, 3>(in, out, g, t);
  else maxPlaneT<0, 0>(in, out, g, t);
  propagateNan(in, out, g, t);
}

template <int KH, int KW>
inline float sumWindow(const float* r, int64_t rowStride, int64_t dw) {
  float sum = 0.0f;
  for (int i = 0; i < KH; i++) {
    for (int j = 0; j < KW; j++) sum += r[i * rowStride + j * dw];
  }
  return sum;
}

inline float sumAt(const float* in, const Window& g, const Taps& t, int64_t oy, int64_t ox, int64_t ilo, int64_t ihi) {
  float sum = 0.0f;
  for (int64_t i = ilo; i < ihi; i++) {
    const float* r = in + (oy * g.sh - g.pt + i * g.dh) * g.w + ox * g.sw - g.pl;
    for (int64_t j = 0; j < g.kw; j++) {
      if (ox >= t.lo[j] && ox < t.hi[j]) sum += r[j * g.dw];
    }
  }
  return sum;
}

template <int KH, int KW>
void averagePlaneT(const float* in, float* out, const Window& g, bool includePad, const float* colCount,
                   const Taps& t) {
  for (int64_t oy = 0; oy < g.oh; oy++) {
    int64_t ilo, ihi;
    rowRange(g, oy, &ilo, &ihi);
    int64_t rowsPadded = 0;
    for (int64_t i = 0; i < g.kh; i++) {
      if (oy * g.sh - g.pt + i * g.dh < g.h + g.pb) rowsPadded++;   // past the padded input: clipped, not counted
    }
    const float rows = static_cast<float>(includePad ? rowsPadded : ihi - ilo);
    float* row = out + oy * g.ow;
    const bool fixed = KH > 0 && ilo == 0 && ihi == g.kh;
    const int64_t a = fixed ? std::min(t.interiorLo, g.ow) : g.ow;
    const int64_t b = fixed ? std::max(a, t.interiorHi) : g.ow;
    for (int64_t ox = 0; ox < a; ox++) row[ox] = sumAt(in, g, t, oy, ox, ilo, ihi);
    if constexpr (KH > 0) {
      const float* top = in + (oy * g.sh - g.pt) * g.w - g.pl;
#pragma omp simd
      for (int64_t ox = a; ox < b; ox++) row[ox] = sumWindow<KH, KW>(top + ox * g.sw, g.dh * g.w, g.dw);
    }
    for (int64_t ox = b; ox < g.ow; ox++) row[ox] = sumAt(in, g, t, oy, ox, ilo, ihi);
    for (int64_t ox = 0; ox < g.ow; ox++) {
      const float count = rows * colCount[ox];
      row[ox] = count > 0.0f ? row[ox] / count : 0.0f;
    }
  }
}

void averagePlane(const float* in, float* out, const Window& g, bool includePad, const float* colCount,
                  const Taps& t) {
  if (g.kh == 2 && g.kw == 2) averagePlaneT<2, 2>(in, out, g, includePad, colCount, t);
  else if (g.kh == 3 && g.kw == 3) averagePlaneT<3, 3>(in, out, g, includePad, colCount, t);
  else averagePlaneT<0, 0>(in, out, g, includePad, colCount, t);
}

}  // namespace

/** Per kernel column j, the outputs whose tap j falls inside the image. */
static Taps tapRanges(const Window& g, std::vector<int64_t>* lo, std::vector<int64_t>* hi) {
  lo->resize(static_cast<size_t>(g.kw));
  hi->resize(static_cast<size_t>(g.kw));
  Taps t{lo->data(), hi->data(), 0, g.ow};
  for (int64_t j = 0; j < g.kw; j++) {
    columnRange(g, j * g.dw - g.pl, 0, g.w, &(*lo)[j], &(*hi)[j]);
    t.interiorLo = std::max(t.interiorLo, (*lo)[j]);
    t.interiorHi = std::min(t.interiorHi, (*hi)[j]);
  }
  return t;
}

void maxPool(const OpAttrs& attrs, const TensorRef& x, const TensorRef& y, ThreadPool* pool) {
  const Window g = windowOf(attrs, x, y);
  std::vector<int64_t> lo, hi;
  const Taps t = tapRanges(g, &lo, &hi);
  if (plain2x2(g)) {
    forPlaneRanges(x, y, pool,
                   [&](int64_t begin, int64_t end) { pool2x2Planes<true>(x.f32(), y.f32(), begin, end, g, t); });
    return;
  }
  forPlanes(x, y, pool, [&](const float* in, float* out) { maxPlane(in, out, g, t); });
}

void averagePool(const OpAttrs& attrs, const TensorRef& x, const TensorRef& y, ThreadPool* pool) {
  const Window g = windowOf(attrs, x, y);
  const bool includePad = attrs.countIncludePad;
  // Columns each output's window counts: in the image, or (count_include_pad) in the padded image.
  std::vector<float> colCount(static_cast<size_t>(g.ow), 0.0f);
  for (int64_t j = 0; j < g.kw; j++) {
    const int64_t offset = j * g.dw - g.pl;
    int64_t lo, hi;
    if (includePad) columnRange(g, offset, -g.pl, g.w + g.pr, &lo, &hi);
    else columnRange(g, offset, 0, g.w, &lo, &hi);
    for (int64_t ox = lo; ox < hi; ox++) colCount[static_cast<size_t>(ox)] += 1.0f;
  }
  std::vector<int64_t> lo, hi;
  const Taps t = tapRanges(g, &lo, &hi);
  if (plain2x2(g)) {
    // Every window of a plain2x2 pool is inside the image: four values, whatever count_include_pad says.
    forPlaneRanges(x, y, pool,
                   [&](int64_t begin, int64_t end) { pool2x2Planes<false>(x.f32(), y.f32(), begin, end, g, t); });
    return;
  }
  forPlanes(x, y, pool, [&](const float* in, float* out) { averagePlane(in, out, g, includePad, colCount.data(), t); });
}

void globalAveragePool(const TensorRef& x, const TensorRef& y, ThreadPool* pool) {
  int64_t spatial = 1;
  for (size_t i = 2; i < x.shape.size(); i++) spatial *= x.shape[i];
  const int64_t planes = x.shape[0] * x.shape[1];
  const float* px = x.f32();
  float* py = y.f32();
  parallelRange(pool, planes, spatial, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; p++) {
      const float* in = px + p * spatial;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < spatial; i++) sum += in[i];
      py[p] = spatial > 0 ? sum / static_cast<float>(spatial) : 0.0f;
    }
  });
}

}  // namespace cpu
}  // namespace flotilla
