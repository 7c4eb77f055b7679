// `vlstack batch` (docs/contracts.md §6): requests from a JSONL file through the continuous-batch
// engine; one JSON line per request, in input order.
//
// Requests are submitted in input order before the first step, so the engine's FIFO admits
// them in that order and a later request can reuse what an earlier one left in a free slot.
// A request with stop strings has a ReplyText (UTF-8-safe decoding, special tokens left out,
// stop strings matched across token boundaries): it is cancelled at the token that completes a
// stop string, its text cut where the match begins, and it finishes with "stop".
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/image_request.h"
#include "cli/load_flags.h"
#include "cli/request_input.h"
#include "cli/speculative_flags.h"
#include "io/untrusted_json.h"
#include "runtime/batch_engine.h"
#include "runtime/grammar_vocab.h"
#include "runtime/reply_text.h"
#include "runtime/stop_matcher.h"
#include "runtime/structured_output_grammar.h"
#include "tokenizer/tokenizer.h"

namespace vls::cli {
namespace {

using Json = nlohmann::json;

}  // namespace

CommandSpec BatchSpec() {
  CommandSpec spec;
  spec.name = "batch";
  spec.usage =
      "usage: vlstack batch --model DIR --requests REQS.jsonl [options]\n"
      "\n"
      "Runs the requests of a JSONL file through the continuous-batch engine\n"
      "(docs/contracts.md §6) and prints one JSON line per request, in input order.\n"
      "Requests are admitted in input order, so a later one can reuse the prefix an earlier\n"
      "one left in a free slot.\n"
      "\n"
      "Each input line: {\"id\":…, \"input\":\"file.safetensors\" (relative to the JSONL file,\n"
      "the tensors of `vlstack forward`), \"max_new_tokens\":N, \"ignore_eos\":bool,\n"
      "\"cancel_after_tokens\":k, \"temperature\", \"top_k\", \"top_p\", \"min_p\",\n"
      "\"repetition_penalty\", \"presence_penalty\", \"frequency_penalty\", \"seed\",\n"
      "\"stop\":[\"…\"], \"images\":[\"a.png\", …] (relative to the JSONL file; input_ids then\n"
      "holds one image pad per image, which the engine expands, as `forward --image` does),\n"
      "\"videos\":[\"a.mp4\", …] (relative to the JSONL file; input_ids then holds one\n"
      "vision_start video_pad vision_end per video, in prompt order with the image pads, which\n"
      "become the video's timestamped frame groups, as `forward --video` does), \"fps\",\n"
      "\"max_frames\", \"num_frames\" (the sampling of the line's videos: 2 frames a second\n"
      "within 4..768 by default; fps at most 60, frames at most 768; not fps with num_frames),\n"
      "\"speculative\":{\"method\": \"off\"|\"ngram\"|\"draft\", \"draft_tokens\":K} (default:\n"
      "--speculate), \"json_schema\":{…} | \"grammar\":\"GBNF\" | \"regex\":\"RE\" (structured "
      "output,\n"
      "at most one: the tokens follow it, compiled with the model folder's tokenizer.json; add\n"
      "\"stop\":[] for the \"text\")}.\n"
      "Each output line: {\"id\", \"tokens\", \"finish_reason\": stop|length|cancelled|error,\n"
      "\"cached_tokens\" (prompt tokens served from prefix reuse), \"text\", \"error\"}. \"text\"\n"
      "comes with \"stop\": decoded with the model folder's tokenizer.json (special tokens and\n"
      "the finishing EOS left out) and cut before the first stop string; finish_reason is stop\n"
      "when one matched, and tokens end with the one that completed it. A bad request gets an\n"
      "error line; the others still complete.\n"
      "\n"
      "  --model DIR          model folder (required)\n"
      "                       or Org/Name: a Hugging Face repository id in the local cache\n"
      "  --requests FILE      the JSONL requests (required)\n"
      "  --slots B            batch slots (default 4)\n"
      "  --capacity C         per-slot context in tokens (default: the largest prompt plus its\n"
      "                       max_new_tokens, at least the config's DeepStack Nmax)\n"
      "  --prefill-chunk N    prompt rows per prefilling slot and step while others decode,\n"
      "                       in the same pass as their decode rows; 0 for whole prompts\n"
      "                       (default 64; with nothing decoding a prompt goes in one pass)\n"
      "  --no-prefix-reuse    never admit a request onto a slot's kept prefix (default: reuse)\n" +
      SpeculativeFlagsHelp() + LoadFlagsHelp("f32") + "  --help               this text\n";
  spec.value_flags = {"model", "requests", "slots", "capacity", "prefill-chunk"};
  spec.value_flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  spec.value_flags.insert(SpeculativeFlagNames().begin(), SpeculativeFlagNames().end());
  spec.bool_flags = {"no-prefix-reuse"};
  spec.example =
      "  vlstack batch --model ./model --requests requests.jsonl --slots 8 > results.jsonl\n";
  return spec;
}

namespace {

// One request line and its results.
struct Line {
  BatchLine req;
  std::string error;
  InputLengths lengths;
  // Results.
  uint64_t engine_id = 0;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  int32_t cached_tokens = 0;
  std::unique_ptr<ReplyText> reply;  // with stop strings (kStop once one matched)
};

// Runs `fn` and turns whatever escapes it (out of memory, a bug's exception) into a Status, so
// one line's failure is that line's error and never ends the batch.
template <typename Fn>
Status Guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory while handling the request");
  } catch (const std::exception& e) {
    return Internal(std::string("unexpected error while handling the request: ") + e.what());
  }
}

