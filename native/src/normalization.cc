// Softmax (one axis, max-subtracted; rows with AVX-512 intrinsics where the CPU has it) and LayerNorm (two-pass mean
// and variance, accumulated in double).
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels.h"
#include "cpu_math.h"
#include "cpu_math_avx512.h"

namespace flotilla {
namespace cpu {

namespace {

/** Softmax of one contiguous row. A NaN anywhere in the row makes the whole row NaN (through the sum). */
FLOTILLA_MULTIVERSION
void softmaxRow(const float* __restrict x, float* __restrict y, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; i++) {
    const float e = fastExp(x[i] - m);
    y[i] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

/** softmaxRow with cpu_math_avx512.h's exp (the same three passes; tails masked). */
__attribute__((target("avx512f"))) void softmaxRowAvx512(const float* x, float* y, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mv = ninf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + i));
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
  if (i < n) mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(ninf, tail, x + i));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  __m512 sum = _mm512_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
    _mm512_storeu_ps(y + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (i < n) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), m));
    _mm512_mask_storeu_ps(y + i, tail, e);
    sum = _mm512_mask_add_ps(sum, tail, sum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
  if (i < n) _mm512_mask_storeu_ps(y + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, y + i), inv));
}

/** Softmax over the middle dim of x[len, inner] for every column at once (the axis is not the last). */
FLOTILLA_MULTIVERSION
void softmaxColumns(const float* __restrict x, float* __restrict y, int64_t len, int64_t inner, float* __restrict mx,
                    float* __restrict sum) {
  for (int64_t j = 0; j < inner; j++) {
    mx[j] = x[j];
    sum[j] = 0.0f;
  }
  for (int64_t l = 1; l < len; l++) {
    const float* row = x + l * inner;
    for (int64_t j = 0; j < inner; j++) mx[j] = row[j] > mx[j] ? row[j] : mx[j];
  }
  for (int64_t l = 0; l < len; l++) {
    const float* row = x + l * inner;
    float* out = y + l * inner;
    for (int64_t j = 0; j < inner; j++) {
      const float e = fastExp(row[j] - mx[j]);
      out[j] = e;
      sum[j] += e;
    }
  }
  for (int64_t j = 0; j < inner; j++) sum[j] = 1.0f / sum[j];
  for (int64_t l = 0; l < len; l++) {
    float* out = y + l * inner;
    for (int64_t j = 0; j < inner; j++) out[j] *= sum[j];
  }
}

/**
 * Mean and variance accumulate in double: in fp32 the sum of a row with a large mean (inputs around 8 or 100) is off
 * by enough to shift every normalised output, which near zero is a large relative error (onnxruntime uses double).
 */
FLOTILLA_MULTIVERSION
void layerNormRow(const float* __restrict x, const float* __restrict scale, const float* __restrict bias,
                  float* __restrict y, int64_t n, float epsilon) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; i++) sum += static_cast<double>(x[i]);
  const double mean = sum / static_cast<double>(n);
  double sq = 0.0;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < n; i++) {
    const double d = static_cast<double>(x[i]) - mean;
    sq += d * d;
  }
  const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(n) + static_cast<double>(epsilon));
  if (bias != nullptr) {
    for (int64_t i = 0; i < n; i++) {
      y[i] = static_cast<float>((static_cast<double>(x[i]) - mean) * rstd) * scale[i] + bias[i];
    }
  } else {
    for (int64_t i = 0; i < n; i++) y[i] = static_cast<float>((static_cast<double>(x[i]) - mean) * rstd) * scale[i];
  }
}

}  // namespace

void softmax(const TensorRef& x, const TensorRef& y, int axis, ThreadPool* pool) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= x.shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < x.shape.size(); i++) inner *= x.shape[i];
  const int64_t len = x.shape[static_cast<size_t>(axis)];
  if (len == 0 || outer == 0 || inner == 0) return;
  const float* px = x.f32();
  float* py = y.f32();
  if (inner == 1) {
    void (*row)(const float*, float*, int64_t) = gemmIsa() == Isa::Avx512 ? &softmaxRowAvx512 : &softmaxRow;
    parallelRange(pool, outer, len * 8, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; o++) row(px + o * len, py + o * len, len);
    });
    return;
  }
  parallelRange(pool, outer, len * inner * 8, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>(2 * inner)) scratch.resize(static_cast<size_t>(2 * inner));
    for (int64_t o = begin; o < end; o++) {
      softmaxColumns(px + o * len * inner, py + o * len * inner, len, inner, scratch.data(), scratch.data() + inner);
    }
  });
}

void layerNorm(const TensorRef& x, const float* scale, const float* bias, const TensorRef& y, int axis, float epsilon,
               ThreadPool* pool) {
  int64_t rows = 1, cols = 1;
  for (int i = 0; i < axis; i++) rows *= x.shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis); i < x.shape.size(); i++) cols *= x.shape[i];
  if (rows == 0 || cols == 0) return;
  const float* px = x.f32();
  float* py = y.f32();
  parallelRange(pool, rows, cols * 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) layerNormRow(px + r * cols, scale, bias, py + r * cols, cols, epsilon);
  });
}

}  // namespace cpu
}  // namespace flotilla
