// The front half of the request pipeline, shared by the CLI, the C ABI and the server: a chat
// request (messages, tools, sampling, limits, stop strings) -> the model's chat template ->
// token ids -> images (decoded, preprocessed and encoded by an ImageEncoder; each pad expanded
// to its image's tokens, DeepStack payload built: image_prompt.h) -> positions -> one
// GenerationRequest, validated once (ValidatedRequest::Validate) and handed to the engine as
// such (BatchEngine::Submit does not validate it again). The back half is TextStream
// (text_stream.h), made by NewTextStream for each prepared chat and consumed through ReplyText
// (reply_text.h).
//
// Loaded from a model folder: tokenizer.json, the chat template (chat_template.jinja,
// chat_template.json or tokenizer_config.json), and the end-of-turn ids: the union of
// config.json's and generation_config.json's eos_token_id and tokenizer_config.json's
// eos_token. The engine stops on the model config's eos ids; the others join the request's
// stop_token_ids (unless ignore_eos).
//
// Thread safety: immutable after Load; Prepare may run on several threads at once. The loaded
// model must outlive the pipeline.
#ifndef VLSTACK_RUNTIME_CHAT_PIPELINE_H_
#define VLSTACK_RUNTIME_CHAT_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/image_encoder.h"
#include "runtime/image_prompt.h"
#include "runtime/loaded_model.h"
#include "runtime/media_source.h"
#include "runtime/request.h"
#include "runtime/sampler.h"
#include "runtime/structured_output.h"
#include "runtime/structured_output_grammar.h"
#include "runtime/text_stream.h"
#include "tokenizer/jinja_template.h"
#include "tokenizer/tokenizer.h"

namespace vls {

struct ChatRequest {
  // As transformers' apply_chat_template takes them: [{"role": ..., "content": ...}, ...] with
  // content a string, null, or a list of parts {"type": "text", "text": ...}, image parts or
  // video parts (media_source.h names their forms; a video part may carry its own "fps",
  // "max_frames" or "num_frames").
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: none; else a list of tool schemas
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // passed to the template when set
  // More template variables (vLLM's chat_template_kwargs): null or an object.
  nlohmann::ordered_json template_kwargs;

  SamplingParams sampling;        // start from ChatPipeline::generation_defaults()
  std::optional<int> max_tokens;  // unset: the rest of the context capacity
  std::vector<std::string> stop;  // cut from the text (TextStream)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;  // EOS ids do not stop (stop_token_ids still do)
  int logprobs = -1;        // GenerationRequest::logprobs
  // GenerationRequest::speculative (unset: the engine's default; docs/speculative.md).
  std::optional<SpeculativeParams> speculative;
  // Video sampling for every video part that does not set its own (vLLM's
  // mm_processor_kwargs, `run --fps / --max-frames`); within ImageEncoderOptions' bounds.
  VideoSamplingOptions video;
  // What the reply must follow (a JSON schema, a grammar, a regex, enforced tool calls over
  // `tools`); Prepare compiles it into GenerationRequest::grammar.
  StructuredOutput structured;
};

// One image or video part of a message, in prompt order.
struct MediaItem {
  enum class Kind { kImage, kVideo };
  Kind kind = Kind::kImage;
  size_t message_index = 0;
  size_t part_index = 0;
  nlohmann::ordered_json part;  // the content part as given
};

struct PreparedChat {
  std::string prompt;             // the rendered template
  ValidatedRequest request;       // validated against the model, once (BatchEngine::Submit)
  std::vector<std::string> stop;  // for the TextStream (NewTextStream)
  std::vector<MediaItem> media;   // the image parts, in prompt order
  VisualFeatures images;          // their grids and features (empty without images or videos)
};

struct ChatPipelineOptions {
  // Encodes the images of a request; null: a request with an image is refused.
  const ImageEncoder* images = nullptr;
  MediaPolicy media;  // where image bytes may come from (files only when allowed)
  // Why `images` is null (the encoder's load error), for the refusal of an image part.
  std::string images_unavailable;
  // Structured output: the bounds every schema, grammar and regex is compiled under, and how
  // many compiled grammars the cache keeps (least recently used go first).
  grammar::GrammarLimits grammar_limits;
  size_t grammar_cache_capacity = GrammarCache::kDefaultCapacity;
};

class ChatPipeline {
 public:
  // Reads the tokenizer, the chat template and the end-of-turn ids from `model_dir` (the folder
  // `model` was loaded from). NotFound names a missing tokenizer.json or template; a tokenizer
  // whose ids do not fit the model's vocabulary is refused.
  static StatusOr<std::unique_ptr<ChatPipeline>> Load(const std::string& model_dir,
                                                      const LoadedModel& model);
  static StatusOr<std::unique_ptr<ChatPipeline>> Load(const std::string& model_dir,
                                                      const LoadedModel& model,
                                                      const ChatPipelineOptions& options);

