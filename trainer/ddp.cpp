#include "ddp.hpp"

#include "dist.hpp"

#include <algorithm>

namespace lockstep::trainer {

using Clock = std::chrono::steady_clock;

Ddp::Ddp(torch::nn::Module& model, c10::intrusive_ptr<c10d::Backend> pg, int64_t bucket_bytes,
         int64_t first_bucket_bytes, bool overlap)
    : pg_(std::move(pg)), overlap_(overlap) {
  for (auto& p : model.parameters())
    if (p.requires_grad()) params_.push_back(p);
  bucket_of_.resize(params_.size());
  // A model much smaller than one bucket would get a single bucket and no overlap at all:
  // cap buckets at a quarter of the gradients (at least 16 KB), the first at half of that.
  int64_t total_bytes = 0;
  for (const auto& p : params_) total_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  bucket_bytes = std::min(bucket_bytes, std::max<int64_t>(total_bytes / 4, 16 << 10));
  first_bucket_bytes = std::min(first_bucket_bytes, bucket_bytes / 2);
  // See Note [Bucket order]: reverse registration order, first bucket smaller.
  Bucket current;
  int64_t bytes = 0, cap = first_bucket_bytes, elems = 0;
  auto close = [&] {
    if (current.params.empty()) return;
    current.flat = torch::zeros({elems}, params_[current.params.front()].options());
    buckets_.push_back(std::move(current));
    current = Bucket{};
    bytes = elems = 0;
    cap = bucket_bytes;
  };
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    int64_t b = p.numel() * static_cast<int64_t>(p.element_size());
    if (!current.params.empty() && bytes + b > cap) close();
    bucket_of_[k] = buckets_.size();
    current.params.push_back(k);
    current.offsets.push_back(elems);
    elems += p.numel();
    bytes += b;
  }
  close();
  // See Note [Stop vote]: the last bucket launched carries one float more, the step's stop vote.
  if (!buckets_.empty()) {
    auto& last = buckets_.back();
    last.flat = torch::zeros({last.flat.numel() + 1}, last.flat.options());
  }
  for (size_t k = 0; k < params_.size(); ++k)
    params_[k].register_hook([this, k](torch::Tensor grad) {
      on_grad(k, grad);
      return grad;
    });
}

void Ddp::broadcast_parameters() {
  if (!pg_) return;
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    std::vector<at::Tensor> t{p.data()};
    pg_->broadcast(t)->wait();
  }
}

void Ddp::begin_backward() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.launched = false;
    b.work.reset();
  }
  next_launch_ = 0;
  in_backward_ = sync_;
  backward_start_ = Clock::now();
}

void Ddp::on_grad(size_t k, const torch::Tensor& grad) {
  if (!pg_ || !sync_ || !in_backward_) return;
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = buckets_[bucket_of_[k]];
  size_t slot = std::find(b.params.begin(), b.params.end(), k) - b.params.begin();
  auto dst = b.flat.narrow(0, b.offsets[slot], params_[k].numel()).view_as(grad);
  const auto& acc = params_[k].grad();  // earlier micro-steps' local gradient, if any
  torch::NoGradGuard no_grad;
  if (acc.defined()) torch::add_out(dst, acc, grad);
  else dst.copy_(grad);
  if (--b.pending == 0 && overlap_) launch_ready();
}

void Ddp::launch(Bucket& b) {
  b.start = Clock::now();
  if (&b == &buckets_.back()) {  // Note [Stop vote]: as late as the step allows
    torch::NoGradGuard no_grad;
    b.flat.narrow(0, b.flat.numel() - 1, 1).fill_(vote_ ? vote_() : 0.0f);
  }
  std::vector<at::Tensor> t{b.flat};
  b.work = pg_->allreduce(t);
  b.launched = true;
  log_.push_back("allreduce bucket " + std::to_string(&b - buckets_.data()) + " numel " + std::to_string(b.flat.numel()));
  auto* end = &b.end;
  b.work->getFuture()->addCallback([end](c10::ivalue::Future&) { *end = Clock::now(); });
}

void Ddp::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void Ddp::device_figures(CommStats& s) {
  if (buckets_.empty() || !buckets_.front().flat.is_cuda() || !pg_ || !sync_) return;
  DeviceCommTimer timer;
  for (const auto& b : buckets_) timer.add(b.work);
  const double on_device = timer.seconds();
  if (on_device < 0) return;  // the backend did not time them
  s.comm_s = on_device;
  s.ops["allreduce"].comm_s = on_device;
}

CommStats Ddp::finish_step() {
  CommStats s;
  if (!pg_ || !sync_) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_backward_ = false;
    // Parameters that got no gradient this step still take part, as zeros (or their local
    // accumulation), so every rank's collectives stay the same.
    for (auto& b : buckets_) {
      if (b.pending == 0) continue;
      for (size_t i = 0; i < b.params.size(); ++i) {
        const auto& p = params_[b.params[i]];
        auto dst = b.flat.narrow(0, b.offsets[i], p.numel());
        if (p.grad().defined()) dst.copy_(p.grad().reshape({-1}));
        else dst.zero_();
      }
      b.pending = 0;
    }
    while (next_launch_ < buckets_.size()) launch(buckets_[next_launch_++]);  // overlap off: all launch here
  }
  for (auto& b : buckets_) b.work->wait();
  auto done = Clock::now();
  // Union of the buckets' in-flight intervals.
  std::vector<std::pair<Clock::time_point, Clock::time_point>> spans;
  // A completion callback may still be running when wait() returns: then count up to now.
  for (auto& b : buckets_) spans.emplace_back(b.start, b.end > b.start ? b.end : done);
  std::sort(spans.begin(), spans.end());
  Clock::time_point cur_start = spans.front().first, cur_end = spans.front().second;
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first > cur_end) {
      s.comm_s += std::chrono::duration<double>(cur_end - cur_start).count();
      cur_start = spans[i].first;
    }
    cur_end = std::max(cur_end, spans[i].second);
  }
  s.comm_s += std::chrono::duration<double>(cur_end - cur_start).count();
  torch::NoGradGuard no_grad;
  const auto& last = buckets_.back().flat;
  vote_sum_ = last.narrow(0, last.numel() - 1, 1).clone();  // summed, before the average below
  const double world = static_cast<double>(pg_->getSize());
  for (auto& b : buckets_) {
    b.flat.div_(world);
    s.bytes += static_cast<double>(b.flat.numel() * static_cast<int64_t>(b.flat.element_size()));
    for (size_t i = 0; i < b.params.size(); ++i) {
      auto& p = params_[b.params[i]];
      auto avg = b.flat.narrow(0, b.offsets[i], p.numel()).view_as(p);
      if (p.grad().defined()) p.mutable_grad().copy_(avg);
      else p.mutable_grad() = avg.clone();
    }
  }
  s.ops["allreduce"] = {s.comm_s, s.bytes, 0};  // exposed: the caller times the wait (Note [Communication figures])
  return s;
}

}  // namespace lockstep::trainer
