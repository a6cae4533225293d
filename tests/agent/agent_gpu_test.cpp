// The agent on a real GPU (the GPU tier, agent_gpu_test): a torchrun-style PyTorch program on
// NCCL, and the GPU series of /metrics during training, scraped by a real Prometheus that runs
// every GPU query of the training dashboard. Elsewhere each case says SKIPPED and why.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "agent_support.hpp"
#include "dashboard_queries.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using lockstep::Process;
using lockstep::test::env_or;
using lockstep::test::read_file;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using lockstep::test::agent_bin;

bool have(const std::string& cmd) { return ::system(("command -v " + cmd + " >/dev/null 2>&1").c_str()) == 0; }

#define REQUIRE_NVIDIA_GPU()                                                                               \
  if (!have("nvidia-smi") || ::system("nvidia-smi -L >/dev/null 2>&1") != 0)                                \
  GTEST_SKIP() << "SKIPPED: no GPU here (nvidia-smi finds none); runs on a GPU machine"

std::string temp_dir(const std::string& name) { return lockstep::test::fresh_temp_dir("agent-gpu-" + name); }

// One node of a one-node job: the agent with the operator's environment, its output in a file.
Process start_agent(const std::string& log, int metrics_port, std::vector<std::string> command) {
  lockstep::SpawnOptions so;
  so.argv = {agent_bin(), "--metrics-address", "127.0.0.1", "--"};
  so.argv.insert(so.argv.end(), command.begin(), command.end());
  so.env = {{"LOCKSTEP_JOB_NAME", "gpu"}, {"LOCKSTEP_JOB_NAMESPACE", "ns"}, {"LOCKSTEP_JOB_UID", "uid-gpu"},
            {"LOCKSTEP_NNODES", "1"}, {"LOCKSTEP_NODE_RANK", "0"}, {"LOCKSTEP_NPROC_PER_NODE", "1"},
            {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"}, {"LOCKSTEP_MASTER_PORT", std::to_string(lockstep::free_loopback_port())},
            {"LOCKSTEP_RESTART_ATTEMPT", "0"}, {"LOCKSTEP_METRICS_PORT", std::to_string(metrics_port)}};
  so.output_path = log;
  so.new_process_group = true;
  return Process::spawn(so);
}

// See Note [NCCL profiler plugin]: node `node` of a two-node job on this one GPU. NCCL refuses two
// ranks on one GPU of one host; NCCL_HOSTID tells it the two agents are two hosts, so they
// talk over sockets on loopback (NCCL's network path, as between real nodes). Both workers
// print the plugin's totals at their end (LOCKSTEP_NCCL_PROFILER_DEBUG=1).
Process start_node(const std::string& dir, int node, int master_port, int agent_port, int metrics_port,
                   const std::vector<std::string>& command) {
  lockstep::SpawnOptions so;
  so.argv = {agent_bin(), "--metrics-address", "127.0.0.1", "--step-log", dir + "/steps",
             "--"};
  so.argv.insert(so.argv.end(), command.begin(), command.end());
  so.env = {{"LOCKSTEP_JOB_NAME", "nccl"}, {"LOCKSTEP_JOB_NAMESPACE", "ns"}, {"LOCKSTEP_JOB_UID", "uid-nccl"},
            {"LOCKSTEP_NNODES", "2"}, {"LOCKSTEP_NODE_RANK", std::to_string(node)}, {"LOCKSTEP_NPROC_PER_NODE", "1"},
            {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"}, {"LOCKSTEP_MASTER_PORT", std::to_string(master_port)},
            {"LOCKSTEP_AGENT_PORT", std::to_string(agent_port)}, {"LOCKSTEP_RESTART_ATTEMPT", "0"},
            {"LOCKSTEP_METRICS_PORT", std::to_string(metrics_port)}, {"NCCL_HOSTID", "lockstep-gpu-test-node-" + std::to_string(node)},
            {"NCCL_SOCKET_IFNAME", "lo"}, {"NCCL_IB_DISABLE", "1"}, {"LOCKSTEP_NCCL_PROFILER_DEBUG", "1"}};
  so.unset_env = {"NCCL_PROFILER_PLUGIN"};
  so.output_path = dir + "/agent-" + std::to_string(node) + ".log";
  so.new_process_group = true;
  return Process::spawn(so);
}

// The plugin's end-of-run totals for `op` in a worker's output: seconds, bytes, operations.
struct NcclTotals { double seconds = -1, bytes = -1, count = -1; };
NcclTotals plugin_totals(const std::string& output, const std::string& op) {
  NcclTotals t;
  std::smatch m;
  std::regex re("lockstep nccl profiler \\(rank [0-9]+, [a-z]+\\):.*nccl_s\\." + op + "=([0-9.eE+-]+) nccl_bytes\\." + op +
                "=([0-9]+) nccl_count\\." + op + "=([0-9]+).* incomplete=0 ");
  if (std::regex_search(output, m, re)) t = {std::stod(m[1]), std::stod(m[2]), std::stod(m[3])};
  return t;
}

// A rank's step log (--step-log): its steps and the sum of a figure over them.
std::pair<int, double> step_log_sum(const std::string& path, const std::string& key) {
  int steps = 0;
  double sum = 0;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    ++steps;
    if (j.contains(key)) sum += j[key].get<double>();
  }
  return {steps, sum};
}

std::string http_get(const std::string& url) {
  return lockstep::run_capture({"curl", "-s", "--max-time", "5", url}, {}, 10s).output;
}

// The value of the first series `name{...gpu="0"...}` in a scrape, or -1.
double gpu_series(const std::string& scrape, const std::string& name) {
  std::smatch m;
  std::regex re(name + R"(\{[^}]*gpu="0"[^}]*\} ([0-9.eE+-]+))");
  return std::regex_search(scrape, m, re) ? std::stod(m[1]) : -1;
}

TEST(AgentGpu, TorchrunStyleNcclProgramTrainsUnderTheAgent) {
  REQUIRE_NVIDIA_GPU();
  if (::system("python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null") != 0)
    GTEST_SKIP() << "SKIPPED: no GPU PyTorch: python3 cannot import a torch that sees a CUDA device";
  std::string dir = temp_dir("torchrun");
  std::string script = std::string(LOCKSTEP_SOURCE_DIR) + "/tests/agent/torchrun_ddp_nccl.py";
  auto agent = start_agent(dir + "/agent.log", lockstep::free_loopback_port(), {"python3", script, "1", "1"});
  auto st = agent.wait_for(180s);
  ASSERT_TRUE(st.has_value()) << read_file(dir + "/agent.log");
  std::string out = read_file(dir + "/agent.log");
  EXPECT_EQ(st->shell_code(), 0) << out;
  EXPECT_NE(out.find("torchrun-ddp rank 0/1 ok"), std::string::npos) << out;
}

// Note [NCCL profiler plugin] under real NCCL: two ranks all-reduce over NCCL, once with
// lockstep-trainer (its DDP's own figures are CUDA events around each all-reduce, summed) and
// once with an unmodified torchrun-style Python DDP script (the probe's figures: DDP's own
// timer). The plugin, which neither program knows of, must count their all-reduces and time
// them as they do, and its series must reach /metrics.
TEST(AgentGpu, TheNcclProfilerTimesEveryAllReduceOfAnyProgram) {
  REQUIRE_NVIDIA_GPU();
  std::string trainer = env_or("LOCKSTEP_TRAINER_BIN", "");
  if (trainer.empty()) GTEST_SKIP() << "SKIPPED: LOCKSTEP_TRAINER_BIN not set";
  const bool python = ::system("python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null") == 0;
  struct Case { std::string name; std::vector<std::string> command; double min_ratio; };
  std::vector<Case> cases = {
      {"trainer", {trainer, "--device", "cuda", "--model", "gpt2-124m", "--batch-size", "4", "--steps", "60", "--log-every", "10"}, 0.8}};
  // DDP's timer spans from the first bucket's launch to the last one's end, gaps included.
  if (python) cases.push_back({"python", {"python3", std::string(LOCKSTEP_SOURCE_DIR) + "/tests/agent/torchrun_ddp_nccl.py", "2", "1"}, 0.5});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string dir = temp_dir("nccl-" + c.name);
    const int master = lockstep::free_loopback_port(), agent_port = lockstep::free_loopback_port();
    const int m0 = lockstep::free_loopback_port(), m1 = lockstep::free_loopback_port();
    auto a0 = start_node(dir, 0, master, agent_port, m0, c.command);
    auto a1 = start_node(dir, 1, master, agent_port, m1, c.command);
    // With the trainer, a real Prometheus scrapes both agents and the training dashboard's
    // NCCL queries must return data while it trains.
    std::optional<Process> prom;
    const int prom_port = lockstep::free_loopback_port();
    const std::string prometheus = env_or("LOCKSTEP_PROMETHEUS_BIN", "prometheus");
    std::vector<std::string> queries;
    if (c.name == "trainer" && have(prometheus)) {
      std::ofstream(dir + "/prometheus.yml")
          << "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
          << "- job_name: lockstep-agents\n  static_configs:\n  - targets: ['127.0.0.1:" << m0 << "', '127.0.0.1:" << m1 << "']\n";
      lockstep::SpawnOptions ps;
      ps.argv = {prometheus, "--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/tsdb",
                 "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)};
      ps.output_path = dir + "/prometheus.log";
      ps.new_process_group = true;
      prom = Process::spawn(ps);
      json dash = json::parse(read_file(std::string(LOCKSTEP_SOURCE_DIR) + "/dashboards/lockstep-training.json"));
      for (const auto& q : lockstep::test::dashboard_queries(dash))
        if (q.expr.find("lockstep_nccl_") != std::string::npos) queries.push_back(lockstep::test::fill_dashboard_query(q.expr, "ns", "nccl"));
    }
    auto has_data = [&](const std::string& expr) {
      json r = json::parse(lockstep::run_capture({"curl", "-s", "--max-time", "5", "--data-urlencode", "query=" + expr,
                                                  "http://127.0.0.1:" + std::to_string(prom_port) + "/api/v1/query"},
                                                 {}, 10s).output, nullptr, false);
      return !r.is_discarded() && r.value("status", "") == "success" && !r["data"]["result"].empty();
    };
    // The series on /metrics while it runs (the plugin reports every 0.25 s), and the
    // dashboard's NCCL panel through Prometheus.
    bool seen = false, dashboard = queries.empty();
    for (int i = 0; i < 600 && !(seen && dashboard) && a0.running(); ++i) {
      std::this_thread::sleep_for(500ms);
      if (!seen)
        seen = http_get("http://127.0.0.1:" + std::to_string(m0) + "/metrics").find("lockstep_nccl_seconds_total{") != std::string::npos;
      if (seen && !dashboard && i % 2 == 0) dashboard = std::all_of(queries.begin(), queries.end(), has_data);
    }
    if (!queries.empty()) {
      EXPECT_TRUE(dashboard) << "every NCCL query of the training dashboard returns data while it trains";
      std::cout << queries.size() << " NCCL queries of the training dashboard " << (dashboard ? "returned data" : "did NOT all return data")
                << std::endl;
    }
    auto s0 = a0.wait_for(300s), s1 = a1.wait_for(60s);
    if (prom) prom->terminate(10s);
    const std::string out0 = read_file(dir + "/agent-0.log"), out1 = read_file(dir + "/agent-1.log");
    ASSERT_TRUE(s0 && s1) << out0 << out1;
    EXPECT_EQ(s0->shell_code(), 0) << out0;
    EXPECT_EQ(s1->shell_code(), 0) << out1;
    EXPECT_TRUE(seen) << "lockstep_nccl_seconds_total on node 0's /metrics while it ran\n" << out0;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string& out = rank == 0 ? out0 : out1;
      SCOPED_TRACE("rank " + std::to_string(rank));
      const NcclTotals t = plugin_totals(out, "allreduce");
      const auto [steps, comm_s] = step_log_sum(dir + "/steps/rank-" + std::to_string(rank) + ".jsonl", "comm_s");
      std::cout << c.name << " rank " << rank << ": plugin " << t.count << " all-reduces, " << t.seconds << " s, " << t.bytes
                << " bytes; the program's own figures: " << steps << " steps, comm_s " << comm_s << " s; ratio "
                << (comm_s > 0 ? t.seconds / comm_s : 0) << std::endl;
      ASSERT_GT(t.count, 0) << "no plugin summary with every operation complete in the output:\n" << out;
      EXPECT_GE(t.count, steps) << "at least one all-reduce a step";
      EXPECT_GT(t.bytes, 0);
      ASSERT_GT(comm_s, 0) << "the program's own communication figures";
      EXPECT_LE(t.seconds, 1.05 * comm_s + 0.002) << "the kernels' spans lie within the program's own timing";
      EXPECT_GE(t.seconds, c.min_ratio * comm_s) << "and make up most of it";
    }
  }
}

