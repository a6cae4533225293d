// One node's workers: spawned with their torchrun environment, their output passed through
// with a rank prefix (or to per-rank files), every process below the agent signalled, stopped
// and reaped. The Supervisor (supervisor.hpp) decides when.
//
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
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "config.hpp"
#include "lockstep/process.hpp"
#include "metrics.hpp"

namespace lockstep::agent {

// One worker process of the group.
struct Worker {
  int local_rank = 0, rank = 0;
  Process process;
  int out_fd = -1;
  std::string partial;           // output not yet ended by a newline
  std::deque<std::string> tail;  // last lines, for the failure summary
  bool exited = false;
  ExitStatus status;
};

class WorkerGroup {
 public:
  // `cfg` must outlive the group. `keep_alive` runs in every loop that may outlast a heartbeat
  // interval (Note [Heartbeats] in `agent/barrier/server.hpp`): it ticks the barrier's client.
  WorkerGroup(const Config& cfg, Metrics* metrics, std::string metrics_dir, std::function<void()> keep_alive);
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Spawns nproc workers of in-place generation `generation` (Note [Restart barrier]).
  void start(int generation);
  // SIGTERM to every process below the agent, SIGKILL after the grace period, until none is
  // left; every worker's status collected and its output read to the end.
  void stop();
  void signal_everything(int sig, std::set<pid_t>* already = nullptr);
  bool descendants_left();  // a worker or an adopted child not yet gone
  void reap_orphans();      // Note [The agent as init]
  void pump_output();
  std::string error_file(int local_rank) const;

  std::vector<Worker>& workers() { return workers_; }
  // Held while anything is written to the agent's stdout or stderr.
  std::mutex& output_mutex() { return out_mu_; }

 private:
  void print_line(Worker& w, const std::string& line);

  const Config& cfg_;
  Metrics* metrics_;
  std::string metrics_dir_;
  std::function<void()> keep_alive_;
  std::vector<Worker> workers_;
  std::mutex out_mu_;
};

}  // namespace lockstep::agent
