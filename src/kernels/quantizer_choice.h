// Which of a weight format's quantizers runs (the Q4 and Q6 tables: q4.h, q6.h). Every one gives
// the same bytes, so the choice is about speed only. Private to q4.cc and q6.cc.
#ifndef VLSTACK_KERNELS_QUANTIZER_CHOICE_H_
#define VLSTACK_KERNELS_QUANTIZER_CHOICE_H_

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace vls::kernels {

// The last of `all` (the fastest the CPU has), or the one the environment variable `env_var`
// names (A/B timing of preparation); an unknown name is reported on stderr and ignored.
// REQUIRES: all is not empty; Q has a `const char* name`.
template <class Q>
const Q* ChooseQuantizer(const std::vector<const Q*>& all, const char* env_var) {
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') {
    for (const Q* c : all) {
      if (std::strcmp(c->name, env) == 0) return c;
    }
    std::fprintf(stderr, "vlstack: %s=%s is not a supported quantizer; using %s\n", env_var, env,
                 all.back()->name);
  }
  return all.back();
}

}  // namespace vls::kernels

#endif  // VLSTACK_KERNELS_QUANTIZER_CHOICE_H_
