// The optimizer step and gradient clipping as a handful of multi-tensor kernels, as PyTorch's
// AdamW(fused=True) and clip_grad_norm_(foreach=True) do, instead of libtorch's per-tensor
// loops (AdamW::step launches about ten kernels per parameter tensor: some 1,500 for
// gpt2-124m, each a launch the GPU waits on).
#pragma once

#include <torch/torch.h>

#include <unordered_map>
#include <vector>

namespace lockstep::trainer {

// AdamW (decoupled weight decay, no amsgrad) updated by ATen's _fused_adamw_ kernel over all
// parameters of a group at once, on CUDA and on the CPU. Its state is libtorch's
// AdamWParamState, so save()/load(), checkpoints and the FSDP memory accounting see the same
// exp_avg, exp_avg_sq and step as with torch::optim::AdamW, and the update is the same formula.
class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
  void load(torch::serialize::InputArchive& archive) override;
  // From now on the learning rate is read from `lr` (a one-element float tensor on the
  // parameters' device) instead of the groups' options, so that a captured step (a CUDA graph,
  // Note [CUDA graph step]) sees each replay's value.
  void use_lr_tensor(torch::Tensor lr) { lr_tensor_ = std::move(lr); }
  // The step counts in AdamWParamState (what save() writes) from the device's counts, which a
  // replayed graph advances without this object seeing it. A host synchronisation.
  void sync_step_counts();

 private:
  torch::Tensor lr_tensor_;
  // Each parameter's step count as the device tensor the kernel reads, kept in step with
  // AdamWParamState::step(); made from it when missing (first step, or after load()).
  std::unordered_map<void*, torch::Tensor> step_tensors_;
};

// Gradient clipping by the global L2 norm, as clip_grad_norm_ does, with no host
// synchronisation: the norm and the scale stay on the device. Parameters without a gradient
// are skipped.
//
// The squared norm of the gradients of `params`, a one-element float tensor (for an
// all-reduce across shards).
torch::Tensor grad_norm_squared(const std::vector<torch::Tensor>& params);
// Scales the gradients by min(1, max_norm / (norm + 1e-6)), norm = sqrt(norm_squared).
void scale_grads_to_norm(const std::vector<torch::Tensor>& params, const torch::Tensor& norm_squared, double max_norm);
// Both, for parameters that are not sharded; returns the norm before clipping.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace lockstep::trainer
