// Metrics in the real-node cluster (#13 item 5): Prometheus finds the training pods and the operator with the
// scrape jobs the Prometheus Operator generates for the chart's PodMonitor and ServiceMonitor, and every
// query of both dashboards returns data from real pods, with `pod` and `trainingjob` labels.
//
// Discovery: kubernetes_sd_configs against the cluster (kubeconfig_file), by the Prometheus
// scripts/setup.sh builds from the Go module proxy with Kubernetes discovery
// (tests/cluster/prometheus; Debian's is built without it, "Kubernetes support has been
// completely removed", its NEWS.Debian). scripts/test.sh passes it as LOCKSTEP_PROMETHEUS_BIN.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "cluster_test_support.hpp"
#include "dashboard_queries.hpp"
#include "job_support.hpp"
#include "lockstep_install.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::run_capture;
using lockstep::test::cluster_kubectl;
using lockstep::test::create_test_namespace;
using lockstep::test::env_or;
using lockstep::test::eventually;
using lockstep::test::kOperatorNamespace;
using lockstep::test::real_cluster;

namespace {

// ---- what the chart declares (charts/lockstep/templates/monitoring.yaml, _helpers.tpl) ------
// The release install_lockstep() installs, and the objects the chart would create with
// serviceMonitor.enabled and podMonitor.enabled (TheScrapeJobsFollowTheChartsMonitors checks
// these against `helm template`).
const std::string kRelease = "lockstep";
const std::string kPodMonitor = kRelease + "-training";      // {{ .Release.Name }}-training
const std::string kServiceMonitor = kRelease + "-operator";  // lockstep.fullname
const std::string kOperatorService = kRelease + "-operator";
// Prometheus Operator naming (pkg/prometheus/promcfg.go): "<kind>/<namespace>/<name>/<endpoint
// index>" for the scrape pool; the `job` label is "<namespace>/<name>" of a PodMonitor and the
// Service's name for a ServiceMonitor (no jobLabel set).
const std::string kPodMonitorPool = "podMonitor/" + std::string(kOperatorNamespace) + "/" + kPodMonitor + "/0";
const std::string kPodMonitorJob = std::string(kOperatorNamespace) + "/" + kPodMonitor;
const std::string kServiceMonitorPool = "serviceMonitor/" + std::string(kOperatorNamespace) + "/" + kServiceMonitor + "/0";
const std::string kServiceMonitorJob = kOperatorService;
const std::string kJob = "tiny-ddp";  // examples/ddp.yaml
const int kAgentMetricsPort = 9400;   // spec.metrics.port's default

std::string source_path(const std::string& relative) { return std::string(LOCKSTEP_SOURCE_DIR) + "/" + relative; }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string tail(const std::string& s, size_t n) { return s.size() <= n ? s : "..." + s.substr(s.size() - n); }

// kubectl's JSON, past any warning it printed first (v1 Endpoints is deprecated from 1.33).
json kubectl_json(const std::vector<std::string>& args) {
  auto r = cluster_kubectl(args);
  size_t at = r.output.find('{');
  if (!r.status.success() || at == std::string::npos) return json();
  json j = json::parse(r.output.substr(at), nullptr, false);
  return j.is_discarded() ? json() : j;
}

json get_json(const std::string& ns, const std::string& object) { return kubectl_json({"-n", ns, "get", object, "-o", "json"}); }

std::string phase(const std::string& ns, const std::string& job) {
  json j = get_json(ns, "trainingjob/" + job);
  return j.is_object() && j.contains("status") ? j["status"].value("phase", "") : "";
}

// ---- the scrape configuration -----------------------------------------------------------------
// What the Prometheus Operator generates for the chart's two monitors, rule for rule, following
// generateServiceMonitorConfig and generatePodMonitorConfig in pkg/prometheus/promcfg.go of
// prometheus-operator v0.7x/v0.8x (main branch, 2025): the job name relabelled into
// __tmp_prometheus_job_name; the running filter (filterRunning, default true: Failed and
// Succeeded pods dropped); selector keep rules on the label and labelpresent meta labels
// (matchLabels: "(value);true", sorted by key; Exists: labelpresent "true"); the port kept by
// name; namespace, service, pod, container (and node) target labels; job; endpoint; the shard
// rules with one shard ($(SHARD) is 0). The PodMonitor keeps honor_labels false, the
// operator's default: the agent's own `namespace` label becomes `exported_namespace`. The
// ServiceMonitor sets honorLabels: the operator's per-job series keep their job's `namespace`.
// Differences: scrape_interval 1s rather than the monitors' 15s and 30s, and discovery from a
// kubeconfig rather than in-cluster.
const char* kServiceMonitorRelabel = R"yaml(  relabel_configs:
  - {source_labels: [job], target_label: __tmp_prometheus_job_name}
  - {action: keep, source_labels: [__meta_kubernetes_service_label_app_kubernetes_io_instance, __meta_kubernetes_service_labelpresent_app_kubernetes_io_instance], regex: '(lockstep);true'}
  - {action: keep, source_labels: [__meta_kubernetes_service_label_app_kubernetes_io_name, __meta_kubernetes_service_labelpresent_app_kubernetes_io_name], regex: '(lockstep-operator);true'}
  - {action: keep, source_labels: [__meta_kubernetes_endpoint_port_name], regex: http}
  - {source_labels: [__meta_kubernetes_endpoint_address_target_kind, __meta_kubernetes_endpoint_address_target_name], separator: ';', regex: 'Node;(.*)', replacement: '${1}', target_label: node}
  - {source_labels: [__meta_kubernetes_endpoint_address_target_kind, __meta_kubernetes_endpoint_address_target_name], separator: ';', regex: 'Pod;(.*)', replacement: '${1}', target_label: pod}
  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
  - {source_labels: [__meta_kubernetes_service_name], target_label: service}
  - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
  - {source_labels: [__meta_kubernetes_pod_container_name], target_label: container}
  - {action: drop, source_labels: [__meta_kubernetes_pod_phase], regex: '(Failed|Succeeded)'}
  - {source_labels: [__meta_kubernetes_service_name], target_label: job, replacement: '${1}'}
  - {target_label: endpoint, replacement: http}
  - {source_labels: [__address__], target_label: __tmp_hash, modulus: 1, action: hashmod}
  - {source_labels: [__tmp_hash], regex: '0', action: keep}
)yaml";

