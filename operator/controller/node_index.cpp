#include "controller/node_index.hpp"

namespace lockstep::controller {

void NodeIndex::update(const reconcile::PodRecord* old, const reconcile::PodRecord* now) {
  // A pod's node is set once, when it is bound: nearly every update leaves both as they were.
  if (old && now && old->view.node_name == now->view.node_name && old->ns == now->ns &&
      old->job == now->job)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  if (old) add(*old, -1);
  if (now) add(*now, +1);
}

void NodeIndex::add(const reconcile::PodRecord& pod, int n) {
  const std::string& node = pod.view.node_name;
  std::string job = pod.owner_key();
  if (node.empty() || job.empty()) return;
  auto& jobs = pods_[node];
  int& count = jobs[job];
  count += n;
  if (count > 0) return;
  jobs.erase(job);
  if (jobs.empty()) pods_.erase(node);
}

std::vector<std::string> NodeIndex::jobs_on(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  auto it = pods_.find(node);
  if (it != pods_.end())
    for (const auto& [job, count] : it->second) out.push_back(job);
  return out;
}

size_t NodeIndex::nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pods_.size();
}

}  // namespace lockstep::controller
