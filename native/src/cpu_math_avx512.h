// cpu_math.h's functions on 16 lanes with AVX-512 intrinsics: the same polynomials and the same branches (both
// sides computed, one selected per lane), but 2^n by vscalefps and round-to-nearest by vrndscaleps instead of
// integer bit work, and clamps by vminps/vmaxps. The plain loops over cpu_math.h vectorise too, yet GELU still cost
// 1.6 ns an element there (a quarter of the transformer's non-product time); these take about a third of that.
// Callers check the CPU (gemmIsa() == Isa::Avx512) first: the functions carry their own target attribute, so the
// module itself still builds without -mavx512f.
//
// NaN in gives NaN out, as in cpu_math.h: every clamp is written min(bound, x) / max(bound, x), which returns x when
// x is NaN (the second operand), and the rest of the arithmetic carries it.
#pragma once

#include <immintrin.h>

#define FLOTILLA_AVX512 __attribute__((target("avx512f"), always_inline)) inline

namespace flotilla {
namespace cpu {

FLOTILLA_AVX512 __m512 clamp512(__m512 x, float lo, float hi) {
  return _mm512_max_ps(_mm512_set1_ps(lo), _mm512_min_ps(_mm512_set1_ps(hi), x));
}

FLOTILLA_AVX512 __m512 abs512(__m512 x) { return _mm512_abs_ps(x); }

/** x with the sign of s (bitwise select: the sign bit from s, the rest from x). */
FLOTILLA_AVX512 __m512 copySign512(__m512 x, __m512 s) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(sign, _mm512_castps_si512(s), _mm512_castps_si512(x), 0xCA));
}

/** fastExp: Cephes' expf, the same clamp, reduction and polynomial; 2^n by scalef. */
FLOTILLA_AVX512 __m512 exp512(__m512 x) {
  x = clamp512(x, -87.33654f, 88.72283f);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  const __m512 r2 = _mm512_mul_ps(r, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

FLOTILLA_AVX512 __m512 erf512(__m512 x) {
  const __m512 ax = abs512(x);
  const __m512 s = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-6.014080718e-04f);
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(4.998135846e-03f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-2.677032351e-02f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.128192991e-01f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.761250675e-01f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.283791512e-01f));
  const __m512 small = _mm512_fmadd_ps(x, p, x);
  const __m512 t = clamp512(ax, 0.921875f, 3.95f);
  __m512 q = _mm512_set1_ps(-1.414250983e-05f);
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(3.320835240e-04f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-3.542347113e-03f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(2.303577214e-02f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.042628959e-01f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-6.378440857e-01f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.126812220e+00f));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-4.973646719e-04f));
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 big = _mm512_sub_ps(one, exp512(q));
  big = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(3.95f), _CMP_GE_OQ), big, one);
  big = copySign512(big, x);
  // NaN lanes: ax <= 0.921875 is false, and big is NaN through t.
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.921875f), _CMP_LE_OQ), big, small);
}

FLOTILLA_AVX512 __m512 tanh512(__m512 x) {
  const __m512 ax = abs512(x);
  const __m512 s = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.33332819422e-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, s), x, x);
  const __m512 e = exp512(_mm512_mul_ps(_mm512_set1_ps(2.0f), clamp512(ax, 0.0f, 9.0f)));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 big = copySign512(_mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one))), x);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ), big, small);
}

FLOTILLA_AVX512 __m512 sigmoid512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

FLOTILLA_AVX512 __m512 gelu512(__m512 x) {
  const __m512 e = erf512(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f)));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

FLOTILLA_AVX512 __m512 geluTanh512(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 inner = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f),
                                     _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
  const __m512 e = exp512(_mm512_mul_ps(_mm512_set1_ps(-2.0f), inner));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

}  // namespace cpu
}  // namespace flotilla
