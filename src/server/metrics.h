// Prometheus metrics of `vlstack serve` (GET /metrics), in the text exposition format 0.0.4:
// https://prometheus.io/docs/instrumenting/exposition_formats/
//
//   vlstack_requests_total{endpoint,outcome}     counter: finished HTTP requests
//   vlstack_prompt_tokens_total                  counter: prompt tokens of admitted requests
//   vlstack_prompt_tokens_cached_total           counter: of those, served from a prefix cache
//   vlstack_generation_tokens_total              counter: tokens generated
//   vlstack_speculative_verify_passes_total, vlstack_speculative_draft_tokens_total,
//   vlstack_speculative_accepted_tokens_total    counters: speculative decoding, from the engine
//   vlstack_engine_steps_total, vlstack_prefill_chunks_total,
//   vlstack_mixed_passes_total                   counters: engine steps, prompt chunks, and the
//                                                steps whose one pass carried prefill and decode
//   vlstack_prefix_copies_total                  counter: admissions that copied a prompt
//                                                prefix's KV rows from another slot
//   vlstack_kv_preemptions_total, vlstack_kv_evictions_total   counters: sequences preempted
//                                                because the KV pool ran out (resumed later), and
//                                                free slots' kept rows dropped to make room
//   vlstack_kv_blocks_total, vlstack_kv_blocks_used   gauges: the KV pool's blocks, and those
//                                                held at the end of the last engine step
//   vlstack_prefix_cache_blocks_total            counter: prompt blocks shared from the prefix
//                                                cache instead of computed
//   vlstack_kv_blocks_cached                     gauge: cached blocks no sequence references
//   vlstack_videos_total, vlstack_video_frames_total    counters: videos encoded (encoder cache
//                                                misses) and their decoded frames
//   vlstack_video_decode_seconds_total, vlstack_video_preprocess_seconds_total,
//   vlstack_video_encode_seconds_total           counters: seconds decoding, preprocessing and
//                                                running the vision tower on them
//   vlstack_structured_requests_total{kind}      counter: admitted requests whose reply follows
//                                                a json_object, json_schema, grammar or regex, or
//                                                enforced tool calls ("tools")
//   vlstack_grammar_cache_hits_total, vlstack_grammar_cache_misses_total   counters: compiled
//                                                grammars reused from the cache and compiled
//   vlstack_queue_depth, vlstack_slots_busy, vlstack_slots_total,
//   vlstack_requests_in_flight, vlstack_draining gauges, read from the server at render time
//   vlstack_time_to_first_token_seconds, vlstack_inter_token_latency_seconds,
//   vlstack_request_duration_seconds, vlstack_queue_time_seconds   histograms
//
// Thread safety: every method of Histogram and ServerMetrics may be called from any thread at
// any time; a render sees each histogram and the request counts in one consistent state.
#ifndef VLSTACK_SERVER_METRICS_H_
#define VLSTACK_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vls::server {

// The Content-Type of a /metrics response.
inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// `s` as a label value inside double quotes: backslash, double quote and newline escaped.
std::string EscapeLabelValue(std::string_view s);
// A sample value as Prometheus reads it: shortest round-trip decimal, "+Inf", "-Inf" or "NaN".
std::string FormatSampleValue(double v);

// A histogram with fixed bucket upper bounds (the +Inf bucket is implicit).
class Histogram {
 public:
  // The bounds are sorted and duplicates and non-finite values dropped.
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts one observation; NaN is ignored (it would poison _sum).
  void Observe(double v);
  // Appends the `name_bucket{le="..."}` lines (cumulative, ending with le="+Inf"), `name_sum` and
  // `name_count` for metric `name`, without # HELP / # TYPE.
  void Render(const std::string& name, std::string* out) const;

  const std::vector<double>& upper_bounds() const { return bounds_; }
  uint64_t count() const;
  double sum() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = above every bound
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Values the server reads from its queue and engine when /metrics is asked for: gauges, and the
// engine's own (monotone) speculation counters.
struct GaugeValues {
  int64_t queue_depth = 0, slots_busy = 0, slots_total = 0, requests_in_flight = 0;
  int64_t draining = 0;  // 1 while SIGTERM drains the requests in flight
  int64_t verify_passes = 0, draft_tokens = 0, accepted_draft_tokens = 0;
  // The engine's steps, prefill chunks, and steps whose one pass carried both prefill chunks and
  // decode rows (EngineCounters), monotone.
  int64_t engine_steps = 0, prefill_chunks = 0, mixed_passes = 0;
  // Admissions that copied a prompt prefix's KV rows from another slot, monotone.
  int64_t copied_prefixes = 0;
  // Paged KV memory (EngineCounters): preemptions and evictions (monotone), the pool's blocks and
  // those in use.
  int64_t kv_preemptions = 0, kv_evictions = 0, kv_blocks = 0, kv_blocks_used = 0;
  // The prefix cache (EngineCounters): blocks shared (monotone), cached blocks now.
  int64_t prefix_cache_blocks = 0, kv_blocks_cached = 0;
  // The image encoder's video counters (ImageEncoder::Stats), monotone; 0 without an encoder.
  int64_t videos = 0, video_frames = 0;
  double video_decode_seconds = 0, video_preprocess_seconds = 0, video_encode_seconds = 0;
  // The image encoder's worker (ImageEncoder::Stats), monotone: requests whose images and videos
  // it encoded, their seconds queued behind one another, and the seconds their encoding waited
  // for windows between the engine's steps.
  int64_t encoder_jobs = 0;
  double encoder_queue_seconds = 0, encoder_paced_wait_seconds = 0;
  // The compiled structured-output grammars' cache (ChatPipeline::grammar_cache()), monotone: a
  // hit reuses a compiled schema, grammar or regex; a miss compiles one.
  int64_t grammar_cache_hits = 0, grammar_cache_misses = 0;
};

// What a structured request asked its reply to follow (vlstack_structured_requests_total's kind
// label); a request with a reply format and enforced tool calls counts under both.
enum class StructuredKind : uint8_t { kJsonObject, kJsonSchema, kGrammar, kRegex, kTools };
inline constexpr size_t kStructuredKinds = 5;

class ServerMetrics {
 public:
  // Distinct (endpoint, outcome) pairs kept; later new pairs count under ("other", "other") so a
  // caller passing unexpected labels cannot grow the output without bound.
  static constexpr size_t kMaxRequestSeries = 64;

  ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // One finished HTTP request: endpoint "chat" | "completions" | "tokenize" | "detokenize" |
  // "models" | "health" | "metrics" | "other"; outcome "ok" | "client_error" | "server_error" |
  // "rejected" (429/503) | "cancelled" (the client went away).
  void CountRequest(std::string_view endpoint, std::string_view outcome);
  // Prompt tokens of one admitted request, `cached` of them reused from a cache.
  void AddPromptTokens(int64_t prompt, int64_t cached);
  void AddGeneratedTokens(int64_t n);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveRequestDuration(double seconds);
  void ObserveQueueTime(double seconds);
  void CountStructured(StructuredKind kind);

  // The whole /metrics body.
  std::string Render(const GaugeValues& g) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> requests_;  // guarded by mu_
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> prompt_tokens_cached_{0};
  std::atomic<int64_t> generation_tokens_{0};
  std::array<std::atomic<int64_t>, kStructuredKinds> structured_{};
  Histogram time_to_first_token_;
  Histogram inter_token_latency_;
  Histogram request_duration_;
  Histogram queue_time_;
};

}  // namespace vls::server

#endif  // VLSTACK_SERVER_METRICS_H_
