// The device GEMMs: a register-blocked fp32 SGEMM and a WMMA (tensor-core) kernel for fp16/bf16 copies with fp32
// accumulation, both with the fused epilogue (bias, activation) and strided, broadcasting batches. The phases are
// in gemm_tiles.h, where the host tests reach them too. Also the conversion to padded 16-bit copies, and
// cudaGemmSeconds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <string>

#include "cuda_api.h"
#include "cuda_check.h"
#include "gemm_tiles.h"
#include "kernels.h"

namespace flotilla {
namespace gpu {

namespace {

constexpr int64_t kMaxGridZ = 65535;
constexpr int64_t kMaxGridY = 65535;

/** One block per 128x128 tile of Y (x: columns, y: rows), z: the batch (from args.batchBase). */
template <bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kGemmThreads, 2) sgemmKernel(const SgemmArgs p) {
  __shared__ __align__(16) float as[2][kTileK * kLds];
  __shared__ __align__(16) float bs[2][kTileK * kLds];

  int64_t off[4];
  stridedOffsets<4>(p.batch, p.batchBase + blockIdx.z, off);
  const float* a = p.a + off[0];
  const float* b = p.b + off[1];
  float* c = p.c + off[2];
  const float* rowBias = p.epilogue.rowBias ? p.epilogue.rowBias + off[3] : nullptr;

  const int tid = threadIdx.x;
  const int tx = tid % 16;
  const int ty = tid / 16;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  }

  // A is k-contiguous unless transposed; B (as K x N) is k-contiguous only when transposed.
  const int64_t tiles = (p.k + kTileK - 1) / kTileK;
  float ra[4], rb[4];
  if (tiles > 0) {
    loadTile<!kTransA>(a, p.lda, p.m, p.k, row0, 0, tid, p.vecA, ra);
    loadTile<kTransB>(b, p.ldb, p.n, p.k, col0, 0, tid, p.vecB, rb);
    storeTile<!kTransA>(as[0], tid, ra);
    storeTile<kTransB>(bs[0], tid, rb);
    __syncthreads();
  }
  // Double-buffered: while tile t is multiplied from buffer t&1, tile t+1 is loaded into registers and stored into
  // the other buffer, which every thread finished reading before the barrier that ended step t-1.
  for (int64_t t = 0; t < tiles; ++t) {
    const int cur = static_cast<int>(t & 1);
    const bool more = t + 1 < tiles;
    if (more) {
      loadTile<!kTransA>(a, p.lda, p.m, p.k, row0, (t + 1) * kTileK, tid, p.vecA, ra);
      loadTile<kTransB>(b, p.ldb, p.n, p.k, col0, (t + 1) * kTileK, tid, p.vecB, rb);
    }
    computeTile(as[cur], bs[cur], tx, ty, acc);
    if (more) {
      storeTile<!kTransA>(as[cur ^ 1], tid, ra);
      storeTile<kTransB>(bs[cur ^ 1], tid, rb);
    }
    __syncthreads();
  }
  storeOutput(p, c, rowBias, row0, col0, tx, ty, acc);
}

template <typename T>
__global__ void __launch_bounds__(kGemmThreads) halfGemmKernel(const HalfGemmArgs p) {
  using namespace nvcuda;
  __shared__ __align__(128) uint16_t as[kTile * kWLda];
  __shared__ __align__(128) uint16_t bs[kWTileK * kWLdb];
  __shared__ __align__(128) float stage[kGemmThreads / 32][256];

  int64_t off[4];
  stridedOffsets<4>(p.batch, p.batchBase + blockIdx.z, off);
  const uint16_t* a = static_cast<const uint16_t*>(p.a) + off[0];
  const uint16_t* b = static_cast<const uint16_t*>(p.b) + off[1];
  float* c = p.c + off[2];
  const float* rowBias = p.epilogue.rowBias ? p.epilogue.rowBias + off[3] : nullptr;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }

