#include "runtime/entries.h"

#include <algorithm>
#include <exception>
#include <new>
#include <sstream>

namespace vls {

std::string Entry::Manifest() const {
  std::ostringstream o;
  o << "entry " << name_ << "\n";
  for (const ArgSpec& a : inputs_) o << "  in  " << a.name << " " << a.type << "\n";
  for (const ArgSpec& a : outputs_) o << "  out " << a.name << " " << a.type << "\n";
  for (size_t i = 0; i < stages_.size(); ++i) {
    o << "  stage " << i << " " << stages_[i].name << " " << stages_[i].shape << "\n";
  }
  return o.str();
}

namespace {

// Builders for the shared stages. Every entry that runs decoder layers uses LayerStages, so
// the diagnostics entry runs the production layer loop and hook, never a copy.
struct Builder {
  const Qwen3Model& model;
  StaticBounds b;

  int64_t H() const { return model.config().hidden; }

  std::string LayerText(const char* rows, int layer) const {
    const Qwen3Config& c = model.config();
    std::ostringstream o;
    o << "f32[" << rows << ",H] -> f32[" << rows << ",H] (rmsnorm, q/k/v proj, q/k rmsnorm, rope "
      << PositionModeName(c.position_mode);
    if (c.position_mode == PositionMode::kMrope) {
      o << (c.mrope_layout == MropeLayout::kInterleaved ? "-interleaved[" : "-chunked[")
        << c.mrope_section[0] << "," << c.mrope_section[1] << "," << c.mrope_section[2] << "]";
    }
    o << ", gqa " << c.heads << "/" << c.kv_heads << " causal on cache index, o proj, residual, "
      << "rmsnorm, ";
    if (c.IsSparseLayer(layer)) {
      // The routing goes to the run's observer (LayerHook::OnRouting), as forward --diagnostics
      // records it.
      o << "moe mlp (router f32, softmax top-" << c.moe->top_k << "/" << c.moe->experts
        << (c.moe->norm_topk_prob ? " renormalised" : "") << ", swiglu experts I_e "
        << c.moe->expert_intermediate << ", routing to observer)";
    } else {
      o << "swiglu mlp";
    }
    o << ", residual)";
    return o.str();
  }

  Stage Embed(const char* rows) const {
    const Qwen3Model* m = &model;
    return {"embed", std::string("i32[") + rows + "] -> f32[" + rows + ",H]", [m](EntryRun& r) {
              r.x.assign(r.tokens.size() * static_cast<size_t>(m->config().hidden), 0.0f);
              m->Embed(r.tokens, r.x.data());
            }};
  }

  Stage CopyEmbeddings() const {
    return {"load_embeddings", "f32[S,H]",
            [](EntryRun& r) { r.x.assign(r.embeddings.begin(), r.embeddings.end()); }};
  }

  // step.main's inputs: each segment's rows embedded from its tokens or copied from its
  // embeddings.
  Stage GatherSegments() const {
    const Qwen3Model* m = &model;
    return {"gather_segments", "segments[P] (i32[n] tokens | f32[n,H] embeddings) -> f32[M,H]",
            [m](EntryRun& r) {
              const size_t H = static_cast<size_t>(m->config().hidden);
              r.x.assign(r.rows.size() * H, 0.0f);
              size_t row = 0;
              for (const EntrySegment& seg : r.segments) {
                float* dst = r.x.data() + row * H;
                if (seg.embeddings.empty()) {
                  m->Embed(seg.tokens, dst);
                } else {
                  std::copy(seg.embeddings.begin(), seg.embeddings.end(), dst);
                }
                row += static_cast<size_t>(seg.rows);
              }
            }};
  }

  // The DeepStack add after layer l: the whole pass's payload, or (step.main) each segment's
  // payload into its own rows.
  Stage DeepStackAdd(size_t k, int l, bool segmented) const {
    const int64_t H = this->H();
    std::string shape = "f32[K,Nv<=Nmax=" + std::to_string(b.nmax) + ",H][" + std::to_string(k) +
                        "] += into rows visual_positions[Nv] after layer " + std::to_string(l);
    if (segmented) {
      shape += ", per segment into its rows";
      return {"deepstack_add." + std::to_string(k), shape, [H, l](EntryRun& r) {
                int64_t row = 0;
                for (const EntrySegment& seg : r.segments) {
                  if (seg.deepstack != nullptr) {
                    DeepStackHook hook(*seg.deepstack, H);
                    hook.AfterLayer(l, r.x.data() + row * H, seg.rows);
                  }
                  row += seg.rows;
                }
              }};
    }
    return {"deepstack_add." + std::to_string(k), shape, [H, l](EntryRun& r) {
              DeepStackHook hook(*r.deepstack, H);
              hook.AfterLayer(l, r.x.data(), static_cast<int64_t>(r.rows.size()));
            }};
  }

