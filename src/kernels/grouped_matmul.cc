// Context::MatMulGrouped: the chosen experts of a sparse layer (ADR 0027) in one pass over the
// pool. At decode a layer is 8-64 products of 1-8 rows each; one MatMul each costs a pool
// dispatch, a serial tail and an activation conversion per product, and a product of 1536
// columns in blocks of 16 leaves little to balance two threads with.
//
// Here every product keeps the kernel and the activation conversion MatMul would give it alone
// (so its results are the same bit for bit), and one ParallelFor covers them all:
//   1. the activations of all products are converted once (BF16 rounding, Q8 or Q4
//      quantization) into the caller's scratch, one product's rows after another, by a
//      RowPrologue over all their rows (every participant converts before it computes);
//   2. the work items are (product, block of output columns), blocks as MatMul splits them; the
//      loop runs over `slices` of equal cost, each slice owning the items whose cost prefix
//      starts in it, so the pool's guided chunks hand each thread a contiguous run of items
//      of equal cost (weight bytes, plus a term for the rows each item multiplies).
// Products that MatMul would hand to oneDNN (BF16 with at least kOneDnnMinRows rows: prefill,
// one GEMM per expert) run as MatMul after the pass.
//
// The Q8 products of at most 3 rows (decode) take matmul_q8 or matmul_q8_four_streams, the
// same results bit for bit, as the context's StreamTuner says (ADR 0033); a call whose
// products are all such takes a ticket from it and reports its time.
#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/bf16_blocked.h"
#include "kernels/dispatch.h"
#include "kernels/q4.h"
#include "kernels/q6.h"
#include "kernels/quant.h"
#include "kernels/row_prologue.h"
#include "tensor/dtype.h"

namespace vls::kernels {

namespace {

// What MatMul does with one product of few rows.
enum class Path : uint8_t {
  kF32,          // variant.matmul_f32 on x as it is
  kBf16,         // x rounded to BF16, variant.matmul_bf16 (dense BF16 under kBF16)
  kBf16Blocked,  // x rounded to BF16, the blocked kernel
  kQ8,           // x quantized per row and 32 columns, the Q8 kernel
  kQ4,           // x quantized per row and 32 columns with sums, the Q4 or Q6 kernel
};

struct Planned {
  const GroupedProduct* p = nullptr;
  Path path = Path::kF32;
  int64_t block = 16;           // output columns per item (MatMul's split for this path)
  int64_t items = 0;            // ceil(N / block)
  int64_t first_item = 0;       // global index of its first item
  int64_t item_cost = 0;        // cost of one whole item
  int64_t cost_before = 0;      // cost of all items of the products before it
  int64_t first_row = 0;        // its first row among the converted rows of all products
  uint16_t* xb = nullptr;       // kBf16, kBf16Blocked
  Q4Activations q4;             // kQ4
  Q8Activations* q8 = nullptr;  // kQ8
};

// Weight bytes per 32 columns of one row (all products share K, so per-row costs compare in
// units of K / 32 bytes).
int64_t RowBytesPer32(const Matrix& w) {
  switch (w.format) {
    case MatrixFormat::kQ8: return 32 + 2;       // int8 codes and an F16 scale per 32
    case MatrixFormat::kQ4: return 16 + 4;       // 4-bit codes, F16 d and m per 32
    case MatrixFormat::kQ6: return 24 + 2;       // 6-bit codes, F16 d per 32
    case MatrixFormat::kBf16Blocked: return 64;  // BF16
    case MatrixFormat::kDense: return 32 * static_cast<int64_t>(DTypeSize(w.dtype));
  }
  return 64;
}

void ScalarToBf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = F32ToBf16(x[i]);
}

int64_t AlignUp64(int64_t n) { return (n + 63) / 64 * 64; }

// Rows rows[r0 .. r1) of a's source `src` into rows r0 .. r1 of a (quantization is per row: the
// same values as quantizing the gathered f32 rows).
void GatherRows(const Q8Activations& src, const int32_t* rows, int64_t r0, int64_t r1,
                Q8Activations* a) {
  const int64_t K = a->cols, nb = a->blocks;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t s = rows[r];
    std::copy_n(src.q.data() + s * K, K, a->q.data() + r * K);
    std::copy_n(src.scales.data() + s * nb, nb, a->scales.data() + r * nb);
    std::copy_n(src.zero_terms.data() + s * nb, nb, a->zero_terms.data() + r * nb);
  }
}
void GatherRows(const Q4Activations& src, const int32_t* rows, int64_t r0, int64_t r1,
                const Q4Activations& a) {
  const int64_t K = a.cols, ng = a.groups;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t s = rows[r];
    std::copy_n(src.q + s * K, K, a.q + r * K);
    std::copy_n(src.scales + s * ng, ng, a.scales + r * ng);
    std::copy_n(src.sums + s * ng, ng, a.sums + r * ng);
  }
}

}  // namespace

