#include "worker_env.hpp"

#include <algorithm>

#include "lockstep/contract.hpp"

namespace lockstep::agent {

// Note [Worker threads]
// PyTorch sizes its intra-op thread pool (OpenMP) by the machine's cores, not by the
// container's share of them: a pod that requests 500m on a node of 2 cores runs 2 threads per
// worker, and two such pods run 4 threads on 2 cores, each waiting (spinning, with OpenMP) for
// a core another holds. Measured on a 2-core machine, the tiny preset with 2 ranks of DDP:
// 140 ms a step with PyTorch's default against 28 ms with one thread per rank. On a shared
// node the cores beyond a pod's request are other tenants'. So, unless OMP_NUM_THREADS is
// set (the pod's env or the image's), each worker gets the container's CPU request divided
// among the workers, rounded down and at least 1; without a request, its limit (the downward
// API gives the node's allocatable CPU for a container without one); without either (outside
// Kubernetes: lockstep run, a plain container), torchrun's rule: 1 for several workers,
// PyTorch's default for one.
int Config::worker_threads(std::string* why) const {
  const int millis = cpu_request_millis > 0 ? cpu_request_millis : cpu_limit_millis;
  const char* source = cpu_request_millis > 0 ? "CPU request" : "CPU limit";
  if (millis > 0) {
    const int threads = std::max(1, millis / (1000 * nproc_per_node));
    if (why)
      *why = std::string("the container's ") + source + " " + std::to_string(millis) + "m over " +
             std::to_string(nproc_per_node) + " worker(s)";
    return threads;
  }
  if (nproc_per_node > 1) {
    if (why) *why = "torchrun's rule for several workers (the container's CPU is not known)";
    return 1;
  }
  return 0;
}

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
  // See Note [Worker threads]: the user's choice if any, else the container's share of CPU.
  if (!inherited.count("OMP_NUM_THREADS"))
    if (int threads = cfg.worker_threads(); threads > 0) env["OMP_NUM_THREADS"] = std::to_string(threads);
  if (!metrics_socket.empty()) env[contract::kMetricsSocket] = metrics_socket;
  // See Note [Python probe]: first on the path, the image's and the pod's entries kept after it
  // (an empty entry would add the working directory, so none is made). Only with a socket:
  // without one the probe would have nowhere to report.
  if (!metrics_socket.empty() && !cfg.python_probe_dir.empty()) {
    auto inherited_path = inherited.find("PYTHONPATH");
    const bool theirs = inherited_path != inherited.end() && !inherited_path->second.empty();
    env["PYTHONPATH"] = cfg.python_probe_dir + (theirs ? ":" + inherited_path->second : "");
  }
  // See Note [NCCL profiler plugin]: only with a socket (the plugin reports there), and never over
  // a plugin the pod or the image chose ("none" included).
  if (!metrics_socket.empty() && !cfg.nccl_profiler.empty() && !inherited.count(contract::kNcclProfilerPlugin))
    env[contract::kNcclProfilerPlugin] = cfg.nccl_profiler;
  return env;
}

}  // namespace lockstep::agent
