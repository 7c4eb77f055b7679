// `vlstack bench`: prompt-processing and generation throughput of a model (CONTRACTS §6).
//
// Each repetition prefills `--prompt-tokens` fixed pseudo-random tokens into a fresh cache per
// slot (logits for the last row only, as a server would), then decodes `--gen-tokens` greedy
// steps with one row per slot in a single forward pass, so every weight is read once per step
// for all slots. Time to first token is the first slot's prefill including its logits.
//
// `--baseline-slots B` (an extension of the contract's interface) also runs B slots in every
// repetition, next to the `--slots` run (before it in even repetitions, after it in odd ones),
// and reports B's generation figures and the per-rep ratio of the two: a paired comparison a
// second apart, which a shared machine whose bandwidth swings within minutes cannot skew the way
// it skews two separate runs.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load_flags.h"
#include "runtime/loaded_model.h"
#include "runtime/sampler.h"

namespace vls::cli {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Stats {
  double min = 0, median = 0, max = 0;
};

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

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0 / 1e6;  // Linux reports KiB; MB = 1e6 bytes
}

int32_t Argmax(const float* v, int64_t n) {
  return ArgMax(std::span<const float>(v, static_cast<size_t>(n)));  // the engine's greedy pick
}

struct RepResult {
  double prompt_tps, gen_tps, ttft_ms;
};

RepResult RunRep(const Qwen3Model& model, int prompt, int gen, int slots, uint32_t seed) {
  const Qwen3Config& cfg = model.config();
  const int64_t H = cfg.hidden, V = cfg.vocab;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<int32_t> next(static_cast<size_t>(slots));
  std::vector<float> logits(static_cast<size_t>(slots * V));
  double prefill_s = 0, ttft_s = 0;
  for (int s = 0; s < slots; ++s) {
    caches.push_back(model.NewCache(prompt + gen));
    std::vector<int32_t> ids(static_cast<size_t>(prompt));
    for (int32_t& id : ids) id = tok(rng);
    std::vector<ForwardRow> rows(static_cast<size_t>(prompt));
    for (int p = 0; p < prompt; ++p)
      rows[static_cast<size_t>(p)] = {caches.back().get(), p, {p, p, p}};
    std::vector<float> x(static_cast<size_t>(prompt * H));  // [S, H]
    const auto t0 = Clock::now();
    model.Embed(ids, x.data());
    model.RunLayers(x.data(), rows, nullptr);
    std::vector<float> last(static_cast<size_t>(H));  // [1, H]
    model.FinalNorm(x.data() + (prompt - 1) * H, 1, last.data());
    model.Logits(last.data(), 1, logits.data());
    const double dt = Seconds(t0, Clock::now());
    next[static_cast<size_t>(s)] = Argmax(logits.data(), V);
    prefill_s += dt;
    if (s == 0) ttft_s = dt;
  }
  std::vector<float> x(static_cast<size_t>(slots * H));  // [slots, H]
  std::vector<float> h(static_cast<size_t>(slots * H));
  std::vector<ForwardRow> rows(static_cast<size_t>(slots));
  const auto t0 = Clock::now();
  for (int g = 0; g < gen; ++g) {
    for (int s = 0; s < slots; ++s) {
      const int idx = prompt + g;
      rows[static_cast<size_t>(s)] = {caches[static_cast<size_t>(s)].get(), idx, {idx, idx, idx}};
    }
    model.Embed(next, x.data());
    model.RunLayers(x.data(), rows, nullptr);
    model.FinalNorm(x.data(), slots, h.data());
    model.Logits(h.data(), slots, logits.data());
    // Greedy sampling of every slot (151936 logits each), spread over the model's pool as a
    // batch engine would, rather than on this thread while the pool waits.
    model.context().pool().ParallelFor(slots, 1, [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        next[static_cast<size_t>(s)] = Argmax(logits.data() + s * V, V);
      }
    });
  }
  const double gen_s = Seconds(t0, Clock::now());
  return {static_cast<double>(prompt) * slots / prefill_s,
          gen > 0 ? static_cast<double>(gen) * slots / gen_s : 0.0, ttft_s * 1e3};
}

}  // namespace

