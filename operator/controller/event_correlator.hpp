// Which Event a job's repeated Event is counted on, instead of a new one (Note [Repeated Events]).
//
// Note [Repeated Events]
// An Event is one request to the API server, out of the request budget every job shares
// (--kube-api-qps), and one more object in etcd for an hour. A job that says the same thing again
// and again (a pod a quota refuses on every pass, a PodsBlocked that comes and goes, a loop of
// restarts before its cap ends it) would write one Event each time. As client-go's
// EventCorrelator does (its EventLogger), an Event with the same job, type, reason and message as
// one recorded in the last kWindow (10 minutes) is not created again: that Event's count goes up
// and its lastTimestamp moves, one merge patch, and `kubectl describe tj` shows it as "(x5 over
// 3m)". client-go also merges Events whose messages differ (its EventAggregator, after 10 within
// 10 minutes); Lockstep's messages differ only where they say something new (the attempt a
// restart starts, how many in-place restarts), and what repeats with new words is bounded where
// it is decided (spec.runPolicy.backoffLimit, Note [Lost-node restarts in a row] in
// reconcile/node.hpp), so each such Event is kept.
//   What is remembered is bounded: at most kCapacity Events, the least recently recorded
// forgotten first, each by its job's namespace and uid and a 64-bit hash of its type, reason and
// message (the message can hold a pod's last words: it is never kept), about 200 bytes each, so
// at most about 1 MiB whatever the jobs say. Forgetting costs one more Event; two messages of
// one job that share a hash (a one in 2^64 chance) share a count. An Event the API server no
// longer has (it keeps them an hour by default) answers the patch 404 and is created afresh; a
// patch the operator may not send (403: RBAC without patch on events) drops the repeat.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace lockstep::controller {

class EventCorrelator {
 public:
  using Clock = std::chrono::system_clock;
  static constexpr size_t kCapacity = 4096;
  static constexpr std::chrono::minutes kWindow{10};

  // What identifies an Event as a repeat: the job's namespace and uid, and its words' hash.
  static std::string key(const std::string& ns, const std::string& job_uid, const std::string& type,
                         const std::string& reason, const std::string& message) {
    const size_t words = std::hash<std::string>{}(type + '\n' + reason + '\n' + message);
    return ns + "/" + job_uid + "/" + std::to_string(words);
  }

  struct Repeat {
    std::string name;  // the Event recorded
    int count = 0;     // its count with this repeat
  };

  explicit EventCorrelator(size_t capacity = kCapacity, std::chrono::milliseconds window = kWindow)
      : capacity_(capacity), window_(window) {}

  // The Event `key` was recorded as within the window, its count now one more; nullopt when
  // there is none (or it is older: it is forgotten), and a new Event is to be made.
  std::optional<Repeat> repeat(const std::string& key, Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    Entry& e = *it->second;
    if (now - e.last >= window_ || now < e.first) {
      order_.erase(it->second);
      index_.erase(it);
      return std::nullopt;
    }
    ++e.count;
    e.last = now;
    order_.splice(order_.begin(), order_, it->second);  // the most recent first
    return Repeat{e.name, e.count};
  }

  // A new Event was created as `name` for `key`.
  void recorded(const std::string& key, const std::string& name, Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      order_.erase(it->second);
      index_.erase(it);
    }
    order_.push_front({key, name, 1, now, now});
    index_[key] = order_.begin();
    while (order_.size() > capacity_) {
      index_.erase(order_.back().key);
      order_.pop_back();
    }
  }

  // The Event recorded for `key` is gone (the patch found none): the next one is made anew.
  void forget(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      order_.erase(it->second);
      index_.erase(it);
    }
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return order_.size();
  }

 private:
  struct Entry {
    std::string key, name;
    int count;
    Clock::time_point first, last;
  };
  const size_t capacity_;
  const std::chrono::milliseconds window_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // most recently recorded or repeated first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace lockstep::controller
