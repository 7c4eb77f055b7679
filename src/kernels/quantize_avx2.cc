// The Q4 and Q6 weight quantizers' searches over 8 groups at once (q4_quantize_impl.h,
// q6_quantize_impl.h), compiled with -mavx2 -ffp-contract=off. Called only on CPUs with AVX2
// (q4.cc and q6.cc check).
#include <algorithm>

#include "kernels/q4_quantize_impl.h"
#include "kernels/q6_quantize_impl.h"

namespace vls::kernels {

void QuantizeQ4GroupsAvx2(const float* const* x, int64_t n, uint16_t* d, uint16_t* m, uint8_t* q) {
  for (int64_t j = 0; j < n; j += 8) {
    q4_quantize_impl::QuantizeGroups<8>(x + j, std::min<int64_t>(8, n - j), d + j, m + j,
                                        q + j * kQ4Group);
  }
}

void QuantizeQ6GroupsAvx2(const float* const* x, int64_t n, uint16_t* d, uint8_t* u) {
  for (int64_t j = 0; j < n; j += 8) {
    q6_quantize_impl::QuantizeGroups<8>(x + j, std::min<int64_t>(8, n - j), d + j,
                                        u + j * kQ6Group);
  }
}

}  // namespace vls::kernels
