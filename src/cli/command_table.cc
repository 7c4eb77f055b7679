// The table of vlstack's subcommands and the --version text.
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/text_commands.h"
#include "runtime/kernel_info.h"
#include "runtime/loaded_model.h"

#ifndef VLS_VERSION_STRING
#error "VLS_VERSION_STRING is set by src/cli/CMakeLists.txt from the project version"
#endif

namespace vls::cli {

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"serve", "OpenAI-compatible HTTP server with a chat page", RunServe, ServeSpec},
      {"run", "chat with a model: prompt in, streamed reply out", RunRun, RunSpec},
      {"forward", "one prefill (+ decode) of the tensors in a safetensors file", RunForward,
       ForwardSpec},
      {"vision", "images through the vision tower: patches, merged rows, DeepStack features",
       RunVision, VisionSpec},
      {"batch", "JSONL requests through the continuous-batch engine", RunBatch, BatchSpec},
      {"bench", "throughput, latency and serving benchmarks of a model", RunBench, BenchSpec},
      {"compile", "prepare a model's weights once into an artifact file", RunCompile, CompileSpec},
      {"eval-kl", "KL divergence of a precision's next-token distribution from f32", RunEvalKl,
       EvalKlSpec},
      {"inspect", "a model's config, entries, manifests and artifact identity", RunInspect,
       InspectSpec},
      {"make-test-model", "write a random checkpoint in the Hugging Face layout", RunMakeTestModel,
       MakeTestModelSpec},
      {"tokenize", "JSON lines of text -> token ids", RunTokenize, TokenizeSpec},
      {"detokenize", "JSON lines of token ids -> text", RunDetokenize, DetokenizeSpec},
      {"chat-template", "JSON lines of chat messages -> rendered prompts", RunChatTemplate,
       ChatTemplateSpec},
  };
  return commands;
}

std::string VersionText() {
  std::string text = "vlstack " VLS_VERSION_STRING "\n";
  text += "C ABI version " + std::to_string(kAbiVersion) + " (libvlstack.so." +
          std::to_string(kAbiVersion) + ", include/vlstack/vlstack.h)\n";
  const KernelInfo info = DescribeKernels();
  text += "kernels: " + info.chosen + " (this CPU supports:";
  for (const std::string& name : info.supported) text += " " + name;
  text += "; VLS_KERNELS chooses another)\n";
  text += std::string("oneDNN BF16 prefill: ") +
          (info.onednn_bf16 ? "yes" : "no (not built in, or no AVX512_BF16)") + "\n";
  text += std::string("AMX tiles for int8 prefill: ") +
          (info.amx_tiles ? "yes" : "no (no AMX-INT8, not granted by the OS, or VLS_AMX=0)") + "\n";
  if (!info.gemm_probe.empty()) text += info.gemm_probe + "\n";
  text += "built with " +
#if defined(__clang__)
          std::string("clang ") + __clang_version__ +
#elif defined(__GNUC__)
          std::string("g++ ") + __VERSION__ +
#else
          std::string("an unknown compiler") +
#endif
          "\n";
  return text;
}

}  // namespace vls::cli
