// Reconcile decisions: what to create, delete and report for one TrainingJob, as a pure
// function of what the caches show. The controller (controller/) carries them out.
//
// The story, in order (each step one helper in decide.cpp):
//   isolation         the NetworkPolicy kept or removed as spec.isolation says, whatever
//                     the phase (Note [Job isolation] in manifests.hpp)
//   finished?         apply cleanPodPolicy, then ttlSecondsAfterFinished; the Workload Finished
//   suspended?        remove every pod, phase Suspended (resume resets startTime, as Jobs do);
//                     the Workload inactive
//   admission         a job that names a queue waits for its Workload's admission, and stops
//                     when it is evicted (kueue.hpp, Note [One Workload per job])
//   deadline passed?  remove every pod, Failed/DeadlineExceeded
//   stale pods        pods of an earlier attempt are deleted; the next attempt waits for them
//   in-place restarts the agents' own, read from rank 0's agent, counted into the status
//                     (in_place.hpp, Note [In-place restarts])
//   lost nodes        a pod on a lost node fails the job or restarts the whole gang, its pods
//                     there force-deleted: the first in a row at once, later ones after the
//                     backoff, past a cap the job fails (node.hpp, Note [Lost nodes], Note
//                     [Lost-node restarts in a row]); one that never ran there is PodsBlocked
//   failures          the first failure in time fails the job or restarts the whole gang
//                     (failure_policy.hpp); see Note [Partly succeeded]
//   backoff           a restarting gang waits restart_backoff * 2^(n-1), n the restarts
//                     since an attempt last ran stably (Note [Backoff reset]); after a lost
//                     node, 2^(n-2), n the lost-node restarts in a row, none for the first
//   success           every pod of the attempt Succeeded
//   stragglers        node 0's agent's verdict, read with the progress: the Straggler
//                     condition, and under policy Replace a gang restart off the straggler's
//                     node (stragglers.hpp, Note [Straggler condition],
//                     Note [Replacing a straggler])
//   create            headless Service, PodGroup, missing pods of the current attempt (none
//                     while the template sets nodeName: node.hpp, Note [Pods placed by hand])
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
//
// Note [Backoff reset]
// The delay before a gang attempt doubles with each restart, up to restart_backoff_max, so a
// job that fails again and again does not churn the cluster. Counting every restart of the
// job's life, a job that runs for days reached the cap after six failures however far apart,
// and then waited 5 minutes after every node or rank lost. As the kubelet does for a
// crash-looping container, the count starts again after an attempt that ran: the exponent is
// status.consecutiveRestarts, the gang restarts since the last attempt that was Running for at
// least restart_backoff_reset (10 min) when it failed (that restart counts as the first). How
// long an attempt ran is read from the Running condition, True since the attempt's pods all
// ran; the count is kept in the status, so a new leader goes on from it. restart_backoff_reset
// 0 never resets it.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reconcile/failure_policy.hpp"
#include "reconcile/in_place.hpp"
#include "reconcile/job.hpp"
#include "reconcile/kueue.hpp"
#include "reconcile/node.hpp"
#include "reconcile/stragglers.hpp"

namespace lockstep::reconcile {

enum class GangSupport { Available, Unavailable };

struct Options {
  std::chrono::milliseconds restart_backoff{std::chrono::seconds(10)};
  std::chrono::milliseconds restart_backoff_max{std::chrono::minutes(5)};
  // An attempt that ran this long starts the backoff afresh (Note [Backoff reset]); 0 never.
  std::chrono::milliseconds restart_backoff_reset{std::chrono::minutes(10)};
  // Lost-node restarts in a row before the next loss fails the job.
  // See Note [Lost-node restarts in a row] in node.hpp.
  int max_node_lost_restarts_in_a_row = kMaxNodeLostRestartsInARow;
  FailureTiming failure_timing;  // Note [The first failure]
};

struct Observed {
  JobView job;
  std::vector<PodView> pods;      // every pod labelled with the job's name
  bool service_exists = false;
  bool podgroup_exists = false;
  std::string network_policy_uid;  // of the job's own NetworkPolicy; "" when it has none
  // A NetworkPolicy of the job's name that the job does not control (a tenant's, or another
  // job's of the same name) is there: the job's own cannot be made (Note [Job isolation]).
  bool network_policy_taken = false;
  GangSupport gang_support = GangSupport::Available;
  std::optional<Progress> progress;  // the latest reading of rank 0's agent (Note [Progress])
  std::optional<InPlaceReading> in_place;  // from the same reading (Note [In-place restarts])
  std::optional<StragglerReading> stragglers;  // from the same reading (Note [Straggler condition])
  // See Note [Lost nodes]: whether the node watch is on (and synced), and the nodes the pods are
  // bound to, by name; a node that is gone is there with gone set. A pod whose node is not
  // here is not judged; with the watch off, none is.
  bool watch_nodes = false;
  std::map<std::string, NodeView> nodes;
  Time now;
  // Kueue (Note [One Workload per job] in kueue.hpp): whether the Workload API is served, the
  // job's Workload (the one it controls, by workload_name()), and whether rank 0's agent of
  // the current attempt has started its workers (every node's agent joined the rendezvous).
  bool kueue_served = false;
  std::optional<WorkloadView> workload;
  bool gang_joined = false;
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
  // Nodes create_pods' pods should avoid (a preferred node anti-affinity): those the last gang
  // restart lost (status.lostNodes, Note [Lost nodes]).
  std::vector<std::string> avoid_nodes;
  // Nodes create_pods' pods must not land on (a required node affinity): the stragglers' nodes
  // the gang was restarted off (status.stragglers.excludedNodes, Note [Replacing a straggler]).
  std::vector<std::string> exclude_nodes;
  // And whether each is deleted with gracePeriodSeconds 0: a pod on a lost node, whose
  // kubelet will not confirm a graceful deletion (Note [Lost nodes]).
  std::vector<bool> delete_pod_force;
  bool delete_job = false;
  JobStatus status;                       // the status the job should have
  bool status_changed = false;
  std::vector<Event> events;
  std::optional<std::chrono::milliseconds> requeue_after;
  // What the job's Workload needs (Note [One Workload per job] in kueue.hpp).
  struct WorkloadWrites {
    bool create = false;
    bool replace = false;  // delete the Workload (its finalizer first): made for another shape
    std::optional<bool> set_active;  // spec.active
    std::vector<Condition> conditions;  // set on its status
    bool clear_admission = false;       // and status.admission removed
    bool remove_finalizer = false;
    bool any() const {
      return create || replace || set_active || !conditions.empty() || clear_admission || remove_finalizer;
    }
  } workload;
};

Decision decide(const Observed& observed, const Options& options = {});

// Restart backoff after the `consecutive`-th restart in a row (Note [Backoff reset]):
// base * 2^(consecutive-1), capped; base for anything below 2.
std::chrono::milliseconds restart_delay(int consecutive, const Options& options);

}  // namespace lockstep::reconcile
