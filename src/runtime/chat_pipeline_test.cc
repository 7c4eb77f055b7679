#include "runtime/chat_pipeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/file.h"
#include "model/test_checkpoint.h"
#include "runtime/batch_engine.h"
#include "runtime/pipeline_test_util.h"
#include "tokenizer/utf8.h"

namespace vls {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kVocab = 512;
constexpr int32_t kImEnd = kVocab - 1;
constexpr int32_t kEndOfText = kVocab - 2;
constexpr int kCapacity = 96;

// Per process, so concurrent runs of the suite (several build trees) never share a folder.
std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return JoinPath(tmp ? tmp : "/tmp",
                  "vls_chat_pipeline_" + std::to_string(::getpid()) + "_" + name);
}

// Removes the folders a test wrote when it ends.
class FolderCleanup {
 public:
  ~FolderCleanup() {
    for (const std::string& d : dirs_) std::filesystem::remove_all(d);
  }
  const std::string& Add(const std::string& dir) { return dirs_.emplace_back(dir); }

 private:
  std::vector<std::string> dirs_;
};

// A tiny untied model folder with the tiny chat tokenizer and template.
std::string WriteModel(const std::string& name, const std::string& arch = "qwen3-vl",
                       int vocab = kVocab) {
  const std::string dir = TestDir(name);
  std::filesystem::remove_all(dir);
  TestModelSpec spec;
  spec.arch = arch;
  spec.vocab = vocab;
  spec.tied = false;
  spec.dtype = DType::kF32;
  spec.deepstack = arch == "qwen3-vl" ? 1 : 0;
  spec.seed = 3;
  EXPECT_TRUE(WriteTestCheckpoint(dir, spec, false).ok());
  EXPECT_TRUE(
      WriteStringToFile(JoinPath(dir, "tokenizer.json"), testing::TinyChatTokenizerJson(kVocab))
          .ok());
  Json cfg = {{"eos_token", "<|im_end|>"},
              {"pad_token", "<|endoftext|>"},
              {"chat_template", testing::kTinyChatTemplate}};
  EXPECT_TRUE(WriteStringToFile(JoinPath(dir, "tokenizer_config.json"), cfg.dump()).ok());
  return dir;
}

std::unique_ptr<LoadedModel> Load(const std::string& dir, int slots = 1) {
  LoadOptions o;
  o.capacity = kCapacity;
  o.slots = slots;
  o.threads = 2;
  auto lm = LoadedModel::Load(dir, o);
  EXPECT_TRUE(lm.ok()) << lm.status().ToString();
  return lm.ok() ? std::move(*lm) : nullptr;
}

ChatRequest UserSays(const std::string& text) {
  ChatRequest r;
  r.messages = Json::array({{{"role", "user"}, {"content", text}}});
  return r;
}

class ChatPipelineTest : public ::testing::Test {
 protected:
  void Open(const std::string& dir) {
    model_ = Load(dir);
    ASSERT_TRUE(model_);
    auto p = ChatPipeline::Load(dir, *model_);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pipeline_ = std::move(*p);
  }
  std::string Write(const std::string& name, const std::string& arch = "qwen3-vl") {
    return cleanup_.Add(WriteModel(name, arch));
  }
  FolderCleanup cleanup_;  // declared first: destroyed after the model that maps the folder
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<ChatPipeline> pipeline_;
};

TEST_F(ChatPipelineTest, RendersTokenizesAndBuildsASequentialMropeRequest) {
  Open(Write("mrope"));
  ChatRequest req = UserSays("hello");
  req.messages.insert(req.messages.begin(), Json{{"role", "system"}, {"content", "be brief"}});
  auto chat = pipeline_->Prepare(req);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const std::string want =
      "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(chat->prompt, want);
  const GenerationRequest& r = *chat->request;
  EXPECT_EQ(r.tokens, pipeline_->tokenizer().Encode(want).value());
  EXPECT_EQ(r.tokens.front(), kVocab - 3);  // <|im_start|> as one special token
  const auto S = static_cast<int64_t>(r.tokens.size());
  EXPECT_EQ(r.positions.mode, PositionMode::kMrope);
  EXPECT_EQ(r.positions.length, S);
  EXPECT_EQ(r.positions.At(S - 1),
            (RopeCoord{static_cast<int32_t>(S - 1), static_cast<int32_t>(S - 1),
                       static_cast<int32_t>(S - 1)}));
  EXPECT_EQ(r.rope_delta, 0);
  EXPECT_EQ(r.max_new_tokens, kCapacity - S);  // the rest of the context by default
  EXPECT_TRUE(r.embeddings.empty());
  EXPECT_TRUE(chat->media.empty());
  // The test checkpoint's generation_config.json says do_sample false: greedy.
  EXPECT_EQ(pipeline_->generation_defaults().temperature, 0.0f);
}

