#include "kernels/onednn_matmul.h"

#include <cstdlib>
#include <string>

#include "kernels/bf16_blocked.h"
#include "tensor/dtype.h"

#if defined(VLS_HAVE_DNNL)
#include <omp.h>

#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#endif

namespace vls::kernels {

#if defined(VLS_HAVE_DNNL)

struct OneDnnPackedBf16::Impl {
  dnnl::memory::desc md;  // the blocked layout oneDNN chose
  dnnl::memory mem;       // owns the packed bytes
};

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DT = memory::data_type;

const dnnl::engine& Engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A created primitive and the descriptors it runs with.
struct Entry {
  dnnl::matmul prim;
  memory::desc src, weights, dst;
  size_t scratch_bytes = 0;
};

// Primitive creation JITs kernels (about 2 ms), so primitives are cached per shape, thread
// count (oneDNN fixes its work split when it creates the primitive) and weight layout.
struct Key {
  int64_t M, K, N;
  int threads;
  bool packed;      // weights in a blocked layout (packed, or BF16 blocked), not [N, K] in place
  int64_t ldc = 0;  // y's row stride when it is not N (column blocks of a wider y)
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = static_cast<uint64_t>(k.M) * 0x9E3779B97F4A7C15ull;
    h ^= static_cast<uint64_t>(k.K) + 0x7F4A7C15ull + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(k.N) + 0x9E3779B9ull + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(k.threads * 2 + (k.packed ? 1 : 0)) + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(k.ldc) + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

// Every prompt length makes new entries (7 matmul shapes each); a server sees many lengths,
// so the cache is bounded and simply cleared when full.
constexpr size_t kMaxEntries = 512;

std::mutex g_cache_mu;
std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash>& Cache() {
  static auto* cache = new std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash>();
  return *cache;
}

bool IsReference(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

// The primitive for `key` with weights laid out as `wmd`. REQUIRES: omp_set_num_threads(
// key.threads) was called on this thread (oneDNN reads the team size at creation).
StatusOr<std::shared_ptr<const Entry>> GetPrimitive(const Key& key, const memory::desc& wmd) {
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = Cache().find(key);
    if (it != Cache().end() && it->second->weights == wmd) return it->second;
  }
  // Created outside the lock: two threads racing on a new shape both create it, one wins.
  auto e = std::make_shared<Entry>();
  e->src = memory::desc({key.M, key.K}, DT::bf16, Tag::ab);
  e->dst = key.ldc == 0 ? memory::desc({key.M, key.N}, DT::f32, Tag::ab)
                        : memory::desc({key.M, key.N}, DT::f32, memory::dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // the caller's arena, see Run
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->src, wmd, e->dst), attr, Engine());
  if (IsReference(pd)) {
    return Internal(std::string("oneDNN has only its reference matmul here: ") +
                    pd.impl_info_str());
  }
  e->prim = dnnl::matmul(pd);
  e->weights = wmd;
  e->scratch_bytes = pd.scratchpad_desc().get_size();
  std::lock_guard<std::mutex> lock(g_cache_mu);
  if (Cache().size() >= kMaxEntries) Cache().clear();
  Cache()[key] = e;
  return std::shared_ptr<const Entry>(e);
}

// `scratch` holds the scratchpad: concurrent calls of one cached primitive come from different
// participants, so they never share scratch memory.
Status Run(const Entry& e, const uint16_t* xb, const void* weights, float* y,
           ScratchArena& scratch) {
  void* sp = scratch.onednn.Reserve(e.scratch_bytes);
  // oneDNN takes non-const handles; it only reads src and weights.
  memory src(e.src, Engine(), const_cast<uint16_t*>(xb));
  memory wei(e.weights, Engine(), const_cast<void*>(weights));
  memory dst(e.dst, Engine(), y);
  memory pad(memory::desc({static_cast<int64_t>(e.scratch_bytes)}, DT::u8, Tag::a), Engine(), sp);
  dnnl::stream stream(Engine());
  e.prim.execute(stream, {{DNNL_ARG_SRC, src},
                          {DNNL_ARG_WEIGHTS, wei},
                          {DNNL_ARG_DST, dst},
                          {DNNL_ARG_SCRATCHPAD, pad}});
  stream.wait();
  return Status::Ok();
}

// The caller's arena, or one for this call only.
class ArenaOrLocal {
 public:
  explicit ArenaOrLocal(ScratchArena* arena) : arena_(arena != nullptr ? arena : &local_) {}
  ScratchArena& get() { return *arena_; }

 private:
  ScratchArena local_;
  ScratchArena* arena_;
};

Status FromDnnl(const dnnl::error& e, const char* what) {
  return Internal(std::string("oneDNN ") + what + ": " + e.what());
}

}  // namespace

