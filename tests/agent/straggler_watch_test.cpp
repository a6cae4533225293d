// agent/straggler_watch: node 0's verdict from its own ranks' medians and its members' figures
// (docs/metrics.md, "Stragglers"): the series, and the event log `lockstep run` follows.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "metrics.hpp"
#include "straggler_watch.hpp"

using namespace lockstep::agent;
namespace straggler = lockstep::straggler;

namespace {

std::string fresh_dir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

double value(const std::string& text, const std::string& series) {
  auto at = text.find(series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 1));
}

}  // namespace

// Node 0 (1 rank of 0.02 s) and node 1 (0.05 s, its GPU power-capped): a suspect, then after the
// hold a verdict naming rank 1 on node 1; back to 0.021 s, cleared after the hold again.
TEST(StragglerWatch, Node0NamesTheSlowRankAfterTheHoldAndClearsItAfterRecovery) {
  const std::string dir = fresh_dir("straggler-watch");
  Config cfg;
  cfg.metrics_port = 0;
  cfg.nnodes = 3;
  cfg.restart_attempt = 1;
  cfg.straggler_hold = std::chrono::seconds(2);
  cfg.step_log_dir = dir;
  Metrics m(cfg, dir);
  GangFigures members(3, 1);
  StragglerWatch watch(cfg, m, members, std::chrono::milliseconds(0));
  auto text = [&] { return prometheus::TextSerializer().Serialize(m.registry()->Collect()); };
  const std::string base = "namespace=\"default\",node_rank=\"0\",trainingjob=\"local\"";
  const std::string listed =
      "lockstep_straggler_slowdown{namespace=\"default\",node_rank=\"2\",rank=\"2\",throttle=\"power\",trainingjob=\"local\"}";
  // Node 0's own rank has no figure yet (its warm-up: Note [Straggler score]); nodes 1 and 2 do.
  const double t0 = steady_seconds();
  members.put(1, {{0, 0.02, 0}}, t0);
  members.put(2, {{0, 0.05, straggler::kThrottlePower}}, t0);
  watch.evaluate(t0);
  EXPECT_EQ(members.reference(), 0.02) << "the lower median of 0.02 and 0.05";
  EXPECT_EQ(value(text(), "lockstep_straggler_suspects{" + base + "}"), 1);
  EXPECT_EQ(value(text(), "lockstep_stragglers{" + base + "}"), 0) << "not held yet";
  EXPECT_EQ(value(text(), "lockstep_straggler_window_seconds{" + base + "}"), 30);
  watch.evaluate(t0 + 2);
  EXPECT_NEAR(value(text(), listed), 2.5, 1e-9) << text();
  EXPECT_EQ(value(text(), "lockstep_stragglers{" + base + "}"), 1);
  members.put(2, {{0, 0.021, straggler::kThrottlePower}}, t0 + 3);
  watch.evaluate(t0 + 3);
  EXPECT_EQ(value(text(), "lockstep_straggler_suspects{" + base + "}"), 0);
  EXPECT_GT(value(text(), listed), 0) << "under the threshold, but not for the hold yet";
  watch.evaluate(t0 + 5);
  EXPECT_EQ(text().find("lockstep_straggler_slowdown{"), std::string::npos) << text();
  EXPECT_EQ(value(text(), "lockstep_stragglers{" + base + "}"), 0);
  std::vector<nlohmann::json> events;
  std::ifstream in(dir + "/node-0.events.jsonl");
  for (std::string l; std::getline(in, l);) events.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["event"], "straggler");
  EXPECT_EQ(events[0]["rank"], 2);
  EXPECT_EQ(events[0]["node_rank"], 2);
  EXPECT_EQ(events[0]["node"], 0);
  EXPECT_EQ(events[0]["attempt"], 1);
  EXPECT_EQ(events[0]["slowdown"], 2.5);
  EXPECT_EQ(events[0]["window_s"], 30);
  EXPECT_EQ(events[0]["throttle"], "power");
  EXPECT_EQ(events[1]["event"], "straggler_cleared");
  EXPECT_EQ(events[1]["rank"], 2);
}

// At most kMaxListedStragglers series, the worst first; lockstep_stragglers counts them all. A
// member that went quiet (figures older than 3 x kFiguresInterval) is no longer judged.
TEST(StragglerWatch, TheWorstEightAreListedAndQuietMembersAreNotJudged) {
  const std::string dir = fresh_dir("straggler-watch-many");
  Config cfg;
  cfg.metrics_port = 0;
  cfg.nnodes = 21;
  cfg.straggler_hold = std::chrono::seconds(0);
  Metrics m(cfg, dir);
  GangFigures members(21, 1);
  StragglerWatch watch(cfg, m, members, std::chrono::milliseconds(0));
  auto text = [&] { return prometheus::TextSerializer().Serialize(m.registry()->Collect()); };
  const double t0 = steady_seconds();
  for (int node = 1; node <= 20; ++node)  // 10 typical, 10 slow (2.0x .. 2.9x)
    members.put(node, {{0, node <= 10 ? 0.02 : 0.02 * (1 + (node - 10) / 10.0 + 0.9), 0}}, t0);
  watch.evaluate(t0);
  const std::string t = text();
  EXPECT_EQ(value(t, "lockstep_stragglers{namespace=\"default\",node_rank=\"0\",trainingjob=\"local\"}"), 10);
  size_t listed = 0;
  for (size_t at = 0; (at = t.find("lockstep_straggler_slowdown{", at)) != std::string::npos; ++at) ++listed;
  EXPECT_EQ(listed, kMaxListedStragglers);
  EXPECT_EQ(t.find("rank=\"11\",throttle"), std::string::npos) << "the two mildest are not listed";
  EXPECT_EQ(t.find("rank=\"12\",throttle"), std::string::npos);
  EXPECT_NE(t.find("rank=\"20\",throttle"), std::string::npos);
  watch.evaluate(t0 + kFiguresMaxAgeS + 1);  // nobody sent anything since
  EXPECT_EQ(text().find("lockstep_straggler_slowdown{"), std::string::npos);
  EXPECT_FALSE(members.reference()) << "no figures, no reference";
}
