#include "kernels/stream_tuner.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace vls::kernels {

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

}  // namespace

StreamTuner::Ticket StreamTuner::Next() {
  std::lock_guard<std::mutex> lock(mu_);
  if (mode_ != Mode::kTrying) return {mode_ == Mode::kFour, false};
  const int64_t i = calls_++;
  // Pairs of calls: (one, one), (four, four), ... so a layer's gate_up and down products take
  // the same count.
  const bool four = (i / 2) % 2 == 1;
  return {four, i >= kWarmupCalls};
}

void StreamTuner::Record(const Ticket& ticket, int64_t bytes, double seconds) {
  if (!ticket.timed || bytes <= 0 || !(seconds > 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (mode_ != Mode::kTrying) return;
  std::vector<double>& rates = ticket.four ? rate_four_ : rate_one_;
  if (rates.size() < static_cast<size_t>(kTrialCalls)) {
    rates.push_back(static_cast<double>(bytes) / seconds);
  }
  if (rate_one_.size() == static_cast<size_t>(kTrialCalls) &&
      rate_four_.size() == static_cast<size_t>(kTrialCalls)) {
    Decide();
  }
}

void StreamTuner::Decide() {
  median_one_ = Median(rate_one_);
  median_four_ = Median(rate_four_);
  mode_ = median_four_ >= kMargin * median_one_ ? Mode::kFour : Mode::kOne;
}

StreamTuner::Mode StreamTuner::mode() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mode_;
}

std::string StreamTuner::Report() const {
  std::lock_guard<std::mutex> lock(mu_);
  char line[256];
  if (mode_ == Mode::kTrying) {
    std::snprintf(line, sizeof line, "Q8 expert decode streams: trying (%zu of %d calls measured)",
                  rate_one_.size() + rate_four_.size(), 2 * kTrialCalls);
  } else if (forced_) {
    std::snprintf(line, sizeof line, "Q8 expert decode streams: %s (VLS_DECODE_STREAMS)",
                  mode_ == Mode::kFour ? "four" : "one");
  } else {
    std::snprintf(line, sizeof line,
                  "Q8 expert decode streams: %s (one %.1f GB/s, four %.1f GB/s; medians of %d "
                  "calls each)",
                  mode_ == Mode::kFour ? "four" : "one", median_one_ / 1e9, median_four_ / 1e9,
                  kTrialCalls);
  }
  return line;
}

StreamTuner::Mode StreamTuner::FromEnvironment() {
  const char* env = std::getenv("VLS_DECODE_STREAMS");
  if (env == nullptr) return Mode::kTrying;
  if (std::strcmp(env, "1") == 0) return Mode::kOne;
  if (std::strcmp(env, "4") == 0) return Mode::kFour;
  return Mode::kTrying;
}

}  // namespace vls::kernels
