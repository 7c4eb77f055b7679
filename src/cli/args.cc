#include "cli/args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include "tokenizer/utf8.h"

namespace vls::cli {

StatusOr<Args> Args::Parse(int argc, char** argv, const std::set<std::string>& value_flags,
                           const std::set<std::string>& bool_flags) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h") arg = "--help";
    if (arg.rfind("--", 0) != 0) {
      // `-model x`: a flag given with one dash.
      const std::string bare = arg.substr(arg.rfind('-', 0) == 0 ? 1 : 0);
      const std::string flag = bare.substr(0, bare.find('='));
      if (arg[0] == '-' && (value_flags.count(flag) > 0 || bool_flags.count(flag) > 0)) {
        return InvalidArgument("unexpected argument '" + arg + "'; did you mean --" + bare + "?");
      }
      return InvalidArgument("unexpected argument '" + arg + "'");
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (bool_flags.count(name)) {
      if (value) return InvalidArgument("--" + name + " takes no value");
      a.values_[name] = "1";
    } else if (value_flags.count(name)) {
      if (!value) {
        if (i + 1 >= argc) return InvalidArgument("--" + name + " needs a value");
        value = argv[++i];
      }
      a.values_[name] = *value;
      a.all_[name].push_back(*value);
    } else {
      std::vector<std::string> known(value_flags.begin(), value_flags.end());
      known.insert(known.end(), bool_flags.begin(), bool_flags.end());
      const std::string near = NearestName(name, known);
      return InvalidArgument("unknown option --" + name +
                             (near.empty() ? "" : "; did you mean --" + near + "?"));
    }
  }
  return a;
}

std::optional<std::string> Args::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  auto it = all_.find(name);
  if (it == all_.end()) return {};
  return it->second;
}

StatusOr<std::string> Args::Require(const std::string& name) const {
  auto v = Get(name);
  if (!v) return InvalidArgument("missing required option --" + name);
  return *v;
}

StatusOr<long long> Args::Int(const std::string& name, long long def, long long lo,
                              long long hi) const {
  auto v = Get(name);
  if (!v) return def;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE) {
    return InvalidArgument("--" + name + ": '" + *v + "' is not an integer");
  }
  if (x < lo || x > hi) {
    return InvalidArgument("--" + name + ": " + *v + " is outside [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  }
  return x;
}

StatusOr<double> Args::Double(const std::string& name, double def) const {
  auto v = Get(name);
  if (!v) return def;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || !std::isfinite(x)) {
    return InvalidArgument("--" + name + ": '" + *v + "' is not a finite number");
  }
  return x;
}

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps.
size_t EditDistance(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  const size_t m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));  // [n + 1, m + 1]
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

}  // namespace

std::string NearestName(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.empty() || word.size() > 64) return "";
  std::string best;
  size_t best_distance = SIZE_MAX;
  std::vector<std::string> prefixed;
  for (const std::string& c : candidates) {
    if (c.rfind(word, 0) == 0) prefixed.push_back(c);
    const size_t limit = std::max<size_t>(1, std::max(word.size(), c.size()) / 3);
    const size_t d = EditDistance(word, c);
    if (d <= limit && d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  if (best.empty() && prefixed.size() == 1) return prefixed[0];
  return best;
}

int ExitCode(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return 0;
    // What the user gave is wrong, missing or unsupported: theirs to fix. kIoError is a file the
    // system refuses to open, read or write (a path without permission, a folder given as a
    // file); kFailedPrecondition an input that does not fit the model (an artifact compiled
    // from another checkpoint).
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kDataLoss:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kIoError: return 2;
    case StatusCode::kInternal:
    case StatusCode::kResourceExhausted:
    case StatusCode::kCancelled: return 1;
  }
  return 1;
}

int Fail(const char* command, const Status& status) {
  // The message may quote input: valid UTF-8 on the terminal and in logs.
  try {
    std::fprintf(stderr, "vlstack %s: %s\n", command, tok::SanitizeUtf8(status.ToString()).c_str());
  } catch (...) {  // out of memory building the text: the bare message
    std::fprintf(stderr, "vlstack %s: %s\n", command, status.message().c_str());
  }
  return ExitCode(status);
}

std::optional<Args> ParseCommandLine(const CommandSpec& spec, int argc, char** argv,
                                     int* exit_code) {
  std::set<std::string> bool_flags = spec.bool_flags;
  bool_flags.insert("help");
  StatusOr<Args> args = Args::Parse(argc, argv, spec.value_flags, bool_flags);
  if (!args.ok()) {
    *exit_code = Fail(spec.name.c_str(), args.status());
    std::fprintf(stderr, "(vlstack %s --help lists the options)\n", spec.name.c_str());
    return std::nullopt;
  }
  if (args->Has("help")) {
    std::fputs(spec.usage.c_str(), stdout);
    if (!spec.example.empty()) {
      std::fputs("\nexample:\n", stdout);
      std::fputs(spec.example.c_str(), stdout);
    }
    std::fputs("\n", stdout);
    std::fputs(kExitCodeHelp, stdout);
    *exit_code = 0;
    return std::nullopt;
  }
  return std::move(*args);
}

int RunCommand(const CommandSpec& spec, int argc, char** argv,
               const std::function<Status(const Args&)>& body) {
  int rc = 0;
  std::optional<Args> args = ParseCommandLine(spec, argc, argv, &rc);
  if (!args) return rc;
  Status s;
  try {
    s = body(*args);
  } catch (const std::bad_alloc&) {
    s = ResourceExhausted("out of memory");
  } catch (const std::exception& e) {
    s = Internal(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    s = Internal("unexpected non-standard exception");
  }
  return s.ok() ? 0 : Fail(spec.name.c_str(), s);
}

}  // namespace vls::cli
