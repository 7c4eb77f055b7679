// One request's reply as text, fed the engine's events: the one consumer of TextStream that the
// server (server/generation_service.cc), the C ABI (capi_internal.h), `vlstack run` and
// `vlstack batch` share, so that each turns events into text, stop-string cuts and cancels the
// same way.
//
//   engine event -> Feed -> TextStream::Next -> the delta (handed out, or its text collected)
//                        -> the reply's end: finish reason, error, stop index / token, usage
//                        -> the engine callback's answer (false: a stop string ended the reply
//                           while the engine still runs the request, so the engine cancels it)
//
// Events after the reply finished (the engine's cancelled event that follows a stop string)
// change nothing.
//
// Thread safety: one per request, fed by one thread at a time (the callers lock).
#ifndef VLSTACK_RUNTIME_REPLY_TEXT_H_
#define VLSTACK_RUNTIME_REPLY_TEXT_H_

#include <cstdint>
#include <string>

#include "runtime/batch_engine.h"
#include "runtime/text_stream.h"

namespace vls {

class ReplyText {
 public:
  explicit ReplyText(TextStream stream) : stream_(std::move(stream)) {}

  // Feeds the request's next event, in the engine's order. With `delta`, the event's delta is
  // moved there (an empty one after the reply finished) and its text is not collected; without,
  // its text is appended to the text that TakeText() returns. Returns what the engine callback
  // returns: false exactly when this event's stop string finished the reply while the engine
  // still runs the request.
  bool Feed(const TokenEvent& event, TextDelta* delta = nullptr);

  // The text collected since the last call (Feed without a delta), and forgets it.
  std::string TakeText();
  // The text collected and not taken.
  const std::string& text() const { return text_; }

  // Whether the reply's last delta was produced (a stop string, or the engine's finish).
  bool finished() const { return finish_ != FinishReason::kNone; }
  // kStop when a stop string matched or the engine stopped on an EOS or stop token id; else the
  // engine's reason. kNone until finished.
  FinishReason finish() const { return finish_; }
  const std::string& error() const { return error_; }  // with kError: the engine's message
  int stop_index() const { return stop_index_; }       // the stop string that matched, or -1
  int32_t stop_token() const { return stop_token_; }   // the EOS or stop token id, or -1
  const Usage& usage() const { return stream_.usage(); }

 private:
  TextStream stream_;
  std::string text_;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  int stop_index_ = -1;
  int32_t stop_token_ = -1;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_REPLY_TEXT_H_
