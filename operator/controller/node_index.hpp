// Which jobs have pods on each node, so that a node's change queues those jobs and no other
// (Note [Lost nodes] in reconcile/node.hpp). The pod informer's handler keeps it; the node
// informer's handler reads it.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "reconcile/job.hpp"

namespace lockstep::controller {

class NodeIndex {
 public:
  // A pod added (old null), changed, or deleted (now null).
  void update(const reconcile::PodRecord* old, const reconcile::PodRecord* now);
  // The keys (ns/name) of the jobs with a pod bound to `node`.
  std::vector<std::string> jobs_on(const std::string& node) const;
  size_t nodes() const;  // nodes with a job's pod on them

 private:
  void add(const reconcile::PodRecord& pod, int n);  // under mu_

  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, int>> pods_;  // node -> job key -> pods bound to it
};

}  // namespace lockstep::controller
