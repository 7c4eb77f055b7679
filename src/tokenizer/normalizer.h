// The tokenizer.json "normalizer": Unicode normalisation forms through ICU.
#ifndef VLSTACK_TOKENIZER_NORMALIZER_H_
#define VLSTACK_TOKENIZER_NORMALIZER_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vls::tok {

// Thread safety: immutable after FromJson; Apply may be called from any thread.
class Normalizer {
 public:
  enum class Form { kNfc, kNfd, kNfkc, kNfkd };

  // Accepts null, {"type":"NFC"|"NFD"|"NFKC"|"NFKD"} and (nested) "Sequence"s of those, within
  // kMaxPipelineSteps and kMaxSequenceNesting; refuses every other type by name.
  static StatusOr<Normalizer> FromJson(const nlohmann::json& j);

  bool empty() const { return forms_.empty(); }
  // REQUIRES: text is valid UTF-8.
  StatusOr<std::string> Apply(std::string_view text) const;

 private:
  std::vector<Form> forms_;
};

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_NORMALIZER_H_