  const int64_t tiles = (p.kp + kWTileK - 1) / kWTileK;
  uint4 ra[2], rb[2];
  if (tiles > 0) {
    loadHalfTileA(a, p.m, p.kp, row0, 0, tid, ra);
    loadHalfTileB(b, p.k, p.np, 0, col0, tid, rb);
    storeHalfTileA(as, tid, ra);
    storeHalfTileB(bs, tid, rb);
    __syncthreads();
  }
  const T* sa = reinterpret_cast<const T*>(as);
  const T* sb = reinterpret_cast<const T*>(bs);
  for (int64_t t = 0; t < tiles; ++t) {
    const bool more = t + 1 < tiles;
    if (more) {
      loadHalfTileA(a, p.m, p.kp, row0, (t + 1) * kWTileK, tid, ra);
      loadHalfTileB(b, p.k, p.np, (t + 1) * kWTileK, col0, tid, rb);
    }
#pragma unroll
    for (int kk = 0; kk < kWTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], sa + fragmentA(warp, i, kk), kWLda);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], sb + fragmentB(warp, j, kk), kWLdb);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
    __syncthreads();   // every warp done reading the tile before it is overwritten
    if (more) {
      storeHalfTileA(as, tid, ra);
      storeHalfTileB(bs, tid, rb);
      __syncthreads();
    }
  }

  float* mine = stage[warp];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(mine, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int64_t row = row0 + fragmentRow(warp, i, e);
        const int64_t col = col0 + fragmentCol(warp, j, e);
        if (row < p.m && col < p.n) {
          c[row * p.ldc + col] = epilogueValue(p.epilogue, p.alpha, mine[e], row, col, rowBias);
        }
      }
      __syncwarp();
    }
  }
}

template <typename T>
__device__ __forceinline__ T fromFloat(float v);
template <>
__device__ __forceinline__ __half fromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void toHalfKernel(const float* __restrict__ x, int64_t total, int64_t rows, int64_t cols,
                             int64_t colsPadded, bool transposed, int64_t srcBatchStride, T* __restrict__ y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t src = paddedSource(i, rows, cols, colsPadded, transposed, srcBatchStride);
    y[i] = fromFloat<T>(src < 0 ? 0.0f : x[src]);
  }
}

template <typename Args>
void checkGrid(const Args& args, const char* kernel) {
  if ((args.m + kTile - 1) / kTile > kMaxGridY) {
    throw std::runtime_error(std::string(kernel) + ": " + std::to_string(args.m) + " rows exceed the grid's " +
                             std::to_string(kMaxGridY * kTile));
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

/** Whether a fp32 operand allows 16-byte accesses: base, row stride and every batch stride multiples of 4 floats. */
bool vectorizable(const void* base, int64_t ld, const StridedIndex<4>& batch, int operand) {
  if (!aligned16(base) || ld % 4 != 0) return false;
  for (int d = 0; d < batch.rank; ++d) {
    if (batch.strides[operand][d] % 4 != 0) return false;
  }
  return true;
}

void setVectorFlags(SgemmArgs* s) {
  s->vecA = vectorizable(s->a, s->lda, s->batch, 0);
  s->vecB = vectorizable(s->b, s->ldb, s->batch, 1);
  s->vecC = vectorizable(s->c, s->ldc, s->batch, 2);
}

StridedIndex<4> convBatch(const ConvGeometry& g, int64_t images, int64_t matA, int64_t ldb) {
  StridedIndex<4> batch;
  const int64_t ohw = g.oh * g.ow;
  // Two dims [image, group] always fit.
  coalesce<4>({images, g.group},
              {{0, matA}, {g.group * g.kg * ldb, g.kg * ldb}, {g.m * ohw, g.mg * ohw}, {0, g.mg}}, &batch);
  return batch;
}

}  // namespace

SgemmArgs matmulArgs(const GemmPlan& p, const float* a, const float* b, float* y, float alpha,
                     const GemmEpilogue& epilogue) {
  SgemmArgs s;
  s.m = p.m;
  s.n = p.n;
  s.k = p.k;
  s.a = a;
  s.lda = p.transA ? p.m : p.k;
  s.b = b;
  s.ldb = p.transB ? p.k : p.n;
  s.c = y;
  s.ldc = p.n;
  s.transA = p.transA;
  s.transB = p.transB;
  s.alpha = alpha;
  s.epilogue = epilogue;
  s.batch = scaledBatch(p, p.m * p.k, p.k * p.n, p.m * p.n);
  setVectorFlags(&s);
  return s;
}

HalfGemmArgs halfMatmulArgs(const GemmPlan& p, const void* a16, const void* b16, float* y, float alpha,
                            const GemmEpilogue& epilogue) {
  HalfGemmArgs h;
  h.m = p.m;
  h.n = p.n;
  h.k = p.k;
  h.kp = roundUp(p.k, 8);
  h.np = roundUp(p.n, 8);
  h.a = a16;
  h.b = b16;
  h.c = y;
  h.ldc = p.n;
  h.alpha = alpha;
  h.epilogue = epilogue;
  h.batch = scaledBatch(p, p.m * h.kp, p.k * h.np, p.m * p.n);
  return h;
}

SgemmArgs convArgs(const ConvGeometry& g, int64_t images, const float* w, const float* columns, float* y,
                   const GemmEpilogue& epilogue) {
  SgemmArgs s;
  s.m = g.mg;
  s.n = g.oh * g.ow;
  s.k = g.kg;
  s.a = w;
  s.lda = g.kg;
  s.b = columns;
  s.ldb = s.n;
  s.c = y;
  s.ldc = s.n;
  s.epilogue = epilogue;
  s.batch = convBatch(g, images, g.mg * g.kg, s.n);
  setVectorFlags(&s);
  return s;
}

HalfGemmArgs halfConvArgs(const ConvGeometry& g, int64_t images, const void* w16, const void* columns16, float* y,
                          const GemmEpilogue& epilogue) {
  HalfGemmArgs h;
  h.m = g.mg;
  h.n = g.oh * g.ow;
  h.k = g.kg;
  h.kp = roundUp(g.kg, 8);
  h.np = roundUp(h.n, 8);
  h.a = w16;
  h.b = columns16;
  h.c = y;
  h.ldc = h.n;
  h.epilogue = epilogue;
  h.batch = convBatch(g, images, g.mg * h.kp, h.np);
  return h;
}

void launchSgemm(SgemmArgs args, int64_t batches, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0 || batches <= 0) return;
  checkGrid(args, "sgemm");
  const dim3 block(kGemmThreads);
  for (int64_t base = 0; base < batches; base += kMaxGridZ) {
    args.batchBase = base;
    const dim3 grid(static_cast<unsigned>((args.n + kTile - 1) / kTile), static_cast<unsigned>((args.m + kTile - 1) / kTile),
                    static_cast<unsigned>(std::min(kMaxGridZ, batches - base)));
    if (!args.transA && !args.transB) {
      sgemmKernel<false, false><<<grid, block, 0, stream>>>(args);
    } else if (!args.transA && args.transB) {
      sgemmKernel<false, true><<<grid, block, 0, stream>>>(args);
    } else if (args.transA && !args.transB) {
      sgemmKernel<true, false><<<grid, block, 0, stream>>>(args);
    } else {
      sgemmKernel<true, true><<<grid, block, 0, stream>>>(args);
    }
    checkLaunch("sgemm");
  }
}

