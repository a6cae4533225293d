// Hostile Prometheus text for the operator's readers of agents, part of fuzz_test.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "reconcile/prometheus_text.hpp"
#include "reconcile/in_place.hpp"
#include "reconcile/progress.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

// Prometheus text from a pod's metrics port (Note [Untrusted exposition]): what rank 0's agent
// serves reaches status.progress, the Restarted condition and an Event through
// reconcile/prometheus_text.cpp, parse_progress and parse_in_place. Whatever the text, they end in a
// result whose every field is in range and whose every string is short, valid UTF-8 that a
// JSON status write takes; never an exception, a crash or a long parse.
namespace {

const std::string kAgentPage =
    "# HELP lockstep_step The last step a rank reported\n# TYPE lockstep_step gauge\n"
    "lockstep_step{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 120\n"
    "lockstep_step{namespace=\"ns\",node_rank=\"0\",rank=\"1\",trainingjob=\"tj\"} 120\n"
    "lockstep_total_steps{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 1000\n"
    "lockstep_steps_total{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 121\n"
    "lockstep_tokens_total{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 7929856\n"
    "lockstep_restarts_total{kind=\"in_place\",namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"} 2\n"
    "lockstep_restart_attempt{namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"} 0\n"
    "lockstep_last_restart_timestamp_seconds{kind=\"in_place\",namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"} "
    "1799999988.25\n"
    "lockstep_last_restart_info{exit_code=\"137\",kind=\"in_place\",namespace=\"ns\",node_rank=\"0\",rank=\"3\","
    "reason=\"WorkerFailed\",trainingjob=\"tj\"} 1\n";

std::string info_with(const std::string& labels, const std::string& value = "1") {
  return "lockstep_restarts_total{kind=\"in_place\"} 1\nlockstep_last_restart_info{kind=\"in_place\"," + labels + "} " +
         value + "\n";
}

std::vector<std::pair<std::string, std::string>> exposition_corpus() {
  std::vector<std::pair<std::string, std::string>> c = {
      {"the real page", kAgentPage},
      {"invalid UTF-8 reason", info_with("reason=\"\xc0\xaf\xff\",rank=\"3\",exit_code=\"1\"")},
      {"a surrogate in a label", info_with("reason=\"\xed\xa0\x80\"")},
      {"a truncated UTF-8 sequence", info_with("reason=\"Worker\xe2\x82\"")},
      {"a 1 MB reason", info_with("reason=\"" + std::string(1 << 20, 'A') + "\"")},
      {"a long CamelCase reason", info_with("reason=\"" + std::string(65, 'A') + "\"")},
      {"a reason with spaces and quotes", info_with("reason=\"Worker \\\"Failed\\\"\\n\"")},
      {"a huge rank", info_with("reason=\"Stall\",rank=\"99999999999999999999\"")},
      {"a rank of words", info_with("reason=\"Stall\",rank=\"three\",exit_code=\"-\"")},
      {"NaN everywhere",
       "lockstep_step{rank=\"0\"} NaN\nlockstep_total_steps{rank=\"0\"} NaN\nlockstep_steps_total{rank=\"0\"} NaN\n"
       "lockstep_tokens_total{rank=\"0\"} NaN\nlockstep_restarts_total{kind=\"in_place\"} NaN\n"
       "lockstep_restart_attempt NaN\nlockstep_last_restart_timestamp_seconds{kind=\"in_place\"} NaN\n"},
      {"infinities",
       "lockstep_step{rank=\"0\"} +Inf\nlockstep_total_steps{rank=\"0\"} -Inf\nlockstep_steps_total{rank=\"0\"} +Inf\n"
       "lockstep_tokens_total{rank=\"0\"} +Inf\nlockstep_restarts_total{kind=\"in_place\"} +Inf\n"
       "lockstep_last_restart_timestamp_seconds{kind=\"in_place\"} +Inf\n"},
      {"huge numbers",
       "lockstep_step{rank=\"0\"} 1e300\nlockstep_total_steps{rank=\"0\"} 9.3e18\nlockstep_steps_total{rank=\"0\"} 1\n"
       "lockstep_tokens_total{rank=\"0\"} 1.7e308\nlockstep_restarts_total{kind=\"in_place\"} 1e300\n"
       "lockstep_restart_attempt 1e300\nlockstep_last_restart_timestamp_seconds{kind=\"in_place\"} 1e300\n"},
      {"negative and fractional",
       "lockstep_step{rank=\"0\"} -5\nlockstep_step{rank=\"0\"} 2.5\nlockstep_total_steps{rank=\"0\"} -1\n"
       "lockstep_steps_total{rank=\"0\"} 3\nlockstep_restart_attempt -0.5\n"},
      {"hex floats and junk after the value",
       "lockstep_step{rank=\"0\"} 0x1p62\nlockstep_step{rank=\"0\"} 12abc\nlockstep_steps_total{rank=\"0\"} 1 2 3\n"},
      {"binary", std::string("\x00\x01\x02lockstep_step{rank=\"0\"} 1\n\xff\xfe", 31)},
      {"unterminated labels", "lockstep_step{rank=\"0 1\nlockstep_step{rank=\\\"0\"} 1\nlockstep_step{"},
      {"a 1 MB line", "lockstep_step{rank=\"0\",x=\"" + std::string(1 << 20, 'x') + "\"} 5\n"},
      {"only newlines", std::string(1 << 20, '\n')},
      {"an escape at the very end", "lockstep_step{rank=\"\\"},
  };
  std::string many;  // thousands of series, as many as fit in the reader's 1 MiB
  for (int i = 0; many.size() < (1 << 20) - 100; ++i)
    many += "lockstep_step{rank=\"" + std::to_string(i % 7) + "\",i=\"" + std::to_string(i) + "\"} " +
            std::to_string(i) + "\n";
  c.push_back({"thousands of series", many});
  return c;
}

