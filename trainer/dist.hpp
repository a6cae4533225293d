// The process group, from the agent's (torchrun's) environment: a TCPStore rendezvous at
// MASTER_ADDR:MASTER_PORT (rank 0 hosts it) and a c10d backend: Gloo on CPU, NCCL on CUDA.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

namespace lockstep::trainer {

struct Dist {
  int rank = 0, world = 1, local_rank = 0;
  std::string backend = "none";  // gloo, nccl, or none for a single process
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;  // null when world == 1
};

// backend: auto (NCCL for a CUDA device, else Gloo), gloo or nccl. Throws std::runtime_error
// naming the variable or flag at fault.
Dist init_distributed(const std::string& backend, const torch::Device& device);

}  // namespace lockstep::trainer
