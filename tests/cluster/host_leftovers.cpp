#include "host_leftovers.hpp"

#include "cpu_throttle.hpp"
#include "real_cluster.hpp"
#include "test_util.hpp"

#include "lockstep/process.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace lockstep::test {
namespace {

// scripts/cluster.sh's machine-wide names and the places the kubelet, containerd and the CNI
// plugins write whatever they are told (its OUTSIDE_DIRS).
const char* const kClusterCgroup = "lockstep-cluster";
const std::vector<std::string> kSharedDirs = {
    "/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/log/pods", "/var/lib/kubelet",
    "/run/netns", "/usr/libexec/kubernetes", "/opt/containerd", "/etc/cni", "/opt/cni"};
const std::vector<std::string> kSysctls = {
    "net/ipv4/ip_forward", "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/bridge/bridge-nf-call-iptables",
    "net/ipv4/conf/all/route_localnet", "net/netfilter/nf_conntrack_max"};
// System directories scanned for files changed during the run, and what in them changes for
// reasons of its own (package installs, skopeo's cache, and set-up's placeholder certificate
// for Kueue, Note [Kueue's fixed certificate path] in scripts/setup.sh: on a cold cache the
// setup_kueue test writes it while the cluster lane runs).
const std::vector<std::string> kSystemDirs = {"/etc", "/run", "/var/lib", "/var/log", "/opt", "/usr/libexec",
                                               "/usr/local/bin", "/usr/local/sbin", "/usr/local/etc"};
const std::vector<std::string> kNoisyPrefixes = {
    "/var/lib/dpkg/", "/var/lib/apt/", "/var/log/apt/", "/var/log/dpkg.log", "/var/log/alternatives.log",
    "/etc/ld.so.cache", "/etc/alternatives/", "/etc/systemd/", "/var/lib/systemd/", "/var/lib/containers/",
    "/var/lib/ucf/", "/var/lib/man-db/", "/run/user/", "/etc/kueue/metrics/certs/"};

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::set<std::string> iptables_lines() {
  std::set<std::string> out;
  for (const std::string family : {"iptables", "ip6tables"}) {
    auto r = run_capture({family + "-save"}, {}, 30s);
    std::istringstream in(r.output);
    std::string table;
    for (std::string line; std::getline(in, line);) {
      if (starts_with(line, "*")) table = line.substr(1);
      if (starts_with(line, "-A ")) out.insert(family + " " + table + ": " + line);
      if (starts_with(line, ":")) {  // a chain; the built-in ones come with any table
        std::string chain = line.substr(1, line.find(' ') - 1);
        static const std::set<std::string> builtin = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"};
        if (!builtin.count(chain)) out.insert(family + " " + table + ": chain " + chain);
      }
    }
  }
  return out;
}

std::vector<std::string> cgroup_hierarchies() {
  std::vector<std::string> out;
  std::istringstream in(read_file("/proc/self/mounts"));
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string dev, dir, type;
    f >> dev >> dir >> type;
    if (type == "cgroup" || type == "cgroup2") out.push_back(dir);
  }
  return out;
}

// Another containerd (scripts/images.sh runs one) makes /run/containerd and /opt/containerd
// entries of its own.
bool other_containerd_running(const std::string& state_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (trim(read_file("/proc/" + pid + "/comm")) != "containerd") continue;
    if (read_file("/proc/" + pid + "/cmdline").find(state_dir + "/") == std::string::npos) return true;
  }
  return false;
}

void processes_left(const std::string& state_dir, const std::vector<pid_t>& pids, std::vector<std::string>& out) {
  for (pid_t p : pids)
    if (is_running(p)) out.push_back("process " + std::to_string(p) + " (recorded by up) still runs");
  std::string node_bin = cluster_setting("K8S_NODE_BIN") + "/", coredns_bin = cluster_setting("COREDNS_BIN") + "/";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos || !is_running(std::atoi(pid.c_str()))) continue;
    std::string exe = fs::read_symlink("/proc/" + pid + "/exe", ec).string();
    std::string cmdline = read_file("/proc/" + pid + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    bool ours = starts_with(exe, node_bin) || starts_with(exe, coredns_bin) ||
                cmdline.find(state_dir + "/") != std::string::npos ||
                read_file("/proc/" + pid + "/cgroup").find(std::string(":/") + kClusterCgroup + "/") != std::string::npos;
    if (ours) out.push_back("process " + pid + ": " + cmdline.substr(0, 160));
  }
}

