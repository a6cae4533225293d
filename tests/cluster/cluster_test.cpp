// The real-node cluster itself (scripts/cluster.sh): a Ready node, pods started by the real
// kubelet from an image with no registry, cluster DNS for headless Services, pod-to-pod TCP
// over the CNI bridge, in-cluster access to the API server, and a `down` that leaves nothing
// on the machine. Every pod runs the nettest image (tests/cluster/images/nettest.c).
#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <functional>
#include <set>
#include <sstream>

#include "cluster_test_support.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
using lockstep::test::cluster_kubectl;
using lockstep::test::cluster_setting;

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::set<std::string> lines(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.insert(l);
  return out;
}

using lockstep::test::in_nettest_pod;
using lockstep::test::jsonpath;
using lockstep::test::nettest_pod;
using lockstep::test::nettest_service;

TEST(Cluster, NodeIsReadyWithThePinnedVersions) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  auto node = cluster_kubectl({"get", "node", "lockstep-node", "-o",
                               "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} "
                               "{.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}"});
  ASSERT_TRUE(node.status.success()) << node.output;
  std::istringstream f(node.output);
  std::string ready, kubelet, runtime;
  f >> ready >> kubelet >> runtime;
  EXPECT_EQ(ready, "True");
  EXPECT_EQ(kubelet, cluster_setting("KUBERNETES_VERSION"));
  EXPECT_EQ(runtime.rfind("containerd://1.6", 0), 0u) << runtime;

  // up on a cluster that is up says so and changes nothing.
  auto again = lockstep::test::real_cluster()->script({"up"});
  EXPECT_TRUE(again.status.success()) << again.output;
  EXPECT_NE(again.output.find("already up"), std::string::npos) << again.output;
  auto status = lockstep::test::real_cluster()->script({"status"});
  EXPECT_TRUE(status.status.success()) << status.output;
  EXPECT_NE(status.output.find(lockstep::test::real_cluster()->kubeconfig()), std::string::npos) << status.output;
  std::cerr << status.output;
}

TEST(Cluster, PodRunsOnTheKubeletWithAServiceAccountToken) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  auto ns = lockstep::test::create_test_namespace("pod");
  auto apply = cluster_kubectl({"-n", ns, "apply", "-f", "-"}, nettest_pod("server"));
  ASSERT_TRUE(apply.status.success()) << apply.output;
  auto not_ready = lockstep::test::wait_pods_ready(ns, {"server"});
  ASSERT_EQ(not_ready, "");

  EXPECT_EQ(jsonpath(ns, "pod/server", "{.spec.nodeName}"), "lockstep-node");
  EXPECT_EQ(jsonpath(ns, "pod/server", "{.status.containerStatuses[0].containerID}").rfind("containerd://", 0), 0u);
  EXPECT_EQ(jsonpath(ns, "pod/server", "{.status.podIP}").rfind("10.244.0.", 0), 0u);
  auto logs = cluster_kubectl({"-n", ns, "logs", "server"});
  EXPECT_NE(logs.output.find("nettest: serving on port 8080 as server"), std::string::npos) << logs.output;

  // ServiceAccount admission mounted a token, and the API server accepts what it signed.
  auto token = in_nettest_pod(ns, "server", {"cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"});
  ASSERT_TRUE(token.status.success()) << token.output;
  auto whoami = lockstep::run_capture(
      {cluster_setting("TOOLS_BIN") + "/kubectl", "--kubeconfig=/dev/null", "--server=https://127.0.0.1:16443",
       "--certificate-authority=" + lockstep::test::real_cluster()->ca_file(), "--token=" + trim(token.output),
       "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"},
      {}, 30s);
  EXPECT_EQ(trim(whoami.output), "system:serviceaccount:" + ns + ":default");
}

