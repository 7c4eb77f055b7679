// Reading a request from a docs/contracts.md §6 input safetensors file (shared by `forward` and
// `batch`): token ids, embeddings with visual_embeds scattered in, positions and rope_delta
// (explicit or from get_rope_index), the DeepStack payload and decode tokens. And one line of a
// `batch` JSONL file, parsed and checked without a model (ParseBatchLine).
//
// Everything here reads input from outside: every failure is a Status naming the tensor, field
// or limit, never an exception or a crash (fuzz/forward_input_fuzz.cc, fuzz/batch_line_fuzz.cc).
#ifndef VLSTACK_CLI_REQUEST_INPUT_H_
#define VLSTACK_CLI_REQUEST_INPUT_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"
#include "runtime/deepstack.h"
#include "runtime/image_encoder.h"
#include "runtime/positions.h"
#include "runtime/request.h"
#include "runtime/sampler.h"
#include "runtime/structured_output.h"

namespace vls::cli {

// Shapes known before the model is loaded (to size the context capacity).
struct InputLengths {
  int64_t prompt = 0;  // S
  int64_t decode = 0;  // N decode_tokens
};

// Opens `path`, refuses unknown tensor names, checks dtypes and ranks, and reads the lengths.
StatusOr<InputLengths> PeekInput(const SafetensorsFile& in);

struct RequestInput {
  int64_t length = 0;        // S
  std::vector<int32_t> ids;  // [S] when the input has input_ids
  bool has_ids = false;
  bool token_only = false;        // ids alone: no inputs_embeds, visual_embeds or DeepStack
  std::vector<float> embeddings;  // [S, H]: always filled (embedded ids when token_only)
  PositionIds positions;
  int32_t rope_delta = 0;
  std::optional<DeepStackPayload> deepstack;  // validation layer 1 done
  std::vector<int32_t> decode_tokens;
};

// Builds the request against the loaded model's config and embedding table. `max_tokens` bounds
// the prompt plus its decode tokens (the context capacity): a longer input is refused before
// anything is sized from it. image_grid_thw / video_grid_thw must be [n,3] and together expand
// to at most S visual tokens (ValidateGridList) before get_rope_index expands them; the default
// deepstack_layers needs K <= the model's layers.
StatusOr<RequestInput> ReadRequestInput(const SafetensorsFile& in, const Qwen3Model& model,
                                        int64_t max_tokens);

// The most tokens (prompt plus generated) one request may hold when no --capacity is given: the
// model's max_position_embeddings, or kMaxContextPositions when the config does not say.
int64_t MaxRequestTokens(const Qwen3Config& cfg);

// Refuses an empty prompt, and a prompt plus `new_tokens` (named `new_name`: "max_new_tokens",
// "decode tokens") over `max_tokens`; `limit` names the bound in the error ("the context
// capacity", "the model's max_position_embeddings"). OutOfRange.
Status CheckRequestTokens(int64_t prompt, int64_t new_tokens, std::string_view new_name,
                          int64_t max_tokens, std::string_view limit);

// The longest `batch` JSONL line read (16 MiB): a line is a few fields and a file name.
inline constexpr size_t kMaxBatchLineBytes = size_t{16} << 20;

// One line of a `vlstack batch` JSONL file (docs/contracts.md §6), parsed and type-checked. No file
// is opened: `input` is opened when the request is built, and closed after.
struct BatchLine {
  nlohmann::json id;  // as given (any JSON value); null when absent or unreadable
  std::string input;  // the input safetensors file, relative to the JSONL file
  int max_new_tokens = 16;
  bool ignore_eos = false;
  std::optional<int64_t> cancel_after;  // cancel_after_tokens
  SamplingParams sampling;
  std::optional<std::vector<std::string>> stop;  // given: the output line carries "text"
  // Image files (relative to the JSONL file): input_ids then holds one image pad per image.
  std::vector<std::string> images;
  // Video files (relative to the JSONL file): input_ids then holds one vision_start video_pad
  // vision_end triple per video, in prompt order with the image pads. "fps", "max_frames" and
  // "num_frames" (only with videos; fps and num_frames not together) sample every video of the
  // line, within ImageEncoderOptions' default bounds.
  std::vector<std::string> videos;
  VideoSamplingOptions video;
  // {"method": "off" | "ngram" | "draft", "draft_tokens": K} (SpeculativeFromJson); unset: the
  // engine's default (--speculate).
  std::optional<SpeculativeParams> speculative;
  // "json_schema" (an object, its key order kept), "grammar" (GBNF text) or "regex" (at most one;
  // StructuredOutputFromJson): compiled with the model folder's tokenizer by `batch`.
  StructuredOutput structured;
};

// Most images one batch line may list (and most videos).
inline constexpr size_t kMaxBatchLineImages = 256;

// Parses one line under ParseUntrustedJson's rules (no NUL or trailing bytes, nesting <= 64, no
// repeated key); `label` ("line 3") starts parse errors. Fields are read strictly: integers are
// JSON integers in range (max_new_tokens in [1, 2^31), cancel_after_tokens in [0, 2^31), seed in
// [0, 2^64), top_k in [0, 2^31)), booleans are true or false, numbers finite floats, "stop" a
// string or a list of valid stop strings; null is the same as absent. A field the contract does
// not name is refused. On error `line->id` holds the id when the line was an object with one.
Status ParseBatchLine(std::string_view label, std::string_view text, BatchLine* line);

// Rewrites the payload's tensor names to the CLI names (deepstack_positions, ...).
Status RenameDeepStackTensors(Status s);

// The engine request of a line from its read input: the line's limits and sampling added.
StatusOr<GenerationRequest> BatchRequest(RequestInput input, const BatchLine& line,
                                         int64_t max_tokens);

// The engine request of a parsed line, read from its input file (ReadRequestInput with
// `max_tokens`, the context capacity) with the line's limits and sampling.
StatusOr<GenerationRequest> BatchRequestFromInput(const SafetensorsFile& in, const BatchLine& line,
                                                  const Qwen3Model& model, int64_t max_tokens);

}  // namespace vls::cli

#endif  // VLSTACK_CLI_REQUEST_INPUT_H_
