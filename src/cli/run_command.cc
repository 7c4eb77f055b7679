// `vlstack run`: chat with a model from the command line. The request goes through the same
// pipeline as the server and the C ABI (ChatPipeline -> BatchEngine -> ReplyText), the reply
// streams to stdout as it is generated, the speeds go to stderr.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/image_request.h"
#include "cli/load_flags.h"
#include "cli/speculative_flags.h"
#include "runtime/batch_engine.h"
#include "runtime/chat_pipeline.h"
#include "runtime/reply_text.h"

namespace vls::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr const char* kHelpHead =
    "usage: vlstack run --model DIR [--prompt TEXT] [options]\n"
    "\n"
    "Chat with a model: renders the model's chat template, streams the reply to stdout as it\n"
    "is generated, and prints prompt and generation tokens/s and the time to first token to\n"
    "stderr.\n"
    "\n"
    "  --model DIR          model folder: weights, config.json, tokenizer.json and a chat\n"
    "                       template (tokenizer_config.json, chat_template.json or .jinja)\n"
    "                       or Org/Name: a Hugging Face repository id in the local cache\n"
    "  --prompt TEXT        one user turn. Without it: on a terminal, a multi-turn chat (a\n"
    "                       '> ' prompt on stderr; /exit or end of input ends it; the KV cache\n"
    "                       of the conversation is reused, so a turn prefills only what is new);\n"
    "                       otherwise the whole of stdin is the prompt (one turn)\n"
    "  --system TEXT        a system message before the conversation\n"
    "  --image FILE         (repeatable) an image (JPEG, PNG, WebP) placed before the text of\n"
    "                       the (first) user turn; the model folder needs its vision tower\n"
    "                       and preprocessor_config.json. In a chat the picture stays in the\n"
    "                       conversation and is encoded once (encoder cache)\n"
    "  --video FILE         (repeatable) a video (MP4, WebM, ...) placed before the text of\n"
    "                       the (first) user turn, after the images (docs/video.md)\n"
    "  --fps F              video frames sampled per second (default: the model's config, 2)\n"
    "  --max-frames N       at most N frames sampled per video (default: the config's, 768)\n"
    "  --max-tokens N       most tokens to generate per turn (default: until an end-of-turn\n"
    "                       token or the context capacity)\n"
    "  --temperature T      0 is greedy. Default: the model's generation_config.json sampling\n"
    "                       (temperature, top_p, top_k) when it sets do_sample, else greedy\n"
    "  --top-p P            nucleus sampling (default: generation_config.json's, else off)\n"
    "  --top-k K            top-k sampling, 0 off (default: generation_config.json's, else off)\n"
    "  --seed S             sampling seed (default: fixed per request)\n"
    "  --stop STR           (repeatable) stop string: the reply ends right before it\n"
    "  --json-schema FILE   the reply is JSON valid under this JSON Schema (the subset of\n"
    "                       docs/structured_output.md; a keyword outside it is refused by name)\n"
    "  --grammar FILE       the reply follows this GBNF grammar (llama.cpp's syntax, root rule\n"
    "                       \"root\")\n"
    "  --regex RE           the whole reply matches this regular expression\n"
    "                       (at most one of the three; every turn of a chat follows it; the\n"
    "                       reply ends where the grammar must end, and --max-tokens cuts it as\n"
    "                       a valid prefix)\n"
    "  --capacity C         context capacity in tokens (default 4096)\n"
    "  --prefill-chunk N    prompt tokens per step and prompt while other streams decode\n"
    "                       (default 64; 0: the whole prompt at once; alone, a prompt goes\n"
    "                       in one pass)\n";
