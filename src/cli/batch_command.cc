// `vlstack batch` (CONTRACTS §6): requests from a JSONL file through the continuous-batch
// engine; one JSON line per request, in input order.
//
// Requests are submitted in input order before the first step, so the engine's FIFO admits
// them in that order and a later request can reuse what an earlier one left in a free slot.
// A request with stop strings has a TextStream (UTF-8-safe decoding, special tokens left out,
// stop strings matched across token boundaries): it is cancelled at the token that completes a
// stop string, its text cut where the match begins, and it finishes with "stop".
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load_flags.h"
#include "cli/request_input.h"
#include "runtime/batch_engine.h"
#include "runtime/stop_matcher.h"
#include "runtime/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace vls::cli {
namespace {

using Json = nlohmann::json;

CommandSpec BatchSpec() {
  CommandSpec spec;
  spec.name = "batch";
  spec.usage =
      "usage: vlstack batch --model DIR --requests REQS.jsonl [options]\n"
      "\n"
      "Runs the requests of a JSONL file through the continuous-batch engine (CONTRACTS §6) and\n"
      "prints one JSON line per request, in input order. Requests are admitted in input order,\n"
      "so a later one can reuse the prefix an earlier one left in a free slot.\n"
      "\n"
      "Each input line: {\"id\":…, \"input\":\"file.safetensors\" (relative to the JSONL file,\n"
      "the tensors of `vlstack forward`), \"max_new_tokens\":N, \"ignore_eos\":bool,\n"
      "\"cancel_after_tokens\":k, \"temperature\", \"top_k\", \"top_p\", \"min_p\",\n"
      "\"repetition_penalty\", \"presence_penalty\", \"frequency_penalty\", \"seed\",\n"
      "\"stop\":[\"…\"]}.\n"
      "Each output line: {\"id\", \"tokens\", \"finish_reason\": stop|length|cancelled|error,\n"
      "\"cached_tokens\" (prompt tokens served from prefix reuse), \"text\", \"error\"}. \"text\"\n"
      "comes with \"stop\": decoded with the model folder's tokenizer.json (special tokens and\n"
      "the finishing EOS left out) and cut before the first stop string; finish_reason is stop\n"
      "when one matched, and tokens end with the one that completed it. A bad request gets an\n"
      "error line; the others still complete.\n"
      "\n"
      "  --model DIR          model folder (required)\n"
      "  --requests FILE      the JSONL requests (required)\n"
      "  --slots B            batch slots (default 4)\n"
      "  --capacity C         per-slot context in tokens (default: the largest prompt plus its\n"
      "                       max_new_tokens, at least the config's DeepStack Nmax)\n"
      "  --prefill-chunk N    prompt rows prefilled per engine step, interleaved with the other\n"
      "                       slots' decode; 0 for whole prompts (default 64)\n"
      "  --no-prefix-reuse    never admit a request onto a slot's kept prefix (default: reuse)\n" +
      LoadFlagsHelp("f32") + "  --help               this text\n";
  spec.value_flags = {"model", "requests", "slots", "capacity", "prefill-chunk"};
  spec.value_flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  spec.bool_flags = {"no-prefix-reuse"};
  return spec;
}

struct Line {
  Json id;  // as given (null when the line could not be parsed)
  std::string error;
  std::unique_ptr<SafetensorsFile> input;
  InputLengths lengths;
  int max_new_tokens = 16;
  bool ignore_eos = false;
  std::optional<int64_t> cancel_after;
  SamplingParams sampling;
  std::optional<std::vector<std::string>> stop;  // "stop" given: the line carries "text"
  // Results.
  uint64_t engine_id = 0;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  int32_t cached_tokens = 0;
  std::unique_ptr<TextStream> stream;  // with stop strings
  std::string text;
  FinishReason text_finish = FinishReason::kNone;  // the stream's (kStop when one matched)
};

template <typename T>
Status ReadField(const Json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  try {
    *out = it->get<T>();
  } catch (const std::exception&) {
    return InvalidArgument(std::string("field '") + key + "' has the wrong type: " + it->dump());
  }
  return Status::Ok();
}

Status ParseLine(const std::string& text, const std::string& base_dir, Line* line) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("the line is not a JSON object");
  if (j.contains("id")) line->id = j["id"];
  std::string input;
  VLS_RETURN_IF_ERROR(ReadField(j, "input", &input));
  if (input.empty()) return InvalidArgument("field 'input' is required");
  VLS_RETURN_IF_ERROR(ReadField(j, "max_new_tokens", &line->max_new_tokens));
  VLS_RETURN_IF_ERROR(ReadField(j, "ignore_eos", &line->ignore_eos));
  int64_t cancel = -1;
  VLS_RETURN_IF_ERROR(ReadField(j, "cancel_after_tokens", &cancel));
  if (j.contains("cancel_after_tokens") && !j["cancel_after_tokens"].is_null()) {
    if (cancel < 0) return InvalidArgument("cancel_after_tokens must be >= 0");
    line->cancel_after = cancel;
  }
  SamplingParams& s = line->sampling;
  VLS_RETURN_IF_ERROR(ReadField(j, "temperature", &s.temperature));
  VLS_RETURN_IF_ERROR(ReadField(j, "top_k", &s.top_k));
  VLS_RETURN_IF_ERROR(ReadField(j, "top_p", &s.top_p));
  VLS_RETURN_IF_ERROR(ReadField(j, "min_p", &s.min_p));
  VLS_RETURN_IF_ERROR(ReadField(j, "repetition_penalty", &s.repetition_penalty));
  VLS_RETURN_IF_ERROR(ReadField(j, "presence_penalty", &s.presence_penalty));
  VLS_RETURN_IF_ERROR(ReadField(j, "frequency_penalty", &s.frequency_penalty));
  if (j.contains("seed") && !j["seed"].is_null()) {
    uint64_t seed = 0;
    VLS_RETURN_IF_ERROR(ReadField(j, "seed", &seed));
    s.seed = seed;
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    std::vector<std::string> stop;
    if (it->is_string()) {
      stop.push_back(it->get<std::string>());
    } else if (it->is_array() &&
               std::all_of(it->begin(), it->end(), [](const Json& v) { return v.is_string(); })) {
      stop = it->get<std::vector<std::string>>();
    } else {
      return InvalidArgument("field 'stop' must be a list of strings: " + it->dump());
    }
    VLS_RETURN_IF_ERROR(ValidateStopStrings(stop).WithContext("field 'stop'"));
    line->stop = std::move(stop);
  }
  auto file = SafetensorsFile::Open(JoinPath(base_dir, input));
  if (!file.ok()) return file.status();
  line->input = std::move(*file);
  VLS_ASSIGN_OR_RETURN(line->lengths, PeekInput(*line->input));
  if (line->lengths.decode > 0) return InvalidArgument("decode_tokens is not used by batch");
  return Status::Ok();
}

