// Context::MatMulGrouped against Context::MatMul of each product alone: the same bits, for every
// weight storage, precision, supported variant and thread count.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16_blocked.h"
#include "kernels/dispatch.h"
#include "kernels/kernels_test_util.h"
#include "kernels/q4.h"
#include "kernels/q6.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace vls::kernels {
namespace {

using testing::Random;

enum class Storage { kF32, kBF16, kF16, kBf16Blocked, kQ8, kQ4, kQ6 };
constexpr Storage kStorages[] = {Storage::kF32,         Storage::kBF16, Storage::kF16,
                                 Storage::kBf16Blocked, Storage::kQ8,   Storage::kQ4,
                                 Storage::kQ6};
constexpr Precision kPrecisions[] = {Precision::kF32, Precision::kBF16, Precision::kInt8,
                                     Precision::kInt4};

const char* StorageName(Storage s) {
  switch (s) {
    case Storage::kF32: return "f32";
    case Storage::kBF16: return "bf16";
    case Storage::kF16: return "f16";
    case Storage::kBf16Blocked: return "bf16_blocked";
    case Storage::kQ8: return "q8";
    case Storage::kQ4: return "q4";
    case Storage::kQ6: return "q6";
  }
  return "?";
}

// Q4 and Q6 need K a multiple of 32.
bool Supports(Storage s, int64_t K) {
  return !(s == Storage::kQ4 || s == Storage::kQ6) || K % kQ4Group == 0;
}

// A [N, K] weight matrix of random values in storage s, owning its buffer.
class Weights {
 public:
  Weights(Storage s, int64_t N, int64_t K, uint32_t seed) {
    const std::vector<float> v = Random(size_t(N * K), seed, 0.05f);
    const Matrix src{DType::kF32, v.data(), N, K};
    switch (s) {
      case Storage::kF32:
      case Storage::kBF16:
      case Storage::kF16: {
        const DType dt = s == Storage::kF32    ? DType::kF32
                         : s == Storage::kBF16 ? DType::kBF16
                                               : DType::kF16;
        dense_ = FromF32As(dt, {N, K}, v);
        m_ = Matrix{dt, dense_.data(), N, K};
        break;
      }
      case Storage::kBf16Blocked:
        Allocate(Bf16BlockedBytes(N, K));
        PackBf16Blocked(src, 0, N, buf_.get(), N, 0);
        m_ = Bf16BlockedMatrixAt(buf_.get(), N, K);
        break;
      case Storage::kQ8:
        Allocate(Q8LayoutFor(N, K).bytes);
        QuantizeQ8(src, 0, N, buf_.get());
        m_ = Q8MatrixAt(buf_.get(), N, K);
        break;
      case Storage::kQ4:
        Allocate(Q4Bytes(N, K));
        QuantizeQ4(src, 0, N, buf_.get(), N, 0);
        m_ = Q4MatrixAt(buf_.get(), N, K);
        break;
      case Storage::kQ6:
        Allocate(Q6Bytes(N, K));
        QuantizeQ6(src, 0, N, buf_.get(), N, 0);
        m_ = Q6MatrixAt(buf_.get(), N, K);
        break;
    }
  }
  const Matrix& m() const { return m_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  void Allocate(int64_t bytes) {
    const size_t n = size_t(bytes + 63) / 64 * 64;
    buf_.reset(std::aligned_alloc(64, n));
    std::memset(buf_.get(), 0, n);  // the blocked format's padding must be zero
  }
  HostTensor dense_;
  std::unique_ptr<void, Free> buf_;
  Matrix m_;
};

// One product of a case: rows, output columns and storage.
struct Spec {
  int64_t M, N;
  Storage storage;
};

// Runs the products of `specs` through MatMulGrouped and each through MatMul alone; expects the
// same bits, and rows of products with M = 0 untouched.
void ExpectGroupedEqualsMatMul(const Context& ctx, const std::vector<Spec>& specs, int64_t K,
                               const std::string& label) {
  std::vector<std::unique_ptr<Weights>> w;
  std::vector<std::vector<float>> x, alone, grouped;
  std::vector<GroupedProduct> products;
  constexpr float kUntouched = -12345.0f;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    w.push_back(std::make_unique<Weights>(s.storage, s.N, K, uint32_t(100 + i)));
    x.push_back(Random(size_t(s.M * K), uint32_t(500 + i)));
    // At least one row so that an M = 0 product has a y to leave untouched.
    alone.emplace_back(size_t(std::max<int64_t>(s.M, 1) * s.N), kUntouched);
    grouped.emplace_back(alone.back());
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    products.push_back({x[i].data(), specs[i].M, &w[i]->m(), grouped[i].data()});
    if (specs[i].M > 0) ctx.MatMul(x[i].data(), specs[i].M, K, w[i]->m(), alone[i].data());
  }
  ctx.MatMulGrouped(products, K);
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    for (size_t j = 0; j < alone[i].size(); ++j) {
      if (std::memcmp(&alone[i][j], &grouped[i][j], sizeof(float)) != 0) {
        ADD_FAILURE() << label << ": product " << i << " (" << StorageName(s.storage)
                      << ", M=" << s.M << ", N=" << s.N << ", K=" << K << ") differs at row "
                      << j / size_t(s.N) << ", column " << j % size_t(s.N) << ": grouped "
                      << grouped[i][j] << ", alone " << alone[i][j];
        return;
      }
    }
  }
}

