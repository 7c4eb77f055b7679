// The sample quantile the CLI's reports use (bench latencies, eval-kl divergences).
#ifndef VLSTACK_CLI_QUANTILE_H_
#define VLSTACK_CLI_QUANTILE_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace vls::cli {

// The q-quantile of v (0 <= q <= 1) by linear interpolation between order statistics, as
// NumPy's default percentile; 0 for an empty v.
inline double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace vls::cli

#endif  // VLSTACK_CLI_QUANTILE_H_