TEST(Cluster, HeadlessServiceNamesResolveToPodIPsAndPodsTalkOverTcp) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  auto ns = lockstep::test::create_test_namespace("dns");
  auto apply = cluster_kubectl({"-n", ns, "apply", "-f", "-"},
                               nettest_service("workers") + "---\n" + nettest_pod("worker-0", "workers") + "---\n" +
                                   nettest_pod("worker-1", "workers"));
  ASSERT_TRUE(apply.status.success()) << apply.output;
  ASSERT_EQ(lockstep::test::wait_pods_ready(ns, {"worker-0", "worker-1"}), "");
  std::string ip0 = jsonpath(ns, "pod/worker-0", "{.status.podIP}");
  std::string ip1 = jsonpath(ns, "pod/worker-1", "{.status.podIP}");
  ASSERT_NE(ip0, ip1);

  // The full name, the short one through the pod's search path, and the Service's own name.
  // CoreDNS learns of the endpoints through a watch: allow it a moment.
  std::string fqdn = "worker-0.workers." + ns + ".svc.cluster.local";
  EXPECT_TRUE(lockstep::test::eventually([&] { return trim(in_nettest_pod(ns, "worker-1", {"resolve", fqdn}).output) == ip0; }, 30s))
      << in_nettest_pod(ns, "worker-1", {"resolve", fqdn}).output;
  EXPECT_EQ(trim(in_nettest_pod(ns, "worker-1", {"resolve", "worker-0.workers"}).output), ip0);
  EXPECT_EQ(trim(in_nettest_pod(ns, "worker-0", {"resolve", "worker-1.workers"}).output), ip1);
  EXPECT_EQ(lines(in_nettest_pod(ns, "worker-0", {"resolve", "workers"}).output), (std::set<std::string>{ip0, ip1}));

  // Both ways over the CNI bridge, by DNS name.
  auto hello = in_nettest_pod(ns, "worker-1", {"get", "worker-0.workers", "8080"});
  EXPECT_TRUE(hello.status.success()) << hello.output;
  EXPECT_EQ(trim(hello.output), "hello from worker-0");
  hello = in_nettest_pod(ns, "worker-0", {"get", "worker-1.workers." + ns + ".svc.cluster.local", "8080"});
  EXPECT_EQ(trim(hello.output), "hello from worker-1");
}

TEST(Cluster, PodsReachTheApiServerThroughItsClusterIP) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  auto ns = lockstep::test::create_test_namespace("api");
  ASSERT_TRUE(cluster_kubectl({"-n", ns, "apply", "-f", "-"}, nettest_pod("client")).status.success());
  ASSERT_EQ(lockstep::test::wait_pods_ready(ns, {"client"}), "");
  // What in-cluster configuration uses: kubernetes.default.svc, through kube-proxy's rules.
  auto c = in_nettest_pod(ns, "client", {"connect", "kubernetes.default.svc", "443"});
  EXPECT_TRUE(c.status.success()) << c.output;
  EXPECT_EQ(trim(c.output), "connected to 10.96.0.1:443");
}

// The leftover check itself sees what a careless down would leave (so its silence means something).
TEST(Cluster, LeftoverCheckSeesLeftovers) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  const std::string dir = lockstep::test::real_cluster_state_dir();
  auto before = lockstep::test::snapshot_host();
  auto sh = [](const std::string& cmd) { return lockstep::run_capture({"/bin/sh", "-c", cmd}, {}, 30s); };
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] {
    sh("ip link del lockstep-leak0; iptables -t filter -X KUBE-LEAK-TEST; rm -f /var/lib/cni/lockstep-leak-test");
  }};
  ASSERT_TRUE(sh("ip link add lockstep-leak0 type bridge").status.success());
  ASSERT_TRUE(sh("iptables -t filter -N KUBE-LEAK-TEST").status.success());
  ASSERT_TRUE(sh("mkdir -p /var/lib/cni && touch /var/lib/cni/lockstep-leak-test").status.success());
  lockstep::SpawnOptions so;
  so.argv = {"bash", "-c", "exec -a \"$0\" sleep 60", dir + "/run/leak"};  // its argv[0] names the state directory
  so.output_path = "/dev/null";  // not ctest's pipe, which it would hold open
  auto sleeper = lockstep::Process::spawn(so);
  auto left = lockstep::test::host_leftovers(before, lockstep::test::snapshot_host(), dir, {sleeper.pid()});
  std::string all;
  for (const auto& l : left) all += l + "\n";
  EXPECT_NE(all.find("interface lockstep-leak0"), std::string::npos) << all;
  EXPECT_NE(all.find("chain KUBE-LEAK-TEST"), std::string::npos) << all;
  EXPECT_NE(all.find("path /var/lib/cni/lockstep-leak-test"), std::string::npos) << all;
  EXPECT_NE(all.find("process " + std::to_string(sleeper.pid())), std::string::npos) << all;
}

