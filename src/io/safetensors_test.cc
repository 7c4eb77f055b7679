#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace vls {
namespace {

// Builds a raw safetensors image: 8-byte little-endian header length, header, data. The header
// is padded with spaces so that the data section starts 8-byte aligned, as real writers do.
std::string RawFile(std::string_view header, std::string_view data = {}) {
  std::string padded(header);
  padded.append((8 - padded.size() % 8) % 8, ' ');
  uint64_t n = padded.size();
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + padded + std::string(data);
}

// Like RawFile but with the given header length field and no padding.
std::string RawFileWithLength(uint64_t n, std::string_view header, std::string_view data = {}) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + std::string(header) + std::string(data);
}

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string tmpl = JoinPath(base ? base : "/tmp", "vls_safetensors_test_XXXXXX");
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return JoinPath(dir_, name); }

  // Writes `bytes` to `name` in the temp dir and returns the path.
  std::string Write(const std::string& name, std::string_view bytes) const {
    const std::string p = Path(name);
    EXPECT_TRUE(WriteStringToFile(p, bytes).ok());
    return p;
  }

  // Writes a corrupt file, opens it and checks the code and that the message names the file
  // and every string in `mentions`. Returns the message.
  std::string ExpectOpenError(std::string_view bytes, StatusCode code,
                              std::vector<std::string_view> mentions) {
    const std::string p = Write("bad.safetensors", bytes);
    auto f = SafetensorsFile::Open(p);
    EXPECT_FALSE(f.ok());
    if (f.ok()) return "";
    const Status& s = f.status();
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), p)) << s.ToString();
    for (std::string_view m : mentions)
      EXPECT_TRUE(Contains(s.message(), m)) << m << " in " << s.ToString();
    return s.message();
  }

  std::string dir_;
};

TEST_F(SafetensorsTest, RoundTripAllDTypesWithEmptyTensorAndMetadata) {
  HostTensor f32 = HostTensor::FromF32({2, 3}, std::vector<float>{1, -2, 3.5f, 4, 5, 6});
  HostTensor i32 = HostTensor::FromI32({4}, std::vector<int32_t>{7, -8, 9, 2147483647});
  HostTensor bf16 = FromF32As(DType::kBF16, {3}, std::vector<float>{1.5f, -2, 0.25f});
  HostTensor f16 = FromF32As(DType::kF16, {2, 2}, std::vector<float>{0.5f, 1, -3, 65504});
  HostTensor empty(DType::kF32, {0, 5});
  // bf16 comes first with an odd element count: the writer must still keep f32/i32 aligned.
  std::vector<NamedTensor> tensors = {{"z.bf16", bf16.view()},
                                      {"a.f32", f32.view()},
                                      {"m.i32", i32.view()},
                                      {"b.f16", f16.view()},
                                      {"e.empty", empty.view()}};
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "x"}};
  const std::string p = Path("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(p, tensors, metadata).ok());

  auto f = SafetensorsFile::Open(p);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->path(), p);
  EXPECT_EQ((*f)->metadata(), metadata);
  const auto& entries = (*f)->entries();
  ASSERT_EQ(entries.size(), 5u);
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.f32", "b.f16", "e.empty", "m.i32", "z.bf16"}));
  for (const auto& t : tensors) {
    const SafetensorsEntry* e = (*f)->Find(t.name);
    ASSERT_NE(e, nullptr) << t.name;
    TensorView v = (*f)->View(*e);
    EXPECT_EQ(v.dtype, t.view.dtype) << t.name;
    EXPECT_EQ(v.shape, t.view.shape) << t.name;
    ASSERT_EQ(v.nbytes, t.view.nbytes) << t.name;
    if (v.nbytes) {
      EXPECT_EQ(std::memcmp(v.data, t.view.data, v.nbytes), 0) << t.name;
    }
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % DTypeSize(v.dtype), 0u) << t.name;
  }
  EXPECT_EQ((*f)->Find("missing"), nullptr);
  EXPECT_EQ(ToF32Vector((*f)->View(*(*f)->Find("z.bf16"))), (std::vector<float>{1.5f, -2, 0.25f}));
  EXPECT_EQ((*f)->View(*(*f)->Find("m.i32")).i32()[3], 2147483647);
}