constexpr const char* kHelpTail =
    "  --precision P        f32, bf16, int8 or int4 (default bf16)\n"
    "  --kv-cache K         f32 or bf16 (default: f32 at --precision f32, else bf16)\n"
    "  --kv-memory SIZE     KV memory of the engine: bytes (4G, 512M) or tokens (65536t)\n"
    "                       (default: the slots at full capacity, if that fits)\n"
    "  --threads T          kernel threads (default: all cores)\n"
    "  --artifact FILE      prepared weights from `vlstack compile`\n"
    "  --artifact-memory M  copy (default: into huge pages) or map (the file's shared pages)\n"
    "  --help               this text\n"
    "\n"
    "The reply is written exactly as generated, special tokens left out; a newline follows it\n"
    "only when stdout is a terminal (and after every turn of a chat). Exit code 2 for invalid\n"
    "input (a missing model folder, a bad flag, an unreadable image, a NaN or infinite weight),\n"
    "1 for other failures (non-finite logits included).\n";

// Invalid input and missing files are the user's to fix (2); anything else is ours (1).
int RunFail(const Status& s) { return Fail("run", s); }

// One turn's stream and timings, filled by the engine callback.
struct Turn {
  std::optional<ReplyText> reply;  // its finish, error and usage once the turn ended
  std::string text;                // the whole reply, as written to stdout
  int tokens = 0;
  Clock::time_point start, first, last;
};

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void PrintStats(const Turn& t) {
  const Usage& usage = t.reply->usage();
  const char* finish = FinishReasonName(t.reply->finish());
  const int computed = usage.prompt_tokens - usage.cached_tokens;
  if (t.tokens == 0) {
    std::fprintf(stderr, "[run] prompt: %d tokens (%d cached); no token generated (%s)\n",
                 usage.prompt_tokens, usage.cached_tokens, finish);
    return;
  }
  const double ttft = Ms(t.start, t.first);
  std::fprintf(
      stderr, "[run] prompt: %d tokens (%d cached), %.1f tokens/s; time to first token %.1f ms\n",
      usage.prompt_tokens, usage.cached_tokens, ttft > 0 ? 1e3 * computed / ttft : 0.0, ttft);
  const double gen_ms = Ms(t.first, t.last);
  std::fprintf(stderr, "[run] generation: %d tokens, %.1f tokens/s; finish: %s\n", t.tokens,
               t.tokens > 1 && gen_ms > 0 ? 1e3 * (t.tokens - 1) / gen_ms : 0.0, finish);
}

// Speculation's totals over the engine's life (with --speculate).
void PrintSpeculation(const BatchEngine& engine) {
  if (engine.options().speculative.draft_tokens == 0) return;
  const EngineCounters c = engine.counters();
  std::fprintf(stderr,
               "[run] speculation: %llu verify passes, %llu drafted, %llu accepted (%.1f%%)\n",
               static_cast<unsigned long long>(c.verify_passes),
               static_cast<unsigned long long>(c.draft_tokens),
               static_cast<unsigned long long>(c.accepted_draft_tokens),
               c.draft_tokens > 0 ? 100.0 * static_cast<double>(c.accepted_draft_tokens) /
                                        static_cast<double>(c.draft_tokens)
                                  : 0.0);
}

// --json-schema FILE, --grammar FILE or --regex RE (at most one) as the request's structured
// output; files are read up to the grammar source bound. Compiled by ChatPipeline::Prepare.
Status StructuredOutputFromArgs(const Args& args, StructuredOutput* out) {
  const char* given = nullptr;
  for (const char* flag : {"json-schema", "grammar", "regex"}) {
    if (!args.Has(flag)) continue;
    if (given != nullptr) {
      return InvalidArgument(std::string("--") + flag + " cannot be combined with --" + given +
                             ": give at most one of --json-schema, --grammar and --regex");
    }
    given = flag;
  }
  if (given == nullptr) return Status::Ok();
  const std::string name = std::string("--") + given;
  std::string value = args.Get(given).value_or("");
  if (std::string_view(given) != "regex") {
    const size_t bound = grammar::GrammarLimits{}.max_source_bytes;
    auto text = ReadFileAtMost(value, bound);
    if (!text.ok()) return text.status().WithContext(name);
    if (text->size() > bound) {
      return InvalidArgument(name + " " + value + ": more than " + std::to_string(bound) +
                             " bytes (the grammar source bound)");
    }
    value = std::move(*text);
  }
  out->kind = std::string_view(given) == "json-schema" ? StructuredOutput::Kind::kJsonSchema
              : std::string_view(given) == "grammar"   ? StructuredOutput::Kind::kGbnf
                                                       : StructuredOutput::Kind::kRegex;
  out->source = std::move(value);
  out->field = name;
  return Status::Ok();
}

