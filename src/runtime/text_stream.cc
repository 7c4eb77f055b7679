#include "runtime/text_stream.h"

#include <utility>

namespace vls {

TextStream::TextStream(const tok::Tokenizer* tokenizer, std::vector<std::string> stop)
    : decoder_(tokenizer, /*skip_special_tokens=*/true), matcher_(std::move(stop)) {}

bool TextStream::Emit(const std::string& decoded, TextDelta* out) {
  if (decoded.empty()) return false;
  StopMatcher::Result r = matcher_.Feed(decoded);
  out->text += r.text;
  if (!r.stopped) return false;
  out->finish = FinishReason::kStop;
  out->stop_index = r.stop_index;
  return true;
}

TextDelta TextStream::Next(const TokenEvent& event) {
  TextDelta out;
  if (finished_) return out;
  // A cancel's event carries no counts (the engine frees the slot without looking at it): the
  // usage stays what the request's last token said.
  if (event.token >= 0 || event.prompt_tokens > 0) {
    usage_.prompt_tokens = event.prompt_tokens;
    usage_.cached_tokens = event.cached_tokens;
    usage_.completion_tokens = event.generated_tokens;
  }
  // The token that made the engine stop is an EOS or stop id: its text is not part of the
  // answer. Every other token's text goes through the stop strings.
  const bool stop_token = event.finish == FinishReason::kStop && event.token >= 0;
  bool matched = false;
  if (event.token >= 0 && !stop_token) matched = Emit(decoder_.Feed(event.token), &out);
  if (!matched && event.finish != FinishReason::kNone) {
    // The end: flush an incomplete character (as U+FFFD), which may still complete a stop
    // string, then whatever the matcher holds.
    matched = Emit(decoder_.Finish(), &out);
    if (!matched) {
      out.text += matcher_.Finish();
      out.finish = event.finish;
      out.error = event.error;
      if (stop_token) out.stop_token = event.token;
    }
  }
  if (matched) out.cancel_request = event.finish == FinishReason::kNone;
  finished_ = out.finish != FinishReason::kNone;
  out.usage = usage_;
  return out;
}

}  // namespace vls
