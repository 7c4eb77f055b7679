// `vlstack bench --serve`: a serving benchmark in the manner of vLLM's benchmark_serving. The
// engine steps on its own thread (BatchEngine::Start); a client thread submits `--requests`
// requests at Poisson arrival times (`--rate` per second, from `--seed`; `inf` submits them all
// at once); every event is timestamped as the engine delivers it.
//
// Per request: TTFT = first token - submit; inter-token latencies (ITL) = gaps between its
// consecutive tokens; end-to-end latency = last token - submit. Throughputs are over the whole
// run: from the first submit to the last finish.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <thread>

#include "cli/bench.h"

namespace vls::cli::bench {

namespace {

// Arrival offsets in seconds from the start: exponential gaps at `rate` (all 0 when infinite).
std::vector<double> ArrivalTimes(int n, double rate, uint64_t seed) {
  std::vector<double> at(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return at;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (double& a : at) {
    a = t;
    t += gap(rng);
  }
  return at;
}

}  // namespace

Status RunServe(const Args& args, const Loader& load) {
  VLS_ASSIGN_OR_RETURN(long long n, args.Int("requests", 16, 1, 1 << 20));
  VLS_ASSIGN_OR_RETURN(long long prompt, args.Int("prompt-tokens", 512, 1, 1 << 20));
  VLS_ASSIGN_OR_RETURN(long long gen, args.Int("gen-tokens", 128, 1, 1 << 20));
  VLS_ASSIGN_OR_RETURN(long long slots, args.Int("slots", 1, 1, 256));
  VLS_ASSIGN_OR_RETURN(long long seed, args.Int("seed", 0, 0, std::numeric_limits<int64_t>::max()));
  double rate = std::numeric_limits<double>::infinity();
  if (args.Get("rate").value_or("inf") != "inf") {
    VLS_ASSIGN_OR_RETURN(rate, args.Double("rate", 0));
    if (rate <= 0) return InvalidArgument("--rate must be positive (requests per second) or inf");
  }
  VLS_ASSIGN_OR_RETURN(int capacity, CapacityFlag(args, prompt + gen));
  VLS_ASSIGN_OR_RETURN(Setup setup, load(capacity, static_cast<int>(slots)));
  const Qwen3Config& cfg = setup.model->config();

  // Every request is built before the clock starts.
  std::vector<GenerationRequest> requests;
  for (long long i = 0; i < n; ++i) {
    requests.push_back(
        TextRequest(cfg, RandomTokens(cfg, prompt, static_cast<uint64_t>(seed) * 1000003 + i + 1),
                    static_cast<int>(gen)));
  }
  const std::vector<double> arrivals =
      ArrivalTimes(static_cast<int>(n), rate, static_cast<uint64_t>(seed));

  EventLog log;
  VLS_ASSIGN_OR_RETURN(
      std::unique_ptr<BatchEngine> engine_ptr,
      BatchEngine::Create(
          *setup.model, [&log](const TokenEvent& e) { return log.Record(e); }, setup.engine));
  BatchEngine& engine = *engine_ptr;
  engine.Start();
  Status client_status = Status::Ok();
  const Clock::time_point start = Clock::now();
  size_t submitted = 0;
  std::thread client([&] {
    for (size_t i = 0; i < requests.size(); ++i) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(arrivals[i])));
      const Clock::time_point t = Clock::now();
      StatusOr<uint64_t> id = engine.Submit(std::move(requests[i]));
      if (!id.ok()) {
        client_status = id.status();
        return;
      }
      log.Submitted(*id, t);
      ++submitted;
    }
  });
  client.join();
  log.WaitFinished(submitted);
  engine.Stop();
  VLS_RETURN_IF_ERROR(client_status);

  std::vector<double> ttft, itl, e2e;
  int64_t out_tokens = 0;
  Clock::time_point end = start;
  for (const auto& [id, t] : log.Traces()) {
    if (t.finish == FinishReason::kError) return Internal("a benchmark request failed: " + t.error);
    if (t.times.empty()) return Internal("a benchmark request generated nothing");
    out_tokens += static_cast<int64_t>(t.times.size());
    ttft.push_back(Millis(t.submitted, t.times.front()));
    for (size_t i = 1; i < t.times.size(); ++i) itl.push_back(Millis(t.times[i - 1], t.times[i]));
    e2e.push_back(Millis(t.submitted, t.times.back()));
    end = std::max(end, t.finished);
  }
  const double duration = Seconds(start, end);
  const Distribution dt = Distribute(ttft), di = Distribute(itl), de = Distribute(e2e);
  const double req_tps = static_cast<double>(n) / duration;
  const double out_tps = static_cast<double>(out_tokens) / duration;
  const double in_tps = static_cast<double>(n * prompt) / duration;
  const EngineCounters c = engine.counters();
  char rate_text[32];
  std::snprintf(rate_text, sizeof(rate_text), std::isinf(rate) ? "\"inf\"" : "%.3f", rate);
  if (setup.json) {
    std::printf(
        "{%s,\"mode\":\"serve\",\"requests\":%lld,\"rate\":%s,\"seed\":%lld,\"slots\":%lld,"
        "\"prompt_tokens\":%lld,\"gen_tokens\":%lld,\"prefill_chunk\":%d,\"prefix_reuse\":%s,"
        "\"duration_s\":%.3f,\"request_throughput\":%.3f,\"input_token_throughput\":%.3f,"
        "\"output_token_throughput\":%.3f,\"ttft_ms\":%s,\"itl_ms\":%s,\"e2e_latency_ms\":%s,"
        "\"engine_steps\":%llu,\"prefill_chunks\":%llu,\"mixed_passes\":%llu,\"cached_tokens\":%"
        "llu,"
        "\"peak_rss_mb\":%.1f,\"load_s\":%.2f}\n",
        HeaderJson(setup).c_str(), n, rate_text, seed, slots, prompt, gen,
        setup.engine.prefill_chunk, setup.engine.prefix_reuse ? "true" : "false", duration, req_tps,
        in_tps, out_tps, DistributionJson(dt).c_str(), DistributionJson(di).c_str(),
        DistributionJson(de).c_str(), static_cast<unsigned long long>(c.steps),
        static_cast<unsigned long long>(c.prefill_chunks),
        static_cast<unsigned long long>(c.mixed_passes),
        static_cast<unsigned long long>(c.cached_tokens), PeakRssMb(), setup.load_s);
    return Status::Ok();
  }
  std::printf("model %s precision %s threads %d slots %lld prefill chunk %d prefix reuse %s\n",
              setup.model_dir.c_str(), setup.precision.c_str(), setup.threads, slots,
              setup.engine.prefill_chunk, setup.engine.prefix_reuse ? "on" : "off");
  std::printf(
      "requests %lld (%lld prompt + %lld generated tokens each), rate %s req/s, seed %lld\n", n,
      prompt, gen, std::isinf(rate) ? "inf" : rate_text, seed);
  std::printf("duration                 %.2f s (%llu engine steps)\n", duration,
              static_cast<unsigned long long>(c.steps));
  std::printf("request throughput       %.3f req/s\n", req_tps);
  std::printf("input token throughput   %.2f tok/s\n", in_tps);
  std::printf("output token throughput  %.2f tok/s\n", out_tps);
  std::printf("%-24s %10s %10s %10s %10s\n", "", "mean", "p50", "p99", "max");
  const auto row = [](const char* name, const Distribution& d) {
    std::printf("%-24s %10.2f %10.2f %10.2f %10.2f\n", name, d.mean, d.p50, d.p99, d.max);
  };
  row("time to first token ms", dt);
  row("inter-token latency ms", di);
  row("end-to-end latency ms", de);
  std::printf("peak RSS %.1f MB, load %.2f s\n", PeakRssMb(), setup.load_s);
  return Status::Ok();
}

}  // namespace vls::cli::bench
