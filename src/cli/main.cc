// vlstack: the command-line front end. The commands are listed in cli/command_table.cc; each
// answers --help (cli/args.h).
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"

namespace {

using vls::cli::Command;
using vls::cli::Commands;

void Usage(std::FILE* out) {
  std::fprintf(out, "usage: vlstack <command> [options]\n\ncommands:\n");
  for (const Command& c : Commands()) std::fprintf(out, "  %-16s %s\n", c.name, c.summary);
  std::fprintf(
      out,
      "\n`vlstack <command> --help` (or `vlstack help <command>`) lists a command's\n"
      "options with their defaults and an example; `vlstack --version` prints the\n"
      "version, the C ABI version and the kernels this machine selected.\n"
      "--model takes a model folder or a Hugging Face repository id (Org/Name) found\n"
      "in the local Hugging Face cache.\n"
      "\n"
      "example:\n"
      "  vlstack serve --model Qwen/Qwen3-VL-2B-Instruct --port 8080\n"
      "  vlstack run --model ./Qwen3-VL-2B-Instruct --prompt 'Describe this' --image a.jpg\n"
      "\n"
      "Exit code: 0 on success, 2 for invalid input (a missing or unreadable\n"
      "model folder or file, a bad flag value, a refused request), 1 for other "
      "failures.\n");
}

// Runs a command; an exception that escapes it (each command's body already turns its own into
// a status: cli/args.h RunCommand) is an error message and exit code 1, never std::terminate.
int RunGuarded(const Command& c, int argc, char** argv) {
  try {
    return c.run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "vlstack %s: RESOURCE_EXHAUSTED: out of memory\n", c.name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vlstack %s: INTERNAL: unexpected exception: %s\n", c.name, e.what());
  } catch (...) {
    std::fprintf(stderr, "vlstack %s: INTERNAL: unexpected non-standard exception\n", c.name);
  }
  return 1;
}

const Command* Find(std::string_view name) {
  for (const Command& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// "vlstack: unknown command 'X'", the nearest command when one is close, and the usage.
int UnknownCommand(const char* prefix, const std::string& name) {
  std::vector<std::string> names;
  for (const Command& c : Commands()) names.emplace_back(c.name);
  const std::string near = vls::cli::NearestName(name, names);
  std::fprintf(stderr, "%s: unknown command '%s'", prefix, name.c_str());
  if (!near.empty()) std::fprintf(stderr, "; did you mean '%s'?", near.c_str());
  std::fprintf(stderr, "\n\n");
  Usage(stderr);
  return 2;
}

int PrintVersion() {
  try {
    std::fputs(vls::cli::VersionText().c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vlstack --version: INTERNAL: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "vlstack: no command given\n");
    Usage(stderr);
    return 2;
  }
  const std::string_view cmd = argv[1];
  if (cmd == "--version" || cmd == "-V" || cmd == "version") {
    if (argc == 2) return PrintVersion();
    std::fprintf(stderr, "vlstack %s: takes no arguments\n", argv[1]);
    return 2;
  }
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    if (argc == 2) {
      Usage(stdout);
      return 0;
    }
    // `vlstack help <command>`: that command's --help.
    const Command* c = Find(argv[2]);
    if (c == nullptr) return UnknownCommand("vlstack help", argv[2]);
    if (argc == 3) {
      char help[] = "--help";
      char* args[] = {help, nullptr};
      return RunGuarded(*c, 1, args);
    }
    std::fprintf(stderr, "vlstack help: give one command\n");
    Usage(stderr);
    return 2;
  }
  if (const Command* c = Find(cmd)) return RunGuarded(*c, argc - 2, argv + 2);
  return UnknownCommand("vlstack", argv[1]);
}
