// Element-wise kernels: fill, pseudo-random fill, the broadcasting binary ops and the unary ops. Grid-stride loops
// over 64-bit indices; the per-element index math is index_math.h's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "kernels.h"

namespace flotilla {
namespace gpu {

namespace {

__global__ void fillKernel(float* __restrict__ y, float value, int64_t n) {
  FLOTILLA_GRID_STRIDE(i, n) y[i] = value;
}

__device__ __forceinline__ float uniform(uint32_t seed, int64_t i) {
  // A 32-bit integer hash (lowbias32) of the seed and index: reproducible, no state.
  uint32_t x = static_cast<uint32_t>(i) * 0x9E3779B9u ^ static_cast<uint32_t>(i >> 32) ^ seed * 0x85EBCA6Bu;
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void randomF32Kernel(float* __restrict__ y, int64_t n, uint32_t seed) {
  FLOTILLA_GRID_STRIDE(i, n) y[i] = uniform(seed, i);
}

__global__ void randomF16Kernel(__half* __restrict__ y, int64_t n, uint32_t seed) {
  FLOTILLA_GRID_STRIDE(i, n) y[i] = __float2half_rn(uniform(seed, i));
}

__global__ void randomBF16Kernel(__nv_bfloat16* __restrict__ y, int64_t n, uint32_t seed) {
  FLOTILLA_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(uniform(seed, i));
}

template <typename T, int kOp>
__device__ __forceinline__ T binaryOp(T a, T b) {
  if (kOp == static_cast<int>(OpType::Add)) return a + b;
  if (kOp == static_cast<int>(OpType::Sub)) return a - b;
  if (kOp == static_cast<int>(OpType::Mul)) return a * b;
  if constexpr (std::is_floating_point<T>::value) {
    return a / b;                    // IEEE division
  } else {
    return b == 0 ? T(0) : a / b;    // integers: no trap, no undefined result
  }
}

/** Same shape (or a single broadcast value, bStep 0) without index arithmetic. */
template <typename T, int kOp>
__global__ void binaryFlatKernel(const T* __restrict__ a, int64_t aStep, const T* __restrict__ b, int64_t bStep,
                                 T* __restrict__ y, int64_t n) {
  FLOTILLA_GRID_STRIDE(i, n) y[i] = binaryOp<T, kOp>(a[i * aStep], b[i * bStep]);
}

template <typename T, int kOp>
__global__ void binaryKernel(const StridedIndex<2> map, const T* __restrict__ a, const T* __restrict__ b,
                             T* __restrict__ y, int64_t n) {
  FLOTILLA_GRID_STRIDE(i, n) {
    int64_t off[2];
    stridedOffsets<2>(map, i, off);
    y[i] = binaryOp<T, kOp>(a[off[0]], b[off[1]]);
  }
}

template <typename T, int kOp>
void binaryTyped(const StridedIndex<2>& map, const void* a, const void* b, void* y, int64_t n, cudaStream_t stream) {
  const T* ta = static_cast<const T*>(a);
  const T* tb = static_cast<const T*>(b);
  T* ty = static_cast<T*>(y);
  // After coalescing, same-shape operands are one dim of stride 1, and a scalar operand has stride 0 throughout.
  const bool flat = map.rank == 0 || (map.rank == 1 && (map.strides[0][0] | 1) == 1 && (map.strides[1][0] | 1) == 1);
  if (flat) {
    const int64_t aStep = map.rank == 0 ? 0 : map.strides[0][0];
    const int64_t bStep = map.rank == 0 ? 0 : map.strides[1][0];
    binaryFlatKernel<T, kOp><<<gridFor(n), kBlock, 0, stream>>>(ta, aStep, tb, bStep, ty, n);
  } else {
    binaryKernel<T, kOp><<<gridFor(n), kBlock, 0, stream>>>(map, ta, tb, ty, n);
  }
  checkLaunch("binary element-wise");
}

template <typename T>
void binaryForType(OpType op, const StridedIndex<2>& map, const void* a, const void* b, void* y, int64_t n,
                   cudaStream_t stream) {
  switch (op) {
    case OpType::Add: return binaryTyped<T, static_cast<int>(OpType::Add)>(map, a, b, y, n, stream);
    case OpType::Sub: return binaryTyped<T, static_cast<int>(OpType::Sub)>(map, a, b, y, n, stream);
    case OpType::Mul: return binaryTyped<T, static_cast<int>(OpType::Mul)>(map, a, b, y, n, stream);
    case OpType::Div: return binaryTyped<T, static_cast<int>(OpType::Div)>(map, a, b, y, n, stream);
    default: throw std::runtime_error("not a binary element-wise op");
  }
}

__global__ void unaryKernel(int fn, float alpha, const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  FLOTILLA_GRID_STRIDE(i, n) y[i] = applyUnary(fn, x[i], alpha);
}

}  // namespace

void launchFill(float* y, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fillKernel<<<gridFor(n), kBlock, 0, stream>>>(y, value, n);
  checkLaunch("fill");
}

void launchRandom(void* y, Precision precision, int64_t n, uint32_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  if (precision == Precision::F16) {
    randomF16Kernel<<<gridFor(n), kBlock, 0, stream>>>(static_cast<__half*>(y), n, seed);
  } else if (precision == Precision::BF16) {
    randomBF16Kernel<<<gridFor(n), kBlock, 0, stream>>>(static_cast<__nv_bfloat16*>(y), n, seed);
  } else {
    randomF32Kernel<<<gridFor(n), kBlock, 0, stream>>>(static_cast<float*>(y), n, seed);
  }
  checkLaunch("random fill");
}

void launchBinary(OpType op, DType dtype, const StridedIndex<2>& map, const void* a, const void* b, void* y,
                  int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  switch (dtype) {
    case DType::F32: return binaryForType<float>(op, map, a, b, y, n, stream);
    case DType::I32: return binaryForType<int32_t>(op, map, a, b, y, n, stream);
    case DType::I64: return binaryForType<int64_t>(op, map, a, b, y, n, stream);
  }
  throw std::runtime_error("unknown dtype");
}

void launchUnary(int fn, float alpha, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  unaryKernel<<<gridFor(n), kBlock, 0, stream>>>(fn, alpha, x, y, n);
  checkLaunch("unary element-wise");
}

}  // namespace gpu
}  // namespace flotilla
