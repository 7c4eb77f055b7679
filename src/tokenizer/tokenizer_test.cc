// Unit tests for the tokenizer layer on small hand-made tokenizer.json documents, including
// corrupt and hostile inputs (labelled "untrusted": they run under the sanitizers).
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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
  parts.reserve(ids.size());
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
  fails_with("{", "invalid JSON");
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
  fails_with(j.dump(), "model.vocab[\"bad\"] must be an integer in [0, 16777215], not -1");
  j["model"]["vocab"]["bad"] = "x";
  fails_with(j.dump(), "model.vocab[\"bad\"] must be an integer in [0, 16777215], not the string");
  j["model"]["vocab"].erase("bad");
  j["model"]["type"] = "Unigram";
  fails_with(j.dump(), "Unigram");
}

// --- Hostile tokenizer.json (issue 15) ---------------------------------------------------------

using Json = nlohmann::json;

Json TinyJson() { return Json::parse(TinyTokenizerJson(R"([["h","e"],["l","l"],["he","ll"]])")); }

void ExpectRefused(const std::string& text, const std::string& needle) {
  auto t = Tokenizer::FromJson(text);
  ASSERT_FALSE(t.ok()) << "accepted; expected an error mentioning " << needle;
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().ToString();
}
void ExpectRefused(const Json& j, const std::string& needle) { ExpectRefused(j.dump(), needle); }

TEST(TokenizerHostileTest, DeepNestingNulAndDuplicateKeys) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  ExpectRefused("{\"model\": " + deep + "}", "nests deeper than 64");
  ExpectRefused(deep, "nests deeper than 64");
  const std::string good = TinyJson().dump();
  ASSERT_TRUE(Tokenizer::FromJson(good).ok());
  ExpectRefused(good + std::string("\0garbage", 8), "NUL byte");
  ExpectRefused(good + "{}", "invalid JSON");
  ExpectRefused(good.substr(0, good.size() - 1) + ", \"model\": {}}", "'model' appears twice");
}

TEST(TokenizerHostileTest, WrongTypesAreErrorsNotExceptions) {
  struct Case {
    const char* pointer;  // JSON pointer into TinyJson()
    Json value;
    const char* needle;
  };
  const Case cases[] = {
      {"/model/type", 5, "model.type must be a string, not the integer 5"},
      {"/model/byte_fallback", 1, "model.byte_fallback must be true or false"},
      {"/model/ignore_merges", "true", "model.ignore_merges must be true or false"},
      {"/model/unk_token", 0, "model.unk_token must be a string"},
      {"/model/vocab/he", 4294967297LL, "model.vocab[\"he\"] must be an integer in [0, 16777215]"},
      {"/model/vocab/he", 2.5, "model.vocab[\"he\"] must be an integer"},
      {"/model/vocab/he", true, "model.vocab[\"he\"] must be an integer"},
      {"/model/merges/0", Json::array({1, 2}), "merges[0] is neither"},
      {"/model/merges/0", 7, "merges[0] is neither"},
      {"/model/merges", "h e", "model.merges must be an array"},
      {"/added_tokens/0/id", 4294967596LL,
       "added_tokens[0].id must be an integer in [0, 16777215]"},
      {"/added_tokens/0/id", "300", "added_tokens[0].id must be an integer"},
      {"/added_tokens/0/content", 5, "added_tokens[0].content must be a string"},
      {"/added_tokens/0/special", 1, "added_tokens[0].special must be true or false"},
      {"/added_tokens/1/normalized", "no", "added_tokens[1].normalized must be true or false"},
      {"/added_tokens/0", "x", "added_tokens[0] needs an integer"},
      {"/added_tokens", Json::object(), "added_tokens must be an array"},
      {"/normalizer/type", 7, "normalizer.type must be a string"},
      {"/normalizer", Json::array(), "normalizer must be an object"},
      {"/pre_tokenizer/pretokenizers/0/behavior", 5, "Split.behavior must be a string"},
      {"/pre_tokenizer/pretokenizers/0/invert", 0, "Split.invert must be true or false"},
      {"/pre_tokenizer/pretokenizers/0/pattern/Regex", Json::array(), "Regex must be a string"},
      {"/pre_tokenizer/pretokenizers/1/use_regex", "yes", "use_regex must be true or false"},
      {"/pre_tokenizer/pretokenizers/1/add_prefix_space", 0, "add_prefix_space must be true"},
      {"/pre_tokenizer/pretokenizers", Json::object(), "\"pretokenizers\" must be an array"},
      {"/pre_tokenizer/type", Json::array(), "pre_tokenizer.type must be a string"},
      {"/decoder", Json::object(), "decoder has no \"type\""},
      {"/decoder", 3, "decoder must be an object"},
      {"/post_processor/type", false, "post_processor.type must be a string"},
  };
  for (const Case& c : cases) {
    Json j = TinyJson();
    j[Json::json_pointer(c.pointer)] = c.value;
    ExpectRefused(j, c.needle);
  }
  // null is "absent" (Hugging Face writes None as null): the defaults apply.
  Json j = TinyJson();
  j["model"]["byte_fallback"] = nullptr;
  j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = nullptr;
  j["added_tokens"][0]["lstrip"] = nullptr;
  EXPECT_TRUE(Tokenizer::FromJson(j.dump()).ok());
}

