// The Q4 weight quantizer's search (QuantizeQ4Group, q4.cc) over kLanes groups at once, one group
// per SIMD lane, written once with GCC vector extensions and included by quantize_avx512.cc
// (16 lanes) and quantize_avx2.cc (8 lanes), each compiled with its -m flags and
// -ffp-contract=off. Every lane runs the very f32 operations of the scalar code in its order
// (no reassociation, no fused multiply-add, the same comparisons including their NaN outcomes),
// so the results equal QuantizeQ4Group bit for bit; q4_test checks that on random and edge-case
// groups. Private to those two files.
#ifndef VLSTACK_KERNELS_Q4_QUANTIZE_IMPL_H_
#define VLSTACK_KERNELS_Q4_QUANTIZE_IMPL_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/q4.h"
#include "tensor/dtype.h"

namespace vls::kernels::q4_quantize_impl {

template <int kLanes>
struct Vec {
  typedef float F __attribute__((vector_size(kLanes * 4)));
  typedef int32_t I __attribute__((vector_size(kLanes * 4)));
};

// std::clamp(v, 0, 15) + 1.5 · 2²³, its low mantissa bits less 2²² truncated to u8: RoundCode
// of q4.cc lane by lane, returned as f32 (the scalar code's static_cast<float>(l[i])) and as
// the i32 code.
template <int kLanes>
inline typename Vec<kLanes>::I RoundCodes(typename Vec<kLanes>::F v) {
  using F = typename Vec<kLanes>::F;
  using I = typename Vec<kLanes>::I;
  const F zero = F{} + 0.0f, fifteen = F{} + 15.0f;
  // libstdc++'s clamp: (v < lo) ? lo : (hi < v) ? hi : v.
  v = v < zero ? zero : (fifteen < v ? fifteen : v);
  const F f = v + 12582912.0f;
  I i;
  std::memcpy(&i, &f, sizeof(i));
  return ((i & 0x007fffff) - 0x00400000) & 0xff;
}

template <int kLanes>
inline typename Vec<kLanes>::F ToF32(typename Vec<kLanes>::I i) {
  return __builtin_convertvector(i, typename Vec<kLanes>::F);
}

// Σ w · (d · l + m - x)² per lane, in the scalar order.
template <int kLanes>
inline typename Vec<kLanes>::F GroupError(const typename Vec<kLanes>::F* x,
                                          const typename Vec<kLanes>::F* w,
                                          const typename Vec<kLanes>::F* l,
                                          typename Vec<kLanes>::F d, typename Vec<kLanes>::F m) {
  typename Vec<kLanes>::F err = {};
  for (int64_t i = 0; i < kQ4Group; ++i) {
    const typename Vec<kLanes>::F e = d * l[i] + m - x[i];
    err += w[i] * e * e;
  }
  return err;
}

// x[i] = value i of every group, lane j holding group j of xs[0..n) (lanes past n: group 0).
// Shared with q6_quantize_impl.h (kQ6Group == kQ4Group).
template <int kLanes>
inline void LoadLanes(const float* const* xs, int64_t n, typename Vec<kLanes>::F (&x)[kQ4Group]) {
  alignas(64) float t[kQ4Group][kLanes];
  for (int64_t j = 0; j < kLanes; ++j) {
    const float* g = xs[j < n ? j : 0];
    for (int64_t i = 0; i < kQ4Group; ++i) t[i][j] = g[i];
  }
  for (int64_t i = 0; i < kQ4Group; ++i) std::memcpy(&x[i], t[i], sizeof(x[i]));
}

// QuantizeQ4Group of groups x[0..n), n <= kLanes: group j's (d, m) to d[j], m[j], its codes to
// q[j · kQ4Group ..].
template <int kLanes>
void QuantizeGroups(const float* const* xs, int64_t n, uint16_t* dh, uint16_t* mh, uint8_t* q) {
  using F = typename Vec<kLanes>::F;
  using I = typename Vec<kLanes>::I;
  constexpr int64_t N = kQ4Group;
  F x[N], w[N], l[N];
  LoadLanes<kLanes>(xs, n, x);
  F lo = x[0], hi = x[0], sum_x2 = {};
  for (int64_t i = 0; i < N; ++i) {
    lo = x[i] < lo ? x[i] : lo;  // std::min(lo, x[i])
    hi = hi < x[i] ? x[i] : hi;  // std::max(hi, x[i])
    sum_x2 += x[i] * x[i];
  }
  const F mean_x2 = sum_x2 / static_cast<float>(N);
  F av;
  for (int64_t j = 0; j < kLanes; ++j) av[j] = std::sqrt(mean_x2[j]);
  for (int64_t i = 0; i < N; ++i) {
    I bits;
    std::memcpy(&bits, &x[i], sizeof(I));
    bits &= 0x7fffffff;
    F ax;
    std::memcpy(&ax, &bits, sizeof(F));
    w[i] = av + ax;
  }
  const I active = hi > lo;
  const F range = hi - lo;
  F d = F{} + 0.0f, m = lo;
  {
    const F iscale = 15.0f / range;
    const F d0 = 1.0f / iscale;
    d = active ? d0 : d;
    for (int64_t i = 0; i < N; ++i) l[i] = ToF32<kLanes>(RoundCodes<kLanes>(iscale * (x[i] - lo)));
  }
  F best = GroupError<kLanes>(x, w, l, d, m);
  // Σ w and Σ w · x do not depend on the step: the scalar code's same sums, once.
  F sw = {}, sx = {};
  for (int64_t i = 0; i < N; ++i) {
    sw += w[i];
    sx += w[i] * x[i];
  }
  for (int is = 0; is <= 20; ++is) {
    const float num = -1.0f + 0.1f * static_cast<float>(is) + 15.0f;
    const F iscale = num / range;
    for (int64_t i = 0; i < N; ++i) l[i] = ToF32<kLanes>(RoundCodes<kLanes>(iscale * (x[i] - lo)));
    F sl = {}, sl2 = {}, sxl = {};
    for (int64_t i = 0; i < N; ++i) {
      const F wl = w[i] * l[i];
      sl += wl;
      sl2 += wl * l[i];
      sxl += wl * x[i];
    }
    const F det = sw * sl2 - sl * sl;
    const F td = (sw * sxl - sx * sl) / det;
    const F tm = (sl2 * sx - sl * sxl) / det;
    // The scalar code skips a step when det <= 0 or !(td > 0) (a NaN det is not skipped).
    const I ok = active & ~(det <= 0.0f) & (td > 0.0f);
    const F err = GroupError<kLanes>(x, w, l, td, tm);
    const I better = ok & (err < best);
    best = better ? err : best;
    d = better ? td : d;
    m = better ? tm : m;
  }
  alignas(64) float dd_l[kLanes], mm_l[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) {
    const uint16_t dj = F32ToF16(d[j]), mj = F32ToF16(m[j]);
    dd_l[j] = F16ToF32(dj);
    mm_l[j] = F16ToF32(mj);
    if (j < n) {
      dh[j] = dj;
      mh[j] = mj;
    }
  }
  F dd, mm;
  std::memcpy(&dd, dd_l, sizeof(F));
  std::memcpy(&mm, mm_l, sizeof(F));
  const I positive = dd > 0.0f;
  alignas(64) int32_t c[N][kLanes];
  for (int64_t i = 0; i < N; ++i) {
    const I code = positive & RoundCodes<kLanes>((x[i] - mm) / dd);
    std::memcpy(c[i], &code, sizeof(I));
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < N; ++i) q[j * N + i] = static_cast<uint8_t>(c[i][j]);
  }
}

}  // namespace vls::kernels::q4_quantize_impl

#endif  // VLSTACK_KERNELS_Q4_QUANTIZE_IMPL_H_
