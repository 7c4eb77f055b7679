// Images and videos to visual features: decode (image/decode.h, video/video_decode.h),
// preprocess from the model's preprocessor_config.json and video_preprocessor_config.json
// (vision/preprocess.h, vision/video_preprocess.h), run the vision tower and its DeepStack
// mergers (vision/vision_model.h), with an encoder cache: the same encoded bytes (by SHA-256,
// and for a video its sampling options) sent again reuse their features, so a multi-turn chat
// about one picture or clip encodes it once.
//
// Thread safety: Encode may run on several threads at once. The cache is guarded by a mutex;
// the tower itself runs on the language model's thread pool (one caller at a time). RunPaced
// hands work to the encoder's own worker thread, paced against the batch engine's steps
// (LoadedModel::pacer, ADR 0030): the server encodes there, never on its HTTP threads.
#ifndef VLSTACK_RUNTIME_IMAGE_ENCODER_H_
#define VLSTACK_RUNTIME_IMAGE_ENCODER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/paced_worker.h"
#include "base/pool_pacer.h"
#include "base/status.h"
#include "image/decode.h"
#include "runtime/image_prompt.h"
#include "runtime/loaded_model.h"
#include "runtime/media_source.h"
#include "video/video_decode.h"
#include "vision/image_processor_config.h"
#include "vision/video_preprocess.h"
#include "vision/video_processor_config.h"
#include "vision/vision_config.h"
#include "vision/vision_model.h"

namespace vls {

struct ImageEncoderOptions {
  // Bytes of encoder output the cache may hold (least recently used entries leave first);
  // 0 turns the cache off. An image larger than the whole budget is not cached.
  size_t cache_bytes = size_t{256} << 20;
  image::DecodeLimits decode;
  video::VideoLimits video;
  // Bounds on a request's own sampling options (vision/video_preprocess.h VideoSamplingOptions:
  // the OpenAI part's "fps" / "max_frames" / "num_frames", `--fps`, `--max-frames`): fps in
  // (0, max_video_fps], max_frames and num_frames in [1, max_video_frames]; max_video_frames also
  // caps the model's video_preprocessor_config.json max_frames.
  double max_video_fps = 60.0;
  int max_video_frames = 768;
};

// What a video becomes before any frame is decoded: its container's facts, the frames sampled,
// their timestamps and the grid.
struct VideoPlan {
  video::VideoInfo info;
  VideoSummary summary;
  int resized_height = 0, resized_width = 0;
  int64_t tokens = 0;  // T · h · w / merge²
};

// One image's features: grid (t, h, w) in patches, n = t·h·w / merge² rows.
struct EncodedImage {
  GridThw grid;
  int64_t tokens = 0;                 // n
  std::vector<float> embeds;          // [n, H]
  std::vector<float> deepstack;       // [K, n, H]
  std::optional<VideoSummary> video;  // set for a video (grid is then its [T, h, w])
  size_t bytes() const { return (embeds.size() + deepstack.size()) * sizeof(float); }
};

// LoadImageProcessorConfig, with a missing file reported as the model's inability to take
// images.
StatusOr<ImageProcessorConfig> LoadModelImageProcessorConfig(const std::string& dir);

// ImageEncoder::PlanVideo without an encoder (a command sizing its context before the model is
// loaded): the same checks of `options` against `bounds`, the same plan from `config`.
StatusOr<VideoPlan> PlanVideoBytes(std::span<const uint8_t> bytes, const std::string& label,
                                   const VideoProcessorConfig& config,
                                   const ImageEncoderOptions& bounds,
                                   const VideoSamplingOptions& options);

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

  // A video's plan from its container header alone (video/video_decode.h ProbeVideo), the
  // config's sampling with `options`, the clip's resize and the grid. InvalidArgument names
  // the option out of bounds or what the container declares wrong.
  StatusOr<VideoPlan> PlanVideo(std::span<const uint8_t> bytes, const std::string& label,
                                const VideoSamplingOptions& options) const;
  // One video: PlanVideo, then the sampled frames decoded, preprocessed (PreprocessVideo) and
  // encoded as one [T, h, w] item. `cancelled` (may be null) is polled between frames.
  StatusOr<std::shared_ptr<const EncodedImage>> EncodeVideo(
      std::span<const uint8_t> bytes, const std::string& label, const VideoSamplingOptions& options,
      const std::function<bool()>& cancelled = nullptr) const;

  // Runs `job` (which encodes with this encoder) on the encoder's worker thread, one job at a
  // time in order of arrival, as background work of the model's pacer: while the batch engine
  // runs requests, the job's pool loops and decoding run in the windows between its steps
  // (base/pool_pacer.h), so running streams keep their pace. The caller waits; `cancelled`
  // (may be null) drops a job still waiting for its turn (Cancelled). From a job, runs inline.
  Status RunPaced(const std::function<Status()>& job,
                  const std::function<bool()>& cancelled = nullptr) const {
    return worker_->Run(job, cancelled);
  }

  const VisionConfig& vision_config() const { return vision_->config(); }
  const ImageProcessorConfig& processor_config() const { return processor_; }
  const VideoProcessorConfig& video_processor_config() const { return video_processor_; }
  const VisionModel& vision() const { return *vision_; }

  struct Stats {
    uint64_t hits = 0, misses = 0;
    size_t entries = 0, bytes = 0;
    // Videos encoded (cache misses), their decoded frames and the wall seconds spent decoding
    // (with the waits for windows between the engine's steps while it runs requests),
    // preprocessing and running the tower on them.
    uint64_t videos = 0, video_frames = 0;
    double video_decode_seconds = 0, video_preprocess_seconds = 0, video_encode_seconds = 0;
    // Jobs run by RunPaced, their seconds waiting for their turn (behind other jobs), and the
    // seconds encoding work waited for windows between the engine's steps (PoolPacer::Stats).
    uint64_t paced_jobs = 0;
    double paced_queued_seconds = 0, paced_wait_seconds = 0;
  };
  Stats stats() const;

 private:
  ImageEncoder() = default;
  std::shared_ptr<const EncodedImage> Lookup(const std::string& key) const;
  void Insert(const std::string& key, std::shared_ptr<const EncodedImage> value) const;
  void CountVideo(uint64_t frames, double decode_s, double preprocess_s, double encode_s) const;
  // The tower over one clip's pixel values (one [T, h, w] grid), one temporal group at a time.
  StatusOr<VisionOutput> EncodeGroups(const PixelValues& pixels, const std::string& label,
                                      const std::function<bool()>& cancelled) const;

  ImageEncoderOptions options_;
  ImageProcessorConfig processor_;
  VideoProcessorConfig video_processor_;
  std::unique_ptr<VisionModel> vision_;
  int64_t hidden_ = 0;

  mutable std::mutex mu_;
  // Most recently used first.
  mutable std::list<std::pair<std::string, std::shared_ptr<const EncodedImage>>> lru_;
  mutable std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  mutable Stats stats_;
  PoolPacer* pacer_ = nullptr;  // the model's (LoadedModel::pacer)
  // Last: destroyed first, joining its thread while the rest is alive.
  std::unique_ptr<PacedWorker> worker_;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_IMAGE_ENCODER_H_
