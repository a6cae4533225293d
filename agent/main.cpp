// lockstep-agent: the in-pod launcher, supervisor and metrics exporter (docs/agent.md).
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "bundle_env.hpp"
#include "config.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "metrics.hpp"
#include "nvml.hpp"
#include "supervisor.hpp"

namespace {
using namespace lockstep::agent;

// See Note [Barrier trust]: the secret is the agent's alone. Out of the environment the workers
// inherit, and overwritten where the kernel shows it (/proc/<pid>/environ).
void hide_barrier_secret() {
  if (char* secret = std::getenv(lockstep::contract::kBarrierSecret)) {
    for (char* p = secret; *p; ++p) *p = 'x';
    ::unsetenv(lockstep::contract::kBarrierSecret);
  }
}

// What the agent will watch and how, in its log before the workers start.
void log_plan(const Config& cfg) {
  if (!cfg.metrics && cfg.stall_detection())
    LOCKSTEP_LOG(Info, "agent", "--no-metrics: no /metrics, but the step reports are still watched for stalls "
                                "(--stall-timeout 0 turns that off too)");
  if (cfg.stall_detection())
    LOCKSTEP_LOG(Info, "agent", "stall detection: no step for " << cfg.stall_timeout.count() / 1000.0
                                << " s after a rank's last one; first step: "
                                << (cfg.first_step_detection() ? "within " + std::to_string(cfg.first_step_timeout.count() / 1000) + " s of the start"
                                                               : std::string("not watched (--first-step-timeout, LOCKSTEP_FIRST_STEP_TIMEOUT)")));
  if (cfg.peer_checks())  // Note [Heartbeats] in barrier/server.hpp
    LOCKSTEP_LOG(Info, "agent", "heartbeats: every " << cfg.heartbeat_interval().count() / 1000.0
                                << " s over the restart barrier; an agent silent for " << cfg.peer_timeout.count() / 1000.0
                                << " s is lost (" << cfg.peer_timeout_from << ")");
  else if (cfg.nnodes > 1)
    LOCKSTEP_LOG(Info, "agent", "heartbeats: not checked (" << cfg.peer_timeout_from
                                << " 0): only TCP keepalive and the workers' own timeouts notice a silent node");
  LOCKSTEP_LOG(Info, "agent", "node " << cfg.node_rank << " of " << cfg.nnodes << ", " << cfg.nproc_per_node
                                      << " worker(s) per node; master " << cfg.master_addr << ":" << cfg.master_port);
  // Note [Worker threads] in worker_env.cpp
  std::string why;
  if (const char* chosen = std::getenv("OMP_NUM_THREADS"))
    LOCKSTEP_LOG(Info, "agent", "OMP_NUM_THREADS=" << chosen << " for each worker, as the environment sets it");
  else if (int threads = cfg.worker_threads(&why); threads > 0)
    LOCKSTEP_LOG(Info, "agent", "OMP_NUM_THREADS=" << threads << " for each worker: " << why
                                << " (set OMP_NUM_THREADS in the pod to choose)");
}

}  // namespace

int main(int argc, char** argv) {
  // First, before any thread: the loader variables the bundle's launcher set aside go back
  // into the environment the workers inherit (bundle_env.hpp).
  for (const auto& problem : restore_bundle_environment().problems) LOCKSTEP_LOG(Warn, "agent", problem);
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") { std::cout << kUsage; return 0; }
    if (a == "--version") { std::cout << "lockstep-agent " << LOCKSTEP_VERSION << "\n"; return 0; }
  }
  Config cfg;
  try {
    cfg = load_config(current_environment(), args);
  } catch (const ConfigError& e) {
    std::cerr << "lockstep-agent: " << e.what() << "\n";
    return lockstep::contract::kExitUsage;
  }
  hide_barrier_secret();
  Supervisor::block_signals();  // before any thread: stop signals are taken synchronously
  mallopt(M_ARENA_MAX, 2);

  // A private directory that goes with the agent: one datagram socket per local rank (for
  // /metrics and stall detection) and each rank's TORCHELASTIC_ERROR_FILE.
  std::string tmp = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  std::string dir = tmp + "/lockstep-agent-XXXXXX";
  if (!::mkdtemp(dir.data())) {
    std::cerr << "lockstep-agent: cannot create a directory under " << tmp
              << " (TMPDIR) for the metrics sockets and error files\n";
    return lockstep::contract::kExitUsage;
  }
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<GpuMonitor> gpus;
  if (cfg.step_sockets()) {
    try {
      metrics = std::make_unique<Metrics>(cfg, dir);
    } catch (const std::exception& e) {
      std::cerr << "lockstep-agent: " << e.what() << "\n";
      std::filesystem::remove_all(dir);
      return lockstep::contract::kExitUsage;
    }
    if (cfg.metrics) gpus = std::make_unique<GpuMonitor>(*metrics, cfg);
    if (!metrics->endpoint().empty())
      LOCKSTEP_LOG(Info, "agent", "serving /metrics on " << metrics->endpoint());
  }
  log_plan(cfg);
  int code;
  try {
    Supervisor supervisor(cfg, metrics.get(), dir);
    code = supervisor.run();
  } catch (const std::exception& e) {
    std::cerr << "lockstep-agent: " << e.what() << "\n";
    code = lockstep::contract::kExitUsage;
  }
  // Nothing is left to flush but our own streams: skip the exporter's slow shutdown (its
  // web server takes ~2 s to stop), and let the sockets go with the directory.
  std::filesystem::remove_all(dir);
  std::fflush(nullptr);
  ::_exit(code);
}
