// Checks of the CUDA path that need no Node: build with nvcc as CUDA source (native/test/run-on-gpu.sh does;
// `-x cu`), link with native/src/cuda/*.cu.
//
// 1. Host checks, on any machine: every per-element mapping the kernels use (index_math.h) against naive loops,
//    and both GEMM kernels' phases (gemm_tiles.h) run for every thread of every block on the CPU, in the order the
//    kernels' barriers impose, through the same argument builders the device uses (matmulArgs, convArgs, ...),
//    against double-precision references.
// 2. GPU checks, when a CUDA device is there: every op through the Device interface against the same references,
//    fp16/bf16 products within their rounding, the Gather error (and the device still usable after it).
// 3. `--bench`: GEMM timings (cudaGemmSeconds), one "BENCH <precision> <size> <seconds> <GFLOP/s>" line each.
//
// Exit status 0 when every check passed; the last line is "cuda_test: N checks, F failures".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../src/cuda/cuda_api.h"
#include "../src/cuda/gemm_tiles.h"
#include "../src/cuda/index_math.h"
#include "../src/cuda/kernels.h"

using namespace flotilla;
using namespace flotilla::gpu;

namespace {

int checks = 0;
int failures = 0;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    ++checks;                                                         \
    if (!(cond)) {                                                    \
      if (++failures <= 50) {                                         \
        std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
        std::fprintf(stderr, __VA_ARGS__);                            \
        std::fprintf(stderr, "\n");                                   \
      }                                                               \
    }                                                                 \
  } while (0)

using Dims = std::vector<int64_t>;

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint32_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<uint32_t>(s >> 11);
  }
  /** Uniform integer in [lo, hi]. */
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(next() % static_cast<uint32_t>(hi - lo + 1)); }
  float uniform(float lo = -1.0f, float hi = 1.0f) {
    return lo + (hi - lo) * static_cast<float>(next() & 0xFFFFFF) / 16777216.0f;
  }
  std::vector<float> values(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = uniform(lo, hi);
    return v;
  }
};

std::string str(const Dims& d) { return shapeString(d); }

int64_t numel(const Dims& d) { return product(d); }

Dims unravel(int64_t i, const Dims& dims) {
  Dims idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = i % dims[d];
    i /= dims[d];
  }
  return idx;
}

/** Offset in a contiguous tensor of `dims` of the index `idx` right-aligned against it (size-1 dims read 0). */
int64_t broadcastOffset(const Dims& idx, const Dims& dims) {
  int64_t off = 0;
  const size_t lead = idx.size() - dims.size();
  for (size_t d = 0; d < dims.size(); ++d) off = off * dims[d] + (dims[d] == 1 ? 0 : idx[lead + d]);
  return off;
}

double activationRef(Activation act, double x, double alpha) {
  switch (act) {
    case Activation::Relu: return x > 0 ? x : 0;
    case Activation::LeakyRelu: return x >= 0 ? x : x * alpha;
    case Activation::Sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::Tanh: return std::tanh(x);
    case Activation::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::GeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    default: return x;
  }
}

const Activation kActivations[] = {Activation::None, Activation::Relu, Activation::LeakyRelu, Activation::Sigmoid,
                                   Activation::Tanh, Activation::Gelu, Activation::GeluTanh};

// ---- references ------------------------------------------------------------------------------------------------

struct MatMulCase {
  Dims a, b;
  bool transA = false, transB = false;
  float alpha = 1.0f, beta = 1.0f;
  int64_t biasLen = 0;   // 0: none; N or 1
  Activation act = Activation::None;
  float actAlpha = 0.1f;
};

/** numpy matmul (rank >= 2) in double; `scale` gets sum |a||b| per element (for tolerances). */
std::vector<double> refMatMul(const MatMulCase& c, const std::vector<float>& a, const std::vector<float>& b,
                              const std::vector<float>& bias, Dims* outDims, std::vector<double>* scale) {
  const size_t ra = c.a.size(), rb = c.b.size();
  const int64_t m = c.transA ? c.a[ra - 1] : c.a[ra - 2];
  const int64_t k = c.transA ? c.a[ra - 2] : c.a[ra - 1];
  const int64_t n = c.transB ? c.b[rb - 2] : c.b[rb - 1];
  const Dims aLead(c.a.begin(), c.a.end() - 2), bLead(c.b.begin(), c.b.end() - 2);
  const size_t rank = std::max(aLead.size(), bLead.size());
  Dims lead(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t x = i + aLead.size() >= rank ? aLead[i + aLead.size() - rank] : 1;
    const int64_t y = i + bLead.size() >= rank ? bLead[i + bLead.size() - rank] : 1;
    lead[i] = x == 1 ? y : x;
  }
  *outDims = lead;
  outDims->push_back(m);
  outDims->push_back(n);
  const int64_t batches = numel(lead);
  std::vector<double> y(static_cast<size_t>(batches * m * n));
  scale->assign(y.size(), 0.0);
  for (int64_t t = 0; t < batches; ++t) {
    const Dims idx = unravel(t, lead);
    const int64_t oa = broadcastOffset(idx, aLead) * m * k, ob = broadcastOffset(idx, bLead) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, sa = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double av = a[static_cast<size_t>(oa + (c.transA ? q * m + i : i * k + q))];
          const double bv = b[static_cast<size_t>(ob + (c.transB ? j * k + q : q * n + j))];
          s += av * bv;
          sa += std::fabs(av * bv);
        }
        double v = c.alpha * s;
        double sc = std::fabs(c.alpha) * sa;
        if (c.biasLen > 0) {
          const double bb = c.beta * bias[static_cast<size_t>(c.biasLen == 1 ? 0 : j)];
          v += bb;
          sc += std::fabs(bb);
        }
        const size_t o = static_cast<size_t>((t * m + i) * n + j);
        y[o] = activationRef(c.act, v, c.actAlpha);
        (*scale)[o] = sc;
      }
    }
  }
  return y;
}

struct ConvCase {
  int64_t n, c, h, w, m, kh, kw, group;
  OpAttrs attrs;
  bool bias = true;
};

std::vector<double> refConv(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& w,
                            const float* bias, Activation act, float actAlpha, std::vector<double>* scale) {
  std::vector<double> y(static_cast<size_t>(g.n * g.m * g.oh * g.ow));
  scale->assign(y.size(), 0.0);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t m = 0; m < g.m; ++m) {
      const int64_t grp = m / g.mg;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          double s = bias ? bias[m] : 0.0, sa = bias ? std::fabs(bias[m]) : 0.0;
          for (int64_t c = 0; c < g.cg; ++c) {
            for (int64_t ky = 0; ky < g.kh; ++ky) {
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t yy = oy * g.sh - g.padT + ky * g.dh, xx = ox * g.sw - g.padL + kx * g.dw;
                if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) continue;
                const double xv = x[static_cast<size_t>(((n * g.c + grp * g.cg + c) * g.h + yy) * g.w + xx)];
                const double wv = w[static_cast<size_t>(((m * g.cg + c) * g.kh + ky) * g.kw + kx)];
                s += xv * wv;
                sa += std::fabs(xv * wv);
              }
            }
          }
          const size_t o = static_cast<size_t>(((n * g.m + m) * g.oh + oy) * g.ow + ox);
          y[o] = activationRef(act, s, actAlpha);
          (*scale)[o] = sa;
        }
      }
    }
  }
  return y;
}

/** Pooling as onnxruntime computes it (pads [t, l, b, r]; the average's pad taps counted inside the padded extent). */
std::vector<double> refPool(const ConvGeometry& g, const std::vector<float>& x, bool isMax, bool countIncludePad) {
  std::vector<double> y(static_cast<size_t>(g.n * g.c * g.oh * g.ow));
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        double best = std::numeric_limits<float>::lowest(), sum = 0;
        int64_t valid = 0, padded = 0;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t yy = oy * g.sh - g.padT + ky * g.dh, xx = ox * g.sw - g.padL + kx * g.dw;
            if (yy >= 0 && yy < g.h && xx >= 0 && xx < g.w) {
              const double v = x[static_cast<size_t>((p * g.h + yy) * g.w + xx)];
              best = std::max(best, v);
              sum += v;
              ++valid;
            } else if (yy >= -g.padT && yy < g.h + g.padB && xx >= -g.padL && xx < g.w + g.padR) {
              ++padded;
            }
          }
        }
        const int64_t count = countIncludePad ? valid + padded : valid;
        y[static_cast<size_t>((p * g.oh + oy) * g.ow + ox)] = isMax ? best : (count > 0 ? sum / count : 0.0);
      }
    }
  }
  return y;
}

