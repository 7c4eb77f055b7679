// Test helpers for the request pipeline (stop strings, text streams, the chat pipeline): a tiny
// byte-level tokenizer whose special tokens sit at the ids make-test-model gives a small
// vocabulary, and a ChatML template like Qwen's.
#ifndef VLSTACK_RUNTIME_PIPELINE_TEST_UTIL_H_
#define VLSTACK_RUNTIME_PIPELINE_TEST_UTIL_H_

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/byte_level.h"

namespace vls::testing {

// Ids 0..255 are the bytes; "he" (256), "ll" (257), "hell" (258) are merges; the special
// tokens take the ids model/test_checkpoint.cc gives a vocabulary of `vocab` (< 151657):
// <|endoftext|> vocab-2, <|im_start|> vocab-3, <|im_end|> vocab-1, <|vision_start|> vocab-6,
// <|vision_end|> vocab-5, <|image_pad|> vocab-4, <|video_pad|> vocab-7.
inline std::string TinyChatTokenizerJson(int vocab) {
  static constexpr const char* kQwenPattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[tok::BytesToByteLevel(std::string(1, static_cast<char>(b)))] = b;
  v["he"] = 256;
  v["ll"] = 257;
  v["hell"] = 258;
  nlohmann::json added = nlohmann::json::array();
  auto add = [&](int id, const char* content) {
    added.push_back({{"id", id}, {"content", content}, {"special", true}, {"normalized", false}});
  };
  add(vocab - 2, "<|endoftext|>");
  add(vocab - 3, "<|im_start|>");
  add(vocab - 1, "<|im_end|>");
  add(vocab - 6, "<|vision_start|>");
  add(vocab - 5, "<|vision_end|>");
  add(vocab - 4, "<|image_pad|>");
  add(vocab - 7, "<|video_pad|>");
  nlohmann::json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", kQwenPattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"vocab", v},
        {"merges", {"h e", "l l", "he ll"}}}}};
  return j.dump();
}

// A ChatML template in the shape of Qwen's (system, user/assistant turns, tools listed,
// enable_thinking honoured, the generation prompt).
inline constexpr const char* kTinyChatTemplate =
    "{%- if tools %}{{ '<|im_start|>system\\ntools:' }}{{ tools | length }}"
    "{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}"
    "{%- if m.content is string %}{{ m.content }}{%- else %}"
    "{%- for c in m.content %}{%- if c.type == 'text' %}{{ c.text }}{%- endif %}{%- endfor %}"
    "{%- endif %}{{ '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";

}  // namespace vls::testing

#endif  // VLSTACK_RUNTIME_PIPELINE_TEST_UTIL_H_
