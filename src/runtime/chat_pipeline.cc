#include "runtime/chat_pipeline.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

#include "base/file.h"
#include "image/decode.h"
#include "io/untrusted_json.h"
#include "model/qwen3_config.h"
#include "runtime/grammar_vocab.h"
#include "runtime/positions.h"
#include "runtime/stop_matcher.h"
#include "runtime/structured_output_json.h"
#include "runtime/video_prompt.h"
#include "tokenizer/chat_template.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;

// A small JSON file of the model folder (generation_config.json, tokenizer_config.json), read
// under ParseUntrustedJson's rules; only a few keys are read from it, so key order is not kept.
StatusOr<nlohmann::json> ReadJsonObject(const std::string& path) {
  VLS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  nlohmann::json j;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson(path, text, &j));
  if (!j.is_object()) return DataLoss(path + ": not a JSON object");
  return j;
}

// The optional number `key` of generation_config.json: finite and within a float.
Status ReadNumber(const nlohmann::json& j, const std::string& path, const char* key, float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  double d = 0;
  Status s = ReadJsonNumber(*it, std::string("\"") + key + "\"", -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::max(), &d);
  if (!s.ok()) return s.WithContext(path);
  *out = static_cast<float>(d);
  return Status::Ok();
}

StatusOr<SamplingParams> GenerationDefaults(const std::string& dir) {
  SamplingParams p;  // greedy
  const std::string path = JoinPath(dir, "generation_config.json");
  auto j = ReadJsonObject(path);
  if (!j.ok()) {
    if (j.status().code() == StatusCode::kNotFound) return p;
    return j.status();
  }
  auto sample = j->find("do_sample");
  if (sample == j->end() || sample->is_null()) return p;
  bool do_sample = false;
  if (Status s = ReadJsonBool(*sample, "\"do_sample\"", &do_sample); !s.ok()) {
    return s.WithContext(path);
  }
  if (!do_sample) return p;
  // transformers' GenerationConfig defaults for what the file leaves out.
  p.temperature = 1.0f;
  p.top_k = 50;
  VLS_RETURN_IF_ERROR(ReadNumber(*j, path, "temperature", &p.temperature));
  VLS_RETURN_IF_ERROR(ReadNumber(*j, path, "top_p", &p.top_p));
  VLS_RETURN_IF_ERROR(ReadNumber(*j, path, "min_p", &p.min_p));
  VLS_RETURN_IF_ERROR(ReadNumber(*j, path, "repetition_penalty", &p.repetition_penalty));
  if (auto k = j->find("top_k"); k != j->end() && !k->is_null()) {
    int64_t top_k = 0;
    if (Status s = ReadJsonInt(*k, "\"top_k\"", 0, 1 << 30, &top_k); !s.ok()) {
      return s.WithContext(path);
    }
    p.top_k = static_cast<int>(top_k);
  }
  if (Status s = ValidateSamplingParams(p); !s.ok()) return s.WithContext(path);
  return p;
}

// tokenizer_config.json's eos_token (a string or {"content": ...}) as an id, or -1.
StatusOr<int32_t> TokenizerEos(const std::string& dir, const tok::Tokenizer& tokenizer) {
  auto j = ReadJsonObject(JoinPath(dir, "tokenizer_config.json"));
  if (!j.ok()) {
    if (j.status().code() == StatusCode::kNotFound) return -1;
    return j.status();
  }
  auto it = j->find("eos_token");
  if (it == j->end()) return -1;
  const nlohmann::json* name = &*it;
  if (it->is_object() && it->contains("content")) name = &(*it)["content"];
  if (!name->is_string()) return -1;
  return tokenizer.TokenToId(name->get<std::string>());
}

