// Several real nodes on one machine (#28): scripts/cluster.sh up --nodes 3.
//
// Each node is a kubelet with its own containerd, image store, cgroup, bridge and pod subnet
// (docs/development.md, "Several nodes and their faults"). Here:
//   - the three nodes are Ready, each with its own subnet, runtime and kubelet port;
//   - pods on different nodes find each other through cluster DNS and talk over the routes
//     between the nodes' bridges;
//   - a job's pods land one per node when the job asks for it, both ways it can ask
//     (spec.scheduling.onePodPerNode, or the rule in its template), and train to Succeeded
//     over the node boundaries;
//   - the node faults the script injects are what they claim: a frozen node is silent (a peer's
//     connection attempt gets no answer at all) and its processes are stopped, until thawed; a
//     node powered off has no process left, and comes back Ready when powered on.
// The environment's teardown then proves that down leaves nothing of three nodes behind.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <future>
#include <iomanip>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "cluster_test_support.hpp"
#include "job_support.hpp"
#include "lockstep_install.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using lockstep::test::cluster_kubectl;
using lockstep::test::cluster_setting;
using lockstep::test::create_test_namespace;
using lockstep::test::eventually;
using lockstep::test::real_cluster;
using lockstep::test::diagnose;
using lockstep::test::get_json;
using lockstep::test::trim;

namespace {

constexpr int kNodes = 3;
const std::vector<std::string> kNodeNames = {"lockstep-node", "lockstep-node-1", "lockstep-node-2"};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

using lockstep::test::in_nettest_pod;
using lockstep::test::jsonpath;
using lockstep::test::nettest_pod;

// The nettest pods' headless Service: pod NAME is NAME.peers in its namespace.
const std::string kPeersService = lockstep::test::nettest_service("peers");

// The process states (the third field of /proc/PID/stat) of a node's kubelet and containerd.
std::string daemon_state(const std::string& daemon) {
  std::string pid = trim(lockstep::test::read_file(lockstep::test::real_cluster_state_dir() + "/run/pids/" + daemon));
  if (pid.empty()) return "gone";
  std::string stat = lockstep::test::read_file("/proc/" + pid + "/stat");
  size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? "gone" : stat.substr(close + 2, 1);
}

bool node_ready(const std::string& node) {
  return trim(cluster_kubectl({"get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"})
                  .output) == "True";
}

// A tiny CPU job like examples/ddp.yaml, `nodes` pods of 1 rank each; `scheduling` and
// `affinity` are YAML put under spec.scheduling and the template's spec.
std::string job_yaml(const std::string& name, int nodes, const std::string& scheduling, const std::string& affinity) {
  return "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: " + name + "}\n"
         "spec:\n  nodes: " + std::to_string(nodes) + "\n  procsPerNode: 1\n  strategy: DDP\n" +
         (scheduling.empty() ? "" : "  scheduling: " + scheduling + "\n") +
         "  template:\n    spec:\n" + (affinity.empty() ? "" : "      affinity: " + affinity + "\n") +
         "      containers:\n      - name: trainer\n        image: lockstep/trainer:0.1.0\n"
         "        resources:\n          requests: {cpu: 100m, memory: 512Mi}\n          limits: {memory: 4Gi}\n"
         "  trainer:\n    command: [lockstep-trainer]\n"
         "    args: [--model=tiny, --device=cpu, --data=synthetic, --steps=30, --batch-size=8]\n"
         "  runPolicy: {backoffLimit: 1, restartPolicy: OnFailure}\n";
}

// bench/recovery's comparison: the operator without its node watch (--node-watch=false), as
// operators that wait for Kubernetes' eviction behave; the fault test then measures what that
// costs instead of asserting the watch's bounds.
bool watch_off() { return lockstep::test::env_or("LOCKSTEP_RECOVERY_NODE_WATCH", "on") == "off"; }
constexpr auto kWithoutWatchWait = std::chrono::seconds(180);

class NodesInCluster : public ::testing::Test {
 protected:
  // Once for the binary (NodeFaults, below, shares the installation).
  static void SetUpTestSuite() {
    if (!real_cluster() || installed_) return;
    installed_ = true;
    double seconds = 0;
    // One operator replica: the fault test keeps its node out of the faults (a real cluster runs
    // it on system nodes).
    std::vector<std::string> sets = {"replicas=1"};
    if (watch_off()) sets.push_back("nodeWatch=false");
    install_error_ = lockstep::test::install_lockstep(sets, &seconds);
    if (install_error_.empty()) std::cerr << "[cluster] Lockstep installed in " << std::fixed << std::setprecision(1) << seconds << " s\n";
  }
  static std::string install_error_;
  static bool installed_;
};
std::string NodesInCluster::install_error_;
bool NodesInCluster::installed_ = false;

TEST(NodesInClusterPlain, ThreeNodesAreReadyEachWithItsOwnSubnetRuntimeAndKubelet) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  auto names = real_cluster()->script({"nodes"});
  ASSERT_TRUE(names.status.success()) << names.output;
  EXPECT_EQ(trim(names.output), "lockstep-node\nlockstep-node-1\nlockstep-node-2");
  std::set<std::string> runtimes, ports;
  for (const auto& node : kNodeNames) {
    EXPECT_TRUE(node_ready(node)) << node;
    json n = get_json("", "node/" + node);
    ASSERT_TRUE(n.is_object()) << node;
    ports.insert(std::to_string(n["status"]["daemonEndpoints"]["kubeletEndpoint"].value("Port", 0)));
    EXPECT_EQ(n["status"]["nodeInfo"].value("containerRuntimeVersion", "").rfind("containerd://", 0), 0u) << node;
  }
  EXPECT_EQ(ports, (std::set<std::string>{"10250", "10350", "10450"}));
  // Each node its own containerd and kubelet, in the node's cgroup.
  for (const auto& d : {"containerd", "kubelet", "containerd-1", "kubelet-1", "containerd-2", "kubelet-2"})
    EXPECT_NE(daemon_state(d), "gone") << d;
  auto status = real_cluster()->script({"status"});
  EXPECT_TRUE(status.status.success()) << status.output;
  for (const auto& cidr : {"10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"})
    EXPECT_NE(status.output.find(cidr), std::string::npos) << status.output;
}

