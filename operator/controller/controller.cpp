#include "controller/controller.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>

#include "controller/pod_event.hpp"
#include "controller/slow_start.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/log.hpp"
#include "lockstep/random.hpp"
#include "reconcile/kueue.hpp"
#include "reconcile/manifests.hpp"

using json = nlohmann::json;
namespace res = lockstep::kube::resources;
using lockstep::reconcile::Decision;
using lockstep::reconcile::JobView;
using lockstep::reconcile::PodView;

namespace lockstep::controller {
namespace {

using reconcile::ChildRef;
using reconcile::JobRecord;
using reconcile::PodRecord;

// What the informers never parse (Note [Pruned parsing]): managedFields everywhere; the spec,
// annotations and status of Services, NetworkPolicies and PodGroups (the controller reads none
// of them); a TrainingJob's last-applied annotation (a second copy of its spec); all of a node
// but its name, Ready condition and taints. Pods are read from their text (Note [Pod text]).
}  // namespace

kube::Prune child_prune() {
  // Of a Service, NetworkPolicy or PodGroup only its metadata is read (ChildRef::from_json).
  return kube::Prune{{{"metadata", "managedFields"}, {"metadata", "annotations"}, {"spec"}, {"status"}}};
}

namespace {
const kube::Prune kJobPrune{{{"metadata", "managedFields"},
                             {"metadata", "annotations", "kubectl.kubernetes.io/last-applied-configuration"}}};
// Of a node, what NodeView::from_json reads: kubelets rewrite the rest (images, addresses,
// capacity, heartbeats) as they run.
const kube::Prune kNodePrune{{{"metadata", "*"}, {"spec", "*"}, {"status", "*"},
                              {"status", "conditions", "*", "lastHeartbeatTime"}},
                             false,
                             {{"metadata", "name"}, {"metadata", "resourceVersion"}, {"spec", "taints"},
                              {"status", "conditions"}}};
// Of a Workload, never its pod sets (the pods' template, which the operator wrote) nor the
// fields of Kueue's bookkeeping the operator does not read.
const kube::Prune kWorkloadPrune{{{"metadata", "managedFields"}, {"spec", "podSets"}, {"status", "resourceRequests"},
                                  {"status", "schedulingStats"}, {"status", "requeueState"}}};
// Of the answer to a status write only metadata.resourceVersion is read, so the server sends the
// job's metadata alone (Note [Metadata answers]), its managedFields not built; of the answers to
// creates and deletes, only their status codes (kube::kDiscardBody).
const kube::Prune kStatusWritePrune = [] {
  kube::Prune p{{{"metadata", "managedFields"}}};
  p.metadata_only = true;
  return p;
}();

// What the Service and PodGroup informers cache: each child's ref, indexed by its job.
kube::Informer<ChildRef>::Typed child_typed() {
  return {[](json& obj) { return ChildRef::from_json(obj); }, [](const ChildRef& c) { return c.owner_key(); }, {}, {}};
}

std::pair<std::string, std::string> split_key(const std::string& key) {
  auto slash = key.find('/');
  return {key.substr(0, slash), key.substr(slash + 1)};
}

}  // namespace

bool hold_for_expectations(Expectations& expectations, WorkQueue& queue, const std::string& key) {
  if (expectations.satisfied(key)) return false;
  queue.add_after(key, expectations.expires_in(key));
  return true;
}

Controller::Controller(kube::Client& client, Config config, op::Metrics& metrics)
    : client_(client),
      config_(std::move(config)),
      metrics_(metrics),
      podgroup_api_(client_, config_.podgroup_check_period, stopping_, [this] { return podgroup_informer(); }),
      kueue_api_(client_, config_.kueue_check_period, config_.watch_namespace, stopping_,
                 [this] { return kueue_informers(); }),
      progress_(config_.progress_period, progress_sources()),
      status_batcher_(config_.status_batch_period) {}

// What the progress thread reads of the caches, and how it queues a job.
ProgressPoller::Sources Controller::progress_sources() {
  return {[this] { return jobs_->list(); },
          [this](const std::string& ns, const std::string& name) { return pods_->get(ns, name); },
          [this](const std::string& key) { queue_.add(key); }};
}

Controller::~Controller() { stop(); }

kube::InformerBase::Options Controller::child_options(bool pods) const {
  kube::InformerBase::Options o;
  o.ns = config_.watch_namespace;
  o.label_selector = contract::kLabelJobName;
  if (!pods) o.prune = child_prune();
  return o;
}

// Note [Unchanged children]
// An update that leaves what is cached of a child as it was changes nothing decide() reads, so
// it queues no reconcile: a PodGroup's status (the gang scheduler rewrites it as its pods
// move), a pod's condition timestamps, a re-list that found the object as it was. At 4,000
// pods they were a quarter of the operator's reconciles (bench/operator/RESULTS.md). Deadlines
// and backoffs queue themselves (add_after), and the resync period still visits every job.
ChildInformer::Handler Controller::child_handler() {
  return [this](const ChildInformer::Ptr& old, const ChildInformer::Ptr& now) {
    if (old && now && *old == *now) return;
    const ChildRef& obj = now ? *now : *old;
    on_child(obj.owner_key(), obj.name, !old, !now);
  };
}

// A child changed: observe expectations, then reconcile its job.
void Controller::on_child(const std::string& key, const std::string& name, bool created, bool deleted) {
  if (key.empty()) return;
  if (created) expectations_.observed_create(key, name);
  if (deleted) expectations_.observed_delete(key, name);
  queue_.add(key);
}

void Controller::start_informers() {
  kube::InformerBase::Options job_opts;
  job_opts.ns = config_.watch_namespace;
  job_opts.prune = kJobPrune;
  jobs_ = std::make_unique<JobInformer>(
      client_, res::kTrainingJobs, job_opts,
      JobInformer::Typed{[isolation = config_.default_isolation](json& obj) {
                           JobRecord r = JobRecord::from_json(obj);
                           if (!r.view.isolation_given) r.view.isolation = isolation;  // Note [Job isolation]
                           return r;
                         },
                         {}, {}, {}},
      [this](const JobInformer::Ptr& old, const JobInformer::Ptr& now) {
        const auto& view = (now ? now : old)->view;
        std::string key = view.ns + "/" + view.name;
        if (now) expectations_.observed_version(key, now->resource_version);
        queue_.add(key);
      });
  pods_ = std::make_unique<PodInformer>(
      client_, res::kPods, child_options(true),
      PodInformer::Typed{{},  // no document: pods are read from their text
                         [](const PodRecord& p) { return p.owner_key(); }, pod_event_from_text, pod_from_text},
      [this](const PodInformer::Ptr& old, const PodInformer::Ptr& now) {
        if (old && now && *old == *now) return;  // Note [Unchanged children]
        node_index_.update(old.get(), now.get());
        const PodRecord& pod = now ? *now : *old;
        on_child(pod.owner_key(), pod.view.name, !old, !now);
      });
  services_ = std::make_unique<ChildInformer>(client_, res::kServices, child_options(false), child_typed(),
                                              child_handler());
  network_policies_ = std::make_unique<ChildInformer>(client_, res::kNetworkPolicies, child_options(false),
                                                      child_typed(), child_handler());
  jobs_->start();
  pods_->start();
  services_->start();
  network_policies_->start();
  podgroup_api_.check();  // starts the PodGroup informer when that API is installed
  kueue_api_.served();    // and the Workload informer when Kueue's is
  start_node_watch();
}

// See Note [Lost nodes]: a node's change queues the jobs with pods on it, and no other. Without
// leave to list nodes the operator says so once and runs on without the watch, as with
// --node-watch=false: its informer would retry the refused list for ever, and the caches
// would never count as synced.
void Controller::start_node_watch() {
  metrics_.node_watch.Set(0);
  if (!config_.node_watch) {
    LOCKSTEP_LOG(Info, "operator", "node watch off (--node-watch=false): a gang that loses a node restarts only once "
                                   "Kubernetes evicts or deletes its pods there");
    return;
  }
  auto probe = client_.get(res::kNodes.path() + "?limit=1", &kube::kDiscardBody);
  if (probe.status == 403) {
    LOCKSTEP_LOG(Warn, "operator", "node watch off: RBAC does not let the operator list nodes (it needs get, list and "
                                   "watch on nodes, a cluster-scoped resource, as the chart's ClusterRole "
                                   "<release>-operator-nodes-<namespace> grants; --node-watch=false says it is meant): "
                                       << probe.message());
    return;
  }
  kube::InformerBase::Options o;
  o.prune = kNodePrune;
  nodes_ = std::make_unique<NodeInformer>(
      client_, res::kNodes, o, NodeInformer::Typed{[](json& obj) { return reconcile::NodeView::from_json(obj); }, {}, {}, {}},
      [this](const NodeInformer::Ptr& old, const NodeInformer::Ptr& now) {
        if (old && now && *old == *now) return;  // a heartbeat, an image pulled: nothing decide() reads
        for (const auto& key : node_index_.jobs_on((now ? now : old)->name)) queue_.add(key);
      });
  nodes_->start();
  metrics_.node_watch.Set(1);
  LOCKSTEP_LOG(Info, "operator", "watching nodes: a gang that loses one restarts at once (--node-watch)");
}

bool Controller::synced() const {
  auto* podgroups = podgroup_api_.informer();
  auto* workloads = kueue_api_.workloads();
  auto* flavors = kueue_api_.flavors();
  return jobs_ && jobs_->synced() && pods_->synced() && services_->synced() && network_policies_->synced() &&
         (!podgroups || podgroups->synced()) && (!nodes_ || nodes_->synced()) && (!workloads || workloads->synced()) &&
         (!flavors || flavors->synced());
}

bool Controller::wait_for_sync(std::chrono::seconds timeout, const std::function<bool()>& abort) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!synced()) {
    if (std::chrono::steady_clock::now() > deadline || stopping_ || (abort && abort())) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void Controller::start_workers() {
  for (int i = 0; i < config_.workers; ++i) workers_.emplace_back([this] { worker(); });
  progress_.start();
}

void Controller::stop() {
  if (stopping_.exchange(true)) return;
  queue_.shutdown();
  progress_.stop();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  for (kube::InformerBase* inf :
       std::initializer_list<kube::InformerBase*>{jobs_.get(), pods_.get(), services_.get(), network_policies_.get()})
    if (inf) inf->stop();
  podgroup_api_.stop();  // no PodGroup informer starts after this
  if (nodes_) nodes_->stop();
  kueue_api_.stop();  // nor a Workload informer
}

void Controller::worker() {
  while (auto key = queue_.get()) {
    auto t0 = std::chrono::steady_clock::now();
    bool ok = false;
    try {
      ok = reconcile(*key);
    } catch (const std::exception& e) {
      LOCKSTEP_LOG(Error, "reconcile", *key << ": " << e.what());
    }
    metrics_.reconcile_duration.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (ok) {
      queue_.forget(*key);
    } else {
      metrics_.reconcile_errors.Increment();
      queue_.add_rate_limited(*key);
    }
    queue_.done(*key);
  }
}

// The PodGroup informer, made once Note [PodGroup API discovery] finds the API.
std::unique_ptr<ChildInformer> Controller::podgroup_informer() {
  auto options = child_options(false);
  // Jobs reconciled before this cache filled saw no PodGroups (a PodGroup deleted in
  // that window sent us no event): every job is looked at again once it has.
  options.on_synced = [this] {
    for (const auto& job : jobs_->list()) queue_.add(job->view.ns + "/" + job->view.name);
  };
  return std::make_unique<ChildInformer>(client_, res::kPodGroups, options, child_typed(), child_handler());
}

// The Workload and ResourceFlavor informers, made once Note [Kueue API discovery] finds the API.
KueueDiscovery::Informers Controller::kueue_informers() {
  kube::InformerBase::Options o = child_options(false);
  o.prune = kWorkloadPrune;
  o.on_synced = [this] {
    for (const auto& job : jobs_->list()) queue_.add(job->view.ns + "/" + job->view.name);
  };
  KueueDiscovery::Informers made;
  made.workloads = std::make_unique<WorkloadInformer>(
      client_, res::kWorkloads, o,
      WorkloadInformer::Typed{[](json& obj) { return reconcile::WorkloadView::from_json(obj); },
                              [](const reconcile::WorkloadView& w) { return w.owner_key(); }, {}, {}},
      [this](const WorkloadInformer::Ptr& old, const WorkloadInformer::Ptr& now) {
        if (old && now && *old == *now) return;
        on_workload(old.get(), now.get());
      });
  kube::InformerBase::Options fo;
  fo.prune = kube::Prune{{{"metadata", "managedFields"}, {"status"}}};
  made.flavors = std::make_unique<FlavorInformer>(
      client_, res::kResourceFlavors, fo,
      FlavorInformer::Typed{[](json& obj) { return reconcile::FlavorView::from_json(obj); }, {}, {}, {}},
      [](const FlavorInformer::Ptr&, const FlavorInformer::Ptr&) {});
  return made;
}

void Controller::on_workload(const reconcile::WorkloadView* old, const reconcile::WorkloadView* now) {
  const reconcile::WorkloadView& w = now ? *now : *old;
  std::string key = w.owner_key();
  if (key.empty()) return;
  if (!old && now) expectations_.observed_create(key, "workload/" + w.name);
  if (old && !now) expectations_.observed_delete(key, "workload/" + w.name);
  queue_.add(key);
}

bool Controller::priority_of(const JobView& job, std::optional<int>& value, std::string& error) {
  value.reset();
  const bool kueue_class = !job.kueue_priority_class.empty();
  const std::string& name = kueue_class ? job.kueue_priority_class : job.priority_class_name;
  if (name.empty()) return true;
  const kube::Resource& resource = kueue_class ? res::kWorkloadPriorityClasses : res::kPriorityClasses;
  auto r = client_.get(resource.path("", kube::url_encode(name)));
  if (!r.ok()) {
    error = std::string(kueue_class ? "WorkloadPriorityClass " : "PriorityClass ") + name + " (" +
            (kueue_class ? "the kueue.x-k8s.io/priority-class label" : "spec.scheduling.priorityClassName") +
            ") cannot be read: " + r.message();
    return false;
  }
  auto v = r.body.find("value");
  if (v == r.body.end() || !v->is_number_integer()) {
    error = resource.kind + " " + name + " has no integer value";
    return false;
  }
  value = v->get<int>();
  return true;
}

// The Workload writes of a decision, in order: create (or replace), spec.active, the status
// conditions and the admission given back, the finalizer.
void Controller::write_workload(const JobView& job, const Decision& d, const std::optional<reconcile::WorkloadView>& wl,
                                const std::string& key, bool& ok) {
  const auto& w = d.workload;
  if (w.create) {
    std::optional<int> priority;
    std::string error;
    if (!priority_of(job, priority, error)) {
      record_event(job, "Warning", "WorkloadNotCreated", error);
      LOCKSTEP_LOG(Warn, "reconcile", key << ": Workload not created: " << error);
      ok = false;  // retried with backoff: the class may be created later
      return;
    }
    const std::string name = reconcile::workload_name(job);
    expectations_.expect_create(key, "workload/" + name);
    auto r = client_.create(res::kWorkloads.path(job.ns), reconcile::workload_manifest(job, config_.agent, priority),
                            &kube::kDiscardBody);
    if (r.ok()) {
      LOCKSTEP_LOG(Info, "reconcile", key << ": created Workload " << name << " in LocalQueue " << reconcile::queue_of(job));
    } else {
      expectations_.observed_create(key, "workload/" + name);
      if (!r.conflict()) {
        failed(key, "create Workload", r, ok);
        record_event(job, "Warning", "WorkloadNotCreated", "cannot create Workload " + name + ": " + r.message());
      }
    }
  }
  if (!wl) return;
  const std::string path = res::kWorkloads.path(job.ns, wl->name);
  if (w.replace) {
    if (wl->has_finalizer) {
      auto r = drop_finalizer(*wl);
      if (!r.ok() && !r.not_found()) failed(key, "remove the finalizer of Workload " + wl->name, r, ok);
    }
    auto r = client_.remove(path, {{"preconditions", {{"uid", wl->uid}}}}, &kube::kDiscardBody);
    if (r.ok()) LOCKSTEP_LOG(Info, "reconcile", key << ": deleted Workload " << wl->name << " (made for another shape of the job)");
    else if (!r.not_found()) failed(key, "delete Workload " + wl->name, r, ok);
    return;
  }
  if (w.set_active) {
    // See Note [Who deactivates]: the annotation says the inactivity is the operator's own.
    json annotation = *w.set_active ? json(nullptr) : json("true");
    auto r = client_.patch(path,
                           {{"metadata", {{"annotations", {{reconcile::kAnnotationSuspended, annotation}}}}},
                            {"spec", {{"active", *w.set_active}}}},
                           kube::PatchType::Merge, &kube::kDiscardBody);
    if (!r.ok()) failed(key, "set spec.active of Workload " + wl->name, r, ok);
  }
  if (!w.conditions.empty() || w.clear_admission) {
    auto r = client_.patch(path + "/status", reconcile::workload_status_patch(*wl, w.conditions, w.clear_admission),
                           kube::PatchType::Json, &kube::kDiscardBody);
    if (!r.ok()) {
      if (r.conflict()) ok = false;  // it changed since: decided again from the newer version
      else failed(key, "update the status of Workload " + wl->name, r, ok);
    } else if (w.clear_admission) {
      LOCKSTEP_LOG(Info, "reconcile", key << ": gang stopped; Workload " << wl->name << "'s admission given back to Kueue");
    }
  }
  if (w.remove_finalizer && wl->has_finalizer) {
    auto r = drop_finalizer(*wl);
    if (!r.ok() && !r.not_found()) failed(key, "remove the finalizer of Workload " + wl->name, r, ok);
  }
}

// Kueue's finalizer off the Workload, conditional on it being where the cache saw it.
kube::Response Controller::drop_finalizer(const reconcile::WorkloadView& wl) {
  return client_.patch(res::kWorkloads.path(wl.ns, wl.name), reconcile::finalizer_removal_patch(wl), kube::PatchType::Json,
                       &kube::kDiscardBody);
}

// The job is gone; its Workload (which the garbage collector deletes, held by Kueue's
// finalizer) keeps the quota until the job's pods are gone too, then is let go.
void Controller::release_workloads(const std::string& key) {
  auto* workloads = kueue_api_.workloads();
  if (!workloads) return;
  for (const auto& p : pods_->by_index(key))
    if (!p->view.finished()) return;  // their deletion events bring us back
  for (const auto& w : workloads->by_index(key)) {
    if (w->controller_uid.empty() || !w->has_finalizer) continue;
    auto r = drop_finalizer(*w);
    if (r.ok()) LOCKSTEP_LOG(Info, "reconcile", key << ": released Workload " << w->name << " (its job is gone)");
    if (!w->deleting)
      client_.remove(res::kWorkloads.path(w->ns, w->name), {{"propagationPolicy", "Background"}}, &kube::kDiscardBody);
  }
}

// The ResourceFlavors an admitted job's pods are assigned, read once for all of its pods (their
// node labels and tolerations: reconcile::apply_admission). A flavor the cache does not hold is
// read (and said when it cannot be).
std::vector<reconcile::FlavorView> Controller::assigned_flavors(const reconcile::WorkloadView& wl, const std::string& key) {
  std::vector<reconcile::FlavorView> flavors;
  auto* cache = kueue_api_.flavors();
  for (const auto& name : wl.flavors) {
    if (cache)
      if (auto f = cache->get("", name)) {
        flavors.push_back(*f);
        continue;
      }
    auto r = client_.get(res::kResourceFlavors.path("", kube::url_encode(name)));
    if (r.ok()) flavors.push_back(reconcile::FlavorView::from_json(r.body));
    else LOCKSTEP_LOG(Warn, "reconcile", key << ": ResourceFlavor " << name << " cannot be read (" << r.message()
                                              << "); its node labels and tolerations are not applied");
  }
  return flavors;
}

// Note [Pods we do not control]
// A pod labelled with a job's name but not controlled by it (a user's pod, or one of an
// earlier TrainingJob of the same name that the garbage collector has yet to remove) is
// never deleted: the label proves nothing about ownership. It is left out of the decision;
// if it holds the name of one of the job's pods, that pod's create is a 409 until the pod
// is gone, and its delete event brings the job back. A Warning says so, once per pod.
void Controller::warn_foreign_pod(const JobView& job, const PodRecord& pod) {
  if (pod.view.deleting) return;
  const std::string& name = pod.view.name;
  const std::string& owner = pod.controller_uid;
  if (!foreign_.first_sight(job.ns + "/" + job.name, pod.view.uid)) return;  // Note [Foreign children]
  bool takes_a_name = false;
  for (int i = 0; i < job.nodes; ++i) takes_a_name |= name == reconcile::pod_name(job, i);
  std::string msg = "pod " + name + " is labelled " + contract::kLabelJobName + "=" + job.name + " but " +
                    (owner.empty() ? "has no controller" : "is controlled by another TrainingJob (uid " + owner + ")") +
                    "; the operator leaves it alone" +
                    (takes_a_name ? ", and creates its own " + name + " once that pod is deleted" : "");
  LOCKSTEP_LOG(Warn, "reconcile", job.ns << "/" << job.name << ": " << msg);
  record_event(job, "Warning", "ForeignPod", msg);
}

void Controller::delete_orphans(const std::string& ns, const std::string& name) {
  // The job is gone. The garbage collector removes what it owned; doing it here as well
  // keeps a cluster without one (or a slow one) from keeping pods of a deleted job.
  std::string key = ns + "/" + name;
  auto remove = [&](const kube::Resource& resource, const ChildRef& child) {
    if (child.controller_uid.empty() || child.deleting) return;
    auto r = client_.remove(resource.path(ns, child.name), {{"propagationPolicy", "Background"}}, &kube::kDiscardBody);
    if (r.ok()) LOCKSTEP_LOG(Info, "reconcile", key << ": deleted orphaned " << resource.kind << " " << child.name);
  };
  for (const auto& pod : pods_->by_index(key)) remove(res::kPods, pod->ref());
  for (auto* inf : {services_.get(), network_policies_.get(), podgroup_api_.informer()})
    if (inf)
      for (const auto& child : inf->by_index(key)) remove(inf->resource(), *child);
  release_workloads(key);
  expectations_.forget(key);
  status_batcher_.forget(key);
  foreign_.forget_job(key);
}

bool Controller::reconcile(const std::string& key) {
  auto [ns, name] = split_key(key);
  auto obj = jobs_->get(ns, name);
  if (!obj) {
    delete_orphans(ns, name);
    return true;
  }
  if (config_.resync_period.count() > 0) queue_.add_after(key, config_.resync_period);
  // The version this decision is computed from: the status write's precondition.
  const std::string& resource_version = obj->resource_version;
  expectations_.observed_version(key, resource_version);
  if (hold_for_expectations(expectations_, queue_, key)) return true;  // the cache is behind our own writes

  reconcile::Observed in;
  in.job = obj->view;
  in.now = reconcile::Clock::now();
  in.gang_support = podgroup_api_.check();
  progress_.read_agent(key, in);
  for (const auto& p : pods_->by_index(key)) {
    if (p->controller_uid != in.job.uid) {
      warn_foreign_pod(in.job, *p);  // not ours to delete, whatever its label says
      continue;
    }
    in.pods.push_back(p->view);
  }
  auto svc = services_->get(ns, name);
  in.service_exists = svc && svc->controller_uid == in.job.uid;
  auto np = network_policies_->get(ns, name);
  if (np && np->controller_uid == in.job.uid && !np->deleting) in.network_policy_uid = np->uid;
  in.network_policy_taken = (np && np->controller_uid != in.job.uid) || network_policy_taken(key, in.job.uid);
  auto* podgroups = podgroup_api_.informer();  // after check(), which may start it
  auto pg = podgroups ? podgroups->get(ns, name) : nullptr;
  in.podgroup_exists = pg && pg->controller_uid == in.job.uid;
  observe_nodes(in);
  in.kueue_served = kueue_api_.served();
  if (auto* workloads = kueue_api_.workloads())
    if (auto wl = workloads->get(ns, reconcile::workload_name(in.job)); wl && wl->controller_uid == in.job.uid)
      in.workload = *wl;
  // With no readings of the agents (--progress-period=0), the gang is together once every pod runs.
  if (config_.progress_period.count() <= 0) in.gang_joined = true;

  Decision d = reconcile::decide(in, config_.decide);
  bool ok = true;
  execute(in.job, resource_version, d, key, in.pods, in.workload, ok);
  if (d.requeue_after) queue_.add_after(key, *d.requeue_after);
  return ok;
}

// See Note [Lost nodes]: a node the cache does not hold is read before it counts as gone, since
// the pod's watch may have run ahead of the node's for a node that has just joined. Only pods
// not finished are looked at: the API server deletes a finished pod at once wherever it is.
void Controller::observe_nodes(reconcile::Observed& in) {
  if (!nodes_) return;
  in.watch_nodes = true;
  for (const auto& p : in.pods) {
    if (p.node_name.empty() || p.finished() || in.nodes.count(p.node_name)) continue;
    if (auto node = nodes_->get("", p.node_name)) {
      in.nodes.emplace(p.node_name, *node);
      continue;
    }
    auto r = client_.get(res::kNodes.path("", kube::url_encode(p.node_name)), &kNodePrune);
    if (r.ok()) {
      in.nodes.emplace(p.node_name, reconcile::NodeView::from_json(r.body));
    } else if (r.not_found()) {
      reconcile::NodeView gone;
      gone.name = reconcile::printable(p.node_name, reconcile::kMaxNodeName);
      gone.gone = true;
      in.nodes.emplace(p.node_name, gone);
    } else {
      LOCKSTEP_LOG(Debug, "reconcile", in.job.ns << "/" << in.job.name << ": node " << p.node_name
                                            << " of pod " << p.name << " not judged: " << r.message());
    }
  }
}

std::string Controller::attempt_secret(int attempt, const std::vector<reconcile::PodView>& pods) {
  // See Note [Barrier secret]: `pods` are the job's own (it controls them), from the cache.
  for (const auto& p : pods)
    if (p.attempt == attempt && !p.barrier_secret.empty()) return p.barrier_secret.hex();
  return lockstep::random_hex(32);  // a new attempt
}

// What a decision asks for, carried out in its order: the job's children, its pods created and
// deleted, its status written (Note [Batched status writes]), its events, the job deleted.
// `ok` turns false when anything failed and the reconcile should be retried.
void Controller::execute(const JobView& job, const std::string& resource_version, const Decision& d,
                         const std::string& key, const std::vector<reconcile::PodView>& pods,
                         const std::optional<reconcile::WorkloadView>& wl, bool& ok) {
  const std::string& ns = job.ns;
  create_children(job, d, key, ok);
  if (!d.create_pods.empty()) create_pods(job, d, key, pods, wl, ok);
  delete_pods(job, d, key, ok);
  if (d.workload.any()) write_workload(job, d, wl, key, ok);
  const bool status_written = write_status(job, resource_version, d, key, ok);
  // A decision's events describe its status: recorded once that is written, else the retry
  // that recomputes the decision would record them a second time.
  if (status_written)
    for (const auto& e : d.events) record_event(job, e.type, e.reason, e.message);
  if (d.delete_job) {
    auto r = client_.remove(res::kTrainingJobs.path(ns, job.name), {{"propagationPolicy", "Background"}}, &kube::kDiscardBody);
    if (r.ok()) LOCKSTEP_LOG(Info, "reconcile", key << ": deleted after ttlSecondsAfterFinished");
    else if (!r.not_found()) failed(key, "delete TrainingJob", r, ok);
  }
}


// See Note [Job isolation]: the job's own policy is not in the cache (else no create was asked for),
// so the one the API server has is another's: a tenant's, unlabelled, which the informer does
// not list. The job is reconciled again at once, to say so in its Isolated condition, and once
// the mark lapses, to try again (the other one may be gone). Should the cache only have been
// behind the job's own create, its policy shows there first and the mark counts for nothing.
void Controller::mark_network_policy_taken(const std::string& key, const std::string& uid) {
  foreign_.mark_policy_taken(key, uid, std::chrono::steady_clock::now());
  LOCKSTEP_LOG(Info, "reconcile", key << ": a NetworkPolicy of the job's name that it does not own is there: left alone");
  queue_.add_after(key, std::chrono::milliseconds(500));
}

bool Controller::network_policy_taken(const std::string& key, const std::string& uid) {
  auto left = foreign_.policy_taken(key, uid, std::chrono::steady_clock::now());
  if (!left) return false;
  // Looked at again once the mark lapses (a later add_after of the key keeps the earliest).
  queue_.add_after(key, std::chrono::duration_cast<std::chrono::milliseconds>(*left) + std::chrono::seconds(1));
  return true;
}

void Controller::failed(const std::string& key, const std::string& what, const kube::Response& r, bool& ok) {
  LOCKSTEP_LOG(Warn, "reconcile", key << ": " << what << ": " << r.message());
  ok = false;
}

// The Service, the NetworkPolicy (or its removal) and the PodGroup.
void Controller::create_children(const JobView& job, const Decision& d, const std::string& key, bool& ok) {
  const std::string& ns = job.ns;
  if (d.create_service) {
    auto r = client_.create(res::kServices.path(ns), reconcile::service_manifest(job), &kube::kDiscardBody);
    if (!r.ok() && !r.conflict()) failed(key, "create Service", r, ok);
  }
  if (d.create_network_policy) {
    auto r = client_.create(res::kNetworkPolicies.path(ns), reconcile::network_policy_manifest(job, config_.isolation),
                            &kube::kDiscardBody);
    if (r.conflict()) mark_network_policy_taken(key, job.uid);
    else if (!r.ok()) failed(key, "create NetworkPolicy", r, ok);
  }
  if (!d.delete_network_policy_uid.empty()) {
    auto r = client_.remove(res::kNetworkPolicies.path(ns, job.name),
                            {{"propagationPolicy", "Background"}, {"preconditions", {{"uid", d.delete_network_policy_uid}}}},
                            &kube::kDiscardBody);
    if (r.ok()) LOCKSTEP_LOG(Info, "reconcile", key << ": deleted NetworkPolicy (spec.isolation None)");
    else if (!r.not_found() && !r.conflict()) failed(key, "delete NetworkPolicy", r, ok);
  }
  if (d.create_podgroup) {
    auto r = client_.create(res::kPodGroups.path(ns), reconcile::podgroup_manifest(job), &kube::kDiscardBody);
    if (!r.ok() && !r.conflict()) failed(key, "create PodGroup", r, ok);
  }
}

// Pods of a gang are created together, in batches that grow (Note [Slow start]).
void Controller::create_pods(const JobView& job, const Decision& d, const std::string& key,
                             const std::vector<reconcile::PodView>& pods,
                             const std::optional<reconcile::WorkloadView>& wl, bool& ok) {
  const std::string& ns = job.ns;
  const std::string secret = attempt_secret(d.status.restarts, pods);
  const bool admitted = wl && wl->admitted();  // Note [One Workload per job]
  const auto flavors = admitted ? assigned_flavors(*wl, key) : std::vector<reconcile::FlavorView>{};
  int created = 0, attempted = 0;
  std::vector<std::string> failed_creates;
  for (int size : slow_start_batches(static_cast<int>(d.create_pods.size()), config_.create_parallelism,
                                     config_.max_creates_per_pass)) {
    std::vector<json> batch;
    std::vector<std::string> names;
    for (int i = attempted; i < attempted + size; ++i) {
      names.push_back(reconcile::pod_name(job, d.create_pods[i]));
      batch.push_back(reconcile::pod_manifest(job, d.create_pods[i], d.status.restarts, config_.agent, secret,
                                              d.avoid_nodes, d.exclude_nodes));
      if (admitted) reconcile::apply_admission(batch.back(), *wl, flavors);
      expectations_.expect_create(key, names.back());
    }
    attempted += size;
    auto results = client_.create_all(res::kPods.path(ns), batch, &kube::kDiscardBody);
    bool refused = false;
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      if (r.ok()) {
        ++created;
        continue;
      }
      expectations_.observed_create(key, names[i]);  // no event will come for a failed create
      if (r.conflict()) continue;
      refused = true;
      failed(key, "create pod " + names[i], r, ok);
      if (!r.refused) failed_creates.push_back(names[i] + ": " + r.message());
    }
    if (refused) break;  // the rest wait for the retry, which starts again from 1
  }
  metrics_.pods_created.Increment(created);
  if (!failed_creates.empty())  // the user sees why in `kubectl describe tj`
    record_event(job, "Warning", "FailedCreatePod", "cannot create " + failed_creates.front() +
                 (failed_creates.size() > 1 ? " (and " + std::to_string(failed_creates.size() - 1) + " more)" : ""));
  if (created) LOCKSTEP_LOG(Debug, "reconcile", key << ": created " << created << " pod(s)"
                                 << (attempted < static_cast<int>(d.create_pods.size())
                                         ? ", " + std::to_string(d.create_pods.size() - attempted) + " left for the next pass"
                                         : std::string()));
}

