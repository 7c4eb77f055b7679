#include "model/test_checkpoint.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/file.h"
#include "io/safetensors.h"
#include "tensor/tensor.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;

// splitmix64 + Box-Muller: fast, reproducible across platforms.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() {
    return (static_cast<double>(Next() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  float Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = Uniform(), u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2 * M_PI * u2));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2 * M_PI * u2));
  }

 private:
  uint64_t s_;
  bool has_spare_ = false;
  float spare_ = 0;
};

// Token ids: the real Qwen ids when the vocabulary holds them, else the last ids of a small one.
struct Ids {
  int endoftext, im_start, im_end, vision_start, vision_end, image_pad, video_pad;
};
Ids SpecialIds(int vocab) {
  if (vocab > 151656) return {151643, 151644, 151645, 151652, 151653, 151655, 151656};
  return {vocab - 2, vocab - 3, vocab - 1, vocab - 6, vocab - 5, vocab - 4, vocab - 7};
}

std::vector<int> DefaultMropeSection(int head_dim) {
  const int half = head_dim / 2;
  const int hw = half * 20 / 64;
  return {half - 2 * hw, hw, hw};
}

int VisionDepth(const TestModelSpec& s) {
  return s.vision_depth > 0 ? s.vision_depth : std::max(2, s.deepstack + 1);
}

std::vector<int> VisionDeepStackIndexes(const TestModelSpec& s) {
  if (!s.vision_ds_indexes.empty()) return s.vision_ds_indexes;
  std::vector<int> ds(static_cast<size_t>(s.deepstack));
  for (int k = 0; k < s.deepstack; ++k) ds[static_cast<size_t>(k)] = k;
  return ds;
}

// preprocessor_config.json as Qwen3-VL ships it (docs/contracts.md §D.3), with the spec's sizes.
Json MakePreprocessorConfig(const TestModelSpec& s) {
  Json p;
  p["size"] = {{"longest_edge", s.max_pixels}, {"shortest_edge", s.min_pixels}};
  p["patch_size"] = 16;
  p["temporal_patch_size"] = 2;
  p["merge_size"] = 2;
  p["image_mean"] = {0.5, 0.5, 0.5};
  p["image_std"] = {0.5, 0.5, 0.5};
  p["processor_class"] = "Qwen3VLProcessor";
  p["image_processor_type"] = "Qwen2VLImageProcessorFast";
  return p;
}

