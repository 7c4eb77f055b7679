// The vision tower in the prepared-weights artifact and the artifact identity: a compiled model
// with a vision tower maps its tower's prepared weights back (bit-identical features in bf16
// and int8), the identity covers the tower (config, layout, weight bytes) while a text-only
// model keeps exactly its former identity, and damaged or mismatched files are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/scratch_test_util.h"
#include "model/prepared_artifact.h"
#include "model/test_checkpoint.h"
#include "runtime/image_encoder.h"
#include "runtime/loaded_model.h"
#include "vision/vision_test_util.h"

namespace vls {
namespace {

std::string TempPath(const std::string& name) {
  // A parameterised test is named "Name/0": the slash would make a folder nobody removes.
  std::string test_name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(test_name.begin(), test_name.end(), '/', '_');
  return test::ScratchPath("vls_artifact_vision_", test_name + "_" + name);
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A tiny Qwen3-VL with its vision tower, stored in f32 so that bf16 packing and Q8
// quantization change the bytes (the artifact must carry the prepared result).
TestModelSpec VisionSpec(uint64_t seed) {
  TestModelSpec s;
  s.dtype = DType::kF32;
  s.deepstack = 2;
  s.seed = seed;
  return s;
}

std::string WriteModel(const std::string& name, const TestModelSpec& spec) {
  const std::string dir = TempPath(name);
  std::filesystem::remove_all(dir);
  const Status s = WriteTestCheckpoint(dir, spec, false);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir;
}

LoadOptions Options(kernels::Precision p, const std::string& artifact = "") {
  LoadOptions o;
  o.capacity = 64;
  o.threads = 2;
  o.precision = p;
  o.artifact = artifact;
  return o;
}

std::unique_ptr<LoadedModel> MustLoad(const std::string& dir, const LoadOptions& o) {
  auto m = LoadedModel::Load(dir, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(*m) : nullptr;
}

// The tower's output for fixed pixels (two images) through the ImageEncoder of `model`.
VisionOutput Encode(const std::string& dir, const LoadedModel& model) {
  auto enc = ImageEncoder::Load(dir, model, ImageEncoderOptions{});
  EXPECT_TRUE(enc.ok()) << enc.status().ToString();
  if (!enc.ok()) return {};
  const std::vector<GridThw> grids = {{1, 4, 6}, {1, 8, 8}};
  int64_t rows = 0;
  const std::vector<float> px =
      vision_test::RandomPixels((*enc)->vision_config(), grids, 11, &rows);
  auto out = (*enc)->vision().Encode(px, rows, grids, nullptr);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? std::move(*out) : VisionOutput{};
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Flips one bit of tensor `name`'s first byte in dir/model.safetensors.
void FlipTensorByte(const std::string& dir, const std::string& name) {
  const std::string path = JoinPath(dir, "model.safetensors");
  std::string bytes = Slurp(path);
  ASSERT_GT(bytes.size(), 8u);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i)
    len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, len));
  ASSERT_TRUE(h.contains(name)) << name;
  const size_t at = 8 + len + h[name]["data_offsets"][0].get<size_t>();
  bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
  Spit(path, bytes);
}

class ArtifactVisionTest : public ::testing::TestWithParam<kernels::Precision> {};

// Compile, map back, encode: the features equal the freshly prepared tower's bit for bit, and
// the tower really runs from the artifact (an artifact carrying another tower's bytes under
// this model's identity gives that tower's features).
TEST_P(ArtifactVisionTest, MappedTowerEncodesBitForBit) {
  const kernels::Precision p = GetParam();
  const std::string dir = WriteModel("m", VisionSpec(21));
  const std::string art = TempPath("m.vlsp");
  auto fresh = MustLoad(dir, Options(p));
  ASSERT_TRUE(fresh);
  ASSERT_TRUE(fresh->vision_config().has_value());
  ASSERT_TRUE(fresh->WriteArtifact(art, nullptr).ok());
  auto mapped = MustLoad(dir, Options(p, art));
  ASSERT_TRUE(mapped);
  EXPECT_EQ(mapped->Identity(), fresh->Identity());
  auto weights = mapped->MappedVisionWeights();
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  ASSERT_NE(*weights, nullptr);
  EXPECT_EQ((*weights)->LayoutText(), PreparedVisionLayoutText(fresh->vision_layout()));
  auto none = fresh->MappedVisionWeights();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);

