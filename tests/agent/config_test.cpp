// agent/config: the agent's configuration from its environment and flags.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "config.hpp"

using namespace lockstep::agent;

TEST(Config, TheNcclProfilerIsFoundBesideTheAgentOrNamedOrOff) {
  namespace fs = std::filesystem;
  const std::string dir = fs::path(::testing::TempDir() + "/agent-nccl-find-" + std::to_string(::getpid())).lexically_normal().string();
  fs::remove_all(dir);
  fs::create_directories(dir + "/bin");
  fs::create_directories(dir + "/lib/lockstep");
  const std::string exe = dir + "/bin/lockstep-agent";
  std::string note;
  EXPECT_EQ(find_nccl_profiler("", exe, &note), "");
  EXPECT_NE(note.find("not found"), std::string::npos) << note;
  std::ofstream(dir + "/lib/lockstep/libnccl-profiler-lockstep.so") << "x";
  EXPECT_EQ(find_nccl_profiler("1", exe), dir + "/lib/lockstep/libnccl-profiler-lockstep.so") << "an install";
  std::ofstream(dir + "/bin/libnccl-profiler-lockstep.so") << "x";
  EXPECT_EQ(find_nccl_profiler("", exe), dir + "/bin/libnccl-profiler-lockstep.so") << "beside the executable first";
  EXPECT_EQ(find_nccl_profiler("0", exe, &note), "");
  EXPECT_NE(note.find("off"), std::string::npos) << note;
  EXPECT_EQ(find_nccl_profiler(dir + "/lib/lockstep/libnccl-profiler-lockstep.so", exe),
            dir + "/lib/lockstep/libnccl-profiler-lockstep.so");
  for (const std::string& bad : std::vector<std::string>{"yes", "lib/x.so", dir + "/missing.so"}) {
    try {
      find_nccl_profiler(bad, exe);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("LOCKSTEP_NCCL_PROFILER"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(load_config({{"LOCKSTEP_NCCL_PROFILER", "0"}}, {}, exe).nccl_profiler, "");
  EXPECT_EQ(load_config({}, {"--no-nccl-profiler"}, exe).nccl_profiler, "");
  EXPECT_EQ(load_config({}, {}, exe).nccl_profiler, dir + "/bin/libnccl-profiler-lockstep.so");
}

TEST(Config, FlagsOverrideEnvironmentAndPetIsTheFallback) {
  auto c = load_config({{"PET_NNODES", "3"}, {"PET_NODE_RANK", "1"}, {"LOCKSTEP_NPROC_PER_NODE", "4"},
                        {"PET_NPROC_PER_NODE", "9"}},
                       {"--master-port", "1234", "--", "python", "train.py"});
  EXPECT_EQ(c.nnodes, 3);
  EXPECT_EQ(c.node_rank, 1);
  EXPECT_EQ(c.nproc_per_node, 4);  // LOCKSTEP_* wins over PET_*
  EXPECT_EQ(c.master_port, 1234);
  EXPECT_EQ(c.command, (std::vector<std::string>{"python", "train.py"}));
}

TEST(Config, InPlaceRestartSettings) {
  auto c = load_config({{"LOCKSTEP_NNODES", "2"}, {"LOCKSTEP_IN_PLACE_RESTARTS", "3"}, {"LOCKSTEP_RESTART_POLICY", "ExitCode"},
                        {"LOCKSTEP_MASTER_PORT", "29600"}},
                       {});
  EXPECT_EQ(c.max_restarts, 3);  // multi-node jobs restart in place too (Note [Restart barrier])
  EXPECT_EQ(c.restart_policy, "ExitCode");
  EXPECT_EQ(c.barrier_port(), 29601);
  EXPECT_EQ(load_config({{"LOCKSTEP_AGENT_PORT", "4000"}}, {}).barrier_port(), 4000);
  EXPECT_EQ(load_config({{"LOCKSTEP_IN_PLACE_RESTARTS", "3"}, {"LOCKSTEP_RESTART_POLICY", "Never"}}, {}).max_restarts, 0)
      << "Never restarts nothing, in place either";
  EXPECT_EQ(load_config({{"LOCKSTEP_IN_PLACE_RESTARTS", "3"}}, {"--max-restarts", "1"}).max_restarts, 1);
  // As the operator passes them (Note [Agent flags] in operator/reconcile/manifests.cpp).
  auto f = load_config({{"LOCKSTEP_RESTART_POLICY", "Never"}}, {"--max-restarts=5", "--restart-policy=ExitCode"});
  EXPECT_EQ(f.max_restarts, 5);
  EXPECT_EQ(f.restart_policy, "ExitCode");
  try {
    load_config({{"LOCKSTEP_RESTART_POLICY", "Always"}}, {});
    ADD_FAILURE() << "an unknown policy must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_RESTART_POLICY"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("OnFailure, ExitCode or Never"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_config({{"LOCKSTEP_IN_PLACE_RESTARTS", "-1"}}, {}), ConfigError);
}

TEST(Config, StallSettingsFromFlagsAndTheEnvironment) {
  auto c = load_config({}, {});
  EXPECT_EQ(c.stall_timeout, std::chrono::minutes(5));
  EXPECT_EQ(c.first_step_timeout, std::chrono::minutes(30)) << "lockstep-trainer reports steps: watched by default";
  EXPECT_EQ(load_config({}, {"--", "/opt/bin/lockstep-trainer", "--steps", "9"}).first_step_timeout, std::chrono::minutes(30));
  EXPECT_EQ(load_config({}, {"--", "python", "train.py"}).first_step_timeout.count(), 0)
      << "another program may never report a step: not watched unless asked";
  EXPECT_EQ(load_config({}, {"--first-step-timeout", "5m", "--", "python", "train.py"}).first_step_timeout, std::chrono::minutes(5));
  EXPECT_EQ(load_config({{"LOCKSTEP_FIRST_STEP_TIMEOUT", "7m"}}, {"--", "python", "train.py"}).first_step_timeout,
            std::chrono::minutes(7));
  EXPECT_EQ(c.metrics_linger, std::chrono::seconds(30));
  EXPECT_TRUE(c.first_step_detection());
  c = load_config({{"LOCKSTEP_STALL_TIMEOUT", "2m"}, {"LOCKSTEP_FIRST_STEP_TIMEOUT", "0"}, {"LOCKSTEP_METRICS_LINGER", "1s"}}, {});
  EXPECT_EQ(c.stall_timeout, std::chrono::minutes(2));
  EXPECT_EQ(c.metrics_linger, std::chrono::seconds(1));
  EXPECT_EQ(load_config({{"LOCKSTEP_METRICS_LINGER", "1s"}}, {"--metrics-linger", "5s"}).metrics_linger, std::chrono::seconds(5))
      << "a flag wins over the environment";
  EXPECT_FALSE(c.first_step_detection());
  c = load_config({{"LOCKSTEP_FIRST_STEP_TIMEOUT", "1h"}}, {"--first-step-timeout", "10s", "--stall-timeout", "0"});
  EXPECT_EQ(c.first_step_timeout, std::chrono::seconds(10));
  EXPECT_FALSE(c.first_step_detection()) << "--stall-timeout 0 turns stall detection off entirely";
  // --no-metrics keeps the step sockets while stall detection needs them, never an endpoint.
  c = load_config({{"LOCKSTEP_METRICS_PORT", "9400"}}, {"--no-metrics"});
  EXPECT_TRUE(c.step_sockets());
  EXPECT_EQ(c.metrics_port, 0);
  EXPECT_FALSE(load_config({}, {"--no-metrics", "--stall-timeout", "0"}).step_sockets());
  try {
    load_config({}, {"--metrics-linger", "11m"});
    ADD_FAILURE() << "an 11 minute linger was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-linger must be at most 10m"), std::string::npos) << e.what();
  }
  try {
    load_config({{"LOCKSTEP_FIRST_STEP_TIMEOUT", "soon"}}, {});
    ADD_FAILURE() << "a bad duration was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_FIRST_STEP_TIMEOUT"), std::string::npos) << e.what();
  }
}