bool OneDnnBf16Available() {
  static const bool available = [] {
    try {
      omp_set_num_threads(1);
      const memory::desc a({64, 64}, DT::bf16, Tag::ab), b({64, 64}, DT::bf16, Tag::ba),
          c({64, 64}, DT::f32, Tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), Engine());
      return !IsReference(pd);
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

Status OneDnnMatMulBf16(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w, int threads,
                        float* y, ScratchArena* scratch) {
  if (w.format != MatrixFormat::kDense || w.dtype != DType::kBF16 || w.cols != K || M <= 0 ||
      K <= 0 || w.rows <= 0 || threads < 1) {
    return InvalidArgument("OneDnnMatMulBf16: needs BF16 weights [N, K], M, K, N > 0");
  }
  try {
    omp_set_num_threads(threads);
    const Key key{M, K, w.rows, threads, false};
    StatusOr<std::shared_ptr<const Entry>> e =
        GetPrimitive(key, memory::desc({K, w.rows}, DT::bf16, Tag::ba));
    if (!e.ok()) return e.status();
    ArenaOrLocal arena(scratch);
    return Run(**e, xb, w.data, y, arena.get());
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "matmul");
  }
}

Status OneDnnMatMulBf16Columns(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w,
                               int64_t n0, int64_t n1, float* y, ScratchArena* scratch) {
  const int64_t N = w.rows;
  if (w.format != MatrixFormat::kDense || w.dtype != DType::kBF16 || w.cols != K || M <= 0 ||
      K <= 0 || n0 < 0 || n1 <= n0 || n1 > N) {
    return InvalidArgument("OneDnnMatMulBf16Columns: needs BF16 weights [N, K], 0 <= n0 < n1 <= N");
  }
  try {
    omp_set_num_threads(1);
    const int64_t nc = n1 - n0;
    StatusOr<std::shared_ptr<const Entry>> e = GetPrimitive(
        Key{M, K, nc, 1, false, nc == N ? 0 : N}, memory::desc({K, nc}, DT::bf16, Tag::ba));
    if (!e.ok()) return e.status();
    ArenaOrLocal arena(scratch);
    return Run(**e, xb, static_cast<const uint16_t*>(w.data) + n0 * K, y + n0, arena.get());
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "matmul columns");
  }
}

Status OneDnnMatMulBf16BlockedRows(const uint16_t* xb, int64_t M, int64_t K, const Matrix& w,
                                   int64_t m0, int64_t m1, float* y, ScratchArena* scratch) {
  const int64_t N = w.rows;
  if (w.format != MatrixFormat::kBf16Blocked || w.cols != K || M <= 0 || K <= 0 || N <= 0 ||
      m0 < 0 || m1 <= m0 || m1 > M) {
    return InvalidArgument(
        "OneDnnMatMulBf16BlockedRows: needs BF16 blocked weights [N, K], 0 <= m0 < m1 <= M");
  }
  try {
    omp_set_num_threads(1);
    // The blocked buffer is oneDNN's BA16a64b2a, zero padding included. (brgemm takes it only
    // with a dense destination, hence row blocks rather than column blocks.)
    StatusOr<std::shared_ptr<const Entry>> e =
        GetPrimitive(Key{m1 - m0, K, N, 1, true}, memory::desc({K, N}, DT::bf16, Tag::BA16a64b2a));
    if (!e.ok()) return e.status();
    ArenaOrLocal arena(scratch);
    return Run(**e, xb + m0 * K, w.data, y + m0 * N, arena.get());
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "blocked matmul rows");
  }
}

Status OneDnnMatMulRoundingX(const float* x, int64_t M, int64_t K, const Matrix& w,
                             const OneDnnPackedBf16* packed, int threads, float* y,
                             ScratchArena* scratch) {
  if (M <= 0 || K <= 0 || threads < 1) return InvalidArgument("OneDnnMatMulRoundingX: M, K > 0");
  if (packed != nullptr && (packed->rows() != w.rows || packed->cols() != K)) {
    return InvalidArgument("OneDnnMatMulRoundingX: packed weights do not match w");
  }
  ArenaOrLocal arena(scratch);
  auto* xb = arena.get().onednn_x.Reserve<uint16_t>(static_cast<size_t>(M * K));  // [M, K]
  const int64_t n = M * K;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) xb[i] = F32ToBf16(x[i]);
  return packed != nullptr ? packed->MatMul(xb, M, threads, y, &arena.get())
                           : OneDnnMatMulBf16(xb, M, K, w, threads, y, &arena.get());
}

