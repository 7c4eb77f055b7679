// Video prompts: the timestamped groups written into the text or spliced into ids, the pads of
// images and video groups expanded in prompt order, and what would drop or invent a video.
#include "runtime/video_prompt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/image_prompt.h"

namespace vls {
namespace {

constexpr int32_t kImagePad = 10, kVideoPad = 11, kVisionStart = 12, kVisionEnd = 13;

Qwen3Config Config() {
  Qwen3Config cfg;
  cfg.image_token_id = kImagePad;
  cfg.video_token_id = kVideoPad;
  cfg.vision_start_token_id = kVisionStart;
  cfg.vision_end_token_id = kVisionEnd;
  cfg.spatial_merge_size = 2;
  return cfg;
}

VideoSummary Video(int32_t t, int32_t h, int32_t w, std::vector<double> timestamps) {
  VideoSummary v;
  v.grid = {t, h, w};
  v.timestamps = std::move(timestamps);
  return v;
}

TEST(VideoPrompt, TextHoldsOneTimestampedGroupPerTemporalGroup) {
  const std::vector<VideoSummary> videos = {Video(2, 4, 4, {0.25, 1.75}), Video(1, 2, 2, {3.0})};
  auto text = ExpandVideoText(
      "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>and "
      "<|vision_start|><|video_pad|><|vision_end|>?",
      videos, VideoTokenTexts{});
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  // 0.25 prints as 0.2 and 1.75 as 1.8: %.1f of the binary value, half to even, as Python.
  EXPECT_EQ(*text,
            "<|im_start|>user\n<0.2 seconds><|vision_start|><|video_pad|><|vision_end|>"
            "<1.8 seconds><|vision_start|><|video_pad|><|vision_end|>and "
            "<3.0 seconds><|vision_start|><|video_pad|><|vision_end|>?");
}

TEST(VideoPrompt, TextWithAnotherNumberOfVideosIsRefused) {
  const std::vector<VideoSummary> one = {Video(1, 2, 2, {0.5})};
  auto dropped = ExpandVideoText("no video here", one, VideoTokenTexts{});
  ASSERT_FALSE(dropped.ok());
  EXPECT_NE(dropped.status().message().find("dropped a video"), std::string::npos);
  auto invented = ExpandVideoText(
      "<|vision_start|><|video_pad|><|vision_end|><|vision_start|><|video_pad|><|vision_end|>", one,
      VideoTokenTexts{});
  ASSERT_FALSE(invented.ok());
  EXPECT_NE(invented.status().message().find("more videos"), std::string::npos);
}

TEST(VideoPrompt, SplicedIdsCarryEachGroupsTimestampTokens) {
  const std::vector<VideoSummary> videos = {Video(2, 4, 4, {0.5, 2.5})};
  std::vector<std::string> seen;
  const TimestampTokenizer tokenize = [&](const std::string& t) -> StatusOr<std::vector<int32_t>> {
    seen.push_back(t);
    return std::vector<int32_t>{100, static_cast<int32_t>(100 + seen.size())};
  };
  const std::vector<int32_t> ids = {1, kVisionStart, kVideoPad, kVisionEnd, 2};
  auto out = SpliceVideoGroups(Config(), ids, videos, tokenize);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(seen, (std::vector<std::string>{"<0.5 seconds>", "<2.5 seconds>"}));
  EXPECT_EQ(*out, (std::vector<int32_t>{1, 100, 101, kVisionStart, kVideoPad, kVisionEnd, 100, 102,
                                        kVisionStart, kVideoPad, kVisionEnd, 2}));
}

TEST(VideoPrompt, SpliceRefusesLoosePadsAndCountMismatches) {
  const std::vector<VideoSummary> videos = {Video(1, 2, 2, {0.5})};
  const TimestampTokenizer tokenize = [](const std::string&) -> StatusOr<std::vector<int32_t>> {
    return std::vector<int32_t>{100};
  };
  const std::vector<int32_t> loose = {1, kVideoPad, kVisionEnd};
  EXPECT_NE(SpliceVideoGroups(Config(), loose, videos, tokenize)
                .status()
                .message()
                .find("not between vision_start and vision_end"),
            std::string::npos);
  const std::vector<int32_t> none = {1, 2};
  EXPECT_NE(SpliceVideoGroups(Config(), none, videos, tokenize)
                .status()
                .message()
                .find("0 video pad tokens but 1 video was given"),
            std::string::npos);
  const std::vector<int32_t> two = {kVisionStart, kVideoPad, kVisionEnd,
                                    kVisionStart, kVideoPad, kVisionEnd};
  EXPECT_FALSE(SpliceVideoGroups(Config(), two, videos, tokenize).ok());
}

TEST(VisualPads, ImagesAndVideoGroupsExpandInPromptOrder) {
  VisualFeatures f;
  f.hidden = 1;
  const std::vector<float> img(6, 1.0f), vid(8, 2.0f);  // [1,4,6] -> 6 rows; [2,4,4] -> 8
  f.AppendVideo(Video(2, 4, 4, {0.5, 1.5}), 8, vid, {});
  f.Append({1, 4, 6}, 6, img, {});
  ASSERT_EQ(f.grids.size(), 3u);
  EXPECT_EQ(f.kinds, (std::vector<VisualKind>{VisualKind::kVideoGroup, VisualKind::kVideoGroup,
                                              VisualKind::kImage}));
  EXPECT_EQ(f.grids[0], (GridThw{1, 4, 4}));
  EXPECT_EQ(f.VideoGrids(), (std::vector<GridThw>{{2, 4, 4}}));
  EXPECT_EQ(f.ImageGrids(), (std::vector<GridThw>{{1, 4, 6}}));
  EXPECT_EQ(f.tokens, 14);

  const std::vector<int32_t> ids = {
      1,         kVisionStart, kVideoPad,    kVisionEnd, 7,         kVisionStart,
      kVideoPad, kVisionEnd,   kVisionStart, kImagePad,  kVisionEnd};
  auto e = ExpandVisualPads(Config(), ids, f.grids, f.kinds);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(std::count(e->begin(), e->end(), kVideoPad), 8);
  EXPECT_EQ(std::count(e->begin(), e->end(), kImagePad), 6);
  EXPECT_EQ(e->size(), ids.size() - 3 + 14);

  // The kinds must match in order: an image pad where a video group stands is refused.
  const std::vector<int32_t> swapped = {kVisionStart, kImagePad,  kVisionEnd,   kVisionStart,
                                        kVideoPad,    kVisionEnd, kVisionStart, kVideoPad};
  auto bad = ExpandVisualPads(Config(), swapped, f.grids, f.kinds);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("visual item 0 is a video"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace vls
