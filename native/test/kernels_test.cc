// The native engine's kernels checked without Node: the SGEMM for every ISA this CPU has, the vectorised math, and
// every op through a Session against double-precision references, with poisoning on, at batches 1, 7 and 32. With a
// CUDA build and a GPU the same op plans run on cuda:0 and are compared with the CPU. One line per check, then
// "N passed, N failed"; exits 1 when anything failed. Built by native/test/build.sh.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../src/cpu_math.h"
#include "../src/cpu_math_avx512.h"
#include "../src/executor.h"
#include "../src/cuda/cuda_api.h"
#include "../src/plan.h"
#include "../src/session.h"
#include "../src/sgemm.h"
#include "../src/thread_pool.h"

using namespace flotilla;

namespace {

int gPassed = 0;
int gFailed = 0;

void report(bool ok, const std::string& name, const std::string& detail = "") {
  (ok ? gPassed : gFailed)++;
  std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name.c_str(), detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stdout);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::mt19937 gRng(12345);

std::vector<float> randomVector(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gRng);
  return v;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string dims(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); i++) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

/** Max of |got - ref| / (atol + rtol |ref|) (<= 1 passes; NaN fails). */
double errorRatio(const float* got, const double* ref, size_t n, double atol, double rtol, size_t* worst) {
  double m = 0;
  *worst = 0;
  for (size_t i = 0; i < n; i++) {
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]) / (atol + rtol * std::fabs(ref[i]));
    if (!(e <= m)) {
      m = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
      *worst = i;
    }
  }
  return m;
}

double activateRef(Activation act, double x, double alpha) {
  switch (act) {
    case Activation::None: return x;
    case Activation::Relu: return x > 0 ? x : 0;
    case Activation::LeakyRelu: return x < 0 ? alpha * x : x;
    case Activation::Sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::Tanh: return std::tanh(x);
    case Activation::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::GeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

// -------------------------------------------------------------------------------------------------------------
// SGEMM

struct GemmShape {
  int64_t m, n, k;
};

/** C = act(alpha op(A) op(B) + beta C0 + biasScale (colBias[j] + rowBias[i])) in double. */
std::vector<double> gemmRef(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const std::vector<float>& a,
                            const std::vector<float>& b, float beta, const std::vector<float>& c0,
                            const GemmEpilogue& epi) {
  std::vector<double> c(static_cast<size_t>(m * n));
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  // op(A) as rows [m][k] and op(B) as columns [n][k], so each dot product reads contiguous memory.
  std::vector<double> ar(static_cast<size_t>(m * k)), bc(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < m; i++) {
    for (int64_t p = 0; p < k; p++) {
      ar[static_cast<size_t>(i * k + p)] = ta ? a[static_cast<size_t>(p * lda + i)] : a[static_cast<size_t>(i * lda + p)];
    }
  }
  for (int64_t j = 0; j < n; j++) {
    for (int64_t p = 0; p < k; p++) {
      bc[static_cast<size_t>(j * k + p)] = tb ? b[static_cast<size_t>(j * ldb + p)] : b[static_cast<size_t>(p * ldb + j)];
    }
  }
  for (int64_t i = 0; i < m; i++) {
    const double* arow = ar.data() + i * k;
    for (int64_t j = 0; j < n; j++) {
      const double* bcol = bc.data() + j * k;
      double s = 0;
      for (int64_t p = 0; p < k; p++) s += arow[p] * bcol[p];
      double v = alpha * s;
      if (beta != 0) v += beta * c0[static_cast<size_t>(i * n + j)];
      double bias = 0;
      if (epi.colBias != nullptr) bias += epi.colBias[j];
      if (epi.rowBias != nullptr) bias += epi.rowBias[i];
      v += epi.biasScale * bias;
      c[static_cast<size_t>(i * n + j)] = activateRef(epi.activation, v, epi.activationAlpha);
    }
  }
  return c;
}

const char* transName(bool ta, bool tb) {
  static const char* names[] = {"NN", "NT", "TN", "TT"};
  return names[(ta ? 2 : 0) + (tb ? 1 : 0)];
}

void testSgemm() {
  const std::vector<GemmShape> shapes = {{1, 1, 1},     {7, 7, 7},     {31, 33, 7},    {33, 31, 100},
                                         {100, 1, 33},  {1, 100, 257}, {257, 100, 31}, {100, 257, 257}};
  ThreadPool& pool = defaultThreadPool();
  const Isa original = gemmIsa();
  std::vector<Isa> isas;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    setGemmIsa(isa);
    if (gemmIsa() == isa) {
      isas.push_back(isa);
    } else {
      std::printf("skip sgemm %s: not supported by this CPU\n", isaName(isa));
    }
  }
  for (const GemmShape& s : shapes) {
    const std::vector<float> a = randomVector(static_cast<size_t>(s.m * s.k));
    const std::vector<float> b = randomVector(static_cast<size_t>(s.k * s.n));
    const std::vector<float> c0 = randomVector(static_cast<size_t>(s.m * s.n));
    const std::vector<float> colBias = randomVector(static_cast<size_t>(s.n));
    const std::vector<float> rowBias = randomVector(static_cast<size_t>(s.m));
    struct Variant {
      const char* name;
      float alpha, beta;
      GemmEpilogue epi;
      bool packed;
    };
    std::vector<Variant> variants;
    variants.push_back({"plain", 1.0f, 0.0f, GemmEpilogue{}, false});
    variants.push_back({"alpha0.5 beta2", 0.5f, 2.0f, GemmEpilogue{}, false});
    GemmEpilogue e1;
    e1.colBias = colBias.data();
    e1.biasScale = 0.75f;
    e1.activation = Activation::Relu;
    variants.push_back({"colBias relu", 1.0f, 0.0f, e1, false});
    GemmEpilogue e2;
    e2.rowBias = rowBias.data();
    e2.activation = Activation::Gelu;
    variants.push_back({"rowBias gelu", 1.5f, 0.0f, e2, false});
    GemmEpilogue e3;
    e3.colBias = colBias.data();
    e3.activation = Activation::LeakyRelu;
    e3.activationAlpha = 0.1f;
    variants.push_back({"packed colBias leaky", 1.0f, 0.0f, e3, true});
    GemmEpilogue e4;
    e4.activation = Activation::Sigmoid;
    variants.push_back({"packed alpha2 sigmoid", 2.0f, 0.0f, e4, true});
    GemmEpilogue e5;
    e5.colBias = colBias.data();
    e5.activation = Activation::Tanh;
    variants.push_back({"tanh", 1.0f, 0.0f, e5, false});
    GemmEpilogue e6;
    e6.activation = Activation::GeluTanh;
    variants.push_back({"packed gelu_tanh", 1.0f, 0.0f, e6, true});
    for (int t = 0; t < 4; t++) {
      const bool ta = t & 2, tb = t & 1;
      const int64_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
      for (const Variant& v : variants) {
        // One reference for every ISA.
        const std::vector<double> ref = gemmRef(ta, tb, s.m, s.n, s.k, v.alpha, a, b, v.beta, c0, v.epi);
        for (Isa isa : isas) {
          setGemmIsa(isa);
          // beta = 0 must not read C: start from NaN.
          std::vector<float> c = v.beta != 0.0f ? c0 : std::vector<float>(c0.size(), std::nanf(""));
          if (v.packed) {
            PackedB packed(tb, s.k, s.n, b.data(), ldb);
            sgemmPacked(ta, s.m, v.alpha, a.data(), lda, packed, c.data(), s.n, v.epi, &pool);
          } else {
            sgemm(ta, tb, s.m, s.n, s.k, v.alpha, a.data(), lda, b.data(), ldb, v.beta, c.data(), s.n, v.epi, &pool);
          }
          size_t worst;
          const double err = errorRatio(c.data(), ref.data(), c.size(), 1e-5 * std::sqrt(double(s.k)), 1e-4, &worst);
          report(err <= 1, std::string("sgemm ") + isaName(isa) + " " + transName(ta, tb) + " " +
                               std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " +
                               v.name,
                 fmt("error ratio %.3g", err));
        }
      }
    }
  }
  // One large product per ISA against one reference.
  {
    const int64_t n = 1024;
    const std::vector<float> a = randomVector(static_cast<size_t>(n * n)), b = randomVector(static_cast<size_t>(n * n));
    const std::vector<double> ref = gemmRef(false, false, n, n, n, 1.0f, a, b, 0.0f, {}, GemmEpilogue{});
    for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
      setGemmIsa(isa);
      if (gemmIsa() != isa) continue;
      for (bool packedB : {false, true}) {
        std::vector<float> c(static_cast<size_t>(n * n), std::nanf(""));
        const auto t0 = std::chrono::steady_clock::now();
        if (packedB) {
          PackedB p(false, n, n, b.data(), n);
          sgemmPacked(false, n, 1.0f, a.data(), n, p, c.data(), n, GemmEpilogue{}, &pool);
        } else {
          sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, GemmEpilogue{}, &pool);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        size_t worst;
        const double err = errorRatio(c.data(), ref.data(), c.size(), 1e-5 * 32, 1e-4, &worst);
        report(err <= 1, std::string("sgemm ") + isaName(isa) + " NN 1024x1024x1024" + (packedB ? " packed" : ""),
               fmt("error ratio %.3g", err) + fmt(", %.1f GFLOP/s", 2.0 * n * n * n / s / 1e9));
      }
    }
  }
  setGemmIsa(original);
}

