// Reading a request from a CONTRACTS §6 input safetensors file (shared by `forward` and
// `batch`): token ids, embeddings with visual_embeds scattered in, positions and rope_delta
// (explicit or from get_rope_index), the DeepStack payload and decode tokens.
#ifndef VLSTACK_CLI_REQUEST_INPUT_H_
#define VLSTACK_CLI_REQUEST_INPUT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "runtime/deepstack.h"
#include "runtime/positions.h"

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

// Builds the request against the loaded model's config and embedding table.
StatusOr<RequestInput> ReadRequestInput(const SafetensorsFile& in, const Qwen3Model& model);

// Rewrites the payload's tensor names to the CLI names (deepstack_positions, ...).
Status RenameDeepStackTensors(Status s);

}  // namespace vls::cli

#endif  // VLSTACK_CLI_REQUEST_INPUT_H_
