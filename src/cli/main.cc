// vlstack: the command-line front end. Subcommands are listed in Usage().
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli/commands.h"
#include "cli/text_commands.h"

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: vlstack <command> [options]\n"
               "commands:\n"
               "  run             chat with a model: prompt in, streamed reply out\n"
               "  forward         run a prefill (+ decode) on tensors from a safetensors file\n"
               "  batch           run JSONL requests through the continuous-batch engine\n"
               "  bench           prompt and generation throughput of a model\n"
               "  compile         prepare a model's weights once into an artifact file\n"
               "  inspect         print a model's entries, manifests and artifact identity\n"
               "  make-test-model write a random checkpoint in the Hugging Face layout\n"
               "  tokenize        JSON lines of text -> token ids\n"
               "  detokenize      JSON lines of token ids -> text\n"
               "  chat-template   render a chat template\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    Usage();
    return 2;
  }
  std::string_view cmd = argv[1];
  if (cmd == "run") return vls::cli::RunRun(argc - 2, argv + 2);
  if (cmd == "forward") return vls::cli::RunForward(argc - 2, argv + 2);
  if (cmd == "bench") return vls::cli::RunBench(argc - 2, argv + 2);
  if (cmd == "compile") return vls::cli::RunCompile(argc - 2, argv + 2);
  if (cmd == "inspect") return vls::cli::RunInspect(argc - 2, argv + 2);
  if (cmd == "batch") return vls::cli::RunBatch(argc - 2, argv + 2);
  if (cmd == "make-test-model") return vls::cli::RunMakeTestModel(argc - 2, argv + 2);
  if (cmd == "tokenize") return vls::cli::RunTokenize(argc - 2, argv + 2);
  if (cmd == "detokenize") return vls::cli::RunDetokenize(argc - 2, argv + 2);
  if (cmd == "chat-template") return vls::cli::RunChatTemplate(argc - 2, argv + 2);
  std::fprintf(stderr, "vlstack: unknown command '%s'\n", argv[1]);
  Usage();
  return 2;
}
