#include "controller/status_batcher.hpp"

#include <algorithm>

namespace lockstep::controller {
namespace {

// How long from `now` until `due`, rounded up to the next millisecond; 0 when it has passed.
std::chrono::milliseconds wait_until(StatusBatcher::Clock::time_point due, StatusBatcher::Clock::time_point now) {
  if (due <= now) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(due - now) + std::chrono::milliseconds(1);
}

}  // namespace

StatusWait status_wait(const reconcile::JobStatus& current, const reconcile::Decision& d) {
  if (!d.status_changed || !d.events.empty()) return StatusWait::None;
  // A queued job's first write (Queued, then perhaps Pending once admitted) waits the same way:
  // Kueue often admits within the period (docs/kueue.md).
  const bool first_pending = current.phase.empty() && (d.status.phase == "Pending" || d.status.phase == "Queued") &&
                             std::all_of(d.status.conditions.begin(), d.status.conditions.end(),
                                         [](const reconcile::Condition& c) {
                                           return c.type == "Created" || c.type == "Queued" || c.type == "Isolated";
                                         });
  if (first_pending) return StatusWait::SinceFirstSeen;
  reconcile::JobStatus counts_only = current;
  counts_only.nodes = d.status.nodes;
  counts_only.progress = d.status.progress;
  return counts_only == d.status ? StatusWait::SinceLastWrite : StatusWait::None;
}

std::chrono::milliseconds StatusBatcher::wait(const std::string& key, const reconcile::JobStatus& current,
                                              const reconcile::Decision& d, Clock::time_point now) {
  if (period_.count() <= 0) return std::chrono::milliseconds(0);
  const StatusWait kind = status_wait(current, d);
  if (kind == StatusWait::None) return std::chrono::milliseconds(0);
  std::lock_guard<std::mutex> lock(mu_);
  if (kind == StatusWait::SinceFirstSeen) return wait_until(put_off_at_.emplace(key, now).first->second + period_, now);
  auto it = written_at_.find(key);
  if (it == written_at_.end()) return std::chrono::milliseconds(0);
  return wait_until(it->second + period_, now);
}

void StatusBatcher::written(const std::string& key, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  written_at_[key] = now;
  put_off_at_.erase(key);
}

void StatusBatcher::forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  written_at_.erase(key);
  put_off_at_.erase(key);
}

}  // namespace lockstep::controller
