// Rotary position embedding tables: 1-D RoPE and M-RoPE (interleaved or chunked sections).
#ifndef VLSTACK_MODEL_ROPE_H_
#define VLSTACK_MODEL_ROPE_H_

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/scratch.h"
#include "model/qwen3_config.h"

namespace vls {

// A RoPE coordinate on the three axes (T, H, W). 1-D models use t for all three.
using RopeCoord = std::array<int32_t, 3>;

class Rope {
 public:
  explicit Rope(const Qwen3Config& cfg);

  // Fills cos[D/2] and sin[D/2] for one coordinate: slot j uses axis AxisOfSlot(j).
  void CosSin(const RopeCoord& coord, float* cos, float* sin) const;
  // The same values as CosSin, as cos[D/2] followed by sin[D/2], from a small cache keyed by
  // coord that the caller keeps in `cache` (its participant's ScratchArena::rope): a decode
  // row's coordinate is the same in every layer, and the 2·(D/2) double-precision cos/sin cost
  // more than a layer's RoPE itself. A cache filled by another table is reset first. The
  // pointer is valid until the next call with `cache`.
  const float* CachedCosSin(const RopeCoord& coord, kernels::ScratchBuffer& cache) const;

  // Which axis (0=T, 1=H, 2=W) drives frequency slot j in [0, D/2).
  int AxisOfSlot(int j) const { return slot_axis_[static_cast<size_t>(j)]; }
  int half() const { return static_cast<int>(inv_freq_.size()); }

 private:
  std::vector<double> inv_freq_;  // [D/2]: 1 / theta^(2j/D)
  std::vector<int> slot_axis_;    // [D/2]
  uint64_t id_;                   // unique per table in this process: owner of a cache
};

}  // namespace vls

#endif  // VLSTACK_MODEL_ROPE_H_
