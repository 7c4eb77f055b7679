// Scalar stand-ins for the AVX-512 intrinsics matmul_avx512_q4.cc uses, lane by lane with the
// instructions' documented results, so q4_test can build that file a second time and run its
// tiling and epilogue on CPUs without AVX-512 (VLS_AVX512_EMULATION). Test-only: slow, and
// only the intrinsics that file needs. Floating-point lanes use the same f32 operations
// (std::fma for the fused ones, nearest-even conversion), so results are bit for bit those of
// the real instructions.
#ifndef VLSTACK_KERNELS_AVX512_EMULATION_H_
#define VLSTACK_KERNELS_AVX512_EMULATION_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

namespace vls::kernels::emulation {

struct V512 {
  uint8_t b[64];
};
struct V256 {
  uint8_t b[32];
};
struct V128 {
  uint8_t b[16];
};

template <typename T>
inline T Lane(const V512& v, int i) {
  T t;
  std::memcpy(&t, v.b + i * sizeof(T), sizeof(T));
  return t;
}
template <typename T>
inline void SetLane(V512& v, int i, T t) {
  std::memcpy(v.b + i * sizeof(T), &t, sizeof(T));
}

}  // namespace vls::kernels::emulation

// The intrinsics' own type names, so the kernel file compiles unchanged.
// NOLINTBEGIN(bugprone-reserved-identifier)
using __m512i = vls::kernels::emulation::V512;
using __m512 = vls::kernels::emulation::V512;
using __m256i = vls::kernels::emulation::V256;
using __m128i = vls::kernels::emulation::V128;
using __mmask16 = uint16_t;
// NOLINTEND(bugprone-reserved-identifier)
#define _MM_HINT_T0 0

