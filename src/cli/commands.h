// The vlstack subcommands. Each takes the arguments after its name and returns the process exit
// code (ExitCode in cli/args.h: 0 ok, 2 invalid input, 1 other failures); each has a
// CommandSpec (its flags, --help text and example) that Commands() lists beside it.
#ifndef VLSTACK_CLI_COMMANDS_H_
#define VLSTACK_CLI_COMMANDS_H_

#include <vector>

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
int RunEvalKl(int argc, char** argv);  // eval_kl_command.cc

CommandSpec MakeTestModelSpec();
CommandSpec ForwardSpec();
CommandSpec InspectSpec();
CommandSpec BenchSpec();
CommandSpec BatchSpec();
CommandSpec CompileSpec();
CommandSpec RunSpec();
CommandSpec VisionSpec();
CommandSpec ServeSpec();
CommandSpec EvalKlSpec();        // eval_kl_command.cc
CommandSpec TokenizeSpec();      // text_commands.cc
CommandSpec DetokenizeSpec();    // text_commands.cc
CommandSpec ChatTemplateSpec();  // text_commands.cc

// One row of `vlstack --help`.
struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
  CommandSpec (*spec)();
};

// Every subcommand, in the order `vlstack --help` lists them (command_table.cc).
const std::vector<Command>& Commands();

// What `vlstack --version` prints: the version, the C ABI version, the kernel variant this
// machine selected (and the others it supports) and whether oneDNN runs BF16 prefill.
std::string VersionText();

}  // namespace vls::cli

#endif  // VLSTACK_CLI_COMMANDS_H_
