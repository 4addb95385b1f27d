// 2-D convolution, NCHW: per image and group, Y_g[Mg, oH*oW] = W_g[Mg, Cg*kH*kW] . col[Cg*kH*kW, oH*oW] through
// sgemm, the bias as the epilogue's row bias and the activation fused. col is im2col of the image (a 1x1, stride-1,
// unpadded convolution uses the image itself). Convolutions with few taps per output (Cg*kH*kW <= 64) are computed
// directly instead: a product that short, or with 1 to 8 rows (depthwise convolutions, a first layer on one input
// channel), cannot keep the microkernel busy, and im2col would copy the image kH*kW times for it. With AVX-512 and
// stride 1 along the width that is convDirectAvx512 (outputs in registers, 16 of a row at a time, the padding
// masked off), for up to 32 output channels per group; otherwise convDirect, through a padded copy, for up to 8 and
// stride 1. Batches of images run one image per thread.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu_kernels.h"

namespace flotilla {
namespace cpu {

namespace {

struct ConvGeometry {
  int64_t c, h, w;        // input channels per group, height, width
  int64_t kh, kw, sh, sw, pt, pl, dh, dw;
  int64_t oh, ow;
  int64_t pb, pr;         // bottom and right pads
};

int64_t ceilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/** col[(c * kh + i) * kw + j][oy * ow + ox] = x[c][oy * sh - pt + i * dh][ox * sw - pl + j * dw], 0 outside. */
void im2col(const float* x, const ConvGeometry& g, float* col) {
  const int64_t p = g.oh * g.ow;
  for (int64_t c = 0; c < g.c; c++) {
    for (int64_t i = 0; i < g.kh; i++) {
      for (int64_t j = 0; j < g.kw; j++) {
        float* dst = col + ((c * g.kh + i) * g.kw + j) * p;
        const int64_t colOffset = j * g.dw - g.pl;
        // ox where 0 <= ox * sw + colOffset < w
        const int64_t lo = std::min(g.ow, std::max<int64_t>(0, ceilDiv(-colOffset, g.sw)));
        const int64_t hi = std::max(lo, std::min(g.ow, ceilDiv(g.w - colOffset, g.sw)));
        for (int64_t oy = 0; oy < g.oh; oy++) {
          float* out = dst + oy * g.ow;
          const int64_t iy = oy * g.sh - g.pt + i * g.dh;
          if (iy < 0 || iy >= g.h) {
            std::fill(out, out + g.ow, 0.0f);
            continue;
          }
          const float* src = x + (c * g.h + iy) * g.w;
          std::fill(out, out + lo, 0.0f);
          if (g.sw == 1) {
            std::memcpy(out + lo, src + lo + colOffset, static_cast<size_t>(hi - lo) * sizeof(float));
          } else {
            for (int64_t ox = lo; ox < hi; ox++) out[ox] = src[ox * g.sw + colOffset];
          }
          std::fill(out + hi, out + g.ow, 0.0f);
        }
      }
    }
  }
}

/** Output channels per group up to which a convolution is computed directly (see the header comment). */
constexpr int64_t kDirectMaxChannels = 8;
/** ...and taps per output (Cg x kH x kW) up to which. */
constexpr int64_t kDirectMaxTaps = 64;
/**
 * With AVX-512 the direct kernel keeps 8 channels' accumulators in registers and loads each input vector once for
 * them, as efficient as the GEMM's microkernel while the taps are few, and without im2col: wider layers go direct
 * too, up to this many output channels per group (past it the GEMM's cache blocking pays).
 */
constexpr int64_t kDirectMaxChannelsAvx512 = 32;

FLOTILLA_MULTIVERSION
void axpy(float* __restrict y, const float* __restrict x, float a, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

FLOTILLA_MULTIVERSION
void finishRow(float* __restrict out, const float* __restrict acc, int64_t n, Activation act, float slope) {
  if (act == Activation::Relu) {
    for (int64_t k = 0; k < n; k++) out[k] = acc[k] > 0.0f ? acc[k] : 0.0f;
  } else if (act == Activation::LeakyRelu) {
    for (int64_t k = 0; k < n; k++) out[k] = acc[k] < 0.0f ? acc[k] * slope : acc[k];
  } else {
    std::copy(acc, acc + n, out);
  }
}

thread_local std::vector<float> tlsPadded;
thread_local std::vector<float> tlsWide;

/**
 * One image and group, directly, for stride 1, without AVX-512: the input is copied once into a zero-padded buffer
 * Wp wide, and each output channel accumulates in a buffer of the same width, so every tap is one contiguous
 * multiply-add over all oH x Wp positions (long loops that vectorise; the Wp - oW columns past each row are computed
 * and dropped). Rows of 14 or 28 outputs looped one by one left most of each vector idle.
 */
void convDirect(const float* x, const float* wg, const float* bias, float* y, const ConvGeometry& g, int64_t mg,
                Activation act, float slope) {
  const int64_t wp = std::max(g.w + g.pl + g.pr, g.ow + (g.kw - 1) * g.dw);
  const int64_t hp = std::max(g.h + g.pt + g.pb, g.oh + (g.kh - 1) * g.dh);
  const int64_t slack = (g.kw - 1) * g.dw + 1;   // the last tap of the last row reads this far past hp * wp
  const int64_t planeP = hp * wp;
  tlsPadded.assign(static_cast<size_t>(g.c * planeP + slack), 0.0f);
  for (int64_t c = 0; c < g.c; c++) {
    for (int64_t r = 0; r < g.h; r++) {
      std::copy(x + (c * g.h + r) * g.w, x + (c * g.h + r + 1) * g.w,
                tlsPadded.data() + c * planeP + (r + g.pt) * wp + g.pl);
    }
  }
  const int64_t n = g.oh * wp;
  tlsWide.resize(static_cast<size_t>(n));
  float* acc = tlsWide.data();
  for (int64_t m = 0; m < mg; m++) {
    std::fill(acc, acc + n, bias != nullptr ? bias[m] : 0.0f);
    for (int64_t c = 0; c < g.c; c++) {
      const float* plane = tlsPadded.data() + c * planeP;
      for (int64_t i = 0; i < g.kh; i++) {
        for (int64_t j = 0; j < g.kw; j++) {
          axpy(acc, plane + i * g.dh * wp + j * g.dw, wg[((m * g.c + c) * g.kh + i) * g.kw + j], n);
        }
      }
    }
    float* out = y + m * g.oh * g.ow;
    for (int64_t oy = 0; oy < g.oh; oy++) finishRow(out + oy * g.ow, acc + oy * wp, g.ow, act, slope);
  }
}

/**
 * The taps of one kernel row of a direct convolution, computed once a call: tap q = (c, j) reads the input at
 * offset[q] from the start of its window's row, with weight weight[q] (+ i * kW for kernel row i), and
 * masks[chunk * taps + q] says which lanes of a 16-wide chunk of an output row read inside the image's columns (the
 * rest would read the padding: loaded as zero). outMasks[chunk]: the lanes that are outputs at all. The same for
 * every row and plane; rows are checked per block.
 */
struct DirectTaps {
  int64_t taps = 0, chunks = 0;   // taps per kernel row: Cg x kW
  std::vector<int64_t> offset;
  std::vector<int64_t> weight;
  std::vector<__mmask16> masks;
  std::vector<__mmask16> outMasks;
  // Every tap k = (c, i, j) in one list, for blocks whose rows are all inside the image: its input offset from the
  // window's top-left corner, and q = (c, j) for its mask. (Its weight is the k-th of the output channel's.)
  std::vector<int64_t> allOffset, allColumn;
};

/** The lanes [lo, hi) of a 16-lane mask (clipped to 0..16). */
__mmask16 laneRange(int64_t lo, int64_t hi) {
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, 16);
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
}

void directTaps(const ConvGeometry& g, DirectTaps* t) {
  t->taps = g.c * g.kw;
  t->chunks = (g.ow + 15) / 16;
  t->offset.resize(static_cast<size_t>(t->taps));
  t->weight.resize(static_cast<size_t>(t->taps));
  t->masks.resize(static_cast<size_t>(t->chunks * t->taps));
  t->outMasks.resize(static_cast<size_t>(t->chunks));
  for (int64_t ch = 0; ch < t->chunks; ch++) t->outMasks[static_cast<size_t>(ch)] = laneRange(0, g.ow - 16 * ch);
  const int64_t all = g.c * g.kh * g.kw;
  t->allOffset.resize(static_cast<size_t>(all));
  t->allColumn.resize(static_cast<size_t>(all));
  for (int64_t c = 0, k = 0; c < g.c; c++) {
    for (int64_t i = 0; i < g.kh; i++) {
      for (int64_t j = 0; j < g.kw; j++, k++) {
        t->allOffset[static_cast<size_t>(k)] = (c * g.h + i * g.dh) * g.w + j * g.dw;
        t->allColumn[static_cast<size_t>(k)] = c * g.kw + j;
      }
    }
  }
  for (int64_t c = 0, q = 0; c < g.c; c++) {
    for (int64_t j = 0; j < g.kw; j++, q++) {
      t->offset[static_cast<size_t>(q)] = c * g.h * g.w + j * g.dw;
      t->weight[static_cast<size_t>(q)] = c * g.kh * g.kw + j;
      // Output column ox reads input column ox + j * dw - pl: inside for ox in [pl - j * dw, w + pl - j * dw).
      const int64_t lo = g.pl - j * g.dw, hi = g.w + g.pl - j * g.dw;
      for (int64_t ch = 0; ch < t->chunks; ch++) {
        t->masks[static_cast<size_t>(ch * t->taps + q)] =
            t->outMasks[static_cast<size_t>(ch)] & laneRange(lo - 16 * ch, hi - 16 * ch);
      }
    }
  }
}

// GCC 12's _mm512_max_ps is built on _mm512_undefined_ps, which -Wmaybe-uninitialized flags inside target("avx512f")
// functions: a false positive in the header, not in this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/** The fused activation of the direct kernels on 16 outputs: Relu or LeakyRelu (the others run afterwards). */
__attribute__((target("avx512f"), always_inline)) inline __m512 activateAvx512(__m512 a, Activation act,
                                                                             __m512 slopes) {
  const __m512 zero = _mm512_setzero_ps();
  if (act == Activation::Relu) return _mm512_max_ps(a, zero);
  if (act == Activation::LeakyRelu) return _mm512_mask_mul_ps(a, _mm512_cmp_ps_mask(a, zero, _CMP_LT_OQ), a, slopes);
  return a;
}
#pragma GCC diagnostic pop

/** A block of MG output channels x up to R output rows of one image and group. */
struct DirectBlock {
  const float* x;       // the group's input planes
  const float* w;       // MG rows of Cg x kH x kW weights
  const float* bias;    // MG values, or null
  float* y;             // the first output plane of the block
  int64_t oy0, rows;    // output rows [oy0, oy0 + rows), rows <= R
};

// GCC 12's _mm512_max_ps is built on _mm512_undefined_ps, which -Wmaybe-uninitialized flags inside target("avx512f")
// functions: a false positive in the header, not in this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/**
 * A direct convolution for stride 1 along the width (AVX-512): the outputs are computed in registers, 16 of a row
 * at a time, MG channels x R rows of them (enough independent accumulators to cover the multiply-add latency even
 * for one channel, as in a depthwise convolution), each input vector loaded straight from the image with a mask
 * that zeroes the lanes falling into the padding. No padded copy of the image, no buffer to finish from, and the
 * bias and Relu/LeakyRelu applied on the way out. Edge: some of the block's rows have window rows above or below
 * the image (or are past its last output row), whose loads are masked off too. The unroll pragmas matter: without
 * them GCC keeps the accumulators in memory and stores them on every tap.
 */
template <int MG, int R, bool Edge>
__attribute__((target("avx512f"))) void directBlockAvx512(const DirectBlock& b, const ConvGeometry& g,
                                                          const DirectTaps& t, Activation act, float slope) {
  const int64_t taps = t.taps;
  const int64_t kc = g.c * g.kh * g.kw;
  const int64_t plane = g.oh * g.ow;
  const int64_t rows = b.rows;
  const int64_t* offset = t.offset.data();
  const int64_t* weight = t.weight.data();
  const __m512 slopes = _mm512_set1_ps(slope);
  for (int64_t ch = 0; ch < t.chunks; ch++) {
    const int64_t ox0 = 16 * ch;
    const __mmask16* masks = t.masks.data() + ch * taps;
    __m512 acc[MG][R];
#pragma GCC unroll 16
    for (int m = 0; m < MG; m++) {
      const __m512 init = _mm512_set1_ps(b.bias != nullptr ? b.bias[m] : 0.0f);
#pragma GCC unroll 16
      for (int r = 0; r < R; r++) acc[m][r] = init;
    }
    if constexpr (!Edge) {
      // One loop over all the taps: a loop per kernel row, three taps long for one input channel, cost 8% more.
      const float* src[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; r++) src[r] = b.x + ((b.oy0 + r) * g.sh - g.pt) * g.w + ox0 - g.pl;
      const int64_t* allOffset = t.allOffset.data();
      const int64_t* allColumn = t.allColumn.data();
      for (int64_t k = 0; k < kc; k++) {
        const int64_t off = allOffset[k];
        const __mmask16 mask = masks[allColumn[k]];
        __m512 v[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) v[r] = _mm512_maskz_loadu_ps(mask, src[r] + off);
#pragma GCC unroll 16
        for (int m = 0; m < MG; m++) {
          const __m512 wv = _mm512_set1_ps(b.w[m * kc + k]);
#pragma GCC unroll 16
          for (int r = 0; r < R; r++) acc[m][r] = _mm512_fmadd_ps(wv, v[r], acc[m][r]);
        }
      }
    } else {
      for (int64_t i = 0; i < g.kh; i++) {
        // Where row r's window row i starts (rows outside the image: anywhere valid, their loads are masked off;
        // the left padding's lanes are masked too, never read).
        const float* src[R];
        __mmask16 rowMask[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
          const int64_t iy = (b.oy0 + r) * g.sh - g.pt + i * g.dh;
          const bool inside = r < rows && iy >= 0 && iy < g.h;
          src[r] = b.x + (inside ? iy : 0) * g.w + ox0 - g.pl;
          rowMask[r] = inside ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>(0);
        }
        const float* wi = b.w + i * g.kw;
        for (int64_t q = 0; q < taps; q++) {
          const int64_t off = offset[q];
          __m512 v[R];
#pragma GCC unroll 16
          for (int r = 0; r < R; r++) v[r] = _mm512_maskz_loadu_ps(masks[q] & rowMask[r], src[r] + off);
          const float* wq = wi + weight[q];
#pragma GCC unroll 16
          for (int m = 0; m < MG; m++) {
            const __m512 wv = _mm512_set1_ps(wq[m * kc]);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++) acc[m][r] = _mm512_fmadd_ps(wv, v[r], acc[m][r]);
          }
        }
      }
    }
    const __mmask16 out = t.outMasks[static_cast<size_t>(ch)];
    float* y = b.y + b.oy0 * g.ow + ox0;
#pragma GCC unroll 16
    for (int m = 0; m < MG; m++) {
#pragma GCC unroll 16
      for (int r = 0; r < R; r++) {
        if (r >= rows) break;
        _mm512_mask_storeu_ps(y + m * plane + r * g.ow, out, activateAvx512(acc[m][r], act, slopes));
      }
    }
  }
}
#pragma GCC diagnostic pop

/**
 * Rows (or vectors) per block for MG channels: about 24 accumulators of the 32 registers, at most 8 rows. For 8
 * channels 3 rows ran 13% faster than 2; 4 (32 accumulators) spilled.
 */
constexpr int rowsFor(int mg) { return mg >= 7 ? 3 : mg >= 5 ? 4 : mg == 4 ? 5 : mg == 3 ? 6 : 8; }

using DirectKernel = void (*)(const DirectBlock&, const ConvGeometry&, const DirectTaps&, Activation, float);
template <bool Edge>
constexpr DirectKernel kDirectKernels[8] = {
    &directBlockAvx512<1, rowsFor(1), Edge>, &directBlockAvx512<2, rowsFor(2), Edge>,
    &directBlockAvx512<3, rowsFor(3), Edge>, &directBlockAvx512<4, rowsFor(4), Edge>,
    &directBlockAvx512<5, rowsFor(5), Edge>, &directBlockAvx512<6, rowsFor(6), Edge>,
    &directBlockAvx512<7, rowsFor(7), Edge>, &directBlockAvx512<8, rowsFor(8), Edge>};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/**
 * R output rows [oy0, oy0 + R) x 16 columns of a 3x3 depthwise convolution with stride 1 and no dilation along the
 * height: the R + 2 input rows are each loaded once per kernel column and multiplied into every output row they
 * serve (a third of the loads of row by row, and R independent accumulators in flight). Rows outside the image
 * load nothing.
 */
template <int R>
__attribute__((target("avx512f"))) void depthwise3x3RowsAvx512(const float* x, const __m512* wv, __m512 init,
                                                               float* y, int64_t oy0, int64_t h, int64_t w,
                                                               int64_t ow, int64_t top, int64_t colStep,
                                                               const __mmask16* masks, __mmask16 out,
                                                               Activation act, __m512 slopes) {
  __m512 acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; r++) acc[r] = init;
#pragma GCC unroll 16
  for (int k = 0; k < R + 2; k++) {
    const int64_t iy = oy0 - top + k;
    const bool inside = iy >= 0 && iy < h;
    const float* row = x + (inside ? iy : 0) * w;
#pragma GCC unroll 3
    for (int j = 0; j < 3; j++) {
      const __m512 v = _mm512_maskz_loadu_ps(inside ? masks[j] : static_cast<__mmask16>(0), row + j * colStep);
#pragma GCC unroll 3
      for (int i = 0; i < 3; i++) {
        // Input row oy0 - top + k is kernel row i of output row oy0 + k - i.
        if (k - i >= 0 && k - i < R) acc[k - i] = _mm512_fmadd_ps(wv[i * 3 + j], v, acc[k - i]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; r++) {
    _mm512_mask_storeu_ps(y + (oy0 + r) * ow, out, activateAvx512(acc[r], act, slopes));
  }
}

using Depthwise3x3Rows = void (*)(const float*, const __m512*, __m512, float*, int64_t, int64_t, int64_t, int64_t,
                                  int64_t, int64_t, const __mmask16*, __mmask16, Activation, __m512);
constexpr int kDepthwiseRows = 7;
constexpr Depthwise3x3Rows kDepthwise3x3Rows[kDepthwiseRows] = {
    &depthwise3x3RowsAvx512<1>, &depthwise3x3RowsAvx512<2>, &depthwise3x3RowsAvx512<3>, &depthwise3x3RowsAvx512<4>,
    &depthwise3x3RowsAvx512<5>, &depthwise3x3RowsAvx512<6>, &depthwise3x3RowsAvx512<7>};

/**
 * Planes [begin, end) (image x channel) of a depthwise convolution (one input and one output channel per group),
 * AVX-512, stride 1 along the width: 16 outputs of a row at a time, two accumulators a row, the rows independent of
 * each other (the core overlaps them: blocks of rows in registers as directBlockAvx512 keeps them were slower on
 * planes of 14 x 14, their set-up per block and kernel row costing as much as the taps). KH x KW > 0: the weights
 * stay in registers and every tap is unrolled; rows with kernel rows above or below the image mask those rows'
 * loads off. 0 x 0: any kernel, its taps looped over the rows inside. The geometry is copied to locals: read
 * through `g`, GCC reloads it after every store.
 */
template <int KH, int KW>
__attribute__((target("avx512f"))) void depthwiseAvx512(const float* px, const float* pw, const float* bias,
                                                        float* py, int64_t begin, int64_t end, int64_t groups,
                                                        const ConvGeometry& g, const DirectTaps& t, Activation act,
                                                        float slope) {
  constexpr bool kFixed = KH > 0;
  const int64_t kh = kFixed ? KH : g.kh, kw = kFixed ? KW : g.kw;
  const int64_t h = g.h, wd = g.w, oh = g.oh, ow = g.ow, sh = g.sh, pt = g.pt, pl = g.pl, dh = g.dh, dw = g.dw;
  const int64_t inPlane = h * wd, outPlane = oh * ow, chunks = t.chunks;
  const __m512 slopes = _mm512_set1_ps(slope);
  // 3x3 with stride 1 and no dilation along the height: input rows shared between output rows.
  const bool shared = KH == 3 && KW == 3 && sh == 1 && dh == 1;
  for (int64_t p = begin; p < end; p++) {
    const int64_t grp = p % groups;
    const float* x = px + p * inPlane;
    const float* w = pw + grp * kh * kw;
    float* y = py + p * outPlane;
    const __m512 init = _mm512_set1_ps(bias != nullptr ? bias[grp] : 0.0f);
    __m512 wv[kFixed ? KH * KW : 1];
    if constexpr (kFixed) {
#pragma GCC unroll 16
      for (int k = 0; k < KH * KW; k++) wv[k] = _mm512_set1_ps(w[k]);
    }
    for (int64_t ch = 0; ch < chunks; ch++) {
      const int64_t ox0 = 16 * ch;
      const __mmask16* masks = t.masks.data() + ch * t.taps;   // per kernel column j (Cg = 1: taps = kW)
      const __mmask16 out = t.outMasks[static_cast<size_t>(ch)];
      if (shared) {
        // Blocks of up to kDepthwiseRows rows, as even as possible (14 -> 7 + 7).
        const int64_t blocks = (oh + kDepthwiseRows - 1) / kDepthwiseRows;
        for (int64_t blk = 0, oy0 = 0; blk < blocks; blk++) {
          const int64_t rows = (oh - oy0) / (blocks - blk);
          kDepthwise3x3Rows[rows - 1](x + ox0 - pl, wv, init, y + ox0, oy0, h, wd, ow, pt, dw, masks, out, act,
                                      slopes);
          oy0 += rows;
        }
        continue;
      }
      for (int64_t oy = 0; oy < oh; oy++) {
        const int64_t iy0 = oy * sh - pt;
        __m512 a;
        if constexpr (kFixed) {
          __m512 acc0 = init, acc1 = _mm512_setzero_ps();
#pragma GCC unroll 16
          for (int i = 0; i < KH; i++) {
            const int64_t iy = iy0 + i * dh;
            const bool inside = iy >= 0 && iy < h;
            const float* row = x + (inside ? iy : 0) * wd + ox0 - pl;
#pragma GCC unroll 16
            for (int j = 0; j < KW; j++) {
              const __m512 v = _mm512_maskz_loadu_ps(inside ? masks[j] : static_cast<__mmask16>(0), row + j * dw);
              if ((i * KW + j) % 2 == 0) acc0 = _mm512_fmadd_ps(wv[i * KW + j], v, acc0);
              else acc1 = _mm512_fmadd_ps(wv[i * KW + j], v, acc1);
            }
          }
          a = _mm512_add_ps(acc0, acc1);
        } else {
          __m512 acc = init;
          for (int64_t i = 0; i < kh; i++) {
            const int64_t iy = iy0 + i * dh;
            if (iy < 0 || iy >= h) continue;
            const float* row = x + iy * wd + ox0 - pl;
            for (int64_t j = 0; j < kw; j++) {
              acc = _mm512_fmadd_ps(_mm512_set1_ps(w[i * kw + j]), _mm512_maskz_loadu_ps(masks[j], row + j * dw), acc);
            }
          }
          a = acc;
        }
        _mm512_mask_storeu_ps(y + oy * ow + ox0, out, activateAvx512(a, act, slopes));
      }
    }
  }
}

/**
 * A 1x1 convolution with stride 1 and no padding (a product W[Mg, Cg] . X[Cg, H x W]), AVX-512: MG output channels
 * x R vectors of 16 positions [p0, p0 + 16 R) in registers, each input vector loaded once for the MG channels.
 */
template <int MG, int R>
__attribute__((target("avx512f"))) void pointwiseBlockAvx512(const float* x, const float* w, const float* bias,
                                                             float* y, int64_t c, int64_t p, int64_t p0,
                                                             Activation act, float slope) {
  __mmask16 masks[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; r++) masks[r] = laneRange(0, p - p0 - 16 * r);
  __m512 acc[MG][R];
#pragma GCC unroll 16
  for (int m = 0; m < MG; m++) {
    const __m512 init = _mm512_set1_ps(bias != nullptr ? bias[m] : 0.0f);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) acc[m][r] = init;
  }
  for (int64_t k = 0; k < c; k++) {
    const float* src = x + k * p + p0;
    __m512 v[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) v[r] = _mm512_maskz_loadu_ps(masks[r], src + 16 * r);
#pragma GCC unroll 16
    for (int m = 0; m < MG; m++) {
      const __m512 wv = _mm512_set1_ps(w[m * c + k]);
#pragma GCC unroll 16
      for (int r = 0; r < R; r++) acc[m][r] = _mm512_fmadd_ps(wv, v[r], acc[m][r]);
    }
  }
  const __m512 slopes = _mm512_set1_ps(slope);
#pragma GCC unroll 16
  for (int m = 0; m < MG; m++) {
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      _mm512_mask_storeu_ps(y + m * p + p0 + 16 * r, masks[r], activateAvx512(acc[m][r], act, slopes));
    }
  }
}
#pragma GCC diagnostic pop

using PointwiseKernel = void (*)(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t,
                                 Activation, float);
constexpr PointwiseKernel kPointwiseKernels[8] = {
    &pointwiseBlockAvx512<1, rowsFor(1)>, &pointwiseBlockAvx512<2, rowsFor(2)>, &pointwiseBlockAvx512<3, rowsFor(3)>,
    &pointwiseBlockAvx512<4, rowsFor(4)>, &pointwiseBlockAvx512<5, rowsFor(5)>, &pointwiseBlockAvx512<6, rowsFor(6)>,
    &pointwiseBlockAvx512<7, rowsFor(7)>, &pointwiseBlockAvx512<8, rowsFor(8)>};

thread_local DirectTaps tlsTaps;

/** Scalar multiply-adds below which a direct convolution stays on one thread (waking the pool costs more). */
constexpr int64_t kDirectParallelWork = 1 << 22;

/**
 * Every image and group of a convolution directly with AVX-512: depthwise ones plane by plane, pointwise (1x1,
 * stride 1, unpadded) ones in blocks of positions, the rest in blocks of rows through directBlockAvx512; channel
 * blocks of at most 8, as even as possible (12 -> 6 + 6, not 8 + 4). The blocks are independent, so they are
 * spread over the pool when the work is large enough.
 */
void convDirectAvx512(const float* px, const float* pw, const float* bias, float* py, int64_t n, int64_t groups,
                      int64_t mg, const ConvGeometry& g, bool pointwise, Activation act, float slope,
                      ThreadPool* pool) {
  const int64_t kc = g.c * g.kh * g.kw;
  const int64_t plane = g.oh * g.ow;
  const int64_t inPlane = g.h * g.w;
  const int64_t channelBlocks = (mg + 7) / 8;
  const int64_t per = (mg + channelBlocks - 1) / channelBlocks;
  if (!pointwise) directTaps(g, &tlsTaps);   // (pointwise blocks need no masks but their last vector's)
  const DirectTaps& taps = tlsTaps;
  struct Shape {
    int64_t m0, mb, rows, blocks;
  };
  Shape shapes[(kDirectMaxChannelsAvx512 + 7) / 8];   // per channel block
  int64_t blocksPerGroup = 0;
  // A 1x1 depthwise convolution (a scale per channel) is pointwise: its taps were not computed above.
  const bool depthwise = !pointwise && g.c == 1 && mg == 1;
  if (depthwise) {
    blocksPerGroup = 1;   // a plane
  } else {
    for (int64_t cb = 0; cb < channelBlocks; cb++) {
      const int64_t m0 = cb * per, mb = std::min(per, mg - m0);
      const int64_t rows = rowsFor(static_cast<int>(mb));
      // Pointwise blocks are `rows` vectors of 16 positions; the others `rows` output rows.
      const int64_t blocks = pointwise ? (plane + 16 * rows - 1) / (16 * rows) : (g.oh + rows - 1) / rows;
      shapes[cb] = {m0, mb, rows, blocks};
      blocksPerGroup += blocks;
    }
  }
  const bool fixed3x3 = g.kh == 3 && g.kw == 3;
  auto run = [&](int64_t begin, int64_t end) {
    if (depthwise) {   // a unit is a plane: image x group
      if (fixed3x3) depthwiseAvx512<3, 3>(px, pw, bias, py, begin, end, groups, g, taps, act, slope);
      else depthwiseAvx512<0, 0>(px, pw, bias, py, begin, end, groups, g, taps, act, slope);
      return;
    }
    for (int64_t u = begin; u < end; u++) {
      const int64_t ig = u / blocksPerGroup;   // image * groups + group
      const int64_t img = ig / groups, grp = ig - img * groups;
      const float* x = px + ig * g.c * inPlane;
      float* y = py + (img * groups + grp) * mg * plane;
      int64_t blk = u - ig * blocksPerGroup, cb = 0;
      while (blk >= shapes[cb].blocks) blk -= shapes[cb++].blocks;
      const Shape& s = shapes[cb];
      const float* w = pw + (grp * mg + s.m0) * kc;
      const float* bs = bias != nullptr ? bias + grp * mg + s.m0 : nullptr;
      y += s.m0 * plane;
      if (pointwise) {
        kPointwiseKernels[s.mb - 1](x, w, bs, y, g.c, plane, blk * 16 * s.rows, act, slope);
        continue;
      }
      DirectBlock b{x, w, bs, y, blk * s.rows, std::min(s.rows, g.oh - blk * s.rows)};
      // Rows whose windows lie inside the image: no row masks.
      const bool edge = b.rows < s.rows || b.oy0 * g.sh - g.pt < 0 ||
                        (b.oy0 + b.rows - 1) * g.sh - g.pt + (g.kh - 1) * g.dh >= g.h;
      (edge ? kDirectKernels<true> : kDirectKernels<false>)[s.mb - 1](b, g, taps, act, slope);
    }
  };
  const int64_t units = n * groups * blocksPerGroup;
  const int threads = pool != nullptr ? pool->size() : 1;
  if (threads <= 1 || units < 2 || n * groups * mg * plane * kc < kDirectParallelWork) {
    run(0, units);
    return;
  }
  const int64_t tasks = std::min<int64_t>(threads, units);
  pool->parallelFor(tasks, [&](int64_t t) {
    // The taps are the caller's thread_local: helpers read the caller's copy.
    run(units * t / tasks, units * (t + 1) / tasks);
  });
}

}  // namespace

std::unique_ptr<OpState> prepareConv(const OpDesc&, const std::vector<const TensorDesc*>&) {
  return std::make_unique<ConvState>();
}

void conv(const OpDesc& op, ConvState* state, const std::vector<TensorRef>& inputs, const TensorRef& y,
          ThreadPool* pool) {
  const OpAttrs& at = op.attrs;
  const TensorRef& x = inputs[0];
  const TensorRef& w = inputs[1];
  const float* bias = inputs.size() > 2 && inputs[2].data != nullptr ? inputs[2].f32() : nullptr;
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const int64_t m = w.shape[0];
  const int64_t groups = at.group;
  const int64_t cg = c / groups, mg = m / groups;
  ConvGeometry g{cg, h, wd, w.shape[2], w.shape[3], at.strides[0], at.strides[1], at.pads[0], at.pads[1],
                 at.dilations[0], at.dilations[1], y.shape[2], y.shape[3], at.pads[2], at.pads[3]};
  const int64_t kc = cg * g.kh * g.kw;
  const int64_t p = g.oh * g.ow;
  if (y.numel() == 0) return;
  const bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && at.pads[0] == 0 && at.pads[1] == 0 &&
                      at.pads[2] == 0 && at.pads[3] == 0;
  const float* px = x.f32();
  const float* pw = w.f32();
  float* py = y.f32();

  if (gemmIsa() == Isa::Avx512 && g.sw == 1 && kc <= kDirectMaxTaps && mg <= kDirectMaxChannelsAvx512) {
    ConvGeometry d = g;
    if (direct) {
      // A 1x1 convolution over contiguous planes: one row of H x W, so the 16-wide chunks run across rows.
      d.h = d.oh = 1;
      d.w = d.ow = h * wd;
    }
    const bool after = activationAfterDirectConv(at.activation);
    convDirectAvx512(px, pw, bias, py, n, groups, mg, d, direct, after ? Activation::None : at.activation,
                     at.activationAlpha, pool);
    if (after) activateInPlace(at.activation, py, y.numel(), pool);
    return;
  }

  const bool viaGemm = mg > kDirectMaxChannels || kc > kDirectMaxTaps || g.sh != 1 || g.sw != 1;
  auto image = [&](int64_t img, float* col, ThreadPool* inner) {
    if (!viaGemm) {
      const bool after = activationAfterDirectConv(at.activation);
      for (int64_t grp = 0; grp < groups; grp++) {
        float* out = py + (img * m + grp * mg) * p;
        convDirect(px + (img * c + grp * cg) * h * wd, pw + grp * mg * kc, bias != nullptr ? bias + grp * mg : nullptr,
                   out, g, mg, after ? Activation::None : at.activation, at.activationAlpha);
      }
      if (after) activateInPlace(at.activation, py + img * m * p, m * p, inner);
      return;
    }
    for (int64_t grp = 0; grp < groups; grp++) {
      const float* xg = px + (img * c + grp * cg) * h * wd;
      const float* b = xg;
      if (!direct) {
        im2col(xg, g, col);
        b = col;
      }
      GemmEpilogue epi;
      epi.rowBias = bias != nullptr ? bias + grp * mg : nullptr;
      epi.activation = at.activation;
      epi.activationAlpha = at.activationAlpha;
      sgemm(false, false, mg, p, kc, 1.0f, pw + grp * mg * kc, kc, b, p, 0.0f, py + (img * m + grp * mg) * p, p, epi,
            inner);
    }
  };

  const int threads = pool != nullptr ? pool->size() : 1;
  const int64_t tasks = threads > 1 && n >= threads ? std::min<int64_t>(threads, n) : 1;
  const size_t colSize = direct || !viaGemm ? 0 : static_cast<size_t>(kc * p);
  if (state->columns.size() < static_cast<size_t>(tasks)) state->columns.resize(static_cast<size_t>(tasks));
  for (int64_t t = 0; t < tasks; t++) {
    if (state->columns[static_cast<size_t>(t)].size() < colSize) state->columns[static_cast<size_t>(t)].resize(colSize);
  }
  if (tasks == 1) {
    for (int64_t img = 0; img < n; img++) image(img, state->columns[0].data(), pool);
    return;
  }
  pool->parallelFor(tasks, [&](int64_t task) {
    float* col = state->columns[static_cast<size_t>(task)].data();
    for (int64_t img = n * task / tasks; img < n * (task + 1) / tasks; img++) image(img, col, nullptr);
  });
}

}  // namespace cpu
}  // namespace flotilla