TEST_F(ChatPipelineTest, StructuredOutputIsCompiledThroughTheCache) {
  Open(Write("structured"));
  EXPECT_EQ(pipeline_->grammar_vocab()->size(), kVocab);
  ChatRequest req = UserSays("a number please");
  auto plain = pipeline_->Prepare(req);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->request->grammar, nullptr);
  req.structured.kind = StructuredOutput::Kind::kRegex;
  req.structured.source = "[0-9]{1,4}";
  auto a = pipeline_->Prepare(req);
  auto b = pipeline_->Prepare(req);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  ASSERT_NE(a->request->grammar, nullptr);
  EXPECT_EQ(a->request->grammar, b->request->grammar);  // compiled once
  EXPECT_EQ(pipeline_->grammar_cache().misses(), 1u);
  EXPECT_EQ(pipeline_->grammar_cache().hits(), 1u);
  // Raw prompts take it too.
  auto text = pipeline_->PrepareText("12", req);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(text->request->grammar, a->request->grammar);
  // The front end's refusal, about the field the format came from.
  req.structured.source = "(a)\\1";
  req.structured.field = "regex";
  auto bad = pipeline_->Prepare(req);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().param(), "regex");
  EXPECT_EQ(bad.status().message().rfind("regex: ", 0), 0u) << bad.status().ToString();
  // A schema keyword outside the subset is named with its path.
  ChatRequest schema = UserSays("x");
  schema.structured.kind = StructuredOutput::Kind::kJsonSchema;
  schema.structured.source = R"({"type": "object", "properties": {"a": {"not": {}}}})";
  schema.structured.field = "response_format";
  auto refused = pipeline_->Prepare(schema);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().param(), "response_format");
  EXPECT_NE(refused.status().message().find("\"not\""), std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("/properties/a"), std::string::npos)
      << refused.status().ToString();
}

// The mask makes a greedy random model's reply follow the regex, end to end through the engine.
TEST_F(ChatPipelineTest, AConstrainedReplyMatchesItsRegex) {
  Open(Write("constrained"));
  ChatRequest req = UserSays("digits");
  req.structured.kind = StructuredOutput::Kind::kRegex;
  req.structured.source = "(ab|[0-9]{2})-[a-c]{3}";
  req.max_tokens = 20;
  auto chat = pipeline_->Prepare(req);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  BatchEngine engine(*model_, [&](const TokenEvent& e) {
    if (e.token >= 0) tokens.push_back(e.token);
    if (e.finish != FinishReason::kNone) finish = e.finish;
    return true;
  });
  ASSERT_TRUE(engine.Submit(std::move(chat->request)).ok());
  engine.RunUntilIdle();
  EXPECT_EQ(finish, FinishReason::kStop);
  const std::string text = pipeline_->tokenizer().Decode(tokens);
  ASSERT_EQ(text.size(), 6u) << text;
  EXPECT_TRUE((text.substr(0, 2) == "ab") || (std::isdigit(static_cast<unsigned char>(text[0])) &&
                                              std::isdigit(static_cast<unsigned char>(text[1]))))
      << text;
  EXPECT_EQ(text[2], '-');
  EXPECT_EQ(text.find_first_not_of("abc", 3), std::string::npos) << text;
}

TEST_F(ChatPipelineTest, OneDimensionalModelGetsOneDimensionalPositions) {
  Open(Write("one_d", "qwen3"));
  auto chat = pipeline_->Prepare(UserSays("hi"));
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->request->positions.mode, PositionMode::k1D);
  EXPECT_EQ(chat->request->positions.data.size(), chat->request->tokens.size());
}

TEST_F(ChatPipelineTest, TemplateVariablesToolsThinkingAndNoGenerationPrompt) {
  Open(Write("vars"));
  ChatRequest req = UserSays("x");
  req.tools = Json::array({{{"type", "function"}}, {{"type", "function"}}});
  req.enable_thinking = false;
  auto text = pipeline_->Render(req);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text,
            "<|im_start|>system\ntools:2<|im_end|>\n<|im_start|>user\nx<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  req.tools = nullptr;
  req.enable_thinking.reset();
  req.add_generation_prompt = false;
  EXPECT_EQ(pipeline_->Render(req).value(), "<|im_start|>user\nx<|im_end|>\n");
  req.template_kwargs = Json{{"enable_thinking", false}, {"add_generation_prompt", true}};
  // The request's own add_generation_prompt wins over template_kwargs.
  EXPECT_EQ(pipeline_->Render(req).value(), "<|im_start|>user\nx<|im_end|>\n");
  req.tools = "not a list";
  EXPECT_FALSE(pipeline_->Prepare(req).ok());
}

