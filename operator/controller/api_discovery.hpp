// Whether the optional APIs the operator uses are served, asked of API discovery now and then:
// the gang scheduler's PodGroups (Note [PodGroup API discovery]) and Kueue's Workloads (Note
// [Kueue API discovery]). Each starts its API's informers the first time it finds the API; what
// they are and what their events do is the controller's wiring, given as `make`.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "kube/client.hpp"
#include "kube/informer.hpp"
#include "reconcile/decide.hpp"

namespace lockstep::controller {

using ChildInformer = kube::Informer<reconcile::ChildRef>;  // Services, NetworkPolicies, PodGroups
using WorkloadInformer = kube::Informer<reconcile::WorkloadView>;
using FlavorInformer = kube::Informer<reconcile::FlavorView>;

class PodGroupDiscovery {
 public:
  using Make = std::function<std::unique_ptr<ChildInformer>()>;  // the PodGroup informer, not started

  // `period`: --podgroup-check-period. `stopping`: the controller's; once it is set, no informer starts.
  PodGroupDiscovery(kube::Client& client, std::chrono::milliseconds period, const std::atomic<bool>& stopping, Make make)
      : client_(client), period_(period), stopping_(stopping), make_(std::move(make)) {}

  // Whether PodGroups exist, asked again once the period has passed; starts their informer the
  // first time they do.
  reconcile::GangSupport check();
  ChildInformer* informer() const { return informer_ptr_.load(); }  // null until started
  void stop();  // once `stopping` is set: stops the informer (none starts after this)

 private:
  kube::Client& client_;
  const std::chrono::milliseconds period_;
  const std::atomic<bool>& stopping_;
  const Make make_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point checked_{};
  bool available_ = false;
  std::unique_ptr<ChildInformer> informer_;              // started by check(), under mu_
  std::atomic<ChildInformer*> informer_ptr_{nullptr};    // read without the lock
};

class KueueDiscovery {
 public:
  struct Informers {  // made together, not started
    std::unique_ptr<WorkloadInformer> workloads;
    std::unique_ptr<FlavorInformer> flavors;
  };
  using Make = std::function<Informers()>;

  // `period`: how often it is asked; `watch_namespace`: where the Workloads' RBAC is probed ("" all).
  KueueDiscovery(kube::Client& client, std::chrono::milliseconds period, std::string watch_namespace,
                 const std::atomic<bool>& stopping, Make make)
      : client_(client), period_(period), watch_namespace_(std::move(watch_namespace)), stopping_(stopping),
        make_(std::move(make)) {}

  // Whether the Workload API is served and ours to use, asked again once the period has passed;
  // starts the Workload and ResourceFlavor informers the first time it is.
  bool served();
  WorkloadInformer* workloads() const { return workloads_ptr_.load(); }  // null until started
  FlavorInformer* flavors() const { return flavors_ptr_.load(); }
  void stop();  // once `stopping` is set: stops the informers (none start after this)

 private:
  kube::Client& client_;
  const std::chrono::milliseconds period_;
  const std::string watch_namespace_;
  const std::atomic<bool>& stopping_;
  const Make make_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point checked_{};
  bool available_ = false;
  Informers informers_;  // started by served(), under mu_
  std::atomic<WorkloadInformer*> workloads_ptr_{nullptr};  // read without the lock
  std::atomic<FlavorInformer*> flavors_ptr_{nullptr};
};

}  // namespace lockstep::controller
