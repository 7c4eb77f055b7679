#include "model/moe_routing_stats.h"

#include <algorithm>

namespace vls {

size_t MoeRoutingStats::Bucket(int64_t rows) {
  return static_cast<size_t>(std::clamp<int64_t>(rows, 0, kRows + 1));
}

void MoeRoutingStats::Record(int64_t rows, int64_t distinct_experts) {
  const size_t b = Bucket(rows);
  calls_[b].fetch_add(1, std::memory_order_relaxed);
  experts_[b].fetch_add(static_cast<uint64_t>(std::max<int64_t>(distinct_experts, 0)),
                        std::memory_order_relaxed);
}

MoeRoutingStats::Count MoeRoutingStats::At(int64_t rows) const {
  const size_t b = Bucket(rows);
  return {calls_[b].load(std::memory_order_relaxed), experts_[b].load(std::memory_order_relaxed)};
}

}  // namespace vls
