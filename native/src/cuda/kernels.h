// The CUDA kernels as host-callable launchers: each queues its kernel on `stream` and throws std::runtime_error
// (naming the kernel, with cudaGetErrorName/cudaGetErrorString) when the launch fails. None synchronises. Sizes are
// element counts; an empty launch (nothing to compute) returns without queueing anything.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../plan.h"
#include "index_math.h"

namespace flotilla {
namespace gpu {

/** Applied to each product element: y = act(alpha * acc + biasScale * (colBias[col] + rowBias[row])). */
struct GemmEpilogue {
  const float* colBias = nullptr;   // [N] (a MatMul's bias); colBiasStep 0 broadcasts a single value
  int64_t colBiasStep = 1;
  const float* rowBias = nullptr;   // [M] per batch (a convolution's bias: rows are output channels)
  float biasScale = 1.0f;
  int activation = 0;               // plan.h Activation
  float activationAlpha = 0.01f;
};

/**
 * Y[M,N] = epilogue(op(A)[M,K] . op(B)[K,N]) per batch, fp32, row-major with row strides lda/ldb/ldc. A is
 * [M,K] (lda >= K) or, transposed, [K,M] (lda >= M); B is [K,N] or, transposed, [N,K]. `batch` walks Y's
 * batches: operands 0 A, 1 B, 2 Y, 3 the row bias, strides in elements. The vec* flags allow 16-byte accesses (set
 * only when the base, the row stride and every batch stride are multiples of 4 floats).
 */
struct SgemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool transA = false, transB = false;
  float alpha = 1.0f;
  GemmEpilogue epilogue;
  StridedIndex<4> batch;
  int64_t batchBase = 0;            // set by the launcher when a batch count exceeds one grid's z extent
  bool vecA = false, vecB = false, vecC = false;
};

/**
 * The tensor-core product of padded 16-bit copies (fp16 or bf16 per the launcher's precision): A is [M][Kp], B is
 * [K][Np] (Kp, Np: K and N rounded up to 8, zero padded), fp32 accumulation and output, same epilogue and batch
 * walk as SgemmArgs (strides in elements of the 16-bit copies for A and B, of Y for operand 2).
 */
struct HalfGemmArgs {
  int64_t m = 0, n = 0, k = 0, kp = 0, np = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  float* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1.0f;
  GemmEpilogue epilogue;
  StridedIndex<4> batch;
  int64_t batchBase = 0;
};

/** Where the Gather kernel reports the first index out of range it met (flag 0: none). */
struct GatherError {
  int flag;
  int unused;
  long long index;
  long long position;
};

void launchFill(float* y, float value, int64_t n, cudaStream_t stream);
/** Deterministic pseudo-random values in [-1, 1) (benchmarks): fp32, or 16-bit per `precision`. */
void launchRandom(void* y, Precision precision, int64_t n, uint32_t seed, cudaStream_t stream);

/** Y = A op B for op in Add/Sub/Mul/Div, dtype F32/I32/I64 (integer division by 0 gives 0). */
void launchBinary(OpType op, DType dtype, const StridedIndex<2>& map, const void* a, const void* b, void* y,
                  int64_t n, cudaStream_t stream);
/** Y = f(X) with f an Activation value or kUnaryErf. */
void launchUnary(int fn, float alpha, const float* x, float* y, int64_t n, cudaStream_t stream);

void launchSoftmax(const AxisGeometry& g, const float* x, float* y, cudaStream_t stream);
/** Normalises each of `rows` rows of `len`; scale/bias indexed modulo their lengths (bias may be null). */
void launchLayerNorm(int64_t rows, int64_t len, const float* x, const float* scale, int64_t scaleLen,
                     const float* bias, int64_t biasLen, float epsilon, float* y, cudaStream_t stream);
/** y[r] = mean of row r (GlobalAveragePool). */
void launchRowMean(int64_t rows, int64_t len, const float* x, float* y, cudaStream_t stream);

/** `elemSize` 4 or 8; indices int32 or int64 (`indices64`). Out-of-range indices write 0 and set `error`. */
void launchGather(const GatherGeometry& g, size_t elemSize, const void* data, const void* indices, bool indices64,
                  void* y, GatherError* error, cudaStream_t stream);
void launchTranspose(const StridedIndex<1>& map, size_t elemSize, const void* x, void* y, int64_t n,
                     cudaStream_t stream);
/** Copies X ([n / width, width]) into Y's rows of outWidth at column `columnOffset`. */
void launchConcatPart(size_t elemSize, const void* x, void* y, int64_t n, int64_t width, int64_t outWidth,
                      int64_t columnOffset, cudaStream_t stream);

/** Column buffer for images [n0, n0 + images) (index_math.h im2colSource). */
void launchIm2col(const ConvGeometry& g, int64_t n0, int64_t images, const float* x, float* col, cudaStream_t stream);
void launchPool(const ConvGeometry& g, bool isMax, bool countIncludePad, const float* x, float* y,
                cudaStream_t stream);

/** fp32 -> padded fp16/bf16 copy (index_math.h paddedSource) of `batch` matrices op(X) [rows, cols]. */
void launchToHalf(Precision precision, const float* x, int64_t batch, int64_t rows, int64_t cols, int64_t colsPadded,
                  bool transposed, int64_t srcBatchStride, void* y, cudaStream_t stream);

/** The fp32 products of a MatMul that planGemm planned, on contiguous A, B and Y. */
SgemmArgs matmulArgs(const GemmPlan& p, const float* a, const float* b, float* y, float alpha,
                     const GemmEpilogue& epilogue);
/** The same on padded 16-bit copies: A as [batchA][M][Kp] (op(A), K padded), B as [batchB][K][Np]. */
HalfGemmArgs halfMatmulArgs(const GemmPlan& p, const void* a16, const void* b16, float* y, float alpha,
                            const GemmEpilogue& epilogue);
/**
 * The per-(image, group) products of a convolution for `images` images from image n0 (y: Y of image n0): A is W as
 * [group][Mg][Kg], B the columns [image][group][Kg][oH*oW] (for a pointwise kernel, X of image n0 itself).
 */
SgemmArgs convArgs(const ConvGeometry& g, int64_t images, const float* w, const float* columns, float* y,
                   const GemmEpilogue& epilogue);
/** The same on 16-bit copies: W as [group][Mg][Kgp], the columns as [image][group][Kg][oH*oW rounded up to 8]. */
HalfGemmArgs halfConvArgs(const ConvGeometry& g, int64_t images, const void* w16, const void* columns16, float* y,
                          const GemmEpilogue& epilogue);

/** Runs `batches` products (grids of at most 65535 batches each). */
void launchSgemm(SgemmArgs args, int64_t batches, cudaStream_t stream);
void launchHalfGemm(Precision precision, HalfGemmArgs args, int64_t batches, cudaStream_t stream);

}  // namespace gpu
}  // namespace flotilla
