#include "cli/load_flags.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>

#include "base/thread_pool.h"
#include "io/hf_cache.h"

namespace vls::cli {

const std::set<std::string>& LoadFlagNames() {
  static const std::set<std::string> names = {"precision",       "threads",  "artifact",
                                              "artifact-memory", "kv-cache", "kv-memory"};
  return names;
}

const std::set<std::string>& LoadBoolFlagNames() {
  static const std::set<std::string> names = {"check-weights", "no-check-weights"};
  return names;
}

std::string CheckWeightsFlagsHelp() {
  return "  --check-weights      refuse a checkpoint holding a NaN or infinite weight, naming the\n"
         "                       tensor and the element (default; checked while the weights are\n"
         "                       prepared, so it costs next to nothing; with --artifact, checked\n"
         "                       when it was compiled)\n"
         "  --no-check-weights   load such a checkpoint anyway (a request it breaks then fails\n"
         "                       with non-finite logits)\n";
}

StatusOr<ModelLocation> ModelFlag(const Args& args) {
  VLS_ASSIGN_OR_RETURN(std::string model, args.Require("model"));
  std::string repo_id;
  StatusOr<std::string> dir = ResolveModelFolder(model, &repo_id);
  if (!dir.ok()) return dir.status().WithContext("--model");
  if (!repo_id.empty()) return ModelLocation{*dir, repo_id};
  std::string name = std::filesystem::path(*dir).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::path(*dir).parent_path().filename().string();
  return ModelLocation{*dir, name.empty() ? "vlstack" : name};
}

StatusOr<std::string> ModelDirFlag(const Args& args) {
  VLS_ASSIGN_OR_RETURN(ModelLocation m, ModelFlag(args));
  return m.dir;
}

std::string LoadFlagsHelp(const std::string& default_precision, bool artifact) {
  std::string help =
      "  --precision P        matmul weights: f32, bf16, int8 or int4 (default " +
      default_precision +
      ")\n"
      "  --kv-cache K         KV cache element type: f32 or bf16 (default: f32 at --precision\n"
      "                       f32, else bf16)\n"
      "  --kv-memory SIZE     KV memory of the batch engine, one pool of 64-token blocks shared\n"
      "                       by the slots: bytes with K, M, G or TiB (binary: 4G is 4 GiB), or\n"
      "                       tokens with a t suffix (65536t). Default: the slots at full\n"
      "                       capacity when that fits, else 90% of the memory left after the\n"
      "                       weights\n"
      "  --threads T          kernel threads, 0 for all cores, at most 1024 (default 0)\n";
  if (artifact) {
    help +=
        "  --artifact FILE      prepared weights written by `vlstack compile` with the same\n"
        "                       precision and bounds, mapped instead of preparing them (default:\n"
        "                       prepare at load)\n"
        "  --artifact-memory M  copy: read the artifact into huge pages (default; decode reads\n"
        "                       them fastest); map: serve it from the file mapping, whose pages\n"
        "                       processes loading the same file share\n";
  }
  return help;
}

Status ParseKvMemory(const std::string& text, LoadOptions* o) {
  const auto bad = [&] {
    return InvalidArgument("--kv-memory must be a size such as 4G, 512M or 65536t (tokens), not '" +
                           text + "'");
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])) != 0) {
    ++digits;
  }
  if (digits == 0 || digits > 15) return bad();
  const uint64_t n = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit == "t" || unit == "tok" || unit == "tokens") {
    if (n == 0 || n > static_cast<uint64_t>(INT32_MAX) * kKvBlockKeys) return bad();
    o->kv_tokens = static_cast<int64_t>(n);
    return Status::Ok();
  }
  int shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kib" || unit == "kb") {
    shift = 10;
  } else if (unit == "m" || unit == "mib" || unit == "mb") {
    shift = 20;
  } else if (unit == "g" || unit == "gib" || unit == "gb") {
    shift = 30;
  } else if (unit == "tib" || unit == "tb") {
    shift = 40;
  } else {
    return bad();
  }
  if (n == 0 || n > (uint64_t{1} << (62 - shift))) return bad();
  o->kv_memory = n << shift;
  return Status::Ok();
}

Status ApplyLoadFlags(const Args& args, const std::string& default_precision, LoadOptions* o) {
  const std::string p = args.Get("precision").value_or(default_precision);
  if (p == "f32") {
    o->precision = kernels::Precision::kF32;
  } else if (p == "bf16") {
    o->precision = kernels::Precision::kBF16;
  } else if (p == "int8") {
    o->precision = kernels::Precision::kInt8;
  } else if (p == "int4") {
    o->precision = kernels::Precision::kInt4;
  } else {
    return InvalidArgument("--precision must be f32, bf16, int8 or int4, not '" + p + "'");
  }
  if (args.Has("check-weights") && args.Has("no-check-weights")) {
    return InvalidArgument("--check-weights and --no-check-weights contradict each other");
  }
  o->check_weights = !args.Has("no-check-weights");
  VLS_ASSIGN_OR_RETURN(long long threads, args.Int("threads", 0, 0, kMaxThreads));
  o->threads = static_cast<int>(threads);
  o->artifact = args.Get("artifact").value_or("");
  if (const auto m = args.Get("artifact-memory")) {
    if (*m == "copy") {
      o->artifact_memory = ArtifactMemory::kCopy;
    } else if (*m == "map") {
      o->artifact_memory = ArtifactMemory::kMap;
    } else {
      return InvalidArgument("--artifact-memory must be copy or map, not '" + *m + "'");
    }
    if (o->artifact.empty()) return InvalidArgument("--artifact-memory needs --artifact");
  }
  if (const auto m = args.Get("kv-memory")) {
    VLS_RETURN_IF_ERROR(ParseKvMemory(*m, o));
  }
  if (const auto kv = args.Get("kv-cache")) {
    if (*kv == "f32") {
      o->kv_dtype = KvDType::kF32;
    } else if (*kv == "bf16") {
      o->kv_dtype = KvDType::kBf16;
    } else {
      return InvalidArgument("--kv-cache must be f32 or bf16, not '" + *kv + "'");
    }
  }
  return Status::Ok();
}

PrepareProgress StderrProgress(const std::string& command) {
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  return [command, tty](int done, int total) {
    if (tty) {
      std::fprintf(stderr, "\r[%s] preparing weights: %d/%d%s", command.c_str(), done, total,
                   done == total ? "\n" : "");
    } else if (done == total || (4 * done) / total != (4 * (done - 1)) / total) {
      std::fprintf(stderr, "[%s] preparing weights: %d/%d\n", command.c_str(), done, total);
    }
  };
}

}  // namespace vls::cli
