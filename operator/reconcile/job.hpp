// The operator's view of a TrainingJob and of its pods: plain structs parsed once from the
// API objects, so the decisions in decide.hpp are pure functions of them.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "reconcile/progress.hpp"
#include "reconcile/stragglers.hpp"
#include "reconcile/time.hpp"

namespace lockstep::reconcile {

enum class RestartPolicy { OnFailure, ExitCode, Never };
const char* to_string(RestartPolicy policy);  // as spec.runPolicy.restartPolicy spells it
enum class CleanPodPolicy { Running, All, None };
enum class Isolation { None, NetworkPolicy };  // spec.isolation (Note [Job isolation] in manifests.hpp)

struct Condition {
  std::string type, status, reason, message, last_transition_time;
  bool operator==(const Condition&) const = default;
};

struct NodeCounts {
  int active = 0, ready = 0, succeeded = 0, failed = 0;
  bool operator==(const NodeCounts&) const = default;
};

inline constexpr size_t kMaxLostNodes = 8;

struct JobStatus {
  std::string phase;  // "" until the operator first writes it
  std::string queue;  // the Kueue LocalQueue the job names (Note [One Workload per job] in kueue.hpp)
  std::string isolation;  // "NetworkPolicy" or "None", as applied (Note [Job isolation] in manifests.hpp)
  std::vector<Condition> conditions;
  NodeCounts nodes;
  int restarts = 0;  // gang restarts: the current attempt's number
  // Of them, those since an attempt last ran for the stable stretch: the restart delay's
  // exponent (Note [Backoff reset] in decide.hpp).
  int consecutive_restarts = 0;
  // Of them, those a lost node caused, which spec.runPolicy.backoffLimit does not count
  // (Note [Lost nodes] in node.hpp).
  int node_lost_restarts = 0;
  // Of those, the ones since an attempt last ran for the stable stretch: the lost-node restart
  // delay's exponent and what the cap counts (Note [Lost-node restarts in a row] in node.hpp).
  int consecutive_node_lost_restarts = 0;
  // The nodes the last gang restart lost (Note [Lost nodes] in node.hpp): the next attempt's
  // pods prefer other nodes. At most kMaxLostNodes; cleared once an attempt runs.
  std::vector<std::string> lost_nodes;
  // In-place restarts over the job's life, and how many of them the current attempt made
  // (Note [In-place restarts]).
  int in_place_restarts = 0, current_attempt_in_place_restarts = 0;
  std::string start_time, completion_time;
  long long observed_generation = 0;
  std::optional<Progress> progress;  // Note [Progress]
  // status.stragglers (Note [Replacing a straggler] in stragglers.hpp): the gang restarts that
  // left a straggler's node (counted in restarts, not against backoffLimit), and those nodes,
  // which every later attempt's pods are kept off (at most kMaxStragglerReplacements).
  struct Stragglers {
    int replacements = 0;
    std::vector<std::string> excluded_nodes;
    bool operator==(const Stragglers&) const = default;
  } stragglers;

  bool operator==(const JobStatus&) const = default;
  const Condition* condition(const std::string& type) const;
  bool finished() const { return phase == "Succeeded" || phase == "Failed"; }
  nlohmann::json to_json() const;
  static JobStatus from_json(const nlohmann::json& status);
};

// A job's spec.template as the cache keeps it (Note [Cached templates] in job.cpp): compact JSON
// text, shared by every copy of the view, parsed only when pods are made from it.
class PodTemplate {
 public:
  PodTemplate() = default;
  PodTemplate(const nlohmann::json& tmpl);  // NOLINT: a template is assigned from its JSON
  // A parsed copy: the template's object, or an empty object when there is none.
  nlohmann::json parsed() const;
  bool empty() const { return !text_; }
  size_t bytes() const { return text_ ? text_->size() : 0; }
  void clear() { text_.reset(); }