// The nettest pods of one namespace, one bound to each node: pod IPs from the node's own
// subnet, DNS names resolved by the one CoreDNS, TCP across the bridges both ways.
TEST(NodesInClusterPlain, PodsOnDifferentNodesResolveAndReachEachOther) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  auto ns = create_test_namespace("peers");
  std::string yaml = kPeersService;
  for (int i = 0; i < kNodes; ++i) yaml += "---\n" + nettest_pod("p" + std::to_string(i), "peers", kNodeNames[i]);
  auto apply = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, yaml);
  ASSERT_TRUE(apply.status.success()) << apply.output;
  ASSERT_EQ(lockstep::test::wait_pods_ready(ns, {"p0", "p1", "p2"}), "");
  for (int i = 0; i < kNodes; ++i) {
    std::string p = "p" + std::to_string(i);
    EXPECT_EQ(jsonpath(ns, "pod/" + p, "{.spec.nodeName}"), kNodeNames[i]);
    EXPECT_EQ(jsonpath(ns, "pod/" + p, "{.status.podIP}").rfind("10.244." + std::to_string(i) + ".", 0), 0u) << p;
  }
  for (int a = 0; a < kNodes; ++a)
    for (int b = 0; b < kNodes; ++b) {
      if (a == b) continue;
      std::string from = "p" + std::to_string(a), to = "p" + std::to_string(b);
      lockstep::RunResult r;
      // CoreDNS learns of new endpoints through its watch: allow it a moment.
      EXPECT_TRUE(eventually([&] {
        r = in_nettest_pod(ns, from, {"get", to + ".peers", "8080"});
        return trim(r.output) == "hello from " + to;
      }, 30s)) << from << " -> " << to << ": " << r.output;
    }
}

