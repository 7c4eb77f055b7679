// `vlstack vision` (docs/contracts.md §6): images (or preprocessed patches) through the vision
// tower, tensors out: pixel_values, image_grid_thw, visual_embeds, deepstack_features and, with
// --diagnostics, patch_embeds, pos_embeds and vision_block.{j}.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/image_request.h"
#include "cli/load_flags.h"
#include "image/decode.h"
#include "io/safetensors.h"
#include "kernels/dispatch.h"
#include "model/qwen3_config.h"
#include "runtime/image_encoder.h"
#include "runtime/media_source.h"
#include "video/video_decode.h"
#include "vision/image_processor_config.h"
#include "vision/preprocess.h"
#include "vision/video_preprocess.h"
#include "vision/vision_config.h"
#include "vision/vision_model.h"

namespace vls::cli {
CommandSpec VisionSpec() {
  CommandSpec spec;
  spec.name = "vision";
  spec.usage =
      "usage: vlstack vision --model DIR (--image FILE ... | --video FILE ... |\n"
      "                      --pixel-values IN.safetensors)\n"
      "                      --output OUT.safetensors [options]\n"
      "\n"
      "Runs the vision tower of a Qwen3-VL model folder: decodes the images (JPEG, PNG, WebP;\n"
      "EXIF orientation applied, converted to RGB), preprocesses them as the model's\n"
      "preprocessor_config.json says (smart_resize, bicubic resize, normalisation, patches in\n"
      "merge-window order) and writes pixel_values [Np, 3*tp*P*P], image_grid_thw [n,3],\n"
      "visual_embeds [Nv,H] (the main merger) and deepstack_features [K,Nv,H] (the DeepStack\n"
      "mergers) to OUT.safetensors (docs/contracts.md §6).\n"
      "\n"
      "  --model DIR          model folder: config.json with vision_config, the weights and\n"
      "                       preprocessor_config.json (required)\n"
      "                       or Org/Name: a Hugging Face repository id in the local cache\n"
      "  --image FILE         an image; repeat for several (each one item, in order)\n" +
      VideoFlagsHelp() +
      "                       (instead of images) each video one [T,h,w] item; also writes\n"
      "                       video_grid_thw [n,3] (instead of image_grid_thw),\n"
      "                       video_frame_indices [frames] (the sampled frames, in decode\n"
      "                       order) and video_timestamps [sum T] (seconds per group)\n"
      "  --pixel-values FILE  instead of images: pixel_values f32 [Np, 3*tp*P*P] (rows in\n"
      "                       merge-window order) and image_grid_thw i32 [n,3]\n"
      "  --output FILE        where the tensors go (required)\n"
      "  --diagnostics        also write patch_embeds, pos_embeds and vision_block.{j}\n"
      "                       [Np, Dv] (default off)\n"
      "  --precision P        f32 (default), bf16 or int8: the tower's matmul precision\n"
      "  --threads N          kernel threads (default 0: all cores)\n"
      "  --help               this text\n";
  spec.value_flags = {"model",   "image", "pixel-values", "output",     "precision",
                      "threads", "video", "fps",          "max-frames", "num-frames"};
  spec.bool_flags = {"diagnostics"};
  spec.example =
      "  vlstack vision --model ./model --image photo.jpg --output features.safetensors\n";
  return spec;
}

namespace {

// The user's own files, named on the command line.
MediaPolicy FilePolicy() {
  MediaPolicy p;
  p.allow_files = true;
  return p;
}

StatusOr<PixelValues> ReadPixelValues(const std::string& path, int64_t patch_dim) {
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> in, SafetensorsFile::Open(path));
  for (const SafetensorsEntry& e : in->entries()) {
    if (e.name != "pixel_values" && e.name != "image_grid_thw") {
      return InvalidArgument(path + ": tensor '" + e.name +
                             "' is not an input of vision (pixel_values, image_grid_thw)");
    }
  }
  const SafetensorsEntry* pv = in->Find("pixel_values");
  const SafetensorsEntry* gr = in->Find("image_grid_thw");
  if (pv == nullptr || gr == nullptr) {
    return InvalidArgument(path + ": needs pixel_values and image_grid_thw");
  }
  if (pv->dtype != DType::kF32 || pv->shape.size() != 2 || pv->shape[1] != patch_dim) {
    return InvalidArgument(path + ": pixel_values must be f32 [Np, " + std::to_string(patch_dim) +
                           "], got " + ShapeToString(pv->shape));
  }
  if (gr->dtype != DType::kI32 || gr->shape.size() != 2 || gr->shape[1] != 3) {
    return InvalidArgument(path + ": image_grid_thw must be i32 [n,3], got " +
                           ShapeToString(gr->shape));
  }
  if (gr->shape[0] > pv->shape[0]) {
    return InvalidArgument(path + ": image_grid_thw has more grids than pixel_values has rows");
  }
  PixelValues out;
  out.rows = pv->shape[0];
  out.cols = pv->shape[1];
  const TensorView pvv = in->View(*pv);
  out.data.assign(pvv.f32(), pvv.f32() + out.rows * out.cols);
  const TensorView gv = in->View(*gr);
  for (int64_t i = 0; i < gr->shape[0]; ++i) {
    out.grids.push_back({gv.i32()[3 * i], gv.i32()[3 * i + 1], gv.i32()[3 * i + 2]});
  }
  return out;
}

Status Vision(const Args& args) {
  VLS_ASSIGN_OR_RETURN(std::string model_dir, ModelDirFlag(args));
  VLS_ASSIGN_OR_RETURN(std::string out_path, args.Require("output"));
  VLS_ASSIGN_OR_RETURN(const VisualFiles visual, VisualFilesFromArgs(args));
  const std::vector<std::string>& images = visual.images;
  const auto pv_path = args.Get("pixel-values");
  if (int{!images.empty()} + int{!visual.videos.empty()} + int{pv_path.has_value()} != 1) {
    return InvalidArgument(
        "give one of --image FILE (one or more), --video FILE (one or more) or --pixel-values "
        "FILE");
  }
  kernels::Precision precision = kernels::Precision::kF32;
  if (auto p = args.Get("precision")) {
    if (*p == "bf16") {
      precision = kernels::Precision::kBF16;
    } else if (*p == "int8") {
      precision = kernels::Precision::kInt8;
    } else if (*p != "f32") {
      return InvalidArgument("--precision: '" + *p + "' (expected f32, bf16 or int8)");
    }
  }
  VLS_ASSIGN_OR_RETURN(long long threads, args.Int("threads", 0, 0, kMaxThreads));

  VLS_ASSIGN_OR_RETURN(Qwen3Config text, LoadQwen3Config(model_dir));
  VLS_ASSIGN_OR_RETURN(std::optional<VisionConfig> vcfg, LoadVisionConfig(model_dir, text));
  if (!vcfg) return InvalidArgument(model_dir + ": config.json has no vision_config");
  PixelValues pv;
  std::vector<int32_t> frame_indices;  // videos: the sampled frames
  std::vector<float> timestamps;       // videos: seconds per temporal group
  if (!images.empty()) {
    VLS_ASSIGN_OR_RETURN(ImageProcessorConfig pc, LoadModelImageProcessorConfig(model_dir));
    // One image at a time, so an error names its file; the patches are concatenated.
    for (const std::string& f : images) {
      VLS_ASSIGN_OR_RETURN(image::RgbImage img, image::LoadImageFile(f));
      auto one = PreprocessImages(std::span<const image::RgbImage>(&img, 1), pc);
      if (!one.ok()) return one.status().WithContext(f);
      pv.data.insert(pv.data.end(), one->data.begin(), one->data.end());
      pv.rows += one->rows;
      pv.cols = one->cols;
      pv.grids.push_back(one->grids[0]);
    }
  } else if (!visual.videos.empty()) {
    VLS_ASSIGN_OR_RETURN(VideoProcessorConfig vc, LoadVideoProcessorConfig(model_dir));
    VLS_RETURN_IF_ERROR(CheckVideoConfigAgainstVision(vc, *vcfg).WithContext(model_dir));
    for (const std::string& f : visual.videos) {
      VLS_ASSIGN_OR_RETURN(MediaBytes bytes,
                           ReadVideoPart(nlohmann::ordered_json{{"video", f}}, FilePolicy()));
      VLS_ASSIGN_OR_RETURN(VideoPlan plan, PlanVideoBytes(bytes.bytes, bytes.label, vc,
                                                          ImageEncoderOptions{}, visual.video));
      VLS_ASSIGN_OR_RETURN(
          std::vector<image::RgbImage> frames,
          video::DecodeFrames(bytes.bytes, bytes.label, plan.summary.frame_indices));
      auto one = PreprocessVideo(frames, vc);
      if (!one.ok()) return one.status().WithContext(f);
      pv.data.insert(pv.data.end(), one->data.begin(), one->data.end());
      pv.rows += one->rows;
      pv.cols = one->cols;
      pv.grids.push_back(one->grids[0]);
      for (int64_t i : plan.summary.frame_indices) frame_indices.push_back(static_cast<int32_t>(i));
      for (double t : plan.summary.timestamps) timestamps.push_back(static_cast<float>(t));
    }
  } else {
    VLS_ASSIGN_OR_RETURN(pv, ReadPixelValues(*pv_path, vcfg->patch_dim()));
  }
  kernels::Context ctx(static_cast<int>(threads), precision);
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<VisionModel> model,
                       VisionModel::Load(model_dir, *vcfg, ctx));
  const bool diagnostics = args.Has("diagnostics");
  VisionDiagnostics diag;
  VLS_ASSIGN_OR_RETURN(VisionOutput out,
                       model->Encode(pv.data, pv.rows, pv.grids, diagnostics ? &diag : nullptr));

