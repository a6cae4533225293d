// spec.isolation: NetworkPolicy enforced in the real-node cluster (#26 item 14).
//
// The cluster's bridge CNI enforces no NetworkPolicy; scripts/cluster.sh runs a NetworkPolicy
// controller beside it, kube-network-policies (tests/gotools/netpol), which judges the first
// packet of every pod connection in user space through an NFQUEUE. Against that:
//   - a job with spec.isolation NetworkPolicy trains to Succeeded with its policy in place the
//     whole time: its ranks reach each other on the master port, the barrier port
//     (masterPort + 1) and Gloo's ephemeral ports, and the operator reads rank 0's /metrics
//     (status.progress gets a step);
//   - while it trains, a pod of another namespace cannot open a TCP connection to its pod 0's
//     master and barrier ports, which the job's own pod 1 opens at the same moment; the same
//     stranger opens both ports of an identical job without isolation, so the policy, enforced,
//     is what blocks it; the controller's verdict counts agree.
// Last, down leaves none of the controller's netfilter state (its queue, its nftables table,
// the iptables chain that feeds its queue).
//
// Images: scripts/test.sh builds them (scripts/images.sh); install_lockstep imports them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <future>
#include <iomanip>
#include <regex>
#include <sstream>
#include <thread>

#include "cluster_test_support.hpp"
#include "job_support.hpp"
#include "lockstep_install.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::run_capture;
using lockstep::test::cluster_kubectl;
using lockstep::test::cluster_setting;
using lockstep::test::create_test_namespace;
using lockstep::test::eventually;
using lockstep::test::kOperatorNamespace;
using lockstep::test::real_cluster;