// Opens a line's input for as long as `fn` needs it: lines hold no file between steps, so a
// batch of any length stays within the open-file limit.
template <typename Fn>
Status WithInput(const std::string& base_dir, const BatchLine& req, Fn&& fn) {
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                       SafetensorsFile::Open(JoinPath(base_dir, req.input)));
  return fn(*file);
}

// A line's image and video files, relative to the JSONL file's folder, and its video sampling.
VisualFiles LineFiles(const std::string& base_dir, const BatchLine& req) {
  const auto path = [&](const std::string& f) {
    return !f.empty() && f[0] == '/' ? f : JoinPath(base_dir, f);
  };
  VisualFiles v;
  for (const std::string& f : req.images) v.images.push_back(path(f));
  for (const std::string& f : req.videos) v.videos.push_back(path(f));
  v.video = req.video;
  return v;
}

bool HasVisual(const BatchLine& req) { return !req.images.empty() || !req.videos.empty(); }

// First pass over a line: parse it, read its input's lengths (images decoded and videos probed
// to plan their tokens), check its token counts against `max_tokens` (named `limit`).
Status CheckLine(std::string_view label, const std::string& text, const std::string& base_dir,
                 const std::string& model_dir, int64_t max_tokens, std::string_view limit,
                 Line* line) {
  VLS_RETURN_IF_ERROR(ParseBatchLine(label, text, &line->req));
  VLS_RETURN_IF_ERROR(WithInput(base_dir, line->req, [&](const SafetensorsFile& in) -> Status {
    VLS_ASSIGN_OR_RETURN(line->lengths, PeekInput(in));
    return HasVisual(line->req) ? CheckImageInputTensors(in) : Status::Ok();
  }));
  if (HasVisual(line->req)) {
    VLS_ASSIGN_OR_RETURN(line->lengths.prompt, PlanExpandedLength(model_dir, line->lengths.prompt,
                                                                  LineFiles(base_dir, line->req)));
  }
  if (line->lengths.decode > 0) return InvalidArgument("decode_tokens is not used by batch");
  return CheckRequestTokens(line->lengths.prompt, line->req.max_new_tokens, "max_new_tokens",
                            max_tokens, limit);
}

// The output line of `l` (docs/contracts.md §6). Text from outside (the id, error messages naming
// files or fields) may hold invalid UTF-8: DumpJsonSafe replaces it rather than throwing.
std::string OutputLine(const Line& l) {
  Json out;
  out["id"] = l.req.id;
  const bool failed = !l.error.empty();
  out["tokens"] = failed ? std::vector<int32_t>() : l.tokens;
  const FinishReason finish = l.reply && l.reply->finished() ? l.reply->finish() : l.finish;
  out["finish_reason"] = failed ? "error" : FinishReasonName(finish);
  out["cached_tokens"] = failed ? 0 : l.cached_tokens;
  if (l.req.stop && !failed) out["text"] = l.reply ? l.reply->text() : std::string();
  if (failed) out["error"] = l.error;
  return DumpJsonSafe(out);
}

// The token count a line asks the KV cache for: its prompt plus max_new_tokens.
int64_t Need(const Line& l) { return l.lengths.prompt + l.req.max_new_tokens; }