 private:
  std::shared_ptr<const std::string> text_;
};

struct JobView {
  std::string name, ns, uid;
  long long generation = 0;
  bool deleting = false;
  // spec (defaults as in the CRD, for objects stored before a default existed)
  int nodes = 1, procs_per_node = 1, master_port = 29500, metrics_port = 9400;
  std::string strategy = "Auto";
  int backoff_limit = 3;
  RestartPolicy restart_policy = RestartPolicy::OnFailure;
  int in_place_restarts = 3;  // spec.runPolicy.inPlaceRestarts, within 0..kMaxInPlaceRestarts
  // spec.runPolicy.stragglers (Note [Straggler condition], Note [Replacing a straggler] in
  // stragglers.hpp), clamped to the CRD's bounds.
  StragglerPolicy straggler_policy = StragglerPolicy::Report;
  long long straggler_replace_after_seconds = 120;
  int straggler_max_replacements = 2;
  std::optional<long long> active_deadline_seconds, ttl_seconds_after_finished;
  CleanPodPolicy clean_pod_policy = CleanPodPolicy::Running;
  bool suspend = false, gang = true;
  bool one_pod_per_node = false;  // spec.scheduling.onePodPerNode (Note [One pod per node] in manifests.cpp)
  Isolation isolation = Isolation::None;
  bool isolation_given = false;  // spec.isolation is set; else the operator's default applies
  std::string scheduler_name, queue, priority_class_name;
  // The TrainingJob's own kueue.x-k8s.io/queue-name and kueue.x-k8s.io/priority-class labels
  // (Note [One Workload per job] in kueue.hpp; queue_of() reconciles the label with `queue`).
  std::string queue_label, kueue_priority_class;
  std::string checkpoint_path;
  int checkpoint_every = 0;
  int checkpoint_keep = 3;  // spec.checkpoint.keep: complete checkpoints kept, 0 all
  std::string checkpoint_resume_from;  // spec.checkpoint.resumeFrom (Note [Checkpoint owner] in trainer/checkpoint.hpp)
  std::vector<std::string> command{"lockstep-trainer"}, args;
  PodTemplate tmpl;  // spec.template
  // spec.template.spec.nodeName, which the operator refuses (Note [Pods placed by hand] in
  // node.hpp); "" when unset. Read apart from tmpl, which a finished job's view drops.
  std::string template_node_name;
  // What of spec.template would overlay the agent (agent_overlay in manifests.hpp, Note [Agent
  // injection]): "" when nothing would. Read apart from tmpl, like template_node_name.
  std::string template_agent_overlay;
  JobStatus status;

  static JobView from_json(const nlohmann::json& obj);
  // The in-place restarts each gang attempt may make: none under restartPolicy Never, which
  // retries nothing.
  int in_place_budget() const { return restart_policy == RestartPolicy::Never ? 0 : in_place_restarts; }
};

// The CRD's maximum for spec.runPolicy.inPlaceRestarts.
inline constexpr int kMaxInPlaceRestarts = 100;

// What PodRecord reads of a pod, as found in it: filled from the pod's text by the one reader
// of pods (Note [Pod text] in controller/pod_event.hpp), then read by the from_raw conversions.
struct RawPod {
  std::string ns, name, uid;
  bool deleting = false;  // metadata.deletionTimestamp is present
  std::string deletion_timestamp;  // its value, when a string
  std::optional<double> deletion_grace;  // metadata.deletionGracePeriodSeconds, when a number
  std::vector<std::string> finalizers;  // metadata.finalizers (the strings among them)
  std::string job_label, rank_label, attempt_label;  // those labels when strings, else ""
  struct Owner {
    std::string kind, uid;
    bool controller = false;
  };
  std::vector<Owner> owners;  // metadata.ownerReferences
  std::string node_name;      // spec.nodeName when a string
  bool host_network = false;  // spec.hostNetwork is true
  // LOCKSTEP_BARRIER_SECRET's value in the trainer container's env (spec.containers: the one
  // named trainer, else the first), as pod_manifest writes it; "" if none (Note [Barrier secret]).
  std::string barrier_secret;
  struct Toleration {         // spec.tolerations: each element, its fields when strings
    std::string key, op, value, effect;
    std::optional<double> seconds;  // tolerationSeconds when a number
  };
  std::vector<Toleration> tolerations;
  std::optional<std::string> phase;  // status.phase when a string
  std::string reason, pod_ip;
  struct Condition {
    std::string type, status, reason;
    std::optional<std::string> message;
  };
  std::vector<Condition> conditions;
  struct Container {
    std::string name;
    bool init = false;  // from initContainerStatuses (only the agent's is read: Note [Agent injection])
    bool waiting = false, terminated = false;  // state.waiting / state.terminated: objects with a field
    std::string waiting_reason, waiting_message;
    int exit_code = -1;
    std::string terminated_reason, finished_at, terminated_message;
  };
  std::vector<Container> containers;  // containerStatuses, then initContainerStatuses
};

// A toleration that may let a pod stay on a node with a NoExecute taint (effect NoExecute or
// any effect): Note [Lost nodes] in node.hpp.
struct Toleration {
  std::string key;
  bool exists = false;  // operator Exists, else Equal (the only other one the API server takes)
  std::string value;
  std::optional<long long> seconds;  // tolerationSeconds: tolerated only that long
  bool operator==(const Toleration&) const = default;
};

// A text that is empty for nearly every object that holds it, as a cached pod's messages are
// (why it failed, why it waits, what holds its deletion): 8 bytes, null when empty, else a heap
// string of its own, against a std::string's 32 bytes inline in every pod (bench/operator/
// RESULTS.md, 2026-11-30, sixth session: six of them made a cached pod's record 640 bytes, 496
// with RareText).
// Reads see a const std::string&; an empty text assigned holds nothing.
class RareText {
 public:
  RareText() = default;
  RareText(std::string text) { assign(std::move(text)); }
  RareText(const char* text) { assign(text); }
  RareText(const RareText& other) : text_(other.text_ ? std::make_unique<std::string>(*other.text_) : nullptr) {}
  RareText(RareText&&) noexcept = default;
  RareText& operator=(const RareText& other) {
    if (this != &other) text_ = other.text_ ? std::make_unique<std::string>(*other.text_) : nullptr;
    return *this;
  }
  RareText& operator=(RareText&&) noexcept = default;
  RareText& operator=(std::string text) {
    assign(std::move(text));
    return *this;
  }
  RareText& operator=(const char* text) {
    assign(text);
    return *this;
  }

