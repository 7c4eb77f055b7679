// The back half of the request pipeline, per request: the engine's token events -> incremental
// UTF-8-safe detokenization (tok::StreamDecoder) -> stop strings (StopMatcher) -> text deltas
// with a finish reason and usage counts.
//
// What text appears: special tokens' text never does (as OpenAI-compatible servers do), and the
// token that finished a request by EOS or a stop token id is not shown either (vLLM's default;
// with ignore_eos an EOS token is an ordinary special token: still not shown). A stop string is
// cut with everything after it; the text before it is all shown.
//
// Finish reasons: "stop" when a stop string matched or the engine stopped on an EOS or stop
// token id (a stop string completed by the last token wins over "length"), "length",
// "cancelled", "error" (with the engine's message).
//
// Thread safety: one stream per request, fed by one thread at a time; the tokenizer must
// outlive it.
#ifndef VLSTACK_RUNTIME_TEXT_STREAM_H_
#define VLSTACK_RUNTIME_TEXT_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/batch_engine.h"
#include "runtime/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace vls {

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // tokens generated, the finishing EOS/stop token included
  int32_t cached_tokens = 0;      // prompt tokens served from prefix reuse
};

struct TextDelta {
  std::string text;  // may be empty (held back, or a special token)
  // kNone until the request's last delta.
  FinishReason finish = FinishReason::kNone;
  std::string error;        // with kError
  int stop_index = -1;      // the stop string that matched (index into the request's list)
  int32_t stop_token = -1;  // the EOS or stop token id that finished the request
  // The stream finished (a stop string matched) while the engine's request is still running:
  // cancel it (return false from the engine callback, or BatchEngine::Cancel).
  bool cancel_request = false;
  Usage usage;
};

class TextStream {
 public:
  // REQUIRES: ValidateStopStrings(stop) passed; `tokenizer` outlives the stream.
  TextStream(const tok::Tokenizer* tokenizer, std::vector<std::string> stop);

  // Consumes the next event of this request, in the engine's order. Events after the stream
  // finished (the engine's cancelled event after a stop string) return an empty delta with
  // finish kNone.
  TextDelta Next(const TokenEvent& event);

  bool finished() const { return finished_; }
  const Usage& usage() const { return usage_; }

 private:
  // Runs decoded text through the stop matcher into `out`; true when a stop string matched.
  bool Emit(const std::string& decoded, TextDelta* out);

  tok::StreamDecoder decoder_;
  StopMatcher matcher_;
  Usage usage_;
  bool finished_ = false;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_TEXT_STREAM_H_