const char* kPodMonitorRelabel = R"yaml(  relabel_configs:
  - {source_labels: [job], target_label: __tmp_prometheus_job_name}
  - {action: drop, source_labels: [__meta_kubernetes_pod_phase], regex: '(Failed|Succeeded)'}
  - {action: keep, source_labels: [__meta_kubernetes_pod_labelpresent_lockstep_dev_job_name], regex: 'true'}
  - {action: keep, source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics}
  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
  - {source_labels: [__meta_kubernetes_pod_container_name], target_label: container}
  - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
  - {target_label: job, replacement: 'lockstep-system/lockstep-training'}
  - {target_label: endpoint, replacement: metrics}
  - {source_labels: [__address__], target_label: __tmp_hash, modulus: 1, action: hashmod}
  - {source_labels: [__tmp_hash], regex: '0', action: keep}
)yaml";

// Prometheus discovers from the API server as the user of `kubeconfig`.
std::string scrape_config(const std::string& kubeconfig) {
  auto discovery = [&](const std::string& role, const std::string& ns) {
    std::string s = "  kubernetes_sd_configs:\n  - role: " + role + "\n    kubeconfig_file: '" + kubeconfig + "'\n";
    if (!ns.empty()) s += "    namespaces:\n      names: [" + ns + "]\n";
    return s;
  };
  std::ostringstream c;
  c << "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
    // The ServiceMonitor: no namespaceSelector, so its own namespace.
    << "- job_name: " << kServiceMonitorPool << "\n  honor_labels: true\n"
    << discovery("endpoints", kOperatorNamespace) << "  scrape_interval: 1s\n  metrics_path: /metrics\n"
    << kServiceMonitorRelabel
    // The PodMonitor: namespaceSelector {any: true}, so no namespaces at all.
    << "- job_name: " << kPodMonitorPool << "\n  honor_labels: false\n"
    << discovery("pod", "") << "  scrape_interval: 1s\n  metrics_path: /metrics\n" << kPodMonitorRelabel;
  return c.str();
}

// ---- Prometheus --------------------------------------------------------------------------------
json prom_get(int port, const std::string& path, const std::vector<std::string>& params = {}) {
  std::vector<std::string> argv = {"curl", "-s", "--get"};
  for (const auto& p : params) {
    argv.push_back("--data-urlencode");
    argv.push_back(p);
  }
  argv.push_back("http://127.0.0.1:" + std::to_string(port) + path);
  auto r = run_capture(argv, {}, 20s);
  json j = json::parse(r.output, nullptr, false);
  return j.is_discarded() ? json{{"status", "error"}, {"error", r.output}} : j;
}

json prom_query(int port, const std::string& expr) { return prom_get(port, "/api/v1/query", {"query=" + expr}); }

json result_of(const json& r) {
  return r.value("status", "") == "success" && r["data"]["result"].is_array() ? r["data"]["result"] : json::array();
}

std::string label(const json& series, const std::string& name) {
  return series.contains("metric") ? series["metric"].value(name, "") : "";
}

