// Data movement: Gather (with the out-of-range report), Transpose, Concat, im2col, and the pools. Elements are
// moved as 4- or 8-byte words, so every dtype of plan.h goes through the same kernels.
#include <cuda_runtime.h>

#include <stdexcept>

#include "cuda_check.h"
#include "kernels.h"

namespace flotilla {
namespace gpu {

namespace {

template <typename E, typename I>
__global__ void gatherKernel(const GatherGeometry g, const E* __restrict__ data, const I* __restrict__ indices,
                             E* __restrict__ y, GatherError* error, int64_t n) {
  FLOTILLA_GRID_STRIDE(i, n) {
    const int64_t position = gatherPosition(g, i);
    const int64_t index = static_cast<int64_t>(indices[position]);
    const int64_t src = gatherSource(g, i, index);
    if (src < 0) {
      // The first thread to see a bad index records it; the device reads the record after the op and fails the run.
      if (atomicCAS(&error->flag, 0, 1) == 0) {
        error->index = index;
        error->position = position;
      }
      y[i] = E(0);
    } else {
      y[i] = data[src];
    }
  }
}

template <typename E>
__global__ void transposeKernel(const StridedIndex<1> map, const E* __restrict__ x, E* __restrict__ y, int64_t n) {
  FLOTILLA_GRID_STRIDE(i, n) {
    int64_t off[1];
    stridedOffsets<1>(map, i, off);
    y[i] = x[off[0]];
  }
}

template <typename E>
__global__ void concatKernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t width, int64_t outWidth,
                             int64_t columnOffset) {
  FLOTILLA_GRID_STRIDE(i, n) y[concatTarget(i, width, outWidth, columnOffset)] = x[i];
}

__global__ void im2colKernel(const ConvGeometry g, int64_t n0, const float* __restrict__ x, float* __restrict__ col,
                             int64_t n) {
  FLOTILLA_GRID_STRIDE(i, n) {
    const int64_t src = im2colSource(g, n0, i);
    col[i] = src < 0 ? 0.0f : x[src];
  }
}

__global__ void poolKernel(const ConvGeometry g, bool isMax, bool countIncludePad, const float* __restrict__ x,
                           float* __restrict__ y, int64_t n) {
  FLOTILLA_GRID_STRIDE(i, n) {
    y[i] = poolValue(g, i, isMax, countIncludePad, [x](int64_t o) { return x[o]; });
  }
}

void checkElemSize(size_t elemSize) {
  if (elemSize != 4 && elemSize != 8) throw std::runtime_error("element size must be 4 or 8 bytes");
}

}  // namespace

void launchGather(const GatherGeometry& g, size_t elemSize, const void* data, const void* indices, bool indices64,
                  void* y, GatherError* error, cudaStream_t stream) {
  checkElemSize(elemSize);
  const int64_t n = g.outer * g.count * g.inner;
  if (n <= 0) return;
  const unsigned grid = gridFor(n);
  if (elemSize == 4) {
    const uint32_t* d = static_cast<const uint32_t*>(data);
    uint32_t* out = static_cast<uint32_t*>(y);
    if (indices64) {
      gatherKernel<<<grid, kBlock, 0, stream>>>(g, d, static_cast<const int64_t*>(indices), out, error, n);
    } else {
      gatherKernel<<<grid, kBlock, 0, stream>>>(g, d, static_cast<const int32_t*>(indices), out, error, n);
    }
  } else {
    const uint64_t* d = static_cast<const uint64_t*>(data);
    uint64_t* out = static_cast<uint64_t*>(y);
    if (indices64) {
      gatherKernel<<<grid, kBlock, 0, stream>>>(g, d, static_cast<const int64_t*>(indices), out, error, n);
    } else {
      gatherKernel<<<grid, kBlock, 0, stream>>>(g, d, static_cast<const int32_t*>(indices), out, error, n);
    }
  }
  checkLaunch("gather");
}

void launchTranspose(const StridedIndex<1>& map, size_t elemSize, const void* x, void* y, int64_t n,
                     cudaStream_t stream) {
  checkElemSize(elemSize);
  if (n <= 0) return;
  if (elemSize == 4) {
    transposeKernel<<<gridFor(n), kBlock, 0, stream>>>(map, static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y),
                                                       n);
  } else {
    transposeKernel<<<gridFor(n), kBlock, 0, stream>>>(map, static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y),
                                                       n);
  }
  checkLaunch("transpose");
}

void launchConcatPart(size_t elemSize, const void* x, void* y, int64_t n, int64_t width, int64_t outWidth,
                      int64_t columnOffset, cudaStream_t stream) {
  checkElemSize(elemSize);
  if (n <= 0 || width <= 0) return;
  if (elemSize == 4) {
    concatKernel<<<gridFor(n), kBlock, 0, stream>>>(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), n,
                                                    width, outWidth, columnOffset);
  } else {
    concatKernel<<<gridFor(n), kBlock, 0, stream>>>(static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), n,
                                                    width, outWidth, columnOffset);
  }
  checkLaunch("concat");
}

void launchIm2col(const ConvGeometry& g, int64_t n0, int64_t images, const float* x, float* col, cudaStream_t stream) {
  const int64_t n = images * g.c * g.kh * g.kw * g.oh * g.ow;
  if (n <= 0) return;
  im2colKernel<<<gridFor(n), kBlock, 0, stream>>>(g, n0, x, col, n);
  checkLaunch("im2col");
}

void launchPool(const ConvGeometry& g, bool isMax, bool countIncludePad, const float* x, float* y,
                cudaStream_t stream) {
  const int64_t n = g.n * g.c * g.oh * g.ow;
  if (n <= 0) return;
  poolKernel<<<gridFor(n), kBlock, 0, stream>>>(g, isMax, countIncludePad, x, y, n);
  checkLaunch(isMax ? "max pool" : "average pool");
}

}  // namespace gpu
}  // namespace flotilla