namespace {

const std::string kIsolated = "isolated";  // spec.isolation NetworkPolicy
const std::string kOpen = "open";          // the same job, spec.isolation None
const int kMasterPort = 29500;             // spec.masterPort's default
const int kBarrierPort = kMasterPort + 1;  // the agents' restart barrier
const int kMetricsPort = 9400;             // spec.metrics.port's default
// Enough steps that both jobs still train when the probes are done, so that the ports listen:
// 1,500 took 53 s here with the four pods sharing two cores (job_yaml), the probes under 30 s;
// 2,500 leave that margin on a machine with a core for each pod.
const int kSteps = 2500;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string tail(const std::string& s, size_t n) { return s.size() <= n ? s : "..." + s.substr(s.size() - n); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fixed1(double v) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << v;
  return o.str();
}

json get_json(const std::string& ns, const std::string& object) {
  auto r = cluster_kubectl({"-n", ns, "get", object, "-o", "json"});
  size_t from = r.output.find('{'), to = r.output.rfind('}');
  if (!r.status.success() || from == std::string::npos || to == std::string::npos || to < from) return json();
  json j = json::parse(r.output.substr(from, to - from + 1), nullptr, false);
  return j.is_discarded() ? json() : j;
}

json job_status(const std::string& ns, const std::string& job) {
  json j = get_json(ns, "trainingjob/" + job);
  return j.is_object() && j.contains("status") ? j["status"] : json::object();
}

std::string phase(const std::string& ns, const std::string& job) { return job_status(ns, job).value("phase", ""); }

std::string progress_steps(const std::string& ns, const std::string& job) {
  json s = job_status(ns, job);
  return s.contains("progress") && s["progress"].is_object() ? s["progress"].value("steps", "") : "";
}

// A small CPU job modelled on examples/ddp.yaml: 2 pods of 1 rank each, so every collective
// crosses the pod network, with requests small enough that two such jobs and the operator fit
// on the cluster's 2-core node (one OpenMP thread a worker), and no CPU limit. With a limit as
// small as the request (250m), a healthy job was named a straggler even with the machine to
// itself (Note [Cluster cases on a quiet machine] in tests/cluster/CMakeLists.txt): rank 0,
// whose pod at its quota also serves the rendezvous store and node 0's agent, 1.69x and then
// 3.33x (a full run of the suite here, 2026-11-30); beside the other lane, rank 1 at 1.54x (CI).
std::string job_yaml(const std::string& name, const std::string& isolation) {
  return "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: " + name + "}\n"
         "spec:\n"
         "  nodes: 2\n  procsPerNode: 1\n  strategy: DDP\n  isolation: " + isolation + "\n"
         "  template:\n    spec:\n      containers:\n      - name: trainer\n        image: lockstep/trainer:0.1.0\n"
         "        resources:\n          requests: {cpu: 250m, memory: 1Gi}\n          limits: {memory: 4Gi}\n"
         "  trainer:\n    command: [lockstep-trainer]\n"
         "    args: [--model=tiny, --device=cpu, --data=synthetic, --steps=" + std::to_string(kSteps) + ", --batch-size=8]\n"
         "  runPolicy: {backoffLimit: 2, restartPolicy: OnFailure}\n";
}

// A pod of another namespace, with nothing to do with any job: the nettest image
// (tests/cluster/images/nettest.c) serving a port of its own, so it idles until deleted.
std::string stranger_yaml() {
  return "apiVersion: v1\nkind: Pod\nmetadata: {name: stranger}\nspec:\n  terminationGracePeriodSeconds: 1\n"
         "  containers:\n  - name: nettest\n    image: " + cluster_setting("NETTEST_IMAGE") +
         "\n    imagePullPolicy: Never\n    args: [serve, \"8080\"]\n";
}

// One TCP connection attempt from inside a pod, through `kubectl exec`.
struct Probe {
  std::string from, to;
  bool connected = false;
  double seconds = 0;  // the whole kubectl exec
  std::string output;
  std::string line() const {
    std::string said = trim(output);
    for (size_t at; (at = said.find('\n')) != std::string::npos;) said.replace(at, 1, "; ");
    return from + " -> " + to + ": " + (connected ? "connected" : "NOT connected") + " (" + fixed1(seconds) + " s: " +
           said + ")";
  }
};

// From the stranger: nettest connect, which gives up after 5 s (SO_SNDTIMEO) and prints why.
Probe probe_from_stranger(const std::string& ns, const std::string& ip, int port) {
  Probe p;
  p.from = ns + "/stranger";
  p.to = ip + ":" + std::to_string(port);
  auto t0 = std::chrono::steady_clock::now();
  auto r = cluster_kubectl({"-n", ns, "exec", "stranger", "--", "/nettest", "connect", ip, std::to_string(port)}, "", 60s);
  p.seconds = seconds_since(t0);
  p.output = r.output;
  p.connected = r.status.success() && r.output.find("connected to " + p.to) != std::string::npos;
  return p;
}

// From a pod of the job (the trainer image's bash): the same connection, the same moment.
Probe probe_from_job_pod(const std::string& ns, const std::string& pod, const std::string& ip, int port) {
  Probe p;
  p.from = ns + "/" + pod;
  p.to = ip + ":" + std::to_string(port);
  auto t0 = std::chrono::steady_clock::now();
  auto r = cluster_kubectl({"-n", ns, "exec", pod, "-c", "trainer", "--", "timeout", "10", "bash", "-c",
                            "exec 3<>\"/dev/tcp/$0/$1\" && echo \"connected to $0:$1\"", ip, std::to_string(port)},
                           "", 60s);
  p.seconds = seconds_since(t0);
  p.output = r.output;
  p.connected = r.status.success() && r.output.find("connected to " + p.to) != std::string::npos;
  return p;
}

// A connection the policy dropped: no answer at all, until nettest's 5 s timeout; not a
// refusal (a port nobody listens on answers at once with a reset).
bool dropped(const Probe& p) {
  return !p.connected && p.seconds >= 4.5 && p.output.find("refused") == std::string::npos &&
         p.output.find("in progress") != std::string::npos;
}

std::string controller_log() {
  return lockstep::test::read_file(lockstep::test::real_cluster_state_dir() + "/run/logs/kube-network-policies.log");
}

// The controller's log lines (--v=2) for the first packet it judged from pod `from` to pod `to`
// (namespace/name): "Evaluating packet", the packet itself ("[id] src:port dst:port proto"),
// and its lines for that id (the policies it weighed, its verdict); "" when there is none.
std::string stranger_packet_in_log(const std::string& from, const std::string& to) {
  std::istringstream log(controller_log());
  std::vector<std::string> lines;
  for (std::string l; std::getline(log, l);) lines.push_back(l);
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i].find("\"Evaluating packet\" srcPod=\"" + from + "\" dstPod=\"" + to + "\"") == std::string::npos) continue;
    std::string out = "  " + lines[i] + "\n  " + lines[i + 1] + "\n";
    std::smatch m;
    const std::string packet = lines[i + 1];
    if (!std::regex_search(packet, m, std::regex(R"(\[([0-9]+)\])"))) return out;
    const std::string id = " id=" + m[1].str() + " ";
    for (size_t j = i + 2; j < lines.size() && j < i + 40; ++j)
      if (lines[j].find(id) != std::string::npos) out += "  " + lines[j] + "\n";
    return out;
  }
  return "";
}