// scripts/cluster.sh node freeze / thaw / poweroff / poweron (Note [Node faults] in `scripts/cluster/faults.sh`).
TEST(NodesInClusterPlain, AFrozenNodeIsSilentUntilThawedAndAPoweredOffOneComesBackWhenPoweredOn) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  auto ns = create_test_namespace("faults");
  auto apply = cluster_kubectl({"-n", ns, "apply", "-f", "-"},
                               kPeersService + "---\n" + nettest_pod("a", "peers", kNodeNames[0]) + "---\n" + nettest_pod("b", "peers", kNodeNames[2]));
  ASSERT_TRUE(apply.status.success()) << apply.output;
  ASSERT_EQ(lockstep::test::wait_pods_ready(ns, {"a", "b"}), "");
  std::string ip_b = jsonpath(ns, "pod/b", "{.status.podIP}");
  ASSERT_EQ(trim(in_nettest_pod(ns, "a", {"get", ip_b, "8080"}).output), "hello from b");

  auto freeze = real_cluster()->script({"node", "freeze", kNodeNames[2]});
  ASSERT_TRUE(freeze.status.success()) << freeze.output;
  EXPECT_EQ(daemon_state("kubelet-2"), "T");
  EXPECT_EQ(daemon_state("containerd-2"), "T");
  EXPECT_EQ(daemon_state("kubelet-1"), "S") << "the other nodes run on";
  // Silence, not a reset: nettest's connect gives up after its own 5 s timeout.
  auto t0 = std::chrono::steady_clock::now();
  auto silent = in_nettest_pod(ns, "a", {"connect", ip_b, "8080"});
  double waited = seconds_since(t0);
  EXPECT_FALSE(silent.status.success()) << silent.output;
  EXPECT_EQ(silent.output.find("refused"), std::string::npos) << silent.output;
  EXPECT_GE(waited, 4.5) << "an answer came back: " << silent.output;
  std::cerr << "[cluster] to the frozen node: " << trim(silent.output) << " after " << std::fixed << std::setprecision(1)
            << waited << " s\n";

  auto thaw = real_cluster()->script({"node", "thaw", kNodeNames[2]});
  ASSERT_TRUE(thaw.status.success()) << thaw.output;
  EXPECT_NE(daemon_state("kubelet-2"), "T");
  EXPECT_EQ(trim(in_nettest_pod(ns, "a", {"get", ip_b, "8080"}).output), "hello from b") << "the same process, thawed";

  auto off = real_cluster()->script({"node", "poweroff", kNodeNames[2]});
  ASSERT_TRUE(off.status.success()) << off.output;
  EXPECT_EQ(daemon_state("kubelet-2"), "gone");
  EXPECT_EQ(daemon_state("containerd-2"), "gone");
  auto status = real_cluster()->script({"status"});
  EXPECT_TRUE(status.status.success()) << "a node powered off on purpose is not a broken cluster: " << status.output;
  EXPECT_NE(status.output.find("[off:"), std::string::npos) << status.output;

  auto on = real_cluster()->script({"node", "poweron", kNodeNames[2]}, 3min);
  ASSERT_TRUE(on.status.success()) << on.output;
  EXPECT_TRUE(eventually([] { return node_ready(kNodeNames[2]); }, 60s));
  // Its pod, whose sandbox the power cut took, runs again (a new sandbox, maybe a new address).
  EXPECT_EQ(lockstep::test::wait_pods_ready(ns, {"b"}, 120s), "");
  std::string ip_after;
  EXPECT_TRUE(eventually([&] {
    ip_after = jsonpath(ns, "pod/b", "{.status.podIP}");
    return !ip_after.empty() && trim(in_nettest_pod(ns, "a", {"get", ip_after, "8080"}).output) == "hello from b";
  }, 60s)) << ip_after;
}

