#include "cluster_test_support.hpp"

#include "suite_result.hpp"
#include "test_util.hpp"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

using namespace std::chrono_literals;

namespace lockstep::test {
namespace {

std::unique_ptr<RealCluster> g_cluster;
ClusterAvailability g_availability = ClusterAvailability::kFail;
std::string g_problem = "the cluster environment did not run";
HostSnapshot g_before;
std::string g_state_dir;
std::atomic<int> g_namespace_counter{0};

bool require_all() { return env_or("LOCKSTEP_REQUIRE_ALL", "") == "1"; }

// decide: what a cluster that did not come up means for the tests (cluster_test_support.hpp).
void decide(const ClusterUnavailable& e) {
  switch (e.problem()) {
    case ClusterProblem::kMachineCannot:
      g_availability = ClusterAvailability::kSkip;
      g_problem = std::string(e.what()) +  // "this machine cannot run it: <why>"
                  (require_all() ? " (not a failure under LOCKSTEP_REQUIRE_ALL=1: no set-up can give a machine that)" : "");
      return;
    case ClusterProblem::kSetupMissing:
    case ClusterProblem::kMachineBusy:
      g_availability = require_all() ? ClusterAvailability::kFail : ClusterAvailability::kSkip;
      g_problem = std::string("the real-node cluster is unavailable: ") + e.what();
      return;
    case ClusterProblem::kStartFailed:
      g_availability = ClusterAvailability::kFail;
      g_problem = std::string("the real-node cluster did not come up: ") + e.what();
      return;
  }
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out;
}

class RealClusterEnvironment : public ::testing::Environment {
 public:
  explicit RealClusterEnvironment(int nodes) : nodes_(nodes) {}
  void SetUp() override {
    g_before = snapshot_host();
    try {
      RealClusterOptions options;
      options.nodes = nodes_;
      g_cluster = RealCluster::up(options);
      g_state_dir = g_cluster->state_dir();
      g_availability = ClusterAvailability::kUp;
      g_problem.clear();
    } catch (const ClusterUnavailable& e) {
      decide(e);
      std::cerr << "[cluster] not available: " << g_problem << "\n";
    } catch (const std::exception& e) {
      decide(ClusterUnavailable(ClusterProblem::kStartFailed, e.what()));
      std::cerr << "[cluster] not available: " << g_problem << "\n";
    }
  }
  // Every binary of the tier proves its teardown: anything left behind fails the run.
  void TearDown() override {
    if (!g_cluster) return;
    auto report = bring_down_real_cluster();
    if (!report.script.status.success())
      ADD_FAILURE() << "scripts/cluster.sh down " << report.script.status.describe() << ":\n" << report.script.output;
    if (!report.leftovers.empty())
      ADD_FAILURE() << "the cluster left on this machine:\n" << join_lines(report.leftovers);
  }

 private:
  int nodes_;
};

}  // namespace

RealCluster* real_cluster() { return g_cluster.get(); }
ClusterAvailability real_cluster_availability() { return g_availability; }
const std::string& real_cluster_problem() { return g_problem; }
const std::string& real_cluster_state_dir() { return g_state_dir; }

RunResult cluster_kubectl(const std::vector<std::string>& args, const std::string& stdin_data,
                          std::chrono::milliseconds timeout) {
  if (!g_cluster) throw std::runtime_error("cluster_kubectl: no cluster is up");
  return g_cluster->kubectl(args, stdin_data, timeout);
}

std::string create_test_namespace(const std::string& prefix) {
  std::string name = prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(++g_namespace_counter);
  auto r = cluster_kubectl({"create", "namespace", name});
  if (!r.status.success()) throw std::runtime_error("kubectl create namespace " + name + ": " + r.output);
  // The controller-manager makes each namespace's "default" ServiceAccount; pods need it.
  if (!eventually([&] { return cluster_kubectl({"-n", name, "get", "serviceaccount", "default"}).status.success(); },
                  30s))
    throw std::runtime_error("namespace " + name + " got no default ServiceAccount within 30 s");
  return name;
}

std::string wait_pods_ready(const std::string& ns, const std::vector<std::string>& pods, std::chrono::seconds timeout) {
  std::vector<std::string> args = {"-n", ns, "wait", "--for=condition=Ready", "--timeout=" + std::to_string(timeout.count()) + "s"};
  for (const auto& p : pods) args.push_back("pod/" + p);
  auto r = cluster_kubectl(args, "", timeout + 30s);
  if (r.status.success()) return "";
  std::vector<std::string> describe = {"-n", ns, "describe", "pod"};
  describe.insert(describe.end(), pods.begin(), pods.end());
  return "pods not Ready within " + std::to_string(timeout.count()) + " s: " + r.output + "\n" +
         cluster_kubectl(describe).output;
}

DownReport bring_down_real_cluster() {
  DownReport report;
  if (!g_cluster) return report;
  auto pids = g_cluster->daemon_pids();
  report.script = g_cluster->down();
  report.seconds = g_cluster->down_seconds();
  g_cluster.reset();
  report.leftovers = host_leftovers(g_before, snapshot_host(), g_state_dir, pids);
  std::cerr << "[cluster] down in " << std::fixed << std::setprecision(1) << report.seconds << " s; "
            << (report.leftovers.empty() ? "nothing left behind" : std::to_string(report.leftovers.size()) + " things left behind")
            << "\n";
  return report;
}

int run_tests_with_real_cluster(int argc, char** argv, int nodes) {
  ::testing::InitGoogleTest(&argc, argv);
  // A stop signal stops a cluster.sh still running (whose trap tears down what it started),
  // then brings the cluster down.
  on_stop_signal([](int sig) {
    std::cerr << "\n[cluster] " << strsignal(sig) << ": tearing the cluster down\n";
    request_cluster_stop();
    if (pid_t script = running_cluster_script()) {
      ::kill(-script, SIGTERM);
      eventually([&] { return !is_running(script); }, 90s);
    }
    if (!g_state_dir.empty() || g_cluster) {
      std::string dir = g_cluster ? g_cluster->state_dir() : g_state_dir;
      run_capture({"bash", std::string(LOCKSTEP_SOURCE_DIR) + "/scripts/cluster.sh", "down"},
                  {{"LOCKSTEP_CLUSTER_DIR", dir}}, 120s);
    }
  });
  ::testing::AddGlobalTestEnvironment(new RealClusterEnvironment(nodes));
  int rc = RUN_ALL_TESTS();
  return suite_exit_code(rc);  // all skipped (no cluster possible): ctest shows Skipped
}


std::string nettest_pod(const std::string& name, const std::string& subdomain, const std::string& node) {
  std::string spec = "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", labels: {app: nettest}}\nspec:\n";
  if (!subdomain.empty()) spec += "  hostname: " + name + "\n  subdomain: " + subdomain + "\n";
  if (!node.empty()) spec += "  nodeName: " + node + "\n";
  spec += "  terminationGracePeriodSeconds: 1\n"
          "  containers:\n  - name: nettest\n    image: " + cluster_setting("NETTEST_IMAGE") +
          "\n    imagePullPolicy: Never\n    args: [serve, \"8080\"]\n    ports: [{containerPort: 8080}]\n";
  return spec;
}