// -------------------------------------------------------------------------------------------------------------
// Vectorised math

/** A cpu_math_avx512.h function on one value (in every lane; lane 0 read back). */
template <__m512 (*F)(__m512)>
__attribute__((target("avx512f"))) float avx512Lane(float x) {
  return _mm_cvtss_f32(_mm512_castps512_ps128(F(_mm512_set1_ps(x))));
}

void testMath() {
  struct Fn {
    const char* name;
    float (*f)(float);
    double (*ref)(double);
    double lo, hi, atol, rtol;
  };
  std::vector<Fn> fns = {
      {"exp", cpu::fastExp, [](double x) { return std::exp(x); }, -87, 88, 0, 4e-7},
      {"tanh", cpu::fastTanh, [](double x) { return std::tanh(x); }, -12, 12, 0, 4e-7},
      {"sigmoid", cpu::fastSigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -80, 30, 0, 5e-7},
      {"erf", cpu::fastErf, [](double x) { return std::erf(x); }, -6, 6, 0, 4e-7},
      // 1 + erf(x / sqrt 2) cancels for negative x (as in onnxruntime): about |x| 6e-8 absolute.
      {"gelu", cpu::fastGelu, [](double x) { return activateRef(Activation::Gelu, x, 0); }, -10, 10, 1e-6, 1e-6},
      // For negative x the result is ~exp(2 inner): the fp32 rounding of inner (|inner| up to ~40) shows as a few 1e-6.
      {"gelu_tanh", cpu::fastGeluTanh, [](double x) { return activateRef(Activation::GeluTanh, x, 0); }, -10, 10,
       1e-12, 5e-6},
  };
  if (gemmIsa() == Isa::Avx512) {
    // The intrinsic versions are held to the same bounds.
    float (*const vector[])(float) = {avx512Lane<cpu::exp512>, avx512Lane<cpu::tanh512>, avx512Lane<cpu::sigmoid512>,
                                      avx512Lane<cpu::erf512>, avx512Lane<cpu::gelu512>, avx512Lane<cpu::geluTanh512>};
    const std::vector<Fn> scalar = fns;
    static std::vector<std::string> names;
    for (size_t i = 0; i < scalar.size(); i++) names.push_back(std::string(scalar[i].name) + " (avx512)");
    for (size_t i = 0; i < scalar.size(); i++) {
      Fn v = scalar[i];
      v.name = names[i].c_str();
      v.f = vector[i];
      fns.push_back(v);
    }
  }
  for (const Fn& fn : fns) {
    double worst = 0, at = 0;
    const int steps = 2000000;
    auto probe = [&](double x) {
      const float xf = static_cast<float>(x);
      const double got = fn.f(xf), ref = fn.ref(xf);
      const double e = std::fabs(got - ref) / (fn.atol + fn.rtol * std::fabs(ref) + 1e-300);
      if (!(e <= worst)) {
        worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
        at = x;
      }
    };
    for (int i = 0; i <= steps; i++) probe(fn.lo + (fn.hi - fn.lo) * i / steps);
    for (double x = 1e-30; x < 1; x *= 1.01) {
      probe(x);
      probe(-x);
    }
    report(worst <= 1, std::string("math ") + fn.name + " vs double",
           fmt("worst error %.3g of the tolerance", worst) + fmt(" (%.3g relative", fn.rtol) +
               (fn.atol > 0 ? fmt(" + %.3g absolute)", fn.atol) : std::string(")")) + fmt(", at x = %.7g", at));
    const float nan = std::nanf("");
    report(std::isnan(fn.f(nan)), std::string("math ") + fn.name + "(NaN) is NaN");
  }
}

// -------------------------------------------------------------------------------------------------------------
// Host tensors and double-precision references

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<double> v;   // values (indices too)
  size_t size() const { return v.size(); }
};

Tensor make(std::vector<int64_t> shape, DType dtype = DType::F32) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.v.assign(static_cast<size_t>(numel(t.shape)), 0.0);
  return t;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t>& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t k = s.size(); k-- > 1;) st[k - 1] = st[k] * s[k];
  return st;
}

/** Offset in `shape` (right-aligned, broadcast) of the output multi-index `idx`. */
int64_t broadcastOffset(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  const std::vector<int64_t> st = stridesOf(shape);
  int64_t off = 0;
  const size_t shift = idx.size() - shape.size();
  for (size_t k = 0; k < shape.size(); k++) {
    if (shape[k] != 1) off += idx[k + shift] * st[k];
  }
  return off;
}

std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = flat % shape[k];
    flat /= shape[k];
  }
  return idx;
}

std::vector<int64_t> broadcastShape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; i++) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    out[i] = std::max(da, db);
  }
  return out;
}

Tensor refBinary(OpType op, const Tensor& a, const Tensor& b) {
  Tensor y = make(broadcastShape(a.shape, b.shape));
  for (size_t i = 0; i < y.size(); i++) {
    const std::vector<int64_t> idx = unravel(static_cast<int64_t>(i), y.shape);
    const double p = a.v[static_cast<size_t>(broadcastOffset(idx, a.shape))];
    const double q = b.v[static_cast<size_t>(broadcastOffset(idx, b.shape))];
    y.v[i] = op == OpType::Add ? p + q : op == OpType::Sub ? p - q : op == OpType::Mul ? p * q : p / q;
  }
  return y;
}

Tensor refMatMul(const Tensor& a, const Tensor& b, const Tensor* bias, const OpAttrs& at) {
  const size_t ra = a.shape.size(), rb = b.shape.size();
  const int64_t m = at.transA ? a.shape[ra - 1] : a.shape[ra - 2];
  const int64_t k = at.transA ? a.shape[ra - 2] : a.shape[ra - 1];
  const int64_t n = at.transB ? b.shape[rb - 2] : b.shape[rb - 1];
  const std::vector<int64_t> leadA(a.shape.begin(), a.shape.end() - 2), leadB(b.shape.begin(), b.shape.end() - 2);
  std::vector<int64_t> lead = broadcastShape(leadA, leadB);
  std::vector<int64_t> shape = lead;
  shape.push_back(m);
  shape.push_back(n);
  Tensor y = make(shape);
  const int64_t count = numel(lead);
  for (int64_t t = 0; t < count; t++) {
    const std::vector<int64_t> idx = unravel(t, lead);
    const int64_t oa = broadcastOffset(idx, leadA) * m * k, ob = broadcastOffset(idx, leadB) * k * n;
    for (int64_t i = 0; i < m; i++) {
      for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t p = 0; p < k; p++) {
          const double av = at.transA ? a.v[static_cast<size_t>(oa + p * m + i)] : a.v[static_cast<size_t>(oa + i * k + p)];
          const double bv = at.transB ? b.v[static_cast<size_t>(ob + j * k + p)] : b.v[static_cast<size_t>(ob + p * n + j)];
          s += av * bv;
        }
        double v = at.alpha * s;
        if (bias != nullptr) v += at.beta * bias->v[bias->size() == 1 ? 0 : static_cast<size_t>(j)];
        y.v[static_cast<size_t>((t * m + i) * n + j)] = activateRef(at.activation, v, at.activationAlpha);
      }
    }
  }
  return y;
}

Tensor refUnary(OpType op, const Tensor& x, const OpAttrs& at) {
  Tensor y = make(x.shape);
  for (size_t i = 0; i < x.size(); i++) {
    const double v = x.v[i];
    switch (op) {
      case OpType::Relu: y.v[i] = v > 0 ? v : 0; break;
      case OpType::LeakyRelu: y.v[i] = v < 0 ? at.alpha * v : v; break;
      case OpType::Sigmoid: y.v[i] = activateRef(Activation::Sigmoid, v, 0); break;
      case OpType::Tanh: y.v[i] = std::tanh(v); break;
      case OpType::Erf: y.v[i] = std::erf(v); break;
      default: y.v[i] = activateRef(at.activation, v, 0); break;
    }
  }
  return y;
}

