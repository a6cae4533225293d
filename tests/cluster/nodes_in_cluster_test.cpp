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
#include <iomanip>
#include <map>
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
using lockstep::test::get_json;
using lockstep::test::trim;

namespace {

constexpr int kNodes = 3;
const std::vector<std::string> kNodeNames = {"lockstep-node", "lockstep-node-1", "lockstep-node-2"};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string jsonpath(const std::string& ns, const std::string& object, const std::string& path) {
  return trim(cluster_kubectl({"-n", ns, "get", object, "-o", "jsonpath=" + path}).output);
}

// A nettest pod (tests/cluster/images/nettest.c) serving port 8080, bound to `node`.
std::string nettest_pod(const std::string& name, const std::string& node) {
  return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", labels: {app: nettest}}\nspec:\n"
         "  hostname: " + name + "\n  subdomain: peers\n  nodeName: " + node + "\n  terminationGracePeriodSeconds: 1\n"
         "  containers:\n  - name: nettest\n    image: " + cluster_setting("NETTEST_IMAGE") +
         "\n    imagePullPolicy: Never\n    args: [serve, \"8080\"]\n";
}

const std::string kPeersService =
    "apiVersion: v1\nkind: Service\nmetadata: {name: peers}\n"
    "spec: {clusterIP: None, selector: {app: nettest}, ports: [{name: tcp, port: 8080}]}\n";

lockstep::RunResult in_pod(const std::string& ns, const std::string& pod, std::vector<std::string> command) {
  std::vector<std::string> args = {"-n", ns, "exec", pod, "--", "/nettest"};
  args.insert(args.end(), command.begin(), command.end());
  return cluster_kubectl(args, "", 60s);
}

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

class NodesInCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!real_cluster()) return;
    double seconds = 0;
    install_error_ = lockstep::test::install_lockstep({}, &seconds);
    if (install_error_.empty()) std::cerr << "[cluster] Lockstep installed in " << std::fixed << std::setprecision(1) << seconds << " s\n";
  }
  static std::string install_error_;
};
std::string NodesInCluster::install_error_;

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
  for (int i = 0; i < kNodes; ++i) yaml += "---\n" + nettest_pod("p" + std::to_string(i), kNodeNames[i]);
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
        r = in_pod(ns, from, {"get", to + ".peers", "8080"});
        return trim(r.output) == "hello from " + to;
      }, 30s)) << from << " -> " << to << ": " << r.output;
    }
}

// scripts/cluster.sh node freeze / thaw / poweroff / poweron (Note [Node faults] there).
TEST(NodesInClusterPlain, AFrozenNodeIsSilentUntilThawedAndAPoweredOffOneComesBackWhenPoweredOn) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  auto ns = create_test_namespace("faults");
  auto apply = cluster_kubectl({"-n", ns, "apply", "-f", "-"},
                               kPeersService + "---\n" + nettest_pod("a", kNodeNames[0]) + "---\n" + nettest_pod("b", kNodeNames[2]));
  ASSERT_TRUE(apply.status.success()) << apply.output;
  ASSERT_EQ(lockstep::test::wait_pods_ready(ns, {"a", "b"}), "");
  std::string ip_b = jsonpath(ns, "pod/b", "{.status.podIP}");
  ASSERT_EQ(trim(in_pod(ns, "a", {"get", ip_b, "8080"}).output), "hello from b");

  auto freeze = real_cluster()->script({"node", "freeze", kNodeNames[2]});
  ASSERT_TRUE(freeze.status.success()) << freeze.output;
  EXPECT_EQ(daemon_state("kubelet-2"), "T");
  EXPECT_EQ(daemon_state("containerd-2"), "T");
  EXPECT_EQ(daemon_state("kubelet-1"), "S") << "the other nodes run on";
  // Silence, not a reset: nettest's connect gives up after its own 5 s timeout.
  auto t0 = std::chrono::steady_clock::now();
  auto silent = in_pod(ns, "a", {"connect", ip_b, "8080"});
  double waited = seconds_since(t0);
  EXPECT_FALSE(silent.status.success()) << silent.output;
  EXPECT_EQ(silent.output.find("refused"), std::string::npos) << silent.output;
  EXPECT_GE(waited, 4.5) << "an answer came back: " << silent.output;
  std::cerr << "[cluster] to the frozen node: " << trim(silent.output) << " after " << std::fixed << std::setprecision(1)
            << waited << " s\n";

  auto thaw = real_cluster()->script({"node", "thaw", kNodeNames[2]});
  ASSERT_TRUE(thaw.status.success()) << thaw.output;
  EXPECT_NE(daemon_state("kubelet-2"), "T");
  EXPECT_EQ(trim(in_pod(ns, "a", {"get", ip_b, "8080"}).output), "hello from b") << "the same process, thawed";

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
    return !ip_after.empty() && trim(in_pod(ns, "a", {"get", ip_after, "8080"}).output) == "hello from b";
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

}  // namespace

int main(int argc, char** argv) { return lockstep::test::run_tests_with_real_cluster(argc, argv, kNodes); }