  const int64_t H = vcfg->out_hidden, Dv = vcfg->hidden;
  const auto K = static_cast<int64_t>(vcfg->deepstack_visual_indexes.size());
  std::vector<HostTensor> keep;
  std::vector<NamedTensor> tensors;
  keep.reserve(8 + static_cast<size_t>(vcfg->depth));
  auto add = [&](const std::string& name, HostTensor t) {
    keep.push_back(std::move(t));
    tensors.push_back({name, keep.back().view()});
  };
  add("pixel_values", HostTensor::FromF32({pv.rows, pv.cols}, pv.data));
  std::vector<int32_t> g;
  for (const GridThw& t : pv.grids) g.insert(g.end(), {t.t, t.h, t.w});
  const bool videos = !visual.videos.empty();
  add(videos ? "video_grid_thw" : "image_grid_thw",
      HostTensor::FromI32({static_cast<int64_t>(pv.grids.size()), 3}, g));
  if (videos) {
    add("video_frame_indices",
        HostTensor::FromI32({static_cast<int64_t>(frame_indices.size())}, frame_indices));
    add("video_timestamps",
        HostTensor::FromF32({static_cast<int64_t>(timestamps.size())}, timestamps));
  }
  add("visual_embeds", HostTensor::FromF32({out.tokens, H}, out.embeds));
  add("deepstack_features", HostTensor::FromF32({K, out.tokens, H}, out.deepstack));
  if (diagnostics) {
    add("patch_embeds", HostTensor::FromF32({pv.rows, Dv}, diag.patch_embeds));
    add("pos_embeds", HostTensor::FromF32({pv.rows, Dv}, diag.pos_embeds));
    for (size_t j = 0; j < diag.blocks.size(); ++j) {
      add("vision_block." + std::to_string(j), HostTensor::FromF32({pv.rows, Dv}, diag.blocks[j]));
    }
  }
  VLS_RETURN_IF_ERROR(WriteSafetensors(out_path, tensors));
  std::fprintf(stderr, "[vision] %s: %zu %s, %lld patches -> %lld tokens (%s) -> %s\n",
               model_dir.c_str(), pv.grids.size(), videos ? "video(s)" : "image(s)",
               static_cast<long long>(pv.rows), static_cast<long long>(out.tokens),
               kernels::PrecisionName(precision), out_path.c_str());
  return Status::Ok();
}

}  // namespace

int RunVision(int argc, char** argv) { return RunCommand(VisionSpec(), argc, argv, Vision); }

}  // namespace vls::cli
