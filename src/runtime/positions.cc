#include "runtime/positions.h"

#include <algorithm>
#include <limits>
#include <string>

namespace vls {

PositionIds SequentialPositions(PositionMode mode, int64_t length) {
  PositionIds p;
  p.mode = mode;
  p.length = length;
  const int axes = mode == PositionMode::kMrope ? 3 : 1;
  p.data.resize(static_cast<size_t>(axes * length));
  for (int a = 0; a < axes; ++a) {
    for (int64_t s = 0; s < length; ++s)
      p.data[static_cast<size_t>(a * length + s)] = static_cast<int32_t>(s);
  }
  return p;
}

StatusOr<PositionIds> PositionsFromTensor(PositionMode model_mode, std::span<const int64_t> dims,
                                          std::span<const int32_t> values,
                                          int64_t expected_length) {
  const bool mrope = model_mode == PositionMode::kMrope;
  const std::string want = mrope ? "[3," + std::to_string(expected_length) + "]"
                                 : "[" + std::to_string(expected_length) + "]";
  const bool ok = mrope ? (dims.size() == 2 && dims[0] == 3 && dims[1] == expected_length)
                        : (dims.size() == 1 && dims[0] == expected_length);
  if (!ok) {
    return InvalidArgument("position_ids: the model uses " +
                           std::string(mrope ? "M-RoPE" : "1-D RoPE") + " positions, shape " +
                           want + ", but got " + ShapeToString(dims) +
                           " (the position mode comes from the model, never from the tensor rank)");
  }
  PositionIds p;
  p.mode = model_mode;
  p.length = expected_length;
  p.data.assign(values.begin(), values.end());
  return p;
}

namespace {

// Positions as a growing [3, n] list.
struct Builder {
  std::vector<int32_t> t, h, w;
  int64_t max = -1;
  void Push(int64_t pt, int64_t ph, int64_t pw) {
    t.push_back(static_cast<int32_t>(pt));
    h.push_back(static_cast<int32_t>(ph));
    w.push_back(static_cast<int32_t>(pw));
    max = std::max({max, pt, ph, pw});
  }
  int64_t Next() const { return max + 1; }
};

}  // namespace

StatusOr<RopeIndex> GetRopeIndex(const Qwen3Config& cfg, std::span<const int32_t> ids,
                                 std::span<const GridThw> image_grid_thw,
                                 std::span<const GridThw> video_grid_thw) {
  const int64_t S = static_cast<int64_t>(ids.size());
  const int merge = cfg.spatial_merge_size;
  for (size_t i = 0; i < image_grid_thw.size(); ++i) {
    VLS_RETURN_IF_ERROR(
        ValidateGridThw(image_grid_thw[i], merge, "image_grid_thw[" + std::to_string(i) + "]"));
  }
  // Videos become T items of [1, h, w] (each temporal group is positioned like an image).
  std::vector<GridThw> videos;
  for (size_t i = 0; i < video_grid_thw.size(); ++i) {
    const GridThw& g = video_grid_thw[i];
    VLS_RETURN_IF_ERROR(ValidateGridThw(g, merge, "video_grid_thw[" + std::to_string(i) + "]"));
    for (int32_t t = 0; t < g.t; ++t) videos.push_back({1, g.h, g.w});
  }

  // Visual items in sequence order: a vision_start token followed by an image or video pad.
  const int32_t img = cfg.image_token_id, vid = cfg.video_token_id;
  size_t n_images = 0, n_videos = 0;
  int64_t pad_tokens = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (ids[static_cast<size_t>(s)] == img || ids[static_cast<size_t>(s)] == vid) ++pad_tokens;
    if (ids[static_cast<size_t>(s)] == cfg.vision_start_token_id && s + 1 < S) {
      if (ids[static_cast<size_t>(s + 1)] == img)
        ++n_images;
      else if (ids[static_cast<size_t>(s + 1)] == vid)
        ++n_videos;
    }
  }
  if (n_images != image_grid_thw.size()) {
    return InvalidArgument(
        "input_ids hold " + std::to_string(n_images) +
        " images (vision_start followed by an image pad token) but image_grid_thw has " +
        std::to_string(image_grid_thw.size()) + " rows");
  }
  if (n_videos != videos.size()) {
    return InvalidArgument("input_ids hold " + std::to_string(n_videos) +
                           " video groups but video_grid_thw describes " +
                           std::to_string(videos.size()));
  }
  Builder b;
  int64_t st = 0;
  size_t ii = 0, vi = 0;
  int64_t visual_tokens = 0;
  for (size_t item = 0; item < n_images + n_videos; ++item) {
    auto find = [&](int32_t tok, size_t remaining) -> int64_t {
      if (remaining == 0) return S + 1;
      for (int64_t s = st; s < S; ++s) {
        if (ids[static_cast<size_t>(s)] == tok) return s;
      }
      return S + 1;
    };
    const int64_t ed_image = find(img, image_grid_thw.size() - ii);
    const int64_t ed_video = find(vid, videos.size() - vi);
    GridThw g;
    int64_t ed;
    if (ed_image < ed_video) {
      g = image_grid_thw[ii++];
      ed = ed_image;
    } else {
      g = videos[vi++];
      ed = ed_video;
    }
    if (ed > S)
      return InvalidArgument("input_ids: fewer visual pad tokens than the grids describe");
    const int64_t gt = g.t, gh = g.h / merge, gw = g.w / merge;
    const int64_t n = MergedTokens(g, merge);
    const int32_t pad = ids[static_cast<size_t>(ed)];
    if (ed + n > S) {
      return InvalidArgument("input_ids: visual item " + std::to_string(item) + " at index " +
                             std::to_string(ed) + " needs " + std::to_string(n) +
                             " pad tokens but the sequence ends first");
    }
    for (int64_t s = ed; s < ed + n; ++s) {
      if (ids[static_cast<size_t>(s)] != pad) {
        return InvalidArgument("input_ids: visual item " + std::to_string(item) + " needs " +
                               std::to_string(n) + " consecutive pad tokens from index " +
                               std::to_string(ed) + " but index " + std::to_string(s) +
                               " is not one");
      }
    }
    const int64_t text_len = ed - st;
    const int64_t st_idx = b.Next();
    for (int64_t i = 0; i < text_len; ++i) b.Push(st_idx + i, st_idx + i, st_idx + i);
    const int64_t base = st_idx + text_len;
    for (int64_t t = 0; t < gt; ++t) {
      for (int64_t r = 0; r < gh; ++r) {
        for (int64_t c = 0; c < gw; ++c) b.Push(base + t, base + r, base + c);
      }
    }
    st = ed + n;
    visual_tokens += n;
  }
  if (visual_tokens != pad_tokens) {
    return InvalidArgument("input_ids hold " + std::to_string(pad_tokens) +
                           " image/video pad tokens but the grids account for " +
                           std::to_string(visual_tokens));
  }
  if (st < S) {
    const int64_t st_idx = b.Next();
    for (int64_t i = 0; i < S - st; ++i) b.Push(st_idx + i, st_idx + i, st_idx + i);
  }
  RopeIndex out;
  out.positions.mode = PositionMode::kMrope;
  out.positions.length = S;
  out.positions.data.reserve(static_cast<size_t>(3 * S));
  for (const auto* axis : {&b.t, &b.h, &b.w}) {
    out.positions.data.insert(out.positions.data.end(), axis->begin(), axis->end());
  }
  out.rope_delta = static_cast<int32_t>(b.max + 1 - S);
  return out;
}

StatusOr<RopeCoord> DecodeCoordinate(int64_t physical_index, int32_t rope_delta) {
  auto c = CheckedAddI64(physical_index, rope_delta);
  if (!c || *c > std::numeric_limits<int32_t>::max()) {
    return OutOfRange("decode coordinate " + std::to_string(physical_index) + " + rope_delta " +
                      std::to_string(rope_delta) + " overflows int32");
  }
  if (*c < 0) {
    return OutOfRange("decode coordinate " + std::to_string(physical_index) + " + rope_delta " +
                      std::to_string(rope_delta) + " = " + std::to_string(*c) + " is negative");
  }
  const auto p = static_cast<int32_t>(*c);
  return RopeCoord{p, p, p};
}

}  // namespace vls
