#include "runtime/media_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "base/file.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;

std::string Str(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

TEST(Base64, DecodesEveryPaddingForm) {
  EXPECT_EQ(Str(*DecodeBase64("", 10)), "");
  EXPECT_EQ(Str(*DecodeBase64("Zg==", 10)), "f");
  EXPECT_EQ(Str(*DecodeBase64("Zm8=", 10)), "fo");
  EXPECT_EQ(Str(*DecodeBase64("Zm9v", 10)), "foo");
  EXPECT_EQ(Str(*DecodeBase64("Zm9vYmFy", 10)), "foobar");
  EXPECT_EQ(Str(*DecodeBase64("+/+/", 10)), "\xfb\xff\xbf");
}

TEST(Base64, EncodesWhatItDecodes) {
  for (const std::string text : {"", "f", "fo", "foo", "foobar", "\xfb\xff\xbf\x00"}) {
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    const std::string b64 = EncodeBase64(bytes);
    EXPECT_EQ(b64.size() % 4, 0u);
    EXPECT_EQ(*DecodeBase64(b64, 100), bytes) << b64;
  }
  EXPECT_EQ(EncodeBase64(std::vector<uint8_t>{'f', 'o'}), "Zm8=");
}

TEST(Base64, RefusesMalformedInput) {
  for (const char* bad :
       {"Zg=", "Zg", "Z===", "Zg==Zg==", "Zm9v\n", "Zm 9", "Zm9-", "=Zm9", "Zm=v"}) {
    auto r = DecodeBase64(bad, 100);
    EXPECT_FALSE(r.ok()) << bad;
  }
  auto big = DecodeBase64("Zm9vYmFy", 5);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("more than 5 bytes"), std::string::npos);
}

TEST(ImagePart, ReadsDataUrlsInEveryPartForm) {
  MediaPolicy p;
  const std::string url = "data:image/png;base64,Zm9v";
  for (const Json& part :
       {Json{{"type", "image"}, {"image", url}}, Json{{"type", "image"}, {"url", url}},
        Json{{"type", "image_url"}, {"image_url", {{"url", url}}}},
        Json{{"type", "image_url"}, {"image_url", url}}}) {
    auto m = ReadImagePart(part, p);
    ASSERT_TRUE(m.ok()) << part.dump() << ": " << m.status().ToString();
    EXPECT_EQ(Str(m->bytes), "foo");
    EXPECT_EQ(m->label, "data URL (image/png, 3 bytes)");
  }
}

TEST(ImagePart, RefusesWhatItMustNotRead) {
  MediaPolicy p;  // files not allowed
  struct Case {
    Json part;
    const char* needle;
  } cases[] = {
      {Json{{"type", "image"}}, "needs \"image\""},
      {Json{{"type", "image"}, {"image", 3}}, "must be a string"},
      {Json{{"type", "image"}, {"image", ""}}, "empty"},
      {Json{{"type", "image"}, {"image", "https://example.com/a.png"}}, "remote URLs"},
      {Json{{"type", "image"}, {"image", "/etc/passwd"}}, "file paths are not accepted"},
      {Json{{"type", "image"}, {"image", "file:///etc/passwd"}}, "file paths are not accepted"},
      {Json{{"type", "image"}, {"image", "data:text/plain;base64,Zm9v"}}, "not an image"},
      {Json{{"type", "image"}, {"image", "data:image/png,foo"}}, "not base64"},
      {Json{{"type", "image"}, {"image", "data:image/png;base64"}}, "without a ','"},
      {Json{{"type", "image"}, {"image", "data:image/png;base64,Zm9"}}, "multiple of 4"},
      {Json{{"type", "image_url"}, {"image_url", Json::object()}}, "no \"url\""},
  };
  for (const Case& c : cases) {
    auto m = ReadImagePart(c.part, p);
    ASSERT_FALSE(m.ok()) << c.part.dump();
    EXPECT_NE(m.status().message().find(c.needle), std::string::npos)
        << c.part.dump() << ": " << m.status().ToString();
  }
}

TEST(ImagePart, ReadsFilesWhenAllowedRelativeToTheBase) {
  const std::string dir = JoinPath("/tmp", "vls_media_source_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir, "a.bin"), "abc").ok());
  MediaPolicy p;
  p.allow_files = true;
  p.base_dir = dir;
  auto m = ReadImagePart(Json{{"image", "a.bin"}}, p);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(Str(m->bytes), "abc");
  EXPECT_EQ(m->label, JoinPath(dir, "a.bin"));
  auto u = ReadImagePart(Json{{"image", "file://" + JoinPath(dir, "a.bin")}}, p);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  p.max_bytes = 2;
  auto big = ReadImagePart(Json{{"image", "a.bin"}}, p);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("larger than 2 bytes"), std::string::npos);
  EXPECT_FALSE(ReadImagePart(Json{{"image", "missing.png"}}, p).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vls
