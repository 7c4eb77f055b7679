// --precision int4 (ADR 0019, 0021): which prepared entries are Q4 and Q6, and int4 artifacts
// round-trip and carry their precision (refused under any other).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "kernels/q4.h"
#include "kernels/q6.h"
#include "model/prepared_artifact.h"
#include "model/qwen3_model.h"
#include "model/test_checkpoint.h"

namespace vls {
namespace {

namespace fs = std::filesystem;

// hidden 64 (Q4: a multiple of 32), intermediate 80 (down_proj's 80 columns are not: Q8).
std::string ModelDir(const char* name) {
  const std::string d = (fs::temp_directory_path() / name).string();
  TestModelSpec spec;
  spec.arch = "qwen3";
  spec.vision = false;
  spec.deepstack = 0;
  spec.hidden = 64;
  spec.intermediate = 80;
  spec.layers = 2;
  spec.vocab = 97;
  spec.tied = false;
  EXPECT_TRUE(WriteTestCheckpoint(d, spec, false).ok());
  return d;
}

ModelOptions Int4() {
  ModelOptions o;
  o.threads = 2;
  o.precision = kernels::Precision::kInt4;
  return o;
}

TEST(PreparedQ4Test, LayersAreQ4TheHeadQ6AndOddWidthsStayQ8) {
  const std::string dir = ModelDir("vls_prepared_q4_plan");
  auto m = Qwen3Model::Load(dir, Int4());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const PreparedWeights& p = (*m)->prepared();
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(p.layer(l).qkv.format, kernels::MatrixFormat::kQ4);
    EXPECT_EQ(p.layer(l).o.format, kernels::MatrixFormat::kQ4);
    EXPECT_EQ(p.layer(l).gate_up.format, kernels::MatrixFormat::kQ4);
    EXPECT_EQ(p.layer(l).down.format, kernels::MatrixFormat::kQ8);  // 80 columns
  }
  EXPECT_EQ(p.lm_head().format, kernels::MatrixFormat::kQ6);
  EXPECT_NE(p.LayoutText().find("layers.0.qkv Q4 [128, 64]"), std::string::npos) << p.LayoutText();
  EXPECT_NE(p.LayoutText().find("lm_head Q6 [97, 64]"), std::string::npos) << p.LayoutText();
  PreparedEntry e;
  ASSERT_TRUE(ParsePreparedStorageName("Q4", &e));
  EXPECT_EQ(e.format, kernels::MatrixFormat::kQ4);
  e.rows = 17;
  e.cols = 64;
  EXPECT_EQ(PreparedEntryBytes(e), uint64_t(kernels::Q4Bytes(17, 64)));
  ASSERT_TRUE(ParsePreparedStorageName("Q6", &e));
  EXPECT_EQ(e.format, kernels::MatrixFormat::kQ6);
  EXPECT_EQ(PreparedEntryBytes(e), uint64_t(kernels::Q6Bytes(17, 64)));
  e.cols = 48;  // not a multiple of 32: never planned, and refused when bound
  EXPECT_EQ(PreparedEntryBytes(e), 0u);
  fs::remove_all(dir);
}

TEST(PreparedQ4Test, Int4ArtifactMapsBackAndIsRefusedAtAnotherPrecision) {
  const std::string dir = ModelDir("vls_prepared_q4_artifact");
  auto fresh = Qwen3Model::Load(dir, Int4());
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  const std::string path = (fs::temp_directory_path() / "vls_prepared_q4_artifact.vlsp").string();
  ArtifactHeader h;
  h.identity = std::string(64, 'd');
  h.precision = "int4";
  ASSERT_TRUE(WritePreparedArtifact(path, h, (*fresh)->prepared(), nullptr).ok());
  ModelOptions o = Int4();
  o.artifact = path;
  auto mapped = Qwen3Model::Load(dir, o);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  const PreparedWeights& a = (*fresh)->prepared();
  const PreparedWeights& b = (*mapped)->prepared();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
  EXPECT_EQ(b.layer(1).qkv.format, kernels::MatrixFormat::kQ4);
  EXPECT_EQ(b.lm_head().format, kernels::MatrixFormat::kQ6);
  o.precision = kernels::Precision::kInt8;
  const Status s = Qwen3Model::Load(dir, o).status();
  EXPECT_NE(s.ToString().find("compiled for precision int4 but the model is loaded with int8"),
            std::string::npos)
      << s.ToString();
  fs::remove(path);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vls
