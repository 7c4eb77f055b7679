// Visual prompts (docs/contracts.md §C.2, §D.5, §D.6; docs/contracts.md §6 `forward --image`,
// `--video`): a prompt written with one pad per visual item between vision_start and vision_end
// becomes the request the DeepStack entry serves. An item is an image or one temporal group of a
// video (docs/video.md: each group is written `<t seconds>` vision_start pad vision_end, and its
// pad is a video pad). The k-th pad is expanded to the k-th item's h·w / merge² pads, the
// embedding rows of the pads are replaced by the vision tower's merged rows (items in prompt
// order), positions and rope_delta come from get_rope_index (a video group is positioned as a
// [1,h,w] image), and the DeepStack payload holds the pad positions and the merger features of
// every level.
//
// Fails closed: a model that declares DeepStack only gets an image or a video through the
// DeepStack entry (features of exactly its levels); pads and items must match in number and in
// kind.
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

// An item of a visual prompt: an image, or one temporal group of a video.
enum class VisualKind : uint8_t { kImage, kVideoGroup };

// One video of a prompt: what the sampler and the tower made of it.
struct VideoSummary {
  GridThw grid;                        // (T, h, w) in patches: T temporal groups
  std::vector<int64_t> frame_indices;  // the sampled frames (decode order), before padding to
                                       // a multiple of the temporal patch
  std::vector<double> timestamps;      // [T] seconds, one per temporal group
};

// The vision tower's output for the visual items of one prompt, in prompt order.
struct VisualFeatures {
  std::vector<GridThw> grids;        // one per item, in patches (a video group is [1, h, w])
  std::vector<VisualKind> kinds;     // parallel to grids
  std::vector<VideoSummary> videos;  // the videos, in prompt order
  int64_t tokens = 0;                // Nv = Σ t·h·w / merge²
  int64_t hidden = 0;                // H (the tower's out_hidden_size)
  int64_t levels = 0;                // K DeepStack levels
  std::vector<float> embeds;         // [Nv, H] main merger rows
  std::vector<float> deepstack;      // [K, Nv, H]

  // Appends one image's rows (embeds [n, H], deepstack [K, n, H]). REQUIRES: same H and K.
  void Append(const GridThw& grid, int64_t n, std::span<const float> image_embeds,
              std::span<const float> image_deepstack);
  // Appends one video: its T groups as items of [1, h, w], rows as Append.
  void AppendVideo(const VideoSummary& video, int64_t n, std::span<const float> video_embeds,
                   std::span<const float> video_deepstack);
  // The grids of the images, and of the videos ([T, h, w] each), in prompt order.
  std::vector<GridThw> ImageGrids() const;
  std::vector<GridThw> VideoGrids() const;
};

// ids with exactly one pad per visual item (an image pad for an image, a video pad for a video
// group), each preceded by vision_start: each pad expanded to its item's merged token count.
// Refuses a pad count that differs from the item count, a pad whose kind differs from its
// item's, and a pad not preceded by vision_start.
StatusOr<std::vector<int32_t>> ExpandVisualPads(const Qwen3Config& cfg,
                                                std::span<const int32_t> ids,
                                                std::span<const GridThw> grids,
                                                std::span<const VisualKind> kinds);
// ExpandVisualPads when every item is an image (a video pad is then refused).
StatusOr<std::vector<int32_t>> ExpandImagePads(const Qwen3Config& cfg, std::span<const int32_t> ids,
                                               std::span<const GridThw> grids);

// Fills the prompt of `request` (tokens, embeddings, positions, rope_delta, deepstack) from
// ids already expanded (ExpandVisualPads) and the items' features. Checks only its length
// against the model's capacity (ValidateLengthAndPositions): the caller validates the request
// once (ValidatedRequest::Validate, Session::Prefill or BatchEngine::Submit) before it runs.
Status BuildImagePrompt(const LoadedModel& model, std::vector<int32_t> expanded_ids,
                        const VisualFeatures& features, GenerationRequest* request);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_IMAGE_PROMPT_H_