// Bytes of the prompt text a template prints verbatim: string contents and text parts of every
// message but the assistant's (templates may rewrite those, e.g. drop earlier thinking).
uint64_t VerbatimTextBytes(const Json& messages) {
  uint64_t n = 0;
  for (const Json& m : messages) {
    if (!m.is_object() || m.value("role", "") == "assistant") continue;
    auto c = m.find("content");
    if (c == m.end()) continue;
    if (c->is_string()) n += c->get_ref<const std::string&>().size();
    if (!c->is_array()) continue;
    for (const Json& part : *c) {
      auto t = part.is_object() ? part.find("text") : part.end();
      if (t != part.end() && t->is_string()) n += t->get_ref<const std::string&>().size();
    }
  }
  return n;
}

// A video part's own sampling options ("fps", "max_frames", "num_frames"), over the request's.
StatusOr<VideoSamplingOptions> VideoPartOptions(const Json& part,
                                                const VideoSamplingOptions& defaults) {
  VideoSamplingOptions o = defaults;
  if (auto it = part.find("fps"); it != part.end() && !it->is_null()) {
    if (!it->is_number()) return InvalidArgument("\"fps\" must be a number").WithParam("fps");
    o.fps = it->get<double>();
    o.num_frames.reset();
  }
  for (const char* key : {"max_frames", "num_frames"}) {
    auto it = part.find(key);
    if (it == part.end() || it->is_null()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > INT32_MAX) {
      return InvalidArgument("\"" + std::string(key) + "\" must be a positive integer")
          .WithParam(key);
    }
    (std::string(key) == "max_frames" ? o.max_frames : o.num_frames) = it->get<int>();
    if (std::string(key) == "num_frames") o.fps.reset();
  }
  return o;
}

bool IsMediaType(const std::string& t) {
  return t == "image" || t == "image_url" || t == "video" || t == "video_url";
}

}  // namespace

StatusOr<std::vector<MediaItem>> CollectMedia(const Json& messages) {
  if (!messages.is_array() || messages.empty()) {
    return InvalidArgument("messages must be a non-empty list");
  }
  std::vector<MediaItem> media;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return InvalidArgument(where + " must be an object").WithParam(where);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return InvalidArgument(where + " needs a string \"role\"").WithParam(where + ".role");
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null() || content->is_string()) continue;
    if (!content->is_array()) {
      return InvalidArgument(where + ".content must be a string, null or a list of parts")
          .WithParam(where + ".content");
    }
    for (size_t k = 0; k < content->size(); ++k) {
      const Json& part = (*content)[k];
      const std::string pwhere = where + ".content[" + std::to_string(k) + "]";
      if (!part.is_object())
        return InvalidArgument(pwhere + " must be an object").WithParam(pwhere);
      std::string type;
      if (auto t = part.find("type"); t != part.end()) {
        if (!t->is_string()) {
          return InvalidArgument(pwhere + ".type must be a string").WithParam(pwhere + ".type");
        }
        type = t->get<std::string>();
      } else {
        // The Qwen-VL templates also recognise a part by its keys.
        for (const char* key : {"image", "image_url", "video", "video_url", "text"}) {
          if (part.contains(key)) {
            type = key;
            break;
          }
        }
      }
      if (IsMediaType(type)) {
        MediaItem item;
        item.kind = type.rfind("video", 0) == 0 ? MediaItem::Kind::kVideo : MediaItem::Kind::kImage;
        item.message_index = i;
        item.part_index = k;
        item.part = part;
        media.push_back(std::move(item));
      } else if (type == "text") {
        auto text = part.find("text");
        if (text == part.end() || !text->is_string()) {
          return InvalidArgument(pwhere + " is a text part without a string \"text\"")
              .WithParam(pwhere + ".text");
        }
      } else {
        return InvalidArgument(pwhere + ": unsupported content part type \"" + type +
                               "\" (expected text, image, image_url or video)")
            .WithParam(pwhere + ".type");
      }
    }
  }
  return media;
}

StatusOr<std::unique_ptr<ChatPipeline>> ChatPipeline::Load(const std::string& model_dir,
                                                           const LoadedModel& model) {
  return Load(model_dir, model, ChatPipelineOptions{});
}

