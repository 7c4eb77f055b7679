// vlstack: the command-line front end. The commands are listed in kCommands; each answers
// --help (cli/args.h).
#include <cstdio>
#include <exception>
#include <new>
#include <string_view>

#include "cli/commands.h"
#include "cli/text_commands.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"serve", "OpenAI-compatible HTTP server with a chat page", vls::cli::RunServe},
    {"run", "chat with a model: prompt in, streamed reply out", vls::cli::RunRun},
    {"forward", "one prefill (+ decode) of the tensors in a safetensors file",
     vls::cli::RunForward},
    {"vision", "images through the vision tower: patches, merged rows, DeepStack features",
     vls::cli::RunVision},
    {"batch", "JSONL requests through the continuous-batch engine", vls::cli::RunBatch},
    {"bench", "throughput, latency and serving benchmarks of a model", vls::cli::RunBench},
    {"compile", "prepare a model's weights once into an artifact file", vls::cli::RunCompile},
    {"inspect", "a model's config, entries, manifests and artifact identity", vls::cli::RunInspect},
    {"make-test-model", "write a random checkpoint in the Hugging Face layout",
     vls::cli::RunMakeTestModel},
    {"tokenize", "JSON lines of text -> token ids", vls::cli::RunTokenize},
    {"detokenize", "JSON lines of token ids -> text", vls::cli::RunDetokenize},
    {"chat-template", "JSON lines of chat messages -> rendered prompts", vls::cli::RunChatTemplate},
};

void Usage(std::FILE* out) {
  std::fprintf(out, "usage: vlstack <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-16s %s\n", c.name, c.summary);
  std::fprintf(out,
               "\n`vlstack <command> --help` (or `vlstack help <command>`) lists a command's\n"
               "options. Exit code: 0 on success, 2 for invalid input (a missing or unreadable\n"
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
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "vlstack: no command given\n");
    Usage(stderr);
    return 2;
  }
  const std::string_view cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    if (argc == 2) {
      Usage(stdout);
      return 0;
    }
    // `vlstack help <command>`: that command's --help.
    const Command* c = Find(argv[2]);
    if (c != nullptr && argc == 3) {
      char help[] = "--help";
      char* args[] = {help, nullptr};
      return RunGuarded(*c, 1, args);
    }
    if (c == nullptr) {
      std::fprintf(stderr, "vlstack help: unknown command '%s'\n", argv[2]);
    } else {
      std::fprintf(stderr, "vlstack help: give one command\n");
    }
    Usage(stderr);
    return 2;
  }
  if (const Command* c = Find(cmd)) return RunGuarded(*c, argc - 2, argv + 2);
  std::fprintf(stderr, "vlstack: unknown command '%s'\n", argv[1]);
  Usage(stderr);
  return 2;
}