// Placement (docs/trainingjob.md): both ways a job asks for one pod per node, at once.
TEST_F(NodesInCluster, AJobAskingOnePodPerNodeEitherWaySpreadsAndTrainsToSucceeded) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  ASSERT_EQ(install_error_, "");
  auto ns = create_test_namespace("spread");
  const std::string by_field = "by-field", by_template = "by-template";
  std::string yaml =
      job_yaml(by_field, 3, "{onePodPerNode: true}", "") + "---\n" +
      job_yaml(by_template, 2, "",
               "{podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: "
               "{lockstep.dev/job-name: " + by_template + "}}, topologyKey: kubernetes.io/hostname}]}}");
  auto t0 = std::chrono::steady_clock::now();
  auto apply = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, yaml);
  ASSERT_TRUE(apply.status.success()) << apply.output;

  // Where each job's pods run, read while they run (cleanPodPolicy Running removes them at the end).
  std::map<std::string, std::map<std::string, std::string>> placed;  // job -> pod -> node
  auto done = [&](const std::string& job) {
    std::string p = trim(cluster_kubectl({"-n", ns, "get", "trainingjob", job, "-o", "jsonpath={.status.phase}"}).output);
    return p == "Succeeded" || p == "Failed";
  };
  ASSERT_TRUE(eventually([&] {
    json pods = get_json(ns, "pods");
    if (pods.is_object())
      for (const auto& p : pods.value("items", json::array())) {
        std::string node = p["spec"].value("nodeName", "");
        std::string job = p["metadata"]["labels"].value("lockstep.dev/job-name", "");
        if (!node.empty() && !job.empty()) placed[job][p["metadata"].value("name", "")] = node;
      }
    if (done(by_field) && done(by_template)) return true;
    std::this_thread::sleep_for(1s);
    return false;
  }, 600s)) << cluster_kubectl({"-n", ns, "get", "trainingjobs,pods", "-o", "wide"}).output;
  std::cerr << "[cluster] both jobs finished " << std::fixed << std::setprecision(1) << seconds_since(t0)
            << " s after apply\n";

  for (const auto& [job, nodes] : std::map<std::string, int>{{by_field, 3}, {by_template, 2}}) {
    json st = get_json(ns, "trainingjob/" + job)["status"];
    EXPECT_EQ(st.value("phase", ""), "Succeeded") << job << ": " << st.dump(1);
    ASSERT_EQ(placed[job].size(), static_cast<size_t>(nodes)) << job;
    std::set<std::string> distinct;
    std::string where;
    for (const auto& [pod, node] : placed[job]) {
      distinct.insert(node);
      where += pod + " on " + node + "; ";
    }
    EXPECT_EQ(distinct.size(), static_cast<size_t>(nodes)) << job << ": " << where;
    std::cerr << "[cluster] " << job << ": " << where << "\n";
  }
}

// ---- #28 item 3: node faults while a job trains on 2 of the 3 nodes ---------------------------

// The node each pod of the job's current attempt is bound to (pods of other attempts and
// deleting ones left out).
std::map<int, std::string> gang_nodes(const std::string& ns, const std::string& job, int attempt) {
  std::map<int, std::string> out;
  json pods = get_json(ns, "pods");
  if (!pods.is_object()) return out;
  for (const auto& p : pods.value("items", json::array())) {
    const json labels = p["metadata"].value("labels", json::object());
    if (labels.value("lockstep.dev/job-name", "") != job || p["metadata"].contains("deletionTimestamp")) continue;
    if (labels.value("lockstep.dev/restart-attempt", "") != std::to_string(attempt)) continue;
    std::string node = p["spec"].value("nodeName", "");
    if (!node.empty()) out[std::atoi(labels.value("lockstep.dev/node-rank", "-1").c_str())] = node;
  }
  return out;
}

