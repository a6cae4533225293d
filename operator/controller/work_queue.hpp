// A work queue of object keys, with client-go's guarantees:
//  * a key is queued at most once, however often it is added;
//  * a key being processed is never handed to a second worker; re-added meanwhile, it is
//    queued again when done() is called;
//  * add_after() delays a key, holding at most one delayed entry per key (the earliest:
//    a later add_after() of a key already waiting to fire sooner is dropped), so a key
//    requeued on every reconcile cannot grow the queue;
//  * add_rate_limited() delays it by a per-key exponential backoff (base .. max) that
//    forget() resets.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lockstep::controller {

class WorkQueue {
 public:
  using Duration = std::chrono::milliseconds;
  explicit WorkQueue(Duration base_backoff = Duration(5), Duration max_backoff = std::chrono::seconds(60));

  void add(const std::string& key);
  void add_after(const std::string& key, Duration delay);
  void add_rate_limited(const std::string& key);
  void forget(const std::string& key);
  int failures(const std::string& key);

  std::optional<std::string> get();  // blocks; nullopt once shut down
  void done(const std::string& key);
  void shutdown();

  size_t depth();    // keys waiting (not delayed, not in progress)
  size_t max_depth();  // the most keys that were waiting at once since the queue was made
  size_t delayed();  // keys waiting for their add_after() time

 private:
  using Clock = std::chrono::steady_clock;
  void add_locked(const std::string& key);
  void promote_due_locked();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> queued_, processing_, dirty_;
  // Delayed keys ordered by when they fire, and each key's entry there.
  std::set<std::pair<Clock::time_point, std::string>> delayed_;
  std::map<std::string, Clock::time_point> delayed_at_;
  std::map<std::string, int> failures_;
  Duration base_, max_;
  size_t max_depth_ = 0;
  bool shutdown_ = false;
};

}  // namespace lockstep::controller