/** |got - want| <= tol everywhere; reports the worst element. */
template <typename T>
bool near(const char* what, const std::vector<T>& got, const std::vector<double>& want,
          const std::function<double(size_t)>& tol) {
  ++checks;
  if (got.size() != want.size()) {
    ++failures;
    std::fprintf(stderr, "FAIL %s: %zu elements, expected %zu\n", what, got.size(), want.size());
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    if (!(std::fabs(g - want[i]) <= tol(i))) {
      ++failures;
      if (failures <= 50) {
        std::fprintf(stderr, "FAIL %s: element %zu is %.9g, expected %.9g (tolerance %.3g)\n", what, i, g, want[i],
                     tol(i));
      }
      return false;
    }
  }
  return true;
}

/** fp32 accumulation over k terms: a worst-case bound relative to sum |a||b|, plus the activation's rounding. */
std::function<double(size_t)> gemmTolerance(const std::vector<double>& scale, int64_t k, double eps = 1.2e-7) {
  return [&scale, k, eps](size_t i) { return (static_cast<double>(k) + 4) * eps * scale[i] * 1.25 + 2e-6; };
}

// ---- 16-bit helpers ------------------------------------------------------------------------------------------

uint16_t toBits(float v, Precision p) {
  uint16_t bits;
  if (p == Precision::BF16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    std::memcpy(&bits, &h, 2);
  } else {
    const __half h = __float2half_rn(v);
    std::memcpy(&bits, &h, 2);
  }
  return bits;
}

float fromBits(uint16_t bits, Precision p) {
  if (p == Precision::BF16) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

float roundTo(float v, Precision p) { return p == Precision::F32 ? v : fromBits(toBits(v, p), p); }

/** What launchToHalf computes, on the host. */
std::vector<uint16_t> toHalfHost(Precision p, const float* x, int64_t batch, int64_t rows, int64_t cols, int64_t padded,
                                 bool transposed, int64_t srcBatchStride) {
  std::vector<uint16_t> y(static_cast<size_t>(batch * rows * padded));
  for (size_t i = 0; i < y.size(); ++i) {
    const int64_t s = paddedSource(static_cast<int64_t>(i), rows, cols, padded, transposed, srcBatchStride);
    y[i] = toBits(s < 0 ? 0.0f : x[s], p);
  }
  return y;
}

// ---- kernel emulation --------------------------------------------------------------------------------------------

/** sgemmKernel for one block, every thread in turn per phase. */
template <bool kTransA, bool kTransB>
void emulateSgemmBlock(const SgemmArgs& p, int64_t z, int64_t by, int64_t bx) {
  alignas(16) static float as[2][kTileK * kLds];
  alignas(16) static float bs[2][kTileK * kLds];
  static float acc[kGemmThreads][8][8];
  static float ra[kGemmThreads][4], rb[kGemmThreads][4];
  // Poison shared memory: an element a phase forgets to write shows up as NaN.
  std::fill(&as[0][0], &as[0][0] + 2 * kTileK * kLds, std::nanf(""));
  std::fill(&bs[0][0], &bs[0][0] + 2 * kTileK * kLds, std::nanf(""));
  int64_t off[4];
  stridedOffsets<4>(p.batch, p.batchBase + z, off);
  const float* a = p.a + off[0];
  const float* b = p.b + off[1];
  float* c = p.c + off[2];
  const float* rowBias = p.epilogue.rowBias ? p.epilogue.rowBias + off[3] : nullptr;
  const int64_t row0 = by * kTile, col0 = bx * kTile;
  std::memset(acc, 0, sizeof acc);
  const int64_t tiles = (p.k + kTileK - 1) / kTileK;
  if (tiles > 0) {
    for (int t = 0; t < kGemmThreads; ++t) {
      loadTile<!kTransA>(a, p.lda, p.m, p.k, row0, 0, t, p.vecA, ra[t]);
      loadTile<kTransB>(b, p.ldb, p.n, p.k, col0, 0, t, p.vecB, rb[t]);
      storeTile<!kTransA>(as[0], t, ra[t]);
      storeTile<kTransB>(bs[0], t, rb[t]);
    }
  }
  for (int64_t s = 0; s < tiles; ++s) {
    const int cur = static_cast<int>(s & 1);
    const bool more = s + 1 < tiles;
    if (more) {
      for (int t = 0; t < kGemmThreads; ++t) {
        loadTile<!kTransA>(a, p.lda, p.m, p.k, row0, (s + 1) * kTileK, t, p.vecA, ra[t]);
        loadTile<kTransB>(b, p.ldb, p.n, p.k, col0, (s + 1) * kTileK, t, p.vecB, rb[t]);
      }
    }
    for (int t = 0; t < kGemmThreads; ++t) computeTile(as[cur], bs[cur], t % 16, t / 16, acc[t]);
    if (more) {
      for (int t = 0; t < kGemmThreads; ++t) {
        storeTile<!kTransA>(as[cur ^ 1], t, ra[t]);
        storeTile<kTransB>(bs[cur ^ 1], t, rb[t]);
      }
    }
  }
  for (int t = 0; t < kGemmThreads; ++t) storeOutput(p, c, rowBias, row0, col0, t % 16, t / 16, acc[t]);
}

/** launchSgemm on the host. */
void emulateSgemm(SgemmArgs p, int64_t batches) {
  if (p.m <= 0 || p.n <= 0 || batches <= 0) return;
  const int64_t gy = (p.m + kTile - 1) / kTile, gx = (p.n + kTile - 1) / kTile;
  for (int64_t z = 0; z < batches; ++z) {
    for (int64_t by = 0; by < gy; ++by) {
      for (int64_t bx = 0; bx < gx; ++bx) {
        if (!p.transA && !p.transB) emulateSgemmBlock<false, false>(p, z, by, bx);
        else if (!p.transA && p.transB) emulateSgemmBlock<false, true>(p, z, by, bx);
        else if (p.transA && !p.transB) emulateSgemmBlock<true, false>(p, z, by, bx);
        else emulateSgemmBlock<true, true>(p, z, by, bx);
      }
    }
  }
}

/** halfGemmKernel on the host: the WMMA loads and products become loops over the same shared-memory addresses. */
void emulateHalfGemm(Precision precision, const HalfGemmArgs& p, int64_t batches) {
  if (p.m <= 0 || p.n <= 0 || batches <= 0) return;
  alignas(16) static uint16_t as[kTile * kWLda];
  alignas(16) static uint16_t bs[kWTileK * kWLdb];
  static float acc[8][4][2][256];
  static uint4 ra[kGemmThreads][2], rb[kGemmThreads][2];
  const int64_t gy = (p.m + kTile - 1) / kTile, gx = (p.n + kTile - 1) / kTile;
  for (int64_t z = 0; z < batches; ++z) {
    int64_t off[4];
    stridedOffsets<4>(p.batch, p.batchBase + z, off);
    const uint16_t* a = static_cast<const uint16_t*>(p.a) + off[0];
    const uint16_t* b = static_cast<const uint16_t*>(p.b) + off[1];
    float* c = p.c + off[2];
    const float* rowBias = p.epilogue.rowBias ? p.epilogue.rowBias + off[3] : nullptr;
    for (int64_t by = 0; by < gy; ++by) {
      for (int64_t bx = 0; bx < gx; ++bx) {
        const int64_t row0 = by * kTile, col0 = bx * kTile;
        std::fill(as, as + kTile * kWLda, toBits(std::nanf(""), precision));
        std::fill(bs, bs + kWTileK * kWLdb, toBits(std::nanf(""), precision));
        std::memset(acc, 0, sizeof acc);
        const int64_t tiles = (p.kp + kWTileK - 1) / kWTileK;
        if (tiles > 0) {
          for (int t = 0; t < kGemmThreads; ++t) {
            loadHalfTileA(a, p.m, p.kp, row0, 0, t, ra[t]);
            loadHalfTileB(b, p.k, p.np, 0, col0, t, rb[t]);
            storeHalfTileA(as, t, ra[t]);
            storeHalfTileB(bs, t, rb[t]);
          }
        }
        for (int64_t s = 0; s < tiles; ++s) {
          const bool more = s + 1 < tiles;
          if (more) {
            for (int t = 0; t < kGemmThreads; ++t) {
              loadHalfTileA(a, p.m, p.kp, row0, (s + 1) * kWTileK, t, ra[t]);
              loadHalfTileB(b, p.k, p.np, (s + 1) * kWTileK, col0, t, rb[t]);
            }
          }
          for (int warp = 0; warp < 8; ++warp) {
            for (int kk = 0; kk < kWTileK; kk += 16) {
              for (int i = 0; i < 4; ++i) {
                for (int j = 0; j < 2; ++j) {
                  const uint16_t* fa = as + fragmentA(warp, i, kk);
                  const uint16_t* fb = bs + fragmentB(warp, j, kk);
                  for (int r = 0; r < 16; ++r) {
                    for (int cc = 0; cc < 16; ++cc) {
                      float sum = acc[warp][i][j][r * 16 + cc];
                      for (int x = 0; x < 16; ++x) {
                        sum = std::fmaf(fromBits(fa[r * kWLda + x], precision), fromBits(fb[x * kWLdb + cc], precision),
                                        sum);
                      }
                      acc[warp][i][j][r * 16 + cc] = sum;
                    }
                  }
                }
              }
            }
          }
          if (more) {
            for (int t = 0; t < kGemmThreads; ++t) {
              storeHalfTileA(as, t, ra[t]);
              storeHalfTileB(bs, t, rb[t]);
            }
          }
        }
        for (int warp = 0; warp < 8; ++warp) {
          for (int i = 0; i < 4; ++i) {
            for (int j = 0; j < 2; ++j) {
              for (int e = 0; e < 256; ++e) {
                const int64_t row = row0 + fragmentRow(warp, i, e), col = col0 + fragmentCol(warp, j, e);
                if (row < p.m && col < p.n) {
                  c[row * p.ldc + col] = epilogueValue(p.epilogue, p.alpha, acc[warp][i][j][e], row, col, rowBias);
                }
              }
            }
          }
        }
      }
    }
  }
}

// ---- host checks -------------------------------------------------------------------------------------------------

Dims randomDims(Rng& r, int rank, int64_t maxDim) {
  Dims d(static_cast<size_t>(rank));
  for (int64_t& x : d) x = r.range(1, maxDim);
  return d;
}

/** A shape that broadcasts to `out`: a suffix of it with some dims set to 1. */
Dims broadcastable(Rng& r, const Dims& out) {
  const size_t rank = static_cast<size_t>(r.range(0, static_cast<int64_t>(out.size())));
  Dims d(out.end() - static_cast<std::ptrdiff_t>(rank), out.end());
  for (int64_t& x : d) {
    if (r.next() % 3 == 0) x = 1;
  }
  return d;
}

void testBroadcast() {
  Rng r(1);
  int built = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const Dims out = randomDims(r, static_cast<int>(r.range(0, 8)), 3);
    const Dims a = broadcastable(r, out), b = broadcastable(r, out);
    // The output of the broadcast: where both operands have size 1 the output must too.
    Dims y = out;
    for (size_t d = 0; d < y.size(); ++d) {
      const size_t fromEnd = y.size() - d;
      const bool aOne = fromEnd > a.size() || a[a.size() - fromEnd] == 1;
      const bool bOne = fromEnd > b.size() || b[b.size() - fromEnd] == 1;
      if (aOne && bOne) y[d] = 1;
    }
    StridedIndex<2> map;
    std::string error;
    if (!makeBroadcast(y, a, b, &map, &error)) {
      CHECK(error.find("more than") != std::string::npos, "makeBroadcast(%s, %s -> %s) failed: %s", str(a).c_str(),
            str(b).c_str(), str(y).c_str(), error.c_str());
      continue;
    }
    ++built;
    bool ok = true;
    for (int64_t i = 0; i < numel(y) && ok; ++i) {
      const Dims idx = unravel(i, y);
      int64_t off[2];
      stridedOffsets<2>(map, i, off);
      ok = off[0] == broadcastOffset(idx, a) && off[1] == broadcastOffset(idx, b);
    }
    CHECK(ok, "broadcast offsets of %s and %s -> %s", str(a).c_str(), str(b).c_str(), str(y).c_str());
  }
  CHECK(built > 300, "only %d broadcasts fitted", built);
  StridedIndex<2> map;
  std::string error;
  CHECK(!makeBroadcast({2, 3}, {2, 3}, {3, 3}, &map, &error), "[3,3] must not broadcast to [2,3]");
  CHECK(!makeBroadcast({2, 3}, {2, 1}, {1, 1}, &map, &error), "[2,1] + [1,1] -> [2,3] is not a broadcast");
  CHECK(makeBroadcast({4, 3}, {3}, {4, 1}, &map, &error), "[3] + [4,1] -> [4,3] is a broadcast");
  CHECK(makeBroadcast({0, 3}, {0, 3}, {3}, &map, &error), "empty tensors broadcast");
  // Seven dims that do not coalesce (alternating broadcast) exceed the limit.
  CHECK(!makeBroadcast({2, 2, 2, 2, 2, 2, 2}, {2, 1, 2, 1, 2, 1, 2}, {1, 2, 1, 2, 1, 2, 1}, &map, &error),
        "a 7-dim broadcast must be refused");
}

