// How many weight streams the decode tiles of the Q8 expert products read (ADR 0033), chosen
// by measuring the products themselves while a model decodes.
//
// A decode tile (at most 3 activation rows) reads its weights once, so its speed is the read
// bandwidth one thread gets from the streams it keeps open. One stream per thread, prefetched
// near, was 1.4x faster on Zen 4 (ADR 0021); on Zen 5 the expert products of a sparse layer
// (8 products of 1.6-3.3 MB at int8, split over the threads) read 10-25% faster with four, while
// the long LM-head product reads the same either way. Which is faster depends on the core and
// on how long the streams are, and the difference (10-25%) is smaller than a shared host's
// drift between two runs (±20%): a start-up probe of a few milliseconds, or two runs compared,
// would choose on noise. So the tuner measures the real calls and alternates: while trying,
// calls go in pairs (a layer's gate_up and down products), one pair with one stream and the
// next with four, kTrialCalls timed calls each after kWarmupCalls untimed ones; then it keeps
// four only if their median bytes per second beat one stream's by kMargin. Alternating pairs
// share the host's state of the moment, so slow drift cancels; the median drops the calls
// that were descheduled. Both tilings give the same results bit for bit, so the choice and
// the trial never change an output.
//
// Thread safety: every method may be called from any thread (one mutex).
#ifndef VLSTACK_KERNELS_STREAM_TUNER_H_
#define VLSTACK_KERNELS_STREAM_TUNER_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace vls::kernels {

class StreamTuner {
 public:
  enum class Mode : uint8_t {
    kTrying,  // alternating pairs of calls, measuring
    kOne,     // one weight stream per thread (ADR 0021's default)
    kFour,    // four weight streams per thread
  };
  static constexpr int kWarmupCalls = 16;  // untimed: first touches of mapped weights
  static constexpr int kTrialCalls = 48;   // timed calls per stream count
  static constexpr double kMargin = 1.05;  // four streams must read 5% faster to be kept

  // `forced`: kOne or kFour fixes the choice without a trial (VLS_DECODE_STREAMS=1 or 4, for
  // A/B measurements); kTrying measures.
  explicit StreamTuner(Mode forced = Mode::kTrying)
      : mode_(forced), forced_(forced != Mode::kTrying) {}

  // The stream count for the next decode-shaped call (true: four streams) and its ticket for
  // Record; `timed` is false when the call needs no timing (the choice is made, or a warm-up
  // call).
  struct Ticket {
    bool four = false;
    bool timed = false;
  };
  Ticket Next();
  // The time a timed call took to read `bytes` of weights.
  void Record(const Ticket& ticket, int64_t bytes, double seconds);

  Mode mode() const;
  // One line for logs and `vlstack bench`, e.g. "Q8 expert decode streams: four (one 41.2 GB/s,
  // four 49.8 GB/s; medians of 48 calls each)", or "...: trying (12 of 96 calls measured)".
  std::string Report() const;

  // The mode VLS_DECODE_STREAMS asks for: "1" kOne, "4" kFour, unset or anything else kTrying.
  static Mode FromEnvironment();

 private:
  void Decide();  // REQUIRES: mu_ held, both trials full

  mutable std::mutex mu_;
  Mode mode_;
  bool forced_;
  int64_t calls_ = 0;                         // calls handed a ticket while trying
  std::vector<double> rate_one_, rate_four_;  // bytes per second of the timed calls
  double median_one_ = 0, median_four_ = 0;   // when decided by a trial
};

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_STREAM_TUNER_H_
