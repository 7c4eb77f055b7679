// StreamTuner: the trial's alternation and decision, and Context::MatMulGrouped's decode calls
// giving MatMul's bits while it tries and after it chose.
#include "kernels/stream_tuner.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels_test_util.h"
#include "kernels/quant.h"

namespace vls::kernels {
namespace {

using Mode = StreamTuner::Mode;

// Runs a whole trial: every timed call reads 1 MB in `one_s` seconds with one stream and
// `four_s` with four (by the call's index, so outliers can be placed). Returns the calls made.
template <typename OneS, typename FourS>
int RunTrial(StreamTuner& t, OneS one_s, FourS four_s) {
  int calls = 0;
  while (t.mode() == Mode::kTrying && calls < 10000) {
    const StreamTuner::Ticket k = t.Next();
    t.Record(k, 1 << 20, k.four ? four_s(calls) : one_s(calls));
    ++calls;
  }
  return calls;
}

TEST(StreamTunerTest, AlternatesPairsOfCallsAndTimesThemAfterTheWarmUp) {
  StreamTuner t;
  std::vector<StreamTuner::Ticket> tickets;
  for (int i = 0; i < StreamTuner::kWarmupCalls + 8; ++i) tickets.push_back(t.Next());
  for (int i = 0; i < static_cast<int>(tickets.size()); ++i) {
    EXPECT_EQ(tickets[size_t(i)].four, (i / 2) % 2 == 1) << i;
    EXPECT_EQ(tickets[size_t(i)].timed, i >= StreamTuner::kWarmupCalls) << i;
  }
  EXPECT_EQ(t.mode(), Mode::kTrying);  // untimed tickets and no records decide nothing
  EXPECT_NE(t.Report().find("trying (0 of"), std::string::npos) << t.Report();
}

TEST(StreamTunerTest, KeepsFourStreamsOnlyWhenClearlyFaster) {
  StreamTuner faster;
  const int calls = RunTrial(
      faster, [](int) { return 1.2e-3; }, [](int) { return 1.0e-3; });
  EXPECT_EQ(faster.mode(), Mode::kFour);
  EXPECT_EQ(calls, StreamTuner::kWarmupCalls + 2 * StreamTuner::kTrialCalls);
  EXPECT_NE(faster.Report().find("streams: four (one 0.9 GB/s, four 1.0 GB/s"), std::string::npos)
      << faster.Report();

  StreamTuner close;  // 2% faster: inside the margin
  RunTrial(
      close, [](int) { return 1.02e-3; }, [](int) { return 1.0e-3; });
  EXPECT_EQ(close.mode(), Mode::kOne);

  StreamTuner slower;
  RunTrial(
      slower, [](int) { return 1.0e-3; }, [](int) { return 1.3e-3; });
  EXPECT_EQ(slower.mode(), Mode::kOne);
  EXPECT_NE(slower.Report().find("streams: one ("), std::string::npos) << slower.Report();
  // Decided: untimed tickets of the kept count.
  const StreamTuner::Ticket k = slower.Next();
  EXPECT_FALSE(k.four);
  EXPECT_FALSE(k.timed);
}

TEST(StreamTunerTest, DescheduledCallsDoNotDecide) {
  // A fifth of the one-stream calls descheduled (100x slower) and the four-stream ones a little
  // slower than one stream otherwise: the medians keep one stream.
  StreamTuner t;
  RunTrial(
      t, [](int i) { return i % 5 == 0 ? 1e-1 : 1.0e-3; }, [](int) { return 1.1e-3; });
  EXPECT_EQ(t.mode(), Mode::kOne);
}

TEST(StreamTunerTest, IgnoresEmptyAndNonPositiveTimings) {
  StreamTuner t;
  for (int i = 0; i < 1000; ++i) {
    const StreamTuner::Ticket k = t.Next();
    t.Record(k, 1 << 20, i % 2 == 0 ? 0.0 : -1.0);
    t.Record(k, 0, 1e-3);
  }
  EXPECT_EQ(t.mode(), Mode::kTrying);
}

TEST(StreamTunerTest, ForcedModesNeedNoTrial) {
  for (const Mode m : {Mode::kOne, Mode::kFour}) {
    StreamTuner t(m);
    const StreamTuner::Ticket k = t.Next();
    EXPECT_EQ(k.four, m == Mode::kFour);
    EXPECT_FALSE(k.timed);
    t.Record({m == Mode::kFour, true}, 1 << 20, 1e-3);  // a stray record changes nothing
    EXPECT_EQ(t.mode(), m);
    EXPECT_NE(t.Report().find("VLS_DECODE_STREAMS"), std::string::npos) << t.Report();
  }
}

TEST(StreamTunerTest, EnvironmentNamesTheMode) {
  const char* old = std::getenv("VLS_DECODE_STREAMS");
  const std::string saved = old != nullptr ? old : "";
  setenv("VLS_DECODE_STREAMS", "4", 1);
  EXPECT_EQ(StreamTuner::FromEnvironment(), Mode::kFour);
  setenv("VLS_DECODE_STREAMS", "1", 1);
  EXPECT_EQ(StreamTuner::FromEnvironment(), Mode::kOne);
  setenv("VLS_DECODE_STREAMS", "2", 1);
  EXPECT_EQ(StreamTuner::FromEnvironment(), Mode::kTrying);
  unsetenv("VLS_DECODE_STREAMS");
  EXPECT_EQ(StreamTuner::FromEnvironment(), Mode::kTrying);
  if (old != nullptr) setenv("VLS_DECODE_STREAMS", saved.c_str(), 1);
}

// Decode calls of Q8 expert products (1-3 rows each) through MatMulGrouped until the context's
// tuner has chosen, then as many more: every call gives the bits MatMul gives each product
// alone, whichever stream count the call took.
TEST(StreamTunerTest, GroupedDecodeCallsEqualMatMulWhileTryingAndAfter) {
  constexpr int64_t K = 96, N = 200;
  for (const KernelVariant* v : SupportedVariants()) {
    if (v->matmul_q8_four_streams == nullptr) continue;
    const Context ctx(2, Precision::kInt8, v);
    std::vector<std::vector<uint8_t>> buf;
    std::vector<Matrix> w;
    for (int e = 0; e < 4; ++e) {
      const std::vector<float> f = testing::Random(size_t(N * K), uint32_t(10 + e), 0.05f);
      buf.emplace_back(size_t(Q8LayoutFor(N, K).bytes) + 64);
      QuantizeQ8(Matrix{DType::kF32, f.data(), N, K}, 0, N, buf.back().data());
      w.push_back(Q8MatrixAt(buf.back().data(), N, K));
    }
    const std::vector<float> x = testing::Random(size_t(3 * K), 7);
    std::vector<std::vector<float>> alone(4, std::vector<float>(size_t(3 * N)));
    for (int e = 0; e < 4; ++e) {
      ctx.MatMul(x.data(), 1 + e % 3, K, w[size_t(e)], alone[size_t(e)].data());
    }
    bool decided = false;
    int after = 0;
    for (int call = 0; call < 2000 && after < 40; ++call) {
      std::vector<std::vector<float>> y(4, std::vector<float>(size_t(3 * N), -1.0f));
      std::vector<GroupedProduct> products;
      for (int e = 0; e < 4; ++e) {
        products.push_back({x.data(), 1 + e % 3, &w[size_t(e)], y[size_t(e)].data()});
      }
      ctx.MatMulGrouped(products, K);
      for (int e = 0; e < 4; ++e) {
        const size_t n = size_t((1 + e % 3) * N);
        ASSERT_EQ(std::memcmp(y[size_t(e)].data(), alone[size_t(e)].data(), n * sizeof(float)), 0)
            << v->name << " call " << call << " product " << e << ": "
            << ctx.stream_tuner().Report();
      }
      decided = ctx.stream_tuner().mode() != Mode::kTrying || decided;
      after += decided ? 1 : 0;
    }
    EXPECT_TRUE(decided) << v->name << ": " << ctx.stream_tuner().Report();
  }
}

}  // namespace
}  // namespace vls::kernels
