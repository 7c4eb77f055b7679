#include "model/qwen3_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "base/file.h"
#include "io/untrusted_json.h"

namespace vls {
namespace {

using Json = nlohmann::json;

// A JSON object plus the dotted path used to name its keys in errors.
struct Obj {
  const Json* j;
  std::string path;  // "" for the root, "text_config." for a nested object
  std::string label;

  std::string Key(const std::string& k) const { return path + k; }
  Status Err(const std::string& k, const std::string& what) const {
    return InvalidArgument(label + ": " + Key(k) + ": " + what);
  }
  // The value of key `k`, or nullptr when it is absent or null (HF writes None as null).
  const Json* Get(const std::string& k) const {
    auto it = j->find(k);
    if (it == j->end() || it->is_null()) return nullptr;
    return &*it;
  }
};

// Strict integer read (no 2.7, true or "3"; 2^32+1 is out of range, never wrapped): the error
// names the file, the key, the bound and the value.
StatusOr<int> ReadInt(const Json& v, const Obj& o, const std::string& k, int64_t lo, int64_t hi) {
  int64_t x = 0;
  VLS_RETURN_IF_ERROR(ReadJsonInt(v, o.label + ": " + o.Key(k), lo, hi, &x));
  return static_cast<int>(x);
}

StatusOr<int> RequireInt(const Obj& o, const std::string& k, int64_t lo, int64_t hi) {
  const Json* v = o.Get(k);
  if (!v) return o.Err(k, "required key is missing");
  return ReadInt(*v, o, k, lo, hi);
}

// Optional int: returns `def` when absent.
StatusOr<int> OptionalInt(const Obj& o, const std::string& k, int def, int64_t lo, int64_t hi) {
  const Json* v = o.Get(k);
  if (!v) return def;
  return ReadInt(*v, o, k, lo, hi);
}

StatusOr<double> OptionalNumber(const Obj& o, const std::string& k, double def, double lo,
                                double hi) {
  const Json* v = o.Get(k);
  if (!v) return def;
  double x = 0;
  VLS_RETURN_IF_ERROR(ReadJsonNumber(*v, o.label + ": " + o.Key(k), lo, hi, &x));
  return x;
}

StatusOr<std::optional<bool>> OptionalBool(const Obj& o, const std::string& k) {
  const Json* v = o.Get(k);
  if (!v) return std::optional<bool>();
  bool b = false;
  VLS_RETURN_IF_ERROR(ReadJsonBool(*v, o.label + ": " + o.Key(k), &b));
  return std::optional<bool>(b);
}

StatusOr<std::string> RequireString(const Obj& o, const std::string& k) {
  const Json* v = o.Get(k);
  if (!v) return o.Err(k, "required string key is missing");
  std::string s;
  VLS_RETURN_IF_ERROR(ReadJsonString(*v, o.label + ": " + o.Key(k), &s));
  return s;
}

// eos_token_id may be an int or a list of at most kMaxEosTokenIds ints.
StatusOr<std::vector<int>> ReadIdList(const Obj& o, const std::string& k) {
  std::vector<int> ids;
  const Json* v = o.Get(k);
  if (!v) return ids;
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
  if (v->is_array()) {
    if (v->size() > static_cast<size_t>(kMaxEosTokenIds)) {
      return o.Err(k, "lists " + std::to_string(v->size()) + " ids; at most " +
                          std::to_string(kMaxEosTokenIds) + " are allowed");
    }
    for (const Json& e : *v) {
      VLS_ASSIGN_OR_RETURN(int id, ReadInt(e, o, k, 0, kMaxId));
      ids.push_back(id);
    }
  } else {
    VLS_ASSIGN_OR_RETURN(int id, ReadInt(*v, o, k, 0, kMaxId));
    ids.push_back(id);
  }
  return ids;
}

// Appends the ids of `from` that `to` does not hold yet, in order (both hold at most
// 3 * kMaxEosTokenIds ids, so the scan stays small).
void AddIds(const std::vector<int>& from, std::vector<int>* to) {
  for (int id : from) {
    if (std::find(to->begin(), to->end(), id) == to->end()) to->push_back(id);
  }
}

// Reads `k` from the text object, falling back to (and cross-checking) the root object:
// Qwen3-VL files repeat some keys at both levels; differing values are refused. (The comparison
// recurses, within ParseUntrustedJson's nesting bound.)
StatusOr<const Json*> TextOrRoot(const Obj& text, const Obj& root, const std::string& k) {
  const Json* t = text.Get(k);
  if (text.j == root.j) return t;
  const Json* r = root.Get(k);
  if (t && r && *t != *r) {
    return InvalidArgument(text.label + ": " + text.Key(k) + " (" + JsonSnippet(*t) +
                           ") contradicts " + root.Key(k) + " (" + JsonSnippet(*r) + ")");
  }
  return t ? t : r;
}

// a * b for sizes already bounded (so it cannot overflow int64; checked all the same).
StatusOr<int64_t> Product(const std::string& what, std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return InvalidArgument(what + " overflows int64");
  }
  return p;
}

// The weight shapes the sizes imply, each against kMaxWeightElements, and the parameter sum
// (the experts of every sparse layer included) against kMaxModelParameters, in overflow-checked
// int64, before anything is allocated from them. REQUIRES: cfg.moe parsed (ParseMoe).
Status CheckWeightSizes(const Obj& text, const Qwen3Config& c) {
  const int64_t H = c.hidden, I = c.intermediate, D = c.head_dim, V = c.vocab;
  const std::string t = text.label + ": " + text.path;
  auto check = [&t](const char* name, std::initializer_list<int64_t> dims) -> Status {
    VLS_ASSIGN_OR_RETURN(int64_t n, Product(t + name, dims));
    if (n > kMaxWeightElements) {
      return InvalidArgument(t + name + " = " + std::to_string(n) +
                             " elements in one weight matrix exceeds the bound " +
                             std::to_string(kMaxWeightElements) + " (kMaxWeightElements)");
    }
    return Status::Ok();
  };
  VLS_RETURN_IF_ERROR(check("vocab_size x hidden_size (embed_tokens)", {V, H}));
  VLS_RETURN_IF_ERROR(
      check("num_attention_heads x head_dim x hidden_size (q_proj)", {c.heads, D, H}));
  VLS_RETURN_IF_ERROR(
      check("num_key_value_heads x head_dim x hidden_size (k_proj)", {c.kv_heads, D, H}));
  VLS_RETURN_IF_ERROR(check("intermediate_size x hidden_size (gate_proj)", {I, H}));
  int64_t sparse_layers = 0, sparse_mlp = 0;
  if (c.moe) {
    const int64_t E = c.moe->experts, Ie = c.moe->expert_intermediate;
    VLS_RETURN_IF_ERROR(check("num_experts x hidden_size (mlp.gate)", {E, H}));
    // The fused layout stores all of a layer's experts in one tensor.
    if (c.moe->layout == MoeLayout::kFused) {
      VLS_RETURN_IF_ERROR(
          check("num_experts x hidden_size x 2 x moe_intermediate_size (mlp.experts.gate_up_proj)",
                {E, H, 2, Ie}));
    } else {
      VLS_RETURN_IF_ERROR(
          check("moe_intermediate_size x hidden_size (experts.*.gate_proj)", {Ie, H}));
    }
    for (int l = 0; l < c.layers; ++l) sparse_layers += c.IsSparseLayer(l) ? 1 : 0;
    // Router, then gate, up and down of every expert.
    VLS_ASSIGN_OR_RETURN(int64_t experts, Product(t + "num_experts x 3 x moe_intermediate_size "
                                                      "x hidden_size (experts)",
                                                  {E, 3, Ie, H}));
    sparse_mlp = experts + E * H;
  }
  const int64_t q = int64_t{c.heads} * D, kv = int64_t{c.kv_heads} * D;
  // Per layer: q, k, v, o projections, four norms, and the dense MLP's three matrices or the
  // sparse MLP's router and experts.
  const int64_t attention = H * (2 * q + 2 * kv) + 2 * H + 2 * D;
  VLS_ASSIGN_OR_RETURN(
      int64_t dense, Product(t + "parameters", {attention + 3 * H * I, c.layers - sparse_layers}));
  VLS_ASSIGN_OR_RETURN(int64_t sparse, Product(t + "parameters", {sparse_mlp, sparse_layers}));
  VLS_ASSIGN_OR_RETURN(int64_t sparse_attention,
                       Product(t + "parameters", {attention, sparse_layers}));
  int64_t total = V * H * (c.tied ? 1 : 2) + H;
  for (int64_t part : {dense, sparse, sparse_attention}) {
    if (__builtin_add_overflow(total, part, &total)) {
      return InvalidArgument(t + "parameters overflow int64");
    }
  }
  if (total > kMaxModelParameters) {
    return InvalidArgument(text.label + ": the sizes declare " + std::to_string(total) +
                           " language-model parameters, over the bound " +
                           std::to_string(kMaxModelParameters) + " (kMaxModelParameters)");
  }
  return Status::Ok();
}

// The vision tower's sizes (read nowhere else yet, but bounded like the text sizes so that no
// later reader trusts them unchecked).
Status CheckVisionSizes(const Obj& v) {
  struct Bound {
    const char* key;
    int max;
  };
  static constexpr Bound kBounds[] = {
      {"depth", kMaxHiddenLayers},
      {"hidden_size", kMaxHiddenSize},
      {"intermediate_size", kMaxIntermediateSize},
      {"num_heads", kMaxAttentionHeads},
      {"in_channels", 16},
      {"patch_size", 1024},
      {"temporal_patch_size", 64},
      {"num_position_embeddings", kMaxContextPositions},
  };
  int64_t got[std::size(kBounds)] = {};
  for (size_t i = 0; i < std::size(kBounds); ++i) {
    VLS_ASSIGN_OR_RETURN(int x, OptionalInt(v, kBounds[i].key, 1, 1, kBounds[i].max));
    got[i] = x;
  }
  const int64_t depth = got[0], hidden = got[1], inter = got[2], channels = got[4], patch = got[5],
                temporal = got[6], positions = got[7];
  struct Matrix {
    const char* name;
    std::initializer_list<int64_t> dims;
  };
  const Matrix matrices[] = {
      {"intermediate_size x hidden_size", {inter, hidden}},
      {"hidden_size x in_channels x temporal_patch_size x patch_size^2 (patch_embed)",
       {hidden, channels, temporal, patch, patch}},
      {"num_position_embeddings x hidden_size (pos_embed)", {positions, hidden}},
  };
  for (const Matrix& m : matrices) {
    VLS_ASSIGN_OR_RETURN(int64_t n, Product(v.label + ": " + v.path + m.name, m.dims));
    if (n > kMaxWeightElements) {
      return InvalidArgument(v.label + ": " + v.path + m.name + " = " + std::to_string(n) +
                             " elements in one weight matrix exceeds the bound " +
                             std::to_string(kMaxWeightElements) + " (kMaxWeightElements)");
    }
  }
  VLS_ASSIGN_OR_RETURN(int64_t per_block, Product(v.label + ": " + v.path + "depth",
                                                  {4 * hidden * hidden + 2 * hidden * inter}));
  if (per_block * depth > kMaxModelParameters) {
    return InvalidArgument(v.label + ": " + v.path +
                           "depth x block size = " + std::to_string(per_block * depth) +
                           " vision parameters exceeds the bound " +
                           std::to_string(kMaxModelParameters) + " (kMaxModelParameters)");
  }
  return Status::Ok();
}

// Special token ids: every id inside [0, vocab) and the multimodal ids distinct from each other
// and from bos/eos (an image placeholder that is also the end of the sequence would make the
// model misread a prompt). bos may equal an eos id: Qwen's <|endoftext|> is both.
Status CheckTokenIds(const std::string& label, const Qwen3Config& c,
                     const std::vector<int>& eos_ids) {
  struct Id {
    const char* key;
    int id;
  };
  const Id multimodal[] = {{"image_token_id", c.image_token_id},
                           {"video_token_id", c.video_token_id},
                           {"vision_start_token_id", c.vision_start_token_id},
                           {"vision_end_token_id", c.vision_end_token_id}};
  auto in_vocab = [&](const char* key, int id) -> Status {
    if (id >= c.vocab) {
      return InvalidArgument(label + ": " + key + " " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(c.vocab) +
                             " (ids lie in [0, vocab_size))");
    }
    return Status::Ok();
  };
  for (const Id& m : multimodal) VLS_RETURN_IF_ERROR(in_vocab(m.key, m.id));
  VLS_RETURN_IF_ERROR(in_vocab("bos_token_id", c.bos_token_id));
  for (int id : eos_ids) VLS_RETURN_IF_ERROR(in_vocab("eos_token_id", id));
  for (size_t i = 0; i < std::size(multimodal); ++i) {
    const Id& m = multimodal[i];
    if (m.id < 0) continue;
    auto clash = [&](const std::string& other) {
      return InvalidArgument(label + ": " + m.key + " " + std::to_string(m.id) + " is also " +
                             other + "; every special token needs an id of its own");
    };
    for (size_t j = 0; j < i; ++j) {
      if (multimodal[j].id == m.id) return clash(multimodal[j].key);
    }
    if (m.id == c.bos_token_id) return clash("bos_token_id");
    if (std::find(eos_ids.begin(), eos_ids.end(), m.id) != eos_ids.end()) {
      return clash("an eos_token_id");
    }
  }
  return Status::Ok();
}

// Reads a config file of at most kMaxConfigJsonBytes (a FIFO or a device never ends).
StatusOr<std::string> ReadConfigFile(const std::string& path) {
  VLS_ASSIGN_OR_RETURN(std::string text, ReadFileAtMost(path, kMaxConfigJsonBytes));
  if (text.size() > kMaxConfigJsonBytes) {
    return DataLoss(path + ": larger than " + std::to_string(kMaxConfigJsonBytes) +
                    " bytes (kMaxConfigJsonBytes)");
  }
  return text;
}

Status ParseRope(const Obj& text, Qwen3Config& cfg) {
  // v4 files: text_config.rope_theta + rope_scaling; v5 files: rope_parameters.
  const Json* scaling = text.Get("rope_scaling");
  const Json* params = text.Get("rope_parameters");
  if (scaling && params && *scaling != *params) {
    return text.Err("rope_parameters", "contradicts rope_scaling");
  }
  const Json* rope = scaling ? scaling : params;
  std::string rope_key = scaling ? "rope_scaling" : "rope_parameters";
  constexpr double kMaxTheta = 1e15;
  VLS_ASSIGN_OR_RETURN(cfg.rope_theta, OptionalNumber(text, "rope_theta", 0.0, 0.0, kMaxTheta));
  bool mrope_type = false;
  const Json* sections = nullptr;
  if (rope) {
    if (!rope->is_object()) return text.Err(rope_key, "expected an object");
    Obj r{rope, text.path + rope_key + ".", text.label};
    if (const Json* th = r.Get("rope_theta")) {
      VLS_ASSIGN_OR_RETURN(double t2, OptionalNumber(r, "rope_theta", 0.0, 0.0, kMaxTheta));
      if (cfg.rope_theta != 0.0 && t2 != cfg.rope_theta) {
        return r.Err("rope_theta", JsonSnippet(*th) + " contradicts " + text.Key("rope_theta"));
      }
      cfg.rope_theta = t2;
    }
    std::string type = "default";
    const char* type_key = r.Get("rope_type") ? "rope_type" : "type";
    if (r.Get(type_key)) {
      VLS_ASSIGN_OR_RETURN(type, RequireString(r, type_key));
    }
    if (type == "mrope") {
      mrope_type = true;
    } else if (type != "default") {
      return Status(StatusCode::kUnimplemented,
                    text.label + ": " + r.Key(type_key) + ": " + JsonSnippet(Json(type)) +
                        " is not supported (supported: default, mrope)");
    }
    sections = r.Get("mrope_section");
    VLS_ASSIGN_OR_RETURN(std::optional<bool> inter, OptionalBool(r, "mrope_interleaved"));
    if (inter.has_value() && !*inter) cfg.mrope_layout = MropeLayout::kChunked;
    if (mrope_type && !sections) {
      return r.Err("mrope_section",
                   "rope_type 'mrope' requires mrope_section (refusing a silent 1-D fallback)");
    }
    if (sections) {
      if (!sections->is_array() || sections->size() != 3) {
        return r.Err("mrope_section",
                     "expected a list of 3 integers [T, H, W], got " + JsonTypeName(*sections) +
                         (sections->is_array() ? " of " + std::to_string(sections->size()) : ""));
      }
      int sum = 0;
      for (size_t i = 0; i < 3; ++i) {
        VLS_ASSIGN_OR_RETURN(cfg.mrope_section[i],
                             ReadInt((*sections)[i], r, "mrope_section", 0, kMaxHeadDim));
        sum += cfg.mrope_section[i];
      }
      if (sum != cfg.head_dim / 2) {
        return r.Err("mrope_section", "sums to " + std::to_string(sum) + " but head_dim/2 is " +
                                          std::to_string(cfg.head_dim / 2));
      }
      cfg.position_mode = PositionMode::kMrope;
    }
  }
  if (cfg.rope_theta == 0.0) {
    return text.Get("rope_theta") ? text.Err("rope_theta", "must be positive")
                                  : text.Err("rope_theta", "required key is missing");
  }
  if (cfg.IsVisionLanguage() && cfg.position_mode != PositionMode::kMrope) {
    return text.Err("rope_scaling", cfg.model_type + " requires rope_scaling.mrope_section");
  }
  if (!cfg.IsVisionLanguage() && cfg.position_mode == PositionMode::kMrope) {
    return text.Err("rope_scaling",
                    "model_type " + cfg.model_type + " uses 1-D RoPE but mrope_section is given");
  }
  return Status::Ok();
}

Status ParseDeepStack(const Obj& root, const Obj& text, const Obj* vision, Qwen3Config& cfg) {
  // Explicit keys may sit in text_config or at the root.
  const Obj* where =
      text.Get("deepstack_language_layer_indices") || text.Get("deepstack_max_visual_positions")
          ? &text
          : &root;
  const Json* li = where->Get("deepstack_language_layer_indices");
  const Json* mx = where->Get("deepstack_max_visual_positions");
  if ((li == nullptr) != (mx == nullptr)) {
    return where->Err(li ? "deepstack_max_visual_positions" : "deepstack_language_layer_indices",
                      "DeepStack layer indices and max visual positions must be declared together");
  }
  DeepStackConfig ds;
  std::string key;
  if (li) {
    ds.explicit_keys = true;
    key = where->Key("deepstack_language_layer_indices");
    if (!li->is_array()) return where->Err("deepstack_language_layer_indices", "expected a list");
    for (const Json& e : *li) {
      // Below num_hidden_layers and strictly increasing, checked as read: a long list stops at
      // its first bad entry.
      VLS_ASSIGN_OR_RETURN(
          int l, ReadInt(e, *where, "deepstack_language_layer_indices", 0, cfg.layers - 1));
      if (!ds.target_layers.empty() && l <= ds.target_layers.back()) {
        return InvalidArgument(text.label + ": " + key +
                               ": DeepStack target layers must be strictly increasing");
      }
      ds.target_layers.push_back(l);
    }
    VLS_ASSIGN_OR_RETURN(
        ds.max_visual_positions,
        ReadInt(*mx, *where, "deepstack_max_visual_positions", 1, kMaxContextPositions));
  } else if (vision && vision->Get("deepstack_visual_indexes")) {
    key = vision->Key("deepstack_visual_indexes");
    const Json* vi = vision->Get("deepstack_visual_indexes");
    if (!vi->is_array()) return vision->Err("deepstack_visual_indexes", "expected a list");
    if (vi->empty()) return Status::Ok();  // no DeepStack taps declared
    if (vi->size() > static_cast<size_t>(cfg.layers)) {
      return InvalidArgument(text.label + ": " + key + ": " + std::to_string(vi->size()) +
                             " DeepStack taps but only " + std::to_string(cfg.layers) +
                             " language layers to receive them");
    }
    VLS_ASSIGN_OR_RETURN(int depth,
                         OptionalInt(*vision, "depth", kMaxHiddenLayers, 1, kMaxHiddenLayers));
    for (size_t k = 0; k < vi->size(); ++k) {
      VLS_ASSIGN_OR_RETURN(int unused,
                           ReadInt((*vi)[k], *vision, "deepstack_visual_indexes", 0, depth - 1));
      (void)unused;
      // The vision indexes name ViT blocks; the language targets are layers 0..K-1.
      ds.target_layers.push_back(static_cast<int>(k));
    }
  } else {
    return Status::Ok();
  }
  if (ds.target_layers.empty()) {
    return InvalidArgument(text.label + ": " + key + ": DeepStack target layer list is empty");
  }
  cfg.deepstack = std::move(ds);
  return Status::Ok();
}

// Keys of other mixture-of-experts families that would change the math if honoured; a MoE
// config that sets one to anything but its neutral value is refused by name (ADR 0027).
// router_aux_loss_coef and output_router_logits are training-only and ignored.
struct ForeignMoeKey {
  const char* key;
  double neutral;  // the value that leaves Qwen3-MoE's math unchanged
  const char* what;
};
constexpr ForeignMoeKey kForeignMoeKeys[] = {
    {"shared_expert_intermediate_size", 0, "a shared expert, Qwen2-MoE"},
    {"n_shared_experts", 0, "shared experts, DeepSeek"},
    {"num_shared_experts", 0, "shared experts"},
    {"routed_scaling_factor", 1, "a scaled routing weight, DeepSeek"},
    {"first_k_dense_replace", 0, "leading dense layers, DeepSeek; Qwen uses mlp_only_layers"},
    {"n_group", 0, "grouped routing, DeepSeek"},
    {"topk_group", 0, "grouped routing, DeepSeek"},
};

// num_experts and the keys beside it (ADR 0027: transformers' Qwen3MoeConfig,
// Qwen3VLMoeTextConfig, and the rules of Qwen3MoeSparseMoeBlock / Qwen3VLMoeTextTopKRouter).
// Every size is bounded before use; a refusal names the key.
Status ParseMoe(const Obj& text, Qwen3Config& cfg) {
  const bool moe_type = cfg.model_type == "qwen3_moe" || cfg.model_type == "qwen3_vl_moe";
  if (!moe_type) {
    // A dense model_type never builds experts; num_experts > 0 means the file and the type
    // disagree (a MoE checkpoint under the wrong architecture).
    if (const Json* ne = text.Get("num_experts")) {
      VLS_ASSIGN_OR_RETURN(
          int n, ReadInt(*ne, text, "num_experts", 0, std::numeric_limits<int32_t>::max()));
      if (n > 0) {
        return text.Err("num_experts", std::to_string(n) + " experts, but model_type " +
                                           cfg.model_type + " is dense (use " + cfg.model_type +
                                           "_moe)");
      }
    }
    return Status::Ok();
  }
  MoeConfig m;
  m.layout = cfg.model_type == "qwen3_vl_moe" ? MoeLayout::kFused : MoeLayout::kPerExpert;
  // Required although transformers has defaults: the defaults differ between the two classes
  // (128 / 60 experts, top 8 / 4, 768 / 1408 wide) and a released config always writes them.
  VLS_ASSIGN_OR_RETURN(m.experts, RequireInt(text, "num_experts", 1, kMaxExperts));
  const Json* tk = text.Get("num_experts_per_tok");
  if (!tk) return text.Err("num_experts_per_tok", "required key is missing");
  VLS_ASSIGN_OR_RETURN(
      m.top_k, ReadInt(*tk, text, "num_experts_per_tok", 1, std::numeric_limits<int32_t>::max()));
  if (m.top_k > m.experts) {
    return text.Err("num_experts_per_tok",
                    std::to_string(m.top_k) + " exceeds num_experts " + std::to_string(m.experts));
  }
  if (m.top_k > kMaxExpertsPerToken) {
    return text.Err("num_experts_per_tok", std::to_string(m.top_k) + " is over the bound " +
                                               std::to_string(kMaxExpertsPerToken) +
                                               " (kMaxExpertsPerToken)");
  }
  VLS_ASSIGN_OR_RETURN(m.expert_intermediate,
                       RequireInt(text, "moe_intermediate_size", 1, kMaxIntermediateSize));
  VLS_ASSIGN_OR_RETURN(m.sparse_step, OptionalInt(text, "decoder_sparse_step", 1, 1, cfg.layers));
  if (const Json* dense = text.Get("mlp_only_layers")) {
    // transformers tests membership (`layer_idx not in config.mlp_only_layers`), so order and
    // repeats do not matter there: the list is sorted and deduplicated here.
    if (!dense->is_array()) return text.Err("mlp_only_layers", "expected a list of layer indices");
    if (dense->size() > static_cast<size_t>(kMaxHiddenLayers)) {
      return text.Err("mlp_only_layers", "lists " + std::to_string(dense->size()) +
                                             " layers; at most " +
                                             std::to_string(kMaxHiddenLayers) + " are allowed");
    }
    for (const Json& e : *dense) {
      VLS_ASSIGN_OR_RETURN(int l, ReadInt(e, text, "mlp_only_layers", 0, cfg.layers - 1));
      m.mlp_only_layers.push_back(l);
    }
    std::sort(m.mlp_only_layers.begin(), m.mlp_only_layers.end());
    m.mlp_only_layers.erase(std::unique(m.mlp_only_layers.begin(), m.mlp_only_layers.end()),
                            m.mlp_only_layers.end());
  }
  VLS_ASSIGN_OR_RETURN(std::optional<bool> norm, OptionalBool(text, "norm_topk_prob"));
  if (m.layout == MoeLayout::kFused) {
    // Qwen3VLMoeTextTopKRouter always renormalises ("since all the models use norm_topk_prob,
    // we don't need to have a extra check for it"): false would be silently ignored there.
    if (norm.has_value() && !*norm) {
      return Status(StatusCode::kUnimplemented,
                    text.label + ": " + text.Key("norm_topk_prob") +
                        ": false is not supported for qwen3_vl_moe (transformers always "
                        "renormalises the top-k weights of this model)");
    }
    m.norm_topk_prob = true;
  } else {
    m.norm_topk_prob = norm.value_or(false);  // Qwen3MoeConfig's default
  }
  for (const ForeignMoeKey& f : kForeignMoeKeys) {
    const Json* v = text.Get(f.key);
    if (!v) continue;
    double x = 0;
    const Status read = ReadJsonNumber(*v, text.label + ": " + text.Key(f.key), -1e300, 1e300, &x);
    if (read.ok() && x == f.neutral) continue;
    return Status(StatusCode::kUnimplemented, text.label + ": " + text.Key(f.key) + ": " +
                                                  JsonSnippet(*v) + " is not supported by " +
                                                  cfg.model_type + " (" + f.what + ")");
  }
  if (const Json* v = text.Get("scoring_func"); v && *v != "softmax") {
    return Status(StatusCode::kUnimplemented,
                  text.label + ": " + text.Key("scoring_func") + ": " + JsonSnippet(*v) +
                      " is not supported (Qwen3-MoE routes with softmax)");
  }
  cfg.moe = std::move(m);
  return Status::Ok();
}

}  // namespace

