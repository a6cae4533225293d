#include "lockstep/process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace lockstep {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// The merged environment as "K=V" strings.
std::vector<std::string> build_env(const SpawnOptions& o) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) merged[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& k : o.unset_env) merged.erase(k);
  for (const auto& [k, v] : o.env) merged[k] = v;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [k, v] : merged) out.push_back(k + "=" + v);
  return out;
}

// execve needs a path; look argv[0] up in the PATH the child will have.
std::string resolve(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& kv : env)
    if (kv.rfind("PATH=", 0) == 0) path = kv.substr(5);
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  throw std::runtime_error("cannot run '" + name + "': not found in PATH (" + path + ")");
}

[[noreturn]] void child_fail(int fd, int err) {
  (void)!::write(fd, &err, sizeof err);
  ::_exit(127);
}

}  // namespace

std::string ExitStatus::describe() const {
  if (signal) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exited with code " + std::to_string(code);
}

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) s.code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
  return s;
}

namespace {

// Forks and execs `o`, with the child's stdin from `in_fd` (-1: /dev/null) and stdout and
// stderr to `out_fd` (-1: inherited). Reports exec failure as an exception, not a child exit.
pid_t fork_exec(const SpawnOptions& o, int in_fd, int out_fd) {
  if (o.argv.empty()) throw std::invalid_argument("spawn: empty argv");
  std::vector<std::string> env = build_env(o);
  std::string exe = resolve(o.argv[0], env);
  std::vector<char*> argv, envp;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + errno_text(errno));
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(err_pipe[0]); ::close(err_pipe[1]);
    throw std::runtime_error("fork: " + errno_text(err));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2})
      ::signal(sig, SIG_DFL);
    if (o.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(137);  // parent already gone
    }
    if (o.new_process_group) ::setpgid(0, 0);
    if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) child_fail(err_pipe[1], errno);
    if (in_fd < 0) in_fd = ::open("/dev/null", O_RDONLY);
    if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
    if (out_fd >= 0) {
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(out_fd, STDERR_FILENO);
    }
    ::execve(exe.c_str(), argv.data(), envp.data());
    child_fail(err_pipe[1], errno);
  }
  ::close(err_pipe[1]);
  if (o.new_process_group) ::setpgid(pid, pid);  // also here, so it holds before we signal
  int child_errno = 0;
  ssize_t n;
  do { n = ::read(err_pipe[0], &child_errno, sizeof child_errno); } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (n > 0) {
    int st;
    ::waitpid(pid, &st, 0);
    throw std::runtime_error("cannot run '" + exe + "': " + errno_text(child_errno));
  }
  return pid;
}

}  // namespace

Process Process::spawn(const SpawnOptions& o) {
  int out_fd = -1;
  if (!o.output_path.empty()) {
    out_fd = ::open(o.output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) throw std::runtime_error("cannot open " + o.output_path + ": " + errno_text(errno));
  }
  pid_t pid;
  try {
    pid = fork_exec(o, -1, out_fd >= 0 ? out_fd : o.output_fd);
  } catch (...) {
    if (out_fd >= 0) ::close(out_fd);
    throw;
  }
  if (out_fd >= 0) ::close(out_fd);
  return Process(pid, o.new_process_group);
}

Process::Process(Process&& other) noexcept
    : pid_(other.pid_), own_group_(other.own_group_), status_(other.status_) {
  other.pid_ = -1;
}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_) { ::kill(pid_, SIGKILL); int st; ::waitpid(pid_, &st, 0); }
    pid_ = other.pid_; own_group_ = other.own_group_; status_ = other.status_;
    other.pid_ = -1;
  }
  return *this;
}

