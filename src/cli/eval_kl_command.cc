// `vlstack eval-kl`: how far a precision (bf16, int8) moves the model's next-token distribution
// from the f32 reference, as llama-perplexity --kl-divergence reports it (docs/eval_kl.md).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file.h"
#include "cli/args.h"
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/eval_kl_stats.h"
#include "cli/load_flags.h"
#include "io/safetensors.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"
#include "runtime/request.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace vls::cli {
namespace {

constexpr size_t kMaxInputBytes = size_t{256} << 20;  // --input text
constexpr long long kMaxTokens = 1 << 24;
constexpr double kMaxTemperature = 1e6;

// LoadFlagsHelp without its --precision line (eval-kl's --precision is required).
std::string LoadFlagsHelpAfterPrecision() {
  const std::string all = LoadFlagsHelp("f32");
  return all.substr(all.find('\n') + 1);
}

}  // namespace

CommandSpec EvalKlSpec() {
  CommandSpec spec;
  spec.name = "eval-kl";
  spec.usage =
      "usage: vlstack eval-kl --model DIR --precision bf16|int8|int4 [options]\n"
      "\n"
      "KL divergence of the model's next-token distribution at --precision from the same\n"
      "model at f32 (the reference), as llama-perplexity --kl-divergence reports it. The token\n"
      "stream is cut into chunks of --chunk tokens; each chunk is prefilled fresh in both\n"
      "models and every position that predicts a token of its chunk (chunk - 1 a chunk; the\n"
      "short contexts count too, unlike llama.cpp's second half only) is compared: for each\n"
      "temperature T, P = softmax(logits / T) in double, KL(P_f32 || P_test). Random-weight\n"
      "test models can be almost flat or almost one-hot at T=1, hence a second temperature;\n"
      "on such models random ids are as meaningful a text as any (docs/eval_kl.md).\n"
      "\n"
      "  --model DIR          model folder (required) or Org/Name: a Hugging Face repository id\n"
      "                       in the local cache\n"
      "  --precision P        the precision measured: bf16, int8, int4 (or f32: KL 0) "
      "(required)\n" +
      LoadFlagsHelpAfterPrecision() +
      "                       (these apply to the measured model; the reference is always f32\n"
      "                       with an f32 KV cache and the same --threads)\n"
      "  --tokens N           tokens of the stream, at least 2 (default 512)\n"
      "  --chunk N            context per chunk, at least 2 (default 128); the last chunk may be\n"
      "                       shorter\n"
      "  --score-from N       compare only the positions i >= N of each chunk (default 0);\n"
      "                       llama-perplexity --kl-divergence scores from chunk / 2, so\n"
      "                       --chunk 512 --score-from 256 makes the same comparison\n"
      "  --capacity C         context capacity of the loads, at least --chunk (default: --chunk);\n"
      "                       an --artifact must have been compiled with the same --capacity\n"
      "  --input FILE         a text file, tokenized with the model folder's tokenizer.json; its\n"
      "                       first --tokens tokens are used (all of them when fewer)\n"
      "  --ids FILE           a safetensors file whose int32 input_ids [N] is the stream (as\n"
      "                       `vlstack forward --input` reads it); first --tokens ids\n"
      "  --seed S             without --input or --ids: the stream is S's pseudo-random ids in\n"
      "                       [0, vocab), special tokens avoided (default 0)\n"
      "  --temperature T      a softmax temperature > 0; repeat for several (default: 1 and 16)\n"
      "  --json               one JSON object on stdout instead of the table: model, precision,\n"
      "                       kv_cache, source (random|input|ids), seed, tokens, chunk, chunks,\n"
      "                       positions, seconds, and results: one object per temperature with\n"
      "                       temperature, positions, kl_mean, kl_median, kl_p99, kl_max,\n"
      "                       top1_agreement (fraction of positions whose argmax agrees) and\n"
      "                       rms_delta_p (RMS of P_test - P_f32 on the next token)\n"
      "  --help               this text\n";
  spec.value_flags = {"model", "tokens", "chunk",       "capacity",  "input",
                      "ids",   "seed",   "temperature", "score-from"};
  spec.value_flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  spec.bool_flags = {"json"};
  spec.example =
      "  vlstack eval-kl --model ./model --precision int8 --tokens 512 --chunk 128\n"
      "  vlstack eval-kl --model ./model --precision bf16 --input wiki.txt --json\n";
  return spec;
}

namespace {

StatusOr<std::vector<double>> TemperatureFlags(const Args& args) {
  std::vector<double> temps;
  for (const std::string& v : args.GetAll("temperature")) {
    char* end = nullptr;
    const double t = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(t) || t <= 0 || t > kMaxTemperature) {
      return InvalidArgument("--temperature: '" + v + "' is not a number in (0, 1e6]");
    }
    temps.push_back(t);
  }
  if (temps.empty()) temps = {1.0, 16.0};
  return temps;
}