  const VisionOutput a = Encode(dir, *fresh);
  const VisionOutput b = Encode(dir, *mapped);
  ASSERT_GT(a.tokens, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_TRUE(SameBits(a.embeds, b.embeds));
  EXPECT_TRUE(SameBits(a.deepstack, b.deepstack));

  // Another tower of the same shapes, written under this model's identity.
  const std::string other_dir = WriteModel("other", VisionSpec(22));
  auto other = MustLoad(other_dir, Options(p));
  ASSERT_TRUE(other);
  auto other_tower = PreparedVisionWeights::Prepare(
      *other->vision_config(),
      *BindVisionWeights(*other->vision_config(), other->model().checkpoint()),
      other->model().context());
  ASSERT_TRUE(other_tower.ok()) << other_tower.status().ToString();
  ArtifactHeader h;
  h.identity = fresh->Identity();
  h.precision = kernels::PrecisionName(p);
  h.capacity = 64;
  h.slots = 1;
  h.nmax = fresh->bounds().nmax;
  const std::string swapped = TempPath("swapped.vlsp");
  ASSERT_TRUE(WritePreparedArtifact(swapped, h, fresh->model().prepared(),
                                    &(*other_tower)->region(), nullptr)
                  .ok());
  auto tricked = MustLoad(dir, Options(p, swapped));
  ASSERT_TRUE(tricked);
  const VisionOutput c = Encode(dir, *tricked);
  const VisionOutput d = Encode(other_dir, *other);
  EXPECT_FALSE(SameBits(a.embeds, c.embeds));
  EXPECT_TRUE(SameBits(c.embeds, d.embeds));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(other_dir);
  std::filesystem::remove(art);
  std::filesystem::remove(swapped);
}

INSTANTIATE_TEST_SUITE_P(Precisions, ArtifactVisionTest,
                         ::testing::Values(kernels::Precision::kBF16, kernels::Precision::kInt8,
                                           kernels::Precision::kF32),
                         [](const auto& p) { return kernels::PrecisionName(p.param); });

// One byte of one vision weight changes the identity, and an artifact compiled before the
// change is refused.
TEST(ArtifactVisionIdentityTest, OneVisionWeightByteChangesTheIdentity) {
  const std::string dir = WriteModel("m", VisionSpec(23));
  const std::string art = TempPath("m.vlsp");
  auto before = MustLoad(dir, Options(kernels::Precision::kBF16));
  ASSERT_TRUE(before);
  ASSERT_TRUE(before->WriteArtifact(art, nullptr).ok());
  const std::string id = before->Identity();
  EXPECT_NE(before->IdentityText().find("[vision config]\nvision.depth=3\n"), std::string::npos);
  EXPECT_NE(before->IdentityText().find("visual.blocks.1.mlp.linear_fc2.weight BF16_BLOCKED"),
            std::string::npos);
  before.reset();
  FlipTensorByte(dir, "model.visual.blocks.1.mlp.linear_fc2.weight");
  auto after = MustLoad(dir, Options(kernels::Precision::kBF16));
  ASSERT_TRUE(after);
  EXPECT_NE(after->Identity(), id);
  const Status s = LoadedModel::Load(dir, Options(kernels::Precision::kBF16, art)).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.ToString().find("run vlstack compile again"), std::string::npos) << s.ToString();
  std::filesystem::remove_all(dir);
  std::filesystem::remove(art);
}

// A damaged byte in the vision region fails the checksum; a vision tower of another layout is
// refused naming the first tensor that differs; a vision model's artifact without a vision
// section is refused.
TEST(ArtifactVisionIdentityTest, DamagedOrMismatchedVisionSectionsAreRefused) {
  const std::string dir = WriteModel("m", VisionSpec(24));
  const std::string art = TempPath("m.vlsp");
  auto m = MustLoad(dir, Options(kernels::Precision::kInt8));
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->WriteArtifact(art, nullptr).ok());
  const std::string bytes = Slurp(art);
  std::string damaged = bytes;
  damaged[damaged.size() - 3] = static_cast<char>(damaged[damaged.size() - 3] ^ 1);  // vision
  const std::string bad = TempPath("bad.vlsp");
  Spit(bad, damaged);
  Status s = LoadedModel::Load(dir, Options(kernels::Precision::kInt8, bad)).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.ToString().find("checksum"), std::string::npos) << s.ToString();

  TestModelSpec wider = VisionSpec(24);
  wider.vision_intermediate = 96;
  const std::string wider_dir = WriteModel("wider", wider);
  s = LoadedModel::Load(wider_dir, Options(kernels::Precision::kInt8, art)).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.ToString().find("does not match this vision tower's layout"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.ToString().find("'blocks.0.mlp.linear_fc1.weight' Q8B32H [64, 32]"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.ToString().find("expected 'blocks.0.mlp.linear_fc1.weight' Q8B32H [96, 32]"),
            std::string::npos)
      << s.ToString();

  ArtifactHeader h;
  h.identity = m->Identity();
  h.precision = "int8";
  h.capacity = 64;
  h.slots = 1;
  h.nmax = m->bounds().nmax;
  const std::string text_only = TempPath("text_only.vlsp");
  ASSERT_TRUE(WritePreparedArtifact(text_only, h, m->model().prepared(), nullptr).ok());
  s = LoadedModel::Load(dir, Options(kernels::Precision::kInt8, text_only)).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.ToString().find("holds no vision tower weights"), std::string::npos) << s.ToString();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(wider_dir);
  for (const std::string& f : {art, bad, text_only}) std::filesystem::remove(f);
}

