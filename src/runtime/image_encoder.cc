#include "runtime/image_encoder.h"

#include <optional>
#include <utility>

#include "vision/preprocess.h"

namespace vls {

StatusOr<ImageProcessorConfig> LoadModelImageProcessorConfig(const std::string& dir) {
  auto pc = LoadImageProcessorConfig(dir);
  if (!pc.ok() && pc.status().code() == StatusCode::kNotFound) {
    return NotFound(dir +
                    " has no preprocessor_config.json, so this model cannot take images "
                    "(the folder does not describe its vision preprocessing)");
  }
  return pc;
}

StatusOr<std::unique_ptr<ImageEncoder>> ImageEncoder::Load(const std::string& dir,
                                                           const LoadedModel& model,
                                                           const ImageEncoderOptions& options) {
  VLS_ASSIGN_OR_RETURN(std::optional<VisionConfig> vcfg, LoadVisionConfig(dir, model.config()));
  if (!vcfg) {
    return NotFound(dir + ": the model has no vision tower (config.json has no vision_config)");
  }
  std::unique_ptr<ImageEncoder> e(new ImageEncoder());
  e->options_ = options;
  VLS_ASSIGN_OR_RETURN(e->processor_, LoadModelImageProcessorConfig(dir));
  if (e->processor_.patch_size != vcfg->patch_size ||
      e->processor_.temporal_patch_size != vcfg->temporal_patch_size ||
      e->processor_.merge_size != vcfg->spatial_merge_size) {
    return InvalidArgument(
        dir + ": preprocessor_config.json (patch " + std::to_string(e->processor_.patch_size) +
        ", temporal " + std::to_string(e->processor_.temporal_patch_size) + ", merge " +
        std::to_string(e->processor_.merge_size) +
        ") does not match config.json's vision_config (patch " + std::to_string(vcfg->patch_size) +
        ", temporal " + std::to_string(vcfg->temporal_patch_size) + ", merge " +
        std::to_string(vcfg->spatial_merge_size) + ")");
  }
  VLS_ASSIGN_OR_RETURN(e->video_processor_, LoadVideoProcessorConfig(dir));
  VLS_RETURN_IF_ERROR(CheckVideoConfigAgainstVision(e->video_processor_, *vcfg).WithContext(dir));
  // A model loaded from an artifact maps the tower's prepared weights from it (LoadedModel
  // checked their layout); otherwise they are prepared here.
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedVisionWeights> mapped, model.MappedVisionWeights());
  if (mapped != nullptr) {
    if (CanonicalVisionConfigText(*vcfg) != CanonicalVisionConfigText(*model.vision_config())) {
      return FailedPrecondition(dir +
                                ": config.json's vision_config differs from the one the model "
                                "was loaded with; load the model again");
    }
    VLS_ASSIGN_OR_RETURN(e->vision_, VisionModel::FromPrepared(dir, *vcfg, model.model().context(),
                                                               std::move(mapped)));
  } else {
    VLS_ASSIGN_OR_RETURN(e->vision_, VisionModel::Load(dir, *vcfg, model.model().context()));
  }
  e->hidden_ = model.config().hidden;
  e->pacer_ = &model.pacer();
  e->worker_ = std::make_unique<PacedWorker>(model.pacer());
  return e;
}

std::shared_ptr<const EncodedImage> ImageEncoder::Lookup(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ImageEncoder::Insert(const std::string& key, std::shared_ptr<const EncodedImage> value) const {
  const size_t size = value->bytes();
  if (size > options_.cache_bytes) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key) != 0) return;  // another thread encoded it meanwhile
  while (stats_.bytes + size > options_.cache_bytes && !lru_.empty()) {
    stats_.bytes -= lru_.back().second->bytes();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key, std::move(value));
  index_[key] = lru_.begin();
  stats_.bytes += size;
  stats_.entries = lru_.size();
}

ImageEncoder::Stats ImageEncoder::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.entries = lru_.size();
  const PacedWorker::Stats w = worker_->stats();
  s.paced_jobs = w.jobs;
  s.paced_queued_seconds = w.queued_seconds;
  s.paced_wait_seconds = pacer_->stats().waited_seconds;
  return s;
}

StatusOr<std::shared_ptr<const EncodedImage>> ImageEncoder::Encode(std::span<const uint8_t> bytes,
                                                                   const std::string& label) const {
  const std::string key = Sha256Hex(bytes.data(), bytes.size());
  if (auto hit = Lookup(key)) return hit;
  // Decoding and preprocessing are serial work beside the engine's steps: one paced unit.
  std::optional<PoolPacer::Unit> unit(std::in_place, *pacer_);
  VLS_ASSIGN_OR_RETURN(image::RgbImage img, image::DecodeImage(bytes, label, options_.decode));
  auto pixels = PreprocessImages(std::span<const image::RgbImage>(&img, 1), processor_);
  if (!pixels.ok()) return pixels.status().WithContext(label);
  unit.reset();
  auto out = vision_->Encode(pixels->data, pixels->rows, pixels->grids, nullptr);
  if (!out.ok()) return out.status().WithContext(label);
  if (out->embeds.size() != static_cast<size_t>(out->tokens * hidden_)) {
    return Internal(label + ": the vision tower returned rows of the wrong width");
  }
  auto enc = std::make_shared<EncodedImage>();
  enc->grid = pixels->grids[0];
  enc->tokens = out->tokens;
  enc->embeds = std::move(out->embeds);
  enc->deepstack = std::move(out->deepstack);
  if (options_.cache_bytes > 0) Insert(key, enc);
  return std::shared_ptr<const EncodedImage>(std::move(enc));
}

StatusOr<VisualFeatures> ImageEncoder::EncodeAll(std::span<const MediaBytes> images) const {
  VisualFeatures f;
  f.hidden = hidden_;
  f.levels = static_cast<int64_t>(vision_->config().deepstack_visual_indexes.size());
  for (const MediaBytes& m : images) {
    VLS_ASSIGN_OR_RETURN(std::shared_ptr<const EncodedImage> e, Encode(m.bytes, m.label));
    f.Append(e->grid, e->tokens, e->embeds, e->deepstack);
  }
  return f;
}

}  // namespace vls
