// The trainer's fused AdamW and foreach clipping against libtorch's reference implementations.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

#include "optim.hpp"

namespace {

using lockstep::trainer::FusedAdamW;

std::vector<torch::Tensor> make_params(int64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> ps;
  for (auto shape : std::vector<std::vector<int64_t>>{{64, 32}, {32}, {7, 5, 3}, {1}})
    ps.push_back(torch::randn(shape).requires_grad_(true));
  return ps;
}

std::vector<torch::Tensor> clone(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

void set_grads(std::vector<torch::Tensor>& ps, int64_t seed) {
  torch::manual_seed(seed);
  for (auto& p : ps) p.mutable_grad() = torch::randn_like(p) * 0.1;
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
}

}  // namespace

// Same formula, one fused kernel: 30 steps with weight decay and a changing learning rate agree
// with torch::optim::AdamW to float32 rounding.
TEST(FusedAdamW, MatchesLibtorchAdamW) {
  auto a = make_params(1), b = clone(a);
  auto options = torch::optim::AdamWOptions(3e-3).weight_decay(0.1).betas({0.9, 0.95});
  torch::optim::AdamW reference(a, options);
  FusedAdamW fused(b, options);
  for (int step = 0; step < 30; ++step) {
    set_grads(a, 100 + step);
    set_grads(b, 100 + step);
    set_lr(reference, 3e-3 * (1.0 - step / 40.0));
    set_lr(fused, 3e-3 * (1.0 - step / 40.0));
    reference.step();
    fused.step();
  }
  auto init = make_params(1);
  EXPECT_GT(max_diff(a, init), 1e-2) << "the parameters must have moved for the comparison to mean anything";
  EXPECT_LT(max_diff(a, b), 1e-6);
  // The state is libtorch's AdamWParamState, with the same step count and moments.
  auto& sa = static_cast<torch::optim::AdamWParamState&>(*reference.state().at(a[0].unsafeGetTensorImpl()));
  auto& sb = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(b[0].unsafeGetTensorImpl()));
  EXPECT_EQ(sa.step(), 30);
  EXPECT_EQ(sb.step(), 30);
  EXPECT_LT((sa.exp_avg_sq() - sb.exp_avg_sq()).abs().max().item<double>(), 1e-9);
}

// Saved after 10 steps and loaded into an optimizer that had already stepped on its own, the
// next 10 steps are those of the uninterrupted optimizer (the step counts the kernel reads
// are rebuilt from the loaded state, not kept from before).
TEST(FusedAdamW, ResumesFromSavedState) {
  auto a = make_params(2), b = clone(a);
  auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  FusedAdamW straight(a, options);
  for (int step = 0; step < 10; ++step) {
    set_grads(a, step);
    straight.step();
  }
  std::stringstream saved;
  {
    torch::serialize::OutputArchive out;
    straight.save(out);
    out.save_to(saved);
  }
  FusedAdamW resumed(b, options);
  for (int step = 0; step < 3; ++step) {
    set_grads(b, 50 + step);
    resumed.step();
  }
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
  }
  torch::serialize::InputArchive in;
  in.load_from(saved);
  resumed.load(in);
  for (int step = 10; step < 20; ++step) {
    set_grads(a, step);
    set_grads(b, step);
    straight.step();
    resumed.step();
  }
  EXPECT_EQ(max_diff(a, b), 0.0);
}

TEST(FusedAdamW, SkipsParametersWithoutGradients) {
  auto a = make_params(3);
  auto before = clone(a);
  FusedAdamW opt(a, torch::optim::AdamWOptions(1e-2));
  a[0].mutable_grad() = torch::ones_like(a[0]);
  opt.step();
  EXPECT_GT((a[0] - before[0]).abs().max().item<double>(), 0);
  EXPECT_EQ((a[1] - before[1]).abs().max().item<double>(), 0);
  EXPECT_EQ(opt.state().size(), 1u);
}

// Both sides of the threshold: clipped to max_norm, and left alone below it.
TEST(ClipGradNorm, MatchesLibtorchClipGradNorm) {
  for (double max_norm : {0.5, 1e3}) {
    auto a = make_params(4), b = clone(a);
    set_grads(a, 9);
    set_grads(b, 9);
    const double expected = torch::nn::utils::clip_grad_norm_(a, max_norm);
    const double norm = lockstep::trainer::clip_grad_norm(b, max_norm).item<double>();
    EXPECT_NEAR(norm, expected, 1e-5 * expected);
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i].grad() - b[i].grad()).abs().max().item<double>());
    EXPECT_LT(worst, 1e-7) << "max_norm " << max_norm;
    EXPECT_NEAR(lockstep::trainer::grad_norm_squared(b).sqrt().item<double>(), std::min(expected, max_norm), 1e-4);
  }
}
