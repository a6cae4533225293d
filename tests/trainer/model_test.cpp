// The model's layers as ATen runs them (pure logic on the CPU: which operators a forward calls).
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>

#include "lockstep/memory_plan.hpp"
#include "lockstep/model_shapes.hpp"
#include "model.hpp"
#include "train.hpp"

namespace {

using namespace lockstep::trainer;

thread_local std::map<std::string, int>* seen_ops = nullptr;  // the callback takes no capture

std::unique_ptr<at::ObserverContext> count_op(const at::RecordFunction& f) {
  if (seen_ops) ++(*seen_ops)[f.name()];
  return nullptr;
}

// The ATen operators `fn` calls, counted by name, on this thread.
std::map<std::string, int> operators_of(const std::function<void()>& fn) {
  std::map<std::string, int> seen;
  seen_ops = &seen;
  auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(count_op).scopes({at::RecordScope::FUNCTION}));
  fn();
  at::removeCallback(handle);
  seen_ops = nullptr;
  return seen;
}

// See Note [Fused bias]: every Linear layer is one matrix product that adds its bias (addmm),
// never a product followed by a separate in-place add, which is what libtorch's LinearImpl
// would run for the (B,T,C) activations: 4 layers a block, 3 in the MLP model.
TEST(Model, EveryLinearLayerAddsItsBiasInItsMatrixProduct) {
  torch::manual_seed(1);
  GptConfig c = GptConfig::preset("tiny");
  Block block(c);
  auto x = torch::randn({2, 8, c.n_embd});
  auto ops = operators_of([&] { block->forward(x); });
  EXPECT_EQ(ops["aten::addmm"], 4) << "one per Linear layer of the block";
  EXPECT_EQ(ops["aten::add_"], 0) << "a bias added after its product";
  EXPECT_EQ(ops["aten::matmul"], 0);

  Mlp mlp(c.vocab_size, 16);
  auto idx = torch::randint(c.vocab_size, {2, 8});
  ops = operators_of([&] { mlp->forward(idx); });
  EXPECT_EQ(ops["aten::addmm"], 3);
  EXPECT_EQ(ops["aten::add_"], 0);
}

// The presets are lockstep/model_shapes.hpp's table, the one `lockstep plan` sizes: each is
// accepted, the memory plan's counts are the modules' own, and the flag's error and --help list
// every preset.
TEST(Model, PresetsAreTheSharedTableAndThePlansCountsAreTheModulesOwn) {
  for (const auto& p : lockstep::models::kPresets) {
    GptConfig c = GptConfig::preset(std::string(p.name));
    EXPECT_EQ(c.n_layer, p.shape.layers) << p.name;
    EXPECT_EQ(c.n_embd, p.shape.width) << p.name;
    EXPECT_EQ(c.vocab_size, p.shape.vocab) << p.name;
  }
  GptConfig tiny = GptConfig::preset("tiny");
  Gpt gpt(tiny);
  int64_t n = 0;
  for (const auto& t : gpt->parameters()) n += t.numel();
  EXPECT_EQ(n, tiny.parameters()) << "tied head counted once";
  Mlp mlp(tiny.vocab_size, tiny.n_embd);
  n = 0;
  for (const auto& t : mlp->parameters()) n += t.numel();
  EXPECT_EQ(static_cast<double>(n), lockstep::plan::mlp_parameters(static_cast<double>(tiny.n_embd),
                                                                    static_cast<double>(tiny.vocab_size)));
  try {
    GptConfig::preset("gpt5");
    FAIL() << "an unknown preset must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--model: unknown preset 'gpt5'; valid: " + lockstep::models::names());
  }
  EXPECT_NE(std::string(kUsage).find(lockstep::models::names(" | ")), std::string::npos) << "--help lists every preset";
}

}  // namespace
