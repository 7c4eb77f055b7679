// The command-line plumbing every vlstack subcommand shares: a small flag parser (`--name
// value`, `--name=value`, `--flag`), the `--help` text and the exit code of a Status.
//
// A subcommand is a CommandSpec (its name, its usage text and its flags) and a body that takes
// the parsed Args and returns a Status:
//
//   int RunInspect(int argc, char** argv) {
//     return RunCommand(InspectSpec(), argc, argv, Inspect);  // Status Inspect(const Args&)
//   }
//
// RunCommand answers --help, refuses unknown flags and turns the body's Status into the exit
// code, so every command has the same behaviour. A body that needs its own exit code uses
// ParseCommandLine and Fail directly.
#ifndef VLSTACK_CLI_ARGS_H_
#define VLSTACK_CLI_ARGS_H_

#include <functional>
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

// The exit code a command ends with: 0 when `status` is ok; 2 when the input is at fault (a bad
// flag or value, a missing, unreadable or corrupt file, an input asking for an unsupported
// feature, a request refused by a rule, an artifact that does not match the model); 1 for other
// failures (out of memory, an internal error).
int ExitCode(const Status& status);

// Prints "vlstack <command>: <status>" to stderr and returns ExitCode(status).
int Fail(const char* command, const Status& status);

// The sentence every --help text ends with.
inline constexpr const char* kExitCodeHelp =
    "Exit code: 0 on success, 2 for invalid input (a missing or unreadable model folder or\n"
    "file, a bad flag value, a refused request), 1 for other failures.\n";

// One subcommand's command line.
struct CommandSpec {
  std::string name;  // "forward": the word after `vlstack`
  // What --help prints (followed by kExitCodeHelp): a "usage: vlstack <name> ..." line, what the
  // command does, then every flag with its default and what it does, --help included.
  std::string usage;
  std::set<std::string> value_flags;
  std::set<std::string> bool_flags;  // "help" is added
  // What --help prints after the usage under "example:": one or more complete command lines
  // (each line indented two spaces), ready to paste.
  std::string example;
};

// The candidate nearest to `word` when it is close enough to be a likely misspelling (an edit
// distance, counting an adjacent swap as one edit, of at most a third of the longer word and at
// least 1, or `word` a prefix of exactly one candidate); empty otherwise.
std::string NearestName(const std::string& word, const std::vector<std::string>& candidates);

// Parses the command line of `spec`. Returns the Args when the command should run; otherwise
// the command is over with *exit_code: 0 after --help (or -h) printed the usage and example to
// stdout, 2 after a flag error (printed to stderr with the nearest known flag when one is close,
// and a pointer to --help).
std::optional<Args> ParseCommandLine(const CommandSpec& spec, int argc, char** argv,
                                     int* exit_code);

// ParseCommandLine, then `body`; a failed body's Status goes through Fail.
int RunCommand(const CommandSpec& spec, int argc, char** argv,
               const std::function<Status(const Args&)>& body);

}  // namespace vls::cli

#endif  // VLSTACK_CLI_ARGS_H_
