#include "model/rope.h"

#include <cmath>

namespace vls {

Rope::Rope(const Qwen3Config& cfg) {
  const int half = cfg.head_dim / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  slot_axis_.assign(static_cast<size_t>(half), 0);
  for (int j = 0; j < half; ++j) {
    // HF computes this in f32: 1 / theta^(float(2j)/D). We keep f64 until the final cos/sin,
    // which is at least as accurate; the oracle tolerance covers the difference.
    inv_freq_[static_cast<size_t>(j)] =
        1.0 / std::pow(cfg.rope_theta, static_cast<double>(2 * j) / cfg.head_dim);
  }
  if (cfg.position_mode != PositionMode::kMrope) return;
  const auto& sec = cfg.mrope_section;
  for (int j = 0; j < half; ++j) {
    int axis = 0;
    if (cfg.mrope_layout == MropeLayout::kInterleaved) {
      // THW THW ... then T for the tail (qwen3vl-spec §B.1).
      if (j % 3 == 1 && j < 3 * sec[1])
        axis = 1;
      else if (j % 3 == 2 && j < 3 * sec[2])
        axis = 2;
    } else {
      if (j >= sec[0] + sec[1])
        axis = 2;
      else if (j >= sec[0])
        axis = 1;
    }
    slot_axis_[static_cast<size_t>(j)] = axis;
  }
}

void Rope::CosSin(const RopeCoord& coord, float* cos, float* sin) const {
  for (size_t j = 0; j < inv_freq_.size(); ++j) {
    const double angle =
        static_cast<double>(coord[static_cast<size_t>(slot_axis_[j])]) * inv_freq_[j];
    cos[j] = static_cast<float>(std::cos(angle));
    sin[j] = static_cast<float>(std::sin(angle));
  }
}

}  // namespace vls
