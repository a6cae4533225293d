// The environment of one worker, as torchrun 2.11 sets it (LocalElasticAgent._start_workers
// and the log specs: docs/agent.md lists each variable and what we do not set, and why),
// plus NODE_RANK and LOCKSTEP_METRICS_SOCKET, and the Python probe first on PYTHONPATH
// (Note [Python probe] in config.cpp).
#pragma once

#include <map>
#include <string>

#include "config.hpp"

namespace lockstep::agent {

// `local_restarts`: the in-place generation (Note [Restart barrier]); TORCHELASTIC_RESTART_COUNT
// counts those and the operator's gang restarts (LOCKSTEP_RESTART_ATTEMPT) together.
// `inherited`: the agent's own environment (OMP_NUM_THREADS, TORCH_NCCL_ASYNC_ERROR_HANDLING and
// PYTHONPATH are looked at). `error_file`: TORCHELASTIC_ERROR_FILE, where a worker's @record writes its
// exception (torchrun sets it to "" when it keeps no log directory; so do we when empty).
std::map<std::string, std::string> worker_env(const Config& cfg, int local_rank, int local_restarts,
                                              const std::string& metrics_socket,
                                              const std::map<std::string, std::string>& inherited,
                                              const std::string& error_file = "");

}  // namespace lockstep::agent
