// src/video on the committed clips (tests/video/make_fixtures.sh) and on hostile inputs built
// here: each refusal is a named Status, nothing crashes (the ASan build runs this: "untrusted").
// Pixel exactness against PyAV is tests/video/pyav_compare.py (ctest video_frames_pyav).
#include "video/video_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "video/container.h"

namespace vls::video {
namespace {

std::vector<uint8_t> Fixture(const std::string& name) {
  std::ifstream f(std::string(VLS_VIDEO_FIXTURES) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << name;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

void PutBe32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

void PutBe16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v);
}

// Where the 4-byte box type `type` first occurs at or after `from` (the box starts 4 before).
size_t Find(const std::vector<uint8_t>& b, const char* type, size_t from = 0) {
  for (size_t i = from; i + 4 <= b.size(); ++i) {
    if (std::memcmp(&b[i], type, 4) == 0) return i;
  }
  ADD_FAILURE() << "no " << type;
  return 0;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

// A refusal: the code, the label first, and `needle` in the message.
void ExpectRefused(const Status& s, StatusCode code, const std::string& label,
                   const std::string& needle) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_EQ(s.message().rfind(label + ": ", 0), 0u) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString() << " lacks " << needle;
}

TEST(ProbeVideoTest, ReadsAnMp4Header) {
  auto info = ProbeVideo(Fixture("h264_yuv420p.mp4"), "clip.mp4");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->frames, 12);
  EXPECT_DOUBLE_EQ(info->fps, 10.0);
  EXPECT_NEAR(info->duration_s, 1.2, 1e-9);
  EXPECT_EQ(info->width, 64);
  EXPECT_EQ(info->height, 48);
  EXPECT_EQ(info->coded_width, 64);
  EXPECT_EQ(info->coded_height, 48);
  EXPECT_EQ(info->rotation, 0);
  EXPECT_EQ(info->container, "mov,mp4,m4a,3gp,3g2,mj2");
  EXPECT_EQ(info->codec, "h264");
  EXPECT_EQ(info->streams, 1);
  EXPECT_EQ(info->video_stream, 0);
}

TEST(ProbeVideoTest, CountsFramesWhenWebmDeclaresNone) {
  for (const char* name : {"vp9.webm", "vp8.webm", "h264.ts"}) {
    auto info = ProbeVideo(Fixture(name), name);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->frames, 12) << name;
  }
}

TEST(ProbeVideoTest, FirstVideoStreamAfterAudio) {
  auto info = ProbeVideo(Fixture("h264_audio_first.mp4"), "a.mp4");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->streams, 2);
  EXPECT_EQ(info->video_stream, 1);
  auto frames = DecodeFrames(Fixture("h264_audio_first.mp4"), "a.mp4", Range(12));
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  EXPECT_EQ(frames->size(), 12u);
}

TEST(ProbeVideoTest, EveryAcceptedKind) {
  const struct {
    const char* name;
    const char* codec;
    int width, height;
  } kClips[] = {{"av1.mp4", "libdav1d", 64, 48},       {"mpeg4.avi", "mpeg4", 64, 48},
                {"mjpeg.mov", "mjpeg", 64, 48},        {"h264_yuv444p_97x61.mp4", "h264", 97, 61},
                {"vp9_97x61.webm", "vp9", 97, 61},     {"h264_yuvj420p.mp4", "h264", 64, 48},
                {"h264_one_frame.mp4", "h264", 32, 32}};
  for (const auto& c : kClips) {
    auto info = ProbeVideo(Fixture(c.name), c.name);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->codec, c.codec) << c.name;
    EXPECT_EQ(info->width, c.width) << c.name;
    EXPECT_EQ(info->height, c.height) << c.name;
    auto frames = DecodeFrames(Fixture(c.name), c.name, std::vector<int64_t>{0});
    ASSERT_TRUE(frames.ok()) << frames.status().ToString();
    ASSERT_EQ(frames->size(), 1u);
    EXPECT_EQ((*frames)[0].width, c.width);
    EXPECT_EQ((*frames)[0].height, c.height);
    EXPECT_EQ((*frames)[0].pixels.size(), static_cast<size_t>(c.width * c.height * 3));
  }
}

