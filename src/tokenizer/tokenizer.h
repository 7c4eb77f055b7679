// A byte-level BPE tokenizer loaded from Hugging Face's tokenizer.json (Qwen2/Qwen3/Qwen3-VL),
// encoding and decoding exactly as the `tokenizers` library does.
//
// Pipeline of Encode: invalid UTF-8 -> U+FFFD; added/special tokens matched in the raw text;
// the rest normalised (NFC), split by the pre-tokenizer regex, mapped to bytes, merged by rank.
#ifndef VLSTACK_TOKENIZER_TOKENIZER_H_
#define VLSTACK_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_limits.h"

namespace vls::tok {

// Thread safety: immutable after loading; every method may be called from any thread.
class Tokenizer {
 public:
  // Parses a tokenizer.json document under ParseUntrustedJson's rules (no trailing bytes, nesting
  // bound, no repeated key) and the bounds of tokenizer_limits.h, with strict types: loading is
  // linear in the document and never throws. Unknown or unsupported components are refused by
  // name.
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text);
  // `path` is a tokenizer.json file or a folder that holds one; a file over
  // kMaxTokenizerJsonBytes is refused after reading at most one byte past the bound.
  static StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);

  // Token ids of `text`; bytes that are not valid UTF-8 are first replaced by U+FFFD.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;

  // Text of `ids`. Ids that name no token are skipped, as tokenizers does (a model's embedding
  // table is usually larger than its vocabulary). Byte sequences that do not form valid UTF-8
  // become U+FFFD.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The id of a token's text (added tokens first, then the BPE vocabulary), or -1.
  int32_t TokenToId(std::string_view token) const;
  // True if `id` is an added token flagged "special".
  bool IsSpecial(int32_t id) const;
  // One past the largest id any token uses.
  int32_t id_limit() const;

  // Bytes that id contributes to decoded text. `*added` tells whether it is an added token
  // (whose bytes are its content, always valid UTF-8). Returns false if the id is unknown or
  // skipped.
  bool TokenBytes(int32_t id, bool skip_special_tokens, std::string* bytes, bool* added) const;

 private:
  Tokenizer() = default;
  Status EncodeText(std::string_view text, std::vector<int32_t>* ids) const;

  AddedVocabulary added_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::unique_ptr<BpeModel> bpe_;
  std::vector<std::string> id_bytes_;  // decoded bytes per BPE id
};

// Turns a stream of ids into text without ever printing part of a character: bytes of an
// incomplete UTF-8 sequence are held until the sequence completes (or Finish is called).
// The concatenation of every Feed and Finish equals Tokenizer::Decode of the same ids.
// Thread safety: one stream per thread; the tokenizer must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer* tokenizer, bool skip_special_tokens = false)
      : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}
  // Returns the text that became printable with this id (possibly empty).
  std::string Feed(int32_t id);
  // Returns whatever is held back, with U+FFFD for an incomplete sequence, and resets.
  std::string Finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_TOKENIZER_H_