void outerInner(const std::vector<int64_t>& s, int axis, int64_t* outer, int64_t* len, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= s[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); i++) *inner *= s[i];
  *len = s[static_cast<size_t>(axis)];
}

Tensor refSoftmax(const Tensor& x, int axis) {
  Tensor y = make(x.shape);
  int64_t outer, len, inner;
  outerInner(x.shape, axis, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t j = 0; j < inner; j++) {
      double m = -1e300, s = 0;
      for (int64_t l = 0; l < len; l++) m = std::max(m, x.v[static_cast<size_t>((o * len + l) * inner + j)]);
      for (int64_t l = 0; l < len; l++) s += std::exp(x.v[static_cast<size_t>((o * len + l) * inner + j)] - m);
      for (int64_t l = 0; l < len; l++) {
        const size_t i = static_cast<size_t>((o * len + l) * inner + j);
        y.v[i] = std::exp(x.v[i] - m) / s;
      }
    }
  }
  return y;
}

Tensor refLayerNorm(const Tensor& x, const Tensor& scale, const Tensor* bias, int axis, double eps) {
  Tensor y = make(x.shape);
  int64_t rows = 1, cols = 1;
  for (int i = 0; i < axis; i++) rows *= x.shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis); i < x.shape.size(); i++) cols *= x.shape[i];
  for (int64_t r = 0; r < rows; r++) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; c++) mean += x.v[static_cast<size_t>(r * cols + c)];
    mean /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; c++) var += std::pow(x.v[static_cast<size_t>(r * cols + c)] - mean, 2);
    var /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; c++) {
      const size_t i = static_cast<size_t>(r * cols + c);
      y.v[i] = (x.v[i] - mean) / std::sqrt(var + eps) * scale.v[static_cast<size_t>(c)] +
               (bias != nullptr ? bias->v[static_cast<size_t>(c)] : 0);
    }
  }
  return y;
}

Tensor refGather(const Tensor& data, const Tensor& idx, int axis) {
  int64_t outer, n, inner;
  outerInner(data.shape, axis, &outer, &n, &inner);
  std::vector<int64_t> shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  Tensor y = make(shape, data.dtype);
  size_t out = 0;
  for (int64_t o = 0; o < outer; o++) {
    for (double iv : idx.v) {
      int64_t i = static_cast<int64_t>(iv);
      if (i < 0) i += n;
      for (int64_t j = 0; j < inner; j++) y.v[out++] = data.v[static_cast<size_t>((o * n + i) * inner + j)];
    }
  }
  return y;
}

Tensor refTranspose(const Tensor& x, const std::vector<int32_t>& perm) {
  std::vector<int64_t> shape;
  for (int32_t p : perm) shape.push_back(x.shape[static_cast<size_t>(p)]);
  Tensor y = make(shape, x.dtype);
  const std::vector<int64_t> xs = stridesOf(x.shape);
  for (size_t i = 0; i < y.size(); i++) {
    const std::vector<int64_t> idx = unravel(static_cast<int64_t>(i), shape);
    int64_t off = 0;
    for (size_t k = 0; k < perm.size(); k++) off += idx[k] * xs[static_cast<size_t>(perm[k])];
    y.v[i] = x.v[static_cast<size_t>(off)];
  }
  return y;
}

Tensor refConcat(const std::vector<Tensor>& xs, int axis) {
  std::vector<int64_t> shape = xs[0].shape;
  shape[static_cast<size_t>(axis)] = 0;
  for (const Tensor& x : xs) shape[static_cast<size_t>(axis)] += x.shape[static_cast<size_t>(axis)];
  Tensor y = make(shape, xs[0].dtype);
  for (size_t i = 0; i < y.size(); i++) {
    std::vector<int64_t> idx = unravel(static_cast<int64_t>(i), shape);
    int64_t a = idx[static_cast<size_t>(axis)];
    for (const Tensor& x : xs) {
      const int64_t d = x.shape[static_cast<size_t>(axis)];
      if (a < d) {
        idx[static_cast<size_t>(axis)] = a;
        int64_t off = 0;
        const std::vector<int64_t> st = stridesOf(x.shape);
        for (size_t k = 0; k < idx.size(); k++) off += idx[k] * st[k];
        y.v[i] = x.v[static_cast<size_t>(off)];
        break;
      }
      a -= d;
    }
  }
  return y;
}

