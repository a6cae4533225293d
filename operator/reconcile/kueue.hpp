// Kueue (docs/kueue.md): a TrainingJob that names a LocalQueue is admitted, evicted and finished
// as one Workload, which the operator creates and owns. This file is what the operator reads of
// a Workload and of a ResourceFlavor, the Workload it writes, and the pure decision from the
// Workload's state to what the gang does (admission(), used by decide.cpp).
//
// Note [One Workload per job]
// Kueue knows nothing of TrainingJobs: its documented way for a kind it does not manage
// ("externalFrameworks") is that the kind's own controller creates the Workload
// (kueue.x-k8s.io/v1beta2), owned by the job, and does what Kueue's job reconciler does for
// its built-in kinds. So, when a job names a queue (the kueue.x-k8s.io/queue-name label on the
// TrainingJob, or spec.scheduling.queue, the same thing in the spec):
//   * one Workload <trainingjob-NAME-HASH>, controlled by the job, with one pod set "node" of
//     `count: spec.nodes` whose template is the pods' own (their real requests, the agent's init
//     container included) with no barrier secret in it (Note [Barrier secret] in manifests.hpp);
//     Kueue's finalizer kueue.x-k8s.io/resource-in-use on it from the start, so that a job
//     deleted while its pods still run keeps its quota until they are gone;
//   * no pod, Service or PodGroup before the Workload is Admitted: the job is Queued, its
//     condition quoting Kueue's reason (QuotaReserved=False: "couldn't assign flavors ...");
//   * once Admitted, the pods are created with the assigned flavors' node labels (nodeSelector)
//     and tolerations, and the admission checks' pod-set updates, and without the queue label
//     (a pod carrying it would be a Workload of its own under Kueue's pod integration);
//   * PodsReady is written from what the agents know: True once rank 0's agent of the current
//     attempt has started its workers, which it does only when every node's agent joined the
//     rendezvous (Note [Restart barrier] in agent/barrier/state.hpp); not container readiness. An
//     in-place restart is invisible to Kueue; a gang restart (pods recreated) makes it False
//     WaitForRecovery until the new gang is together again (then True Recovered);
//   * Evicted=True (preemption, the PodsReady timeout, deactivation, a stopped queue): every
//     pod is deleted; once none is left, the admission is cleared (QuotaReserved=False,
//     Admitted=False, Requeued) and the job is Queued again. No restart counter moves;
//   * a finished job's Workload is Finished (Succeeded or Failed), and its finalizer removed;
//   * spec.runPolicy.suspend is the Workload's spec.active=false (Kueue then evicts it:
//     Deactivated), and false again, active=true;
//   * a job deleted: its Workload goes with it (garbage collector), and the operator removes
//     the finalizer once the job's pods are gone.
//
// Note [Who deactivates]
// spec.active is written by the operator for spec.runPolicy.suspend, and by others: Kueue itself
// deactivates a Workload that was requeued too often (waitForPodsReady's backoffLimitCount,
// reason RequeuingLimitExceeded), and an administrator may. The operator sets active=false with
// the annotation kAnnotationSuspended, and sets it back to true (removing the annotation) only
// when that annotation says the inactivity was its own; a Workload someone else deactivated stays
// so, the job Queued and saying why, until they activate it again (as Kueue's own job kinds do).
// Nothing else of Kueue's is written: Kueue's scheduler sets the admission, its workload
// controller the eviction, the requeue state and the PodsReady timeout.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reconcile/job.hpp"
#include "reconcile/manifests.hpp"

