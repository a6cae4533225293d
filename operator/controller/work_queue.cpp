#include "controller/work_queue.hpp"

#include <algorithm>

namespace lockstep::controller {

WorkQueue::WorkQueue(Duration base, Duration max) : base_(base), max_(max) {}

void WorkQueue::add_locked(const std::string& key) {
  if (shutdown_) return;
  if (processing_.count(key)) {
    dirty_.insert(key);  // queued again by done()
    return;
  }
  if (queued_.insert(key).second) {
    queue_.push_back(key);
    max_depth_ = std::max(max_depth_, queue_.size());
    cv_.notify_one();
  }
}

void WorkQueue::add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  add_locked(key);
}

void WorkQueue::add_after(const std::string& key, Duration delay) {
  if (delay.count() <= 0) return add(key);
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return;
  auto at = Clock::now() + delay;
  auto it = delayed_at_.find(key);
  if (it != delayed_at_.end()) {
    if (it->second <= at) return;  // it fires sooner already
    delayed_.erase({it->second, key});
  }
  // Waiting workers wake at the earliest deadline they saw: only a new earliest needs them up
  // sooner. Most additions (each reconcile's resync, a batched status write's second) are not,
  // and waking every worker for each cost the operator futex calls and context switches
  // (bench/operator/RESULTS.md, the profile of #44's regression).
  bool earliest = delayed_.empty() || at < delayed_.begin()->first;
  delayed_.insert({at, key});
  delayed_at_[key] = at;
  if (earliest) cv_.notify_all();
}

void WorkQueue::add_rate_limited(const std::string& key) {
  Duration delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int n = failures_[key]++;
    delay = base_;
    for (int i = 0; i < n && delay < max_; ++i) delay *= 2;
    if (delay > max_) delay = max_;
  }
  add_after(key, delay);
}

void WorkQueue::forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(key);
}

int WorkQueue::failures(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::promote_due_locked() {
  auto now = Clock::now();
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    delayed_at_.erase(key);
    add_locked(key);
  }
}

std::optional<std::string> WorkQueue::get() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    promote_due_locked();
    if (shutdown_) return std::nullopt;
    if (!queue_.empty()) break;
    if (delayed_.empty()) cv_.wait(lock);
    else cv_.wait_until(lock, delayed_.begin()->first);
  }
  std::string key = queue_.front();
  queue_.pop_front();
  queued_.erase(key);
  processing_.insert(key);
  return key;
}

void WorkQueue::done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(key);
  if (dirty_.erase(key)) add_locked(key);
}

void WorkQueue::shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

size_t WorkQueue::depth() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

size_t WorkQueue::max_depth() {
  std::lock_guard<std::mutex> lock(mu_);
  return max_depth_;
}

size_t WorkQueue::delayed() {
  std::lock_guard<std::mutex> lock(mu_);
  return delayed_.size();
}

}  // namespace lockstep::controller
