#include "reconcile/kueue.hpp"

#include <openssl/sha.h>

#include <algorithm>
#include <cstdio>

#include "lockstep/contract.hpp"
#include "reconcile/json_fields.hpp"
#include "reconcile/node.hpp"

using json = nlohmann::json;
namespace c = lockstep::contract;

namespace lockstep::reconcile {
namespace {

// A string map (labels, nodeSelector) of strings only, at most 64 entries of bounded size.
std::map<std::string, std::string> string_map(const json& j) {
  std::map<std::string, std::string> out;
  if (!j.is_object()) return out;
  for (auto it = j.begin(); it != j.end() && out.size() < 64; ++it)
    if (it->is_string() && it.key().size() <= 317 && it->get_ref<const std::string&>().size() <= 253)
      out[it.key()] = it->get<std::string>();
  return out;
}
// Tolerations as the API server holds them, at most kMaxTolerations.
json toleration_list(const json& j) {
  json out = json::array();
  if (!j.is_array()) return out;
  for (const auto& t : j)
    if (t.is_object() && out.size() < kMaxTolerations) out.push_back(t);
  return out;
}

std::string sha256_hex(const std::string& text, size_t chars) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  std::string hex;
  char b[3];
  for (unsigned char d : digest) {
    std::snprintf(b, sizeof b, "%02x", d);
    hex += b;
  }
  return hex.substr(0, chars);
}

}  // namespace

const WorkloadCondition* WorkloadView::condition(const std::string& type) const {
  for (const auto& wc : conditions)
    if (wc.c.type == type) return &wc;
  return nullptr;
}

bool WorkloadView::is_true(const std::string& type) const {
  const WorkloadCondition* wc = condition(type);
  return wc && wc->c.status == "True";
}

WorkloadView WorkloadView::from_json(const json& obj) {
  WorkloadView w;
  const json& md = child(obj, "metadata");
  w.ns = string_field(md, "namespace");
  w.name = string_field(md, "name");
  w.uid = string_field(md, "uid");
  w.resource_version = string_field(md, "resourceVersion");
  w.deleting = md.contains("deletionTimestamp");
  w.job = string_field(child(md, "labels"), c::kLabelJobName);
  w.pod_set_hash = string_field(child(md, "annotations"), kAnnotationPodSetHash);
  w.inactive_for_suspend = child(md, "annotations").contains(kAnnotationSuspended);
  if (md.contains("ownerReferences") && md["ownerReferences"].is_array())
    for (const auto& o : md["ownerReferences"])
      if (o.is_object() && o.value("controller", false) == true && string_field(o, "kind") == "TrainingJob")
        w.controller_uid = string_field(o, "uid");
  if (md.contains("finalizers") && md["finalizers"].is_array())
    for (size_t i = 0; i < md["finalizers"].size(); ++i)
      if (md["finalizers"][i] == kKueueFinalizer) {
        w.has_finalizer = true;
        w.finalizer_index = static_cast<int>(i);
      }
  const json& spec = child(obj, "spec");
  w.active = !(spec.contains("active") && spec["active"] == false);
  w.queue_name = string_field(spec, "queueName");
  const json& status = child(obj, "status");
  w.has_status = obj.is_object() && obj.contains("status") && obj["status"].is_object();
  if (status.contains("conditions") && status["conditions"].is_array()) {
    const json& conds = status["conditions"];
    w.condition_count = static_cast<int>(conds.size());
    for (size_t i = 0; i < conds.size() && w.conditions.size() < kMaxWorkloadConditions; ++i) {
      const json& k = conds[i];
      if (!k.is_object()) continue;
      WorkloadCondition wc;
      wc.index = static_cast<int>(i);
      wc.c.type = printable(string_field(k, "type"), 316);
      wc.c.status = printable(string_field(k, "status"), 16);
      wc.c.reason = printable(string_field(k, "reason"), 1024);
      wc.c.message = printable(string_field(k, "message"), kMaxConditionMessage - 3);  // with its "..."
      wc.c.last_transition_time = printable(string_field(k, "lastTransitionTime"), 64);
      w.conditions.push_back(std::move(wc));
    }
  }
  const json& adm = child(status, "admission");
  w.has_admission = status.contains("admission") && status["admission"].is_object();
  w.cluster_queue = printable(string_field(adm, "clusterQueue"), 253);
  if (adm.contains("podSetAssignments") && adm["podSetAssignments"].is_array())
    for (const auto& a : adm["podSetAssignments"]) {
      if (!a.is_object() || string_field(a, "name") != kWorkloadPodSet) continue;
      for (const auto& [resource, flavor] : child(a, "flavors").items()) {
        (void)resource;
        if (flavor.is_string() && w.flavors.size() < 16 &&
            std::find(w.flavors.begin(), w.flavors.end(), flavor.get<std::string>()) == w.flavors.end())
          w.flavors.push_back(flavor.get<std::string>());
      }
    }
  if (status.contains("admissionChecks") && status["admissionChecks"].is_array())
    for (const auto& check : status["admissionChecks"]) {
      if (!check.is_object() || !check.contains("podSetUpdates") || !check["podSetUpdates"].is_array()) continue;
      for (const auto& u : check["podSetUpdates"]) {
        if (!u.is_object() || string_field(u, "name") != kWorkloadPodSet) continue;
        for (auto& [k, v] : string_map(u.value("labels", json::object()))) w.updates.labels[k] = v;
        for (auto& [k, v] : string_map(u.value("annotations", json::object()))) w.updates.annotations[k] = v;
        for (auto& [k, v] : string_map(u.value("nodeSelector", json::object()))) w.updates.node_selector[k] = v;
        for (auto& t : toleration_list(u.value("tolerations", json::array())))
          if (w.updates.tolerations.size() < kMaxTolerations) w.updates.tolerations.push_back(t);
      }
    }
  return w;
}

