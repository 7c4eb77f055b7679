#include "capi/capi_test_support.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "base/file.h"
#include "model/test_checkpoint.h"
#include "runtime/media_source.h"

extern "C" int vls_test_write_checkpoint(const char* dir, const char* arch, int32_t hidden,
                                         int32_t layers, const int32_t* ds_layers, int32_t ds_count,
                                         int32_t ds_nmax, uint64_t seed) {
  try {
    vls::TestModelSpec spec;
    spec.arch = arch;
    spec.hidden = hidden;
    spec.layers = layers;
    spec.dtype = vls::DType::kF32;
    spec.seed = seed;
    // As many vision taps as language targets; the explicit keys decide the targets.
    spec.deepstack = arch == std::string("qwen3") ? 0 : ds_count;
    for (int32_t i = 0; i < ds_count; ++i) spec.ds_layers.push_back(ds_layers[i]);
    spec.ds_nmax = ds_nmax;
    const vls::Status s = vls::WriteTestCheckpoint(dir, spec, false);
    if (!s.ok()) {
      std::fprintf(stderr, "WriteTestCheckpoint(%s): %s\n", dir, s.ToString().c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "WriteTestCheckpoint(%s): %s\n", dir, e.what());
    return 1;
  }
}

namespace {

// The chat model of vls_test_write_chat_model; `moe`: a qwen3-vl-moe (fused experts, layer 0
// sparse with 8 experts of width 32 and top 2, layer 1 dense).
int WriteChatModel(const char* dir, uint64_t seed, bool moe) {
  const char* what = moe ? "vls_test_write_moe_chat_model" : "vls_test_write_chat_model";
  try {
    vls::TestModelSpec spec;
    spec.arch = moe ? "qwen3-vl-moe" : "qwen3-vl";
    if (moe) {
      spec.experts = 8;
      spec.top_k = 2;
      spec.moe_intermediate = 32;
      spec.mlp_only_layers = {1};
    }
    spec.hidden = 32;
    spec.layers = 2;
    spec.deepstack = 2;
    spec.vocab = 151936;
    spec.tied = false;
    spec.dtype = vls::DType::kF32;
    spec.seed = seed;
    vls::Status s = vls::WriteTestCheckpoint(dir, spec, false);
    auto tokenizer = vls::ReadFileToString(VLS_TEST_TOKENIZER_JSON);
    if (s.ok() && !tokenizer.ok()) {
      s = tokenizer.status().WithContext("the Qwen3 tokenizer (run tests/tokenizer/setup.sh)");
    }
    if (s.ok()) s = vls::WriteStringToFile(vls::JoinPath(dir, "tokenizer.json"), *tokenizer);
    if (s.ok()) {
      nlohmann::json cfg;
      cfg["eos_token"] = "<|im_end|>";
      cfg["chat_template"] =
          "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}"
          "{{ m['content'] }}{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}"
          "<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'video' or "
          "c['type'] == 'video_url' %}<|vision_start|><|video_pad|><|vision_end|>{% else %}"
          "{{ c['text'] }}{% endif %}"
          "{% endfor %}{% endif %}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
      s = vls::WriteStringToFile(vls::JoinPath(dir, "tokenizer_config.json"), cfg.dump(2));
    }
    if (!s.ok()) {
      std::fprintf(stderr, "%s(%s): %s\n", what, dir, s.ToString().c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s(%s): %s\n", what, dir, e.what());
    return 1;
  }
}

}  // namespace

extern "C" int vls_test_write_chat_model(const char* dir, uint64_t seed) {
  return WriteChatModel(dir, seed, false);
}

extern "C" int vls_test_write_moe_chat_model(const char* dir, uint64_t seed) {
  return WriteChatModel(dir, seed, true);
}

extern "C" char* vls_test_video_data_url(void) {
  try {
    auto bytes = vls::ReadFileToString(VLS_TEST_VIDEO_CLIP);
    if (!bytes.ok()) {
      std::fprintf(stderr, "vls_test_video_data_url: %s\n", bytes.status().ToString().c_str());
      return nullptr;
    }
    const std::string url =
        "data:video/mp4;base64," +
        vls::EncodeBase64({reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()});
    char* out = static_cast<char*>(std::malloc(url.size() + 1));
    if (out != nullptr) std::memcpy(out, url.c_str(), url.size() + 1);
    return out;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vls_test_video_data_url: %s\n", e.what());
    return nullptr;
  }
}
