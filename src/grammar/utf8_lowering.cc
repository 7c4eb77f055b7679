// UTF-8 range splitting: a code point range whose encodings share a length is cut until each
// piece is a product of byte ranges (the lead bytes, then continuation bytes), then pieces that
// differ in one byte position are merged.
#include "grammar/utf8_lowering.h"

#include <map>
#include <utility>

namespace vls::grammar {
namespace {

constexpr uint32_t kMaxForLength[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

void SplitRange(uint32_t lo, uint32_t hi, std::vector<ByteSequence>* out) {
  for (uint32_t max : kMaxForLength) {
    if (lo <= max && max < hi) {
      SplitRange(lo, max, out);
      SplitRange(max + 1, hi, out);
      return;
    }
  }
  uint8_t lb[4];
  uint8_t hb[4];
  const int n = EncodeUtf8(lo, lb);
  // Cut where a continuation position would not span its full range.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitRange(lo, lo | m, out);
        SplitRange((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitRange(lo, (hi & ~m) - 1, out);
        SplitRange(hi & ~m, hi, out);
        return;
      }
    }
  }
  EncodeUtf8(hi, hb);
  ByteSequence seq(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) seq[static_cast<size_t>(k)].AddRange(lb[k], hb[k]);
  out->push_back(std::move(seq));
}

// One pass of merging sequences equal everywhere except position k. Returns true on a change.
bool MergeAt(size_t k, std::vector<ByteSequence>* seqs) {
  std::map<std::pair<size_t, ByteSequence>, size_t> groups;
  std::vector<ByteSequence> out;
  bool changed = false;
  for (ByteSequence& s : *seqs) {
    if (k >= s.size()) {
      out.push_back(std::move(s));
      continue;
    }
    ByteSequence key = s;
    key[k] = ByteSet{};
    auto [it, inserted] = groups.emplace(std::make_pair(s.size(), std::move(key)), out.size());
    if (inserted) {
      out.push_back(std::move(s));
    } else {
      ByteSet& into = out[it->second][k];
      for (size_t w = 0; w < 4; ++w) into.words[w] |= s[k].words[w];
      changed = true;
    }
  }
  *seqs = std::move(out);
  return changed;
}

}  // namespace

int EncodeUtf8(uint32_t cp, uint8_t out[4]) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

std::vector<ByteSequence> Utf8Sequences(const CharClass& c) {
  CharClass n = c;
  Normalize(&n);
  std::vector<ByteSequence> seqs;
  for (const CodepointRange& r : n.ranges) SplitRange(r.lo, r.hi, &seqs);
  // Merging at the last positions first joins continuation ranges; the lead bytes then.
  for (int pass = 0; pass < 4; ++pass) {
    bool changed = false;
    for (size_t k = 4; k-- > 0;) changed = MergeAt(k, &seqs) || changed;
    if (!changed) break;
  }
  return seqs;
}

}  // namespace vls::grammar
