// The (t, h, w) grid of one visual item in patches: the one type the tokenizer (pad
// expansion), the runtime (get_rope_index) and the vision tower share, with one set of rules.
#ifndef VLSTACK_TENSOR_GRID_THW_H_
#define VLSTACK_TENSOR_GRID_THW_H_

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace vls {

// An image is one item with t = 1 (a still image duplicated to the temporal patch is still
// t = 1 after the temporal merge); a video has t temporal groups, each positioned like an image.
struct GridThw {
  int32_t t = 0;
  int32_t h = 0;
  int32_t w = 0;

  friend bool operator==(const GridThw&, const GridThw&) = default;
};

// Largest t, h or w accepted (32768 patches: far beyond any real image or video), so every
// product of the three fits an int64 and the token counts stay representable.
inline constexpr int32_t kMaxGridSide = 1 << 15;

// The rules every user applies: t, h, w in [1, kMaxGridSide] and h, w divisible by
// `merge_size` (the spatial merge, 2 for Qwen-VL). `what` names the grid in the error
// ("image_grid_thw[1]"). InvalidArgument also when merge_size < 1.
Status ValidateGridThw(const GridThw& g, int merge_size, const std::string& what);

// Tokens the item occupies in the language model after the spatial merge:
// t * (h / merge) * (w / merge). REQUIRES: ValidateGridThw(g, merge_size, ...) passed.
int64_t MergedTokens(const GridThw& g, int merge_size);

// Validates every grid of a list (errors name `what`[i]) and returns the tokens they expand to,
// the sum of MergedTokens, computed with overflow checks. Refuses a list with more grids than
// `max_tokens`, or whose total passes `max_tokens`, before anything is expanded: callers pass
// the visual positions the prompt (or the model) can hold, so no grid, however large its t,
// makes a caller allocate more than that. InvalidArgument names the first grid over the bound.
StatusOr<int64_t> ValidateGridList(std::span<const GridThw> grids, int merge_size,
                                   const std::string& what, int64_t max_tokens);

// "[t,h,w]" for messages.
std::string GridToString(const GridThw& g);

}  // namespace vls

#endif  // VLSTACK_TENSOR_GRID_THW_H_
