#include "reconcile/job.hpp"
#include "reconcile/manifests.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "lockstep/contract.hpp"
#include "lockstep/text.hpp"
#include "reconcile/json_fields.hpp"

using json = nlohmann::json;

namespace lockstep::reconcile {
namespace {

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  if (j.is_object() && j.contains(key) && !j[key].is_null()) {
    try {
      return j[key].get<T>();
    } catch (const json::exception&) {
    }
  }
  return fallback;
}

// At most `n` bytes of `s`, cut at a UTF-8 character boundary (Note [UTF-8 text]): its end kept
// (a program's last words are at its end), or its start.
std::string tail(const std::string& s, size_t n) { return text::utf8_tail(s, n); }
std::string head(const std::string& s, size_t n) { return text::utf8_head(s, n); }

}  // namespace

const std::vector<Toleration> Tolerations::kNone;

Tolerations::Tolerations(std::vector<Toleration> list) {
  if (list.empty()) return;
  size_t hash = list.size();
  for (const auto& t : list) {
    for (size_t h : {std::hash<std::string>{}(t.key), std::hash<std::string>{}(t.value), size_t{t.exists},
                     t.seconds ? std::hash<long long>{}(*t.seconds) : size_t{0x9e3779b9}})
      hash = hash * 31 + h;
  }
  // The table: each distinct list's hash to the copies alive (weakly held).
  static std::mutex mu;
  static std::unordered_multimap<size_t, std::weak_ptr<const std::vector<Toleration>>> table;
  static size_t prune_at = 64;
  std::lock_guard lock(mu);
  auto [first, last] = table.equal_range(hash);
  for (auto it = first; it != last; ++it)
    if (auto alive = it->second.lock(); alive && *alive == list) {
      list_ = std::move(alive);
      return;
    }
  list_ = std::make_shared<const std::vector<Toleration>>(std::move(list));
  if (table.size() >= prune_at) {
    std::erase_if(table, [](const auto& entry) { return entry.second.expired(); });
    prune_at = std::max<size_t>(64, 2 * table.size());
  }
  table.emplace(hash, list_);
}

bool Tolerations::operator==(const Tolerations& other) const {
  if (list_ == other.list_) return true;
  return size() == other.size() && std::equal(begin(), end(), other.begin());
}