StatusOr<std::unique_ptr<ChatPipeline>> ChatPipeline::Load(const std::string& model_dir,
                                                           const LoadedModel& model,
                                                           const ChatPipelineOptions& options) {
  const std::string tok_path = JoinPath(model_dir, "tokenizer.json");
  auto tokenizer = tok::Tokenizer::FromFile(tok_path);
  if (!tokenizer.ok()) {
    if (tokenizer.status().code() == StatusCode::kNotFound) {
      return NotFound(model_dir + ": no tokenizer.json (the model folder needs its tokenizer)");
    }
    return tokenizer.status();
  }
  const int vocab = model.config().vocab;
  if ((*tokenizer)->id_limit() > vocab) {
    return InvalidArgument(tok_path + " uses token ids up to " +
                           std::to_string((*tokenizer)->id_limit() - 1) +
                           " but the model's vocabulary has " + std::to_string(vocab) +
                           " ids: the tokenizer does not belong to this model");
  }
  VLS_ASSIGN_OR_RETURN(std::string source, tok::LoadChatTemplateSource(model_dir));
  auto tmpl = jinja::Template::Parse(source);
  if (!tmpl.ok()) return tmpl.status().WithContext(model_dir + ": chat template");
  std::unique_ptr<ChatPipeline> p(new ChatPipeline(model, std::move(*tokenizer), std::move(*tmpl)));
  VLS_ASSIGN_OR_RETURN(p->defaults_, GenerationDefaults(model_dir));

  // End-of-turn ids: the loaded config's (generation_config.json's when it has them), config.json's
  // own, and the tokenizer's eos_token.
  std::vector<int32_t> eos(model.config().eos_token_ids.begin(),
                           model.config().eos_token_ids.end());
  const std::string cfg_path = JoinPath(model_dir, "config.json");
  VLS_ASSIGN_OR_RETURN(std::string cfg_text, ReadFileToString(cfg_path));
  VLS_ASSIGN_OR_RETURN(Qwen3Config own, ParseQwen3Config(cfg_text, cfg_path));
  eos.insert(eos.end(), own.eos_token_ids.begin(), own.eos_token_ids.end());
  VLS_ASSIGN_OR_RETURN(int32_t tok_eos, TokenizerEos(model_dir, *p->tokenizer_));
  if (tok_eos >= 0) eos.push_back(tok_eos);
  std::sort(eos.begin(), eos.end());
  eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
  eos.erase(std::remove_if(eos.begin(), eos.end(), [&](int32_t id) { return id >= vocab; }),
            eos.end());
  p->eos_ = std::move(eos);
  p->options_ = options;
  for (int32_t id = 0; id < p->tokenizer_->id_limit(); ++id) {
    std::string bytes;
    bool added = false;
    if (p->tokenizer_->TokenBytes(id, /*skip_special_tokens=*/false, &bytes, &added)) {
      p->max_token_bytes_ = std::max<uint64_t>(p->max_token_bytes_, bytes.size());
    }
  }
  p->vocab_ = BuildGrammarVocab(*p->tokenizer_, vocab);
  p->grammars_ = std::make_unique<GrammarCache>(p->vocab_, options.grammar_limits,
                                                options.grammar_cache_capacity);
  return p;
}

StatusOr<std::string> ChatPipeline::Render(const ChatRequest& request) const {
  Json vars = Json::object();
  if (!request.template_kwargs.is_null()) {
    if (!request.template_kwargs.is_object()) {
      return InvalidArgument("template_kwargs must be an object");
    }
    vars = request.template_kwargs;
  }
  // The request's own fields win over template_kwargs. Video parts written the vLLM way are
  // given the form the template places (VideoUrlAsVideoPart).
  vars["messages"] = request.messages;
  for (Json& m : vars["messages"]) {
    if (!m.is_object()) continue;
    auto c = m.find("content");
    if (c == m.end() || !c->is_array()) continue;
    for (Json& part : *c) VideoUrlAsVideoPart(&part);
  }
  if (!request.tools.is_null()) {
    if (!request.tools.is_array()) return InvalidArgument("tools must be a list");
    vars["tools"] = request.tools;
  } else {
    vars.erase("tools");
  }
  vars["add_generation_prompt"] = request.add_generation_prompt;
  if (request.enable_thinking) vars["enable_thinking"] = *request.enable_thinking;
  auto out = tok::RenderChat(template_, vars);
  // The template's budget spent on this request's messages: the client's prompt is too long,
  // not the server too busy (kResourceExhausted is kept for capacity).
  if (!out.ok() && out.status().code() == StatusCode::kResourceExhausted) {
    return OutOfRange("the messages are too long for the chat template: " + out.status().message())
        .WithParam("messages");
  }
  return out;
}

