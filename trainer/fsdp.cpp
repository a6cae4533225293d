#include "fsdp.hpp"

#include "dist.hpp"
#include "optim.hpp"
#include "recompute.hpp"

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <iostream>
#include <map>
#include <memory>
#include <utility>

namespace lockstep::trainer {

using Clock = std::chrono::steady_clock;

namespace {
constexpr const char* kGather = "allgather";
constexpr const char* kScatter = "reduce_scatter";
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

// One op's figures for the step (Note [Communication figures] in ddp.hpp).
struct OpTally {
  OpStats stats;                // comm_s on the host clock (CPU), bytes, exposed on the CPU
  DeviceCommTimer device;       // GPU: the collectives' own durations
  std::vector<std::pair<c10::Event*, c10::Event*>> gaps;  // GPU: compute-stream events around each wait
};

// Which flat collectives the backend has (Gloo's set varies by version): checked on first
// use, with the fallback said once in the log.
struct Collectives {
  c10::intrusive_ptr<c10d::Backend> pg;
  int world = 1, rank = 0;
  int flat_gather = -1, flat_scatter = -1;  // -1 unknown, 0 no, 1 yes
  std::string note;
  std::vector<std::string> log;
  bool on_gpu = false;     // then CUDA events time the collectives and the waits (host time sees none of it)
  torch::Device device{torch::kCPU};
  std::map<std::string, OpTally> ops;
  std::vector<std::unique_ptr<c10::Event>> events;  // GPU: a pool, reused every step
  size_t events_used = 0;

  c10::intrusive_ptr<c10d::Work> timed(c10::intrusive_ptr<c10d::Work> w, const char* op) {
    if (on_gpu) ops[op].device.add(w);
    return w;
  }

  c10::Event* recorded_event() {
    if (events_used == events.size())
      events.push_back(std::make_unique<c10::Event>(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT));
    c10::Event* e = events[events_used++].get();
    e->record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device));
    return e;
  }

  // Waits for `w`, an `op`, counting how long the step waited for it.
  void wait(const c10::intrusive_ptr<c10d::Work>& w, const char* op) {
    OpTally& t = ops[op];
    if (on_gpu) {
      c10::Event* before = recorded_event();
      w->wait();  // NCCL: the compute stream now waits for the collective
      t.gaps.emplace_back(before, recorded_event());
    } else {
      auto t0 = Clock::now();
      w->wait();
      t.stats.exposed_s += since(t0);
    }
  }

  void count(const char* op, const torch::Tensor& full) {
    ops[op].stats.bytes += static_cast<double>(full.numel() * static_cast<int64_t>(full.element_size()));
  }

  void all_gather(torch::Tensor& full, const torch::Tensor& shard) {
    auto t0 = Clock::now();
    log.push_back("all_gather numel " + std::to_string(full.numel()));
    if (flat_gather != 0) {
      try {
        wait(timed(pg->_allgather_base(full, const_cast<torch::Tensor&>(shard)), kGather), kGather);
        flat_gather = 1;
      } catch (const c10::Error& e) {
        if (is_peer_gone(e)) throw;  // a failure, not a missing collective
        flat_gather = 0;
      }
    }
    if (flat_gather == 0) {
      std::vector<std::vector<at::Tensor>> out{full.chunk(world)};
      std::vector<at::Tensor> in{shard};
      wait(timed(pg->allgather(out, in), kGather), kGather);
    }
    ops[kGather].stats.comm_s += since(t0);
    count(kGather, full);
  }

  // Starts an all-gather; nullptr when the backend has no flat all-gather (then the caller
  // gathers synchronously when it needs the parameters). `done` gets the host time it
  // completed (CPU), for its time in flight.
  c10::intrusive_ptr<c10d::Work> all_gather_async(torch::Tensor& full, const torch::Tensor& shard,
                                                  std::shared_ptr<std::atomic<int64_t>> done) {
    if (flat_gather != 1) return {};
    log.push_back("all_gather numel " + std::to_string(full.numel()) + " (prefetch)");
    count(kGather, full);
    auto w = timed(pg->_allgather_base(full, const_cast<torch::Tensor&>(shard)), kGather);
    done->store(0);
    if (!on_gpu)
      w->getFuture()->addCallback([done](c10::ivalue::Future&) { done->store(Clock::now().time_since_epoch().count()); });
    return w;
  }

