#include "cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace vls::cli {

StatusOr<Args> Args::Parse(int argc, char** argv, const std::set<std::string>& value_flags,
                           const std::set<std::string>& bool_flags) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) return InvalidArgument("unexpected argument '" + arg + "'");
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
      return InvalidArgument("unknown option --" + name);
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

}  // namespace vls::cli