StatusOr<PreparedChat> ChatPipeline::Prepare(const ChatRequest& request,
                                             const std::function<bool()>& cancelled) const {
  VLS_ASSIGN_OR_RETURN(std::vector<MediaItem> media, CollectMedia(request.messages));
  VLS_RETURN_IF_ERROR(ValidateStopStrings(request.stop));
  VLS_RETURN_IF_ERROR(CheckTextFits(request));

  PreparedChat out;
  VLS_ASSIGN_OR_RETURN(out.prompt, Render(request));
  const Qwen3Config& cfg = model_.config();
  if (!media.empty()) {
    VLS_ASSIGN_OR_RETURN(out.images, EncodeMedia(media, request.video, cancelled));
    if (!out.images.videos.empty()) {
      // Each video's timestamps and groups are written into the text before tokenization, as
      // Qwen3VLProcessor does (video_prompt.h).
      VideoTokenTexts texts;
      texts.vision_start = tokenizer_->Decode(std::vector<int32_t>{cfg.vision_start_token_id});
      texts.video_pad = tokenizer_->Decode(std::vector<int32_t>{cfg.video_token_id});
      texts.vision_end = tokenizer_->Decode(std::vector<int32_t>{cfg.vision_end_token_id});
      VLS_ASSIGN_OR_RETURN(out.prompt, ExpandVideoText(out.prompt, out.images.videos, texts));
    }
  }
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer_->Encode(out.prompt));
  if (ids.empty()) return InvalidArgument("the chat template rendered an empty prompt");
  VLS_RETURN_IF_ERROR(ValidateTokenIds(ids, cfg.vocab, "prompt"));
  GenerationRequest r;
  if (!media.empty()) {
    VLS_ASSIGN_OR_RETURN(std::vector<int32_t> expanded,
                         ExpandVisualPads(cfg, ids, out.images.grids, out.images.kinds));
    VLS_RETURN_IF_ERROR(BuildImagePrompt(model_, std::move(expanded), out.images, &r));
    ids = r.tokens;
  } else {
    for (size_t s = 0; s < ids.size(); ++s) {
      if (ids[s] == cfg.image_token_id || ids[s] == cfg.video_token_id) {
        return InvalidArgument("the prompt holds an image or video pad token at position " +
                               std::to_string(s) +
                               " but the request has no image or video: send them as image or "
                               "video parts");
      }
    }
    r.positions = SequentialPositions(cfg.position_mode, static_cast<int64_t>(ids.size()));
    r.tokens = ids;
    r.rope_delta = 0;
  }

  VLS_RETURN_IF_ERROR(FinishRequest(request, std::move(r), &out));
  out.media = std::move(media);
  return out;
}

Status ChatPipeline::CheckTextFits(const ChatRequest& request) const {
  const uint64_t bytes = VerbatimTextBytes(request.messages);
  const auto capacity = static_cast<uint64_t>(model_.bounds().capacity);
  if (bytes > static_cast<uint64_t>(jinja::kMaxRenderOutputBytes)) {
    return OutOfRange("the messages hold " + std::to_string(bytes) +
                      " bytes of text, more than the chat template may render (" +
                      std::to_string(jinja::kMaxRenderOutputBytes) + " bytes)")
        .WithParam("messages");
  }
  // No token is longer than max_token_bytes_, so the prompt has at least this many tokens.
  const uint64_t min_tokens = max_token_bytes_ == 0 ? 0 : bytes / max_token_bytes_;
  if (min_tokens >= capacity) {
    return OutOfRange("the messages hold " + std::to_string(bytes) + " bytes of text, at least " +
                      std::to_string(min_tokens) + " tokens, but the context capacity is " +
                      std::to_string(capacity) + ": no room to generate")
        .WithParam("messages");
  }
  return Status::Ok();
}