TEST(TokenizerHostileTest, SizesAndIdsAreBounded) {
  // One id near 2^24 in a small vocabulary would size id tables of 2^24 entries.
  Json j = TinyJson();
  j["model"]["vocab"]["far"] = kMaxTokenId - 1;
  ExpectRefused(j, "ids must be dense");
  // Dense ids near the top are fine.
  j = TinyJson();
  j["model"]["vocab"]["near"] = 2 * 260 + kMaxVocabIdSlack - 1;
  EXPECT_TRUE(Tokenizer::FromJson(j.dump()).ok());
  j = TinyJson();
  j["model"]["vocab"]["x" + std::string(kMaxTokenBytes, 'y')] = 400;
  ExpectRefused(j, "bytes, over the bound 1024 (kMaxTokenBytes)");
  j = TinyJson();
  j["added_tokens"][0]["content"] = std::string(kMaxAddedTokenBytes + 1, '<');
  ExpectRefused(j, "added_tokens[0].content has 257 bytes, over the bound 256");
  j = TinyJson();
  for (int i = 0; i < 9000; ++i) {
    j["added_tokens"].push_back(
        {{"id", 1000 + i}, {"content", std::to_string(i) + std::string(240, 'x')}});
  }
  ExpectRefused(j, "pass 2097152 bytes together (kMaxAddedTokenBytesTotal)");
  j = TinyJson();
  j["added_tokens"][1]["content"] = "<|end|>";
  ExpectRefused(j, "added_tokens[1]: content \"<|end|>\" is already added token 300");
  j = TinyJson();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      "a" + std::string(kMaxSplitRegexBytes, '|');
  ExpectRefused(j, "kMaxSplitRegexBytes");
}