Process::~Process() {
  if (pid_ > 0 && !status_) {
    signal(SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
}

std::optional<ExitStatus> Process::try_wait() {
  if (status_ || pid_ <= 0) return status_;
  int st;
  pid_t r;
  do { r = ::waitpid(pid_, &st, WNOHANG); } while (r < 0 && errno == EINTR);
  if (r == pid_) status_ = ExitStatus::from_wait_status(st);
  return status_;
}

bool Process::running() { return pid_ > 0 && !try_wait(); }

ExitStatus Process::wait() {
  if (status_ || pid_ <= 0) return status_.value_or(ExitStatus{});
  int st;
  pid_t r;
  do { r = ::waitpid(pid_, &st, 0); } while (r < 0 && errno == EINTR);
  status_ = r == pid_ ? ExitStatus::from_wait_status(st) : ExitStatus{};
  return *status_;
}

std::optional<ExitStatus> Process::wait_for(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return status_.value_or(ExitStatus{});  // never started: it has "ended"
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto step = std::chrono::milliseconds(1);
  while (true) {
    if (auto s = try_wait()) return s;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, std::chrono::milliseconds(50));
  }
}

void Process::signal(int sig) {
  if (pid_ <= 0 || status_) return;
  if (own_group_ && ::kill(-pid_, sig) == 0) return;
  ::kill(pid_, sig);
}

ExitStatus Process::terminate(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return status_.value_or(ExitStatus{});  // never started: nothing to wait out
  if (auto s = try_wait()) return *s;
  signal(SIGTERM);
  if (auto s = wait_for(grace)) return *s;
  signal(SIGKILL);
  return wait();
}

RunResult run_capture(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env,
                      std::chrono::milliseconds timeout, const std::string& stdin_data) {
  SpawnOptions so;
  so.argv = argv;
  so.env = env;
  so.new_process_group = true;  // so a timeout kills what it started, too
  int out[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + errno_text(errno));
  if (::pipe2(in, O_CLOEXEC) != 0) {
    ::close(out[0]); ::close(out[1]);
    throw std::runtime_error("pipe: " + errno_text(errno));
  }
  pid_t pid;
  try {
    pid = fork_exec(so, in[0], out[1]);
  } catch (...) {
    for (int fd : {out[0], out[1], in[0], in[1]}) ::close(fd);
    throw;
  }
  ::close(out[1]);
  ::close(in[0]);
  Process proc(pid, true);

  RunResult result;
  size_t written = 0;
  int in_fd = in[1];
  if (stdin_data.empty()) { ::close(in_fd); in_fd = -1; }
  else ::fcntl(in_fd, F_SETFL, O_NONBLOCK);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  bool out_open = true;
  while (out_open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) { result.timed_out = true; break; }
    pollfd fds[2] = {{out[0], POLLIN, 0}, {in_fd, POLLOUT, 0}};
    int nfds = in_fd >= 0 ? 2 : 1;
    int r = ::poll(fds, nfds, static_cast<int>(std::min<long>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n > 0) result.output.append(buf, n);
      else if (n == 0 || errno != EINTR) out_open = false;
    }
    if (in_fd >= 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = ::write(in_fd, stdin_data.data() + written, stdin_data.size() - written);
      if (n > 0) written += n;
      if (n < 0 && errno != EAGAIN && errno != EINTR) written = stdin_data.size();
      if (written >= stdin_data.size()) { ::close(in_fd); in_fd = -1; }
    }
  }
  if (in_fd >= 0) ::close(in_fd);
  ::close(out[0]);
  if (result.timed_out) result.status = proc.terminate(std::chrono::seconds(2));
  else result.status = proc.wait();
  return result;
}

namespace {

// A socket bound to `port` on `address` (0: the OS picks), or -1; the port it got in `*got`.
int bound_socket(in_addr_t address, int port, int* got) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket: " + errno_text(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(address);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  *got = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

int free_loopback_port() {
  // The next port must be free too, on every address: an agent's restart barrier listens on its
  // master port + 1 (on 0.0.0.0) unless told otherwise, and a test or a local run that picks a
  // master port this way must not find that one taken (an outgoing connection's local port, say).
  for (int attempt = 0; attempt < 64; ++attempt) {
    int port = 0;
    int fd = bound_socket(INADDR_LOOPBACK, 0, &port);
    if (fd < 0) throw std::runtime_error("cannot find a free loopback port: " + errno_text(errno));
    int next = 0;
    int fd_next = port < 65535 ? bound_socket(INADDR_ANY, port + 1, &next) : -1;
    ::close(fd);
    if (fd_next >= 0) {
      ::close(fd_next);
      return port;
    }
  }
  throw std::runtime_error("cannot find a free loopback port whose next port is free too");
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && a.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@%+") == std::string::npos;
    if (plain) { out += a; continue; }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

}  // namespace lockstep
