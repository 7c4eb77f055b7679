// `vlstack bench`: prompt-processing and generation throughput of a model (docs/contracts.md §6), a
// serving benchmark and two scenario benchmarks, all through the BatchEngine that serves.
//
// Throughput mode (the default): each repetition submits `--slots` requests of
// `--prompt-tokens` pseudo-random tokens that generate exactly `--gen-tokens` greedy tokens
// (ignore_eos) to a fresh engine, steps it until idle and timestamps every event. Prompt tok/s
// is all prompt tokens over the prefill phase (submit until every request has its first token),
// generation tok/s the tokens of the steps after that over their time (the decode phase, every
// slot active), time to first token the first request's. `--kernel-loop` measures the old
// direct loop on Qwen3Model instead (no engine, no sampler), to separate engine costs from
// kernel costs.
//
// `--baseline-slots B` (an extension of the contract's interface) also runs B slots in every
// repetition, next to the `--slots` run (before it in even repetitions, after it in odd ones),
// and reports B's generation figures and the per-rep ratio of the two: a paired comparison a
// second apart, which a shared machine whose bandwidth swings within minutes cannot skew the way
// it skews two separate runs.
//
// `--speculate ngram` runs every repetition twice, plain and speculative (in alternating order,
// paired as --baseline-slots is), and reports both generation rates, their per-rep ratio, the
// share of drafted tokens accepted and the tokens per verify pass (docs/speculative.md).
//
// `--image FILE` (repeatable) adds, in every repetition after the text run, an image request on
// a fresh engine (bench.h RunImageRep): the vision encode time through ImageEncoder (cache
// off), the patches, the tower's GFLOP/s (vision/vision_flops.h over the encode time) and the
// image time to first token (encode, pad expansion, DeepStack prefill, first token).
//
// A mixture-of-experts model also reports the distinct experts a sparse layer read in the steps
// of exactly `--slots` rows (model/moe_routing_stats.h) and the weight bytes such a step reads:
// every non-expert matrix plus that share of each sparse layer's experts. After each timed
// repetition it measures the read bandwidth over the prepared weights themselves
// (kernels/read_bandwidth.h, the best of 2 passes on the model's threads) and reports the
// decode step's time (slots / generation tokens/s) over the time those bytes take at that
// bandwidth, per repetition (issue 32's 8-slot criterion: within 1.2x), so the host's drift
// between runs does not enter the ratio.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/image_request.h"
#include "cli/load_flags.h"
#include "cli/speculative_flags.h"
#include "model/qwen3_config.h"
#include "runtime/loaded_model.h"
#include "runtime/sampler.h"

