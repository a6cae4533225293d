// A CPU quota on processes a test started, through a cgroup of the cpu controller (#42: a node
// slowed as a noisy neighbour or a throttled pod slows it). The group is made beside this
// process's own (cgroup v1's cpu hierarchy, or v2's unified one where cpu is a controller there),
// takes the processes it is given, caps them at `cpus` CPUs (v1 cpu.cfs_quota_us over
// cpu.cfs_period_us; v2 cpu.max), and on destruction gives them back to the group they came from
// and removes itself. Needs a writable cpu controller (root, or a delegated group): open() says
// why not otherwise, for the test to say SKIPPED with it.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace lockstep::test {

// Every throttle group is named kThrottleGroupPrefix, what it is for, and its test process's pid
// (throttle_group_name): the cluster tier's check that nothing is left on the machine
// (tests/cluster/host_leftovers.cpp) passes over the group of a test still running in the other
// lane (live_throttle_group), and reports one whose test is gone.
inline constexpr const char* kThrottleGroupPrefix = "lockstep-throttle-";

inline std::string throttle_group_name(const std::string& what) {
  return kThrottleGroupPrefix + what + "-" + std::to_string(::getpid());
}

// Whether the cgroup directory named `name` is a throttle group whose process still runs.
inline bool live_throttle_group(const std::string& name) {
  const std::string prefix = kThrottleGroupPrefix;
  const size_t dash = name.rfind('-');
  if (name.compare(0, prefix.size(), prefix) != 0 || dash == std::string::npos || dash + 1 >= name.size() ||
      name.find_first_not_of("0123456789", dash + 1) != std::string::npos)
    return false;
  const long pid = std::strtol(name.c_str() + dash + 1, nullptr, 10);
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

class CpuThrottle {
 public:
  // A new group named `name` (throttle_group_name) under this process's cpu group; nullptr with
  // *why when there is no cpu controller this process can make a group in.
  static std::unique_ptr<CpuThrottle> open(const std::string& name, std::string* why) {
    std::string parent;
    bool v2 = false;
    if (!find_cpu_group(&parent, &v2, why)) return nullptr;
    const std::string dir = parent + "/" + name;
    ::rmdir(dir.c_str());  // a group an earlier run left, empty
    if (v2) write(parent + "/cgroup.subtree_control", "+cpu");  // v2: the children get the controller
    if (::mkdir(dir.c_str(), 0755) != 0) {
      *why = "cannot make the cgroup " + dir + ": " + std::strerror(errno) + " (a writable cpu controller needs root)";
      return nullptr;
    }
    std::unique_ptr<CpuThrottle> t(new CpuThrottle(parent, dir, v2));
    std::string error;
    if (!t->limit(1000, &error)) {  // a quota must be writable, or the group is no use
      *why = error;
      return nullptr;
    }
    return t;
  }

  ~CpuThrottle() {
    // Whatever is still in the group goes back where it came from; then the group goes.
    for (int attempt = 0; attempt < 50; ++attempt) {
      for (pid_t pid : pids()) write(parent_ + "/cgroup.procs", std::to_string(pid));
      if (::rmdir(dir_.c_str()) == 0 || errno == ENOENT) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  CpuThrottle(const CpuThrottle&) = delete;
  CpuThrottle& operator=(const CpuThrottle&) = delete;

  // Caps the group at `cpus` CPUs (0.5: half a CPU); false with *error when the kernel refused.
  bool limit(double cpus, std::string* error) {
    const long period = 100000, quota = static_cast<long>(cpus * period);
    if (v2_) return write(dir_ + "/cpu.max", std::to_string(quota) + " " + std::to_string(period), error);
    return write(dir_ + "/cpu.cfs_period_us", std::to_string(period), error) &&
           write(dir_ + "/cpu.cfs_quota_us", std::to_string(quota), error);
  }

  // Moves `root` and every process under it into the group (each with all its threads; what
  // they start later is born in it). The number moved.
  int take_tree(pid_t root, std::string* error) {
    int moved = 0;
    for (pid_t pid : tree(root))
      if (write(dir_ + "/cgroup.procs", std::to_string(pid), error)) ++moved;
    return moved;
  }

  // The CPU time `pid` has used, all its threads, user and system (/proc/PID/stat); -1 when gone.
  static double cpu_seconds(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos) return -1;
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14 and 15: utime, stime in clock ticks
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }

  std::set<pid_t> pids() const {
    std::set<pid_t> out;
    std::ifstream in(dir_ + "/cgroup.procs");
    for (pid_t pid; in >> pid;) out.insert(pid);
    return out;
  }
  const std::string& path() const { return dir_; }

  // `root` and its descendants, from /proc/PID/stat's parent field.
  static std::set<pid_t> tree(pid_t root) {
    std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, ppid)
    if (DIR* d = ::opendir("/proc")) {
      while (dirent* e = ::readdir(d)) {
        const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
        if (pid <= 0) continue;
        std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
        std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        const size_t close = text.rfind(')');  // the command may hold spaces and parentheses
        if (close == std::string::npos) continue;
        std::istringstream rest(text.substr(close + 2));
        char state = 0;
        pid_t ppid = 0;
        rest >> state >> ppid;
        parent_of.push_back({pid, ppid});
      }
      ::closedir(d);
    }
    std::set<pid_t> out = {root};
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [pid, ppid] : parent_of)
        if (out.count(ppid) && out.insert(pid).second) grew = true;
    }
    return out;
  }

 private:
  CpuThrottle(std::string parent, std::string dir, bool v2) : parent_(std::move(parent)), dir_(std::move(dir)), v2_(v2) {}

  static bool write(const std::string& path, const std::string& value, std::string* error = nullptr) {
    std::ofstream out(path);
    out << value << std::flush;
    if (out) return true;
    if (error) *error = "cannot write '" + value + "' to " + path + ": " + std::strerror(errno);
    return false;
  }

  // This process's group of the cpu controller: a v1 hierarchy mounted with the cpu option, or
  // the v2 hierarchy when cpu is one of its controllers.
  static bool find_cpu_group(std::string* group, bool* v2, std::string* why) {
    std::ifstream mounts("/proc/mounts");
    std::string v1_mount, v2_mount;
    for (std::string dev, mount, type, options, rest; mounts >> dev >> mount >> type >> options && std::getline(mounts, rest);) {
      if (type == "cgroup" && ("," + options + ",").find(",cpu,") != std::string::npos) v1_mount = mount;
      if (type == "cgroup2") {
        std::ifstream controllers(mount + "/cgroup.controllers");
        for (std::string c; controllers >> c;)
          if (c == "cpu") v2_mount = mount;
      }
    }
    *v2 = v1_mount.empty() && !v2_mount.empty();
    if (v1_mount.empty() && v2_mount.empty()) {
      *why = "no cgroup hierarchy with the cpu controller is mounted (/proc/mounts)";
      return false;
    }
    // /proc/self/cgroup: "N:cpu,cpuacct:/path" (v1) or "0::/path" (v2).
    std::ifstream self("/proc/self/cgroup");
    std::string own;
    for (std::string line; std::getline(self, line);) {
      const size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
      if ((*v2 && controllers == ",,") || (!*v2 && controllers.find(",cpu,") != std::string::npos)) own = line.substr(b + 1);
    }
    if (own == "/") own.clear();
    *group = (*v2 ? v2_mount : v1_mount) + own;
    if (::access((*group + "/cgroup.procs").c_str(), W_OK) != 0) {
      *why = "the cpu controller's group " + *group + " is not writable here (needs root or a delegated cgroup)";
      return false;
    }
    return true;
  }

  std::string parent_, dir_;
  bool v2_;
};

}  // namespace lockstep::test