  // The one entry point: renders, encodes the images and videos, writes each video's
  // timestamped groups into the text (video_prompt.h), tokenizes and builds the request.
  // InvalidArgument names what is wrong (the message index of an image or video, a stop string,
  // the context that is too short); image or video pads written as text without their media,
  // or a template that drops one, are refused (fail closed).
  //
  // Images are decoded under image::DecodeLimits's per-image budget, a per-request budget of
  // image::kDefaultMaxRequestDecodePixels and the process-wide image::DecodeBudget (its
  // ResourceExhausted, when full for its wait, is the request's error). `cancelled` (null:
  // never) is polled before each image and between the rows of its decode: once it returns
  // true, Prepare stops with Cancelled (the server passes "the client hung up"). Videos are
  // decoded under video::VideoLimits and ImageEncoderOptions' sampling bounds, and polled for
  // cancellation between frames.
  //
  // A request's `structured` (when active) is compiled, through grammar_cache(), into
  // GenerationRequest::grammar; a schema, grammar or regex the front ends refuse is
  // InvalidArgument naming the construct, with the request field as param
  // (structured_output_grammar.h).
  StatusOr<PreparedChat> Prepare(const ChatRequest& request,
                                 const std::function<bool()>& cancelled = nullptr) const;

  // A raw prompt without the chat template (the server's /v1/completions): `prompt` is
  // tokenized as is (special tokens written in it recognised); the request's messages, tools
  // and template fields are ignored, its limits, sampling and stop fields apply as in Prepare.
  // Image and video pad tokens are refused (images go in chat requests).
  StatusOr<PreparedChat> PrepareText(const std::string& prompt, const ChatRequest& request) const;
  // The same from token ids (`out` may carry the prompt text for the record).
  StatusOr<PreparedChat> PrepareTokens(std::vector<int32_t> ids, const ChatRequest& request,
                                       PreparedChat out = {}) const;

  // Renders the chat template only (the text Prepare tokenizes).
  StatusOr<std::string> Render(const ChatRequest& request) const;

  // A text stream for the prepared chat's events. REQUIRES: `chat` came from Prepare.
  TextStream NewTextStream(const PreparedChat& chat) const;

  // Sampling as generation_config.json asks (transformers' rules: do_sample false or absent is
  // greedy; with do_sample, temperature, top_k (default 50), top_p, min_p and
  // repetition_penalty as given). Greedy when the file is absent.
  const SamplingParams& generation_defaults() const { return defaults_; }
  // Every end-of-turn id (see above), sorted.
  const std::vector<int32_t>& eos_token_ids() const { return eos_; }
  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  const LoadedModel& model() const { return model_; }
  // OpenAI's system_fingerprint: "fp_" and the first 10 hex digits of the model's identity
  // (LoadedModel::Identity: checkpoint, config, precision, bounds). The first call hashes the
  // weights unless the model came from an artifact (seconds); call it once at start-up.
  std::string fingerprint() const { return "fp_" + model_.Identity().substr(0, 10); }
  // The compiled structured-output grammars (hits() and misses() for /metrics). Thread-safe.
  GrammarCache& grammar_cache() const { return *grammars_; }
  // The model's vocabulary as the grammar matcher sees it (grammar_vocab.h).
  const std::shared_ptr<const grammar::TokenVocab>& grammar_vocab() const { return vocab_; }

 private:
  ChatPipeline(const LoadedModel& model, std::unique_ptr<tok::Tokenizer> tokenizer,
               jinja::Template tmpl)
      : model_(model), tokenizer_(std::move(tokenizer)), template_(std::move(tmpl)) {}

  const LoadedModel& model_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  jinja::Template template_;
  // The pixels of the request's image parts, as a prompt's features.
  // Limits, end-of-turn ids, sampling and stop strings onto `r` (whose prompt is set), then the
  // request's one validation into out->request (ValidatedRequest::Validate).
  Status FinishRequest(const ChatRequest& request, GenerationRequest r, PreparedChat* out) const;
  // Refuses before rendering messages whose text cannot fit (OutOfRange naming "messages"):
  // more than the template may render, or more tokens than the context holds.
  Status CheckTextFits(const ChatRequest& request) const;
  // The request's images and videos, read and encoded in order on the image encoder's worker
  // (ImageEncoder::RunPaced); the calling thread waits.
  StatusOr<VisualFeatures> EncodeMedia(const std::vector<MediaItem>& media,
                                       const VideoSamplingOptions& video_defaults,
                                       const std::function<bool()>& cancelled) const;
  // The same on the calling thread.
  StatusOr<VisualFeatures> EncodeMediaHere(const std::vector<MediaItem>& media,
                                           const VideoSamplingOptions& video_defaults,
                                           const std::function<bool()>& cancelled) const;

  SamplingParams defaults_;
  std::vector<int32_t> eos_;
  ChatPipelineOptions options_;
  uint64_t max_token_bytes_ = 0;  // the longest token's bytes (a prompt's tokens' lower bound)
  std::shared_ptr<const grammar::TokenVocab> vocab_;
  std::unique_ptr<GrammarCache> grammars_;  // thread-safe; non-const through const methods
};

// The media parts of `messages` in order, after checking the messages' shape (a list of
// objects with a string "role", content a string, null or a list of objects). Exposed for the
// server and the vision issue.
StatusOr<std::vector<MediaItem>> CollectMedia(const nlohmann::ordered_json& messages);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_CHAT_PIPELINE_H_