// Last: brings the cluster down and looks for anything left on the machine.
TEST(ClusterDown, LeavesNothingBehind) {
  LOCKSTEP_REQUIRE_REAL_CLUSTER();
  auto status = lockstep::test::real_cluster()->script({"status"});
  std::cerr << status.output;
  auto report = lockstep::test::bring_down_real_cluster();
  EXPECT_TRUE(report.script.status.success()) << report.script.output;
  std::string left;
  for (const auto& l : report.leftovers) left += "  " + l + "\n";
  EXPECT_TRUE(report.leftovers.empty()) << "left on the machine after down:\n" << left;
  EXPECT_LT(report.seconds, 60) << "down took " << report.seconds << " s";
  // The script's own check agrees.
  auto check = lockstep::run_capture({"bash", std::string(LOCKSTEP_SOURCE_DIR) + "/scripts/cluster.sh", "check-clean"},
                                     {{"LOCKSTEP_CLUSTER_DIR", lockstep::test::real_cluster_state_dir()}}, 60s);
  EXPECT_TRUE(check.status.success()) << check.output;
}

// SIGTERM (a ctest timeout; Ctrl-C takes the same path) while a suite's cluster comes up:
// the start stops, the cluster comes down, nothing is left. Runs this binary again, after
// LeavesNothingBehind has freed the machine.
TEST(ClusterDown, SigtermDuringUpTearsDown) {
  if (lockstep::test::real_cluster_availability() != lockstep::test::ClusterAvailability::kUp)
    GTEST_SKIP() << "SKIPPED: " << lockstep::test::real_cluster_problem();
  ASSERT_EQ(lockstep::test::real_cluster(), nullptr) << "runs after ClusterDown.LeavesNothingBehind";
  auto before = lockstep::test::snapshot_host();
  lockstep::SpawnOptions so;
  so.argv = {"/proc/self/exe", "--gtest_filter=Cluster.NodeIsReadyWithThePinnedVersions"};
  so.output_path = lockstep::test::real_cluster_state_dir() + "/sigterm-test.log";
  std::remove(so.output_path.c_str());
  auto child = lockstep::Process::spawn(so);
  // Until its cluster.sh has started the daemons (containerd is the first).
  ASSERT_TRUE(lockstep::test::eventually(
      [&] { return lockstep::test::read_file(so.output_path).find("containerd ready") != std::string::npos; }, 120s))
      << lockstep::test::read_file(so.output_path);
  ::kill(child.pid(), SIGTERM);
  auto st = child.wait_for(150s);
  ASSERT_TRUE(st.has_value()) << "still running 150 s after SIGTERM";
  EXPECT_EQ(st->shell_code(), 128 + SIGTERM) << lockstep::test::read_file(so.output_path);
  auto left = lockstep::test::host_leftovers(before, lockstep::test::snapshot_host(),
                                             lockstep::test::real_cluster_state_dir(), {});
  std::string all;
  for (const auto& l : left) all += "  " + l + "\n";
  EXPECT_TRUE(left.empty()) << "left after SIGTERM:\n" << all << lockstep::test::read_file(so.output_path);
}

}  // namespace

int main(int argc, char** argv) { return lockstep::test::run_tests_with_real_cluster(argc, argv); }
