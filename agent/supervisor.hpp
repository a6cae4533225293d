// Runs the worker group and watches it (DESIGN.md, agent): spawns nproc workers with their
// torchrun environment, passes their output through with a rank prefix (or to per-rank
// files), and ends the group the moment anything goes wrong:
//   * a worker fails        -> the others get SIGTERM, then SIGKILL after the grace period;
//                              the agent exits with that worker's own exit code (or restarts
//                              the group locally, up to --max-restarts, on a single node);
//   * no step for too long  -> a stall: the stuck ranks are logged, the group stopped, exit 75;
//   * SIGTERM/SIGINT        -> forwarded to every worker, SIGKILL after the grace period.
// Every worker runs in its own process group, so grandchildren (dataloader processes) are
// signalled too, and lockstep::Process makes each die with the agent (no orphans).
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"
#include "lockstep/process.hpp"
#include "metrics.hpp"

namespace lockstep::agent {

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
  bool wait_for_master();
  void start_group(int local_restarts);
  void stop_group();
  void pump_output();
  void print_line(Worker& w, const std::string& line);
  int finish(int code, const std::string& why, const Worker* culprit);

  Config cfg_;
  Metrics* metrics_;
  std::string metrics_dir_;
  std::vector<Worker> workers_;
  std::mutex out_mu_;
};

}  // namespace lockstep::agent