  const std::string& str() const { return text_ ? *text_ : empty_text(); }
  operator const std::string&() const { return str(); }
  bool empty() const { return !text_; }
  size_t size() const { return text_ ? text_->size() : 0; }

  bool operator==(const RareText& other) const { return str() == other.str(); }
  friend bool operator==(const RareText& a, const std::string& b) { return a.str() == b; }
  friend bool operator==(const RareText& a, const char* b) { return a.str() == b; }
  friend std::string operator+(const std::string& a, const RareText& b) { return a + b.str(); }
  friend std::string operator+(std::string&& a, const RareText& b) { return std::move(a) + b.str(); }
  friend std::string operator+(const char* a, const RareText& b) { return a + b.str(); }
  friend std::string operator+(const RareText& a, const std::string& b) { return a.str() + b; }
  friend std::string operator+(const RareText& a, const char* b) { return a.str() + b; }
  friend std::ostream& operator<<(std::ostream& out, const RareText& text) { return out << text.str(); }

 private:
  void assign(std::string text) { text_ = text.empty() ? nullptr : std::make_unique<std::string>(std::move(text)); }
  static const std::string& empty_text() {
    static const std::string empty;
    return empty;
  }
  std::unique_ptr<std::string> text_;
};
static_assert(sizeof(RareText) == sizeof(void*));

// What the cache keeps (Note [Lean caches]): at most this many of a pod's tolerations, and of
// names, taint keys and values at most what the API server accepts (a DNS subdomain; a
// qualified name; a label value).
inline constexpr size_t kMaxTolerations = 32;
inline constexpr size_t kMaxNodeName = 253, kMaxTaintKey = 317, kMaxTaintValue = 63;

// A pod's tolerations as the cache keeps them: read-only, and one copy of each distinct list
// however many pods hold it. Nearly every pod has the same two (the API server's
// DefaultTolerationSeconds adds node.kubernetes.io/not-ready and /unreachable for 300 s), and a
// gang's pods share their template's; as a vector of its own in each cached pod they were a
// heap block and two key strings per pod, about 300 bytes of its 1.2 KB (bench/operator/
// RESULTS.md, the pod cache's memory). A list is interned as it is made: a process-wide table,
// under a mutex, maps each distinct list to the one copy alive (its entries held weakly, so a
// list goes with its last pod; the table drops the entries of lists gone whenever it has
// doubled since it last did). Thread-safe to make, copy and read.
class Tolerations {
 public:
  Tolerations() = default;
  Tolerations(std::vector<Toleration> list);  // NOLINT: implicit, as the vector it stands for
  Tolerations(std::initializer_list<Toleration> list) : Tolerations(std::vector<Toleration>(list)) {}
  size_t size() const { return list_ ? list_->size() : 0; }
  bool empty() const { return size() == 0; }
  const Toleration& operator[](size_t i) const { return (*list_)[i]; }
  std::vector<Toleration>::const_iterator begin() const { return list_ ? list_->begin() : kNone.begin(); }
  std::vector<Toleration>::const_iterator end() const { return list_ ? list_->end() : kNone.end(); }
  bool operator==(const Tolerations& other) const;
  // Whether two lists with the same elements share one copy (tests: the interning).
  bool same_copy(const Tolerations& other) const { return list_ == other.list_; }

