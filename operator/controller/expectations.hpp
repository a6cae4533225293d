// Expectations: creations and deletions the controller has made but its caches have not
// shown yet. While a job has any outstanding, its reconcile does not act on the (stale)
// cache, so a slow watch can never cause a duplicate pod. They expire after `ttl` in case
// an event is lost; a reconcile held back by them is requeued for that moment
// (controller::hold_for_expectations), so a lost event delays a job but cannot wedge it.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace lockstep::controller {

class Expectations {
 public:
  explicit Expectations(std::chrono::milliseconds ttl = std::chrono::minutes(5)) : ttl_(ttl) {}

  void expect_create(const std::string& job, const std::string& object) { expect(job, object, true); }
  void expect_delete(const std::string& job, const std::string& object) { expect(job, object, false); }
  // Seen in the cache (or the request failed): no longer outstanding.
  void observed_create(const std::string& job, const std::string& object) { observe(job, object, true); }
  void observed_delete(const std::string& job, const std::string& object) { observe(job, object, false); }
  // Our own status write produced `resource_version`; until the job cache shows it (or a
  // newer version), the cached job is older than what we know.
  void expect_version(const std::string& job, const std::string& resource_version);
  void observed_version(const std::string& job, const std::string& resource_version);
  bool satisfied(const std::string& job);
  // Time until the job's outstanding expectations expire; zero when it has none.
  std::chrono::milliseconds expires_in(const std::string& job);
  void forget(const std::string& job);

 private:
  struct Pending {
    std::set<std::string> creates, deletes;
    std::string version;
    std::chrono::steady_clock::time_point since;
  };
  void expect(const std::string& job, const std::string& object, bool create);
  void observe(const std::string& job, const std::string& object, bool create);
  static bool empty(const Pending& p) { return p.creates.empty() && p.deletes.empty() && p.version.empty(); }
  std::mutex mu_;
  std::map<std::string, Pending> pending_;
  std::chrono::milliseconds ttl_;
};

}  // namespace lockstep::controller
