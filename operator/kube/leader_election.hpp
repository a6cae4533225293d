// Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: the holder renews
// every retry period; a candidate takes over once it has seen the same record unchanged for
// a whole lease duration (measured on its own clock, so clock skew between replicas does
// not matter). A leader that cannot renew within the renew deadline steps down.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "kube/client.hpp"

namespace lockstep::kube {

class LeaderElector {
 public:
  struct Options {
    std::string ns = "default";
    std::string name = "lockstep-operator";
    std::string identity;  // unique per replica
    std::chrono::milliseconds lease_duration{15000}, renew_deadline{10000}, retry_period{2000};
  };
  LeaderElector(Client& client, Options options);

  // Blocks until this replica leads (true) or `stop` is set (false).
  bool acquire(const std::atomic<bool>& stop);
  // Renews until `stop` is set (true) or the lease is lost (false).
  bool hold(const std::atomic<bool>& stop);
  // Gives the lease up at once (on graceful shutdown), so a standby need not wait it out.
  void release();
  const std::string& identity() const { return options_.identity; }

 private:
  bool try_acquire_or_renew();
  Client& client_;
  Options options_;
  std::string observed_record_;
  std::chrono::steady_clock::time_point observed_at_{};
};

}  // namespace lockstep::kube
