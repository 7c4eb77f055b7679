#include "runtime/media_source.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <utility>

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

TEST(VideoPart, ReadsVideoDataUrlsInEveryPartFormAndRefusesImages) {
  const std::string url = "data:video/mp4;base64," + EncodeBase64(std::vector<uint8_t>{1, 2, 3});
  for (const Json& part : {Json{{"type", "video"}, {"video", url}},
                           Json{{"type", "video_url"}, {"video_url", Json{{"url", url}}}},
                           Json{{"type", "video_url"}, {"video_url", url}}}) {
    auto m = ReadVideoPart(part, MediaPolicy{});
    ASSERT_TRUE(m.ok()) << part.dump() << ": " << m.status().ToString();
    EXPECT_EQ(m->bytes, (std::vector<uint8_t>{1, 2, 3}));
  }
  auto image = ReadVideoPart(Json{{"type", "video"}, {"video", "data:image/png;base64,AQID"}},
                             MediaPolicy{});
  ASSERT_FALSE(image.ok());
  EXPECT_NE(image.status().message().find("is not a video"), std::string::npos);
  auto file = ReadVideoPart(Json{{"type", "video"}, {"video", "clip.mp4"}}, MediaPolicy{});
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("video 'clip.mp4': file paths are not accepted"),
            std::string::npos);
  MediaPolicy tiny;
  tiny.max_video_bytes = 2;
  EXPECT_FALSE(ReadVideoPart(Json{{"type", "video"}, {"video", url}}, tiny).ok());
}

TEST(VideoPart, VideoUrlPartsBecomeThePartTheTemplatePlaces) {
  Json part = {
      {"type", "video_url"}, {"video_url", {{"url", "data:video/mp4;base64,AA=="}}}, {"fps", 1}};
  VideoUrlAsVideoPart(&part);
  EXPECT_EQ(part, (Json{{"type", "video"}, {"video", "data:video/mp4;base64,AA=="}, {"fps", 1}}));
  Json image = {{"type", "image_url"}, {"image_url", "x"}};
  const Json before = image;
  VideoUrlAsVideoPart(&image);
  EXPECT_EQ(image, before);
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

// A folder under /tmp for one test, removed at the end.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::canonical("/tmp").string() + "/vls_media_" + name + "_" +
             std::to_string(::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// A FIFO in the allowed folder once blocked a request thread in open() for ever.
TEST(ImagePart, FifoAndOtherNonRegularFilesAreRefusedAtOnce) {
  TempDir dir("fifo");
  const std::string fifo = JoinPath(dir.path, "pipe.png");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::create_directories(JoinPath(dir.path, "sub.png"));
  for (const bool rooted : {false, true}) {
    MediaPolicy p;
    p.allow_files = true;
    if (rooted) p.root_dir = dir.path;
    for (const std::string& path : {fifo, JoinPath(dir.path, "sub.png")}) {
      const auto start = std::chrono::steady_clock::now();
      auto m = ReadImagePart(Json{{"image", path}}, p);
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                1.0);
      ASSERT_FALSE(m.ok()) << path;
      EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << m.status().ToString();
      EXPECT_NE(m.status().message().find("not a regular file"), std::string::npos)
          << m.status().ToString();
    }
  }
  MediaPolicy p;
  p.allow_files = true;
  auto dev = ReadImagePart(Json{{"image", "/dev/zero"}}, p);
  EXPECT_NE(dev.status().message().find("not a regular file"), std::string::npos);
}

// Outside the allowed folder, an existing and a missing path answer alike (no probing which
// paths exist); inside it, a missing file is NotFound.
TEST(ImagePart, OutsideTheFolderExistingAndMissingAnswerAlike) {
  TempDir root("root");
  TempDir other("other");
  ASSERT_TRUE(WriteStringToFile(JoinPath(other.path, "secret.png"), "abc").ok());
  ASSERT_TRUE(WriteStringToFile(JoinPath(root.path, "ok.png"), "xyz").ok());
  std::filesystem::create_symlink(JoinPath(other.path, "secret.png"),
                                  JoinPath(root.path, "link.png"));
  MediaPolicy p;
  p.allow_files = true;
  p.root_dir = root.path;
  p.base_dir = root.path;
  const std::string up = "../vls_media_other_" + std::to_string(::getpid());
  const std::pair<std::string, std::string> pairs[] = {
      {JoinPath(other.path, "secret.png"), JoinPath(other.path, "missing.png")},
      {up + "/secret.png", up + "/missing.png"},
      {"file://" + JoinPath(other.path, "secret.png"),
       "file://" + JoinPath(other.path, "missing.png")},
      {"/etc/passwd", "/etc/no_such_file_here"},
  };
  for (const auto& [existing, missing] : pairs) {
    auto a = ReadImagePart(Json{{"image", existing}}, p);
    auto b = ReadImagePart(Json{{"image", missing}}, p);
    ASSERT_FALSE(a.ok()) << existing;
    ASSERT_FALSE(b.ok()) << missing;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << a.status().ToString();
    EXPECT_EQ(a.status().code(), b.status().code());
    // The same message but for the path it quotes.
    std::string am = a.status().message();
    std::string bm = b.status().message();
    am.replace(am.find(existing), existing.size(), "P");
    bm.replace(bm.find(missing), missing.size(), "P");
    EXPECT_EQ(am, bm);
    EXPECT_NE(am.find("only files under the allowed folder"), std::string::npos) << am;
  }
  // A link inside the folder that leads out is refused like any outside path.
  auto link = ReadImagePart(Json{{"image", "link.png"}}, p);
  EXPECT_EQ(link.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(link.status().message().find("only files under the allowed folder"), std::string::npos);
  auto ok = ReadImagePart(Json{{"image", "ok.png"}}, p);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(Str(ok->bytes), "xyz");
  EXPECT_EQ(ReadImagePart(Json{{"image", "nope.png"}}, p).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace vls
