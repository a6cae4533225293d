// lockstep-agent as local processes on loopback: two agents as two nodes, real Gloo
// training-style programs, signals, stalls, and /metrics scraped over HTTP.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent_support.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using lockstep::Process;
using lockstep::test::descendants;
using lockstep::test::env_or;
using lockstep::test::eventually;

namespace {

using lockstep::test::agent_bin;
using lockstep::test::trainer_bin;

std::string worker_bin() { return env_or("LOCKSTEP_TEST_WORKER_BIN", "lockstep-test-worker"); }

std::string temp_dir(const std::string& name) { return lockstep::test::fresh_temp_dir("agent-" + name); }

// One agent: a node of a job, with its output in a file.
struct Agent {
  Process proc;
  std::string log;
  int metrics_port = 0;
  lockstep::test::NoFalseVerdict verdicts;  // issue #42: a healthy run names no straggler
  std::string output() const { return lockstep::test::read_file(log); }
  std::optional<lockstep::ExitStatus> wait(std::chrono::seconds t) { return proc.wait_for(t); }
};

Agent start_agent(const std::string& dir, int nnodes, int node_rank, int nproc, int master_port,
                  std::vector<std::string> command, std::vector<std::string> flags = {},
                  std::map<std::string, std::string> extra_env = {}) {
  Agent a;
  a.log = dir + "/agent-" + std::to_string(node_rank) + ".log";
  a.metrics_port = lockstep::free_loopback_port();
  lockstep::SpawnOptions so;
  so.argv = {agent_bin(), "--metrics-address", "127.0.0.1"};
  so.argv.insert(so.argv.end(), flags.begin(), flags.end());
  so.argv.push_back("--");
  so.argv.insert(so.argv.end(), command.begin(), command.end());
  so.env = {{"LOCKSTEP_JOB_NAME", "tj"}, {"LOCKSTEP_JOB_NAMESPACE", "ns"}, {"LOCKSTEP_JOB_UID", "uid-123"},
            {"LOCKSTEP_NNODES", std::to_string(nnodes)}, {"LOCKSTEP_NODE_RANK", std::to_string(node_rank)},
            {"LOCKSTEP_NPROC_PER_NODE", std::to_string(nproc)}, {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
            {"LOCKSTEP_MASTER_PORT", std::to_string(master_port)}, {"LOCKSTEP_RESTART_ATTEMPT", "2"},
            {"LOCKSTEP_METRICS_PORT", std::to_string(a.metrics_port)}};
  so.unset_env = {"OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING"};
  // One barrier port per job (its master port), picked free rather than the default master
  // port + 1, which a port picked earlier for /metrics may hold.
  static std::map<int, int> agent_ports;
  if (!agent_ports.count(master_port)) agent_ports[master_port] = lockstep::free_loopback_port();
  so.env["LOCKSTEP_AGENT_PORT"] = std::to_string(agent_ports[master_port]);
  for (const auto& [k, v] : extra_env) so.env[k] = v;
  so.output_path = a.log;
  a.proc = Process::spawn(so);
  a.verdicts = lockstep::test::NoFalseVerdict(a.log);
  return a;
}

// The other nodes of a job, each running `command` (the restart barrier starts workers only
// once every node's agent has joined: Note [Restart barrier]).
std::vector<Agent> start_peers(const std::string& dir, int nnodes, int except_node, int nproc, int master_port,
                               const std::vector<std::string>& command, std::vector<std::string> flags = {}) {
  std::vector<Agent> peers;
  for (int n = 0; n < nnodes; ++n)
    if (n != except_node) peers.push_back(start_agent(dir, nnodes, n, nproc, master_port, command, flags));
  return peers;
}

std::string scrape(int port) {
  auto r = lockstep::run_capture({"curl", "-s", "http://127.0.0.1:" + std::to_string(port) + "/metrics"}, {}, 10s);
  return r.output;
}




std::map<std::string, std::string> parse_env(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

}  // namespace

TEST(Agent, TwoNodesOfTwoWorkersAgreeOnAGlooAllReduce) {
  std::string dir = temp_dir("allreduce");
  int port = lockstep::free_loopback_port();
  auto a0 = start_agent(dir, 2, 0, 2, port, {worker_bin(), "allreduce", dir + "/sum"});
  auto a1 = start_agent(dir, 2, 1, 2, port, {worker_bin(), "allreduce", dir + "/sum"});
  auto s0 = a0.wait(120s), s1 = a1.wait(120s);
  ASSERT_TRUE(s0 && s1) << a0.output() << a1.output();
  EXPECT_EQ(s0->shell_code(), 0) << a0.output();
  EXPECT_EQ(s1->shell_code(), 0) << a1.output();
  for (int r = 0; r < 4; ++r)  // 1 + 2 + 3 + 4
    EXPECT_EQ(lockstep::test::read_file(dir + "/sum.rank-" + std::to_string(r)), "10\n") << "rank " << r;
  // Output is passed through with a rank prefix.
  EXPECT_NE(a1.output().find("[rank 3] rank 3 of 4: all-reduce sum 10"), std::string::npos) << a1.output();
}

TEST(Agent, EveryWorkerGetsTorchrunsEnvironment) {
  std::string dir = temp_dir("env");
  int port = lockstep::free_loopback_port();
  auto a0 = start_agent(dir, 2, 0, 2, port, {worker_bin(), "env", dir});
  auto a1 = start_agent(dir, 2, 1, 2, port, {worker_bin(), "env", dir});
  ASSERT_EQ(a0.wait(30s)->shell_code(), 0) << a0.output();
  ASSERT_EQ(a1.wait(30s)->shell_code(), 0) << a1.output();
  std::set<std::string> sockets;
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto env = parse_env(lockstep::test::read_file(dir + "/rank-" + std::to_string(rank) + ".env"));
    int node = rank / 2, local = rank % 2;
    std::map<std::string, std::string> want = {
        {"RANK", std::to_string(rank)}, {"LOCAL_RANK", std::to_string(local)}, {"WORLD_SIZE", "4"},
        {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", std::to_string(node)}, {"NODE_RANK", std::to_string(node)},
        {"ROLE_RANK", std::to_string(rank)}, {"ROLE_WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", std::to_string(port)}, {"TORCHELASTIC_RESTART_COUNT", "2"},
        {"TORCHELASTIC_MAX_RESTARTS", "0"}, {"TORCHELASTIC_RUN_ID", "uid-123"}, {"OMP_NUM_THREADS", "1"},
        {"GROUP_WORLD_SIZE", "2"}, {"ROLE_NAME", "default"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"},
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}};
    for (const auto& [k, v] : want) EXPECT_EQ(env[k], v) << k;
    EXPECT_TRUE(std::regex_search(env["TORCHELASTIC_ERROR_FILE"], std::regex("/rank-" + std::to_string(local) + "-error\\.json$")))
        << env["TORCHELASTIC_ERROR_FILE"];
    EXPECT_EQ(env.count("TORCHELASTIC_TIMER_FILE"), 0u);
    ASSERT_TRUE(env.count("LOCKSTEP_METRICS_SOCKET"));
    sockets.insert(env["LOCKSTEP_METRICS_SOCKET"]);
  }
  EXPECT_EQ(sockets.size(), 4u) << "each worker reports on its own socket";
}

TEST(Agent, APythonProgramSeesWhatTorchrunWouldGiveIt) {
  // The check script derives the expected values from torchrun's documented rules itself.
  std::string dir = temp_dir("torchrun");
  std::string script = std::string(LOCKSTEP_SOURCE_DIR) + "/tests/agent/torchrun_env_check.py";
  if (::access("/usr/bin/python3", X_OK) != 0 && ::system("command -v python3 >/dev/null") != 0)
    GTEST_SKIP() << "SKIPPED: python3 not found";
  int port = lockstep::free_loopback_port();
  // Under the operator's LOCKSTEP_* variables...
  auto a = start_agent(dir, 3, 1, 2, port, {"python3", script, "3", "1", "2", "127.0.0.1", std::to_string(port), "uid-123", "2"});
  auto peers = start_peers(dir, 3, 1, 2, port, {"true"});
  auto st = a.wait(60s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->shell_code(), 0) << a.output();
  EXPECT_NE(a.output().find("[rank 3] rank 3: matches torchrun"), std::string::npos) << a.output();
  // ...and under torchrun's own PET_* variables alone.
  lockstep::SpawnOptions so;
  so.argv = {agent_bin(), "--no-metrics", "--", "python3", script, "2", "0", "3", "localhost", "29999", "my-run"};
  so.env = {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "0"}, {"PET_NPROC_PER_NODE", "3"}, {"PET_MASTER_ADDR", "localhost"},
            {"PET_MASTER_PORT", "29999"}};
  so.unset_env = {"LOCKSTEP_JOB_UID", "LOCKSTEP_JOB_NAME", "LOCKSTEP_NNODES", "OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING"};
  so.argv.insert(so.argv.begin() + 1, {"--run-id", "my-run"});
  so.output_path = dir + "/pet.log";
  auto p = Process::spawn(so);
  so.env["PET_NODE_RANK"] = "1";  // its peer node, which only has to be there
  so.argv = {agent_bin(), "--no-metrics", "--run-id", "my-run", "--", "true"};
  so.output_path = dir + "/pet-1.log";
  auto p1 = Process::spawn(so);
  auto pst = p.wait_for(60s);
  ASSERT_TRUE(pst.has_value());
  EXPECT_EQ(pst->shell_code(), 0) << lockstep::test::read_file(dir + "/pet.log");
}

TEST(Agent, AWorkerExitCodeIsTheAgentsAndThePeerNodeStopsToo) {
  std::string dir = temp_dir("exit3");
  int port = lockstep::free_loopback_port();
  auto a0 = start_agent(dir, 2, 0, 2, port, {worker_bin(), "allreduce", dir + "/sum", "3", "3"});
  auto a1 = start_agent(dir, 2, 1, 2, port, {worker_bin(), "allreduce", dir + "/sum", "3", "3"});
  auto s1 = a1.wait(60s);
  ASSERT_TRUE(s1.has_value()) << a1.output();
  EXPECT_EQ(s1->shell_code(), 3) << a1.output();
  EXPECT_NE(a1.output().find("rank 3 (pid"), std::string::npos) << a1.output();
  EXPECT_NE(a1.output().find("exited with code 3 first"), std::string::npos) << a1.output();
  // Node 0's workers lose their peers in the collective and fail; its agent stops too.
  auto s0 = a0.wait(90s);
  ASSERT_TRUE(s0.has_value()) << "node 0 still running:\n" << a0.output();
  EXPECT_NE(s0->shell_code(), 0) << a0.output();
}

TEST(Agent, SigtermStopsEveryProcessWithinTheGracePeriod) {
  std::string dir = temp_dir("sigterm");
  auto a = start_agent(dir, 1, 0, 2, lockstep::free_loopback_port(), {worker_bin(), "stubborn"},
                       {"--grace-period", "1s"});
  std::set<pid_t> tree;
  ASSERT_TRUE(eventually([&] {
    tree = descendants(a.proc.pid());
    return tree.size() >= 4;  // 2 workers + their 2 children
  })) << a.output();
  auto t0 = std::chrono::steady_clock::now();
  a.proc.signal(SIGTERM);
  auto st = a.wait(20s);
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), 128 + SIGTERM) << a.output();
  EXPECT_LT(took, 5s) << "grace period is 1 s";
  for (pid_t p : tree) EXPECT_TRUE(eventually([&] { return !lockstep::test::is_running(p); }, 3s)) << "pid " << p << " left behind";
  EXPECT_NE(a.output().find("did not stop within the grace period; sending SIGKILL"), std::string::npos) << a.output();
}

