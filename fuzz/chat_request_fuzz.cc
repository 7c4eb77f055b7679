// Fuzz target for a chat request as one JSON object (the C ABI's vls_batch_submit_chat and the
// chat-template lines): ChatRequestFromJsonText, then ChatPipeline::Prepare (messages checked,
// the chat template rendered, tokenized, limits applied) against a tiny model folder with the
// tiny ChatML tokenizer and template, written once per process.
//
// Every input must give a Status or a prepared request within the model's capacity; nothing may
// throw, and the request's JSON (messages nested up to the parser's bound) must copy and
// serialise.
//
// Real fuzzing: scripts/fuzz.sh 600 chat_request. Without libFuzzer, chat_request_fuzz_replay
// (a ctest) runs it over tests/corpus/chat_request and fixed-seed mutations.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "base/file.h"
#include "io/untrusted_json.h"
#include "model/test_checkpoint.h"
#include "runtime/chat_json.h"
#include "runtime/chat_pipeline.h"
#include "runtime/pipeline_test_util.h"

namespace {

constexpr int kVocab = 512;
constexpr int kCapacity = 256;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "chat_request_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

struct Pipeline {
  std::unique_ptr<vls::LoadedModel> model;
  std::unique_ptr<vls::ChatPipeline> pipeline;
};

Pipeline Load() {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("vls_chat_request_fuzz_" + std::to_string(getpid())))
                              .string();
  vls::TestModelSpec spec;
  spec.hidden = 32;
  spec.layers = 1;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.head_dim = 16;
  spec.intermediate = 32;
  spec.vocab = kVocab;
  spec.deepstack = 1;
  spec.dtype = vls::DType::kF32;
  vls::Status s = vls::WriteTestCheckpoint(dir, spec, false);
  if (s.ok()) {
    s = vls::WriteStringToFile(vls::JoinPath(dir, "tokenizer.json"),
                               vls::testing::TinyChatTokenizerJson(kVocab));
  }
  if (s.ok()) {
    const nlohmann::json cfg = {{"eos_token", "<|im_end|>"},
                                {"chat_template", vls::testing::kTinyChatTemplate}};
    s = vls::WriteStringToFile(vls::JoinPath(dir, "tokenizer_config.json"), cfg.dump());
  }
  if (!s.ok()) Fail("cannot write the tiny model", s.ToString());
  vls::LoadOptions o;
  o.capacity = kCapacity;
  o.threads = 1;
  Pipeline p;
  auto lm = vls::LoadedModel::Load(dir, o);
  if (!lm.ok()) Fail("cannot load the tiny model", lm.status().ToString());
  p.model = std::move(*lm);
  auto cp = vls::ChatPipeline::Load(dir, *p.model);
  if (!cp.ok()) Fail("cannot load the chat pipeline", cp.status().ToString());
  p.pipeline = std::move(*cp);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Pipeline p = Load();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = vls::ChatRequestFromJsonText(text, p.pipeline->generation_defaults());
  if (!r.ok()) {
    if (r.status().code() != vls::StatusCode::kInvalidArgument &&
        r.status().code() != vls::StatusCode::kResourceExhausted) {
      Fail("unexpected error code", r.status().ToString());
    }
    return 0;
  }
  if (r->max_tokens && *r->max_tokens < 1) Fail("accepted max_tokens < 1", "");
  if (vls::DumpJsonSafe(r->messages).empty()) Fail("messages do not serialise", "");
  auto chat = p.pipeline->Prepare(*r);
  if (!chat.ok()) return 0;
  const int64_t S = static_cast<int64_t>(chat->request->tokens.size());
  if (S < 1 || S + chat->request->max_new_tokens > kCapacity) {
    Fail("prepared a request over the capacity", std::to_string(S));
  }
  for (int32_t t : chat->request->tokens) {
    if (t < 0 || t >= kVocab) Fail("token outside the vocabulary", std::to_string(t));
  }
  return 0;
}
