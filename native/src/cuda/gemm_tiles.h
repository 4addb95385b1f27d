// The phases of the two GEMM kernels (gemm.cu) as __host__ __device__ functions of (thread id, tile origin): global
// loads into registers, register -> shared-memory stores, the per-thread multiply-accumulate, and the epilogue.
// The kernels only order them with __syncthreads(); native/test/cuda_test.cc runs the same phases for every thread
// of a block on the CPU, in the order the barriers impose, and compares with a naive product. What the host run
// cannot check is the barrier placement itself and the WMMA fragment calls (emulated there by plain loops over the
// same shared-memory addresses).
//
// fp32 kernel (after the classic 128x128x8 register-blocked SGEMM): 256 threads, each computing an 8x8 block of Y
// as two 4-row x two 4-column quarters 64 apart, so shared-memory reads are float4 and conflict-free. Tiles of A
// and B are stored k-major ([kBK][kLds]) whatever their global layout, padded by 4 floats so the transposing
// stores of k-contiguous operands spread over the banks.
//
// 16-bit kernel: 8 warps in a 2x4 grid over a 128x128 block tile, each warp 64x32 = 4x2 WMMA 16x16x16 fragments;
// K steps of 32; A tile [128][kWLda], B tile [32][kWLdb] (rows padded by 8 elements, keeping the 32-byte fragment
// alignment); the epilogue stages each fragment through 1 KiB of shared memory per warp.
#pragma once

#include <vector_types.h>

#include <cstdint>

#include "index_math.h"
#include "kernels.h"

// Loops over the accumulators must unroll completely on the device, or the 8x8 block goes to local memory.
#ifdef __CUDA_ARCH__
#define FLOTILLA_UNROLL _Pragma("unroll")
#else
#define FLOTILLA_UNROLL
#endif

