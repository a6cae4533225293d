// Reconcile decisions: what to create, delete and report for one TrainingJob, as a pure
// function of what the caches show. The controller (controller/) carries them out.
//
// The story, in order (each step one helper in decide.cpp):
//   isolation         the NetworkPolicy kept or removed as spec.isolation says, whatever
//                     the phase (Note [Job isolation] in manifests.hpp)
//   finished?         apply cleanPodPolicy, then ttlSecondsAfterFinished; nothing else
//   suspended?        remove every pod, phase Suspended (resume resets startTime, as Jobs do)
//   deadline passed?  remove every pod, Failed/DeadlineExceeded
//   stale pods        pods of an earlier attempt are deleted; the next attempt waits for them
//   in-place restarts the agents' own, read from rank 0's agent, counted into the status
//                     (in_place.hpp, Note [In-place restarts])
//   failures          the first failure in time fails the job or restarts the whole gang
//                     (failure_policy.hpp); see Note [Partly succeeded]
//   backoff           a restarting gang waits restart_backoff * 2^(restarts-1)
//   success           every pod of the attempt Succeeded
//   create            headless Service, PodGroup, missing pods of the current attempt
//   status            phase, conditions, node counts; written only when changed
//
// Note [Partly succeeded]
// When some pods of an attempt Succeeded and another then Failed, a retry reruns the whole
// gang, the pods that succeeded included. A failed rank cannot rerun alone: its peers'
// programs have ended, so its rendezvous would wait for ranks that never come (exit 76 after
// the timeout, and again on every retry). Nor does one rank's exit 0 prove the job's work is
// saved: under FSDP every rank writes its own shard of the final checkpoint. The Lockstep
// trainer resumes from its last checkpoint, so the rerun repeats only the steps after it;
// the GangRestart message names the pods that had succeeded.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "reconcile/failure_policy.hpp"
#include "reconcile/in_place.hpp"
#include "reconcile/job.hpp"

namespace lockstep::reconcile {

enum class GangSupport { Available, Unavailable };

struct Options {
  std::chrono::milliseconds restart_backoff{std::chrono::seconds(10)};
  std::chrono::milliseconds restart_backoff_max{std::chrono::minutes(5)};
  FailureTiming failure_timing;  // Note [The first failure]
};

struct Observed {
  JobView job;
  std::vector<PodView> pods;      // every pod labelled with the job's name
  bool service_exists = false;
  bool podgroup_exists = false;
  std::string network_policy_uid;  // of the job's own NetworkPolicy; "" when it has none
  GangSupport gang_support = GangSupport::Available;
  std::optional<Progress> progress;  // the latest reading of rank 0's agent (Note [Progress])
  std::optional<InPlaceReading> in_place;  // from the same reading (Note [In-place restarts])
  Time now;
};

struct Event {
  std::string type;  // Normal or Warning
  std::string reason, message;
};

struct Decision {
  bool create_service = false;
  bool create_podgroup = false;
  bool create_network_policy = false;
  std::string delete_network_policy_uid;  // the job's NetworkPolicy to delete; "" none
  std::vector<int> create_pods;           // node ranks, for attempt status.restarts
  std::vector<std::string> delete_pods;   // pod names
  // The UID each of delete_pods was seen with, in the same order: a delete is conditional on
  // it, so a delete decided from a stale cache never removes a newer pod of the same name.
  std::vector<std::string> delete_pod_uids;
  bool delete_job = false;
  JobStatus status;                       // the status the job should have
  bool status_changed = false;
  std::vector<Event> events;
  std::optional<std::chrono::milliseconds> requeue_after;
};

Decision decide(const Observed& observed, const Options& options = {});

// Restart backoff before attempt `restarts` (>= 1): base * 2^(restarts-1), capped.
std::chrono::milliseconds restart_delay(int restarts, const Options& options);

}  // namespace lockstep::reconcile
