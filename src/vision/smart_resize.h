// Qwen2-VL's smart_resize (spec §D.3): the size an image is resized to before patching.
#ifndef VLSTACK_VISION_SMART_RESIZE_H_
#define VLSTACK_VISION_SMART_RESIZE_H_

#include <cstdint>
#include <utility>

#include "base/status.h"

namespace vls {

// Largest image side SmartResize takes (far above any decoder's limit); it keeps height * width
// below 2^53, so every double the computation forms is the one Python forms.
inline constexpr int kMaxSmartResizeSide = 1 << 24;
// The aspect-ratio limit of transformers' smart_resize.
inline constexpr double kMaxSmartResizeAspectRatio = 200.0;

// Returns (resized_height, resized_width), each a positive multiple of `factor`, exactly as
// transformers' smart_resize (image_processing_qwen2_vl.py, v4.57 .. v5) computes it in Python:
//   h̄ = round(h / f) * f, w̄ = round(w / f) * f           (round half to even, as Python's round)
//   if h̄ * w̄ > max: β = sqrt(h * w / max); h̄ = max(f, floor(h / β / f) * f); w̄ likewise
//   elif h̄ * w̄ < min: β = sqrt(min / (h * w)); h̄ = ceil(h * β / f) * f; w̄ likewise
// with the same double operations in the same order. Older transformers also refused a side
// below the factor (and before that, below 10 pixels); the versions Qwen3-VL runs with (and
// spec §D.3) do not, so a 1x1 image resizes to min_pixels like any other small one.
// InvalidArgument when max(h, w) / min(h, w) > 200 (transformers' rule), when a side is outside
// [1, kMaxSmartResizeSide], when factor < 1, when min_pixels < 1 or min_pixels > max_pixels,
// or when a resized side would pass 2^30 (only a tiny aspect-limited image with a huge
// min_pixels gets there).
StatusOr<std::pair<int, int>> SmartResize(int height, int width, int factor, int64_t min_pixels,
                                          int64_t max_pixels);

// Python's round() of a double to an integer value: halves go to the even neighbour.
double RoundHalfToEven(double x);

}  // namespace vls

#endif  // VLSTACK_VISION_SMART_RESIZE_H_
