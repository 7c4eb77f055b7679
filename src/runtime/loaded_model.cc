#include "runtime/loaded_model.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "base/checked_math.h"
#include "base/memory.h"
#include "base/thread_pool.h"
#include "kernels/read_bandwidth.h"
#include "model/kv_pool.h"
#include "model/prepared_artifact.h"

namespace vls {

namespace {
const char* ComputeText(kernels::Precision p) {
  switch (p) {
    case kernels::Precision::kBF16:
      return "compute=bf16-rounded activations against bf16 weights, f32 accumulation\n";
    case kernels::Precision::kInt8:
      return "compute=q8 blocked weights (32-column blocks, f16 scales) against per-call "
             "q8 activations, int32 block sums, f32 accumulation\n";
    case kernels::Precision::kInt4:
      return "compute=q4 blocked weights (32-column groups, f16 scale and min; lm head q6 blocked, "
             "32-column groups, f16 scale) "
             "against per-call q8 activations (32-column groups), int32 group sums, f32 "
             "accumulation\n";
    case kernels::Precision::kF32: break;
  }
  return "compute=f32 reference kernels, f32 accumulation\n";
}
std::string Range(long long lo, long long hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

// The batch engine's KV pool (LoadOptions::kv_memory) in blocks of kv_block_keys positions, or
// ResourceExhausted when it, the slots' bookkeeping and one pass's buffers do not fit in the
// memory this process can have now (InvalidArgument for a kv_memory below one block).
struct KvPoolPlan {
  int64_t blocks = 0;
  std::string reason;
};
StatusOr<KvPoolPlan> PlanKvPool(const std::string& dir, const Qwen3Config& cfg, KvDType kv_dtype,
                                const LoadOptions& o) {
  const int threads = o.threads > 0 ? o.threads : ThreadPool::HardwareThreads();
  VLS_ASSIGN_OR_RETURN(ServingMemory plan,
                       PlanServingMemory(cfg, kv_dtype, o.capacity, o.slots, threads));
  const KvShape shape{cfg.layers, cfg.kv_heads, cfg.head_dim, kv_dtype, false};
  const uint64_t block = KvPool::BlockBytes(shape, o.kv_block_keys).value_or(UINT64_MAX);
  const auto per_sequence =
      static_cast<uint64_t>((o.capacity + o.kv_block_keys - 1) / o.kv_block_keys);
  const std::optional<uint64_t> other =
      CheckedMul(plan.other_per_slot, static_cast<uint64_t>(o.slots));
  const std::optional<uint64_t> fixed = other ? CheckedAdd(*other, plan.working) : std::nullopt;
  const MemoryAvailability avail = QueryMemoryAvailability();
  auto total = [&](uint64_t blocks) {
    const std::optional<uint64_t> kv = CheckedMul(blocks, block);
    const std::optional<uint64_t> t = kv && fixed ? CheckedAdd(*kv, *fixed) : std::nullopt;
    return t.value_or(UINT64_MAX);
  };
  KvPoolPlan out;
  if (o.kv_memory > 0 || o.kv_tokens > 0) {
    const uint64_t blocks =
        o.kv_tokens > 0
            ? static_cast<uint64_t>((o.kv_tokens + o.kv_block_keys - 1) / o.kv_block_keys)
            : o.kv_memory / block;
    if (blocks == 0) {
      return InvalidArgument("KV memory " + FormatBytes(o.kv_memory) + " holds no block of " +
                             std::to_string(o.kv_block_keys) + " positions (" + FormatBytes(block) +
                             ")");
    }
    const Status s = CheckMemoryFits("a KV pool of " + FormatBytes(blocks * block) + " with " +
                                         std::to_string(o.slots) + " slot(s)",
                                     total(blocks), avail);
    if (!s.ok()) return ResourceExhausted(dir + ": " + s.message() + ": lower the KV memory");
    out.blocks = static_cast<int64_t>(std::min<uint64_t>(blocks, INT32_MAX));
    out.reason = "--kv-memory";
    return out;
  }
  const std::optional<uint64_t> full = CheckedMul(per_sequence, static_cast<uint64_t>(o.slots));
  if (full && CheckMemoryFits("", total(*full), avail).ok()) {
    out.blocks = static_cast<int64_t>(std::min<uint64_t>(*full, INT32_MAX));
    out.reason = "the slots at full capacity";
    return out;
  }
  // Less: 90 % of what is left after the rest, but at least one sequence of capacity C.
  const uint64_t left = avail.available() > total(0) ? avail.available() - total(0) : 0;
  const uint64_t blocks = std::max(per_sequence, left / 10 * 9 / block);
  Status s = CheckMemoryFits(
      "capacity " + std::to_string(o.capacity) + " with " + std::to_string(o.slots) + " slot(s)",
      total(blocks), avail);
  if (!s.ok()) {
    return ResourceExhausted(dir + ": " + s.message() + "; it is " + plan.Describe(o.slots) +
                             " at full capacity: lower the capacity or the slots");
  }
  out.blocks = static_cast<int64_t>(std::min<uint64_t>(blocks, INT32_MAX));
  out.reason = "90 % of the memory left";
  return out;
}

// Hex of a SHA-256 digest.
std::string DigestHex(const unsigned char* md, unsigned int len) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

// Sha256Hex of a checkpoint tensor's mapped bytes, dropping its file pages as the hash passes
// them (kHashChunk at a time): a fused expert tensor holds a whole layer's experts (0.6 GiB at
// the 30B-A3B shape), which must not become resident at once (ADR 0027).
std::string Sha256HexReleasing(const void* data, size_t size) {
  constexpr size_t kHashChunk = size_t{64} << 20;
  constexpr uintptr_t kPage = 4096;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* released = p;
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(kHashChunk, size - done);
    EVP_DigestUpdate(ctx, p + done, n);
    done += n;
    // Pages fully inside [released, p + done); the one the chunk ends in goes with the next.
    const auto end = reinterpret_cast<uintptr_t>(p + done);
    const uintptr_t cut = done == size ? end : end / kPage * kPage;
    if (cut > reinterpret_cast<uintptr_t>(released)) {
      ReleaseFilePages(released, cut - reinterpret_cast<uintptr_t>(released));
      released = p + (cut - reinterpret_cast<uintptr_t>(p));
    }
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  return DigestHex(md, len);
}

}  // namespace

std::string Sha256Hex(const void* data, size_t size) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, size, md, &len, EVP_sha256(), nullptr);
  return DigestHex(md, len);
}