// The job's Events (reason: message), oldest first.
std::vector<std::string> job_events(const std::string& ns, const std::string& job) {
  std::vector<std::string> out;
  json events = get_json(ns, "events");
  for (const auto& e : events.value("items", json::array()))
    if (e["involvedObject"].value("name", "") == job) out.push_back(e.value("reason", "") + ": " + e.value("message", ""));
  return out;
}

std::set<std::string> nodes_of_operator() {
  std::set<std::string> out;
  json pods = get_json(lockstep::test::kOperatorNamespace, "pods");
  for (const auto& p : pods.value("items", json::array())) out.insert(p["spec"].value("nodeName", ""));
  return out;
}


// Each node fault of #28 is a test below, injected while one checkpointed job (2 pods, one per
// node) trains on 2 of the 3 nodes, on a node that holds one of its pods; the four share the
// job, which trains on from one to the next. After each, the gang must train again on healthy
// nodes, resumed from its newest checkpoint, and the job's Events must name the node. The time
// from the fault to rank 0's first step after the resume (DDP steps only when every rank takes
// part) is printed and written for bench/recovery. A frozen node is thawed once the gang trains
// elsewhere: its old ranks must stop without harm (no restart of the new gang, the checkpoint
// fence unchanged, none of their processes left); a node powered off is powered on again, a
// taint removed, a drained node uncordoned, so three nodes are there for the next fault.
struct Fault {
  std::string name;   // for the report
  int victim_rank;    // whose node it hits (the other's when that is the operator's node)
  std::function<void(const std::string& node)> inject, heal;
};

struct Survivor {  // the job the fault tests share
  std::string ns, job = "survivor", dir, error;
  bool started = false;
};
Survivor& survivor() {
  static Survivor s;
  return s;
}

// Starts the shared job once; "" when it runs.
std::string start_survivor() {
  Survivor& s = survivor();
  if (s.started) return s.error;
  s.started = true;
  s.ns = create_test_namespace("lost");
  s.dir = lockstep::test::real_cluster_state_dir() + "/run/volumes/" + s.ns + "/" + s.job;
  // As a test, held to a quarter of a core per pod, which leaves the other lane (Note [Two
  // lanes]) most of the CPU; bench/recovery measures it with the example's own resources.
  std::string yaml = lockstep::test::checkpoint_job(s.job, s.dir, 100000, 1, lockstep::test::recovery_bench() ? "" : "250m");
  yaml.replace(yaml.find("  template:"), 0, "  scheduling: {onePodPerNode: true}\n");
  auto r = cluster_kubectl({"-n", s.ns, "apply", "-f", "-"}, yaml);
  if (!r.status.success()) return s.error = "kubectl apply: " + r.output;
  if (!eventually([&] { return lockstep::test::phase(s.ns, s.job) == "Running"; }, 180s))
    return s.error = "the job did not run:\n" + diagnose(s.ns);
  return "";
}

void script(std::vector<std::string> args) {
  auto res = real_cluster()->script(args, 3min);
  EXPECT_TRUE(res.status.success()) << res.output;
}