  // Layers, with the DeepStack add after each target layer and (diagnostics) a capture.
  void Layers(std::vector<Stage>& out, const char* rows, bool deepstack, bool capture,
              bool segmented = false) const {
    const Qwen3Model* m = &model;
    const std::vector<int> targets =
        deepstack ? model.config().deepstack->target_layers : std::vector<int>();
    for (int l = 0; l < model.config().layers; ++l) {
      out.push_back({"layer." + std::to_string(l), LayerText(rows, l),
                     [m, l](EntryRun& r) { m->RunLayer(l, r.x.data(), r.rows, r.observer); }});
      for (size_t k = 0; k < targets.size(); ++k) {
        if (targets[k] != l) continue;
        out.push_back(DeepStackAdd(k, l, segmented));
      }
      if (capture) {
        out.push_back({"capture_hidden." + std::to_string(l), "f32[S,H]",
                       [](EntryRun& r) { r.hidden_states.push_back(r.x); }});
      }
      out.push_back({"observe." + std::to_string(l),
                     "f32[" + std::string(rows) + ",H] (tooling hook; no-op unless attached)",
                     [l](EntryRun& r) {
                       if (r.observer)
                         r.observer->AfterLayer(l, r.x.data(), static_cast<int64_t>(r.rows.size()));
                     }});
    }
  }

  // step.main's head: final norm and LM head over the rows its segments ask logits for.
  Stage SegmentHead() const {
    const Qwen3Model* m = &model;
    return {"final_norm_lm_head",
            "f32[M,H] rows with logits (a decode run's every row, a chunk's last row when it ends "
            "its prompt) -> f32[R,V]",
            [m](EntryRun& r) {
              const int64_t H = m->config().hidden;
              std::vector<int64_t> picked;
              int64_t row = 0;
              for (const EntrySegment& seg : r.segments) {
                if (seg.logits == EntrySegment::Logits::kAll) {
                  for (int64_t i = 0; i < seg.rows; ++i) picked.push_back(row + i);
                } else if (seg.logits == EntrySegment::Logits::kLast) {
                  picked.push_back(row + seg.rows - 1);
                }
                row += seg.rows;
              }
              const int64_t n = static_cast<int64_t>(picked.size());
              r.logits.clear();
              if (n == 0) return;
              std::vector<float> gathered(static_cast<size_t>(n * H)), h(gathered.size());
              for (int64_t i = 0; i < n; ++i) {
                std::copy_n(r.x.data() + picked[static_cast<size_t>(i)] * H, H,
                            gathered.data() + i * H);
              }
              m->FinalNorm(gathered.data(), n, h.data());
              r.logits.assign(static_cast<size_t>(n * m->config().vocab), 0.0f);
              m->Logits(h.data(), n, r.logits.data());
            }};
  }