// WriteSafetensors streams the file tensor by tensor; its bytes are SerializeSafetensors'.
TEST_F(SafetensorsTest, StreamedFileEqualsTheSerializedBytes) {
  HostTensor f32 = HostTensor::FromF32({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  HostTensor bf16 = FromF32As(DType::kBF16, {3}, std::vector<float>{1.5f, -2, 0.25f});
  const std::vector<NamedTensor> tensors = {{"b", bf16.view()}, {"a", f32.view()}};
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const std::string p = Path("streamed.safetensors");
  ASSERT_TRUE(WriteSafetensors(p, tensors, metadata).ok());
  auto want = SerializeSafetensors(tensors, metadata);
  ASSERT_TRUE(want.ok());
  auto got = ReadFileToString(p);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, *want);
  // A refused list writes nothing.
  const std::string bad = Path("refused.safetensors");
  EXPECT_FALSE(WriteSafetensors(bad, {{"a", f32.view()}, {"a", f32.view()}}).ok());
  EXPECT_FALSE(ReadFileToString(bad).ok());
}

TEST_F(SafetensorsTest, SerializeKeepsGivenHeaderOrderAndPadsToEight) {
  HostTensor a = HostTensor::FromF32({1}, std::vector<float>{1});
  HostTensor b = FromF32As(DType::kBF16, {1}, std::vector<float>{2});
  auto bytes = SerializeSafetensors({{"zz", b.view()}, {"aa", a.view()}}, {{"k", "v"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  uint64_t n = 0;
  std::memcpy(&n, bytes->data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  auto header = nlohmann::ordered_json::parse(bytes->substr(8, n));
  std::vector<std::string> keys;
  for (const auto& [k, v] : header.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "zz", "aa"}));
  EXPECT_EQ(bytes->size(), 8 + n + 6);
}

TEST_F(SafetensorsTest, SerializeWithoutMetadataOmitsIt) {
  HostTensor a = HostTensor::FromF32({1}, std::vector<float>{1});
  auto bytes = SerializeSafetensors({{"a", a.view()}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_FALSE(Contains(*bytes, "__metadata__"));
}

TEST_F(SafetensorsTest, SerializeRejectsDuplicateNames) {
  HostTensor a = HostTensor::FromF32({1}, std::vector<float>{1});
  auto bytes = SerializeSafetensors({{"w", a.view()}, {"w", a.view()}});
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bytes.status().message(), "'w'"));
}

TEST_F(SafetensorsTest, SerializeRejectsViewWithWrongByteCount) {
  HostTensor a = HostTensor::FromF32({4}, std::vector<float>{1, 2, 3, 4});
  TensorView v = a.view();
  v.nbytes = 12;
  const std::string p = Path("w.safetensors");
  Status s = WriteSafetensors(p, {{"w", v}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "'w'")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), p)) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(p));
}