std::string Label(const KernelVariant& v, Precision p, int threads, const char* what) {
  return std::string(v.name) + "/" + PrecisionName(p) + "/" + std::to_string(threads) +
         " threads/" + what;
}

// Decode-sized products: 0, 1, 3 and 8 rows, N not a multiple of the column blocks (16, 64),
// a product of one column, one of fewer columns than a block.
std::vector<Spec> DecodeSpecs(Storage s) {
  return {{1, 48, s},  {3, 33, s}, {0, 64, s}, {8, 100, s}, {1, 17, s},
          {1, 130, s}, {2, 1, s},  {8, 64, s}, {3, 70, s},  {0, 5, s}};
}

TEST(GroupedMatMulTest, EqualsMatMulOfEachProductForEveryStorageAndVariant) {
  for (const KernelVariant* v : SupportedVariants()) {
    for (Precision p : kPrecisions) {
      for (int threads : {1, 2, 3}) {
        const Context ctx(threads, p, v);
        for (Storage s : kStorages) {
          for (int64_t K : {96, 77}) {
            if (!Supports(s, K)) continue;
            ExpectGroupedEqualsMatMul(
                ctx, DecodeSpecs(s), K,
                Label(*v, p, threads, StorageName(s)) + "/K=" + std::to_string(K));
          }
        }
      }
    }
  }
}

// Products of at least kOneDnnMinRows rows (prefill: oneDNN for BF16 when the build has it)
// beside decode-sized ones.
TEST(GroupedMatMulTest, ProductsOfManyRowsEqualMatMul) {
  static_assert(kOneDnnMinRows <= 40, "the case should reach MatMul's oneDNN paths");
  for (const KernelVariant* v : SupportedVariants()) {
    for (Precision p : kPrecisions) {
      const Context ctx(2, p, v);
      for (Storage s : kStorages) {
        ExpectGroupedEqualsMatMul(ctx, {{40, 70, s}, {1, 33, s}, {kOneDnnMinRows, 64, s}}, 64,
                                  Label(*v, p, 2, StorageName(s)) + "/many rows");
      }
    }
  }
}

// 64 experts of 1-2 rows each (eight decode slots choosing eight experts), every storage.
TEST(GroupedMatMulTest, ManyProductsEqualMatMul) {
  for (const KernelVariant* v : SupportedVariants()) {
    for (Precision p : {Precision::kBF16, Precision::kInt4}) {
      const Context ctx(2, p, v);
      for (Storage s : kStorages) {
        std::vector<Spec> specs;
        for (int i = 0; i < 64; ++i) specs.push_back({1 + i % 2, i % 3 == 0 ? 48 : 64, s});
        ExpectGroupedEqualsMatMul(ctx, specs, 64, Label(*v, p, 2, StorageName(s)) + "/64");
      }
    }
  }
}

