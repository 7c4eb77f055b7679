// `vlstack bench`: the shared pieces of its modes (bench_command.cc parses the flags and runs
// the throughput mode; bench_serve.cc the serving mode; bench_scenarios.cc the prefix-reuse
// and chunked-prefill scenarios).
//
// Every mode but --kernel-loop drives the BatchEngine that serves and timestamps each event as
// the engine delivers it (EventLog), so the figures are what a client of the engine sees.
#ifndef VLSTACK_CLI_BENCH_H_
#define VLSTACK_CLI_BENCH_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/quantile.h"  // Quantile
#include "runtime/batch_engine.h"
#include "runtime/image_encoder.h"
#include "runtime/loaded_model.h"
#include "runtime/media_source.h"
#include "tokenizer/tokenizer.h"

namespace vls::cli::bench {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b);
double Millis(Clock::time_point a, Clock::time_point b);

struct Stats {
  double min = 0, median = 0, max = 0;
};
// REQUIRES: !v.empty().
Stats Summarise(std::vector<double> v);
std::string StatsJson(const Stats& s);  // {"min":…,"median":…,"max":…}

// Mean, median and the q-quantile (linear interpolation between closest ranks, as numpy's
// default) of a sample; all 0 for an empty one.
struct Distribution {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
  size_t count = 0;
};
Distribution Distribute(const std::vector<double>& v);
std::string DistributionJson(const Distribution& d);  // {"mean":…,"p50":…,"p99":…,"max":…,…}

double PeakRssMb();

// `n` pseudo-random ordinary token ids (never an EOS, BOS or vision special id), from `seed`.
std::vector<int32_t> RandomTokens(const Qwen3Config& cfg, int64_t n, uint64_t seed);
// A greedy token request over `tokens` at sequential positions that generates exactly
// `max_new_tokens` (ignore_eos).
GenerationRequest TextRequest(const Qwen3Config& cfg, std::vector<int32_t> tokens,
                              int max_new_tokens);

// What one request did, as its events arrived.
struct RequestTrace {
  Clock::time_point submitted{};
  std::vector<Clock::time_point> times;  // one per token event
  std::vector<int> steps;                // the EventLog step counter at each token event
  std::vector<int32_t> tokens;
  int32_t cached_tokens = 0;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  Clock::time_point finished{};
};

// Records every event of an engine with the time of its delivery. Thread safety: Record runs
// on the stepping thread, the rest on any thread.
class EventLog {
 public:
  // Called after an event is recorded, outside the log's lock (it may Submit or Cancel);
  // returning false cancels the request.
  using Hook = std::function<bool(const TokenEvent&, const RequestTrace&)>;
  void set_hook(Hook hook) { hook_ = std::move(hook); }

  // The engine callback.
  bool Record(const TokenEvent& e);
  // Notes a submit (the time taken just before Submit was called).
  void Submitted(uint64_t id, Clock::time_point t);
  // The counter stamped on each event (a Step-driven loop counts its steps with it).
  void set_step(int step) { step_ = step; }
  // Waits until `n` requests have finished.
  void WaitFinished(size_t n);
  size_t finished() const;
  // A copy of every trace, by engine id.
  std::map<uint64_t, RequestTrace> Traces() const;
  RequestTrace Trace(uint64_t id) const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, RequestTrace> traces_;
  size_t finished_ = 0;
  int step_ = 0;  // written and read on the stepping thread
  Hook hook_;
};

// Runs Step until the engine is idle, advancing `log`'s step counter. Returns the first error
// event's message, if any request failed.
Status StepUntilIdle(BatchEngine& engine, EventLog& log);

// The loaded model and what every mode reports about the run.
struct Setup {
  std::string model_dir;
  std::string precision;
  const LoadedModel* model = nullptr;
  EngineOptions engine;  // from --prefill-chunk and --no-prefix-reuse
  double load_s = 0;
  bool json = false;
  int threads = 0;
};
// `"model":…,"precision":…,"threads":…,"kernels":…` (no braces).
std::string HeaderJson(const Setup& s);

// --prefill-chunk: one size (default EngineOptions{}), or a comma-separated list.
StatusOr<std::vector<int>> PrefillChunks(const Args& args);

// --capacity: at least `need` (requests must fit), `need` when absent.
StatusOr<int> CapacityFlag(const Args& args, int64_t need);

// Loads the model (with the load flags) for a capacity and slot count the mode chose.
using Loader = std::function<StatusOr<Setup>(int capacity, int slots)>;

// --image (throughput mode; bench_scenarios.cc). One repetition: a fresh engine; then, timed
// from the submit side, the images encoded by `encoder` (ImageEncoder::EncodeAll: decode,
// preprocess, the tower and its mergers; its cache off, so every rep encodes), the prompt
// built (ImageTextTokens, ExpandImagePads, BuildImagePrompt) and submitted through the
// DeepStack entry the engine serves, and the engine stepped until the first token.
struct ImageRep {
  double encode_ms = 0;  // EncodeAll
  double ttft_ms = 0;    // from before EncodeAll to the first token event
  int64_t patches = 0;   // Σ t·h·w over the images
  double flops = 0;      // VisionEncodeFlops of the images' grids
};
// `prompt` ordinary tokens with the images in the middle: half the text, then per image
// vision_start, image pad, vision_end, then the rest (one pad per image, before expansion).
std::vector<int32_t> ImageTextTokens(const Qwen3Config& cfg, int64_t prompt, size_t images,
                                     uint64_t seed);
StatusOr<ImageRep> RunImageRep(const LoadedModel& lm, const EngineOptions& eo,
                               const ImageEncoder& encoder, std::span<const MediaBytes> images,
                               int64_t prompt, uint64_t seed);

// --video (throughput mode; bench_scenarios.cc): as RunImageRep for one clip. The clip encoded
// by ImageEncoder::EncodeVideo (its cache off), the prompt of `prompt` text tokens with the
// video triple in the middle, its timestamped groups spliced in (SpliceVideoGroups, the
// timestamps tokenized by `tokenizer`), expanded and submitted, the engine stepped until the
// first token.
struct VideoRep {
  double decode_ms = 0, preprocess_ms = 0, encode_ms = 0;  // the encoder's own split
  double total_ms = 0;                                     // EncodeVideo as the caller sees it
  double ttft_ms = 0;  // from before EncodeVideo to the first token event
  int64_t frames = 0;  // decoded
  int64_t tokens = 0;  // visual tokens (T · h · w / merge²)
  int64_t prompt = 0;  // the expanded prompt's length
  GridThw grid;
};
StatusOr<VideoRep> RunVideoRep(const LoadedModel& lm, const EngineOptions& eo,
                               const ImageEncoder& encoder, const MediaBytes& video,
                               const VideoSamplingOptions& options, const tok::Tokenizer& tokenizer,
                               int64_t prompt, uint64_t seed);

// The modes besides the throughput one. Each reads its flags, loads, runs, prints its report
// (human-readable, or one JSON object with --json) and returns an error Status on failure.
Status RunServe(const Args& args, const Loader& load);
Status RunPrefixReuseScenario(const Args& args, const Loader& load);
Status RunChunkedPrefillScenario(const Args& args, const Loader& load);

}  // namespace vls::cli::bench

#endif  // VLSTACK_CLI_BENCH_H_
