#include "vision/smart_resize.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace vls {

double RoundHalfToEven(double x) {
  const double r = std::round(x);  // halves away from zero
  if (std::fabs(x - std::trunc(x)) == 0.5) {
    return 2.0 * std::round(x / 2.0);  // the even neighbour (x / 2 is exact here)
  }
  return r;
}

StatusOr<std::pair<int, int>> SmartResize(int height, int width, int factor, int64_t min_pixels,
                                          int64_t max_pixels) {
  const std::string dims = std::to_string(height) + "x" + std::to_string(width);
  if (height < 1 || width < 1 || height > kMaxSmartResizeSide || width > kMaxSmartResizeSide) {
    return InvalidArgument("image of " + dims +
                           " (height x width) pixels: each side must be in [1, " +
                           std::to_string(kMaxSmartResizeSide) + "]");
  }
  if (factor < 1 || min_pixels < 1 || min_pixels > max_pixels) {
    return InvalidArgument("smart_resize: factor " + std::to_string(factor) + ", min_pixels " +
                           std::to_string(min_pixels) + ", max_pixels " +
                           std::to_string(max_pixels) +
                           ": need factor >= 1 and 1 <= min_pixels <= max_pixels");
  }
  const double h = height;
  const double w = width;
  const double f = factor;
  const double ratio = std::max(h, w) / std::min(h, w);
  if (ratio > kMaxSmartResizeAspectRatio) {
    return InvalidArgument(
        "image of " + dims +
        " (height x width) pixels: the aspect ratio must be at most 200:1, got " +
        std::to_string(ratio));
  }
  // Python ints are exact; these doubles are integers below 2^53 (sides < 2^24, factor < 2^31).
  double h_bar = RoundHalfToEven(h / f) * f;
  double w_bar = RoundHalfToEven(w / f) * f;
  const double hw = h * w;  // exact: < 2^48
  const double max_px = static_cast<double>(max_pixels);
  const double min_px = static_cast<double>(min_pixels);
  if (h_bar * w_bar > max_px) {
    const double beta = std::sqrt(hw / max_px);
    h_bar = std::max(f, std::floor(h / beta / f) * f);
    w_bar = std::max(f, std::floor(w / beta / f) * f);
  } else if (h_bar * w_bar < min_px) {
    const double beta = std::sqrt(min_px / hw);
    h_bar = std::ceil(h * beta / f) * f;
    w_bar = std::ceil(w * beta / f) * f;
  }
  constexpr double kMaxSide = 1 << 30;
  if (!(h_bar >= 1 && w_bar >= 1 && h_bar <= kMaxSide && w_bar <= kMaxSide)) {
    return InvalidArgument("image of " + dims + " (height x width) pixels: smart_resize gives " +
                           std::to_string(h_bar) + "x" + std::to_string(w_bar) +
                           ", outside [1, 2^30] per side");
  }
  return std::pair<int, int>(static_cast<int>(h_bar), static_cast<int>(w_bar));
}

}  // namespace vls