namespace vls::cli {

namespace {

using bench::Clock;
using bench::Seconds;
using bench::Stats;
using bench::StatsJson;
using bench::Summarise;

}  // namespace

CommandSpec BenchSpec() {
  CommandSpec spec;
  spec.name = "bench";
  spec.usage =
      "usage: vlstack bench --model DIR [options]\n"
      "\n"
      "Throughput, serving and scenario benchmarks of a model through the batch engine and\n"
      "sampler that serve (docs/contracts.md §6). Prompts are pseudo-random ordinary tokens that\n"
      "generate exactly --gen-tokens greedy tokens each (EOS ignored); every event is\n"
      "timestamped as the engine delivers it.\n"
      "\n"
      "Throughput (the default): --slots requests run together, --reps times on a fresh engine;\n"
      "prompt tokens/s over the prefill phase, generation tokens/s (aggregate) over the steps\n"
      "after every request has its first token, the first request's time to first token.\n"
      "  --model DIR          model folder (required)\n"
      "                       or Org/Name: a Hugging Face repository id in the local cache\n"
      "  --prompt-tokens N    prompt length (default 512; scenarios: 2000 and 4096)\n"
      "  --gen-tokens N       tokens generated per request (default 128; scenarios: 4)\n"
      "  --reps N             repetitions (default 3)\n"
      "  --warmup N           untimed repetitions before them (default 0; llama-bench runs one):\n"
      "                       the first pass over freshly mapped weights can be slower than\n"
      "                       the ones after it, which a single timed repetition would show\n"
      "  --slots B            batch slots: requests run together (default 1)\n"
      "  --baseline-slots B0  also run B0 slots in every repetition (before the B-slot run in\n"
      "                       even ones, after it in odd ones) and report their generation\n"
      "                       tokens/s and the per-rep ratio (default: off)\n"
      "  --kernel-loop        time the direct loop on the model instead of the engine (no\n"
      "                       sampler, no scheduling; default off)\n"
      "  --capacity C         per-slot context in tokens (default: what the mode needs)\n"
      "  --prefill-chunk N    prompt rows per prefilling slot and step while others decode,\n"
      "                       in the same pass as their decode rows; 0 for whole prompts\n"
      "                       (default 64; with nothing decoding a prompt goes in one pass)\n"
      "  --no-prefix-reuse    never admit a request onto a slot's kept prefix (default: reuse)\n"
      "  --image FILE         (repeatable) also time an image request per repetition: a prompt\n"
      "                       of --prompt-tokens text tokens with the images in the middle\n"
      "                       (one pad each between vision_start and vision_end), on a fresh\n"
      "                       engine, the image encoder's cache off. Adds min/median/max of:\n"
      "                       vision_encode_ms (decode, preprocess, tower and mergers of all\n"
      "                       images), vision_patches (sum of t*h*w), vision_gflops_per_s (the\n"
      "                       tower's matmul and attention FLOPs, multiply-add = 2, over\n"
      "                       vision_encode_ms) and image_time_to_first_token_ms (from before\n"
      "                       the encode to the first token: encode, pad expansion, prefill\n"
      "                       through the DeepStack entry, first token)\n"
      "  --video FILE         also time a video request per repetition (as --image, with the\n"
      "                       clip's timestamped groups in the middle; --fps / --max-frames as\n"
      "                       for run). Adds video_decode_ms, video_preprocess_ms,\n"
      "                       video_encode_ms (the tower), video_frames, video_tokens and\n"
      "                       video_time_to_first_token_ms; the model folder needs its\n"
      "                       tokenizer.json for the timestamps\n"
      "  --fps F              video frames sampled per second (default: the model's config)\n"
      "  --max-frames N       at most N video frames (default: the model's config)\n"
      "  --json               one JSON object instead of the text report\n" +
      SpeculativeFlagsHelp() +
      "                       (bench: each repetition also runs without speculation, paired;\n"
      "                       reports both generation rates, their ratio, the acceptance rate\n"
      "                       and the mean tokens accepted per verify pass)\n" +
      LoadFlagsHelp("bf16") +
      "\n"
      "Serving (--serve), as vLLM's benchmark_serving: the engine steps on its own thread, a\n"
      "client submits the requests at their arrival times; reports request and output token\n"
      "throughput, time to first token, inter-token latency (gaps between a request's\n"
      "consecutive tokens) and end-to-end latency: mean, p50, p99, max.\n"
      "  --serve              the serving benchmark\n"
      "  --requests N         requests (default 16)\n"
      "  --rate R             arrivals per second, Poisson, or inf for all at once (default inf)\n"
      "  --seed S             seed of the arrival times and prompts (default 0)\n"
      "\n"
      "Scenarios (--scenario NAME):\n"
      "  prefix-reuse         a conversation's second turn (turn 1's --prompt-tokens and its\n"
      "                       --gen-tokens reply plus --turn-tokens new ones): its time to first\n"
      "                       token with prefix reuse and without, paired per repetition\n"
      "  --turn-tokens N      new tokens in turn 2 (default 30)\n"
      "  chunked-prefill      --streams requests decode, then a --prompt-tokens prompt arrives:\n"
      "                       the streams' inter-token latency (median, p99) around its prefill,\n"
      "                       once per size in --prefill-chunk (a comma-separated list here)\n"
      "  --streams N          decoding streams (default 8; --slots at least N + 1)\n"
      "  --stream-prompt-tokens N   the streams' prompt length (default 32)\n"
      "  --window-tokens N    stream tokens before the arrival and after the prompt's first\n"
      "                       token (default 16)\n"
      "  --help               this text\n";
  spec.value_flags = {"model",         "prompt-tokens", "gen-tokens", "reps",
                      "slots",         "warmup",        "capacity",   "baseline-slots",
                      "prefill-chunk", "requests",      "rate",       "seed",
                      "scenario",      "turn-tokens",   "streams",    "stream-prompt-tokens",
                      "window-tokens", "image",         "video",      "fps",
                      "max-frames"};
  spec.value_flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  spec.value_flags.insert(SpeculativeFlagNames().begin(), SpeculativeFlagNames().end());
  spec.bool_flags = {"json", "kernel-loop", "no-prefix-reuse", "serve"};
  spec.example =
      "  vlstack bench --model ./model --precision bf16 --slots 8 --prompt-tokens 128 \\\n"
      "      --gen-tokens 128 --reps 3\n";
  return spec;
}

namespace {

double PeakRssMb() { return bench::PeakRssMb(); }

// "one", "four" or "trying": the weight streams of the int8 expert products' decode tiles
// (kernels/stream_tuner.h); null where no such choice is made (not a mixture of experts at
// int8, or kernels without a four-stream tile).
const char* Q8DecodeStreams(const kernels::Context& ctx, const Qwen3Config& mc) {
  if (!mc.moe.has_value() || ctx.precision() != kernels::Precision::kInt8 ||
      ctx.variant().matmul_q8_four_streams == nullptr) {
    return nullptr;
  }
  switch (ctx.stream_tuner().mode()) {
    case kernels::StreamTuner::Mode::kOne: return "one";
    case kernels::StreamTuner::Mode::kFour: return "four";
    case kernels::StreamTuner::Mode::kTrying: return "trying";
  }
  return nullptr;
}

struct RepResult {
  double prompt_tps = 0, gen_tps = 0, ttft_ms = 0;
  EngineCounters counters;  // the engine's (speculation figures)
};

// --image: the files' bytes, the encoder (cache off) and each rep's figures.
struct ImageRun {
  std::vector<MediaBytes> images;
  std::unique_ptr<ImageEncoder> encoder;
  std::vector<double> encode_ms, patches, gflops, ttft_ms;
};

// --video: the clip's bytes, its sampling, the encoder (cache off), the timestamps' tokenizer and
// each rep's figures.
struct VideoRun {
  MediaBytes video;
  VideoSamplingOptions options;
  std::unique_ptr<ImageEncoder> encoder;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::vector<double> decode_ms, preprocess_ms, encode_ms, ttft_ms;
  int64_t frames = 0, tokens = 0, prompt = 0;
};

// The capacity an image request of `prompt` text tokens needs (its expanded prompt, one
// generated token, and the DeepStack entry's declared visual positions).
StatusOr<int64_t> ImageCapacityNeed(const std::string& dir, const std::vector<std::string>& files,
                                    int64_t prompt) {
  VLS_ASSIGN_OR_RETURN(const std::vector<GridThw> grids, PlanImageGrids(dir, files));
  VLS_ASSIGN_OR_RETURN(const Qwen3Config cfg, LoadQwen3Config(dir));
  int64_t need = ExpandedLength(prompt + 3 * static_cast<int64_t>(files.size()), grids,
                                cfg.spatial_merge_size) +
                 1;
  if (cfg.deepstack) need = std::max<int64_t>(need, cfg.deepstack->max_visual_positions);
  return need;
}

StatusOr<ImageRun> PrepareImageRun(const std::string& dir, const LoadedModel& lm,
                                   const std::vector<std::string>& files) {
  ImageRun run;
  MediaPolicy policy;
  policy.allow_files = true;
  for (const std::string& f : files) {
    VLS_ASSIGN_OR_RETURN(MediaBytes m, ReadImagePart(nlohmann::ordered_json{{"image", f}}, policy));
    run.images.push_back(std::move(m));
  }
  ImageEncoderOptions o;
  o.cache_bytes = 0;  // every repetition encodes
  VLS_ASSIGN_OR_RETURN(run.encoder, ImageEncoder::Load(dir, lm, o));
  return run;
}

// One throughput repetition through a fresh engine (so nothing is reused across runs).
StatusOr<RepResult> RunEngineRep(const LoadedModel& lm, const EngineOptions& eo, int prompt,
                                 int gen, int slots, uint64_t seed) {
  const Qwen3Config& cfg = lm.config();
  std::vector<GenerationRequest> requests;
  requests.reserve(static_cast<size_t>(slots));
  for (int s = 0; s < slots; ++s) {
    requests.push_back(bench::TextRequest(
        cfg, bench::RandomTokens(cfg, prompt, seed * 1000003 + static_cast<uint64_t>(s)),
        std::max(gen, 1)));
  }
  bench::EventLog log;
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<BatchEngine> engine_ptr,
                       BatchEngine::Create(
                           lm, [&log](const TokenEvent& e) { return log.Record(e); }, eo));
  BatchEngine& engine = *engine_ptr;
  std::vector<uint64_t> ids;
  const Clock::time_point t0 = Clock::now();
  for (GenerationRequest& r : requests) {
    VLS_ASSIGN_OR_RETURN(uint64_t id, engine.Submit(std::move(r)));
    ids.push_back(id);
  }
  VLS_RETURN_IF_ERROR(bench::StepUntilIdle(engine, log));
  const std::map<uint64_t, bench::RequestTrace> traces = log.Traces();
  // The prefill phase ends with the step that gave the last request its first token.
  Clock::time_point prefill_end = t0;
  int prefill_step = 0;
  for (const uint64_t id : ids) {
    const bench::RequestTrace& t = traces.at(id);
    if (t.times.empty()) return Internal("a benchmark request generated nothing");
    prefill_step = std::max(prefill_step, t.steps[0]);
  }
  // The decode phase: every step after that one, from the end of its delivery.
  Clock::time_point decode_end = prefill_end;
  int64_t decoded = 0;
  for (const auto& [id, t] : traces) {
    for (size_t i = 0; i < t.times.size(); ++i) {
      if (t.steps[i] <= prefill_step) {
        prefill_end = std::max(prefill_end, t.times[i]);
      } else {
        ++decoded;
        decode_end = std::max(decode_end, t.times[i]);
      }
    }
  }
  const double decode_s = Seconds(prefill_end, decode_end);
  RepResult r;
  r.prompt_tps = static_cast<double>(prompt) * slots / Seconds(t0, prefill_end);
  r.gen_tps = gen > 0 && decoded > 0 && decode_s > 0 ? static_cast<double>(decoded) / decode_s : 0;
  r.ttft_ms = bench::Millis(t0, traces.at(ids[0]).times[0]);
  r.counters = engine.counters();
  return r;
}

// The direct loop on Qwen3Model (--kernel-loop): prefills each slot's prompt into a fresh
// cache (logits for the last row only), then decodes with one row per slot in one forward pass
// per step, greedy picks spread over the model's pool. Time to first token is the first slot's
// prefill including its logits.
StatusOr<RepResult> RunKernelRep(const Qwen3Model& model, int prompt, int gen, int slots,
                                 uint32_t seed) {
  const Qwen3Config& cfg = model.config();
  const int64_t H = cfg.hidden, V = cfg.vocab;
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<int32_t> next(static_cast<size_t>(slots));
  std::vector<float> logits(static_cast<size_t>(slots * V));
  double prefill_s = 0, ttft_s = 0;
  for (int s = 0; s < slots; ++s) {
    VLS_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, model.NewCache(prompt + gen));
    caches.push_back(std::move(cache));
    const std::vector<int32_t> ids =
        bench::RandomTokens(cfg, prompt, uint64_t{seed} * 1000003 + static_cast<uint64_t>(s));
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
    next[static_cast<size_t>(s)] = ArgMax(std::span<const float>(logits.data(), V));
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
    model.context().pool().ParallelFor(slots, 1, [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        next[static_cast<size_t>(s)] = ArgMax(std::span<const float>(logits.data() + s * V, V));
      }
    });
  }
  const double gen_s = Seconds(t0, Clock::now());
  RepResult r;
  r.prompt_tps = static_cast<double>(prompt) * slots / prefill_s;
  r.gen_tps = gen > 0 ? static_cast<double>(gen) * slots / gen_s : 0.0;
  r.ttft_ms = ttft_s * 1e3;
  return r;
}

