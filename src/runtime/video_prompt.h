// Video prompts (docs/video.md, docs/contracts.md §D.6): Qwen3-VL marks time with text. A video
// written in a prompt as vision_start video_pad vision_end becomes, for each of its T temporal
// groups g, the text "<t_g seconds>" (one decimal, Qwen3VLProcessor's f"<{t:.1f} seconds>")
// followed by vision_start, one video pad and vision_end. ExpandVisualPads (image_prompt.h)
// then expands each group's pad to h·w / merge² pads, and get_rope_index positions each group
// as a [1, h, w] image.
//
// Two forms of the same rewrite:
//   ExpandVideoText    on the rendered chat template, before tokenization, as transformers
//                      does it (so the timestamp text tokenizes with its neighbours exactly as
//                      in transformers);
//   SpliceVideoGroups  on token ids (`forward --video`, whose input is ids): each group's
//                      timestamp text is tokenized on its own and spliced in. The two agree
//                      whenever the text before the video ends at a special token or a newline,
//                      as the chat template writes it.
#ifndef VLSTACK_RUNTIME_VIDEO_PROMPT_H_
#define VLSTACK_RUNTIME_VIDEO_PROMPT_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/qwen3_config.h"
#include "runtime/image_prompt.h"

namespace vls {

// The texts of the three special tokens a video is written with.
struct VideoTokenTexts {
  std::string vision_start = "<|vision_start|>";
  std::string video_pad = "<|video_pad|>";
  std::string vision_end = "<|vision_end|>";
};

// "<t seconds>" + vision_start + video_pad + vision_end for each group of `video`.
std::string VideoGroupsText(const VideoSummary& video, const VideoTokenTexts& tokens);

// `text` with its k-th vision_start video_pad vision_end replaced by VideoGroupsText of
// videos[k]. InvalidArgument when the text holds a different number of them than there are
// videos (a template that drops a video, or video tokens written as text).
StatusOr<std::string> ExpandVideoText(std::string_view text, std::span<const VideoSummary> videos,
                                      const VideoTokenTexts& tokens);

// Tokenizes a timestamp's text ("<0.5 seconds>").
using TimestampTokenizer = std::function<StatusOr<std::vector<int32_t>>(const std::string&)>;

// `ids` with each [vision_start, video_pad, vision_end] (the k-th standing for videos[k])
// replaced by, for each group, the tokens of its timestamp text and [vision_start, video_pad,
// vision_end]. InvalidArgument for a video pad that is not between vision_start and vision_end,
// or a number of video pads that differs from the number of videos.
StatusOr<std::vector<int32_t>> SpliceVideoGroups(const Qwen3Config& cfg,
                                                 std::span<const int32_t> ids,
                                                 std::span<const VideoSummary> videos,
                                                 const TimestampTokenizer& tokenize);

}  // namespace vls

#endif  // VLSTACK_RUNTIME_VIDEO_PROMPT_H_
