// What the operator remembers of the objects that carry a job's name but that the job does not
// control (Note [Pods we do not control] in controller.cpp, Note [Job isolation] in
// reconcile/manifests.hpp): which foreign pods it has warned about, and which jobs' NetworkPolicy
// name is taken by a policy the informer does not hold.
//
// Note [Foreign children]
// Any tenant can label a pod with a job's name, or make a NetworkPolicy of a job's name, as often
// as it likes; the operator leaves them alone and says so once. What it keeps for that is
// bounded whatever they make: at most kMaxWarned pod warnings, the oldest forgotten first (a
// forgotten pod seen again is warned about once more, and its Event is counted on the first one,
// Note [Repeated Events]); a job's entries go with the job; a taken policy name is a mark per job
// that lapses after kPolicyTakenFor, when the job's own policy is tried again.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace lockstep::controller {

class ForeignChildren {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxWarned = 16384;
  static constexpr std::chrono::seconds kPolicyTakenFor{60};

  explicit ForeignChildren(size_t max_warned = kMaxWarned) : max_warned_(max_warned) {}

  // True the first time pod `pod_uid` is seen carrying job `job_key`'s (ns/name) label: warn then.
  bool first_sight(const std::string& job_key, const std::string& pod_uid);

  // Job `job_key` (uid `job_uid`) met a NetworkPolicy of its name that it does not own.
  void mark_policy_taken(const std::string& job_key, const std::string& job_uid, Clock::time_point now);
  // How long that mark still holds for this job (the same uid); nullopt when none holds.
  std::optional<Clock::duration> policy_taken(const std::string& job_key, const std::string& job_uid,
                                              Clock::time_point now) const;

  // The job is gone: what was kept for it goes too.
  void forget_job(const std::string& job_key);

  size_t warned() const;  // pod warnings remembered

 private:
  const size_t max_warned_;
  mutable std::mutex mu_;
  std::set<std::string> warned_;      // job_key/pod_uid
  std::deque<std::string> order_;     // the same, oldest first (entries a forget_job took are skipped)
  std::map<std::string, std::pair<std::string, Clock::time_point>> taken_;  // job_key -> uid, when
};

}  // namespace lockstep::controller
