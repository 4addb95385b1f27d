// Scalar fp32 math written so that loops over it vectorise (no calls into libm, no branches: both sides of a split
// are computed and one is selected): exp, tanh, sigmoid, erf and the two GELUs. Accurate to a few ulp (erf, tanh:
// relative error below 2e-7 over the whole range; checked in native/test/kernels_test.cc against double precision),
// and NaN in gives NaN out, so test poisoning still shows through them.
//
// The polynomials: exp is Cephes' expf (range reduction by ln 2, degree-6 polynomial); tanh below 0.625 is Cephes'
// tanhf polynomial; erf below 0.921875 is x + x P(x^2) and above it 1 - exp(Q(|x|)), P and Q fitted (weighted least
// squares towards minimax) to erf(x)/x - 1 and log(erfc(x)) in double precision.
#pragma once

#include <cstdint>
#include <cstring>

namespace flotilla {
namespace cpu {

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/** Clamps without losing NaN (std::min/max would return the bound for a NaN). */
inline float clampKeepNan(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

/** e^x, saturating: 2^-126 below -87.3 (no denormals), about FLT_MAX above 88.7. */
inline float fastExp(float x) {
  x = clampKeepNan(x, -87.33654f, 88.72283f);
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (no float -> int conversion, which is undefined for NaN).
  const float shifter = 12582912.0f;
  const float t = x * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  // 2^n from n's low bits in t: n is in [-126, 128]; n = 128 (x just under the clamp) is split as 2^127 * 2.
  const int32_t ni = static_cast<int32_t>(floatToBits(t) - floatToBits(shifter));
  const int32_t half = ni >> 1;
  const float s1 = bitsToFloat(static_cast<uint32_t>(half + 127) << 23);
  const float s2 = bitsToFloat(static_cast<uint32_t>(ni - half + 127) << 23);
  return p * s1 * s2;
}

inline float fastTanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  // Small |x|: odd polynomial (1 - 2/(e^2x + 1) would cancel).
  const float s = x * x;
  float p = -5.70498872745e-3f;
  p = p * s + 2.06390887954e-2f;
  p = p * s - 5.37397155531e-2f;
  p = p * s + 1.33314422036e-1f;
  p = p * s - 3.33332819422e-1f;
  const float small = p * s * x + x;
  const float e = fastExp(2.0f * clampKeepNan(ax, 0.0f, 9.0f));
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0.0f ? -big : big;
  return ax < 0.625f ? small : (ax == ax ? big : x);
}

inline float fastSigmoid(float x) { return 1.0f / (1.0f + fastExp(-x)); }

inline float fastErf(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float s = x * x;
  float p = -6.014080718e-04f;
  p = p * s + 4.998135846e-03f;
  p = p * s - 2.677032351e-02f;
  p = p * s + 1.128192991e-01f;
  p = p * s - 3.761250675e-01f;
  p = p * s + 1.283791512e-01f;
  const float small = x + x * p;
  const float t = clampKeepNan(ax, 0.921875f, 3.95f);
  float q = -1.414250983e-05f;
  q = q * t + 3.320835240e-04f;
  q = q * t - 3.542347113e-03f;
  q = q * t + 2.303577214e-02f;
  q = q * t - 1.042628959e-01f;
  q = q * t - 6.378440857e-01f;
  q = q * t - 1.126812220e+00f;
  q = q * t - 4.973646719e-04f;
  float big = ax >= 3.95f ? 1.0f : 1.0f - fastExp(q);
  big = x < 0.0f ? -big : big;
  return ax <= 0.921875f ? small : (ax == ax ? big : x);
}

/**
 * GELU, exact form: x/2 (1 + erf(x / sqrt 2)), as onnxruntime computes it (for x below about -3, 1 + erf cancels:
 * the error is then about |x| 6e-8 absolute, as in onnxruntime).
 */
inline float fastGelu(float x) { return 0.5f * x * (1.0f + fastErf(x * 0.70710678118654752f)); }

/**
 * GELU, tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as x sigmoid(2 inner), which is
 * the same function without the cancellation of 1 + tanh for negative x, and one exp cheaper.
 */
inline float fastGeluTanh(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + fastExp(-2.0f * inner));
}

}  // namespace cpu
}  // namespace flotilla
