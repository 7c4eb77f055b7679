// `vlstack tokenize`, `detokenize` and `chat-template` (docs/contracts.md §6 text tools).
#ifndef VLSTACK_CLI_TEXT_COMMANDS_H_
#define VLSTACK_CLI_TEXT_COMMANDS_H_

namespace vls::cli {

// Each takes the arguments after the subcommand name and returns the process exit code.
int RunTokenize(int argc, char** argv);
int RunDetokenize(int argc, char** argv);
int RunChatTemplate(int argc, char** argv);

}  // namespace vls::cli

#endif  // VLSTACK_CLI_TEXT_COMMANDS_H_
