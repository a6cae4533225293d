// Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: the holder renews
// every retry period; a candidate takes over once it has seen the same record unchanged for
// a whole lease duration (measured on its own clock, so clock skew between replicas does
// not matter). A leader that cannot renew within the renew deadline steps down.
//
// Note [Fenced writes]
// Two replicas must never act at once. A candidate takes the lease a lease duration after it
// last saw the record change, so the holder is safe only while it stops acting sooner than
// that after its last renewal, whatever its threads are doing:
//  * renewals run on a thread of their own from the moment the lease is acquired (not after
//    the caches sync, which may take longer than a lease), on a client of their own (no wait
//    behind the controller's rate limiter), each request bounded by the renew deadline
//    (RestConfig::request_timeout) rather than the 30 s default;
//  * leading() is a clock, not a flag set by that thread: true until the renew deadline after
//    the start of the last successful renewal, so a renewal stuck in a request, a process
//    paused (SIGSTOP, a frozen node) or a starved thread cannot extend it. The controller's
//    client asks it before every write (Client::set_write_gate) and refuses the write, unsent,
//    once it is false;
//  * a renewal that finds the lease held by another replica ends leadership at once;
//  * main() polls leading() and exits (status 1) as soon as it turns false, as
//    controller-runtime does, so a fresh process starts over as a candidate.
// The margin is lease duration - renew deadline (5 s by default), against the rates of two
// replicas' clocks, not their offsets.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

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
  // `client` is the elector's own (Note [Fenced writes]): its request timeout should be the
  // renew deadline, and no write gate.
  LeaderElector(Client& client, Options options);
  ~LeaderElector();

  // Blocks until this replica leads (true) or `stop` is set (false). On true, renewals have
  // started on their own thread; they run until `stop` is set, the lease is lost, or
  // stop_renewing().
  bool acquire(const std::atomic<bool>& stop);
  // True while this replica may act (Note [Fenced writes]). Cheap: a clock read.
  bool leading() const;
  // Blocks while this replica leads; false once it has lost the lease, true when `stop` is set.
  bool wait_while_leading(const std::atomic<bool>& stop) const;
  void stop_renewing();  // joins the renewal thread; idempotent
  // Gives the lease up at once (on graceful shutdown), so a standby need not wait it out.
  void release();
  const std::string& identity() const { return options_.identity; }

 private:
  enum class Attempt { Held, Failed, Taken };  // Taken: another replica holds an unexpired lease
  Attempt try_acquire_or_renew();
  void renew_loop(const std::atomic<bool>& stop);
  Client& client_;
  Options options_;
  std::string observed_record_;
  std::chrono::steady_clock::time_point observed_at_{};
  std::atomic<std::chrono::steady_clock::rep> valid_until_{0};  // steady_clock ticks
  std::atomic<bool> lost_{false}, stop_renewing_{false};
  std::thread renewer_;
};

}  // namespace lockstep::kube
