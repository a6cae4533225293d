// A real Kubernetes of one or more nodes for tests: scripts/cluster.sh (docs/development.md,
// "Real-node cluster") run in a state directory of the tests' own, so a developer's cluster
// (~/.cache/lockstep/cluster) is never touched, while the image store in it is kept from one
// run to the next.
//
//   auto cluster = lockstep::test::RealCluster::up();   // blocks until the node is Ready
//   cluster->kubectl({"get", "nodes"});
//   cluster->down();                                     // or let it go out of scope
//
// up() throws ClusterUnavailable, whose problem() says whether this machine cannot run
// containers at all (no set-up can change that), a set-up product is missing, another
// cluster holds the machine, or the start itself failed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/process.hpp"

namespace lockstep::test {

enum class ClusterProblem {
  kMachineCannot,  // cluster.sh exit 3: not root, cgroup v2 only, no overlayfs, ...
  kSetupMissing,   // exit 4: a binary or image scripts/setup.sh makes is missing
  kMachineBusy,    // exit 5: another cluster holds the interfaces, cgroups or ports
  kStartFailed,    // anything else: a bug to look at
};

class ClusterUnavailable : public std::runtime_error {
 public:
  ClusterUnavailable(ClusterProblem problem, const std::string& what)
      : std::runtime_error(what), problem_(problem) {}
  ClusterProblem problem() const { return problem_; }

 private:
  ClusterProblem problem_;
};

struct RealClusterOptions {
  std::string state_dir;                     // default: $LOCKSTEP_CLUSTER_TEST_DIR, else <cache>/cluster-test
  std::chrono::seconds up_timeout{300};
  bool quiet = false;                        // no progress lines on stderr
  int nodes = 1;                             // scripts/cluster.sh up --nodes N
};

class RealCluster {
 public:
  // Brings the cluster up (a cluster left up in the same state directory by an earlier,
  // killed run is brought down first) and waits for every node to be Ready.
  static std::unique_ptr<RealCluster> up(RealClusterOptions options = {});
  ~RealCluster();
  RealCluster(const RealCluster&) = delete;
  RealCluster& operator=(const RealCluster&) = delete;

  // Stops everything and removes what the cluster made outside its state directory;
  // idempotent. Returns the script's output.
  RunResult down();
  bool is_up() const { return up_; }

  // scripts/cluster.sh COMMAND... against this cluster's state directory.
  RunResult script(const std::vector<std::string>& args,
                   std::chrono::milliseconds timeout = std::chrono::minutes(2)) const;
  RunResult kubectl(const std::vector<std::string>& args, const std::string& stdin_data = "",
                    std::chrono::milliseconds timeout = std::chrono::seconds(90)) const;

  const std::string& state_dir() const { return options_.state_dir; }
  std::string kubeconfig() const { return options_.state_dir + "/kubeconfig"; }
  std::string ca_file() const { return options_.state_dir + "/pki/ca.crt"; }
  double up_seconds() const { return up_seconds_; }
  double down_seconds() const { return down_seconds_; }
  // The daemons' pids as up recorded them (etcd, kubelet, containerd, ...).
  const std::vector<pid_t>& daemon_pids() const { return daemon_pids_; }

 private:
  RealCluster() = default;
  RealClusterOptions options_;
  bool up_ = false;
  double up_seconds_ = 0, down_seconds_ = 0;
  std::vector<pid_t> daemon_pids_;
};

// A variable of scripts/common.sh (NETTEST_IMAGE, K8S_NODE_BIN, CACHE, ...), so the tests and
// the scripts name images and paths in one place.
std::string cluster_setting(const std::string& name);

// For a stop signal's handler: the pid of the scripts/cluster.sh this program runs now (0
// when none), and a request that makes whoever waits for that script wait for good, so that
// the handler alone tears down and exits.
pid_t running_cluster_script();
void request_cluster_stop();

}  // namespace lockstep::test
