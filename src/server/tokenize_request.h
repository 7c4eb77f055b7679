// The bodies of /tokenize and /detokenize (the shapes vLLM and llama-server take), parsed and
// checked apart from the transport: unknown fields are refused naming them (as data, param), as
// everywhere in the server.
//
//   /tokenize   {"content" | "prompt": text} or {"messages": [...], "add_generation_prompt",
//               "tools"} (rendered with the chat template), "add_special", "model" ignored
//   /detokenize {"tokens": [ids in [0, id_limit)], "model" ignored}
#ifndef VLSTACK_SERVER_TOKENIZE_REQUEST_H_
#define VLSTACK_SERVER_TOKENIZE_REQUEST_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/chat_pipeline.h"

namespace vls::server {

struct TokenizeRequest {
  std::optional<std::string> text;  // "content" (or "prompt"): tokenized as it is
  std::optional<ChatRequest> chat;  // "messages": rendered with the chat template first
};

StatusOr<TokenizeRequest> ParseTokenizeRequest(const nlohmann::ordered_json& body,
                                               const SamplingParams& defaults);
StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(const nlohmann::ordered_json& body,
                                                      int64_t id_limit);

}  // namespace vls::server

#endif  // VLSTACK_SERVER_TOKENIZE_REQUEST_H_
