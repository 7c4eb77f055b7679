#include "server/metrics.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

namespace vls::server {
namespace {

// Bucket bounds in seconds, for CPU inference: a first token takes from tens of milliseconds
// (short prompt, prefix cache) to minutes (long prompt with images on a small machine).
std::vector<double> LatencyBounds() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300};
}
// One decode step: about a millisecond (small model, large batch) to seconds (large model).
std::vector<double> InterTokenBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
}
// Waiting for a slot: nothing at all when one is free, minutes behind a full queue.
std::vector<double> QueueBounds() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

// Endpoints and outcomes with a 0 line before any traffic, so dashboards and alerts see them.
constexpr std::array<std::string_view, 2> kSeededEndpoints = {"chat", "completions"};
constexpr std::array<std::string_view, 5> kOutcomes = {"ok", "client_error", "server_error",
                                                       "rejected", "cancelled"};

void AppendHeader(std::string_view name, std::string_view type, std::string_view help,
                  std::string* out) {
  out->append("# HELP ").append(name).append(" ").append(help).append("\n");
  out->append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void AppendSample(std::string_view name, int64_t value, std::string* out) {
  out->append(name).append(" ").append(std::to_string(value)).append("\n");
}

void AppendCounter(std::string_view name, std::string_view help, int64_t value, std::string* out) {
  AppendHeader(name, "counter", help, out);
  AppendSample(name, value, out);
}

void AppendCounter(std::string_view name, std::string_view help, double value, std::string* out) {
  AppendHeader(name, "counter", help, out);
  out->append(name).append(" ").append(FormatSampleValue(value)).append("\n");
}

void AppendGauge(std::string_view name, std::string_view help, int64_t value, std::string* out) {
  AppendHeader(name, "gauge", help, out);
  AppendSample(name, value, out);
}

void AppendHistogram(std::string_view name, std::string_view help, const Histogram& h,
                     std::string* out) {
  AppendHeader(name, "histogram", help, out);
  h.Render(std::string(name), out);
}

// Counters only go up: a negative increment (a caller's bug) is dropped.
void AddNonNegative(std::atomic<int64_t>* counter, int64_t n) {
  if (n > 0) counter->fetch_add(n, std::memory_order_relaxed);
}

}  // namespace

std::string EscapeLabelValue(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string FormatSampleValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::array<char, 32> buf{};
  const auto result = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), result.ptr);
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  std::erase_if(bounds_, [](double b) { return !std::isfinite(b); });
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  // The first bucket whose bound is >= v (Prometheus buckets are `le`, less or equal).
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  const std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += v;
  ++count_;
}

void Histogram::Render(const std::string& name, std::string* out) const {
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    counts = counts_;
    sum = sum_;
    count = count_;
  }
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    const std::string le = i < bounds_.size() ? FormatSampleValue(bounds_[i]) : "+Inf";
    out->append(name).append("_bucket{le=\"").append(le).append("\"} ");
    out->append(std::to_string(cumulative)).append("\n");
  }
  out->append(name).append("_sum ").append(FormatSampleValue(sum)).append("\n");
  out->append(name).append("_count ").append(std::to_string(count)).append("\n");
}

uint64_t Histogram::count() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

double Histogram::sum() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return sum_;
}

ServerMetrics::ServerMetrics()
    : time_to_first_token_(LatencyBounds()),
      inter_token_latency_(InterTokenBounds()),
      request_duration_(LatencyBounds()),
      queue_time_(QueueBounds()) {
  for (const std::string_view endpoint : kSeededEndpoints) {
    for (const std::string_view outcome : kOutcomes) {
      requests_[{std::string(endpoint), std::string(outcome)}] = 0;
    }
  }
}

void ServerMetrics::CountRequest(std::string_view endpoint, std::string_view outcome) {
  std::pair<std::string, std::string> key(endpoint, outcome);
  const std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(key);
  if (it == requests_.end()) {
    if (requests_.size() >= kMaxRequestSeries) key = {"other", "other"};
    it = requests_.try_emplace(std::move(key), 0).first;
  }
  ++it->second;
}

void ServerMetrics::AddPromptTokens(int64_t prompt, int64_t cached) {
  AddNonNegative(&prompt_tokens_, prompt);
  AddNonNegative(&prompt_tokens_cached_, cached);
}

void ServerMetrics::AddGeneratedTokens(int64_t n) { AddNonNegative(&generation_tokens_, n); }

void ServerMetrics::ObserveTimeToFirstToken(double seconds) {
  time_to_first_token_.Observe(seconds);
}
void ServerMetrics::ObserveInterTokenLatency(double seconds) {
  inter_token_latency_.Observe(seconds);
}
void ServerMetrics::ObserveRequestDuration(double seconds) { request_duration_.Observe(seconds); }
void ServerMetrics::ObserveQueueTime(double seconds) { queue_time_.Observe(seconds); }

void ServerMetrics::CountStructured(StructuredKind kind) {
  const auto i = static_cast<size_t>(kind);
  if (i < structured_.size()) structured_[i].fetch_add(1, std::memory_order_relaxed);
}

