// The floating-point work of one vision-tower encode (VisionModel::Encode), for throughput
// figures (vlstack bench --image, bench/vision_bench.cc).
#ifndef VLSTACK_VISION_VISION_FLOPS_H_
#define VLSTACK_VISION_VISION_FLOPS_H_

#include <span>

#include "tensor/grid_thw.h"
#include "vision/vision_config.h"

namespace vls {

// FLOPs of the tower's matrix products for `grids` (Np = Σ t·h·w patches, Nv = Np / m²), a
// multiply-add counted as 2:
//   patch embedding   2·Np·Dv·(C·Tp·P²)
//   each of `depth` blocks
//     qkv, proj       2·Np·(3·Dv·Dv + Dv·Dv)
//     fc1, fc2        2·Np·(2·Dv·Iv)
//     attention       Σ over segments (one per temporal group of each image, L = h·w rows):
//                     2·L²·Dv for Q·Kᵀ plus 2·L²·Dv for P·V
//   each of the 1 + K mergers (main and DeepStack)
//                     2·Nv·(Md·Md + Md·O), Md = m²·Dv
// LayerNorm, GELU, softmax, rotary and bias additions (O(Np·Dv) each) are not counted.
// REQUIRES: grids valid for cfg (ValidateGridList).
double VisionEncodeFlops(const VisionConfig& cfg, std::span<const GridThw> grids);

}  // namespace vls

#endif  // VLSTACK_VISION_VISION_FLOPS_H_
