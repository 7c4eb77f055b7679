#include "runtime/reply_text.h"

#include <utility>

namespace vls {

bool ReplyText::Feed(const TokenEvent& event, TextDelta* delta) {
  if (finished()) {
    if (delta != nullptr) *delta = TextDelta{};
    return true;  // the engine's own finish after a stop string: nothing more to say
  }
  TextDelta d = stream_.Next(event);
  if (d.finish != FinishReason::kNone) {
    finish_ = d.finish;
    error_ = d.error;
    stop_index_ = d.stop_index;
    stop_token_ = d.stop_token;
  }
  const bool keep = !d.cancel_request;
  if (delta != nullptr) {
    *delta = std::move(d);
  } else {
    text_ += d.text;
  }
  return keep;
}

std::string ReplyText::TakeText() {
  std::string out = std::move(text_);
  text_.clear();
  return out;
}

}  // namespace vls
