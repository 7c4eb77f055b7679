// Named entries (docs/contracts.md §1): each has a fixed signature and runs a fixed list of stages.
//
// An entry's manifest is printed from the same Stage list that runs, so the manifest is what
// executes. Declaring DeepStack only adds entries; the stage lists of prefill.main,
// prefill_embeddings.main and decode_step.main do not depend on it.
#ifndef VLSTACK_RUNTIME_ENTRIES_H_
#define VLSTACK_RUNTIME_ENTRIES_H_

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/qwen3_model.h"
#include "runtime/deepstack.h"
#include "runtime/positions.h"

namespace vls {

inline constexpr std::string_view kEntryPrefill = "prefill.main";
inline constexpr std::string_view kEntryPrefillEmbeddings = "prefill_embeddings.main";
inline constexpr std::string_view kEntryPrefillDeepStack = "prefill_embeddings_deepstack.main";
inline constexpr std::string_view kEntryDecode = "decode_step.main";
inline constexpr std::string_view kEntryDiagnostics =
    "prefill_embeddings_deepstack_diagnostics.main";
// The serving engine's step (docs/contracts.md §4): the prefill chunks and the decode rows of one
// engine step in one ragged pass, so each weight is read once per step.
inline constexpr std::string_view kEntryStep = "step.main";

// Static bounds chosen at load: context capacity C, batch slots B, DeepStack Nmax (0 if none).
struct StaticBounds {
  int capacity = 0;
  int slots = 1;
  int nmax = 0;
};

// step.main's input: consecutive rows of the pass that belong to one sequence and take the same
// kind of input (a prefill chunk, or a decode run).
struct EntrySegment {
  enum class Logits { kNone, kLast, kAll };
  int64_t rows = 0;
  std::span<const int32_t> tokens;              // [rows] token input, or
  std::span<const float> embeddings;            // [rows, H] embedding input
  const DeepStackPayload* deepstack = nullptr;  // positions relative to the segment's first row
  Logits logits = Logits::kNone;                // which of its rows get logits
};

// The state one entry call works on. The caller validates the inputs and prepares `rows`
// (one per sequence row of the pass) before Run; stages cannot fail.
struct EntryRun {
  std::span<const int32_t> tokens;     // prefill.main: [S]; decode_step.main: [B]
  std::span<const float> embeddings;   // embeddings entries: [S, H]
  std::vector<EntrySegment> segments;  // step.main: [P], in row order, covering the M rows
  const DeepStackPayload* deepstack = nullptr;
  std::vector<ForwardRow> rows;  // [M]
  bool all_logits = false;       // prefill: logits for every row (forward --all-logits)
  bool skip_logits = false;      // prefill chunk that does not end the prompt: no logits
  // Tooling: sees each layer's output (after any hook) and a sparse layer's routing
  // (LayerHook::OnRouting, from inside the layer stage).
  LayerHook* observer = nullptr;

  std::vector<float> x;  // [M, H] residual stream
  // [V], [S, V] (all_logits), [B, V] (decode), or step.main's rows with logits in row order
  std::vector<float> logits;
  std::vector<std::vector<float>> hidden_states;  // diagnostics: [L] × [S, H], post-hook
};

struct Stage {
  std::string name;   // e.g. "layer.3"
  std::string shape;  // e.g. "f32[S,H] -> f32[S,H]"
  std::function<void(EntryRun&)> run;
};

struct ArgSpec {
  std::string name;
  std::string type;  // e.g. "i32[S<=C]"
};

class Entry {
 public:
  Entry(std::string name, std::vector<ArgSpec> inputs, std::vector<ArgSpec> outputs,
        std::vector<Stage> stages)
      : name_(std::move(name)),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        stages_(std::move(stages)) {}
  const std::string& name() const { return name_; }
  // Canonical text: signature then the ordered stages with shapes.
  std::string Manifest() const;
  void Run(EntryRun& run) const {
    for (const Stage& s : stages_) s.run(run);
  }

 private:
  std::string name_;
  std::vector<ArgSpec> inputs_, outputs_;
  std::vector<Stage> stages_;
};

// Runs an entry, turning anything it throws (out of memory, a worker's exception carried back by
// the thread pool) into a status that names `pass`.
Status RunEntryGuarded(const Entry& entry, EntryRun& run, const char* pass);

// The entries of one loaded model. Immutable; Run may be called from several threads on
// disjoint caches.
class EntrySet {
 public:
  // REQUIRES: `model` outlives the set.
  static EntrySet Build(const Qwen3Model& model, const StaticBounds& bounds);
  // nullptr when the entry does not exist (the DeepStack entries without DeepStack).
  const Entry* Find(std::string_view name) const;
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

}  // namespace vls

#endif  // VLSTACK_RUNTIME_ENTRIES_H_