bool GroupedConvertsSourceOnce(std::span<const GroupedProduct> products) {
  bool q8 = false, q4 = false;
  for (const GroupedProduct& p : products) {
    if (p.M <= 0 || p.w->rows <= 0) continue;
    switch (p.w->format) {
      case MatrixFormat::kQ8: q8 = true; break;
      case MatrixFormat::kQ4:
      case MatrixFormat::kQ6: q4 = true; break;
      default: return false;
    }
  }
  return !(q8 && q4);
}

void Context::MatMulGrouped(std::span<const GroupedProduct> products, int64_t K) const {
  if (products.empty()) return;
  const bool gathers = products.front().rows != nullptr;
  if (gathers && !GroupedConvertsSourceOnce(products)) {
    // The f32 rows gathered here, then products of them.
    int64_t total = 0;
    for (const GroupedProduct& p : products) total += std::max<int64_t>(p.M, 0);
    std::vector<float> rows(static_cast<size_t>(total * K));
    std::vector<GroupedProduct> own(products.begin(), products.end());
    float* at = rows.data();
    for (GroupedProduct& p : own) {
      for (int64_t r = 0; r < p.M; ++r) std::copy_n(p.x + p.rows[r] * K, K, at + r * K);
      p.x = at;
      p.rows = nullptr;
      at += std::max<int64_t>(p.M, 0) * K;
    }
    return MatMulGrouped(own, K);
  }
  const ThreadPool::Lease lease(*pool_);
  ScratchArena& own = scratch(lease.thread());

  // The plan: each product's path as MatMul would choose it, its items and their costs.
  std::vector<Planned> plan;
  std::vector<const GroupedProduct*> to_onednn;
  plan.reserve(products.size());
  for (const GroupedProduct& p : products) {
    if (p.M <= 0 || p.w->rows <= 0) continue;
    const Matrix& w = *p.w;
    Planned e;
    e.p = &p;
    switch (w.format) {
      case MatrixFormat::kQ8: e.path = Path::kQ8; break;
      case MatrixFormat::kQ4:
      case MatrixFormat::kQ6: e.path = Path::kQ4; break;
      case MatrixFormat::kBf16Blocked:
        if (use_onednn_ && variant_->onednn_blocked && p.M >= kOneDnnMinRows) {
          to_onednn.push_back(&p);
          continue;
        }
        e.path = Path::kBf16Blocked;
        e.block = kBf16BlockN;
        break;
      case MatrixFormat::kDense:
        if (precision_ == Precision::kBF16 && w.dtype == DType::kBF16 &&
            variant_->matmul_bf16 != nullptr) {
          if (use_onednn_ && p.M >= kOneDnnMinRows) {
            to_onednn.push_back(&p);
            continue;
          }
          e.path = Path::kBf16;
        }
        break;
    }
    static_assert(kQ4Rows == 16 && kQ6Rows == 16 && kQ8Group == 16, "MatMul's 16-column blocks");
    e.items = (w.rows + e.block - 1) / e.block;
    // A weight byte costs about as much as 4 multiply-adds (decode reads at the memory roof;
    // at a few rows the int8/BF16 dot products cost a fraction of the load).
    e.item_cost = e.block * (RowBytesPer32(w) + 8 * p.M);
    plan.push_back(e);
  }

  if (!plan.empty()) {
    // Step 1's buffers: BF16 rows and Q4 activations one product after another in matmul_x,
    // each at a 64-byte boundary; Q8 activations in the arena's per-product set.
    int64_t bytes = 0, rows = 0, items = 0, cost = 0, macs = 0, q8_decode_bytes = 0;
    bool any_q8 = false, any_conversion = false, all_q8_decode = true;
    // Gathering products: the source rows they take (0 .. source_rows), converted once.
    int64_t source_rows = 0;
    for (Planned& e : plan) {
      const int64_t M = e.p->M;
      e.first_row = rows;
      e.first_item = items;
      e.cost_before = cost;
      rows += M;
      items += e.items;
      if (gathers) {
        for (int64_t r = 0; r < M; ++r) {
          source_rows = std::max<int64_t>(source_rows, int64_t{e.p->rows[r]} + 1);
        }
      }
      cost += e.items * e.item_cost;
      macs += M * K * e.p->w->rows;
      if (e.path == Path::kBf16 || e.path == Path::kBf16Blocked) {
        bytes += AlignUp64(M * K * 2);
      } else if (e.path == Path::kQ4) {
        bytes += AlignUp64(Q4ActivationBytes(M, K));
      }
      any_q8 = any_q8 || e.path == Path::kQ8;
      any_conversion = any_conversion || e.path != Path::kF32;
      if (e.path == Path::kQ8 && M <= 3) {
        q8_decode_bytes += e.p->w->rows * Q8Blocks(K) * RowBytesPer32(*e.p->w);
      } else {
        all_q8_decode = false;
      }
    }
    // The converted source rows: Q4 ones at the end of matmul_x, Q8 ones an arena entry after
    // the products'.
    const bool q4_source = gathers && !any_q8;
    const int64_t source_offset = bytes;
    if (q4_source) bytes += AlignUp64(Q4ActivationBytes(source_rows, K));
    auto* buf = static_cast<uint8_t*>(own.matmul_x.Reserve(static_cast<size_t>(bytes)));
    Q8Activations* q8 = nullptr;
    Q8Activations* q8_source = nullptr;
    if (any_q8) {
      std::vector<int64_t> q8_rows(plan.size() + (gathers ? 1 : 0), 0);
      for (size_t i = 0; i < plan.size(); ++i) {
        if (plan[i].path == Path::kQ8) q8_rows[i] = plan[i].p->M;
      }
      if (gathers) q8_rows.back() = source_rows;
      q8 = own.GroupedQ8(q8_rows, K);
      if (gathers) q8_source = &q8[plan.size()];
    }
    const Q4Activations q4_src =
        q4_source ? Q4ActivationsAt(buf + source_offset, source_rows, K) : Q4Activations{};
    int64_t offset = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
      Planned& e = plan[i];
      const int64_t M = e.p->M;
      if (e.path == Path::kBf16 || e.path == Path::kBf16Blocked) {
        e.xb = reinterpret_cast<uint16_t*>(buf + offset);
        offset += AlignUp64(M * K * 2);
      } else if (e.path == Path::kQ4) {
        e.q4 = Q4ActivationsAt(buf + offset, M, K);
        offset += AlignUp64(Q4ActivationBytes(M, K));
      } else if (e.path == Path::kQ8) {
        e.q8 = &q8[i];
      }
    }

    // The kernels, each as MatMul picks it.
    const KernelVariant& q8v = variant_->matmul_q8 != nullptr ? *variant_ : ReferenceVariant();
    // Decode tiles with one or four weight streams (ADR 0033).
    StreamTuner::Ticket ticket;
    if (q8v.matmul_q8_four_streams != nullptr && q8_decode_bytes > 0) {
      if (all_q8_decode) {
        ticket = stream_tuner_->Next();
      } else {
        ticket.four = stream_tuner_->mode() == StreamTuner::Mode::kFour;
      }
    }
    const auto matmul_q8 = ticket.four ? q8v.matmul_q8_four_streams : q8v.matmul_q8;
    const KernelVariant& blockedv =
        variant_->matmul_bf16_blocked != nullptr ? *variant_ : ReferenceVariant();
    const Q4Kernels& q4k = Q4KernelsFor(*variant_);
    const auto to_bf16 = variant_->to_bf16 != nullptr ? variant_->to_bf16 : ScalarToBf16;
    const auto q6_matmul = q4k.matmul_q6 != nullptr ? q4k.matmul_q6 : RefMatMulQ6;

    // Converts source rows [r0, r1) (products that gather).
    const auto convert_source = [&](int64_t r0, int64_t r1) {
      const float* x = products.front().x;
      if (q8_source != nullptr) {
        q8v.quantize_q8(x, r0, r1, q8_source);
      } else {
        q4k.quantize(x, r0, r1, q4_src);
      }
    };
    // Converts rows [r0, r1) of product e (gathers them, converted, from the source).
    const auto convert = [&](const Planned& e, int64_t r0, int64_t r1) {
      const float* x = e.p->x;
      if (gathers) {
        if (e.path == Path::kQ8) {
          GatherRows(*q8_source, e.p->rows, r0, r1, e.q8);
        } else {
          GatherRows(q4_src, e.p->rows, r0, r1, e.q4);
        }
        return;
      }
      switch (e.path) {
        case Path::kF32: break;
        case Path::kBf16:
        case Path::kBf16Blocked: to_bf16(x + r0 * K, (r1 - r0) * K, e.xb + r0 * K); break;
        case Path::kQ8: q8v.quantize_q8(x, r0, r1, e.q8); break;
        case Path::kQ4: q4k.quantize(x, r0, r1, e.q4); break;
      }
    };
    // Columns [n0, n1) of product e.
    const auto compute = [&](const Planned& e, int64_t n0, int64_t n1) {
      const GroupedProduct& p = *e.p;
      switch (e.path) {
        case Path::kF32: variant_->matmul_f32(p.x, p.M, K, *p.w, n0, n1, p.y); break;
        case Path::kBf16: variant_->matmul_bf16(e.xb, p.M, K, *p.w, n0, n1, p.y); break;
        case Path::kBf16Blocked:
          blockedv.matmul_bf16_blocked(e.xb, p.M, K, *p.w, n0, n1, p.y);
          break;
        case Path::kQ8: (p.M <= 3 ? matmul_q8 : q8v.matmul_q8)(*e.q8, *p.w, n0, n1, p.y); break;
        case Path::kQ4:
          (p.w->format == MatrixFormat::kQ6 ? q6_matmul : q4k.matmul)(e.q4, *p.w, n0, n1, p.y);
          break;
      }
    };

    // The product holding row r of the converted rows (all products' rows one after another).
    const auto product_of_row = [&](int64_t r) {
      return std::upper_bound(plan.begin(), plan.end(), r,
                              [](int64_t v, const Planned& e) { return v < e.first_row; }) -
             1;
    };
    // The first item whose cost prefix is at least c (items for c past the total).
    const auto first_item_from = [&](int64_t c) -> int64_t {
      if (c >= cost) return items;
      const auto it =
          std::upper_bound(plan.begin(), plan.end(), c,
                           [](int64_t v, const Planned& e) { return v < e.cost_before; }) -
          1;
      const int64_t j = (c - it->cost_before + it->item_cost - 1) / it->item_cost;
      return it->first_item + j;  // past its last item: the next product's first
    };
    // The product holding item i.
    const auto product_of_item = [&](int64_t i) {
      return std::upper_bound(plan.begin(), plan.end(), i,
                              [](int64_t v, const Planned& e) { return v < e.first_item; }) -
             1;
    };

    RowPrologue source_prologue(gathers ? source_rows : 0, pool_->threads());
    RowPrologue prologue(any_conversion ? rows : 0, pool_->threads());
    // Slice s owns the items whose cost prefix lies in [s · cost / items, (s+1) · cost / items).
    const int64_t slices = items;
    // About 64k multiply-adds at least per chunk, as MatMul: below that a wake-up costs more.
    const int64_t grain = std::max<int64_t>(1, 65536 * slices / std::max<int64_t>(1, macs));
    const auto start = std::chrono::steady_clock::now();
    pool_->ParallelFor(slices, grain, [&](int64_t b, int64_t end) {
      source_prologue.Run(convert_source);
      prologue.Run([&](int64_t r0, int64_t r1) {
        for (auto it = product_of_row(r0); r0 < r1; ++it) {
          const int64_t stop = std::min(r1, it->first_row + it->p->M);
          convert(*it, r0 - it->first_row, stop - it->first_row);
          r0 = stop;
        }
      });
      int64_t i = first_item_from(b * cost / slices);
      const int64_t i_end = first_item_from(end * cost / slices);
      if (i >= i_end) return;
      // One kernel call per product the run of items touches.
      for (auto it = product_of_item(i); i < i_end; ++it) {
        const int64_t stop = std::min(i_end, it->first_item + it->items);
        compute(*it, (i - it->first_item) * it->block,
                std::min(it->p->w->rows, (stop - it->first_item) * it->block));
        i = stop;
      }
    });
    if (ticket.timed) {
      stream_tuner_->Record(
          ticket, q8_decode_bytes,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }

  for (const GroupedProduct* p : to_onednn) MatMul(p->x, p->M, K, *p->w, p->y);
}

}  // namespace vls::kernels