// Prometheus' targets as one line each: the pool, URL, health, last error and labels; and how
// many each pool dropped.
std::string targets_summary(int port) {
  json active = prom_get(port, "/api/v1/targets", {"state=active"});
  if (active.value("status", "") != "success") return "targets: " + active.dump() + "\n";
  std::string out = "Prometheus' active targets:\n";
  for (const auto& t : active["data"].value("activeTargets", json::array()))
    out += "  " + t.value("scrapePool", "") + " " + t.value("scrapeUrl", "") + " " + t.value("health", "") + " '" +
           t.value("lastError", "") + "' " + t.value("labels", json::object()).dump() + "\n";
  json dropped = prom_get(port, "/api/v1/targets", {"state=dropped"});
  std::map<std::string, int> per_pool;
  for (const auto& t : dropped["data"].value("droppedTargets", json::array()))
    ++per_pool[t.value("discoveredLabels", json::object()).value("job", "?")];
  for (const auto& [pool, n] : per_pool) out += "  dropped by " + pool + ": " + std::to_string(n) + "\n";
  return out;
}

// What the test leaves, taken away however it ends: Prometheus, the job, the directory.
struct Leftovers {
  std::string dir, ns, job = kJob;
  lockstep::Process prometheus;
  int port = 0;
  std::string log() const { return dir + "/prometheus.log"; }
  ~Leftovers() {
    if (prometheus.pid() > 0 && prometheus.running()) prometheus.terminate(10s);
    if (!ns.empty()) {
      cluster_kubectl({"-n", ns, "delete", "trainingjob", job, "--wait=true"}, "", 120s);
      cluster_kubectl({"delete", "namespace", ns, "--wait=true"}, "", 180s);
    }
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

// Starts `binary` on dir/prometheus.yml: "" once it is ready, else why not (its log).
std::string start_prometheus(const std::string& binary, Leftovers& l) {
  std::filesystem::remove_all(l.dir + "/tsdb");
  std::filesystem::remove(l.log());
  l.port = lockstep::free_loopback_port();
  lockstep::SpawnOptions ps;
  ps.argv = {binary, "--config.file=" + l.dir + "/prometheus.yml", "--storage.tsdb.path=" + l.dir + "/tsdb",
             "--web.listen-address=127.0.0.1:" + std::to_string(l.port)};
  ps.output_path = l.log();
  ps.new_process_group = true;
  l.prometheus = lockstep::Process::spawn(ps);
  const std::string ready_url = "http://127.0.0.1:" + std::to_string(l.port) + "/-/ready";
  bool exited = false;
  bool ready = eventually([&] {
    if (!l.prometheus.running()) return exited = true;
    std::this_thread::sleep_for(200ms);
    return run_capture({"curl", "-sf", ready_url}, {}, 5s).status.success();
  }, 60s);
  if (ready && !exited) return "";
  if (l.prometheus.running()) {
    l.prometheus.terminate(10s);
    return "Prometheus was not ready within 60 s:\n" + tail(lockstep::test::read_file(l.log()), 3000);
  }
  return "Prometheus exited: " + tail(lockstep::test::read_file(l.log()), 3000);
}

// Images and the operator, once for the suite: a failure here fails every test, with why.
class MetricsInCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!real_cluster()) return;
    problem_ = lockstep::test::install_lockstep({"replicas=1"}, &install_seconds_);
    if (problem_.empty()) std::cerr << "[cluster] helm install: operator ready in " << install_seconds_ << " s\n";
  }

  void SetUp() override {
    LOCKSTEP_REQUIRE_REAL_CLUSTER();
    ASSERT_TRUE(problem_.empty()) << problem_;
  }

  static std::string problem_;
  static double install_seconds_;
};

std::string MetricsInCluster::problem_;
double MetricsInCluster::install_seconds_ = 0;

