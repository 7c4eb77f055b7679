// Image prompts (docs/contracts.md §C.2, §D.5; docs/contracts.md §6 `forward --image`): a prompt
// written with one image pad per image between vision_start and vision_end becomes the request the
// DeepStack entry serves. The k-th pad is expanded to the k-th image's t·h·w / merge² pads,
// the embedding rows of the pads are replaced by the vision tower's merged rows (images in
// order), positions and rope_delta come from get_rope_index, and the DeepStack payload holds
// the pad positions and the merger features of every level.
//
// Fails closed: a model that declares DeepStack only gets an image through the DeepStack entry
// (features of exactly its levels); pads and images must match in number; video pads are
// refused (videos are not supported yet).
#ifndef VLSTACK_RUNTIME_IMAGE_PROMPT_H_
#define VLSTACK_RUNTIME_IMAGE_PROMPT_H_

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "runtime/loaded_model.h"
#include "runtime/request.h"
#include "tensor/grid_thw.h"

namespace vls {

// The vision tower's output for the images of one prompt, in prompt order.
struct VisualFeatures {
  std::vector<GridThw> grids;    // one per image, in patches
  int64_t tokens = 0;            // Nv = Σ t·h·w / merge²
  int64_t hidden = 0;            // H (the tower's out_hidden_size)
  int64_t levels = 0;            // K DeepStack levels
  std::vector<float> embeds;     // [Nv, H] main merger rows
  std::vector<float> deepstack;  // [K, Nv, H]

  // Appends one image's rows (embeds [n, H], deepstack [K, n, H]). REQUIRES: same H and K.
  void Append(const GridThw& grid, int64_t n, std::span<const float> image_embeds,
              std::span<const float> image_deepstack);
};

// ids with exactly one image pad per image: each pad expanded to its image's merged token
// count. Refuses a pad count that differs from the image count, a pad not preceded by
// vision_start, and any video pad.
StatusOr<std::vector<int32_t>> ExpandImagePads(const Qwen3Config& cfg, std::span<const int32_t> ids,
                                               std::span<const GridThw> grids);

// Fills the prompt of `request` (tokens, embeddings, positions, rope_delta, deepstack) from
// ids already expanded (ExpandImagePads) and the images' features. Validates the result with
// ValidatePrompt at the model's capacity.
Status BuildImagePrompt(const LoadedModel& model, std::vector<int32_t> expanded_ids,
                        const VisualFeatures& features, GenerationRequest* request);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_IMAGE_PROMPT_H_
