// Unit tests for the tokenizer layer on small hand-made tokenizer.json documents, including
// corrupt and hostile inputs (labelled "untrusted": they run under the sanitizers).
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <string>

#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace vls::tok {
namespace {

constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A tiny byte-level tokenizer: all 256 byte tokens, a few merges, two added tokens.
std::string TinyTokenizerJson(const std::string& merges_json) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[BytesToByteLevel(std::string(1, static_cast<char>(b)))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["Ġw"] = 259;
  nlohmann::json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
        {{"id", 301}, {"content", "<think>"}, {"special", false}, {"normalized", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", kQwenPattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"vocab", vocab},
        {"merges", nlohmann::json::parse(merges_json)}}}};
  return j.dump();
}

std::unique_ptr<Tokenizer> Tiny() {
  auto t = Tokenizer::FromJson(TinyTokenizerJson(R"([["h","e"],["l","l"],["he","ll"],"Ġ w"])"));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(*t);
}

TEST(Utf8Test, SanitizeReplacesMaximalSubparts) {
  EXPECT_EQ(SanitizeUtf8("a\xE4\xB8z"), "a\xEF\xBF\xBDz");          // truncated 3-byte: one
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: two
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80").size(), 12u);  // above U+10FFFF: four
  EXPECT_EQ(SanitizeUtf8("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
}

TEST(Utf8Test, IncompleteTail) {
  EXPECT_EQ(IncompleteTailLength("ab\xE4\xB8"), 2u);
  EXPECT_EQ(IncompleteTailLength("ab\xE4\xB8\xAD"), 0u);
  EXPECT_EQ(IncompleteTailLength("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteTailLength("\xFF"), 0u);      // can never complete
  EXPECT_EQ(IncompleteTailLength("\xE0\x80"), 0u);  // invalid second byte
}

TEST(ByteLevelTest, RoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  auto back = ByteLevelToBytes(BytesToByteLevel(all));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, all);
  EXPECT_EQ(BytesToByteLevel(" "), "\xC4\xA0");  // "Ġ"
}

TEST(SplitRegexTest, OnigSpaceIncludesNel) {
  auto p = TranslateOnigPattern(R"(\s+(?!\S)|[^\s\p{L}])");
  ASSERT_TRUE(p.ok());
  EXPECT_NE(p->find("\\x{85}"), std::string::npos);
  EXPECT_FALSE(TranslateOnigPattern(R"([\S])").ok());
  auto re = SplitRegex::Compile(kQwenPattern);
  ASSERT_TRUE(re.ok()) << re.status().ToString();
  std::vector<std::string_view> pieces;
  ASSERT_TRUE((*re)->Split("Hello   world's 123\n\n", &pieces).ok());
  std::vector<std::string> got(pieces.begin(), pieces.end());
  EXPECT_EQ(got,
            (std::vector<std::string>{"Hello", "  ", " world", "'s", " ", "1", "2", "3", "\n\n"}));
}

TEST(TokenizerTest, MergesByRankAndMatchesAddedTokens) {
  auto t = Tiny();
  auto ids = t->Encode("hello<|end|> w<think>");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{258, 'o', 300, 259, 301}));
  EXPECT_EQ(t->Decode(*ids), "hello<|end|> w<think>");
  EXPECT_EQ(t->Decode(*ids, /*skip_special_tokens=*/true), "hello w<think>");
}

TEST(TokenizerTest, MergesAsStringsEqualPairs) {
  auto a = Tokenizer::FromJson(TinyTokenizerJson(R"(["h e","l l","he ll","Ġ w"])"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*(*a)->Encode("hello"), *Tiny()->Encode("hello"));
}

TEST(TokenizerTest, InvalidUtf8BecomesReplacementChar) {
  auto t = Tiny();
  EXPECT_EQ(*t->Encode("a\xFF"), *t->Encode("a\xEF\xBF\xBD"));
  EXPECT_TRUE(t->Encode("").ok());
  EXPECT_TRUE(t->Encode("")->empty());
}

TEST(TokenizerTest, DecodeSkipsUnknownIdsAndReplacesBrokenBytes) {
  auto t = Tiny();
  const std::vector<int32_t> ids = {'a', 999999, -5, 0xE4};
  EXPECT_EQ(t->Decode(ids), "a\xEF\xBF\xBD");
}

TEST(StreamDecoderTest, HoldsBackIncompleteCharacters) {
  auto t = Tiny();
  const std::string text = "\xE4\xB8\xAD\xF0\x9F\x98\x80!";  // "中😀!"
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  StreamDecoder dec(t.get());
  std::vector<std::string> parts;
  for (int32_t id : ids) parts.push_back(dec.Feed(id));
  EXPECT_EQ(parts[0], "");
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(parts[2], "\xE4\xB8\xAD");
  EXPECT_EQ(parts[5], "");
  EXPECT_EQ(parts[6], "\xF0\x9F\x98\x80");
  EXPECT_EQ(dec.Finish(), "");
  // A dangling lead byte is flushed as U+FFFD, exactly as Decode does.
  StreamDecoder dec2(t.get());
  std::string s = dec2.Feed(0xE4) + dec2.Feed(300) + dec2.Feed(0xE4);
  s += dec2.Finish();
  EXPECT_EQ(s, t->Decode(std::vector<int32_t>{0xE4, 300, 0xE4}));
}

// Corrupt and unsupported tokenizer.json documents fail with a message naming the problem.
TEST(TokenizerCorruptTest, RefusesBadDocuments) {
  auto fails_with = [](const std::string& json, const std::string& needle) {
    auto t = Tokenizer::FromJson(json);
    ASSERT_FALSE(t.ok()) << "accepted: " << json.substr(0, 80);
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().ToString();
  };
  fails_with("{", "not valid JSON");
  fails_with("[]", "JSON object");
  fails_with("{}", "model");
  std::string good = TinyTokenizerJson(R"([["h","e"]])");
  auto with = [&](const std::string& key, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(good);
    j[key] = v;
    return j.dump();
  };
  fails_with(with("normalizer", {{"type", "Lowercase"}}), "Lowercase");
  fails_with(with("decoder", {{"type", "WordPiece"}}), "WordPiece");
  fails_with(with("post_processor", {{"type", "TemplateProcessing"}}), "TemplateProcessing");
  fails_with(with("pre_tokenizer", {{"type", "Whitespace"}}), "Whitespace");
  fails_with(with("pre_tokenizer",
                  {{"type", "Split"}, {"pattern", {{"Regex", "(("}}}, {"behavior", "Isolated"}}),
             "does not compile");
  fails_with(with("truncation", {{"max_length", 5}}), "truncation");
  fails_with(with("added_tokens", {{{"id", "x"}}}), "added_tokens[0]");
  nlohmann::json j = nlohmann::json::parse(good);
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"h", "nope"})});
  fails_with(j.dump(), "merges[0]");
  j["model"]["merges"] = nlohmann::json::array({"h e x"});
  fails_with(j.dump(), "merges[0]");
  j["model"]["merges"] = nlohmann::json::array();
  j["model"]["vocab"]["bad"] = -1;
  fails_with(j.dump(), "outside");
  j["model"]["vocab"]["bad"] = "x";
  fails_with(j.dump(), "not an integer");
  j["model"]["vocab"].erase("bad");
  j["model"]["type"] = "Unigram";
  fails_with(j.dump(), "Unigram");
}

TEST(TokenizerCorruptTest, HostileTextNeverCrashes) {
  auto t = Tiny();
  std::string junk;
  uint32_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 1103515245u + 12345u;
    junk.push_back(static_cast<char>(x >> 16));
  }
  auto ids = t->Encode(junk);
  ASSERT_TRUE(ids.ok());
  EXPECT_FALSE(t->Decode(*ids).empty());
  EXPECT_TRUE(t->Encode(std::string(100000, ' ')).ok());
  EXPECT_TRUE(t->Encode(std::string(100000, 'a')).ok());
}

}  // namespace
}  // namespace vls::tok
