#include "cli/text_commands.h"

#include <cstdio>

namespace vls::cli {

// The tokenizer layer is not built yet (issue 5); the commands say so instead of guessing.
int RunTokenize(int, char**) {
  std::fprintf(stderr, "vlstack tokenize: the tokenizer is not available in this build\n");
  return 2;
}
int RunDetokenize(int, char**) {
  std::fprintf(stderr, "vlstack detokenize: the tokenizer is not available in this build\n");
  return 2;
}
int RunChatTemplate(int, char**) {
  std::fprintf(stderr, "vlstack chat-template: chat templates are not available in this build\n");
  return 2;
}

}  // namespace vls::cli