// One call may mix storages (a layer whose experts were prepared alike never does, but nothing
// in the call assumes it).
TEST(GroupedMatMulTest, MixedStoragesInOneCallEqualMatMul) {
  for (const KernelVariant* v : SupportedVariants()) {
    for (Precision p : kPrecisions) {
      const Context ctx(2, p, v);
      std::vector<Spec> specs;
      for (int64_t i = 0; i < 2 * int64_t(std::size(kStorages)); ++i) {
        specs.push_back({i % 5, 40 + 7 * i, kStorages[size_t(i) % std::size(kStorages)]});
      }
      ExpectGroupedEqualsMatMul(ctx, specs, 64, Label(*v, p, 2, "mixed"));
    }
  }
}

// Products that gather their rows from one source (GroupedProduct::rows) against the same
// products over rows gathered beforehand: the same bits. Rows repeat within and across products
// and some source rows go unused, as a sparse layer's routing gives them.
void ExpectGatheringEqualsGathered(const Context& ctx, const std::vector<Spec>& specs, int64_t K,
                                   const std::string& label) {
  constexpr int64_t kSourceRows = 11;
  const std::vector<float> source = Random(size_t(kSourceRows * K), 77);
  std::vector<std::unique_ptr<Weights>> w;
  std::vector<std::vector<int32_t>> rows;
  std::vector<std::vector<float>> x, want, got;
  std::vector<GroupedProduct> gathered, gathering;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    w.push_back(std::make_unique<Weights>(s.storage, s.N, K, uint32_t(100 + i)));
    rows.emplace_back();
    x.emplace_back();
    for (int64_t r = 0; r < s.M; ++r) {
      const auto src = static_cast<int32_t>((3 * i + 5 * size_t(r)) % (kSourceRows - 2));
      rows.back().push_back(src);
      x.back().insert(x.back().end(), source.begin() + src * K, source.begin() + (src + 1) * K);
    }
    want.emplace_back(size_t(std::max<int64_t>(s.M, 1) * s.N), -1.0f);
    got.emplace_back(want.back());
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    gathered.push_back({x[i].data(), specs[i].M, &w[i]->m(), want[i].data()});
    gathering.push_back({source.data(), specs[i].M, &w[i]->m(), got[i].data(), rows[i].data()});
  }
  ctx.MatMulGrouped(gathered, K);
  ctx.MatMulGrouped(gathering, K);
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)), 0)
        << label << ": product " << i << " (" << StorageName(specs[i].storage)
        << ", M=" << specs[i].M << ")";
  }
}

TEST(GroupedMatMulTest, GatheringProductsEqualProductsOfGatheredRows) {
  for (const KernelVariant* v : SupportedVariants()) {
    for (Precision p : kPrecisions) {
      const Context ctx(2, p, v);
      for (Storage s : kStorages) {
        const bool once = s == Storage::kQ8 || s == Storage::kQ4 || s == Storage::kQ6;
        const Weights probe_w(s, 16, 64, 1);
        const std::vector<GroupedProduct> probe = {{nullptr, 1, &probe_w.m(), nullptr}};
        EXPECT_EQ(GroupedConvertsSourceOnce(probe), once) << StorageName(s);
        ExpectGatheringEqualsGathered(ctx, DecodeSpecs(s), 64,
                                      Label(*v, p, 2, StorageName(s)) + "/gathering decode");
        ExpectGatheringEqualsGathered(ctx, {{40, 70, s}, {1, 33, s}, {20, 64, s}}, 64,
                                      Label(*v, p, 2, StorageName(s)) + "/gathering prefill");
      }
      // Q4 and Q6 share their activations: one conversion of the source for both.
      ExpectGatheringEqualsGathered(ctx, {{5, 40, Storage::kQ4}, {9, 48, Storage::kQ6}}, 64,
                                    Label(*v, p, 2, "gathering q4+q6"));
    }
  }
}

TEST(GroupedMatMulTest, NoProductsAndProductsWithoutRowsWriteNothing) {
  const Context ctx(2, Precision::kInt4, nullptr);
  ctx.MatMulGrouped({}, 64);
  for (Storage s : kStorages) {
    ExpectGroupedEqualsMatMul(ctx, {{0, 16, s}, {0, 3, s}}, 64,
                              std::string("no rows/") + StorageName(s));
  }
}

}  // namespace
}  // namespace vls::kernels