  // Sum over ranks of `full`, this rank's chunk into `shard`.
  void reduce_scatter(torch::Tensor& shard, torch::Tensor& full) {
    auto t0 = Clock::now();
    log.push_back("reduce_scatter numel " + std::to_string(full.numel()));
    if (flat_scatter != 0) {
      try {
        wait(timed(pg->_reduce_scatter_base(shard, full), kScatter), kScatter);
        flat_scatter = 1;
      } catch (const c10::Error& e) {
        if (is_peer_gone(e)) throw;
        flat_scatter = 0;
      }
    }
    if (flat_scatter == 0) {  // all-reduce the whole vector and keep our chunk: a reduce-scatter's work
      std::vector<at::Tensor> t{full};
      wait(timed(pg->allreduce(t), kScatter), kScatter);
      shard.copy_(full.chunk(world)[rank]);
    }
    ops[kScatter].stats.comm_s += since(t0);
    count(kScatter, full);
  }

  // The step's figures, and forgets them. On a GPU only once the step has finished there.
  CommStats take() {
    CommStats s;
    for (auto& [op, t] : ops) {
      OpStats o = t.stats;
      if (on_gpu) {
        const double on_device = t.device.seconds();
        if (on_device >= 0) o.comm_s = on_device;
        o.exposed_s = 0;
        for (const auto& [before, after] : t.gaps) {
          after->synchronize();
          o.exposed_s += before->elapsedTime(*after) / 1000.0;  // milliseconds
        }
      }
      s.comm_s += o.comm_s;
      s.bytes += o.bytes;
      s.exposed_s += o.exposed_s;
      s.ops[op] = o;
    }
    ops.clear();
    events_used = 0;
    return s;
  }

  std::string describe() const {
    return std::string("FSDP collectives: all-gather via ") + (flat_gather == 0 ? "allgather into chunks" : "_allgather_base") +
           ", reduce-scatter via " +
           (flat_scatter == 0 ? "allreduce + local slice (the backend has no reduce-scatter)" : "_reduce_scatter_base");
  }
};

// Note [FSDP units]
class FsdpUnit {
 public:
  FsdpUnit(std::vector<torch::Tensor> params, Collectives* c) : params_(std::move(params)), c_(c) {
    for (const auto& p : params_) {
      offsets_.push_back(numel_);
      shapes_.push_back(p.sizes().vec());
      numel_ += p.numel();
    }
    const int64_t w = c_->world;
    padded_ = (numel_ + w - 1) / w * w;
    torch::NoGradGuard no_grad;
    auto flat = torch::zeros({padded_}, params_.front().options());
    for (size_t i = 0; i < params_.size(); ++i) flat.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].reshape({-1}));
    shard = flat.chunk(w)[c_->rank].clone().requires_grad_(true);
    free();
  }

  torch::Tensor gather() {
    torch::NoGradGuard no_grad;
    if (prefetch_work_) {  // started earlier, while the previous unit computed
      if (c_->on_gpu) {
        c_->wait(prefetch_work_, kGather);  // exposed: only what the compute did not hide
      } else {
        // In flight from launch to completion (the Gloo thread's callback). Exposed is the
        // part of the wait while it was in flight: waking up after it completed is the
        // scheduler's delay, not communication, and on two busy cores it can exceed the
        // collective itself.
        const auto wait_start = Clock::now();
        prefetch_work_->wait();
        const auto wait_end = Clock::now();
        const int64_t done = prefetch_done_->load();
        const auto end = done > 0 ? std::min(Clock::time_point(Clock::duration(done)), wait_end) : wait_end;
        auto& stats = c_->ops[kGather].stats;
        stats.comm_s += std::chrono::duration<double>(end - prefetch_start_).count();
        stats.exposed_s += std::max(0.0, std::chrono::duration<double>(end - std::max(wait_start, prefetch_start_)).count());
      }
      prefetch_work_.reset();
      return std::exchange(prefetched_, torch::Tensor());
    }
    auto full = torch::empty({padded_}, shard.options().requires_grad(false));
    c_->all_gather(full, shard.detach());
    return full;
  }

  // Starts gathering this unit's parameters so they are ready when gather() is called.
  void prefetch() {
    if (prefetch_work_) return;
    torch::NoGradGuard no_grad;
    prefetched_ = torch::empty({padded_}, shard.options().requires_grad(false));
    shard_view_ = shard.detach();
    prefetch_start_ = Clock::now();
    prefetch_work_ = c_->all_gather_async(prefetched_, shard_view_, prefetch_done_);
    if (!prefetch_work_) prefetched_ = torch::Tensor();
  }
  FsdpUnit* next = nullptr;  // the unit whose forward follows this one's
  FsdpUnit* prev = nullptr;

  void bind(const torch::Tensor& full) {
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].set_data(full.narrow(0, offsets_[i], numel(i)).view(shapes_[i]));
  }

  void free() {
    for (auto& p : params_) p.set_data(torch::empty({0}, p.options().requires_grad(false)));
  }

  // Gradients (one per parameter, undefined = zero) -> averaged gradient of this rank's shard.
  torch::Tensor reduce_grads(const std::vector<torch::Tensor>& grads) {
    torch::NoGradGuard no_grad;
    auto full = torch::zeros({padded_}, shard.options().requires_grad(false));
    for (size_t i = 0; i < params_.size(); ++i)
      if (grads[i].defined()) full.narrow(0, offsets_[i], numel(i)).copy_(grads[i].reshape({-1}));
    auto out = torch::empty({padded_ / c_->world}, full.options());
    c_->reduce_scatter(out, full);
    return out.div_(c_->world);
  }

  const std::vector<torch::Tensor>& params() const { return params_; }
  int64_t numel(size_t i) const {
    int64_t n = 1;
    for (auto d : shapes_[i]) n *= d;
    return n;
  }
  int64_t padded() const { return padded_; }
  torch::Tensor shard;

 private:
  std::vector<torch::Tensor> params_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<int64_t>> shapes_;
  int64_t numel_ = 0, padded_ = 0;
  Collectives* c_;
  c10::intrusive_ptr<c10d::Work> prefetch_work_;
  torch::Tensor prefetched_, shard_view_;
  Clock::time_point prefetch_start_;
  std::shared_ptr<std::atomic<int64_t>> prefetch_done_ = std::make_shared<std::atomic<int64_t>>(0);  // Clock ticks
};