// The stream: --input text through the folder's tokenizer, --ids from a safetensors file, or
// --seed's random ids; at most `n` tokens, each checked to be in [0, vocab).
StatusOr<std::vector<int32_t>> TokenStream(const Args& args, const std::string& model_dir,
                                           const Qwen3Config& cfg, long long n, uint64_t seed,
                                           std::string* source) {
  std::vector<int32_t> ids;
  if (args.Has("input") && args.Has("ids")) {
    return InvalidArgument("--input and --ids exclude each other");
  }
  if (const auto text_path = args.Get("input")) {
    *source = "input";
    const std::string tok_path = JoinPath(model_dir, "tokenizer.json");
    if (!std::filesystem::exists(tok_path)) {
      return NotFound("--input needs the model folder's tokenizer.json: '" + tok_path +
                      "' does not exist");
    }
    StatusOr<std::string> text = ReadFileAtMost(*text_path, kMaxInputBytes);
    if (!text.ok()) return text.status().WithContext("--input");
    VLS_ASSIGN_OR_RETURN(std::unique_ptr<tok::Tokenizer> tokenizer,
                         tok::Tokenizer::FromFile(tok_path));
    VLS_ASSIGN_OR_RETURN(ids, tokenizer->Encode(*text));
  } else if (const auto path = args.Get("ids")) {
    *source = "ids";
    VLS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(*path));
    const SafetensorsEntry* e = f->Find("input_ids");
    if (e == nullptr || e->dtype != DType::kI32 || e->shape.size() != 1) {
      return InvalidArgument("--ids: '" + *path + "' needs an int32 tensor input_ids of shape [N]");
    }
    const TensorView v = f->View(*e);
    ids.assign(v.i32(), v.i32() + v.numel());
  } else {
    *source = "random";
    return bench::RandomTokens(cfg, n, seed);
  }
  if (static_cast<long long>(ids.size()) > n) ids.resize(static_cast<size_t>(n));
  if (ids.size() < 2) {
    return InvalidArgument("--" + *source + " gives " + std::to_string(ids.size()) +
                           " tokens; at least 2 are needed");
  }
  VLS_RETURN_IF_ERROR(ValidateTokenIds(ids, cfg.vocab, source->c_str()));
  return ids;
}

const char* KvName(const LoadOptions& o) {
  const KvDType kv =
      o.kv_dtype.value_or(o.precision == kernels::Precision::kF32 ? KvDType::kF32 : KvDType::kBf16);
  return kv == KvDType::kF32 ? "f32" : "bf16";
}

// All-position logits [L, V] of a fresh prefill of `ids`.
Status ChunkLogits(Session& session, std::span<const int32_t> ids, std::vector<float>* logits) {
  const PositionIds positions =
      SequentialPositions(session.model().config().position_mode, static_cast<int64_t>(ids.size()));
  PromptView prompt;
  prompt.tokens = ids;
  prompt.positions = &positions;
  PrefillOptions opts;
  opts.all_logits = true;
  session.Reset();
  return session.Prefill(prompt, opts, logits);
}

void PrintTable(const std::string& header, const std::vector<KlSummary>& results) {
  std::printf("%s\n", header.c_str());
  std::printf("%8s %12s %12s %12s %12s %9s %12s\n", "T", "mean KL", "median KL", "p99 KL", "max KL",
              "top-1", "RMS dp");
  for (const KlSummary& s : results) {
    std::printf("%8g %12.4e %12.4e %12.4e %12.4e %8.2f%% %12.4e\n", s.temperature, s.kl_mean,
                s.kl_median, s.kl_p99, s.kl_max, 100 * s.top1_agreement, s.rms_delta_p);
  }
}