// And deleted together, as many in flight: a gang restart deletes every pod of the attempt,
// and one at a time it took a reconcile 8 round trips (bench/operator/bench_scale.cpp's storm).
void Controller::delete_pods(const JobView& job, const Decision& d, const std::string& key, bool& ok) {
  const std::string& ns = job.ns;
  for (size_t start = 0; start < d.delete_pods.size(); start += static_cast<size_t>(config_.create_parallelism)) {
    std::vector<std::string> batch, paths;
    std::vector<json> options;
    for (size_t i = start; i < std::min(d.delete_pods.size(), start + static_cast<size_t>(config_.create_parallelism)); ++i) {
      batch.push_back(d.delete_pods[i]);
      paths.push_back(res::kPods.path(ns, d.delete_pods[i]));
      json o = {{"propagationPolicy", "Background"}};
      // Only the pod the decision saw: a newer pod of the same name (the next attempt's) is a
      // 409 here, never deleted by a decision made before it existed.
      if (i < d.delete_pod_uids.size() && !d.delete_pod_uids[i].empty()) o["preconditions"] = {{"uid", d.delete_pod_uids[i]}};
      // See Note [Lost nodes]: no kubelet will confirm it.
      if (i < d.delete_pod_force.size() && d.delete_pod_force[i]) {
        o["gracePeriodSeconds"] = 0;
        LOCKSTEP_LOG(Info, "reconcile", key << ": pod " << d.delete_pods[i] << " is on a lost node: deleting it with grace period 0");
      }
      options.push_back(std::move(o));
      expectations_.expect_delete(key, d.delete_pods[i]);
    }
    auto results = client_.remove_all(paths, options, &kube::kDiscardBody);
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i].ok()) continue;
      expectations_.observed_delete(key, batch[i]);
      if (results[i].conflict())
        LOCKSTEP_LOG(Debug, "reconcile", key << ": pod " << batch[i] << " was replaced before its delete; the new one stays");
      else if (!results[i].not_found()) failed(key, "delete pod " + batch[i], results[i], ok);
    }
  }
}