StatusOr<std::unique_ptr<LoadedModel>> LoadedModel::Load(const std::string& dir,
                                                         const LoadOptions& o) {
  if (o.capacity <= 0 || o.capacity > kMaxCapacity) {
    return InvalidArgument("load options: capacity " + std::to_string(o.capacity) + " is outside " +
                           Range(1, kMaxCapacity));
  }
  if (o.slots <= 0 || o.slots > kMaxSlots) {
    return InvalidArgument("load options: slots " + std::to_string(o.slots) + " is outside " +
                           Range(1, kMaxSlots));
  }
  if (o.nmax < 0 || o.nmax > kMaxCapacity) {
    return InvalidArgument("load options: nmax " + std::to_string(o.nmax) + " is outside " +
                           Range(0, kMaxCapacity));
  }
  if (o.threads < 0 || o.threads > kMaxThreads) {
    return InvalidArgument("load options: threads " + std::to_string(o.threads) + " is outside " +
                           Range(0, kMaxThreads) + " (0: all cores)");
  }
  if (std::find(std::begin(kKvBlockKeyChoices), std::end(kKvBlockKeyChoices), o.kv_block_keys) ==
      std::end(kKvBlockKeyChoices)) {
    return InvalidArgument("load options: a KV block of " + std::to_string(o.kv_block_keys) +
                           " positions; the choices are 64, 128 and 256");
  }
  const KvDType kv_dtype = o.kv_dtype.value_or(DefaultKvDType(o.precision));
  // Refuse bounds that cannot fit before reading the weights (a config that does not load is
  // reported by the model load below, with its own message).
  if (StatusOr<Qwen3Config> cfg = LoadQwen3Config(dir); cfg.ok()) {
    VLS_RETURN_IF_ERROR(PlanKvPool(dir, *cfg, kv_dtype, o).status());
  }
  ModelOptions mo;
  mo.threads = o.threads;
  mo.precision = o.precision;
  mo.progress = o.progress;
  mo.artifact = o.artifact;
  mo.artifact_memory = o.artifact_memory;
  mo.kv_dtype = o.kv_dtype;
  mo.check_weights = o.check_weights;
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<Qwen3Model> model, Qwen3Model::Load(dir, mo));
  // Again with the weights in memory: what is left has to hold the caches.
  VLS_ASSIGN_OR_RETURN(KvPoolPlan pool, PlanKvPool(dir, model->config(), model->kv_dtype(), o));
  std::unique_ptr<LoadedModel> lm(new LoadedModel());
  lm->kv_pool_blocks_ = pool.blocks;
  lm->kv_block_keys_ = o.kv_block_keys;
  lm->kv_pool_reason_ = std::move(pool.reason);
  lm->bounds_.capacity = o.capacity;
  lm->bounds_.slots = o.slots;
  if (const auto& ds = model->config().deepstack) {
    int nmax = ds->max_visual_positions;
    if (o.nmax > 0 && nmax > 0 && o.nmax != nmax) {
      return InvalidArgument("load options: nmax " + std::to_string(o.nmax) +
                             " contradicts the config's deepstack_max_visual_positions " +
                             std::to_string(nmax));
    }
    if (nmax == 0) nmax = o.nmax > 0 ? o.nmax : o.capacity;
    DeepStackConfig check = *ds;
    check.max_visual_positions = nmax;
    VLS_RETURN_IF_ERROR(ValidateDeepStackCapacity(check, o.capacity).WithContext(dir));
    lm->bounds_.nmax = nmax;
  } else if (o.nmax > 0) {
    return InvalidArgument("load options: nmax given but the model declares no DeepStack");
  }
  lm->model_ = std::move(model);
  lm->entries_ = EntrySet::Build(*lm->model_, lm->bounds_);
  lm->artifact_ = o.artifact;
  lm->FindVisionTower(dir);
  const PreparedWeights& pw = lm->model_->prepared();
  if (!o.artifact.empty()) VLS_RETURN_IF_ERROR(lm->CheckArtifactVision());
  if (!o.artifact.empty() && pw.artifact_identity() != lm->Identity()) {
    return FailedPrecondition(
        "artifact " + o.artifact + " has identity " + pw.artifact_identity() +
        " but this load computes " + lm->Identity() +
        ": it was compiled from a different checkpoint, config, precision or bounds (it says " +
        pw.artifact_bounds() + "); run vlstack compile again");
  }
  return lm;
}

