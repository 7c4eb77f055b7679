#include "runtime/stop_matcher.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "tokenizer/utf8.h"

namespace vls {

Status ValidateStopStrings(std::span<const std::string> stop) {
  if (stop.size() > kMaxStopStrings) {
    return InvalidArgument("stop: " + std::to_string(stop.size()) + " stop strings, at most " +
                           std::to_string(kMaxStopStrings) + " are allowed");
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    const std::string name = "stop[" + std::to_string(i) + "]";
    if (stop[i].empty()) return InvalidArgument(name + " is empty");
    if (stop[i].size() > kMaxStopStringBytes) {
      return InvalidArgument(name + " is " + std::to_string(stop[i].size()) +
                             " bytes long, at most " + std::to_string(kMaxStopStringBytes) +
                             " are allowed");
    }
    if (!tok::IsValidUtf8(stop[i])) return InvalidArgument(name + " is not valid UTF-8");
  }
  return Status::Ok();
}

StopMatcher::StopMatcher(std::vector<std::string> stop) {
  automata_.reserve(stop.size());
  for (std::string& s : stop) {
    Automaton a;
    a.pattern = std::move(s);
    a.failure.assign(a.pattern.size(), 0);
    for (size_t i = 1, k = 0; i < a.pattern.size(); ++i) {
      while (k > 0 && a.pattern[i] != a.pattern[k]) k = a.failure[k - 1];
      if (a.pattern[i] == a.pattern[k]) ++k;
      a.failure[i] = k;
    }
    automata_.push_back(std::move(a));
  }
}

bool StopMatcher::Step(Automaton& a, char c) {
  while (a.state > 0 && a.pattern[a.state] != c) a.state = a.failure[a.state - 1];
  if (a.pattern[a.state] == c) ++a.state;
  if (a.state < a.pattern.size()) return false;
  a.state = a.failure[a.state - 1];  // keep scanning: an earlier-starting match may follow
  return true;
}

StopMatcher::Result StopMatcher::Feed(std::string_view delta) {
  Result r;
  if (stopped_ || finished_) return r;
  size_t longest = 0;
  for (const Automaton& a : automata_) longest = std::max(longest, a.pattern.size());
  // Every partial match lies inside held_ (held_ is at least as long as any automaton's
  // state), so a match completing in this delta begins at a held_ offset >= 0.
  const size_t base = held_.size();
  held_.append(delta);
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  size_t best_start = kNone;
  int best = -1;
  for (size_t i = 0; i < delta.size(); ++i) {
    const size_t end = base + i + 1;  // one past the byte just read, in held_
    // A match ending here or later begins after best_start: nothing left to find.
    if (best >= 0 && end > best_start + longest) break;
    for (size_t j = 0; j < automata_.size(); ++j) {
      if (!Step(automata_[j], delta[i])) continue;
      const size_t start = end - automata_[j].pattern.size();
      if (start < best_start) {
        best_start = start;
        best = static_cast<int>(j);
      }
    }
  }
  if (best >= 0) {
    r.text = held_.substr(0, best_start);
    r.stopped = true;
    r.stop_index = best;
    stopped_ = true;
    held_.clear();
    return r;
  }
  size_t keep = 0;  // the longest suffix that may still grow into a match
  for (const Automaton& a : automata_) keep = std::max(keep, a.state);
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::Finish() {
  finished_ = true;
  for (Automaton& a : automata_) a.state = 0;
  return std::exchange(held_, std::string());
}

}  // namespace vls