Status Throughput(const Args& args, const bench::Loader& load) {
  VLS_ASSIGN_OR_RETURN(long long prompt, args.Int("prompt-tokens", 512, 1, 1 << 20));
  VLS_ASSIGN_OR_RETURN(long long gen, args.Int("gen-tokens", 128, 0, 1 << 20));
  VLS_ASSIGN_OR_RETURN(long long reps, args.Int("reps", 3, 1, 1000));
  VLS_ASSIGN_OR_RETURN(long long warmup, args.Int("warmup", 0, 0, 100));
  VLS_ASSIGN_OR_RETURN(long long slots, args.Int("slots", 1, 1, 256));
  VLS_ASSIGN_OR_RETURN(long long baseline, args.Int("baseline-slots", 0, 1, 256));  // 0: absent
  const bool paired = args.Get("baseline-slots").has_value();
  const bool kernel_loop = args.Has("kernel-loop");
  if (paired && gen == 0) {
    return InvalidArgument("--baseline-slots compares generation: --gen-tokens must be at least 1");
  }
  const std::vector<std::string> image_files = args.GetAll("image");
  VLS_ASSIGN_OR_RETURN(VisualFiles video_files, VisualFilesFromArgs(args));
  video_files.images.clear();
  if (video_files.videos.size() > 1) return InvalidArgument("--video takes one clip here");
  int64_t need = prompt + std::max(gen, 1LL);
  if (!video_files.videos.empty()) {
    VLS_ASSIGN_OR_RETURN(const std::string dir, ModelDirFlag(args));
    VLS_ASSIGN_OR_RETURN(int64_t video_need, PlanExpandedLength(dir, prompt + 3, video_files));
    VLS_ASSIGN_OR_RETURN(const Qwen3Config vc, LoadQwen3Config(dir));
    if (vc.deepstack)
      video_need = std::max<int64_t>(video_need, vc.deepstack->max_visual_positions);
    need = std::max(need, video_need + 1);
  }
  if (!image_files.empty()) {
    VLS_ASSIGN_OR_RETURN(const std::string dir, ModelDirFlag(args));
    VLS_ASSIGN_OR_RETURN(const int64_t image_need, ImageCapacityNeed(dir, image_files, prompt));
    need = std::max(need, image_need);
  }
  VLS_ASSIGN_OR_RETURN(int capacity, bench::CapacityFlag(args, need));
  VLS_ASSIGN_OR_RETURN(bench::Setup setup,
                       load(capacity, static_cast<int>(std::max(slots, baseline))));
  const LoadedModel& lm = *setup.model;
  const Qwen3Model& model = lm.model();
  ImageRun images;
  if (!image_files.empty()) {
    VLS_ASSIGN_OR_RETURN(images, PrepareImageRun(setup.model_dir, lm, image_files));
  }
  VideoRun videos;
  if (!video_files.videos.empty()) {
    MediaPolicy policy;
    policy.allow_files = true;
    VLS_ASSIGN_OR_RETURN(
        videos.video,
        ReadVideoPart(nlohmann::ordered_json{{"video", video_files.videos[0]}}, policy));
    videos.options = video_files.video;
    ImageEncoderOptions o;
    o.cache_bytes = 0;  // every repetition encodes
    VLS_ASSIGN_OR_RETURN(videos.encoder, ImageEncoder::Load(setup.model_dir, lm, o));
    VLS_ASSIGN_OR_RETURN(videos.tokenizer, LoadTimestampTokenizer(setup.model_dir));
  }
  // Memory the model needs: the prepared weights plus one KV cache per slot (K and V).
  const Qwen3Config& mc = model.config();
  const double weights_mb = static_cast<double>(model.prepared().size()) / 1e6;
  // A decode tile reads 4 KiB pages at about 0.7 of the rate of huge ones (ADR 0036).
  const double huge_mb = static_cast<double>(model.prepared().HugePageBytes()) / 1e6;
  const double kv_mb = 2.0 * static_cast<double>(KvCache::ElementBytes(model.kv_dtype())) *
                       mc.layers * mc.kv_heads * mc.head_dim * static_cast<double>(capacity) *
                       static_cast<double>(std::max(slots, baseline)) / 1e6;
  const auto rep = [&](int n, int r) -> StatusOr<RepResult> {
    if (kernel_loop) {
      return RunKernelRep(model, static_cast<int>(prompt), static_cast<int>(gen), n,
                          static_cast<uint32_t>(r + 1));
    }
    return RunEngineRep(lm, setup.engine, static_cast<int>(prompt), static_cast<int>(gen), n,
                        static_cast<uint64_t>(r) + 1);
  };
  // --speculate: the same repetition without speculation, paired.
  const bool speculate = setup.engine.speculative.draft_tokens > 0;
  std::vector<double> plain_gtps, spec_ratio, acceptance, per_pass;
  const auto run_plain = [&](int r) -> Status {
    EngineOptions plain = setup.engine;
    plain.speculative = SpeculativeParams();
    VLS_ASSIGN_OR_RETURN(RepResult b,
                         RunEngineRep(lm, plain, static_cast<int>(prompt), static_cast<int>(gen),
                                      static_cast<int>(slots), static_cast<uint64_t>(r) + 1));
    std::fprintf(stderr, "[bench] rep %d/%lld: without speculation: generation %.2f tok/s\n", r + 1,
                 reps, b.gen_tps);
    plain_gtps.push_back(b.gen_tps);
    return Status::Ok();
  };
  std::vector<double> ptps, gtps, ttft, base_gtps, ratio;
  // A mixture-of-experts model: the distinct experts a sparse layer read in the calls of
  // exactly `slots` rows (the steps where every slot decodes), per repetition.
  std::vector<double> moe_experts, read_gbps, roof_ratio;
  const PreparedBytes moe_bytes = CountPreparedBytes(mc, model.prepared().entries());
  const auto moe_step_mb = [&](double experts_read) {
    return (static_cast<double>(moe_bytes.total - moe_bytes.experts) +
            static_cast<double>(moe_bytes.experts) * experts_read /
                static_cast<double>(mc.moe->experts)) /
           1e6;
  };
  // --warmup: whole repetitions, untimed (seeds after the timed ones', so no prompt repeats).
  for (int w = 0; w < warmup; ++w) {
    VLS_ASSIGN_OR_RETURN(RepResult res, rep(static_cast<int>(slots), static_cast<int>(reps) + w));
    std::fprintf(stderr,
                 "[bench] warm-up %d/%lld (not counted): prompt %.2f tok/s, generation %.2f tok/s, "
                 "ttft %.1f ms\n",
                 w + 1, warmup, res.prompt_tps, res.gen_tps, res.ttft_ms);
  }
  for (int r = 0; r < reps; ++r) {
    if (speculate && r % 2 == 0) VLS_RETURN_IF_ERROR(run_plain(r));
    // The baseline runs first in even repetitions and second in odd ones, so neither run
    // always follows the other.
    const auto run_baseline = [&]() -> Status {
      VLS_ASSIGN_OR_RETURN(RepResult b, rep(static_cast<int>(baseline), r));
      std::fprintf(stderr, "[bench] rep %d/%lld: baseline %lld slots: generation %.2f tok/s\n",
                   r + 1, reps, baseline, b.gen_tps);
      base_gtps.push_back(b.gen_tps);
      return Status::Ok();
    };
    if (paired && r % 2 == 0) VLS_RETURN_IF_ERROR(run_baseline());
    const MoeRoutingStats::Count moe_before = model.moe_stats().At(slots);
    VLS_ASSIGN_OR_RETURN(RepResult res, rep(static_cast<int>(slots), r));
    const MoeRoutingStats::Count moe_after = model.moe_stats().At(slots);
    std::fprintf(stderr,
                 "[bench] rep %d/%lld: prompt %.2f tok/s, generation %.2f tok/s, ttft %.1f ms\n",
                 r + 1, reps, res.prompt_tps, res.gen_tps, res.ttft_ms);
    if (moe_after.calls > moe_before.calls) {
      moe_experts.push_back(static_cast<double>(moe_after.experts - moe_before.experts) /
                            static_cast<double>(moe_after.calls - moe_before.calls));
      const double bw = lm.PreparedReadBandwidth();
      const double step_ms = 1e3 * static_cast<double>(slots) / res.gen_tps;
      const double roof_ms = moe_step_mb(moe_experts.back()) * 1e6 / bw * 1e3;
      read_gbps.push_back(bw / 1e9);
      roof_ratio.push_back(step_ms / roof_ms);
      std::fprintf(stderr,
                   "[bench] rep %d/%lld: read bandwidth %.1f GB/s; decode step %.2f ms, its %.1f "
                   "MB at that bandwidth %.2f ms (%.2fx)\n",
                   r + 1, reps, bw / 1e9, step_ms, moe_step_mb(moe_experts.back()), roof_ms,
                   roof_ratio.back());
    }
    if (paired && r % 2 == 1) VLS_RETURN_IF_ERROR(run_baseline());
    if (speculate && r % 2 == 1) VLS_RETURN_IF_ERROR(run_plain(r));
    if (speculate) {
      const EngineCounters& c = res.counters;
      spec_ratio.push_back(plain_gtps.back() > 0 ? res.gen_tps / plain_gtps.back() : 0.0);
      acceptance.push_back(c.draft_tokens > 0 ? static_cast<double>(c.accepted_draft_tokens) /
                                                    static_cast<double>(c.draft_tokens)
                                              : 0.0);
      per_pass.push_back(c.verify_passes > 0 ? static_cast<double>(c.accepted_draft_tokens) /
                                                   static_cast<double>(c.verify_passes)
                                             : 0.0);
      std::fprintf(stderr,
                   "[bench] rep %d/%lld: speculation: %.1f%% of %llu drafted accepted, %.2f "
                   "accepted per verify pass, ratio %.2f\n",
                   r + 1, reps, 100 * acceptance.back(),
                   static_cast<unsigned long long>(c.draft_tokens), per_pass.back(),
                   spec_ratio.back());
    }
    if (paired) {
      if (base_gtps.back() <= 0 || res.gen_tps <= 0) {
        return InvalidArgument("--gen-tokens " + std::to_string(gen) +
                               " leaves no decode-only step to time; use more");
      }
      ratio.push_back(res.gen_tps / base_gtps.back());
    }
    ptps.push_back(res.prompt_tps);
    gtps.push_back(res.gen_tps);
    ttft.push_back(res.ttft_ms);
    if (images.encoder != nullptr) {
      VLS_ASSIGN_OR_RETURN(bench::ImageRep ir,
                           bench::RunImageRep(lm, setup.engine, *images.encoder, images.images,
                                              prompt, static_cast<uint64_t>(r) + 1));
      std::fprintf(stderr,
                   "[bench] rep %d/%lld: vision encode %.1f ms (%lld patches, %.1f GFLOP/s), "
                   "image ttft %.1f ms\n",
                   r + 1, reps, ir.encode_ms, static_cast<long long>(ir.patches),
                   ir.flops / ir.encode_ms / 1e6, ir.ttft_ms);
      images.encode_ms.push_back(ir.encode_ms);
      images.patches.push_back(static_cast<double>(ir.patches));
      images.gflops.push_back(ir.flops / ir.encode_ms / 1e6);
      images.ttft_ms.push_back(ir.ttft_ms);
    }
    if (videos.encoder != nullptr) {
      VLS_ASSIGN_OR_RETURN(
          bench::VideoRep vr,
          bench::RunVideoRep(lm, setup.engine, *videos.encoder, videos.video, videos.options,
                             *videos.tokenizer, prompt, static_cast<uint64_t>(r) + 1));
      std::fprintf(stderr,
                   "[bench] rep %d/%lld: video %lld frames, grid %s, %lld tokens: decode %.1f ms, "
                   "preprocess %.1f ms, tower %.1f ms, video ttft %.1f ms (prompt %lld)\n",
                   r + 1, reps, static_cast<long long>(vr.frames), GridToString(vr.grid).c_str(),
                   static_cast<long long>(vr.tokens), vr.decode_ms, vr.preprocess_ms, vr.encode_ms,
                   vr.ttft_ms, static_cast<long long>(vr.prompt));
      videos.decode_ms.push_back(vr.decode_ms);
      videos.preprocess_ms.push_back(vr.preprocess_ms);
      videos.encode_ms.push_back(vr.encode_ms);
      videos.ttft_ms.push_back(vr.ttft_ms);
      videos.frames = vr.frames;
      videos.tokens = vr.tokens;
      videos.prompt = vr.prompt;
    }
  }
  const Stats p = Summarise(ptps), g = Summarise(gtps), t = Summarise(ttft);
  const char* mode = kernel_loop ? "kernel-loop" : "engine";
  if (setup.json) {
    std::string extra;
    if (paired) {
      extra = ",\"baseline_slots\":" + std::to_string(baseline) +
              ",\"baseline_generation_tokens_per_s\":" + StatsJson(Summarise(base_gtps)) +
              ",\"generation_ratio\":" + StatsJson(Summarise(ratio));
    }
    if (speculate) {
      extra += ",\"speculate\":\"" + std::string(DraftSourceName(setup.engine.speculative.source)) +
               "\"" + ",\"draft_tokens\":" + std::to_string(setup.engine.speculative.draft_tokens) +
               ",\"plain_generation_tokens_per_s\":" + StatsJson(Summarise(plain_gtps)) +
               ",\"speculative_ratio\":" + StatsJson(Summarise(spec_ratio)) +
               ",\"acceptance_rate\":" + StatsJson(Summarise(acceptance)) +
               ",\"accepted_per_verify_pass\":" + StatsJson(Summarise(per_pass));
    }
    if (!moe_experts.empty()) {
      const Stats x = Summarise(moe_experts);
      extra += ",\"moe_experts_per_layer_step\":" + StatsJson(x) +
               ",\"moe_step_weights_mb\":" + std::to_string(moe_step_mb(x.median)) +
               ",\"read_bandwidth_gb_per_s\":" + StatsJson(Summarise(read_gbps)) +
               ",\"step_over_roof_time\":" + StatsJson(Summarise(roof_ratio));
    }
    if (const char* streams = Q8DecodeStreams(model.context(), mc); streams != nullptr) {
      extra += ",\"q8_expert_decode_streams\":\"" + std::string(streams) + "\"";
    }
    if (images.encoder != nullptr) {
      extra += ",\"images\":" + std::to_string(images.images.size()) +
               ",\"vision_encode_ms\":" + StatsJson(Summarise(images.encode_ms)) +
               ",\"vision_patches\":" + StatsJson(Summarise(images.patches)) +
               ",\"vision_gflops_per_s\":" + StatsJson(Summarise(images.gflops)) +
               ",\"image_time_to_first_token_ms\":" + StatsJson(Summarise(images.ttft_ms));
    }
    if (videos.encoder != nullptr) {
      extra += ",\"video_frames\":" + std::to_string(videos.frames) +
               ",\"video_tokens\":" + std::to_string(videos.tokens) +
               ",\"video_prompt_tokens\":" + std::to_string(videos.prompt) +
               ",\"video_decode_ms\":" + StatsJson(Summarise(videos.decode_ms)) +
               ",\"video_preprocess_ms\":" + StatsJson(Summarise(videos.preprocess_ms)) +
               ",\"video_encode_ms\":" + StatsJson(Summarise(videos.encode_ms)) +
               ",\"video_time_to_first_token_ms\":" + StatsJson(Summarise(videos.ttft_ms));
    }
    std::printf(
        "{%s,\"mode\":\"%s\",\"prompt_tokens\":%lld,\"gen_tokens\":%lld,\"reps\":%lld,"
        "\"warmup\":%lld,\"slots\":%lld,\"prefill_chunk\":%d,\"prefix_reuse\":%s,"
        "\"prompt_tokens_per_s\":%s,\"generation_tokens_per_s\":%s,"
        "\"time_to_first_token_ms\":%s,\"peak_rss_mb\":%.1f,\"weights_mb\":%.1f,"
        "\"weights_huge_pages_mb\":%.1f,\"kv_cache_mb\":%.1f,\"load_s\":%.2f%s}\n",
        bench::HeaderJson(setup).c_str(), mode, prompt, gen, reps, warmup, slots,
        setup.engine.prefill_chunk, setup.engine.prefix_reuse ? "true" : "false",
        StatsJson(p).c_str(), StatsJson(g).c_str(), StatsJson(t).c_str(), PeakRssMb(), weights_mb,
        huge_mb, kv_mb, setup.load_s, extra.c_str());
  } else {
    std::printf("model %s precision %s threads %d kernels %s slots %lld mode %s",
                setup.model_dir.c_str(), setup.precision.c_str(), setup.threads,
                model.context().variant().name, slots, mode);
    if (!kernel_loop) {
      std::printf(" prefill chunk %d prefix reuse %s", setup.engine.prefill_chunk,
                  setup.engine.prefix_reuse ? "on" : "off");
    }
    std::printf("\nprompt tokens/s      min %.2f median %.2f max %.2f (%lld tokens x %lld slots)\n",
                p.min, p.median, p.max, prompt, slots);
    std::printf("generation tokens/s  min %.2f median %.2f max %.2f (%lld tokens x %lld slots)\n",
                g.min, g.median, g.max, gen, slots);
    std::printf("time to first token  min %.1f median %.1f max %.1f ms\n", t.min, t.median, t.max);
    if (paired) {
      const Stats b = Summarise(base_gtps), q = Summarise(ratio);
      std::printf("baseline generation  min %.2f median %.2f max %.2f (%lld slots)\n", b.min,
                  b.median, b.max, baseline);
      std::printf(
          "generation ratio     min %.2f median %.2f max %.2f (%lld / %lld slots, per rep)\n",
          q.min, q.median, q.max, slots, baseline);
    }
    if (speculate) {
      const Stats b = Summarise(plain_gtps), q = Summarise(spec_ratio), a = Summarise(acceptance),
                  pp = Summarise(per_pass);
      std::printf("without speculation  min %.2f median %.2f max %.2f (generation tokens/s)\n",
                  b.min, b.median, b.max);
      std::printf(
          "speculative ratio    min %.2f median %.2f max %.2f (%s, %d draft tokens, "
          "per rep)\n",
          q.min, q.median, q.max, DraftSourceName(setup.engine.speculative.source),
          setup.engine.speculative.draft_tokens);
      std::printf("acceptance rate      min %.3f median %.3f max %.3f\n", a.min, a.median, a.max);
      std::printf("accepted per verify  min %.2f median %.2f max %.2f\n", pp.min, pp.median,
                  pp.max);
    }
    if (!moe_experts.empty()) {
      const Stats x = Summarise(moe_experts);
      std::printf(
          "experts per layer    min %.1f median %.1f max %.1f of %lld (steps of %lld rows; "
          "weights read per step %.1f MB)\n",
          x.min, x.median, x.max, static_cast<long long>(mc.moe->experts), slots,
          moe_step_mb(x.median));
      const Stats bw = Summarise(read_gbps), q = Summarise(roof_ratio);
      std::printf(
          "step / roof time     min %.2f median %.2f max %.2f (per rep: the decode step over its "
          "weights' time at the read bandwidth measured after it, median %.1f GB/s)\n",
          q.min, q.median, q.max, bw.median);
    }
    if (Q8DecodeStreams(model.context(), mc) != nullptr) {
      std::printf("%s\n", model.context().stream_tuner().Report().c_str());
    }
    if (images.encoder != nullptr) {
      const Stats e = Summarise(images.encode_ms), f = Summarise(images.gflops),
                  it = Summarise(images.ttft_ms);
      std::printf(
          "vision encode        min %.1f median %.1f max %.1f ms (%zu images, %.0f patches)\n",
          e.min, e.median, e.max, images.images.size(), images.patches.front());
      std::printf("vision GFLOP/s       min %.1f median %.1f max %.1f\n", f.min, f.median, f.max);
      std::printf("image time to first  min %.1f median %.1f max %.1f ms (%lld text tokens)\n",
                  it.min, it.median, it.max, prompt);
    }
    if (videos.encoder != nullptr) {
      const Stats d = Summarise(videos.decode_ms), pr = Summarise(videos.preprocess_ms),
                  e = Summarise(videos.encode_ms), vt = Summarise(videos.ttft_ms);
      std::printf("video decode         min %.1f median %.1f max %.1f ms (%lld frames)\n", d.min,
                  d.median, d.max, static_cast<long long>(videos.frames));
      std::printf("video preprocess     min %.1f median %.1f max %.1f ms\n", pr.min, pr.median,
                  pr.max);
      std::printf("video tower          min %.1f median %.1f max %.1f ms (%lld visual tokens)\n",
                  e.min, e.median, e.max, static_cast<long long>(videos.tokens));
      std::printf("video time to first  min %.1f median %.1f max %.1f ms (prompt %lld tokens)\n",
                  vt.min, vt.median, vt.max, static_cast<long long>(videos.prompt));
    }
    std::printf(
        "peak RSS %.1f MB (prepared weights %.1f MB, %.1f MB of them in huge pages, + KV cache "
        "%.1f MB), load %.2f s\n",
        PeakRssMb(), weights_mb, huge_mb, kv_mb, setup.load_s);
  }
  return Status::Ok();
}

