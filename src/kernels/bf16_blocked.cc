#include "kernels/bf16_blocked.h"

#include <cstring>
#include <vector>

#include "tensor/dtype.h"

namespace vls::kernels {

Matrix Bf16BlockedMatrixAt(const void* base, int64_t rows, int64_t cols) {
  return Matrix{DType::kBF16, base, rows, cols, MatrixFormat::kBf16Blocked};
}

void PackBf16Blocked(const Matrix& src, int64_t r0, int64_t r1, void* dst, int64_t dst_rows,
                     int64_t dst_row) {
  (void)dst_rows;  // only bounds the rows written (REQUIRES)
  const int64_t K = src.cols, kp = Bf16PaddedCols(K);
  auto* out = static_cast<uint16_t*>(dst);
  std::vector<uint16_t> bf(static_cast<size_t>(K));
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* values = nullptr;
    if (src.format == MatrixFormat::kDense && src.dtype == DType::kBF16) {
      values = static_cast<const uint16_t*>(src.data) + r * K;  // already BF16: copied as is
    } else {
      LoadRow(src, r, row.data());
      for (int64_t k = 0; k < K; ++k) bf[size_t(k)] = F32ToBf16(row[size_t(k)]);
      values = bf.data();
    }
    // A row's column pairs lie 128 values apart; the pair itself is contiguous.
    uint16_t* pair0 = out + Bf16BlockedIndex(dst_row + r, 0, kp);
    for (int64_t k = 0; k + 1 < K; k += 2) {
      std::memcpy(pair0 + k / 2 * (2 * kBf16BlockN), values + k, 2 * sizeof(uint16_t));
    }
    if (K % 2 != 0) pair0[(K - 1) / 2 * (2 * kBf16BlockN)] = values[K - 1];
  }
}

}  // namespace vls::kernels
