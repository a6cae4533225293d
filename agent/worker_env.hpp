// The environment of one worker, exactly as torchrun sets it (torch.distributed.run,
// "Environment variables"), plus NODE_RANK and LOCKSTEP_METRICS_SOCKET.
#pragma once

#include <map>
#include <string>

#include "config.hpp"

namespace lockstep::agent {

// `local_restarts`: worker-group restarts this agent has done itself; TORCHELASTIC_RESTART_COUNT
// counts those and the operator's gang restarts (LOCKSTEP_RESTART_ATTEMPT) together.
// `inherited`: the agent's own environment (only OMP_NUM_THREADS is looked at).
std::map<std::string, std::string> worker_env(const Config& cfg, int local_rank, int local_restarts,
                                              const std::string& metrics_socket,
                                              const std::map<std::string, std::string>& inherited);

}  // namespace lockstep::agent