void launchHalfGemm(Precision precision, HalfGemmArgs args, int64_t batches, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0 || batches <= 0) return;
  checkGrid(args, "tensor-core gemm");
  const dim3 block(kGemmThreads);
  for (int64_t base = 0; base < batches; base += kMaxGridZ) {
    args.batchBase = base;
    const dim3 grid(static_cast<unsigned>((args.n + kTile - 1) / kTile), static_cast<unsigned>((args.m + kTile - 1) / kTile),
                    static_cast<unsigned>(std::min(kMaxGridZ, batches - base)));
    if (precision == Precision::BF16) {
      halfGemmKernel<__nv_bfloat16><<<grid, block, 0, stream>>>(args);
    } else {
      halfGemmKernel<__half><<<grid, block, 0, stream>>>(args);
    }
    checkLaunch(precision == Precision::BF16 ? "bf16 gemm" : "fp16 gemm");
  }
}

void launchToHalf(Precision precision, const float* x, int64_t batch, int64_t rows, int64_t cols, int64_t colsPadded,
                  bool transposed, int64_t srcBatchStride, void* y, cudaStream_t stream) {
  const int64_t total = batch * rows * colsPadded;
  if (total <= 0) return;
  if (precision == Precision::BF16) {
    toHalfKernel<__nv_bfloat16><<<gridFor(total), kBlock, 0, stream>>>(x, total, rows, cols, colsPadded, transposed,
                                                                        srcBatchStride, static_cast<__nv_bfloat16*>(y));
  } else {
    toHalfKernel<__half><<<gridFor(total), kBlock, 0, stream>>>(x, total, rows, cols, colsPadded, transposed,
                                                                 srcBatchStride, static_cast<__half*>(y));
  }
  checkLaunch("fp32 to 16-bit conversion");
}

}  // namespace gpu