Status ChatPipeline::FinishRequest(const ChatRequest& request, GenerationRequest r,
                                   PreparedChat* out) const {
  const Qwen3Config& cfg = model_.config();
  const int64_t S = static_cast<int64_t>(r.tokens.size());
  const int64_t capacity = model_.bounds().capacity;
  // Does not fit: OutOfRange naming the messages (or a raw prompt), the server's
  // context_length_exceeded.
  const char* what = request.messages.empty() ? "prompt" : "messages";
  if (S >= capacity) {
    return OutOfRange("the prompt is " + std::to_string(S) +
                      " tokens but the context capacity is " + std::to_string(capacity) +
                      ": no room to generate")
        .WithParam(what);
  }
  int64_t max_tokens = capacity - S;
  if (request.max_tokens) {
    if (*request.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
    if (S + *request.max_tokens > capacity) {
      return OutOfRange("max_tokens " + std::to_string(*request.max_tokens) +
                        " plus the prompt's " + std::to_string(S) +
                        " tokens exceed the context capacity " + std::to_string(capacity))
          .WithParam(what);
    }
    max_tokens = *request.max_tokens;
  }

  r.max_new_tokens = static_cast<int>(max_tokens);
  r.ignore_eos = request.ignore_eos;
  r.stop_token_ids = request.stop_token_ids;
  if (!request.ignore_eos) {
    // The end-of-turn ids the engine does not already stop on.
    const auto& engine_eos = cfg.eos_token_ids;
    for (int32_t id : eos_) {
      if (std::find(engine_eos.begin(), engine_eos.end(), id) == engine_eos.end() &&
          std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), id) ==
              r.stop_token_ids.end()) {
        r.stop_token_ids.push_back(id);
      }
    }
  }
  r.sampling = request.sampling;
  r.logprobs = request.logprobs;
  r.speculative = request.speculative;
  r.grammar = nullptr;
  if (request.structured.active()) {
    VLS_RETURN_IF_ERROR(CheckStopWithReplyFormat(request.structured, request.stop));
    VLS_ASSIGN_OR_RETURN(r.grammar, grammars_->Get(request.structured, request.tools));
  }
  // The one validation of the request's prompt (BuildImagePrompt leaves it here); the engine
  // takes the result without another.
  VLS_ASSIGN_OR_RETURN(out->request, ValidatedRequest::Validate(model_, std::move(r)));
  out->stop = request.stop;
  return Status::Ok();
}

StatusOr<PreparedChat> ChatPipeline::PrepareText(const std::string& prompt,
                                                 const ChatRequest& request) const {
  VLS_RETURN_IF_ERROR(ValidateStopStrings(request.stop));
  const auto capacity = static_cast<uint64_t>(model_.bounds().capacity);
  if (max_token_bytes_ > 0 && prompt.size() / max_token_bytes_ >= capacity) {
    return OutOfRange("the prompt's " + std::to_string(prompt.size()) +
                      " bytes are more tokens than the context capacity " +
                      std::to_string(capacity) + ": no room to generate")
        .WithParam("prompt");
  }
  PreparedChat out;
  out.prompt = prompt;
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer_->Encode(prompt));
  return PrepareTokens(std::move(ids), request, std::move(out));
}