Tensor refConv(const Tensor& x, const Tensor& w, const Tensor* b, const OpAttrs& at, const std::vector<int64_t>& outShape) {
  Tensor y = make(outShape);
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const int64_t m = w.shape[0], kh = w.shape[2], kw = w.shape[3];
  const int64_t g = at.group, cg = c / g, mg = m / g;
  const int64_t oh = outShape[2], ow = outShape[3];
  for (int64_t in = 0; in < n; in++) {
    for (int64_t oc = 0; oc < m; oc++) {
      const int64_t grp = oc / mg;
      for (int64_t oy = 0; oy < oh; oy++) {
        for (int64_t ox = 0; ox < ow; ox++) {
          double s = b != nullptr ? b->v[static_cast<size_t>(oc)] : 0;
          for (int64_t ic = 0; ic < cg; ic++) {
            for (int64_t i = 0; i < kh; i++) {
              for (int64_t j = 0; j < kw; j++) {
                const int64_t iy = oy * at.strides[0] - at.pads[0] + i * at.dilations[0];
                const int64_t ix = ox * at.strides[1] - at.pads[1] + j * at.dilations[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                s += x.v[static_cast<size_t>(((in * c + grp * cg + ic) * h + iy) * wd + ix)] *
                     w.v[static_cast<size_t>(((oc * cg + ic) * kh + i) * kw + j)];
              }
            }
          }
          y.v[static_cast<size_t>(((in * m + oc) * oh + oy) * ow + ox)] = activateRef(at.activation, s, at.activationAlpha);
        }
      }
    }
  }
  return y;
}

Tensor refPool(OpType op, const Tensor& x, const OpAttrs& at, const std::vector<int64_t>& outShape) {
  Tensor y = make(outShape);
  const int64_t h = x.shape[2], wd = x.shape[3], oh = outShape[2], ow = outShape[3];
  const int64_t planes = x.shape[0] * x.shape[1];
  for (int64_t p = 0; p < planes; p++) {
    for (int64_t oy = 0; oy < oh; oy++) {
      for (int64_t ox = 0; ox < ow; ox++) {
        double mx = -1e300, s = 0;
        int64_t valid = 0, padded = 0;
        for (int64_t i = 0; i < at.kernelShape[0]; i++) {
          for (int64_t j = 0; j < at.kernelShape[1]; j++) {
            const int64_t iy = oy * at.strides[0] - at.pads[0] + i * at.dilations[0];
            const int64_t ix = ox * at.strides[1] - at.pads[1] + j * at.dilations[1];
            if (iy >= h + at.pads[2] || ix >= wd + at.pads[3]) continue;
            padded++;
            if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
            const double v = x.v[static_cast<size_t>((p * h + iy) * wd + ix)];
            mx = std::max(mx, v);
            s += v;
            valid++;
          }
        }
        double out;
        if (op == OpType::MaxPool) out = mx;
        else out = s / static_cast<double>(at.countIncludePad ? padded : valid);
        y.v[static_cast<size_t>((p * oh + oy) * ow + ox)] = out;
      }
    }
  }
  return y;
}

Tensor refGlobalAvg(const Tensor& x) {
  std::vector<int64_t> shape = {x.shape[0], x.shape[1]};
  shape.resize(x.shape.size(), 1);
  Tensor y = make(shape);
  const int64_t spatial = numel(x.shape) / (x.shape[0] * x.shape[1]);
  for (size_t p = 0; p < y.size(); p++) {
    double s = 0;
    for (int64_t i = 0; i < spatial; i++) s += x.v[p * static_cast<size_t>(spatial) + static_cast<size_t>(i)];
    y.v[p] = s / static_cast<double>(spatial);
  }
  return y;
}

// -------------------------------------------------------------------------------------------------------------
// Plans and cases

constexpr int kMaxBatch = 32;

std::vector<int64_t> resolve(const std::vector<int64_t>& d, int64_t batch) {
  std::vector<int64_t> out;
  for (int64_t x : d) out.push_back(resolveDim(x, batch));
  return out;
}

/** Builds a plan; remembers each tensor's constant values (as doubles) for the references. */
struct Builder {
  Plan plan;
  std::map<int, Tensor> constants;

  int tensor(const std::string& name, std::vector<int64_t> d, DType dtype = DType::F32) {
    TensorDesc t;
    t.name = name;
    t.dtype = dtype;
    t.dims = std::move(d);
    plan.tensors.push_back(std::move(t));
    return static_cast<int>(plan.tensors.size()) - 1;
  }
  int input(const std::string& name, std::vector<int64_t> d, DType dtype = DType::F32) {
    const int i = tensor(name, std::move(d), dtype);
    plan.inputs.push_back(i);
    return i;
  }
  int constant(const std::string& name, std::vector<int64_t> d, const std::vector<double>& values,
               DType dtype = DType::F32) {
    const int i = tensor(name, d, dtype);
    TensorDesc& t = plan.tensors[static_cast<size_t>(i)];
    t.data.resize(values.size() * dtypeSize(dtype));
    for (size_t k = 0; k < values.size(); k++) {
      if (dtype == DType::F32) {
        const float f = static_cast<float>(values[k]);
        std::memcpy(t.data.data() + k * 4, &f, 4);
      } else if (dtype == DType::I32) {
        const int32_t v = static_cast<int32_t>(values[k]);
        std::memcpy(t.data.data() + k * 4, &v, 4);
      } else {
        const int64_t v = static_cast<int64_t>(values[k]);
        std::memcpy(t.data.data() + k * 8, &v, 8);
      }
    }
    Tensor c;
    c.dtype = dtype;
    c.shape = std::move(d);
    c.v = values;
    // Store what the engine sees (fp32 rounding).
    if (dtype == DType::F32) {
      for (double& v : c.v) v = static_cast<float>(v);
    }
    constants[i] = std::move(c);
    return i;
  }
  int randomConstant(const std::string& name, std::vector<int64_t> d, double scale = 1.0) {
    std::vector<float> r = randomVector(static_cast<size_t>(numel(d)), static_cast<float>(-scale),
                                        static_cast<float>(scale));
    return constant(name, std::move(d), std::vector<double>(r.begin(), r.end()));
  }
  int op(OpType type, const std::string& name, std::vector<int32_t> inputs, std::vector<int64_t> outDims,
         OpAttrs attrs = {}, DType outType = DType::F32) {
    const int out = tensor(name + ".out", std::move(outDims), outType);
    OpDesc o;
    o.type = type;
    o.name = name;
    o.inputs = std::move(inputs);
    o.outputs = {out};
    o.attrs = std::move(attrs);
    plan.ops.push_back(std::move(o));
    return out;
  }
  void output(int i) { plan.outputs.push_back(i); }
};

struct Case {
  std::string name;
  Plan plan;
  std::map<int, Tensor> constants;
  /** Expected outputs from the inputs at one batch. */
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> reference;
  /** Integer inputs: the range of their random values, [lo, hi). */
  int64_t indexLo = 0, indexHi = 1;
  float inputScale = 1.0f;
  float inputOffset = 0.0f;
};

Case finish(const std::string& name, Builder& b, std::function<std::vector<Tensor>(const std::vector<Tensor>&)> ref) {
  Case c;
  c.name = name;
  b.plan.maxBatch = kMaxBatch;
  c.plan = b.plan;
  c.constants = b.constants;
  c.reference = std::move(ref);
  return c;
}

std::vector<Tensor> randomInputs(const Case& c, int batch) {
  std::vector<Tensor> ins;
  for (int32_t idx : c.plan.inputs) {
    const TensorDesc& t = c.plan.tensors[static_cast<size_t>(idx)];
    Tensor x = make(resolve(t.dims, batch), t.dtype);
    if (t.dtype == DType::F32) {
      const std::vector<float> r =
          randomVector(x.size(), c.inputOffset - c.inputScale, c.inputOffset + c.inputScale);
      for (size_t i = 0; i < x.size(); i++) x.v[i] = r[i];
    } else {
      std::uniform_int_distribution<int64_t> d(c.indexLo, c.indexHi - 1);
      for (double& v : x.v) v = static_cast<double>(d(gRng));
    }
    ins.push_back(std::move(x));
  }
  return ins;
}

/** Raw bytes of a host tensor in its dtype. */
std::vector<uint8_t> bytesOf(const Tensor& t) {
  std::vector<uint8_t> out(t.size() * dtypeSize(t.dtype));
  for (size_t i = 0; i < t.size(); i++) {
    if (t.dtype == DType::F32) {
      const float f = static_cast<float>(t.v[i]);
      std::memcpy(out.data() + i * 4, &f, 4);
    } else if (t.dtype == DType::I32) {
      const int32_t v = static_cast<int32_t>(t.v[i]);
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      const int64_t v = static_cast<int64_t>(t.v[i]);
      std::memcpy(out.data() + i * 8, &v, 8);
    }
  }
  return out;
}

/** Runs a session; outputs as float (indices converted). */
std::vector<std::vector<float>> runSession(Session& s, const std::vector<Tensor>& inputs, int batch) {
  std::vector<std::vector<uint8_t>> in;
  std::vector<const void*> inPtr;
  for (const Tensor& t : inputs) in.push_back(bytesOf(t));
  for (const auto& b : in) inPtr.push_back(b.data());
  std::vector<std::vector<uint8_t>> out(s.outputCount());
  std::vector<void*> outPtr;
  for (size_t i = 0; i < s.outputCount(); i++) {
    out[i].resize(static_cast<size_t>(s.outputElements(i, batch)) * dtypeSize(s.output(i).dtype));
    outPtr.push_back(out[i].data());
  }
  s.run(inPtr, batch, outPtr);
  std::vector<std::vector<float>> result(out.size());
  for (size_t i = 0; i < out.size(); i++) {
    const DType dt = s.output(i).dtype;
    const size_t n = out[i].size() / dtypeSize(dt);
    result[i].resize(n);
    for (size_t k = 0; k < n; k++) {
      if (dt == DType::F32) std::memcpy(&result[i][k], out[i].data() + k * 4, 4);
      else if (dt == DType::I32) {
        int32_t v;
        std::memcpy(&v, out[i].data() + k * 4, 4);
        result[i][k] = static_cast<float>(v);
      } else {
        int64_t v;
        std::memcpy(&v, out[i].data() + k * 8, 8);
        result[i][k] = static_cast<float>(v);
      }
    }
  }
  return result;
}

std::vector<Case> buildCases() {
  std::vector<Case> cases;
  auto C = [&](int i, const Builder& b) -> const Tensor& { return b.constants.at(i); };

  // ---- MatMul
  {
    Builder b;
    const int x = b.input("x", {-1, 33});
    const int w = b.randomConstant("w", {33, 17});
    const int bias = b.randomConstant("bias", {17});
    OpAttrs at;
    at.activation = Activation::Relu;
    b.output(b.op(OpType::MatMul, "fc_relu", {x, w, bias}, {-1, 17}, at));
    const Tensor W = C(w, b), B = C(bias, b);
    cases.push_back(finish("MatMul [b,33]x[33,17] const B (packed) + bias + relu", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refMatMul(in[0], W, &B, at)};
    }));
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 5, 16});
    const int w = b.randomConstant("w", {9, 16});
    const int bias = b.randomConstant("bias", {1});
    OpAttrs at;
    at.transB = true;
    at.alpha = 2.0f;
    at.beta = 0.5f;
    at.activation = Activation::Gelu;
    b.output(b.op(OpType::MatMul, "fc_batched", {x, w, bias}, {-1, 5, 9}, at));
    const Tensor W = C(w, b), B = C(bias, b);
    cases.push_back(finish("MatMul [b,5,16]x[9,16]^T alpha 2, scalar bias beta 0.5, gelu", b,
                           [=](const std::vector<Tensor>& in) { return std::vector<Tensor>{refMatMul(in[0], W, &B, at)}; }));
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 16, 5});
    const int w = b.input("w", {16, 7});
    const int bias = b.input("bias", {1, 7});
    OpAttrs at;
    at.transA = true;
    at.activation = Activation::Tanh;
    b.output(b.op(OpType::MatMul, "fc_transA", {x, w, bias}, {-1, 5, 7}, at));
    cases.push_back(finish("MatMul [b,16,5]^T x [16,7] (fed B), bias [1,7], tanh", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refMatMul(in[0], in[1], &in[2], at)};
    }));
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 4, 6, 8});
    const int y = b.input("y", {-1, 1, 5, 8});
    OpAttrs at;
    at.transB = true;
    b.output(b.op(OpType::MatMul, "bmm_broadcast", {x, y, -1}, {-1, 4, 6, 5}, at));
    cases.push_back(finish("MatMul broadcast [b,4,6,8] x [b,1,5,8]^T", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refMatMul(in[0], in[1], nullptr, at)};
    }));
  }
  {
    Builder b;
    const int q = b.input("q", {-4, 16, 8});
    const int k = b.input("k", {-4, 16, 8});
    OpAttrs at;
    at.transB = true;
    at.alpha = 0.35f;
    b.output(b.op(OpType::MatMul, "scores", {q, k}, {-4, 16, 16}, at));
    cases.push_back(finish("MatMul attention scores [4b,16,8] x [4b,16,8]^T", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refMatMul(in[0], in[1], nullptr, at)};
    }));
  }
  {
    Builder b;
    const int x = b.input("x", {8, 3});
    const int y = b.input("y", {-1, 3, 4});
    OpAttrs at;
    at.activation = Activation::LeakyRelu;
    at.activationAlpha = 0.2f;
    b.output(b.op(OpType::MatMul, "shared_a", {x, y}, {-1, 8, 4}, at));
    cases.push_back(finish("MatMul [8,3] x [b,3,4] (A broadcast), leaky relu", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refMatMul(in[0], in[1], nullptr, at)};
    }));
  }
  // ---- Add, Sub, Mul, Div
  {
    Builder b;
    const int x = b.input("x", {-1, 3, 4});
    const int row = b.randomConstant("row", {4});
    const int col = b.input("col", {-1, 3, 1});
    const int s = b.constant("s", {1}, {1.7});
    const int a1 = b.op(OpType::Add, "add_row", {x, row}, {-1, 3, 4});
    const int a2 = b.op(OpType::Sub, "sub_col", {a1, col}, {-1, 3, 4});
    const int a3 = b.op(OpType::Div, "div_scalar", {a2, s}, {-1, 3, 4});
    const int a4 = b.op(OpType::Mul, "mul_same", {a3, x}, {-1, 3, 4});
    const int m1 = b.randomConstant("m1", {3, 1});
    const int a5 = b.op(OpType::Mul, "mul_outer", {m1, row}, {3, 4});
    const int a6 = b.op(OpType::Sub, "sub_scalar_left", {s, a4}, {-1, 3, 4});
    const int a7 = b.op(OpType::Add, "add_bcast_both", {a6, a5}, {-1, 3, 4});
    b.output(a4);
    b.output(a7);
    const Tensor R = C(row, b), S = C(s, b), M1 = C(m1, b);
    cases.push_back(finish("Add/Sub/Mul/Div broadcasting (row, column, scalar, same, outer)", b,
                           [=](const std::vector<Tensor>& in) {
                             const Tensor t1 = refBinary(OpType::Add, in[0], R);
                             const Tensor t2 = refBinary(OpType::Sub, t1, in[1]);
                             const Tensor t3 = refBinary(OpType::Div, t2, S);
                             const Tensor t4 = refBinary(OpType::Mul, t3, in[0]);
                             const Tensor t5 = refBinary(OpType::Mul, M1, R);
                             const Tensor t6 = refBinary(OpType::Sub, S, t4);
                             return std::vector<Tensor>{t4, refBinary(OpType::Add, t6, t5)};
                           }));
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 3000});
    const int y = b.input("y", {-1, 3000});
    const int mid = b.input("mid", {-1, 1, 2, 1, 5});
    const int mid2 = b.input("mid2", {3, 1, 1, 5});
    b.output(b.op(OpType::Div, "div_big", {x, y}, {-1, 3000}));
    b.output(b.op(OpType::Add, "add_4d", {mid, mid2}, {-1, 3, 2, 1, 5}));
    cases.push_back(finish("Div large (parallel), Add [b,1,2,1,5]+[3,1,1,5]", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refBinary(OpType::Div, in[0], in[1]), refBinary(OpType::Add, in[2], in[3])};
    }));
  }
  // ---- unary
  for (OpType t : {OpType::Relu, OpType::LeakyRelu, OpType::Sigmoid, OpType::Tanh, OpType::Erf, OpType::Gelu}) {
    for (Activation act : {Activation::Gelu, Activation::GeluTanh}) {
      if (t != OpType::Gelu && act == Activation::GeluTanh) continue;
      Builder b;
      const int x = b.input("x", {-1, 2500});
      OpAttrs at;
      at.alpha = 0.2f;
      at.activation = act;
      b.output(b.op(t, std::string(opTypeName(t)) + "_op", {x}, {-1, 2500}, at));
      Case c = finish(std::string(opTypeName(t)) + (t == OpType::Gelu ? (act == Activation::Gelu ? " (erf)" : " (tanh)") : "") +
                          " [b,2500]",
                      b, [=](const std::vector<Tensor>& in) { return std::vector<Tensor>{refUnary(t, in[0], at)}; });
      c.inputScale = 6.0f;
      cases.push_back(std::move(c));
    }
  }
  // ---- Softmax
  {
    Builder b;
    const int x = b.input("x", {-1, 3, 10});
    OpAttrs last, mid, first;
    last.axis = 2;
    mid.axis = 1;
    first.axis = 0;
    b.output(b.op(OpType::Softmax, "softmax_last", {x}, {-1, 3, 10}, last));
    b.output(b.op(OpType::Softmax, "softmax_mid", {x}, {-1, 3, 10}, mid));
    b.output(b.op(OpType::Softmax, "softmax_batch", {x}, {-1, 3, 10}, first));
    Case c = finish("Softmax axes 2, 1, 0 of [b,3,10]", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refSoftmax(in[0], 2), refSoftmax(in[0], 1), refSoftmax(in[0], 0)};
    });
    c.inputScale = 10.0f;
    cases.push_back(std::move(c));
  }
  // ---- LayerNorm
  {
    Builder b;
    const int x = b.input("x", {-1, 4, 32});
    const int sc = b.randomConstant("scale", {32});
    const int bi = b.randomConstant("bias", {32});
    const int sc2 = b.randomConstant("scale2", {4, 32});
    OpAttrs a2, a1;
    a2.axis = 2;
    a2.epsilon = 1e-5f;
    a1.axis = 1;
    a1.epsilon = 1e-3f;
    b.output(b.op(OpType::LayerNorm, "ln_last", {x, sc, bi}, {-1, 4, 32}, a2));
    b.output(b.op(OpType::LayerNorm, "ln_two_dims", {x, sc2, -1}, {-1, 4, 32}, a1));
    const Tensor S = C(sc, b), B = C(bi, b), S2 = C(sc2, b);
    Case c = finish("LayerNorm axis 2 with bias, axis 1 without", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refLayerNorm(in[0], S, &B, 2, 1e-5f), refLayerNorm(in[0], S2, nullptr, 1, 1e-3f)};
    });
    c.inputScale = 3.0f;
    cases.push_back(std::move(c));
  }
  {
    // A large mean: sums in fp32 would shift every output (onnxruntime accumulates in double).
    Builder b;
    const int x = b.input("x", {-1, 128});
    const int sc = b.randomConstant("scale", {128});
    OpAttrs a1;
    a1.axis = 1;
    b.output(b.op(OpType::LayerNorm, "ln_offset", {x, sc}, {-1, 128}, a1));
    const Tensor S = C(sc, b);
    Case c = finish("LayerNorm of inputs around 100", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refLayerNorm(in[0], S, nullptr, 1, 1e-5)};
    });
    c.inputOffset = 100.0f;
    c.inputScale = 1.0f;
    cases.push_back(std::move(c));
  }
  // ---- Gather
  {
    Builder b;
    const int emb = b.randomConstant("embedding", {10, 6});
    const int ids = b.input("ids", {-1, 5}, DType::I64);
    OpAttrs a0;
    a0.axis = 0;
    b.output(b.op(OpType::Gather, "embed", {emb, ids}, {-1, 5, 6}, a0));
    const Tensor E = C(emb, b);
    Case c = finish("Gather embedding [10,6] by int64 ids [b,5] (negative too)", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refGather(E, in[0], 0)};
    });
    c.indexLo = -10;
    c.indexHi = 10;
    cases.push_back(std::move(c));
  }
  {
    Builder b;
    const int data = b.input("data", {-1, 7, 3});
    const int idx = b.constant("idx", {2, 2}, {0, -1, 6, 3}, DType::I32);
    OpAttrs a1;
    a1.axis = 1;
    b.output(b.op(OpType::Gather, "gather_axis1", {data, idx}, {-1, 2, 2, 3}, a1));
    const Tensor I = C(idx, b);
    cases.push_back(finish("Gather axis 1 by int32 [2,2]", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refGather(in[0], I, 1)};
    }));
  }
  // ---- Reshape, Transpose, Concat
  {
    Builder b;
    const int x = b.input("x", {-1, 4, 6});
    const int r = b.op(OpType::Reshape, "reshape", {x}, {-4, 6});
    const int r2 = b.op(OpType::Reshape, "reshape2", {r}, {-1, 2, 12});
    OpAttrs p;
    p.perm = {0, 2, 1};
    const int t = b.op(OpType::Transpose, "t_last_two", {r2}, {-1, 12, 2}, p);
    b.output(r2);
    b.output(t);
    cases.push_back(finish("Reshape (aliased, chained) and a graph-output alias", b, [=](const std::vector<Tensor>& in) {
      Tensor a = in[0];
      a.shape = {a.shape[0], 2, 12};
      return std::vector<Tensor>{a, refTranspose(a, {0, 2, 1})};
    }));
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 5, 7});
    const int y = b.input("y", {-1, 3, 4, 5});
    const int z = b.input("z", {-1, 3, 2}, DType::I64);
    OpAttrs p1, p2, p3, p4, p5;
    p1.perm = {0, 2, 1};
    p2.perm = {1, 0, 2};
    p3.perm = {2, 0, 1};
    p4.perm = {0, 2, 3, 1};
    p5.perm = {2, 1, 0};
    b.output(b.op(OpType::Transpose, "swap_last", {x}, {-1, 7, 5}, p1));
    b.output(b.op(OpType::Transpose, "keep_inner", {x}, {5, -1, 7}, p2));
    b.output(b.op(OpType::Transpose, "general", {x}, {7, -1, 5}, p3));
    b.output(b.op(OpType::Transpose, "nchw_nhwc", {y}, {-1, 4, 5, 3}, p4));
    b.output(b.op(OpType::Transpose, "int64_reverse", {z}, {2, 3, -1}, p5, DType::I64));
    Case c = finish("Transpose: last two, keep innermost, general, NCHW->NHWC, int64", b,
                    [=](const std::vector<Tensor>& in) {
                      return std::vector<Tensor>{refTranspose(in[0], p1.perm), refTranspose(in[0], p2.perm),
                                                 refTranspose(in[0], p3.perm), refTranspose(in[1], p4.perm),
                                                 refTranspose(in[2], p5.perm)};
                    });
    c.indexLo = -1000000;
    c.indexHi = 1000000;
    cases.push_back(std::move(c));
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 2, 3});
    const int y = b.input("y", {-1, 4, 3});
    OpAttrs a1, a2;
    a1.axis = 1;
    a2.axis = 2;
    b.output(b.op(OpType::Concat, "concat_axis1", {x, y, x}, {-1, 8, 3}, a1));
    b.output(b.op(OpType::Concat, "concat_axis2", {x, x}, {-1, 2, 6}, a2));
    cases.push_back(finish("Concat axes 1 and 2", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refConcat({in[0], in[1], in[0]}, 1), refConcat({in[0], in[0]}, 2)};
    }));
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 2});
    const int i1 = b.input("i1", {-1, 2}, DType::I32);
    OpAttrs a0, a1;
    a0.axis = 0;
    a1.axis = 1;
    b.output(b.op(OpType::Concat, "concat_int32", {i1, i1}, {-1, 4}, a1, DType::I32));
    b.output(b.op(OpType::Concat, "concat_batch_axis", {x, x, x}, {-3, 2}, a0));
    Case c = finish("Concat int32, and along the batch axis", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refConcat({in[1], in[1]}, 1), refConcat({in[0], in[0], in[0]}, 0)};
    });
    c.indexLo = -50;
    c.indexHi = 50;
    cases.push_back(std::move(c));
  }
  // ---- Conv
  struct ConvSpec {
    const char* name;
    std::vector<int64_t> x;   // [C, H, W] per item
    int64_t m, kh, kw;
    int32_t group;
    std::vector<int32_t> strides, pads, dilations;
    Activation act;
    bool bias;
  };
  const ConvSpec convs[] = {
      {"3x3 pad 1 + bias + relu", {3, 9, 9}, 4, 3, 3, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}, Activation::Relu, true},
      {"groups 2, stride 2, dilation 2, pads [1,0,2,1]", {4, 11, 10}, 6, 3, 2, 2, {2, 2}, {1, 0, 2, 1}, {2, 2},
       Activation::None, true},
      {"1x1 direct", {8, 5, 5}, 4, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, Activation::Sigmoid, false},
      {"depthwise 3x3 stride (2,1)", {6, 7, 8}, 6, 3, 3, 6, {2, 1}, {1, 1, 1, 1}, {1, 1}, Activation::None, true},
      {"5x5 MNIST-like", {1, 28, 28}, 8, 5, 5, 1, {1, 1}, {2, 2, 2, 2}, {1, 1}, Activation::Relu, true},
      // A scale per channel: depthwise and pointwise at once (the direct kernel once took it for a 3x3 depthwise).
      {"1x1 depthwise", {6, 7, 8}, 6, 1, 1, 6, {1, 1}, {0, 0, 0, 0}, {1, 1}, Activation::Relu, true},
      {"depthwise 3x3 pad 1, 20 wide", {5, 9, 20}, 5, 3, 3, 5, {1, 1}, {1, 1, 1, 1}, {1, 1}, Activation::LeakyRelu,
       true},
      {"3x3 pad 1, 24 output channels (direct, three register blocks)", {4, 12, 20}, 24, 3, 3, 1, {1, 1},
       {1, 1, 1, 1}, {1, 1}, Activation::LeakyRelu, true},
  };
  for (const ConvSpec& s : convs) {
    Builder b;
    const int x = b.input("x", {-1, s.x[0], s.x[1], s.x[2]});
    const int w = b.randomConstant("w", {s.m, s.x[0] / s.group, s.kh, s.kw});
    const int bias = s.bias ? b.randomConstant("b", {s.m}) : -1;
    OpAttrs at;
    at.group = s.group;
    at.strides = s.strides;
    at.pads = s.pads;
    at.dilations = s.dilations;
    at.kernelShape = {static_cast<int32_t>(s.kh), static_cast<int32_t>(s.kw)};
    at.activation = s.act;
    const int64_t oh = (s.x[1] + s.pads[0] + s.pads[2] - (s.dilations[0] * (s.kh - 1) + 1)) / s.strides[0] + 1;
    const int64_t ow = (s.x[2] + s.pads[1] + s.pads[3] - (s.dilations[1] * (s.kw - 1) + 1)) / s.strides[1] + 1;
    b.output(b.op(OpType::Conv, "conv", {x, w, bias}, {-1, s.m, oh, ow}, at));
    const Tensor W = C(w, b);
    const Tensor B = s.bias ? C(bias, b) : Tensor{};
    const bool hasBias = s.bias;
    const int64_t m = s.m;
    cases.push_back(finish(std::string("Conv ") + s.name, b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refConv(in[0], W, hasBias ? &B : nullptr, at, {in[0].shape[0], m, oh, ow})};
    }));
  }
  // ---- pools
  struct PoolSpec {
    const char* name;
    OpType type;
    std::vector<int64_t> x;
    std::vector<int32_t> kernel, strides, pads, dilations;
    bool includePad, ceil;
  };
  const PoolSpec pools[] = {
      {"MaxPool 3x3 s2 p1", OpType::MaxPool, {3, 9, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, false},
      {"MaxPool 2x2 s2 ceil", OpType::MaxPool, {2, 7, 7}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, false, true},
      {"MaxPool 2x2 dilation 2", OpType::MaxPool, {2, 8, 8}, {2, 2}, {1, 1}, {0, 0, 0, 0}, {2, 2}, false, false},
      {"AveragePool 3x3 s2 p1 exclude pad", OpType::AveragePool, {3, 9, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1},
       false, false},
      {"AveragePool 3x3 s2 p1 include pad", OpType::AveragePool, {3, 9, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1},
       true, false},
      {"AveragePool 3x2 s2 pads [0,1,1,0] include pad ceil", OpType::AveragePool, {2, 8, 7}, {3, 2}, {2, 2},
       {0, 1, 1, 0}, {1, 1}, true, true},
  };
  for (const PoolSpec& s : pools) {
    Builder b;
    const int x = b.input("x", {-1, s.x[0], s.x[1], s.x[2]});
    OpAttrs at;
    at.kernelShape = s.kernel;
    at.strides = s.strides;
    at.pads = s.pads;
    at.dilations = s.dilations;
    at.countIncludePad = s.includePad;
    int64_t out[2];
    for (int d = 0; d < 2; d++) {
      const int64_t room = s.x[static_cast<size_t>(1 + d)] + s.pads[static_cast<size_t>(d)] +
                           s.pads[static_cast<size_t>(d + 2)] -
                           (s.dilations[static_cast<size_t>(d)] * (s.kernel[static_cast<size_t>(d)] - 1) + 1);
      const int64_t st = s.strides[static_cast<size_t>(d)];
      out[d] = (s.ceil ? (room + st - 1) / st : room / st) + 1;
    }
    b.output(b.op(s.type, "pool", {x}, {-1, s.x[0], out[0], out[1]}, at));
    const int64_t oh = out[0], ow = out[1];
    const OpType type = s.type;
    cases.push_back(finish(s.name, b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refPool(type, in[0], at, {in[0].shape[0], in[0].shape[1], oh, ow})};
    }));
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 5, 6, 7});
    b.output(b.op(OpType::GlobalAveragePool, "gap", {x}, {-1, 5, 1, 1}));
    cases.push_back(finish("GlobalAveragePool [b,5,6,7]", b, [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{refGlobalAvg(in[0])};
    }));
  }
  // ---- a chain, so the arena reuses memory across ops
  {
    Builder b;
    const int x = b.input("x", {-1, 16, 32});
    const int w1 = b.randomConstant("w1", {32, 64}, 0.3);
    const int b1 = b.randomConstant("b1", {64});
    const int w2 = b.randomConstant("w2", {64, 32}, 0.3);
    const int sc = b.randomConstant("scale", {32});
    OpAttrs g, ln, sm, none;
    g.activation = Activation::Gelu;
    ln.axis = 2;
    sm.axis = 2;
    const int h1 = b.op(OpType::MatMul, "ffn1", {x, w1, b1}, {-1, 16, 64}, g);
    const int h2 = b.op(OpType::MatMul, "ffn2", {h1, w2}, {-1, 16, 32}, none);
    const int h3 = b.op(OpType::Add, "residual", {h2, x}, {-1, 16, 32});
    const int h4 = b.op(OpType::LayerNorm, "ln", {h3, sc}, {-1, 16, 32}, ln);
    OpAttrs tp;
    tp.transB = true;
    const int h5 = b.op(OpType::MatMul, "self_scores", {h4, h4}, {-1, 16, 16}, tp);
    const int h6 = b.op(OpType::Softmax, "softmax", {h5}, {-1, 16, 16}, sm);
    const int h7 = b.op(OpType::MatMul, "mix", {h6, h4}, {-1, 16, 32}, none);
    b.output(h7);
    const Tensor W1 = C(w1, b), B1 = C(b1, b), W2 = C(w2, b), S = C(sc, b);
    cases.push_back(finish("chain: MatMul+gelu, MatMul, Add, LayerNorm, attention", b, [=](const std::vector<Tensor>& in) {
      const Tensor t1 = refMatMul(in[0], W1, &B1, g);
      const Tensor t2 = refMatMul(t1, W2, nullptr, none);
      const Tensor t3 = refBinary(OpType::Add, t2, in[0]);
      const Tensor t4 = refLayerNorm(t3, S, nullptr, 2, 1e-5);
      const Tensor t5 = refMatMul(t4, t4, nullptr, tp);
      const Tensor t6 = refSoftmax(t5, 2);
      return std::vector<Tensor>{refMatMul(t6, t4, nullptr, none)};
    }));
  }
  return cases;
}

