// Softmax, LayerNorm and row means. A row that is contiguous gets one warp (lanes stride through it, shuffles
// reduce); softmax over an axis with trailing dims gets one thread per (outer, inner) column instead, which keeps
// the loads coalesced across the inner dim. Reductions accumulate in fp32; the variance is the two-pass form.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda_check.h"
#include "kernels.h"

namespace flotilla {
namespace gpu {

namespace {

constexpr int kWarpsPerBlock = kBlock / 32;

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/** Grid-stride over rows, one warp each; the loop bound is the same for the 32 lanes, so shuffles see all of them. */
#define FLOTILLA_WARP_ROWS(row, rows)                                                                      \
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < (rows); \
       row += static_cast<int64_t>(gridDim.x) * (blockDim.x / 32))

unsigned warpGrid(int64_t rows) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

// x and y may be the same buffer: each element is read before it is written, by the same thread.
__global__ void softmaxRowsKernel(const float* x, float* y, int64_t rows, int64_t len) {
  const int lane = threadIdx.x % 32;
  FLOTILLA_WARP_ROWS(row, rows) {
    const float* xr = x + row * len;
    float* yr = y + row * len;
    float m = -INFINITY;
    for (int64_t j = lane; j < len; j += 32) m = fmaxf(m, xr[j]);
    m = warpMax(m);
    float s = 0.0f;
    for (int64_t j = lane; j < len; j += 32) s += expf(xr[j] - m);
    const float inv = 1.0f / warpSum(s);
    for (int64_t j = lane; j < len; j += 32) yr[j] = expf(xr[j] - m) * inv;
  }
}

__global__ void softmaxColumnsKernel(const float* x, float* y, int64_t outer, int64_t len, int64_t inner) {
  FLOTILLA_GRID_STRIDE(i, outer * inner) {
    const int64_t base = (i / inner) * len * inner + i % inner;
    float m = -INFINITY;
    for (int64_t a = 0; a < len; ++a) m = fmaxf(m, x[base + a * inner]);
    float s = 0.0f;
    for (int64_t a = 0; a < len; ++a) s += expf(x[base + a * inner] - m);
    const float inv = 1.0f / s;
    for (int64_t a = 0; a < len; ++a) y[base + a * inner] = expf(x[base + a * inner] - m) * inv;
  }
}

__global__ void layerNormKernel(const float* x, const float* __restrict__ scale, int64_t scaleLen,
                                const float* __restrict__ bias, int64_t biasLen, float epsilon, float* y, int64_t rows,
                                int64_t len) {
  const int lane = threadIdx.x % 32;
  FLOTILLA_WARP_ROWS(row, rows) {
    const float* xr = x + row * len;
    float* yr = y + row * len;
    float s = 0.0f;
    for (int64_t j = lane; j < len; j += 32) s += xr[j];
    const float mean = warpSum(s) / static_cast<float>(len);
    float q = 0.0f;
    for (int64_t j = lane; j < len; j += 32) {
      const float d = xr[j] - mean;
      q += d * d;
    }
    const float rstd = 1.0f / sqrtf(warpSum(q) / static_cast<float>(len) + epsilon);
    for (int64_t j = lane; j < len; j += 32) {
      const float v = (xr[j] - mean) * rstd * scale[j % scaleLen];
      yr[j] = bias ? v + bias[j % biasLen] : v;
    }
  }
}

__global__ void rowMeanKernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t len) {
  const int lane = threadIdx.x % 32;
  FLOTILLA_WARP_ROWS(row, rows) {
    const float* xr = x + row * len;
    float s = 0.0f;
    for (int64_t j = lane; j < len; j += 32) s += xr[j];
    s = warpSum(s);
    if (lane == 0) y[row] = s / static_cast<float>(len);
  }
}

}  // namespace

void launchSoftmax(const AxisGeometry& g, const float* x, float* y, cudaStream_t stream) {
  if (g.outer <= 0 || g.len <= 0 || g.inner <= 0) return;
  if (g.inner == 1) {
    softmaxRowsKernel<<<warpGrid(g.outer), kBlock, 0, stream>>>(x, y, g.outer, g.len);
  } else {
    softmaxColumnsKernel<<<gridFor(g.outer * g.inner), kBlock, 0, stream>>>(x, y, g.outer, g.len, g.inner);
  }
  checkLaunch("softmax");
}

void launchLayerNorm(int64_t rows, int64_t len, const float* x, const float* scale, int64_t scaleLen,
                     const float* bias, int64_t biasLen, float epsilon, float* y, cudaStream_t stream) {
  if (rows <= 0 || len <= 0) return;
  layerNormKernel<<<warpGrid(rows), kBlock, 0, stream>>>(x, scale, scaleLen, bias, biasLen, epsilon, y, rows, len);
  checkLaunch("layer norm");
}

void launchRowMean(int64_t rows, int64_t len, const float* x, float* y, cudaStream_t stream) {
  if (rows <= 0 || len <= 0) return;
  rowMeanKernel<<<warpGrid(rows), kBlock, 0, stream>>>(x, y, rows, len);
  checkLaunch("row mean");
}

}  // namespace gpu
}  // namespace flotilla