// ---- cudaGemmSeconds ------------------------------------------------------------------------------------------

namespace {

/** Device memory freed on scope exit (errors while freeing are ignored: this only runs on unwinding or success). */
class Scoped {
 public:
  explicit Scoped(size_t bytes) {
    gpu::checkCuda(cudaMalloc(&ptr_, bytes < 256 ? 256 : bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes");
  }
  ~Scoped() { cudaFree(ptr_); }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;
  void* get() const { return ptr_; }
 private:
  void* ptr_ = nullptr;
};

class ScopedStream {
 public:
  ScopedStream() { gpu::checkCuda(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~ScopedStream() { cudaStreamDestroy(s_); }
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;
  cudaStream_t get() const { return s_; }
 private:
  cudaStream_t s_ = nullptr;
};

class ScopedEvent {
 public:
  ScopedEvent() { gpu::checkCuda(cudaEventCreate(&e_), "cudaEventCreate"); }
  ~ScopedEvent() { cudaEventDestroy(e_); }
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;
  cudaEvent_t get() const { return e_; }
 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace

double cudaGemmSeconds(int id, int m, int n, int k, Precision precision, int iterations) {
  using namespace gpu;
  if (m <= 0 || n <= 0 || k <= 0 || iterations <= 0) {
    throw std::runtime_error("cudaGemmSeconds: m, n, k and iterations must be positive");
  }
  checkCuda(cudaSetDevice(id), "cudaSetDevice(" + std::to_string(id) + ")");
  ScopedStream stream;
  ScopedEvent start, stop;
  const int64_t M = m, N = n, K = k;
  Scoped c(static_cast<size_t>(M * N) * sizeof(float));
  const auto run = [&](const SgemmArgs* f32, const HalfGemmArgs* f16) {
    if (f32) {
      launchSgemm(*f32, 1, stream.get());
    } else {
      launchHalfGemm(precision, *f16, 1, stream.get());
    }
  };
  // The fp16/bf16 timing is of the tensor-core kernel on 16-bit operands already on the device (as with a model's
  // converted weights), the same thing torch.matmul on half tensors measures.
  double ms = 0.0;
  const auto time = [&](const SgemmArgs* f32, const HalfGemmArgs* f16) {
    run(f32, f16);   // warm-up
    checkCuda(cudaEventRecord(start.get(), stream.get()), "cudaEventRecord");
    for (int i = 0; i < iterations; ++i) run(f32, f16);
    checkCuda(cudaEventRecord(stop.get(), stream.get()), "cudaEventRecord");
    checkCuda(cudaEventSynchronize(stop.get()), "gemm benchmark");
    float elapsed = 0.0f;
    checkCuda(cudaEventElapsedTime(&elapsed, start.get(), stop.get()), "cudaEventElapsedTime");
    ms = elapsed;
  };
  if (precision == Precision::F32) {
    Scoped a(static_cast<size_t>(M * K) * sizeof(float)), b(static_cast<size_t>(K * N) * sizeof(float));
    launchRandom(a.get(), Precision::F32, M * K, 1, stream.get());
    launchRandom(b.get(), Precision::F32, K * N, 2, stream.get());
    SgemmArgs args;
    args.m = M;
    args.n = N;
    args.k = K;
    args.a = static_cast<const float*>(a.get());
    args.lda = K;
    args.b = static_cast<const float*>(b.get());
    args.ldb = N;
    args.c = static_cast<float*>(c.get());
    args.ldc = N;
    args.vecA = K % 4 == 0;
    args.vecB = N % 4 == 0;
    args.vecC = N % 4 == 0;
    time(&args, nullptr);
  } else {
    const int64_t kp = roundUp(K, 8), np = roundUp(N, 8);
    Scoped a(static_cast<size_t>(M * kp) * 2), b(static_cast<size_t>(K * np) * 2);
    launchRandom(a.get(), precision, M * kp, 1, stream.get());
    launchRandom(b.get(), precision, K * np, 2, stream.get());
    HalfGemmArgs args;
    args.m = M;
    args.n = N;
    args.k = K;
    args.kp = kp;
    args.np = np;
    args.a = a.get();
    args.b = b.get();
    args.c = static_cast<float*>(c.get());
    args.ldc = N;
    time(nullptr, &args);
  }
  return ms / 1000.0 / iterations;
}

}  // namespace flotilla