/** Runs every case at batches 1, 7, 32 with poisoning, against the references; keeps the outputs for CUDA. */
void testOps(const std::vector<Case>& cases, std::vector<std::map<int, std::vector<Tensor>>>* inputsUsed,
             std::vector<std::map<int, std::vector<std::vector<float>>>>* cpuOutputs) {
  for (const Case& c : cases) {
    std::map<int, std::vector<Tensor>> ins;
    std::map<int, std::vector<std::vector<float>>> outs;
    try {
      SessionOptions options;
      options.poison = true;
      Session s(c.plan, options);
      for (int batch : {1, 7, 32}) {
        const std::vector<Tensor> inputs = randomInputs(c, batch);
        const std::vector<std::vector<float>> got = runSession(s, inputs, batch);
        const std::vector<Tensor> want = c.reference(inputs);
        double worst = 0;
        std::string where;
        bool shapesOk = got.size() == want.size();
        for (size_t o = 0; shapesOk && o < got.size(); o++) {
          if (got[o].size() != want[o].size()) {
            shapesOk = false;
            where = "output " + std::to_string(o) + " has " + std::to_string(got[o].size()) + " elements, expected " +
                    std::to_string(want[o].size()) + " " + dims(want[o].shape);
            break;
          }
          size_t at;
          const double e = errorRatio(got[o].data(), want[o].v.data(), got[o].size(), 1e-5, 1e-4, &at);
          if (!(e <= worst)) {
            worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
            where = "output " + std::to_string(o) + " element " + std::to_string(at) + ": got " +
                    fmt("%.9g", got[o][at]) + ", expected " + fmt("%.9g", want[o].v[at]);
          }
        }
        const bool ok = shapesOk && worst <= 1;
        report(ok, "op " + c.name + " batch " + std::to_string(batch),
               ok ? fmt("error ratio %.3g", worst) + ", arena " + std::to_string(s.arenaBytes()) + " B" : where);
        ins[batch] = inputs;
        outs[batch] = got;
      }
    } catch (const std::exception& e) {
      report(false, "op " + c.name, std::string("threw: ") + e.what());
    }
    inputsUsed->push_back(std::move(ins));
    cpuOutputs->push_back(std::move(outs));
  }
}

