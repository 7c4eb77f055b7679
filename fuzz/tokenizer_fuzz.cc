// Fuzz target for tokenizer.json (Tokenizer::FromJson).
//
// Every input must give a Status or a tokenizer. A tokenizer that loads must encode fixed texts
// (or refuse them with a Status) into ids below id_limit(), the same ids every time; Decode must
// give valid UTF-8 equal to the concatenation of a StreamDecoder's output; and ASCII text whose
// every byte has a vocabulary token and that matches no added token must decode to itself.
//
// Real fuzzing: scripts/fuzz.sh 600 tokenizer. Without libFuzzer, `tokenizer_fuzz_replay` (a
// ctest) runs this target over tests/corpus/tokenizer and deterministic mutations of it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

// VLS_FUZZ_VERBOSE=1 prints what each input gave (to see which corpus files load).
bool Verbose() {
  static const bool verbose = std::getenv("VLS_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "tokenizer_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

// True when every byte of `text` names a vocabulary (not added) token.
bool EveryByteHasAToken(const vls::tok::Tokenizer& t, std::string_view text) {
  std::string bytes;
  bool added = false;
  for (char c : text) {
    const int32_t id = t.TokenToId(vls::tok::BytesToByteLevel(std::string_view(&c, 1)));
    if (id < 0 || !t.TokenBytes(id, false, &bytes, &added) || added) return false;
  }
  return true;
}

void Check(const vls::tok::Tokenizer& t, std::string_view text, bool ascii) {
  auto ids = t.Encode(text);
  if (!ids.ok()) return;  // a hostile regex may exhaust PCRE2's match limit: a Status, fine
  const int32_t limit = t.id_limit();
  bool any_added = false;
  std::string bytes;
  for (int32_t id : *ids) {
    if (id < 0 || id >= limit) Fail("id outside [0, id_limit)", std::to_string(id));
    bool added = false;
    if (!t.TokenBytes(id, false, &bytes, &added)) Fail("encoded id has no bytes", "");
    any_added = any_added || added;
  }
  auto again = t.Encode(text);  // the second time through the word cache
  if (!again.ok() || *again != *ids) Fail("encoding is not deterministic", std::string(text));
  for (bool skip : {false, true}) {
    const std::string decoded = t.Decode(*ids, skip);
    if (!vls::tok::IsValidUtf8(decoded)) Fail("Decode gave invalid UTF-8", "");
    vls::tok::StreamDecoder stream(&t, skip);
    std::string streamed;
    for (int32_t id : *ids) streamed += stream.Feed(id);
    streamed += stream.Finish();
    if (streamed != decoded) Fail("StreamDecoder disagrees with Decode", decoded);
    if (!skip && ascii && !any_added && EveryByteHasAToken(t, text) && decoded != text) {
      Fail("ASCII text does not round-trip", std::string(text) + " -> " + decoded);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t =
      vls::tok::Tokenizer::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (Verbose()) std::fprintf(stderr, "tokenizer: %s\n", t.status().ToString().c_str());
  if (!t.ok()) {
    if (t.status().message().empty()) Fail("refusal without a message", t.status().ToString());
    return 0;
  }
  Check(**t, "Hello, world! It's 2024:  hello\n\n\tthe end.", /*ascii=*/true);
  Check(**t, "<|end|> hello<think>world <|end|>", /*ascii=*/true);
  Check(**t, std::string(100, 'a') + " " + std::string(80, '1'), /*ascii=*/true);
  Check(**t, "h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 e\xCC\x81 \xEF\xAC\x81",
        /*ascii=*/false);
  Check(**t, "bad \xFF\xC0 bytes", /*ascii=*/false);
  Check(**t, "", /*ascii=*/true);
  // Arbitrary ids: decoding never fails or reads outside a table.
  const std::vector<int32_t> ids = {-1,
                                    0,
                                    1,
                                    97,
                                    255,
                                    256,
                                    300,
                                    301,
                                    t.value()->id_limit(),
                                    t.value()->id_limit() - 1,
                                    1 << 24,
                                    INT32_MAX};
  const std::string decoded = (*t)->Decode(ids);
  if (!vls::tok::IsValidUtf8(decoded)) Fail("Decode of arbitrary ids gave invalid UTF-8", "");
  return 0;
}