// What the controller's log (--v=2) says it judged: one entry per packet it was handed (the
// first packet of a connection, and its retries), with the pods it found for both ends
// ("none" for an address that is no pod's) and its verdict.
struct Judged {
  std::string src_pod, dst_pod, proto, verdict;
  int dst_port = 0;
};
std::vector<Judged> judged_packets() {
  std::istringstream log(controller_log());
  std::vector<std::string> lines;
  for (std::string l; std::getline(log, l);) lines.push_back(l);
  static const std::regex finished(R"re("Finished syncing packet" id=([0-9]+) .*verdict="([a-z]+)")re");
  static const std::regex evaluating(R"re("Evaluating packet" srcPod="([^"]*)" dstPod="([^"]*)")re");
  static const std::regex packet(R"re(\[([0-9]+)\] [0-9.]+:[0-9]+ [0-9.]+:([0-9]+) ([A-Z]+))re");
  std::map<std::string, std::string> verdict;
  std::smatch m;
  for (const auto& l : lines)
    if (std::regex_search(l, m, finished)) verdict[m[1]] = m[2];
  std::vector<Judged> out;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    std::smatch e, p;
    if (!std::regex_search(lines[i], e, evaluating) || !std::regex_search(lines[i + 1], p, packet)) continue;
    Judged j;
    j.src_pod = e[1];
    j.dst_pod = e[2];
    j.dst_port = std::stoi(p[2]);
    j.proto = p[3];
    j.verdict = verdict.count(p[1]) ? verdict[p[1]] : "?";
    out.push_back(j);
  }
  return out;
}

// The controller's verdicts so far (kube_network_policies_packet_count, by verdict); empty when
// its /metrics does not answer.
std::map<std::string, double> verdicts() {
  std::map<std::string, double> out;
  int port = std::stoi(cluster_setting("NETPOL_METRICS_PORT"));
  auto r = run_capture({"curl", "-sf", "http://127.0.0.1:" + std::to_string(port) + "/metrics"}, {}, 20s);
  if (!r.status.success()) return out;
  static const std::regex line(R"re(^kube_network_policies_packet_count\{([^}]*)\} ([0-9.e+]+)$)re");
  static const std::regex verdict(R"re(verdict="([a-z]+)")re");
  std::istringstream in(r.output);
  for (std::string l; std::getline(in, l);) {
    std::smatch m, v;
    if (std::regex_match(l, m, line)) {
      std::string labels = m[1];
      if (std::regex_search(labels, v, verdict)) out[v[1]] += std::stod(m[2]);
    }
  }
  out["scraped"] = 1;
  return out;
}

