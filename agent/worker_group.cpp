#include "worker_group.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "worker_env.hpp"

namespace lockstep::agent {
namespace {

// /proc/PID/stat, or "" once the process is gone. Read with read(2): a process that exits
// between the open and the read makes the read fail with ESRCH, which libstdc++'s filebuf
// turns into an exception ("basic_filebuf::underflow error reading the file: No such
// process") that once ended an agent whose workers were fine.
std::string proc_stat(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[1024];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      out.clear();
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// The processes whose parent is this one, from /proc: the workers and the orphans adopted
// (Note [The agent as init]).
std::vector<pid_t> own_children() {
  std::vector<pid_t> out;
  const pid_t self = ::getpid();
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    const std::string stat = proc_stat(pid);
    auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == self) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

}  // namespace

WorkerGroup::WorkerGroup(const Config& cfg, Metrics* metrics, std::string metrics_dir, std::function<void()> keep_alive)
    : cfg_(cfg), metrics_(metrics), metrics_dir_(std::move(metrics_dir)), keep_alive_(std::move(keep_alive)) {}

void WorkerGroup::start(int generation) {
  workers_.clear();
  workers_.resize(cfg_.nproc_per_node);
  auto inherited = current_environment();
  for (int i = 0; i < cfg_.nproc_per_node; ++i) {
    Worker& w = workers_[i];
    w.local_rank = i;
    w.rank = cfg_.node_rank * cfg_.nproc_per_node + i;
    SpawnOptions so;
    so.argv = cfg_.command;
    std::string errors = error_file(i);
    if (!errors.empty()) ::unlink(errors.c_str());  // only this attempt's error counts
    so.env = worker_env(cfg_, i, generation, metrics_ ? metrics_->socket_path(i) : "", inherited, errors);
    so.unset_env.push_back(contract::kBarrierSecret);  // Note [Barrier trust]: the agent's alone
    so.new_process_group = true;
    int pipe_fds[2] = {-1, -1};
    if (!cfg_.log_dir.empty()) {
      so.output_path = cfg_.log_dir + "/rank-" + std::to_string(w.rank) + ".log";
    } else {
      if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + std::string(std::strerror(errno)));
      so.output_fd = pipe_fds[1];
    }
    try {
      w.process = Process::spawn(so);
    } catch (...) {
      if (pipe_fds[0] >= 0) { ::close(pipe_fds[0]); ::close(pipe_fds[1]); }
      throw;
    }
    if (pipe_fds[1] >= 0) {
      ::close(pipe_fds[1]);
      w.out_fd = pipe_fds[0];
      ::fcntl(w.out_fd, F_SETFL, O_NONBLOCK);
    }
    if (metrics_) metrics_->set_worker_up(i, true);
    keep_alive_();
  }
  LOCKSTEP_LOG(Info, "agent", "started " << cfg_.nproc_per_node << " worker(s), rank(s) " << workers_.front().rank
                                         << (cfg_.nproc_per_node > 1 ? "-" + std::to_string(workers_.back().rank) : "")
                                         << " of " << cfg_.world_size() << ": " << shell_join(cfg_.command));
}

void WorkerGroup::print_line(Worker& w, const std::string& line) {
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    std::cout << "[rank " << w.rank << "] " << line << "\n";
  }
  w.tail.push_back(line);
  if (w.tail.size() > 20) w.tail.pop_front();
}

