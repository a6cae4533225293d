// The agent's configuration: LOCKSTEP_* variables (set by the operator), falling back to
// torchrun's PET_* variables, overridden by flags. Everything a worker's environment is
// derived from (worker_env.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/straggler.hpp"

namespace lockstep::agent {

// A configuration mistake; what() names the flag or variable and what is valid.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// See Note [Heartbeats]: the shortest peer timeout other than 0 (off), two heartbeats of 1 s.
inline constexpr std::chrono::seconds kMinPeerTimeout{2};

struct Config {
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_attempt = 0;        // the operator's gang attempt (LOCKSTEP_RESTART_ATTEMPT)
  // In-place restarts of every worker of the job per gang attempt (Note [Restart barrier]):
  // LOCKSTEP_IN_PLACE_RESTARTS, else --max-restarts (torchrun's name); TORCHELASTIC_MAX_RESTARTS.
  int max_restarts = 0;
  std::string restart_policy = "OnFailure";  // LOCKSTEP_RESTART_POLICY: OnFailure | ExitCode | Never
  int agent_port = 0;                        // LOCKSTEP_AGENT_PORT; 0: the master port + 1
  // See Note [Barrier trust]: the job's secret (LOCKSTEP_BARRIER_SECRET), never logged; empty: none.
  // The agent takes it out of its environment, so no worker sees it.
  std::string barrier_secret;
  // Note [Heartbeats] in barrier/server.hpp: a peer of the restart barrier (node 0's agent, or a
  // member) that says nothing this long is lost, and so is an agent that was silent itself this
  // long. LOCKSTEP_PEER_TIMEOUT, --peer-timeout (older name: LOCKSTEP_BARRIER_TIMEOUT,
  // --barrier-timeout). 0: no checks; otherwise at least kMinPeerTimeout.
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(6)};
  std::string peer_timeout_from = "--peer-timeout";  // the flag or variable that set it, for messages
  std::string run_id = "none";    // TORCHELASTIC_RUN_ID: the job's UID, else its name
  std::string job_name, job_namespace;
  int metrics_port = 9400;        // 0: no /metrics
  std::string metrics_address = "0.0.0.0";
  // false: no /metrics and no GPU series. The step sockets stay while stall detection is on,
  // since it needs the step reports; with --stall-timeout 0 too there is nothing at all
  // (bench/agent's baseline).
  bool metrics = true;
  // Between steps: once a rank has reported, no step for this long is a stall. 0: stall
  // detection off altogether (the first-step check too).
  std::chrono::milliseconds stall_timeout{std::chrono::minutes(5)};
  // Before the first step: a rank that reports no step within this long of its start is
  // stuck in rendezvous or its first collective. 0: off. Unless set (flag or variable), 30m
  // for lockstep-trainer, which reports steps, and off for any other command, which may
  // never report one (a plain torchrun script) and would otherwise be stopped for it.
  std::chrono::milliseconds first_step_timeout{std::chrono::minutes(30)};
  // After a stall, /metrics keeps serving this long so a scrape sees lockstep_stalls_total;
  // a stop signal cuts it short.
  std::chrono::milliseconds metrics_linger{std::chrono::seconds(30)};
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds grace_period{std::chrono::seconds(25)};
  std::string log_dir;            // per-rank files instead of prefixed passthrough
  std::string step_log_dir;       // each rank's step reports appended to DIR/rank-N.jsonl
  // See Note [Python probe]: the directory (sitecustomize.py and the lockstep package) put first
  // on every worker's PYTHONPATH when the worker has a step socket. Empty: no probe, because
  // it is switched off (python_probe false: LOCKSTEP_PYTHON_PROBE=0, --no-python-probe) or
  // was not found (python_probe_note says where the agent looked).
  bool python_probe = true;
  std::string python_probe_dir;
  std::string python_probe_note;
  // Note [NCCL profiler plugin] (nccl_profiler/plugin.c): the library every worker with a step
  // socket gets in NCCL_PROFILER_PLUGIN (unless its env names one). Empty: off
  // (LOCKSTEP_NCCL_PROFILER=0, --no-nccl-profiler) or not found; the note says which.
  std::string nccl_profiler;
  std::string nccl_profiler_note;
  std::vector<std::string> command{"lockstep-trainer"};
  // The container's CPU request and limit in millicores (LOCKSTEP_CPU_REQUEST and
  // LOCKSTEP_CPU_LIMIT, the downward API); 0: not known.
  int cpu_request_millis = 0;
  int cpu_limit_millis = 0;
  // Straggler detection (Note [Straggler score]; docs/metrics.md, "Stragglers"): each rank's work
  // median over the window (--straggler-window, LOCKSTEP_STRAGGLER_WINDOW: 5s..10m), a suspect
  // held this long is a straggler and one under the threshold this long is cleared
  // (--straggler-hold, LOCKSTEP_STRAGGLER_HOLD: 0..10m), at this slowdown
  // (--straggler-threshold, LOCKSTEP_STRAGGLER_THRESHOLD: in (1, 10]).
  std::chrono::milliseconds straggler_window{std::chrono::seconds(30)};
  std::chrono::milliseconds straggler_hold{std::chrono::seconds(15)};
  double straggler_threshold = 1.33;

