// `vlstack make-test-model`: writes a random checkpoint in the real Hugging Face layout.
#include <cstdlib>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/test_checkpoint.h"

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

StatusOr<TestModelSpec> ParseSpec(const Args& a) {
  TestModelSpec s;
  if (auto shape = a.Get("shape")) {
    VLS_ASSIGN_OR_RETURN(s, NamedTestShape(*shape));
  }
  if (auto arch = a.Get("arch")) {
    if (*arch != "qwen3-vl" && *arch != "qwen3") {
      return InvalidArgument("--arch: '" + *arch + "' (expected qwen3-vl or qwen3)");
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
                       get("deepstack", s.arch == "qwen3-vl" ? s.deepstack : 0, 0, 64));
  VLS_ASSIGN_OR_RETURN(s.shards, get("shards", 0, 0, 64));
  VLS_ASSIGN_OR_RETURN(long long seed, a.Int("seed", 0, 0, (1ll << 62)));
  s.seed = static_cast<uint64_t>(seed);
  VLS_ASSIGN_OR_RETURN(s.rope_theta, a.Double("rope-theta", 0.0));
  VLS_ASSIGN_OR_RETURN(s.init_scale, a.Double("init-scale", 1.0));
  if (a.Has("tied") && a.Has("untied")) return InvalidArgument("--tied and --untied both given");
  if (a.Has("untied")) s.tied = false;
  if (a.Has("tied")) s.tied = true;
  if (a.Has("no-vision")) s.vision = false;
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
  if (s.arch == "qwen3" && ((a.Has("deepstack") && s.deepstack > 0) || a.Has("mrope-section"))) {
    return InvalidArgument(
        "--arch qwen3 is a 1-D text model without a vision tower: no --deepstack or "
        "--mrope-section "
        "(use --deepstack-layers/--deepstack-nmax to declare DeepStack explicitly)");
  }
  if (s.heads % s.kv_heads != 0) return InvalidArgument("--kv-heads must divide --heads");
  if (s.deepstack > s.layers) {
    return InvalidArgument("--deepstack " + std::to_string(s.deepstack) +
                           " needs at least that many --layers (DeepStack targets layers 0..K-1)");
  }
  if (s.head_dim % 2 != 0) return InvalidArgument("--head-dim must be even");
  return s;
}

}  // namespace

int RunMakeTestModel(int argc, char** argv) {
  auto args = Args::Parse(argc, argv,
                          {"out",
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
                           "init-scale"},
                          {"tied", "untied", "no-vision"});
  if (!args.ok()) return Fail("make-test-model", args.status());
  auto out = args->Require("out");
  if (!out.ok()) return Fail("make-test-model", out.status());
  auto spec = ParseSpec(*args);
  if (!spec.ok()) return Fail("make-test-model", spec.status());
  Status st = WriteTestCheckpoint(*out, *spec, /*verbose=*/true);
  if (!st.ok()) return Fail("make-test-model", st);
  return 0;
}

}  // namespace vls::cli