// GPU series while lockstep-trainer trains gpt2-124m on the GPU: present, with values a busy
// GPU has, and every GPU query of the training dashboard returns data from a real Prometheus.
TEST(AgentGpu, GpuSeriesDuringTrainingReachPrometheusAndTheDashboard) {
  REQUIRE_NVIDIA_GPU();
  std::string trainer = env_or("LOCKSTEP_TRAINER_BIN", "");
  if (trainer.empty()) GTEST_SKIP() << "SKIPPED: LOCKSTEP_TRAINER_BIN not set";
  std::string prometheus = env_or("LOCKSTEP_PROMETHEUS_BIN", "prometheus");
  if (!have(prometheus)) GTEST_SKIP() << "SKIPPED: prometheus not found (LOCKSTEP_PROMETHEUS_BIN)";
  std::string dir = temp_dir("series");
  const int metrics_port = lockstep::free_loopback_port();
  auto agent = start_agent(dir + "/agent.log", metrics_port,
                           // Steps enough to outlast the test on any GPU (it stops the agent at the end): on an
                           // H200, 400 steps ended before the dashboard's instant queries (2026-11-27)
                           {trainer, "--device", "cuda", "--model", "gpt2-124m", "--batch-size", "16", "--steps",
                            "100000", "--log-every", "50"});
  const int prom_port = lockstep::free_loopback_port();
  std::ofstream(dir + "/prometheus.yml")
      << "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
      << "- job_name: lockstep-agents\n  static_configs:\n  - targets: ['127.0.0.1:" << metrics_port << "']\n";
  lockstep::SpawnOptions ps;
  ps.argv = {prometheus, "--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/tsdb",
             "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)};
  ps.output_path = dir + "/prometheus.log";
  ps.new_process_group = true;
  auto prom = Process::spawn(ps);

  // Scrape the agent while it trains: the busiest reading of each series; and, once training
  // is under way, each series against nvidia-smi's reading of the same moment.
  double util = -1, mem = -1, power = -1, temp = -1;
  int steps_seen = 0, compared = 0;
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(1s);
    std::string m = http_get("http://127.0.0.1:" + std::to_string(metrics_port) + "/metrics");
    std::string smi = lockstep::run_capture({"nvidia-smi", "-i", "0", "--query-gpu=utilization.gpu,memory.used,power.draw,temperature.gpu",
                                             "--format=csv,noheader,nounits"}, {}, 10s).output;
    const double u = gpu_series(m, "lockstep_gpu_utilization_ratio"), b = gpu_series(m, "lockstep_gpu_memory_used_bytes"),
                 w = gpu_series(m, "lockstep_gpu_power_watts"), c = gpu_series(m, "lockstep_gpu_temperature_celsius");
    util = std::max(util, u);
    mem = std::max(mem, b);
    power = std::max(power, w);
    temp = std::max(temp, c);
    if (m.find("lockstep_steps_total{") != std::string::npos) ++steps_seen;
    double su, smib, sw, sc;
    char c1, c2, c3;
    std::istringstream row(smi);
    if (steps_seen > 5 && compared < 3 && (row >> su >> c1 >> smib >> c2 >> sw >> c3 >> sc)) {
      // The agent's series are NVML's (agent/nvml.hpp); nvidia-smi reads NVML too, a moment
      // apart: memory, steady while training, to 2%; temperature to 3 C; power, which moves
      // within a step, to 30%; utilization, a ratio over each tool's own window, to 0.25.
      SCOPED_TRACE("nvidia-smi: " + smi);
      EXPECT_NEAR(b / (1 << 20), smib, 0.02 * smib + 64) << "memory used, MiB";
      EXPECT_NEAR(c, sc, 3.0) << "temperature, C";
      EXPECT_NEAR(w, sw, 0.3 * sw) << "power, W";
      EXPECT_NEAR(u, su / 100, 0.25) << "utilization";
      std::cout << "agent vs nvidia-smi: utilization " << u << " vs " << su / 100 << ", memory " << b / (1 << 20)
                << " vs " << smib << " MiB, power " << w << " vs " << sw << " W, temperature " << c << " vs " << sc
                << " C" << std::endl;
      ++compared;
    }
    if (steps_seen > 20 && util > 0.5 && compared >= 3) break;
  }
  EXPECT_EQ(compared, 3) << "nvidia-smi answered: the series were compared three times";
  RecordProperty("max_utilization", std::to_string(util));
  RecordProperty("max_memory_bytes", std::to_string(mem));
  RecordProperty("max_power_watts", std::to_string(power));
  std::cout << "GPU while training: utilization " << util << ", memory " << mem / (1 << 30) << " GiB, power " << power
            << " W, temperature " << temp << " C" << std::endl;
  EXPECT_GT(steps_seen, 0) << read_file(dir + "/agent.log");
  EXPECT_GT(util, 0.5) << "gpt2-124m training keeps the GPU busy; utilization is a ratio in [0, 1]";
  EXPECT_LE(util, 1.0);
  EXPECT_GT(mem, 2.0 * (1 << 30)) << "the trainer holds GBs on the GPU";
  EXPECT_GT(power, 100) << "a training H100/H200 draws well over 100 W";
  EXPECT_GT(temp, 15);
  EXPECT_LT(temp, 100);

  // Every GPU query of the training dashboard, through Prometheus.
  std::this_thread::sleep_for(16s);  // samples enough for rate() (two in its window)
  json dash = json::parse(read_file(std::string(LOCKSTEP_SOURCE_DIR) + "/dashboards/lockstep-training.json"));
  int checked = 0;
  for (const auto& p : dash["panels"])
    for (const auto& t : p.value("targets", json::array())) {
      std::string expr = t.value("expr", "");
      if (expr.find("lockstep_gpu_") == std::string::npos) continue;
      // The dashboard's variables for this one job, $__rate_interval as Grafana computes it.
      expr = lockstep::test::fill_dashboard_query(expr, "ns", "gpu");
      std::string body = lockstep::run_capture({"curl", "-s", "--max-time", "5", "--data-urlencode", "query=" + expr,
                                                "http://127.0.0.1:" + std::to_string(prom_port) + "/api/v1/query"},
                                               {}, 10s).output;
      SCOPED_TRACE("panel '" + p.value("title", "") + "': " + expr);
      json r = json::parse(body, nullptr, false);
      ASSERT_FALSE(r.is_discarded()) << body;
      EXPECT_EQ(r["status"], "success") << body;
      EXPECT_FALSE(r["data"]["result"].empty()) << "no data: " << body;
      ++checked;
    }
  std::cout << checked << " GPU queries of the training dashboard returned data" << std::endl;
  EXPECT_GE(checked, 2);
  agent.signal(SIGTERM);
  agent.wait_for(30s);
  prom.terminate(10s);
}

}  // namespace
