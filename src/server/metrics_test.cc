#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace vls::server {
namespace {

TEST(HistogramTest, RendersCumulativeBucketsSumAndCount) {
  Histogram h({0.5, 0.125, 1, 0.125});  // unsorted, with a duplicate
  for (const double v : {0.0625, 0.125, 0.25, 0.75, 0.875, 2.0, 1.0}) h.Observe(v);
  std::string out;
  h.Render("lat", &out);
  EXPECT_EQ(out,
            "lat_bucket{le=\"0.125\"} 2\n"  // 0.0625, 0.125 (le: less or equal)
            "lat_bucket{le=\"0.5\"} 3\n"
            "lat_bucket{le=\"1\"} 6\n"
            "lat_bucket{le=\"+Inf\"} 7\n"
            "lat_sum 5.0625\n"
            "lat_count 7\n");
  EXPECT_EQ(h.count(), 7u);
}

TEST(HistogramTest, EmptyAndNonFinite) {
  Histogram h({1, std::nan(""), INFINITY});
  ASSERT_EQ(h.upper_bounds(), std::vector<double>{1});
  h.Observe(std::nan(""));
  std::string out;
  h.Render("x", &out);
  EXPECT_EQ(out, "x_bucket{le=\"1\"} 0\nx_bucket{le=\"+Inf\"} 0\nx_sum 0\nx_count 0\n");
  h.Observe(-3);  // below every bound: the first bucket
  out.clear();
  h.Render("x", &out);
  EXPECT_EQ(out, "x_bucket{le=\"1\"} 1\nx_bucket{le=\"+Inf\"} 1\nx_sum -3\nx_count 1\n");
}

TEST(MetricsTest, FormatsSampleValues) {
  EXPECT_EQ(FormatSampleValue(0.001), "0.001");
  EXPECT_EQ(FormatSampleValue(300), "300");
  EXPECT_EQ(FormatSampleValue(1e21), "1e+21");
  EXPECT_EQ(FormatSampleValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatSampleValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatSampleValue(std::nan("")), "NaN");
}

TEST(MetricsTest, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  ServerMetrics m;
  m.CountRequest("we\"ird\\", "line\nbreak");
  EXPECT_NE(m.Render({}).find(
                "vlstack_requests_total{endpoint=\"we\\\"ird\\\\\",outcome=\"line\\nbreak\"} 1\n"),
            std::string::npos);
}

// The value of the one sample line starting with `series` (name and labels).
std::string SampleValue(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  std::string found = "missing";
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) {
      if (found != "missing") return "duplicate";
      found = line.substr(series.size() + 1);
    }
  }
  return found;
}

TEST(MetricsTest, SeedsRequestCountersBeforeTraffic) {
  ServerMetrics m;
  const std::string text = m.Render({});
  for (const char* endpoint : {"chat", "completions"}) {
    for (const char* outcome : {"ok", "client_error", "server_error", "rejected", "cancelled"}) {
      const std::string series = std::string("vlstack_requests_total{endpoint=\"") + endpoint +
                                 "\",outcome=\"" + outcome + "\"}";
      EXPECT_EQ(SampleValue(text, series), "0") << series;
    }
  }
  EXPECT_EQ(SampleValue(text, "vlstack_time_to_first_token_seconds_bucket{le=\"300\"}"), "0");
  EXPECT_EQ(SampleValue(text, "vlstack_inter_token_latency_seconds_bucket{le=\"0.001\"}"), "0");
}