// What the test leaves, taken away however it ends: both namespaces (and the jobs in them).
struct Leftovers {
  std::string job_ns, stranger_ns;
  ~Leftovers() {
    if (!real_cluster()) return;
    // The controller's log goes with the cluster's run directory at down: keep it for a failure.
    if (::testing::Test::HasFailure()) {
      std::string kept = lockstep::test::real_cluster_state_dir() + "/isolation-test-kube-network-policies.log";
      std::error_code ec;
      std::filesystem::copy_file(lockstep::test::real_cluster_state_dir() + "/run/logs/kube-network-policies.log", kept,
                                 std::filesystem::copy_options::overwrite_existing, ec);
      std::cerr << "[cluster] the controller's log: " << (ec ? "not kept: " + ec.message() : kept) << "\n";
    }
    auto t0 = std::chrono::steady_clock::now();
    for (const auto* job : {&kOpen, &kIsolated})
      if (!job_ns.empty()) cluster_kubectl({"-n", job_ns, "delete", "trainingjob", *job, "--ignore-not-found", "--wait=true"}, "", 120s);
    bool deleted = true;
    for (const auto* ns : {&job_ns, &stranger_ns})
      if (!ns->empty()) deleted &= cluster_kubectl({"delete", "namespace", *ns, "--wait=true"}, "", 180s).status.success();
    std::cerr << "[cluster] namespaces " << job_ns << " and " << stranger_ns << (deleted ? " deleted in " : " NOT all deleted, ")
              << fixed1(seconds_since(t0)) << " s\n";
  }
};

// The controller is what this suite is about: its binary and its queue.
std::string controller_problem() {
  const std::string bin = cluster_setting("NETPOL_BIN") + "/kube-network-policies";
  if (!std::filesystem::exists(bin)) return bin + " not found (scripts/setup.sh builds it)";
  return "";
}

class IsolationInCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!real_cluster() || !controller_problem().empty()) return;
    // progressPeriod 2s: the operator reads rank 0's /metrics every 2 s, through the policy.
    problem_ = lockstep::test::install_lockstep({"replicas=1", "progressPeriod=2s"}, &install_seconds_);
    if (problem_.empty()) std::cerr << "[cluster] helm install: operator ready in " << fixed1(install_seconds_) << " s\n";
  }

  void SetUp() override {
    if (std::string missing = controller_problem(); !missing.empty()) {
      if (lockstep::test::env_or("LOCKSTEP_REQUIRE_ALL", "") == "1") FAIL() << "the NetworkPolicy controller " << missing;
      GTEST_SKIP() << "SKIPPED: the NetworkPolicy controller " << missing;
    }
    LOCKSTEP_REQUIRE_REAL_CLUSTER();
    ASSERT_TRUE(problem_.empty()) << problem_;
  }

  static std::string problem_;
  static double install_seconds_;
};

std::string IsolationInCluster::problem_;
double IsolationInCluster::install_seconds_ = 0;