TEST(Agent, AWorkerThatStopsReportingStepsIsAStall) {
  std::string dir = temp_dir("stall");
  auto a = start_agent(dir, 1, 0, 2, lockstep::free_loopback_port(), {worker_bin(), "steps", "3", "then-hang"},
                       {"--stall-timeout", "1s", "--grace-period", "1s", "--metrics-linger", "0"});
  auto st = a.wait(30s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), lockstep::contract::kExitStall) << a.output();
  EXPECT_TRUE(std::regex_search(a.output(), std::regex(R"(stall: no step for 1 s from rank\(s\) \d \(last step 3\))")))
      << a.output();
}

// A stopped rank (SIGSTOP) is a stall too, and stopping it does not sit out the grace period:
// the agent continues what it terminates, so SIGTERM takes effect at once.
TEST(Agent, AStoppedRankIsAStallAndStopsWithoutWaitingOutTheGracePeriod) {
  std::string dir = temp_dir("sigstop");
  auto t0 = std::chrono::steady_clock::now();
  auto a = start_agent(dir, 1, 0, 2, lockstep::free_loopback_port(), {worker_bin(), "steps", "3", "then-stop"},
                       {"--stall-timeout", "1s", "--grace-period", "30s", "--metrics-linger", "0"});
  auto st = a.wait(60s);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), lockstep::contract::kExitStall) << a.output();
  EXPECT_LT(seconds, 15.0) << "the stopped rank held the agent for the grace period:\n" << a.output();
  EXPECT_EQ(a.output().find("did not stop within the grace period"), std::string::npos) << a.output();
}

TEST(Agent, ARankThatNeverReportsAStepIsAStallAfterTheFirstStepTimeout) {
  // A hang in rendezvous or the first collective: no step ever arrives.
  std::string dir = temp_dir("first-step");
  auto a = start_agent(dir, 1, 0, 2, lockstep::free_loopback_port(), {worker_bin(), "steps", "0", "then-hang"},
                       {"--stall-timeout", "1h", "--first-step-timeout", "1s", "--grace-period", "1s", "--metrics-linger", "0"});
  auto st = a.wait(30s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), lockstep::contract::kExitStall) << a.output();
  EXPECT_NE(a.output().find("stall: no first step within 1 s of the start from rank(s) 0, 1; a hang in rendezvous"),
            std::string::npos)
      << a.output();
}

TEST(Agent, StallDetectionStaysOnWithNoMetrics) {
  std::string dir = temp_dir("stall-no-metrics");
  auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {worker_bin(), "steps", "3", "then-hang"},
                       {"--no-metrics", "--stall-timeout", "1s", "--grace-period", "1s"});
  auto st = a.wait(30s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), lockstep::contract::kExitStall) << a.output();
  EXPECT_NE(a.output().find("--no-metrics: no /metrics, but the step reports are still watched for stalls"),
            std::string::npos)
      << a.output();
  EXPECT_EQ(scrape(a.metrics_port), "") << "--no-metrics serves nothing";
  // With stall detection off too, there is nothing at all: no socket for the worker.
  auto b = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {worker_bin(), "env", dir},
                       {"--no-metrics", "--stall-timeout", "0"});
  ASSERT_EQ(b.wait(30s)->shell_code(), 0) << b.output();
  EXPECT_EQ(parse_env(lockstep::test::read_file(dir + "/rank-0.env")).count("LOCKSTEP_METRICS_SOCKET"), 0u);
}