// The scrape jobs above stand for the chart's monitors: the names, selectors and ports they
// encode are the ones `helm template` renders with both monitors enabled.
TEST_F(MetricsInCluster, TheScrapeJobsFollowTheChartsMonitors) {
  auto r = lockstep::test::cluster_helm({"template", kRelease, source_path("charts/lockstep"), "-n", kOperatorNamespace,
                                         "--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true",
                                         "--show-only", "templates/monitoring.yaml"});
  ASSERT_TRUE(r.status.success()) << r.output;
  const std::string& y = r.output;
  size_t pm = y.find("kind: PodMonitor"), sm = y.find("kind: ServiceMonitor");
  ASSERT_NE(pm, std::string::npos) << y;
  ASSERT_NE(sm, std::string::npos) << y;
  std::string service_monitor = pm > sm ? y.substr(sm, pm - sm) : y.substr(sm);
  std::string pod_monitor = pm > sm ? y.substr(pm) : y.substr(pm, sm - pm);
  for (const auto& want : {"metadata:\n  name: " + kServiceMonitor + "\n  namespace: " + kOperatorNamespace + "\n",
                           std::string("{port: http, path: /metrics"), std::string("honorLabels: true}"),
                           std::string("matchLabels:")})
    EXPECT_NE(service_monitor.find(want), std::string::npos) << "'" << want << "' not in\n" << service_monitor;
  EXPECT_EQ(service_monitor.find("namespaceSelector"), std::string::npos) << "the job looks in the monitor's namespace only";
  for (const auto& want : {"metadata:\n  name: " + kPodMonitor + "\n  namespace: " + kOperatorNamespace + "\n",
                           std::string("namespaceSelector: {any: true}"),
                           std::string("- {key: lockstep.dev/job-name, operator: Exists}"),
                           std::string("{port: metrics, path: /metrics")})
    EXPECT_NE(pod_monitor.find(want), std::string::npos) << "'" << want << "' not in\n" << pod_monitor;
  EXPECT_EQ(pod_monitor.find("matchLabels"), std::string::npos) << pod_monitor;
  // The ServiceMonitor's matchLabels: exactly the two keep rules of its job.
  std::set<std::string> match_labels;
  size_t key = service_monitor.find("matchLabels:");
  size_t line_start = service_monitor.rfind('\n', key);
  line_start = line_start == std::string::npos ? 0 : line_start + 1;
  const size_t indent = key - line_start;  // the lines under it are indented deeper
  std::istringstream in(service_monitor.substr(line_start));
  std::string first;
  std::getline(in, first);
  for (std::string line; std::getline(in, line) && line.find_first_not_of(' ') != std::string::npos &&
                         line.find_first_not_of(' ') > indent;)
    match_labels.insert(trim(line.substr(line.find_first_not_of(' '))));
  EXPECT_EQ(match_labels, (std::set<std::string>{"app.kubernetes.io/name: lockstep-operator",
                                                 "app.kubernetes.io/instance: " + kRelease}))
      << service_monitor;
}