TEST_F(IsolationInCluster, AStrangerIsDroppedWhileTheIsolatedJobTrainsToSucceeded) {
  // The controller runs, holds its queue, and answers on /metrics.
  auto status = real_cluster()->script({"status"});
  ASSERT_TRUE(status.status.success()) << status.output;
  std::string netpol_line;
  for (std::istringstream in(status.output); std::getline(in, netpol_line);)
    if (netpol_line.rfind("netpol:", 0) == 0) break;
  ASSERT_EQ(netpol_line.rfind("netpol:", 0), 0u) << status.output;
  ASSERT_EQ(netpol_line.find("NOT BOUND"), std::string::npos) << netpol_line << "\n" << tail(controller_log(), 3000);
  auto before = verdicts();
  ASSERT_TRUE(before.count("scraped")) << "the controller's /metrics does not answer\n" << tail(controller_log(), 3000);
  std::cerr << "[cluster] " << netpol_line << "\n";

  Leftovers left;
  left.job_ns = create_test_namespace("isolation");
  left.stranger_ns = create_test_namespace("stranger");
  const std::string ns = left.job_ns, stranger_ns = left.stranger_ns;
  auto diagnose = [&] {
    std::string out = cluster_kubectl({"-n", ns, "describe", "trainingjobs"}).output;
    out += cluster_kubectl({"-n", ns, "get", "pods,networkpolicies", "-o", "wide"}).output;
    out += cluster_kubectl({"-n", stranger_ns, "get", "pods", "-o", "wide"}).output;
    for (const auto& pod : {kIsolated + "-0", kIsolated + "-1"})
      out += tail(cluster_kubectl({"-n", ns, "logs", pod, "--tail", "20"}).output, 2000);
    out += cluster_kubectl({"-n", kOperatorNamespace, "logs", "deploy/lockstep-operator", "--tail", "30"}).output;
    out += "kube-network-policies log:\n" + tail(controller_log(), 3000);
    return out;
  };

  auto applied = cluster_kubectl({"-n", stranger_ns, "apply", "-f", "-"}, stranger_yaml());
  ASSERT_TRUE(applied.status.success()) << applied.output;
  const auto t0 = std::chrono::steady_clock::now();
  applied = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, job_yaml(kIsolated, "NetworkPolicy") + "---\n" + job_yaml(kOpen, "None"));
  ASSERT_TRUE(applied.status.success()) << applied.output;
  ASSERT_EQ(lockstep::test::wait_pods_ready(stranger_ns, {"stranger"}), "");

  // The operator's policy for the isolated job (Note [Job isolation]); none for the open one.
  json policy;
  ASSERT_TRUE(eventually([&] { return (policy = get_json(ns, "networkpolicy/" + kIsolated)).is_object(); }, 60s))
      << diagnose();
  const double policy_seconds = seconds_since(t0);
  const std::string policy_uid = policy["metadata"].value("uid", "");
  EXPECT_EQ(policy["spec"]["podSelector"]["matchLabels"].value("lockstep.dev/job-name", ""), kIsolated) << policy.dump(1);
  EXPECT_EQ(policy["spec"]["policyTypes"], json::array({"Ingress"})) << policy.dump(1);
  EXPECT_TRUE(get_json(ns, "networkpolicy/" + kOpen).is_null()) << "the open job has a NetworkPolicy";

  // Both train: the operator read each rank 0's /metrics (the isolated one's through its policy).
  std::map<std::string, double> first_step;
  ASSERT_TRUE(eventually([&] {
    for (const auto& job : {kIsolated, kOpen}) {
      if (first_step.count(job)) continue;
      std::string steps = progress_steps(ns, job);
      if (phase(ns, job) == "Running" && !steps.empty() && steps.rfind("0/", 0) != 0) first_step[job] = seconds_since(t0);
    }
    if (first_step.size() == 2) return true;
    std::this_thread::sleep_for(500ms);
    return false;
  }, 300s)) << "no progress read from both jobs' rank 0\n" << diagnose();
  std::cerr << "[cluster] isolated job: NetworkPolicy " << fixed1(policy_seconds) << " s after apply, its first step read by "
            << "the operator (status.progress " << progress_steps(ns, kIsolated) << ") at " << fixed1(first_step[kIsolated])
            << " s; open job's at " << fixed1(first_step[kOpen]) << " s\n";

  auto pod_ip = [&](const std::string& pod) { return get_json(ns, "pod/" + pod)["status"].value("podIP", ""); };
  const std::string isolated_ip = pod_ip(kIsolated + "-0"), open_ip = pod_ip(kOpen + "-0");
  ASSERT_FALSE(isolated_ip.empty() || open_ip.empty()) << diagnose();

  // All at once: the stranger to both jobs' pod 0 on the master and barrier ports, and the
  // isolated job's pod 1 to its own pod 0 on the same ports.
  auto mid = verdicts();
  std::vector<std::future<Probe>> running;
  for (int port : {kMasterPort, kBarrierPort}) {
    running.push_back(std::async(std::launch::async, probe_from_stranger, stranger_ns, isolated_ip, port));
    running.push_back(std::async(std::launch::async, probe_from_stranger, stranger_ns, open_ip, port));
    running.push_back(std::async(std::launch::async, probe_from_job_pod, ns, kIsolated + "-1", isolated_ip, port));
  }
  std::vector<Probe> probes;
  for (auto& f : running) probes.push_back(f.get());
  // A connection the stranger should have made, tried again (twice at most) before it counts
  // as failed: once in six runs on a loaded machine one timed out although the controller
  // dropped none of its packets (its drop count was the isolated probes' alone), which says
  // nothing about the policy. A connection it should not make is never retried: one is enough.
  for (size_t i = 1; i < probes.size(); i += 3)
    for (int attempt = 2; attempt <= 3 && !probes[i].connected; ++attempt) {
      std::cerr << "[cluster] " << probes[i].line() << "; trying again (attempt " << attempt << " of 3)\n";
      probes[i] = probe_from_stranger(stranger_ns, open_ip, i < 3 ? kMasterPort : kBarrierPort);
    }
  auto after = verdicts();
  // The ports listened all along: both jobs still train.
  const std::string isolated_phase = phase(ns, kIsolated), open_phase = phase(ns, kOpen);

  for (const auto& p : probes) std::cerr << "[cluster] " << p.line() << "\n";
  for (size_t i = 0; i < probes.size(); i += 3) {
    const Probe &to_isolated = probes[i], &to_open = probes[i + 1], &own = probes[i + 2];
    EXPECT_TRUE(dropped(to_isolated)) << "the stranger was not dropped by the isolated job's policy: " << to_isolated.line()
                                      << "\n" << diagnose();
    EXPECT_TRUE(to_open.connected) << "the stranger could not reach the job without isolation: " << to_open.line();
    EXPECT_TRUE(own.connected) << "the job's own pod could not reach its pod 0: " << own.line();
  }
  EXPECT_EQ(isolated_phase, "Running") << "the isolated job stopped training during the probes (raise kSteps)\n" << diagnose();
  EXPECT_EQ(open_phase, "Running") << "the open job stopped training during the probes (raise kSteps)\n" << diagnose();
  // #40: the chart's own NetworkPolicy for the operator, on by default, admits no pod to its
  // :8080 (no monitoringNamespace here) while the kubelet's probes still keep it Ready (helm
  // --wait saw it Ready; it still is).
  auto listed = cluster_kubectl({"-n", kOperatorNamespace, "get", "pods", "-l", "app.kubernetes.io/name=lockstep-operator", "-o", "json"});
  json operator_pods = json::parse(listed.output.substr(std::min(listed.output.find('{'), listed.output.size())), nullptr, false);
  ASSERT_TRUE(operator_pods.is_object() && !operator_pods["items"].empty()) << diagnose();
  const json& operator_pod = operator_pods["items"][0];
  const std::string operator_ip = operator_pod["status"].value("podIP", "");
  ASSERT_FALSE(operator_ip.empty());
  Probe to_operator = probe_from_stranger(stranger_ns, operator_ip, 8080);
  std::cerr << "[cluster] " << to_operator.line() << "\n";
  EXPECT_TRUE(dropped(to_operator)) << "the chart's NetworkPolicy did not keep the stranger from the operator's :8080: "
                                    << to_operator.line();
  bool operator_ready = false;
  for (const auto& c : operator_pod["status"].value("conditions", json::array()))
    operator_ready |= c.value("type", "") == "Ready" && c.value("status", "") == "True";
  EXPECT_TRUE(operator_ready) << "the operator's probes pass under its own policy: " << operator_pod["status"].dump();
  EXPECT_TRUE(get_json(kOperatorNamespace, "networkpolicy/lockstep-operator").is_object()) << "the chart's default";

  // The controller judged them: at least the stranger's two SYNs dropped (with their retries).
  ASSERT_TRUE(mid.count("scraped") && after.count("scraped")) << "the controller's /metrics stopped answering";
  const double drops = after["drop"] - mid["drop"], accepts = after["accept"] - mid["accept"];
  EXPECT_GE(drops, 2) << "kube_network_policies_packet_count{verdict=\"drop\"} rose by " << drops;
  std::cerr << "[cluster] the controller's verdicts while probing: " << static_cast<long>(drops) << " packets dropped, "
            << static_cast<long>(accepts) << " accepted (kube_network_policies_packet_count)\n";
  // Its reasoning for one of the stranger's packets, from its log (--v=2).
  const std::string judged = stranger_packet_in_log(stranger_ns + "/stranger", ns + "/" + kIsolated + "-0");
  std::cerr << "[cluster] the controller on a packet of the stranger's:\n" << judged;
  EXPECT_NE(judged.find("verdict=\"drop\""), std::string::npos) << "no drop of the stranger's packets in its log:\n"
                                                                 << judged << tail(controller_log(), 3000);

  // The open job has served its purpose; the isolated one trains on to the end under its policy.
  cluster_kubectl({"-n", ns, "delete", "trainingjob", kOpen, "--wait=true"}, "", 120s);
  ASSERT_TRUE(eventually([&] {
    std::this_thread::sleep_for(1s);
    std::string p = phase(ns, kIsolated);
    return p == "Succeeded" || p == "Failed";
  }, 600s)) << diagnose();
  const double succeeded_seconds = seconds_since(t0);
  json st = job_status(ns, kIsolated);
  ASSERT_EQ(st.value("phase", ""), "Succeeded") << st.dump(1) << "\n" << diagnose();
  EXPECT_TRUE(lockstep::test::no_straggler_verdict(ns, kIsolated));
  EXPECT_EQ(st["nodes"].value("succeeded", -1), 2) << st.dump();
  EXPECT_EQ(st.value("restarts", -1), 0) << st.dump();
  EXPECT_EQ(st.value("inPlaceRestarts", 0), 0) << st.dump();
  EXPECT_EQ(st["progress"].value("steps", ""), std::to_string(kSteps) + "/" + std::to_string(kSteps)) << st.dump();
  // The same policy object all along: never deleted and made again.
  EXPECT_EQ(get_json(ns, "networkpolicy/" + kIsolated)["metadata"].value("uid", ""), policy_uid);
  // Pod 1 met the master by name; the ranks trained together over the pod network.
  auto agent1 = cluster_kubectl({"-n", ns, "logs", kIsolated + "-1"});
  EXPECT_NE(agent1.output.find("master address '" + kIsolated + "-0." + kIsolated + "." + ns + ".svc' resolved to 10.244."),
            std::string::npos)
      << tail(agent1.output, 3000);
  // What the controller let through between the job's pods and from the operator: the master
  // port (rank 1's store client), the barrier (node 1's agent), Gloo's ephemeral ports (each
  // pair of ranks), the metrics port (the operator); none of it dropped.
  std::map<std::string, int> accepted, refused, drops_by_pair;
  const std::string pod0 = ns + "/" + kIsolated + "-0", pod1 = ns + "/" + kIsolated + "-1";
  for (const auto& j : judged_packets()) {
    if (j.verdict == "drop") ++drops_by_pair[j.src_pod + " -> " + j.dst_pod + ":" + std::to_string(j.dst_port) + "/" + j.proto];
    bool internal = (j.src_pod == pod0 && j.dst_pod == pod1) || (j.src_pod == pod1 && j.dst_pod == pod0);
    bool from_operator = j.src_pod.rfind(std::string(kOperatorNamespace) + "/", 0) == 0 &&
                         (j.dst_pod == pod0 || j.dst_pod == pod1);
    if (!internal && !from_operator) continue;
    std::string kind = from_operator ? (j.dst_port == kMetricsPort ? "metrics (operator)" : "other (operator)")
                       : j.dst_port == kMasterPort ? "master"
                       : j.dst_port == kBarrierPort ? "barrier"
                       : j.dst_port == kMetricsPort ? "metrics"
                       : "ephemeral";
    (j.verdict == "accept" ? accepted : refused)[kind]++;
  }
  std::string summary;
  for (const auto& [kind, n] : accepted) summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
  std::cerr << "[cluster] packets the controller judged and accepted for the isolated job's pods: " << summary << "\n";
  for (const char* kind : {"master", "barrier", "ephemeral", "metrics (operator)"})
    EXPECT_GE(accepted[kind], 1) << "no " << kind << " connection judged and accepted: " << summary;
  for (const auto& [pair, n] : drops_by_pair) std::cerr << "[cluster] dropped: " << n << " packets " << pair << "\n";
  EXPECT_TRUE(refused.empty()) << refused.size() << " kinds of the job's own connections dropped, e.g. "
                               << refused.begin()->first << "\n" << tail(controller_log(), 3000);

  auto end = verdicts();
  std::cerr << "[cluster] isolated job (2 pods x 1 rank, " << kSteps << " steps): apply -> Succeeded in "
            << fixed1(succeeded_seconds) << " s under its NetworkPolicy, restarts 0; the controller's verdicts since the "
            << "suite began: " << static_cast<long>(end["accept"] - before["accept"]) << " accepted, "
            << static_cast<long>(end["drop"] - before["drop"]) << " dropped\n";
  RecordProperty("isolated_apply_to_succeeded_seconds", fixed1(succeeded_seconds));
  // Leftovers: the jobs and both namespaces deleted.
}

