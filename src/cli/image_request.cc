#include "cli/image_request.h"

#include <memory>
#include <utility>

#include "image/decode.h"
#include "runtime/media_source.h"
#include "runtime/video_prompt.h"
#include "vision/image_processor_config.h"
#include "vision/smart_resize.h"
#include "vision/video_processor_config.h"

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
        "--image / --video need input_ids: the prompt with one image pad token per image and "
        "one video pad token per video, each between vision_start and vision_end");
  }
  for (const SafetensorsEntry& e : in.entries()) {
    if (e.name != "input_ids" && e.name != "decode_tokens") {
      return InvalidArgument("input tensor '" + e.name +
                             "' is not used with --image / --video (the engine derives the "
                             "embeddings, positions and DeepStack payload from the media)");
    }
  }
  return Status::Ok();
}

namespace {

StatusOr<std::vector<int32_t>> ReadI32(const SafetensorsFile& in, const char* name) {
  const SafetensorsEntry* e = in.Find(name);
  if (e == nullptr) return std::vector<int32_t>{};
  if (e->dtype != DType::kI32 || e->shape.size() != 1) {
    return InvalidArgument(std::string("input tensor '") + name + "' must be i32 [N], got " +
                           ShapeToString(e->shape));
  }
  const TensorView v = in.View(*e);
  return std::vector<int32_t>(v.i32(), v.i32() + e->shape[0]);
}

StatusOr<MediaBytes> ReadFilePart(const std::string& file, bool video) {
  MediaPolicy policy;
  policy.allow_files = true;
  return video ? ReadVideoPart(nlohmann::ordered_json{{"video", file}}, policy)
               : ReadImagePart(nlohmann::ordered_json{{"image", file}}, policy);
}

TimestampTokenizer Tokenize(const tok::Tokenizer* tokenizer) {
  return [tokenizer](const std::string& text) -> StatusOr<std::vector<int32_t>> {
    if (tokenizer == nullptr) return InvalidArgument("videos need a tokenizer for timestamps");
    return tokenizer->Encode(text);
  };
}

}  // namespace

StatusOr<VisualFiles> VisualFilesFromArgs(const Args& args) {
  VisualFiles v;
  v.images = args.GetAll("image");
  v.videos = args.GetAll("video");
  if (v.videos.empty()) {
    for (const char* flag : {"fps", "max-frames", "num-frames"}) {
      if (args.Has(flag)) return InvalidArgument("--" + std::string(flag) + " needs --video");
    }
    return v;
  }
  if (args.Has("fps") && args.Has("num-frames")) {
    return InvalidArgument("--fps and --num-frames exclude each other");
  }
  if (args.Has("fps")) {
    VLS_ASSIGN_OR_RETURN(double fps, args.Double("fps", 0));
    v.video.fps = fps;
  }
  if (args.Has("max-frames")) {
    VLS_ASSIGN_OR_RETURN(long long n, args.Int("max-frames", 0, 1, kMaxVideoFrames));
    v.video.max_frames = static_cast<int>(n);
  }
  if (args.Has("num-frames")) {
    VLS_ASSIGN_OR_RETURN(long long n, args.Int("num-frames", 0, 1, kMaxVideoFrames));
    v.video.num_frames = static_cast<int>(n);
  }
  return v;
}

std::string VideoFlagsHelp() {
  return "  --video FILE         a video (MP4, WebM, ...; repeat for several, in prompt order),\n"
         "                       sampled, resized and timestamped as the model folder's\n"
         "                       video_preprocessor_config.json says (docs/video.md)\n"
         "  --fps F              frames sampled per second of video (default: the config's, 2)\n"
         "  --max-frames N       at most N frames sampled per video (default: the config's,\n"
         "                       768)\n"
         "  --num-frames N       exactly N frames per video instead of --fps sampling\n";
}

StatusOr<std::unique_ptr<tok::Tokenizer>> LoadTimestampTokenizer(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer.json";
  auto t = tok::Tokenizer::FromFile(path);
  if (!t.ok()) {
    return InvalidArgument(
        "--video needs the model folder's tokenizer.json to write each temporal group's "
        "timestamp text: " +
        t.status().message());
  }
  return std::move(*t);
}

StatusOr<int64_t> PlanExpandedLength(const std::string& model_dir, int64_t length,
                                     const VisualFiles& files) {
  VLS_ASSIGN_OR_RETURN(Qwen3Config cfg, LoadQwen3Config(model_dir));
  int64_t n = length;
  if (!files.images.empty()) {
    VLS_ASSIGN_OR_RETURN(std::vector<GridThw> grids, PlanImageGrids(model_dir, files.images));
    n = ExpandedLength(n, grids, cfg.spatial_merge_size);
  }
  if (files.videos.empty()) return n;
  VLS_ASSIGN_OR_RETURN(VideoProcessorConfig vcfg, LoadVideoProcessorConfig(model_dir));
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<tok::Tokenizer> tokenizer,
                       LoadTimestampTokenizer(model_dir));
  for (const std::string& f : files.videos) {
    VLS_ASSIGN_OR_RETURN(MediaBytes bytes, ReadFilePart(f, true));
    VLS_ASSIGN_OR_RETURN(VideoPlan plan, PlanVideoBytes(bytes.bytes, bytes.label, vcfg,
                                                        ImageEncoderOptions{}, files.video));
    // The triple (3 tokens) becomes, per group, the timestamp text, vision_start, the pads and
    // vision_end.
    const int64_t per_group = plan.tokens / plan.summary.grid.t;
    n -= 3;
    for (double t : plan.summary.timestamps) {
      VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ts, tokenizer->Encode(FormatTimestamp(t)));
      n += static_cast<int64_t>(ts.size()) + 2 + per_group;
    }
  }
  return n;
}

