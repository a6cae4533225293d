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