BarrierSecret BarrierSecret::from_hex(std::string_view hex) {
  auto digit = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  BarrierSecret s;
  if (hex.size() != 2 * s.bytes_.size()) return s;
  for (size_t i = 0; i < s.bytes_.size(); ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return BarrierSecret{};
    s.bytes_[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  s.set_ = true;
  return s;
}

std::string BarrierSecret::hex() const { return set_ ? text::hex(bytes_.data(), bytes_.size()) : std::string(); }

const char* to_string(RestartPolicy policy) {
  switch (policy) {
    case RestartPolicy::ExitCode: return "ExitCode";
    case RestartPolicy::Never: return "Never";
    case RestartPolicy::OnFailure: break;
  }
  return "OnFailure";
}

const Condition* JobStatus::condition(const std::string& type) const {
  for (const auto& c : conditions)
    if (c.type == type) return &c;
  return nullptr;
}

json JobStatus::to_json() const {
  json s = json::object();
  if (!phase.empty()) s["phase"] = phase;
  if (!queue.empty()) s["queue"] = queue;
  if (!isolation.empty()) s["isolation"] = isolation;
  json conds = json::array();
  for (const auto& c : conditions) {
    json cj = {{"type", c.type}, {"status", c.status}, {"lastTransitionTime", c.last_transition_time}};
    if (!c.reason.empty()) cj["reason"] = c.reason;
    if (!c.message.empty()) cj["message"] = c.message;
    conds.push_back(cj);
  }
  s["conditions"] = conds;
  s["nodes"] = {{"active", nodes.active}, {"ready", nodes.ready}, {"succeeded", nodes.succeeded}, {"failed", nodes.failed}};
  s["restarts"] = restarts;
  s["consecutiveRestarts"] = consecutive_restarts;
  s["nodeLostRestarts"] = node_lost_restarts;
  s["consecutiveNodeLostRestarts"] = consecutive_node_lost_restarts;
  if (!lost_nodes.empty()) s["lostNodes"] = lost_nodes;
  s["inPlaceRestarts"] = in_place_restarts;
  s["currentAttemptInPlaceRestarts"] = current_attempt_in_place_restarts;
  if (!start_time.empty()) s["startTime"] = start_time;
  if (!completion_time.empty()) s["completionTime"] = completion_time;
  s["observedGeneration"] = observed_generation;
  if (stragglers.replacements > 0 || !stragglers.excluded_nodes.empty())
    s["stragglers"] = {{"replacements", stragglers.replacements}, {"excludedNodes", stragglers.excluded_nodes}};
  if (progress) {
    json p = {{"step", progress->step}};
    std::string steps = std::to_string(progress->step);
    if (progress->total_steps >= 0) {
      p["totalSteps"] = progress->total_steps;
      steps.append(1, '/').append(std::to_string(progress->total_steps));
    }
    p["steps"] = steps;
    if (progress->tokens_per_second) p["tokensPerSecond"] = static_cast<long long>(std::llround(*progress->tokens_per_second));
    if (progress->eta_seconds) p["eta"] = format_duration(*progress->eta_seconds);
    s["progress"] = p;
  }
  return s;
}

JobStatus JobStatus::from_json(const json& s) {
  JobStatus st;
  st.phase = get_or<std::string>(s, "phase", "");
  st.queue = get_or<std::string>(s, "queue", "");
  st.isolation = get_or<std::string>(s, "isolation", "");
  if (s.is_object() && s.contains("conditions") && s["conditions"].is_array()) {
    for (const auto& c : s["conditions"]) {
      st.conditions.push_back({get_or<std::string>(c, "type", ""), get_or<std::string>(c, "status", ""),
                               get_or<std::string>(c, "reason", ""), get_or<std::string>(c, "message", ""),
                               get_or<std::string>(c, "lastTransitionTime", "")});
    }
  }
  const json& n = child(s, "nodes");
  st.nodes = {get_or(n, "active", 0), get_or(n, "ready", 0), get_or(n, "succeeded", 0), get_or(n, "failed", 0)};
  st.restarts = get_or(s, "restarts", 0);
  // A status an operator before Note [Backoff reset] wrote: its delays counted every restart.
  st.consecutive_restarts = std::clamp(get_or(s, "consecutiveRestarts", st.restarts), 0, std::max(st.restarts, 0));
  st.node_lost_restarts = std::clamp(get_or(s, "nodeLostRestarts", 0), 0, std::max(st.restarts, 0));
  st.consecutive_node_lost_restarts = std::clamp(get_or(s, "consecutiveNodeLostRestarts", 0), 0, st.node_lost_restarts);
  if (s.is_object() && s.contains("lostNodes") && s["lostNodes"].is_array())
    for (const auto& n : s["lostNodes"])
      if (n.is_string() && st.lost_nodes.size() < kMaxLostNodes) st.lost_nodes.push_back(n.get<std::string>());
  const json& sg = child(s, "stragglers");
  st.stragglers.replacements =
      std::clamp(get_or(sg, "replacements", 0), 0, std::max(st.restarts - st.node_lost_restarts, 0));
  if (sg.contains("excludedNodes") && sg["excludedNodes"].is_array())
    for (const auto& n : sg["excludedNodes"])
      if (n.is_string() && st.stragglers.excluded_nodes.size() < static_cast<size_t>(kMaxStragglerReplacements))
        st.stragglers.excluded_nodes.push_back(head(n.get<std::string>(), kMaxNodeName));
  st.in_place_restarts = get_or(s, "inPlaceRestarts", 0);
  st.current_attempt_in_place_restarts = get_or(s, "currentAttemptInPlaceRestarts", 0);
  st.start_time = get_or<std::string>(s, "startTime", "");
  st.completion_time = get_or<std::string>(s, "completionTime", "");
  st.observed_generation = get_or<long long>(s, "observedGeneration", 0);
  const json& p = child(s, "progress");
  if (p.contains("step")) {
    Progress pr;
    pr.step = get_or<long long>(p, "step", 0);
    pr.total_steps = get_or<long long>(p, "totalSteps", -1);
    if (p.contains("tokensPerSecond")) pr.tokens_per_second = get_or<double>(p, "tokensPerSecond", 0);
    if (p.contains("eta")) pr.eta_seconds = parse_duration(get_or<std::string>(p, "eta", ""));
    st.progress = pr;
  }
  return st;
}

JobView JobView::from_json(const json& obj) {
  JobView j;
  const json& md = child(obj, "metadata");
  j.name = get_or<std::string>(md, "name", "");
  j.ns = get_or<std::string>(md, "namespace", "");
  j.uid = get_or<std::string>(md, "uid", "");
  j.generation = get_or<long long>(md, "generation", 0);
  j.deleting = md.contains("deletionTimestamp");
  const json& labels = child(md, "labels");
  j.queue_label = get_or<std::string>(labels, contract::kLabelKueueQueue, "");
  j.kueue_priority_class = get_or<std::string>(labels, "kueue.x-k8s.io/priority-class", "");
  const json& spec = child(obj, "spec");
  j.nodes = get_or(spec, "nodes", 1);
  j.procs_per_node = get_or(spec, "procsPerNode", 1);
  j.strategy = get_or<std::string>(spec, "strategy", "Auto");
  j.master_port = get_or(spec, "masterPort", contract::kDefaultMasterPort);
  j.metrics_port = get_or(child(spec, "metrics"), "port", contract::kDefaultMetricsPort);
  j.isolation_given = spec.contains("isolation") && spec["isolation"].is_string();
  j.isolation = get_or<std::string>(spec, "isolation", "None") == "NetworkPolicy" ? Isolation::NetworkPolicy : Isolation::None;
  const json& rp = child(spec, "runPolicy");
  j.backoff_limit = get_or(rp, "backoffLimit", 3);
  std::string restart = get_or<std::string>(rp, "restartPolicy", "OnFailure");
  j.restart_policy = restart == "Never" ? RestartPolicy::Never
                     : restart == "ExitCode" ? RestartPolicy::ExitCode : RestartPolicy::OnFailure;
  // The API server holds it to the CRD's bounds; clamped here as well, so the pods'
  // LOCKSTEP_IN_PLACE_RESTARTS is one the agents accept whatever the object says.
  j.in_place_restarts = std::clamp(get_or(rp, "inPlaceRestarts", 3), 0, kMaxInPlaceRestarts);
  const json& sg = child(rp, "stragglers");
  const std::string policy = get_or<std::string>(sg, "policy", "Report");
  j.straggler_policy = policy == "Replace" ? StragglerPolicy::Replace
                       : policy == "Ignore" ? StragglerPolicy::Ignore : StragglerPolicy::Report;
  j.straggler_replace_after_seconds = std::clamp(get_or<long long>(sg, "replaceAfterSeconds", 120), 0LL, kMaxReplaceAfterSeconds);
  j.straggler_max_replacements = std::clamp(get_or(sg, "maxReplacements", 2), 0, kMaxStragglerReplacements);
  if (rp.contains("activeDeadlineSeconds")) j.active_deadline_seconds = get_or<long long>(rp, "activeDeadlineSeconds", 0);
  if (rp.contains("ttlSecondsAfterFinished")) j.ttl_seconds_after_finished = get_or<long long>(rp, "ttlSecondsAfterFinished", 0);
  std::string clean = get_or<std::string>(rp, "cleanPodPolicy", "Running");
  j.clean_pod_policy = clean == "All" ? CleanPodPolicy::All : clean == "None" ? CleanPodPolicy::None : CleanPodPolicy::Running;
  j.suspend = get_or(rp, "suspend", false);
  const json& sch = child(spec, "scheduling");
  j.gang = get_or(sch, "gang", true);
  j.one_pod_per_node = get_or(sch, "onePodPerNode", false);
  j.scheduler_name = get_or<std::string>(sch, "schedulerName", "");
  j.queue = get_or<std::string>(sch, "queue", "");
  j.priority_class_name = get_or<std::string>(sch, "priorityClassName", "");
  const json& ck = child(spec, "checkpoint");
  j.checkpoint_path = get_or<std::string>(ck, "path", "");
  j.checkpoint_every = get_or(ck, "everySteps", j.checkpoint_path.empty() ? 0 : 500);
  j.checkpoint_keep = get_or(ck, "keep", 3);
  j.checkpoint_resume_from = get_or<std::string>(ck, "resumeFrom", "");
  const json& tr = child(spec, "trainer");
  j.command = get_or(tr, "command", std::vector<std::string>{"lockstep-trainer"});
  j.args = get_or(tr, "args", std::vector<std::string>{});
  j.tmpl = child(spec, "template");
  j.template_node_name = head(get_or<std::string>(child(child(spec, "template"), "spec"), "nodeName", ""), kMaxNodeName);
  j.template_agent_overlay = agent_overlay(child(spec, "template"));
  j.status = JobStatus::from_json(child(obj, "status"));
  return j;
}

PodView PodView::from_raw(const RawPod& raw) {
  PodView p;
  p.name = raw.name;
  p.uid = raw.uid;
  p.deleting = raw.deleting;
  if (raw.deleting) p.deletion_due = parse_time(raw.deletion_timestamp);
  p.deleted_at_once = raw.deleting && raw.deletion_grace && *raw.deletion_grace <= 0;
  std::string finalizers;
  for (const auto& f : raw.finalizers) finalizers += (finalizers.empty() ? "" : ", ") + f;
  p.finalizers = head(finalizers, 256);
  p.index = text::small_decimal(raw.rank_label);
  p.attempt = text::small_decimal(raw.attempt_label);
  p.phase = raw.phase ? *raw.phase : "Pending";
  p.reason = raw.reason;
  p.ip = raw.pod_ip;
  p.node_name = head(raw.node_name, kMaxNodeName);
  p.host_network = raw.host_network;
  p.barrier_secret = BarrierSecret::from_hex(raw.barrier_secret);
  // See Note [Lost nodes]: only what can tolerate a NoExecute taint. An operator the API server
  // would refuse tolerates nothing, as in the kubelet.
  std::vector<Toleration> tolerations;
  for (const auto& t : raw.tolerations) {
    if (!t.effect.empty() && t.effect != "NoExecute") continue;
    if (!t.op.empty() && t.op != "Equal" && t.op != "Exists") continue;
    if (tolerations.size() == kMaxTolerations) {
      p.tolerations_cut = true;
      break;
    }
    Toleration k{head(t.key, kMaxTaintKey), t.op == "Exists", head(t.value, kMaxTaintValue), std::nullopt};
    if (t.seconds) k.seconds = static_cast<long long>(std::clamp(std::trunc(*t.seconds), -1e15, 1e15));
    tolerations.push_back(std::move(k));
  }
  p.tolerations = std::move(tolerations);
  for (const auto& c : raw.conditions) {
    if (c.type == "Ready") p.ready = c.status == "True";
    if (c.type == "PodScheduled" && c.status == "False" && c.reason == "Unschedulable")
      p.unschedulable_message = c.message ? *c.message : "no node fits the pod";
  }
  // The exit code of the agent container (named "trainer", else the first terminated one).
  for (const auto& cs : raw.containers) {
    if (cs.init) continue;
    bool is_trainer = cs.name == contract::kTrainerContainer;
    if (is_trainer && cs.waiting) {
      p.waiting_reason = cs.waiting_reason;
      p.waiting_message = cs.waiting_message;
    }
    if (!cs.terminated) continue;
    if (p.exit_code < 0 || is_trainer) {
      p.exit_code = cs.exit_code;
      if (!cs.terminated_reason.empty()) p.reason = cs.terminated_reason;
      p.finished_at = parse_time(cs.finished_at);
      p.termination_message = cs.terminated_message;
    }
    if (is_trainer) break;
  }
  // The agent's init container (Note [Agent injection]): while it cannot start (its image
  // cannot be pulled, ...) the trainer container waits with PodInitializing, so its reason is
  // the one that says why; if it failed, the pod failed before any worker ran.
  for (const auto& cs : raw.containers) {
    if (!cs.init || cs.name != contract::kAgentInitContainer) continue;
    const std::string what = std::string("init container ") + contract::kAgentInitContainer +
                             " (copies the agent from the operator's --agent-image)";
    if (cs.waiting && !cs.waiting_reason.empty() && (p.waiting_reason.empty() || p.waiting_reason == "PodInitializing")) {
      p.waiting_reason = cs.waiting_reason;
      p.waiting_message = what + (cs.waiting_message.empty() ? "" : ": " + cs.waiting_message);
    }
    if (cs.terminated && cs.exit_code != 0 && p.exit_code < 0) {
      if (!cs.terminated_reason.empty()) p.reason = cs.terminated_reason;
      p.finished_at = parse_time(cs.finished_at);
      p.termination_message = what + " exited " + std::to_string(cs.exit_code) +
                              (cs.terminated_message.empty() ? "" : ": " + cs.terminated_message);
    }
  }
  return p;
}

// A Service's, NetworkPolicy's or PodGroup's metadata (a pod's is read from its text, Note [Pod
// text] in controller/pod_event.hpp).
ChildRef ChildRef::from_json(const json& obj) {
  ChildRef r;
  const json& md = child(obj, "metadata");
  r.ns = get_or<std::string>(md, "namespace", "");
  r.name = get_or<std::string>(md, "name", "");
  r.uid = get_or<std::string>(md, "uid", "");
  r.job = get_or<std::string>(child(md, "labels"), contract::kLabelJobName, "");
  r.deleting = md.contains("deletionTimestamp");
  if (md.contains("ownerReferences") && md["ownerReferences"].is_array())
    for (const auto& o : md["ownerReferences"])
      if (get_or<std::string>(o, "kind", "") == "TrainingJob" && get_or(o, "controller", false)) {
        r.controller_uid = get_or<std::string>(o, "uid", "");
        break;
      }
  return r;
}

PodRecord PodRecord::from_raw(const RawPod& raw) {
  PodRecord r;
  r.ns = raw.ns;
  r.job = raw.job_label;
  for (const auto& o : raw.owners)
    if (o.kind == "TrainingJob" && o.controller) {
      r.controller_uid = o.uid;
      break;
    }
  r.view = PodView::from_raw(raw);
  r.view.termination_message = tail(r.view.termination_message, 1024);
  r.view.waiting_message = head(r.view.waiting_message, 1024);
  r.view.unschedulable_message = head(r.view.unschedulable_message, 1024);
  return r;
}

// Note [Cached templates]
// A job's pod template is what its pods are made from, and the largest part of it: tens of
// KB for a template with many env entries or volumes, several times that as nlohmann::json
// (a node per value, a map per object). A finished job makes no pods again, and a suspended
// one none until it resumes (a change of its spec, which brings the template back with it):
// the cache keeps neither's template. A running job's is kept as compact JSON text (PodTemplate),
// shared by the copies of its view that a reconcile makes, and parsed for each pod made from
// it (pod_manifest, which took a copy of the tree before): 500 jobs of 56 KB templates kept as trees
// took 119.5 MiB against the chart's 128 MiB limit; 500 running ones kept as text, 55.2 MiB at
// peak (operator_hostile_test measures both kinds).
JobRecord JobRecord::from_json(const json& job) {
  JobRecord r{JobView::from_json(job), get_or<std::string>(child(job, "metadata"), "resourceVersion", "")};
  if (r.view.status.finished() || r.view.suspend) r.view.tmpl.clear();
  return r;
}

PodTemplate::PodTemplate(const json& tmpl) {
  if (tmpl.is_object() && !tmpl.empty()) text_ = std::make_shared<const std::string>(tmpl.dump());
}

json PodTemplate::parsed() const {
  if (!text_) return json::object();
  return json::parse(*text_);  // our own dump of an object: it parses
}

}  // namespace lockstep::reconcile