TEST(DecodeFramesTest, SubsetEqualsTheSameFramesOfAFullDecode) {
  const auto clip = Fixture("h264_yuv420p.mp4");  // B-frames: decode order is not storage order
  auto all = DecodeFrames(clip, "clip.mp4", Range(12));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 12u);
  const std::vector<int64_t> pick = {3, 7, 11};
  auto some = DecodeFrames(clip, "clip.mp4", pick);
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  ASSERT_EQ(some->size(), 3u);
  for (size_t i = 0; i < pick.size(); ++i) {
    EXPECT_EQ((*some)[i].pixels, (*all)[static_cast<size_t>(pick[i])].pixels) << pick[i];
  }
  // The pattern moves: neighbouring frames differ, so a wrong index would show.
  for (size_t i = 1; i < all->size(); ++i) EXPECT_NE((*all)[i].pixels, (*all)[i - 1].pixels);
}

TEST(DecodeFramesTest, ASinkGetsTheSameFramesAsTheyAreDecoded) {
  const auto clip = Fixture("h264_yuv420p.mp4");
  const std::vector<int64_t> pick = {0, 4, 5, 11};
  auto kept = DecodeFrames(clip, "clip.mp4", pick);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  std::vector<size_t> order;
  std::vector<image::RgbImage> sunk;
  const FrameSink sink = [&](size_t k, image::RgbImage frame) {
    order.push_back(k);
    sunk.push_back(std::move(frame));
    return Status::Ok();
  };
  // No max_output_bytes for a sink: a bound that refuses DecodeFrames does not refuse it.
  VideoLimits small;
  small.max_output_bytes = 1;
  EXPECT_FALSE(DecodeFrames(clip, "clip.mp4", pick, small).ok());
  ASSERT_TRUE(DecodeFramesTo(clip, "clip.mp4", pick, sink, small).ok());
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3}));
  ASSERT_EQ(sunk.size(), kept->size());
  for (size_t i = 0; i < sunk.size(); ++i) EXPECT_EQ(sunk[i].pixels, (*kept)[i].pixels) << i;
  // The sink's error stops the decode and is the result.
  int calls = 0;
  const FrameSink failing = [&](size_t, image::RgbImage) {
    ++calls;
    return InvalidArgument("enough");
  };
  Status s = DecodeFramesTo(clip, "clip.mp4", pick, failing);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);
}

TEST(DecodeFramesTest, NoIndicesNoFrames) {
  auto frames = DecodeFrames(Fixture("vp9.webm"), "v.webm", {});
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  EXPECT_TRUE(frames->empty());
}

TEST(DecodeFramesTest, IndexPastTheLastFrameNamesBoth) {
  auto frames = DecodeFrames(Fixture("vp9.webm"), "v.webm", std::vector<int64_t>{2, 12});
  ExpectRefused(frames.status(), StatusCode::kInvalidArgument, "v.webm",
                "frame index 12 is past the last decodable frame");
  EXPECT_NE(frames.status().message().find("the last is 11"), std::string::npos);
}

TEST(DecodeFramesTest, BadIndices) {
  const auto clip = Fixture("vp8.webm");
  ExpectRefused(DecodeFrames(clip, "v", std::vector<int64_t>{3, 3}).status(),
                StatusCode::kInvalidArgument, "v", "strictly increasing (3 then 3)");
  ExpectRefused(DecodeFrames(clip, "v", std::vector<int64_t>{5, 2}).status(),
                StatusCode::kInvalidArgument, "v", "strictly increasing");
  ExpectRefused(DecodeFrames(clip, "v", std::vector<int64_t>{-1}).status(),
                StatusCode::kInvalidArgument, "v", "frame index -1");
  VideoLimits limits;
  limits.max_frames = 100;
  ExpectRefused(DecodeFrames(clip, "v", std::vector<int64_t>{100}, limits).status(),
                StatusCode::kInvalidArgument, "v", "max_frames 100");
}