namespace flotilla {
namespace gpu {

constexpr int kTile = 128;       // block tile, M and N
constexpr int kTileK = 8;        // fp32 K step
constexpr int kLds = kTile + 4;  // fp32 shared-memory row (k-major)
constexpr int kGemmThreads = 256;

constexpr int kWTileK = 32;          // 16-bit K step
constexpr int kWLda = kWTileK + 8;   // 16-bit A tile row (m-major, k contiguous)
constexpr int kWLdb = kTile + 8;     // 16-bit B tile row (k-major, n contiguous)

/**
 * One operand tile (kTile rows of M or N by kTileK of K) into four registers per thread. `kContiguous`: element
 * (r, k) is at p[r * ld + k] (A, or B transposed); otherwise at p[k * ld + r]. Out-of-range elements load as 0.
 */
template <bool kContiguous>
FLOTILLA_HD void loadTile(const float* p, int64_t ld, int64_t rows, int64_t depth, int64_t r0, int64_t k0, int tid,
                          bool vec, float* reg) {
  if (kContiguous) {
    const int64_t r = r0 + tid / 2;
    const int64_t k = k0 + (tid % 2) * 4;
    if (r >= rows) {
      for (int q = 0; q < 4; ++q) reg[q] = 0.0f;
    } else if (vec && k + 3 < depth) {
      const float4 v = *reinterpret_cast<const float4*>(p + r * ld + k);
      reg[0] = v.x;
      reg[1] = v.y;
      reg[2] = v.z;
      reg[3] = v.w;
    } else {
      for (int q = 0; q < 4; ++q) reg[q] = k + q < depth ? p[r * ld + k + q] : 0.0f;
    }
  } else {
    const int64_t k = k0 + tid / 32;
    const int64_t r = r0 + (tid % 32) * 4;
    if (k >= depth) {
      for (int q = 0; q < 4; ++q) reg[q] = 0.0f;
    } else if (vec && r + 3 < rows) {
      const float4 v = *reinterpret_cast<const float4*>(p + k * ld + r);
      reg[0] = v.x;
      reg[1] = v.y;
      reg[2] = v.z;
      reg[3] = v.w;
    } else {
      for (int q = 0; q < 4; ++q) reg[q] = r + q < rows ? p[k * ld + r + q] : 0.0f;
    }
  }
}

/** The registers of loadTile into the k-major shared tile s[kTileK][kLds]. */
template <bool kContiguous>
FLOTILLA_HD void storeTile(float* s, int tid, const float* reg) {
  if (kContiguous) {
    const int r = tid / 2;
    const int k = (tid % 2) * 4;
    for (int q = 0; q < 4; ++q) s[(k + q) * kLds + r] = reg[q];
  } else {
    const int k = tid / 32;
    const int r = (tid % 32) * 4;
    *reinterpret_cast<float4*>(s + k * kLds + r) = make_float4(reg[0], reg[1], reg[2], reg[3]);
  }
}

/** Row (or column) of the thread's i-th output within the block tile: two runs of four, 64 apart. */
FLOTILLA_HD int microOffset(int t, int i) { return (i < 4 ? 0 : 64) + t * 4 + (i & 3); }

/** acc[i][j] += sum over the tile's K of As[k][row i] * Bs[k][col j]; tx = tid % 16 (columns), ty = tid / 16. */
FLOTILLA_HD void computeTile(const float* as, const float* bs, int tx, int ty, float (*acc)[8]) {
FLOTILLA_UNROLL
  for (int k = 0; k < kTileK; ++k) {
    float a[8], b[8];
    const float4 a0 = *reinterpret_cast<const float4*>(as + k * kLds + ty * 4);
    const float4 a1 = *reinterpret_cast<const float4*>(as + k * kLds + 64 + ty * 4);
    const float4 b0 = *reinterpret_cast<const float4*>(bs + k * kLds + tx * 4);
    const float4 b1 = *reinterpret_cast<const float4*>(bs + k * kLds + 64 + tx * 4);
    a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w;
    a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
    b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w;
    b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
FLOTILLA_UNROLL
    for (int i = 0; i < 8; ++i) {
FLOTILLA_UNROLL
      for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }
}

/** The epilogue of one element (row, col) of a batch whose row bias starts at `rowBias`. */
FLOTILLA_HD float epilogueValue(const GemmEpilogue& e, float alpha, float acc, int64_t row, int64_t col,
                                const float* rowBias) {
  float v = alpha * acc;
  if (e.colBias) v += e.biasScale * e.colBias[col * e.colBiasStep];
  if (rowBias) v += e.biasScale * rowBias[row];
  return applyActivation(e.activation, v, e.activationAlpha);
}

/** Writes the thread's 8x8 results (bounds-checked) to Y (c: this batch's Y). */
FLOTILLA_HD void storeOutput(const SgemmArgs& p, float* c, const float* rowBias, int64_t row0, int64_t col0, int tx,
                             int ty, const float (*acc)[8]) {
  FLOTILLA_UNROLL
  for (int i = 0; i < 8; ++i) {
    const int64_t row = row0 + microOffset(ty, i);
    if (row >= p.m) continue;
    FLOTILLA_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int64_t col = col0 + microOffset(tx, half * 4);
      float v[4];
      FLOTILLA_UNROLL
      for (int q = 0; q < 4; ++q) {
        v[q] = col + q < p.n ? epilogueValue(p.epilogue, p.alpha, acc[i][half * 4 + q], row, col + q, rowBias) : 0.0f;
      }
      if (p.vecC && col + 3 < p.n) {
        *reinterpret_cast<float4*>(c + row * p.ldc + col) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        FLOTILLA_UNROLL
        for (int q = 0; q < 4; ++q) {
          if (col + q < p.n) c[row * p.ldc + col + q] = v[q];
        }
      }
    }
  }
}

// ---- 16-bit tensor-core kernel --------------------------------------------------------------------------------

/** A's tile: rows [r0, r0+128) x K [k0, k0+32) of [M][Kp], two 8-element chunks per thread; 0 outside. */
FLOTILLA_HD void loadHalfTileA(const uint16_t* a, int64_t m, int64_t kp, int64_t r0, int64_t k0, int tid, uint4* reg) {
  for (int j = 0; j < 2; ++j) {
    const int chunk = tid + j * kGemmThreads;
    const int64_t r = r0 + chunk / 4;
    const int64_t k = k0 + (chunk % 4) * 8;
    reg[j] = (r < m && k < kp) ? *reinterpret_cast<const uint4*>(a + r * kp + k) : make_uint4(0, 0, 0, 0);
  }
}

FLOTILLA_HD void storeHalfTileA(uint16_t* s, int tid, const uint4* reg) {
  for (int j = 0; j < 2; ++j) {
    const int chunk = tid + j * kGemmThreads;
    *reinterpret_cast<uint4*>(s + (chunk / 4) * kWLda + (chunk % 4) * 8) = reg[j];
  }
}

/** B's tile: K rows [k0, k0+32) x columns [c0, c0+128) of [K][Np]; 0 outside. */
FLOTILLA_HD void loadHalfTileB(const uint16_t* b, int64_t k, int64_t np, int64_t k0, int64_t c0, int tid, uint4* reg) {
  for (int j = 0; j < 2; ++j) {
    const int chunk = tid + j * kGemmThreads;
    const int64_t r = k0 + chunk / 16;
    const int64_t c = c0 + (chunk % 16) * 8;
    reg[j] = (r < k && c < np) ? *reinterpret_cast<const uint4*>(b + r * np + c) : make_uint4(0, 0, 0, 0);
  }
}

FLOTILLA_HD void storeHalfTileB(uint16_t* s, int tid, const uint4* reg) {
  for (int j = 0; j < 2; ++j) {
    const int chunk = tid + j * kGemmThreads;
    *reinterpret_cast<uint4*>(s + (chunk / 16) * kWLdb + (chunk % 16) * 8) = reg[j];
  }
}

/** Shared-memory element offsets of warp `warp`'s i-th A fragment and j-th B fragment at K offset kk (0 or 16). */
FLOTILLA_HD int fragmentA(int warp, int i, int kk) { return ((warp / 4) * 64 + i * 16) * kWLda + kk; }
FLOTILLA_HD int fragmentB(int warp, int j, int kk) { return kk * kWLdb + (warp % 4) * 32 + j * 16; }

/** Tile-relative row and column of element e (0..255) of warp `warp`'s fragment (i, j), staged row-major 16x16. */
FLOTILLA_HD int fragmentRow(int warp, int i, int e) { return (warp / 4) * 64 + i * 16 + e / 16; }
FLOTILLA_HD int fragmentCol(int warp, int j, int e) { return (warp % 4) * 32 + j * 16 + e % 16; }

}  // namespace gpu
}  // namespace flotilla
