// scripts/cluster.sh check-clean (scripts/cluster/check_clean.sh) on a fake host: a process
// tree, cgroup hierarchies, mounts and paths in a temporary directory, which the script reads
// through LOCKSTEP_CLUSTER_HOST_ROOT, and fakes of the commands it asks (ip, iptables-save,
// ip6tables-save, ss, pgrep, sysctl) first in PATH. A clean host: exit 0 and no finding; each
// kind of leftover: exit 1 and exactly the line naming it. Neither root nor a cluster needed.
// LOCKSTEP_CLUSTER_SCRIPT runs another copy of the script instead (one with a check removed, to
// see the case that covers it fail).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/process.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::trunc) << text;
}

void write_program(const fs::path& path, const std::string& body) {
  write(path, "#!/bin/sh\n" + body);
  fs::permissions(path, fs::perms::owner_all);
}

// A fake host, clean until a test adds a leftover: one innocent process (init), cgroup v1
// hierarchies (pids, cpu) and a v2 one beside them, the root file system's mount, a loopback
// and an ethernet interface, no netfilter rule of a cluster.
class ClusterCheckClean : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "cluster_check_clean.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = fs::canonical(pattern);
    root_ = dir_ / "host", data_ = dir_ / "fake", state_ = (dir_ / "state").string();
    // The cache's binary directories as scripts/common.sh names them under this cache.
    auto bins = lockstep::run_capture(
        {"bash", "-c", "source \"$1/scripts/common.sh\" && printf '%s\\n' \"$K8S_NODE_BIN\" \"$NETPOL_BIN\" \"$SCHEDULER_PLUGINS_BIN\"",
         "_", LOCKSTEP_SOURCE_DIR},
        {{"LOCKSTEP_CACHE", (dir_ / "cache").string()}}, 30s);
    ASSERT_TRUE(bins.status.success()) << bins.output;
    auto b = lines_of(bins.output);
    ASSERT_EQ(b.size(), 3u) << bins.output;
    node_bin_ = b[0], netpol_bin_ = b[1], cosched_bin_ = b[2];

    add_process(1, "/sbin/init", {"/sbin/init"}, "/");
    write(root_ / "proc/self/mounts",
          "/dev/sda1 / ext4 rw,relatime 0 0\n"
          "cgroup /sys/fs/cgroup/pids cgroup rw,nosuid,nodev,noexec,relatime,pids 0 0\n"
          "cgroup /sys/fs/cgroup/cpu cgroup rw,nosuid,nodev,noexec,relatime,cpu 0 0\n"
          "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n");
    for (const char* h : {"pids", "cpu", "unified"}) fs::create_directories(root_ / "sys/fs/cgroup" / h);
    write(root_ / "proc/self/mountinfo", "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n");
    write(data_ / "ip-link",
          "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    "
          "link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n"
          "2: eth0@if9: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default\\    "
          "link/ether 02:42:ac:11:00:02 brd ff:ff:ff:ff:ff:ff link-netnsid 0\n");
    write(data_ / "ip-addr-lo", "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n");
    write(data_ / "iptables", "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:DOCKER-USER - [0:0]\nCOMMIT\n");
    for (const char* f : {"ip6tables", "ss", "pgrep"}) write(data_ / f, "");
    const std::string d = data_.string();
    write_program(dir_ / "bin/ip", "case \"$*\" in\n  '-o link show') cat '" + d + "/ip-link' ;;\n"
                                   "  '-4 -o addr show dev lo') cat '" + d + "/ip-addr-lo' ;;\n"
                                   "  *) echo \"fake ip: $*\" >&2; exit 1 ;;\nesac\n");
    write_program(dir_ / "bin/iptables-save", "cat '" + d + "/iptables'\n");
    write_program(dir_ / "bin/ip6tables-save", "cat '" + d + "/ip6tables'\n");
    write_program(dir_ / "bin/ss", "cat '" + d + "/ss'\n");
    write_program(dir_ / "bin/pgrep", "cat '" + d + "/pgrep'\n");
    write_program(dir_ / "bin/sysctl", "[ \"$1\" = -n ] && cat '" + d + "/sysctl/'\"$2\"\n");
  }

  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A process PID: its exe link, its command line (NUL-separated, as /proc has it), and the
  // cgroup it is in (in the pids hierarchy, as /proc/PID/cgroup has it).
  void add_process(int pid, const std::string& exe, const std::vector<std::string>& argv, const std::string& cgroup) {
    const fs::path p = root_ / "proc" / std::to_string(pid);
    fs::create_directories(p);
    fs::create_symlink(exe, p / "exe");
    std::string cmdline;
    for (const auto& a : argv) cmdline += a + '\0';
    write(p / "cmdline", cmdline);
    write(p / "cgroup", "5:pids:" + cgroup + "\n4:cpu:/\n0::/\n");
  }

  // A unix socket file at the host's PATH (bound, then closed: the file stays).
  void add_socket(const std::string& path) {
    const fs::path p = root_ / path.substr(1);
    fs::create_directories(p.parent_path());
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    ASSERT_LT(p.string().size(), sizeof(a.sun_path));
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", p.c_str());
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << p;
    ::close(fd);
  }

  // The host's baseline as up saves it (save_host_state), and the sysctls' values now.
  void baseline(const std::string& text) { write(fs::path(state_) / "host-baseline", text); }
  void sysctl_now(const std::string& name, const std::string& value) { write(data_ / "sysctl" / name, value + "\n"); }

  struct Verdict {
    int code = 0;
    std::vector<std::string> lines;
    std::string output;
  };
  Verdict check_clean() {
    const std::string script =
        lockstep::test::env_or("LOCKSTEP_CLUSTER_SCRIPT", std::string(LOCKSTEP_SOURCE_DIR) + "/scripts/cluster.sh");
    auto r = lockstep::run_capture({"bash", script, "check-clean"},
                                   {{"LOCKSTEP_CLUSTER_HOST_ROOT", root_.string()},
                                    {"LOCKSTEP_CLUSTER_DIR", state_},
                                    {"LOCKSTEP_CACHE", (dir_ / "cache").string()},
                                    {"PATH", (dir_ / "bin").string() + ":" + lockstep::test::env_or("PATH", "/usr/bin:/bin")}},
                                   60s);
    return {r.status.shell_code(), lines_of(r.output), r.output};
  }

  // check-clean finds exactly `expected`, and says so with exit 1.
  void expect_found(const std::vector<std::string>& expected) {
    auto v = check_clean();
    EXPECT_EQ(v.code, 1) << v.output;
    EXPECT_EQ(v.lines, expected) << v.output;
  }
  void expect_clean() {
    auto v = check_clean();
    EXPECT_EQ(v.code, 0) << v.output;
    ASSERT_EQ(v.lines.size(), 1u) << v.output;
    EXPECT_NE(v.lines[0].find("cluster: clean: nothing of a cluster is left on this machine"), std::string::npos) << v.output;
  }

  fs::path dir_, root_, data_;
  std::string state_, node_bin_, netpol_bin_, cosched_bin_;
};

