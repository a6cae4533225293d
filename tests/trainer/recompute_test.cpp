// Collectives on the training device, and recomputation under the forward's autocast state.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

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

// Note [Shared checkpoint directory], the second guard: ranks that reach load_checkpoint with
// different checkpoints in sight (storage that is not one directory, past the start token)
// stop, naming both ranks' newest steps, instead of resuming from different steps.
TEST(CheckpointAgreement, RanksThatSeeDifferentCheckpointsStopInsteadOfResuming) {
  auto base = std::filesystem::temp_directory_path() / ("lockstep-agree-" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  // Rank 0's directory holds a complete checkpoint at step 5; rank 1's is empty.
  {
    Dist one;
    CheckpointTarget t{(base / "rank0").string(), 0, 1, "DDP", false};
    std::vector<torch::Tensor> tensors{torch::ones({4}).requires_grad_(true)};
    torch::optim::SGD opt(tensors, torch::optim::SGDOptions(0.1));
    save_checkpoint(t, 5, tensors, opt, one);
  }
  std::filesystem::create_directories(base / "rank1");
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::string errors[2];
  std::optional<int64_t> resumed[2];
  auto rank = [&](int r) {
    auto o = c10d::ProcessGroupGloo::Options::create();
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    Dist d;
    d.rank = r;
    d.world = 2;
    d.backend = "gloo";
    d.store = store;
    d.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, r, 2, o);
    CheckpointTarget t{(base / ("rank" + std::to_string(r))).string(), r, 2, "DDP", false};
    std::vector<torch::Tensor> tensors{torch::zeros({4}).requires_grad_(true)};
    torch::optim::SGD opt(tensors, torch::optim::SGDOptions(0.1));
    try {
      resumed[r] = load_checkpoint(t, tensors, opt, d);
    } catch (const std::invalid_argument& e) {
      errors[r] = e.what();
    }
  };
  std::thread r1(rank, 1);
  rank(0);
  r1.join();
  std::filesystem::remove_all(base);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(resumed[r].has_value()) << "rank " << r << " resumed at step " << *resumed[r];
    EXPECT_NE(errors[r].find("the ranks see different checkpoints"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("rank 0: 1, newest step 5; rank 1: 0, newest step -1"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("resume from different steps"), std::string::npos) << errors[r];
  }
}

// See Note [Autocast in recomputation]: a node's backward runs where autocast is off (here the
// caller's thread after the autocast region closed; on a GPU autograd's device thread), so
// the forward's state must travel with the node. This probe does what CheckpointedBlock and
// FSDP's GatheredBlock do, and records what its backward sees.
struct Seen {
  bool enabled = false;
  at::ScalarType dtype = at::kFloat;
  bool matmul_bf16 = false;
};
Seen seen;

struct Probe : torch::autograd::Function<Probe> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x) {
    AutocastState::current().save(ctx);
    return x * 2;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    AutocastScope scope(AutocastState::load(ctx));
    seen.enabled = at::autocast::is_autocast_enabled(at::kCPU);
    seen.dtype = at::autocast::get_autocast_dtype(at::kCPU);
    auto m = torch::randn({4, 4});
    seen.matmul_bf16 = torch::matmul(m, m).scalar_type() == at::kBFloat16;
    return {g[0] * 2};
  }
};

TEST(AutocastRecompute, BackwardRunsUnderTheForwardsState) {
  auto x = torch::randn({3}).requires_grad_(true);
  AutocastState bf16;
  bf16.cpu = true;
  bf16.cpu_dtype = at::kBFloat16;
  torch::Tensor y;
  {
    AutocastScope scope(bf16);
    y = Probe::apply(x);
  }
  ASSERT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "the scope must restore the state before it";
  y.sum().backward();
  EXPECT_TRUE(seen.enabled);
  EXPECT_EQ(seen.dtype, at::kBFloat16);
  EXPECT_TRUE(seen.matmul_bf16) << "the recomputation's matrix products must run in bf16, as the forward's did";
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "and the backward's scope must restore it after";
  EXPECT_TRUE(torch::allclose(x.grad(), torch::full({3}, 2.0)));

  // A forward without autocast recomputes without it.
  auto x2 = torch::randn({3}).requires_grad_(true);
  Probe::apply(x2).sum().backward();
  EXPECT_FALSE(seen.enabled);
  EXPECT_FALSE(seen.matmul_bf16);
}

// FSDP (which always recomputes) under autocast computes what the plain model computes: the
// same loss and, since its shards hold the same numbers, the same gradients.
GptConfig tiny() { return GptConfig{2, 2, 64, 32, 128}; }

torch::Tensor batch(int64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, 128, {4, 33});
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

TEST(AutocastRecompute, FsdpMatchesPlainTrainingUnderAutocast) {
  auto b = batch(4);
  torch::manual_seed(7);
  Gpt plain(tiny());
  const double ref = autocast_loss(plain, b);
  std::vector<torch::Tensor> ref_flat;
  {
    std::vector<torch::Tensor> root;
    for (auto* m : std::vector<torch::nn::Module*>{plain->wte.get(), plain->wpe.get(), plain->ln_f.get()})
      for (auto& p : m->parameters()) root.push_back(p.grad().reshape({-1}));
    ref_flat.push_back(torch::cat(root));
    for (size_t i = 0; i < plain->blocks->size(); ++i) {
      std::vector<torch::Tensor> gs;
      for (auto& p : plain->blocks[i]->parameters()) gs.push_back(p.grad().reshape({-1}));
      ref_flat.push_back(torch::cat(gs));
    }
  }

  auto store = c10::make_intrusive<c10d::HashStore>();
  auto o = c10d::ProcessGroupGloo::Options::create();
  o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, 0, 1, o);
  torch::manual_seed(7);
  Gpt g(tiny());
  Fsdp fsdp(g, pg);
  fsdp.begin_step();
  const double sharded = autocast_loss(g, b);
  fsdp.finish_step();
  EXPECT_NEAR(ref, sharded, 1e-6);
  auto shards = fsdp.shards();
  ASSERT_EQ(shards.size(), ref_flat.size());
  double worst = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    auto s = shards[i].grad().reshape({-1}).narrow(0, 0, ref_flat[i].numel());
    worst = std::max(worst, ((s - ref_flat[i]).abs().max() / (ref_flat[i].abs().max() + 1e-12)).item<double>());
  }
  RecordProperty("max_rel_grad_diff", std::to_string(worst));
  EXPECT_LT(worst, 1e-5);
}

}  // namespace
