// The Q6 weight quantizer's search (QuantizeQ6Group, q6.cc) over kLanes groups at once, one group
// per SIMD lane, as q4_quantize_impl.h does for Q4 and with its vector types: included by
// quantize_avx512.cc (16 lanes) and quantize_avx2.cc (8 lanes), compiled with their -m flags and
// -ffp-contract=off. Every lane runs the scalar code's f32 operations in its order (no
// reassociation, no fused multiply-add, the same comparisons including their NaN outcomes), so
// the results equal QuantizeQ6Group bit for bit; quantize_test checks that on random and
// edge-case groups. Private to those two files.
#ifndef VLSTACK_KERNELS_Q6_QUANTIZE_IMPL_H_
#define VLSTACK_KERNELS_Q6_QUANTIZE_IMPL_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/q4_quantize_impl.h"
#include "kernels/q6.h"
#include "tensor/dtype.h"

namespace vls::kernels::q6_quantize_impl {

template <int kLanes>
using F = typename q4_quantize_impl::Vec<kLanes>::F;
template <int kLanes>
using I = typename q4_quantize_impl::Vec<kLanes>::I;

// RoundCode of q6.cc lane by lane: std::clamp(v, -31, 31) + 1.5 · 2²³, its low mantissa bits
// less 2²².
template <int kLanes>
inline I<kLanes> RoundCodes(F<kLanes> v) {
  const F<kLanes> lo = F<kLanes>{} - static_cast<float>(kQ6MaxCode),
                  hi = F<kLanes>{} + static_cast<float>(kQ6MaxCode);
  // libstdc++'s clamp: (v < lo) ? lo : (hi < v) ? hi : v.
  v = v < lo ? lo : (hi < v ? hi : v);
  const F<kLanes> f = v + 12582912.0f;
  I<kLanes> i;
  std::memcpy(&i, &f, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

template <int kLanes>
inline F<kLanes> Abs(F<kLanes> v) {
  I<kLanes> bits;
  std::memcpy(&bits, &v, sizeof(bits));
  bits &= 0x7fffffff;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// QuantizeQ6Group of groups x[0..n), n <= kLanes: group j's d to dh[j], its stored codes to
// u[j · kQ6Group ..].
template <int kLanes>
void QuantizeGroups(const float* const* xs, int64_t n, uint16_t* dh, uint8_t* u) {
  using FV = F<kLanes>;
  using IV = I<kLanes>;
  constexpr int64_t N = kQ6Group;
  FV x[N], w[N], l[N];
  q4_quantize_impl::LoadLanes<kLanes>(xs, n, x);
  FV amax = FV{} + 0.0f, sum_x2 = {};
  for (int64_t i = 0; i < N; ++i) {
    const FV ax = Abs<kLanes>(x[i]);
    amax = amax < ax ? ax : amax;  // std::max(amax, |x|)
    sum_x2 += x[i] * x[i];
  }
  const IV active = amax > 0.0f;
  const FV mean_x2 = sum_x2 / static_cast<float>(N);
  FV av;
  for (int64_t j = 0; j < kLanes; ++j) av[j] = std::sqrt(mean_x2[j]);
  for (int64_t i = 0; i < N; ++i) w[i] = av + Abs<kLanes>(x[i]);
  FV d = FV{} + 0.0f, best = FV{} + INFINITY;
  for (int is = -9; is <= 9; ++is) {
    const float num = static_cast<float>(kQ6MaxCode) + 0.1f * static_cast<float>(is);
    const FV iscale = num / amax;
    FV sxl = {}, sl2 = {};
    for (int64_t i = 0; i < N; ++i) {
      l[i] = __builtin_convertvector(RoundCodes<kLanes>(x[i] * iscale), FV);
      sxl += w[i] * x[i] * l[i];
      sl2 += w[i] * l[i] * l[i];
    }
    // The scalar code skips a step unless sl2 > 0 and sxl > 0 (and lanes with amax 0).
    const IV ok = active & (sl2 > 0.0f) & (sxl > 0.0f);
    const FV td = sxl / sl2;
    FV err = {};
    for (int64_t i = 0; i < N; ++i) {
      const FV e = td * l[i] - x[i];
      err += w[i] * e * e;
    }
    const IV better = ok & (err < best);
    best = better ? err : best;
    d = better ? td : d;
  }
  alignas(64) float dd_l[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) {
    const uint16_t dj = F32ToF16(d[j]);
    dd_l[j] = F16ToF32(dj);
    if (j < n) dh[j] = dj;
  }
  FV dd;
  std::memcpy(&dd, dd_l, sizeof(FV));
  const IV positive = dd > 0.0f;
  alignas(64) int32_t c[N][kLanes];
  for (int64_t i = 0; i < N; ++i) {
    const IV code = (positive & RoundCodes<kLanes>(x[i] / dd)) + kQ6Zero;
    std::memcpy(c[i], &code, sizeof(IV));
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < N; ++i) u[j * N + i] = static_cast<uint8_t>(c[i][j]);
  }
}

}  // namespace vls::kernels::q6_quantize_impl

#endif  // VLSTACK_KERNELS_Q6_QUANTIZE_IMPL_H_