StatusOr<RequestInput> ReadVisualRequestInput(const SafetensorsFile& in, const LoadedModel& model,
                                              const ImageEncoder& encoder, const VisualFiles& files,
                                              const tok::Tokenizer* tokenizer,
                                              VisualFeatures* features) {
  VLS_RETURN_IF_ERROR(CheckImageInputTensors(in));
  const Qwen3Config& cfg = model.config();
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ReadI32(in, "input_ids"));
  VLS_RETURN_IF_ERROR(ValidateTokenIds(ids, cfg.vocab, "input_ids"));
  // The pads in prompt order name which file comes next.
  VisualFeatures& f = *features;
  f = VisualFeatures{};
  f.hidden = cfg.hidden;
  f.levels = static_cast<int64_t>(encoder.vision_config().deepstack_visual_indexes.size());
  size_t image = 0, video = 0;
  for (int32_t id : ids) {
    const bool is_image = id == cfg.image_token_id;
    const bool is_video = cfg.video_token_id >= 0 && id == cfg.video_token_id;
    if (!is_image && !is_video) continue;
    const std::vector<std::string>& list = is_image ? files.images : files.videos;
    size_t& next = is_image ? image : video;
    if (next == list.size()) {
      return InvalidArgument("input_ids holds more " + std::string(is_image ? "image" : "video") +
                             " pad tokens than the " + std::to_string(list.size()) + " --" +
                             (is_image ? "image" : "video") + " files given");
    }
    const std::string& file = list[next++];
    VLS_ASSIGN_OR_RETURN(MediaBytes bytes, ReadFilePart(file, is_video));
    if (is_image) {
      VLS_ASSIGN_OR_RETURN(std::shared_ptr<const EncodedImage> e,
                           encoder.Encode(bytes.bytes, bytes.label));
      f.Append(e->grid, e->tokens, e->embeds, e->deepstack);
    } else {
      VLS_ASSIGN_OR_RETURN(std::shared_ptr<const EncodedImage> e,
                           encoder.EncodeVideo(bytes.bytes, bytes.label, files.video));
      f.AppendVideo(*e->video, e->tokens, e->embeds, e->deepstack);
    }
  }
  if (video == 0 && files.videos.empty() && image != files.images.size()) {
    return InvalidArgument("input_ids has " + std::to_string(image) + " image pad token" +
                           (image == 1 ? "" : "s") + " but " + std::to_string(files.images.size()) +
                           " image" + (files.images.size() == 1 ? " was" : "s were") +
                           " given (one pad per image, between vision_start and vision_end)");
  }
  if (image != files.images.size() || video != files.videos.size()) {
    return InvalidArgument("input_ids holds " + std::to_string(image) + " image and " +
                           std::to_string(video) + " video pad tokens but " +
                           std::to_string(files.images.size()) + " --image and " +
                           std::to_string(files.videos.size()) +
                           " --video files were given (one pad per image, one "
                           "<|vision_start|><|video_pad|><|vision_end|> per video)");
  }
  if (!f.videos.empty()) {
    VLS_ASSIGN_OR_RETURN(ids, SpliceVideoGroups(cfg, ids, f.videos, Tokenize(tokenizer)));
  }
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> expanded, ExpandVisualPads(cfg, ids, f.grids, f.kinds));
  GenerationRequest r;
  VLS_RETURN_IF_ERROR(BuildImagePrompt(model, std::move(expanded), f, &r));
  RequestInput out;
  out.length = static_cast<int64_t>(r.tokens.size());
  out.ids = std::move(r.tokens);
  out.has_ids = true;
  out.token_only = false;
  out.embeddings = std::move(r.embeddings);
  out.positions = std::move(r.positions);
  out.rope_delta = r.rope_delta;
  out.deepstack = std::move(r.deepstack);
  VLS_ASSIGN_OR_RETURN(out.decode_tokens, ReadI32(in, "decode_tokens"));
  VLS_RETURN_IF_ERROR(ValidateTokenIds(out.decode_tokens, cfg.vocab, "decode_tokens"));
  return out;
}

StatusOr<RequestInput> ReadImageRequestInput(const SafetensorsFile& in, const LoadedModel& model,
                                             const ImageEncoder& encoder,
                                             const std::vector<std::string>& files,
                                             VisualFeatures* features) {
  VisualFiles v;
  v.images = files;
  return ReadVisualRequestInput(in, model, encoder, v, nullptr, features);
}

}  // namespace vls::cli
