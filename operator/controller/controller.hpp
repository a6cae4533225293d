// The TrainingJob controller: informers for TrainingJobs, Pods, Services, NetworkPolicies,
// PodGroups and Nodes feed a work queue of job keys; workers reconcile each key (reconcile/decide.hpp decides,
// execute() carries it out) and requeue on error with backoff, when a timer is due, and
// every resync_period (so a job whose events were lost is still looked at).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controller/api_discovery.hpp"
#include "controller/event_correlator.hpp"
#include "controller/expectations.hpp"
#include "controller/foreign_children.hpp"
#include "controller/node_index.hpp"
#include "controller/progress_poller.hpp"
#include "controller/status_batcher.hpp"
#include "controller/work_queue.hpp"
#include "kube/client.hpp"
#include "kube/informer.hpp"
#include "metrics.hpp"
#include "reconcile/decide.hpp"
#include "reconcile/manifests.hpp"

namespace lockstep::controller {

struct Config {
  int workers = 4;
  int create_parallelism = 8;   // concurrent pod creates within one reconcile
  int max_creates_per_pass = 256;  // pod creates one reconcile may send (Note [Slow start])
  std::string watch_namespace;  // "" for all namespaces
  reconcile::Options decide;
  std::string component = "lockstep-operator";
  std::chrono::milliseconds resync_period{std::chrono::minutes(5)};  // 0: only on events and timers
  // A status write that changes only the node counts waits until this long after the job's
  // last one (Note [Batched status writes]); 0: written at once.
  std::chrono::milliseconds status_batch_period{std::chrono::seconds(1)};
  // How often API discovery is asked whether PodGroups exist (Note [PodGroup API discovery]).
  std::chrono::milliseconds podgroup_check_period{std::chrono::seconds(60)};
  // And whether Kueue's Workloads do (Note [One Workload per job] in reconcile/kueue.hpp).
  std::chrono::milliseconds kueue_check_period{std::chrono::seconds(60)};
  // How often rank 0's agent is read for status.progress (reconcile/progress.hpp, Note
  // [Progress]); 0: never.
  std::chrono::milliseconds progress_period{std::chrono::seconds(30)};
  // The agent image every pod's init container copies the agent from (Note [Agent injection]
  // in reconcile/manifests.hpp); an empty image injects nothing.
  reconcile::AgentInjection agent;
  // Whom a job's NetworkPolicy admits besides its own pods (Note [Job isolation]).
  reconcile::IsolationPeers isolation;
  // What a job whose spec.isolation is unset gets (--default-isolation; Note [Job isolation]).
  reconcile::Isolation default_isolation = reconcile::Isolation::None;
  // Watch the nodes the jobs' pods run on, and restart a gang that lost one at once (Note
  // [Lost nodes] in reconcile/node.hpp); off, lost nodes are noticed when their pods are.
  bool node_watch = true;
};

// While a job has outstanding expectations its reconcile waits for the events of our own
// writes; the key is requeued for when they expire, so a lost event cannot wedge the job.
// True when the reconcile must wait.
bool hold_for_expectations(Expectations& expectations, WorkQueue& queue, const std::string& key);

// What the Service, NetworkPolicy and PodGroup informers leave unparsed: everything the
// conversion to ChildRef (reconcile/job.hpp) does not read.
kube::Prune child_prune();

class Controller {
 public:
  Controller(kube::Client& client, Config config, op::Metrics& metrics);
  ~Controller();

  void start_informers();
  // False after `timeout`, on stop(), or as soon as `abort` (optional) says so.
  bool wait_for_sync(std::chrono::seconds timeout, const std::function<bool()>& abort = {});
  bool synced() const;
  void start_workers();
  // Stops taking work, lets in-flight reconciles finish.
  void stop();
  void refresh_metrics();  // phase gauge, queue depth, the jobs' gang restarts