namespace lockstep::reconcile {

inline constexpr const char* kWorkloadPodSet = "node";
inline constexpr const char* kKueueFinalizer = "kueue.x-k8s.io/resource-in-use";
inline constexpr const char* kLabelKueuePriorityClass = "kueue.x-k8s.io/priority-class";
// On the Workload: a hash of what its pod set was made from (nodes, procsPerNode, template,
// trainer command), so that a job changed while Suspended gets a new Workload.
inline constexpr const char* kAnnotationPodSetHash = "lockstep.dev/pod-set-hash";
// On the Workload while the operator holds it inactive for spec.runPolicy.suspend (Note [Who
// deactivates]).
inline constexpr const char* kAnnotationSuspended = "lockstep.dev/inactive-for-suspend";
// What the cache keeps of a Workload (Note [Lean caches] in kube/informer.hpp): at most this
// many conditions, each message at most kMaxConditionMessage bytes.
inline constexpr size_t kMaxWorkloadConditions = 32;
inline constexpr size_t kMaxConditionMessage = 1024;

// A condition of a Workload as read: its position in status.conditions is what a JSON patch
// names when it is rewritten (the others, Kueue's, are left exactly as they are).
struct WorkloadCondition {
  Condition c;
  int index = -1;
  bool operator==(const WorkloadCondition&) const = default;
};

// What an admission check asks of the pods of the "node" pod set (status.admissionChecks[].
// podSetUpdates), merged over every check.
struct PodSetUpdate {
  std::map<std::string, std::string> labels, annotations, node_selector;
  nlohmann::json tolerations = nlohmann::json::array();
  bool operator==(const PodSetUpdate&) const = default;
};

struct WorkloadView {
  std::string ns, name, uid, resource_version;
  std::string job;             // its lockstep.dev/job-name label
  std::string controller_uid;  // the TrainingJob that controls it
  bool deleting = false, has_finalizer = false;
  int finalizer_index = -1;    // kKueueFinalizer's position in metadata.finalizers
  bool active = true;          // spec.active (absent: true)
  bool inactive_for_suspend = false;  // kAnnotationSuspended is there (Note [Who deactivates])
  std::string queue_name, pod_set_hash;
  std::vector<WorkloadCondition> conditions;
  bool has_status = false;     // status present (a JSON patch adds into it, never over it)
  int condition_count = 0;     // how many status.conditions has (cached or not)
  bool has_admission = false;  // status.admission present
  std::string cluster_queue;   // status.admission.clusterQueue
  std::vector<std::string> flavors;  // the "node" pod set's assigned flavors, each once
  PodSetUpdate updates;

  const WorkloadCondition* condition(const std::string& type) const;
  bool is_true(const std::string& type) const;
  bool admitted() const { return is_true("Admitted"); }
  bool evicted() const { return is_true("Evicted"); }
  bool finished() const { return is_true("Finished"); }
  std::string owner_key() const { return reconcile::owner_key(ns, job); }
  static WorkloadView from_json(const nlohmann::json& obj);
  bool operator==(const WorkloadView&) const = default;
};

// A ResourceFlavor: the node labels and tolerations pods assigned to it get.
struct FlavorView {
  std::string name;
  std::map<std::string, std::string> node_labels;
  nlohmann::json tolerations = nlohmann::json::array();
  static FlavorView from_json(const nlohmann::json& obj);
  bool operator==(const FlavorView&) const = default;
};

// The job's Workload's name: trainingjob-<name>-<5 hex of the job's uid>, as Kueue names its
// own kinds' (at most 63 characters: a job name is at most 50).
std::string workload_name(const JobView& job);
// The hash kAnnotationPodSetHash holds for the job as it is now.
std::string pod_set_hash(const JobView& job);

// The Workload for `job`: its pod set's template is pod_manifest()'s for rank 0 without the
// per-pod fields (name, hostname, rank labels, barrier secret). `priority`: the value of the
// job's priority class, when it names one (Kueue's scheduler orders and preempts by
// spec.priority, which its own job reconciler fills from the class).
nlohmann::json workload_manifest(const JobView& job, const AgentInjection& agent, std::optional<int> priority);

// `pod` (pod_manifest()'s) with what the admission assigns: each flavor's node labels into its
// nodeSelector and tolerations appended, then the admission checks' updates. A flavor that
// cannot be read (not in `flavors`) is skipped; the caller says so.
void apply_admission(nlohmann::json& pod, const WorkloadView& wl, const std::vector<FlavorView>& flavors);

// What the gang does about its Workload (Note [One Workload per job]).
enum class Admission {
  NotQueued,       // the job names no queue: scheduled as without Kueue
  KueueMissing,    // it names one but the Workload API is not served: it waits, and says so
  QueueConflict,   // the label and spec.scheduling.queue name different queues: it waits
  CreateWorkload,  // no Workload yet
  Replace,         // a Workload of another shape (changed while suspended), holding no quota
  Waiting,         // queued: not admitted
  Stopping,        // evicted: the pods go, then the admission is cleared
  Admitted,        // runs
};
const char* to_string(Admission a);

// The queue the job names, "" for none; and, when the label and the spec disagree, why.
std::string queue_of(const JobView& job, std::string* conflict = nullptr);

// From the Workload's state (`wl`, nullopt when there is none) and whether the API is served.
Admission admission(const JobView& job, const std::optional<WorkloadView>& wl, bool kueue_served);

// The JSON patch of a Workload's status that sets `set` (each replacing the condition of its
// type, or appended) and, with `clear_admission`, removes status.admission; conditional on the
// Workload's resourceVersion (a 409 when it changed since it was read).
nlohmann::json workload_status_patch(const WorkloadView& wl, const std::vector<Condition>& set, bool clear_admission);

// The JSON patch that removes kKueueFinalizer from the Workload, conditional on the finalizer
// still being at the position the cache saw it (a 422 when the list changed since).
nlohmann::json finalizer_removal_patch(const WorkloadView& wl);

}  // namespace lockstep::reconcile
