// What the kernels layer chose on this machine, for the frontends that report it (`vlstack
// --version`) without reaching past the runtime into the kernels layer (docs/style.md §1).
//
// Thread safety: DescribeKernels() may be called from any thread (the kernels layer chooses its
// variant once per process).
#ifndef VLSTACK_RUNTIME_KERNEL_INFO_H_
#define VLSTACK_RUNTIME_KERNEL_INFO_H_

#include <string>
#include <vector>

namespace vls {

struct KernelInfo {
  std::string chosen;  // the variant every operation runs (VLS_KERNELS may name another)
  std::vector<std::string> supported;  // every variant this CPU runs, the reference first
  bool onednn_bf16 = false;  // oneDNN's BF16 prefill GEMM is built in and a JIT kernel here
  // The int8 products of 16 rows and more run on AMX tiles (kernels/amx.h: the CPU has
  // AMX-INT8, the OS grants the tile state, VLS_AMX is not 0, and an AVX512-BF16 variant
  // is the chosen one).
  bool amx_tiles = false;
  // The measurement behind the choice between "avx512bf16" and "avx512bf16-fma" (ADR 0031);
  // empty when none was made.
  std::string gemm_probe;
};

KernelInfo DescribeKernels();

}  // namespace vls

#endif  // VLSTACK_RUNTIME_KERNEL_INFO_H_
