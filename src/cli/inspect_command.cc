// `vlstack inspect`: a loaded model's entries, their manifests, its vision tower and the
// artifact identity.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load_flags.h"
#include "runtime/loaded_model.h"

namespace vls::cli {
CommandSpec InspectSpec() {
  const LoadOptions defaults;
  CommandSpec spec;
  spec.name = "inspect";
  spec.usage =
      "usage: vlstack inspect --model DIR [options]\n"
      "\n"
      "Loads a model and prints its canonical config, bounds, vision tower (config and prepared\n"
      "bytes) when it has one, entries with their manifests and the load identity an artifact\n"
      "must match.\n"
      "\n"
      "  --model DIR          model folder: config.json and the safetensors weights (required)\n"
      "                       or Org/Name: a Hugging Face repository id in the local cache\n"
      "  --capacity C         context capacity in tokens (default " +
      std::to_string(defaults.capacity) +
      ")\n"
      "  --slots B            batch slots (default " +
      std::to_string(defaults.slots) +
      ")\n"
      "  --nmax N             DeepStack Nmax, 0 for the config's (else the capacity) (default "
      "0)\n" +
      LoadFlagsHelp("f32") +
      "  --identity-text      print only the text the identity hashes (default off)\n"
      "  --help               this text\n";
  spec.value_flags = {"model", "capacity", "slots", "nmax"};
  spec.value_flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  spec.bool_flags = {"identity-text"};
  spec.example = "  vlstack inspect --model Qwen/Qwen3-VL-2B-Instruct\n";
  return spec;
}

namespace {

Status Inspect(const Args& args) {
  VLS_ASSIGN_OR_RETURN(std::string dir, ModelDirFlag(args));
  LoadOptions o;
  VLS_RETURN_IF_ERROR(ApplyLoadFlags(args, "f32", &o));
  o.progress = StderrProgress("inspect");
  VLS_ASSIGN_OR_RETURN(long long cap, args.Int("capacity", o.capacity, 1, 1 << 24));
  VLS_ASSIGN_OR_RETURN(long long slots, args.Int("slots", o.slots, 1, 4096));
  VLS_ASSIGN_OR_RETURN(long long nmax, args.Int("nmax", 0, 0, 1 << 24));
  o.capacity = static_cast<int>(cap);
  o.slots = static_cast<int>(slots);
  o.nmax = static_cast<int>(nmax);
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> lm, LoadedModel::Load(dir, o));
  const LoadedModel& m = *lm;
  if (args.Has("identity-text")) {
    std::fputs(m.IdentityText().c_str(), stdout);
    return Status::Ok();
  }
  std::printf("model %s\n%s", dir.c_str(), CanonicalConfigText(m.config()).c_str());
  std::printf("bounds capacity=%d slots=%d nmax=%d\n", m.bounds().capacity, m.bounds().slots,
              m.bounds().nmax);
  if (const std::optional<VisionConfig>& v = m.vision_config()) {
    uint64_t bytes = 0;
    for (const PreparedEntry& e : m.vision_layout()) bytes += e.bytes;
    std::string indexes;
    for (int j : v->deepstack_visual_indexes)
      indexes += (indexes.empty() ? "" : ",") + std::to_string(j);
    std::printf(
        "vision tower depth=%d hidden=%d heads=%d intermediate=%d patch=%d temporal_patch=%d "
        "merge=%d pos_embeddings=%d out_hidden=%d deepstack_visual_indexes=%s\n",
        v->depth, v->hidden, v->heads, v->intermediate, v->patch_size, v->temporal_patch_size,
        v->spatial_merge_size, v->num_position_embeddings, v->out_hidden,
        indexes.empty() ? "none" : indexes.c_str());
    std::printf("vision prepared %llu bytes (%s) in %zu tensors\n",
                static_cast<unsigned long long>(bytes),
                kernels::PrecisionName(m.model().context().precision()), m.vision_layout().size());
  } else {
    std::printf("vision tower none\n");
  }
  // The decoder's prepared bytes; for a mixture-of-experts model the experts' share and what
  // one token reads (its k experts of E per sparse layer, and every other matrix).
  const PreparedBytes pb = CountPreparedBytes(m.config(), m.model().prepared().entries());
  std::printf("decoder prepared %llu bytes (%s)", static_cast<unsigned long long>(pb.total),
              kernels::PrecisionName(m.model().context().precision()));
  if (m.config().moe) {
    std::printf(", experts %llu bytes, active per token %llu bytes",
                static_cast<unsigned long long>(pb.experts),
                static_cast<unsigned long long>(pb.active_per_token));
  }
  std::printf("\n");
  std::printf("entries %zu\n", m.entries().entries().size());
  for (const Entry& e : m.entries().entries()) std::fputs(e.Manifest().c_str(), stdout);
  std::printf("identity sha256:%s\n", m.Identity().c_str());
  return Status::Ok();
}

}  // namespace

int RunInspect(int argc, char** argv) { return RunCommand(InspectSpec(), argc, argv, Inspect); }

}  // namespace vls::cli