TEST_F(SafetensorsTest, SerializeRejectsReservedAndInvalidUtf8Names) {
  HostTensor a = HostTensor::FromF32({1}, std::vector<float>{1});
  EXPECT_EQ(SerializeSafetensors({{"__metadata__", a.view()}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SerializeSafetensors({{"bad\xff", a.view()}}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(SafetensorsTest, EmptyHeaderIsAValidEmptyFile) {
  auto f = SafetensorsFile::Open(Write("e.safetensors", RawFile("{}")));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE((*f)->entries().empty());
}

TEST_F(SafetensorsTest, ZeroElementTensorIsLegal) {
  auto f = SafetensorsFile::Open(Write(
      "z.safetensors", RawFile(R"({"z":{"dtype":"F32","shape":[3,0],"data_offsets":[0,0]}})")));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->View((*f)->entries()[0]).nbytes, 0u);
}

TEST_F(SafetensorsTest, FromBufferValidatesAndLabelsErrors) {
  std::string ok = RawFile(R"({"t":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                           std::string("\x01\x00\x00\x00", 4));
  std::vector<std::byte> buf(ok.size());
  std::memcpy(buf.data(), ok.data(), ok.size());
  auto f = SafetensorsFile::FromBuffer("mem", buf.data(), buf.size());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->View((*f)->entries()[0]).i32()[0], 1);
  auto bad = SafetensorsFile::FromBuffer("mem-label", buf.data(), 5);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(bad.status().message(), "mem-label"));
}

// ---- Corrupt single files ----

TEST_F(SafetensorsTest, FileShorterThanEightBytes) {
  ExpectOpenError("abc", StatusCode::kDataLoss, {"shorter than the 8-byte header length"});
}

TEST_F(SafetensorsTest, HeaderLengthPastEnd) {
  ExpectOpenError(RawFileWithLength(100, "{}"), StatusCode::kDataLoss,
                  {"header length 100 runs past the end"});
}

TEST_F(SafetensorsTest, HugeHeaderLength) {
  ExpectOpenError(RawFileWithLength(uint64_t{1} << 63, "{}"), StatusCode::kDataLoss,
                  {"header length 9223372036854775808"});
  ExpectOpenError(RawFileWithLength(~uint64_t{0}, "{}"), StatusCode::kDataLoss,
                  {"runs past the end"});
}

TEST_F(SafetensorsTest, HeaderLongerThanLimitIsOutOfRange) {
  const uint64_t n = (uint64_t{100} << 20) + 1;
  std::vector<std::byte> buf(8 + n, std::byte{' '});
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  auto f = SafetensorsFile::FromBuffer("big.safetensors", buf.data(), buf.size());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(f.status().message(), "big.safetensors: header length"));
}

TEST_F(SafetensorsTest, InvalidJson) {
  ExpectOpenError(RawFile(R"({"a":{"dtype":)"), StatusCode::kDataLoss, {"invalid JSON"});
  ExpectOpenError(RawFile(std::string("{\"a\":1}\0\0", 9)), StatusCode::kDataLoss,
                  {"NUL byte at offset 7"});
  ExpectOpenError(RawFile("{\"a\":1} x"), StatusCode::kDataLoss, {"invalid JSON"});
}

TEST_F(SafetensorsTest, DeeplyNestedJsonIsRejected) {
  ExpectOpenError(RawFile(std::string(100000, '[') + std::string(100000, ']')),
                  StatusCode::kDataLoss, {"nests deeper"});
}

TEST_F(SafetensorsTest, JsonNotAnObject) {
  ExpectOpenError(RawFile("[1,2]"), StatusCode::kDataLoss, {"must be a JSON object"});
}

TEST_F(SafetensorsTest, TensorNotAnObject) {
  ExpectOpenError(RawFile(R"({"w":5})"), StatusCode::kDataLoss, {"tensor 'w'"});
}

TEST_F(SafetensorsTest, TensorMissingDtype) {
  ExpectOpenError(RawFile(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "missing \"dtype\""});
}

TEST_F(SafetensorsTest, TensorMissingShape) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "missing \"shape\""});
}

TEST_F(SafetensorsTest, TensorMissingOffsets) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[1]}})", "xxxx"), StatusCode::kDataLoss,
                  {"tensor 'w'", "missing \"data_offsets\""});
}

TEST_F(SafetensorsTest, TensorWithExtraField) {
  ExpectOpenError(
      RawFile(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", "xxxx"),
      StatusCode::kDataLoss, {"tensor 'w'", "unexpected field 'x'"});
}

TEST_F(SafetensorsTest, UnsupportedDtypeIsUnimplemented) {
  for (const char* dtype : {"F64", "I64", "U8"}) {
    ExpectOpenError(RawFile(std::string(R"({"w":{"dtype":")") + dtype +
                                R"(","shape":[1],"data_offsets":[0,8]}})",
                            "xxxxxxxx"),
                    StatusCode::kUnimplemented, {"tensor 'w'", dtype});
  }
}

