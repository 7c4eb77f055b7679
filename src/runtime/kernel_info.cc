#include "runtime/kernel_info.h"

#include "kernels/dispatch.h"
#include "kernels/onednn_matmul.h"

namespace vls {

KernelInfo DescribeKernels() {
  KernelInfo info;
  info.chosen = kernels::DefaultVariant().name;
  for (const kernels::KernelVariant* v : kernels::SupportedVariants()) {
    info.supported.emplace_back(v->name);
  }
  info.onednn_bf16 = kernels::OneDnnBf16Available();
  return info;
}

}  // namespace vls
