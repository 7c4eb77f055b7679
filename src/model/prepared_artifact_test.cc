// The prepared-weights artifact: a round trip maps back byte-identical weights, and corrupt or
// mismatched files are refused with an error that names what is wrong.
#include "model/prepared_artifact.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "model/qwen3_model.h"
#include "model/test_checkpoint.h"

namespace vls {
namespace {

namespace fs = std::filesystem;

std::string ModelDir(const char* name, int hidden) {
  const std::string d = (fs::temp_directory_path() / name).string();
  TestModelSpec spec;
  spec.arch = "qwen3";
  spec.vision = false;
  spec.deepstack = 0;
  spec.hidden = hidden;
  spec.intermediate = 80;
  spec.layers = 2;
  spec.vocab = 97;
  spec.dtype = DType::kF32;  // bf16 preparation rounds: the artifact must carry the result
  EXPECT_TRUE(WriteTestCheckpoint(d, spec, false).ok());
  return d;
}

ModelOptions Bf16() {
  ModelOptions o;
  o.threads = 2;
  o.precision = kernels::Precision::kBF16;
  return o;
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

class PreparedArtifactTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One file per test: ctest runs the tests of this file in parallel processes, and a file
    // rewritten while another process maps it would fault (SIGBUS) there.
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    path_ = (fs::temp_directory_path() / ("vls_artifact_test_" + test + ".vlsp")).string();
    dir_ = ModelDir(("vls_artifact_test_a_" + test).c_str(), 48);
    auto m = Qwen3Model::Load(dir_, Bf16());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    ArtifactHeader h;
    h.identity = std::string(64, 'a');
    h.precision = "bf16";
    h.capacity = 16;
    h.slots = 1;
    ASSERT_TRUE(WritePreparedArtifact(path_, h, model_->prepared(), nullptr).ok());
    bytes_ = Slurp(path_);
  }
  // Loads the model from `bytes` written as an artifact; returns the status.
  Status LoadWith(const std::string& bytes, kernels::Precision p = kernels::Precision::kBF16,
                  ArtifactMemory memory = ArtifactMemory::kCopy) {
    const std::string bad = path_ + ".bad";
    Spit(bad, bytes);
    ModelOptions o = Bf16();
    o.precision = p;
    o.artifact = bad;
    o.artifact_memory = memory;
    return Qwen3Model::Load(dir_, o).status();
  }
  std::string dir_, path_, bytes_;
  std::unique_ptr<Qwen3Model> model_;
};

TEST_F(PreparedArtifactTest, RoundTripMapsTheSameBytes) {
  for (const ArtifactMemory memory : {ArtifactMemory::kCopy, ArtifactMemory::kMap}) {
    ModelOptions o = Bf16();
    o.artifact = path_;
    o.artifact_memory = memory;
    auto m = Qwen3Model::Load(dir_, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const PreparedWeights& a = model_->prepared();
    const PreparedWeights& b = (*m)->prepared();
    EXPECT_EQ(b.artifact_identity(), std::string(64, 'a'));
    EXPECT_EQ(b.artifact_bounds(), "capacity 16, slots 1, nmax 0");
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
    EXPECT_EQ(a.LayoutText(), b.LayoutText());
    EXPECT_EQ(b.layer(1).gate_up.rows, 160);
    EXPECT_EQ(b.layer(1).gate_up.dtype, DType::kBF16);
    if (memory == ArtifactMemory::kCopy) {
      // Copied into a HugeRegion, which starts its data on a 2 MiB boundary.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (uintptr_t{2} << 20), 0u);
    }
  }
}

TEST_F(PreparedArtifactTest, CorruptFilesAreRefusedByName) {
  auto expect = [&](const std::string& bytes, const std::string& needle) {
    const Status s = LoadWith(bytes);
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.ToString().find(needle), std::string::npos) << s.ToString();
  };
  std::string b = bytes_;
  b[0] = 'X';
  expect(b, "bad magic");
  expect(bytes_.substr(0, 10), "bad magic");
  expect(bytes_.substr(0, bytes_.size() - 1), "truncated or padded");
  expect(bytes_ + "x", "truncated or padded");
  b = bytes_;
  b[8] = '\xff';
  b[15] = '\x7f';
  expect(b, "runs past the end");
  b = bytes_;
  b[16] = '[';
  expect(b, "bad header");
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string e = bytes_;
    const size_t at = e.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) e.replace(at, from.size(), to);
    return e;
  };
  expect(edit("\"version\":3", "\"version\":7"), "version 7 is not supported");
  expect(edit("\"version\":3", "\"version\":1"), "recompile it with `vlstack compile`");
  expect(edit("\"precision\":\"bf16\"", "\"precision\":\"f32\" "), "compiled for precision f32");
  expect(edit("\"identity\":\"aaaa", "\"identity\":\"zzzz"), "identity is not 64 hex digits");
  // The same length, so only the entry changes: dense BF16 where the model wants BF16 blocked.
  expect(edit("\"dtype\":\"BF16_BLOCKED\"", "\"dtype\":\"BF16\"        "),
         "does not match this model's layout");
  expect(edit("\"dtype\":\"BF16_BLOCKED\"", "\"dtype\":\"Q99\"         "), "unknown dtype 'Q99'");
  expect(edit("\"rows\":", "\"rowz\":"), "bad header: entry 0 has no \"rows\"");
  expect(edit("\"rows\":", "\"bytes\":"), "bad header");  // a repeated key
  expect(edit("\"capacity\":16", "\"capacity\":1e9"), "bad header");
  expect(edit("\"data_xxh3_128\":\"", "\"data_xxh3_128\":\"z"), "bad header");
  expect(edit("\"data_offset\":4096", "\"data_offset\":4095"), "misaligned");
}

