#include "controller/api_discovery.hpp"

#include "lockstep/log.hpp"

using json = nlohmann::json;
namespace res = lockstep::kube::resources;

namespace lockstep::controller {
namespace {

// Whether API discovery's answer `r` (an API group version's resource list) lists `plural`.
bool lists(const kube::Response& r, const std::string& plural) {
  bool found = false;
  if (r.ok())
    for (const auto& resource : r.body.value("resources", json::array()))
      found |= resource.value("name", "") == plural;
  return found;
}

}  // namespace

// Note [PodGroup API discovery]
// Whether scheduling.x-k8s.io/v1alpha1 PodGroups exist is asked of API discovery at start
// and again every podgroup_check_period, so an API installed (or removed) while the
// operator runs is noticed. The PodGroup informer starts the first time the API is found;
// until it has synced, a PodGroup that already exists shows as a 409 on create, which is
// taken as success.
reconcile::GangSupport PodGroupDiscovery::check() {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = std::chrono::steady_clock::now();
  if (checked_ == std::chrono::steady_clock::time_point{} || now - checked_ >= period_) {
    auto r = client_.get("/apis/" + res::kPodGroups.group + "/" + res::kPodGroups.version);
    bool found = lists(r, res::kPodGroups.plural);
    if (r.ok() || r.not_found()) {
      if (found != available_ || checked_ == std::chrono::steady_clock::time_point{})
        LOCKSTEP_LOG(Info, "operator", "PodGroup API (scheduling.x-k8s.io/v1alpha1) " << (found ? "found" : "not installed"));
      available_ = found;
      checked_ = now;
    }
    if (available_ && !informer_ && !stopping_) {
      informer_ = make_();
      informer_->start();
      informer_ptr_ = informer_.get();
    }
  }
  return available_ ? reconcile::GangSupport::Available : reconcile::GangSupport::Unavailable;
}

void PodGroupDiscovery::stop() {
  std::lock_guard<std::mutex> lock(mu_);  // no PodGroup informer starts after this
  if (informer_) informer_->stop();
}

// Note [Kueue API discovery]
// As for PodGroups (Note [PodGroup API discovery]): whether kueue.x-k8s.io/v1beta2 Workloads are
// served is asked of API discovery at start and every kueue_check_period. The first time they
// are, a list of one Workload says whether RBAC lets the operator use them (the chart's
// kueue.enabled grants it); if it does not, the operator says so once and treats Kueue as not
// there: a job that names a queue then waits, and its condition says why. Otherwise the
// Workload informer (the jobs' own, by their job-name label) and the ResourceFlavor informer
// (for the flavors' node labels and tolerations) start.
bool KueueDiscovery::served() {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = std::chrono::steady_clock::now();
  const bool first = checked_ == std::chrono::steady_clock::time_point{};
  if (!first && now - checked_ < period_) return available_;
  auto r = client_.get("/apis/" + res::kWorkloads.group + "/" + res::kWorkloads.version);
  bool found = lists(r, res::kWorkloads.plural);
  if (!r.ok() && !r.not_found()) return available_;  // asked again next time
  checked_ = now;
  if (found && !informers_.workloads) {
    auto probe = client_.get(res::kWorkloads.path(watch_namespace_) + "?limit=1", &kube::kDiscardBody);
    auto flavor_probe = client_.get(res::kResourceFlavors.path() + "?limit=1", &kube::kDiscardBody);
    if (probe.status == 403 || flavor_probe.status == 403) {
      if (first || available_)
        LOCKSTEP_LOG(Warn, "operator", "Kueue's Workload API is served but RBAC does not let the operator use it (it "
                                       "needs Workloads and ResourceFlavors: the chart's kueue.enabled grants them); "
                                       "jobs that name a queue wait: "
                                           << (probe.status == 403 ? probe.message() : flavor_probe.message()));
      available_ = false;
      return false;
    }
  }
  if (found != available_ || first)
    LOCKSTEP_LOG(Info, "operator", "Kueue Workload API (kueue.x-k8s.io/v1beta2) " << (found ? "found" : "not served"));
  available_ = found;
  if (found && !informers_.workloads && !stopping_) {
    informers_ = make_();
    informers_.workloads->start();
    informers_.flavors->start();
    workloads_ptr_ = informers_.workloads.get();
    flavors_ptr_ = informers_.flavors.get();
  }
  return available_;
}

void KueueDiscovery::stop() {
  std::lock_guard<std::mutex> lock(mu_);  // no Workload informer starts after this
  if (informers_.workloads) informers_.workloads->stop();
  if (informers_.flavors) informers_.flavors->stop();
}

}  // namespace lockstep::controller