void WorkerGroup::pump_output() {
  char buf[8192];
  for (auto& w : workers_) {
    if (w.out_fd < 0) continue;
    while (true) {
      ssize_t n = ::read(w.out_fd, buf, sizeof buf);
      if (n > 0) {
        w.partial.append(buf, static_cast<size_t>(n));
        size_t pos;
        while ((pos = w.partial.find('\n')) != std::string::npos) {
          print_line(w, w.partial.substr(0, pos));
          w.partial.erase(0, pos + 1);
        }
        continue;
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {  // writer gone
        if (!w.partial.empty()) print_line(w, w.partial);
        w.partial.clear();
        ::close(w.out_fd);
        w.out_fd = -1;
      }
      break;
    }
  }
  std::cout.flush();
}

std::string WorkerGroup::error_file(int local_rank) const {
  return metrics_dir_.empty() ? "" : metrics_dir_ + "/rank-" + std::to_string(local_rank) + "-error.json";
}

void WorkerGroup::reap_orphans() {
  while (true) {
    siginfo_t info{};
    // Peek first (WNOWAIT): a worker's status belongs to its Process, collected by run().
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    for (auto& w : workers_)
      if (!w.exited && w.process.pid() == info.si_pid) return;
    int st;
    ::waitpid(info.si_pid, &st, WNOHANG);
  }
}

void WorkerGroup::signal_everything(int sig, std::set<pid_t>* already) {
  // Each worker's whole group, even once its leader has exited: its children may live on in
  // it. (A group id is not reused while a member is left, so this reaches no stranger.)
  for (auto& w : workers_)
    if (w.process.pid() > 0 && (!already || already->insert(w.process.pid()).second)) ::kill(-w.process.pid(), sig);
  for (pid_t p : own_children()) {
    bool worker = false;
    for (auto& w : workers_) worker |= w.process.pid() == p;
    if (worker || (already && !already->insert(p).second)) continue;
    ::kill(p, sig);
    if (::getpgid(p) == p) ::kill(-p, sig);  // one that made its own group (setsid) takes it along
  }
}

bool WorkerGroup::descendants_left() {
  for (auto& w : workers_) {
    if (!w.exited) return true;
    if (w.process.pid() > 0 && ::kill(-w.process.pid(), 0) == 0) return true;  // its group lives on
  }
  return !own_children().empty();
}

void WorkerGroup::stop() {
  auto collect = [&] {
    for (auto& w : workers_) {
      if (w.exited) continue;
      if (auto st = w.process.try_wait()) {
        w.exited = true;
        w.status = *st;
      }
    }
    reap_orphans();
  };
  // SIGTERM to everything below us; processes adopted later (when their parent dies) get
  // theirs as they appear. What is left at the end of the grace period gets SIGKILL.
  std::set<pid_t> termed;
  signal_everything(SIGTERM, &termed);
  // A stopped process (SIGSTOP, a debugger's detach gone wrong: one way a rank stalls) only
  // acts on SIGTERM once continued; without this it would sit out the whole grace period.
  std::set<pid_t> continued;
  signal_everything(SIGCONT, &continued);
  auto deadline = std::chrono::steady_clock::now() + cfg_.grace_period;
  while (std::chrono::steady_clock::now() < deadline) {
    keep_alive_();  // Note [Heartbeats]: the grace period may be longer than the peer timeout
    collect();
    pump_output();
    if (!descendants_left()) break;
    signal_everything(SIGTERM, &termed);
    signal_everything(SIGCONT, &continued);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& w : workers_)
    if (!w.exited)
      LOCKSTEP_LOG(Warn, "agent", "rank " << w.rank << " did not stop within the grace period; sending SIGKILL");
  // SIGKILL cannot be ignored, but each kill may orphan more processes to us: repeat until
  // nothing is left (bounded: a process in uninterruptible sleep may take its time).
  auto kill_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (descendants_left() && std::chrono::steady_clock::now() < kill_deadline) {
    keep_alive_();
    signal_everything(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    collect();
  }
  if (descendants_left()) LOCKSTEP_LOG(Warn, "agent", "some worker processes survived SIGKILL for 10 s (uninterruptible sleep?)");
  for (auto& w : workers_) {
    while (!w.exited) {  // as long as it takes, still heartbeating: the barrier's stop deadline judges it
      if (auto st = w.process.try_wait()) {
        w.status = *st;
        w.exited = true;
      } else {
        keep_alive_();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
  // Whatever held the pipes is gone now: read what is left.
  pump_output();
  for (auto& w : workers_) {
    if (w.out_fd >= 0) { ::close(w.out_fd); w.out_fd = -1; }
    if (metrics_) metrics_->set_worker_up(w.local_rank, false);
  }
}

}  // namespace lockstep::agent