void run_node_fault(const Fault& fault) {
  SCOPED_TRACE(fault.name);
  const std::string ns = survivor().ns, job = survivor().job, dir = survivor().dir;
  auto restarts = [&] { return lockstep::test::job_restarts(ns, job); };
  const int attempt = restarts();
  std::map<int, std::string> placed;
  ASSERT_TRUE(eventually([&] { return (placed = gang_nodes(ns, job, attempt)).size() == 2; }, 120s)) << diagnose(ns);
  EXPECT_NE(placed[0], placed[1]) << "onePodPerNode";
  // Past a checkpoint, so that the resume has one to start from, and mid-way to the next
  // (every 20 steps), so that the steps redone are those a fault costs on average.
  const int before = lockstep::test::latest_checkpoint(dir);
  ASSERT_TRUE(eventually([&] { return lockstep::test::latest_checkpoint(dir) > before; }, 120s)) << diagnose(ns);
  const int mid = lockstep::test::latest_checkpoint(dir) + 10;
  ASSERT_TRUE(eventually([&] { return lockstep::test::last_logged_step(dir + "/loss.txt") >= mid; }, 120s)) << diagnose(ns);
  // Not the operator's node: a pod of its Deployment on a dead node is replaced only after
  // eviction, so the fault would measure the operator's own outage (a real cluster runs it
  // on system nodes). The preferred rank otherwise.
  const std::set<std::string> operator_nodes = nodes_of_operator();
  int victim_rank = fault.victim_rank;
  if (operator_nodes.count(placed[victim_rank])) victim_rank = 1 - victim_rank;
  ASSERT_FALSE(operator_nodes.count(placed[victim_rank])) << "both pods share the operator's node";
  const std::string victim = placed[victim_rank];
  const int at_fault = lockstep::test::last_logged_step(dir + "/loss.txt");
  const int checkpoint = lockstep::test::latest_checkpoint(dir);
  const auto t_fault = std::chrono::system_clock::now();
  const auto t0 = std::chrono::steady_clock::now();
  fault.inject(victim);

  // The gang restarts, its new pods avoid the victim, and rank 0 steps again.
  std::map<int, std::string> moved;
  lockstep::test::Resume resumed;
  auto recovered = [&] {
    if (restarts() <= attempt) return false;
    moved = gang_nodes(ns, job, restarts());
    if (moved.size() != 2) return false;
    resumed = lockstep::test::resume_of(ns, job + "-0", t_fault);
    if (resumed.first_step_at) return true;
    std::this_thread::sleep_for(500ms);
    return false;
  };
  if (watch_off()) {
    // What waiting for Kubernetes costs: recovery, or none within kWithoutWatchWait; then
    // the node healed (thawed, powered on, ...) so that the job goes on to the next fault.
    bool in_time = eventually(recovered, kWithoutWatchWait);
    double took = in_time ? std::chrono::duration<double>(*resumed.first_step_at - t_fault).count() : -1;
    std::string stuck = cluster_kubectl({"-n", ns, "get", "pods", "-o", "wide"}).output;
    std::cerr << "[cluster] without the node watch, " << fault.name << " on " << victim << ": "
              << (in_time ? "every rank stepping again " + std::to_string(took) + " s after the fault"
                          : "no recovery within " + std::to_string(kWithoutWatchWait.count()) + " s; the pods then:\n" + stuck)
              << "\n";
    lockstep::test::report_recovery(fault.name + " [node watch off]", checkpoint, at_fault, in_time ? resumed.step : -1, took);
    if (fault.name.rfind("node frozen", 0) == 0) script({"node", "thaw", victim});
    else if (fault.heal) fault.heal(victim);
    ASSERT_TRUE(eventually(recovered, 300s)) << "no recovery after the node healed\n" << diagnose(ns);
    EXPECT_TRUE(eventually([&] { return node_ready(victim); }, 120s)) << diagnose(ns);
    return;
  }
  ASSERT_TRUE(eventually(recovered, 240s)) << diagnose(ns);
  double recovery = std::chrono::duration<double>(*resumed.first_step_at - t_fault).count();
  std::cerr << "[cluster] " << fault.name << " on " << victim << " (rank " << victim_rank << "): fault at step "
            << at_fault << ", resumed from checkpoint " << resumed.step << ", every rank stepping again "
            << std::fixed << std::setprecision(1) << recovery << " s after the fault (noticed and restarted: "
            << seconds_since(t0) << " s of the test's polling)\n";
  lockstep::test::report_recovery(fault.name, checkpoint, at_fault, resumed.step, recovery);
  for (const auto& [rank, node] : moved) EXPECT_NE(node, victim) << "rank " << rank << " back on the lost node";
  EXPECT_GE(resumed.step, checkpoint) << "resumed from an older checkpoint than the newest";
  std::string said;
  for (const auto& e : job_events(ns, job)) said += e + "\n";
  EXPECT_NE(said.find(victim), std::string::npos) << "no Event names the lost node " << victim << ":\n" << said;

  if (fault.name.rfind("node frozen", 0) == 0) {
    // The frozen node wakes up after the gang moved on: its old ranks stop without harm.
    const int now_attempt = restarts();
    const int steps_before_thaw = lockstep::test::last_logged_step(dir + "/loss.txt");
    script({"node", "thaw", victim});
    EXPECT_TRUE(eventually([&] { return lockstep::test::worker_pids(ns, job, victim_rank, "lockstep-trainer").size() <= 1; }, 60s));
    std::this_thread::sleep_for(15s);
    EXPECT_EQ(restarts(), now_attempt) << "the thawed ranks disturbed the new gang\n" << diagnose(ns);
    EXPECT_NE(lockstep::test::read_file(dir + "/FENCE").find("attempt " + std::to_string(now_attempt) + "\n"),
              std::string::npos)
        << "the checkpoint fence is the new gang's: " << lockstep::test::read_file(dir + "/FENCE");
    EXPECT_GT(lockstep::test::last_logged_step(dir + "/loss.txt"), steps_before_thaw) << "the new gang stopped training";
    EXPECT_TRUE(eventually([&] { return node_ready(victim); }, 90s)) << "the thawed node is Ready again";
  } else if (fault.heal) {
    fault.heal(victim);
    EXPECT_TRUE(eventually([&] { return node_ready(victim); }, 120s)) << diagnose(ns);
  }
}

