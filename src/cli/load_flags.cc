#include "cli/load_flags.h"

#include <unistd.h>

#include <cstdio>

namespace vls::cli {

const std::set<std::string>& LoadFlagNames() {
  static const std::set<std::string> names = {"precision", "threads", "artifact", "kv-cache"};
  return names;
}

Status ApplyLoadFlags(const Args& args, const std::string& default_precision, LoadOptions* o) {
  const std::string p = args.Get("precision").value_or(default_precision);
  if (p == "f32") {
    o->precision = kernels::Precision::kF32;
  } else if (p == "bf16") {
    o->precision = kernels::Precision::kBF16;
  } else if (p == "int8") {
    o->precision = kernels::Precision::kInt8;
  } else {
    return InvalidArgument("--precision must be f32, bf16 or int8, not '" + p + "'");
  }
  VLS_ASSIGN_OR_RETURN(long long threads, args.Int("threads", 0, 0, 4096));
  o->threads = static_cast<int>(threads);
  o->artifact = args.Get("artifact").value_or("");
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
