// Checkpoints: written atomically, verified on load, resumed at the exact step.
//
// Layout under the checkpoint directory:
//   step-<S>/rank-<R>.pt   tensors (all parameters for DDP, written by rank 0; each rank's
//                          shards for FSDP) and the optimizer state, in LibTorch's archive format
//   step-<S>/MANIFEST      step, world size, strategy, and each file's size and FNV-1a checksum
//   LATEST                 the name of the newest complete step directory
// Every file is written to a temporary name, fsynced and renamed, and LATEST is replaced
// only after every rank's file and the manifest are in place, so a crash at any moment
// leaves the previous checkpoint intact. The data order depends only on the step (Note
// [Global batch order]), so a resumed run sees exactly the batches the lost one would have.
#pragma once

#include <torch/torch.h>
#include "dist.hpp"

#include <optional>
#include <string>
#include <vector>

namespace lockstep::trainer {

struct CheckpointTarget {
  std::string dir;
  int rank = 0, world = 1;
  std::string strategy;          // DDP or FSDP: shards only fit the same strategy and world size
  bool sharded = false;          // every rank writes (FSDP) or rank 0 only (DDP)
};

// A collective when `dist` has a process group: every rank calls it at the same step.
void save_checkpoint(const CheckpointTarget& t, int64_t step, const std::vector<torch::Tensor>& tensors,
                     torch::optim::Optimizer& optimizer, const Dist& dist);

// The step to resume from (tensors and optimizer loaded), or nullopt when there is no
// checkpoint. Throws std::runtime_error naming the file when one is corrupt or does not fit.
std::optional<int64_t> load_checkpoint(const CheckpointTarget& t, std::vector<torch::Tensor>& tensors,
                                       torch::optim::Optimizer& optimizer);

uint64_t fnv1a_file(const std::string& path);

}  // namespace lockstep::trainer