TEST(Agent, AStallStaysScrapableForTheLingerAndSigtermEndsIt) {
  std::string dir = temp_dir("linger");
  auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {worker_bin(), "steps", "2", "then-hang"},
                       {"--stall-timeout", "1s", "--grace-period", "1s", "--metrics-linger", "5m"});
  ASSERT_TRUE(eventually([&] { return a.output().find("so the stall is scraped") != std::string::npos; }, 30s)) << a.output();
  std::string m = scrape(a.metrics_port);
  EXPECT_NE(m.find("lockstep_stalls_total{namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("lockstep_worker_up{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 0"), std::string::npos) << m;
  EXPECT_TRUE(a.proc.running()) << "still serving, as --metrics-linger asks";
  a.proc.signal(SIGTERM);
  auto st = a.wait(5s);
  ASSERT_TRUE(st.has_value()) << "SIGTERM must cut the linger short\n" << a.output();
  EXPECT_EQ(st->shell_code(), lockstep::contract::kExitStall) << "the cause stays the stall\n" << a.output();
}

TEST(Agent, OrphansAreAdoptedAndReapedEvenWhenTheAgentIsNotPid1) {
  // The worker's child double-forks a short-lived process into its own session and exits:
  // that process is re-parented to the agent (a subreaper) and must not stay a zombie.
  std::string dir = temp_dir("orphan");
  std::string script = "( setsid sh -c 'echo $$ > " + dir + "/orphan.pid; exec sleep 2' & ); exec sleep 1000";
  auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {"sh", "-c", script}, {"--stall-timeout", "0"});
  pid_t orphan = 0;
  ASSERT_TRUE(eventually([&] { return (orphan = std::atoi(lockstep::test::read_file(dir + "/orphan.pid").c_str())) > 0; }, 10s))
      << a.output();
  auto parent_of = [](pid_t p) {
    std::string stat = lockstep::test::read_file("/proc/" + std::to_string(p) + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    return ppid;
  };
  EXPECT_TRUE(eventually([&] { return parent_of(orphan) == a.proc.pid(); }, 5s))
      << "pid " << orphan << " has parent " << parent_of(orphan) << ", not the agent " << a.proc.pid();
  // It exits after 2 s; the agent reaps it: no zombie left while the agent runs on.
  EXPECT_TRUE(eventually([&] { return lockstep::test::process_state(orphan) == 0; }, 10s))
      << "pid " << orphan << " state " << lockstep::test::process_state(orphan);
  EXPECT_TRUE(a.proc.running());
  a.proc.signal(SIGTERM);
  a.wait(20s);
}

// pids written by a shell worker into DIR/NAME.
std::vector<pid_t> read_pids(const std::string& dir, const std::vector<std::string>& names) {
  std::vector<pid_t> pids;
  for (const auto& n : names) {
    pid_t p = 0;
    eventually([&] { return (p = std::atoi(lockstep::test::read_file(dir + "/" + n).c_str())) > 0; }, 10s);
    pids.push_back(p);
  }
  return pids;
}

TEST(Agent, AFailedWorkersChildrenAndEscapedGrandchildrenAreKilled) {
  // Each worker leaves a child in its process group and one in its own session (setsid);
  // rank 1 then fails. Before, neither survivor of rank 1 was ever signalled.
  std::string dir = temp_dir("leftovers");
  std::string script = "setsid sleep 1000 & echo $! > " + dir + "/escaped.$RANK; sleep 1000 & echo $! > " + dir +
                       "/ingroup.$RANK; if [ \"$RANK\" = 1 ]; then while [ ! -s " + dir +
                       "/ingroup.0 ]; do sleep 0.05; done; exit 3; fi; wait";
  auto a = start_agent(dir, 1, 0, 2, lockstep::free_loopback_port(), {"sh", "-c", script}, {"--grace-period", "5s"});
  auto pids = read_pids(dir, {"escaped.0", "ingroup.0", "escaped.1", "ingroup.1"});
  auto st = a.wait(30s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), 3) << a.output();
  for (pid_t p : pids) {
    EXPECT_GT(p, 0);
    EXPECT_TRUE(eventually([&] { return !lockstep::test::is_running(p); }, 3s)) << "pid " << p << " left behind";
  }
}

TEST(Agent, SigtermReachesDescendantsThatLeftTheWorkersGroup) {
  std::string dir = temp_dir("escaped");
  std::string script = "setsid sh -c 'trap \"\" TERM; exec sleep 1000' & echo $! > " + dir + "/escaped; sleep 1000 & echo $! > " +
                       dir + "/ingroup; wait";
  auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {"sh", "-c", script}, {"--grace-period", "1s"});
  auto pids = read_pids(dir, {"escaped", "ingroup"});
  auto tree = descendants(a.proc.pid());
  a.proc.signal(SIGTERM);
  auto st = a.wait(20s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), 128 + SIGTERM) << a.output();
  for (pid_t p : pids) tree.insert(p);
  for (pid_t p : tree)  // the escaped one ignores SIGTERM: SIGKILL after the grace period
    EXPECT_TRUE(eventually([&] { return !lockstep::test::is_running(p); }, 3s)) << "pid " << p << " left behind";
}

TEST(Agent, AWorkersErrorFileIsShownWhenItFails) {
  // torch.distributed.elastic's @record writes the exception to TORCHELASTIC_ERROR_FILE.
  std::string dir = temp_dir("errorfile");
  auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(),
                       {"sh", "-c", "echo '{\"message\": \"ValueError: bad shard\"}' > \"$TORCHELASTIC_ERROR_FILE\"; exit 1"});
  auto st = a.wait(30s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), 1) << a.output();
  EXPECT_NE(a.output().find("error file of rank 0 (TORCHELASTIC_ERROR_FILE):\n  {\"message\": \"ValueError: bad shard\"}"),
            std::string::npos)
      << a.output();
}

// See Note [Termination message]: a failing rank's last words end the pod's termination message,
// which the operator quotes in the TrainingJob's condition.
TEST(Agent, AFailureWritesWhyAndTheRanksLastLinesAsTheTerminationMessage) {
  std::string dir = temp_dir("termination");
  std::string log = dir + "/termination-log";
  auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(),
                       {"sh", "-c", "echo starting; echo 'lockstep-trainer: --steps must be an integer >= 1' >&2; exit 64"},
                       {}, {{"LOCKSTEP_TERMINATION_LOG", log}});
  auto st = a.wait(30s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), 64) << a.output();
  std::string text = lockstep::test::read_file(log);
  EXPECT_EQ(text.rfind("lockstep-agent: rank 0 ", 0), 0u) << text;
  EXPECT_NE(text.find("exited with code 64"), std::string::npos) << text;
  ASSERT_GE(text.size(), 2u);
  std::string last = text.substr(0, text.size() - 1);
  last = last.substr(last.rfind('\n') + 1);
  EXPECT_EQ(last, "lockstep-trainer: --steps must be an integer >= 1") << text;
  // A run that succeeds writes none.
  std::string ok_log = dir + "/ok-log";
  auto ok = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {"true"}, {}, {{"LOCKSTEP_TERMINATION_LOG", ok_log}});
  ASSERT_TRUE(ok.wait(30s).has_value());
  EXPECT_FALSE(std::filesystem::exists(ok_log));
}

