#include "supervisor.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "barrier.hpp"
#include "lockstep/random.hpp"
#include "lockstep/text.hpp"
#include "worker_env.hpp"

namespace lockstep::agent {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The container's termination message file (Note [Termination message]): written whole, when
// there is one.
void write_termination_log(const std::string& text) {
  const char* env = std::getenv(contract::kTerminationLog);
  std::string path = env && *env ? env : "/dev/termination-log";
  if (!env && ::access(path.c_str(), W_OK) != 0) return;
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) LOCKSTEP_LOG(Warn, "agent", "cannot write the termination message to " << path);
}

// A verdict from node 0's agent, bounded before it reaches a log or the termination message
// (Note [Barrier trust]).
int verdict_code(const Message& m) {
  int code = m.get_int("exit", contract::kExitRendezvous);
  return code >= 0 && code <= 255 ? code : contract::kExitRendezvous;
}
std::string verdict_why(const Message& m) { return clean_text(m.get("why"), kVerdictWhyBytes); }

// A gauge or counter as a step count: a whole number in [0, 1e15] (what the operator believes).
std::optional<long long> step_count(double v) {
  if (!std::isfinite(v) || v < 0 || v > 1e15 || std::floor(v) != v) return std::nullopt;
  return static_cast<long long>(v);
}

// Rank 0's progress line for a run that succeeded (Note [Termination message]); nothing when
// rank 0 reported no step.
void write_progress_summary(const Metrics& metrics) {
  std::optional<long long> step, total, reports, in_place;
  std::string reason, rank, exit_code;  // the last in-place restart's cause (the agent's own labels)
  for (const auto& family : metrics.registry()->Collect()) {
    const bool is_step = family.name == "lockstep_step", is_total = family.name == "lockstep_total_steps",
               is_reports = family.name == "lockstep_steps_total";
    if (family.name == "lockstep_restarts_total" || family.name == "lockstep_last_restart_info") {
      for (const auto& m : family.metric) {
        std::map<std::string, std::string> l;
        for (const auto& p : m.label) l[p.name] = p.value;
        if (l["kind"] != "in_place") continue;
        if (family.name == "lockstep_restarts_total") {
          in_place = step_count(m.counter.value);
        } else if (m.gauge.value == 1) {
          reason = l["reason"], rank = l["rank"], exit_code = l["exit_code"];
        }
      }
      continue;
    }
    if (!is_step && !is_total && !is_reports) continue;
    for (const auto& m : family.metric) {
      bool rank0 = false;
      for (const auto& l : m.label) rank0 |= l.name == "rank" && l.value == "0";
      if (!rank0) continue;
      if (is_step) step = step_count(m.gauge.value);
      else if (is_total) total = step_count(m.gauge.value);
      else reports = step_count(m.counter.value);
    }
  }
  const bool restarted = in_place && *in_place >= 1;
  const bool stepped = step && reports && *reports >= 1;
  if (!stepped && !restarted) return;
  std::string line = "lockstep-progress";
  if (stepped) line += " step=" + std::to_string(*step);
  if (stepped && total && *total >= 1) line += " total=" + std::to_string(*total);
  // The in-place restarts of this attempt and the last one's cause: the operator counts those
  // made after its last reading of /metrics from here (Note [Final progress]).
  if (restarted) {
    line += " restarts=" + std::to_string(*in_place);
    if (!reason.empty()) line += " reason=" + reason;
    if (!rank.empty() && rank != "-1") line += " rank=" + rank;
    if (!exit_code.empty() && exit_code != "-1") line += " exit=" + exit_code;
  }
  write_termination_log(line + "\n");
}

// The next message that matters at generation `gen`, waiting at most `wait` for the first:
// heartbeats and what is left of older generations are passed over, so a verdict that came
// just before the connection's end is seen before the end is (Note [Heartbeats]).
std::optional<Message> next_message(BarrierClient& barrier, std::chrono::milliseconds wait, int gen) {
  for (auto m = barrier.poll(wait);; m = barrier.poll(std::chrono::milliseconds(0)))
    if (!m || (m->verb != "ALIVE" && m->get_int("gen", gen) >= gen)) return m;
}

