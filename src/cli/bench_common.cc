#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "cli/bench.h"

namespace vls::cli::bench {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Millis(Clock::time_point a, Clock::time_point b) { return 1e3 * Seconds(a, b); }

Stats Summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {v.front(), median, v.back()};
}

std::string StatsJson(const Stats& s) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "{\"min\":%.3f,\"median\":%.3f,\"max\":%.3f}", s.min, s.median,
                s.max);
  return buf;
}

Distribution Distribute(const std::vector<double>& v) {
  Distribution d;
  d.count = v.size();
  if (v.empty()) return d;
  d.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  d.p50 = Quantile(v, 0.5);
  d.p99 = Quantile(v, 0.99);
  d.max = *std::max_element(v.begin(), v.end());
  return d;
}

std::string DistributionJson(const Distribution& d) {
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "{\"mean\":%.3f,\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f,\"n\":%zu}", d.mean, d.p50,
                d.p99, d.max, d.count);
  return buf;
}

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0 / 1e6;  // Linux reports KiB; MB = 1e6 bytes
}

std::vector<int32_t> RandomTokens(const Qwen3Config& cfg, int64_t n, uint64_t seed) {
  std::set<int32_t> avoid(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end());
  for (int id : {cfg.bos_token_id, cfg.image_token_id, cfg.video_token_id,
                 cfg.vision_start_token_id, cfg.vision_end_token_id}) {
    if (id >= 0) avoid.insert(id);
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) {
    do {
      id = tok(rng);
    } while (avoid.count(id) > 0);
  }
  return ids;
}

GenerationRequest TextRequest(const Qwen3Config& cfg, std::vector<int32_t> tokens,
                              int max_new_tokens) {
  GenerationRequest r;
  r.positions = SequentialPositions(cfg.position_mode, static_cast<int64_t>(tokens.size()));
  r.tokens = std::move(tokens);
  r.max_new_tokens = max_new_tokens;
  r.ignore_eos = true;
  return r;
}

bool EventLog::Record(const TokenEvent& e) {
  const Clock::time_point now = Clock::now();
  RequestTrace copy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RequestTrace& t = traces_[e.request_id];
    if (e.token >= 0) {
      t.times.push_back(now);
      t.steps.push_back(step_);
      t.tokens.push_back(e.token);
    }
    t.cached_tokens = e.cached_tokens;
    if (e.finish != FinishReason::kNone) {
      t.finish = e.finish;
      t.error = e.error;
      t.finished = now;
      ++finished_;
      cv_.notify_all();
    }
    if (hook_) copy = t;
  }
  return hook_ ? hook_(e, copy) : true;
}

void EventLog::Submitted(uint64_t id, Clock::time_point t) {
  std::lock_guard<std::mutex> lock(mu_);
  traces_[id].submitted = t;
}

void EventLog::WaitFinished(size_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_ >= n; });
}

size_t EventLog::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

std::map<uint64_t, RequestTrace> EventLog::Traces() const {
  std::lock_guard<std::mutex> lock(mu_);
  return traces_;
}

RequestTrace EventLog::Trace(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = traces_.find(id);
  return it == traces_.end() ? RequestTrace{} : it->second;
}

Status StepUntilIdle(BatchEngine& engine, EventLog& log) {
  int step = 0;
  std::string error;
  while (!engine.Idle()) {
    log.set_step(++step);
    for (const TokenEvent& e : engine.Step()) {
      if (e.finish == FinishReason::kError && error.empty()) error = e.error;
    }
  }
  if (!error.empty()) return Internal("a benchmark request failed: " + error);
  return Status::Ok();
}

StatusOr<int> CapacityFlag(const Args& args, int64_t need) {
  // An artifact's identity includes the capacity: --capacity matches the one it was compiled
  // with.
  VLS_ASSIGN_OR_RETURN(long long c, args.Int("capacity", need, need, kMaxCapacity));
  return static_cast<int>(c);
}

// --prefill-chunk: one size, or (chunked-prefill scenario) a comma-separated list.
StatusOr<std::vector<int>> PrefillChunks(const Args& args) {
  const std::string v =
      args.Get("prefill-chunk").value_or(std::to_string(EngineOptions{}.prefill_chunk));
  std::vector<int> chunks;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long c = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || c < 0 || c > (1 << 24)) {
      return InvalidArgument("--prefill-chunk: '" + item + "' is not a size in [0, 16777216]");
    }
    chunks.push_back(static_cast<int>(c));
  }
  if (chunks.empty()) return InvalidArgument("--prefill-chunk needs a value");
  return chunks;
}

std::string HeaderJson(const Setup& s) {
  const Qwen3Model& m = s.model->model();
  return "\"model\":" + nlohmann::json(s.model_dir).dump() + ",\"precision\":\"" + s.precision +
         "\",\"threads\":" + std::to_string(m.context().pool().threads()) + ",\"kernels\":\"" +
         m.context().variant().name + "\"";
}

}  // namespace vls::cli::bench