  straggler::Settings straggler_settings() const {
    straggler::Settings s;
    s.window_s = std::chrono::duration<double>(straggler_window).count();
    s.hold_s = std::chrono::duration<double>(straggler_hold).count();
    s.threshold = straggler_threshold;
    return s;
  }
  int world_size() const { return nnodes * nproc_per_node; }
  int barrier_port() const { return agent_port > 0 ? agent_port : master_port % 65535 + 1; }
  bool stall_detection() const { return stall_timeout.count() > 0; }
  // See Note [Heartbeats]: silence is judged only between the agents of a job of several nodes.
  bool peer_checks() const { return peer_timeout.count() > 0 && nnodes > 1; }
  std::chrono::milliseconds heartbeat_interval() const {
    return peer_timeout.count() > 0 ? std::min<std::chrono::milliseconds>(std::chrono::seconds(1), peer_timeout / 4)
                                    : std::chrono::seconds(1);
  }
  bool first_step_detection() const { return stall_detection() && first_step_timeout.count() > 0; }
  // The step sockets exist for /metrics, stall detection or the step log.
  bool step_sockets() const { return metrics || stall_detection() || !step_log_dir.empty(); }
  // Note [Worker threads] in worker_env.cpp: OMP_NUM_THREADS for each worker when the
  // environment has none; 0: leave it unset (PyTorch's default). `why`, when given, says
  // where the number came from, for the agent's log.
  int worker_threads(std::string* why = nullptr) const;
};

// Builds the configuration from `env` (usually the process environment) and argv.
// Throws ConfigError; "--help" is left to the caller. `self_exe`: the agent's executable,
// where the Python probe is looked for (Note [Python probe]); empty: /proc/self/exe.
Config load_config(const std::map<std::string, std::string>& env, const std::vector<std::string>& args,
                   const std::string& self_exe = "");

// See Note [Python probe]: the probe directory for an agent whose executable is `self_exe`.
// `given` (from `given_by`, a flag or variable) when not empty: it must hold sitecustomize.py
// and lockstep/__init__.py, else ConfigError naming `given_by`. Otherwise the first of
// <dir of self_exe>/python (the build tree) and <dir of self_exe>/../share/lockstep/python
// (an install) that holds them, made absolute; "" when neither does, with `note` saying
// where it looked.
std::string find_python_probe_dir(const std::string& given, const std::string& given_by, const std::string& self_exe,
                                  std::string* note = nullptr);

// See Note [NCCL profiler plugin]: the plugin for an agent whose executable is `self_exe`.
// `given` (LOCKSTEP_NCCL_PROFILER): "0" is off (""), an absolute path is that file (it must
// exist, else ConfigError), "1" or "" looks for libnccl-profiler-lockstep.so beside self_exe
// (the build tree, the bundle) and in <dir of self_exe>/../lib/lockstep (an install); ""
// when not found, with `note` saying where it looked or why it is off.
std::string find_nccl_profiler(const std::string& given, const std::string& self_exe, std::string* note = nullptr);

std::map<std::string, std::string> current_environment();

extern const char* kUsage;

}  // namespace lockstep::agent