// Flags that belong to one mode only (a flag of another mode is refused by name).
struct ModeFlags {
  const char* mode;
  std::vector<std::string> flags;
};

Status Bench(const Args& args) {
  VLS_ASSIGN_OR_RETURN(std::string dir, ModelDirFlag(args));
  LoadOptions base;
  VLS_RETURN_IF_ERROR(ApplyLoadFlags(args, "bf16", &base));
  const std::string scenario = args.Get("scenario").value_or("");
  const bool serve = args.Has("serve");
  if (serve && !scenario.empty())
    return InvalidArgument("--serve and --scenario exclude each other");
  if (!scenario.empty() && scenario != "prefix-reuse" && scenario != "chunked-prefill") {
    return InvalidArgument("--scenario must be prefix-reuse or chunked-prefill, not '" + scenario +
                           "'");
  }
  const std::string mode = serve ? "serve" : scenario.empty() ? "throughput" : scenario;
  const ModeFlags own[] = {
      {"throughput",
       {"baseline-slots", "kernel-loop", "reps", "warmup", "image", "video", "fps", "max-frames"}},
      {"serve", {"requests", "rate", "seed"}},
      {"prefix-reuse", {"turn-tokens", "reps"}},
      {"chunked-prefill", {"streams", "stream-prompt-tokens", "window-tokens"}},
  };
  for (const ModeFlags& m : own) {
    for (const std::string& f : m.flags) {
      const bool shared = f == "reps" && (mode == "throughput" || mode == "prefix-reuse");
      if (args.Has(f) && mode != m.mode && !shared) {
        return InvalidArgument("--" + f + " belongs to the " + m.mode + " mode, not " + mode);
      }
    }
  }
  VLS_ASSIGN_OR_RETURN(std::vector<int> chunks, bench::PrefillChunks(args));
  if (chunks.size() > 1 && mode != "chunked-prefill") {
    return InvalidArgument("--prefill-chunk takes a list only with --scenario chunked-prefill");
  }
  if (args.Has("kernel-loop") && args.Has("image")) {
    return InvalidArgument("--kernel-loop does not use the engine: no --image");
  }
  if (args.Has("kernel-loop") && (args.Has("prefill-chunk") || args.Has("no-prefix-reuse"))) {
    return InvalidArgument(
        "--kernel-loop does not use the engine: no --prefill-chunk or "
        "--no-prefix-reuse");
  }
  SpeculativeParams speculative;
  VLS_RETURN_IF_ERROR(ApplySpeculativeFlags(args, &speculative));
  if (speculative.draft_tokens > 0 &&
      (mode != "throughput" || args.Has("kernel-loop") || args.Has("baseline-slots"))) {
    return InvalidArgument(
        "--speculate is measured in the throughput mode, without --kernel-loop or "
        "--baseline-slots");
  }
  std::unique_ptr<LoadedModel> loaded, draft;
  const bench::Loader load = [&](int capacity, int slots) -> StatusOr<bench::Setup> {
    LoadOptions o = base;
    o.capacity = capacity;
    o.slots = slots;
    o.progress = StderrProgress("bench");
    bench::Setup s;
    s.model_dir = dir;
    s.precision = kernels::PrecisionName(o.precision);
    std::fprintf(stderr, "[bench] loading %s (%s, %d slots, capacity %d%s%s)\n", dir.c_str(),
                 s.precision.c_str(), slots, capacity, o.artifact.empty() ? "" : ", artifact ",
                 o.artifact.c_str());
    const Clock::time_point t0 = Clock::now();
    VLS_ASSIGN_OR_RETURN(loaded, LoadedModel::Load(dir, o));
    s.load_s = Seconds(t0, Clock::now());
    s.model = loaded.get();
    s.engine.prefill_chunk = chunks.front();
    s.engine.prefix_reuse = !args.Has("no-prefix-reuse");
    s.engine.speculative = speculative;
    draft.reset();
    VLS_ASSIGN_OR_RETURN(draft, LoadDraftModel(args, dir, *loaded, o));
    s.engine.draft_model = draft.get();
    s.json = args.Has("json");
    s.threads = loaded->model().context().pool().threads();
    return s;
  };
  if (serve) return bench::RunServe(args, load);
  if (scenario == "prefix-reuse") return bench::RunPrefixReuseScenario(args, load);
  if (scenario == "chunked-prefill") return bench::RunChunkedPrefillScenario(args, load);
  return Throughput(args, load);
}

}  // namespace

int RunBench(int argc, char** argv) { return RunCommand(BenchSpec(), argc, argv, Bench); }

}  // namespace vls::cli