 private:
  void worker();
  bool reconcile(const std::string& key);  // false: retry with backoff
  void execute(const reconcile::JobView& job, const std::string& resource_version, const reconcile::Decision& d,
               const std::string& key, const std::vector<reconcile::PodView>& pods,
               const std::optional<reconcile::WorkloadView>& wl, bool& ok);
  // execute()'s steps; each sets `ok` false on a failure worth a retry (logged by failed()).
  void create_children(const reconcile::JobView& job, const reconcile::Decision& d, const std::string& key, bool& ok);
  void create_pods(const reconcile::JobView& job, const reconcile::Decision& d, const std::string& key,
                   const std::vector<reconcile::PodView>& pods, const std::optional<reconcile::WorkloadView>& wl,
                   bool& ok);
  void delete_pods(const reconcile::JobView& job, const reconcile::Decision& d, const std::string& key, bool& ok);
  bool write_status(const reconcile::JobView& job, const std::string& resource_version, const reconcile::Decision& d,
                    const std::string& key, bool& ok);
  void failed(const std::string& key, const std::string& what, const kube::Response& r, bool& ok);
  // Note [Barrier secret] in reconcile/manifests.hpp: gang attempt `attempt`'s secret.
  std::string attempt_secret(int attempt, const std::vector<reconcile::PodView>& pods);
  void record_event(const reconcile::JobView& job, const std::string& type, const std::string& reason,
                    const std::string& message);
  void delete_orphans(const std::string& ns, const std::string& name);
  void warn_foreign_pod(const reconcile::JobView& job, const reconcile::PodRecord& pod);  // Note [Pods we do not control]
  // The informers API discovery starts once it finds their API (api_discovery.hpp).
  std::unique_ptr<ChildInformer> podgroup_informer();
  KueueDiscovery::Informers kueue_informers();
  void on_workload(const reconcile::WorkloadView* old, const reconcile::WorkloadView* now);
  // The Workload writes a decision asks for (Note [One Workload per job]).
  void write_workload(const reconcile::JobView& job, const reconcile::Decision& d,
                      const std::optional<reconcile::WorkloadView>& wl, const std::string& key, bool& ok);
  // The value of the job's priority class (its kueue.x-k8s.io/priority-class label's
  // WorkloadPriorityClass, else spec.scheduling.priorityClassName's PriorityClass); nullopt when it
  // names none. False, with `error` set, when the class cannot be read.
  bool priority_of(const reconcile::JobView& job, std::optional<int>& value, std::string& error);
  // The flavors an admitted job's pods are assigned (Note [One Workload per job]).
  std::vector<reconcile::FlavorView> assigned_flavors(const reconcile::WorkloadView& wl, const std::string& key);
  void release_workloads(const std::string& key);  // the job is gone: its Workload's finalizer
  kube::Response drop_finalizer(const reconcile::WorkloadView& wl);
  kube::InformerBase::Options child_options(bool pods) const;
  // A child of the job `key` (ns/name; "": none) named `name` was created, changed or deleted.
  void on_child(const std::string& key, const std::string& name, bool created, bool deleted);
  ProgressPoller::Sources progress_sources();
  void start_node_watch();  // unless --node-watch=false or RBAC forbids it (Note [Lost nodes])
  // The nodes in.pods are bound to, into in.nodes (Note [Lost nodes]).
  void observe_nodes(reconcile::Observed& in);

  kube::Client& client_;
  Config config_;
  op::Metrics& metrics_;
  std::atomic<bool> stopping_{false};
  WorkQueue queue_;
  Expectations expectations_;
  using JobInformer = kube::Informer<reconcile::JobRecord>;
  using PodInformer = kube::Informer<reconcile::PodRecord>;
  using NodeInformer = kube::Informer<reconcile::NodeView>;
  ChildInformer::Handler child_handler();  // on_child for a Service, NetworkPolicy or PodGroup change
  std::unique_ptr<JobInformer> jobs_;
  std::unique_ptr<PodInformer> pods_;
  std::unique_ptr<ChildInformer> services_;
  std::unique_ptr<ChildInformer> network_policies_;
  std::unique_ptr<NodeInformer> nodes_;                 // null while the node watch is off
  PodGroupDiscovery podgroup_api_;  // and the PodGroup informer, once found
  KueueDiscovery kueue_api_;        // and the Workload and ResourceFlavor informers, once found

  NodeIndex node_index_;                                // which jobs have pods on each node
  std::vector<std::thread> workers_;
  ProgressPoller progress_;  // Note [Progress]
  StatusBatcher status_batcher_;  // Note [Batched status writes]
  EventCorrelator events_;  // Note [Repeated Events]
  std::atomic<bool> event_patch_refused_logged_{false};
  ForeignChildren foreign_;  // Note [Foreign children]
  // See Note [Job isolation]: whether job `key` meets a NetworkPolicy of its name that it does not
  // own and the informer does not hold; queues it again for when the mark lapses.
  bool network_policy_taken(const std::string& key, const std::string& uid);
  void mark_network_policy_taken(const std::string& key, const std::string& uid);
};

}  // namespace lockstep::controller
