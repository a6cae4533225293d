// A stop on request (Note [Stop on request], Note [Stop vote] in trainer/stop.hpp): real
// lockstep-trainer ranks on Gloo, under lockstep-agent where the agent's SIGTERM matters,
// signalled mid-training; what they saved is resumed and compared with an uninterrupted run.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "agent_support.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using lockstep::test::eventually;
using lockstep::test::read_file;

namespace {

using lockstep::test::agent_bin;
using lockstep::test::trainer_bin;


std::string temp_dir(const std::string& name) { return lockstep::test::fresh_temp_dir("stop-" + name); }

std::vector<std::string> trainer(std::vector<std::string> args) {
  std::vector<std::string> argv = {trainer_bin(), "--device", "cpu", "--batch-size", "4", "--seed", "5", "--log-every", "1000"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// 2 ranks under the agent, its output in DIR/NAME.out and its step log in DIR/NAME-steps.
lockstep::Process start_agent(const std::string& dir, const std::vector<std::string>& args, const std::string& name) {
  lockstep::SpawnOptions so;
  so.argv = {agent_bin(), "--nproc-per-node", "2", "--master-port", std::to_string(lockstep::free_loopback_port()),
             "--no-metrics", "--step-log", dir + "/" + name + "-steps", "--grace-period", "60s", "--"};
  auto t = trainer(args);
  so.argv.insert(so.argv.end(), t.begin(), t.end());
  so.env = {{"GLOO_SOCKET_IFNAME", "lo"}, {"MASTER_ADDR", "127.0.0.1"}};
  so.unset_env = {"LOCKSTEP_CHECKPOINT_PATH", "LOCKSTEP_CHECKPOINT_EVERY", "LOCKSTEP_JOB_UID", "LOCKSTEP_RESTART_ATTEMPT"};
  so.output_path = dir + "/" + name + ".out";
  return lockstep::Process::spawn(so);
}

// Runs the agent to the end; its exit code and output.
std::pair<int, std::string> train(const std::string& dir, const std::vector<std::string>& args, const std::string& name) {
  auto p = start_agent(dir, args, name);
  auto st = p.wait_for(300s);
  return {st ? st->shell_code() : -1, read_file(dir + "/" + name + ".out")};
}

// The "step" of every report rank `rank` sent its agent (start_agent's step log NAME), in order.
std::vector<int> logged_steps(const std::string& dir, const std::string& name, int rank) {
  std::vector<int> steps;
  std::ifstream in(dir + "/" + name + "-steps/rank-" + std::to_string(rank) + ".jsonl");
  static const std::regex step(R"("step":(\d+))");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, step)) steps.push_back(std::stoi(m[1]));
  }
  return steps;
}

std::map<int, double> read_losses(const std::string& path) {
  std::map<int, double> out;
  std::ifstream in(path);
  int step;
  double loss;
  while (in >> step >> loss) out[step] = loss;
  return out;
}

// The step every rank's "stop agreed after step S" names, or -1 when they differ or one is missing.
int agreed_step(const std::string& out, int world) {
  int agreed = -1;
  for (int r = 0; r < world; ++r) {
    std::smatch m;
    if (!std::regex_search(out, m, std::regex("rank " + std::to_string(r) + ": stop agreed after step (\\d+)"))) return -1;
    if (agreed != -1 && agreed != std::stoi(m[1])) return -1;
    agreed = std::stoi(m[1]);
  }
  return agreed;
}

}  // namespace

