#include "model/qwen3_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "base/file.h"

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
  const Json* Get(const std::string& k) const {
    auto it = j->find(k);
    if (it == j->end() || it->is_null()) return nullptr;
    return &*it;
  }
};

constexpr int64_t kMaxDim = 1 << 24;

StatusOr<int> ReadInt(const Json& v, const Obj& o, const std::string& k, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return o.Err(k, "expected an integer, got " + v.dump());
  int64_t x = v.get<int64_t>();
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return o.Err(k,
                 v.dump() + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  if (x < lo || x > hi) {
    return o.Err(k, std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "]");
  }
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

StatusOr<double> OptionalNumber(const Obj& o, const std::string& k, double def) {
  const Json* v = o.Get(k);
  if (!v) return def;
  if (!v->is_number()) return o.Err(k, "expected a number, got " + v->dump());
  double x = v->get<double>();
  if (!std::isfinite(x)) return o.Err(k, "must be finite");
  return x;
}

StatusOr<std::optional<bool>> OptionalBool(const Obj& o, const std::string& k) {
  const Json* v = o.Get(k);
  if (!v) return std::optional<bool>();
  if (!v->is_boolean()) return o.Err(k, "expected true or false, got " + v->dump());
  return std::optional<bool>(v->get<bool>());
}

// eos_token_id may be an int or a list of ints.
StatusOr<std::vector<int>> ReadIdList(const Obj& o, const std::string& k) {
  std::vector<int> ids;
  const Json* v = o.Get(k);
  if (!v) return ids;
  if (v->is_array()) {
    for (const Json& e : *v) {
      VLS_ASSIGN_OR_RETURN(int id, ReadInt(e, o, k, 0, std::numeric_limits<int32_t>::max()));
      ids.push_back(id);
    }
  } else {
    VLS_ASSIGN_OR_RETURN(int id, ReadInt(*v, o, k, 0, std::numeric_limits<int32_t>::max()));
    ids.push_back(id);
  }
  return ids;
}

// Appends the ids of `from` that `to` does not hold yet, in order.
void AddIds(const std::vector<int>& from, std::vector<int>* to) {
  for (int id : from) {
    if (std::find(to->begin(), to->end(), id) == to->end()) to->push_back(id);
  }
}

// Reads `k` from the text object, falling back to (and cross-checking) the root object:
// Qwen3-VL files repeat some keys at both levels; differing values are refused.
StatusOr<const Json*> TextOrRoot(const Obj& text, const Obj& root, const std::string& k) {
  const Json* t = text.Get(k);
  if (text.j == root.j) return t;
  const Json* r = root.Get(k);
  if (t && r && *t != *r) {
    return InvalidArgument(text.label + ": " + text.Key(k) + " (" + t->dump() + ") contradicts " +
                           root.Key(k) + " (" + r->dump() + ")");
  }
  return t ? t : r;
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
  VLS_ASSIGN_OR_RETURN(cfg.rope_theta, OptionalNumber(text, "rope_theta", 0.0));
  bool mrope_type = false;
  const Json* sections = nullptr;
  if (rope) {
    if (!rope->is_object()) return text.Err(rope_key, "expected an object");
    Obj r{rope, text.path + rope_key + ".", text.label};
    if (const Json* th = r.Get("rope_theta")) {
      VLS_ASSIGN_OR_RETURN(double t2, OptionalNumber(r, "rope_theta", 0.0));
      if (cfg.rope_theta != 0.0 && t2 != cfg.rope_theta) {
        return r.Err("rope_theta", th->dump() + " contradicts " + text.Key("rope_theta"));
      }
      cfg.rope_theta = t2;
    }
    std::string type = "default";
    const Json* tj = r.Get("rope_type");
    if (!tj) tj = r.Get("type");
    if (tj) {
      if (!tj->is_string()) return r.Err("rope_type", "expected a string");
      type = tj->get<std::string>();
    }
    if (type == "mrope") {
      mrope_type = true;
    } else if (type != "default") {
      return Status(StatusCode::kUnimplemented,
                    text.label + ": " + r.Key("rope_type") + ": '" + type +
                        "' is not supported (supported: default, mrope)");
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
                     "expected a list of 3 integers [T, H, W], got " + sections->dump());
      }
      int sum = 0;
      for (size_t i = 0; i < 3; ++i) {
        VLS_ASSIGN_OR_RETURN(cfg.mrope_section[i],
                             ReadInt((*sections)[i], r, "mrope_section", 0, kMaxDim));
        sum += cfg.mrope_section[i];
      }
      if (sum != cfg.head_dim / 2) {
        return r.Err("mrope_section", "sums to " + std::to_string(sum) + " but head_dim/2 is " +
                                          std::to_string(cfg.head_dim / 2));
      }
      cfg.position_mode = PositionMode::kMrope;
    }
  }
  if (cfg.rope_theta == 0.0) return text.Err("rope_theta", "required key is missing");
  if (cfg.rope_theta <= 0.0) return text.Err("rope_theta", "must be positive");
  if (cfg.model_type == "qwen3_vl" && cfg.position_mode != PositionMode::kMrope) {
    return text.Err("rope_scaling", "qwen3_vl requires rope_scaling.mrope_section");
  }
  if (cfg.model_type == "qwen3" && cfg.position_mode == PositionMode::kMrope) {
    return text.Err("rope_scaling", "model_type qwen3 uses 1-D RoPE but mrope_section is given");
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
  if (li) {
    ds.explicit_keys = true;
    if (!li->is_array()) return where->Err("deepstack_language_layer_indices", "expected a list");
    for (const Json& e : *li) {
      VLS_ASSIGN_OR_RETURN(int l,
                           ReadInt(e, *where, "deepstack_language_layer_indices", 0, kMaxDim));
      ds.target_layers.push_back(l);
    }
    VLS_ASSIGN_OR_RETURN(ds.max_visual_positions,
                         ReadInt(*mx, *where, "deepstack_max_visual_positions", 1,
                                 std::numeric_limits<int32_t>::max()));
  } else if (vision && vision->Get("deepstack_visual_indexes")) {
    const Json* vi = vision->Get("deepstack_visual_indexes");
    if (!vi->is_array()) return vision->Err("deepstack_visual_indexes", "expected a list");
    if (vi->empty()) return Status::Ok();  // no DeepStack taps declared
    for (size_t k = 0; k < vi->size(); ++k) {
      VLS_ASSIGN_OR_RETURN(int unused,
                           ReadInt((*vi)[k], *vision, "deepstack_visual_indexes", 0, kMaxDim));
      (void)unused;
      // The vision indexes name ViT blocks; the language targets are layers 0..K-1.
      ds.target_layers.push_back(static_cast<int>(k));
    }
  } else {
    return Status::Ok();
  }
  const std::string key = ds.explicit_keys ? where->Key("deepstack_language_layer_indices")
                                           : vision->Key("deepstack_visual_indexes");
  if (ds.target_layers.empty()) {
    return InvalidArgument(text.label + ": " + key + ": DeepStack target layer list is empty");
  }
  for (size_t i = 0; i < ds.target_layers.size(); ++i) {
    if (ds.target_layers[i] >= cfg.layers) {
      return InvalidArgument(text.label + ": " + key + ": layer " +
                             std::to_string(ds.target_layers[i]) + " is outside [0," +
                             std::to_string(cfg.layers) + ")");
    }
    if (i > 0 && ds.target_layers[i] <= ds.target_layers[i - 1]) {
      return InvalidArgument(text.label + ": " + key +
                             ": DeepStack target layers must be strictly increasing");
    }
  }
  cfg.deepstack = std::move(ds);
  return Status::Ok();
}

}  // namespace