// Sequences flatten (Hugging Face allows them nested) within kMaxSequenceNesting and
// kMaxPipelineSteps.
TEST(TokenizerHostileTest, NestedSequencesAreBounded) {
  auto nest = [](Json leaf, const char* list_key, int depth) {
    for (int i = 0; i < depth; ++i) leaf = Json{{"type", "Sequence"}, {list_key, {leaf}}};
    return leaf;
  };
  Json j = TinyJson();
  j["normalizer"] = nest(Json{{"type", "NFC"}}, "normalizers", kMaxSequenceNesting);
  j["decoder"] = nest(Json{{"type", "ByteLevel"}}, "decoders", kMaxSequenceNesting);
  j["pre_tokenizer"] = Json{{"type", "Sequence"},
                            {"pretokenizers",
                             {nest(j["pre_tokenizer"]["pretokenizers"][0], "pretokenizers", 3),
                              j["pre_tokenizer"]["pretokenizers"][1]}}};
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*(*t)->Encode("hello<|end|>"), *Tiny()->Encode("hello<|end|>"));

  j = TinyJson();
  j["normalizer"] = nest(Json{{"type", "NFC"}}, "normalizers", kMaxSequenceNesting + 1);
  ExpectRefused(j, "normalizer Sequences nest deeper than 4");
  j = TinyJson();
  j["post_processor"] = nest(Json{{"type", "ByteLevel"}}, "processors", 10);
  ExpectRefused(j, "post_processor Sequences nest deeper");
  j = TinyJson();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", Json::array()}};
  for (int i = 0; i <= kMaxPipelineSteps; ++i)
    j["normalizer"]["normalizers"].push_back({{"type", "NFD"}});
  ExpectRefused(j, "normalizer has more than 32 steps");
  j = TinyJson();
  j["pre_tokenizer"]["pretokenizers"] = Json::array();
  for (int i = 0; i <= kMaxPipelineSteps; ++i) {
    j["pre_tokenizer"]["pretokenizers"].push_back(TinyJson()["pre_tokenizer"]["pretokenizers"][0]);
  }
  ExpectRefused(j, "pre_tokenizer has more than 32 steps");
}

// Loading is linear in the document: 112,896 merges (chains "a b" -> "ab" -> "abc" over a
// 48-symbol alphabet) load in one pass. (A million, 30 MB, load in about 4 s on top of the
// JSON parse; the real Qwen3 tokenizer has 151,387.)
TEST(TokenizerHostileTest, ManyMergesLoadInOnePass) {
  Json j = TinyJson();
  Json& vocab = j["model"]["vocab"];
  Json merges = Json::array();
  std::vector<std::string> alphabet;
  for (int c = 0x100; alphabet.size() < 48; ++c) {  // 48 byte-level symbols Ā, ā, ...
    std::string s;
    AppendUtf8(static_cast<char32_t>(c), &s);
    if (!vocab.contains(s)) alphabet.push_back(s);
  }
  int next_id = 1000;
  for (const std::string& s : alphabet) vocab[s] = next_id++;
  for (const std::string& a : alphabet) {
    for (const std::string& b : alphabet) {
      vocab[a + b] = next_id++;
      merges.push_back(a + " " + b);
    }
  }
  for (const std::string& a : alphabet) {
    for (const std::string& b : alphabet) {
      for (const std::string& c : alphabet) {
        vocab[a + b + c] = next_id++;
        merges.push_back(Json::array({a + b, c}));
      }
    }
  }
  j["model"]["merges"] = std::move(merges);
  const std::string text = j.dump();
  auto t = Tokenizer::FromJson(text);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->id_limit(), next_id);
}

// Matching added tokens walks a byte trie: thousands of tokens sharing a long prefix cost at most
// kMaxAddedTokenBytes steps per byte of text (a scan of every candidate token at every position
// took minutes here).
TEST(TokenizerHostileTest, ManyAddedTokensWithASharedPrefixMatchFast) {
  Json j = TinyJson();
  const std::string prefix(200, 'a');
  j["added_tokens"] = Json::array();
  for (int i = 0; i < 8000; ++i) {
    j["added_tokens"].push_back(
        {{"id", 1000 + i}, {"content", prefix + std::to_string(i)}, {"special", true}});
  }
  j["added_tokens"].push_back({{"id", 999}, {"content", "a"}, {"special", false}});
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::string text = std::string(50000, 'a') + "17";
  auto ids = (*t)->Encode(text);
  ASSERT_TRUE(ids.ok());
  // The longest token wins where it matches: 999 x 49800, then "a...a17" (id 1017).
  ASSERT_EQ(ids->size(), 49801u);
  EXPECT_EQ(ids->back(), 1017);
  EXPECT_EQ((*t)->Decode(*ids), text);
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