// The token masks' cost over the engine's life (with structured output).
void PrintGrammar(const BatchEngine& engine) {
  const EngineCounters c = engine.counters();
  if (c.grammar_masks == 0) return;
  const double n = static_cast<double>(c.grammar_masks);
  std::fprintf(stderr,
               "[run] structured output: %llu token masks, %.1f us each (%.1f us of it on the "
               "critical path)\n",
               static_cast<unsigned long long>(c.grammar_masks),
               static_cast<double>(c.grammar_mask_ns) / n / 1e3,
               static_cast<double>(c.grammar_mask_wait_ns) / n / 1e3);
}

struct Options {
  std::string system;
  std::vector<std::string> images;  // --image files, before the first user turn's text
  std::vector<std::string> videos;  // --video files, after the images
  ChatRequest base;                 // sampling, limits and stop strings shared by every turn
};

StatusOr<Options> ParseOptions(const Args& args, const ChatPipeline& pipeline) {
  Options o;
  o.system = args.Get("system").value_or("");
  VLS_ASSIGN_OR_RETURN(VisualFiles visual, VisualFilesFromArgs(args));
  o.images = std::move(visual.images);
  o.videos = std::move(visual.videos);
  ChatRequest& r = o.base;
  r.video = visual.video;
  r.sampling = pipeline.generation_defaults();
  if (args.Has("temperature")) {
    VLS_ASSIGN_OR_RETURN(double t, args.Double("temperature", 0.0));
    r.sampling.temperature = static_cast<float>(t);
  }
  if (args.Has("top-p")) {
    VLS_ASSIGN_OR_RETURN(double p, args.Double("top-p", 1.0));
    r.sampling.top_p = static_cast<float>(p);
  }
  if (args.Has("top-k")) {
    VLS_ASSIGN_OR_RETURN(long long k, args.Int("top-k", 0, 0, 1 << 30));
    r.sampling.top_k = static_cast<int>(k);
  }
  if (args.Has("seed")) {
    VLS_ASSIGN_OR_RETURN(long long seed, args.Int("seed", 0, 0, (1LL << 62)));
    r.sampling.seed = static_cast<uint64_t>(seed);
  }
  if (Status s = ValidateSamplingParams(r.sampling); !s.ok()) return s;
  if (args.Has("max-tokens")) {
    VLS_ASSIGN_OR_RETURN(long long m, args.Int("max-tokens", 0, 1, 1 << 30));
    r.max_tokens = static_cast<int>(m);
  }
  r.stop = args.GetAll("stop");
  VLS_RETURN_IF_ERROR(ValidateStopStrings(r.stop));
  VLS_RETURN_IF_ERROR(StructuredOutputFromArgs(args, &r.structured));
  return o;
}

// Runs one request to its end, streaming the reply to stdout.
Status RunTurn(BatchEngine& engine, const ChatPipeline& pipeline, const ChatRequest& request,
               Turn*& current, Turn* turn) {
  VLS_ASSIGN_OR_RETURN(PreparedChat chat, pipeline.Prepare(request));
  turn->reply.emplace(pipeline.NewTextStream(chat));
  turn->start = Clock::now();
  current = turn;
  auto id = engine.Submit(std::move(chat.request));
  if (!id.ok()) {
    current = nullptr;
    return id.status();
  }
  engine.RunUntilIdle();
  current = nullptr;
  if (turn->reply->finish() == FinishReason::kError) {
    return Internal("generation failed: " + turn->reply->error());
  }
  return Status::Ok();
}

