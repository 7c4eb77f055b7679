// Helpers shared by the kernel tests (test-only; included by *_test.cc files).
#ifndef VLSTACK_KERNELS_KERNELS_TEST_UTIL_H_
#define VLSTACK_KERNELS_KERNELS_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/q4.h"

namespace vls::kernels::testing {

// n normal values (mean 0) from a fixed seed.
inline std::vector<float> Random(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

// The error bound for a sum of K products computed in f32 in any order: a few ulps of the
// sum of |products| per log2(K) level of the reduction tree (K·eps·Σ|xw| is the worst case;
// every kernel here sums in 16- or 32-lane trees or register blocks, far below it).
inline double F32Bound(const float* x, const float* w, int64_t K) {
  double abs_sum = 0;
  for (int64_t k = 0; k < K; ++k) abs_sum += std::fabs(double(x[k]) * w[k]);
  return 4.0 * (std::log2(double(K)) + 2.0) * 1.2e-7 * abs_sum + 1e-30;
}

// Q4 activations [M, K] in a buffer of their own.
struct Q4Input {
  Q4Input(int64_t M, int64_t K)
      : buf(static_cast<size_t>(Q4ActivationBytes(M, K) + 64)),
        a(Q4ActivationsAt(buf.data(), M, K)) {}
  std::vector<uint8_t> buf;
  Q4Activations a;
};

}  // namespace vls::kernels::testing

#endif  // VLSTACK_KERNELS_KERNELS_TEST_UTIL_H_
