// DDP: data parallelism with gradient buckets all-reduced while backward is still running.
//
// Note [Bucket order]
// Parameters are grouped into buckets in reverse registration order, which is roughly the
// order backward produces their gradients: the first bucket small (first_bucket_bytes, so
// communication starts early), the rest up to bucket_bytes (25 MB; for a model with less
// than four buckets' worth of gradients, a quarter of them, so small models overlap too). A hook on each parameter copies
// its gradient into its bucket's flat buffer; when a bucket is full it is all-reduced at
// once, asynchronously, but only after every bucket before it has been launched, so every
// rank issues the same collectives in the same order (Gloo and NCCL match collectives by
// order; a mismatch would hang or mix up data). collective_log() records the order.
//
// Gradient accumulation: with set_sync(false) the hooks do nothing and gradients just
// accumulate locally; on the synchronising micro-step each hook adds the accumulated local
// gradient to the incoming one, so one all-reduce covers all micro-steps.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lockstep::trainer {

// Note [Communication figures]
// A step's communication, per collective kind (the step datagram's op: allreduce for DDP,
// allgather and reduce_scatter for FSDP, docs/metrics.md): how long the collectives ran, their
// bytes, and how long the step waited for them (exposed). Exposed is measured where the waiting
// happens: on the CPU the host time blocked in wait() (Gloo completes collectives on the host);
// on a GPU the gap the wait leaves in the compute stream, from CUDA events recorded on it just
// before and after wait() (with NCCL, wait() only makes that stream wait for the collective).
// DDP waits once, after backward (train.cpp times it); FSDP waits inside forward and backward,
// for each block's all-gather (only what prefetching did not hide) and reduce-scatter.
struct OpStats {
  double comm_s = 0;     // time the collectives ran (CPU: wall time in flight; GPU: NCCL's CUDA events)
  double bytes = 0;
  double exposed_s = 0;  // time the step waited for them
};

struct CommStats {
  double comm_s = 0;     // all ops: DDP, wall time with at least one bucket in flight; FSDP, the ops' sum
  double bytes = 0;
  double exposed_s = 0;  // all ops
  std::map<std::string, OpStats> ops;
};

class Ddp {
 public:
  Ddp(torch::nn::Module& model, c10::intrusive_ptr<c10d::Backend> pg, int64_t bucket_bytes = 25 << 20,
      int64_t first_bucket_bytes = 1 << 20, bool overlap = true);
  void broadcast_parameters();   // rank 0's initial parameters to every rank
  void set_sync(bool sync) { sync_ = sync; }
  void begin_backward();         // before loss.backward() of a synchronising micro-step
  CommStats finish_step();       // after it: waits, averages, writes .grad
  // On a GPU, once the step has finished on the device: replaces `s`'s host-clock comm_s with
  // the all-reduces' device time (DeviceCommTimer). Nothing on the CPU, where finish_step's
  // wall-clock figure is the measure.
  void device_figures(CommStats& s);
  size_t buckets() const { return buckets_.size(); }
  const std::vector<std::string>& collective_log() const { return log_; }
  // See Note [Stop vote]: `vote` is read as the last bucket is launched and rides in it, one float
  // after the gradients; vote_sum() is its sum over the ranks from the last synchronised step
  // (a 1-element tensor on the gradients' device; undefined before the first).
  void set_vote(std::function<float()> vote) { vote_ = std::move(vote); }
  torch::Tensor vote_sum() const { return vote_sum_; }

 private:
  struct Bucket {
    std::vector<size_t> params;    // indices into params_
    std::vector<int64_t> offsets;  // element offset of each in `flat`
    torch::Tensor flat;
    size_t pending = 0;
    bool launched = false;
    c10::intrusive_ptr<c10d::Work> work;
    std::chrono::steady_clock::time_point start, end;
  };
  void on_grad(size_t param, const torch::Tensor& grad);
  void launch_ready();  // in bucket order; Note [Bucket order]
  void launch(Bucket& b);

  std::vector<torch::Tensor> params_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  c10::intrusive_ptr<c10d::Backend> pg_;
  bool sync_ = true, overlap_ = true, in_backward_ = false;
  std::mutex mu_;
  std::vector<std::string> log_;
  std::chrono::steady_clock::time_point backward_start_;
  std::function<float()> vote_;
  torch::Tensor vote_sum_;
};

}  // namespace lockstep::trainer
