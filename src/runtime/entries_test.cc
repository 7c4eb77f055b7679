#include "runtime/entries.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "base/file.h"
#include "model/prepared_artifact.h"
#include "model/test_checkpoint.h"
#include "runtime/loaded_model.h"

namespace vls {
namespace {

std::unique_ptr<LoadedModel> Load(const std::string& name, const TestModelSpec& spec,
                                  int capacity = 64, int nmax = 0) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = JoinPath(tmp ? tmp : "/tmp", "vls_entries_test_" + name);
  Status s = WriteTestCheckpoint(dir, spec, false);
  EXPECT_TRUE(s.ok()) << s.ToString();
  LoadOptions o;
  o.capacity = capacity;
  o.nmax = nmax;
  auto lm = LoadedModel::Load(dir, o);
  EXPECT_TRUE(lm.ok()) << lm.status().ToString();
  return lm.ok() ? std::move(*lm) : nullptr;
}

TestModelSpec Base() {
  TestModelSpec s;
  s.deepstack = 0;
  s.vision = false;
  return s;
}

TEST(EntriesTest, DeclaringDeepStackLeavesOtherManifestsByteIdentical) {
  TestModelSpec with = Base();
  with.ds_layers = {0, 2};
  with.ds_nmax = 16;
  auto plain = Load("plain", Base());
  auto ds = Load("ds", with);
  ASSERT_TRUE(plain && ds);
  for (std::string_view name : {kEntryPrefill, kEntryPrefillEmbeddings, kEntryDecode}) {
    ASSERT_NE(plain->entries().Find(name), nullptr);
    EXPECT_EQ(plain->entries().Find(name)->Manifest(), ds->entries().Find(name)->Manifest())
        << name;
  }
  EXPECT_EQ(plain->entries().Find(kEntryPrefillDeepStack), nullptr);
  EXPECT_EQ(plain->entries().Find(kEntryDiagnostics), nullptr);
  const Entry* e = ds->entries().Find(kEntryPrefillDeepStack);
  ASSERT_NE(e, nullptr);
  const std::string m = e->Manifest();
  EXPECT_NE(m.find("deepstack_add.0"), std::string::npos);
  EXPECT_NE(m.find("deepstack_add.1"), std::string::npos);
  EXPECT_EQ(m.find("deepstack_add.2"), std::string::npos);
  EXPECT_NE(m.find("i32[Nv<=Nmax=16]"), std::string::npos) << m;
  EXPECT_EQ(m.find("capture_hidden"), std::string::npos);
  // The diagnostics entry is the production stage list plus captures, nothing else.
  const std::string d = ds->entries().Find(kEntryDiagnostics)->Manifest();
  EXPECT_NE(d.find("capture_hidden.2"), std::string::npos);
  // No prefill entry mentions DeepStack, and no dense [L,S,H] argument exists anywhere.
  EXPECT_EQ(ds->entries().Find(kEntryPrefill)->Manifest().find("deepstack"), std::string::npos);
  EXPECT_EQ(m.find("[L,S,H]"), std::string::npos);
  // The serving step exists in both; it adds each segment's DeepStack only when declared.
  ASSERT_NE(plain->entries().Find(kEntryStep), nullptr);
  EXPECT_EQ(plain->entries().Find(kEntryStep)->Manifest().find("deepstack"), std::string::npos);
  const std::string step = ds->entries().Find(kEntryStep)->Manifest();
  EXPECT_NE(step.find("deepstack_add.1"), std::string::npos) << step;
  EXPECT_NE(step.find("per segment into its rows"), std::string::npos) << step;
}

TEST(EntriesTest, IdentityTracksDeepStackNmaxAndWeights) {
  TestModelSpec a = Base();
  a.ds_layers = {0, 1};
  a.ds_nmax = 16;
  TestModelSpec other_layers = a;
  other_layers.ds_layers = {0, 2};
  TestModelSpec other_nmax = a;
  other_nmax.ds_nmax = 32;
  TestModelSpec other_seed = a;
  other_seed.seed = 9;
  auto m1 = Load("id_a", a);
  auto m1_again = Load("id_a2", a);
  auto m2 = Load("id_layers", other_layers);
  auto m3 = Load("id_nmax", other_nmax);
  auto m4 = Load("id_absent", Base());
  auto m5 = Load("id_seed", other_seed);
  ASSERT_TRUE(m1 && m1_again && m2 && m3 && m4 && m5);
  EXPECT_EQ(m1->Identity().size(), 64u);
  EXPECT_EQ(m1->Identity(), m1_again->Identity());
  EXPECT_NE(m1->Identity(), m2->Identity());
  EXPECT_NE(m1->Identity(), m3->Identity());
  EXPECT_NE(m1->Identity(), m4->Identity());
  EXPECT_NE(m1->Identity(), m5->Identity());  // same config, different weight bytes
  auto cap = Load("id_cap", a, 128);
  ASSERT_TRUE(cap);
  EXPECT_NE(m1->Identity(), cap->Identity());  // static bounds are part of it
}

// A compiled artifact is used only by a load whose identity it carries: same checkpoint,
// precision and bounds. Anything else is refused, never silently used.
TEST(EntriesTest, ArtifactIsRefusedUnlessTheIdentityMatches) {
  auto m = Load("art", Base());
  ASSERT_TRUE(m);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = JoinPath(tmp ? tmp : "/tmp", "vls_entries_test_art");
  const std::string file = JoinPath(tmp ? tmp : "/tmp", "vls_entries_test_art.vlsp");
  ArtifactHeader h;
  h.identity = m->Identity();
  h.precision = "f32";
  h.capacity = 64;
  h.slots = 1;
  ASSERT_TRUE(WritePreparedArtifact(file, h, m->model().prepared(), nullptr).ok());
  LoadOptions o;
  o.capacity = 64;
  o.artifact = file;
  auto same = LoadedModel::Load(dir, o);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ((*same)->Identity(), m->Identity());
  o.capacity = 65;  // another bound: another identity
  const Status s = LoadedModel::Load(dir, o).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.ToString().find("run vlstack compile again"), std::string::npos) << s.ToString();
  // Same layout, other weight bytes: only the identity can tell.
  TestModelSpec other = Base();
  other.seed = 5;
  auto m2 = Load("art2", other);
  ASSERT_TRUE(m2);
  o.capacity = 64;
  const Status s2 =
      LoadedModel::Load(JoinPath(tmp ? tmp : "/tmp", "vls_entries_test_art2"), o).status();
  EXPECT_EQ(s2.code(), StatusCode::kFailedPrecondition) << s2.ToString();
}

TEST(EntriesTest, NmaxIsCheckedAgainstTheChosenCapacityOnly) {
  TestModelSpec s = Base();
  s.ds_layers = {0};
  s.ds_nmax = 300;
  EXPECT_TRUE(Load("cap512", s, 512) != nullptr);
  const char* tmp = std::getenv("TEST_TMPDIR");
  LoadOptions o;
  o.capacity = 256;
  auto refused = LoadedModel::Load(JoinPath(tmp ? tmp : "/tmp", "vls_entries_test_cap512"), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("exceeds selected context capacity 256"),
            std::string::npos);
  // A derived DeepStack (from vision_config) takes Nmax from the options, else the capacity.
  TestModelSpec derived = Base();
  derived.deepstack = 3;
  auto d = Load("derived", derived, 64, 10);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->bounds().nmax, 10);
  EXPECT_EQ(d->config().deepstack->target_layers, (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace vls