TEST(Agent, MetricsCarryStepCommAndWorkerSeriesWithTheirLabels) {
  std::string dir = temp_dir("metrics");
  const int port = lockstep::free_loopback_port();
  auto a = start_agent(dir, 2, 1, 2, port, {worker_bin(), "steps", "5", "then-hang"}, {"--stall-timeout", "0"});
  auto peers = start_peers(dir, 2, 1, 1, port, {"sleep", "600"}, {"--stall-timeout", "0"});
  // Node 1 of 2 with 2 workers: ranks 2 and 3.
  std::string m;
  ASSERT_TRUE(eventually([&] {
    m = scrape(a.metrics_port);
    return m.find("lockstep_steps_total{namespace=\"ns\",node_rank=\"1\",rank=\"3\",trainingjob=\"tj\"} 5") != std::string::npos &&
           m.find("lockstep_steps_total{namespace=\"ns\",node_rank=\"1\",rank=\"2\",trainingjob=\"tj\"} 5") != std::string::npos;
  })) << m << a.output();
  for (const char* series :
       {"lockstep_step_duration_seconds_count{namespace=\"ns\",node_rank=\"1\",rank=\"2\",trainingjob=\"tj\"} 5",
        "lockstep_compute_seconds_total{", "lockstep_comm_exposed_seconds_total{",
        "lockstep_comm_seconds_total{namespace=\"ns\",node_rank=\"1\",op=\"allreduce\",rank=\"3\",trainingjob=\"tj\"} 0.1",
        "lockstep_comm_bytes_total{namespace=\"ns\",node_rank=\"1\",op=\"allreduce\",rank=\"3\",trainingjob=\"tj\"} 20480",
        "lockstep_comm_op_exposed_seconds_total{namespace=\"ns\",node_rank=\"1\",op=\"allreduce\",rank=\"3\",trainingjob=\"tj\"} 0.05",
        "lockstep_tokens_total{namespace=\"ns\",node_rank=\"1\",rank=\"2\",trainingjob=\"tj\"} 2560",
        "lockstep_flops_total{", "lockstep_loss{namespace=\"ns\",node_rank=\"1\",rank=\"2\",trainingjob=\"tj\"} 1",
        "lockstep_step{namespace=\"ns\",node_rank=\"1\",rank=\"3\",trainingjob=\"tj\"} 5",
        "lockstep_total_steps{namespace=\"ns\",node_rank=\"1\",rank=\"3\",trainingjob=\"tj\"} 5",
        "lockstep_last_step_timestamp_seconds{", "lockstep_worker_up{namespace=\"ns\",node_rank=\"1\",rank=\"3\",trainingjob=\"tj\"} 1",
        "lockstep_worker_restarts_total{namespace=\"ns\",node_rank=\"1\",trainingjob=\"tj\"} 0",
        "lockstep_restarts_total{kind=\"in_place\",namespace=\"ns\",node_rank=\"1\",trainingjob=\"tj\"} 0",
        "lockstep_restart_attempt{namespace=\"ns\",node_rank=\"1\",trainingjob=\"tj\"} 2",
        "lockstep_stalls_total{namespace=\"ns\",node_rank=\"1\",trainingjob=\"tj\"} 0"})
    EXPECT_NE(m.find(series), std::string::npos) << series << "\n" << m;
  EXPECT_FALSE(std::regex_search(m, std::regex(R"([{,]job=")"))) << "a label named job is renamed by Prometheus";
  // No GPU here: the GPU series are absent, not zero, and the log says why once.
  if (a.output().find("no NVIDIA GPU") != std::string::npos) {
    EXPECT_EQ(m.find("lockstep_gpu_"), std::string::npos) << m;
  }
  EXPECT_EQ(m.find("lockstep_last_restart"), std::string::npos) << "no restart yet: no last-restart series\n" << m;
  a.proc.signal(SIGTERM);
  a.wait(20s);
  // Node 1 is gone: node 0's agent ends its workers and says why.
  auto s0 = peers[0].wait(30s);
  ASSERT_TRUE(s0.has_value()) << peers[0].output();
  EXPECT_EQ(s0->shell_code(), lockstep::contract::kExitRendezvous) << peers[0].output();
  EXPECT_NE(peers[0].output().find("the agent of node 1 is gone"), std::string::npos) << peers[0].output();
}

// See Note [NCCL profiler plugin]: the agent gives its worker the plugin (NCCL_PROFILER_PLUGIN), the
// plugin's figures reach /metrics by op, and they count no step. A stand-in for NCCL's core
// (nccl_core_stub.c) loads the plugin as NCCL does and plays known events; the GPU tier runs it
// under real NCCL (agent_gpu_test).
// Both interface versions: 5 (NCCL 2.28 and later) and 4 (NCCL 2.27).
TEST(Agent, NcclProfilerPluginFiguresReachMetrics) {
  const std::string stub = env_or("LOCKSTEP_NCCL_STUB_BIN", "");
  if (stub.empty()) GTEST_SKIP() << "SKIPPED: LOCKSTEP_NCCL_STUB_BIN not set";
  for (const std::string version : {"v5", "v4"}) {
    SCOPED_TRACE("NCCL profiler interface " + version);
    std::string dir = temp_dir("nccl-" + version);
    auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {stub, "60", version}, {"--stall-timeout", "0"},
                         {{"LOCKSTEP_NCCL_PROFILER_DEBUG", "1"}});
    std::string m;
    const std::string labels = "namespace=\"ns\",node_rank=\"0\",op=\"";
    auto value = [&](const std::string& name, const std::string& op) {
      std::smatch match;
      std::regex re(name + "\\{" + labels + op + "\",rank=\"0\",trainingjob=\"tj\"\\} ([0-9.eE+-]+)");
      return std::regex_search(m, match, re) ? std::stod(match[1]) : -1.0;
    };
    ASSERT_TRUE(eventually([&] {
      m = scrape(a.metrics_port);
      // The figures, and the stub's last line (the agent relays output as it comes).
      return value("lockstep_nccl_operations_total", "reduce_scatter") == 1 &&
             value("lockstep_nccl_operations_total", "broadcast") == 1 &&
             a.output().find("nccl stub: played") != std::string::npos;
    })) << m << a.output();
    EXPECT_NE(a.output().find("NCCL profiler: "), std::string::npos) << a.output();
    EXPECT_NE(a.output().find("libnccl-profiler-lockstep.so in each worker's NCCL_PROFILER_PLUGIN"), std::string::npos)
        << a.output();
    EXPECT_NE(a.output().find("nccl stub: played"), std::string::npos) << a.output();
    // LOCKSTEP_NCCL_PROFILER_DEBUG=1: the plugin's own summary at the end, the evicted one counted.
    EXPECT_NE(a.output().find("lockstep nccl profiler (rank 0, finalize): "), std::string::npos) << a.output();
    EXPECT_NE(a.output().find(" incomplete=1 send_errors=0"), std::string::npos) << a.output();
    struct Want { const char* op; double ops, seconds, bytes; };
    for (const Want& w : {Want{"allreduce", 3, 7.5e-6, 3 * 1048576.0}, Want{"allgather", 1, 1e-6, 2000},
                          Want{"send", 1, 5e-7, 10}, Want{"reduce_scatter", 1, 3e-6, 200}, Want{"other", 1, 4e-6, 0},
                          Want{"broadcast", 1, 8e-7, 4}, Want{"scatter", 1, 2e-6, 200}, Want{"gather", 1024, 1.024e-3, 1024}}) {
      SCOPED_TRACE(w.op);
      EXPECT_EQ(value("lockstep_nccl_operations_total", w.op), w.ops)
          << "the forked child sends its own broadcast and none of its parent's figures\n" << m;
      EXPECT_NEAR(value("lockstep_nccl_seconds_total", w.op), w.seconds, 1e-12) << m;
      EXPECT_EQ(value("lockstep_nccl_bytes_total", w.op), w.bytes) << m;
    }
    EXPECT_NE(m.find("lockstep_steps_total{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 0"), std::string::npos)
        << "NCCL's figures are no steps\n" << m;
    EXPECT_NE(m.find("lockstep_metrics_malformed_total{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 0"),
              std::string::npos) << m;
    a.proc.signal(SIGTERM);
    a.wait(20s);
  }
}

TEST(Agent, MalformedReportsAreCountedAndIgnored) {
  std::string dir = temp_dir("garbage");
  auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {worker_bin(), "garbage"}, {"--stall-timeout", "0"});
  std::string m;
  EXPECT_TRUE(eventually([&] {
    m = scrape(a.metrics_port);
    return m.find("lockstep_steps_total{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 2") != std::string::npos;
  })) << m;
  EXPECT_NE(m.find("lockstep_metrics_malformed_total{namespace=\"ns\",node_rank=\"0\",rank=\"0\",trainingjob=\"tj\"} 10"),
            std::string::npos)
      << m;
  EXPECT_TRUE(a.proc.running()) << "a malformed report must never be fatal";
  EXPECT_NE(a.output().find("ignoring malformed step report from rank 0"), std::string::npos) << a.output();
  a.proc.signal(SIGTERM);
  a.wait(20s);
}

TEST(Agent, LocalRestartsOnASingleNodeThenTheExitCode) {
  std::string dir = temp_dir("restart");
  auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {worker_bin(), "allreduce", dir + "/sum", "0", "7"},
                       {"--max-restarts", "1"});
  auto st = a.wait(60s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), 7) << a.output();
  EXPECT_NE(a.output().find("every worker restarts in place (1 of 1)"), std::string::npos) << a.output();
  EXPECT_NE(a.output().find("in-place restarts spent (1 of 1"), std::string::npos) << a.output();
}

// ---- In-place restarts (Note [Restart barrier]) ----

// The one worker process of an agent with one worker: its direct child.
pid_t only_worker(pid_t agent) {
  for (pid_t p : descendants(agent)) {
    std::string stat = lockstep::test::read_file("/proc/" + std::to_string(p) + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == agent) return p;
  }
  return -1;
}

// The value of the first series of `metrics` that starts with `prefix`, or -1.
double series(const std::string& metrics, const std::string& prefix) {
  auto at = metrics.find(prefix);
  if (at == std::string::npos) return -1;
  auto sp = metrics.find(' ', at + prefix.size());
  return sp == std::string::npos ? -1 : std::atof(metrics.c_str() + sp + 1);
}

// Two nodes x one worker train the tiny GPT for 100 steps, a checkpoint every 10; both share
// the checkpoint directory, as pods on shared storage do.
struct InPlaceJob {
  std::string dir;
  int port = lockstep::free_loopback_port();
  std::vector<Agent> agents;
  InPlaceJob(const std::string& name, int budget, std::vector<std::string> flags = {}, int steps = 100) {
    dir = temp_dir(name);
    std::vector<std::string> cmd = {trainer_bin(), "--device", "cpu", "--model", "tiny", "--steps", std::to_string(steps),
                                    "--batch-size", "4", "--checkpoint-dir", dir + "/ckpt", "--checkpoint-every", "10",
                                    "--log-every", "10", "--loss-log", dir + "/loss"};
    flags.insert(flags.end(), {"--max-restarts", std::to_string(budget)});
    for (int n = 0; n < 2; ++n)
      agents.push_back(start_agent(dir, 2, n, 1, port, cmd, flags,
                                   {{"LOCKSTEP_RESTART_ATTEMPT", "0"}, {"GLOO_SOCKET_IFNAME", "lo"},
                                    {"LOCKSTEP_TERMINATION_LOG", dir + "/termination-" + std::to_string(n)}}));
  }
  // Waits until node `n`'s rank reports step `step` or later.
  bool reached(int n, int step, std::chrono::seconds t = 120s) {
    return eventually([&] { return series(scrape(agents[n].metrics_port), "lockstep_step{") >= step; }, t);
  }
  std::string outputs() const { return "--- node 0:\n" + agents[0].output() + "\n--- node 1:\n" + agents[1].output(); }
};

