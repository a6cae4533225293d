// Recomputing a forward in backward (activation checkpointing, and FSDP, which always
// recomputes) under the autocast state the original forward ran with.
//
// Note [Autocast in recomputation]: autocast is thread-local state, and autograd runs
// backward on its own threads (one per device), where autocast is off. A block whose
// forward ran in bf16 under autocast would be recomputed in fp32 there, and its gradients
// would be those of a different function than the one whose output the loss saw. As
// torch.utils.checkpoint does, the forward's autocast state is saved with the node and put
// back around the recomputation.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "model.hpp"

namespace lockstep::trainer {

// Autocast state of the calling thread, for the device types the trainer uses.
struct AutocastState {
  bool cuda = false, cpu = false;
  at::ScalarType cuda_dtype = at::kBFloat16, cpu_dtype = at::kBFloat16;

  static AutocastState current() {
    AutocastState s;
    s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    return s;
  }
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
  }
  void save(torch::autograd::AutogradContext* ctx) const {
    ctx->saved_data["autocast_cuda"] = cuda;
    ctx->saved_data["autocast_cpu"] = cpu;
    ctx->saved_data["autocast_cuda_dtype"] = static_cast<int64_t>(cuda_dtype);
    ctx->saved_data["autocast_cpu_dtype"] = static_cast<int64_t>(cpu_dtype);
  }
  static AutocastState load(torch::autograd::AutogradContext* ctx) {
    AutocastState s;
    s.cuda = ctx->saved_data["autocast_cuda"].toBool();
    s.cpu = ctx->saved_data["autocast_cpu"].toBool();
    s.cuda_dtype = static_cast<at::ScalarType>(ctx->saved_data["autocast_cuda_dtype"].toInt());
    s.cpu_dtype = static_cast<at::ScalarType>(ctx->saved_data["autocast_cpu_dtype"].toInt());
    return s;
  }
};

// Puts `s` in force for its lifetime and restores the thread's previous state after, clearing
// autocast's cast cache when the outermost autocast region on this thread closes.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& s) : previous_(AutocastState::current()) {
    s.apply();
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    previous_.apply();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState previous_;
};

// Activation checkpointing for one block: forward without keeping activations, recomputed
// in backward under the forward's autocast state (FSDP's GatheredBlock does the same, with
// gathering around it).
struct CheckpointedBlock : torch::autograd::Function<CheckpointedBlock> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, BlockImpl* block) {
    ctx->save_for_backward({x});
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    AutocastState::current().save(ctx);
    return block->forward(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* block = reinterpret_cast<BlockImpl*>(ctx->saved_data["block"].toInt());
    auto x = ctx->get_saved_variables()[0];
    torch::Tensor xd, y;
    {
      torch::AutoGradMode enable(true);
      AutocastScope autocast(AutocastState::load(ctx));  // Note [Autocast in recomputation]
      xd = x.detach().requires_grad_(true);
      y = block->forward(xd);
    }
    // Parameter gradients accumulate into .grad as usual (and fire DDP's hooks).
    torch::autograd::backward({y}, {grad_out[0]});
    return {xd.grad(), torch::Tensor()};
  }
};

}  // namespace lockstep::trainer