// The decision's status, now or, when only counts changed, batched (Note [Batched status writes]).
// True when it is written or unchanged: the decision's events may then be recorded.
bool Controller::write_status(const JobView& job, const std::string& resource_version, const Decision& d,
                              const std::string& key, bool& ok) {
  const std::string& ns = job.ns;
  // Note [Batched status writes] in status_batcher.hpp: a write that changes only the counts,
  // or a new job's first, may wait.
  bool deferred = false;
  if (auto wait = status_batcher_.wait(key, job.status, d, std::chrono::steady_clock::now()); wait.count() > 0) {
    queue_.add_after(key, wait);
    deferred = true;
  }
  bool status_written = !d.status_changed;
  if (d.status_changed && !deferred) {
    // Conditional on the version the decision was computed from: if the job changed since
    // (even while this reconcile ran), the write is a 409 and the reconcile is retried.
    json patch = {{"metadata", {{"resourceVersion", resource_version}}}, {"status", d.status.to_json()}};
    auto r = client_.patch(res::kTrainingJobs.path(ns, job.name, "status"), patch, kube::PatchType::Merge,
                           &kStatusWritePrune);
    if (!r.ok()) {
      if (r.conflict()) {  // retried with fresher data
        LOCKSTEP_LOG(Debug, "reconcile", key << ": the job changed since version " << resource_version << "; retrying");
        ok = false;
      } else {
        failed(key, "update status", r, ok);
      }
    } else {
      status_written = true;
      status_batcher_.written(key, std::chrono::steady_clock::now());
      expectations_.expect_version(key, r.body["metadata"].value("resourceVersion", ""));
      if (d.status.restarts > job.status.restarts) metrics_.gang_restarts.Increment();
    }
    if (r.ok() && d.status.phase != job.status.phase)
      LOCKSTEP_LOG(Info, "reconcile", key << ": phase " << (job.status.phase.empty() ? "(new)" : job.status.phase)
                                          << " -> " << d.status.phase);
  }
  return status_written;
}

