// Bounds on what a tokenizer.json may declare (issue 15: hostile input never takes the process
// down). Loading is linear in the file under these bounds, and nothing is sized from a number
// the file gives before it is checked. Each bound sits far above the tokenizers we know
// (Qwen2/Qwen3/Qwen3-VL: 11 MB, 151643 vocabulary tokens of at most 256 bytes, 151387 merges,
// 26 added tokens of at most 28 bytes, pipelines of two steps).
#ifndef VLSTACK_TOKENIZER_TOKENIZER_LIMITS_H_
#define VLSTACK_TOKENIZER_TOKENIZER_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace vls::tok {

// Size of a tokenizer.json document (the largest Hugging Face ones are about 35 MB). The JSON
// tree of a document costs up to about 20 times its size, so this also bounds memory.
inline constexpr size_t kMaxTokenizerJsonBytes = size_t{64} << 20;
// Every token id (vocabulary and added tokens) lies in [0, kMaxTokenId).
inline constexpr int32_t kMaxTokenId = 1 << 24;
// The vocabulary's largest id may exceed twice its token count by at most this much: ids are
// dense in every real vocabulary, and a sparse one would size id tables from one number.
inline constexpr int32_t kMaxVocabIdSlack = 1 << 16;
// Bytes of one vocabulary token's (byte-level) text.
inline constexpr size_t kMaxTokenBytes = 1024;
// Added tokens, and bytes of one added token's content (matching walks at most this many bytes
// at each position of the text, so it bounds the cost of Encode per input byte).
inline constexpr size_t kMaxAddedTokens = size_t{1} << 18;
inline constexpr size_t kMaxAddedTokenBytes = 256;
// Bytes of all added tokens' contents together: the matching trie holds one node per byte.
inline constexpr size_t kMaxAddedTokenBytesTotal = size_t{2} << 20;
// Merges of the BPE model.
inline constexpr size_t kMaxMerges = size_t{1} << 24;
// Steps of a normalizer, pre_tokenizer, decoder or post_processor once its "Sequence"s are
// flattened, and how deep those Sequences may nest.
inline constexpr int kMaxPipelineSteps = 32;
inline constexpr int kMaxSequenceNesting = 4;
// Bytes of one Split pre-tokenizer's regex (PCRE2 bounds its own compile and match work).
inline constexpr size_t kMaxSplitRegexBytes = 4096;

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_TOKENIZER_LIMITS_H_