TEST_F(SafetensorsTest, F8E4M3ReadsOneBytePerElementAtAnyOffset) {
  // Three 1-byte codes after an F32: the F8 tensor starts at offset 4 and ends at an odd size,
  // which is aligned for its element size; every byte is a code (NaN codes included: whether
  // one is acceptable is the model loader's rule).
  const std::string data = std::string("\x00\x00\x80\x3f", 4) + std::string("\x38\x7f\xfe", 3);
  const std::string p = Write(
      "f8.safetensors", RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                R"("w":{"dtype":"F8_E4M3","shape":[3],"data_offsets":[4,7]}})",
                                data));
  auto f = SafetensorsFile::Open(p);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const SafetensorsEntry* e = (*f)->Find("w");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, DType::kF8E4M3);
  const TensorView v = (*f)->View(*e);
  EXPECT_EQ(v.nbytes, 3u);
  const std::vector<float> values = ToF32Vector(v);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_TRUE(std::isnan(values[1]));
  EXPECT_EQ(values[2], -448.0f);
  // The writer keeps it: a round trip gives the same bytes.
  auto image = SerializeSafetensors({{"w", v}, {"a", (*f)->View(*(*f)->Find("a"))}});
  ASSERT_TRUE(image.ok());
  std::vector<std::byte> copy(image->size());
  std::memcpy(copy.data(), image->data(), image->size());
  auto again = SafetensorsFile::FromBuffer("again", copy.data(), copy.size());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(std::memcmp((*again)->View(*(*again)->Find("w")).data, v.data, 3), 0);
}

TEST_F(SafetensorsTest, F8E4M3ByteCountMustMatchItsShape) {
  // 4 elements of 1 byte need 4 bytes, not 8 (as if F8 were 2 bytes wide) nor 2.
  ExpectOpenError(
      RawFile(R"({"w":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,8]}})", "xxxxxxxx"),
      StatusCode::kDataLoss, {"tensor 'w'", "F8_E4M3"});
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,2]}})", "xx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "F8_E4M3"});
  // The other 8-bit float formats are known but not read.
  for (const char* dtype : {"F8_E5M2", "F8_E4M3FNUZ", "F8_E8M0"}) {
    ExpectOpenError(RawFile(std::string(R"({"w":{"dtype":")") + dtype +
                                R"(","shape":[4],"data_offsets":[0,4]}})",
                            "xxxx"),
                    StatusCode::kUnimplemented, {"tensor 'w'", dtype});
  }
}

TEST_F(SafetensorsTest, UnknownDtypeIsDataLoss) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "unknown dtype 'Q7'"});
  ExpectOpenError(RawFile(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "\"dtype\" must be a string"});
}

TEST_F(SafetensorsTest, NegativeShapeDim) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "shape[0] is -1"});
}

TEST_F(SafetensorsTest, NonIntegerShapeDim) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "shape[0] is 1.5"});
  ExpectOpenError(
      RawFile(R"({"w":{"dtype":"F32","shape":[1,"2"],"data_offsets":[0,8]}})", "xxxxxxxx"),
      StatusCode::kDataLoss, {"tensor 'w'", "shape[1]"});
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[9223372036854775808],)"
                          R"("data_offsets":[0,4]}})",
                          "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "shape[0]"});
}

TEST_F(SafetensorsTest, ShapeByteCountOverflow) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],)"
                          R"("data_offsets":[0,0]}})"),
                  StatusCode::kDataLoss, {"tensor 'w'", "overflows"});
  // Zero elements, but the other dims alone would overflow any stride computation.
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4],)"
                          R"("data_offsets":[0,0]}})"),
                  StatusCode::kDataLoss, {"tensor 'w'", "overflows"});
}

TEST_F(SafetensorsTest, OffsetsPastEnd) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "[0,8] end past the data section of 4"});
}

TEST_F(SafetensorsTest, OffsetsMalformed) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "data_offsets"});
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "data_offsets"});
}

TEST_F(SafetensorsTest, BeginAfterEnd) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "xxxx"),
                  StatusCode::kDataLoss, {"tensor 'w'", "[4,0] begin after end"});
}

TEST_F(SafetensorsTest, ByteCountMismatch) {
  ExpectOpenError(
      RawFile(R"({"model.norm.weight":{"dtype":"BF16","shape":[8],"data_offsets":[0,12]}})",
              std::string(12, 'x')),
      StatusCode::kDataLoss,
      {"tensor 'model.norm.weight': data_offsets [0,12] hold 12 bytes but BF16 shape [8] needs "
       "16"});
}

TEST_F(SafetensorsTest, OverlappingRanges) {
  ExpectOpenError(RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, 'x')),
                  StatusCode::kDataLoss, {"tensor 'b'", "tensor 'a' [0,8]", "overlap"});
}

