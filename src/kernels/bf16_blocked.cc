#include "kernels/bf16_blocked.h"

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
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t r = r0; r < r1; ++r) {
    LoadRow(src, r, row.data());
    const int64_t n = dst_row + r;
    // Consecutive k of one row are 2 values apart within a pair and 128 apart across pairs.
    for (int64_t k = 0; k < K; ++k) {
      out[Bf16BlockedIndex(n, k, kp)] = F32ToBf16(row[static_cast<size_t>(k)]);
    }
  }
}

}  // namespace vls::kernels