TEST_F(MetricsInCluster, PrometheusFindsThePodsAndTheOperatorAndEveryDashboardQueryHasData) {
  const std::string prometheus = env_or("LOCKSTEP_PROMETHEUS_BIN", "prometheus");
  if (!run_capture({"sh", "-c", "command -v \"$0\"", prometheus}, {}, 10s).status.success()) {
    if (env_or("LOCKSTEP_REQUIRE_ALL", "") == "1") FAIL() << prometheus << " not found (scripts/setup.sh installs it)";
    GTEST_SKIP() << "SKIPPED: " << prometheus << " not found";
  }
  Leftovers left;
  left.dir = ::testing::TempDir() + "/metrics-in-cluster-" + std::to_string(::getpid());
  std::filesystem::remove_all(left.dir);
  std::filesystem::create_directories(left.dir);

  // examples/ddp.yaml, with steps it does not finish while the test looks: the PodMonitor's
  // running filter drops a Succeeded pod, and its series then go stale. The test deletes it.
  left.ns = create_test_namespace("metrics");
  const std::string ns = left.ns;
  std::string yaml = lockstep::test::read_file(source_path("examples/ddp.yaml"));
  size_t at = yaml.find("--steps=200");
  ASSERT_NE(at, std::string::npos) << "examples/ddp.yaml has no --steps=200";
  yaml.replace(at, 11, "--steps=100000");
  auto applied = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, yaml);
  ASSERT_TRUE(applied.status.success()) << applied.output;

  // Prometheus with Kubernetes discovery, as a Prometheus Operator user runs it.
  std::ofstream(left.dir + "/prometheus.yml") << scrape_config(real_cluster()->kubeconfig());
  std::string started = start_prometheus(prometheus, left);
  ASSERT_EQ(started.find("field kubernetes_sd_configs not found"), std::string::npos)
      << prometheus << " has no Kubernetes discovery (Debian's is built without it): scripts/setup.sh builds one "
      << "and scripts/test.sh passes it as LOCKSTEP_PROMETHEUS_BIN";
  ASSERT_EQ(started, "");
  const int port = left.port;
  auto diagnose = [&] {
    std::string out = targets_summary(port);
    out += "Prometheus log:\n" + tail(lockstep::test::read_file(left.log()), 2000) + "\n";
    out += cluster_kubectl({"-n", ns, "get", "pods", "-o", "wide"}).output;
    out += cluster_kubectl({"-n", kOperatorNamespace, "get", "pods", "-o", "wide"}).output;
    out += cluster_kubectl({"-n", ns, "describe", "trainingjobs"}).output;
    return out;
  };
  const std::string sel = "namespace=\"" + ns + "\", trainingjob=\"" + kJob + "\"";

  // Both pods' agents scraped, with steps.
  auto t0 = std::chrono::steady_clock::now();
  auto last_line = t0;
  ASSERT_TRUE(eventually([&] {
    std::this_thread::sleep_for(1s);
    size_t pods = result_of(prom_query(port, "count by (pod) (lockstep_steps_total{" + sel + "} > 0)")).size();
    if (std::chrono::steady_clock::now() - last_line >= 15s) {
      last_line = std::chrono::steady_clock::now();
      std::cerr << "[cluster] waiting for lockstep_steps_total from both pods: " << pods << " of 2 so far, job "
                << phase(ns, kJob) << ", "
                << std::chrono::duration_cast<std::chrono::seconds>(last_line - t0).count() << " s\n";
    }
    return pods == 2;
  }, 300s)) << "Prometheus has no steps from both training pods\n" << diagnose();
  std::cerr << "[cluster] Prometheus scrapes both training pods, "
            << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0).count()
            << " s after apply\n";
  // 20 s of samples of every rank, for the dashboards' 15 s rate windows.
  ASSERT_TRUE(eventually([&] {
    std::this_thread::sleep_for(1s);
    json r = result_of(prom_query(port, "min(count_over_time(lockstep_steps_total{" + sel + "}[20s]))"));
    json n = result_of(prom_query(port, "count(lockstep_steps_total{" + sel + "})"));
    return r.size() == 1 && n.size() == 1 && std::stod(r[0]["value"][1].get<std::string>()) >= 15 &&
           n[0]["value"][1] == "4";
  }, 120s)) << "no 20 s of samples from the four ranks\n" << diagnose();
  ASSERT_EQ(phase(ns, kJob), "Running") << diagnose();
  // Every rank's straggler score (the training dashboard's straggler panel): there once each
  // rank is past its warm-up and has half a window of steps (Note [Straggler score]: 25 s at the
  // default window) and node 0's agent has judged the gang (every 5 s).
  ASSERT_TRUE(eventually([&] {
    std::this_thread::sleep_for(1s);
    json n = result_of(prom_query(port, "count(lockstep_straggler_score{" + sel + "})"));
    return n.size() == 1 && n[0]["value"][1] == "4";
  }, 120s)) << "no straggler score from the four ranks\n" << diagnose();

  // The targets: two training pods from the PodMonitor's job and the operator's pod from the
  // ServiceMonitor's, nothing else.
  std::string operator_pod = trim(cluster_kubectl({"-n", kOperatorNamespace, "get", "pods", "-l",
                                                   "app.kubernetes.io/name=lockstep-operator", "-o",
                                                   "jsonpath={.items[*].metadata.name}"})
                                      .output);
  ASSERT_FALSE(operator_pod.empty());
  ASSERT_EQ(operator_pod.find(' '), std::string::npos) << "replicas=1, yet: " << operator_pod;
  std::map<std::string, std::string> pod_ip;
  for (int i = 0; i < 2; ++i) {
    std::string pod = kJob + "-" + std::to_string(i);
    pod_ip[pod] = get_json(ns, "pod/" + pod)["status"].value("podIP", "");
  }
  json active = prom_get(port, "/api/v1/targets", {"state=active"});
  std::multiset<std::string> targets;
  for (const auto& t : active["data"].value("activeTargets", json::array())) {
    const json& ls = t["labels"];
    targets.insert(t.value("scrapePool", "") + " " + ls.value("job", "") + " " + ls.value("namespace", "") + "/" +
                   ls.value("pod", "") + " " + ls.value("container", "") + " " + ls.value("endpoint", "") + " " +
                   t.value("health", ""));
  }
  EXPECT_EQ(targets, (std::multiset<std::string>{
                         kServiceMonitorPool + " " + kServiceMonitorJob + " " + kOperatorNamespace + "/" + operator_pod +
                             " operator http up",
                         kPodMonitorPool + " " + kPodMonitorJob + " " + ns + "/" + kJob + "-0 trainer metrics up",
                         kPodMonitorPool + " " + kPodMonitorJob + " " + ns + "/" + kJob + "-1 trainer metrics up"}))
      << diagnose();

  // The training series: the real pod, the trainingjob, the pod's namespace; the agent's own
  // `namespace` kept as exported_namespace (honor_labels false).
  json steps = result_of(prom_query(port, "lockstep_steps_total{" + sel + "}"));
  ASSERT_EQ(steps.size(), 4u) << steps.dump(1);
  for (const auto& s : steps) {
    SCOPED_TRACE(s["metric"].dump());
    std::string pod = label(s, "pod");
    EXPECT_EQ(pod, kJob + "-" + label(s, "node_rank")) << "pod label is not the rank's pod";
    EXPECT_EQ(label(s, "trainingjob"), kJob);
    EXPECT_EQ(label(s, "namespace"), ns);
    EXPECT_EQ(label(s, "exported_namespace"), ns) << "the agent's namespace label, renamed by honor_labels: false";
    EXPECT_EQ(label(s, "job"), kPodMonitorJob);
    EXPECT_EQ(label(s, "container"), "trainer");
    EXPECT_EQ(label(s, "endpoint"), "metrics");
    EXPECT_EQ(label(s, "instance"), pod_ip[pod] + ":" + std::to_string(kAgentMetricsPort));
  }
  std::cerr << "[cluster] a training series as the dashboards see it: " << steps[0]["metric"].dump() << "\n";
  // The operator's series: from the ServiceMonitor's job only, labelled with its pod.
  json op = result_of(prom_query(port, "lockstep_operator_workqueue_depth"));
  ASSERT_EQ(op.size(), 1u) << op.dump(1) << diagnose();
  EXPECT_EQ(label(op[0], "job"), kServiceMonitorJob);
  EXPECT_EQ(label(op[0], "service"), kOperatorService);
  EXPECT_EQ(label(op[0], "pod"), operator_pod);
  EXPECT_EQ(label(op[0], "container"), "operator");
  EXPECT_EQ(label(op[0], "namespace"), kOperatorNamespace);
  EXPECT_EQ(label(op[0], "endpoint"), "http");
  EXPECT_TRUE(result_of(prom_query(port, "count({__name__=~\"lockstep_operator_.+\", job!=\"" + kServiceMonitorJob + "\"})"))
                  .empty());
  std::cerr << "[cluster] an operator series as the dashboards see it: " << op[0]["metric"].dump() << "\n";
  // The operator's per-job series keep the job's namespace (honorLabels), as the agents' have it.
  json gang = result_of(prom_query(port, "lockstep_restarts_total{kind=\"gang\", " + sel + "}"));
  ASSERT_EQ(gang.size(), 1u) << diagnose();
  EXPECT_EQ(label(gang[0], "job"), kServiceMonitorJob);
  EXPECT_EQ(label(gang[0], "pod"), operator_pod);
  EXPECT_EQ(gang[0]["value"][1], "0");

  // Every query of both dashboards, with this job chosen in the variables.
  int checked = 0, skipped = 0;
  for (const char* name : {"dashboards/lockstep-training.json", "dashboards/lockstep-operator.json"}) {
    json dash = json::parse(lockstep::test::read_file(source_path(name)));
    for (const auto& [what, expr] : lockstep::test::dashboard_queries(dash)) {
      SCOPED_TRACE(std::string(name) + ": " + what + ": " + expr);
      std::string q = lockstep::test::fill_dashboard_query(expr, ns, kJob);
      json r = prom_query(port, q);
      ASSERT_EQ(r["status"], "success") << r.dump();
      json result = result_of(r);
      if (result.empty() && (expr.find("lockstep_gpu_") != std::string::npos || expr.find("lockstep_nccl_") != std::string::npos)) {
        std::cout << "SKIPPED (no GPU or NCCL: examples/ddp.yaml trains on CPU): " << name << ": " << what << ": " << expr << "\n";
        ++skipped;
        continue;
      }
      EXPECT_FALSE(result.empty()) << "no series for " << q << "\n" << diagnose();
      ++checked;
    }
  }
  // The variables offer this namespace, this job and its four ranks.
  auto values = [&](const std::string& expr, const std::string& name) {
    std::set<std::string> out;
    for (const auto& s : result_of(prom_query(port, lockstep::test::fill_dashboard_query(expr, ns, kJob)))) out.insert(label(s, name));
    return out;
  };
  EXPECT_EQ(values("label_values(lockstep_steps_total, namespace)", "namespace").count(ns), 1u);
  EXPECT_EQ(values("label_values(lockstep_steps_total{namespace=\"$namespace\"}, trainingjob)", "trainingjob"),
            std::set<std::string>{kJob});
  EXPECT_EQ(values("label_values(lockstep_steps_total{namespace=\"$namespace\", trainingjob=\"$trainingjob\"}, rank)", "rank"),
            (std::set<std::string>{"0", "1", "2", "3"}));
  RecordProperty("queries_checked", checked);
  std::cerr << "[cluster] " << checked << " dashboard queries returned data from the cluster's pods; " << skipped
            << " GPU queries skipped (no GPU)\n";
  EXPECT_GE(checked, 15);
  // Leftovers: Prometheus stopped, the job and its namespace deleted, the directory removed.
}