namespace vls::kernels::emulation {

inline void _mm_prefetch(const char*, int) {}
inline V512 _mm512_setzero_si512() { return V512{}; }
inline V512 _mm512_setzero_ps() { return V512{}; }
inline V512 _mm512_loadu_si512(const void* p) {
  V512 v;
  std::memcpy(v.b, p, 64);
  return v;
}
inline V512 _mm512_loadu_ps(const float* p) { return _mm512_loadu_si512(p); }
inline V512 _mm512_load_ps(const float* p) { return _mm512_loadu_si512(p); }
inline void _mm512_store_ps(float* p, V512 v) { std::memcpy(p, v.b, 64); }
inline void _mm512_mask_storeu_ps(float* p, __mmask16 m, V512 v) {
  for (int i = 0; i < 16; ++i)
    if ((m >> i) & 1) p[i] = Lane<float>(v, i);
}
inline V256 _mm256_loadu_si256(const V256* p) {
  V256 v;
  std::memcpy(v.b, p, 32);
  return v;
}
inline void _mm_storeu_si128(V128* p, V128 v) { std::memcpy(p, v.b, 16); }
inline V512 _mm512_set1_epi8(char c) {
  V512 v;
  std::memset(v.b, c, 64);
  return v;
}
inline V512 _mm512_set1_epi32(int32_t x) {
  V512 v;
  for (int i = 0; i < 16; ++i) SetLane<int32_t>(v, i, x);
  return v;
}
inline V512 _mm512_set1_ps(float x) {
  V512 v;
  for (int i = 0; i < 16; ++i) SetLane<float>(v, i, x);
  return v;
}
inline V512 _mm512_castsi512_ps(V512 v) { return v; }
inline V512 _mm512_and_si512(V512 a, V512 b) {
  for (int i = 0; i < 64; ++i) a.b[i] &= b.b[i];
  return a;
}
inline V512 _mm512_and_ps(V512 a, V512 b) { return _mm512_and_si512(a, b); }
inline V512 _mm512_srli_epi16(V512 a, int n) {
  for (int i = 0; i < 32; ++i)
    SetLane<uint16_t>(a, i, static_cast<uint16_t>(Lane<uint16_t>(a, i) >> n));
  return a;
}
inline V512 _mm512_slli_epi16(V512 a, int n) {
  for (int i = 0; i < 32; ++i)
    SetLane<uint16_t>(a, i, static_cast<uint16_t>(Lane<uint16_t>(a, i) << n));
  return a;
}
// Arithmetic shift right (division by 2ⁿ rounding toward −∞, as the instruction).
inline V512 _mm512_srai_epi32(V512 a, int n) {
  for (int i = 0; i < 16; ++i) SetLane<int32_t>(a, i, Lane<int32_t>(a, i) >> n);
  return a;
}
inline V512 _mm512_or_si512(V512 a, V512 b) {
  for (int i = 0; i < 64; ++i) a.b[i] |= b.b[i];
  return a;
}
inline V512 _mm512_sub_epi32(V512 a, V512 b) {
  for (int i = 0; i < 16; ++i) SetLane<int32_t>(a, i, Lane<int32_t>(a, i) - Lane<int32_t>(b, i));
  return a;
}
inline V512 _mm512_add_epi32(V512 a, V512 b) {
  for (int i = 0; i < 16; ++i) SetLane<int32_t>(a, i, Lane<int32_t>(a, i) + Lane<int32_t>(b, i));
  return a;
}
// vpdpbusd: each int32 lane adds the 4 products of a's u8 bytes and b's s8 bytes.
inline V512 _mm512_dpbusd_epi32(V512 acc, V512 a, V512 b) {
  for (int i = 0; i < 16; ++i) {
    int32_t s = Lane<int32_t>(acc, i);
    for (int k = 0; k < 4; ++k) {
      s += int32_t{a.b[4 * i + k]} * int32_t{static_cast<int8_t>(b.b[4 * i + k])};
    }
    SetLane<int32_t>(acc, i, s);
  }
  return acc;
}
inline V512 _mm512_max_ps(V512 a, V512 b) {
  for (int i = 0; i < 16; ++i) {
    const float x = Lane<float>(a, i), y = Lane<float>(b, i);
    SetLane<float>(a, i, x > y ? x : y);
  }
  return a;
}
inline float _mm512_reduce_max_ps(V512 a) {
  float m = Lane<float>(a, 0);
  for (int i = 1; i < 16; ++i) m = std::max(m, Lane<float>(a, i));
  return m;
}
inline int32_t _mm512_reduce_add_epi32(V512 a) {
  int32_t s = 0;
  for (int i = 0; i < 16; ++i) s += Lane<int32_t>(a, i);
  return s;
}
inline V512 _mm512_mul_ps(V512 a, V512 b) {
  for (int i = 0; i < 16; ++i) SetLane<float>(a, i, Lane<float>(a, i) * Lane<float>(b, i));
  return a;
}
inline V512 _mm512_fmadd_ps(V512 a, V512 b, V512 c) {
  for (int i = 0; i < 16; ++i)
    SetLane<float>(a, i, std::fma(Lane<float>(a, i), Lane<float>(b, i), Lane<float>(c, i)));
  return a;
}
inline V512 _mm512_cvtepi32_ps(V512 a) {
  for (int i = 0; i < 16; ++i) SetLane<float>(a, i, static_cast<float>(Lane<int32_t>(a, i)));
  return a;
}
// Nearest even, as the default MXCSR mode (the values here never overflow int32).
inline V512 _mm512_cvtps_epi32(V512 a) {
  for (int i = 0; i < 16; ++i)
    SetLane<int32_t>(a, i, static_cast<int32_t>(std::nearbyint(Lane<float>(a, i))));
  return a;
}
inline V128 _mm512_cvtsepi32_epi8(V512 a) {
  V128 r;
  for (int i = 0; i < 16; ++i) {
    const int32_t v = std::clamp<int32_t>(Lane<int32_t>(a, i), -128, 127);
    r.b[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
  }
  return r;
}
inline V512 _mm512_cvtph_ps(V256 h) {
  V512 v;
  for (int i = 0; i < 16; ++i) {
    uint16_t x;
    std::memcpy(&x, h.b + 2 * i, 2);
    SetLane<float>(v, i, F16ToF32(x));
  }
  return v;
}

}  // namespace vls::kernels::emulation

namespace vls::kernels {
using namespace emulation;  // NOLINT: the kernel file calls the intrinsics unqualified
}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_AVX512_EMULATION_H_