const char* PositionModeName(PositionMode mode) {
  return mode == PositionMode::kMrope ? "mrope" : "1d";
}

StatusOr<Qwen3Config> ParseQwen3Config(const std::string& json_text, const std::string& label) {
  Json root_json = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root_json.is_discarded()) return InvalidArgument(label + ": not valid JSON");
  if (!root_json.is_object()) return InvalidArgument(label + ": top level must be a JSON object");
  Obj root{&root_json, "", label};
  Qwen3Config cfg;
  const Json* mt = root.Get("model_type");
  if (!mt || !mt->is_string()) return root.Err("model_type", "required string key is missing");
  cfg.model_type = mt->get<std::string>();
  Obj text = root;
  std::optional<Obj> vision;
  if (cfg.model_type == "qwen3_vl") {
    const Json* tc = root.Get("text_config");
    if (!tc || !tc->is_object())
      return root.Err("text_config", "qwen3_vl requires a text_config object");
    text = Obj{tc, "text_config.", label};
    if (const Json* vc = root.Get("vision_config")) {
      if (!vc->is_object()) return root.Err("vision_config", "expected an object");
      vision = Obj{vc, "vision_config.", label};
    }
    cfg.weight_prefix = "model.language_model.";
  } else if (cfg.model_type == "qwen3") {
    cfg.weight_prefix = "model.";
  } else {
    return Status(StatusCode::kUnimplemented, label + ": model_type '" + cfg.model_type +
                                                  "' is not supported (qwen3, qwen3_vl)");
  }

  VLS_ASSIGN_OR_RETURN(cfg.hidden, RequireInt(text, "hidden_size", 1, kMaxDim));
  VLS_ASSIGN_OR_RETURN(cfg.layers, RequireInt(text, "num_hidden_layers", 1, 4096));
  VLS_ASSIGN_OR_RETURN(cfg.heads, RequireInt(text, "num_attention_heads", 1, 4096));
  VLS_ASSIGN_OR_RETURN(cfg.kv_heads, OptionalInt(text, "num_key_value_heads", cfg.heads, 1, 4096));
  VLS_ASSIGN_OR_RETURN(cfg.head_dim, RequireInt(text, "head_dim", 2, 4096));
  VLS_ASSIGN_OR_RETURN(cfg.intermediate, RequireInt(text, "intermediate_size", 1, kMaxDim));
  VLS_ASSIGN_OR_RETURN(cfg.vocab, RequireInt(text, "vocab_size", 1, kMaxDim));
  VLS_ASSIGN_OR_RETURN(cfg.rms_norm_eps, OptionalNumber(text, "rms_norm_eps", 1e-6));
  VLS_ASSIGN_OR_RETURN(
      cfg.max_position_embeddings,
      OptionalInt(text, "max_position_embeddings", 0, 0, std::numeric_limits<int32_t>::max()));
  if (cfg.rms_norm_eps <= 0) return text.Err("rms_norm_eps", "must be positive");
  if (cfg.head_dim % 2 != 0) return text.Err("head_dim", "must be even for rotary embeddings");
  if (cfg.heads % cfg.kv_heads != 0) {
    return text.Err("num_key_value_heads", std::to_string(cfg.kv_heads) +
                                               " does not divide num_attention_heads " +
                                               std::to_string(cfg.heads));
  }
  if (const Json* act = text.Get("hidden_act"); act && *act != "silu") {
    return Status(StatusCode::kUnimplemented, label + ": " + text.Key("hidden_act") + ": " +
                                                  act->dump() + " is not supported (silu)");
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
    if (!tie->is_boolean()) return text.Err("tie_word_embeddings", "expected true or false");
    cfg.tied = tie->get<bool>();
  }

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
  for (int id : {cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id,
                 cfg.vision_end_token_id}) {
    if (id >= cfg.vocab) {
      return InvalidArgument(label + ": multimodal token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(cfg.vocab));
    }
  }
  if (vision) {
    VLS_ASSIGN_OR_RETURN(cfg.spatial_merge_size,
                         OptionalInt(*vision, "spatial_merge_size", 2, 1, 64));
    if (const Json* oh = vision->Get("out_hidden_size")) {
      VLS_ASSIGN_OR_RETURN(int out_hidden, ReadInt(*oh, *vision, "out_hidden_size", 1, kMaxDim));
      if (out_hidden != cfg.hidden) {
        return vision->Err("out_hidden_size", std::to_string(out_hidden) +
                                                  " contradicts text_config.hidden_size " +
                                                  std::to_string(cfg.hidden));
      }
    }
  }
  VLS_RETURN_IF_ERROR(ParseDeepStack(root, text, vision ? &*vision : nullptr, cfg));
  return cfg;
}

