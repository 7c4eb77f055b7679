// UTF-8 helpers shared by the tokenizer and the template engine.
//
// Invalid input policy (docs/adr/0005-tokenizer.md): every ill-formed sequence is replaced by
// U+FFFD using the Unicode "maximal subpart" practice, which is what WHATWG decoders (node's
// Buffer.toString) and Rust's String::from_utf8_lossy do.
#ifndef VLSTACK_TOKENIZER_UTF8_H_
#define VLSTACK_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vls::tok {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length of the well-formed UTF-8 sequence at s[i], or 0 if ill-formed or truncated.
size_t ValidSequenceLength(std::string_view s, size_t i);

// Length of the maximal subpart at s[i] that ValidSequenceLength rejected (>= 1): the bytes one
// U+FFFD replaces.
size_t InvalidSubpartLength(std::string_view s, size_t i);

bool IsValidUtf8(std::string_view s);

// Returns s with each maximal ill-formed subpart replaced by U+FFFD.
std::string SanitizeUtf8(std::string_view s);

// Number of trailing bytes of s that form a valid but incomplete sequence (0..3): the bytes a
// streaming decoder must hold back.
size_t IncompleteTailLength(std::string_view s);

void AppendUtf8(char32_t cp, std::string* out);

// Decodes the code point at s[*i] and advances *i. REQUIRES: s is valid UTF-8 and *i < size.
char32_t NextCodePoint(std::string_view s, size_t* i);

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_UTF8_H_
