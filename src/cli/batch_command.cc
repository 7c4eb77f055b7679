// `vlstack batch` (CONTRACTS §6): requests from a JSONL file through the continuous-batch
// engine; one JSON line per request, in input order.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/request_input.h"
#include "runtime/batch_engine.h"

namespace vls::cli {
namespace {

using Json = nlohmann::json;

struct Line {
  Json id;  // as given (null when the line could not be parsed)
  std::string error;
  std::unique_ptr<SafetensorsFile> input;
  InputLengths lengths;
  int max_new_tokens = 16;
  bool ignore_eos = false;
  std::optional<int64_t> cancel_after;
  SamplingParams sampling;
  // Results.
  uint64_t engine_id = 0;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
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
  VLS_ASSIGN_OR_RETURN(std::string model_dir, args.Require("model"));
  VLS_ASSIGN_OR_RETURN(std::string reqs_path, args.Require("requests"));
  VLS_ASSIGN_OR_RETURN(long long slots, args.Int("slots", 4, 1, 1024));
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
  LoadOptions lo;
  lo.capacity = static_cast<int>(capacity);
  lo.slots = static_cast<int>(slots);
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> model, LoadedModel::Load(model_dir, lo));
  std::fprintf(stderr, "[batch] %zu requests, %lld slots, capacity %lld\n", lines.size(), slots,
               capacity);

  std::map<uint64_t, Line*> by_id;
  BatchEngine engine(*model, [&by_id](const TokenEvent& e) {
    Line* l = by_id[e.request_id];
    if (e.token >= 0) l->tokens.push_back(e.token);
    if (e.finish != FinishReason::kNone) {
      l->finish = e.finish;
      if (!e.error.empty()) l->error = e.error;
      return true;
    }
    // Cancel as soon as the request has emitted cancel_after_tokens tokens.
    return !(l->cancel_after && static_cast<int64_t>(l->tokens.size()) >= *l->cancel_after);
  });
  for (Line& l : lines) {
    if (!l.error.empty()) continue;
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
    out["finish_reason"] = failed ? "error" : FinishReasonName(l.finish);
    if (failed) out["error"] = l.error;
    std::printf("%s\n", out.dump().c_str());
  }
  return Status::Ok();
}

}  // namespace

int RunBatch(int argc, char** argv) {
  auto args = Args::Parse(argc, argv, {"model", "requests", "slots", "capacity"}, {});
  if (!args.ok()) return Fail("batch", args.status());
  Status s = Batch(*args);
  if (!s.ok()) return Fail("batch", s);
  return 0;
}

}  // namespace vls::cli