Json MakeConfig(const TestModelSpec& s, const Ids& ids, const std::vector<int>& mrope) {
  const char* dtype_name = s.dtype == DType::kBF16  ? "bfloat16"
                           : s.dtype == DType::kF16 ? "float16"
                                                    : "float32";
  Json text;
  text["hidden_size"] = s.hidden;
  text["intermediate_size"] = s.intermediate;
  text["num_hidden_layers"] = s.layers;
  text["num_attention_heads"] = s.heads;
  text["num_key_value_heads"] = s.kv_heads;
  text["head_dim"] = s.head_dim;
  text["vocab_size"] = s.vocab;
  text["hidden_act"] = "silu";
  text["rms_norm_eps"] = 1e-6;
  text["max_position_embeddings"] = 262144;
  text["attention_bias"] = false;
  text["attention_dropout"] = 0.0;
  text["bos_token_id"] = ids.endoftext;
  text["eos_token_id"] = ids.im_end;
  text["tie_word_embeddings"] = s.tied;
  text["torch_dtype"] = dtype_name;
  const bool moe = TestArchIsMoe(s.arch);
  if (moe) {
    // The keys of transformers' Qwen3MoeConfig / Qwen3VLMoeTextConfig (ADR 0027).
    text["num_experts"] = s.experts;
    text["num_experts_per_tok"] = s.top_k;
    text["moe_intermediate_size"] = s.moe_intermediate;
    text["decoder_sparse_step"] = s.sparse_step;
    text["mlp_only_layers"] = s.mlp_only_layers;
    text["norm_topk_prob"] = s.arch == "qwen3-moe" ? s.norm_topk_prob : true;
    text["router_aux_loss_coef"] = 0.001;
    text["output_router_logits"] = false;
  }
  if (TestArchIsText(s.arch)) {
    Json c;
    c["architectures"] = {moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"};
    c["model_type"] = moe ? "qwen3_moe" : "qwen3";
    for (auto& [k, v] : text.items()) c[k] = v;
    c["rope_theta"] = s.rope_theta > 0 ? s.rope_theta : 1000000.0;
    c["rope_scaling"] = nullptr;
    c["use_sliding_window"] = false;
    if (!s.ds_layers.empty()) {
      c["deepstack_language_layer_indices"] = s.ds_layers;
      c["deepstack_max_visual_positions"] = s.ds_nmax;
    }
    c["transformers_version"] = "4.57.0";
    return c;
  }
  text["model_type"] = moe ? "qwen3_vl_moe_text" : "qwen3_vl_text";
  text["rope_theta"] = s.rope_theta > 0 ? s.rope_theta : 5000000.0;
  text["rope_scaling"] = {
      {"rope_type", "default"}, {"mrope_section", mrope}, {"mrope_interleaved", !s.chunked}};
  Json c;
  c["architectures"] = {moe ? "Qwen3VLMoeForConditionalGeneration"
                            : "Qwen3VLForConditionalGeneration"};
  c["model_type"] = moe ? "qwen3_vl_moe" : "qwen3_vl";
  c["image_token_id"] = ids.image_pad;
  c["video_token_id"] = ids.video_pad;
  c["vision_start_token_id"] = ids.vision_start;
  c["vision_end_token_id"] = ids.vision_end;
  c["tie_word_embeddings"] = s.tied;
  c["text_config"] = text;
  Json vis;
  vis["model_type"] = moe ? "qwen3_vl_moe" : "qwen3_vl";
  vis["depth"] = VisionDepth(s);
  vis["hidden_size"] = s.vision_hidden;
  vis["intermediate_size"] = s.vision_intermediate;
  vis["num_heads"] = s.vision_heads;
  vis["in_channels"] = 3;
  vis["patch_size"] = 16;
  vis["temporal_patch_size"] = 2;
  vis["spatial_merge_size"] = 2;
  vis["out_hidden_size"] = s.hidden;
  vis["num_position_embeddings"] = s.vision_pos_grid * s.vision_pos_grid;
  vis["hidden_act"] = "gelu_pytorch_tanh";
  vis["initializer_range"] = 0.02;
  vis["deepstack_visual_indexes"] = VisionDeepStackIndexes(s);
  c["vision_config"] = vis;
  if (!s.ds_layers.empty()) {
    c["deepstack_language_layer_indices"] = s.ds_layers;
    c["deepstack_max_visual_positions"] = s.ds_nmax;
  }
  c["torch_dtype"] = dtype_name;
  c["transformers_version"] = "4.57.0";
  return c;
}

// quantization_config as Qwen's FP8 releases write it (model/quantization_config.h).
Json MakeQuantizationConfig(const TestModelSpec& s) {
  Json excluded = Json::array();
  if (!s.fp8_lm_head) excluded.push_back("lm_head");
  if (!TestArchIsText(s.arch) && !s.fp8_vision) excluded.push_back("model.visual");
  Json q;
  q["activation_scheme"] = "dynamic";
  q["fmt"] = "e4m3";
  q["quant_method"] = "fp8";
  q["weight_block_size"] = {s.fp8_block_rows, s.fp8_block_cols};
  q["modules_to_not_convert"] = excluded;
  return q;
}

// Quantizes w[rows, cols] to E4M3 codes with one BF16 scale per [bh, bw] block: returns the
// codes and the scales [ceil(rows / bh), ceil(cols / bw)].
std::pair<HostTensor, HostTensor> QuantizeFp8(const std::vector<float>& w, int64_t rows,
                                              int64_t cols, int64_t bh, int64_t bw) {
  const int64_t gr = (rows + bh - 1) / bh, gc = (cols + bw - 1) / bw;
  std::vector<float> codes(w.size()), scales(static_cast<size_t>(gr * gc));
  for (int64_t br = 0; br < gr; ++br) {
    for (int64_t bc = 0; bc < gc; ++bc) {
      const int64_t r1 = std::min(rows, (br + 1) * bh), c1 = std::min(cols, (bc + 1) * bw);
      float amax = 0;
      for (int64_t r = br * bh; r < r1; ++r) {
        for (int64_t c = bc * bw; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      const float scale = amax > 0 ? Bf16ToF32(F32ToBf16(amax / 448.0f)) : 1.0f;
      scales[size_t(br * gc + bc)] = scale;
      for (int64_t r = br * bh; r < r1; ++r) {
        for (int64_t c = bc * bw; c < c1; ++c) {
          codes[size_t(r * cols + c)] = std::clamp(w[r * cols + c] / scale, -448.0f, 448.0f);
        }
      }
    }
  }
  return {FromF32As(DType::kF8E4M3, {rows, cols}, codes),
          FromF32As(DType::kBF16, {gr, gc}, scales)};
}

struct Gen {
  std::vector<std::pair<std::string, HostTensor>> tensors;
  Rng rng;
  DType dtype;
  double scale;
  int64_t fp8_block_rows = 0, fp8_block_cols = 0;  // for Store's `fp8`
  // A dry run draws no value: it counts the tensors and their bytes (the shard plan).
  bool dry = false;
  size_t count = 0;
  uint64_t bytes = 0;
  // Called after each tensor a real run stores (ShardWriter::Flush: full shards leave memory).
  std::function<Status(Gen&)> flush;
  Status status;  // the first error of `flush`; later tensors are dropped

  void Add(std::string name, HostTensor t) {
    if (!status.ok()) return;
    tensors.emplace_back(std::move(name), std::move(t));
    if (flush) status = flush(*this);
  }
  // In a dry run, counts the tensor (and its FP8 scales) and returns true.
  bool Skip(const Shape& shape, bool fp8) {
    if (!dry) return false;
    ++count;
    bytes += static_cast<uint64_t>(NumElements(shape)) * (fp8 ? 1 : DTypeSize(dtype));
    if (fp8) {
      ++count;
      const int64_t gr = (shape[0] + fp8_block_rows - 1) / fp8_block_rows;
      const int64_t gc = (shape[1] + fp8_block_cols - 1) / fp8_block_cols;
      bytes += static_cast<uint64_t>(gr * gc) * DTypeSize(DType::kBF16);
    }
    return true;
  }

  // Stores w[rows, cols] as `name`: in `dtype`, or with `fp8` as E4M3 codes plus its
  // `_scale_inv` tensor.
  void Store(const std::string& name, Shape shape, const std::vector<float>& v, bool fp8) {
    if (!fp8) {
      Add(name, FromF32As(dtype, std::move(shape), v));
      return;
    }
    auto [codes, scales] = QuantizeFp8(v, shape[0], shape[1], fp8_block_rows, fp8_block_cols);
    Add(name, std::move(codes));
    Add(name + "_scale_inv", std::move(scales));
  }

  // `edit`, when set, changes the values before they are stored (a scripted model).
  using Edit = std::function<void(std::vector<float>&)>;
  void Matrix(const std::string& name, int64_t rows, int64_t cols, double stddev,
              const Edit& edit = nullptr, bool fp8 = false) {
    if (Skip({rows, cols}, fp8)) return;
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (float& x : v) x = static_cast<float>(rng.Normal() * stddev * scale);
    if (edit) edit(v);
    Store(name, {rows, cols}, v, fp8);
  }
  // Like Matrix, for a tensor of any rank (the fused expert tensors [E, ., .]); never FP8.
  void Scaled(const std::string& name, Shape shape, double stddev, const Edit& edit = nullptr) {
    if (Skip(shape, false)) return;
    std::vector<float> v(static_cast<size_t>(NumElements(shape)));
    for (float& x : v) x = static_cast<float>(rng.Normal() * stddev * scale);
    if (edit) edit(v);
    Store(name, std::move(shape), v, false);
  }
  void Tensor(const std::string& name, Shape shape, double stddev, double mean = 0.0,
              const Edit& edit = nullptr, bool fp8 = false) {
    if (Skip(shape, fp8)) return;
    std::vector<float> v(static_cast<size_t>(NumElements(shape)));
    for (float& x : v) x = static_cast<float>(mean + rng.Normal() * stddev);
    if (edit) edit(v);
    Store(name, std::move(shape), v, fp8);
  }
  void Norm(const std::string& name, int64_t n, const Edit& edit = nullptr) {
    Tensor(name, {n}, 0.1, 1.0, edit);
  }
};

Gen NewGen(const TestModelSpec& s, bool dry, std::function<Status(Gen&)> flush) {
  return Gen{{},  Rng(s.seed), s.dtype, s.init_scale,     s.fp8_block_rows, s.fp8_block_cols,
             dry, 0,           0,       std::move(flush), Status::Ok()};
}

// The scripted model's edits (TestModelSpec::successors): orthonormal embeddings for the pairs'
// first tokens, LM head rows of the successors along them, zero layer outputs, unit final norm.
struct Script {
  std::vector<std::pair<int32_t, int32_t>> pairs;
  std::vector<std::vector<float>> dirs;  // [pairs][H] orthonormal
  int64_t H = 0;

  static StatusOr<Script> Make(const TestModelSpec& s) {
    Script sc;
    sc.pairs = s.successors;
    sc.H = s.hidden;
    if (sc.pairs.empty()) return sc;
    if (s.tied) return InvalidArgument("a scripted model needs an untied LM head (--untied)");
    if (static_cast<int64_t>(sc.pairs.size()) > sc.H) {
      return InvalidArgument("a scripted model of hidden size " + std::to_string(sc.H) +
                             " takes at most that many distinct tokens; the script has " +
                             std::to_string(sc.pairs.size()));
    }
    std::set<int32_t> firsts;
    for (const auto& [a, b] : sc.pairs) {
      if (a < 0 || b < 0 || a >= s.vocab || b >= s.vocab) {
        return InvalidArgument("a scripted token id is outside the vocabulary of " +
                               std::to_string(s.vocab));
      }
      if (!firsts.insert(a).second) {
        return InvalidArgument("token " + std::to_string(a) +
                               " appears twice in the script: a scripted model gives each "
                               "token one successor");
      }
    }
    Rng rng(s.seed ^ 0x5eed5c2107ull);
    for (size_t k = 0; k < sc.pairs.size(); ++k) {  // Gram-Schmidt on random directions
      std::vector<double> v(static_cast<size_t>(sc.H));
      for (double& x : v) x = rng.Normal();
      for (const std::vector<float>& d : sc.dirs) {
        double dot = 0;
        for (int64_t i = 0; i < sc.H; ++i) dot += v[i] * d[i];
        for (int64_t i = 0; i < sc.H; ++i) v[i] -= dot * d[i];
      }
      double norm = 0;
      for (double x : v) norm += x * x;
      norm = std::sqrt(norm);
      std::vector<float> d(static_cast<size_t>(sc.H));
      for (int64_t i = 0; i < sc.H; ++i) d[i] = static_cast<float>(v[i] / norm);
      sc.dirs.push_back(std::move(d));
    }
    return sc;
  }
  bool on() const { return !pairs.empty(); }
  // embed_tokens [V, H]: the first tokens' rows are their directions.
  void Embeddings(std::vector<float>& w) const {
    for (size_t k = 0; k < pairs.size(); ++k) {
      std::copy(dirs[k].begin(), dirs[k].end(), w.begin() + pairs[k].first * H);
    }
  }
  // lm_head [V, H]: a successor's row is 4x its token's direction (logit 4·sqrt(H) after the
  // final RMSNorm, against N(0, 1) for the random rows).
  void Head(std::vector<float>& w) const {
    for (const auto& [a, b] : pairs) std::fill_n(w.begin() + b * H, H, 0.0f);
    for (size_t k = 0; k < pairs.size(); ++k) {
      float* row = w.data() + pairs[k].second * H;
      for (int64_t i = 0; i < H; ++i) row[i] += 4.0f * dirs[k][i];
    }
  }
};

// Writes model.safetensors, or the shards and model.safetensors.index.json, from the dry run's
// plan: `shards` files (TestModelSpec::shards, else one per 2 GiB), each of `per` consecutive
// tensors. Full shards are written while the real run generates (Flush), so at most one shard
// is in memory: a full-depth 30B-A3B shape is written on a machine far smaller than it.
class ShardWriter {
 public:
  ShardWriter(const std::string& dir, const TestModelSpec& s, const Gen& dry) : dir_(dir) {
    total_ = dry.bytes;
    const size_t n = std::max<size_t>(1, dry.count);
    shards_ = s.shards > 0
                  ? s.shards
                  : static_cast<int>(std::max<uint64_t>(1, (total_ + (2ull << 30) - 1) >> 31));
    shards_ = std::min<int>(shards_, static_cast<int>(n));
    per_ = (n + static_cast<size_t>(shards_) - 1) / static_cast<size_t>(shards_);
  }

  // After each stored tensor: a full shard (all but the single-file case) goes to disk.
  Status Flush(Gen& g) {
    if (shards_ == 1 || g.tensors.size() < per_) return Status::Ok();
    return WriteShard(g);
  }

  Status Finish(Gen& g) {
    const std::map<std::string, std::string> meta = {{"format", "pt"}};
    if (shards_ == 1) {
      std::vector<NamedTensor> all;
      for (auto& [n, t] : g.tensors) all.push_back({n, t.view()});
      return WriteSafetensors(JoinPath(dir_, "model.safetensors"), all, meta);
    }
    while (next_ < shards_) VLS_RETURN_IF_ERROR(WriteShard(g));  // the rest (maybe empty)
    Json index;
    index["metadata"] = {{"total_size", total_}};
    index["weight_map"] = map_;
    return WriteStringToFile(JoinPath(dir_, "model.safetensors.index.json"), index.dump(2) + "\n");
  }

 private:
  Status WriteShard(Gen& g) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", next_ + 1, shards_);
    std::vector<NamedTensor> part;
    for (auto& [n, t] : g.tensors) {
      part.push_back({n, t.view()});
      map_[n] = name;
    }
    ++next_;
    VLS_RETURN_IF_ERROR(WriteSafetensors(JoinPath(dir_, name), part, {{"format", "pt"}}));
    g.tensors.clear();
    // Hand the shard's freed heap back to the system: the tensors are a few MiB each, below
    // glibc's (raised) mmap threshold, and without a trim the holes they leave made a 48-layer
    // 30B-A3B writer grow past 24 GB.
    malloc_trim(0);
    return Status::Ok();
  }

  std::string dir_;
  uint64_t total_ = 0;
  int shards_ = 1, next_ = 0;
  size_t per_ = 1;
  Json map_ = Json::object();
};

}  // namespace

bool TestArchIsText(const std::string& arch) { return arch == "qwen3" || arch == "qwen3-moe"; }
bool TestArchIsMoe(const std::string& arch) {
  return arch == "qwen3-moe" || arch == "qwen3-vl-moe";
}

bool TestLayerIsSparse(const TestModelSpec& s, int l) {
  if (!TestArchIsMoe(s.arch) || s.sparse_step < 1) return false;
  if (std::find(s.mlp_only_layers.begin(), s.mlp_only_layers.end(), l) != s.mlp_only_layers.end()) {
    return false;
  }
  return (l + 1) % s.sparse_step == 0;
}

StatusOr<TestModelSpec> NamedTestShape(const std::string& name) {
  TestModelSpec s;
  if (name == "qwen3-vl-2b") {
    // Qwen3-VL-2B (docs/contracts.md §E): the 2B text decoder and its 24-block vision tower.
    s.hidden = 2048, s.layers = 28, s.heads = 16, s.kv_heads = 8, s.head_dim = 128;
    s.intermediate = 6144, s.vocab = 151936;
    s.vision_depth = 24, s.vision_hidden = 1024, s.vision_heads = 16;
    s.vision_intermediate = 4096, s.vision_pos_grid = 48;
    s.vision_ds_indexes = {5, 11, 17};
    s.min_pixels = 65536, s.max_pixels = 16777216;
  } else if (name == "qwen3-vl-2b-text") {
    s.hidden = 2048, s.layers = 28, s.heads = 16, s.kv_heads = 8, s.head_dim = 128;
    s.intermediate = 6144, s.vocab = 151936, s.vision = false;
  } else if (name == "qwen3-0.6b") {
    s.arch = "qwen3";
    s.deepstack = 0;
    s.hidden = 1024, s.layers = 28, s.heads = 16, s.kv_heads = 8, s.head_dim = 128;
    s.intermediate = 3072, s.vocab = 151936;
  } else if (name == "qwen3-vl-30b-a3b") {
    // Qwen/Qwen3-VL-30B-A3B-Instruct's config.json: the text decoder (48 layers, all sparse:
    // 128 experts of width 768, top 8; rope_theta 5e6, mrope_section [24, 20, 20] as derived
    // from head_dim 128, untied) and its 27-block vision tower (hidden 1152, 16 heads,
    // intermediate 4304, 2304 position embeddings, deepstack_visual_indexes [8, 16, 24]).
    s.arch = "qwen3-vl-moe";
    s.hidden = 2048, s.layers = 48, s.heads = 32, s.kv_heads = 4, s.head_dim = 128;
    s.intermediate = 6144, s.vocab = 151936, s.tied = false;
    s.experts = 128, s.top_k = 8, s.moe_intermediate = 768;
    s.vision_depth = 27, s.vision_hidden = 1152, s.vision_heads = 16;
    s.vision_intermediate = 4304, s.vision_pos_grid = 48;
    s.vision_ds_indexes = {8, 16, 24};
    s.min_pixels = 65536, s.max_pixels = 16777216;
  } else if (name == "qwen3-30b-a3b") {
    // Qwen/Qwen3-30B-A3B's config.json: 48 sparse layers, 128 experts of width 768, top 8,
    // norm_topk_prob true, rope_theta 1e6, untied.
    s.arch = "qwen3-moe";
    s.deepstack = 0, s.vision = false;
    s.hidden = 2048, s.layers = 48, s.heads = 32, s.kv_heads = 4, s.head_dim = 128;
    s.intermediate = 6144, s.vocab = 151936, s.tied = false;
    s.experts = 128, s.top_k = 8, s.moe_intermediate = 768, s.norm_topk_prob = true;
  } else if (name != "tiny") {
    return InvalidArgument("unknown model shape '" + name +
                           "' (known: tiny, qwen3-vl-2b, qwen3-vl-2b-text, qwen3-0.6b, "
                           "qwen3-vl-30b-a3b, qwen3-30b-a3b)");
  }
  return s;
}

Status WriteTestCheckpoint(const std::string& dir, const TestModelSpec& s, bool verbose) {
  std::vector<int> mrope =
      s.mrope_section.empty() ? DefaultMropeSection(s.head_dim) : s.mrope_section;
  VLS_ASSIGN_OR_RETURN(const Script script, Script::Make(s));  // before anything is written
  if (s.arch != "qwen3-vl" && s.arch != "qwen3" && !TestArchIsMoe(s.arch)) {
    return InvalidArgument("unknown arch '" + s.arch +
                           "' (qwen3-vl, qwen3, qwen3-vl-moe or qwen3-moe)");
  }
  if (TestArchIsMoe(s.arch)) {
    if (s.experts < 1 || s.top_k < 1 || s.top_k > s.experts || s.moe_intermediate < 1 ||
        s.sparse_step < 1) {
      return InvalidArgument(
          "a mixture of experts needs experts >= 1, 1 <= top_k <= experts, "
          "moe_intermediate >= 1 and sparse_step >= 1");
    }
    for (int l : s.mlp_only_layers) {
      if (l < 0 || l >= s.layers) {
        return InvalidArgument("mlp_only_layers: layer " + std::to_string(l) +
                               " is outside the model's " + std::to_string(s.layers) + " layers");
      }
    }
    if (s.fp8 && s.arch == "qwen3-vl-moe") {
      return InvalidArgument(
          "FP8 checkpoints of the fused expert layout (qwen3-vl-moe) are not supported; "
          "use qwen3-moe for an FP8 mixture of experts");
    }
    if (s.arch == "qwen3-vl-moe" && !s.norm_topk_prob) {
      return InvalidArgument(
          "qwen3-vl-moe always renormalises the top-k weights (no norm_topk_prob false)");
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("cannot create folder '" + dir + "': " + ec.message());
  const Ids ids = SpecialIds(s.vocab);
  Json cfg = MakeConfig(s, ids, mrope);
  if (s.fp8) cfg["quantization_config"] = MakeQuantizationConfig(s);

  const Gen::Edit zero = [](std::vector<float>& v) { std::fill(v.begin(), v.end(), 0.0f); };
  const Gen::Edit one = [](std::vector<float>& v) { std::fill(v.begin(), v.end(), 1.0f); };
  const Gen::Edit none = nullptr;
  const bool q = s.fp8, qv = s.fp8 && s.fp8_vision;  // quantize the text / vision Linears
  const std::string p = TestArchIsText(s.arch) ? "model." : "model.language_model.";
  const int64_t H = s.hidden, D = s.head_dim, I = s.intermediate, V = s.vocab;
  const int64_t E = s.experts, Ie = s.moe_intermediate;
  const double sh = 1.0 / std::sqrt(static_cast<double>(H));
  if (verbose)
    std::fprintf(stderr,
                 "[make-test-model] %s: %s, H=%d L=%d heads=%d/%d D=%d I=%d V=%d, %s%s, %s\n",
                 dir.c_str(), s.arch.c_str(), s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim,
                 s.intermediate, s.vocab, std::string(DTypeName(s.dtype)).c_str(),
                 s.fp8 ? (" + F8_E4M3 Linears in blocks of " + std::to_string(s.fp8_block_rows) +
                          "x" + std::to_string(s.fp8_block_cols))
                             .c_str()
                       : "",
                 s.tied ? "tied" : "untied");
  if (verbose && TestArchIsMoe(s.arch))
    std::fprintf(
        stderr,
        "[make-test-model] experts: %d of width %d, top %d, sparse step %d, %zu dense-only "
        "layers, %s layout%s\n",
        s.experts, s.moe_intermediate, s.top_k, s.sparse_step, s.mlp_only_layers.size(),
        s.arch == "qwen3-vl-moe" ? "fused" : "per-expert",
        s.norm_topk_prob ? ", renormalised" : "");
  // Every tensor in file order; run twice: dry (the shard plan), then for real.
  auto generate = [&](Gen& g) {
    g.Matrix(p + "embed_tokens.weight", V, H, 1.0,
             script.on() ? Gen::Edit([&](std::vector<float>& w) { script.Embeddings(w); }) : none);
    for (int l = 0; l < s.layers; ++l) {
      const std::string lp = p + "layers." + std::to_string(l) + ".";
      g.Norm(lp + "input_layernorm.weight", H);
      g.Matrix(lp + "self_attn.q_proj.weight", s.heads * D, H, sh, none, q);
      g.Matrix(lp + "self_attn.k_proj.weight", s.kv_heads * D, H, sh, none, q);
      g.Matrix(lp + "self_attn.v_proj.weight", s.kv_heads * D, H, sh, none, q);
      g.Matrix(lp + "self_attn.o_proj.weight", H, s.heads * D,
               1.0 / std::sqrt(static_cast<double>(s.heads * D)), script.on() ? zero : none, q);
      g.Norm(lp + "self_attn.q_norm.weight", D);
      g.Norm(lp + "self_attn.k_norm.weight", D);
      g.Norm(lp + "post_attention_layernorm.weight", H);
      if (!TestLayerIsSparse(s, l)) {
        g.Matrix(lp + "mlp.gate_proj.weight", I, H, sh, none, q);
        g.Matrix(lp + "mlp.up_proj.weight", I, H, sh, none, q);
        g.Matrix(lp + "mlp.down_proj.weight", H, I, 1.0 / std::sqrt(static_cast<double>(I)),
                 script.on() ? zero : none, q);
      } else {
        // Router [E, H] at N(0, 1/H): logits N(0, 1) on a normed row (|m|² ≈ H), so routing
        // differs from row to row. Never FP8 (the releases keep mlp.gate in BF16).
        g.Matrix(lp + "mlp.gate.weight", E, H, sh);
        const double sd = 1.0 / std::sqrt(static_cast<double>(Ie));
        if (s.arch == "qwen3-vl-moe") {
          // Fused, as stored by Qwen3-VL-MoE: [E, H, 2·I_e] (gate columns, then up), [E, I_e, H].
          g.Scaled(lp + "mlp.experts.gate_up_proj", {E, H, 2 * Ie}, sh);
          g.Scaled(lp + "mlp.experts.down_proj", {E, Ie, H}, sd, script.on() ? zero : none);
        } else {
          for (int64_t e = 0; e < E; ++e) {
            const std::string ep = lp + "mlp.experts." + std::to_string(e) + ".";
            g.Matrix(ep + "gate_proj.weight", Ie, H, sh, none, q);
            g.Matrix(ep + "up_proj.weight", Ie, H, sh, none, q);
            g.Matrix(ep + "down_proj.weight", H, Ie, sd, script.on() ? zero : none, q);
          }
        }
      }
      if (s.layers >= 8 && (l + 1) % 4 == 0)
        if (verbose && !g.dry)
          std::fprintf(stderr, "[make-test-model] layer %d/%d\n", l + 1, s.layers);
    }
    g.Norm(p + "norm.weight", H, script.on() ? one : none);
    if (!s.tied) {
      g.Matrix("lm_head.weight", V, H, sh,
               script.on() ? Gen::Edit([&](std::vector<float>& w) { script.Head(w); }) : none,
               q && s.fp8_lm_head);
    }
    if (!TestArchIsText(s.arch) && s.vision) {
      // The vision tower in the real layout (docs/contracts.md §A.3, §D); the text decoder ignores
      // it. Matrices are N(0, 1/fan_in) so every block and merger output stays O(1) and an
      // image visibly steers the text decoder; norms near 1, biases small.
      const auto& vc = cfg["vision_config"];
      const int64_t Dv = vc["hidden_size"], Iv = vc["intermediate_size"], depth = vc["depth"];
      const std::string vp = "model.visual.";
      auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
      g.Tensor(vp + "patch_embed.proj.weight", {Dv, 3, 2, 16, 16}, inv_sqrt(3 * 2 * 16 * 16));
      g.Tensor(vp + "patch_embed.proj.bias", {Dv}, 0.02);
      g.Tensor(vp + "pos_embed.weight", {vc["num_position_embeddings"].get<int64_t>(), Dv}, 0.5);
      for (int64_t b = 0; b < depth; ++b) {
        const std::string bp = vp + "blocks." + std::to_string(b) + ".";
        for (const char* n : {"norm1", "norm2"}) {
          g.Norm(bp + n + ".weight", Dv);
          g.Tensor(bp + n + ".bias", {Dv}, 0.02);
        }
        g.Tensor(bp + "attn.qkv.weight", {3 * Dv, Dv}, inv_sqrt(Dv), 0.0, none, qv);
        g.Tensor(bp + "attn.qkv.bias", {3 * Dv}, 0.02);
        g.Tensor(bp + "attn.proj.weight", {Dv, Dv}, inv_sqrt(Dv), 0.0, none, qv);
        g.Tensor(bp + "attn.proj.bias", {Dv}, 0.02);
        g.Tensor(bp + "mlp.linear_fc1.weight", {Iv, Dv}, inv_sqrt(Dv), 0.0, none, qv);
        g.Tensor(bp + "mlp.linear_fc1.bias", {Iv}, 0.02);
        g.Tensor(bp + "mlp.linear_fc2.weight", {Dv, Iv}, inv_sqrt(Iv), 0.0, none, qv);
        g.Tensor(bp + "mlp.linear_fc2.bias", {Dv}, 0.02);
        if (verbose && !g.dry && depth >= 8 && (b + 1) % 8 == 0)
          std::fprintf(stderr, "[make-test-model] vision block %s/%s\n",
                       std::to_string(b + 1).c_str(), std::to_string(depth).c_str());
      }
      auto merger = [&](const std::string& mp, int64_t norm_dim) {
        g.Norm(mp + "norm.weight", norm_dim);
        g.Tensor(mp + "norm.bias", {norm_dim}, 0.02);
        g.Tensor(mp + "linear_fc1.weight", {4 * Dv, 4 * Dv}, inv_sqrt(4 * Dv), 0.0, none, qv);
        g.Tensor(mp + "linear_fc1.bias", {4 * Dv}, 0.02);
        g.Tensor(mp + "linear_fc2.weight", {H, 4 * Dv}, inv_sqrt(4 * Dv), 0.0, none, qv);
        g.Tensor(mp + "linear_fc2.bias", {H}, 0.02);
      };
      merger(vp + "merger.", Dv);
      for (int k = 0; k < s.deepstack; ++k)
        merger(vp + "deepstack_merger_list." + std::to_string(k) + ".", 4 * Dv);
    }
  };
  Gen dry = NewGen(s, /*dry=*/true, nullptr);
  generate(dry);
  ShardWriter writer(dir, s, dry);
  Gen g = NewGen(s, /*dry=*/false, [&writer](Gen& gen) { return writer.Flush(gen); });
  generate(g);
  VLS_RETURN_IF_ERROR(g.status);
  Status st = WriteStringToFile(JoinPath(dir, "config.json"), cfg.dump(2) + "\n");
  if (st.ok()) {
    Json gen;
    gen["bos_token_id"] = ids.endoftext;
    gen["eos_token_id"] = {ids.im_end, ids.endoftext};
    gen["pad_token_id"] = ids.endoftext;
    gen["do_sample"] = false;
    st = WriteStringToFile(JoinPath(dir, "generation_config.json"), gen.dump(2) + "\n");
  }
  if (st.ok() && !TestArchIsText(s.arch) && s.vision) {
    st = WriteStringToFile(JoinPath(dir, "preprocessor_config.json"),
                           MakePreprocessorConfig(s).dump(2) + "\n");
  }
  if (st.ok()) st = writer.Finish(g);
  if (!st.ok()) return st;
  if (verbose)
    std::fprintf(stderr, "[make-test-model] wrote %zu tensors to %s\n", dry.count, dir.c_str());
  return Status::Ok();
}

Status SetTestCheckpointElement(const std::string& dir, const std::string& name, int64_t index,
                                float value) {
  std::string file = "model.safetensors";
  const std::string index_path = JoinPath(dir, "model.safetensors.index.json");
  if (std::filesystem::exists(index_path)) {
    std::ifstream in(index_path);
    const Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].contains(name)) {
      return NotFound(index_path + " maps no tensor '" + name + "'");
    }
    file = j["weight_map"][name].get<std::string>();
  }
  const std::string path = JoinPath(dir, file);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  if (!f.read(reinterpret_cast<char*>(&header_len), 8)) return IoError("cannot read " + path);
  std::string header(static_cast<size_t>(header_len), '\0');
  if (!f.read(header.data(), static_cast<std::streamsize>(header_len))) {
    return IoError("cannot read the header of " + path);
  }
  const Json h = Json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!h.is_object() || !h.contains(name)) return NotFound(path + " has no tensor '" + name + "'");
  const Json& t = h[name];
  DType dt;
  if (!ParseDTypeName(t["dtype"].get<std::string>(), &dt) ||
      (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16)) {
    return InvalidArgument("tensor '" + name + "' is not F32, BF16 or F16");
  }
  const uint64_t begin = t["data_offsets"][0].get<uint64_t>();
  const uint64_t end = t["data_offsets"][1].get<uint64_t>();
  const uint64_t size = DTypeSize(dt);
  if (index < 0 || begin + (static_cast<uint64_t>(index) + 1) * size > end) {
    return OutOfRange("element " + std::to_string(index) + " is past the end of '" + name + "'");
  }
  char bytes[4];
  if (dt == DType::kF32) {
    std::memcpy(bytes, &value, 4);
  } else {
    const uint16_t v = dt == DType::kBF16 ? F32ToBf16(value) : F32ToF16(value);
    std::memcpy(bytes, &v, 2);
  }
  f.seekp(
      static_cast<std::streamoff>(8 + header_len + begin + static_cast<uint64_t>(index) * size));
  if (!f.write(bytes, static_cast<std::streamsize>(size)) || !f.flush()) {
    return IoError("cannot write " + path);
  }
  return Status::Ok();
}

}  // namespace vls
