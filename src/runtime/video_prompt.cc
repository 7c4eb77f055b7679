#include "runtime/video_prompt.h"

#include <string>
#include <utility>

#include "vision/video_preprocess.h"

namespace vls {

std::string VideoGroupsText(const VideoSummary& video, const VideoTokenTexts& tokens) {
  std::string out;
  for (double t : video.timestamps) {
    out += FormatTimestamp(t);
    out += tokens.vision_start;
    out += tokens.video_pad;
    out += tokens.vision_end;
  }
  return out;
}

StatusOr<std::string> ExpandVideoText(std::string_view text, std::span<const VideoSummary> videos,
                                      const VideoTokenTexts& tokens) {
  const std::string wrapper = tokens.vision_start + tokens.video_pad + tokens.vision_end;
  std::string out;
  size_t at = 0, k = 0;
  for (size_t hit = text.find(wrapper); hit != std::string_view::npos;
       hit = text.find(wrapper, at)) {
    if (k == videos.size()) {
      return InvalidArgument("the rendered prompt holds more videos (" + wrapper +
                             ") than the request's " + std::to_string(videos.size()) +
                             ": video tokens may not be written as text");
    }
    out.append(text.substr(at, hit - at));
    out += VideoGroupsText(videos[k++], tokens);
    at = hit + wrapper.size();
  }
  if (k != videos.size()) {
    return InvalidArgument("the rendered prompt holds " + std::to_string(k) + " video" +
                           (k == 1 ? "" : "s") + " (" + wrapper + ") but the request has " +
                           std::to_string(videos.size()) +
                           ": the chat template dropped a video part");
  }
  out.append(text.substr(at));
  return out;
}

StatusOr<std::vector<int32_t>> SpliceVideoGroups(const Qwen3Config& cfg,
                                                 std::span<const int32_t> ids,
                                                 std::span<const VideoSummary> videos,
                                                 const TimestampTokenizer& tokenize) {
  if (cfg.video_token_id < 0 || cfg.vision_start_token_id < 0 || cfg.vision_end_token_id < 0) {
    return InvalidArgument(
        "the model has no video tokens (config.json video_token_id / vision_start_token_id / "
        "vision_end_token_id): it cannot take videos");
  }
  std::vector<int32_t> out;
  out.reserve(ids.size());
  size_t k = 0;
  for (size_t s = 0; s < ids.size(); ++s) {
    if (ids[s] != cfg.video_token_id) {
      out.push_back(ids[s]);
      continue;
    }
    if (s == 0 || ids[s - 1] != cfg.vision_start_token_id || s + 1 >= ids.size() ||
        ids[s + 1] != cfg.vision_end_token_id) {
      return InvalidArgument("the video pad token at position " + std::to_string(s) +
                             " is not between vision_start and vision_end (write each video as "
                             "<|vision_start|><|video_pad|><|vision_end|>)");
    }
    if (k == videos.size()) {
      return InvalidArgument("the prompt has more video pad tokens than the " +
                             std::to_string(videos.size()) + " video" +
                             (videos.size() == 1 ? "" : "s") + " given");
    }
    out.pop_back();  // the vision_start, written again before each group
    for (double t : videos[k].timestamps) {
      VLS_ASSIGN_OR_RETURN(std::vector<int32_t> text, tokenize(FormatTimestamp(t)));
      out.insert(out.end(), text.begin(), text.end());
      out.insert(out.end(),
                 {cfg.vision_start_token_id, cfg.video_token_id, cfg.vision_end_token_id});
    }
    ++k;
    ++s;  // the vision_end is written with the last group
  }
  if (k != videos.size()) {
    return InvalidArgument("the prompt has " + std::to_string(k) + " video pad token" +
                           (k == 1 ? "" : "s") + " but " + std::to_string(videos.size()) +
                           " video" + (videos.size() == 1 ? " was" : "s were") +
                           " given (one per video, between vision_start and vision_end)");
  }
  return out;
}

}  // namespace vls