namespace {

// One transformer block under FSDP: gathered for forward, gathered again and recomputed
// for backward, its gradients reduce-scattered into its shard.
struct GatheredBlock : torch::autograd::Function<GatheredBlock> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor shard,
                               FsdpUnit* unit, BlockImpl* block) {
    (void)shard;  // an input only so that autograd routes the shard's gradient back to it
    auto full = unit->gather();
    if (unit->next) unit->next->prefetch();  // overlaps the next block's gather with this compute
    unit->bind(full);
    torch::Tensor y = block->forward(x);
    unit->free();
    ctx->save_for_backward({x});
    AutocastState::current().save(ctx);
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* unit = reinterpret_cast<FsdpUnit*>(ctx->saved_data["unit"].toInt());
    auto* block = reinterpret_cast<BlockImpl*>(ctx->saved_data["block"].toInt());
    auto x = ctx->get_saved_variables()[0];
    auto full = unit->gather();
    if (unit->prev) unit->prev->prefetch();  // backward runs the blocks in reverse
    unit->bind(full);
    torch::autograd::variable_list grads;
    {
      torch::AutoGradMode enable(true);
      auto xd = x.detach().requires_grad_(true);
      torch::Tensor y;
      {
        AutocastScope autocast(AutocastState::load(ctx));  // Note [Autocast in recomputation]
        y = block->forward(xd);
      }
      torch::autograd::variable_list inputs{xd};
      for (const auto& p : unit->params()) inputs.push_back(p);
      grads = torch::autograd::grad({y}, inputs, {grad_out[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                    /*allow_unused=*/true);
    }
    std::vector<torch::Tensor> param_grads(grads.begin() + 1, grads.end());
    auto shard_grad = unit->reduce_grads(param_grads);
    unit->free();
    return {grads[0], shard_grad, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

Fsdp::Fsdp(Gpt model, c10::intrusive_ptr<c10d::Backend> pg)
    : model_(std::move(model)), pg_(std::move(pg)), coll_(std::make_unique<Collectives>()) {
  Collectives* c = coll_.get();
  c->pg = pg_;
  c->world = pg_->getSize();
  c->rank = pg_->getRank();
  c->on_gpu = model_->parameters().front().is_cuda();
  c->device = model_->parameters().front().device();
  {  // every rank starts from rank 0's initial parameters
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) {
      std::vector<at::Tensor> t{p.data()};
      pg_->broadcast(t)->wait();
    }
  }
  std::vector<torch::Tensor> root_params;
  for (auto& p : model_->wte->parameters()) root_params.push_back(p);
  for (auto& p : model_->wpe->parameters()) root_params.push_back(p);
  for (auto& p : model_->ln_f->parameters()) root_params.push_back(p);
  root_ = std::make_unique<FsdpUnit>(root_params, c);
  for (auto& b : *model_->blocks) blocks_.push_back(std::make_unique<FsdpUnit>(b->parameters(), c));
  for (size_t i = 0; i + 1 < blocks_.size(); ++i) {
    blocks_[i]->next = blocks_[i + 1].get();
    blocks_[i + 1]->prev = blocks_[i].get();
  }
  model_->run_block = [this](size_t i, const torch::Tensor& x) {
    return GatheredBlock::apply(x, blocks_[i]->shard, blocks_[i].get(), model_->blocks[i]->as<Block>());
  };
}

Fsdp::~Fsdp() { model_->run_block = nullptr; }

std::vector<torch::Tensor> Fsdp::shards() const {
  std::vector<torch::Tensor> s{root_->shard};
  for (const auto& b : blocks_) s.push_back(b->shard);
  return s;
}

void Fsdp::begin_step() {
  auto full = root_->gather();
  root_->bind(full);
  for (auto& p : root_->params()) {
    auto& mp = const_cast<torch::Tensor&>(p);
    if (mp.grad().defined()) mp.mutable_grad() = torch::Tensor();
  }
}

CommStats Fsdp::finish_step() {
  Collectives* c = coll_.get();
  std::vector<torch::Tensor> grads;
  for (const auto& p : root_->params()) grads.push_back(p.grad());
  auto g = root_->reduce_grads(grads);
  auto& shard = root_->shard;
  if (shard.grad().defined()) shard.mutable_grad().add_(g);
  else shard.mutable_grad() = g;
  for (auto& p : root_->params()) const_cast<torch::Tensor&>(p).mutable_grad() = torch::Tensor();
  root_->free();
  if (note_.empty()) {
    note_ = c->describe();
    if (c->rank == 0) std::cout << "lockstep-trainer: " << note_ << std::endl;
  }
  return c->on_gpu ? CommStats() : c->take();  // on a GPU, device_figures() once the step has finished
}

void Fsdp::device_figures(CommStats& s) {
  if (coll_->on_gpu) s = coll_->take();
}

torch::Tensor Fsdp::clip_grad_norm(double max_norm) {
  const auto local = shards();
  auto sq = grad_norm_squared(local);  // this rank's shards; their sum over ranks is the whole
  // See Note [Stop vote]: the vote rides as a second float.
  auto both = torch::cat({sq, torch::full({1}, vote_ ? vote_() : 0.0f, sq.options())});
  std::vector<at::Tensor> t{both};
  pg_->allreduce(t)->wait();
  sq = both.narrow(0, 0, 1);
  vote_sum_ = both.narrow(0, 1, 1);
  scale_grads_to_norm(local, sq, max_norm);
  return sq.sqrt();
}

Fsdp::Memory Fsdp::memory(const torch::optim::Optimizer& optimizer) const {
  Memory m;
  auto bytes = [](const torch::Tensor& t) {
    return t.defined() ? static_cast<double>(t.numel() * static_cast<int64_t>(t.element_size())) : 0.0;
  };
  for (const auto& s : shards()) {
    m.params += bytes(s);
    m.grads += bytes(s.grad());
    auto it = optimizer.state().find(s.unsafeGetTensorImpl());
    if (it != optimizer.state().end()) {
      const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      m.optimizer += bytes(st.exp_avg()) + bytes(st.exp_avg_sq()) + bytes(st.max_exp_avg_sq());
    }
  }
  m.padded_numel = root_->padded();
  for (const auto& b : blocks_) m.padded_numel += b->padded();
  return m;
}

std::vector<torch::Tensor> Fsdp::full_parameters() {
  std::vector<torch::Tensor> gathered;
  root_->bind(root_->gather());
  for (auto& b : blocks_) b->bind(b->gather());
  for (const auto& p : model_->parameters()) gathered.push_back(p.detach().clone());
  root_->free();
  for (auto& b : blocks_) b->free();
  return gathered;
}

const std::vector<std::string>& Fsdp::collective_log() const { return coll_->log; }

}  // namespace lockstep::trainer