TEST_F(ClusterCheckClean, CleanHostIsClean) { expect_clean(); }

TEST_F(ClusterCheckClean, FindsANodeDaemonLeftRunning) {
  add_process(4242, node_bin_ + "/kubelet", {node_bin_ + "/kubelet", "--v=1"}, "/");
  expect_found({"process 4242: " + node_bin_ + "/kubelet --v=1 "});
}

TEST_F(ClusterCheckClean, FindsAProcessNamingTheStateDirectory) {
  add_process(77, "/usr/bin/containerd", {"containerd", "--config", state_ + "/run/config/containerd.toml"}, "/");
  expect_found({"process 77: containerd --config " + state_ + "/run/config/containerd.toml "});
}

TEST_F(ClusterCheckClean, FindsAProcessInTheClustersCgroup) {
  add_process(900, "/usr/bin/sleep", {"sleep", "1000"}, "/lockstep-cluster/node-0/kubepods/besteffort/pod1/abc");
  expect_found({"process 900: sleep 1000 "});
}

// The test control plane's gang scheduler runs from the same cache (scale_test): not a
// cluster's, unless it is in the cluster's cgroup.
TEST_F(ClusterCheckClean, LeavesTheTestControlPlanesSchedulerAloneUnlessInTheClustersCgroup) {
  const std::vector<std::string> argv = {cosched_bin_ + "/kube-scheduler-cosched", "--config=/tmp/lockstep-controlplane-Ab12Cd/cosched.yaml"};
  add_process(310, argv[0], argv, "/");
  expect_clean();
  add_process(311, argv[0], argv, "/lockstep-cluster/daemons");
  expect_found({"process 311: " + argv[0] + " " + argv[1] + " "});
}

