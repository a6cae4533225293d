// FSDP (ZeRO-3): every rank keeps 1/N of each unit's parameters, gradients and AdamW state.
//
// Note [FSDP units]
// A unit is a set of parameters flattened into one vector, padded to a multiple of the
// world size and cut into N equal shards; rank r owns shard r, a leaf tensor the optimizer
// updates. Each transformer block is a unit; everything else (embeddings, final LayerNorm)
// is the root unit. The root is gathered for the whole step. A block is gathered
// (all-gather) just before its forward and freed right after; in backward it is gathered
// again, its forward recomputed with gradients on, its parameter gradients
// reduce-scattered into its shard's gradient, and freed (so backward recomputes each
// block's forward, as activation checkpointing does). While a block computes, the gather of
// the block that runs next (the following one in forward, the preceding one in backward) is
// already in flight (prefetch). Optimizer, weight decay and clipping
// see only shards, so the result equals DDP's (and one process's) up to float rounding.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp.hpp"  // CommStats
#include "model.hpp"

namespace lockstep::trainer {

class FsdpUnit;
struct Collectives;

class Fsdp {
 public:
  // Shards `model` across `pg`'s ranks; the model's parameters become views into gathered
  // buffers that exist only while needed.
  Fsdp(Gpt model, c10::intrusive_ptr<c10d::Backend> pg);
  ~Fsdp();
  std::vector<torch::Tensor> shards() const;  // what the optimizer updates
  void begin_step();                          // gathers the root unit
  // Root gradients -> shards; frees the root. Returns the step's communication per op
  // (allgather, reduce_scatter; Note [Communication figures]) on the CPU, nothing on a GPU.
  CommStats finish_step();
  // On a GPU, once the step has finished on the device: the step's figures from CUDA events
  // (the collectives' durations, the compute stream's waits). Nothing on the CPU.
  void device_figures(CommStats& s);
  // Clips by the global gradient norm over all shards (as clip_grad_norm_), an all-reduce of
  // one float and no host synchronisation; returns the norm before clipping.
  torch::Tensor clip_grad_norm(double max_norm);
  // See Note [Stop vote]: `vote` rides in clip_grad_norm's all-reduce as a second float; vote_sum()
  // is its sum over the ranks from the last clip_grad_norm (undefined before the first).
  void set_vote(std::function<float()> vote) { vote_ = std::move(vote); }
  torch::Tensor vote_sum() const { return vote_sum_; }
  // Bytes this rank holds in parameter shards, their gradients, and `optimizer`'s state.
  struct Memory { double params = 0, grads = 0, optimizer = 0; int64_t padded_numel = 0; };
  Memory memory(const torch::optim::Optimizer& optimizer) const;
  std::vector<torch::Tensor> full_parameters();  // gathered copies, for checks and dumps
  const std::string& collective_note() const { return note_; }
  const std::vector<std::string>& collective_log() const;

 private:
  Gpt model_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  std::unique_ptr<Collectives> coll_;
  std::unique_ptr<FsdpUnit> root_;
  std::vector<std::unique_ptr<FsdpUnit>> blocks_;
  std::string note_;
  std::function<float()> vote_;
  torch::Tensor vote_sum_;
};

}  // namespace lockstep::trainer