TEST_F(SafetensorsTest, HoleInDataSection) {
  ExpectOpenError(RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                          std::string(12, 'x')),
                  StatusCode::kDataLoss, {"tensor 'b'", "bytes [4,8)", "after tensor 'a'"});
  ExpectOpenError(
      RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 'x')),
      StatusCode::kDataLoss, {"tensor 'a'", "bytes [0,4)", "at the start"});
  ExpectOpenError(
      RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, 'x')),
      StatusCode::kDataLoss, {"tensor 'a'", "bytes [4,8)", "hole at the end"});
  ExpectOpenError(RawFile("{}", "xx"), StatusCode::kDataLoss, {"bytes [0,2)", "none listed"});
}

TEST_F(SafetensorsTest, MisalignedTensor) {
  // 8 + 58 = 66 is 2 mod 4: an F32 tensor at data offset 0 sits at a misaligned address.
  std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  header.resize(58, ' ');
  ExpectOpenError(RawFileWithLength(header.size(), header, "xxxx"), StatusCode::kUnimplemented,
                  {"tensor 'w'", "not aligned"});
}

TEST_F(SafetensorsTest, DuplicateTensorKey) {
  ExpectOpenError(RawFile(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                          "xxxx"),
                  StatusCode::kDataLoss, {"key 'w' appears twice"});
}

TEST_F(SafetensorsTest, MetadataWithNonStringValue) {
  ExpectOpenError(RawFile(R"({"__metadata__":{"format":"pt","step":3}})"), StatusCode::kDataLoss,
                  {"__metadata__", "key 'step' must map to a string"});
  ExpectOpenError(RawFile(R"({"__metadata__":[1]})"), StatusCode::kDataLoss,
                  {"__metadata__", "must be an object"});
}

TEST_F(SafetensorsTest, ControlCharactersInNamesAreEscaped) {
  const std::string msg =
      ExpectOpenError(RawFile(R"({"a\nb":5})"), StatusCode::kDataLoss, {"tensor 'a\\x0ab'"});
  EXPECT_FALSE(Contains(msg, "\n"));
}

// ---- Checkpoints ----

class SafetensorsCheckpointTest : public SafetensorsTest {
 protected:
  void WriteShards() {
    a_ = HostTensor::FromF32({2}, std::vector<float>{1, 2});
    b_ = FromF32As(DType::kBF16, {3}, std::vector<float>{3, 4, 5});
    c_ = HostTensor::FromI32({1}, std::vector<int32_t>{6});
    ASSERT_TRUE(
        WriteSafetensors(Path("s1.safetensors"), {{"a", a_.view()}, {"b", b_.view()}}).ok());
    ASSERT_TRUE(WriteSafetensors(Path("s2.safetensors"), {{"c", c_.view()}}).ok());
  }
  void WriteIndex(const std::string& weight_map_json) {
    Write("model.safetensors.index.json",
          R"({"metadata":{"total_size":22},"weight_map":)" + weight_map_json + "}");
  }
  // Opens the checkpoint expecting `code`; checks that the message names each of `mentions`.
  void ExpectCheckpointError(StatusCode code, std::vector<std::string_view> mentions) {
    auto c = SafetensorsCheckpoint::Open(dir_);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), code) << c.status().ToString();
    for (std::string_view m : mentions) {
      EXPECT_TRUE(Contains(c.status().message(), m)) << m << " in " << c.status().ToString();
    }
  }

  HostTensor a_, b_, c_;
};

TEST_F(SafetensorsCheckpointTest, ShardedRoundTrip) {
  WriteShards();
  WriteIndex(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"})");
  auto c = SafetensorsCheckpoint::Open(dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->Names(), (std::vector<std::string>{"a", "b", "c"}));
  const auto* b = (*c)->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->file->path(), Path("s1.safetensors"));
  EXPECT_EQ(b->entry->name, "b");
  EXPECT_EQ(ToF32Vector(b->view), (std::vector<float>{3, 4, 5}));
  const auto* t = (*c)->Find("c");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->file->path(), Path("s2.safetensors"));
  EXPECT_EQ(t->view.i32()[0], 6);
  EXPECT_EQ((*c)->Find("d"), nullptr);
}