TEST(InPlace, AWorkerKilledOnNode1RestartsEveryRankInTheSameAgentsAndTrainingResumes) {
  InPlaceJob job("inplace-kill", 3);
  ASSERT_TRUE(job.reached(1, 25)) << job.outputs();
  const pid_t agent0 = job.agents[0].proc.pid(), agent1 = job.agents[1].proc.pid();
  const pid_t old0 = only_worker(agent0), old1 = only_worker(agent1);
  ASSERT_GT(old1, 0);
  ::kill(old1, SIGKILL);
  // Every rank of generation 1 runs under the same two agents, and no worker of generation 0
  // is left.
  std::string m;
  ASSERT_TRUE(eventually([&] {
    m = scrape(job.agents[0].metrics_port);
    return series(m, "lockstep_restarts_total{kind=\"in_place\"") == 1;
  }, 60s)) << m << job.outputs();
  EXPECT_TRUE(job.agents[0].proc.running() && job.agents[1].proc.running()) << "an in-place restart keeps the agents";
  ASSERT_TRUE(eventually([&] {
    pid_t n0 = only_worker(agent0), n1 = only_worker(agent1);
    return n0 > 0 && n1 > 0 && n0 != old0 && n1 != old1;
  }, 30s)) << job.outputs();
  EXPECT_FALSE(lockstep::test::is_running(old0)) << "a rank of generation 0 outlived the restart";
  EXPECT_NE(m.find("lockstep_last_restart_info{exit_code=\"137\",kind=\"in_place\",namespace=\"ns\",node_rank=\"0\","
                   "rank=\"1\",reason=\"WorkerFailed\",trainingjob=\"tj\"} 1"),
            std::string::npos) << m;
  EXPECT_GT(series(m, "lockstep_last_restart_timestamp_seconds{"), 1.6e9) << m;
  for (auto& a : job.agents) {
    auto st = a.wait(180s);
    ASSERT_TRUE(st.has_value()) << job.outputs();
    EXPECT_EQ(st->shell_code(), 0) << job.outputs();
  }
  const std::string out = job.outputs();
  EXPECT_NE(out.find("rank 1 (pid " + std::to_string(old1) + ") killed by signal 9 (Killed) on node 1 first; every worker "
                     "restarts in place (1 of 3)"), std::string::npos) << out;
  std::smatch resumed;
  ASSERT_TRUE(std::regex_search(out, resumed, std::regex("resumed from " + job.dir + "/ckpt at step (\\d+)"))) << out;
  EXPECT_GE(std::stoi(resumed[1]), 20) << "the newest complete checkpoint before the kill";
  std::string loss = lockstep::test::read_file(job.dir + "/loss");
  EXPECT_NE(loss.find("\n100 "), std::string::npos) << "training finished: " << loss;
  // Node 0's final line says the restart and its cause, for the operator to count one made
  // after its last reading (Note [Final progress]).
  EXPECT_EQ(lockstep::test::read_file(job.dir + "/termination-0"),
            "lockstep-progress step=100 total=100 restarts=1 reason=WorkerFailed rank=1 exit=137\n");
}