TEST(Config, PeerTimeoutFromFlagsAndTheEnvironment) {
  using std::chrono::seconds;
  auto c = load_config({{"LOCKSTEP_NNODES", "2"}}, {});
  EXPECT_EQ(c.peer_timeout, seconds(6)) << "Note [Heartbeats]: the default";
  EXPECT_EQ(c.heartbeat_interval(), seconds(1));
  EXPECT_TRUE(c.peer_checks());
  EXPECT_FALSE(load_config({}, {}).peer_checks()) << "a single node has no peer";
  c = load_config({{"LOCKSTEP_NNODES", "2"}, {"LOCKSTEP_PEER_TIMEOUT", "2s"}}, {});
  EXPECT_EQ(c.peer_timeout, seconds(2));
  EXPECT_EQ(c.heartbeat_interval(), std::chrono::milliseconds(500)) << "four heartbeats to a timeout";
  EXPECT_EQ(c.peer_timeout_from, "LOCKSTEP_PEER_TIMEOUT");
  EXPECT_EQ(load_config({{"LOCKSTEP_PEER_TIMEOUT", "2s"}}, {"--peer-timeout=30s"}).peer_timeout, seconds(30))
      << "a flag wins over the environment";
  c = load_config({{"LOCKSTEP_NNODES", "2"}}, {"--peer-timeout", "0"});
  EXPECT_FALSE(c.peer_checks()) << "0 switches the checks off";
  EXPECT_EQ(c.heartbeat_interval(), seconds(1)) << "heartbeats still go";
  // The older name, which bounded only a finished agent's wait, is the same setting; the newer
  // name wins where both are given.
  EXPECT_EQ(load_config({{"LOCKSTEP_BARRIER_TIMEOUT", "20s"}}, {}).peer_timeout, seconds(20));
  EXPECT_EQ(load_config({{"LOCKSTEP_BARRIER_TIMEOUT", "20s"}, {"LOCKSTEP_PEER_TIMEOUT", "9s"}}, {}).peer_timeout, seconds(9));
  EXPECT_EQ(load_config({}, {"--peer-timeout", "9s", "--barrier-timeout", "20s"}).peer_timeout, seconds(9));
  EXPECT_EQ(load_config({}, {"--barrier-timeout", "20s"}).peer_timeout_from, "--barrier-timeout");
  for (const auto& [env, args, named] :
       std::vector<std::tuple<std::map<std::string, std::string>, std::vector<std::string>, std::string>>{
           {{}, {"--peer-timeout", "1s"}, "--peer-timeout must be 0 (no heartbeat checks) or at least 2s"},
           {{{"LOCKSTEP_PEER_TIMEOUT", "1999ms"}}, {}, "LOCKSTEP_PEER_TIMEOUT must be 0 (no heartbeat checks) or at least 2s"},
           {{}, {"--barrier-timeout", "1s"}, "--barrier-timeout must be 0"},
           {{}, {"--peer-timeout", "off"}, "--peer-timeout: expected a duration"},
           {{{"LOCKSTEP_PEER_TIMEOUT", "-5s"}}, {}, "LOCKSTEP_PEER_TIMEOUT: expected a duration"}}) {
    try {
      load_config(env, args);
      ADD_FAILURE() << "accepted: " << named;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  }
}

// The settings of Note [Straggler score]: defaults, flags over the environment, and every bad value
// refused with the flag or variable named and what is valid.
TEST(Config, StragglerSettingsFromFlagsAndTheEnvironment) {
  Config d = load_config({}, {});
  EXPECT_EQ(d.straggler_window, std::chrono::seconds(30));
  EXPECT_EQ(d.straggler_hold, std::chrono::seconds(15));
  EXPECT_DOUBLE_EQ(d.straggler_threshold, 1.33);
  EXPECT_DOUBLE_EQ(d.straggler_settings().window_s, 30);
  EXPECT_DOUBLE_EQ(d.straggler_settings().hold_s, 15);
  Config e = load_config({{"LOCKSTEP_STRAGGLER_WINDOW", "1m"}, {"LOCKSTEP_STRAGGLER_HOLD", "0"},
                          {"LOCKSTEP_STRAGGLER_THRESHOLD", "1.5"}},
                         {});
  EXPECT_EQ(e.straggler_window, std::chrono::minutes(1));
  EXPECT_EQ(e.straggler_hold, std::chrono::seconds(0));
  EXPECT_DOUBLE_EQ(e.straggler_settings().threshold, 1.5);
  Config f = load_config({{"LOCKSTEP_STRAGGLER_WINDOW", "1m"}},
                         {"--straggler-window", "5s", "--straggler-hold", "10m", "--straggler-threshold", "10"});
  EXPECT_EQ(f.straggler_window, std::chrono::seconds(5)) << "the flag wins";
  EXPECT_EQ(f.straggler_hold, std::chrono::minutes(10));
  EXPECT_DOUBLE_EQ(f.straggler_threshold, 10);
  const std::vector<std::tuple<std::map<std::string, std::string>, std::vector<std::string>, std::string, std::string>> bad = {
      {{}, {"--straggler-window", "4s"}, "--straggler-window", "from 5s to 10m"},
      {{}, {"--straggler-window", "11m"}, "--straggler-window", "from 5s to 10m"},
      {{{"LOCKSTEP_STRAGGLER_WINDOW", "0"}}, {}, "LOCKSTEP_STRAGGLER_WINDOW", "from 5s to 10m"},
      {{{"LOCKSTEP_STRAGGLER_WINDOW", "soon"}}, {}, "LOCKSTEP_STRAGGLER_WINDOW", "duration"},
      {{}, {"--straggler-hold", "-1s"}, "--straggler-hold", "duration"},
      {{}, {"--straggler-hold", "11m"}, "--straggler-hold", "from 0 to 10m"},
      {{{"LOCKSTEP_STRAGGLER_HOLD", "1h"}}, {}, "LOCKSTEP_STRAGGLER_HOLD", "from 0 to 10m"},
      {{}, {"--straggler-threshold", "1"}, "--straggler-threshold", "above 1 and at most 10"},
      {{}, {"--straggler-threshold", "0.75"}, "--straggler-threshold", "above 1 and at most 10"},
      {{}, {"--straggler-threshold", "10.5"}, "--straggler-threshold", "above 1 and at most 10"},
      {{}, {"--straggler-threshold", "nan"}, "--straggler-threshold", "above 1 and at most 10"},
      {{}, {"--straggler-threshold", "inf"}, "--straggler-threshold", "above 1 and at most 10"},
      {{}, {"--straggler-threshold", "1.5x"}, "--straggler-threshold", "above 1 and at most 10"},
      {{{"LOCKSTEP_STRAGGLER_THRESHOLD", "-2"}}, {}, "LOCKSTEP_STRAGGLER_THRESHOLD", "above 1 and at most 10"},
  };
  for (const auto& [env, args, names, valid] : bad) {
    try {
      load_config(env, args);
      ADD_FAILURE() << names << ": accepted a bad value";
    } catch (const ConfigError& err) {
      const std::string what = err.what();
      EXPECT_NE(what.find(names), std::string::npos) << what;
      EXPECT_NE(what.find(valid), std::string::npos) << what;
    }
  }
}
