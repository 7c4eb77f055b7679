// `vlstack compile`: prepares a model's weights (text decoder and vision tower) once and
// writes them as an artifact that
// `--artifact FILE` maps back (model/prepared_artifact.h). The artifact carries the load's
// identity (docs/contracts.md §1), so the bounds given here must match the bounds it is loaded
// with.
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load_flags.h"
#include "runtime/loaded_model.h"

namespace vls::cli {

CommandSpec CompileSpec() {
  const LoadOptions defaults;
  CommandSpec spec;
  spec.name = "compile";
  spec.usage =
      "usage: vlstack compile --model DIR --out FILE [options]\n"
      "\n"
      "Prepares the model's weights once (the layout --precision runs from), the vision\n"
      "tower's too when the model has one, and writes them to FILE behind a header holding the\n"
      "load identity; `--artifact FILE` on the other commands maps it back when their\n"
      "precision, KV cache type and bounds are the same.\n"
      "\n"
      "  --model DIR          model folder: config.json and the safetensors weights (required)\n"
      "                       or Org/Name: a Hugging Face repository id in the local cache\n"
      "  --out FILE           the artifact to write (required)\n"
      "  --capacity C         context capacity in tokens the artifact is for (default " +
      std::to_string(defaults.capacity) +
      ")\n"
      "  --slots B            batch slots the artifact is for (default " +
      std::to_string(defaults.slots) +
      ")\n"
      "  --nmax N             DeepStack Nmax, 0 for the config's (else the capacity) (default "
      "0)\n" +
      LoadFlagsHelp("bf16", /*artifact=*/false) + "  --help               this text\n";
  spec.value_flags = {"model", "out", "capacity", "slots", "nmax"};
  spec.value_flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  spec.value_flags.erase("artifact-memory");  // how a load reads an artifact: not an output's
  spec.example =
      "  vlstack compile --model ./model --precision bf16 --out model-bf16.vlsa\n"
      "  vlstack serve --model ./model --precision bf16 --artifact model-bf16.vlsa\n";
  return spec;
}

namespace {

Status Compile(const Args& args) {
  VLS_RETURN_IF_ERROR(args.Require("model").status());
  VLS_ASSIGN_OR_RETURN(std::string out, args.Require("out"));
  VLS_ASSIGN_OR_RETURN(std::string dir, ModelDirFlag(args));
  if (args.Has("artifact")) return InvalidArgument("--artifact is an input of other commands");
  LoadOptions o;
  VLS_RETURN_IF_ERROR(ApplyLoadFlags(args, "bf16", &o));
  VLS_ASSIGN_OR_RETURN(long long cap, args.Int("capacity", o.capacity, 1, kMaxCapacity));
  VLS_ASSIGN_OR_RETURN(long long slots, args.Int("slots", o.slots, 1, kMaxSlots));
  VLS_ASSIGN_OR_RETURN(long long nmax, args.Int("nmax", 0, 0, kMaxCapacity));
  o.capacity = static_cast<int>(cap);
  o.slots = static_cast<int>(slots);
  o.nmax = static_cast<int>(nmax);
  o.progress = StderrProgress("compile");
  const auto t0 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "[compile] loading %s (%s)\n", dir.c_str(),
               kernels::PrecisionName(o.precision));
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> lm, LoadedModel::Load(dir, o));
  std::fprintf(stderr, "[compile] hashing the checkpoint for the identity\n");
  VLS_RETURN_IF_ERROR(lm->WriteArtifact(out, [](int done, int total) {
    if (done == total || done % 16 == 0) {
      std::fprintf(stderr, "[compile] writing: %d/%d chunks\n", done, total);
    }
  }));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %.1f MB of %s weights, capacity %d slots %d nmax %d, %.1f s\n",
              out.c_str(), static_cast<double>(lm->model().prepared().size()) / 1e6,
              kernels::PrecisionName(o.precision), lm->bounds().capacity, lm->bounds().slots,
              lm->bounds().nmax, s);
  if (lm->vision_config()) {
    uint64_t bytes = 0;
    for (const PreparedEntry& e : lm->vision_layout()) bytes += e.bytes;
    std::printf("vision tower: %.1f MB of %s weights in %zu tensors\n",
                static_cast<double>(bytes) / 1e6, kernels::PrecisionName(o.precision),
                lm->vision_layout().size());
  }
  std::printf("identity sha256:%s\n", lm->Identity().c_str());
  return Status::Ok();
}

}  // namespace

int RunCompile(int argc, char** argv) { return RunCommand(CompileSpec(), argc, argv, Compile); }

}  // namespace vls::cli