// The agent gets SIGTERM mid-training (as when Kueue preempts the job): both ranks stop after
// the same step, the checkpoint is at that step, which is the last step either rank reported,
// every process exits 143 without waiting out the grace period; the resumed run starts at the
// next step and its losses are the uninterrupted run's (steps redone: 0). DDP carries the vote
// in its last bucket, FSDP in the gradient norm's all-reduce.
TEST(Stop, SigtermMidTrainingCheckpointsTheAgreedStepAndTheResumeRedoesNone) {
  for (std::string strategy : {"DDP", "FSDP"}) {
    SCOPED_TRACE(strategy);
    const std::string dir = temp_dir("resume-" + strategy);
    const std::vector<std::string> common = {"--strategy", strategy, "--steps", "300", "--checkpoint-every", "1000"};
    auto args = [&](const std::string& ckpt, const std::string& loss) {
      auto a = common;
      a.insert(a.end(), {"--checkpoint-dir", dir + "/" + ckpt, "--loss-log", dir + "/" + loss});
      return a;
    };
    auto [full_code, full_out] = train(dir, args("full", "full.loss"), "full");
    ASSERT_EQ(full_code, 0) << full_out;

    auto agent = start_agent(dir, args("ckpt", "stopped.loss"), "stopped");
    ASSERT_TRUE(eventually([&] { return logged_steps(dir, "stopped", 1).size() >= 20; }, 240s)) << read_file(dir + "/stopped.out");
    agent.signal(SIGTERM);
    auto st = agent.wait_for(50s);  // the grace period is 60 s
    const std::string out = read_file(dir + "/stopped.out");
    ASSERT_TRUE(st.has_value()) << out;
    EXPECT_EQ(st->shell_code(), 128 + SIGTERM) << out;
    EXPECT_EQ(out.find("did not stop within the grace period"), std::string::npos) << out;
    const int agreed = agreed_step(out, 2);
    ASSERT_GT(agreed, 0) << out;
    ASSERT_LT(agreed, 300) << "SIGTERM came after the end:\n" << out;
    for (int r = 0; r < 2; ++r) {
      EXPECT_NE(out.find("rank " + std::to_string(r) + ": SIGTERM: stopping at the end of a step every rank agrees on"),
                std::string::npos) << out;
      EXPECT_NE(out.find("rank " + std::to_string(r) + ": stopped on request after step " + std::to_string(agreed) +
                         "; exit 143 (a resumed run starts at step " + std::to_string(agreed + 1) + ")"),
                std::string::npos) << out;
      auto steps = logged_steps(dir, "stopped", r);
      ASSERT_FALSE(steps.empty());
      EXPECT_EQ(steps.back(), agreed) << "rank " << r << "'s last report";
    }
    EXPECT_TRUE(std::regex_search(out, std::regex("stop: checkpoint at step " + std::to_string(agreed) +
                                                  R"( written in [0-9.]+ s in )" + dir + "/ckpt"))) << out;
    EXPECT_EQ(read_file(dir + "/ckpt/LATEST"), "step-" + std::to_string(agreed) + "\n");
    EXPECT_TRUE(fs::exists(dir + "/ckpt/step-" + std::to_string(agreed) + "/MANIFEST"));
    const auto stopped = read_losses(dir + "/stopped.loss");
    ASSERT_FALSE(stopped.empty());
    EXPECT_EQ(stopped.rbegin()->first, agreed) << "rank 0's last loss";

    auto [resumed_code, resumed_out] = train(dir, args("ckpt", "resumed.loss"), "resumed");
    ASSERT_EQ(resumed_code, 0) << resumed_out;
    EXPECT_NE(resumed_out.find("resumed from " + dir + "/ckpt at step " + std::to_string(agreed)), std::string::npos)
        << resumed_out;
    auto want = read_losses(dir + "/full.loss"), got = read_losses(dir + "/resumed.loss");
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(got.begin()->first, agreed + 1) << "the first step after the resume";
    EXPECT_EQ(got.size(), static_cast<size_t>(300 - agreed));
    for (const auto& [step, loss] : got) {
      ASSERT_TRUE(want.count(step)) << step;
      EXPECT_NEAR(loss, want[step], 1e-6 * std::abs(want[step])) << "step " << step;
    }
  }
}

// Without a checkpoint directory the ranks still stop together, at once, and say nothing was
// saved. FSDP with --clip 0: the vote's own 1-element all-reduce (Note [Stop vote]).
TEST(Stop, WithoutACheckpointDirectoryTheRanksStopTogetherAndSayNothingWasSaved) {
  const std::string dir = temp_dir("no-dir");
  auto agent = start_agent(dir, {"--strategy", "FSDP", "--clip", "0", "--steps", "100000"}, "run");
  ASSERT_TRUE(eventually([&] { return logged_steps(dir, "run", 1).size() >= 10; }, 240s)) << read_file(dir + "/run.out");
  agent.signal(SIGTERM);
  auto st = agent.wait_for(50s);
  const std::string out = read_file(dir + "/run.out");
  ASSERT_TRUE(st.has_value()) << out;
  EXPECT_EQ(st->shell_code(), 128 + SIGTERM) << out;
  const int agreed = agreed_step(out, 2);
  ASSERT_GT(agreed, 0) << out;
  EXPECT_NE(out.find("stop: no checkpoint directory (--checkpoint-dir, LOCKSTEP_CHECKPOINT_PATH: spec.checkpoint.path), "
                     "so steps 1-" + std::to_string(agreed) + " are not saved; stopping now"),
            std::string::npos) << out;
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(out.find("rank " + std::to_string(r) + ": stopped on request after step " + std::to_string(agreed) +
                       "; exit 143\n"), std::string::npos) << out;
}

