// Error handling for CUDA runtime calls: every cudaError_t is checked, and the exception names what failed and the
// error both by name and by description ("cudaMalloc of 1024 bytes: cudaErrorMemoryAllocation: out of memory").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace flotilla {
namespace gpu {

inline std::string cudaErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

inline void checkCuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    // Clears a non-sticky error so it is not reported again by the next check; a sticky one (a kernel fault) stays.
    cudaGetLastError();
    throw std::runtime_error(what + ": " + cudaErrorText(e));
  }
}

/** After a kernel launch: a bad configuration or a missing kernel image surfaces here, not at the next sync. */
inline void checkLaunch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("launch of ") + kernel + ": " + cudaErrorText(e));
}

constexpr int kBlock = 256;

/** A grid-stride loop over [0, n) with a 64-bit index (for kernels: gridFor sizes the grid). */
#define FLOTILLA_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

/** Blocks for a grid-stride loop over n elements (n > 0). */
inline unsigned gridFor(int64_t n, int threads = kBlock) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

}  // namespace gpu
}  // namespace flotilla