// Loads the model for the lines. Without --capacity the capacity is the largest line's need
// (at least a config-declared Nmax); when the KV caches of that capacity do not fit in memory
// (ResourceExhausted), the lines that ask for the most fail alone, each with its own error, and
// the next largest need is tried, so one long request never takes the others down.
StatusOr<std::unique_ptr<LoadedModel>> LoadForLines(const std::string& model_dir,
                                                    const Qwen3Config& cfg,
                                                    std::optional<long long> given_capacity,
                                                    LoadOptions lo, std::vector<Line>* lines) {
  if (given_capacity) {
    lo.capacity = static_cast<int>(*given_capacity);
    return LoadedModel::Load(model_dir, lo);
  }
  std::vector<int64_t> needs;  // distinct, largest first
  for (const Line& l : *lines) {
    if (l.error.empty()) needs.push_back(Need(l));
  }
  std::sort(needs.begin(), needs.end(), std::greater<>());
  needs.erase(std::unique(needs.begin(), needs.end()), needs.end());
  const int64_t nmax = cfg.deepstack ? cfg.deepstack->max_visual_positions : 0;
  for (size_t i = 0;; ++i) {
    const int64_t need = i < needs.size() ? needs[i] : 1;
    lo.capacity = static_cast<int>(std::max<int64_t>({need, nmax, 1}));
    auto model = LoadedModel::Load(model_dir, lo);
    if (model.ok() || model.status().code() != StatusCode::kResourceExhausted ||
        i + 1 >= needs.size()) {
      return model;
    }
    for (Line& l : *lines) {
      if (l.error.empty() && Need(l) == need) {
        l.error = OutOfRange("prompt " + std::to_string(l.lengths.prompt) + " + max_new_tokens " +
                             std::to_string(l.req.max_new_tokens) +
                             " needs a context capacity whose KV caches do not fit: " +
                             model.status().message())
                      .ToString();
      }
    }
  }
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
  VLS_RETURN_IF_ERROR(ApplySpeculativeFlags(args, &eo.speculative));
  LoadOptions lo;
  VLS_RETURN_IF_ERROR(ApplyLoadFlags(args, "f32", &lo));
  VLS_ASSIGN_OR_RETURN(Qwen3Config file_cfg, LoadQwen3Config(model_dir));
  // Each line's prompt + max_new_tokens must fit the capacity when one is given, else the
  // model's max_position_embeddings: a line over it fails alone and never sizes the KV cache.
  std::optional<long long> given_capacity;
  if (args.Has("capacity")) {
    VLS_ASSIGN_OR_RETURN(given_capacity, args.Int("capacity", 0, 1, 1 << 24));
  }
  const int64_t max_tokens = given_capacity ? *given_capacity : MaxRequestTokens(file_cfg);
  const std::string limit =
      given_capacity ? "the context capacity" : "the model's max_position_embeddings";

  std::ifstream in(reqs_path, std::ios::binary);
  if (!in) return NotFound("cannot open '" + reqs_path + "'");
  const std::string base = DirName(reqs_path);
  std::vector<Line> lines;
  std::string text;
  for (size_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Line& line = lines.emplace_back();
    const std::string label = "line " + std::to_string(line_no);
    Status s =
        Guarded([&] { return CheckLine(label, text, base, model_dir, max_tokens, limit, &line); });
    if (!s.ok()) line.error = s.ToString();
  }
  if (in.bad()) return DataLoss("reading '" + reqs_path + "' failed");
  lo.slots = static_cast<int>(slots);
  lo.progress = StderrProgress("batch");
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> model,
                       LoadForLines(model_dir, file_cfg, given_capacity, lo, &lines));
  const long long capacity = model->bounds().capacity;
  lo.capacity = static_cast<int>(capacity);
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> draft,
                       LoadDraftModel(args, model_dir, *model, lo));
  eo.draft_model = draft.get();
  std::fprintf(stderr,
               "[batch] %zu requests, %lld slots, capacity %lld, %s, prefill chunk %d, prefix "
               "reuse %s, draft tokens %d (%s)\n",
               lines.size(), slots, capacity, kernels::PrecisionName(lo.precision),
               eo.prefill_chunk, eo.prefix_reuse ? "on" : "off", eo.speculative.draft_tokens,
               DraftSourceName(eo.speculative.source));

  // The tokenizer, only when some request has stop strings or structured output; without one
  // those requests fail.
  std::unique_ptr<tok::Tokenizer> tokenizer;
  Status tokenizer_status = Status::Ok();
  if (std::any_of(lines.begin(), lines.end(), [](const Line& l) {
        return l.error.empty() && (l.req.stop.has_value() || l.req.structured.active());
      })) {
    auto t = tok::Tokenizer::FromFile(model_dir);
    if (t.ok()) {
      tokenizer = std::move(*t);
    } else {
      tokenizer_status = t.status();
    }
  }

  // The vision tower, only when some request has images or videos; without one those requests
  // fail. The timestamps of videos are written with the model folder's tokenizer.
  std::unique_ptr<ImageEncoder> encoder;
  Status encoder_status = Status::Ok();
  std::unique_ptr<tok::Tokenizer> timestamps;
  Status timestamps_status = Status::Ok();
  if (std::any_of(lines.begin(), lines.end(),
                  [](const Line& l) { return l.error.empty() && !l.req.videos.empty(); })) {
    auto t = LoadTimestampTokenizer(model_dir);
    if (t.ok()) {
      timestamps = std::move(*t);
    } else {
      timestamps_status = t.status();
    }
  }
  if (std::any_of(lines.begin(), lines.end(),
                  [](const Line& l) { return l.error.empty() && HasVisual(l.req); })) {
    auto e = ImageEncoder::Load(model_dir, *model, ImageEncoderOptions{});
    if (e.ok()) {
      encoder = std::move(*e);
    } else {
      encoder_status = e.status();
    }
  }

  // The request of a line with images or videos: its input_ids, the media encoded and placed.
  const auto VisualLineRequest = [&](const SafetensorsFile& f, const BatchLine& line,
                                     GenerationRequest* out) -> Status {
    if (!encoder) return encoder_status.WithContext(line.videos.empty() ? "images" : "videos");
    if (!line.videos.empty() && !timestamps) return timestamps_status.WithContext("videos");
    VisualFeatures features;
    auto input = ReadVisualRequestInput(f, *model, *encoder, LineFiles(base, line),
                                        timestamps.get(), &features);
    if (!input.ok()) return input.status();
    auto r = BatchRequest(std::move(*input), line, capacity);
    if (!r.ok()) return r.status();
    *out = std::move(*r);
    return Status::Ok();
  };

  // Structured output: the lines' grammars over the model's vocabulary, compiled once each.
  std::unique_ptr<GrammarCache> grammars;
  if (tokenizer) {
    grammars = std::make_unique<GrammarCache>(BuildGrammarVocab(*tokenizer, model->config().vocab),
                                              grammar::GrammarLimits{});
  }

  std::map<uint64_t, Line*> by_id;
  BatchEngine engine(
      *model,
      [&by_id](const TokenEvent& e) {
        Line* l = by_id[e.request_id];
        l->cached_tokens = e.cached_tokens;
        if (e.token >= 0) l->tokens.push_back(e.token);
        const bool stop_string = l->reply && !l->reply->Feed(e);
        if (e.finish != FinishReason::kNone) {
          l->finish = e.finish;
          if (!e.error.empty()) l->error = e.error;
          return true;
        }
        if (stop_string) return false;  // cancels: nothing after the stop string is generated
        // Cancel as soon as the request has emitted cancel_after_tokens tokens.
        const auto& cancel = l->req.cancel_after;
        return !(cancel && static_cast<int64_t>(l->tokens.size()) >= *cancel);
      },
      eo);
  // Second pass: each line's input is opened, read into its request and closed again.
  const auto submit = [&](Line& l) -> Status {
    if (l.req.stop) {
      if (!tokenizer) {
        return FailedPrecondition("stop strings need the model folder's tokenizer: " +
                                  tokenizer_status.ToString());
      }
      l.reply = std::make_unique<ReplyText>(TextStream(tokenizer.get(), *l.req.stop));
    }
    GenerationRequest req;
    VLS_RETURN_IF_ERROR(WithInput(base, l.req, [&](const SafetensorsFile& f) -> Status {
      if (HasVisual(l.req)) return VisualLineRequest(f, l.req, &req);
      auto r = BatchRequestFromInput(f, l.req, model->model(), capacity);
      if (!r.ok()) return RenameDeepStackTensors(r.status());
      req = std::move(*r);
      return Status::Ok();
    }));
    if (l.req.structured.active()) {
      if (!grammars) {
        return FailedPrecondition("structured output needs the model folder's tokenizer: " +
                                  tokenizer_status.ToString());
      }
      VLS_ASSIGN_OR_RETURN(req.grammar, grammars->Get(l.req.structured, nullptr));
    }
    if (l.req.cancel_after && *l.req.cancel_after == 0) {
      l.finish = FinishReason::kCancelled;  // cancelled before it emitted anything
      return Status::Ok();
    }
    auto id = engine.Submit(std::move(req));
    if (!id.ok()) return RenameDeepStackTensors(id.status());
    l.engine_id = *id;
    by_id[*id] = &l;
    return Status::Ok();
  };
  for (Line& l : lines) {
    if (!l.error.empty()) continue;
    Status s = Guarded([&] { return submit(l); });
    if (!s.ok()) l.error = s.ToString();
  }
  engine.RunUntilIdle();
  for (const Line& l : lines) {
    std::string out;
    Status s = Guarded([&] {
      out = OutputLine(l);
      return Status::Ok();
    });
    if (!s.ok())
      out =
          R"({"id":null,"tokens":[],"finish_reason":"error","error":"the output line could not be written"})";
    std::printf("%s\n", out.c_str());
  }
  return Status::Ok();
}

}  // namespace

int RunBatch(int argc, char** argv) { return RunCommand(BatchSpec(), argc, argv, Batch); }

}  // namespace vls::cli