TEST_F(ChatPipelineTest, TextPartsAreAcceptedAndImagesWithoutAnEncoderAreRefusedByIndex) {
  Open(Write("media"));
  ChatRequest req;
  req.messages = Json::parse(R"([
      {"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
  ])");
  auto ok = pipeline_->Prepare(req);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_NE(ok->prompt.find("user\nab<|im_end|>"), std::string::npos) << ok->prompt;

  for (const char* part :
       {R"({"type": "image", "image": "cat.png"})",
        R"({"type": "image_url", "image_url": {"url": "data:,"}})", R"({"image": "cat.png"})"}) {
    req.messages[1]["content"].push_back(Json::parse(part));
    auto r = pipeline_->Prepare(req);
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("messages[1].content[2]"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("loaded without its vision tower"), std::string::npos)
        << r.status().message();
    req.messages[1]["content"].erase(2);
  }
  req.messages[1]["content"].push_back(Json::parse(R"({"type": "video", "video": "v.mp4"})"));
  auto v = pipeline_->Prepare(req);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("cannot take videos"), std::string::npos)
      << v.status().message();

  // CollectMedia lists them in order (the vision issue's entry point).
  auto media = CollectMedia(Json::parse(R"([{"role": "user", "content": [
      {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}},
      {"type": "video", "video": "v"}]}])"));
  ASSERT_TRUE(media.ok());
  ASSERT_EQ(media->size(), 2u);
  EXPECT_EQ((*media)[0].kind, MediaItem::Kind::kImage);
  EXPECT_EQ((*media)[0].part_index, 1u);
  EXPECT_EQ((*media)[1].kind, MediaItem::Kind::kVideo);
}

TEST_F(ChatPipelineTest, MalformedMessagesAreRefusedByName) {
  Open(Write("malformed"));
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"[]", "non-empty"},
      {R"({"role": "user"})", "non-empty list"},
      {R"([{"content": "x"}])", "messages[0] needs a string \"role\""},
      {R"([{"role": "user", "content": 5}])", "messages[0].content"},
      {R"([{"role": "user", "content": [{"type": "text"}]}])", "messages[0].content[0]"},
      {R"([{"role": "user", "content": [{"type": "audio"}]}])", "unsupported content part"},
      {R"([{"role": "user", "content": ["x"]}])", "messages[0].content[0] must be an object"},
  };
  for (const auto& [messages, needle] : cases) {
    ChatRequest req;
    req.messages = Json::parse(messages);
    auto r = pipeline_->Prepare(req);
    ASSERT_FALSE(r.ok()) << messages;
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << messages << ": " << r.status().message();
  }
}

TEST_F(ChatPipelineTest, LimitsStopStringsAndRequestFieldsAreValidated) {
  Open(Write("limits"));
  ChatRequest req = UserSays("hello");
  req.stop = {"ok", ""};
  auto r = pipeline_->Prepare(req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("stop[1] is empty"), std::string::npos);
  req.stop = {"\n"};
  req.max_tokens = 5;
  req.logprobs = 3;
  req.sampling.temperature = 0.5f;
  req.sampling.seed = 42;
  auto chat = pipeline_->Prepare(req);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->request->max_new_tokens, 5);
  EXPECT_EQ(chat->request->logprobs, 3);
  EXPECT_EQ(chat->request->sampling.seed, std::optional<uint64_t>(42));
  EXPECT_EQ(chat->stop, std::vector<std::string>{"\n"});

  req.max_tokens = kCapacity;
  r = pipeline_->Prepare(req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("context capacity"), std::string::npos);
  req.max_tokens = 0;
  EXPECT_FALSE(pipeline_->Prepare(req).ok());
  req.max_tokens.reset();
  req.logprobs = kMaxTopLogprobs + 1;
  EXPECT_FALSE(pipeline_->Prepare(req).ok());  // ValidateRequest runs here, not in the engine
  req.logprobs = -1;
  req.stop_token_ids = {kVocab};
  EXPECT_FALSE(pipeline_->Prepare(req).ok());
  req.stop_token_ids.clear();
  auto long_prompt = pipeline_->Prepare(UserSays(std::string(4 * kCapacity, 'z') + " q w e"));
  ASSERT_FALSE(long_prompt.ok());
  EXPECT_NE(long_prompt.status().message().find("no room to generate"), std::string::npos)
      << long_prompt.status().message();
}

