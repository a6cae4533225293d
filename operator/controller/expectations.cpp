#include "controller/expectations.hpp"

namespace lockstep::controller {

void Expectations::expect(const std::string& job, const std::string& object, bool create) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& p = pending_[job];
  if (empty(p)) p.since = std::chrono::steady_clock::now();
  (create ? p.creates : p.deletes).insert(object);
}

void Expectations::expect_version(const std::string& job, const std::string& resource_version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& p = pending_[job];
  if (empty(p)) p.since = std::chrono::steady_clock::now();
  p.version = resource_version;
}

void Expectations::observed_version(const std::string& job, const std::string& resource_version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(job);
  if (it == pending_.end() || it->second.version.empty()) return;
  // resourceVersions are opaque, but etcd's are increasing integers: a newer one also
  // proves our write is in the cache (it may have arrived before we recorded it).
  const std::string& want = it->second.version;
  bool numeric = !want.empty() && !resource_version.empty() && want.size() < 19 && resource_version.size() < 19 &&
                 want.find_first_not_of("0123456789") == std::string::npos &&
                 resource_version.find_first_not_of("0123456789") == std::string::npos;
  bool seen = resource_version == want || (numeric && std::stoll(resource_version) >= std::stoll(want));
  if (!seen) return;
  it->second.version.clear();
  if (empty(it->second)) pending_.erase(it);
}

void Expectations::observe(const std::string& job, const std::string& object, bool create) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(job);
  if (it == pending_.end()) return;
  (create ? it->second.creates : it->second.deletes).erase(object);
  if (empty(it->second)) pending_.erase(it);
}

bool Expectations::satisfied(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(job);
  if (it == pending_.end()) return true;
  if (std::chrono::steady_clock::now() - it->second.since >= ttl_) {
    pending_.erase(it);
    return true;
  }
  return false;
}

std::chrono::milliseconds Expectations::expires_in(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(job);
  if (it == pending_.end()) return std::chrono::milliseconds(0);
  auto left = it->second.since + ttl_ - std::chrono::steady_clock::now();
  if (left <= left.zero()) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(left);
}

void Expectations::forget(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(job);
}

}  // namespace lockstep::controller