std::string LoadedModel::IdentityText() const {
  std::ostringstream o;
  o << "vlstack-artifact-identity v1\nabi_version=" << kAbiVersion << "\n[config]\n"
    << CanonicalConfigText(config()) << "[bounds]\ncapacity=" << bounds_.capacity
    << "\nslots=" << bounds_.slots << "\nnmax=" << bounds_.nmax << "\n[precision]\n"
    << ComputeText(model_->context().precision())
    << "kv_cache=" << (model_->kv_dtype() == KvDType::kF32 ? "f32" : "bf16 (round to nearest even)")
    << "\n[prepared weights v2]\n"
    << model_->prepared().LayoutText();
  if (vision_config_) {
    // Only a model with a vision tower has these sections, so a text-only model's identity is
    // what it was before the vision tower joined the artifact.
    o << "[vision config]\n"
      << CanonicalVisionConfigText(*vision_config_) << "[vision prepared weights v1]\n"
      << PreparedVisionLayoutText(vision_layout_);
  }
  o << "[weights]\n";
  const SafetensorsCheckpoint& ck = model_->checkpoint();
  for (const std::string& name : ck.Names()) {
    const SafetensorsCheckpoint::Tensor* t = ck.Find(name);
    o << name << " " << DTypeName(t->view.dtype) << " " << ShapeToString(t->view.shape)
      << " sha256:" << Sha256HexReleasing(t->view.data, t->view.nbytes) << "\n";
    // Hashing faulted the tensor's file pages in and dropped them as it went: the model
    // computes from its prepared copy.
  }
  o << "[entries]\n";
  for (const Entry& e : entries_.entries()) o << e.Manifest();
  return o.str();
}

