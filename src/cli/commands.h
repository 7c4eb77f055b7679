// The model-facing vlstack subcommands. Each takes the arguments after its name and returns
// the process exit code (ExitCode in cli/args.h: 0 ok, 2 invalid input, 1 other failures).
#ifndef VLSTACK_CLI_COMMANDS_H_
#define VLSTACK_CLI_COMMANDS_H_

#include "base/status.h"
#include "cli/args.h"  // Fail, ExitCode, RunCommand

namespace vls::cli {

int RunMakeTestModel(int argc, char** argv);
int RunForward(int argc, char** argv);
int RunInspect(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunBatch(int argc, char** argv);
int RunCompile(int argc, char** argv);
int RunRun(int argc, char** argv);     // run_command.cc
int RunVision(int argc, char** argv);  // vision_command.cc
int RunServe(int argc, char** argv);   // serve_command.cc

}  // namespace vls::cli

#endif  // VLSTACK_CLI_COMMANDS_H_