// Reads all of stdin (the piped prompt), without its trailing newlines.
StatusOr<std::string> ReadStdin() {
  std::string text(std::istreambuf_iterator<char>(std::cin), {});
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty()) {
    return InvalidArgument(
        "no prompt: give --prompt TEXT, pipe one on stdin, or run on a terminal");
  }
  return text;
}

Json Message(const char* role, const std::string& content) {
  return Json{{"role", role}, {"content", content}};
}

// A user turn: the images and videos first (as the Qwen3-VL examples place them), then the text.
Json UserMessage(const std::string& text, const std::vector<std::string>& images,
                 const std::vector<std::string>& videos) {
  if (images.empty() && videos.empty()) return Message("user", text);
  Json content = Json::array();
  for (const std::string& f : images) content.push_back(Json{{"type", "image"}, {"image", f}});
  for (const std::string& f : videos) content.push_back(Json{{"type", "video"}, {"video", f}});
  content.push_back(Json{{"type", "text"}, {"text", text}});
  return Json{{"role", "user"}, {"content", content}};
}

int Chat(BatchEngine& engine, const ChatPipeline& pipeline, const Options& o, Turn*& current) {
  Json messages = Json::array();
  if (!o.system.empty()) messages.push_back(Message("system", o.system));
  std::fprintf(stderr, "[run] chat: /exit or end of input (Ctrl-D) ends it\n");
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    std::fflush(stderr);
    if (!std::getline(std::cin, line)) {
      std::fprintf(stderr, "\n");
      break;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit") break;
    if (line.empty()) continue;
    const bool first = std::none_of(messages.begin(), messages.end(),
                                    [](const Json& m) { return m["role"] == "user"; });
    messages.push_back(UserMessage(line, first ? o.images : std::vector<std::string>{},
                                   first ? o.videos : std::vector<std::string>{}));
    ChatRequest req = o.base;
    req.messages = messages;
    Turn turn;
    Status s = RunTurn(engine, pipeline, req, current, &turn);
    if (!s.ok()) {
      std::fprintf(stderr, "vlstack run: %s\n", s.ToString().c_str());
      messages.erase(messages.size() - 1);
      continue;
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    PrintStats(turn);
    messages.push_back(Message("assistant", turn.text));
  }
  return 0;
}

int Run(const Args& args) {
  auto dir = ModelDirFlag(args);
  if (!dir.ok()) return RunFail(dir.status());
  LoadOptions lo;
  if (Status s = ApplyLoadFlags(args, "bf16", &lo); !s.ok()) return RunFail(s);
  auto capacity = args.Int("capacity", lo.capacity, 2, 1 << 24);
  if (!capacity.ok()) return RunFail(capacity.status());
  lo.capacity = static_cast<int>(*capacity);
  lo.slots = 1;
  auto chunk = args.Int("prefill-chunk", EngineOptions().prefill_chunk, 0, 1 << 24);
  if (!chunk.ok()) return RunFail(chunk.status());
  lo.progress = StderrProgress("run");

  auto model = LoadedModel::Load(*dir, lo);
  if (!model.ok()) return RunFail(model.status());
  ChatPipelineOptions po;
  po.media.allow_files = true;  // the user's own files, named on the command line
  std::unique_ptr<ImageEncoder> encoder;
  if (!args.GetAll("image").empty() || !args.GetAll("video").empty()) {
    auto e = ImageEncoder::Load(*dir, **model, ImageEncoderOptions{});
    if (!e.ok()) {
      return RunFail(e.status().WithContext(args.GetAll("image").empty() ? "--video" : "--image"));
    }
    encoder = std::move(*e);
    po.images = encoder.get();
  }
  auto pipeline = ChatPipeline::Load(*dir, **model, po);
  if (!pipeline.ok()) return RunFail(pipeline.status());
  auto options = ParseOptions(args, **pipeline);
  if (!options.ok()) return RunFail(options.status());

  const bool tty_out = ::isatty(STDOUT_FILENO) == 1;
  Turn* current = nullptr;
  EngineOptions eo;
  if (Status s = ApplySpeculativeFlags(args, &eo.speculative); !s.ok()) return RunFail(s);
  auto draft = LoadDraftModel(args, *dir, **model, lo);
  if (!draft.ok()) return RunFail(draft.status());
  eo.draft_model = draft->get();
  eo.prefill_chunk = static_cast<int>(*chunk);
  eo.prefix_reuse = true;
  BatchEngine engine(
      **model,
      [&current](const TokenEvent& e) {
        Turn* t = current;
        if (t == nullptr || !t->reply) return true;
        const Clock::time_point now = Clock::now();
        if (e.token >= 0) {
          if (t->tokens++ == 0) t->first = now;
          t->last = now;
        }
        const bool keep = t->reply->Feed(e);
        const std::string text = t->reply->TakeText();
        if (!text.empty()) {
          std::fwrite(text.data(), 1, text.size(), stdout);
          std::fflush(stdout);
          t->text += text;
        }
        return keep;
      },
      eo);

  if (!args.Has("prompt") && ::isatty(STDIN_FILENO) == 1) {
    return Chat(engine, **pipeline, *options, current);
  }
  std::string prompt;
  if (auto p = args.Get("prompt")) {
    prompt = *p;
  } else {
    auto in = ReadStdin();
    if (!in.ok()) return RunFail(in.status());
    prompt = std::move(*in);
  }
  ChatRequest req = options->base;
  if (!options->system.empty()) req.messages.push_back(Message("system", options->system));
  req.messages.push_back(UserMessage(prompt, options->images, options->videos));
  Turn turn;
  Status s = RunTurn(engine, **pipeline, req, current, &turn);
  if (!s.ok()) return RunFail(s);
  if (tty_out && (turn.text.empty() || turn.text.back() != '\n')) std::fputc('\n', stdout);
  std::fflush(stdout);
  PrintStats(turn);
  PrintSpeculation(engine);
  PrintGrammar(engine);
  return 0;
}

}  // namespace

