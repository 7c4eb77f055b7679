// The model-facing vlstack subcommands. Each takes the arguments after its name and returns
// the process exit code (0 ok, 1 runtime failure, 2 bad usage).
#ifndef VLSTACK_CLI_COMMANDS_H_
#define VLSTACK_CLI_COMMANDS_H_

#include "base/status.h"

namespace vls::cli {

int RunMakeTestModel(int argc, char** argv);
int RunForward(int argc, char** argv);
int RunInspect(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunBatch(int argc, char** argv);
int RunCompile(int argc, char** argv);
int RunRun(int argc, char** argv);  // run_command.cc

// Prints "vlstack <command>: <status>" to stderr and returns the exit code for it.
int Fail(const char* command, const Status& status);

}  // namespace vls::cli

#endif  // VLSTACK_CLI_COMMANDS_H_