const char* PositionModeName(PositionMode mode) {
  return mode == PositionMode::kMrope ? "mrope" : "1d";
}

StatusOr<Qwen3Config> ParseQwen3Config(const std::string& json_text, const std::string& label) {
  if (json_text.size() > kMaxConfigJsonBytes) {
    return DataLoss(label + ": larger than " + std::to_string(kMaxConfigJsonBytes) +
                    " bytes (kMaxConfigJsonBytes)");
  }
  Json root_json;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson(label, json_text, &root_json));
  if (!root_json.is_object()) return InvalidArgument(label + ": top level must be a JSON object");
  Obj root{&root_json, "", label};
  Qwen3Config cfg;
  VLS_ASSIGN_OR_RETURN(cfg.model_type, RequireString(root, "model_type"));
  Obj text = root;
  std::optional<Obj> vision;
  if (cfg.model_type == "qwen3_vl" || cfg.model_type == "qwen3_vl_moe") {
    const Json* tc = root.Get("text_config");
    if (!tc || !tc->is_object())
      return root.Err("text_config", cfg.model_type + " requires a text_config object");
    text = Obj{tc, "text_config.", label};
    // transformers' Qwen3VLTextConfig / Qwen3VLMoeTextConfig: "qwen3_vl_text" /
    // "qwen3_vl_moe_text". Another (a dense text config under a MoE model) is inconsistent.
    if (const Json* tt = text.Get("model_type")) {
      const std::string want = cfg.model_type + "_text";
      if (!tt->is_string() || *tt != want) {
        return text.Err("model_type", JsonSnippet(*tt) + " contradicts model_type " +
                                          JsonSnippet(Json(cfg.model_type)) + " (expected " +
                                          JsonSnippet(Json(want)) + ")");
      }
    }
    if (const Json* vc = root.Get("vision_config")) {
      if (!vc->is_object()) return root.Err("vision_config", "expected an object");
      vision = Obj{vc, "vision_config.", label};
    }
    cfg.weight_prefix = "model.language_model.";
  } else if (cfg.model_type == "qwen3" || cfg.model_type == "qwen3_moe") {
    cfg.weight_prefix = "model.";
  } else {
    return Status(StatusCode::kUnimplemented,
                  label + ": model_type " + JsonSnippet(Json(cfg.model_type)) +
                      " is not supported (qwen3, qwen3_vl, qwen3_moe, qwen3_vl_moe)");
  }

  VLS_ASSIGN_OR_RETURN(cfg.hidden, RequireInt(text, "hidden_size", 1, kMaxHiddenSize));
  VLS_ASSIGN_OR_RETURN(cfg.layers, RequireInt(text, "num_hidden_layers", 1, kMaxHiddenLayers));
  VLS_ASSIGN_OR_RETURN(cfg.heads, RequireInt(text, "num_attention_heads", 1, kMaxAttentionHeads));
  VLS_ASSIGN_OR_RETURN(cfg.kv_heads,
                       OptionalInt(text, "num_key_value_heads", cfg.heads, 1, kMaxAttentionHeads));
  VLS_ASSIGN_OR_RETURN(cfg.head_dim, RequireInt(text, "head_dim", 2, kMaxHeadDim));
  VLS_ASSIGN_OR_RETURN(cfg.intermediate,
                       RequireInt(text, "intermediate_size", 1, kMaxIntermediateSize));
  VLS_ASSIGN_OR_RETURN(cfg.vocab, RequireInt(text, "vocab_size", 1, kMaxVocabSize));
  VLS_ASSIGN_OR_RETURN(cfg.rms_norm_eps, OptionalNumber(text, "rms_norm_eps", 1e-6, 0.0, 1.0));
  VLS_ASSIGN_OR_RETURN(cfg.max_position_embeddings,
                       OptionalInt(text, "max_position_embeddings", 0, 0, kMaxContextPositions));
  if (cfg.rms_norm_eps <= 0) return text.Err("rms_norm_eps", "must be positive");
  if (cfg.head_dim % 2 != 0) return text.Err("head_dim", "must be even for rotary embeddings");
  if (cfg.heads % cfg.kv_heads != 0) {
    return text.Err("num_key_value_heads", std::to_string(cfg.kv_heads) +
                                               " does not divide num_attention_heads " +
                                               std::to_string(cfg.heads));
  }
  if (const Json* act = text.Get("hidden_act"); act && *act != "silu") {
    return Status(StatusCode::kUnimplemented, label + ": " + text.Key("hidden_act") + ": " +
                                                  JsonSnippet(*act) + " is not supported (silu)");
  }
  VLS_ASSIGN_OR_RETURN(std::optional<bool> bias, OptionalBool(text, "attention_bias"));
  if (bias.value_or(false)) {
    return Status(StatusCode::kUnimplemented,
                  label + ": " + text.Key("attention_bias") + ": true is not supported by Qwen3");
  }
  VLS_ASSIGN_OR_RETURN(std::optional<bool> sliding, OptionalBool(text, "use_sliding_window"));
  if (sliding.value_or(false)) {
    return Status(StatusCode::kUnimplemented,
                  label + ": " + text.Key("use_sliding_window") + ": true is not supported");
  }
  VLS_RETURN_IF_ERROR(ParseRope(text, cfg));

  VLS_ASSIGN_OR_RETURN(const Json* tie, TextOrRoot(text, root, "tie_word_embeddings"));
  if (tie) {
    VLS_RETURN_IF_ERROR(
        ReadJsonBool(*tie, label + ": " + text.Key("tie_word_embeddings"), &cfg.tied));
  }
  VLS_RETURN_IF_ERROR(ParseMoe(text, cfg));
  VLS_RETURN_IF_ERROR(CheckWeightSizes(text, cfg));

  // Token ids: top level for qwen3_vl (text_config may repeat bos/eos).
  auto read_id = [&](const std::string& k, int* out) -> Status {
    VLS_ASSIGN_OR_RETURN(const Json* v, TextOrRoot(text, root, k));
    if (!v) return Status::Ok();
    VLS_ASSIGN_OR_RETURN(*out, ReadInt(*v, root, k, 0, std::numeric_limits<int32_t>::max()));
    return Status::Ok();
  };
  VLS_RETURN_IF_ERROR(read_id("image_token_id", &cfg.image_token_id));
  VLS_RETURN_IF_ERROR(read_id("video_token_id", &cfg.video_token_id));
  VLS_RETURN_IF_ERROR(read_id("vision_start_token_id", &cfg.vision_start_token_id));
  VLS_RETURN_IF_ERROR(read_id("vision_end_token_id", &cfg.vision_end_token_id));
  VLS_RETURN_IF_ERROR(read_id("bos_token_id", &cfg.bos_token_id));
  {
    VLS_ASSIGN_OR_RETURN(std::vector<int> eos, ReadIdList(root, "eos_token_id"));
    VLS_ASSIGN_OR_RETURN(std::vector<int> teos, ReadIdList(text, "eos_token_id"));
    cfg.eos_token_ids = eos;
    if (text.j != root.j) AddIds(teos, &cfg.eos_token_ids);
  }
  VLS_RETURN_IF_ERROR(CheckTokenIds(label, cfg, cfg.eos_token_ids));
  if (vision) {
    VLS_RETURN_IF_ERROR(CheckVisionSizes(*vision));
    VLS_ASSIGN_OR_RETURN(cfg.spatial_merge_size,
                         OptionalInt(*vision, "spatial_merge_size", 2, 1, 64));
    if (const Json* oh = vision->Get("out_hidden_size")) {
      VLS_ASSIGN_OR_RETURN(int out_hidden,
                           ReadInt(*oh, *vision, "out_hidden_size", 1, kMaxHiddenSize));
      if (out_hidden != cfg.hidden) {
        return vision->Err("out_hidden_size", std::to_string(out_hidden) +
                                                  " contradicts text_config.hidden_size " +
                                                  std::to_string(cfg.hidden));
      }
    }
  }
  VLS_RETURN_IF_ERROR(ParseDeepStack(root, text, vision ? &*vision : nullptr, cfg));
  VLS_ASSIGN_OR_RETURN(const Json* quant, TextOrRoot(text, root, "quantization_config"));
  if (quant) {
    const Obj& where = text.Get("quantization_config") ? text : root;
    VLS_ASSIGN_OR_RETURN(
        cfg.fp8, ParseQuantizationConfig(*quant, label + ": " + where.Key("quantization_config")));
    if (cfg.fp8 && cfg.moe && cfg.moe->layout == MoeLayout::kFused) {
      // The fused [E, H, 2·I_e] tensors have no block-scale layout in model/fp8_weights.h
      // (ADR 0027); refused before any tensor is read.
      return Status(StatusCode::kUnimplemented,
                    label + ": " + where.Key("quantization_config") +
                        ": FP8 checkpoints of the fused expert layout (" + cfg.model_type +
                        ") are not supported");
    }
  }
  return cfg;
}