// Ctrl-C on an interactive run (SIGINT to every rank, no agent), and a second and third signal
// to a rank while it stops: those are only logged, the checkpoint is complete and resumes, and
// the ranks exit 130.
TEST(Stop, CtrlCStopsAndFurtherSignalsDuringTheStopAreIgnored) {
  const std::string dir = temp_dir("ctrl-c");
  const int port = lockstep::free_loopback_port();
  std::vector<lockstep::Process> ranks;
  for (int r = 0; r < 2; ++r) {
    lockstep::SpawnOptions so;
    so.argv = trainer({"--strategy", "DDP", "--steps", "100000", "--checkpoint-dir", dir + "/ckpt", "--loss-log",
                       dir + "/loss"});
    so.env = {{"WORLD_SIZE", "2"}, {"RANK", std::to_string(r)}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", std::to_string(port)}, {"GLOO_SOCKET_IFNAME", "lo"}};
    so.unset_env = {"LOCKSTEP_CHECKPOINT_PATH", "LOCKSTEP_JOB_UID", "LOCKSTEP_RESTART_ATTEMPT", "LOCKSTEP_METRICS_SOCKET"};
    so.output_path = dir + "/rank-" + std::to_string(r) + ".out";
    ranks.push_back(lockstep::Process::spawn(so));
  }
  ASSERT_TRUE(eventually([&] { return read_losses(dir + "/loss").size() >= 10; }, 240s)) << read_file(dir + "/rank-0.out");
  // Rank 1 frozen, so rank 0 cannot finish its step while the further signals come (each
  // rank's handler says so at once, whatever its main thread is doing).
  auto said = [&](int r, const std::string& what) {
    return eventually([&] { return read_file(dir + "/rank-" + std::to_string(r) + ".out").find(what) != std::string::npos; }, 30s);
  };
  ::kill(ranks[1].pid(), SIGSTOP);
  ::kill(ranks[0].pid(), SIGINT);
  ASSERT_TRUE(said(0, "rank 0: SIGINT: stopping")) << read_file(dir + "/rank-0.out");
  ::kill(ranks[0].pid(), SIGTERM);
  ASSERT_TRUE(said(0, "rank 0: SIGTERM again")) << read_file(dir + "/rank-0.out");
  ::kill(ranks[0].pid(), SIGINT);
  ASSERT_TRUE(said(0, "rank 0: SIGINT again")) << read_file(dir + "/rank-0.out");
  ::kill(ranks[1].pid(), SIGINT);  // delivered once it runs again
  ::kill(ranks[1].pid(), SIGCONT);
  std::string out;
  for (int r = 0; r < 2; ++r) {
    auto st = ranks[static_cast<size_t>(r)].wait_for(60s);
    const std::string o = read_file(dir + "/rank-" + std::to_string(r) + ".out");
    out += o;
    ASSERT_TRUE(st.has_value()) << o;
    EXPECT_EQ(st->shell_code(), 128 + SIGINT) << o;
    const std::string me = "rank " + std::to_string(r) + ": ";
    EXPECT_NE(o.find(me + "SIGINT: stopping at the end of a step every rank agrees on"), std::string::npos) << o;
  }
  const int agreed = agreed_step(out, 2);
  ASSERT_GT(agreed, 0) << out;
  EXPECT_EQ(read_file(dir + "/ckpt/LATEST"), "step-" + std::to_string(agreed) + "\n");
  // The checkpoint is whole: a run resumes from it (one step more).
  auto [code, resumed] = train(dir, {"--strategy", "DDP", "--steps", std::to_string(agreed + 1), "--checkpoint-dir",
                                     dir + "/ckpt"}, "resumed");
  EXPECT_EQ(code, 0) << resumed;
  EXPECT_NE(resumed.find("resumed from " + dir + "/ckpt at step " + std::to_string(agreed)), std::string::npos) << resumed;
}
