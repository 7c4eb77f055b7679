#include "tensor/grid_thw.h"

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

std::string GridToString(const GridThw& g) {
  return "[" + std::to_string(g.t) + "," + std::to_string(g.h) + "," + std::to_string(g.w) + "]";
}

}  // namespace vls
