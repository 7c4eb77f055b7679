#include "cli/image_request.h"

#include <utility>

#include "image/decode.h"
#include "runtime/media_source.h"
#include "vision/image_processor_config.h"
#include "vision/smart_resize.h"

namespace vls::cli {

StatusOr<std::vector<GridThw>> PlanImageGrids(const std::string& model_dir,
                                              const std::vector<std::string>& files) {
  VLS_ASSIGN_OR_RETURN(ImageProcessorConfig pc, LoadModelImageProcessorConfig(model_dir));
  std::vector<GridThw> grids;
  for (const std::string& f : files) {
    VLS_ASSIGN_OR_RETURN(image::RgbImage img, image::LoadImageFile(f));
    auto hw = SmartResize(img.height, img.width, pc.factor(), pc.min_pixels, pc.max_pixels);
    if (!hw.ok()) return hw.status().WithContext(f);
    grids.push_back({1, hw->first / pc.patch_size, hw->second / pc.patch_size});
  }
  return grids;
}

int64_t ExpandedLength(int64_t length, std::span<const GridThw> grids, int merge_size) {
  int64_t n = length;
  for (const GridThw& g : grids) n += MergedTokens(g, merge_size) - 1;
  return n;
}

Status CheckImageInputTensors(const SafetensorsFile& in) {
  if (in.Find("input_ids") == nullptr) {
    return InvalidArgument(
        "--image needs input_ids: the prompt with one image pad token per "
        "image between vision_start and vision_end");
  }
  for (const SafetensorsEntry& e : in.entries()) {
    if (e.name != "input_ids" && e.name != "decode_tokens") {
      return InvalidArgument("input tensor '" + e.name +
                             "' is not used with --image (the engine derives the embeddings, "
                             "positions and DeepStack payload from the images)");
    }
  }
  return Status::Ok();
}

StatusOr<RequestInput> ReadImageRequestInput(const SafetensorsFile& in, const LoadedModel& model,
                                             const ImageEncoder& encoder,
                                             const std::vector<std::string>& files,
                                             VisualFeatures* features) {
  VLS_RETURN_IF_ERROR(CheckImageInputTensors(in));
  const Qwen3Config& cfg = model.config();
  auto view_i32 = [&](const char* name) -> StatusOr<std::vector<int32_t>> {
    const SafetensorsEntry* e = in.Find(name);
    if (e == nullptr) return std::vector<int32_t>{};
    if (e->dtype != DType::kI32 || e->shape.size() != 1) {
      return InvalidArgument(std::string("input tensor '") + name + "' must be i32 [N], got " +
                             ShapeToString(e->shape));
    }
    const TensorView v = in.View(*e);
    return std::vector<int32_t>(v.i32(), v.i32() + e->shape[0]);
  };
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, view_i32("input_ids"));
  VLS_RETURN_IF_ERROR(ValidateTokenIds(ids, cfg.vocab, "input_ids"));
  std::vector<MediaBytes> images;
  MediaPolicy policy;
  policy.allow_files = true;
  for (const std::string& f : files) {
    VLS_ASSIGN_OR_RETURN(MediaBytes m, ReadImagePart(nlohmann::ordered_json{{"image", f}}, policy));
    images.push_back(std::move(m));
  }
  VLS_ASSIGN_OR_RETURN(*features, encoder.EncodeAll(images));
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> expanded, ExpandImagePads(cfg, ids, features->grids));
  GenerationRequest r;
  VLS_RETURN_IF_ERROR(BuildImagePrompt(model, std::move(expanded), *features, &r));
  RequestInput out;
  out.length = static_cast<int64_t>(r.tokens.size());
  out.ids = std::move(r.tokens);
  out.has_ids = true;
  out.token_only = false;
  out.embeddings = std::move(r.embeddings);
  out.positions = std::move(r.positions);
  out.rope_delta = r.rope_delta;
  out.deepstack = std::move(r.deepstack);
  VLS_ASSIGN_OR_RETURN(out.decode_tokens, view_i32("decode_tokens"));
  VLS_RETURN_IF_ERROR(ValidateTokenIds(out.decode_tokens, cfg.vocab, "decode_tokens"));
  return out;
}

}  // namespace vls::cli