template <typename Fn>
void expectThrow(const std::string& name, const std::string& mustContain, bool invalidArgument, Fn fn) {
  try {
    fn();
    report(false, name, "did not throw");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    report(invalidArgument && what.find(mustContain) != std::string::npos, name,
           std::string("invalid_argument: ") + what);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    report(!invalidArgument && what.find(mustContain) != std::string::npos, name, std::string("exception: ") + what);
  }
}

void testErrors() {
  // Gather index out of range fails the run with invalid_argument naming the op, the index and the range.
  {
    Builder b;
    const int emb = b.randomConstant("embedding", {10, 6});
    const int ids = b.input("ids", {-1, 3}, DType::I32);
    OpAttrs a0;
    b.output(b.op(OpType::Gather, "token_embedding", {emb, ids}, {-1, 3, 6}, a0));
    b.plan.maxBatch = 4;
    SessionOptions options;
    options.poison = true;
    Session s(b.plan, options);
    for (int bad : {10, -11, 1000000}) {
      Tensor t = make({2, 3}, DType::I32);
      t.v = {1, 2, 3, 4, static_cast<double>(bad), 5};
      expectThrow("Gather index " + std::to_string(bad) + " out of range -> invalid_argument",
                  "Gather 'token_embedding': index " + std::to_string(bad), true, [&] { runSession(s, {t}, 2); });
    }
    Tensor ok = make({1, 3}, DType::I32);
    ok.v = {-10, 9, 0};
    try {
      runSession(s, {ok}, 1);
      report(true, "Gather index -10 and 9 of 10 are in range");
    } catch (const std::exception& e) {
      report(false, "Gather index -10 and 9 of 10 are in range", e.what());
    }
    expectThrow("batch 0 of a batching plan -> invalid_argument", "batch 0", true, [&] { runSession(s, {ok}, 0); });
    expectThrow("batch 5 over maxBatch 4 -> invalid_argument", "batch 5", true, [&] {
      Tensor t = make({5, 3}, DType::I32);
      runSession(s, {t}, 5);
    });
  }
  // Plans the session rejects.
  {
    Builder b;
    const int x = b.input("x", {-1, 8});
    const int w = b.randomConstant("w", {7, 4});
    b.output(b.op(OpType::MatMul, "bad_inner", {x, w}, {-1, 4}));
    b.plan.maxBatch = 4;
    expectThrow("MatMul inner dims differ -> invalid plan", "MatMul 'bad_inner': inner dimensions differ", true,
                [&] { Session s(b.plan, {}); });
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 8});
    const int later = b.tensor("later", {-1, 8});
    b.output(b.op(OpType::Add, "early", {x, later}, {-1, 8}));
    b.plan.maxBatch = 4;
    expectThrow("input used before defined -> invalid plan", "is used before any op computes it", true,
                [&] { Session s(b.plan, {}); });
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 3, 4});
    const int y = b.input("y", {-1, 2, 4});
    b.output(b.op(OpType::Add, "no_broadcast", {x, y}, {-1, 3, 4}));
    b.plan.maxBatch = 4;
    expectThrow("shapes that do not broadcast -> invalid plan", "do not broadcast", true, [&] { Session s(b.plan, {}); });
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 3, 4});
    b.output(b.op(OpType::Reshape, "bad_reshape", {x}, {-1, 5}));
    b.plan.maxBatch = 4;
    expectThrow("Reshape element counts differ -> invalid plan", "cannot reshape", true, [&] { Session s(b.plan, {}); });
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 4, 5, 5});
    const int w = b.randomConstant("w", {6, 3, 3, 3});
    OpAttrs at;
    at.group = 2;
    b.output(b.op(OpType::Conv, "bad_groups", {x, w}, {-1, 6, 3, 3}, at));
    b.plan.maxBatch = 4;
    expectThrow("Conv channels per group differ -> invalid plan", "Conv 'bad_groups'", true, [&] { Session s(b.plan, {}); });
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 2, 3});
    const int y = b.input("y", {-1, 2, 4});
    OpAttrs a1;
    a1.axis = 1;
    b.output(b.op(OpType::Concat, "bad_concat", {x, y}, {-1, 4, 3}, a1));
    b.plan.maxBatch = 4;
    expectThrow("Concat dims differ outside the axis -> invalid plan", "does not match", true,
                [&] { Session s(b.plan, {}); });
  }
  {
    Builder b;
    const int x = b.input("x", {-1, 3}, DType::I64);
    b.output(b.op(OpType::Relu, "int_relu", {x}, {-1, 3}));
    b.plan.maxBatch = 4;
    expectThrow("Relu of int64 -> invalid plan", "must be float32", true, [&] { Session s(b.plan, {}); });
  }
  expectThrow("a session on a CUDA device without CUDA or GPU fails", "", false, [&] {
    if (cudaCompiledIn() && !listCudaDevices(nullptr).empty()) throw std::runtime_error("has a GPU: skipped");
    Builder b;
    const int x = b.input("x", {-1, 3});
    b.output(b.op(OpType::Relu, "relu", {x}, {-1, 3}));
    b.plan.maxBatch = 4;
    SessionOptions o;
    o.device = 0;
    Session s(b.plan, o);
  });
}

