// `vlstack inspect`: a loaded model's entries, their manifests and the artifact identity.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load_flags.h"
#include "runtime/loaded_model.h"

namespace vls::cli {

int RunInspect(int argc, char** argv) {
  std::set<std::string> flags = {"model", "capacity", "slots", "nmax"};
  flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  auto args = Args::Parse(argc, argv, flags, {"identity-text"});
  if (!args.ok()) return Fail("inspect", args.status());
  auto dir = args->Require("model");
  if (!dir.ok()) return Fail("inspect", dir.status());
  LoadOptions o;
  if (Status s = ApplyLoadFlags(*args, "f32", &o); !s.ok()) return Fail("inspect", s);
  o.progress = StderrProgress("inspect");
  auto cap = args->Int("capacity", o.capacity, 1, 1 << 24);
  auto slots = args->Int("slots", o.slots, 1, 4096);
  auto nmax = args->Int("nmax", 0, 0, 1 << 24);
  for (const Status& s : {cap.status(), slots.status(), nmax.status()}) {
    if (!s.ok()) return Fail("inspect", s);
  }
  o.capacity = static_cast<int>(*cap);
  o.slots = static_cast<int>(*slots);
  o.nmax = static_cast<int>(*nmax);
  auto lm = LoadedModel::Load(*dir, o);
  if (!lm.ok()) return Fail("inspect", lm.status());
  const LoadedModel& m = **lm;
  if (args->Has("identity-text")) {
    std::fputs(m.IdentityText().c_str(), stdout);
    return 0;
  }
  std::printf("model %s\n%s", dir->c_str(), CanonicalConfigText(m.config()).c_str());
  std::printf("bounds capacity=%d slots=%d nmax=%d\n", m.bounds().capacity, m.bounds().slots,
              m.bounds().nmax);
  std::printf("entries %zu\n", m.entries().entries().size());
  for (const Entry& e : m.entries().entries()) std::fputs(e.Manifest().c_str(), stdout);
  std::printf("identity sha256:%s\n", m.Identity().c_str());
  return 0;
}

}  // namespace vls::cli
