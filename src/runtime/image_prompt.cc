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

StatusOr<std::vector<int32_t>> ExpandImagePads(const Qwen3Config& cfg, std::span<const int32_t> ids,
                                               std::span<const GridThw> grids) {
  if (cfg.image_token_id < 0 || cfg.vision_start_token_id < 0) {
    return InvalidArgument(
        "the model has no image tokens (config.json image_token_id / "
        "vision_start_token_id): it cannot take images");
  }
  const int merge = cfg.spatial_merge_size;
  VLS_ASSIGN_OR_RETURN(int64_t visual, ValidateGridList(grids, merge, "image grid", INT32_MAX));
  size_t pads = 0;
  for (size_t s = 0; s < ids.size(); ++s) {
    if (ids[s] == cfg.video_token_id) {
      return Status(StatusCode::kUnimplemented, "the prompt holds a video pad token at position " +
                                                    std::to_string(s) +
                                                    ": videos are not supported yet");
    }
    if (ids[s] != cfg.image_token_id) continue;
    if (s == 0 || ids[s - 1] != cfg.vision_start_token_id) {
      return InvalidArgument("the image pad token at position " + std::to_string(s) +
                             " does not follow vision_start (write each image as "
                             "<|vision_start|><|image_pad|><|vision_end|>)");
    }
    ++pads;
  }
  if (pads != grids.size()) {
    return InvalidArgument("the prompt has " + std::to_string(pads) + " image pad token" +
                           (pads == 1 ? "" : "s") + " but " + std::to_string(grids.size()) +
                           " image" + (grids.size() == 1 ? " was" : "s were") +
                           " given (one pad per image, between vision_start and vision_end)");
  }
  std::vector<int32_t> out;
  out.reserve(ids.size() + static_cast<size_t>(visual));
  size_t image = 0;
  for (int32_t id : ids) {
    if (id != cfg.image_token_id) {
      out.push_back(id);
      continue;
    }
    out.insert(out.end(), static_cast<size_t>(MergedTokens(grids[image++], merge)), id);
  }
  return out;
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
                           "target layers): refusing to serve the image without them");
  }
  VLS_RETURN_IF_ERROR(ValidateTokenIds(expanded_ids, cfg.vocab, "prompt"));
  std::vector<int32_t> visual_positions;
  for (int64_t s = 0; s < S; ++s) {
    if (expanded_ids[static_cast<size_t>(s)] == cfg.image_token_id)
      visual_positions.push_back(static_cast<int32_t>(s));
  }
  if (static_cast<int64_t>(visual_positions.size()) != f.tokens) {
    return InvalidArgument("the prompt has " + std::to_string(visual_positions.size()) +
                           " image pad tokens but the images give " + std::to_string(f.tokens) +
                           " rows");
  }
  VLS_ASSIGN_OR_RETURN(RopeIndex rope, GetRopeIndex(cfg, expanded_ids, f.grids, {}));

  // [S, H] embeddings: the token rows, then the visual rows in image order.
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
  return ValidatePrompt(model, model.bounds().capacity, r.prompt());
}

}  // namespace vls
