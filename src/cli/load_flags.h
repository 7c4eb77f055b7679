// Flags shared by the commands that load a model: --model, --precision, --threads, --artifact,
// --kv-cache, their --help lines, and the load-progress printer.
#ifndef VLSTACK_CLI_LOAD_FLAGS_H_
#define VLSTACK_CLI_LOAD_FLAGS_H_

#include <set>
#include <string>

#include "cli/args.h"
#include "runtime/loaded_model.h"

namespace vls::cli {

// The value flags ApplyLoadFlags reads (add them to a command's Args::Parse set).
const std::set<std::string>& LoadFlagNames();
// The boolean flags ApplyLoadFlags reads: check-weights and no-check-weights (add them to a
// command's bool_flags, and CheckWeightsFlagsHelp() to its --help, to offer them).
const std::set<std::string>& LoadBoolFlagNames();
// The --help lines of --check-weights and --no-check-weights.
std::string CheckWeightsFlagsHelp();

// Where --model points: the model folder, and the name it goes by (the folder's name, or the
// repository id it was found under).
struct ModelLocation {
  std::string dir;
  std::string name;
};

// The required --model: a folder, or, when no such path exists, a Hugging Face repository id
// ("Org/Name[@revision]", io/hf_cache.h) resolved offline to its snapshot in the local cache.
// Checked before anything else is read, so a mistyped path is reported as such (NotFound or
// InvalidArgument naming --model, the path and, for a repository id, every cache folder looked
// in).
StatusOr<ModelLocation> ModelFlag(const Args& args);
// ModelFlag's folder.
StatusOr<std::string> ModelDirFlag(const Args& args);

// The --help lines of the flags ApplyLoadFlags reads, for a command whose precision defaults to
// `default_precision`; without --artifact's line when the command does not read one.
std::string LoadFlagsHelp(const std::string& default_precision, bool artifact = true);

// --precision f32|bf16|int8 (default `default_precision`), --threads N (0 = all cores),
// --artifact FILE (a `vlstack compile` output), --kv-cache f32|bf16 (default: f32 at f32
// precision, else bf16), and LoadOptions::check_weights: on unless --no-check-weights (a
// command that does not offer the flag always checks). Errors name the flag.
Status ApplyLoadFlags(const Args& args, const std::string& default_precision, LoadOptions* o);

// --kv-memory SIZE into LoadOptions::kv_memory (bytes: a count with K, M, G or TiB, binary
// units) or kv_tokens (a count with t, tok or tokens). InvalidArgument naming the flag otherwise.
Status ParseKvMemory(const std::string& text, LoadOptions* o);

// Prints "[<command>] preparing weights: done/total" to stderr: updated in place on a
// terminal; otherwise one line at each quarter, so logs stay short.
PrepareProgress StderrProgress(const std::string& command);

}  // namespace vls::cli

#endif  // VLSTACK_CLI_LOAD_FLAGS_H_