// The three rotated clips hold the same frames: 180 turned back is the stored picture, which
// 90 must show turned clockwise and 270 counter-clockwise (the PyAV test pins the direction
// against the ffmpeg tool's autorotate).
TEST(DecodeFramesTest, RotationTurnsFramesUpright) {
  auto r90 = DecodeFrames(Fixture("h264_rotate90.mp4"), "r90", std::vector<int64_t>{2});
  auto r180 = DecodeFrames(Fixture("h264_rotate180.mp4"), "r180", std::vector<int64_t>{2});
  auto r270 = DecodeFrames(Fixture("h264_rotate270.mp4"), "r270", std::vector<int64_t>{2});
  ASSERT_TRUE(r90.ok() && r180.ok() && r270.ok());
  const image::RgbImage& a = (*r90)[0];
  const image::RgbImage& b = (*r180)[0];
  const image::RgbImage& c = (*r270)[0];
  ASSERT_EQ(b.width, 48);
  ASSERT_EQ(b.height, 32);
  ASSERT_EQ(a.width, 32);
  ASSERT_EQ(a.height, 48);
  ASSERT_EQ(c.width, 32);
  ASSERT_EQ(c.height, 48);
  const int w = 48, h = 32;  // stored
  auto stored = [&](int y, int x, int ch) { return b.At(h - 1 - y, w - 1 - x, ch); };
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int ch = 0; ch < 3; ++ch) {
        ASSERT_EQ(a.At(x, h - 1 - y, ch), stored(y, x, ch)) << y << "," << x;
        ASSERT_EQ(c.At(w - 1 - x, y, ch), stored(y, x, ch)) << y << "," << x;
      }
    }
  }
  auto info = ProbeVideo(Fixture("h264_rotate90.mp4"), "r90");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->rotation, 90);
  EXPECT_EQ(info->width, 32);
  EXPECT_EQ(info->coded_width, 48);
}

