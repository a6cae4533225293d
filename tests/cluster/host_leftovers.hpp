// What a real-node cluster could leave on this machine, looked at directly (not through
// scripts/cluster.sh check-clean), so a test can prove that `down` removed everything.
//
//   auto before = snapshot_host();                  // before up
//   ... up, tests, down ...
//   auto left = host_leftovers(before, snapshot_host(), state_dir, cluster->daemon_pids());
//   EXPECT_TRUE(left.empty());                       // one line per thing left behind
//
// Other engineers' processes share the machine, so the comparison is limited to what a
// cluster makes: a difference elsewhere is not this cluster's.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace lockstep::test {

struct HostSnapshot {
  std::set<std::string> interfaces;             // /sys/class/net
  std::set<std::string> mounts;                 // mount point, then the line's options (they name overlay layers)
  std::set<std::string> iptables;               // "ipv4 nat: -A KUBE-SERVICES ...", chains as ":NAME"
  std::map<std::string, std::string> sysctls;   // the ones the kubelet and kube-proxy tune
  std::set<std::string> cgroups;                // top-level directories of every cgroup hierarchy
  std::set<std::string> shared_entries;         // entries under the directories a cluster shares
  std::chrono::system_clock::time_point taken_at;
};

HostSnapshot snapshot_host();

// One line per thing `after` has that `before` did not and that a cluster made: an
// interface, a mount under state_dir or a netns path, an iptables chain or rule, a changed
// sysctl, a cgroup, an entry in a shared directory (/run/containerd, /var/lib/cni, ...), a
// file under the system directories changed since `before`, or a process: one of `pids` still
// running, a node binary, anything naming state_dir or in the cluster's cgroup.
std::vector<std::string> host_leftovers(const HostSnapshot& before, const HostSnapshot& after,
                                        const std::string& state_dir, const std::vector<pid_t>& pids);

}  // namespace lockstep::test