Status MergeGenerationConfig(const std::string& json_text, const std::string& label,
                             Qwen3Config* cfg) {
  if (json_text.size() > kMaxConfigJsonBytes) {
    return DataLoss(label + ": larger than " + std::to_string(kMaxConfigJsonBytes) +
                    " bytes (kMaxConfigJsonBytes)");
  }
  Json g;
  VLS_RETURN_IF_ERROR(ParseUntrustedJson(label, json_text, &g));
  if (!g.is_object()) return InvalidArgument(label + ": top level must be a JSON object");
  Obj go{&g, "", label};
  // The union, generation_config.json's ids first. transformers' generate() stops on
  // generation_config's eos_token_id alone; vLLM stops on it plus the tokenizer's eos token
  // (config.json's, in the models we know). A token that config.json calls the end of the
  // sequence ends it whichever file names it, so the engine stops on both lists. Models ship
  // generation_config lists that hold config.json's (Qwen3-VL: 151645 in config, [151645,
  // 151643] in generation_config), where the union is transformers' set exactly.
  VLS_ASSIGN_OR_RETURN(std::vector<int> eos, ReadIdList(go, "eos_token_id"));
  VLS_RETURN_IF_ERROR(CheckTokenIds(label, *cfg, eos));
  AddIds(cfg->eos_token_ids, &eos);
  cfg->eos_token_ids = std::move(eos);
  return Status::Ok();
}