  // Final norm and LM head over the last row, or every row of the pass.
  void Head(std::vector<Stage>& out, bool decode) const {
    const Qwen3Model* m = &model;
    const int64_t H = this->H();
    out.push_back({"final_norm_lm_head",
                   decode ? "f32[B,H] -> f32[B,V]"
                          : "f32[S,H] last row -> f32[V] (every row with all_logits; none "
                            "for a chunk that does not end the prompt)",
                   [m, H, decode](EntryRun& r) {
                     if (r.skip_logits && !decode) {
                       r.logits.clear();
                       return;
                     }
                     const int64_t M = static_cast<int64_t>(r.rows.size());
                     const int64_t first = (decode || r.all_logits) ? 0 : M - 1;
                     const int64_t n = M - first;
                     std::vector<float> h(static_cast<size_t>(n * H));
                     m->FinalNorm(r.x.data() + first * H, n, h.data());
                     r.logits.assign(static_cast<size_t>(n * m->config().vocab), 0.0f);
                     m->Logits(h.data(), n, r.logits.data());
                   }});
  }
};

}  // namespace

EntrySet EntrySet::Build(const Qwen3Model& model, const StaticBounds& bounds) {
  const Qwen3Config& c = model.config();
  Builder b{model, bounds};
  const std::string C = std::to_string(bounds.capacity), B = std::to_string(bounds.slots);
  const std::string pos =
      c.position_mode == PositionMode::kMrope ? "i32[3,S] (mrope)" : "i32[S] (1d)";
  const std::string S = "S<=C=" + C;
  const ArgSpec logits{"logits", "f32[V=" + std::to_string(c.vocab) + "]"};
  const ArgSpec kv{"kv", "f32[L=" + std::to_string(c.layers) + ",C=" + C + "," +
                             std::to_string(c.kv_heads) + "," + std::to_string(c.head_dim) +
                             "] x2, rows [0,S) written"};
  const ArgSpec delta{"rope_delta", "i32 scalar (committed on success)"};
  const std::string Hs = std::to_string(c.hidden);
  EntrySet set;
  {
    std::vector<Stage> st{b.Embed("S")};
    b.Layers(st, "S", false, false);
    b.Head(st, false);
    set.entries_.emplace_back(
        std::string(kEntryPrefill),
        std::vector<ArgSpec>{{"tokens", "i32[" + S + "]"}, {"positions", pos}, delta},
        std::vector<ArgSpec>{logits, kv}, std::move(st));
  }
  const std::vector<ArgSpec> emb_in{
      {"embeddings", "f32[" + S + ",H=" + Hs + "]"}, {"positions", pos}, delta};
  {
    std::vector<Stage> st{b.CopyEmbeddings()};
    b.Layers(st, "S", false, false);
    b.Head(st, false);
    set.entries_.emplace_back(std::string(kEntryPrefillEmbeddings), emb_in,
                              std::vector<ArgSpec>{logits, kv}, std::move(st));
  }
  {
    std::vector<Stage> st{b.Embed("B")};
    b.Layers(st, "B", false, false);
    b.Head(st, true);
    set.entries_.emplace_back(
        std::string(kEntryDecode),
        std::vector<ArgSpec>{
            {"tokens", "i32[B<=" + B + "]"},
            {"cache_len", "i32[B] physical KV length per row (write index, causal mask)"},
            {"coordinate", "i32[B,3] = cache_len + rope_delta (rope only)"}},
        std::vector<ArgSpec>{{"logits", "f32[B,V=" + std::to_string(c.vocab) + "]"},
                             {"kv", "row cache_len appended per row"}},
        std::move(st));
  }
  {
    std::vector<Stage> st{b.GatherSegments()};
    b.Layers(st, "M", c.deepstack.has_value(), false, true);
    st.push_back(b.SegmentHead());
    set.entries_.emplace_back(
        std::string(kEntryStep),
        std::vector<ArgSpec>{
            {"segments",
             "[P] consecutive rows of one sequence each: a prefill chunk (i32[n] "
             "tokens or f32[n,H=" +
                 Hs +
                 "] embeddings, its DeepStack slice) or a "
                 "decode run (i32[n] tokens)"},
            {"rows", "[M] cache, physical index (write index, causal mask), coordinate"}},
        std::vector<ArgSpec>{{"logits", "f32[R,V=" + std::to_string(c.vocab) + "]"},
                             {"kv", "each row's K/V written at its index"}},
        std::move(st));
  }
  if (c.deepstack) {
    const std::string K = std::to_string(c.deepstack->target_layers.size());
    std::vector<ArgSpec> ds_in = emb_in;
    ds_in.push_back({"visual_positions", "i32[Nv<=Nmax=" + std::to_string(bounds.nmax) + "]"});
    ds_in.push_back({"layer_features", "f32[K=" + K + ",Nv,H=" + Hs + "]"});
    ds_in.push_back({"layer_indices", "i32[K=" + K + "]"});
    for (bool diag : {false, true}) {
      std::vector<Stage> st{b.CopyEmbeddings()};
      b.Layers(st, "S", true, diag);
      b.Head(st, false);
      std::vector<ArgSpec> outs{logits, kv};
      if (diag) outs.push_back({"hidden_after_layer", "f32[L,S,H] post-hook"});
      set.entries_.emplace_back(std::string(diag ? kEntryDiagnostics : kEntryPrefillDeepStack),
                                ds_in, outs, std::move(st));
    }
  }
  return set;
}

Status RunEntryGuarded(const Entry& entry, EntryRun& run, const char* pass) {
  try {
    entry.Run(run);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(std::string(pass) + ": out of memory");
  } catch (const std::exception& e) {
    return Internal(std::string(pass) + " failed: " + e.what());
  } catch (...) {
    return Internal(std::string(pass) + " failed");
  }
  return Status::Ok();
}

const Entry* EntrySet::Find(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.name() == name) return &e;
  }
  return nullptr;
}

}  // namespace vls
