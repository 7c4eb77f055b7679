#include "image/decode_budget.h"

#include <algorithm>

namespace vls::image {

DecodeBudget& DecodeBudget::Process() {
  static DecodeBudget* const budget =
      new DecodeBudget();  // never destroyed: leases may outlive main
  return *budget;
}

DecodeBudget::Lease& DecodeBudget::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    Release();
    budget_ = o.budget_;
    pixels_ = o.pixels_;
    o.budget_ = nullptr;
  }
  return *this;
}

void DecodeBudget::Lease::Release() {
  if (budget_ != nullptr) budget_->Return(pixels_);
  budget_ = nullptr;
}

void DecodeBudget::Return(int64_t pixels) {
  std::lock_guard<std::mutex> lock(mu_);
  --decodes_;
  pixels_ -= pixels;
  cv_.notify_all();
}

StatusOr<DecodeBudget::Lease> DecodeBudget::Acquire(int64_t pixels, const std::string& label,
                                                    const CancelCheck& cancelled) {
  // Cancellation is polled: the flag a caller passes has no way to wake this wait.
  constexpr std::chrono::milliseconds kPoll{50};
  const auto deadline = std::chrono::steady_clock::now() + options_.wait;
  std::unique_lock<std::mutex> lock(mu_);
  ++waiting_;
  for (;;) {
    const bool fits = decodes_ == 0 ||
                      (decodes_ < options_.max_decodes && pixels_ + pixels <= options_.max_pixels);
    if (fits) break;
    if (cancelled && cancelled()) {
      --waiting_;
      return Cancelled(label + ": cancelled while waiting to decode");
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      --waiting_;
      return ResourceExhausted(label + ": the server is busy decoding other images (" +
                               std::to_string(decodes_) + " decodes, " + std::to_string(pixels_) +
                               " pixels in flight; " + std::to_string(options_.max_decodes) +
                               " decodes and " + std::to_string(options_.max_pixels) +
                               " pixels allowed); retry later");
    }
    cv_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(kPoll, deadline - now));
  }
  --waiting_;
  ++decodes_;
  pixels_ += pixels;
  return Lease(this, pixels);
}

DecodeBudget::Usage DecodeBudget::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Usage{decodes_, pixels_, waiting_};
}

}  // namespace vls::image
