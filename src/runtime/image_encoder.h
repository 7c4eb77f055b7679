// Images to visual features: decode (image/decode.h), preprocess from the model's
// preprocessor_config.json (vision/preprocess.h), run the vision tower and its DeepStack
// mergers (vision/vision_model.h), with an encoder cache: the same encoded bytes (by SHA-256)
// sent again reuse their features, so a multi-turn chat about one picture encodes it once.
//
// Thread safety: Encode may run on several threads at once. The cache is guarded by a mutex;
// the tower itself runs on the language model's thread pool (one caller at a time).
#ifndef VLSTACK_RUNTIME_IMAGE_ENCODER_H_
#define VLSTACK_RUNTIME_IMAGE_ENCODER_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "image/decode.h"
#include "runtime/image_prompt.h"
#include "runtime/loaded_model.h"
#include "runtime/media_source.h"
#include "vision/image_processor_config.h"
#include "vision/vision_config.h"
#include "vision/vision_model.h"

namespace vls {

struct ImageEncoderOptions {
  // Bytes of encoder output the cache may hold (least recently used entries leave first);
  // 0 turns the cache off. An image larger than the whole budget is not cached.
  size_t cache_bytes = size_t{256} << 20;
  image::DecodeLimits decode;
};

// One image's features: grid (t, h, w) in patches, n = t·h·w / merge² rows.
struct EncodedImage {
  GridThw grid;
  int64_t tokens = 0;            // n
  std::vector<float> embeds;     // [n, H]
  std::vector<float> deepstack;  // [K, n, H]
  size_t bytes() const { return (embeds.size() + deepstack.size()) * sizeof(float); }
};

// LoadImageProcessorConfig, with a missing file reported as the model's inability to take
// images.
StatusOr<ImageProcessorConfig> LoadModelImageProcessorConfig(const std::string& dir);

class ImageEncoder {
 public:
  // Reads preprocessor_config.json and the vision tower of the model folder `dir` that `model`
  // was loaded from; the tower runs with the model's kernel context (threads, precision). When
  // `model` was loaded from a prepared artifact the tower's weights are mapped from it
  // (LoadedModel::MappedVisionWeights) instead of prepared again.
  // NotFound when the model has no vision tower or no preprocessor_config.json.
  static StatusOr<std::unique_ptr<ImageEncoder>> Load(const std::string& dir,
                                                      const LoadedModel& model,
                                                      const ImageEncoderOptions& options);

  // One image from its encoded bytes; `label` names it in errors.
  StatusOr<std::shared_ptr<const EncodedImage>> Encode(std::span<const uint8_t> bytes,
                                                       const std::string& label) const;
  // Every image in order, joined (VisualFeatures: grids, [Nv, H] rows, [K, Nv, H] levels).
  StatusOr<VisualFeatures> EncodeAll(std::span<const MediaBytes> images) const;

  const VisionConfig& vision_config() const { return vision_->config(); }
  const ImageProcessorConfig& processor_config() const { return processor_; }
  const VisionModel& vision() const { return *vision_; }

  struct Stats {
    uint64_t hits = 0, misses = 0;
    size_t entries = 0, bytes = 0;
  };
  Stats stats() const;

 private:
  ImageEncoder() = default;
  std::shared_ptr<const EncodedImage> Lookup(const std::string& key) const;
  void Insert(const std::string& key, std::shared_ptr<const EncodedImage> value) const;

  ImageEncoderOptions options_;
  ImageProcessorConfig processor_;
  std::unique_ptr<VisionModel> vision_;
  int64_t hidden_ = 0;

  mutable std::mutex mu_;
  // Most recently used first.
  mutable std::list<std::pair<std::string, std::shared_ptr<const EncodedImage>>> lru_;
  mutable std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  mutable Stats stats_;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_IMAGE_ENCODER_H_
