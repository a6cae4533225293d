// Small helpers the process-level test suites share: polling, reading files, and finding
// every process a test started (to prove none is left behind).
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

namespace lockstep::test {

// A TCP connection to 127.0.0.1:port, or -1. Non-blocking: returned while the connect is
// still in progress.
inline int dial_loopback(int port, bool nonblocking = false) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && !(nonblocking && errno == EINPROGRESS)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A listening TCP socket on `ip` (loopback by default) at a port the kernel picks, written to
// `port`; -1 when it cannot be had. For the scripted servers of the client and transport tests.
inline int listen_loopback(int& port, int backlog = 16, const char* ip = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(fd, backlog) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(a.sin_port);
  return fd;
}

// Writes all of `s` to socket `fd`; false when the peer is gone first (no SIGPIPE).
inline bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

struct Get {
  int status = 0;  // 0: no answer
  long long ms = 0;
  std::string body;
};

// One GET of 127.0.0.1:port`path` with a fresh connection, as the kubelet's probe and
// Prometheus make it, reading the answer until the server closes; gives up after `timeout`
// (status 0 when no whole head came by then).
inline Get http_get(int port, const std::string& path, std::chrono::milliseconds timeout = std::chrono::seconds(3)) {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  };
  Get g;
  auto t0 = Clock::now();
  int fd = dial_loopback(port, true);
  if (fd < 0) return g;
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: Prometheus/2.42.0\r\n"
                    "Accept: text/plain;version=0.0.4;q=1,*/*;q=0.1\r\nConnection: close\r\n\r\n";
  std::string data;
  size_t sent = 0;
  while (ms_since(t0) < timeout.count()) {
    pollfd p{fd, static_cast<short>(sent < req.size() ? POLLOUT : POLLIN), 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    if (sent < req.size()) {
      ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN) break;
      if (n > 0) sent += static_cast<size_t>(n);
      continue;
    }
    char buf[16384];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  g.ms = ms_since(t0);
  if (data.rfind("HTTP/1.", 0) == 0 && data.size() >= 12) g.status = std::atoi(data.c_str() + 9);
  size_t body = data.find("\r\n\r\n");
  if (body != std::string::npos) g.body = data.substr(body + 4);
  return g;
}

// The environment variable `name` when set and not empty, else `fallback`: the test binaries
// find the programs under test through variables ctest sets (tests/CMakeLists.txt).
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// Polls `pred` every 50 ms until it holds or `timeout` passes; returns its last answer.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

// The file's text; "" when it cannot be opened or read. A /proc/PID file of a process that
// exits while it is read fails the read with ESRCH, which libstdc++'s filebuf throws as
// ios_base::failure; for the callers that is a process that is gone, not an error (a test that
// scans /proc while other tests start and end processes beside it: Note [Two lanes]).
inline std::string read_file(const std::string& path) {
  try {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  } catch (const std::exception&) {
    return "";
  }
}

// The number on a /proc/PID/status line of process `pid` (0: this one): VmRSS and VmHWM in KiB,
// Threads, ...; -1 when the process or the line is not there.
inline long proc_status(pid_t pid, const std::string& field) {
  std::istringstream in(read_file("/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/status"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

// The state letter of /proc/PID/stat ('R', 'S', 'Z', ...), or 0 when there is no such process.
inline char process_state(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

// Running, as opposed to gone or a zombie waiting to be reaped.
inline bool is_running(pid_t pid) {
  char s = process_state(pid);
  return s != 0 && s != 'Z';
}

// Every live process descended from `root`, found through /proc.
inline std::set<pid_t> descendants(pid_t root) {
  std::map<pid_t, pid_t> parent;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      pid_t pid = std::atoi(e->d_name);
      if (pid <= 0) continue;
      std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
      auto close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 2));
      std::string state;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (state != "Z") parent[pid] = ppid;
    }
    ::closedir(d);
  }
  std::set<pid_t> out{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (auto [pid, pp] : parent)
      if (out.count(pp) && out.insert(pid).second) grew = true;
  }
  out.erase(root);
  return out;
}

// For a suite main() that owns a fixture (a control plane, a cluster): blocks SIGINT, SIGTERM
// and SIGHUP before any other thread exists and takes them on one thread, which runs
// `tear_down(signal)` and exits 128+signal, so Ctrl-C or a ctest timeout still tears it down.
inline void on_stop_signal(std::function<void(int)> tear_down) {
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, s);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::thread([stop, tear_down = std::move(tear_down)] {
    int sig = 0;
    sigwait(&stop, &sig);
    tear_down(sig);
    ::_exit(128 + sig);
  }).detach();
}

// A suite's shared objects (its operator, its client, ...) deleted in the order given, each
// pointer cleared: TearDownTestSuite's work.
template <class... T>
void delete_in_order(T*&... objects) {
  ((delete objects, objects = nullptr), ...);
}

}  // namespace lockstep::test