/** Two threads on one session: runs serialise and both get right answers. */
void testConcurrency(const std::vector<Case>& cases) {
  const Case& c = cases.back();
  Session s(c.plan, {});
  const std::vector<Tensor> inputs = randomInputs(c, 7);
  const std::vector<Tensor> want = c.reference(inputs);
  std::atomic<int> bad{0};
  auto work = [&] {
    for (int i = 0; i < 20; i++) {
      const auto got = runSession(s, inputs, 7);
      size_t at;
      if (!(errorRatio(got[0].data(), want[0].v.data(), got[0].size(), 1e-5, 1e-4, &at) <= 1)) bad++;
    }
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  report(bad == 0, "concurrent runs on one session (2 threads x 20)", std::to_string(bad.load()) + " wrong");
}

void testCuda(const std::vector<Case>& cases, const std::vector<std::map<int, std::vector<Tensor>>>& inputsUsed,
              const std::vector<std::map<int, std::vector<std::vector<float>>>>& cpuOutputs) {
  std::string reason;
  const std::vector<CudaDeviceInfo> devices = cudaCompiledIn() ? listCudaDevices(&reason) : std::vector<CudaDeviceInfo>{};
  if (!cudaCompiledIn()) reason = "built without CUDA";
  if (devices.empty()) {
    std::printf("cuda: skipped (%s)\n", reason.c_str());
    return;
  }
  const CudaDeviceInfo& d = devices[0];
  std::printf("cuda: %s, %.1f GiB, compute %d.%d, %d SMs, runtime %d\n", d.name.c_str(),
              static_cast<double>(d.totalMemory) / (1 << 30), d.major, d.minor, d.multiProcessors, cudaRuntimeVersion());
  for (size_t i = 0; i < cases.size(); i++) {
    const Case& c = cases[i];
    try {
      SessionOptions options;
      options.device = 0;
      options.poison = true;
      Session s(c.plan, options);
      for (const auto& [batch, inputs] : inputsUsed[i]) {
        const std::vector<std::vector<float>> got = runSession(s, inputs, batch);
        const std::vector<std::vector<float>>& cpu = cpuOutputs[i].at(batch);
        double worst = 0;
        std::string where;
        for (size_t o = 0; o < got.size(); o++) {
          std::vector<double> ref(cpu[o].begin(), cpu[o].end());
          size_t at;
          const double e = errorRatio(got[o].data(), ref.data(), got[o].size(), 1e-5, 1e-4, &at);
          if (!(e <= worst)) {
            worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
            where = "output " + std::to_string(o) + " element " + std::to_string(at) + ": cuda " +
                    fmt("%.9g", got[o][at]) + ", cpu " + fmt("%.9g", cpu[o][at]);
          }
        }
        report(worst <= 1, "cuda op " + c.name + " batch " + std::to_string(batch),
               worst <= 1 ? fmt("error ratio vs cpu %.3g", worst) : where);
      }
    } catch (const std::exception& e) {
      report(false, "cuda op " + c.name, std::string("threw: ") + e.what());
    }
  }
  // Gather out of range on the GPU must fail the run as bad data too.
  {
    Builder b;
    const int emb = b.randomConstant("embedding", {10, 6});
    const int ids = b.input("ids", {-1, 3}, DType::I32);
    b.output(b.op(OpType::Gather, "gpu_embedding", {emb, ids}, {-1, 3, 6}, OpAttrs{}));
    b.plan.maxBatch = 4;
    SessionOptions options;
    options.device = 0;
    try {
      Session s(b.plan, options);
      Tensor t = make({1, 3}, DType::I32);
      t.v = {1, 12, 3};
      expectThrow("cuda Gather index out of range -> invalid_argument", "gpu_embedding", true,
                  [&] { runSession(s, {t}, 1); });
    } catch (const std::exception& e) {
      report(false, "cuda Gather session", e.what());
    }
  }
  for (int size : {1024, 2048}) {
    try {
      const double s = cudaGemmSeconds(0, size, size, size, Precision::F32, 10);
      report(s > 0, "cuda gemm fp32 " + std::to_string(size), fmt("%.1f GFLOP/s", 2.0 * size * size * size / s / 1e9));
    } catch (const std::exception& e) {
      report(false, "cuda gemm fp32 " + std::to_string(size), e.what());
    }
  }
}

}  // namespace