StatusOr<Qwen3Config> LoadQwen3Config(const std::string& dir) {
  const std::string path = JoinPath(dir, "config.json");
  VLS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  VLS_ASSIGN_OR_RETURN(Qwen3Config cfg, ParseQwen3Config(text, path));
  auto check_vocab = [&cfg](const std::vector<int>& ids, const std::string& file) -> Status {
    for (int id : ids) {
      if (id >= cfg.vocab) {
        return InvalidArgument(file + ": eos_token_id " + std::to_string(id) +
                               " is outside the vocabulary of " + std::to_string(cfg.vocab));
      }
    }
    return Status::Ok();
  };
  VLS_RETURN_IF_ERROR(check_vocab(cfg.eos_token_ids, path));
  const std::string gen_path = JoinPath(dir, "generation_config.json");
  auto gen = ReadFileToString(gen_path);
  if (gen.ok()) {
    Json g = Json::parse(*gen, nullptr, false);
    if (g.is_discarded() || !g.is_object())
      return InvalidArgument(gen_path + ": not a JSON object");
    Obj go{&g, "", gen_path};
    // The union, generation_config.json's ids first. transformers' generate() stops on
    // generation_config's eos_token_id alone; vLLM stops on it plus the tokenizer's eos token
    // (config.json's, in the models we know). A token that config.json calls the end of the
    // sequence ends it whichever file names it, so the engine stops on both lists. Models ship
    // generation_config lists that hold config.json's (Qwen3-VL: 151645 in config, [151645,
    // 151643] in generation_config), where the union is transformers' set exactly.
    VLS_ASSIGN_OR_RETURN(std::vector<int> eos, ReadIdList(go, "eos_token_id"));
    VLS_RETURN_IF_ERROR(check_vocab(eos, gen_path));
    AddIds(cfg.eos_token_ids, &eos);
    cfg.eos_token_ids = std::move(eos);
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
  return o.str();
}

}  // namespace vls
