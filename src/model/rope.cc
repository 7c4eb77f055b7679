#include "model/rope.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>

namespace vls {

namespace {
std::atomic<uint64_t> g_next_rope_id{1};
}  // namespace

Rope::Rope(const Qwen3Config& cfg) : id_(g_next_rope_id.fetch_add(1)) {
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
      // THW THW ... then T for the tail (docs/contracts.md §B.1).
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

const float* Rope::CachedCosSin(const RopeCoord& coord, kernels::ScratchBuffer& cache) const {
  // The cache, in floats: [4] the owning table's id_ (8 bytes) and padding, then kEntries
  // direct-mapped entries of [4] key (coord, 1) | [D/2] cos | [D/2] sin. Keys and id are
  // copied in and out bytewise; a zeroed cache (fresh from the arena) matches nothing.
  constexpr size_t kEntries = 64;  // enough for a batch of decode rows
  constexpr size_t kHeader = 4;
  const size_t half = inv_freq_.size();
  const size_t entry = kHeader + 2 * half;
  const size_t total = kHeader + kEntries * entry;
  float* base = cache.Reserve<float>(total);
  uint64_t owner = 0;
  std::memcpy(&owner, base, sizeof owner);
  if (owner != id_) {
    std::fill_n(base, total, 0.0f);
    std::memcpy(base, &id_, sizeof id_);
  }
  const std::array<int32_t, kHeader> key = {coord[0], coord[1], coord[2], 1};
  const auto mix = static_cast<uint64_t>(static_cast<uint32_t>(coord[0])) * 0x9E3779B97F4A7C15ull ^
                   static_cast<uint64_t>(static_cast<uint32_t>(coord[1])) * 0xC2B2AE3D27D4EB4Full ^
                   static_cast<uint64_t>(static_cast<uint32_t>(coord[2])) * 0x165667B19E3779F9ull;
  float* e = base + kHeader + ((mix >> 32) % kEntries) * entry;
  std::array<int32_t, kHeader> held{};
  std::memcpy(held.data(), e, sizeof held);
  if (held != key) {
    CosSin(coord, e + kHeader, e + kHeader + half);
    std::memcpy(e, key.data(), sizeof key);
  }
  return e + kHeader;
}

}  // namespace vls