void files_changed(const HostSnapshot& before, const std::string& state_dir, bool skip_containerd,
                   std::vector<std::string>& out) {
  for (const auto& root : kSystemDirs) {
    std::error_code ec;
    fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      std::string path = it->path().string();
      if (starts_with(path, "/proc") || starts_with(path, state_dir)) { it.disable_recursion_pending(); continue; }
      if (skip_containerd && (starts_with(path, "/run/containerd") || starts_with(path, "/opt/containerd"))) continue;
      if (std::any_of(kNoisyPrefixes.begin(), kNoisyPrefixes.end(), [&](const auto& p) { return starts_with(path, p); }))
        continue;
      std::error_code e2;
      auto st = it->symlink_status(e2);
      if (e2 || fs::is_directory(st)) continue;  // a directory's time changes when anything in it does
      struct stat sb;
      if (::lstat(path.c_str(), &sb) != 0) continue;
      auto mtime = std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::seconds(sb.st_mtim.tv_sec) + std::chrono::nanoseconds(sb.st_mtim.tv_nsec)));
      if (mtime > before.taken_at) out.push_back("file changed during the run: " + path);
    }
  }
}

}  // namespace

HostSnapshot snapshot_host() {
  HostSnapshot s;
  s.taken_at = std::chrono::system_clock::now();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/class/net", ec)) s.interfaces.insert(e.path().filename());
  std::istringstream mounts(read_file("/proc/self/mountinfo"));
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream f(line);
    std::string id, parent, devno, root, point;
    f >> id >> parent >> devno >> root >> point;
    s.mounts.insert(point + "  " + line.substr(line.find(" - ") + 3));
  }
  s.iptables = iptables_lines();
  for (const auto& name : kSysctls) {
    std::string v = trim(read_file("/proc/sys/" + name));
    if (!v.empty()) s.sysctls[name] = v;
  }
  for (const auto& h : cgroup_hierarchies())
    for (const auto& e : fs::directory_iterator(h, ec))
      if (e.is_directory()) s.cgroups.insert(e.path().string());
  for (const auto& dir : kSharedDirs) {
    if (fs::exists(dir)) s.shared_entries.insert(dir);
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      s.shared_entries.insert(it->path().string());
  }
  return s;
}

std::vector<std::string> host_leftovers(const HostSnapshot& before, const HostSnapshot& after,
                                        const std::string& state_dir, const std::vector<pid_t>& pids) {
  std::vector<std::string> out;
  auto added = [](const std::set<std::string>& b, const std::set<std::string>& a) {
    std::vector<std::string> d;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(d));
    return d;
  };
  for (const auto& i : added(before.interfaces, after.interfaces)) out.push_back("interface " + i);
  for (const auto& m : added(before.mounts, after.mounts))
    if (m.find(state_dir + "/") != std::string::npos || starts_with(m, "/run/netns/") ||
        starts_with(m, "/var/run/netns/") || starts_with(m, "/var/lib/kubelet") || starts_with(m, "/run/containerd"))
      out.push_back("mount " + m.substr(0, 200));
  for (const auto& r : added(before.iptables, after.iptables)) out.push_back(r);
  for (const auto& [name, value] : before.sysctls)
    if (auto it = after.sysctls.find(name); it != after.sysctls.end() && it->second != value)
      out.push_back("sysctl " + name + " = " + it->second + " (was " + value + ")");
  for (const auto& c : added(before.cgroups, after.cgroups))  // not another lane's running test's
    if (!live_throttle_group(fs::path(c).filename().string())) out.push_back("cgroup " + c);
  for (const auto& h : cgroup_hierarchies())
    if (fs::exists(h + "/" + kClusterCgroup)) out.push_back("cgroup " + h + "/" + kClusterCgroup);
  bool other_containerd = other_containerd_running(state_dir);
  for (const auto& e : added(before.shared_entries, after.shared_entries))
    if (!(other_containerd && (starts_with(e, "/run/containerd") || starts_with(e, "/opt/containerd"))))
      out.push_back("path " + e);
  files_changed(before, state_dir, other_containerd, out);
  processes_left(state_dir, pids, out);
  if (fs::exists(state_dir + "/run")) out.push_back("state " + state_dir + "/run (down did not finish)");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace lockstep::test