std::string nettest_service(const std::string& name) {
  return "apiVersion: v1\nkind: Service\nmetadata: {name: " + name + "}\n"
         "spec:\n  clusterIP: None\n  selector: {app: nettest}\n  ports: [{name: tcp, port: 8080}]\n";
}

RunResult in_nettest_pod(const std::string& ns, const std::string& pod, std::vector<std::string> command) {
  std::vector<std::string> args = {"-n", ns, "exec", pod, "--", "/nettest"};
  args.insert(args.end(), command.begin(), command.end());
  return cluster_kubectl(args, "", 60s);
}

std::string jsonpath(const std::string& ns, const std::string& object, const std::string& path) {
  std::string out = cluster_kubectl({"-n", ns, "get", object, "-o", "jsonpath=" + path}).output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::vector<pid_t> worker_pids(const std::string& ns, const std::string& job, int node_rank, const std::string& program) {
  std::vector<pid_t> out;
  const std::vector<std::string> want = {"LOCKSTEP_JOB_NAME=" + job, "LOCKSTEP_JOB_NAMESPACE=" + ns,
                                         "LOCKSTEP_NODE_RANK=" + std::to_string(node_rank)};
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_file(e.path().string() + "/cmdline");
    std::string argv0 = cmdline.substr(0, cmdline.find('\0'));
    if (argv0.size() < program.size() || argv0.compare(argv0.size() - program.size(), program.size(), program) != 0) continue;
    std::string environ = read_file(e.path().string() + "/environ");
    std::vector<std::string> vars;
    for (size_t i = 0, j; i < environ.size(); i = j + 1) {
      j = environ.find('\0', i);
      if (j == std::string::npos) j = environ.size();
      vars.push_back(environ.substr(i, j - i));
    }
    bool all = true;
    for (const auto& w : want) all &= std::find(vars.begin(), vars.end(), w) != vars.end();
    if (all) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

double pod_cpu_seconds(const std::string& ns, const std::string& pod) {
  const std::string uid = jsonpath(ns, "pod/" + pod, "{.metadata.uid}");
  if (uid.empty()) return -1;
  // The cpuacct hierarchy: a cgroup v1 mount whose options name the controller.
  std::istringstream mounts(read_file("/proc/self/mounts"));
  std::string root;
  for (std::string dev, dir, type, options, rest; mounts >> dev >> dir >> type >> options && std::getline(mounts, rest);)
    if (type == "cgroup" && ("," + options + ",").find(",cpuacct,") != std::string::npos) root = dir;
  // The cluster's cgroup (scripts/cluster.sh's CGROUP), every node's pods beneath it.
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(root + "/lockstep-cluster", ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 4) it.disable_recursion_pending();
    if (it->path().filename() == "pod" + uid) {
      std::string usage = read_file(it->path().string() + "/cpuacct.usage");
      return usage.empty() ? -1 : std::stod(usage) / 1e9;
    }
  }
  return -1;
}

}  // namespace lockstep::test