// Note [Repeated Events] (event_correlator.hpp): a repeat within the window counts on the Event
// recorded, a merge patch of count and lastTimestamp; otherwise a new Event, named as client-go
// names them (<object>.<nanoseconds, hex>) so that the patch can find it without reading the
// answer. The correlator is the controller's (events_), bounded as its Note says.
void Controller::record_event(const JobView& job, const std::string& type, const std::string& reason,
                              const std::string& message) {
  const auto now = reconcile::Clock::now();
  const std::string stamp = reconcile::format_time(now);
  const std::string key = EventCorrelator::key(job.ns, job.uid, type, reason, message);
  const std::string who = job.ns + "/" + job.name + ": event " + reason;
  if (auto seen = events_.repeat(key, now)) {
    auto r = client_.patch(res::kEvents.path(job.ns, seen->name), {{"count", seen->count}, {"lastTimestamp", stamp}},
                           kube::PatchType::Merge, &kube::kDiscardBody);
    if (r.ok()) return;
    if (!r.not_found()) {  // dropped: one Event already says it
      if (r.status == 403) {
        if (!event_patch_refused_logged_.exchange(true))
          LOCKSTEP_LOG(Warn, "reconcile", who << " repeated but not counted: the operator may not patch Events "
                                              "(403); grant patch on events to its role to count repeats. Until "
                                              "then a repeat of an Event within 10 minutes is dropped");
      } else {
        LOCKSTEP_LOG(Warn, "reconcile", who << " repeated (x" << seen->count << ") but not counted on Event "
                                            << seen->name << ": " << r.message());
      }
      return;
    }
    events_.forget(key);  // the Event expired: a new one
  }
  json event = reconcile::event_manifest(job, type, reason, message, stamp, config_.component);
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  char hex[17];
  const std::string name = job.name + "." +
                           std::string(hex, std::to_chars(hex, hex + sizeof hex, static_cast<unsigned long long>(nanos), 16).ptr);
  event["metadata"].erase("generateName");
  event["metadata"]["name"] = name;
  auto r = client_.create(res::kEvents.path(job.ns), event, &kube::kDiscardBody);
  if (r.ok()) events_.recorded(key, name, now);
  else LOCKSTEP_LOG(Warn, "reconcile", who << " not recorded: " << r.message());
}

void Controller::refresh_metrics() {
  metrics_.queue_depth.Set(static_cast<double>(queue_.depth()));
  metrics_.queue_depth_max.Set(static_cast<double>(queue_.max_depth()));
  if (!jobs_) return;
  std::map<std::string, int> counts;
  std::vector<op::Metrics::JobRestarts> restarts;
  for (const auto& obj : jobs_->list()) {
    const JobView& j = obj->view;
    ++counts[j.status.phase.empty() ? "Pending" : j.status.phase];
    restarts.push_back({j.ns, j.name, j.uid, j.status.restarts});
  }
  metrics_.set_phase_counts(counts);
  metrics_.set_job_restarts(restarts);  // Note [Restarts by kind]
}

}  // namespace lockstep::controller
