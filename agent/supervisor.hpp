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
// The workers themselves (spawning, signalling the process tree, reaping, their output) are a
// WorkerGroup (worker_group.hpp, Note [The agent as init]); the stall watch is stall_watch.hpp;
// what the agent leaves in the pod's termination message is termination_message.hpp. The
// Supervisor keeps the generation loop and this agent's membership of the restart barrier.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "barrier/codec.hpp"
#include "config.hpp"
#include "metrics.hpp"
#include "worker_group.hpp"

namespace lockstep::agent {

class BarrierClient;
class BarrierServer;

class Supervisor {
 public:
  Supervisor(const Config& cfg, Metrics* metrics, std::string metrics_dir);
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;
  // Blocks the stop signals; call before any other thread starts.
  static void block_signals();
  int run();  // the agent's exit code

 private:
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
  // See Note [Heartbeats]: ticks the barrier's client, if there is one (in loops that may outlast
  // a heartbeat interval).
  void keep_alive();
  // See Note [Heartbeats]: why this agent's membership has ended, or "" while it holds: its own
  // silence (it was frozen); node 0's agent lost or silent.
  std::string own_silence(const BarrierClient& barrier) const;
  std::string server_gone(const BarrierClient& barrier) const;
  void linger_after_stall();
  // Every kFiguresInterval while generation `gen` runs, on a node other than 0: this node's
  // ranks' straggler scores (lockstep_straggler_score, against node 0's reference) and their
  // medians to node 0's agent (a FIGURES line; docs/agent.md, "Stragglers"). Node 0's straggler
  // watch does both for node 0 as it judges the gang.
  void share_figures(BarrierClient& barrier, int gen);
  // Says why the agent exits, quotes the failing rank's last lines (its own worker's, or
  // `remote`'s as another node sent them) and writes the termination message.
  int finish(int code, const std::string& why, const Worker* culprit, const std::optional<Failure>& remote = std::nullopt);

  Config cfg_;
  Metrics* metrics_;
  WorkerGroup group_;  // after cfg_, which it refers to
  BarrierClient* barrier_ = nullptr;  // while run() holds one
  const BarrierServer* server_ = nullptr;  // node 0's, while run() holds it
  // Note [Silent peer] (barrier/state.hpp): the node whose agent went silent, ending the gang; -1 none.
  mutable int silent_peer_ = -1;
  std::chrono::steady_clock::time_point next_figures_{};
  void note_silent_peer(const Message& verdict);
};

}  // namespace lockstep::agent
