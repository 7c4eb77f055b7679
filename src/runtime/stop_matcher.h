// Stop strings over streamed text: cut exactly where the first stop string begins, across
// token boundaries, without ever emitting text that later turns out to be part of a match.
//
// Text arrives in deltas (each valid UTF-8: tok::StreamDecoder holds incomplete characters
// back). Feed returns the text that is safe now and holds back only the longest suffix that is
// still a proper prefix of some stop string. When a stop string completes, Feed returns the
// text before it and reports which one matched; nothing is emitted after that. Finish releases
// what is held (no stop string can complete any more).
//
// Which match wins: among the matches that complete within one Feed, the one that begins
// earliest (for equal starts the shorter, which completes first). A stop string that could still
// complete with a later delta does not delay a match that is already complete, so generation stops
// as soon as any stop string appears. Because stop strings and the text are valid UTF-8, every cut
// falls on a character boundary.
//
// Matching is one KMP automaton per stop string: O(delta bytes x stop strings) per Feed,
// whatever the stop strings' overlaps.
//
// Thread safety: one matcher per request, used by one thread at a time.
#ifndef VLSTACK_RUNTIME_STOP_MATCHER_H_
#define VLSTACK_RUNTIME_STOP_MATCHER_H_

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vls {

// Bounds on what a request may ask for (generous next to OpenAI's 4 strings).
inline constexpr size_t kMaxStopStrings = 32;
inline constexpr size_t kMaxStopStringBytes = 1024;

// Refuses, naming the index: an empty stop string, one that is not valid UTF-8 or longer than
// kMaxStopStringBytes, and more than kMaxStopStrings of them. Duplicates are allowed.
Status ValidateStopStrings(std::span<const std::string> stop);

class StopMatcher {
 public:
  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string completed; `text` ends right before it
    int stop_index = -1;   // which one (index into the constructor's list) when stopped
  };

  // REQUIRES: ValidateStopStrings(stop) passed.
  explicit StopMatcher(std::vector<std::string> stop);

  // Adds a delta. After a match every call returns an empty result with stopped = false.
  Result Feed(std::string_view delta);
  // Returns the held-back text and ends the stream (empty after a match).
  std::string Finish();

  bool stopped() const { return stopped_; }
  size_t held_bytes() const { return held_.size(); }

 private:
  struct Automaton {
    std::string pattern;
    std::vector<size_t> failure;  // KMP: longest proper border of pattern[0, i]
    size_t state = 0;             // bytes of pattern matched at the end of the text so far
  };
  // Advances `a` over byte c; true when the whole pattern just matched.
  static bool Step(Automaton& a, char c);

  std::vector<Automaton> automata_;
  std::string held_;  // text fed but not yet emitted
  bool stopped_ = false;
  bool finished_ = false;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_STOP_MATCHER_H_
