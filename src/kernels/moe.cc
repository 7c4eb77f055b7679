#include "kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace vls::kernels {

void RouteTopK(const float* logits, int64_t M, int64_t E, int k, bool normalize, int32_t* experts,
               float* weights) {
  std::vector<float> p(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t m = 0; m < M; ++m) {
    const float* l = logits + m * E;
    int32_t* ex = experts + m * k;
    float* w = weights + m * k;
    bool finite = true;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t e = 0; e < E; ++e) {
      finite = finite && std::isfinite(l[e]);
      mx = std::max(mx, l[e]);
    }
    if (!finite) {
      for (int j = 0; j < k; ++j) {
        ex[j] = j;
        w[j] = std::numeric_limits<float>::quiet_NaN();
      }
      continue;
    }
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      p[static_cast<size_t>(e)] = std::exp(l[e] - mx);
      sum += p[static_cast<size_t>(e)];
    }
    for (int64_t e = 0; e < E; ++e) {
      p[static_cast<size_t>(e)] /= sum;
      order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    }
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float pa = p[static_cast<size_t>(a)], pb = p[static_cast<size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    float chosen = 0;
    for (int j = 0; j < k; ++j) {
      ex[j] = order[static_cast<size_t>(j)];
      w[j] = p[static_cast<size_t>(ex[j])];
      chosen += w[j];
    }
    if (normalize) {
      for (int j = 0; j < k; ++j) w[j] /= chosen;
    }
  }
}

}  // namespace vls::kernels
