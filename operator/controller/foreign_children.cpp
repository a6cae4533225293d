#include "controller/foreign_children.hpp"

namespace lockstep::controller {

bool ForeignChildren::first_sight(const std::string& job_key, const std::string& pod_uid) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string key = job_key + "/" + pod_uid;
  if (!warned_.insert(key).second) return false;
  order_.push_back(std::move(key));
  while (warned_.size() > max_warned_ && !order_.empty()) {  // Note [Foreign children]: the oldest go
    warned_.erase(order_.front());
    order_.pop_front();
  }
  if (order_.size() > 2 * max_warned_ + 16) {  // entries forget_job took: dropped from the order too
    std::deque<std::string> kept;
    for (auto& k : order_)
      if (warned_.count(k)) kept.push_back(std::move(k));
    order_ = std::move(kept);
  }
  return true;
}

void ForeignChildren::mark_policy_taken(const std::string& job_key, const std::string& job_uid, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = taken_.begin(); it != taken_.end();)  // lapsed marks go: at most one per job
    it = now - it->second.second >= kPolicyTakenFor ? taken_.erase(it) : std::next(it);
  taken_[job_key] = {job_uid, now};
}

std::optional<ForeignChildren::Clock::duration> ForeignChildren::policy_taken(const std::string& job_key,
                                                                            const std::string& job_uid,
                                                                            Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = taken_.find(job_key);
  if (it == taken_.end() || it->second.first != job_uid) return std::nullopt;
  const auto age = now - it->second.second;
  if (age >= kPolicyTakenFor) return std::nullopt;
  return kPolicyTakenFor - age;
}

void ForeignChildren::forget_job(const std::string& job_key) {
  std::lock_guard<std::mutex> lock(mu_);
  warned_.erase(warned_.lower_bound(job_key + "/"), warned_.lower_bound(job_key + "0"));  // '0' follows '/'
  taken_.erase(job_key);
}

size_t ForeignChildren::warned() const {
  std::lock_guard<std::mutex> lock(mu_);
  return warned_.size();
}

}  // namespace lockstep::controller
