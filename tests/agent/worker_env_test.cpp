// agent/worker_env: a worker's environment, as torchrun sets it.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "config.hpp"
#include "worker_env.hpp"

using namespace lockstep::agent;

TEST(WorkerEnv, EveryVariableTorchrunSets) {
  // torchrun 2.11, LocalElasticAgent._start_workers and DefaultLogsSpecs.reify.
  Config c;
  c.nnodes = 3;
  c.node_rank = 1;
  c.nproc_per_node = 2;
  c.max_restarts = 0;
  c.run_id = "uid";
  auto env = worker_env(c, 1, 0, "/tmp/s", {}, "/tmp/d/rank-1-error.json");
  std::map<std::string, std::string> want = {
      {"LOCAL_RANK", "1"}, {"RANK", "3"}, {"GROUP_RANK", "1"}, {"ROLE_RANK", "3"}, {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", "2"}, {"WORLD_SIZE", "6"}, {"GROUP_WORLD_SIZE", "3"}, {"ROLE_WORLD_SIZE", "6"},
      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"}, {"TORCHELASTIC_RUN_ID", "uid"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}, {"TORCHELASTIC_ERROR_FILE", "/tmp/d/rank-1-error.json"},
      {"OMP_NUM_THREADS", "1"}};
  for (const auto& [k, v] : want) EXPECT_EQ(env[k], v) << k;
  EXPECT_EQ(env.count("TORCHELASTIC_TIMER_FILE"), 0u) << "no file-timer server runs here (docs/agent.md)";
  auto user = worker_env(c, 0, 0, "", {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  EXPECT_EQ(user["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3") << "the user's value, as torchrun keeps it";
  EXPECT_EQ(user["TORCHELASTIC_ERROR_FILE"], "") << "no error file: empty, as torchrun without a log directory";
}

// See Note [NCCL profiler plugin]: every worker with a step socket gets the plugin, unless its
// environment names a plugin of its own ("none" included).
TEST(WorkerEnv, TheNcclProfilerPluginUnlessThePodNamesOne) {
  Config c;
  c.nccl_profiler = "/opt/lockstep/lib/lockstep/libnccl-profiler-lockstep.so";
  EXPECT_EQ(worker_env(c, 0, 0, "/tmp/s", {})["NCCL_PROFILER_PLUGIN"], c.nccl_profiler);
  EXPECT_EQ(worker_env(c, 0, 0, "", {}).count("NCCL_PROFILER_PLUGIN"), 0u) << "no socket: nowhere to report";
  EXPECT_EQ(worker_env(c, 0, 0, "/tmp/s", {{"NCCL_PROFILER_PLUGIN", "none"}}).count("NCCL_PROFILER_PLUGIN"), 0u)
      << "the pod's own choice is inherited, not overridden";
  c.nccl_profiler.clear();
  EXPECT_EQ(worker_env(c, 0, 0, "/tmp/s", {}).count("NCCL_PROFILER_PLUGIN"), 0u) << "off or not found";
}

TEST(WorkerEnv, RanksAcrossNodes) {
  Config c;
  c.nnodes = 4;
  c.node_rank = 2;
  c.nproc_per_node = 8;
  c.restart_attempt = 1;
  auto env = worker_env(c, 5, 2, "/tmp/s", {});
  EXPECT_EQ(env["RANK"], "21");
  EXPECT_EQ(env["WORLD_SIZE"], "32");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "3");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(worker_env(c, 0, 0, "", {{"OMP_NUM_THREADS", "4"}}).count("OMP_NUM_THREADS"), 0u)
      << "a user's OMP_NUM_THREADS is inherited, not overridden";
}

// See Note [Worker threads]: the container's share of CPU, not the node's cores.
TEST(WorkerEnv, ThreadsFollowTheContainersCpuRequestThenItsLimit) {
  auto threads = [](int nproc, const std::map<std::string, std::string>& vars,
                    const std::map<std::string, std::string>& inherited = {}) {
    std::map<std::string, std::string> env = vars;
    env["LOCKSTEP_NPROC_PER_NODE"] = std::to_string(nproc);
    Config c = load_config(env, {});
    auto w = worker_env(c, 0, 0, "", inherited);
    return w.count("OMP_NUM_THREADS") ? w["OMP_NUM_THREADS"] : std::string("unset");
  };
  EXPECT_EQ(threads(1, {{"LOCKSTEP_CPU_REQUEST", "500"}, {"LOCKSTEP_CPU_LIMIT", "2000"}}), "1")
      << "500m requested on a 2-core node: one thread, not two";
  EXPECT_EQ(threads(1, {{"LOCKSTEP_CPU_REQUEST", "4000"}, {"LOCKSTEP_CPU_LIMIT", "8000"}}), "4") << "the request, not the limit";
  EXPECT_EQ(threads(2, {{"LOCKSTEP_CPU_REQUEST", "7900"}, {"LOCKSTEP_CPU_LIMIT", "64000"}}), "3") << "shared by the workers, rounded down";
  EXPECT_EQ(threads(8, {{"LOCKSTEP_CPU_REQUEST", "2000"}}), "1") << "at least one";
  EXPECT_EQ(threads(1, {{"LOCKSTEP_CPU_REQUEST", "0"}, {"LOCKSTEP_CPU_LIMIT", "16000"}}), "16")
      << "no request: the limit (the node's allocatable CPU when the container has none)";
  EXPECT_EQ(threads(1, {}), "unset") << "outside Kubernetes, one worker: PyTorch's default";
  EXPECT_EQ(threads(2, {}), "1") << "outside Kubernetes, several workers: torchrun's rule";
  EXPECT_EQ(threads(1, {{"LOCKSTEP_CPU_REQUEST", "500"}}, {{"OMP_NUM_THREADS", "6"}}), "unset")
      << "the pod's own OMP_NUM_THREADS is inherited, not overridden";
  std::string why;
  Config c = load_config({{"LOCKSTEP_CPU_REQUEST", "2500"}}, {});
  EXPECT_EQ(c.worker_threads(&why), 2);
  EXPECT_EQ(why, "the container's CPU request 2500m over 1 worker(s)");
  for (const char* bad : {"abc", "-5", "1.5"}) {
    try {
      load_config({{"LOCKSTEP_CPU_REQUEST", bad}}, {});
      ADD_FAILURE() << "LOCKSTEP_CPU_REQUEST=" << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("LOCKSTEP_CPU_REQUEST"), std::string::npos) << e.what();
    }
  }
}
