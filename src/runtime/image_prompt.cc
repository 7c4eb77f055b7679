#include "runtime/image_prompt.h"

#include <string>
#include <utility>

#include "runtime/deepstack.h"
#include "runtime/positions.h"
#include "tensor/tensor.h"

namespace vls {

void VisualFeatures::Append(const GridThw& grid, int64_t n, std::span<const float> image_embeds,
                            std::span<const float> image_deepstack) {
  // [K, Nv, H] grows along Nv: each level's rows are re-laid out.
  kinds.push_back(VisualKind::kImage);
  const auto H = static_cast<size_t>(hidden);
  const auto old_nv = static_cast<size_t>(tokens), add = static_cast<size_t>(n);
  std::vector<float> ds(static_cast<size_t>(levels) * (old_nv + add) * H);
  for (size_t k = 0; k < static_cast<size_t>(levels); ++k) {
    float* dst = ds.data() + k * (old_nv + add) * H;
    std::copy_n(deepstack.data() + k * old_nv * H, old_nv * H, dst);
    std::copy_n(image_deepstack.data() + k * add * H, add * H, dst + old_nv * H);
  }
  deepstack = std::move(ds);
  embeds.insert(embeds.end(), image_embeds.begin(), image_embeds.end());
  grids.push_back(grid);
  tokens += n;
}

void VisualFeatures::AppendVideo(const VideoSummary& video, int64_t n,
                                 std::span<const float> video_embeds,
                                 std::span<const float> video_deepstack) {
  // Append records the whole video's rows as one item: it is split into its T groups.
  Append(GridThw{1, video.grid.h, video.grid.w}, n, video_embeds, video_deepstack);
  kinds.back() = VisualKind::kVideoGroup;
  for (int32_t g = 1; g < video.grid.t; ++g) {
    grids.push_back(GridThw{1, video.grid.h, video.grid.w});
    kinds.push_back(VisualKind::kVideoGroup);
  }
  videos.push_back(video);
}

std::vector<GridThw> VisualFeatures::ImageGrids() const {
  std::vector<GridThw> out;
  for (size_t i = 0; i < grids.size(); ++i) {
    if (kinds[i] == VisualKind::kImage) out.push_back(grids[i]);
  }
  return out;
}

std::vector<GridThw> VisualFeatures::VideoGrids() const {
  std::vector<GridThw> out;
  out.reserve(videos.size());
  for (const VideoSummary& v : videos) out.push_back(v.grid);
  return out;
}

StatusOr<std::vector<int32_t>> ExpandVisualPads(const Qwen3Config& cfg,
                                                std::span<const int32_t> ids,
                                                std::span<const GridThw> grids,
                                                std::span<const VisualKind> kinds) {
  if (kinds.size() != grids.size()) {
    return InvalidArgument("ExpandVisualPads: " + std::to_string(grids.size()) + " grids but " +
                           std::to_string(kinds.size()) + " kinds");
  }
  bool any_video = false;
  for (VisualKind k : kinds) any_video = any_video || k == VisualKind::kVideoGroup;
  if (cfg.image_token_id < 0 || cfg.vision_start_token_id < 0 ||
      (any_video && cfg.video_token_id < 0)) {
    return InvalidArgument(
        "the model has no image or video tokens (config.json image_token_id / video_token_id / "
        "vision_start_token_id): it cannot take images or videos");
  }
  const int merge = cfg.spatial_merge_size;
  VLS_ASSIGN_OR_RETURN(int64_t visual, ValidateGridList(grids, merge, "visual grid", INT32_MAX));
  size_t pads = 0;
  for (size_t s = 0; s < ids.size(); ++s) {
    const bool image = ids[s] == cfg.image_token_id;
    const bool video = cfg.video_token_id >= 0 && ids[s] == cfg.video_token_id;
    if (!image && !video) continue;
    const char* what = image ? "image" : "video";
    if (s == 0 || ids[s - 1] != cfg.vision_start_token_id) {
      return InvalidArgument("the " + std::string(what) + " pad token at position " +
                             std::to_string(s) +
                             " does not follow vision_start (write each item as "
                             "<|vision_start|><|" +
                             what + "_pad|><|vision_end|>)");
    }
    if (pads < kinds.size() && (kinds[pads] == VisualKind::kImage) != image) {
      return InvalidArgument("visual item " + std::to_string(pads) + " is " +
                             (kinds[pads] == VisualKind::kImage ? "an image" : "a video") +
                             " but the prompt's pad token at position " + std::to_string(s) +
                             " is " + (image ? "an image" : "a video") + " pad");
    }
    ++pads;
  }
  if (pads != grids.size()) {
    size_t image_items = 0, image_pads = 0;
    for (VisualKind k : kinds) image_items += k == VisualKind::kImage ? 1 : 0;
    for (int32_t id : ids) image_pads += id == cfg.image_token_id ? 1 : 0;
    const size_t video_pads = pads - image_pads, video_items = kinds.size() - image_items;
    if (video_pads == 0 && video_items == 0) {
      return InvalidArgument("the prompt has " + std::to_string(pads) + " image pad token" +
                             (pads == 1 ? "" : "s") + " but " + std::to_string(grids.size()) +
                             " image" + (grids.size() == 1 ? " was" : "s were") +
                             " given (one pad per image, between vision_start and vision_end)");
    }
    return InvalidArgument("the prompt has " + std::to_string(image_pads) + " image and " +
                           std::to_string(video_pads) + " video pad tokens but " +
                           std::to_string(image_items) + " images and " +
                           std::to_string(video_items) +
                           " video temporal groups were given (one pad per image and per video "
                           "temporal group, between vision_start and vision_end)");
  }
  std::vector<int32_t> out;
  out.reserve(ids.size() + static_cast<size_t>(visual));
  size_t item = 0;
  for (int32_t id : ids) {
    if (id != cfg.image_token_id && (cfg.video_token_id < 0 || id != cfg.video_token_id)) {
      out.push_back(id);
      continue;
    }
    out.insert(out.end(), static_cast<size_t>(MergedTokens(grids[item++], merge)), id);
  }
  return out;
}

StatusOr<std::vector<int32_t>> ExpandImagePads(const Qwen3Config& cfg, std::span<const int32_t> ids,
                                               std::span<const GridThw> grids) {
  const std::vector<VisualKind> kinds(grids.size(), VisualKind::kImage);
  return ExpandVisualPads(cfg, ids, grids, kinds);
}

Status BuildImagePrompt(const LoadedModel& model, std::vector<int32_t> expanded_ids,
                        const VisualFeatures& f, GenerationRequest* request) {
  const Qwen3Config& cfg = model.config();
  const int64_t H = cfg.hidden, S = static_cast<int64_t>(expanded_ids.size());
  if (f.hidden != H) {
    return InvalidArgument("the vision tower's rows have width " + std::to_string(f.hidden) +
                           " but the language model's hidden size is " + std::to_string(H));
  }
  const int64_t K = cfg.deepstack ? static_cast<int64_t>(cfg.deepstack->target_layers.size()) : 0;
  if (f.levels != K) {
    // Fail closed: never serve an image through an entry that drops DeepStack levels.
    return InvalidArgument("the vision tower gives " + std::to_string(f.levels) +
                           " DeepStack levels but the language model declares " +
                           std::to_string(K) +
                           " (deepstack_visual_indexes vs the DeepStack "
                           "target layers): refusing to serve images or videos without them");
  }
  VLS_RETURN_IF_ERROR(ValidateTokenIds(expanded_ids, cfg.vocab, "prompt"));
  std::vector<int32_t> visual_positions;
  for (int64_t s = 0; s < S; ++s) {
    const int32_t id = expanded_ids[static_cast<size_t>(s)];
    if (id == cfg.image_token_id || (cfg.video_token_id >= 0 && id == cfg.video_token_id))
      visual_positions.push_back(static_cast<int32_t>(s));
  }
  if (static_cast<int64_t>(visual_positions.size()) != f.tokens) {
    return InvalidArgument("the prompt has " + std::to_string(visual_positions.size()) +
                           " image and video pad tokens but the images and videos give " +
                           std::to_string(f.tokens) + " rows");
  }
  if (f.kinds.size() != f.grids.size()) {
    return InvalidArgument("visual features with " + std::to_string(f.grids.size()) +
                           " grids but " + std::to_string(f.kinds.size()) + " kinds");
  }
  // get_rope_index walks images and videos in their own orders; a video's groups are passed as
  // the [1, h, w] items they are positioned as (the same positions as its [T, h, w] grid).
  std::vector<GridThw> groups;
  for (size_t i = 0; i < f.grids.size(); ++i) {
    if (f.kinds[i] == VisualKind::kVideoGroup) groups.push_back(f.grids[i]);
  }
  VLS_ASSIGN_OR_RETURN(RopeIndex rope, GetRopeIndex(cfg, expanded_ids, f.ImageGrids(), groups));

  // [S, H] embeddings: the token rows, then the visual rows in prompt order.
  std::vector<float> emb(static_cast<size_t>(S * H));
  model.model().Embed(expanded_ids, emb.data());
  for (size_t v = 0; v < visual_positions.size(); ++v) {
    std::copy_n(f.embeds.data() + v * static_cast<size_t>(H), H,
                emb.data() + static_cast<size_t>(visual_positions[v]) * static_cast<size_t>(H));
  }

  GenerationRequest& r = *request;
  if (K > 0) {
    const int64_t nv = f.tokens;
    HostTensor pos = HostTensor::FromI32({nv}, visual_positions);
    HostTensor feat = HostTensor::FromF32({K, nv, H}, f.deepstack);
    const auto& layers = cfg.deepstack->target_layers;
    std::vector<int32_t> layer_ids(layers.begin(), layers.end());
    HostTensor lay = HostTensor::FromI32({K}, layer_ids);
    VLS_ASSIGN_OR_RETURN(DeepStackPayload payload,
                         DeepStackPayload::Create(pos.view(), feat.view(), lay.view()));
    r.deepstack = std::move(payload);
  } else {
    r.deepstack.reset();
  }
  r.tokens = std::move(expanded_ids);
  r.embeddings = std::move(emb);
  r.positions = std::move(rope.positions);
  r.rope_delta = rope.rope_delta;
  // The length only, so that a prompt the images made too long is named here as before; the
  // full prompt rules (a scan of every embedding and feature) run once, where the request is
  // validated (ValidatedRequest::Validate, Session::Prefill, BatchEngine::Submit).
  return ValidateLengthAndPositions(model, model.bounds().capacity, r.positions.length,
                                    r.positions);
}

}  // namespace vls
