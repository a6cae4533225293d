// Collectives on the training device, and recomputation under the forward's autocast state.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <filesystem>
#include <set>

#include "checkpoint.hpp"
#include "dist.hpp"
#include "fsdp.hpp"
#include "model.hpp"
#include "recompute.hpp"

namespace {

using namespace lockstep::trainer;

// A process group of one that records the device of every tensor it is handed and completes
// at once. Pure bookkeeping: it lets a CPU test see which device the trainer's own collectives
// (barriers, the last all-reduce) put their tensors on, which NCCL would check on a GPU.
class RecordingBackend : public c10d::Backend {
 public:
  RecordingBackend() : c10d::Backend(0, 1) {}
  std::set<std::string> devices;
  int calls = 0;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions&) override {
    return record(t);
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions&) override {
    return record(t);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    devices.insert("barrier() with no tensor");
    return c10::make_intrusive<Done>();
  }

 private:
  struct Done : c10d::Work {
    bool isCompleted() override { return true; }
    bool wait(std::chrono::milliseconds) override { return true; }
  };
  c10::intrusive_ptr<c10d::Work> record(const std::vector<at::Tensor>& t) {
    ++calls;
    for (const auto& x : t) devices.insert(x.device().str());
    return c10::make_intrusive<Done>();
  }
};

// The training device stands in as "meta": anything the trainer builds on the host instead
// shows up as "cpu" and fails, as ProcessGroupNCCL would with a host tensor.
TEST(CollectiveDevice, BarrierAndCheckpointUseTheTrainingDevice) {
  auto pg = c10::make_intrusive<RecordingBackend>();
  Dist d;
  d.world = 1;
  d.device = torch::Device(torch::kMeta);
  d.pg = pg;
  barrier(d);
  EXPECT_EQ(pg->calls, 1);

  auto dir = std::filesystem::temp_directory_path() / ("lockstep-colldev-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  CheckpointTarget t{dir.string(), 0, 1, "DDP", false};
  std::vector<torch::Tensor> tensors{torch::ones({4}).requires_grad_(true)};
  torch::optim::SGD opt(tensors, torch::optim::SGDOptions(0.1));
  save_checkpoint(t, 5, tensors, opt, d);
  std::filesystem::remove_all(dir);
  EXPECT_GT(pg->calls, 1) << "save_checkpoint is a collective: it should synchronise the ranks";
  EXPECT_EQ(pg->devices, std::set<std::string>{"meta"});
}

// Gradients of one tiny GPT step under CPU bf16 autocast, with `wrap` applied to the model
// (activation checkpointing or FSDP), against the same step without recomputation.
struct Grads {
  double loss;
  std::vector<torch::Tensor> flat;  // per FSDP unit: root (wte, wpe, ln_f), then each block
};

GptConfig tiny() { return GptConfig{2, 2, 64, 32, 128}; }

torch::Tensor batch(int64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, 128, {4, 33});
}

std::vector<torch::Tensor> unit_params(Gpt& g, int unit) {
  if (unit == 0) {
    std::vector<torch::Tensor> ps;
    for (auto* m : std::vector<torch::nn::Module*>{g->wte.get(), g->wpe.get(), g->ln_f.get()})
      for (auto& p : m->parameters()) ps.push_back(p);
    return ps;
  }
  return g->blocks[unit - 1]->parameters();
}

double autocast_loss(Gpt& g, const torch::Tensor& b) {
  AutocastState on;
  on.cpu = true;
  on.cpu_dtype = at::kBFloat16;
  torch::Tensor logits;
  {
    AutocastScope scope(on);
    logits = g->forward(b.narrow(1, 0, 32));
  }
  auto loss = lm_loss(logits.to(torch::kFloat32), b.narrow(1, 1, 32));
  loss.backward();
  return loss.item<double>();
}

Grads plain_grads(const torch::Tensor& b, bool checkpointing) {
  torch::manual_seed(7);
  Gpt g(tiny());
  if (checkpointing)
    g->run_block = [p = g.get()](size_t i, const torch::Tensor& x) {
      return CheckpointedBlock::apply(x, p->blocks[i]->as<Block>());
    };
  Grads out{autocast_loss(g, b), {}};
  for (int u = 0; u <= static_cast<int>(g->blocks->size()); ++u) {
    std::vector<torch::Tensor> gs;
    for (auto& p : unit_params(g, u)) gs.push_back(p.grad().reshape({-1}));
    out.flat.push_back(torch::cat(gs));
  }
  return out;
}

double max_rel_diff(const Grads& a, const Grads& b) {
  double worst = 0;
  for (size_t i = 0; i < a.flat.size(); ++i) {
    auto n = std::min(a.flat[i].numel(), b.flat[i].numel());
    auto x = a.flat[i].narrow(0, 0, n), y = b.flat[i].narrow(0, 0, n);
    worst = std::max(worst, ((x - y).abs().max() / (x.abs().max() + 1e-12)).item<double>());
  }
  return worst;
}

// Note [Autocast in recomputation]: without the saved state, the backward thread recomputes
// in fp32 and the gradients differ from the bf16 forward's by bf16 rounding (~1e-2 relative).
TEST(AutocastRecompute, ActivationCheckpointingKeepsTheForwardsPrecision) {
  auto b = batch(3);
  Grads ref = plain_grads(b, false), ckpt = plain_grads(b, true);
  EXPECT_DOUBLE_EQ(ref.loss, ckpt.loss);
  const double d = max_rel_diff(ref, ckpt);
  RecordProperty("max_rel_grad_diff", std::to_string(d));
  EXPECT_LT(d, 1e-6);
}

TEST(AutocastRecompute, FsdpKeepsTheForwardsPrecision) {
  auto b = batch(4);
  Grads ref = plain_grads(b, false);

  auto store = c10::make_intrusive<c10d::HashStore>();
  auto o = c10d::ProcessGroupGloo::Options::create();
  o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, 0, 1, o);
  torch::manual_seed(7);
  Gpt g(tiny());
  Fsdp fsdp(g, pg);
  fsdp.begin_step();
  Grads sharded{autocast_loss(g, b), {}};
  fsdp.finish_step();
  for (auto& s : fsdp.shards()) sharded.flat.push_back(s.grad().reshape({-1}));
  EXPECT_NEAR(ref.loss, sharded.loss, 1e-6);
  const double d = max_rel_diff(ref, sharded);
  RecordProperty("max_rel_grad_diff", std::to_string(d));
  EXPECT_LT(d, 1e-5);
}

}  // namespace