// A version 2 file (no vision section; otherwise the same format) still loads; a version 2
// header that claims a vision section does not.
TEST_F(PreparedArtifactTest, Version2FilesStillLoad) {
  std::string v2 = bytes_;
  const size_t at = v2.find("\"version\":3");
  ASSERT_NE(at, std::string::npos);
  v2.replace(at, 11, "\"version\":2");
  EXPECT_TRUE(LoadWith(v2).ok()) << LoadWith(v2).ToString();
}

// A vision section: its bytes follow the text region at an aligned offset, the checksum covers
// them (a damaged vision byte is refused at load, by the text decoder's checksum check) and
// the mapped model hands the section back untouched.
TEST_F(PreparedArtifactTest, VisionSectionIsMappedBackAndChecksummed) {
  std::vector<std::byte> vision_bytes(5000);
  for (size_t i = 0; i < vision_bytes.size(); ++i) vision_bytes[i] = static_cast<std::byte>(i * 7);
  PreparedRegion vision;
  vision.data = vision_bytes.data();
  vision.size = vision_bytes.size();
  PreparedEntry e;
  e.name = "blocks.0.attn.qkv.weight";
  e.format = kernels::MatrixFormat::kBf16Blocked;
  e.dtype = DType::kBF16;
  e.rows = 6;
  e.cols = 2;
  e.bytes = 4096;
  vision.entries = {e};
  ArtifactHeader h;
  h.identity = std::string(64, 'b');
  h.precision = "bf16";
  ASSERT_TRUE(WritePreparedArtifact(path_, h, model_->prepared(), &vision, nullptr).ok());
  const std::string bytes = Slurp(path_);
  auto parsed = ParseArtifactHeader(path_, reinterpret_cast<const std::byte*>(bytes.data()),
                                    bytes.size(), bytes.size());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_TRUE(parsed->vision.has_value());
  EXPECT_EQ(parsed->vision->offset % kPreparedAlign, 0u);
  EXPECT_GE(parsed->vision->offset, model_->prepared().size());
  EXPECT_EQ(parsed->vision->bytes, vision_bytes.size());
  EXPECT_EQ(parsed->data_bytes, parsed->vision->offset + parsed->vision->bytes);
  ASSERT_EQ(parsed->vision->entries.size(), 1u);
  EXPECT_EQ(parsed->vision->entries[0].name, e.name);
  EXPECT_EQ(parsed->vision->entries[0].format, kernels::MatrixFormat::kBf16Blocked);

  ModelOptions o = Bf16();
  o.artifact = path_;
  auto m = Qwen3Model::Load(dir_, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const PreparedWeights& pw = (*m)->prepared();
  EXPECT_EQ(pw.size(), model_->prepared().size());  // the text region only
  ASSERT_TRUE(pw.artifact_vision().has_value());
  const PreparedRegion& back = *pw.artifact_vision();
  ASSERT_EQ(back.size, vision_bytes.size());
  EXPECT_EQ(std::memcmp(back.data, vision_bytes.data(), back.size), 0);
  EXPECT_EQ(back.entries.size(), 1u);
  EXPECT_NE(back.owner, nullptr);

  std::string damaged = bytes;
  damaged[damaged.size() - 10] = static_cast<char>(damaged[damaged.size() - 10] ^ 1);
  const Status s = LoadWith(damaged);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  // The section must be the rest of the data, aligned.
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string x = bytes;
    const size_t at = x.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) x.replace(at, from.size(), to);
    return x;
  };
  EXPECT_NE(LoadWith(edit("\"vision\":{\"bytes\":5000", "\"vision\":{\"bytes\":4999"))
                .ToString()
                .find("is not the rest of the data"),
            std::string::npos);
  std::string v2 = edit("\"version\":3", "\"version\":2");
  EXPECT_NE(LoadWith(v2).ToString().find("version 2 has no vision section"), std::string::npos)
      << LoadWith(v2).ToString();
}