FlavorView FlavorView::from_json(const json& obj) {
  FlavorView f;
  f.name = string_field(child(obj, "metadata"), "name");
  const json& spec = child(obj, "spec");
  f.node_labels = string_map(spec.value("nodeLabels", json::object()));
  f.tolerations = toleration_list(spec.value("tolerations", json::array()));
  return f;
}

std::string workload_name(const JobView& job) {
  return "trainingjob-" + job.name + "-" + sha256_hex(job.uid, 5);
}

std::string pod_set_hash(const JobView& job) {
  json shape = {{"nodes", job.nodes}, {"procsPerNode", job.procs_per_node}, {"template", job.tmpl.parsed()},
                {"command", job.command}, {"args", job.args}};
  return sha256_hex(shape.dump(), 16);
}

std::string queue_of(const JobView& job, std::string* conflict) {
  if (!job.queue_label.empty() && !job.queue.empty() && job.queue_label != job.queue) {
    if (conflict)
      *conflict = "metadata.labels[" + std::string(c::kLabelKueueQueue) + "]=" + printable(job.queue_label, 63) +
                  " and spec.scheduling.queue=" + printable(job.queue, 63) +
                  " name different LocalQueues: set one of them, or both to the same queue";
    return "";
  }
  return job.queue_label.empty() ? job.queue : job.queue_label;
}

json workload_manifest(const JobView& job, const AgentInjection& agent, std::optional<int> priority) {
  json pod = pod_manifest(job, 0, job.status.restarts, agent, /*barrier_secret=*/"");
  json& md = pod["metadata"];
  md.erase("name");
  md.erase("namespace");
  md.erase("ownerReferences");
  if (md.contains("labels")) {
    md["labels"].erase(c::kLabelNodeRank);
    md["labels"].erase(c::kLabelRestartAttempt);
  }
  json& spec = pod["spec"];
  spec.erase("hostname");
  json queue = queue_of(job);
  json wl = {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
             {"kind", "Workload"},
             {"metadata",
              {{"name", workload_name(job)},
               {"namespace", job.ns},
               {"labels", {{c::kLabelJobName, job.name}}},
               {"annotations", job.suspend ? json{{kAnnotationPodSetHash, pod_set_hash(job)}, {kAnnotationSuspended, "true"}}
                                           : json{{kAnnotationPodSetHash, pod_set_hash(job)}}},
               {"finalizers", json::array({kKueueFinalizer})},
               {"ownerReferences", json::array({owner_reference(job)})}}},
             {"spec",
              {{"queueName", queue},
               {"active", !job.suspend},
               {"podSets", json::array({{{"name", kWorkloadPodSet},
                                         {"count", job.nodes},
                                         {"template", {{"metadata", md}, {"spec", spec}}}}})}}}};
  if (!job.kueue_priority_class.empty()) {
    wl["spec"]["priorityClassRef"] = {{"group", "kueue.x-k8s.io"}, {"kind", "WorkloadPriorityClass"},
                                      {"name", job.kueue_priority_class}};
  } else if (!job.priority_class_name.empty()) {
    wl["spec"]["priorityClassRef"] = {{"group", "scheduling.k8s.io"}, {"kind", "PriorityClass"},
                                      {"name", job.priority_class_name}};
  }
  if (priority) wl["spec"]["priority"] = *priority;
  return wl;
}

