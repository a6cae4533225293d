// agent/metrics: what the agent exports and the step log it keeps.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "metrics.hpp"

using namespace lockstep::agent;

TEST(AgentMetrics, TheGangRestartAttemptIsExported) {
  std::string dir = ::testing::TempDir() + "/agent-attempt-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Config cfg;
  cfg.metrics_port = 0;
  cfg.restart_attempt = 3;
  Metrics m(cfg, dir);
  std::string text = prometheus::TextSerializer().Serialize(m.registry()->Collect());
  EXPECT_NE(text.find("lockstep_restart_attempt{namespace=\"default\",node_rank=\"0\",trainingjob=\"local\"} 3"),
            std::string::npos)
      << text;
}

// See Note [Step log]: every valid report of each rank, one JSON object a line, with the gang
// attempt and the in-place generation; malformed ones are left out; a new agent appends.
TEST(AgentMetrics, TheStepLogKeepsEveryValidReportPerRank) {
  std::string dir = ::testing::TempDir() + "/agent-steplog-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Config cfg;
  cfg.metrics_port = 0;
  cfg.node_rank = 1;
  cfg.nproc_per_node = 2;
  cfg.restart_attempt = 2;
  cfg.step_log_dir = dir + "/steps";
  const std::string rank3 = cfg.step_log_dir + "/rank-3.jsonl";
  auto lines = [&] {
    std::vector<nlohmann::json> out;
    std::ifstream in(rank3);
    for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
    return out;
  };
  for (int agent = 0; agent < 2; ++agent) {  // the second: a gang restart's new agent appends
    Metrics m(cfg, dir);
    m.reset_progress(agent == 0 ? 0 : 1);
    int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, m.socket_path(1).c_str(), sizeof addr.sun_path - 1);
    for (std::string d : {"step=oops", "step=4 step_s=0.5 compute_s=0.4 exposed_comm_s=0.1 loss=1.25 total_steps=9 "
                          "comm_s.allgather=0.25 exposed_comm_s.allgather=0.05 comm_bytes.allgather=4194304 "
                          "comm_bytes.reduce_scatter=1048576"})
      ::sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (lines().size() < static_cast<size_t>(agent + 1) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::close(fd);
  }
  auto got = lines();
  ASSERT_EQ(got.size(), 2u) << "one line per valid report, the malformed ones left out";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i]["rank"], 3);
    EXPECT_EQ(got[i]["attempt"], 2);
    EXPECT_EQ(got[i]["generation"], i);
    EXPECT_EQ(got[i]["step"], 4);
    EXPECT_DOUBLE_EQ(got[i]["step_s"].get<double>(), 0.5);
    EXPECT_DOUBLE_EQ(got[i]["exposed_comm_s"].get<double>(), 0.1);
    EXPECT_DOUBLE_EQ(got[i]["loss"].get<double>(), 1.25);
    EXPECT_EQ(got[i]["total_steps"], 9);
    EXPECT_DOUBLE_EQ(got[i]["comm_s.allgather"].get<double>(), 0.25);  // per collective, as sent
    EXPECT_DOUBLE_EQ(got[i]["exposed_comm_s.allgather"].get<double>(), 0.05);
    EXPECT_EQ(got[i]["comm_bytes.allgather"], 4194304);
    EXPECT_EQ(got[i]["comm_bytes.reduce_scatter"], 1048576);
    EXPECT_FALSE(got[i].contains("tokens")) << "absent figures stay absent";
    EXPECT_FALSE(got[i].contains("comm_s.reduce_scatter")) << "absent figures stay absent";
    EXPECT_GT(got[i]["time"].get<double>(), 1.7e9);
  }
  EXPECT_FALSE(std::filesystem::exists(cfg.step_log_dir + "/rank-2.jsonl") &&
               std::filesystem::file_size(cfg.step_log_dir + "/rank-2.jsonl") > 0)
      << "rank 2 reported nothing";
}

namespace {

StepReport step_of(long long n, double step_s, double exposed_s) {
  StepReport r;
  r.step = n;
  r.step_s = step_s;
  r.exposed_comm_s = exposed_s;
  return r;
}

std::string fresh_dir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

// See Note [Straggler score]: each step's work (step time less exposed communication) goes into its
// rank's window at arrival; a rank's figure needs min_samples steps; a new generation starts empty.
TEST(AgentMetrics, StepReportsFeedEachRanksStragglerWindowAndARestartEmptiesIt) {
  Config cfg;
  cfg.metrics_port = 0;
  cfg.nproc_per_node = 2;
  cfg.straggler_window = std::chrono::milliseconds(300);  // a warm-up of 0.1 s, a figure 0.15 s after it
  Metrics m(cfg, fresh_dir("agent-window"));
  m.record(0, step_of(0, 0.5, 0.01));  // the warm-up's step (Note [Straggler score]): left out
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  for (int i = 1; i <= 7; ++i) m.record(0, step_of(i, 0.05, 0.01 + 0.001 * (i % 3)));
  const double later = steady_seconds() + 0.1;  // past the warm-up and half a window after it
  EXPECT_TRUE(m.figures(later).empty()) << "7 steps: fewer than min_samples";
  m.record(0, step_of(8, 0.05, 0.011));
  m.record(1, StepReport{});  // NCCL's figures alone: no step, no work
  auto f = m.figures(later);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].local_rank, 0);
  EXPECT_NEAR(f[0].median_s, 0.039, 1e-9);  // the median of 0.04, 0.039, 0.038 (x 8 steps)
  m.set_throttle(0, lockstep::straggler::kThrottlePower | 64);  // bits beyond kThrottleAll are not kept
  EXPECT_EQ(m.figures(later)[0].throttle, lockstep::straggler::kThrottlePower);
  EXPECT_TRUE(m.figures(later + cfg.straggler_settings().window_s + 1).empty()) << "out of the window";
  for (int i = 1; i <= 8; ++i) m.record(0, step_of(i, 0.05, 0.01));
  m.reset_progress(1);
  EXPECT_TRUE(m.figures(steady_seconds() + 0.1).empty()) << "a new generation is judged afresh";
}

// lockstep_straggler_score: a rank's median over node 0's reference, only while both exist.
TEST(AgentMetrics, TheScoreSeriesExistsOnlyWithAFigureAndAReference) {
  Config cfg;
  cfg.metrics_port = 0;
  cfg.node_rank = 1;
  cfg.nproc_per_node = 2;
  Metrics m(cfg, fresh_dir("agent-score"));
  auto text = [&] { return prometheus::TextSerializer().Serialize(m.registry()->Collect()); };
  const std::string rank3 = "lockstep_straggler_score{namespace=\"default\",node_rank=\"1\",rank=\"3\",trainingjob=\"local\"}";
  m.show_scores(std::nullopt, {{1, 0.03, 0}});
  EXPECT_EQ(text().find("lockstep_straggler_score{"), std::string::npos) << "no reference: absent";
  m.show_scores(0.02, {{1, 0.03, 0}});
  EXPECT_NE(text().find(rank3 + " 1.5"), std::string::npos) << text();
  EXPECT_EQ(text().find("rank=\"2\",trainingjob=\"local\"} 1"), std::string::npos) << "rank 2 has no figure";
  m.show_scores(0.02, {});
  EXPECT_EQ(text().find("lockstep_straggler_score{"), std::string::npos) << "its figure gone: absent again";
}
