// A process-wide bound on image decoding: how many images decode at once and how many decoded
// pixels they may hold between them. Every DecodeImage takes a lease once the header has named
// its output size (before any large allocation) and returns it when the decode ends, so many
// concurrent requests carrying decompression bombs wait their turn instead of taking memory.
//
// A decode that cannot get its lease within the budget's wait is refused with
// ResourceExhausted (the server answers 429); a cancelled caller stops waiting at once.
//
// Thread safety: every method may be called from any thread.
#ifndef VLSTACK_IMAGE_DECODE_BUDGET_H_
#define VLSTACK_IMAGE_DECODE_BUDGET_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace vls::image {

// Polled between rows (and while waiting for a lease): true stops the decode with Cancelled.
// Null means never cancelled.
using CancelCheck = std::function<bool()>;

struct DecodeBudgetOptions {
  int max_decodes = 4;                     // images decoding at once
  int64_t max_pixels = int64_t{1} << 26;   // decoded pixels held at once (192 MiB as RGB)
  std::chrono::milliseconds wait{10'000};  // how long a decode waits for room
};

class DecodeBudget {
 public:
  explicit DecodeBudget(DecodeBudgetOptions options = {}) : options_(options) {}
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  // The budget every DecodeImage uses unless DecodeLimits names another.
  static DecodeBudget& Process();

  // One decode's share; returned when destroyed. Movable.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : budget_(o.budget_), pixels_(o.pixels_) { o.budget_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }
    void Release();

   private:
    friend class DecodeBudget;
    Lease(DecodeBudget* budget, int64_t pixels) : budget_(budget), pixels_(pixels) {}
    DecodeBudget* budget_ = nullptr;
    int64_t pixels_ = 0;
  };

  // Waits (up to options.wait, polling `cancelled`) until one more decode of `pixels` fits.
  // A decode larger than the whole pixel budget is admitted alone (when nothing else decodes),
  // so a caller's per-image limit, not this budget, decides what is too large.
  // ResourceExhausted after the wait, naming `label`; Cancelled when `cancelled` says so.
  StatusOr<Lease> Acquire(int64_t pixels, const std::string& label,
                          const CancelCheck& cancelled = {});

  struct Usage {
    int decodes = 0;
    int64_t pixels = 0;
    int waiting = 0;
  };
  Usage usage() const;
  const DecodeBudgetOptions& options() const { return options_; }

 private:
  void Return(int64_t pixels);

  const DecodeBudgetOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int decodes_ VLS_GUARDED_BY(mu_) = 0;
  int64_t pixels_ VLS_GUARDED_BY(mu_) = 0;
  int waiting_ VLS_GUARDED_BY(mu_) = 0;
};

}  // namespace vls::image

#endif  // VLSTACK_IMAGE_DECODE_BUDGET_H_
