// Runs the worker group and watches it (docs/agent.md, "Supervision"): spawns nproc workers with their
// torchrun environment, passes their output through with a rank prefix (or to per-rank
// files), and ends the group the moment anything goes wrong:
//   * a worker fails        -> the others get SIGTERM, then SIGKILL after the grace period,
//                              and every node's agent does the same (Note [Restart barrier]):
//                              all workers restart in place, up to --max-restarts, or every
//                              agent exits with that worker's own exit code;
//   * no step for too long  -> a stall: the stuck ranks are logged, the group stopped, exit 75;
//     also a rank with no first step within --first-step-timeout of its start (a hang in
//     rendezvous or the first collective); /metrics then lingers so the stall is scraped;
//   * SIGTERM/SIGINT        -> forwarded to every worker, SIGKILL after the grace period.
// Note [The agent as init]
// The agent is PID 1 of its container, and otherwise a child subreaper
// (PR_SET_CHILD_SUBREAPER), so every orphan below it is re-parented to it. It reaps them as it
// goes (no zombies), and a stop reaches every descendant: each worker runs in its own process
// group, which is signalled as a whole even after its leader has exited, and processes that
// left their worker's group (setsid, daemons) are found as the agent's adopted children once
// their parent is gone, and signalled with their own groups. lockstep::Process also makes each
// worker die with the agent if the agent is killed outright.
#pragma once

#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "barrier.hpp"
#include "config.hpp"
#include "lockstep/process.hpp"
#include "metrics.hpp"

namespace lockstep::agent {

class BarrierClient;

class Supervisor {
 public:
  Supervisor(const Config& cfg, Metrics* metrics, std::string metrics_dir);
  // Blocks the stop signals; call before any other thread starts.
  static void block_signals();
  int run();  // the agent's exit code

 private:
  struct Worker {
    int local_rank = 0, rank = 0;
    Process process;
    int out_fd = -1;
    std::string partial;           // output not yet ended by a newline
    std::deque<std::string> tail;  // last lines, for the failure summary
    bool exited = false;
    ExitStatus status;
  };
  // One generation on this node (run()): how it ended here.
  struct Generation {
    std::optional<int> exit;      // the agent exits with this code
    std::optional<Failure> mine;  // this agent's first failure in it
    const Worker* culprit = nullptr;
    int done = 0;                 // workers that finished
  };
  Generation watch_generation(int gen, BarrierClient& barrier);
  std::optional<int> await_verdict(int& gen, BarrierClient& barrier, const Generation& g);
  bool wait_for_master();
  int join_barrier(BarrierClient& barrier, const std::string& host, int port);
  // Note [Heartbeats]: ticks the barrier's client, if there is one (in loops that may outlast
  // a heartbeat interval).
  void keep_alive();
  // Note [Heartbeats]: why this agent's membership has ended, or "" while it holds: its own
  // silence (it was frozen); node 0's agent lost or silent.
  std::string own_silence(const BarrierClient& barrier) const;
  std::string server_gone(const BarrierClient& barrier) const;
  void start_group(int generation);
  void stop_group();
  void signal_everything(int sig, std::set<pid_t>* already = nullptr);
  bool descendants_left();  // a worker or an adopted child not yet gone
  void reap_orphans();      // Note [The agent as init]
  std::string check_stall();
  void linger_after_stall();
  std::string error_file(int local_rank) const;
  void write_termination_message(const std::string& why, const std::vector<std::string>& tail) const;
  void pump_output();
  void print_line(Worker& w, const std::string& line);
  // Says why the agent exits, quotes the failing rank's last lines (its own worker's, or
  // `remote`'s as another node sent them) and writes the termination message.
  int finish(int code, const std::string& why, const Worker* culprit, const std::optional<Failure>& remote = std::nullopt);

  Config cfg_;
  Metrics* metrics_;
  std::string metrics_dir_;
  std::vector<Worker> workers_;
  BarrierClient* barrier_ = nullptr;  // while run() holds one
  const BarrierServer* server_ = nullptr;  // node 0's, while run() holds it
  std::mutex out_mu_;
  // Note [Silent peer] (barrier.hpp): the node whose agent went silent, ending the gang; -1 none.
  mutable int silent_peer_ = -1;
  void note_silent_peer(const Message& verdict);
};

}  // namespace lockstep::agent