TEST(MetricsTest, CountsFromEightThreads) {
  ServerMetrics m;
  constexpr int kThreads = 8, kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < kPerThread; ++i) {
        m.CountRequest("chat", t % 2 ? "ok" : "cancelled");
        m.CountRequest("tokenize", "ok");
        m.AddPromptTokens(3, 1);
        m.AddGeneratedTokens(2);
        m.ObserveInterTokenLatency(0.002);
        m.ObserveTimeToFirstToken(1000);  // above every bound
        if (i % 100 == 0) (void)m.Render({});
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = m.Render({});
  const int n = kThreads * kPerThread;
  EXPECT_EQ(SampleValue(text, "vlstack_requests_total{endpoint=\"chat\",outcome=\"ok\"}"),
            std::to_string(n / 2));
  EXPECT_EQ(SampleValue(text, "vlstack_requests_total{endpoint=\"chat\",outcome=\"cancelled\"}"),
            std::to_string(n / 2));
  EXPECT_EQ(SampleValue(text, "vlstack_requests_total{endpoint=\"tokenize\",outcome=\"ok\"}"),
            std::to_string(n));
  EXPECT_EQ(SampleValue(text, "vlstack_prompt_tokens_total"), std::to_string(3 * n));
  EXPECT_EQ(SampleValue(text, "vlstack_prompt_tokens_cached_total"), std::to_string(n));
  EXPECT_EQ(SampleValue(text, "vlstack_generation_tokens_total"), std::to_string(2 * n));
  EXPECT_EQ(SampleValue(text, "vlstack_inter_token_latency_seconds_bucket{le=\"0.001\"}"), "0");
  EXPECT_EQ(SampleValue(text, "vlstack_inter_token_latency_seconds_bucket{le=\"0.0025\"}"),
            std::to_string(n));
  EXPECT_EQ(SampleValue(text, "vlstack_inter_token_latency_seconds_count"), std::to_string(n));
  EXPECT_EQ(SampleValue(text, "vlstack_time_to_first_token_seconds_bucket{le=\"300\"}"), "0");
  EXPECT_EQ(SampleValue(text, "vlstack_time_to_first_token_seconds_bucket{le=\"+Inf\"}"),
            std::to_string(n));
  EXPECT_EQ(SampleValue(text, "vlstack_time_to_first_token_seconds_sum"),
            FormatSampleValue(1000.0 * n));
}

TEST(MetricsTest, NegativeIncrementsAreDropped) {
  ServerMetrics m;
  m.AddGeneratedTokens(5);
  m.AddGeneratedTokens(-3);
  m.AddPromptTokens(-1, -1);
  const std::string text = m.Render({});
  EXPECT_EQ(SampleValue(text, "vlstack_generation_tokens_total"), "5");
  EXPECT_EQ(SampleValue(text, "vlstack_prompt_tokens_total"), "0");
}

TEST(MetricsTest, CountsStructuredRequestsByKind) {
  ServerMetrics m;
  EXPECT_EQ(SampleValue(m.Render({}), "vlstack_structured_requests_total{kind=\"regex\"}"), "0");
  m.CountStructured(StructuredKind::kJsonSchema);
  m.CountStructured(StructuredKind::kJsonSchema);
  m.CountStructured(StructuredKind::kTools);
  const std::string text = m.Render({});
  EXPECT_EQ(SampleValue(text, "vlstack_structured_requests_total{kind=\"json_schema\"}"), "2");
  EXPECT_EQ(SampleValue(text, "vlstack_structured_requests_total{kind=\"tools\"}"), "1");
  EXPECT_EQ(SampleValue(text, "vlstack_structured_requests_total{kind=\"json_object\"}"), "0");
  EXPECT_EQ(SampleValue(text, "vlstack_structured_requests_total{kind=\"grammar\"}"), "0");
  EXPECT_EQ(SampleValue(text, "vlstack_structured_requests_total{kind=\"regex\"}"), "0");
  GaugeValues g;
  g.grammar_cache_hits = 7;
  g.grammar_cache_misses = 3;
  const std::string cache = m.Render(g);
  EXPECT_EQ(SampleValue(cache, "vlstack_grammar_cache_hits_total"), "7");
  EXPECT_EQ(SampleValue(cache, "vlstack_grammar_cache_misses_total"), "3");
}

TEST(MetricsTest, BoundsTheRequestSeries) {
  ServerMetrics m;
  for (int i = 0; i < 500; ++i) m.CountRequest("e" + std::to_string(i), "ok");
  const std::string text = m.Render({});
  int series = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    series += line.rfind("vlstack_requests_total{", 0) == 0;
  }
  EXPECT_EQ(series, static_cast<int>(ServerMetrics::kMaxRequestSeries) + 1);
  // 10 seeded series + 54 new ones fill the table; the other 446 requests count as "other".
  EXPECT_EQ(SampleValue(text, "vlstack_requests_total{endpoint=\"other\",outcome=\"other\"}"),
            std::to_string(500 - (ServerMetrics::kMaxRequestSeries - 10)));
}