TEST_F(ClusterCheckClean, FindsMountsUnderTheStateDirectoryAndPodNetworkNamespaces) {
  write(root_ / "proc/self/mountinfo",
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "301 22 0:60 / " + state_ + "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm rw - tmpfs shm rw\n"
        "302 22 0:4 net:[4026532] /run/netns/cni-1234-5678 rw shared:9 - nsfs nsfs rw\n");
  expect_found({"mount " + state_ + "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm", "mount /run/netns/cni-1234-5678"});
}

TEST_F(ClusterCheckClean, FindsTheClustersCgroupInEveryHierarchy) {
  fs::create_directories(root_ / "sys/fs/cgroup/pids/lockstep-cluster/daemons");
  fs::create_directories(root_ / "sys/fs/cgroup/unified/lockstep-cluster");
  expect_found({"cgroup /sys/fs/cgroup/pids/lockstep-cluster", "cgroup /sys/fs/cgroup/unified/lockstep-cluster"});
}

TEST_F(ClusterCheckClean, FindsTheBridgesAndVeths) {
  std::ofstream(data_ / "ip-link", std::ios::app)
      << "5: lockstep0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default\\    link/ether\n"
      << "6: lockstep2: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default\\    link/ether\n"
      << "7: veth3f2a1b@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master lockstep0 state UP\\    link/ether\n"
      << "8: lockstepx: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default\\    link/ether\n";
  expect_found({"interface lockstep0", "interface lockstep2", "interface veth3f2a1b"});
}

TEST_F(ClusterCheckClean, FindsTheDnsAddressOnLoopback) {
  std::ofstream(data_ / "ip-addr-lo", std::ios::app)
      << "1: lo    inet 169.254.25.10/32 scope global lo\\       valid_lft forever preferred_lft forever\n";
  expect_found({"address 169.254.25.10 on lo"});
}

TEST_F(ClusterCheckClean, FindsTheClustersIptablesChainsAndRules) {
  write(data_ / "iptables", "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n");
  write(data_ / "ip6tables", "*raw\n:PREROUTING ACCEPT [0:0]\n:LOCKSTEP-FAULTS - [0:0]\nCOMMIT\n");
  expect_found({"iptables: :KUBE-FIREWALL - [0:0]", "iptables: -A INPUT -j KUBE-FIREWALL", "iptables: :LOCKSTEP-FAULTS - [0:0]"});
}

TEST_F(ClusterCheckClean, FindsTheNetworkPolicyControllersTableAndQueue) {
  write_program(fs::path(netpol_bin_) / "kube-network-policies", "[ \"$1\" = -show-table ] && echo 'table inet lockstep-netpol'\n");
  expect_found({"nftables table table inet lockstep-netpol"});
  write_program(fs::path(netpol_bin_) / "kube-network-policies", "exit 0\n");
  expect_clean();
  write(root_ / "proc/net/netfilter/nfnetlink_queue", "    7  4321     0 2 65531     0     0        0  1\n  100  4242     0 2 65531     0     0        0  1\n");
  expect_found({"NFQUEUE 100 still bound"});
}

