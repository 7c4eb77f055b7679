// A small flag parser for the vlstack subcommands: `--name value`, `--name=value`, `--flag`.
#ifndef VLSTACK_CLI_ARGS_H_
#define VLSTACK_CLI_ARGS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace vls::cli {

class Args {
 public:
  // `value_flags` take a value; `bool_flags` do not. Unknown flags and stray words are errors.
  static StatusOr<Args> Parse(int argc, char** argv, const std::set<std::string>& value_flags,
                              const std::set<std::string>& bool_flags);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // The value of --name (the last one when it is given more than once).
  std::optional<std::string> Get(const std::string& name) const;
  // Every value of a repeatable flag (`--stop a --stop b`), in order; empty when absent.
  std::vector<std::string> GetAll(const std::string& name) const;
  StatusOr<std::string> Require(const std::string& name) const;
  // Integer value of --name, or `def` when absent; rejects junk and values outside [lo, hi].
  StatusOr<long long> Int(const std::string& name, long long def, long long lo, long long hi) const;
  StatusOr<double> Double(const std::string& name, double def) const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_;  // value flags only
};

}  // namespace vls::cli

#endif  // VLSTACK_CLI_ARGS_H_