 private:
  static const std::vector<Toleration> kNone;
  std::shared_ptr<const std::vector<Toleration>> list_;  // null: none
};

// A gang attempt's barrier secret (Note [Barrier secret] in manifests.hpp) as its 32 bytes:
// every cached pod holds one and every reconcile copies each, and as the 64 hex digits it is
// written in it was a heap block of each (bench/operator/RESULTS.md, the pod cache's memory).
class BarrierSecret {
 public:
  BarrierSecret() = default;
  // From 64 lowercase hex digits, as the operator draws it (lockstep::random_hex(32)); empty for
  // anything else, which is not taken for a secret.
  static BarrierSecret from_hex(std::string_view hex);
  std::string hex() const;  // "" when empty
  bool empty() const { return !set_; }
  bool operator==(const BarrierSecret&) const = default;

 private:
  std::array<unsigned char, 32> bytes_{};
  bool set_ = false;
};

struct PodView {
  std::string name, uid;
  int index = -1;      // node rank, from the label
  int attempt = -1;    // restart attempt, from the label
  std::string phase;   // Pending, Running, Succeeded, Failed, Unknown
  bool ready = false;
  bool deleting = false;
  // When a deleted pod is due to be gone (metadata.deletionTimestamp: the deletion's time plus
  // its grace period), and what may hold it past that (metadata.finalizers, joined, bounded).
  std::optional<Time> deletion_due;
  RareText finalizers;
  bool deleted_at_once = false;  // deleting with a grace period of 0 (force-deleted)
  int exit_code = -1;  // of the agent container once terminated; -1 if unknown
  RareText reason;  // pod or container termination reason (OOMKilled, Evicted, ...)
  // When that container terminated (its kubelet's clock, second precision); unknown for a
  // pod that failed without one (evicted before it started, its node lost).
  std::optional<Time> finished_at;
  // The container's termination message: what the agent or the program last printed when
  // it failed (the operator sets terminationMessagePolicy FallbackToLogsOnError).
  RareText termination_message;
  // Why a Pending pod does not run: the scheduler's message when it cannot be placed
  // (PodScheduled=False, Unschedulable), or the trainer container's waiting reason and
  // message (ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ...).
  RareText unschedulable_message;
  RareText waiting_reason, waiting_message;
  std::string ip;  // status.podIP
  std::string node_name;  // spec.nodeName: "" until the pod is bound to a node
  bool host_network = false;  // spec.hostNetwork: status.podIP is its node's address
  // Its gang attempt's barrier secret (Note [Barrier secret]); empty when the pod holds none or
  // anything but what the operator draws.
  BarrierSecret barrier_secret;
  // Its tolerations of NoExecute taints, at most kMaxTolerations; tolerations_cut when it had
  // more (it is then taken to tolerate every taint: Note [Lost nodes]).
  Tolerations tolerations;
  bool tolerations_cut = false;

  bool finished() const { return phase == "Succeeded" || phase == "Failed"; }
  static PodView from_raw(const RawPod& raw);
  bool operator==(const PodView&) const = default;
};

// The work queue's key of the job an object belongs to, "ns/<job name>", from its namespace and
// job-name label; "" when it has none.
inline std::string owner_key(const std::string& ns, const std::string& job) { return job.empty() ? "" : ns + "/" + job; }

// What the operator caches of each object (Note [Lean caches] in kube/informer.hpp): read
// once per change, a few strings and numbers each.
struct ChildRef {  // a Service, NetworkPolicy or PodGroup; a pod's is PodRecord::ref()
  std::string ns, name, uid;
  std::string job;             // its job-name label; "" if none
  std::string controller_uid;  // of the TrainingJob that controls it; "" if none
  bool deleting = false;
  std::string owner_key() const { return reconcile::owner_key(ns, job); }
  static ChildRef from_json(const nlohmann::json& obj);  // a Service's, NetworkPolicy's or PodGroup's
  bool operator==(const ChildRef&) const = default;
};

// A pod: what decide() reads (its view) and the rest of its ChildRef, whose name, uid and
// deletion are the view's, held once (as a ChildRef beside the view they were two strings, one
// of them the uid's heap block, about 120 bytes a cached pod: bench/operator/RESULTS.md, 2026-11-30,
// seventh session). Messages are bounded (the termination message's last 1 KiB, the others'
// first), so a pod with a huge one costs the cache no more.
struct PodRecord {
  std::string ns;
  std::string job;             // its job-name label; "" if none
  std::string controller_uid;  // of the TrainingJob that controls it; "" if none
  PodView view;
  ChildRef ref() const { return {ns, view.name, view.uid, job, controller_uid, view.deleting}; }
  std::string owner_key() const { return reconcile::owner_key(ns, job); }
  static PodRecord from_raw(const RawPod& raw);
  bool operator==(const PodRecord&) const = default;
};

struct JobRecord {
  JobView view;
  std::string resource_version;
  static JobRecord from_json(const nlohmann::json& job);
};

}  // namespace lockstep::reconcile