// The header names the right model but the weight bytes are damaged: the checksum refuses the
// file (kDataLoss) instead of serving broken weights.
TEST_F(PreparedArtifactTest, DamagedWeightBytesAreRefusedByTheChecksum) {
  auto expect_data_loss = [&](const std::string& bytes) {
    const Status s = LoadWith(bytes);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("the prepared weights do not match their checksum"),
              std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find(path_ + ".bad"), std::string::npos) << s.ToString();
  };
  const size_t n = bytes_.size();
  std::string zeroed = bytes_;
  std::fill(zeroed.begin() + static_cast<ptrdiff_t>(n / 2),
            zeroed.begin() + static_cast<ptrdiff_t>(std::min(n, n / 2 + 4096)), '\0');
  ASSERT_NE(zeroed, bytes_);
  expect_data_loss(zeroed);
  std::string flipped = bytes_;
  flipped[n - 100] = static_cast<char>(flipped[n - 100] ^ 1);
  expect_data_loss(flipped);
  EXPECT_TRUE(LoadWith(bytes_).ok());
  // Served from the mapping, the same checks.
  EXPECT_EQ(LoadWith(flipped, kernels::Precision::kBF16, ArtifactMemory::kMap).code(),
            StatusCode::kDataLoss);
  EXPECT_TRUE(LoadWith(bytes_, kernels::Precision::kBF16, ArtifactMemory::kMap).ok());
}

TEST_F(PreparedArtifactTest, ArtifactOfAnotherShapeOrPrecisionIsRefused) {
  const std::string other = ModelDir("vls_artifact_test_b", 32);
  ModelOptions o = Bf16();
  o.artifact = path_;
  const Status s = Qwen3Model::Load(other, o).status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("does not match this model's layout"), std::string::npos)
      << s.ToString();
  const Status f = LoadWith(bytes_, kernels::Precision::kF32);
  EXPECT_NE(f.ToString().find("compiled for precision bf16 but the model is loaded with f32"),
            std::string::npos)
      << f.ToString();
}

// Q8 entries read back as "Q8B32H" whatever the checkpoint's dtype: an int8 artifact of a BF16
// checkpoint maps back (it was refused as a layout mismatch before).
TEST(PreparedArtifactInt8Test, Int8ArtifactOfABf16CheckpointMapsBack) {
  const std::string dir = (fs::temp_directory_path() / "vls_artifact_test_int8_bf16").string();
  TestModelSpec spec;
  spec.arch = "qwen3";
  spec.vision = false;
  spec.deepstack = 0;
  spec.hidden = 48;
  spec.layers = 2;
  spec.vocab = 97;
  spec.dtype = DType::kBF16;
  ASSERT_TRUE(WriteTestCheckpoint(dir, spec, false).ok());
  ModelOptions o;
  o.threads = 2;
  o.precision = kernels::Precision::kInt8;
  auto fresh = Qwen3Model::Load(dir, o);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  const std::string path =
      (fs::temp_directory_path() / "vls_artifact_test_int8_bf16.vlsp").string();
  ArtifactHeader h;
  h.identity = std::string(64, 'c');
  h.precision = "int8";
  ASSERT_TRUE(WritePreparedArtifact(path, h, (*fresh)->prepared(), nullptr).ok());
  o.artifact = path;
  auto mapped = Qwen3Model::Load(dir, o);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  const PreparedWeights& a = (*fresh)->prepared();
  const PreparedWeights& b = (*mapped)->prepared();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
  EXPECT_EQ(b.layer(0).qkv.format, kernels::MatrixFormat::kQ8);
  fs::remove(path);
  fs::remove_all(dir);
}