void apply_admission(json& pod, const WorkloadView& wl, const std::vector<FlavorView>& flavors) {
  json& spec = pod["spec"];
  auto select = [&](const std::map<std::string, std::string>& labels) {
    if (labels.empty()) return;
    json& sel = spec["nodeSelector"];
    if (!sel.is_object()) sel = json::object();
    for (const auto& [k, v] : labels) sel[k] = v;
  };
  auto tolerate = [&](const json& ts) {
    if (ts.empty()) return;
    json& list = spec["tolerations"];
    if (!list.is_array()) list = json::array();
    for (const auto& t : ts)
      if (std::find(list.begin(), list.end(), t) == list.end()) list.push_back(t);
  };
  for (const auto& name : wl.flavors)
    for (const auto& f : flavors)
      if (f.name == name) {
        select(f.node_labels);
        tolerate(f.tolerations);
      }
  select(wl.updates.node_selector);
  tolerate(wl.updates.tolerations);
  json& md = pod["metadata"];
  for (const auto& [k, v] : wl.updates.labels)
    if (!md["labels"].contains(k)) md["labels"][k] = v;  // the job's own labels stay as they are
  if (!wl.updates.annotations.empty()) {
    json& ann = md["annotations"];
    if (!ann.is_object()) ann = json::object();
    for (const auto& [k, v] : wl.updates.annotations) ann[k] = v;
  }
}

const char* to_string(Admission a) {
  switch (a) {
    case Admission::NotQueued: return "NotQueued";
    case Admission::KueueMissing: return "KueueMissing";
    case Admission::QueueConflict: return "QueueConflict";
    case Admission::CreateWorkload: return "CreateWorkload";
    case Admission::Replace: return "Replace";
    case Admission::Waiting: return "Waiting";
    case Admission::Stopping: return "Stopping";
    case Admission::Admitted: return "Admitted";
  }
  return "?";
}

Admission admission(const JobView& job, const std::optional<WorkloadView>& wl, bool kueue_served) {
  std::string conflict;
  std::string queue = queue_of(job, &conflict);
  if (!conflict.empty()) return Admission::QueueConflict;
  if (queue.empty()) return Admission::NotQueued;
  if (!wl) return kueue_served ? Admission::CreateWorkload : Admission::KueueMissing;
  // Evicted with quota still held: the gang stops before the admission is given back. (Kueue
  // resets Evicted when it admits the workload again.)
  if (wl->evicted() && (wl->has_admission || wl->is_true("QuotaReserved"))) return Admission::Stopping;
  if (wl->admitted() && !wl->deleting) return Admission::Admitted;
  // Changed while suspended (the CRD allows no other change of shape): a new Workload, once
  // this one holds no quota.
  if (wl->pod_set_hash != pod_set_hash(job) && !wl->has_admission && !wl->is_true("QuotaReserved"))
    return Admission::Replace;
  return Admission::Waiting;
}

json workload_status_patch(const WorkloadView& wl, const std::vector<Condition>& set, bool clear_admission) {
  json ops = json::array();
  ops.push_back({{"op", "test"}, {"path", "/metadata/uid"}, {"value", wl.uid}});
  ops.push_back({{"op", "replace"}, {"path", "/metadata/resourceVersion"}, {"value", wl.resource_version}});
  bool has_list = wl.condition_count > 0;
  for (const auto& cnd : set) {
    json value = {{"type", cnd.type}, {"status", cnd.status}, {"reason", cnd.reason},
                  {"message", cnd.message}, {"lastTransitionTime", cnd.last_transition_time}};
    const WorkloadCondition* old = wl.condition(cnd.type);
    if (old) {
      // The transition time moves only when the status does.
      if (old->c.status == cnd.status && !old->c.last_transition_time.empty())
        value["lastTransitionTime"] = old->c.last_transition_time;
      ops.push_back({{"op", "replace"}, {"path", "/status/conditions/" + std::to_string(old->index)}, {"value", value}});
    } else if (has_list) {
      ops.push_back({{"op", "add"}, {"path", "/status/conditions/-"}, {"value", value}});
    } else if (!wl.has_status) {
      ops.push_back({{"op", "add"}, {"path", "/status"}, {"value", {{"conditions", json::array({value})}}}});
      has_list = true;
    } else {
      ops.push_back({{"op", "add"}, {"path", "/status/conditions"}, {"value", json::array({value})}});
      has_list = true;
    }
  }
  if (clear_admission && wl.has_admission) ops.push_back({{"op", "remove"}, {"path", "/status/admission"}});
  return ops;
}

json finalizer_removal_patch(const WorkloadView& wl) {
  const std::string at = "/metadata/finalizers/" + std::to_string(wl.finalizer_index);
  return json::array({{{"op", "test"}, {"path", at}, {"value", kKueueFinalizer}}, {{"op", "remove"}, {"path", at}}});
}

}  // namespace lockstep::reconcile