StatusOr<Qwen3Config> LoadQwen3Config(const std::string& dir) {
  const std::string path = JoinPath(dir, "config.json");
  VLS_ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path));
  VLS_ASSIGN_OR_RETURN(Qwen3Config cfg, ParseQwen3Config(text, path));
  const std::string gen_path = JoinPath(dir, "generation_config.json");
  auto gen = ReadConfigFile(gen_path);
  if (gen.ok()) {
    VLS_RETURN_IF_ERROR(MergeGenerationConfig(*gen, gen_path, &cfg));
  } else if (gen.status().code() != StatusCode::kNotFound) {
    return gen.status();
  }
  return cfg;
}

Status ValidateDeepStackCapacity(const DeepStackConfig& ds, int capacity) {
  if (ds.max_visual_positions > capacity) {
    return InvalidArgument("deepstack_max_visual_positions " +
                           std::to_string(ds.max_visual_positions) +
                           " exceeds selected context capacity " + std::to_string(capacity));
  }
  return Status::Ok();
}

std::string CanonicalConfigText(const Qwen3Config& c) {
  std::ostringstream o;
  o.precision(17);
  o << "model_type=" << c.model_type << "\nweight_prefix=" << c.weight_prefix
    << "\nhidden=" << c.hidden << "\nlayers=" << c.layers << "\nheads=" << c.heads
    << "\nkv_heads=" << c.kv_heads << "\nhead_dim=" << c.head_dim
    << "\nintermediate=" << c.intermediate << "\nvocab=" << c.vocab
    << "\nrms_norm_eps=" << c.rms_norm_eps << "\nrope_theta=" << c.rope_theta << "\ntied=" << c.tied
    << "\nposition_mode=" << PositionModeName(c.position_mode);
  if (c.position_mode == PositionMode::kMrope) {
    o << "\nmrope_layout="
      << (c.mrope_layout == MropeLayout::kInterleaved ? "interleaved" : "chunked")
      << "\nmrope_section=" << c.mrope_section[0] << "," << c.mrope_section[1] << ","
      << c.mrope_section[2];
  }
  o << "\nimage_token_id=" << c.image_token_id << "\nvideo_token_id=" << c.video_token_id
    << "\nvision_start_token_id=" << c.vision_start_token_id
    << "\nvision_end_token_id=" << c.vision_end_token_id
    << "\nspatial_merge_size=" << c.spatial_merge_size << "\neos=";
  for (size_t i = 0; i < c.eos_token_ids.size(); ++i) o << (i ? "," : "") << c.eos_token_ids[i];
  o << "\ndeepstack=";
  if (c.deepstack) {
    for (size_t i = 0; i < c.deepstack->target_layers.size(); ++i) {
      o << (i ? "," : "") << c.deepstack->target_layers[i];
    }
    o << " nmax=" << c.deepstack->max_visual_positions;
  } else {
    o << "none";
  }
  o << "\n";
  // Only a quantized model has this line, so other models' identities stay what they were.
  if (c.fp8) o << CanonicalQuantizationText(*c.fp8);
  // Likewise only a mixture-of-experts model has this one.
  if (c.moe) {
    o << "moe=experts " << c.moe->experts << " top_k " << c.moe->top_k << " intermediate "
      << c.moe->expert_intermediate << " sparse_step " << c.moe->sparse_step << " mlp_only_layers ";
    for (size_t i = 0; i < c.moe->mlp_only_layers.size(); ++i) {
      o << (i ? "," : "") << c.moe->mlp_only_layers[i];
    }
    o << " norm_topk_prob " << (c.moe->norm_topk_prob ? 1 : 0) << " layout "
      << MoeLayoutName(c.moe->layout) << "\n";
  }
  return o.str();
}

const char* MoeLayoutName(MoeLayout layout) {
  return layout == MoeLayout::kFused ? "fused" : "per_expert";
}

bool Qwen3Config::IsSparseLayer(int l) const {
  if (!moe.has_value() || moe->sparse_step < 1) return false;
  const std::vector<int>& dense = moe->mlp_only_layers;
  if (std::binary_search(dense.begin(), dense.end(), l)) return false;
  return (l + 1) % moe->sparse_step == 0;
}

}  // namespace vls
