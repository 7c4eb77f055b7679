// Routing counts of a mixture-of-experts model's sparse-layer calls (ADR 0027), by the number
// of rows M a call routed: how many calls, and how many distinct experts they read in all.
// `vlstack bench --slots B` reads the calls of exactly B rows, the decode steps where every
// slot decodes, to report the experts one such step reads per layer (random routing of B rows
// of top-k over E experts reads E·(1 - (1 - k/E)^B) on average: about 52 of 128 for 8 rows of
// top 8).
//
// Thread safety: Record and At may run concurrently (relaxed atomics: the counts are for
// reports, read after the calls they count have returned).
#ifndef VLSTACK_MODEL_MOE_ROUTING_STATS_H_
#define VLSTACK_MODEL_MOE_ROUTING_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>

namespace vls {

class MoeRoutingStats {
 public:
  // Calls of more rows than this share the last bucket.
  static constexpr int64_t kRows = 64;

  struct Count {
    uint64_t calls = 0;
    uint64_t experts = 0;  // distinct experts, summed over the calls
  };

  // One call that routed `rows` rows to `distinct_experts` different experts.
  void Record(int64_t rows, int64_t distinct_experts);
  // What calls of `rows` rows (> kRows: all calls above kRows) have recorded so far.
  Count At(int64_t rows) const;

 private:
  static size_t Bucket(int64_t rows);
  std::array<std::atomic<uint64_t>, kRows + 2> calls_{};
  std::array<std::atomic<uint64_t>, kRows + 2> experts_{};
};

}  // namespace vls

#endif  // VLSTACK_MODEL_MOE_ROUTING_STATS_H_