void testTranspose() {
  Rng r(2);
  for (int iter = 0; iter < 300; ++iter) {
    const int rank = static_cast<int>(r.range(1, 7));
    const Dims in = randomDims(r, rank, 4);
    std::vector<int32_t> perm(static_cast<size_t>(rank));
    for (int i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = i;
    for (int i = rank - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[r.next() % (i + 1)]);
    Dims out(static_cast<size_t>(rank));
    for (int i = 0; i < rank; ++i) out[static_cast<size_t>(i)] = in[static_cast<size_t>(perm[static_cast<size_t>(i)])];
    StridedIndex<1> map;
    std::string error;
    if (!makeTranspose(in, perm, out, &map, &error)) {
      CHECK(rank == 7 && error.find("more than") != std::string::npos, "makeTranspose %s failed: %s",
            str(in).c_str(), error.c_str());
      continue;
    }
    const Dims inStrides = contiguousStrides(in);
    bool ok = true;
    for (int64_t i = 0; i < numel(out) && ok; ++i) {
      const Dims idx = unravel(i, out);
      int64_t want = 0;
      for (int d = 0; d < rank; ++d) want += idx[static_cast<size_t>(d)] * inStrides[static_cast<size_t>(perm[static_cast<size_t>(d)])];
      int64_t off[1];
      stridedOffsets<1>(map, i, off);
      ok = off[0] == want;
    }
    CHECK(ok, "transpose offsets of %s", str(in).c_str());
  }
  StridedIndex<1> map;
  std::string error;
  CHECK(!makeTranspose({2, 3}, {0, 0}, {2, 2}, &map, &error), "perm [0, 0] must be refused");
  CHECK(!makeTranspose({2, 3}, {1, 0}, {2, 3}, &map, &error), "a wrong output shape must be refused");
}

/** Runs a MatMul case through planGemm + matmulArgs (+ the 16-bit path) on the emulated kernels. */
void runMatMulCase(const MatMulCase& mc, Rng& r, const char* label) {
  const std::vector<float> a = r.values(numel(mc.a)), b = r.values(numel(mc.b));
  const std::vector<float> bias = r.values(std::max<int64_t>(mc.biasLen, 1));
  Dims outDims;
  std::vector<double> scale;
  const std::vector<double> want = refMatMul(mc, a, b, bias, &outDims, &scale);
  GemmPlan p;
  std::string error;
  if (!planGemm(mc.a, mc.b, outDims, mc.transA, mc.transB, &p, &error)) {
    CHECK(false, "%s: planGemm: %s", label, error.c_str());
    return;
  }
  GemmEpilogue ep;
  ep.biasScale = mc.beta;
  ep.activation = static_cast<int>(mc.act);
  ep.activationAlpha = mc.actAlpha;
  if (mc.biasLen > 0) {
    ep.colBias = bias.data();
    ep.colBiasStep = mc.biasLen == 1 ? 0 : 1;
  }
  const int64_t k = p.k;
  {
    // fp32, aligned and (copied one float off) unaligned operands.
    for (int shift = 0; shift < 2; ++shift) {
      std::vector<float> as(a.size() + 4), bs(b.size() + 4), ys(want.size() + 4, std::nanf(""));
      std::copy(a.begin(), a.end(), as.begin() + shift);
      std::copy(b.begin(), b.end(), bs.begin() + shift);
      const SgemmArgs s = matmulArgs(p, as.data() + shift, bs.data() + shift, ys.data() + shift, mc.alpha, ep);
      emulateSgemm(s, p.batch);
      const std::vector<float> y(ys.begin() + shift, ys.begin() + shift + static_cast<std::ptrdiff_t>(want.size()));
      const std::string what = std::string(label) + (shift ? " fp32 unaligned" : " fp32");
      near(what.c_str(), y, want, gemmTolerance(scale, k));
      CHECK(std::isnan(ys[static_cast<size_t>(shift) + want.size()]), "%s: wrote past Y", what.c_str());
    }
  }
  for (Precision prec : {Precision::F16, Precision::BF16}) {
    // The 16-bit path: copies as launchToHalf makes them, the reference on the rounded values.
    const int64_t kp = roundUp(p.k, 8), np = roundUp(p.n, 8);
    const int64_t mk = p.m * p.k, kn = p.k * p.n;
    const int64_t batchesA = mk > 0 ? static_cast<int64_t>(a.size()) / mk : 0;
    const int64_t batchesB = kn > 0 ? static_cast<int64_t>(b.size()) / kn : 0;
    const std::vector<uint16_t> a16 = toHalfHost(prec, a.data(), batchesA, p.m, p.k, kp, p.transA, mk);
    const std::vector<uint16_t> b16 = toHalfHost(prec, b.data(), batchesB, p.k, p.n, np, p.transB, kn);
    std::vector<float> ar(a.size()), br(b.size());
    for (size_t i = 0; i < a.size(); ++i) ar[i] = roundTo(a[i], prec);
    for (size_t i = 0; i < b.size(); ++i) br[i] = roundTo(b[i], prec);
    std::vector<double> scaleR;
    Dims dimsR;
    const std::vector<double> wantR = refMatMul(mc, ar, br, bias, &dimsR, &scaleR);
    std::vector<float> y(want.size(), std::nanf(""));
    emulateHalfGemm(prec, halfMatmulArgs(p, a16.data(), b16.data(), y.data(), mc.alpha, ep), p.batch);
    const std::string what = std::string(label) + (prec == Precision::F16 ? " fp16" : " bf16");
    near(what.c_str(), y, wantR, gemmTolerance(scaleR, k));
  }
}

void testMatMul() {
  Rng r(3);
  // Edges of the tiles, every transpose, every epilogue.
  const int64_t sizes[][3] = {{1, 1, 1}, {1, 37, 5}, {127, 129, 7}, {128, 128, 8}, {130, 250, 33}, {5, 300, 17},
                              {64, 3, 129}, {200, 8, 1}, {33, 65, 16}};
  int idx = 0;
  for (const auto& s : sizes) {
    for (int t = 0; t < 4; ++t) {
      MatMulCase mc;
      mc.transA = t & 1;
      mc.transB = t & 2;
      mc.a = mc.transA ? Dims{s[2], s[0]} : Dims{s[0], s[2]};
      mc.b = mc.transB ? Dims{s[1], s[2]} : Dims{s[2], s[1]};
      mc.alpha = idx % 3 == 0 ? 0.5f : 1.0f;
      mc.beta = idx % 2 ? 1.0f : 2.0f;
      mc.biasLen = idx % 3 == 0 ? 0 : (idx % 3 == 1 ? s[1] : 1);
      mc.act = kActivations[idx % 7];
      ++idx;
      char label[96];
      std::snprintf(label, sizeof label, "matmul %lldx%lldx%lld trans %d%d", static_cast<long long>(s[0]),
                    static_cast<long long>(s[1]), static_cast<long long>(s[2]), mc.transA, mc.transB);
      runMatMulCase(mc, r, label);
    }
  }
  // Batches: folded (B 2-D), broadcast both ways, rank 5.
  const struct {
    Dims a, b;
    bool ta, tb;
  } batched[] = {
      {{3, 17, 20}, {20, 9}, false, false},        // folds into [51, 20] . [20, 9]
      {{3, 20, 17}, {20, 9}, true, false},         // transposed A: no fold
      {{2, 3, 17, 20}, {3, 20, 9}, false, false},  // B broadcast over the first dim
      {{1, 17, 20}, {4, 20, 9}, false, false},     // A broadcast
      {{2, 1, 5, 6}, {1, 3, 6, 7}, false, false},  // both
      {{2, 1, 3, 5, 6}, {3, 1, 7, 6}, false, true},
      {{4, 9, 8}, {4, 9, 8}, true, false},         // attention-like Q^T.K
  };
  for (const auto& c : batched) {
    MatMulCase mc;
    mc.a = c.a;
    mc.b = c.b;
    mc.transA = c.ta;
    mc.transB = c.tb;
    mc.biasLen = mc.transB ? c.b[c.b.size() - 2] : c.b.back();
    mc.act = Activation::Gelu;
    runMatMulCase(mc, r, ("batched matmul " + str(c.a) + " x " + str(c.b)).c_str());
  }
  GemmPlan p;
  std::string error;
  CHECK(planGemm({3, 17, 20}, {20, 9}, {3, 17, 9}, false, false, &p, &error) && p.batch == 1 && p.m == 51,
        "a 2-D B folds A's batch into M");
  CHECK(!planGemm({17, 20}, {21, 9}, {17, 9}, false, false, &p, &error), "K mismatch must be refused");
  CHECK(!planGemm({2, 17, 20}, {3, 20, 9}, {2, 17, 9}, false, false, &p, &error), "batch 2 vs 3 must be refused");
}

void testConv() {
  Rng r(4);
  struct Case {
    int64_t n, c, h, w, m, kh, kw, group, sh, sw, pt, pl, pb, pr, dh, dw;
  };
  const Case cases[] = {
      {2, 3, 9, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // same padding
      {1, 4, 7, 7, 6, 3, 2, 2, 2, 1, 0, 1, 1, 0, 1, 2},    // groups, strides, asymmetric pads, dilation
      {3, 6, 5, 6, 6, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1, 1},    // depthwise
      {2, 5, 4, 4, 7, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},    // pointwise: no im2col
      {2, 4, 4, 3, 4, 1, 1, 2, 1, 1, 0, 0, 0, 0, 1, 1},    // pointwise, grouped
      {1, 1, 28, 28, 8, 5, 5, 1, 1, 1, 2, 2, 2, 2, 1, 1},  // MNIST-like first layer
      {2, 3, 6, 6, 2, 2, 2, 1, 2, 2, 0, 0, 0, 0, 1, 1},
  };
  int idx = 0;
  for (const Case& cs : cases) {
    OpAttrs at;
    at.group = static_cast<int32_t>(cs.group);
    at.strides = {static_cast<int32_t>(cs.sh), static_cast<int32_t>(cs.sw)};
    at.pads = {static_cast<int32_t>(cs.pt), static_cast<int32_t>(cs.pl), static_cast<int32_t>(cs.pb),
               static_cast<int32_t>(cs.pr)};
    at.dilations = {static_cast<int32_t>(cs.dh), static_cast<int32_t>(cs.dw)};
    at.kernelShape = {static_cast<int32_t>(cs.kh), static_cast<int32_t>(cs.kw)};
    const Dims xd = {cs.n, cs.c, cs.h, cs.w}, wd = {cs.m, cs.c / cs.group, cs.kh, cs.kw};
    const int64_t oh = (cs.h + cs.pt + cs.pb - cs.dh * (cs.kh - 1) - 1) / cs.sh + 1;
    const int64_t ow = (cs.w + cs.pl + cs.pr - cs.dw * (cs.kw - 1) - 1) / cs.sw + 1;
    const Dims yd = {cs.n, cs.m, oh, ow};
    ConvGeometry g;
    std::string error;
    if (!planConv(xd, wd, yd, at, &g, &error)) {
      CHECK(false, "planConv %s: %s", str(xd).c_str(), error.c_str());
      continue;
    }
    CHECK(g.pointwise() == (cs.kh == 1 && cs.kw == 1 && cs.sh == 1 && cs.sw == 1 && cs.pt + cs.pl + cs.pb + cs.pr == 0),
          "pointwise flag");
    const std::vector<float> x = r.values(numel(xd)), w = r.values(numel(wd)), bias = r.values(cs.m);
    const Activation act = kActivations[idx++ % 7];
    std::vector<double> scale;
    const std::vector<double> want = refConv(g, x, w, bias.data(), act, 0.1f, &scale);
    GemmEpilogue ep;
    ep.rowBias = bias.data();
    ep.activation = static_cast<int>(act);
    ep.activationAlpha = 0.1f;
    const int64_t ohw = oh * ow;
    // As the device runs it: chunks of images (all at once, and one at a time), im2col unless pointwise.
    for (int64_t chunk : {g.n, int64_t{1}}) {
      for (Precision prec : {Precision::F32, Precision::F16}) {
        std::vector<float> y(want.size(), std::nanf(""));
        std::vector<float> col(static_cast<size_t>(chunk * g.c * g.kh * g.kw * ohw));
        const int64_t kgp = roundUp(g.kg, 8), ohwp = roundUp(ohw, 8);
        const std::vector<uint16_t> w16 = toHalfHost(prec, w.data(), g.group, g.mg, g.kg, kgp, false, g.mg * g.kg);
        for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
          const int64_t images = std::min(chunk, g.n - n0);
          const float* src = x.data() + n0 * g.c * g.h * g.w;
          if (!g.pointwise()) {
            for (int64_t i = 0; i < images * g.c * g.kh * g.kw * ohw; ++i) {
              const int64_t s = im2colSource(g, n0, i);
              col[static_cast<size_t>(i)] = s < 0 ? 0.0f : x[static_cast<size_t>(s)];
            }
            src = col.data();
          }
          float* dst = y.data() + n0 * g.m * ohw;
          if (prec == Precision::F32) {
            emulateSgemm(convArgs(g, images, w.data(), src, dst, ep), images * g.group);
          } else {
            const std::vector<uint16_t> c16 = toHalfHost(prec, src, images * g.group, g.kg, ohw, ohwp, false, g.kg * ohw);
            emulateHalfGemm(prec, halfConvArgs(g, images, w16.data(), c16.data(), dst, ep), images * g.group);
          }
        }
        char what[96];
        std::snprintf(what, sizeof what, "conv %s W %s chunk %lld %s", str(xd).c_str(), str(wd).c_str(),
                      static_cast<long long>(chunk), prec == Precision::F32 ? "fp32" : "fp16");
        if (prec == Precision::F32) {
          near(what, y, want, gemmTolerance(scale, g.kg));
        } else {
          near(what, y, want, [&scale](size_t i) { return 2.5e-3 * scale[i] + 1e-5; });
        }
      }
    }
  }
  ConvGeometry g;
  std::string error;
  OpAttrs at;
  at.group = 2;
  CHECK(!planConv({1, 3, 5, 5}, {4, 1, 3, 3}, {1, 4, 3, 3}, at, &g, &error), "3 channels in 2 groups must be refused");
  at.group = 1;
  CHECK(!planConv({1, 3, 5, 5}, {4, 3, 3, 3}, {1, 4, 5, 5}, at, &g, &error), "a wrong output must be refused");
}

void testPool() {
  Rng r(5);
  for (int iter = 0; iter < 60; ++iter) {
    OpAttrs at;
    const int64_t kh = r.range(1, 3), kw = r.range(1, 3);
    at.kernelShape = {static_cast<int32_t>(kh), static_cast<int32_t>(kw)};
    at.strides = {static_cast<int32_t>(r.range(1, 3)), static_cast<int32_t>(r.range(1, 3))};
    at.pads = {static_cast<int32_t>(r.range(0, kh - 1)), static_cast<int32_t>(r.range(0, kw - 1)),
               static_cast<int32_t>(r.range(0, kh - 1)), static_cast<int32_t>(r.range(0, kw - 1))};
    at.dilations = {1, 1};
    at.countIncludePad = r.next() % 2;
    const Dims xd = {r.range(1, 2), r.range(1, 3), r.range(3, 9), r.range(3, 9)};
    const bool ceil = r.next() % 2;
    auto extent = [&](int64_t in, int64_t pb, int64_t pe, int64_t k, int64_t s) {
      const int64_t span = in + pb + pe - k;
      return (ceil ? (span + s - 1) / s : span / s) + 1;
    };
    const Dims yd = {xd[0], xd[1], extent(xd[2], at.pads[0], at.pads[2], kh, at.strides[0]),
                     extent(xd[3], at.pads[1], at.pads[3], kw, at.strides[1])};
    ConvGeometry g;
    std::string error;
    if (!planPool(xd, yd, at, &g, &error)) {
      CHECK(false, "planPool %s -> %s: %s", str(xd).c_str(), str(yd).c_str(), error.c_str());
      continue;
    }
    const std::vector<float> x = r.values(numel(xd));
    for (bool isMax : {true, false}) {
      const std::vector<double> want = refPool(g, x, isMax, at.countIncludePad);
      std::vector<float> y(want.size());
      for (size_t i = 0; i < y.size(); ++i) {
        y[i] = poolValue(g, static_cast<int64_t>(i), isMax, at.countIncludePad,
                         [&x](int64_t o) { return x[static_cast<size_t>(o)]; });
      }
      near(isMax ? "max pool" : "average pool", y, want, [](size_t) { return 1e-6; });
    }
  }
}

void testGather() {
  Rng r(6);
  for (int iter = 0; iter < 100; ++iter) {
    const Dims data = randomDims(r, static_cast<int>(r.range(1, 4)), 4);
    const int axis = static_cast<int>(r.range(0, static_cast<int64_t>(data.size()) - 1));
    const Dims idxDims = randomDims(r, static_cast<int>(r.range(0, 2)), 3);
    const int64_t n = data[static_cast<size_t>(axis)];
    std::vector<int64_t> indices(static_cast<size_t>(numel(idxDims)));
    for (int64_t& v : indices) v = r.range(-n, n - 1);
    Dims out(data.begin(), data.begin() + axis);
    out.insert(out.end(), idxDims.begin(), idxDims.end());
    out.insert(out.end(), data.begin() + axis + 1, data.end());
    GatherGeometry g;
    std::string error;
    if (!planGather(data, idxDims, axis, out, &g, &error)) {
      CHECK(false, "planGather: %s", error.c_str());
      continue;
    }
    const Dims strides = contiguousStrides(data);
    bool ok = true;
    for (int64_t i = 0; i < numel(out) && ok; ++i) {
      const Dims o = unravel(i, out);
      // data index: out's dims before axis, then the index value, then out's dims after the index dims.
      const Dims ii(o.begin() + axis, o.begin() + axis + static_cast<std::ptrdiff_t>(idxDims.size()));
      int64_t flat = 0;
      for (size_t d = 0; d < idxDims.size(); ++d) flat = flat * idxDims[d] + ii[d];
      int64_t v = indices[static_cast<size_t>(flat)];
      if (v < 0) v += n;
      int64_t want = 0;
      for (int d = 0; d < axis; ++d) want += o[static_cast<size_t>(d)] * strides[static_cast<size_t>(d)];
      want += v * strides[static_cast<size_t>(axis)];
      for (size_t d = static_cast<size_t>(axis) + 1; d < data.size(); ++d) want += o[d - 1 + idxDims.size()] * strides[d];
      const int64_t position = gatherPosition(g, i);
      ok = position == flat && gatherSource(g, i, indices[static_cast<size_t>(position)]) == want;
    }
    CHECK(ok, "gather offsets of data %s axis %d indices %s", str(data).c_str(), axis, str(idxDims).c_str());
  }
  GatherGeometry g;
  g.outer = 1;
  g.n = 5;
  g.inner = 2;
  g.count = 3;
  CHECK(gatherSource(g, 0, 5) < 0 && gatherSource(g, 0, -6) < 0 && gatherSource(g, 0, -5) == 0 &&
            gatherSource(g, 1, 4) == 9,
        "gather index bounds");
}

void testSmallMaps() {
  Rng r(7);
  // Concat: three parts along a middle axis.
  const Dims parts[] = {{2, 3, 4}, {2, 1, 4}, {2, 2, 4}};
  std::vector<std::vector<float>> xs;
  for (const Dims& d : parts) xs.push_back(r.values(numel(d)));
  std::vector<float> y(2 * 6 * 4, std::nanf(""));
  int64_t offset = 0;
  for (size_t k = 0; k < 3; ++k) {
    const int64_t width = parts[k][1] * 4;
    for (int64_t i = 0; i < numel(parts[k]); ++i) {
      y[static_cast<size_t>(concatTarget(i, width, 6 * 4, offset * 4))] = xs[k][static_cast<size_t>(i)];
    }
    offset += parts[k][1];
  }
  bool ok = true;
  for (int64_t o = 0; o < 2; ++o) {
    for (int64_t a = 0; a < 6; ++a) {
      const size_t part = a < 3 ? 0 : (a < 4 ? 1 : 2);
      const int64_t local = a < 3 ? a : (a < 4 ? a - 3 : a - 4);
      for (int64_t i = 0; i < 4; ++i) {
        ok = ok && y[static_cast<size_t>((o * 6 + a) * 4 + i)] ==
                       xs[part][static_cast<size_t>((o * parts[part][1] + local) * 4 + i)];
      }
    }
  }
  CHECK(ok, "concat targets");
  // Padded copies: transposed and not, with batch strides.
  for (bool t : {false, true}) {
    const int64_t batch = 2, rows = 3, cols = 5, padded = 8;
    const std::vector<float> x = r.values(batch * rows * cols);
    bool good = true;
    for (int64_t i = 0; i < batch * rows * padded; ++i) {
      const int64_t c = i % padded, rr = (i / padded) % rows, b = i / (padded * rows);
      const int64_t s = paddedSource(i, rows, cols, padded, t, rows * cols);
      const int64_t want = c >= cols ? -1 : b * rows * cols + (t ? c * rows + rr : rr * cols + c);
      good = good && s == want;
    }
    CHECK(good, "padded copy sources (transposed %d)", t);
  }
  // Activations against double references.
  for (Activation act : kActivations) {
    double worst = 0;
    for (int i = -600; i <= 600; ++i) {
      const float x = static_cast<float>(i) / 50.0f;
      const double want = activationRef(act, x, 0.2);
      worst = std::max(worst, std::fabs(applyActivation(static_cast<int>(act), x, 0.2f) - want) /
                                  std::max(1.0, std::fabs(want)));
    }
    CHECK(worst < 2e-6, "activation %d off by %.3g", static_cast<int>(act), worst);
  }
  CHECK(std::fabs(applyUnary(kUnaryErf, 0.5f, 0.0f) - std::erf(0.5)) < 1e-6, "erf");
  // NaN (an unwritten, poisoned element) must survive Relu and max pooling, as on the CPU device.
  CHECK(std::isnan(applyActivation(static_cast<int>(Activation::Relu), std::nanf(""), 0.0f)), "Relu(NaN) is NaN");
  ConvGeometry g;
  g.n = g.c = g.m = 1;
  g.h = g.w = 2;
  g.kh = g.kw = 2;
  g.oh = g.ow = 1;
  const float window[4] = {1.0f, std::nanf(""), 3.0f, 2.0f};
  CHECK(std::isnan(poolValue(g, 0, true, false, [&window](int64_t o) { return window[o]; })), "max pool keeps NaN");
}

// ---- GPU checks --------------------------------------------------------------------------------------------------

class GpuTensors {
 public:
  explicit GpuTensors(Device& d) : d_(d) {}
  ~GpuTensors() {
    for (void* p : owned_) d_.release(p);
  }
  template <typename T>
  TensorRef upload(const std::vector<T>& v, const Dims& shape, DType dtype) {
    TensorRef t;
    t.data = d_.allocate(std::max<size_t>(v.size() * sizeof(T), 4));
    owned_.push_back(t.data);
    if (!v.empty()) d_.copyIn(t.data, v.data(), v.size() * sizeof(T));
    t.dtype = dtype;
    t.shape = shape;
    return t;
  }
  TensorRef output(const Dims& shape, DType dtype = DType::F32) {
    TensorRef t;
    const size_t bytes = static_cast<size_t>(numel(shape)) * dtypeSize(dtype);
    t.data = d_.allocate(std::max<size_t>(bytes, 4));
    owned_.push_back(t.data);
    t.dtype = dtype;
    t.shape = shape;
    if (dtype == DType::F32 && bytes > 0) d_.fill(t.f32(), std::nanf(""), static_cast<size_t>(numel(shape)));
    return t;
  }
  template <typename T>
  std::vector<T> download(const TensorRef& t) {
    std::vector<T> v(static_cast<size_t>(t.numel()));
    if (!v.empty()) d_.copyOut(v.data(), t.data, v.size() * sizeof(T));
    return v;
  }

 private:
  Device& d_;
  std::vector<void*> owned_;
};

OpDesc makeOp(OpType type, const char* name) {
  OpDesc op;
  op.type = type;
  op.name = name;
  return op;
}

void gpuMatMul(Device& dev, Rng& r) {
  const struct {
    Dims a, b;
    bool ta, tb;
    int64_t biasLen;
    Activation act;
  } cases[] = {
      {{130, 250}, {250, 33}, false, false, 33, Activation::Relu},
      {{250, 130}, {33, 250}, true, true, 1, Activation::Gelu},
      {{4, 64, 32}, {32, 128}, false, false, 128, Activation::GeluTanh},
      {{2, 4, 64, 16}, {2, 4, 64, 16}, false, true, 0, Activation::None},
      {{3, 1, 17, 20}, {1, 5, 20, 9}, false, false, 9, Activation::Sigmoid},
      {{1, 1}, {1, 1}, false, false, 0, Activation::None},
      {{513, 1027}, {1027, 259}, false, false, 259, Activation::Tanh},
  };
  for (const auto& c : cases) {
    MatMulCase mc;
    mc.a = c.a;
    mc.b = c.b;
    mc.transA = c.ta;
    mc.transB = c.tb;
    mc.biasLen = c.biasLen;
    mc.act = c.act;
    mc.alpha = 0.75f;
    mc.beta = 1.5f;
    const std::vector<float> a = r.values(numel(c.a)), b = r.values(numel(c.b)), bias = r.values(std::max<int64_t>(c.biasLen, 1));
    Dims yd;
    std::vector<double> scale;
    const std::vector<double> want = refMatMul(mc, a, b, bias, &yd, &scale);
    OpDesc op = makeOp(OpType::MatMul, "mm");
    op.attrs.transA = c.ta;
    op.attrs.transB = c.tb;
    op.attrs.alpha = mc.alpha;
    op.attrs.beta = mc.beta;
    op.attrs.activation = c.act;
    op.attrs.activationAlpha = mc.actAlpha;
    const int64_t k = c.ta ? c.a[c.a.size() - 2] : c.a.back();
    for (Precision prec : {Precision::F32, Precision::F16, Precision::BF16}) {
      for (bool constantB : {false, true}) {
        if (prec == Precision::F32 && constantB) continue;
        GpuTensors t(dev);
        std::vector<TensorRef> in = {t.upload(a, c.a, DType::F32), t.upload(b, c.b, DType::F32)};
        TensorRef none;
        in.push_back(c.biasLen > 0 ? t.upload(std::vector<float>(bias.begin(), bias.begin() + c.biasLen),
                                              Dims{c.biasLen}, DType::F32)
                                   : none);
        TensorDesc ad, bd;
        ad.dims = c.a;
        bd.dims = c.b;
        if (constantB) {
          bd.data.resize(b.size() * sizeof(float));
          std::memcpy(bd.data.data(), b.data(), bd.data.size());
        }
        std::unique_ptr<OpState> state = dev.prepare(op, {&ad, &bd, nullptr}, prec);
        const TensorRef y = t.output(yd);
        dev.run(op, state.get(), in, {y});
        const std::vector<float> got = t.download<float>(y);
        const std::string what = "gpu matmul " + str(c.a) + " x " + str(c.b) +
                                 (prec == Precision::F32 ? " fp32" : prec == Precision::F16 ? " fp16" : " bf16") +
                                 (constantB ? " prepared" : "");
        const double rel = prec == Precision::F32 ? 0.0 : prec == Precision::F16 ? 2.5e-3 : 2e-2;
        if (prec == Precision::F32) {
          near(what.c_str(), got, want, gemmTolerance(scale, k));
        } else {
          near(what.c_str(), got, want, [&scale, rel](size_t i) { return rel * scale[i] + 1e-4; });
        }
      }
    }
  }
}

void gpuOps(Device& dev, Rng& r) {
  {  // binary with broadcasting, every op, fp32 and int32 (division by zero gives 0)
    const Dims ad = {2, 1, 3, 5}, bd = {4, 1, 5}, yd = {2, 4, 3, 5};
    const std::vector<float> a = r.values(numel(ad)), b = r.values(numel(bd), 0.5f, 2.0f);
    for (OpType type : {OpType::Add, OpType::Sub, OpType::Mul, OpType::Div}) {
      GpuTensors t(dev);
      const TensorRef y = t.output(yd);
      dev.run(makeOp(type, "bin"), nullptr, {t.upload(a, ad, DType::F32), t.upload(b, bd, DType::F32)}, {y});
      std::vector<double> want(static_cast<size_t>(numel(yd)));
      for (int64_t i = 0; i < numel(yd); ++i) {
        const Dims idx = unravel(i, yd);
        const double x = a[static_cast<size_t>(broadcastOffset(idx, ad))], z = b[static_cast<size_t>(broadcastOffset(idx, bd))];
        want[static_cast<size_t>(i)] = type == OpType::Add ? x + z : type == OpType::Sub ? x - z : type == OpType::Mul ? x * z : x / z;
      }
      near("gpu binary", t.download<float>(y), want, [&want](size_t i) { return 1e-6 * std::max(1.0, std::fabs(want[i])); });
    }
    GpuTensors t(dev);
    const TensorRef y = t.output({4}, DType::I32);
    dev.run(makeOp(OpType::Div, "idiv"), nullptr,
            {t.upload(std::vector<int32_t>{7, -7, 9, 5}, {4}, DType::I32), t.upload(std::vector<int32_t>{2, 2, 0, 5}, {4}, DType::I32)},
            {y});
    const std::vector<int32_t> got = t.download<int32_t>(y);
    CHECK(got == (std::vector<int32_t>{3, -3, 0, 1}), "gpu int32 division");
  }
  {  // unary
    const std::vector<float> x = r.values(1000, -4.0f, 4.0f);
    const struct {
      OpType type;
      Activation act;
    } ops[] = {{OpType::Relu, Activation::Relu}, {OpType::LeakyRelu, Activation::LeakyRelu},
               {OpType::Sigmoid, Activation::Sigmoid}, {OpType::Tanh, Activation::Tanh},
               {OpType::Gelu, Activation::Gelu}, {OpType::Gelu, Activation::GeluTanh}, {OpType::Erf, Activation::None}};
    for (const auto& u : ops) {
      GpuTensors t(dev);
      OpDesc op = makeOp(u.type, "unary");
      op.attrs.alpha = 0.2f;
      op.attrs.activation = u.type == OpType::Gelu ? u.act : Activation::None;
      const TensorRef y = t.output({10, 100});
      dev.run(op, nullptr, {t.upload(x, {10, 100}, DType::F32)}, {y});
      std::vector<double> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = u.type == OpType::Erf ? std::erf(x[i]) : activationRef(u.act, x[i], 0.2);
      near("gpu unary", t.download<float>(y), want, [](size_t) { return 2e-6; });
    }
  }
  {  // softmax on the last axis and on a middle one; layer norm
    const Dims xd = {3, 37, 70};
    const std::vector<float> x = r.values(numel(xd), -5.0f, 5.0f);
    for (int axis : {2, 1, 0}) {
      GpuTensors t(dev);
      OpDesc op = makeOp(OpType::Softmax, "softmax");
      op.attrs.axis = axis;
      const TensorRef y = t.output(xd);
      dev.run(op, nullptr, {t.upload(x, xd, DType::F32)}, {y});
      const AxisGeometry g = axisGeometry(xd, axis);
      std::vector<double> want(x.size());
      for (int64_t o = 0; o < g.outer; ++o) {
        for (int64_t in = 0; in < g.inner; ++in) {
          double m = -1e30, s = 0;
          for (int64_t a = 0; a < g.len; ++a) m = std::max(m, static_cast<double>(x[static_cast<size_t>((o * g.len + a) * g.inner + in)]));
          for (int64_t a = 0; a < g.len; ++a) s += std::exp(x[static_cast<size_t>((o * g.len + a) * g.inner + in)] - m);
          for (int64_t a = 0; a < g.len; ++a) {
            const size_t i = static_cast<size_t>((o * g.len + a) * g.inner + in);
            want[i] = std::exp(x[i] - m) / s;
          }
        }
      }
      near("gpu softmax", t.download<float>(y), want, [&want](size_t i) { return 1e-6 + 1e-5 * want[i]; });
    }
    for (int axis : {2, 1}) {
      GpuTensors t(dev);
      OpDesc op = makeOp(OpType::LayerNorm, "ln");
      op.attrs.axis = axis;
      op.attrs.epsilon = 1e-5f;
      const int64_t len = numel(Dims(xd.begin() + axis, xd.end()));
      const std::vector<float> scale = r.values(len), bias = r.values(len);
      const TensorRef y = t.output(xd);
      dev.run(op, nullptr,
              {t.upload(x, xd, DType::F32), t.upload(scale, {len}, DType::F32), t.upload(bias, {len}, DType::F32)}, {y});
      std::vector<double> want(x.size());
      const int64_t rows = numel(xd) / len;
      for (int64_t rr = 0; rr < rows; ++rr) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < len; ++j) mean += x[static_cast<size_t>(rr * len + j)];
        mean /= len;
        for (int64_t j = 0; j < len; ++j) var += std::pow(x[static_cast<size_t>(rr * len + j)] - mean, 2);
        var /= len;
        for (int64_t j = 0; j < len; ++j) {
          const size_t i = static_cast<size_t>(rr * len + j);
          want[i] = (x[i] - mean) / std::sqrt(var + 1e-5) * scale[static_cast<size_t>(j)] + bias[static_cast<size_t>(j)];
        }
      }
      near("gpu layer norm", t.download<float>(y), want, [](size_t) { return 2e-5; });
    }
  }
  {  // gather: int64 and int32 indices, negative ones, then an index out of range, then the device still works
    const Dims dd = {10, 6};
    const std::vector<float> data = r.values(60);
    for (bool i64 : {true, false}) {
      GpuTensors t(dev);
      OpDesc op = makeOp(OpType::Gather, "gather");
      op.attrs.axis = 0;
      const TensorRef ix = i64 ? t.upload(std::vector<int64_t>{0, 9, -1, 3}, {2, 2}, DType::I64)
                               : t.upload(std::vector<int32_t>{0, 9, -1, 3}, {2, 2}, DType::I32);
      const TensorRef y = t.output({2, 2, 6});
      dev.run(op, nullptr, {t.upload(data, dd, DType::F32), ix}, {y});
      std::vector<double> want;
      for (int64_t row : {0, 9, 9, 3}) {
        for (int64_t j = 0; j < 6; ++j) want.push_back(data[static_cast<size_t>(row * 6 + j)]);
      }
      near("gpu gather", t.download<float>(y), want, [](size_t) { return 0.0; });
      const TensorRef bad = i64 ? t.upload(std::vector<int64_t>{1, 10}, {2}, DType::I64)
                                : t.upload(std::vector<int32_t>{1, -11}, {2}, DType::I32);
      const TensorRef y2 = t.output({2, 6});
      std::string message;
      bool invalid = false;
      try {
        dev.run(op, nullptr, {t.upload(data, dd, DType::F32), bad}, {y2});
      } catch (const std::invalid_argument& e) {
        invalid = true;
        message = e.what();
      } catch (const std::exception& e) {
        message = e.what();
      }
      CHECK(invalid && message.find(i64 ? "index 10 " : "index -11 ") != std::string::npos &&
                message.find("[-10, 10)") != std::string::npos,
            "gpu gather out of range: '%s'", message.c_str());
      const TensorRef y3 = t.output({2, 2, 6});
      dev.run(op, nullptr, {t.upload(data, dd, DType::F32), ix}, {y3});
      near("gpu gather after an error", t.download<float>(y3), want, [](size_t) { return 0.0; });
    }
  }
  {  // transpose, concat, reshape
    const Dims xd = {2, 3, 4, 5};
    const std::vector<float> x = r.values(numel(xd));
    const std::vector<int32_t> perm = {0, 2, 3, 1};
    GpuTensors t(dev);
    OpDesc op = makeOp(OpType::Transpose, "transpose");
    op.attrs.perm = perm;
    const Dims yd = {2, 4, 5, 3};
    const TensorRef y = t.output(yd);
    dev.run(op, nullptr, {t.upload(x, xd, DType::F32)}, {y});
    std::vector<double> want(x.size());
    const Dims s = contiguousStrides(xd);
    for (int64_t i = 0; i < numel(yd); ++i) {
      const Dims o = unravel(i, yd);
      int64_t off = 0;
      for (size_t d = 0; d < 4; ++d) off += o[d] * s[static_cast<size_t>(perm[d])];
      want[static_cast<size_t>(i)] = x[static_cast<size_t>(off)];
    }
    near("gpu transpose", t.download<float>(y), want, [](size_t) { return 0.0; });

    OpDesc cat = makeOp(OpType::Concat, "concat");
    cat.attrs.axis = 1;
    const std::vector<int64_t> p0 = {1, 2, 3, 4}, p1 = {5, 6};
    const TensorRef yc = t.output({2, 3}, DType::I64);
    dev.run(cat, nullptr, {t.upload(p0, {2, 2}, DType::I64), t.upload(p1, {2, 1}, DType::I64)}, {yc});
    CHECK(t.download<int64_t>(yc) == (std::vector<int64_t>{1, 2, 5, 3, 4, 6}), "gpu concat int64");

    const TensorRef yr = t.output({6, 20});
    dev.run(makeOp(OpType::Reshape, "reshape"), nullptr, {t.upload(x, xd, DType::F32)}, {yr});
    std::vector<double> same(x.begin(), x.end());
    near("gpu reshape", t.download<float>(yr), same, [](size_t) { return 0.0; });
  }
  {  // conv (fp32, fp16 with prepared weights), pools, global average pool
    const Dims xd = {3, 4, 11, 10}, wd = {6, 2, 3, 3};
    const std::vector<float> x = r.values(numel(xd)), w = r.values(numel(wd)), bias = r.values(6);
    OpDesc op = makeOp(OpType::Conv, "conv");
    op.attrs.group = 2;
    op.attrs.strides = {2, 1};
    op.attrs.pads = {1, 0, 1, 2};
    op.attrs.dilations = {1, 2};
    op.attrs.kernelShape = {3, 3};
    op.attrs.activation = Activation::Relu;
    ConvGeometry g;
    std::string error;
    const Dims yd = {3, 6, (11 + 2 - 3) / 2 + 1, (10 + 2 - 5) / 1 + 1};
    CHECK(planConv(xd, wd, yd, op.attrs, &g, &error), "gpu conv plan: %s", error.c_str());
    std::vector<double> scale;
    const std::vector<double> want = refConv(g, x, w, bias.data(), Activation::Relu, 0.0f, &scale);
    for (Precision prec : {Precision::F32, Precision::F16, Precision::BF16}) {
      GpuTensors t(dev);
      TensorDesc xdsc, wdsc, bdsc;
      xdsc.dims = xd;
      wdsc.dims = wd;
      wdsc.data.resize(w.size() * 4);
      std::memcpy(wdsc.data.data(), w.data(), wdsc.data.size());
      std::unique_ptr<OpState> state = dev.prepare(op, {&xdsc, &wdsc, &bdsc}, prec);
      const TensorRef y = t.output(yd);
      dev.run(op, state.get(), {t.upload(x, xd, DType::F32), t.upload(w, wd, DType::F32), t.upload(bias, {6}, DType::F32)},
              {y});
      const double rel = prec == Precision::F32 ? 0 : prec == Precision::F16 ? 2.5e-3 : 2e-2;
      if (prec == Precision::F32) {
        near("gpu conv fp32", t.download<float>(y), want, gemmTolerance(scale, g.kg));
      } else {
        near(prec == Precision::F16 ? "gpu conv fp16" : "gpu conv bf16", t.download<float>(y), want,
             [&scale, rel](size_t i) { return rel * scale[i] + 1e-4; });
      }
    }
    for (OpType type : {OpType::MaxPool, OpType::AveragePool}) {
      GpuTensors t(dev);
      OpDesc pool = makeOp(type, "pool");
      pool.attrs.kernelShape = {3, 2};
      pool.attrs.strides = {2, 2};
      pool.attrs.pads = {1, 1, 1, 0};
      pool.attrs.dilations = {1, 1};
      pool.attrs.countIncludePad = true;
      const Dims pd = {3, 4, 6, 5};
      ConvGeometry pg;
      CHECK(planPool(xd, pd, pool.attrs, &pg, &error), "gpu pool plan: %s", error.c_str());
      const TensorRef y = t.output(pd);
      dev.run(pool, nullptr, {t.upload(x, xd, DType::F32)}, {y});
      near("gpu pool", t.download<float>(y), refPool(pg, x, type == OpType::MaxPool, true), [](size_t) { return 1e-6; });
    }
    GpuTensors t(dev);
    const TensorRef y = t.output({3, 4, 1, 1});
    dev.run(makeOp(OpType::GlobalAveragePool, "gap"), nullptr, {t.upload(x, xd, DType::F32)}, {y});
    std::vector<double> want2(12, 0.0);
    for (size_t i = 0; i < x.size(); ++i) want2[i / 110] += x[i] / 110.0;
    near("gpu global average pool", t.download<float>(y), want2, [](size_t) { return 1e-6; });
  }
  {  // a large copy through the staging buffer (chunked), and fill
    GpuTensors t(dev);
    const std::vector<float> big = r.values((80 << 20) / 4);
    const TensorRef b = t.upload(big, {static_cast<int64_t>(big.size())}, DType::F32);
    const std::vector<float> back = t.download<float>(b);
    CHECK(back == big, "80 MiB round trip through the staging buffer");
    dev.fill(b.f32(), 2.5f, 1000);
    const std::vector<float> filled = t.download<float>(b);
    CHECK(filled[0] == 2.5f && filled[999] == 2.5f && filled[1000] == big[1000], "fill");
  }
  dev.synchronize();
}

