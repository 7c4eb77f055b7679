#include "server/generation_service.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/file.h"
#include "model/test_checkpoint.h"
#include "runtime/pipeline_test_util.h"

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;
using std::chrono::milliseconds;

constexpr int kVocab = 512;

class GenerationServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = JoinPath(tmp ? tmp : "/tmp", "vls_service_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    TestModelSpec spec;
    spec.vocab = kVocab;
    spec.tied = false;
    spec.dtype = DType::kF32;
    spec.seed = 5;
    ASSERT_TRUE(WriteTestCheckpoint(dir_, spec, false).ok());
    ASSERT_TRUE(WriteStringToFile(JoinPath(dir_, "tokenizer.json"),
                                  vls::testing::TinyChatTokenizerJson(kVocab))
                    .ok());
    Json cfg = {{"eos_token", "<|im_end|>"}, {"chat_template", vls::testing::kTinyChatTemplate}};
    ASSERT_TRUE(WriteStringToFile(JoinPath(dir_, "tokenizer_config.json"), cfg.dump()).ok());
    LoadOptions o;
    o.capacity = 128;
    o.slots = 2;
    o.threads = 1;
    auto lm = LoadedModel::Load(dir_, o);
    ASSERT_TRUE(lm.ok()) << lm.status().ToString();
    model_ = std::move(*lm);
    auto p = ChatPipeline::Load(dir_, *model_);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pipeline_ = std::move(*p);
  }
  void TearDown() override {
    Open();
    service_.reset();
    pipeline_.reset();
    model_.reset();
    std::filesystem::remove_all(dir_);
  }
  // With `gated`, the engine thread stops before sampling until Open() (so requests stay in
  // their slots for as long as a test needs).
  void Start(size_t max_queue, bool gated = false) {
    EngineOptions eo;
    if (gated) {
      eo.fault_hook_for_testing = [this](std::string_view point, uint64_t) {
        if (point != "sample") return;
        std::unique_lock<std::mutex> lock(gate_mu_);
        gate_cv_.wait(lock, [this] { return open_; });
      };
    }
    auto s =
        GenerationService::Create(*model_, *pipeline_, eo, ServiceOptions{max_queue}, &metrics_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    service_ = std::move(*s);
  }
  PreparedChat Prepare(int max_tokens, const std::string& text = "hello") {
    ChatRequest r;
    r.messages = Json::array({{{"role", "user"}, {"content", text}}});
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    auto p = pipeline_->Prepare(r);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return std::move(*p);
  }
  // Every piece of a request until its finish.
  static std::vector<OutputPiece> Drain(RequestHandle& h) {
    std::vector<OutputPiece> all;
    for (int i = 0; i < 600 && !h.Take(&all, milliseconds(100)); ++i) {
    }
    return all;
  }

  void Open() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    open_ = true;
    gate_cv_.notify_all();
  }
  void WaitBusy(int64_t n) {
    for (int i = 0; i < 500 && service_->load().busy != n; ++i) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    ASSERT_EQ(service_->load().busy, n);
  }

  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool open_ = false;
  std::string dir_;
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<ChatPipeline> pipeline_;
  ServerMetrics metrics_;
  std::unique_ptr<GenerationService> service_;
};

TEST_F(GenerationServiceTest, RequestsRunToTheirFinishWithUsage) {
  Start(4);
  auto a = service_->Submit(Prepare(5));
  auto b = service_->Submit(Prepare(3, "hell"));
  ASSERT_TRUE(a.ok() && b.ok());
  for (auto* h : {&*a, &*b}) {
    const std::vector<OutputPiece> pieces = Drain(**h);
    ASSERT_FALSE(pieces.empty());
    EXPECT_EQ(pieces.back().delta.finish, FinishReason::kLength);
    int tokens = 0;
    for (const OutputPiece& p : pieces) tokens += p.token >= 0 ? 1 : 0;
    EXPECT_EQ(tokens, pieces.back().delta.usage.completion_tokens);
    EXPECT_GT(pieces.back().delta.usage.prompt_tokens, 0);
    EXPECT_TRUE((*h)->first_token().has_value());
  }
  EXPECT_TRUE(service_->WaitIdle(milliseconds(2000)));
  const ServiceLoad l = service_->load();
  EXPECT_EQ(l.in_flight, 0);
  EXPECT_EQ(l.busy, 0);
  EXPECT_EQ(l.slots, 2);
  const std::string m = metrics_.Render(GaugeValues{});
  EXPECT_NE(m.find("vlstack_generation_tokens_total 8"), std::string::npos) << m;
}