TEST_F(ClusterCheckClean, FindsShimSocketsNobodyListensOn) {
  add_socket("/run/containerd/s/0123abcd");
  add_socket("/run/containerd/s/4567ef01");
  write(data_ / "ss", "u_str LISTEN 0 4096 /run/containerd/s/4567ef01 31337 * 0\n");
  expect_found({"stale shim socket /run/containerd/s/0123abcd"});
}

TEST_F(ClusterCheckClean, FindsCniResultsAndTheKubeletsDevicePluginSocket) {
  write(root_ / "var/lib/cni/results/lockstep-pods-0f1e2d-eth0", "{}");
  write(root_ / "var/lib/cni/results/other-net-99-eth0", "{}");
  write(root_ / "var/lib/kubelet/device-plugins/kubelet.sock", "");
  expect_found({"path /var/lib/cni/results/lockstep-pods-0f1e2d-eth0", "path /var/lib/kubelet/device-plugins/kubelet.sock"});
}

TEST_F(ClusterCheckClean, FindsPodLogLinksIntoARunDirectory) {
  fs::create_directories(root_ / "var/log/containers");
  fs::create_symlink(state_ + "/run/pod-logs/default_p_uid/c/0.log", root_ / "var/log/containers/p_default_c-1.log");
  fs::create_symlink("/var/log/pods/default_q_uid/c/0.log", root_ / "var/log/containers/q_default_c-2.log");
  expect_found({"pod log link /var/log/containers/p_default_c-1.log"});
}

TEST_F(ClusterCheckClean, FindsEmptyDirectoriesAClusterMadeOutsideItsState) {
  fs::create_directories(root_ / "etc/cni/net.d");
  fs::create_directories(root_ / "opt/cni/bin");
  write(root_ / "opt/cni/bin/bridge", "");
  expect_found({"empty directory /etc/cni/net.d"});
  // There before the last up: not the cluster's.
  baseline("# the host before the last up\nexisted /etc/cni/net.d\n");
  expect_clean();
}

// Another containerd (scripts/images.sh runs one) makes /run/containerd and /opt/containerd too.
TEST_F(ClusterCheckClean, LeavesContainerdsDirectoriesToAnotherContainerd) {
  fs::create_directories(root_ / "opt/containerd");
  expect_found({"empty directory /opt/containerd"});
  add_process(555, "/usr/bin/containerd", {"containerd", "--config", "/tmp/images-build/containerd.toml"}, "/");
  write(data_ / "pgrep", "555\n");
  expect_clean();
}

TEST_F(ClusterCheckClean, FindsSysctlsNotAsUpFoundThem) {
  baseline("# the host before the last up\nnet.ipv4.ip_forward=0\nvm.overcommit_memory=0\nexisted /opt/cni\n");
  sysctl_now("net.ipv4.ip_forward", "0");
  sysctl_now("vm.overcommit_memory", "0");
  expect_clean();
  sysctl_now("vm.overcommit_memory", "1");
  expect_found({"sysctl vm.overcommit_memory=1 (was 0)"});
}

TEST_F(ClusterCheckClean, FindsARunningClustersStateDirectory) {
  fs::create_directories(fs::path(state_) / "run/pids");
  expect_found({"state " + state_ + "/run (the cluster is up, or down did not finish)"});
}

TEST_F(ClusterCheckClean, ListsEveryLeftoverAtOnce) {
  add_process(4242, node_bin_ + "/kubelet", {node_bin_ + "/kubelet"}, "/");
  fs::create_directories(root_ / "sys/fs/cgroup/cpu/lockstep-cluster");
  fs::create_directories(fs::path(state_) / "run");
  expect_found({"process 4242: " + node_bin_ + "/kubelet ", "cgroup /sys/fs/cgroup/cpu/lockstep-cluster",
                "state " + state_ + "/run (the cluster is up, or down did not finish)"});
}

}  // namespace
