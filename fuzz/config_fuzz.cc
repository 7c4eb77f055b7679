// Fuzz target for the model folder's JSON files: config.json (ParseQwen3Config, and its
// vision_config: ParseVisionConfig) and generation_config.json (MergeGenerationConfig).
//
// Every input must give a Status or a config that keeps the documented bounds (qwen3_config.h):
// sizes within their maxima, special token ids inside the vocabulary and distinct, DeepStack
// layers strictly increasing. The same bytes are also merged as generation_config.json into a
// fixed valid config, and an accepted config's canonical text must be stable.
//
// Real fuzzing: scripts/fuzz.sh 600 config. Without libFuzzer, `config_fuzz_replay` (a ctest)
// runs this target over tests/corpus/config and deterministic mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/qwen3_config.h"
#include "vision/vision_config.h"

namespace {

// VLS_FUZZ_VERBOSE=1 prints what each input gave (to see which corpus files load).
bool Verbose() {
  static const bool verbose = std::getenv("VLS_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void CheckRefusal(const vls::Status& s, const char* label) {
  if (s.message().find(label) == std::string::npos) {
    Fail("error message does not name the file", s.ToString());
  }
}

void CheckBounds(const vls::Qwen3Config& c) {
  auto in = [](int64_t v, int64_t lo, int64_t hi, const char* what) {
    if (v < lo || v > hi) Fail("accepted a value out of its bound", what);
  };
  in(c.hidden, 1, vls::kMaxHiddenSize, "hidden");
  in(c.layers, 1, vls::kMaxHiddenLayers, "layers");
  in(c.heads, 1, vls::kMaxAttentionHeads, "heads");
  in(c.kv_heads, 1, c.heads, "kv_heads");
  in(c.head_dim, 2, vls::kMaxHeadDim, "head_dim");
  in(c.intermediate, 1, vls::kMaxIntermediateSize, "intermediate");
  in(c.vocab, 1, vls::kMaxVocabSize, "vocab");
  in(c.max_position_embeddings, 0, vls::kMaxContextPositions, "max_position_embeddings");
  if (c.heads % c.kv_heads != 0 || c.head_dim % 2 != 0) Fail("accepted bad heads", "");
  if (static_cast<int64_t>(c.vocab) * c.hidden > vls::kMaxWeightElements) {
    Fail("accepted an oversized embedding", std::to_string(c.vocab));
  }
  const int ids[] = {c.image_token_id, c.video_token_id, c.vision_start_token_id,
                     c.vision_end_token_id};
  for (int i = 0; i < 4; ++i) {
    in(ids[i], -1, c.vocab - 1, "multimodal id");
    for (int j = 0; j < i; ++j) {
      if (ids[i] >= 0 && ids[i] == ids[j]) Fail("accepted equal multimodal ids", "");
    }
    for (int e : c.eos_token_ids) {
      if (ids[i] >= 0 && ids[i] == e) Fail("accepted a multimodal id that is an eos id", "");
    }
  }
  in(c.bos_token_id, -1, c.vocab - 1, "bos");
  for (int e : c.eos_token_ids) in(e, 0, c.vocab - 1, "eos");
  if (c.position_mode == vls::PositionMode::kMrope &&
      c.mrope_section[0] + c.mrope_section[1] + c.mrope_section[2] != c.head_dim / 2) {
    Fail("accepted an mrope_section that does not sum to head_dim/2", "");
  }
  if (c.deepstack) {
    const auto& t = c.deepstack->target_layers;
    if (t.empty()) Fail("accepted an empty DeepStack", "");
    for (size_t i = 0; i < t.size(); ++i) {
      in(t[i], 0, c.layers - 1, "DeepStack layer");
      if (i > 0 && t[i] <= t[i - 1]) Fail("accepted unordered DeepStack layers", "");
    }
    in(c.deepstack->max_visual_positions, 0, vls::kMaxContextPositions, "Nmax");
  }
}

// A valid Qwen3-VL config to merge generation_config.json inputs into.
const vls::Qwen3Config& BaseConfig() {
  static const vls::Qwen3Config base = [] {
    auto c = vls::ParseQwen3Config(
        R"({"model_type": "qwen3_vl", "image_token_id": 151655, "video_token_id": 151656,
            "vision_start_token_id": 151652, "vision_end_token_id": 151653,
            "text_config": {"hidden_size": 64, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "intermediate_size": 128, "vocab_size": 151936, "rope_theta": 5000000,
              "eos_token_id": 151645, "rope_scaling": {"mrope_section": [4, 2, 2]}}})",
        "base");
    if (!c.ok()) Fail("base config", c.status().ToString());
    return *c;
  }();
  return base;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cfg = vls::ParseQwen3Config(text, "fuzz-config.json");
  if (Verbose()) std::fprintf(stderr, "config: %s\n", cfg.status().ToString().c_str());
  if (!cfg.ok()) {
    CheckRefusal(cfg.status(), "fuzz-config.json");
  } else {
    CheckBounds(*cfg);
    auto again = vls::ParseQwen3Config(text, "fuzz-config.json");
    if (!again.ok() || vls::CanonicalConfigText(*again) != vls::CanonicalConfigText(*cfg)) {
      Fail("parsing is not deterministic", "");
    }
    // Its vision_config: refused by name, or within the bounds the tower is sized from.
    auto vision = vls::ParseVisionConfig(text, "fuzz-config.json", *cfg);
    if (!vision.ok()) {
      CheckRefusal(vision.status(), "fuzz-config.json");
    } else if (*vision) {
      const vls::VisionConfig& v = **vision;
      if (v.depth < 1 || v.depth > vls::kMaxHiddenLayers || v.hidden < 1 ||
          v.hidden > vls::kMaxHiddenSize || v.heads < 1 || v.hidden % v.heads != 0 ||
          v.head_dim() % 4 != 0 || v.out_hidden != cfg->hidden || v.spatial_merge_size < 1) {
        Fail("accepted a vision_config out of its bounds", vls::CanonicalVisionConfigText(v));
      }
      for (size_t k = 0; k < v.deepstack_visual_indexes.size(); ++k) {
        const int j = v.deepstack_visual_indexes[k];
        if (j < 0 || j >= v.depth || (k > 0 && j <= v.deepstack_visual_indexes[k - 1])) {
          Fail("accepted bad deepstack_visual_indexes", vls::CanonicalVisionConfigText(v));
        }
      }
    }
    // The accepted config also takes generation_config.json inputs (the same bytes).
    vls::Qwen3Config merged = *cfg;
    vls::Status s = vls::MergeGenerationConfig(text, "fuzz-generation_config.json", &merged);
    if (s.ok()) CheckBounds(merged);
  }
  vls::Qwen3Config merged = BaseConfig();
  vls::Status s = vls::MergeGenerationConfig(text, "fuzz-generation_config.json", &merged);
  if (Verbose()) std::fprintf(stderr, "generation_config: %s\n", s.ToString().c_str());
  if (!s.ok()) {
    CheckRefusal(s, "fuzz-generation_config.json");
  } else {
    CheckBounds(merged);
    for (int e : BaseConfig().eos_token_ids) {
      bool kept = false;
      for (int m : merged.eos_token_ids) kept = kept || m == e;
      if (!kept) Fail("merge lost config.json's eos id", std::to_string(e));
    }
  }
  return 0;
}
