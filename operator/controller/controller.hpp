// The TrainingJob controller: informers for TrainingJobs, Pods, Services, NetworkPolicies,
// PodGroups and Nodes feed a work queue of job keys; workers reconcile each key (reconcile/decide.hpp decides,
// execute() carries it out) and requeue on error with backoff, when a timer is due, and
// every resync_period (so a job whose events were lost is still looked at).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controller/agent_reader.hpp"
#include "controller/event_correlator.hpp"
#include "controller/expectations.hpp"
#include "controller/foreign_children.hpp"
#include "controller/node_index.hpp"
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
  reconcile::GangSupport gang_support();  // may start the PodGroup informer
  // Note [Kueue API discovery]: whether the Workload API is served and ours to use; may start
  // the Workload and ResourceFlavor informers.
  bool kueue_served();
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
  void on_child(const reconcile::ChildRef* old, const reconcile::ChildRef* now);
  void poll_progress();  // the progress thread: Note [Progress]
  struct DueReading {    // a running job whose rank 0 is due a reading
    std::string key, pod_uid;
    int attempt, world;
    // Note [Host-network readings]: rank 0 has its node's address; only the job's series count.
    bool host_network = false;
    std::string ns, name;
  };
  void find_due_readings(unsigned long scan, std::vector<DueReading>& due, std::vector<AgentTarget>& targets);
  void take_readings(const std::vector<DueReading>& due, const std::vector<AgentAnswer>& answers);
  // The latest reading of the job's rank 0 agent, into in.progress and in.in_place.
  void read_agent(const std::string& key, reconcile::Observed& in);
  void start_node_watch();  // unless --node-watch=false or RBAC forbids it (Note [Lost nodes])
  // The nodes in.pods are bound to, into in.nodes (Note [Lost nodes]).
  void observe_nodes(reconcile::Observed& in);

  kube::Client& client_;
  Config config_;
  op::Metrics& metrics_;
  WorkQueue queue_;
  Expectations expectations_;
  using JobInformer = kube::Informer<reconcile::JobRecord>;
  using PodInformer = kube::Informer<reconcile::PodRecord>;
  using ChildInformer = kube::Informer<reconcile::ChildRef>;  // Services, NetworkPolicies, PodGroups
  using NodeInformer = kube::Informer<reconcile::NodeView>;
  ChildInformer::Handler child_handler();  // on_child for a Service, NetworkPolicy or PodGroup change
  std::unique_ptr<JobInformer> jobs_;
  std::unique_ptr<PodInformer> pods_;
  std::unique_ptr<ChildInformer> services_;
  std::unique_ptr<ChildInformer> network_policies_;
  std::unique_ptr<ChildInformer> podgroups_;            // started by gang_support(), under gang_mu_
  std::atomic<ChildInformer*> podgroups_ptr_{nullptr};  // read without the lock
  std::unique_ptr<NodeInformer> nodes_;                 // null while the node watch is off
  using WorkloadInformer = kube::Informer<reconcile::WorkloadView>;
  using FlavorInformer = kube::Informer<reconcile::FlavorView>;
  std::unique_ptr<WorkloadInformer> workloads_;  // started by kueue_served(), under kueue_mu_
  std::unique_ptr<FlavorInformer> flavors_;
  std::atomic<WorkloadInformer*> workloads_ptr_{nullptr};  // read without the lock
  std::atomic<FlavorInformer*> flavors_ptr_{nullptr};
  std::mutex kueue_mu_;
  std::chrono::steady_clock::time_point kueue_checked_{};
  bool kueue_available_ = false;

  NodeIndex node_index_;                                // which jobs have pods on each node
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
  std::thread progress_thread_;
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  struct JobProgress {
    JobProgress(std::string pod, reconcile::ReadingSchedule s, std::chrono::steady_clock::time_point at)
        : attempt_pod(std::move(pod)), schedule(s), due(at + s.interval()) {}
    // The pod uid the samples came from; another one starts afresh. "" while the job's rank 0
    // cannot be read (no IP yet): then `due` is when to look at it again.
    std::string attempt_pod;
    std::optional<reconcile::ProgressSample> last;
    std::optional<reconcile::Progress> progress;
    std::optional<reconcile::InPlaceReading> in_place;  // Note [In-place restarts]
    reconcile::ReadingSchedule schedule;                // Note [Progress schedule]
    // Rank 0's agent of this attempt has started its workers: the gang is together (Kueue's
    // PodsReady, Note [One Workload per job]); once seen, kept for the attempt's pod.
    bool workers_started = false;
    int attempt = -1;
    std::chrono::steady_clock::time_point due;          // the next reading
    unsigned long seen = 0;                             // the last scan that found the job running
  };
  std::map<std::string, JobProgress> progress_;  // by job key, under progress_mu_
  EventCorrelator events_;  // Note [Repeated Events]
  std::atomic<bool> event_patch_refused_logged_{false};
  ForeignChildren foreign_;  // Note [Foreign children]
  // Note [Job isolation]: whether job `key` meets a NetworkPolicy of its name that it does not
  // own and the informer does not hold; queues it again for when the mark lapses.
  bool network_policy_taken(const std::string& key, const std::string& uid);
  void mark_network_policy_taken(const std::string& key, const std::string& uid);
  // When each job's status was last written (Note [Batched status writes]).
  std::chrono::milliseconds status_write_wait(const std::string& key);
  std::mutex status_mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> status_written_at_;
  // A new job's first write, put off since then (Note [Batched status writes]).
  std::chrono::milliseconds first_write_wait(const std::string& key);
  std::map<std::string, std::chrono::steady_clock::time_point> first_write_put_off_at_;
  std::mutex gang_mu_;
  std::chrono::steady_clock::time_point gang_checked_{};
  bool gang_available_ = false;
};

}  // namespace lockstep::controller
