// What the trainer suites need beyond lockstep::run_capture: a child's peak resident memory
// as the kernel counts it, and the step datagrams the trainer sends to its agent.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace lockstep::test {

struct MeasuredRun {
  int code = -1;          // exit code, or 128 + signal
  long peak_rss_kb = 0;   // largest resident set of the child and every descendant it reaped
  std::string output;     // stdout and stderr
};

// Runs argv (with `env` added) to completion and returns its peak RSS from wait4(): the
// kernel's figure (ru_maxrss), which for a process that waited for its own children (the
// agent for its ranks) is the largest of them all, so a rank's peak under lockstep-agent.
inline MeasuredRun run_measured(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                                const std::string& output_path) {
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed test takes its trainers with it
    int fd = ::open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  while (::wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
  }
  MeasuredRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.peak_rss_kb = ru.ru_maxrss;
  std::ifstream in(output_path);
  r.output.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

// A bound Unix datagram socket standing in for the agent's metrics socket
// (LOCKSTEP_METRICS_SOCKET, docs/metrics.md); drain() returns each step's fields.
class DatagramSink {
 public:
  explicit DatagramSink(const std::string& path) : path_(path) {
    ::unlink(path.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("cannot bind a datagram socket at " + path + ": " + std::strerror(errno));
    int size = 4 << 20;  // room for every step of a short run: nobody reads while it trains
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
  ~DatagramSink() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  std::vector<std::map<std::string, std::string>> drain() {
    std::vector<std::map<std::string, std::string>> steps;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd_, buf, sizeof buf, 0)) > 0;) {
      std::map<std::string, std::string> fields;
      std::string line(buf, static_cast<size_t>(n));
      size_t pos = 0;
      while (pos < line.size()) {
        size_t end = line.find(' ', pos);
        if (end == std::string::npos) end = line.size();
        std::string kv = line.substr(pos, end - pos);
        if (auto eq = kv.find('='); eq != std::string::npos) fields[kv.substr(0, eq)] = kv.substr(eq + 1);
        pos = end + 1;
      }
      steps.push_back(fields);
    }
    return steps;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace lockstep::test