int RunBench(int argc, char** argv) {
  std::set<std::string> flags = {"model", "prompt-tokens", "gen-tokens",    "reps",
                                 "slots", "capacity",      "baseline-slots"};
  flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  auto args = Args::Parse(argc, argv, flags, {"json"});
  if (!args.ok()) return Fail("bench", args.status());
  auto dir = args->Require("model");
  if (!dir.ok()) return Fail("bench", dir.status());
  LoadOptions o;
  if (Status s = ApplyLoadFlags(*args, "bf16", &o); !s.ok()) return Fail("bench", s);
  const std::string precision = kernels::PrecisionName(o.precision);
  auto prompt = args->Int("prompt-tokens", 512, 1, 1 << 20);
  auto gen = args->Int("gen-tokens", 128, 0, 1 << 20);
  auto reps = args->Int("reps", 3, 1, 1000);
  auto slots = args->Int("slots", 1, 1, 256);
  auto baseline = args->Int("baseline-slots", 0, 1, 256);  // 0: not given
  for (const Status& s :
       {prompt.status(), gen.status(), reps.status(), slots.status(), baseline.status()}) {
    if (!s.ok()) return Fail("bench", s);
  }
  const bool paired = args->Get("baseline-slots").has_value();
  if (paired && *gen == 0) {
    return Fail("bench", InvalidArgument("--baseline-slots compares generation: --gen-tokens "
                                         "must be at least 1"));
  }
  // An artifact's identity includes the capacity: --capacity matches the one it was compiled
  // with.
  auto capacity = args->Int("capacity", *prompt + *gen, *prompt + *gen, 1 << 24);
  if (!capacity.ok()) return Fail("bench", capacity.status());
  o.capacity = static_cast<int>(*capacity);
  o.slots = static_cast<int>(*slots);
  o.progress = StderrProgress("bench");
  std::fprintf(stderr, "[bench] loading %s (%s%s%s)\n", dir->c_str(), precision.c_str(),
               o.artifact.empty() ? "" : ", artifact ", o.artifact.c_str());
  const Clock::time_point load0 = Clock::now();
  auto lm = LoadedModel::Load(*dir, o);
  if (!lm.ok()) return Fail("bench", lm.status());
  const double load_s = Seconds(load0, Clock::now());
  const Qwen3Model& model = (*lm)->model();
  // Memory the model needs: the prepared weights plus one KV cache per slot (K and V).
  const Qwen3Config& mc = model.config();
  const double weights_mb = static_cast<double>(model.prepared().size()) / 1e6;
  const double kv_mb = 2.0 * static_cast<double>(KvCache::ElementBytes(model.kv_dtype())) *
                       mc.layers * mc.kv_heads * mc.head_dim * static_cast<double>(o.capacity) *
                       static_cast<double>(o.slots) / 1e6;
  std::vector<double> ptps, gtps, ttft, base_gtps, ratio;
  for (int r = 0; r < *reps; ++r) {
    // The baseline runs first in even repetitions and second in odd ones, so neither run
    // always follows the other.
    const auto run_baseline = [&] {
      const RepResult b = RunRep(model, static_cast<int>(*prompt), static_cast<int>(*gen),
                                 static_cast<int>(*baseline), static_cast<uint32_t>(r + 1));
      std::fprintf(stderr, "[bench] rep %d/%lld: baseline %lld slots: generation %.2f tok/s\n",
                   r + 1, *reps, *baseline, b.gen_tps);
      base_gtps.push_back(b.gen_tps);
    };
    if (paired && r % 2 == 0) run_baseline();
    const RepResult res = RunRep(model, static_cast<int>(*prompt), static_cast<int>(*gen),
                                 static_cast<int>(*slots), static_cast<uint32_t>(r + 1));
    std::fprintf(stderr,
                 "[bench] rep %d/%lld: prompt %.2f tok/s, generation %.2f tok/s, ttft %.1f ms\n",
                 r + 1, *reps, res.prompt_tps, res.gen_tps, res.ttft_ms);
    if (paired && r % 2 == 1) run_baseline();
    if (paired) ratio.push_back(res.gen_tps / base_gtps.back());
    ptps.push_back(res.prompt_tps);
    gtps.push_back(res.gen_tps);
    ttft.push_back(res.ttft_ms);
  }
  const Stats p = Summarise(ptps), g = Summarise(gtps), t = Summarise(ttft);
  const int nthreads = model.context().pool().threads();
  if (args->Has("json")) {
    std::string extra;
    if (paired) {
      extra = ",\"baseline_slots\":" + std::to_string(*baseline) +
              ",\"baseline_generation_tokens_per_s\":" + StatsJson(Summarise(base_gtps)) +
              ",\"generation_ratio\":" + StatsJson(Summarise(ratio));
    }
    std::printf(
        "{\"model\":\"%s\",\"precision\":\"%s\",\"threads\":%d,\"kernels\":\"%s\","
        "\"prompt_tokens\":%lld,\"gen_tokens\":%lld,\"reps\":%lld,\"slots\":%lld,"
        "\"prompt_tokens_per_s\":%s,\"generation_tokens_per_s\":%s,"
        "\"time_to_first_token_ms\":%s,\"peak_rss_mb\":%.1f,\"weights_mb\":%.1f,"
        "\"kv_cache_mb\":%.1f,\"load_s\":%.2f%s}\n",
        dir->c_str(), precision.c_str(), nthreads, model.context().variant().name, *prompt, *gen,
        *reps, *slots, StatsJson(p).c_str(), StatsJson(g).c_str(), StatsJson(t).c_str(),
        PeakRssMb(), weights_mb, kv_mb, load_s, extra.c_str());
  } else {
    std::printf("model %s precision %s threads %d kernels %s slots %lld\n", dir->c_str(),
                precision.c_str(), nthreads, model.context().variant().name, *slots);
    std::printf("prompt tokens/s      min %.2f median %.2f max %.2f (%lld tokens)\n", p.min,
                p.median, p.max, *prompt);
    std::printf("generation tokens/s  min %.2f median %.2f max %.2f (%lld tokens x %lld slots)\n",
                g.min, g.median, g.max, *gen, *slots);
    std::printf("time to first token  min %.1f median %.1f max %.1f ms\n", t.min, t.median, t.max);
    if (paired) {
      const Stats b = Summarise(base_gtps), q = Summarise(ratio);
      std::printf("baseline generation  min %.2f median %.2f max %.2f (%lld slots)\n", b.min,
                  b.median, b.max, *baseline);
      std::printf(
          "generation ratio     min %.2f median %.2f max %.2f (%lld / %lld slots, per rep)\n",
          q.min, q.median, q.max, *slots, *baseline);
    }
    std::printf("peak RSS %.1f MB (prepared weights %.1f MB + KV cache %.1f MB), load %.2f s\n",
                PeakRssMb(), weights_mb, kv_mb, load_s);
  }
  return 0;
}

}  // namespace vls::cli