// Text-only models keep exactly the identity they had before the vision tower joined it
// (pinned: computed by vlstack at commit f3c4cef, before the change). "b" is a Qwen3-VL whose
// config.json declares a vision_config but whose checkpoint has no model.visual.* tensors
// (a text-only extraction): it has no vision tower either. The pins also change if
// WriteTestCheckpoint's bytes or any other identity input changes; that must be deliberate.
// (The int8 pins changed deliberately when Q8 blocks went from 128 to 32 columns, stored as
// "Q8B32", in issue 18, and again when Q8 scales became F16 ("Q8B32H", ADR 0032). All of them
// changed deliberately when the serving step's entry, step.main, joined the manifests in
// issue 33.)
TEST(ArtifactVisionIdentityTest, TextOnlyIdentitiesAreUnchanged) {
  TestModelSpec a;
  a.arch = "qwen3";
  a.deepstack = 0;
  a.seed = 3;
  TestModelSpec b;
  b.vision = false;
  b.seed = 4;
  struct Pin {
    const TestModelSpec* spec;
    kernels::Precision precision;
    const char* identity;
  };
  const Pin pins[] = {
      {&a, kernels::Precision::kF32,
       "2b32d005a2700c33ca3218bcf74f070027452fe4db4a2ae9faf24e93656bdd1d"},
      {&a, kernels::Precision::kBF16,
       "242288ba5325f05429234fbf113e1decc99b00680eeaa76bc362927eb98bc62d"},
      {&a, kernels::Precision::kInt8,
       "acefea79c6209f45a7e42b47f7e79fe2162e57a7484b05f3026dc5735f803ac8"},
      {&b, kernels::Precision::kF32,
       "31dc70a05e9e6539a09b055a7759cc19df7d331eaeaa1e2be2cf39d8408fa66d"},
      {&b, kernels::Precision::kBF16,
       "6c85355a9275bd022ebbe12c3c1b69f57f3cbe7092f15f3eb98c7b3101a0adc0"},
      {&b, kernels::Precision::kInt8,
       "89421d543a135d86dcef12a01dc5e53a733078b08d41f65c99da592c2e172936"},
  };
  const std::string dir_a = WriteModel("a", a);
  const std::string dir_b = WriteModel("b", b);
  for (const Pin& pin : pins) {
    const std::string& dir = pin.spec == &a ? dir_a : dir_b;
    auto m = MustLoad(dir, Options(pin.precision));
    ASSERT_TRUE(m);
    EXPECT_FALSE(m->vision_config().has_value());
    EXPECT_EQ(m->IdentityText().find("[vision"), std::string::npos);
    EXPECT_EQ(m->Identity(), pin.identity)
        << (pin.spec == &a ? "a " : "b ") << kernels::PrecisionName(pin.precision);
  }
  std::filesystem::remove_all(dir_a);
  std::filesystem::remove_all(dir_b);
}

}  // namespace
}  // namespace vls
