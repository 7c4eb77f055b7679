#include "runtime/kernel_info.h"

#include "kernels/amx.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_probe.h"
#include "kernels/onednn_matmul.h"

namespace vls {

KernelInfo DescribeKernels() {
  KernelInfo info;
  info.chosen = kernels::DefaultVariant().name;
  for (const kernels::KernelVariant* v : kernels::SupportedVariants()) {
    info.supported.emplace_back(v->name);
  }
  info.onednn_bf16 = kernels::OneDnnBf16Available();
  // Only the AVX512-BF16 variants take the tiles (VLS_KERNELS may choose another).
  info.amx_tiles = kernels::UsesAmxTiles(kernels::DefaultVariant());
  if (const kernels::GemmProbe& probe = kernels::DefaultVariantProbe(); probe.ran) {
    info.gemm_probe = probe.ToString();
  }
  return info;
}

}  // namespace vls