CommandSpec RunSpec() {
  CommandSpec spec;
  spec.name = "run";
  spec.usage = std::string(kHelpHead) + SpeculativeFlagsHelp() + kHelpTail;
  spec.usage.insert(spec.usage.find("  --help "), CheckWeightsFlagsHelp());
  spec.value_flags = {"model",       "prompt",     "system",     "image",       "video",
                      "fps",         "max-frames", "max-tokens", "temperature", "top-p",
                      "top-k",       "seed",       "stop",       "capacity",    "prefill-chunk",
                      "json-schema", "grammar",    "regex"};
  spec.value_flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  spec.value_flags.insert(SpeculativeFlagNames().begin(), SpeculativeFlagNames().end());
  spec.bool_flags = LoadBoolFlagNames();
  spec.example =
      "  vlstack run --model Qwen/Qwen3-VL-2B-Instruct --prompt 'What is in this picture?' \\\n"
      "      --image photo.jpg --max-tokens 200\n"
      "  echo 'Summarise: ...' | vlstack run --model ./model --temperature 0.7 --seed 1\n"
      "  vlstack run --model ./model --image invoice.jpg --prompt 'The invoice as JSON' \\\n"
      "      --json-schema invoice.schema.json\n";
  return spec;
}

int RunRun(int argc, char** argv) {
  int rc = 0;
  std::optional<Args> args = ParseCommandLine(RunSpec(), argc, argv, &rc);
  if (!args) return rc;
  return Run(*args);
}

}  // namespace vls::cli
