// 2-D convolution, NCHW: per image and group, Y_g[Mg, oH*oW] = W_g[Mg, Cg*kH*kW] . col[Cg*kH*kW, oH*oW] through
// sgemm, the bias as the epilogue's row bias and the activation fused. col is im2col of the image (a 1x1, stride-1,
// unpadded convolution uses the image itself). Convolutions with few output channels per group (depthwise ones, a
// first layer on one input channel) are computed directly instead: a product with 1 to 8 rows cannot keep the
// microkernel busy, and im2col would copy the image kH*kW times for it. Batches of images run one image per thread.
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
thread_local std::vector<int64_t> tlsOffsets;

/**
 * acc[m * n + t] = bias[m] + sum over taps k of w[m * taps + k] * x[t + offset[k]] for MG output channels at once:
 * each input vector is loaded once and multiplied into all MG accumulators, which stay in registers (the axpy pass
 * per tap loaded and stored the accumulator taps x channels times, and was bound by those stores).
 */
template <int MG>
__attribute__((target("avx512f"))) void tapSumAvx512(const float* x, const int64_t* offset, int64_t taps,
                                                     const float* w, const float* bias, float* acc, int64_t n) {
  for (int64_t t = 0; t < n; t += 16) {
    const __mmask16 mask = n - t >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - t)) - 1);
    __m512 s[MG];
    for (int m = 0; m < MG; m++) s[m] = _mm512_set1_ps(bias != nullptr ? bias[m] : 0.0f);
    for (int64_t k = 0; k < taps; k++) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + t + offset[k]);
      for (int m = 0; m < MG; m++) s[m] = _mm512_fmadd_ps(_mm512_set1_ps(w[m * taps + k]), xv, s[m]);
    }
    for (int m = 0; m < MG; m++) _mm512_mask_storeu_ps(acc + m * n + t, mask, s[m]);
  }
}

using TapSum = void (*)(const float*, const int64_t*, int64_t, const float*, const float*, float*, int64_t);
constexpr TapSum kTapSums[8] = {&tapSumAvx512<1>, &tapSumAvx512<2>, &tapSumAvx512<3>, &tapSumAvx512<4>,
                                &tapSumAvx512<5>, &tapSumAvx512<6>, &tapSumAvx512<7>, &tapSumAvx512<8>};

/**
 * One image and group, directly, for stride 1: the input is copied once into a zero-padded buffer Wp wide, and each
 * output channel accumulates in a buffer of the same width, so every tap is one contiguous multiply-add over all
 * oH x Wp positions (long loops that vectorise; the Wp - oW columns past each row are computed and dropped). Rows of
 * 14 or 28 outputs looped one by one left most of each vector idle.
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
      std::copy(x + (c * g.h + r) * g.w, x + (c * g.h + r + 1) * g.w, tlsPadded.data() + c * planeP + (r + g.pt) * wp + g.pl);
    }
  }
  const int64_t n = g.oh * wp;
  if (gemmIsa() == Isa::Avx512 && mg <= 8) {
    // Tap k = (c, i, j) reads the padded input at c * planeP + i * dh * wp + j * dw from the output position.
    const int64_t taps = g.c * g.kh * g.kw;
    tlsOffsets.resize(static_cast<size_t>(taps));
    for (int64_t c = 0, k = 0; c < g.c; c++) {
      for (int64_t i = 0; i < g.kh; i++) {
        for (int64_t j = 0; j < g.kw; j++, k++) {
          tlsOffsets[static_cast<size_t>(k)] = c * planeP + i * g.dh * wp + j * g.dw;
        }
      }
    }
    tlsWide.resize(static_cast<size_t>(mg * n));
    float* acc = tlsWide.data();
    kTapSums[mg - 1](tlsPadded.data(), tlsOffsets.data(), taps, wg, bias, acc, n);
    for (int64_t m = 0; m < mg; m++) {
      float* out = y + m * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; oy++) finishRow(out + oy * g.ow, acc + m * n + oy * wp, g.ow, act, slope);
    }
    return;
  }
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

  const bool viaGemm = mg > kDirectMaxChannels || kc > kDirectMaxTaps || g.sh != 1 || g.sw != 1;
  auto image = [&](int64_t img, float* col, ThreadPool* inner) {
    if (!viaGemm) {
      const bool after = activationAfterGemm(at.activation);
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
      const bool after = activationAfterGemm(at.activation);
      epi.activation = after ? Activation::None : at.activation;
      epi.activationAlpha = at.activationAlpha;
      float* out = py + (img * m + grp * mg) * p;
      sgemm(false, false, mg, p, kc, 1.0f, pw + grp * mg * kc, kc, b, p, 0.0f, out, p, epi, inner);
      if (after) activateInPlace(at.activation, out, mg * p, inner);
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