class NodeFaults : public NodesInCluster {
 protected:
  void SetUp() override {
    LOCKSTEP_REQUIRE_REAL_CLUSTER();
    ASSERT_EQ(install_error_, "");
    ASSERT_EQ(start_survivor(), "");
  }
};

TEST_F(NodeFaults, AFrozenNodeIsNoticedInSecondsAndItsOldRanksStopWithoutHarmWhenItThaws) {
  run_node_fault({"node frozen (kubelet, runtime, containers stopped; its packets dropped)", 0,
                  [](const std::string& n) { script({"node", "freeze", n}); }, nullptr});
}

TEST_F(NodeFaults, APoweredOffNodeIsNoticedInSecondsAndTheGangTrainsOnTheOthers) {
  run_node_fault({"node powered off (every process of it killed; its packets dropped)", 1,
                  [](const std::string& n) { script({"node", "poweroff", n}); },
                  [](const std::string& n) { script({"node", "poweron", n}); }});
}

TEST_F(NodeFaults, ANoExecuteTaintOfAHealthControllerMovesTheGangAtOnce) {
  run_node_fault({"node tainted NoExecute by a health controller (example.com/gpu-health=failed)", 0,
                  [](const std::string& n) {
                    auto t = cluster_kubectl({"taint", "node", n, "example.com/gpu-health=failed:NoExecute"});
                    EXPECT_TRUE(t.status.success()) << t.output;
                  },
                  [](const std::string& n) { cluster_kubectl({"taint", "node", n, "example.com/gpu-health-"}); }});
}

TEST_F(NodeFaults, ADrainedNodeMovesTheGangToTheOthers) {
  auto drain = std::make_shared<std::future<lockstep::RunResult>>();
  run_node_fault({"node drained (kubectl drain: cordon, then evict)", 1,
                  [drain](const std::string& n) {
                    *drain = std::async(std::launch::async, [n] {
                      return cluster_kubectl(
                          {"drain", n, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=180s"}, "", 200s);
                    });
                  },
                  [drain](const std::string& n) {
                    if (drain->valid()) {
                      auto d = drain->get();
                      EXPECT_TRUE(d.status.success()) << d.output;
                    }
                    cluster_kubectl({"uncordon", n});
                  }});
}

}  // namespace

int main(int argc, char** argv) { return lockstep::test::run_tests_with_real_cluster(argc, argv, kNodes); }
