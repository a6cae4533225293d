#include "optim.hpp"

#include <cmath>
#include <stdexcept>

namespace lockstep::trainer {
namespace {

std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

}  // namespace

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) throw std::invalid_argument("FusedAdamW: amsgrad is not supported");
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (p.grad().is_sparse()) throw std::invalid_argument("FusedAdamW: sparse gradients are not supported");
      void* key = p.unsafeGetTensorImpl();
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(st)).first;
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      auto& tensor = step_tensors_[key];
      if (!tensor.defined()) tensor = torch::full({}, static_cast<double>(st.step()), p.options().dtype(torch::kFloat32));
      st.step(st.step() + 1);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(st.exp_avg());
      exp_avg_sqs.push_back(st.exp_avg_sq());
      steps.push_back(tensor);
    }
    if (params.empty()) continue;
    at::_foreach_add_(steps, 1);
    if (lr_tensor_.defined())
      at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr_tensor_,
                        std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                        /*amsgrad=*/false, /*maximize=*/false);
    else
      at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(),
                        std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                        /*amsgrad=*/false, /*maximize=*/false);
  }
  return loss;
}

void FusedAdamW::sync_step_counts() {
  for (auto& [key, tensor] : step_tensors_) {
    auto it = state_.find(key);
    if (it != state_.end() && tensor.defined())
      static_cast<torch::optim::AdamWParamState&>(*it->second).step(static_cast<int64_t>(tensor.item<double>()));
  }
}

void FusedAdamW::load(torch::serialize::InputArchive& archive) {
  torch::optim::AdamW::load(archive);
  step_tensors_.clear();  // the loaded state's step counts replace them
}

torch::Tensor grad_norm_squared(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  auto grads = grads_of(params);
  if (grads.empty()) return torch::zeros({1}, params.empty() ? torch::TensorOptions() : params[0].options().dtype(torch::kFloat32));
  auto norms = at::_foreach_norm(grads, 2, torch::kFloat32);
  return torch::stack(norms).pow(2).sum().reshape({1});
}

void scale_grads_to_norm(const std::vector<torch::Tensor>& params, const torch::Tensor& norm_squared, double max_norm) {
  torch::NoGradGuard no_grad;
  auto grads = grads_of(params);
  if (grads.empty()) return;
  auto coef = (max_norm / (norm_squared.sqrt() + 1e-6)).clamp_max(1.0).reshape({});
  at::_foreach_mul_(grads, coef);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  auto sq = grad_norm_squared(params);
  scale_grads_to_norm(params, sq, max_norm);
  return sq.sqrt();
}

}  // namespace lockstep::trainer