// ffmpeg's autorotate for each display matrix (16.16 fixed point; w = 1 << 30).
TEST(OrientationTest, AsFfmpegAutorotate) {
  using internal::Orientation;
  using internal::OrientationFromMatrix;
  constexpr int32_t k1 = 1 << 16, kW = 1 << 30;
  const auto o = [](std::initializer_list<int32_t> m) {
    int32_t a[9];
    std::copy(m.begin(), m.end(), a);
    const Orientation r = OrientationFromMatrix(a);
    return std::vector<int>{r.transpose, r.mirror_x, r.mirror_y, r.degrees};
  };
  EXPECT_EQ(o({k1, 0, 0, 0, k1, 0, 0, 0, kW}), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(o({0, k1, 0, -k1, 0, 0, 0, 0, kW}), (std::vector<int>{1, 0, 1, 90}));    // clock
  EXPECT_EQ(o({-k1, 0, 0, 0, -k1, 0, 0, 0, kW}), (std::vector<int>{0, 1, 1, 180}));  // both flips
  EXPECT_EQ(o({0, -k1, 0, k1, 0, 0, 0, 0, kW}), (std::vector<int>{1, 1, 0, 270}));   // cclock
  EXPECT_EQ(o({0, k1, 0, k1, 0, 0, 0, 0, kW}), (std::vector<int>{1, 0, 0, 90}));     // cclock_flip
  EXPECT_EQ(o({0, -k1, 0, -k1, 0, 0, 0, 0, kW}), (std::vector<int>{1, 1, 1, 270}));  // clock_flip
  EXPECT_EQ(o({-k1, 0, 0, 0, k1, 0, 0, 0, kW}), (std::vector<int>{0, 1, 0, 180}));   // hflip
  EXPECT_EQ(o({k1, 0, 0, 0, -k1, 0, 0, 0, kW}), (std::vector<int>{0, 0, 1, 0}));     // vflip
  // 45 degrees: not applied. A degenerate matrix (no scale): not applied, no NaN arithmetic.
  EXPECT_EQ(o({46341, 46341, 0, -46341, 46341, 0, 0, 0, kW}), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(o({0, 0, 0, 0, 0, 0, 0, 0, 0}), (std::vector<int>{0, 0, 0, 0}));
}

TEST(DecodeFramesTest, SizeChangeIsRefusedFromTheFirstFrameOfTheNewSize) {
  const auto clip = Fixture("vp9_size_change.webm");
  auto before = DecodeFrames(clip, "s.webm", Range(6));
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ExpectRefused(DecodeFrames(clip, "s.webm", std::vector<int64_t>{0, 6}).status(),
                StatusCode::kInvalidArgument, "s.webm", "frame 6 is 32x24 where frame 0 is 64x48");
}

TEST(DecodeFramesTest, Cancelled) {
  const auto clip = Fixture("h264_yuv420p.mp4");
  ExpectRefused(DecodeFrames(clip, "c", Range(12), {}, [] { return true; }).status(),
                StatusCode::kCancelled, "c", "cancelled");
  for (int after : {1, 3, 10, 30}) {
    int polls = 0;
    auto r = DecodeFrames(clip, "c", Range(12), {}, [&] { return ++polls > after; });
    ExpectRefused(r.status(), StatusCode::kCancelled, "c", "cancelled");
  }
  int polls = 0;
  auto r = DecodeFrames(clip, "c", Range(12), {}, [&] { return ++polls < 0; });
  ASSERT_TRUE(r.ok());
  EXPECT_GT(polls, 12);
}

TEST(VideoLimitsTest, EachBoundIsNamed) {
  const auto mp4 = Fixture("h264_yuv420p.mp4");  // 64x48, 12 frames at 10 fps, 1.2 s
  const auto run = [](const std::vector<uint8_t>& clip, const VideoLimits& limits) {
    auto info = ProbeVideo(clip, "l", limits);
    return info.ok() ? DecodeFrames(clip, "l", Range(3), limits).status() : info.status();
  };
  VideoLimits l;
  l.max_bytes = 1000;
  ExpectRefused(run(mp4, l), StatusCode::kInvalidArgument, "l", "exceed max_bytes 1000");
  l = {};
  l.max_side = 63;
  ExpectRefused(run(mp4, l), StatusCode::kInvalidArgument, "l", "64x48 frames exceed max_side 63");
  l = {};
  l.max_frame_pixels = 64 * 48 - 1;
  ExpectRefused(run(mp4, l), StatusCode::kInvalidArgument, "l", "max_frame_pixels 3071");
  l = {};
  l.max_frames = 11;
  ExpectRefused(run(mp4, l), StatusCode::kInvalidArgument, "l", "declares 12 frames");
  ExpectRefused(run(Fixture("vp9.webm"), l), StatusCode::kInvalidArgument, "l",
                "more than max_frames 11");  // counted
  l = {};
  l.max_duration_s = 1.0;
  ExpectRefused(run(mp4, l), StatusCode::kInvalidArgument, "l", "exceeds max_duration_s 1");
  l = {};
  l.max_fps = 9.5;
  ExpectRefused(run(mp4, l), StatusCode::kInvalidArgument, "l", "frame rate 10 exceeds max_fps");
  l = {};
  l.max_streams = 1;
  ExpectRefused(run(Fixture("h264_audio_first.mp4"), l), StatusCode::kInvalidArgument, "l",
                "max_streams 1");
  l = {};
  l.max_output_bytes = 64 * 48 * 3 * 2;
  ExpectRefused(run(mp4, l), StatusCode::kInvalidArgument, "l", "3 frames of 64x48 exceed");
  l.max_output_bytes = 64 * 48 * 3 * 3;
  EXPECT_TRUE(run(mp4, l).ok());
}

TEST(HostileVideoTest, NotAVideoOrNotAccepted) {
  ExpectRefused(ProbeVideo({}, "e").status(), StatusCode::kInvalidArgument, "e", "empty input");
  ExpectRefused(ProbeVideo(Bytes("hello, this is no video at all"), "t").status(),
                StatusCode::kInvalidArgument, "t", "not a video container");
  // A WAV header: recognised, refused by name.
  const uint8_t kWav[] = {'R', 'I', 'F',  'F',  36,  0,   0,    0,    'W', 'A', 'V',
                          'E', 'f', 'm',  't',  ' ', 16,  0,    0,    0,   1,   0,
                          1,   0,   0x40, 0x1f, 0,   0,   0x80, 0x3e, 0,   0,   2,
                          0,   16,  0,    'd',  'a', 't', 'a',  0,    0,   0,   0};
  const std::vector<uint8_t> wav(std::begin(kWav), std::end(kWav));
  ExpectRefused(ProbeVideo(wav, "w").status(), StatusCode::kInvalidArgument, "w",
                "container 'wav' is not supported");
  // References to other files: never opened (the demuxers are refused by name first).
  const std::string file = std::string(VLS_VIDEO_FIXTURES) + "/h264_yuv420p.mp4";
  ExpectRefused(ProbeVideo(Bytes("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:1.2,\n" + file +
                                 "\n#EXT-X-ENDLIST\n"),
                           "p.m3u8")
                    .status(),
                StatusCode::kInvalidArgument, "p.m3u8", "container 'hls' is not supported");
  ExpectRefused(ProbeVideo(Bytes("ffconcat version 1.0\nfile '" + file + "'\n"), "c").status(),
                StatusCode::kInvalidArgument, "c", "container 'concat' is not supported");
  ExpectRefused(ProbeVideo(Fixture("ffv1.mkv"), "f").status(), StatusCode::kInvalidArgument, "f",
                "codec 'ffv1' is not supported");
  ExpectRefused(ProbeVideo(Fixture("many_streams.mkv"), "m").status(), StatusCode::kInvalidArgument,
                "m", "max_streams 16");
}

// Header fields of the MP4 edited to lie.
TEST(HostileVideoTest, LyingMp4Headers) {
  const auto mp4 = Fixture("h264_yuv420p.mp4");
  const size_t stts = Find(mp4, "stts");  // one entry: 12 samples of 1024 ticks
  {
    auto b = mp4;
    PutBe32(b, stts + 12, 1000000000);  // 10^9 frames
    ExpectRefused(ProbeVideo(b, "n").status(), StatusCode::kInvalidArgument, "n",
                  "declares 1000000000 frames, over max_frames 1048576");
  }
  {
    auto b = mp4;
    PutBe32(b, Find(mp4, "mdhd") + 16, 0x7fffffff);  // timescale: 2 million fps
    ExpectRefused(ProbeVideo(b, "f").status(), StatusCode::kInvalidArgument, "f",
                  "exceeds max_fps 1000");
  }
  {
    // 65535x65535 in the sample description: the SPS's 64x48 wins, and that is what is checked
    // and decoded; with the SPS broken too, no size is left and the clip is refused.
    auto b = mp4;
    const size_t avc1 = Find(mp4, "avc1", Find(mp4, "stsd"));
    PutBe16(b, avc1 + 28, 65535);
    PutBe16(b, avc1 + 30, 65535);
    auto info = ProbeVideo(b, "s");
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->coded_width, 64);
    auto frames = DecodeFrames(b, "s", std::vector<int64_t>{0});
    ASSERT_TRUE(frames.ok());
    EXPECT_EQ((*frames)[0].width, 64);
    b[Find(mp4, "avcC") + 12] = 0x61;  // the SPS NAL becomes a slice
    ExpectRefused(ProbeVideo(b, "s").status(), StatusCode::kInvalidArgument, "s",
                  "declares no frame size");
  }
  {
    // A zero-length clip: no samples (refused, here for the frame rate FFmpeg is left with).
    auto b = mp4;
    PutBe32(b, stts + 8, 0);
    PutBe32(b, Find(mp4, "stsz") + 12, 0);
    EXPECT_EQ(ProbeVideo(b, "z").status().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(DecodeFrames(b, "z", std::vector<int64_t>{0}).ok());
  }
}

// Every prefix and many corruptions of every clip: a Status naming the label or frames of the
// clip's size; never a crash (ASan) or an allocation from a declared size.
TEST(HostileVideoTest, TruncatedAndCorrupted) {
  const char* kClips[] = {"h264_yuv420p.mp4", "vp9.webm",  "vp8.webm",          "mpeg4.avi",
                          "h264.ts",          "mjpeg.mov", "h264_rotate90.mp4", "av1.mp4"};
  VideoLimits limits;
  limits.max_side = 128;
  limits.max_frame_pixels = 128 * 128;
  const auto check = [&](const std::vector<uint8_t>& b, const std::string& what) {
    auto info = ProbeVideo(b, "x", limits);
    if (!info.ok()) {
      EXPECT_EQ(info.status().message().rfind("x: ", 0), 0u) << what << info.status().ToString();
    }
    auto frames = DecodeFrames(b, "x", Range(12), limits);
    if (!frames.ok()) {
      EXPECT_EQ(frames.status().message().rfind("x: ", 0), 0u) << what;
      return;
    }
    for (const auto& f : *frames) {
      EXPECT_LE(f.width, 128) << what;
      EXPECT_EQ(f.pixels.size(), static_cast<size_t>(f.width) * f.height * 3) << what;
    }
  };
  uint32_t seed = 12345;
  const auto next = [&] {
    seed ^= seed << 13;
    seed ^= seed >> 17;
    seed ^= seed << 5;
    return seed;
  };
  for (const char* name : kClips) {
    const auto clip = Fixture(name);
    for (size_t n = 0; n < clip.size(); n += 1 + clip.size() / 40) {
      check(std::vector<uint8_t>(clip.begin(), clip.begin() + static_cast<ptrdiff_t>(n)),
            std::string(name) + " cut at " + std::to_string(n));
    }
    for (int round = 0; round < 40; ++round) {
      auto b = clip;
      const int flips = 1 + static_cast<int>(next() % 8);
      for (int i = 0; i < flips; ++i)
        b[next() % b.size()] ^= static_cast<uint8_t>(1 + next() % 255);
      check(b, std::string(name) + " corrupted, round " + std::to_string(round));
    }
  }
}

}  // namespace
}  // namespace vls::video
