#include "tensor/grid_thw.h"

#include <algorithm>

#include "base/checked_math.h"

namespace vls {

Status ValidateGridThw(const GridThw& g, int merge_size, const std::string& what) {
  if (merge_size < 1) {
    return InvalidArgument(what + ": the spatial merge size must be positive, not " +
                           std::to_string(merge_size));
  }
  auto in_range = [](int32_t v) { return v >= 1 && v <= kMaxGridSide; };
  if (!in_range(g.t) || !in_range(g.h) || !in_range(g.w) || g.h % merge_size != 0 ||
      g.w % merge_size != 0) {
    return InvalidArgument(what + " = " + GridToString(g) + ": t, h, w must be in [1, " +
                           std::to_string(kMaxGridSide) +
                           "] and h, w divisible by the spatial merge size " +
                           std::to_string(merge_size));
  }
  return Status::Ok();
}

int64_t MergedTokens(const GridThw& g, int merge_size) {
  return int64_t{g.t} * (g.h / merge_size) * (g.w / merge_size);
}

StatusOr<int64_t> ValidateGridList(std::span<const GridThw> grids, int merge_size,
                                   const std::string& what, int64_t max_tokens) {
  if (static_cast<uint64_t>(grids.size()) >
      static_cast<uint64_t>(std::max<int64_t>(max_tokens, 0))) {
    return InvalidArgument(what + " has " + std::to_string(grids.size()) + " grids but at most " +
                           std::to_string(max_tokens) +
                           " visual tokens fit (each grid needs at least one)");
  }
  uint64_t total = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const std::string name = what + "[" + std::to_string(i) + "]";
    VLS_RETURN_IF_ERROR(ValidateGridThw(grids[i], merge_size, name));
    // Each term is below 2^44 and the running total stays at most max_tokens, so the sum cannot
    // overflow; CheckedAdd states it.
    const auto sum = CheckedAdd(total, static_cast<uint64_t>(MergedTokens(grids[i], merge_size)));
    if (!sum || *sum > static_cast<uint64_t>(max_tokens)) {
      return InvalidArgument(name + " = " + GridToString(grids[i]) +
                             " brings the visual tokens to " +
                             (sum ? std::to_string(*sum) : std::string("more than 2^64")) +
                             ", more than the " + std::to_string(max_tokens) + " that fit");
    }
    total = *sum;
  }
  return static_cast<int64_t>(total);
}

std::string GridToString(const GridThw& g) {
  return "[" + std::to_string(g.t) + "," + std::to_string(g.h) + "," + std::to_string(g.w) + "]";
}

}  // namespace vls
