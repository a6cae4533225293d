// GoogleTest support for the `cluster` tier: one real-node cluster per test binary.
//
// A suite's main() calls run_tests_with_real_cluster(). It looks at the host, brings the
// cluster up once (scripts/cluster.sh in the tests' own state directory), runs the tests,
// brings it down, and fails the run if anything of the cluster is left on the machine
// (host_leftovers.hpp). On Ctrl-C or SIGTERM it stops a start in progress and tears down
// before exiting. Tests start with LOCKSTEP_REQUIRE_REAL_CLUSTER():
//   - this machine cannot run containers (not root, cgroup v2 only, no overlayfs, no
//     namespaces): SKIPPED with the reason, even under LOCKSTEP_REQUIRE_ALL=1, because no
//     set-up can give a machine that;
//   - a set-up product is missing, or another cluster holds the machine: SKIPPED, or FAILED
//     under LOCKSTEP_REQUIRE_ALL=1 (scripts/test.sh), where set-up should have provided it;
//   - the cluster did not start: FAILED, with the script's output.
// Namespaces keep the tests apart (create_test_namespace).
//
// More suites join the tier with lockstep_add_cluster_test() (tests/cluster/CMakeLists.txt),
// which runs them one at a time: there is one cluster per machine.
#pragma once

#include <gtest/gtest.h>

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "host_leftovers.hpp"
#include "real_cluster.hpp"

namespace lockstep::test {

enum class ClusterAvailability { kUp, kSkip, kFail };

// The suite's cluster; nullptr when it did not come up (real_cluster_problem() says why) or
// after bring_down_real_cluster().
RealCluster* real_cluster();
ClusterAvailability real_cluster_availability();
const std::string& real_cluster_problem();
// The state directory the suite's cluster runs (or ran) in.
const std::string& real_cluster_state_dir();

// kubectl against the suite's cluster; stdout and stderr together.
RunResult cluster_kubectl(const std::vector<std::string>& args, const std::string& stdin_data = "",
                          std::chrono::milliseconds timeout = std::chrono::seconds(90));

// A namespace with a unique name derived from `prefix`; throws if it cannot be made.
std::string create_test_namespace(const std::string& prefix);

// `kubectl wait --for=condition=Ready` on pods; on failure the pods' describe output, for
// the test's message (empty when they became ready).
std::string wait_pods_ready(const std::string& ns, const std::vector<std::string>& pods,
                            std::chrono::seconds timeout = std::chrono::seconds(90));

// The nettest image's pods (tests/cluster/images/nettest.c), for the suites that check the
// cluster itself: a pod serving `nettest serve 8080`, named NAME, labelled app: nettest, under
// the headless Service `subdomain` when one is given (its DNS name NAME.SUBDOMAIN.NS.svc...),
// bound to `node` when one is given; that Service; nettest COMMAND... run in a pod through
// kubectl exec; and `kubectl get OBJECT -o jsonpath=PATH` in `ns`, trimmed.
std::string nettest_pod(const std::string& name, const std::string& subdomain = "", const std::string& node = "");
std::string nettest_service(const std::string& name);
RunResult in_nettest_pod(const std::string& ns, const std::string& pod, std::vector<std::string> command);
std::string jsonpath(const std::string& ns, const std::string& object, const std::string& path);

struct DownReport {
  RunResult script;                 // scripts/cluster.sh down
  double seconds = 0;
  std::vector<std::string> leftovers;   // host_leftovers() against the host before up
};

// Brings the suite's cluster down now (later tests see none) and looks for leftovers.
DownReport bring_down_real_cluster();

// `nodes`: the cluster's nodes (scripts/cluster.sh up --nodes).
int run_tests_with_real_cluster(int argc, char** argv, int nodes = 1);

// The pids of one pod's worker processes whose argv[0] ends with `program` (lockstep-trainer,
// python3), seen from the host (the containers' processes are the host's too): the workers
// inherit the agent's LOCKSTEP_* environment, which names the job, its namespace and the
// pod's node rank.
std::vector<pid_t> worker_pids(const std::string& ns, const std::string& job, int node_rank, const std::string& program);

// The CPU time a pod's processes have used (its cgroup's cpuacct.usage in the cpuacct hierarchy,
// CPUACCT/lockstep-cluster/node-I/kubepods/.../pod<UID>), in seconds; -1 when the pod or its
// cgroup is not found.
double pod_cpu_seconds(const std::string& ns, const std::string& pod);

}  // namespace lockstep::test

#define LOCKSTEP_REQUIRE_REAL_CLUSTER()                                                       \
  do {                                                                                        \
    switch (::lockstep::test::real_cluster_availability()) {                                  \
      case ::lockstep::test::ClusterAvailability::kUp:                                        \
        if (::lockstep::test::real_cluster()) break;                                          \
        GTEST_SKIP() << "SKIPPED: the cluster was brought down by an earlier test";          \
      case ::lockstep::test::ClusterAvailability::kSkip:                                      \
        GTEST_SKIP() << "SKIPPED: " << ::lockstep::test::real_cluster_problem();              \
      case ::lockstep::test::ClusterAvailability::kFail:                                      \
        FAIL() << ::lockstep::test::real_cluster_problem();                                   \
    }                                                                                         \
  } while (0)