StatusOr<GenerationRequest> BuildRequest(const Line& line, const Qwen3Model& model) {
  VLS_ASSIGN_OR_RETURN(RequestInput in, ReadRequestInput(*line.input, model));
  GenerationRequest r;
  if (in.has_ids) r.tokens = std::move(in.ids);
  if (!in.token_only) r.embeddings = std::move(in.embeddings);
  r.positions = std::move(in.positions);
  r.rope_delta = in.rope_delta;
  r.deepstack = std::move(in.deepstack);
  r.max_new_tokens = line.max_new_tokens;
  r.ignore_eos = line.ignore_eos;
  r.sampling = line.sampling;
  return r;
}

Status Batch(const Args& args) {
  VLS_RETURN_IF_ERROR(args.Require("model").status());
  VLS_ASSIGN_OR_RETURN(std::string reqs_path, args.Require("requests"));
  VLS_ASSIGN_OR_RETURN(std::string model_dir, ModelDirFlag(args));
  VLS_ASSIGN_OR_RETURN(long long slots, args.Int("slots", 4, 1, 1024));
  EngineOptions eo;
  VLS_ASSIGN_OR_RETURN(long long chunk, args.Int("prefill-chunk", eo.prefill_chunk, 0, 1 << 24));
  eo.prefill_chunk = static_cast<int>(chunk);
  eo.prefix_reuse = !args.Has("no-prefix-reuse");
  LoadOptions lo;
  VLS_RETURN_IF_ERROR(ApplyLoadFlags(args, "f32", &lo));
  std::ifstream in(reqs_path);
  if (!in) return NotFound("cannot open '" + reqs_path + "'");
  const std::string base = DirName(reqs_path);
  std::vector<Line> lines;
  std::string text;
  while (std::getline(in, text)) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Line line;
    Status s = ParseLine(text, base, &line);
    if (!s.ok()) line.error = s.ToString();
    lines.push_back(std::move(line));
  }
  // Capacity: the largest prompt + max_new_tokens (and a config-declared Nmax).
  VLS_ASSIGN_OR_RETURN(Qwen3Config file_cfg, LoadQwen3Config(model_dir));
  int64_t need = 1;
  for (const Line& l : lines) {
    if (l.error.empty()) need = std::max<int64_t>(need, l.lengths.prompt + l.max_new_tokens);
  }
  if (file_cfg.deepstack) need = std::max<int64_t>(need, file_cfg.deepstack->max_visual_positions);
  VLS_ASSIGN_OR_RETURN(long long capacity, args.Int("capacity", need, 1, 1 << 24));
  lo.capacity = static_cast<int>(capacity);
  lo.slots = static_cast<int>(slots);
  lo.progress = StderrProgress("batch");
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> model, LoadedModel::Load(model_dir, lo));
  std::fprintf(stderr,
               "[batch] %zu requests, %lld slots, capacity %lld, %s, prefill chunk %d, prefix "
               "reuse %s\n",
               lines.size(), slots, capacity, kernels::PrecisionName(lo.precision),
               eo.prefill_chunk, eo.prefix_reuse ? "on" : "off");

  // The tokenizer, only when some request has stop strings; without one those requests fail.
  std::unique_ptr<tok::Tokenizer> tokenizer;
  Status tokenizer_status = Status::Ok();
  if (std::any_of(lines.begin(), lines.end(),
                  [](const Line& l) { return l.error.empty() && l.stop.has_value(); })) {
    auto t = tok::Tokenizer::FromFile(model_dir);
    if (t.ok()) {
      tokenizer = std::move(*t);
    } else {
      tokenizer_status = t.status();
    }
  }

  std::map<uint64_t, Line*> by_id;
  BatchEngine engine(
      *model,
      [&by_id](const TokenEvent& e) {
        Line* l = by_id[e.request_id];
        l->cached_tokens = e.cached_tokens;
        if (e.token >= 0) l->tokens.push_back(e.token);
        bool stop_string = false;
        if (l->stream) {
          TextDelta d = l->stream->Next(e);
          l->text += d.text;
          if (d.finish != FinishReason::kNone) l->text_finish = d.finish;
          stop_string = d.cancel_request;
        }
        if (e.finish != FinishReason::kNone) {
          l->finish = e.finish;
          if (!e.error.empty()) l->error = e.error;
          return true;
        }
        if (stop_string) return false;  // cancels: nothing after the stop string is generated
        // Cancel as soon as the request has emitted cancel_after_tokens tokens.
        return !(l->cancel_after && static_cast<int64_t>(l->tokens.size()) >= *l->cancel_after);
      },
      eo);
  for (Line& l : lines) {
    if (!l.error.empty()) continue;
    if (l.stop) {
      if (!tokenizer) {
        l.error = "stop strings need the model folder's tokenizer: " + tokenizer_status.ToString();
        continue;
      }
      l.stream = std::make_unique<TextStream>(tokenizer.get(), *l.stop);
    }
    auto req = BuildRequest(l, model->model());
    if (!req.ok()) {
      l.error = RenameDeepStackTensors(req.status()).ToString();
      continue;
    }
    if (l.cancel_after && *l.cancel_after == 0) {
      l.finish = FinishReason::kCancelled;  // cancelled before it emitted anything
      continue;
    }
    auto id = engine.Submit(std::move(*req));
    if (!id.ok()) {
      l.error = RenameDeepStackTensors(id.status()).ToString();
      continue;
    }
    l.engine_id = *id;
    by_id[*id] = &l;
    l.input.reset();
  }
  engine.RunUntilIdle();
  for (const Line& l : lines) {
    Json out;
    out["id"] = l.id;
    out["tokens"] = l.tokens;
    const bool failed = !l.error.empty();
    const FinishReason finish = l.text_finish != FinishReason::kNone ? l.text_finish : l.finish;
    out["finish_reason"] = failed ? "error" : FinishReasonName(finish);
    out["cached_tokens"] = failed ? 0 : l.cached_tokens;
    if (l.stop && !failed) out["text"] = l.text;
    if (failed) out["error"] = l.error;
    std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  }
  return Status::Ok();
}

}  // namespace

int RunBatch(int argc, char** argv) { return RunCommand(BatchSpec(), argc, argv, Batch); }

}  // namespace vls::cli