// Issue 31: a prompt past the chat template's budget was ResourceExhausted (the server's 429,
// retried by clients) after a long render. A prompt that cannot fit is OutOfRange naming the
// messages, and text that cannot fit is refused before rendering.
TEST_F(ChatPipelineTest, AnOverLongPromptIsOutOfRangeNamingTheMessages) {
  Open(Write("too_long"));
  // Far more text than the context holds: refused from its size, before the template runs.
  auto big = pipeline_->Prepare(UserSays(std::string(100000, 'z')));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(big.status().param(), "messages");
  EXPECT_NE(big.status().message().find("bytes of text"), std::string::npos)
      << big.status().message();
  // Past the template's output budget: the render's ResourceExhausted is the client's error.
  auto rendered = pipeline_->Render(UserSays(std::string(jinja::kMaxRenderOutputBytes + 1, 'y')));
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.status().code(), StatusCode::kOutOfRange) << rendered.status().ToString();
  EXPECT_EQ(rendered.status().param(), "messages");
  // Tokens past the capacity (the text alone does not prove it): the same code and param.
  auto tokens = pipeline_->Prepare(UserSays(std::string(4 * kCapacity, 'z') + " q w e"));
  ASSERT_FALSE(tokens.ok());
  EXPECT_EQ(tokens.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(tokens.status().param(), "messages");
  ChatRequest req = UserSays("hello");
  req.max_tokens = kCapacity;
  auto room = pipeline_->Prepare(req);
  ASSERT_FALSE(room.ok());
  EXPECT_EQ(room.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(room.status().param(), "messages");
  // A raw prompt names the prompt.
  auto raw = pipeline_->PrepareText(std::string(100000, 'z'), ChatRequest{});
  ASSERT_FALSE(raw.ok());
  EXPECT_EQ(raw.status().param(), "prompt");
  // Assistant turns are not counted before rendering (templates rewrite them).
  ChatRequest history = UserSays("hi");
  history.messages.push_back(
      Json{{"role", "assistant"}, {"content", std::string(20000, ' ').replace(0, 1, "a")}});
  auto h = pipeline_->Prepare(history);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("tokens but the context capacity"), std::string::npos)
      << h.status().message();
}

TEST_F(ChatPipelineTest, MalformedMessagePartsNameTheirPath) {
  Open(Write("paths"));
  ChatRequest req;
  req.messages = Json::parse(R"([{"role": "user", "content": "a"},
      {"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "audio"}]}])");
  auto r = pipeline_->Prepare(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().param(), "messages[1].content[1].type");
  req.messages = Json::parse(R"([{"content": "x"}])");
  EXPECT_EQ(pipeline_->Prepare(req).status().param(), "messages[0].role");
}

TEST_F(ChatPipelineTest, FingerprintIsShortAndStable) {
  Open(Write("fingerprint"));
  const std::string fp = pipeline_->fingerprint();
  ASSERT_EQ(fp.size(), 13u);
  EXPECT_EQ(fp.rfind("fp_", 0), 0u);
  EXPECT_EQ(fp, "fp_" + model_->Identity().substr(0, 10));
  EXPECT_EQ(fp, pipeline_->fingerprint());
}

TEST_F(ChatPipelineTest, EndOfTurnIdsJoinTheStopIdsUnlessIgnoreEos) {
  const std::string dir = Write("eos");
  // Without generation_config.json the engine stops on config.json's <|im_end|> only; the
  // tokenizer's eos_token <|endoftext|> joins the request's stop ids.
  std::filesystem::remove(JoinPath(dir, "generation_config.json"));
  Json cfg = {{"eos_token", "<|endoftext|>"}, {"chat_template", testing::kTinyChatTemplate}};
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir, "tokenizer_config.json"), cfg.dump()).ok());
  Open(dir);
  EXPECT_EQ(model_->config().eos_token_ids, std::vector<int>{kImEnd});
  EXPECT_EQ(pipeline_->eos_token_ids(), (std::vector<int32_t>{kEndOfText, kImEnd}));
  ChatRequest req = UserSays("x");
  req.stop_token_ids = {5};
  auto chat = pipeline_->Prepare(req);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->request->stop_token_ids, (std::vector<int32_t>{5, kEndOfText}));
  EXPECT_FALSE(chat->request->ignore_eos);
  req.ignore_eos = true;
  chat = pipeline_->Prepare(req);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->request->stop_token_ids, std::vector<int32_t>{5});
  EXPECT_TRUE(chat->request->ignore_eos);
}