TEST_F(SafetensorsCheckpointTest, SingleFile) {
  a_ = HostTensor::FromF32({2}, std::vector<float>{1, 2});
  ASSERT_TRUE(WriteSafetensors(Path("model.safetensors"), {{"a", a_.view()}}).ok());
  auto c = SafetensorsCheckpoint::Open(dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->Names(), (std::vector<std::string>{"a"}));
  EXPECT_EQ(ToF32Vector((*c)->Find("a")->view), (std::vector<float>{1, 2}));
}

TEST_F(SafetensorsCheckpointTest, MissingFolderIsNotFound) {
  const std::string missing = Path("nope");
  auto c = SafetensorsCheckpoint::Open(missing);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(c.status().message(), missing));
}

TEST_F(SafetensorsCheckpointTest, EmptyFolderIsNotFound) {
  ExpectCheckpointError(StatusCode::kNotFound, {Path("model.safetensors")});
}

TEST_F(SafetensorsCheckpointTest, CorruptSingleFileNamesIt) {
  Write("model.safetensors", "abc");
  ExpectCheckpointError(StatusCode::kDataLoss, {Path("model.safetensors")});
}

TEST_F(SafetensorsCheckpointTest, IndexNamesMissingShard) {
  WriteShards();
  WriteIndex(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors",)"
             R"("d":"s3.safetensors"})");
  ExpectCheckpointError(StatusCode::kNotFound,
                        {"model.safetensors.index.json", "tensor 'd'", Path("s3.safetensors")});
}

TEST_F(SafetensorsCheckpointTest, IndexNamesTensorMissingFromShard) {
  WriteShards();
  WriteIndex(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors",)"
             R"("x":"s2.safetensors"})");
  ExpectCheckpointError(StatusCode::kDataLoss, {"model.safetensors.index.json", "tensor 'x'",
                                                Path("s2.safetensors"), "no such tensor"});
}

TEST_F(SafetensorsCheckpointTest, IndexPlacesTensorInWrongShard) {
  WriteShards();
  WriteIndex(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s1.safetensors"})");
  ExpectCheckpointError(StatusCode::kDataLoss, {"tensor 'c'", Path("s1.safetensors")});
}

TEST_F(SafetensorsCheckpointTest, ShardTensorMissingFromIndex) {
  WriteShards();
  WriteIndex(R"({"a":"s1.safetensors","c":"s2.safetensors"})");
  ExpectCheckpointError(StatusCode::kDataLoss,
                        {Path("s1.safetensors"), "tensor 'b'", "not listed in the weight_map"});
}

TEST_F(SafetensorsCheckpointTest, PathTraversalInShardName) {
  WriteShards();
  for (const char* shard : {"../s1.safetensors", "sub/s1.safetensors", "..", "/etc/passwd"}) {
    WriteIndex(std::string(R"({"a":")") + shard + R"("})");
    ExpectCheckpointError(StatusCode::kDataLoss,
                          {"model.safetensors.index.json", "tensor 'a'", "plain file name"});
  }
}

TEST_F(SafetensorsCheckpointTest, DuplicateTensorAcrossShards) {
  WriteShards();
  ASSERT_TRUE(WriteSafetensors(Path("s2.safetensors"), {{"c", c_.view()}, {"a", a_.view()}}).ok());
  WriteIndex(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"})");
  ExpectCheckpointError(StatusCode::kDataLoss,
                        {"tensor 'a'", Path("s1.safetensors"), Path("s2.safetensors")});
}

TEST_F(SafetensorsCheckpointTest, MalformedIndex) {
  WriteShards();
  Write("model.safetensors.index.json", "{not json");
  ExpectCheckpointError(StatusCode::kDataLoss, {"model.safetensors.index.json", "invalid JSON"});
  Write("model.safetensors.index.json", R"({"metadata":{}})");
  ExpectCheckpointError(StatusCode::kDataLoss, {"model.safetensors.index.json", "weight_map"});
  WriteIndex(R"({"a":1})");
  ExpectCheckpointError(StatusCode::kDataLoss, {"tensor 'a'", "shard file name"});
  WriteIndex(R"({"a":"s1.safetensors","a":"s2.safetensors"})");
  ExpectCheckpointError(StatusCode::kDataLoss, {"key 'a' appears twice"});
}

}  // namespace
}  // namespace vls