TEST(InPlace, AStalledRankRestartsEveryRankInPlaceThroughStallDetection) {
  InPlaceJob job("inplace-stall", 3, {"--stall-timeout", "3s"}, 80);
  ASSERT_TRUE(job.reached(1, 25)) << job.outputs();
  const pid_t stalled = only_worker(job.agents[1].proc.pid());
  ASSERT_GT(stalled, 0);
  ::kill(stalled, SIGSTOP);
  for (auto& a : job.agents) {
    auto st = a.wait(180s);
    ASSERT_TRUE(st.has_value()) << job.outputs();
    EXPECT_EQ(st->shell_code(), 0) << job.outputs();
  }
  const std::string out = job.outputs();
  EXPECT_NE(out.find("stall detected on rank(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("every worker restarts in place (1 of 3)"), std::string::npos) << out;
  EXPECT_NE(out.find("starting generation 1"), std::string::npos) << out;
  EXPECT_NE(lockstep::test::read_file(job.dir + "/loss").find("\n80 "), std::string::npos);
}

TEST(InPlace, BeyondTheBudgetEveryAgentExitsWithTheCausesCode) {
  // Rank 3 fails with 7 in every generation: one in-place restart, then both agents give up
  // with 7, for the operator's gang restart to take over.
  std::string dir = temp_dir("inplace-budget");
  int port = lockstep::free_loopback_port();
  std::vector<std::string> cmd = {worker_bin(), "allreduce", dir + "/sum", "3", "7"};
  auto a0 = start_agent(dir, 2, 0, 2, port, cmd, {"--max-restarts", "1"});
  auto a1 = start_agent(dir, 2, 1, 2, port, cmd, {"--max-restarts", "1"});
  for (Agent* a : {&a0, &a1}) {
    auto st = a->wait(90s);
    ASSERT_TRUE(st.has_value()) << a->output();
    EXPECT_EQ(st->shell_code(), 7) << a->output();
    EXPECT_NE(a->output().find("every worker restarts in place (1 of 1)"), std::string::npos) << a->output();
    EXPECT_NE(a->output().find("in-place restarts spent (1 of 1, spec.runPolicy.inPlaceRestarts)"), std::string::npos)
        << a->output();
  }
  EXPECT_NE(a1.output().find("last lines of rank 3"), std::string::npos) << "the culprit's node shows its last lines";
  // Workers see the generation as torchrun shows it, on top of the gang attempt (2 here).
  EXPECT_NE(a0.output().find("[rank 0] rank 0 restart count 2"), std::string::npos) << a0.output();
  EXPECT_NE(a0.output().find("[rank 0] rank 0 restart count 3"), std::string::npos) << a0.output();
}

TEST(InPlace, APermanentExitCodeUnderExitCodeIsNotRestarted) {
  std::string dir = temp_dir("inplace-permanent");
  int port = lockstep::free_loopback_port();
  std::vector<std::string> cmd = {worker_bin(), "allreduce", dir + "/sum", "2", "3"};
  std::vector<std::string> flags = {"--max-restarts", "3", "--restart-policy", "ExitCode"};
  auto a0 = start_agent(dir, 2, 0, 2, port, cmd, flags);
  auto a1 = start_agent(dir, 2, 1, 2, port, cmd, flags);
  for (Agent* a : {&a0, &a1}) {
    auto st = a->wait(90s);
    ASSERT_TRUE(st.has_value()) << a->output();
    EXPECT_EQ(st->shell_code(), 3) << a->output();
    EXPECT_NE(a->output().find("exit code 3 is permanent under restartPolicy ExitCode"), std::string::npos) << a->output();
    EXPECT_EQ(a->output().find("starting generation 1"), std::string::npos) << a->output();
  }
}

// The operator quotes whichever pod's termination message it reads first; a pod whose
// workers were only stopped must still carry the failing rank's words, sent through the
// restart barrier from the node where it ran (the cluster tier's bad-flag job once quoted
// only "rank 1 exited with code 64 on node 1 first").
TEST(InPlace, EveryNodesTerminationMessageQuotesTheFailingRankOnAnotherNode) {
  std::string dir = temp_dir("inplace-remote-words");
  int port = lockstep::free_loopback_port();
  std::vector<std::string> cmd = {
      "sh", "-c",
      "if [ \"$RANK\" = 1 ]; then echo 'lockstep-trainer: --steps must be an integer >= 1' >&2; exit 64; fi; exec sleep 60"};
  std::vector<std::string> flags = {"--max-restarts", "3", "--restart-policy", "ExitCode"};
  std::string log0 = dir + "/termination-0", log1 = dir + "/termination-1";
  auto a0 = start_agent(dir, 2, 0, 1, port, cmd, flags, {{"LOCKSTEP_TERMINATION_LOG", log0}});
  auto a1 = start_agent(dir, 2, 1, 1, port, cmd, flags, {{"LOCKSTEP_TERMINATION_LOG", log1}});
  for (Agent* a : {&a0, &a1}) {
    auto st = a->wait(60s);
    ASSERT_TRUE(st.has_value()) << a->output();
    EXPECT_EQ(st->shell_code(), 64) << a->output();
  }
  for (const auto& log : {log0, log1}) {
    std::string text = lockstep::test::read_file(log);
    EXPECT_NE(text.find("rank 1 "), std::string::npos) << log << ":\n" << text;
    EXPECT_NE(text.find("on node 1 first"), std::string::npos) << log << ":\n" << text;
    ASSERT_GE(text.size(), 2u) << log;
    std::string last = text.substr(0, text.size() - 1);
    last = last.substr(last.rfind('\n') + 1);
    EXPECT_EQ(last, "lockstep-trainer: --steps must be an integer >= 1") << log << ":\n" << text;
    EXPECT_EQ(text.find("lockstep-silent-peer"), std::string::npos) << "no node went silent: " << text;
  }
  EXPECT_NE(a0.output().find("last lines of rank 1 (node 1):"), std::string::npos) << a0.output();
}

// ---- A silent node (Note [Heartbeats] in agent/barrier/server.hpp) ----

// An agent and every process below it, the agent first.
std::vector<pid_t> process_tree(const Agent& a) {
  std::vector<pid_t> tree{a.proc.pid()};
  for (pid_t p : descendants(a.proc.pid())) tree.push_back(p);
  return tree;
}

void signal_all(const std::vector<pid_t>& pids, int sig) {
  for (pid_t p : pids) ::kill(p, sig);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

// Two nodes of one worker each, with in-place restarts to spare; each worker writes a line
// "RESTART_COUNT PID" to DIR/starts.RANK when it starts, then sleeps: a new generation of
// workers anywhere shows as a second line.
struct SleepingJob {
  std::string dir;
  int port = lockstep::free_loopback_port();
  std::vector<Agent> agents;
  explicit SleepingJob(const std::string& name, std::vector<std::string> flags = {}) {
    dir = temp_dir(name);
    std::vector<std::string> cmd = {"sh", "-c", "echo \"$TORCHELASTIC_RESTART_COUNT $$\" >> " + dir +
                                                    "/starts.$RANK; exec sleep 300"};
    flags.insert(flags.end(), {"--max-restarts", "3", "--stall-timeout", "0"});
    for (int n = 0; n < 2; ++n)
      agents.push_back(start_agent(dir, 2, n, 1, port, cmd, flags,
                                   {{"LOCKSTEP_TERMINATION_LOG", dir + "/termination-" + std::to_string(n)}}));
  }
  std::vector<std::string> starts(int rank) const {
    std::vector<std::string> lines;
    std::istringstream in(lockstep::test::read_file(dir + "/starts." + std::to_string(rank)));
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }
  pid_t worker(int rank) const {
    auto lines = starts(rank);
    return lines.empty() ? -1 : std::atoi(lines[0].substr(lines[0].find(' ') + 1).c_str());
  }
  bool started() const { return starts(0).size() == 1 && starts(1).size() == 1; }
  std::string outputs() const { return "--- node 0:\n" + agents[0].output() + "\n--- node 1:\n" + agents[1].output(); }
};

// What an agent's verdict says of a silent peer: "... said nothing for 6.1 s ...", in seconds.
double silence_in(const std::string& text) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(R"(said nothing for ([0-9.]+) s)")) ? std::stod(m[1]) : -1;
}

// (a) A member's node freezes (its agent and its worker: SIGSTOP). Node 0's agent notices its
// silence within the peer timeout and ends the job for everyone with 76, naming the node. When
// the frozen node thaws, its agent stops its worker and leaves: no generation starts again.
TEST(SilentNode, AFrozenMemberIsLostWithinThePeerTimeoutAndStandsDownWhenItThaws) {
  SleepingJob job("silent-member");
  ASSERT_TRUE(eventually([&] { return job.started(); }, 60s)) << job.outputs();
  const pid_t worker0 = job.worker(0), worker1 = job.worker(1);
  const auto frozen = process_tree(job.agents[1]);
  ASSERT_GE(frozen.size(), 2u) << job.outputs();
  const auto t0 = std::chrono::steady_clock::now();
  signal_all(frozen, SIGSTOP);
  auto s0 = job.agents[0].wait(60s);
  const double noticed = seconds_since(t0);
  ASSERT_TRUE(s0.has_value()) << job.outputs();
  EXPECT_EQ(s0->shell_code(), lockstep::contract::kExitRendezvous) << job.outputs();
  const std::string out0 = job.agents[0].output();
  std::printf("node 0's agent gave up the frozen node 1 and exited %.1f s after the freeze (its verdict: silent for "
              "%.1f s; --peer-timeout 6 s, the default)\n", noticed, silence_in(out0));
  EXPECT_TRUE(std::regex_search(out0, std::regex(R"(node 1's agent \(127\.0\.0\.1:\d+\) said nothing for [0-9.]+ s \(more )"
                                                 R"(than --peer-timeout, 6 s\); treating it as lost)")))
      << out0;
  EXPECT_GE(silence_in(out0), 6.0) << out0;
  EXPECT_GT(noticed, 4.5) << "noticed before the peer timeout";
  EXPECT_LT(noticed, 6.0 + 8.0) << "noticed long after the peer timeout";
  EXPECT_NE(lockstep::test::read_file(job.dir + "/termination-0").find("node 1's agent"), std::string::npos);
  // See Note [Silent peer]: the operator's line, first.
  EXPECT_EQ(first_line(lockstep::test::read_file(job.dir + "/termination-0")), "lockstep-silent-peer node=1");
  EXPECT_TRUE(eventually([&] { return !lockstep::test::is_running(worker0); }, 10s)) << "node 0's worker outlived its agent";
  EXPECT_EQ(lockstep::test::process_state(worker1), 'T') << "the frozen worker was touched while frozen";
  std::this_thread::sleep_for(1s);  // frozen well past the peer timeout

  const auto t1 = std::chrono::steady_clock::now();
  signal_all(frozen, SIGCONT);
  auto s1 = job.agents[1].wait(60s);
  ASSERT_TRUE(s1.has_value()) << job.outputs();
  std::printf("thawed, node 1's agent stood down in %.2f s\n", seconds_since(t1));
  EXPECT_EQ(s1->shell_code(), lockstep::contract::kExitRendezvous) << job.outputs();
  const std::string out1 = job.agents[1].output();
  EXPECT_TRUE(std::regex_search(out1, std::regex(R"(this agent was silent itself for [0-9.]+ s \(more than )"
                                                 R"(--peer-timeout, 6 s\): its process or node was frozen)")))
      << out1;
  EXPECT_TRUE(eventually([&] { return !lockstep::test::is_running(worker1); }, 10s)) << "the thawed worker was left";
  EXPECT_EQ(job.starts(0).size(), 1u) << "a new generation of workers started on node 0";
  EXPECT_EQ(job.starts(1).size(), 1u) << "a new generation of workers started on the thawed node";
  EXPECT_EQ(count_of(out1, "started 1 worker(s)"), 1u) << out1;
}

// (b) Node 0's node freezes: its agent serves the barrier. Node 1's agent notices node 0's
// silence, stops its worker and exits 76. Thawed, node 0's barrier server closes every
// connection without a word and its agent stands down too.
TEST(SilentNode, AFrozenNode0IsLostWithinThePeerTimeoutAndItsServerClosesWhenItThaws) {
  SleepingJob job("silent-server");
  ASSERT_TRUE(eventually([&] { return job.started(); }, 60s)) << job.outputs();
  const pid_t worker0 = job.worker(0), worker1 = job.worker(1);
  const auto frozen = process_tree(job.agents[0]);
  ASSERT_GE(frozen.size(), 2u) << job.outputs();
  const auto t0 = std::chrono::steady_clock::now();
  signal_all(frozen, SIGSTOP);
  auto s1 = job.agents[1].wait(60s);
  const double noticed = seconds_since(t0);
  ASSERT_TRUE(s1.has_value()) << job.outputs();
  EXPECT_EQ(s1->shell_code(), lockstep::contract::kExitRendezvous) << job.outputs();
  const std::string out1 = job.agents[1].output();
  std::printf("node 1's agent gave up the frozen node 0 and exited %.1f s after the freeze (silent for %.1f s; "
              "--peer-timeout 6 s, the default)\n", noticed, silence_in(out1));
  EXPECT_TRUE(std::regex_search(out1, std::regex(R"(node 0's agent \(127\.0\.0\.1:\d+\) said nothing for [0-9.]+ s \(more )"
                                                 R"(than --peer-timeout, 6 s\); treating it as lost)")))
      << out1;
  EXPECT_GE(silence_in(out1), 6.0) << out1;
  EXPECT_GT(noticed, 4.5);
  EXPECT_LT(noticed, 6.0 + 8.0);
  EXPECT_NE(lockstep::test::read_file(job.dir + "/termination-1").find("node 0's agent"), std::string::npos);
  EXPECT_EQ(first_line(lockstep::test::read_file(job.dir + "/termination-1")), "lockstep-silent-peer node=0");
  EXPECT_TRUE(eventually([&] { return !lockstep::test::is_running(worker1); }, 10s)) << "node 1's worker outlived its agent";
  EXPECT_EQ(lockstep::test::process_state(worker0), 'T');
  std::this_thread::sleep_for(1s);  // frozen well past the peer timeout

  const auto t1 = std::chrono::steady_clock::now();
  signal_all(frozen, SIGCONT);
  auto s0 = job.agents[0].wait(60s);
  ASSERT_TRUE(s0.has_value()) << job.outputs();
  std::printf("thawed, node 0's agent stood down in %.2f s\n", seconds_since(t1));
  EXPECT_EQ(s0->shell_code(), lockstep::contract::kExitRendezvous) << job.outputs();
  const std::string out0 = job.agents[0].output();
  EXPECT_NE(out0.find("the restart barrier's server was silent itself for"), std::string::npos) << out0;
  EXPECT_NE(out0.find("it closes every connection and serves no more"), std::string::npos) << out0;
  EXPECT_TRUE(std::regex_search(out0, std::regex(R"(lockstep-agent: (this agent|the restart barrier's server) was silent )"
                                                 R"(itself for [0-9.]+ s \(more than --peer-timeout, 6 s\).*; exiting with )"
                                                 R"(code 76)")))
      << out0;
  EXPECT_EQ(out0.find("lost node 0's agent"), std::string::npos) << out0;
  EXPECT_TRUE(eventually([&] { return !lockstep::test::is_running(worker0); }, 10s)) << "the thawed worker was left";
  EXPECT_EQ(job.starts(0).size(), 1u) << "a new generation of workers started on the thawed node 0";
  EXPECT_EQ(job.starts(1).size(), 1u);
  EXPECT_EQ(count_of(out0, "started 1 worker(s)"), 1u) << out0;
}

// (c) No false loss: two nodes of two workers that keep every core busy for 10 s (four
// CPU-bound processes on the 2-core CI machine, beside whatever else it runs), with a peer
// timeout of 2 s, the shortest allowed, finish as usual.
TEST(SilentNode, BusyWorkersWithAShortPeerTimeoutDoNotTripIt) {
  std::string dir = temp_dir("silent-busy");
  int port = lockstep::free_loopback_port();
  const auto t0 = std::chrono::steady_clock::now();
  auto a0 = start_agent(dir, 2, 0, 2, port, {worker_bin(), "busy", "10"}, {"--peer-timeout", "2s"});
  auto a1 = start_agent(dir, 2, 1, 2, port, {worker_bin(), "busy", "10"}, {"--peer-timeout", "2s"});
  auto s0 = a0.wait(120s), s1 = a1.wait(120s);
  ASSERT_TRUE(s0 && s1) << a0.output() << a1.output();
  std::printf("4 busy workers on %ld cores, --peer-timeout 2s: both agents finished after %.1f s\n",
              ::sysconf(_SC_NPROCESSORS_ONLN), seconds_since(t0));
  EXPECT_EQ(s0->shell_code(), 0) << a0.output();
  EXPECT_EQ(s1->shell_code(), 0) << a1.output();
  for (const Agent* a : {&a0, &a1}) {
    EXPECT_EQ(a->output().find("said nothing"), std::string::npos) << a->output();
    EXPECT_EQ(a->output().find("silent itself"), std::string::npos) << a->output();
    EXPECT_EQ(count_of(a->output(), "was busy for 10 s"), 2u) << a->output();
  }
}

// The heartbeat goes on while an agent stops its workers: node 1's worker ignores SIGTERM, so
// its agent spends the whole grace period (8 s) stopping it, four times the peer timeout (2 s),
// and the verdict is still the failing rank's own code, not a lost node. Rank 0 fails only once
// rank 1 ignores SIGTERM (its ready file): loading the worker takes over a second on a busy
// machine, and a SIGTERM before that ends it at once.
TEST(SilentNode, AGracePeriodLongerThanThePeerTimeoutIsNoSilence) {
  std::string dir = temp_dir("silent-grace");
  int port = lockstep::free_loopback_port();
  const std::string ready = dir + "/rank-1-ignores-sigterm";
  std::vector<std::string> cmd = {
      "sh", "-c",
      "if [ \"$RANK\" = 0 ]; then i=0; while [ ! -e " + ready + " ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exit 3; fi; "
      "exec " + worker_bin() + " stubborn " + ready};
  std::vector<std::string> flags = {"--peer-timeout", "2s", "--grace-period", "8s", "--stall-timeout", "0"};
  const auto t0 = std::chrono::steady_clock::now();
  auto a0 = start_agent(dir, 2, 0, 1, port, cmd, flags);
  auto a1 = start_agent(dir, 2, 1, 1, port, cmd, flags);
  auto s0 = a0.wait(90s), s1 = a1.wait(90s);
  ASSERT_TRUE(s0 && s1) << a0.output() << a1.output();
  const double took = seconds_since(t0);
  std::printf("a grace period of 8 s with --peer-timeout 2s: both agents exited with the worker's code after %.1f s\n", took);
  EXPECT_EQ(s0->shell_code(), 3) << a0.output();
  EXPECT_EQ(s1->shell_code(), 3) << a1.output();
  ASSERT_TRUE(fs::exists(ready)) << "rank 1 never ignored SIGTERM:\n" << a1.output();
  EXPECT_GT(took, 8.0) << "node 1 did not sit out its grace period:\n" << a1.output();
  EXPECT_NE(a1.output().find("did not stop within the grace period; sending SIGKILL"), std::string::npos) << a1.output();
  for (const Agent* a : {&a0, &a1}) {
    EXPECT_EQ(a->output().find("said nothing"), std::string::npos) << a->output();
    EXPECT_EQ(a->output().find("silent itself"), std::string::npos) << a->output();
  }
}

TEST(Agent, BadConfigurationNamesTheVariable) {
  auto r = lockstep::run_capture({agent_bin(), "--", "true"}, {{"LOCKSTEP_NNODES", "2"}, {"LOCKSTEP_NODE_RANK", "2"}});
  EXPECT_EQ(r.status.shell_code(), lockstep::contract::kExitUsage);
  EXPECT_NE(r.output.find("LOCKSTEP_NODE_RANK"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LOCKSTEP_NNODES"), std::string::npos) << r.output;
  r = lockstep::run_capture({agent_bin(), "--", "true"}, {{"LOCKSTEP_NPROC_PER_NODE", "four"}});
  EXPECT_EQ(r.status.shell_code(), lockstep::contract::kExitUsage);
  EXPECT_NE(r.output.find("LOCKSTEP_NPROC_PER_NODE: expected an integer"), std::string::npos) << r.output;
  r = lockstep::run_capture({agent_bin(), "--peer-timeout", "500ms", "--", "true"}, {});
  EXPECT_EQ(r.status.shell_code(), lockstep::contract::kExitUsage);
  EXPECT_NE(r.output.find("--peer-timeout must be 0 (no heartbeat checks) or at least 2s"), std::string::npos) << r.output;
  r = lockstep::run_capture({agent_bin(), "--", "true"}, {{"LOCKSTEP_PEER_TIMEOUT", "soon"}});
  EXPECT_EQ(r.status.shell_code(), lockstep::contract::kExitUsage);
  EXPECT_NE(r.output.find("LOCKSTEP_PEER_TIMEOUT: expected a duration"), std::string::npos) << r.output;
  r = lockstep::run_capture({agent_bin(), "--bogus"}, {});
  EXPECT_EQ(r.status.shell_code(), lockstep::contract::kExitUsage);
  EXPECT_NE(r.output.find("unknown flag '--bogus'"), std::string::npos) << r.output;
}

TEST(Agent, AMasterAddressThatNeverResolvesIsARendezvousFailure) {
  auto r = lockstep::run_capture({agent_bin(), "--no-metrics", "--rendezvous-timeout", "1s", "--", "true"},
                                 {{"LOCKSTEP_MASTER_ADDR", "no-such-pod.lockstep.invalid"}}, 30s);
  EXPECT_EQ(r.status.shell_code(), lockstep::contract::kExitRendezvous) << r.output;
  EXPECT_NE(r.output.find("did not resolve"), std::string::npos) << r.output;
}

TEST(AgentGpu, NvmlSeriesMatchNvidiaSmi) {
  if (::system("command -v nvidia-smi >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "SKIPPED: no GPU here (nvidia-smi not found); runs on a GPU machine";
  std::string dir = temp_dir("gpu");
  auto a = start_agent(dir, 1, 0, 1, lockstep::free_loopback_port(), {worker_bin(), "steps", "1", "then-hang"},
                       {"--stall-timeout", "0"});
  std::string m;
  ASSERT_TRUE(eventually([&] {
    m = scrape(a.metrics_port);
    return m.find("lockstep_gpu_memory_used_bytes{") != std::string::npos;
  })) << a.output();
  auto smi = lockstep::run_capture({"nvidia-smi", "--query-gpu=index,memory.used,temperature.gpu", "--format=csv,noheader,nounits"});
  std::istringstream rows(smi.output);
  for (std::string row; std::getline(rows, row);) {
    int index, mem_mib, temp;
    char comma;
    std::istringstream r(row);
    if (!(r >> index >> comma >> mem_mib >> comma >> temp)) continue;
    std::smatch match;
    std::regex mem_re("lockstep_gpu_memory_used_bytes\\{gpu=\"" + std::to_string(index) + "\"[^}]*\\} ([0-9.e+]+)");
    ASSERT_TRUE(std::regex_search(m, match, mem_re)) << m;
    double ours_mib = std::stod(match[1]) / (1 << 20);
    EXPECT_NEAR(ours_mib, mem_mib, 512) << "GPU " << index << " memory: agent vs nvidia-smi";
    std::regex temp_re("lockstep_gpu_temperature_celsius\\{gpu=\"" + std::to_string(index) + "\"[^}]*\\} ([0-9.e+]+)");
    ASSERT_TRUE(std::regex_search(m, match, temp_re)) << m;
    EXPECT_NEAR(std::stod(match[1]), temp, 5) << "GPU " << index << " temperature";
  }
  a.proc.signal(SIGTERM);
  a.wait(20s);
}

// ---- Stragglers (issue #42; docs/metrics.md, "Stragglers") ----
// Real agents, real time: the test worker's `paced` steps sleep, and one rank sleeps longer.
// A short window and hold (the flags' smallest sensible values) keep each run under a minute;
// node 0 evaluates every 5 s (kFiguresInterval) as in production.

const std::vector<std::string> kStragglerFlags = {"--straggler-window", "5s", "--straggler-hold", "2s"};

// `eventually`, at most twice a second (each try scrapes /metrics with curl).
bool soon(const std::function<bool()>& pred, std::chrono::seconds timeout) {
  return eventually([&] {
    if (pred()) return true;
    std::this_thread::sleep_for(450ms);
    return false;
  }, timeout);
}

// The value of the series `name{labels}` (labels as Prometheus orders them), or -1 if absent.
double value_of(const std::string& metrics, const std::string& name, const std::string& labels) {
  return series(metrics, name + "{" + labels + "}");
}

std::string rank_labels(int node, int rank, const std::string& extra = "") {
  return "namespace=\"ns\",node_rank=\"" + std::to_string(node) + "\",rank=\"" + std::to_string(rank) + "\"" + extra +
         ",trainingjob=\"tj\"";
}

// The shared no-false-verdict check (agent_support.hpp) fails on either program's verdict line,
// and on nothing else that speaks of stragglers.
TEST(Straggler, TheNoFalseVerdictCheckCatchesAVerdictLine) {
  EXPECT_NONFATAL_FAILURE(lockstep::test::expect_no_straggler_verdict(
                              "a\n2026-11-29T19:58:09.355Z WARN  lockstep-agent: straggler: rank 3 on node 1: work 2.00x "
                              "the gang's typical rank over the last 5 s\nb\n",
                              "node 0's agent"),
                          "rank 3 on node 1");
  EXPECT_NONFATAL_FAILURE(lockstep::test::expect_no_straggler_verdict("lockstep run: straggler: rank 1 (node 0): work 1.50x", "run"),
                          "named a straggler");
  lockstep::test::expect_no_straggler_verdict("--straggler-window 5s\nstraggler cleared: rank 3 on node 1\n", "quiet");
}

// Rank 3 (node 1) works twice as long as the others for its first 20 s, then as fast: node 0's
// agent names it (series, log, event log), node 1's own score for it says so, and the verdict
// clears once it has recovered.
TEST(Straggler, ASlowRankOnNode1IsNamedByNode0AndClearedWhenItRecovers) {
  std::string dir = temp_dir("straggler-2");
  int port = lockstep::free_loopback_port();
  auto flags = kStragglerFlags;
  flags.insert(flags.end(), {"--step-log", dir + "/steps"});
  const std::vector<std::string> cmd = {worker_bin(), "paced", "55", "20", "3", "2", "20"};
  auto a0 = start_agent(dir, 2, 0, 2, port, cmd, flags);
  auto a1 = start_agent(dir, 2, 1, 2, port, cmd, flags);
  a0.verdicts.expect_straggler();
  const std::string listed = rank_labels(1, 3, ",throttle=\"\"");
  double slowdown = -1;
  ASSERT_TRUE(soon([&] { return (slowdown = value_of(scrape(a0.metrics_port), "lockstep_straggler_slowdown", listed)) > 0; }, 40s))
      << a0.output();
  EXPECT_GT(slowdown, 1.6) << "a rank sleeping 2x as long";
  EXPECT_LT(slowdown, 2.6);
  const std::string m0 = scrape(a0.metrics_port);
  EXPECT_EQ(value_of(m0, "lockstep_stragglers", "namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\""), 1) << m0;
  EXPECT_EQ(value_of(m0, "lockstep_straggler_window_seconds", "namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\""), 5) << m0;
  for (int r : {0, 1, 2}) EXPECT_EQ(m0.find("rank=\"" + std::to_string(r) + "\",throttle"), std::string::npos) << m0;
  EXPECT_TRUE(std::regex_search(a0.output(), std::regex(R"(lockstep-agent: straggler: rank 3 on node 1: work [12]\.\d\dx the gang's typical rank over the last 5 s)")))
      << a0.output();
  // Node 1's own score of rank 3, against node 0's reference, says the same.
  double score = -1;
  EXPECT_TRUE(soon([&] { return (score = value_of(scrape(a1.metrics_port), "lockstep_straggler_score", rank_labels(1, 3))) > 1.6; }, 15s))
      << "score " << score << "\n" << scrape(a1.metrics_port);
  EXPECT_LT(value_of(scrape(a1.metrics_port), "lockstep_straggler_score", rank_labels(1, 2)), 1.3);
  // Recovered at 20 s: cleared within the window, an evaluation and the hold.
  EXPECT_TRUE(soon([&] { return a0.output().find("straggler cleared: rank 3 on node 1") != std::string::npos; }, 40s))
      << a0.output();
  EXPECT_EQ(value_of(scrape(a0.metrics_port), "lockstep_straggler_slowdown", listed), -1);
  auto s0 = a0.wait(60s), s1 = a1.wait(60s);
  ASSERT_TRUE(s0 && s1) << a0.output() << a1.output();
  EXPECT_EQ(s0->shell_code(), 0) << a0.output();
  EXPECT_EQ(s1->shell_code(), 0) << a1.output();
  // Node 0's event log: the verdict and its clearing, as `lockstep run` reads them.
  std::vector<nlohmann::json> events;
  std::istringstream in(lockstep::test::read_file(dir + "/steps/node-0.events.jsonl"));
  for (std::string line; std::getline(in, line);) events.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(events.size(), 2u) << lockstep::test::read_file(dir + "/steps/node-0.events.jsonl");
  EXPECT_EQ(events[0]["event"], "straggler");
  EXPECT_EQ(events[0]["rank"], 3);
  EXPECT_EQ(events[0]["node_rank"], 1);
  EXPECT_EQ(events[0]["attempt"], 2);
  EXPECT_EQ(events[0]["window_s"], 5);
  EXPECT_EQ(events[0]["throttle"], "");
  EXPECT_GT(events[0]["slowdown"].get<double>(), 1.6);
  EXPECT_EQ(events[1]["event"], "straggler_cleared");
  EXPECT_EQ(events[1]["rank"], 3);
  EXPECT_GT(events[1]["time"].get<double>(), events[0]["time"].get<double>());
}

// The same gang, nobody slow: no verdict anywhere (the shared check), and yet the machinery ran:
// node 0 publishes its window and no suspect, node 1 scores its ranks near 1.
TEST(Straggler, AHealthyGangHasNoVerdict) {
  std::string dir = temp_dir("straggler-healthy");
  int port = lockstep::free_loopback_port();
  const std::vector<std::string> cmd = {worker_bin(), "paced", "25", "20"};
  auto a0 = start_agent(dir, 2, 0, 2, port, cmd, kStragglerFlags);
  auto a1 = start_agent(dir, 2, 1, 2, port, cmd, kStragglerFlags);
  double score = -1;
  ASSERT_TRUE(soon([&] { return (score = value_of(scrape(a1.metrics_port), "lockstep_straggler_score", rank_labels(1, 3))) > 0; }, 20s))
      << a1.output();
  EXPECT_GT(score, 0.75);
  EXPECT_LT(score, 1.3);
  const std::string m0 = scrape(a0.metrics_port);
  EXPECT_EQ(value_of(m0, "lockstep_straggler_suspects", "namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\""), 0) << m0;
  EXPECT_EQ(value_of(m0, "lockstep_stragglers", "namespace=\"ns\",node_rank=\"0\",trainingjob=\"tj\""), 0) << m0;
  EXPECT_EQ(m0.find("lockstep_straggler_slowdown{"), std::string::npos) << m0;
  auto s0 = a0.wait(60s), s1 = a1.wait(60s);
  ASSERT_TRUE(s0 && s1) << a0.output() << a1.output();
  EXPECT_EQ(s0->shell_code(), 0) << a0.output();
  EXPECT_EQ(s1->shell_code(), 0) << a1.output();
}

// A single node has no barrier peers, but its local ranks are still a gang: node 0 judges them.
TEST(Straggler, OnASingleNodeASlowLocalRankIsNamed) {
  std::string dir = temp_dir("straggler-1");
  auto a = start_agent(dir, 1, 0, 2, lockstep::free_loopback_port(), {worker_bin(), "paced", "30", "20", "1", "2"},
                       kStragglerFlags);
  a.verdicts.expect_straggler();
  double slowdown = -1;
  ASSERT_TRUE(soon([&] {
    slowdown = value_of(scrape(a.metrics_port), "lockstep_straggler_slowdown", rank_labels(0, 1, ",throttle=\"\""));
    return slowdown > 0;
  }, 30s)) << a.output();
  EXPECT_GT(slowdown, 1.6);
  EXPECT_NE(a.output().find("lockstep-agent: straggler: rank 1 on node 0: work "), std::string::npos) << a.output();
  EXPECT_GT(value_of(scrape(a.metrics_port), "lockstep_straggler_score", rank_labels(0, 1)), 1.6);
  a.proc.signal(SIGTERM);
  a.wait(20s);
}