// An int8 artifact of an older Q8 layout is refused by name, never mapped as if its bytes were
// the new layout: "Q8" (128-column blocks) and "Q8B32" (f32 scales and i32 weight sums, 40 bytes
// per 32 weights). The layout text (and so the identity) names the block size and scale type.
TEST(PreparedArtifactInt8Test, OlderQ8LayoutArtifactsAreRefused) {
  const std::string dir = ModelDir("vls_artifact_test_int8_old", 48);
  ModelOptions o;
  o.threads = 2;
  o.precision = kernels::Precision::kInt8;
  auto fresh = Qwen3Model::Load(dir, o);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_NE((*fresh)->prepared().LayoutText().find("layers.0.qkv Q8B32H ["), std::string::npos)
      << (*fresh)->prepared().LayoutText();
  const std::string path = (fs::temp_directory_path() / "vls_artifact_test_int8_old.vlsp").string();
  ArtifactHeader h;
  h.identity = std::string(64, 'd');
  h.precision = "int8";
  ASSERT_TRUE(WritePreparedArtifact(path, h, (*fresh)->prepared(), nullptr).ok());
  const std::string written = Slurp(path);
  struct Old {
    const char* dtype;  // padded by spaces to the length of "Q8B32H": the same header length
    const char* what;
  };
  for (const Old old :
       {Old{"Q8\"    ", "is stored as 'Q8' (int8 in 128-column blocks"},
        Old{"Q8B32\" ", "is stored as 'Q8B32' (int8 in 32-column blocks with f32"}}) {
    std::string bytes = written;
    const std::string from = "\"dtype\":\"Q8B32H\"", to = std::string("\"dtype\":\"") + old.dtype;
    ASSERT_EQ(from.size(), to.size());
    size_t edits = 0;
    for (size_t at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at)) {
      bytes.replace(at, from.size(), to);
      ++edits;
    }
    ASSERT_GT(edits, 0u);
    Spit(path, bytes);
    o.artifact = path;
    const Status s = Qwen3Model::Load(dir, o).status();
    EXPECT_FALSE(s.ok());
    for (const char* needle :
         {old.what, "'Q8B32H'", "F16 scales", "run vlstack compile again", path.c_str()}) {
      EXPECT_NE(s.ToString().find(needle), std::string::npos) << needle << ": " << s.ToString();
    }
  }
  fs::remove(path);
  fs::remove_all(dir);
}

// Deterministic mutation fuzzing of the header parser: every input gives a Status or a header
// whose data lies inside the file.
TEST_F(PreparedArtifactTest, MutatedHeadersNeverEscapeTheFile) {
  const std::string head = bytes_.substr(0, 4096 + 256);
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string m = head;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % m.size();
      switch (rng() % 3) {
        case 0: m[at] = static_cast<char>(rng()); break;
        case 1: m.erase(at, 1 + rng() % 8); break;
        default: m.insert(at, 1, "0123456789{}[]\",:-"[rng() % 18]); break;
      }
      if (m.empty()) m = "x";
    }
    const uint64_t file_size = m.size() + rng() % 8192;
    auto h = ParseArtifactHeader("fuzz", reinterpret_cast<const std::byte*>(m.data()), m.size(),
                                 file_size);
    if (h.ok()) {
      EXPECT_LE(h->data_offset, file_size);
      EXPECT_EQ(h->data_offset + h->data_bytes, file_size);
    }
  }
}

}  // namespace
}  // namespace vls