// Note [Heartbeats]'s messages: a measured silence ("6.03 s") and a setting ("6 s", "2.5 s").
std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}
std::string setting_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

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
    auto now = std::chrono::steady_clock::now();
    if (rc == 0) {  // said once, so a user (and the cluster tier) sees where the gang meets
      char host[NI_MAXHOST] = "?";
      if (res) ::getnameinfo(res->ai_addr, res->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
      LOCKSTEP_LOG(Info, "agent", "master address '" << cfg_.master_addr << "' resolved to " << host << " after "
                                  << std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count() / 1000.0
                                  << " s");
    }
    if (res) ::freeaddrinfo(res);
    if (rc == 0) return true;
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

void Supervisor::start_group(int generation) {
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
    keep_alive();
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

std::string Supervisor::error_file(int local_rank) const {
  return metrics_dir_.empty() ? "" : metrics_dir_ + "/rank-" + std::to_string(local_rank) + "-error.json";
}

void Supervisor::reap_orphans() {
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

void Supervisor::signal_everything(int sig, std::set<pid_t>* already) {
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

bool Supervisor::descendants_left() {
  for (auto& w : workers_) {
    if (!w.exited) return true;
    if (w.process.pid() > 0 && ::kill(-w.process.pid(), 0) == 0) return true;  // its group lives on
  }
  return !own_children().empty();
}

void Supervisor::stop_group() {
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
    keep_alive();  // Note [Heartbeats]: the grace period may be longer than the peer timeout
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
    keep_alive();
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
        keep_alive();
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

int Supervisor::finish(int code, const std::string& why, const Worker* culprit, const std::optional<Failure>& remote) {
  std::lock_guard<std::mutex> lock(out_mu_);
  std::cout.flush();
  std::cerr << "\nlockstep-agent: " << why << "; exiting with code " << code << "\n";
  std::vector<std::string> tail;
  if (culprit) tail.assign(culprit->tail.begin(), culprit->tail.end());
  else if (remote) tail = split_lines(remote->tail);
  if (!tail.empty()) {
    std::cerr << "last lines of rank " << (culprit ? culprit->rank : remote->rank)
              << (culprit ? "" : " (node " + std::to_string(remote->node) + ")") << ":\n";
    for (const auto& l : tail) std::cerr << "  | " << l << "\n";
  }
  // What torch.distributed.elastic's @record wrote (TORCHELASTIC_ERROR_FILE), as torchrun
  // shows it: the exception and its traceback, bounded.
  if (culprit) {
    std::ifstream f(error_file(culprit->local_rank));
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!text.empty()) {
      if (text.size() > 4000) text = lockstep::text::utf8_head(text, 4000) + "...";
      std::cerr << "error file of rank " << culprit->rank << " (TORCHELASTIC_ERROR_FILE):\n  " << text << "\n";
    }
  }
  std::cerr.flush();
  if (code != 0) write_termination_message(why, tail);
  else if (cfg_.node_rank == 0 && metrics_) write_progress_summary(*metrics_);
  return code;
}

// Note [Termination message]
// In a pod, the kubelet reads /dev/termination-log when the container ends and the operator
// quotes its last line in the TrainingJob's condition (describe_failure). The agent writes
// why it exits, then the failing rank's last lines (sent through the restart barrier when
// that rank ran on another node), so that last line is the program's own
// last words (a flag error, a Python exception) rather than the agent's summary. The file
// exists only in a container (the kubelet mounts it; the agent never creates one under
// /dev); LOCKSTEP_TERMINATION_LOG names another path. Kubernetes keeps 4096 bytes of it:
// the end is kept.
//   A run whose workers all exited 0 has no last words: node 0's agent writes rank 0's progress
// there instead, one line, `lockstep-progress step=N[ total=M][ restarts=K reason=W rank=R exit=E]`, which the operator shows as
// the finished job's progress once the pods and their /metrics are gone (Note [Final progress]
// in operator/reconcile/progress.hpp, which parses it strictly: keep the two in step).
void Supervisor::write_termination_message(const std::string& why, const std::vector<std::string>& tail) const {
  std::string text = "lockstep-agent: " + why + "\n";
  for (const auto& l : tail) text += l + "\n";
  // Note [Silent peer]: the operator's line first, and never cut: the rest keeps its end. A
  // worker's output is any bytes: made UTF-8 before the cut (Note [UTF-8 text]).
  const std::string first = silent_peer_ >= 0 ? std::string(contract::kSilentPeerLine) + " node=" + std::to_string(silent_peer_) + "\n" : "";
  write_termination_log(first + lockstep::text::utf8_tail(lockstep::text::utf8_valid(text), 4096 - first.size()));
}

void Supervisor::note_silent_peer(const Message& verdict) {
  const int node = verdict.get_int("silent", -1);
  if (node >= 0 && node < cfg_.nnodes) silent_peer_ = node;
}

std::string Supervisor::check_stall() {
  if (!metrics_ || !cfg_.stall_detection()) return "";
  auto now = std::chrono::steady_clock::now();
  std::string quiet, never;
  auto progress = metrics_->progress();
  for (size_t i = 0; i < progress.size() && i < workers_.size(); ++i) {
    const auto& p = progress[i];
    if (workers_[i].exited) continue;  // finished ranks report no more steps, rightly
    if (p.last_step >= 0 && now - p.last_time > cfg_.stall_timeout)
      quiet += (quiet.empty() ? "" : ", ") + std::to_string(p.rank) + " (last step " + std::to_string(p.last_step) + ")";
    else if (p.last_step < 0 && cfg_.first_step_detection() && now - p.last_time > cfg_.first_step_timeout)
      never += (never.empty() ? "" : ", ") + std::to_string(p.rank);
  }
  if (!quiet.empty())
    LOCKSTEP_LOG(Error, "agent", "stall: no step for " << cfg_.stall_timeout.count() / 1000.0 << " s from rank(s) " << quiet
                                 << "; a hung collective or a dead peer (--stall-timeout)");
  if (!never.empty())
    LOCKSTEP_LOG(Error, "agent", "stall: no first step within " << cfg_.first_step_timeout.count() / 1000.0
                                 << " s of the start from rank(s) " << never
                                 << "; a hang in rendezvous or the first collective (--first-step-timeout, "
                                    "LOCKSTEP_FIRST_STEP_TIMEOUT; 0 for a program that reports no steps)");
  if (quiet.empty()) return never.empty() ? "" : never + " (no first step)";
  return never.empty() ? quiet : quiet + ", " + never + " (no first step)";
}

void Supervisor::linger_after_stall() {
  if (!metrics_ || metrics_->endpoint().empty() || cfg_.metrics_linger.count() <= 0) return;
  LOCKSTEP_LOG(Info, "agent", "keeping /metrics on " << metrics_->endpoint() << " up for "
                              << cfg_.metrics_linger.count() / 1000.0
                              << " s so the stall is scraped (--metrics-linger; SIGTERM ends it)");
  auto deadline = std::chrono::steady_clock::now() + cfg_.metrics_linger;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    if (int sig = wait_for_event(std::min(left, std::chrono::milliseconds(200)))) {
      LOCKSTEP_LOG(Info, "agent", strsignal(sig) << ": leaving now");
      return;
    }
    reap_orphans();
  }
}

void Supervisor::keep_alive() {
  if (barrier_) barrier_->tick();
}

std::string Supervisor::own_silence(const BarrierClient& barrier) const {
  if (!cfg_.peer_checks()) return "";
  // Node 0's agent: its server's thread may have measured the freeze a little longer than this
  // thread did (Note [Heartbeats]).
  if (std::string why = server_ ? server_->fenced() : ""; !why.empty())
    return why + "; this agent stands down instead of carrying on";
  if (barrier.own_silence() <= cfg_.peer_timeout) return "";
  return "this agent was silent itself for " + seconds_text(barrier.own_silence()) + " (more than " +
         cfg_.peer_timeout_from + ", " + setting_text(cfg_.peer_timeout) +
         "): its process or node was frozen, and its peers have given it up; it stands down instead of carrying on";
}

std::string Supervisor::server_gone(const BarrierClient& barrier) const {
  if (std::string why = server_ ? server_->fenced() : ""; !why.empty())  // node 0's own, after a freeze
    return why + "; this agent stands down instead of carrying on";
  if (barrier.lost())
    return "lost node 0's agent (the restart barrier at " + (barrier.peer().empty() ? cfg_.master_addr : barrier.peer()) +
           "): its pod was deleted or its node lost";
  if (!cfg_.peer_checks() || barrier.server_silence() <= cfg_.peer_timeout) return "";
  silent_peer_ = 0;  // Note [Silent peer]
  return "node 0's agent (" + barrier.peer() + ") said nothing for " + seconds_text(barrier.server_silence()) +
         " (more than " + cfg_.peer_timeout_from + ", " + setting_text(cfg_.peer_timeout) +
         "); treating it as lost (its node frozen, powered off or cut off)";
}

// Joins the restart barrier (Note [Restart barrier]): connects to node 0's agent, retrying
// until the rendezvous timeout, says HELLO and waits for generation 0 to start. Returns the
// agent's exit code if it must stop instead (a refusal, a timeout, a stop signal), else -1.
int Supervisor::join_barrier(BarrierClient& barrier, const std::string& host, int port) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + cfg_.rendezvous_timeout + std::chrono::seconds(30);
  auto next_note = start + std::chrono::seconds(10);
  std::string error;
  bool connected = false;
  bool said_hello = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (int sig = pending_stop_signal()) return finish(128 + sig, std::string("stopped by ") + strsignal(sig) + " while joining the restart barrier", nullptr);
    if (!connected) {
      connected = barrier.connect(host, port, error);
      if (!connected) {
        if (std::chrono::steady_clock::now() >= next_note) {
          LOCKSTEP_LOG(Info, "agent", "waiting for node 0's agent at " << host << ":" << port << " (" << error
                                      << "; LOCKSTEP_AGENT_PORT)");
          next_note += std::chrono::seconds(10);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
    }
    auto m = barrier.poll(std::chrono::milliseconds(100));
    while (m && m->verb == "ALIVE") m = barrier.poll(std::chrono::milliseconds(0));
    if (said_hello) {  // Note [Heartbeats]: a member from here on
      if (std::string why = own_silence(barrier); !why.empty()) {
        barrier.close();
        return finish(contract::kExitRendezvous, why, nullptr);
      }
    }
    if (m && m->verb == "CHALLENGE" && !said_hello) {  // Note [Barrier trust]: prove membership
      Message hello{"HELLO", {{"node", std::to_string(cfg_.node_rank)}, {"run", cfg_.run_id},
                              {"attempt", std::to_string(cfg_.restart_attempt)}}};
      if (!cfg_.barrier_secret.empty())
        hello.fields["proof"] = barrier_proof(cfg_.barrier_secret, m->get("nonce"), cfg_.node_rank,
                                              cfg_.restart_attempt, cfg_.run_id);
      barrier.send(hello);
      said_hello = true;
      continue;
    }
    if (m && m->verb == "EXIT") {
      note_silent_peer(*m);
      return finish(verdict_code(*m), verdict_why(*m), nullptr);
    }
    // A START read together with the connection's end is not acted on (Note [Heartbeats]).
    if (m && m->verb == "START" && m->get_int("gen") == 0 && barrier.lost())
      return finish(contract::kExitRendezvous, server_gone(barrier), nullptr);
    if (said_hello && !barrier.lost())
      if (std::string why = server_gone(barrier); !why.empty()) return finish(contract::kExitRendezvous, why, nullptr);
    if (m && m->verb == "START" && m->get_int("gen") == 0) {
      if (cfg_.nnodes > 1)
        LOCKSTEP_LOG(Info, "agent", "all " << cfg_.nnodes << " agents joined the restart barrier after "
                                    << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count() / 1000.0
                                    << " s (in-place restarts: up to " << cfg_.max_restarts << ", restartPolicy "
                                    << cfg_.restart_policy << ")");
      return -1;
    }
    if (barrier.lost()) {  // node 0's agent restarted or refused us without a word: try again
      connected = said_hello = false;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  return finish(contract::kExitRendezvous, "could not join the restart barrier of node 0's agent at " + host + ":" +
                                               std::to_string(port) + " within the rendezvous timeout (" + error +
                                               "; --rendezvous-timeout, LOCKSTEP_AGENT_PORT)",
                nullptr);
}

int Supervisor::run() {
  // Note [The agent as init]: orphans below us come to us even when we are not PID 1.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (metrics_) {  // Note [Python probe]: said once, as the agent says what else it watches
    if (!cfg_.python_probe_dir.empty())
      LOCKSTEP_LOG(Info, "agent", "python probe: " << cfg_.python_probe_dir << " first on each worker's PYTHONPATH "
                                  "(PyTorch programs report their optimizer steps; LOCKSTEP_PYTHON_PROBE=0 turns it off)");
    else
      LOCKSTEP_LOG(Info, "agent", "python probe: " << cfg_.python_probe_note);
    // Note [NCCL profiler plugin]
    if (cfg_.nccl_profiler.empty())
      LOCKSTEP_LOG(Info, "agent", "NCCL profiler: " << cfg_.nccl_profiler_note);
    else if (const char* theirs = std::getenv(contract::kNcclProfilerPlugin))
      LOCKSTEP_LOG(Info, "agent", "NCCL profiler: the environment's NCCL_PROFILER_PLUGIN=" << theirs
                                  << " kept, so no lockstep_nccl_ series (unset it for the agent's plugin)");
    else
      LOCKSTEP_LOG(Info, "agent", "NCCL profiler: " << cfg_.nccl_profiler << " in each worker's NCCL_PROFILER_PLUGIN "
                                  "(every NCCL operation timed; LOCKSTEP_NCCL_PROFILER=0 turns it off)");
  }
  if (!wait_for_master()) return contract::kExitRendezvous;
  // Note [Restart barrier]: node 0's agent serves it; a single node keeps it on loopback.
  std::unique_ptr<BarrierServer> server;
  // Note [Barrier trust]: a single node is its own peer, so it can draw its own secret.
  if (cfg_.nnodes == 1 && cfg_.barrier_secret.empty()) cfg_.barrier_secret = random_hex(32);
  if (cfg_.node_rank == 0) {
    try {
      server = cfg_.nnodes == 1 ? std::make_unique<BarrierServer>(cfg_, "127.0.0.1", 0)
                                : std::make_unique<BarrierServer>(cfg_, "0.0.0.0", cfg_.barrier_port());
    } catch (const std::exception& e) {
      return finish(contract::kExitUsage, e.what(), nullptr);
    }
  }
  BarrierClient barrier;
  barrier.set_heartbeat_interval(cfg_.heartbeat_interval());
  // Note [Heartbeats]: every loop below ticks the barrier, stop_group's included.
  struct Ticking {
    Supervisor& s;
    ~Ticking() {
      s.barrier_ = nullptr;
      s.server_ = nullptr;
    }
  } ticking{*this};
  barrier_ = &barrier;
  server_ = server.get();
  if (int code = join_barrier(barrier, server ? "127.0.0.1" : cfg_.master_addr,
                              server ? server->port() : cfg_.barrier_port());
      code >= 0)
    return code;

  for (int gen = 0;;) {
    if (metrics_) metrics_->reset_progress(gen);
    start_group(gen);
    Generation g = watch_generation(gen, barrier);
    if (g.exit) return *g.exit;
    if (auto code = await_verdict(gen, barrier, g)) return *code;
  }
}

// Watches the workers and the barrier until generation `gen` ends on this node: every worker
// finished, one failed or stalled (reported to the barrier), another node failed (STOP), or
// the agent itself must exit (`exit`: a signal, the barrier's EXIT, the barrier lost).
Supervisor::Generation Supervisor::watch_generation(int gen, BarrierClient& barrier) {
  Generation r;
  auto& mine = r.mine;
  auto& culprit = r.culprit;
  auto& done = r.done;
  // Watch the workers and the barrier until this generation ends here.
  while (true) {
    pump_output();
    if (int sig = wait_for_event(std::chrono::milliseconds(20))) {
      LOCKSTEP_LOG(Info, "agent", strsignal(sig) << ": stopping the workers (grace period "
                                                 << cfg_.grace_period.count() / 1000.0 << " s)");
      stop_group();
      r.exit = finish(128 + sig, std::string("stopped by ") + strsignal(sig), nullptr);
      return r;
    }
    // Note [Heartbeats]: a thawed agent acts on nothing it reads or sees after the freeze.
    barrier.tick();
    if (std::string why = own_silence(barrier); !why.empty()) {
      barrier.close();  // node 0's agent learns at once, if it is still there
      LOCKSTEP_LOG(Error, "agent", why << "; stopping the workers");
      stop_group();
      r.exit = finish(contract::kExitRendezvous, why, nullptr);
      return r;
    }
    for (auto& w : workers_) {
      if (w.exited) continue;
      if (auto st = w.process.try_wait()) {
        w.exited = true;
        w.status = *st;
        if (metrics_) metrics_->set_worker_up(w.local_rank, false);
        if (st->success()) ++done;
        // Of the workers found dead at once, one that is not a peer's consequence (a lost
        // collective: contract::kExitCollective) is the cause.
        else if (!culprit || (contract::exit_code_is_consequence(culprit->status.shell_code()) &&
                              !contract::exit_code_is_consequence(st->shell_code())))
          culprit = &w;
      }
    }
    if (culprit) {
      pump_output();  // the culprit has exited: its last words are in the pipe now
      mine = Failure{cfg_.node_rank, culprit->rank, culprit->status.shell_code(), "WorkerFailed", unix_ms(),
                     "rank " + std::to_string(culprit->rank) + " (pid " + std::to_string(culprit->process.pid()) +
                         ") " + culprit->status.describe(), ""};
      for (const auto& l : culprit->tail) mine->tail += l + "\n";
      LOCKSTEP_LOG(Error, "agent", mine->what << " first; stopping the other workers");
      barrier.send(failure_message("FAILED", gen, mine));
      break;
    }
    if (done == cfg_.nproc_per_node) break;
    reap_orphans();
    std::string stuck = check_stall();
    if (!stuck.empty()) {
      metrics_->count_stall();
      mine = Failure{cfg_.node_rank, std::atoi(stuck.c_str()), contract::kExitStall, "Stall", unix_ms(),
                     "stall detected on rank(s) " + stuck, ""};
      barrier.send(failure_message("FAILED", gen, mine));
      break;
    }
    auto m = next_message(barrier, std::chrono::milliseconds(0), gen);
    if (m && m->verb == "STOP" && m->get_int("gen") == gen) {
      LOCKSTEP_LOG(Info, "agent", "another node failed: stopping this node's workers for the restart barrier");
      break;
    }
    if (m && m->verb == "EXIT") {
      stop_group();
      note_silent_peer(*m);
      r.exit = finish(verdict_code(*m), verdict_why(*m), nullptr);
      return r;
    }
    if (std::string why = server_gone(barrier); !why.empty()) {  // lost, or silent (Note [Heartbeats])
      LOCKSTEP_LOG(Error, "agent", why << "; stopping the workers");
      stop_group();
      r.exit = finish(contract::kExitRendezvous, why, nullptr);
      return r;
    }
  }
  return r;
}

// After generation `gen` ended here: stops the workers, tells the barrier (DONE or STOPPED) and
// waits for its verdict. nullopt with `gen` advanced: the next generation starts; else the
// agent's exit code.
std::optional<int> Supervisor::await_verdict(int& gen, BarrierClient& barrier, const Generation& g) {
  const auto& mine = g.mine;
  const Worker* culprit = g.culprit;
  const bool finished = !mine && g.done == cfg_.nproc_per_node;
  stop_group();  // collects output; for a finished node, everyone has exited already
  barrier.send(failure_message(finished ? "DONE" : "STOPPED", gen, mine));
  const std::string all_finished = "all " + std::to_string(cfg_.nproc_per_node) + " worker(s) finished";
  // Wait for the barrier's verdict: the next generation, or the end. A finished node may
  // wait as long as its peers train; a stopped one only as long as stopping can take.
  const auto deadline = std::chrono::steady_clock::now() + cfg_.grace_period + std::chrono::seconds(60);
  while (true) {
    if (int sig = wait_for_event(std::chrono::milliseconds(0))) {
      LOCKSTEP_LOG(Info, "agent", strsignal(sig) << " while waiting at the restart barrier");
      return finish(128 + sig, std::string("stopped by ") + strsignal(sig), nullptr);
    }
    auto m = next_message(barrier, std::chrono::milliseconds(50), gen);
    reap_orphans();
    // Note [Heartbeats]: a thawed agent never starts workers again; a finished one has none
    // to stop and leaves as finished, as when the barrier is lost.
    if (std::string why = own_silence(barrier); !why.empty()) {
      barrier.close();
      if (finished) return finish(0, all_finished + "; " + why, nullptr);
      return finish(contract::kExitRendezvous, why, nullptr);
    }
    if (m && m->verb == "EXIT") {
      note_silent_peer(*m);
      int code = verdict_code(*m);
      auto cause = failure_of(*m);
      if (code == 0) return finish(0, all_finished, nullptr);
      if (mine && mine->reason == "Stall") linger_after_stall();
      const bool here = cause && cause->node == cfg_.node_rank;
      if (here && culprit) return finish(code, verdict_why(*m), culprit);
      // The cause ran on another node: quote its last words as that node's agent sent them,
      // so whichever pod the operator reads first tells the user what went wrong.
      return finish(code, verdict_why(*m), nullptr, cause ? std::optional<Failure>(cause) : std::nullopt);
    }
    // Lost or silent (Note [Heartbeats]), before a START or STOP that came with the end is
    // acted on.
    if (std::string why = server_gone(barrier); !why.empty()) {
      if (finished) {
        LOCKSTEP_LOG(Warn, "agent", why << "; this node's workers all finished, so it leaves without the barrier's verdict");
        return finish(0, all_finished + "; " + why, nullptr);
      }
      return finish(contract::kExitRendezvous, why, nullptr);
    }
    if (m && m->verb == "STOP" && m->get_int("gen") == gen) {  // after DONE: a peer failed
      barrier.send(failure_message("STOPPED", gen, std::nullopt));
      continue;
    }
    if (m && m->verb == "START" && m->get_int("gen") == gen + 1) {
      gen += 1;
      auto cause = failure_of(*m);
      LOCKSTEP_LOG(Warn, "agent", "restart barrier: " << verdict_why(*m) << "; starting generation " << gen
                                                      << " (TORCHELASTIC_RESTART_COUNT=" << cfg_.restart_attempt + gen << ")");
      if (metrics_) metrics_->count_in_place_restart(cause ? cause->reason : "WorkerFailed", cause ? cause->rank : -1,
                                                     cause ? cause->code : 0, gen, verdict_why(*m));
      return std::nullopt;
    }
    if (!finished && std::chrono::steady_clock::now() > deadline)
      return finish(contract::kExitRendezvous, "the restart barrier gave no verdict in time (a node could not stop its workers?)", nullptr);
  }
}

}  // namespace lockstep::agent
