#include "capi/capi_test_support.h"

#include <cstdio>
#include <exception>
#include <string>

#include "model/test_checkpoint.h"

extern "C" int vls_test_write_checkpoint(const char* dir, const char* arch, int32_t hidden,
                                         int32_t layers, const int32_t* ds_layers, int32_t ds_count,
                                         int32_t ds_nmax, uint64_t seed) {
  try {
    vls::TestModelSpec spec;
    spec.arch = arch;
    spec.hidden = hidden;
    spec.layers = layers;
    spec.dtype = vls::DType::kF32;
    spec.seed = seed;
    // As many vision taps as language targets; the explicit keys decide the targets.
    spec.deepstack = arch == std::string("qwen3") ? 0 : ds_count;
    for (int32_t i = 0; i < ds_count; ++i) spec.ds_layers.push_back(ds_layers[i]);
    spec.ds_nmax = ds_nmax;
    const vls::Status s = vls::WriteTestCheckpoint(dir, spec, false);
    if (!s.ok()) {
      std::fprintf(stderr, "WriteTestCheckpoint(%s): %s\n", dir, s.ToString().c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "WriteTestCheckpoint(%s): %s\n", dir, e.what());
    return 1;
  }
}