// Last: down leaves nothing of the controller behind (the fixture's own leftover check looks at
// processes, iptables and the rest; the nftables table and the queue are looked at here).
TEST(IsolationDown, LeavesNoNetfilterStateBehind) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  if (std::string missing = controller_problem(); !missing.empty()) GTEST_SKIP() << "SKIPPED: " << missing;
  auto report = lockstep::test::bring_down_real_cluster();
  EXPECT_TRUE(report.script.status.success()) << report.script.output;
  std::string left;
  for (const auto& l : report.leftovers) left += "  " + l + "\n";
  EXPECT_TRUE(report.leftovers.empty()) << "left on the machine after down:\n" << left;
  const std::string bin = cluster_setting("NETPOL_BIN") + "/kube-network-policies";
  auto table = run_capture({bin, "-show-table", "-nftables-table", cluster_setting("NETPOL_TABLE")}, {}, 30s);
  EXPECT_TRUE(table.status.success()) << table.output;
  EXPECT_EQ(trim(table.output), "") << "the controller's nftables table is left";
  auto queues = lockstep::test::read_file("/proc/net/netfilter/nfnetlink_queue");
  std::istringstream in(queues);
  for (std::string l; std::getline(in, l);) {
    std::istringstream f(l);
    std::string q;
    f >> q;
    EXPECT_NE(q, cluster_setting("NETPOL_QUEUE")) << "its NFQUEUE is still bound: " << l;
  }
  auto ipt = run_capture({"sh", "-c", "iptables-save -t mangle"}, {}, 30s);
  EXPECT_EQ(ipt.output.find(cluster_setting("NETPOL_CHAIN")), std::string::npos) << ipt.output;
  auto check = run_capture({"bash", std::string(LOCKSTEP_SOURCE_DIR) + "/scripts/cluster.sh", "check-clean"},
                           {{"LOCKSTEP_CLUSTER_DIR", lockstep::test::real_cluster_state_dir()}}, 60s);
  EXPECT_TRUE(check.status.success()) << check.output;
}

}  // namespace

int main(int argc, char** argv) { return lockstep::test::run_tests_with_real_cluster(argc, argv); }