void gpuChecks(int id) {
  std::unique_ptr<Device> dev = createCudaDevice(id);
  Rng r(11);
  gpuMatMul(*dev, r);
  gpuOps(*dev, r);
}

void bench(int id) {
  for (Precision prec : {Precision::F32, Precision::F16, Precision::BF16}) {
    for (int size : {256, 512, 1024, 2048, 4096}) {
      const int iterations = size <= 1024 ? 50 : 10;
      const double s = cudaGemmSeconds(id, size, size, size, prec, iterations);
      const double flops = 2.0 * size * size * static_cast<double>(size);
      std::printf("BENCH %s %d %.9f %.1f\n", prec == Precision::F32 ? "fp32" : prec == Precision::F16 ? "fp16" : "bf16",
                  size, s, flops / s / 1e9);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool doBench = false, hostOnly = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--bench") == 0) doBench = true;
    if (std::strcmp(argv[i], "--host-only") == 0) hostOnly = true;
  }
  testBroadcast();
  testTranspose();
  testSmallMaps();
  testGather();
  testPool();
  testMatMul();
  testConv();
  std::printf("host checks: %d checks, %d failures\n", checks, failures);

  std::string reason;
  const std::vector<CudaDeviceInfo> devices = hostOnly ? std::vector<CudaDeviceInfo>{} : listCudaDevices(&reason);
  std::printf("CUDA runtime %d, %zu device(s)%s%s\n", cudaRuntimeVersion(), devices.size(), reason.empty() ? "" : ": ",
              reason.c_str());
  for (const CudaDeviceInfo& d : devices) {
    std::printf("  cuda:%d %s, %.1f GiB, sm_%d%d, %d SMs\n", d.id, d.name.c_str(),
                static_cast<double>(d.totalMemory) / (1 << 30), d.major, d.minor, d.multiProcessors);
  }
  if (!devices.empty()) {
    try {
      gpuChecks(0);
    } catch (const std::exception& e) {
      ++checks;
      ++failures;
      std::fprintf(stderr, "FAIL gpu checks threw: %s\n", e.what());
    }
    if (doBench) {
      try {
        bench(0);
      } catch (const std::exception& e) {
        ++checks;
        ++failures;
        std::fprintf(stderr, "FAIL benchmark threw: %s\n", e.what());
      }
    }
  }
  std::printf("cuda_test: %d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