StatusOr<PreparedChat> ChatPipeline::PrepareTokens(std::vector<int32_t> ids,
                                                   const ChatRequest& request,
                                                   PreparedChat out) const {
  VLS_RETURN_IF_ERROR(ValidateStopStrings(request.stop));
  if (ids.empty()) return InvalidArgument("the prompt is empty");
  const Qwen3Config& cfg = model_.config();
  VLS_RETURN_IF_ERROR(ValidateTokenIds(ids, cfg.vocab, "prompt"));
  for (size_t s = 0; s < ids.size(); ++s) {
    if (ids[s] == cfg.image_token_id || ids[s] == cfg.video_token_id) {
      return InvalidArgument("the prompt holds an image or video pad token at position " +
                             std::to_string(s) + ": images go in chat requests as image parts");
    }
  }
  GenerationRequest r;
  r.positions = SequentialPositions(cfg.position_mode, static_cast<int64_t>(ids.size()));
  r.tokens = std::move(ids);
  r.rope_delta = 0;
  VLS_RETURN_IF_ERROR(FinishRequest(request, std::move(r), &out));
  return out;
}

StatusOr<VisualFeatures> ChatPipeline::EncodeMedia(const std::vector<MediaItem>& media,
                                                   const VideoSamplingOptions& video_defaults,
                                                   const std::function<bool()>& cancelled) const {
  if (options_.images == nullptr) return EncodeMediaHere(media, video_defaults, cancelled);
  // On the encoder's worker, paced against the engine's steps: the calling thread (an HTTP
  // thread) only waits.
  StatusOr<VisualFeatures> out = Internal("the image encoder's worker did not run the request");
  VLS_RETURN_IF_ERROR(options_.images->RunPaced(
      [&] {
        out = EncodeMediaHere(media, video_defaults, cancelled);
        return Status::Ok();
      },
      cancelled));
  return out;
}

StatusOr<VisualFeatures> ChatPipeline::EncodeMediaHere(
    const std::vector<MediaItem>& media, const VideoSamplingOptions& video_defaults,
    const std::function<bool()>& cancelled) const {
  // ImageEncoder decodes with its own DecodeLimits: the request's cancellation and pixel
  // budget reach DecodeImage through this thread's scope.
  image::ScopedDecodeControl decode_control(cancelled);
  VisualFeatures f;
  f.hidden = model_.config().hidden;
  if (options_.images != nullptr) {
    f.levels =
        static_cast<int64_t>(options_.images->vision_config().deepstack_visual_indexes.size());
  }
  for (const MediaItem& m : media) {
    const std::string where = "messages[" + std::to_string(m.message_index) + "].content[" +
                              std::to_string(m.part_index) + "]";
    const bool video = m.kind == MediaItem::Kind::kVideo;
    if (cancelled && cancelled()) return Cancelled(where + ": the request was cancelled");
    if (options_.images == nullptr) {
      return InvalidArgument(where +
                             ": this model was loaded without its vision tower, so it "
                             "cannot take " +
                             (video ? "videos" : "images") +
                             (options_.images_unavailable.empty()
                                  ? std::string()
                                  : " (" + options_.images_unavailable + ")"));
    }
    if (video) {
      auto opts = VideoPartOptions(m.part, video_defaults);
      if (!opts.ok()) return opts.status().WithContext(where);
      auto bytes = ReadVideoPart(m.part, options_.media);
      if (!bytes.ok()) return bytes.status().WithContext(where);
      auto one = options_.images->EncodeVideo(bytes->bytes, bytes->label, *opts, cancelled);
      if (!one.ok()) return one.status().WithContext(where);
      const EncodedImage& e = **one;
      f.AppendVideo(*e.video, e.tokens, e.embeds, e.deepstack);
      continue;
    }
    auto bytes = ReadImagePart(m.part, options_.media);
    if (!bytes.ok()) return bytes.status().WithContext(where);
    auto one = options_.images->Encode(bytes->bytes, bytes->label);
    if (!one.ok()) return one.status().WithContext(where);
    f.Append((*one)->grid, (*one)->tokens, (*one)->embeds, (*one)->deepstack);
  }
  return f;
}

TextStream ChatPipeline::NewTextStream(const PreparedChat& chat) const {
  return TextStream(tokenizer_.get(), chat.stop);
}

}  // namespace vls
