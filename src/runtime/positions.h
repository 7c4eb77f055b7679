// Position ids: 1-D or M-RoPE [3, S], Qwen3-VL get_rope_index, and the decode coordinate.
#ifndef VLSTACK_RUNTIME_POSITIONS_H_
#define VLSTACK_RUNTIME_POSITIONS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "base/checked_math.h"
#include "base/status.h"
#include "model/qwen3_config.h"
#include "model/rope.h"
#include "tensor/grid_thw.h"
#include "tensor/tensor.h"

namespace vls {

// Positions of S rows in an explicit mode: data is [S] (1-D) or [3, S] axis-major (M-RoPE).
struct PositionIds {
  PositionMode mode = PositionMode::k1D;
  int64_t length = 0;  // S
  std::vector<int32_t> data;

  RopeCoord At(int64_t s) const {
    if (mode == PositionMode::k1D) {
      const int32_t p = data[static_cast<size_t>(s)];
      return {p, p, p};
    }
    return {data[static_cast<size_t>(s)], data[static_cast<size_t>(length + s)],
            data[static_cast<size_t>(2 * length + s)]};
  }
};

// 0..S-1 on every axis of `mode`.
PositionIds SequentialPositions(PositionMode mode, int64_t length);

// Checks a caller-supplied positions tensor of `dims` against the model's mode: [S] for a
// 1-D model, [3, S] for an M-RoPE model. The rank never selects the mode.
StatusOr<PositionIds> PositionsFromTensor(PositionMode model_mode, std::span<const int64_t> dims,
                                          std::span<const int32_t> values, int64_t expected_length);

struct RopeIndex {
  PositionIds positions;   // [3, S]
  int32_t rope_delta = 0;  // max(position) + 1 - S
};

// Qwen3-VL get_rope_index (docs/contracts.md §B.2) for one unpadded sequence. Each image or video
// is a `vision_start` token followed by its pad tokens; a video grid [T,h,w] is treated as T
// images of [1,h,w]. Every grid passes ValidateGridThw with the config's spatial merge size, and
// the pad-token runs must match the grids exactly (MergedTokens each).
StatusOr<RopeIndex> GetRopeIndex(const Qwen3Config& cfg, std::span<const int32_t> ids,
                                 std::span<const GridThw> image_grid_thw,
                                 std::span<const GridThw> video_grid_thw);

// The RoPE coordinate of the row at physical cache index `physical_index` of a sequence with
// `rope_delta`: physical_index + delta on all three axes, with overflow and negative results
// refused (docs/contracts.md §3).
StatusOr<RopeCoord> DecodeCoordinate(int64_t physical_index, int32_t rope_delta);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_POSITIONS_H_