OneDnnPackedBf16::OneDnnPackedBf16(int64_t rows, int64_t cols, std::unique_ptr<Impl> impl)
    : rows_(rows), cols_(cols), impl_(std::move(impl)) {}
OneDnnPackedBf16::~OneDnnPackedBf16() = default;

size_t OneDnnPackedBf16::bytes() const { return impl_->md.get_size(); }

StatusOr<std::unique_ptr<OneDnnPackedBf16>> OneDnnPackedBf16::Create(const Matrix& w, int threads) {
  const int64_t N = w.rows, K = w.cols;
  if (w.format != MatrixFormat::kDense || w.dtype != DType::kBF16 || N <= 0 || K <= 0 ||
      threads < 1) {
    return InvalidArgument("OneDnnPackedBf16: needs BF16 weights [N, K] with N, K > 0");
  }
  // The layout is the one oneDNN picks for a prefill-sized M; MatMul then asks for primitives
  // with exactly this layout at every M (brgemm accepts it for any M).
  constexpr int64_t kLayoutM = 256;
  try {
    omp_set_num_threads(threads);
    const memory::desc plain({K, N}, DT::bf16, Tag::ba);
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(memory::desc({kLayoutM, K}, DT::bf16, Tag::ab),
                           memory::desc({K, N}, DT::bf16, Tag::any),
                           memory::desc({kLayoutM, N}, DT::f32, Tag::ab)),
        Engine());
    if (IsReference(pd)) {
      return Internal(std::string("oneDNN has only its reference matmul here: ") +
                      pd.impl_info_str());
    }
    auto impl = std::make_unique<Impl>();
    impl->md = pd.weights_desc();
    impl->mem = memory(impl->md, Engine());
    memory src(plain, Engine(), const_cast<void*>(w.data));
    dnnl::stream stream(Engine());
    dnnl::reorder(src, impl->mem).execute(stream, src, impl->mem);
    stream.wait();
    return std::unique_ptr<OneDnnPackedBf16>(new OneDnnPackedBf16(N, K, std::move(impl)));
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "weight packing");
  }
}

Status OneDnnPackedBf16::MatMul(const uint16_t* xb, int64_t M, int threads, float* y,
                                ScratchArena* scratch) const {
  if (M <= 0 || threads < 1) return InvalidArgument("OneDnnPackedBf16::MatMul: M, threads > 0");
  try {
    omp_set_num_threads(threads);
    StatusOr<std::shared_ptr<const Entry>> e =
        GetPrimitive(Key{M, cols_, rows_, threads, true}, impl_->md);
    if (!e.ok()) return e.status();
    ArenaOrLocal arena(scratch);
    return Run(**e, xb, impl_->mem.get_data_handle(), y, arena.get());
  } catch (const dnnl::error& e) {
    return FromDnnl(e, "packed matmul");
  }
}

#else  // !VLS_HAVE_DNNL

struct OneDnnPackedBf16::Impl {};

namespace {
Status NoDnnl() { return Unimplemented("this build has no oneDNN (libdnnl-dev)"); }
}  // namespace

bool OneDnnBf16Available() { return false; }

Status OneDnnMatMulBf16(const uint16_t*, int64_t, int64_t, const Matrix&, int, float*,
                        ScratchArena*) {
  return NoDnnl();
}

OneDnnPackedBf16::OneDnnPackedBf16(int64_t rows, int64_t cols, std::unique_ptr<Impl> impl)
    : rows_(rows), cols_(cols), impl_(std::move(impl)) {}
OneDnnPackedBf16::~OneDnnPackedBf16() = default;
size_t OneDnnPackedBf16::bytes() const { return 0; }

StatusOr<std::unique_ptr<OneDnnPackedBf16>> OneDnnPackedBf16::Create(const Matrix&, int) {
  return NoDnnl();
}

Status OneDnnPackedBf16::MatMul(const uint16_t*, int64_t, int, float*, ScratchArena*) const {
  return NoDnnl();
}

Status OneDnnMatMulBf16Columns(const uint16_t*, int64_t, int64_t, const Matrix&, int64_t, int64_t,
                               float*, ScratchArena*) {
  return NoDnnl();
}

Status OneDnnMatMulBf16BlockedRows(const uint16_t*, int64_t, int64_t, const Matrix&, int64_t,
                                   int64_t, float*, ScratchArena*) {
  return NoDnnl();
}

Status OneDnnMatMulRoundingX(const float*, int64_t, int64_t, const Matrix&, const OneDnnPackedBf16*,
                             int, float*, ScratchArena*) {
  return NoDnnl();
}

#endif  // VLS_HAVE_DNNL

}  // namespace vls::kernels