// -------------------------------------------------------------------------------------------------------------
// The executor (the addon runs every session's runs on one)

void testExecutor() {
  // Jobs run in order, on one thread that is not this one, and the ones queued when the handle goes still run.
  std::atomic<int> done{0};
  std::vector<int> order;
  std::mutex orderMutex;
  std::atomic<bool> otherThread{true};
  const std::thread::id self = std::this_thread::get_id();
  {
    Executor executor;
    for (int i = 0; i < 1000; i++) {
      executor.submit([&, i] {
        if (std::this_thread::get_id() == self) otherThread = false;
        std::lock_guard<std::mutex> lock(orderMutex);
        order.push_back(i);
        done.fetch_add(1);
      });
    }
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done.load() < 1000 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  bool inOrder = true;
  {
    std::lock_guard<std::mutex> lock(orderMutex);
    for (size_t i = 0; i < order.size(); i++) inOrder = inOrder && order[i] == static_cast<int>(i);
  }
  report(done.load() == 1000, "executor: jobs queued before the handle went all run", fmt("%.0f of 1000", done.load()));
  report(inOrder, "executor: in submission order");
  report(otherThread.load(), "executor: on its own thread");
  // A job submitted after the thread has gone to sleep (past the spin) wakes it.
  Executor executor;
  std::atomic<int> late{0};
  executor.submit([&] { late = 1; });
  std::this_thread::sleep_for(nativeSpinTime() + std::chrono::milliseconds(20));
  executor.submit([&] { late = 2; });
  const auto lateUntil = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (late.load() != 2 && std::chrono::steady_clock::now() < lateUntil) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  report(late.load() == 2, "executor: a job after it slept wakes it");
}

int main() {
  const auto t0 = std::chrono::steady_clock::now();
  std::printf("cpu: gemm isa %s, %d threads\n", isaName(gemmIsa()), defaultThreadPool().size());
  auto section = [&](const char* name, const std::function<void()>& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    std::printf("%s: %.1f s\n", name, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  section("sgemm", testSgemm);
  section("math", testMath);
  const std::vector<Case> cases = buildCases();
  std::vector<std::map<int, std::vector<Tensor>>> inputsUsed;
  std::vector<std::map<int, std::vector<std::vector<float>>>> cpuOutputs;
  section("ops", [&] { testOps(cases, &inputsUsed, &cpuOutputs); });
  section("errors", testErrors);
  section("concurrency", [&] { testConcurrency(cases); });
  section("executor", testExecutor);
  section("cuda", [&] { testCuda(cases, inputsUsed, cpuOutputs); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("took %.1f s\n", s);
  std::printf("%d passed, %d failed\n", gPassed, gFailed);
  return gFailed == 0 ? 0 : 1;
}