std::string ServerMetrics::Render(const GaugeValues& g) const {
  std::string out;
  AppendHeader("vlstack_requests_total", "counter",
               "Finished HTTP requests by endpoint and outcome.", &out);
  {
    const std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, value] : requests_) {
      out.append("vlstack_requests_total{endpoint=\"").append(EscapeLabelValue(key.first));
      out.append("\",outcome=\"").append(EscapeLabelValue(key.second)).append("\"} ");
      out.append(std::to_string(value)).append("\n");
    }
  }
  AppendCounter("vlstack_prompt_tokens_total", "Prompt tokens of admitted requests.",
                prompt_tokens_.load(std::memory_order_relaxed), &out);
  AppendCounter("vlstack_prompt_tokens_cached_total",
                "Prompt tokens reused from a cache instead of computed.",
                prompt_tokens_cached_.load(std::memory_order_relaxed), &out);
  AppendCounter("vlstack_generation_tokens_total", "Tokens generated.",
                generation_tokens_.load(std::memory_order_relaxed), &out);
  AppendHeader("vlstack_structured_requests_total", "counter",
               "Admitted requests whose reply follows a format, grammar, regex or enforced tool "
               "calls, by kind.",
               &out);
  constexpr std::array<std::string_view, kStructuredKinds> kKinds = {"json_object", "json_schema",
                                                                     "grammar", "regex", "tools"};
  for (size_t i = 0; i < kKinds.size(); ++i) {
    out.append("vlstack_structured_requests_total{kind=\"").append(kKinds[i]).append("\"} ");
    out.append(std::to_string(structured_[i].load(std::memory_order_relaxed))).append("\n");
  }
  AppendCounter("vlstack_grammar_cache_hits_total",
                "Structured-output grammars reused from the compiled-grammar cache.",
                g.grammar_cache_hits, &out);
  AppendCounter("vlstack_grammar_cache_misses_total",
                "Structured-output grammars compiled (not found in the cache).",
                g.grammar_cache_misses, &out);
  AppendCounter("vlstack_speculative_verify_passes_total",
                "Decode passes that verified drafted tokens.", g.verify_passes, &out);
  AppendCounter("vlstack_speculative_draft_tokens_total", "Tokens drafted for verification.",
                g.draft_tokens, &out);
  AppendCounter("vlstack_speculative_accepted_tokens_total",
                "Drafted tokens accepted (emitted as drafted).", g.accepted_draft_tokens, &out);
  AppendCounter("vlstack_engine_steps_total", "Engine steps run.", g.engine_steps, &out);
  AppendCounter("vlstack_prefill_chunks_total", "Prompt chunks prefilled.", g.prefill_chunks, &out);
  AppendCounter("vlstack_mixed_passes_total",
                "Engine steps whose one forward pass carried prompt chunks and decode rows.",
                g.mixed_passes, &out);
  AppendCounter("vlstack_prefix_copies_total",
                "Admissions that copied a prompt prefix's KV rows from another slot.",
                g.copied_prefixes, &out);
  AppendCounter("vlstack_kv_preemptions_total",
                "Sequences preempted because the KV pool ran out (recomputed when resumed).",
                g.kv_preemptions, &out);
  AppendCounter("vlstack_prefix_cache_blocks_total",
                "Prompt KV blocks shared from the prefix cache instead of computed.",
                g.prefix_cache_blocks, &out);
  AppendCounter("vlstack_kv_evictions_total",
                "Free slots whose kept KV rows were dropped to make room in the pool.",
                g.kv_evictions, &out);
  AppendCounter("vlstack_videos_total", "Videos encoded (not served from the encoder cache).",
                g.videos, &out);
  AppendCounter("vlstack_video_frames_total", "Frames decoded from the videos encoded.",
                g.video_frames, &out);
  AppendCounter("vlstack_video_decode_seconds_total", "Seconds spent decoding video frames.",
                g.video_decode_seconds, &out);
  AppendCounter("vlstack_video_preprocess_seconds_total",
                "Seconds spent resizing and patching video frames.", g.video_preprocess_seconds,
                &out);
  AppendCounter("vlstack_video_encode_seconds_total",
                "Seconds the vision tower spent on video frames.", g.video_encode_seconds, &out);
  AppendCounter("vlstack_encoder_jobs_total",
                "Requests whose images or videos the image encoder's worker decoded and encoded.",
                g.encoder_jobs, &out);
  AppendCounter("vlstack_encoder_queue_seconds_total",
                "Seconds those requests waited for the image encoder's worker.",
                g.encoder_queue_seconds, &out);
  AppendCounter("vlstack_encoder_paced_wait_seconds_total",
                "Seconds image and video encoding waited for windows between engine steps.",
                g.encoder_paced_wait_seconds, &out);
  AppendGauge("vlstack_queue_depth", "Requests waiting for a slot.", g.queue_depth, &out);
  AppendGauge("vlstack_slots_busy", "Engine slots serving a request.", g.slots_busy, &out);
  AppendGauge("vlstack_slots_total", "Engine slots.", g.slots_total, &out);
  AppendGauge("vlstack_kv_blocks_total", "Blocks of the engine's KV pool.", g.kv_blocks, &out);
  AppendGauge("vlstack_kv_blocks_used", "KV pool blocks held at the end of the last engine step.",
              g.kv_blocks_used, &out);
  AppendGauge("vlstack_kv_blocks_cached",
              "KV pool blocks kept for the prefix cache that no sequence references.",
              g.kv_blocks_cached, &out);
  AppendGauge("vlstack_requests_in_flight", "HTTP requests being handled.", g.requests_in_flight,
              &out);
  AppendGauge("vlstack_draining", "1 while the server drains its requests to stop.", g.draining,
              &out);
  AppendHistogram("vlstack_time_to_first_token_seconds",
                  "Seconds from a request's arrival to its first generated token.",
                  time_to_first_token_, &out);
  AppendHistogram("vlstack_inter_token_latency_seconds",
                  "Seconds between consecutive generated tokens of a request.",
                  inter_token_latency_, &out);
  AppendHistogram("vlstack_request_duration_seconds",
                  "Seconds from a request's arrival to its last byte.", request_duration_, &out);
  AppendHistogram("vlstack_queue_time_seconds", "Seconds a request waited for a slot.", queue_time_,
                  &out);
  return out;
}

}  // namespace vls::server