// #25: any PyTorch image, any torchrun-style script. examples/pytorch-script.yaml as written but
// for its image: a plain Debian + python3 + torch image built here (scripts/images.sh's
// `pytorch`: no Lockstep file in it) instead of pytorch/pytorch, which cannot be pulled here,
// and more epochs of its own EPOCHS knob, so it trains while the test looks. The operator
// brings the agent in; the agent's probe reports the unmodified script's optimizer steps and
// DDP's communication; Prometheus scrapes them through the chart's PodMonitor; a SIGKILLed
// Python rank is restarted in place and the job still finishes, its last step kept.
TEST_F(MetricsInCluster, AnUnmodifiedScriptInAPlainPyTorchImageReportsStepsAndCommunication) {
  const std::string prometheus = env_or("LOCKSTEP_PROMETHEUS_BIN", "prometheus");
  if (!run_capture({"sh", "-c", "command -v \"$0\"", prometheus}, {}, 10s).status.success()) {
    if (env_or("LOCKSTEP_REQUIRE_ALL", "") == "1") FAIL() << prometheus << " not found (scripts/setup.sh installs it)";
    GTEST_SKIP() << "SKIPPED: " << prometheus << " not found";
  }
  auto path = run_capture({source_path("scripts/images.sh"), "path", "pytorch"}, {}, 60s);
  const std::string archive = trim(path.output);
  ASSERT_TRUE(path.status.success() && std::filesystem::exists(archive))
      << "the pytorch test image is not built (scripts/images.sh build pytorch; scripts/test.sh does it): " << path.output;
  auto t_import = std::chrono::steady_clock::now();
  auto imported = real_cluster()->script({"import", archive}, 10min);
  ASSERT_TRUE(imported.status.success()) << imported.output;
  std::cerr << "[cluster] the pytorch image imported in "
            << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t_import).count()
            << " s\n";

  Leftovers left;
  left.job = "pytorch-script";
  left.dir = ::testing::TempDir() + "/metrics-python-" + std::to_string(::getpid());
  std::filesystem::remove_all(left.dir);
  std::filesystem::create_directories(left.dir);
  left.ns = create_test_namespace("python");
  const std::string ns = left.ns, job = left.job;
  const int epochs = 60, steps_per_epoch = 4096 / (4 * 32) / 2;  // the script's data, 4 ranks, accumulation 2
  std::string yaml = lockstep::test::read_file(source_path("examples/pytorch-script.yaml"));
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"image: pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime", "image: lockstep/pytorch:0.1.0"},
           {"        workingDir: /workspace\n",
            "        workingDir: /workspace\n        env: [{name: EPOCHS, value: \"" + std::to_string(epochs) + "\"}]\n"}}) {
    size_t at = yaml.find(from);
    ASSERT_NE(at, std::string::npos) << "examples/pytorch-script.yaml has no '" << from << "'";
    yaml.replace(at, from.size(), to);
  }
  std::ofstream(left.dir + "/prometheus.yml") << scrape_config(real_cluster()->kubeconfig());
  ASSERT_EQ(start_prometheus(prometheus, left), "");
  const int port = left.port;
  auto diagnose = [&] {
    std::string out = targets_summary(port);
    out += cluster_kubectl({"-n", ns, "get", "pods", "-o", "wide"}).output;
    out += cluster_kubectl({"-n", ns, "describe", "trainingjobs"}).output;
    for (const char* pod : {"pytorch-script-0", "pytorch-script-1"})
      out += tail(cluster_kubectl({"-n", ns, "logs", pod, "--tail", "30"}).output, 3000);
    return out;
  };
  auto t0 = std::chrono::steady_clock::now();
  auto applied = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, yaml);
  ASSERT_TRUE(applied.status.success()) << applied.output;
  // The pods run the user's image as it is, with the agent from the init container.
  json pod0 = get_json(ns, "pod/pytorch-script-0");
  for (int i = 0; i < 100 && pod0.is_null(); ++i) {
    std::this_thread::sleep_for(200ms);
    pod0 = get_json(ns, "pod/pytorch-script-0");
  }
  ASSERT_TRUE(pod0.is_object()) << diagnose();
  EXPECT_EQ(pod0["spec"]["containers"][0]["image"], "lockstep/pytorch:0.1.0");
  EXPECT_EQ(pod0["spec"]["initContainers"][0]["image"], "lockstep/agent:0.1.0");

  const std::string sel = "namespace=\"" + ns + "\", trainingjob=\"" + job + "\"";
  // `at` (unix seconds, optional): every query of one comparison reads the same instant, so the
  // same scrape of each target; "now" would let a scrape land between two queries of a rank
  // that is still training (its exposed total then outruns the total read a moment before).
  auto value = [&](const std::string& q, const std::string& at = "") {
    json r = result_of(at.empty() ? prom_query(port, q) : prom_get(port, "/api/v1/query", {"query=" + q, "time=" + at}));
    return r.size() == 1 ? std::stod(r[0]["value"][1].get<std::string>()) : -1.0;
  };
  // Every rank's steps, scraped through the chart's PodMonitor.
  ASSERT_TRUE(eventually([&] {
    std::this_thread::sleep_for(1s);
    return value("count(lockstep_steps_total{" + sel + "} > 0)") == 4 &&
           value("count(sum by (rank) (lockstep_comm_seconds_total{" + sel + "}) > 0)") == 4;
  }, 300s)) << "Prometheus has no steps and communication from the four Python ranks\n" << diagnose();
  std::cerr << "[cluster] Python ranks' steps and communication in Prometheus "
            << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0).count()
            << " s after apply\n";
  // Two instants 5 s apart, each a few scrape intervals back when read: every scrape up to it
  // has been stored. Communication is checked against step time over the steps between them:
  // a rank's first step reports its communication but no step time (Note [The Python probe],
  // "Step time"), so the totals differ by one step's communication, one-time costs and all
  // (on a loaded machine here a rank's first 12 steps read 0.2 s of steps and 0.3 s of
  // communication, rounded: at the edge of the totals' check that was here before).
  auto instant = [] {
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count() - 2);
  };
  std::this_thread::sleep_for(3s);
  const std::string at1 = instant();
  std::this_thread::sleep_for(5s);
  const std::string at = instant();
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string r = sel + ", rank=\"" + std::to_string(rank) + "\"";
    const double steps = value("lockstep_steps_total{" + r + "}", at);
    const double comm = value("sum(lockstep_comm_seconds_total{" + r + "})", at);
    const double exposed = value("lockstep_comm_exposed_seconds_total{" + r + "}", at);
    const double timed = value("lockstep_step_duration_seconds_count{" + r + "}", at);
    const double step_sum = value("lockstep_step_duration_seconds_sum{" + r + "}", at);
    const double steps1 = value("lockstep_steps_total{" + r + "}", at1);
    const double comm1 = value("sum(lockstep_comm_seconds_total{" + r + "})", at1);
    const double step_sum1 = value("lockstep_step_duration_seconds_sum{" + r + "}", at1);
    EXPECT_GT(steps, 0);
    EXPECT_LE(steps, epochs * steps_per_epoch) << "more steps than the script's optimizer steps";
    EXPECT_GT(comm, 0);
    EXPECT_GE(exposed, 0);
    EXPECT_LE(exposed, comm * 1.0001 + 1e-6) << "exposed communication beyond the whole";
    EXPECT_GE(timed, steps - 1);
    EXPECT_GT(steps, steps1) << "no step in the 5 s between the two readings";
    EXPECT_GE(steps1, 1) << "the first reading is after the wait for every rank's steps";
    EXPECT_LE(comm - comm1, (step_sum - step_sum1) * 1.05 + 0.05)
        << "more communication than the steps' time between the readings (" << steps1 << " to " << steps << " steps)";
    std::cerr << "[cluster] rank " << rank << ": " << steps << " steps, " << step_sum << " s of steps, " << comm
              << " s communication, " << exposed << " s exposed; over the last " << steps - steps1 << " steps "
              << step_sum - step_sum1 << " s of steps, " << comm - comm1 << " s communication\n";
  }
  // A Python rank killed: every rank restarted in place in the same pods, and the job finishes.
  std::vector<pid_t> pids;
  ASSERT_TRUE(eventually([&] { return (pids = lockstep::test::worker_pids(ns, job, 1, "python3")).size() == 2; }, 30s))
      << diagnose();
  const std::string uid0 = get_json(ns, "pod/pytorch-script-0")["metadata"].value("uid", "");
  ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
  ASSERT_TRUE(lockstep::test::wait_succeeded(ns, job, 600s)) << diagnose();
  json status = get_json(ns, "trainingjob/" + job)["status"];
  EXPECT_EQ(status.value("inPlaceRestarts", -1), 1) << status.dump();
  EXPECT_EQ(status.value("restarts", -1), 0) << status.dump();
  EXPECT_EQ(get_json(ns, "pod/pytorch-script-0")["metadata"].value("uid", ""), uid0) << "the pods were recreated";
  // The last step stays in the status after the job: the script's optimizer steps, no total.
  EXPECT_EQ(status["progress"].value("steps", ""), std::to_string(epochs * steps_per_epoch)) << status.dump();
  std::cerr << "[cluster] pytorch-script: apply -> Succeeded with one in-place restart in "
            << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0).count()
            << " s\n";
}

}  // namespace

int main(int argc, char** argv) { return lockstep::test::run_tests_with_real_cluster(argc, argv); }