// Empty when the contract held for `text`, else what went wrong.
std::string exposition_contract(const std::string& text) {
  using namespace lockstep::reconcile;
  try {
    auto samples = samples_of(text, {"lockstep_step", "lockstep_total_steps", "lockstep_tokens_total",
                                     "lockstep_steps_total", "lockstep_restarts_total", "lockstep_restart_attempt",
                                     "lockstep_last_restart_timestamp_seconds", "lockstep_last_restart_info"});
    if (samples.size() > kMaxSamples) return "more than kMaxSamples samples";
    for (const auto& s : samples)
      for (const auto& [k, v] : s.labels)
        if (!valid_utf8(v) || v.size() > kMaxLineBytes) return "label " + k + " is not short, valid UTF-8";
    const Time at = Clock::from_time_t(1'800'000'000);
    if (auto p = parse_progress(text, 0, at)) {
      if (p->step < 0 || p->step > kMaxSteps) return "step out of range";
      if (p->total_steps != -1 && (p->total_steps < 1 || p->total_steps > kMaxSteps)) return "total out of range";
      if (p->tokens != -1 && !(std::isfinite(p->tokens) && p->tokens >= 0)) return "tokens not finite";
      auto before = *p;
      before.at = at - std::chrono::seconds(30);
      before.step = 0;
      before.tokens = 0;
      Progress pr = progress_between(before, *p, 64);
      if (pr.tokens_per_second && !(std::isfinite(*pr.tokens_per_second) && *pr.tokens_per_second <= 9e15))
        return "tokens/s out of range";
      nlohmann::json status = {{"step", pr.step}, {"totalSteps", pr.total_steps}};
      (void)status.dump();
    }
    if (auto r = parse_in_place(text, 0)) {
      if (r->restarts < 0) return "negative restarts";
      for (const auto* s : {&r->reason, &r->rank, &r->exit_code})
        if (!valid_utf8(*s) || s->size() > kMaxReasonBytes) return "a cause that is not short, valid UTF-8";
      const std::string message = in_place_event_message(*r, 3, 2);
      if (message.size() > 512) return "an Event message of " + std::to_string(message.size()) + " bytes";
      nlohmann::json status = {{"message", in_place_message(*r, 3)}, {"event", message}};
      (void)status.dump();  // throws on invalid UTF-8
      if (r->last_at) (void)format_time(*r->last_at);
    }
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
  return "";
}

}  // namespace

TEST(FuzzExposition, HostileCorpusEndsInBoundedValidFields) {
  for (const auto& [name, text] : exposition_corpus()) {
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(exposition_contract(text), "") << name;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(ms, 2000) << name;
    if (text.size() >= 1000000) std::cout << "figure: " << name << " (" << text.size() << " bytes) parsed in " << ms << " ms\n";
  }
  using namespace lockstep::reconcile;
  // What the hostile causes leave: nothing said, never the bytes.
  auto r = parse_in_place(info_with("reason=\"\xc0\xaf\",rank=\"3\",exit_code=\"137\""), 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, "");
  EXPECT_EQ(r->rank, "") << "the whole line is malformed, not only its reason";
  r = parse_in_place(info_with("reason=\"" + std::string(100, 'A') + "\",rank=\"x\",exit_code=\"137\""), 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, "");
  EXPECT_EQ(r->rank, "");
  EXPECT_EQ(r->exit_code, "137");
  EXPECT_FALSE(parse_in_place("lockstep_restarts_total{kind=\"in_place\"} 1\nlockstep_restart_attempt NaN\n", 0))
      << "an attempt that is not a number is not this attempt";
  EXPECT_FALSE(parse_in_place("lockstep_restarts_total{kind=\"in_place\"} 1\nlockstep_restart_attempt 1e300\n", 0));
}

TEST(FuzzExposition, SeededRandomMutationsOfAnAgentsPage) {
  std::mt19937 rng(26);
  const std::string bytes = "{}\",=\\\n #\x80\xc0\xff\xed";
  for (int i = 0; i < 3000; ++i) {
    std::string s = kAgentPage;
    int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t at = rng() % s.size();
      switch (rng() % 4) {
        case 0: s[at] = bytes[rng() % bytes.size()]; break;
        case 1: s.erase(at, 1 + rng() % 16); break;
        case 2: s.insert(at, 1, bytes[rng() % bytes.size()]); break;
        default: s.insert(at, s.substr(at, rng() % 64)); break;
      }
    }
    ASSERT_EQ(exposition_contract(s), "") << "mutation " << i;
  }
}