TEST_F(ChatPipelineTest, GenerationConfigGivesTheSamplingDefaults) {
  const std::string dir = Write("gen");
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir, "generation_config.json"),
                                R"({"do_sample": true, "temperature": 0.7, "top_p": 0.8,
                                    "top_k": 20, "eos_token_id": [511, 510]})")
                  .ok());
  Open(dir);
  const SamplingParams& d = pipeline_->generation_defaults();
  EXPECT_FLOAT_EQ(d.temperature, 0.7f);
  EXPECT_FLOAT_EQ(d.top_p, 0.8f);
  EXPECT_EQ(d.top_k, 20);
  ASSERT_TRUE(WriteStringToFile(JoinPath(dir, "generation_config.json"),
                                R"({"do_sample": true, "top_p": "high"})")
                  .ok());
  auto bad = ChatPipeline::Load(dir, *model_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("top_p"), std::string::npos);
}

TEST(ChatPipelineLoadTest, MissingOrForeignTokenizerIsRefused) {
  FolderCleanup cleanup;
  const std::string dir = cleanup.Add(WriteModel("no_tokenizer"));
  std::filesystem::remove(JoinPath(dir, "tokenizer.json"));
  auto lm = Load(dir);
  ASSERT_TRUE(lm);
  auto p = ChatPipeline::Load(dir, *lm);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("tokenizer.json"), std::string::npos);

  // The tiny tokenizer's special ids (up to 511) do not fit a 400-token vocabulary.
  const std::string small = cleanup.Add(WriteModel("small_vocab", "qwen3-vl", 400));
  auto lm2 = Load(small);
  ASSERT_TRUE(lm2);
  auto p2 = ChatPipeline::Load(small, *lm2);
  ASSERT_FALSE(p2.ok());
  EXPECT_NE(p2.status().message().find("does not belong to this model"), std::string::npos)
      << p2.status().message();
}

// The whole pipeline through the engine: the streamed text equals the decoded tokens cut at the
// stop string, and a stop string cancels the request at once.
TEST_F(ChatPipelineTest, StreamsThroughTheEngineAndCutsAtTheStopString) {
  Open(Write("engine"));
  ChatRequest req = UserSays("hello there");
  req.max_tokens = 12;
  req.ignore_eos = true;
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  {
    auto chat = pipeline_->Prepare(req);
    ASSERT_TRUE(chat.ok()) << chat.status().ToString();
    TextStream stream = pipeline_->NewTextStream(*chat);
    BatchEngine engine(*model_, [&](const TokenEvent& e) {
      if (e.token >= 0) tokens.push_back(e.token);
      TextDelta d = stream.Next(e);
      text += d.text;
      if (d.finish != FinishReason::kNone) finish = d.finish;
      return !d.cancel_request;
    });
    ASSERT_TRUE(engine.Submit(std::move(chat->request)).ok());
    engine.RunUntilIdle();
  }
  ASSERT_EQ(tokens.size(), 12u);
  EXPECT_EQ(finish, FinishReason::kLength);
  EXPECT_EQ(text, pipeline_->tokenizer().Decode(tokens, /*skip_special_tokens=*/true));
  if (text.size() < 2) GTEST_SKIP() << "the random model produced too little text: " << text;

  // A stop string taken from the middle of that text: the second run stops right before it
  // and generates no further tokens than the one that completed it.
  size_t cut = text.size() / 2;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  const std::string stop =
      text.substr(cut, std::max<size_t>(1, tok::ValidSequenceLength(text, cut)));
  const size_t first = text.find(stop);
  req.stop = {stop};
  std::string text2;
  int events_after_stop = 0;
  bool stopped = false;
  Usage usage;
  {
    auto chat = pipeline_->Prepare(req);
    ASSERT_TRUE(chat.ok());
    TextStream stream = pipeline_->NewTextStream(*chat);
    BatchEngine engine(*model_, [&](const TokenEvent& e) {
      if (stopped && e.token >= 0) ++events_after_stop;
      TextDelta d = stream.Next(e);
      text2 += d.text;
      if (d.finish == FinishReason::kStop) {
        stopped = true;
        usage = d.usage;
      }
      return !d.cancel_request;
    });
    ASSERT_TRUE(engine.Submit(std::move(chat->request)).ok());
    engine.RunUntilIdle();
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text2, text.substr(0, first));
  EXPECT_EQ(events_after_stop, 0);
  EXPECT_LE(usage.completion_tokens, 12);
  EXPECT_GT(usage.prompt_tokens, 0);
}

}  // namespace
}  // namespace vls
