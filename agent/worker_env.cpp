#include "worker_env.hpp"

#include "lockstep/contract.hpp"

namespace lockstep::agent {

std::map<std::string, std::string> worker_env(const Config& cfg, int local_rank, int local_restarts,
                                              const std::string& metrics_socket,
                                              const std::map<std::string, std::string>& inherited,
                                              const std::string& error_file) {
  const int rank = cfg.node_rank * cfg.nproc_per_node + local_rank;
  std::map<std::string, std::string> env = {
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"RANK", std::to_string(rank)},
      {"GROUP_RANK", std::to_string(cfg.node_rank)},
      {"NODE_RANK", std::to_string(cfg.node_rank)},
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", std::to_string(cfg.nproc_per_node)},
      {"WORLD_SIZE", std::to_string(cfg.world_size())},
      {"ROLE_WORLD_SIZE", std::to_string(cfg.world_size())},
      // The number of worker groups: one per agent, i.e. per node.
      {"GROUP_WORLD_SIZE", std::to_string(cfg.nnodes)},
      {"MASTER_ADDR", cfg.master_addr},
      {"MASTER_PORT", std::to_string(cfg.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(cfg.restart_attempt + local_restarts)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(cfg.max_restarts)},
      {"TORCHELASTIC_RUN_ID", cfg.run_id},
      // Rank 0 hosts the TCPStore itself (init_method env://), as with torchrun's static
      // rendezvous when the agent does not share its store.
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", error_file},
  };
  // As torchrun: the user's choice if any, else on, so a failed NCCL collective aborts the
  // process instead of hanging it.
  auto nccl = inherited.find("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = nccl != inherited.end() ? nccl->second : "1";
  // torchrun sets OMP_NUM_THREADS=1 for multi-process runs unless the user chose a value.
  if (cfg.nproc_per_node > 1 && !inherited.count("OMP_NUM_THREADS")) env["OMP_NUM_THREADS"] = "1";
  if (!metrics_socket.empty()) env[contract::kMetricsSocket] = metrics_socket;
  // Note [Python probe]: first on the path, the image's and the pod's entries kept after it
  // (an empty entry would add the working directory, so none is made). Only with a socket:
  // without one the probe would have nowhere to report.
  if (!metrics_socket.empty() && !cfg.python_probe_dir.empty()) {
    auto inherited_path = inherited.find("PYTHONPATH");
    const bool theirs = inherited_path != inherited.end() && !inherited_path->second.empty();
    env["PYTHONPATH"] = cfg.python_probe_dir + (theirs ? ":" + inherited_path->second : "");
  }
  return env;
}

}  // namespace lockstep::agent