Status EvalKl(const Args& args) {
  VLS_RETURN_IF_ERROR(args.Require("model").status());
  VLS_ASSIGN_OR_RETURN(std::string precision, args.Require("precision"));
  VLS_ASSIGN_OR_RETURN(std::string model_dir, ModelDirFlag(args));
  LoadOptions test_lo;
  VLS_RETURN_IF_ERROR(ApplyLoadFlags(args, "f32", &test_lo));
  VLS_ASSIGN_OR_RETURN(long long tokens, args.Int("tokens", 512, 2, kMaxTokens));
  VLS_ASSIGN_OR_RETURN(long long chunk, args.Int("chunk", 128, 2, kMaxCapacity));
  VLS_ASSIGN_OR_RETURN(long long capacity, args.Int("capacity", chunk, chunk, kMaxCapacity));
  VLS_ASSIGN_OR_RETURN(long long score_from, args.Int("score-from", 0, 0, chunk - 2));
  VLS_ASSIGN_OR_RETURN(long long seed, args.Int("seed", 0, 0, 1LL << 62));
  VLS_ASSIGN_OR_RETURN(std::vector<double> temps, TemperatureFlags(args));
  const bool json = args.Has("json");

  VLS_ASSIGN_OR_RETURN(Qwen3Config cfg, LoadQwen3Config(model_dir));
  std::string source;
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenStream(args, model_dir, cfg, tokens,
                                                             static_cast<uint64_t>(seed), &source));
  const auto n = static_cast<int64_t>(ids.size());

  const auto start = std::chrono::steady_clock::now();
  test_lo.capacity = static_cast<int>(capacity);
  test_lo.progress = StderrProgress("eval-kl");
  LoadOptions ref_lo;
  ref_lo.capacity = test_lo.capacity;
  ref_lo.threads = test_lo.threads;
  ref_lo.precision = kernels::Precision::kF32;
  ref_lo.kv_dtype = KvDType::kF32;
  ref_lo.progress = test_lo.progress;
  std::fprintf(stderr, "[eval-kl] loading the f32 reference\n");
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> ref_model,
                       LoadedModel::Load(model_dir, ref_lo));
  std::fprintf(stderr, "[eval-kl] loading the %s model\n", precision.c_str());
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> test_model,
                       LoadedModel::Load(model_dir, test_lo));
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<Session> ref, Session::Create(*ref_model));
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<Session> test, Session::Create(*test_model));

  const int64_t V = cfg.vocab;
  const int64_t chunks = (n + chunk - 1) / chunk;
  KlAccumulator acc(temps);
  std::vector<float> ref_logits, test_logits;  // [L, V] of the current chunk
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * chunk;
    const int64_t len = std::min<int64_t>(chunk, n - begin);
    if (len < 2) break;  // a last chunk of one token predicts nothing within it
    const std::span<const int32_t> part(ids.data() + begin, static_cast<size_t>(len));
    VLS_RETURN_IF_ERROR(ChunkLogits(*ref, part, &ref_logits).WithContext("the f32 reference"));
    VLS_RETURN_IF_ERROR(
        ChunkLogits(*test, part, &test_logits).WithContext("the " + precision + " model"));
    for (int64_t i = score_from; i + 1 < len; ++i) {
      const auto row = static_cast<size_t>(i * V);
      acc.Add(std::span<const float>(ref_logits).subspan(row, static_cast<size_t>(V)),
              std::span<const float>(test_logits).subspan(row, static_cast<size_t>(V)),
              part[static_cast<size_t>(i + 1)]);
    }
    std::fprintf(stderr, "[eval-kl] chunk %lld/%lld: %lld positions, mean KL(T=%g) %.4e\n",
                 static_cast<long long>(c) + 1, static_cast<long long>(chunks),
                 static_cast<long long>(acc.positions()), temps[0], acc.MeanKl(0));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::vector<KlSummary> results = acc.Summarise();

  if (json) {
    nlohmann::ordered_json j;
    j["model"] = model_dir;
    j["precision"] = precision;
    j["kv_cache"] = KvName(test_lo);
    j["source"] = source;
    if (source == "random") j["seed"] = seed;
    j["tokens"] = n;
    j["chunk"] = chunk;
    j["chunks"] = chunks;
    j["score_from"] = score_from;
    j["positions"] = acc.positions();
    j["seconds"] = seconds;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const KlSummary& s : results) {
      rows.push_back({{"temperature", s.temperature},
                      {"positions", s.positions},
                      {"kl_mean", s.kl_mean},
                      {"kl_median", s.kl_median},
                      {"kl_p99", s.kl_p99},
                      {"kl_max", s.kl_max},
                      {"top1_agreement", s.top1_agreement},
                      {"rms_delta_p", s.rms_delta_p}});
    }
    j["results"] = rows;
    std::printf("%s\n", j.dump().c_str());
  } else {
    PrintTable("eval-kl " + model_dir + ": " + precision + " (KV " + KvName(test_lo) +
                   ") vs f32; " + std::to_string(n) + " tokens (" + source +
                   (source == "random" ? ", seed " + std::to_string(seed) : std::string()) + "), " +
                   std::to_string(chunks) + " chunks of " + std::to_string(chunk) + ", " +
                   std::to_string(acc.positions()) + " positions, " +
                   std::to_string(static_cast<int>(std::lround(seconds))) + " s",
               results);
  }
  return Status::Ok();
}

}  // namespace

int RunEvalKl(int argc, char** argv) { return RunCommand(EvalKlSpec(), argc, argv, EvalKl); }

}  // namespace vls::cli
