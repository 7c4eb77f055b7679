#include "vision/vision_flops.h"

namespace vls {

double VisionEncodeFlops(const VisionConfig& cfg, std::span<const GridThw> grids) {
  const double Dv = cfg.hidden, Iv = cfg.intermediate, O = cfg.out_hidden;
  const auto Md = static_cast<double>(cfg.merged_dim());
  const auto patch_dim = static_cast<double>(cfg.patch_dim());
  double np = 0, attention = 0;
  for (const GridThw& g : grids) {
    const double L = static_cast<double>(g.h) * g.w;
    np += g.t * L;
    attention += g.t * 4.0 * L * L * Dv;
  }
  const double nv = np / cfg.merge_unit();
  const double block = 2.0 * np * (4.0 * Dv * Dv + 2.0 * Dv * Iv) + attention;
  const double mergers =
      static_cast<double>(1 + cfg.deepstack_visual_indexes.size()) * 2.0 * nv * (Md * Md + Md * O);
  return 2.0 * np * Dv * patch_dim + cfg.depth * block + mergers;
}

}  // namespace vls