TEST(MetricsTest, RendersGaugesAndParsesBack) {
  ServerMetrics m;
  m.CountRequest("models", "ok");
  m.ObserveRequestDuration(0.42);
  m.ObserveQueueTime(0);
  GaugeValues g;
  g.queue_depth = 3;
  g.slots_busy = 2;
  g.slots_total = 4;
  g.requests_in_flight = 5;
  g.draining = 1;
  g.verify_passes = 7;
  g.draft_tokens = 40;
  g.accepted_draft_tokens = 31;
  g.engine_steps = 90;
  g.prefill_chunks = 12;
  g.mixed_passes = 5;
  g.copied_prefixes = 4;
  g.kv_preemptions = 6;
  g.kv_evictions = 9;
  g.kv_blocks = 512;
  g.kv_blocks_used = 130;
  g.prefix_cache_blocks = 21;
  g.kv_blocks_cached = 17;
  g.videos = 2;
  g.video_frames = 24;
  g.video_decode_seconds = 0.5;
  g.video_preprocess_seconds = 0.25;
  g.video_encode_seconds = 1.75;
  const std::string text = m.Render(g);
  EXPECT_EQ(SampleValue(text, "vlstack_videos_total"), "2");
  EXPECT_EQ(SampleValue(text, "vlstack_video_frames_total"), "24");
  EXPECT_EQ(SampleValue(text, "vlstack_video_decode_seconds_total"), "0.5");
  EXPECT_EQ(SampleValue(text, "vlstack_video_preprocess_seconds_total"), "0.25");
  EXPECT_EQ(SampleValue(text, "vlstack_video_encode_seconds_total"), "1.75");
  EXPECT_EQ(SampleValue(text, "vlstack_speculative_verify_passes_total"), "7");
  EXPECT_EQ(SampleValue(text, "vlstack_engine_steps_total"), "90");
  EXPECT_EQ(SampleValue(text, "vlstack_prefill_chunks_total"), "12");
  EXPECT_EQ(SampleValue(text, "vlstack_mixed_passes_total"), "5");
  EXPECT_EQ(SampleValue(text, "vlstack_prefix_copies_total"), "4");
  EXPECT_EQ(SampleValue(text, "vlstack_kv_preemptions_total"), "6");
  EXPECT_EQ(SampleValue(text, "vlstack_kv_evictions_total"), "9");
  EXPECT_EQ(SampleValue(text, "vlstack_kv_blocks_total"), "512");
  EXPECT_EQ(SampleValue(text, "vlstack_kv_blocks_used"), "130");
  EXPECT_EQ(SampleValue(text, "vlstack_prefix_cache_blocks_total"), "21");
  EXPECT_EQ(SampleValue(text, "vlstack_kv_blocks_cached"), "17");
  EXPECT_EQ(SampleValue(text, "vlstack_speculative_draft_tokens_total"), "40");
  EXPECT_EQ(SampleValue(text, "vlstack_speculative_accepted_tokens_total"), "31");
  EXPECT_EQ(SampleValue(text, "vlstack_queue_depth"), "3");
  EXPECT_EQ(SampleValue(text, "vlstack_slots_busy"), "2");
  EXPECT_EQ(SampleValue(text, "vlstack_slots_total"), "4");
  EXPECT_EQ(SampleValue(text, "vlstack_requests_in_flight"), "5");
  EXPECT_EQ(SampleValue(text, "vlstack_draining"), "1");
  EXPECT_EQ(SampleValue(text, "vlstack_request_duration_seconds_sum"), "0.42");
  EXPECT_EQ(SampleValue(text, "vlstack_queue_time_seconds_bucket{le=\"0.001\"}"), "1");

  // Every line is a comment or a sample; every sample belongs to a family declared before it
  // with # TYPE (histogram samples by their _bucket/_sum/_count suffix); counters end in _total.
  const std::regex sample(R"(^([a-z_:][a-z0-9_:]*)(\{[^}]*\})? [0-9eE.+-]+(Inf)?$)");
  const std::regex type(R"(^# TYPE ([a-z_:][a-z0-9_:]*) (counter|gauge|histogram)$)");
  std::map<std::string, std::string> families;
  int samples = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (std::regex_match(line, match, type)) {
      EXPECT_TRUE(families.emplace(match[1], match[2]).second) << "declared twice: " << line;
      if (match[2] == "counter") {
        EXPECT_TRUE(match[1].str().ends_with("_total")) << line;
      }
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, match, sample)) << "not a sample line: " << line;
    ++samples;
    std::string family = match[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string base = family.substr(0, family.size() - std::strlen(suffix));
      if (family.ends_with(suffix) && families.count(base) && families.at(base) == "histogram") {
        family = base;
      }
    }
    EXPECT_TRUE(families.count(family)) << "no # TYPE before " << line;
  }
  EXPECT_EQ(families.size(), 37u);
  // 11 request series, 5 structured-request series, 23 counters, 8 gauges, 4 histograms of
  // (buckets + 1) + 2 lines each.
  EXPECT_EQ(samples, 11 + 5 + 23 + 8 + (16 + 2) + (13 + 2) + (16 + 2) + (17 + 2));
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace vls::server
