#include "supervisor.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <iostream>

#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "worker_env.hpp"

namespace lockstep::agent {
namespace {

sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&s, sig);
  return s;
}

// Waits up to `timeout` for a stop signal (returned) or a child's exit (SIGCHLD, returns 0
// at once), so the first worker to die is seen before the peers it takes down with it.
int wait_for_event(std::chrono::milliseconds timeout) {
  sigset_t s = stop_signals();
  sigaddset(&s, SIGCHLD);
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>(timeout.count() % 1000) * 1000000L};
  int sig = sigtimedwait(&s, nullptr, &ts);
  return sig == SIGCHLD || sig < 0 ? 0 : sig;
}

// A stop signal, if one is pending; 0 otherwise. Never blocks.
int pending_stop_signal() {
  sigset_t s = stop_signals();
  timespec zero{0, 0};
  int sig = sigtimedwait(&s, nullptr, &zero);
  return sig > 0 ? sig : 0;
}

}  // namespace

Supervisor::Supervisor(const Config& cfg, Metrics* metrics, std::string metrics_dir)
    : cfg_(cfg), metrics_(metrics), metrics_dir_(std::move(metrics_dir)) {}

void Supervisor::block_signals() {
  sigset_t s = stop_signals();
  sigaddset(&s, SIGCHLD);  // taken with sigtimedwait in run()
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool Supervisor::wait_for_master() {
  auto start = std::chrono::steady_clock::now();
  auto next_note = start + std::chrono::seconds(10);
  while (true) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(cfg_.master_addr.c_str(), nullptr, &hints, &res);
    if (res) ::freeaddrinfo(res);
    if (rc == 0) return true;
    auto now = std::chrono::steady_clock::now();
    if (now - start >= cfg_.rendezvous_timeout) {
      LOCKSTEP_LOG(Error, "agent", "the master address '" << cfg_.master_addr << "' (LOCKSTEP_MASTER_ADDR) did not resolve within "
                                   << std::chrono::duration_cast<std::chrono::seconds>(cfg_.rendezvous_timeout).count()
                                   << " s (" << gai_strerror(rc) << "); is pod 0 running and the headless Service there? "
                                   << "(--rendezvous-timeout)");
      return false;
    }
    if (now >= next_note) {
      LOCKSTEP_LOG(Info, "agent", "waiting for the master address '" << cfg_.master_addr << "' to resolve ("
                                  << std::chrono::duration_cast<std::chrono::seconds>(now - start).count() << " s)");
      next_note += std::chrono::seconds(10);
    }
    if (int sig = pending_stop_signal()) {
      LOCKSTEP_LOG(Info, "agent", strsignal(sig) << " while waiting for the master address");
      ::_exit(128 + sig);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void Supervisor::start_group(int local_restarts) {
  workers_.clear();
  workers_.resize(cfg_.nproc_per_node);
  auto inherited = current_environment();
  for (int i = 0; i < cfg_.nproc_per_node; ++i) {
    Worker& w = workers_[i];
    w.local_rank = i;
    w.rank = cfg_.node_rank * cfg_.nproc_per_node + i;
    SpawnOptions so;
    so.argv = cfg_.command;
    so.env = worker_env(cfg_, i, local_restarts, metrics_ ? metrics_->socket_path(i) : "", inherited);
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
  }
  LOCKSTEP_LOG(Info, "agent", "started " << cfg_.nproc_per_node << " worker(s), rank(s) " << workers_.front().rank
                                         << (cfg_.nproc_per_node > 1 ? "-" + std::to_string(workers_.back().rank) : "")
                                         << " of " << cfg_.world_size() << ": " << shell_join(cfg_.command));
}

void Supervisor::print_line(Worker& w, const std::string& line) {
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    std::cout << "[rank " << w.rank << "] " << line << "\n";
  }
  w.tail.push_back(line);
  if (w.tail.size() > 20) w.tail.pop_front();
}

void Supervisor::pump_output() {
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

void Supervisor::stop_group() {
  for (auto& w : workers_)
    if (!w.exited) w.process.signal(SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + cfg_.grace_period;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (auto& w : workers_) {
      if (w.exited) continue;
      if (auto st = w.process.try_wait()) {
        w.exited = true;
        w.status = *st;
      } else {
        all = false;
      }
    }
    pump_output();
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& w : workers_) {
    if (w.exited) continue;
    LOCKSTEP_LOG(Warn, "agent", "rank " << w.rank << " did not stop within the grace period; sending SIGKILL");
    w.process.signal(SIGKILL);
    w.status = w.process.wait();
    w.exited = true;
  }
  // A killed group leader's children may still hold the pipe; a whole group was signalled,
  // so give them a moment, then read what is left.
  for (int i = 0; i < 10; ++i) {
    pump_output();
    bool open = false;
    for (auto& w : workers_) open |= w.out_fd >= 0;
    if (!open) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& w : workers_) {
    if (w.out_fd >= 0) { ::close(w.out_fd); w.out_fd = -1; }
    if (metrics_) metrics_->set_worker_up(w.local_rank, false);
  }
}

int Supervisor::finish(int code, const std::string& why, const Worker* culprit) {
  std::lock_guard<std::mutex> lock(out_mu_);
  std::cout.flush();
  std::cerr << "\nlockstep-agent: " << why << "; exiting with code " << code << "\n";
  if (culprit && !culprit->tail.empty()) {
    std::cerr << "last lines of rank " << culprit->rank << ":\n";
    for (const auto& l : culprit->tail) std::cerr << "  | " << l << "\n";
  }
  std::cerr.flush();
  return code;
}

int Supervisor::run() {
  if (!wait_for_master()) return contract::kExitRendezvous;
  for (int local_restarts = 0;; ++local_restarts) {
    if (metrics_) metrics_->reset_progress();
    start_group(local_restarts);
    const Worker* failed = nullptr;
    int done = 0;
    while (true) {
      pump_output();
      if (int sig = wait_for_event(std::chrono::milliseconds(20))) {
        LOCKSTEP_LOG(Info, "agent", strsignal(sig) << ": stopping the workers (grace period "
                                                   << cfg_.grace_period.count() / 1000.0 << " s)");
        stop_group();
        return finish(128 + sig, std::string("stopped by ") + strsignal(sig), nullptr);
      }
      for (auto& w : workers_) {
        if (w.exited) continue;
        if (auto st = w.process.try_wait()) {
          w.exited = true;
          w.status = *st;
          if (metrics_) metrics_->set_worker_up(w.local_rank, false);
          if (st->success()) ++done;
          else if (!failed) failed = &w;
        }
      }
      if (failed || done == cfg_.nproc_per_node) break;
      // Stall: a rank that has reported steps has gone quiet for too long.
      if (metrics_ && cfg_.stall_timeout.count() > 0) {
        auto now = std::chrono::steady_clock::now();
        std::string stuck;
        for (const auto& p : metrics_->progress())
          if (p.last_step >= 0 && now - p.last_time > cfg_.stall_timeout)
            stuck += (stuck.empty() ? "" : ", ") + std::to_string(p.rank) + " (last step " + std::to_string(p.last_step) + ")";
        if (!stuck.empty()) {
          LOCKSTEP_LOG(Error, "agent", "stall: no step for " << cfg_.stall_timeout.count() / 1000.0
                                       << " s from rank(s) " << stuck
                                       << "; a hung collective or a dead peer (--stall-timeout)");
          metrics_->count_stall();
          stop_group();
          return finish(contract::kExitStall, "stall detected on rank(s) " + stuck, nullptr);
        }
      }
    }
    if (!failed) {
      stop_group();  // collects output; everyone has exited
      return finish(0, "all " + std::to_string(cfg_.nproc_per_node) + " worker(s) finished", nullptr);
    }
    int code = failed->status.shell_code();
    std::string why = "rank " + std::to_string(failed->rank) + " (pid " + std::to_string(failed->process.pid()) +
                      ") " + failed->status.describe() + " first";
    LOCKSTEP_LOG(Error, "agent", why << "; stopping the other workers");
    stop_group();
    if (local_restarts < cfg_.max_restarts) {
      LOCKSTEP_LOG(Warn, "agent", why << "; restarting the worker group (" << local_restarts + 1 << " of "
                                      << cfg_.max_restarts << ")");
      if (metrics_) metrics_->count_restart();
      continue;
    }
    return finish(code, why, failed);
  }
}

}  // namespace lockstep::agent