double LoadedModel::PreparedReadBandwidth() const {
  // From the first 64-byte boundary (an artifact's region follows its header).
  const std::byte* data = model_->prepared().data();
  const auto skip = static_cast<int64_t>((64 - reinterpret_cast<uintptr_t>(data) % 64) % 64);
  return kernels::ReadBandwidth(model_->context().pool(), data + skip,
                                static_cast<int64_t>(model_->prepared().size()) - skip, 2);
}

const std::string& LoadedModel::Identity() const {
  std::call_once(identity_once_, [this] {
    const std::string text = IdentityText();
    identity_ = Sha256Hex(text.data(), text.size());
  });
  return identity_;
}

}  // namespace vls

namespace vls {

void LoadedModel::FindVisionTower(const std::string& dir) {
  StatusOr<std::optional<VisionConfig>> cfg = LoadVisionConfig(dir, config());
  if (!cfg.ok() || !cfg->has_value()) return;
  StatusOr<VisionWeights> w = BindVisionWeights(**cfg, model_->checkpoint());
  if (!w.ok()) return;
  vision_config_ = std::move(**cfg);
  vision_weights_ = std::move(*w);
  vision_layout_ = PlanPreparedVisionEntries(vision_weights_, model_->context().precision());
}

Status LoadedModel::CheckArtifactVision() const {
  const std::optional<PreparedRegion>& section = model_->prepared().artifact_vision();
  const std::string what = "artifact " + artifact_;
  if (!vision_config_ && section) {
    return FailedPrecondition(what +
                              " holds vision tower weights but this model has no vision tower "
                              "(config.json's vision_config and the model.visual.* tensors); "
                              "run vlstack compile again");
  }
  if (vision_config_ && !section) {
    return FailedPrecondition(what +
                              " holds no vision tower weights but this model has a vision "
                              "tower: it was compiled by an older vlstack or from another "
                              "model; run vlstack compile again");
  }
  if (!section) return Status::Ok();
  return MappedVisionWeights().status();
}

StatusOr<std::unique_ptr<PreparedVisionWeights>> LoadedModel::MappedVisionWeights() const {
  const std::optional<PreparedRegion>& section = model_->prepared().artifact_vision();
  if (!vision_config_ || !section) return std::unique_ptr<PreparedVisionWeights>();
  return PreparedVisionWeights::FromRegion(vision_weights_, model_->context().precision(), *section,
                                           "artifact " + artifact_);
}

Status LoadedModel::WriteArtifact(const std::string& path, const PrepareProgress& progress) const {
  ArtifactHeader h;
  h.identity = Identity();
  h.precision = kernels::PrecisionName(model_->context().precision());
  h.capacity = bounds_.capacity;
  h.slots = bounds_.slots;
  h.nmax = bounds_.nmax;
  if (!vision_config_)
    return WritePreparedArtifact(path, std::move(h), model_->prepared(), progress);
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedVisionWeights> vision, MappedVisionWeights());
  if (vision == nullptr) {
    try {
      VLS_ASSIGN_OR_RETURN(vision, PreparedVisionWeights::Prepare(*vision_config_, vision_weights_,
                                                                  model_->context()));
    } catch (const std::bad_alloc&) {
      return ResourceExhausted("out of memory preparing the vision tower weights for " + path);
    }
  }
  return WritePreparedArtifact(path, std::move(h), model_->prepared(), &vision->region(), progress);
}

}  // namespace vls
