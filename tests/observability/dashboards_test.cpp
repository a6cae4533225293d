// Every query of every Grafana panel, against a real Prometheus (Debian's) scraping a real
// local training run (two agents x two trainer ranks) and a real operator: each must return
// at least one series. GPU series exist only on a GPU machine; elsewhere their queries must
// still be valid PromQL and are reported as SKIPPED. The straggler verdicts exist only on a
// straggler: their query falls back to a placeholder (the rank "none" at 0), so a healthy run
// answers it too, and this one must answer with the placeholder alone.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "dashboard_queries.hpp"
#include "kube_test_support.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::Process;
using lockstep::run_capture;
using lockstep::test::control_plane;
using lockstep::test::env_or;
using lockstep::test::kubectl;
using lockstep::test::read_text;
using lockstep::test::source_path;

namespace {

json prom_query(int port, const std::string& expr) {
  auto r = run_capture({"curl", "-s", "--get", "--data-urlencode", "query=" + expr,
                        "http://127.0.0.1:" + std::to_string(port) + "/api/v1/query"}, {}, 20s);
  auto j = json::parse(r.output, nullptr, false);
  return j.is_discarded() ? json{{"status", "error"}, {"error", r.output}} : j;
}

}  // namespace

TEST(Dashboards, EveryPanelQueryReturnsDataFromARealTrainingRun) {
  LOCKSTEP_REQUIRE_CONTROL_PLANE();
  if (::system("command -v prometheus >/dev/null 2>&1") != 0) {
    if (lockstep::test::require_all()) FAIL() << "prometheus not found (scripts/setup.sh installs it)";
    GTEST_SKIP() << "SKIPPED: prometheus not found";
  }
  std::string dir = ::testing::TempDir() + "/obs-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  // An operator with something to reconcile, for the operator dashboard: the job the agents
  // below train (obs/e2e), so its own per-job series (lockstep_restarts_total{kind="gang"})
  // name the same job as theirs.
  for (const char* f : {"crds/lockstep.dev_trainingjobs.yaml", "tests/crds/podgroup.yaml"})
    ASSERT_TRUE(kubectl({"apply", "-f", source_path(f)}).status.success());
  kubectl({"wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"});
  kubectl({"create", "namespace", "obs"});
  std::string job = read_text(source_path("examples/ddp.yaml"));
  size_t name_at = job.find("name: tiny-ddp\n");
  ASSERT_NE(name_at, std::string::npos) << "examples/ddp.yaml is no longer named tiny-ddp";
  job.replace(name_at, 14, "name: e2e");
  int op_port = lockstep::free_loopback_port();
  lockstep::SpawnOptions op_opts;
  op_opts.argv = {env_or("LOCKSTEP_OPERATOR_BIN", "lockstep-operator"), "--kubeconfig", control_plane()->kubeconfig(),
                  "--http-address", "127.0.0.1", "--http-port", std::to_string(op_port), "--leader-elect=false"};
  op_opts.output_path = dir + "/operator.log";
  auto op = Process::spawn(op_opts);
  auto applied = kubectl({"apply", "-n", "obs", "-f", "-"}, job);
  ASSERT_TRUE(applied.status.success()) << applied.output;

  // Training: two agents (nodes) of two trainer ranks each, labelled trainingjob=e2e, namespace=obs.
  int master = lockstep::free_loopback_port();
  std::vector<int> agent_ports;
  std::vector<Process> agents;
  for (int node = 0; node < 2; ++node) {
    agent_ports.push_back(lockstep::free_loopback_port());
    lockstep::SpawnOptions so;
    so.argv = {env_or("LOCKSTEP_AGENT_BIN", "lockstep-agent"), "--metrics-address", "127.0.0.1", "--",
               env_or("LOCKSTEP_TRAINER_BIN", "lockstep-trainer"), "--device", "cpu", "--steps", "100000", "--batch-size", "4",
               "--log-every", "100"};
    so.env = {{"LOCKSTEP_JOB_NAME", "e2e"}, {"LOCKSTEP_JOB_NAMESPACE", "obs"}, {"LOCKSTEP_NNODES", "2"},
              {"LOCKSTEP_NODE_RANK", std::to_string(node)}, {"LOCKSTEP_NPROC_PER_NODE", "2"},
              {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"}, {"LOCKSTEP_MASTER_PORT", std::to_string(master)},
              {"LOCKSTEP_METRICS_PORT", std::to_string(agent_ports.back())}, {"GLOO_SOCKET_IFNAME", "lo"}};
    so.output_path = dir + "/agent-" + std::to_string(node) + ".log";
    agents.push_back(Process::spawn(so));
  }

  // Prometheus, scraping every second.
  int prom_port = lockstep::free_loopback_port();
  std::ofstream(dir + "/prometheus.yml")
      << "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
      << "- job_name: lockstep-agents\n  static_configs:\n  - targets: ['127.0.0.1:" << agent_ports[0] << "', '127.0.0.1:"
      << agent_ports[1] << "']\n"
      << "- job_name: lockstep-operator\n  static_configs:\n  - targets: ['127.0.0.1:" << op_port << "']\n";
  lockstep::SpawnOptions ps;
  ps.argv = {"prometheus", "--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/tsdb",
             "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)};
  ps.output_path = dir + "/prometheus.log";
  ps.new_process_group = true;
  auto prom = Process::spawn(ps);

  // Let it scrape a stretch of training: enough samples for the rate() windows.
  bool training = false;
  for (int i = 0; i < 60 && !training; ++i) {
    std::this_thread::sleep_for(1s);
    auto r = prom_query(prom_port, "sum(lockstep_steps_total{trainingjob=\"e2e\"})");
    training = r["status"] == "success" && !r["data"]["result"].empty() &&
               std::stod(r["data"]["result"][0]["value"][1].get<std::string>()) > 50;
  }
  ASSERT_TRUE(training) << "no training steps reached Prometheus\n" << read_text(dir + "/agent-0.log").substr(0, 3000)
                        << read_text(dir + "/prometheus.log").substr(0, 2000);
  // 16 s more of samples at 1 s: rate() over Grafana's 60 s $__rate_interval (fill_dashboard_query)
  // then spans the training since its first steps.
  std::this_thread::sleep_for(16s);
  // The straggler score (#42) of every rank: there once its window holds 8 steps and node 0's
  // agent has judged the gang (every 5 s, with the other node's figures of the last 5 s).
  bool scored = false;
  for (int i = 0; i < 60 && !scored; ++i) {
    auto r = prom_query(prom_port, "count(lockstep_straggler_score{trainingjob=\"e2e\", namespace=\"obs\"})");
    scored = r["status"] == "success" && !r["data"]["result"].empty() &&
             r["data"]["result"][0]["value"][1].get<std::string>() == "4";
    if (!scored) std::this_thread::sleep_for(1s);
  }
  EXPECT_TRUE(scored) << "not every rank got a straggler score within 60 s\n" << read_text(dir + "/agent-0.log").substr(0, 3000);
  const bool gpu = ::system("command -v nvidia-smi >/dev/null 2>&1") == 0;

  int checked = 0, skipped = 0;
  for (const char* name : {"dashboards/lockstep-training.json", "dashboards/lockstep-operator.json"}) {
    json dash = json::parse(read_text(source_path(name)));
    EXPECT_EQ(dash["schemaVersion"], 41) << name;  // Grafana 12
    for (const auto& [what, expr] : lockstep::test::dashboard_queries(dash)) {
      SCOPED_TRACE(std::string(name) + ": " + what + ": " + expr);
      auto r = prom_query(prom_port, lockstep::test::fill_dashboard_query(expr, "obs", "e2e"));
      ASSERT_EQ(r["status"], "success") << r.dump();
      bool empty = r["data"]["result"].empty();
      // GPU series need a GPU; NCCL's (the agent's NCCL profiler plugin) need NCCL, which CPU
      // training on Gloo never loads: agent_gpu_test checks both kinds on a GPU.
      if (empty && !gpu && (expr.find("lockstep_gpu_") != std::string::npos || expr.find("lockstep_nccl_") != std::string::npos)) {
        std::cout << "SKIPPED (no GPU here): " << name << ": " << what << ": " << expr << "\n";
        ++skipped;
        continue;
      }
      EXPECT_FALSE(empty) << "no series for " << lockstep::test::fill_dashboard_query(expr, "obs", "e2e");
      ++checked;
    }
  }
  // This run is healthy: the straggler panel's verdict query gives only its placeholder, the
  // rank "none" at 0 (no standing verdict), which the panel lists and does not draw.
  json training_dash = json::parse(read_text(source_path("dashboards/lockstep-training.json")));
  for (const auto& [what, expr] : lockstep::test::dashboard_queries(training_dash)) {
    if (expr.find("lockstep_straggler_slowdown") == std::string::npos) continue;
    auto r = prom_query(prom_port, lockstep::test::fill_dashboard_query(expr, "obs", "e2e"));
    ASSERT_EQ(r["data"]["result"].size(), 1u) << what << ": " << r.dump();
    EXPECT_EQ(r["data"]["result"][0]["metric"].value("rank", ""), "none") << "a straggler verdict in a healthy run: " << r.dump();
    EXPECT_EQ(r["data"]["result"][0]["value"][1], "0") << r.dump();
  }
  // Restarts by kind: the operator's gang series is there at 0 for this job (the agents'
  // in_place one is theirs to serve).
  auto gang = prom_query(prom_port, "lockstep_restarts_total{kind=\"gang\", namespace=\"obs\", trainingjob=\"e2e\"}");
  ASSERT_EQ(gang["status"], "success") << gang.dump();
  ASSERT_EQ(gang["data"]["result"].size(), 1u) << gang.dump();
  EXPECT_EQ(gang["data"]["result"][0]["value"][1], "0") << gang.dump();
  RecordProperty("queries_checked", checked);
  std::cout << checked << " queries returned data; " << skipped << " GPU queries skipped (no GPU)\n";
  EXPECT_GE(checked, 15);

  for (auto& a : agents) a.signal(SIGTERM);
  for (auto& a : agents) a.wait_for(30s);
  prom.terminate(10s);
  op.terminate(10s);
}

// Grafana's own schema (item: dashboards checked without a Grafana): grafana-schema-check
// (tests/observability/grafana-schema, built by scripts/setup.sh) parses both dashboards
// strictly with Grafana's published types and every core panel plugin's options. Both parse; a
// copy with a misspelt panel option, a value of the wrong type and no annotations does not, and
// the checker names each. The rank variable shows every rank until one is picked.
TEST(Dashboards, BothParseStrictlyWithGrafanasOwnDashboardTypes) {
  const std::string checker = env_or("LOCKSTEP_GRAFANA_SCHEMA_BIN", "");
  if (checker.empty() || !std::filesystem::exists(checker)) {
    const std::string why = "grafana-schema-check not built (LOCKSTEP_GRAFANA_SCHEMA_BIN='" + checker +
                            "'; scripts/setup.sh builds it, scripts/test.sh sets it)";
    if (lockstep::test::require_all()) FAIL() << why;
    GTEST_SKIP() << "SKIPPED: " << why;
  }
  const std::vector<std::string> dashboards = {source_path("dashboards/lockstep-training.json"),
                                               source_path("dashboards/lockstep-operator.json")};
  std::vector<std::string> argv = {checker};
  argv.insert(argv.end(), dashboards.begin(), dashboards.end());
  auto good = run_capture(argv, {}, 60s);
  EXPECT_TRUE(good.status.success()) << good.output;
  EXPECT_NE(good.output.find("lockstep-training.json: parsed strictly: 10 panels"), std::string::npos) << good.output;
  EXPECT_NE(good.output.find("lockstep-operator.json: parsed strictly: 5 panels"), std::string::npos) << good.output;

  json broken = json::parse(read_text(dashboards[0]));
  broken["panels"][0]["options"]["legend"]["showLegends"] = true;  // misspelt
  broken["panels"][1]["options"]["tooltip"]["sort"] = 3;            // a number where Grafana has a word
  broken.erase("annotations");
  const std::string path = ::testing::TempDir() + "/broken-dashboard-" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << broken.dump(2);
  auto bad = run_capture({checker, path}, {}, 60s);
  EXPECT_FALSE(bad.status.success()) << bad.output;
  for (const char* what : {"panels[0].options.legend", "showLegends", "panels[1].options.tooltip", "annotations"})
    EXPECT_NE(bad.output.find(what), std::string::npos) << "the checker must name " << what << ":\n" << bad.output;
  std::filesystem::remove(path);

  for (const auto& name : dashboards) {
    const json dash = json::parse(read_text(name));
    for (const auto& v : dash["templating"]["list"])
      if (v["name"] == "rank") {
        EXPECT_EQ(v["current"]["value"], json::array({"$__all"})) << name << ": rank defaults to All";
      }
  }
}

int main(int argc, char** argv) { return lockstep::test::run_tests_with_control_plane(argc, argv); }