TEST_F(GenerationServiceTest, CancelFreesTheSlotAtOnce) {
  Start(4, /*gated=*/true);
  auto h = service_->Submit(Prepare(100));
  ASSERT_TRUE(h.ok());
  WaitBusy(1);  // admitted, held before its first token
  service_->Cancel(**h);
  EXPECT_TRUE((*h)->finished());  // the cancelled piece is queued before Cancel returns
  Open();
  const std::vector<OutputPiece> rest = Drain(**h);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().delta.finish, FinishReason::kCancelled);
  EXPECT_TRUE(service_->WaitIdle(milliseconds(2000)));
  EXPECT_EQ(service_->load().busy, 0);
  service_->Cancel(**h);  // a finished request is left alone
}

TEST_F(GenerationServiceTest, QueueBoundAndDrain) {
  Start(1, /*gated=*/true);
  // The engine holds the first request in a slot; the free slot and the queue of one take two
  // more, the fourth is refused.
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 3; ++i) {
    auto h = service_->Submit(Prepare(20));
    ASSERT_TRUE(h.ok()) << i << ": " << h.status().ToString();
    handles.push_back(*h);
    if (i == 0) WaitBusy(1);
  }
  auto refused = service_->Submit(Prepare(60));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  service_->BeginDrain();
  EXPECT_TRUE(service_->draining());
  auto late = service_->Submit(Prepare(2));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition);
  // Requests in flight still finish.
  Open();
  for (auto& h : handles) EXPECT_EQ(Drain(*h).back().delta.finish, FinishReason::kLength);
  EXPECT_TRUE(service_->WaitIdle(milliseconds(5000)));
}

// A request being prepared (its images decoding) holds a queue ticket that counts against
// max_queue; Submit with the ticket takes its place.
TEST_F(GenerationServiceTest, QueueTicketsCountAgainstTheQueue) {
  Start(1, /*gated=*/true);
  auto first = service_->Submit(Prepare(20));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  WaitBusy(1);
  // The free slot and the queue of one: two places.
  auto a = service_->Reserve();
  auto b = service_->Reserve();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(service_->load().reserved, 2);
  EXPECT_EQ(service_->Reserve().status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(service_->Submit(Prepare(2)).status().code(), StatusCode::kResourceExhausted);
  b->Release();  // a request refused or cancelled while preparing gives its place back
  EXPECT_EQ(service_->load().reserved, 1);
  auto c = service_->Reserve();
  ASSERT_TRUE(c.ok());
  auto second = service_->Submit(Prepare(20), std::move(*a));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(service_->load().reserved, 1);
  { QueueTicket gone = std::move(*c); }
  EXPECT_EQ(service_->load().reserved, 0);
  Open();
  EXPECT_EQ(Drain(**first).back().delta.finish, FinishReason::kLength);
  EXPECT_EQ(Drain(**second).back().delta.finish, FinishReason::kLength);
}

TEST_F(GenerationServiceTest, StopStringFinishesTheStreamAndTheEngineRequest) {
  Start(4);
  // Generate once to find text, then stop on a piece of it.
  auto first = service_->Submit(Prepare(60));
  ASSERT_TRUE(first.ok());
  std::string text;
  for (const OutputPiece& p : Drain(**first)) text += p.delta.text;
  // Two printable ASCII bytes past the start.
  size_t at = 1;
  while (at + 1 < text.size() &&
         !(text[at] > ' ' && text[at] < 127 && text[at + 1] > ' ' && text[at + 1] < 127)) {
    ++at;
  }
  ASSERT_LT(at + 1, text.size()) << text;
  ChatRequest r;
  r.messages = Json::array({{{"role", "user"}, {"content", "hello"}}});
  r.max_tokens = 60;
  r.ignore_eos = true;
  r.stop = {text.substr(at, 2)};
  auto prepared = pipeline_->Prepare(r);
  ASSERT_TRUE(prepared.ok());
  auto h = service_->Submit(std::move(*prepared));
  ASSERT_TRUE(h.ok());
  std::string cut;
  const std::vector<OutputPiece> pieces = Drain(**h);
  for (const OutputPiece& p : pieces) cut += p.delta.text;
  EXPECT_EQ(cut, text.substr(0, text.find(r.stop[0])));
  EXPECT_EQ(pieces.back().delta.finish, FinishReason::kStop);
  EXPECT_TRUE(service_->WaitIdle(milliseconds(2000)));
}

}  // namespace
}  // namespace vls::server
