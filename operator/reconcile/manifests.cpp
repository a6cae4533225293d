#include "reconcile/manifests.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <regex>

#include "lockstep/contract.hpp"
#include "lockstep/text.hpp"
#include "reconcile/json_fields.hpp"

using json = nlohmann::json;
namespace c = lockstep::contract;

namespace lockstep::reconcile {
namespace {

json job_labels(const JobView& job) { return {{c::kLabelJobName, job.name}}; }

// Puts `entry` (a container env entry) in `env`, in place of one of the same name if any.
void put_env(json& env, json entry) {
  const std::string& name = entry["name"].get_ref<const std::string&>();
  for (auto& e : env) {
    if (!e.is_object()) continue;
    auto it = e.find("name");  // compared in place: no copy of each name per variable set
    if (it != e.end() && it->is_string() && it->get_ref<const std::string&>() == name) {
      e = std::move(entry);
      return;
    }
  }
  env.push_back(std::move(entry));
}

void set_env(json& env, const std::string& name, const std::string& value) { put_env(env, {{"name", name}, {"value", value}}); }

// `name` from the resources of the container `container`, in millicores (the downward API).
void set_env_from_cpu(json& env, const std::string& name, const std::string& container, const char* resource) {
  put_env(env, {{"name", name},
                {"valueFrom", {{"resourceFieldRef", {{"containerName", container}, {"resource", resource}, {"divisor", "1m"}}}}}});
}

// The value under `key` of `obj` moved out when it is of `kind` (an object or an array),
// else an empty one of that kind.
json take(json& obj, const char* key, json::value_t kind) {
  auto it = obj.is_object() ? obj.find(key) : obj.end();
  if (it == obj.end() || it->type() != kind) return json(kind);
  return std::move(*it);
}

// Whether `o` is an object named `name` (a name that is no string names nothing: the CRD keeps
// a mount's fields as the template wrote them).
bool named(const json& o, const char* name) {
  auto it = o.find("name");  // end() for anything but an object
  return it != o.end() && it->is_string() && it->get_ref<const std::string&>() == name;
}

// Drops the entries of a list of named objects (volumes, containers, mounts) that carry a
// name the operator reserves, so the one the operator adds is the only one.
void drop_named(json& list, const char* name) {
  if (!list.is_array()) { list = json::array(); return; }
  for (auto it = list.begin(); it != list.end();) {
    if (named(*it, name)) it = list.erase(it);
    else ++it;
  }
}

// A container port, unless the list has that port already; unnamed when its name is taken.
void add_port(json& ports, const char* name, int port) {
  bool name_taken = false;
  for (const auto& p : ports) {
    if (!p.is_object()) continue;
    auto number = p.find("containerPort"), label = p.find("name");
    if (number != p.end() && *number == port) return;
    name_taken |= label != p.end() && *label == name;
  }
  json entry = {{"containerPort", port}, {"protocol", "TCP"}};
  if (!name_taken) entry["name"] = name;
  ports.push_back(std::move(entry));
}

// A Kubernetes quantity ("500m", "16Mi", "2", "1e3", "1.5Gi") as a number; nullopt when it
// is not one.
std::optional<long double> quantity(const json& q) {
  if (q.is_number()) return q.get<long double>();
  if (!q.is_string()) return std::nullopt;
  const std::string& s = q.get_ref<const std::string&>();
  static const std::pair<const char*, long double> suffixes[] = {
      {"Ki", 1024.0L}, {"Mi", 1048576.0L}, {"Gi", 1073741824.0L}, {"Ti", 1099511627776.0L},
      {"Pi", 1125899906842624.0L}, {"Ei", 1152921504606846976.0L}, {"n", 1e-9L}, {"u", 1e-6L}, {"m", 1e-3L},
      {"k", 1e3L}, {"M", 1e6L}, {"G", 1e9L}, {"T", 1e12L}, {"P", 1e15L}, {"E", 1e18L}};
  std::string number = s;
  long double scale = 1;
  for (const auto& [suffix, factor] : suffixes) {
    size_t n = std::strlen(suffix);
    if (s.size() > n && s.compare(s.size() - n, n, suffix) == 0) {
      number = s.substr(0, s.size() - n);
      scale = factor;
      break;
    }
  }
  if (number.empty() || number.find_first_not_of("+-0123456789.eE") != std::string::npos) return std::nullopt;
  try {
    size_t used = 0;
    long double v = std::stold(number, &used);
    if (used != number.size()) return std::nullopt;
    return v * scale;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Whether the template gives `ctr` a CPU request the downward API will report: a positive
// requests.cpu, or a limits.cpu alone (the API server sets the request to the limit). Then the
// request is the figure the agent sizes its workers' threads by (Note [Worker threads]), and
// LOCKSTEP_CPU_LIMIT, which it reads only without one, is left out: 236 bytes of every stored
// pod, its managedFields entry included (bench/operator/RESULTS.md, #44). Without either, both
// are set, and a LimitRange's defaults, applied at admission, reach the agent through them.
bool cpu_request_set(const json& ctr) {
  auto cpu = [&](const char* kind) -> std::optional<long double> {
    auto res = ctr.find("resources");
    if (res == ctr.end() || !res->is_object()) return std::nullopt;
    auto part = res->find(kind);
    if (part == res->end() || !part->is_object()) return std::nullopt;
    auto q = part->find("cpu");
    return q == part->end() ? std::nullopt : quantity(*q);
  };
  const auto request = cpu("requests"), limit = cpu("limits");
  return request ? *request > 0 : limit && *limit > 0;
}

// Note [Agent init container resources]
// The init container asks for a resource only where the trainer container does, and for no more
// than it: 10m CPU and 16Mi of memory requested, 500m and 64Mi limited, each cut to the trainer
// container's own figure. A pod's effective request is the larger of its biggest init
// container's and the sum of its containers', so the pod then requests exactly what the user's
// template does: a Kueue ClusterQueue that covers only the resources the template names (CPU and
// GPUs, say) admits it. Asked for unconditionally, the 16Mi of memory made every pod need memory
// quota ("resource memory unavailable in ClusterQueue", and nothing admitted). A namespace whose
// ResourceQuota requires requests or limits of a resource requires them of the trainer container
// too, and then the init container names them as well.
json agent_resources(const json& ctr) {
  json out = {{"requests", json::object()}, {"limits", json::object()}};
  const json resources = ctr.is_object() ? ctr.value("resources", json::object()) : json::object();
  static const std::pair<const char*, std::pair<const char*, const char*>> ours[] = {
      {"cpu", {"10m", "500m"}}, {"memory", {"16Mi", "64Mi"}}};
  for (const char* kind : {"requests", "limits"}) {
    const json theirs = resources.is_object() ? resources.value(kind, json::object()) : json::object();
    if (!theirs.is_object()) continue;
    for (const auto& [name, values] : ours) {
      auto it = theirs.find(name);
      if (it == theirs.end()) continue;
      const char* mine = std::string(kind) == "requests" ? values.first : values.second;
      auto a = quantity(mine), b = quantity(*it);
      out[kind][name] = b && *b < *a ? *it : json(mine);
    }
  }
  // A limit below the request it would get is no valid container: the request drops to it.
  for (const auto& [name, values] : ours) {
    (void)values;
    if (!out["requests"].contains(name) || !out["limits"].contains(name)) continue;
    auto r = quantity(out["requests"][name]), l = quantity(out["limits"][name]);
    if (r && l && *l < *r) out["requests"][name] = out["limits"][name];
  }
  // (A resource the trainer container only limits: its request defaults to that limit, and the
  // init container's, to its own limit, which is no more than the trainer's.)
  for (const char* kind : {"requests", "limits"})
    if (out[kind].empty()) out.erase(kind);
  return out;
}

// See Note [Agent injection]: every mount of the agent's volume that the template's containers and
// init containers make is read-only, whatever the template says.
void mount_agent_volume_read_only(json& spec) {
  for (const char* list : {"containers", "initContainers"}) {
    auto containers = spec.find(list);
    if (containers == spec.end() || !containers->is_array()) continue;
    for (auto& ctr : *containers) {
      auto mounts = ctr.find("volumeMounts");
      if (mounts == ctr.end() || !mounts->is_array()) continue;
      for (auto& m : *mounts)
        if (named(m, c::kAgentVolume)) m["readOnly"] = true;
    }
  }
}

// See Note [Agent injection]: the emptyDir, the init container that fills it, and the trainer
// container's read-only mount of it; every other mount of it read-only too.
void inject_agent(json& spec, json& ctr, const AgentInjection& agent) {
  json& volumes = spec["volumes"];
  drop_named(volumes, c::kAgentVolume);
  volumes.push_back({{"name", c::kAgentVolume}, {"emptyDir", {{"sizeLimit", "256Mi"}}}});
  mount_agent_volume_read_only(spec);  // before the operator's own init container, which fills it

  json& inits = spec["initContainers"];
  drop_named(inits, c::kAgentInitContainer);
  inits.insert(inits.begin(),
      json{{"name", c::kAgentInitContainer},
           {"image", agent.image},
           {"imagePullPolicy", agent.pull_policy},
           {"command", json::array({c::kAgentImageLauncher, "--install-bundle", c::kAgentInstallPath})},
           {"volumeMounts", json::array({{{"name", c::kAgentVolume}, {"mountPath", c::kAgentInstallPath}}})},
           {"resources", agent_resources(ctr)},
           // Its user is the image's own (65532:65532, numeric, so the kubelet can hold it to
           // runAsNonRoot): no runAsUser or runAsGroup of ours, 73 bytes of every stored pod.
           {"securityContext", {{"runAsNonRoot", true},
                                {"allowPrivilegeEscalation", false},
                                {"readOnlyRootFilesystem", true},
                                {"capabilities", {{"drop", json::array({"ALL"})}}},
                                {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
           {"terminationMessagePolicy", "FallbackToLogsOnError"}});

  json& mounts = ctr["volumeMounts"];
  drop_named(mounts, c::kAgentVolume);
  mounts.push_back({{"name", c::kAgentVolume}, {"mountPath", c::kAgentMountPath}, {"readOnly", true}});
}

}  // namespace

int barrier_port(const JobView& job) { return job.master_port + 1; }

std::string pod_name(const JobView& job, int index) { return job.name + "-" + std::to_string(index); }

std::string master_addr(const JobView& job) {
  return pod_name(job, 0) + "." + job.name + "." + job.ns + ".svc";
}

json owner_reference(const JobView& job) {
  return {{"apiVersion", "lockstep.dev/v1alpha1"}, {"kind", "TrainingJob"}, {"name", job.name},
          {"uid", job.uid}, {"controller", true}, {"blockOwnerDeletion", true}};
}

// The list at spec.affinity.<kind>.<list>, made where missing; nullptr where the template has
// something else there (left for the API server to name).
static json* affinity_list(json& spec, const char* kind, const char* list) {
  json* at = &spec;
  for (const char* key : {"affinity", kind}) {
    json& next = (*at)[key];
    if (next.is_null()) next = json::object();
    if (!next.is_object()) return nullptr;
    at = &next;
  }
  json& rules = (*at)[list];
  if (rules.is_null()) rules = json::array();
  return rules.is_array() ? &rules : nullptr;
}

// Note [One pod per node]
// spec.scheduling.onePodPerNode: a required pod anti-affinity between the job's pods (its
// job-name label, in its namespace) on kubernetes.io/hostname, appended to whatever the
// template's affinity already requires, so the scheduler places no two of them on one node
// (the coscheduling plugin honours it: a gang that cannot spread does not start, and says so
// in PodsBlocked). Pods of an earlier attempt are gone before the next attempt's are made,
// so they never stand in the way. The same rule written in spec.template.spec.affinity does
// the same (docs/trainingjob.md, "Placement"); where the template's affinity has a shape the
// API server will refuse, it is left as it is for the API server to name.
static void keep_off_each_others_nodes(json& spec, const JobView& job) {
  if (json* required = affinity_list(spec, "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"))
    required->push_back({{"labelSelector", {{"matchLabels", {{c::kLabelJobName, job.name}}}}},
                         {"topologyKey", "kubernetes.io/hostname"}});
}

// Note [Lost nodes] (node.hpp): the next attempt's pods prefer nodes other than those the last
// gang restart lost, with the highest weight a preference takes: a node that went silent to
// the agents is still Ready for up to the node controller's grace period, and the scheduler
// would happily place a new pod there, where it would never start. A preference, not a rule:
// when no other node fits (a small cluster, a node that came back), the pod still runs.
static void prefer_other_nodes(json& spec, const std::vector<std::string>& nodes) {
  if (json* preferred = affinity_list(spec, "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"))
    preferred->push_back({{"weight", 100},
                          {"preference", {{"matchExpressions", json::array({{{"key", "kubernetes.io/hostname"},
                                                                             {"operator", "NotIn"},
                                                                             {"values", nodes}}})}}}});
}

// See Note [Replacing a straggler] (stragglers.hpp): each excluded node is kept out by a
// required matchFields requirement on metadata.name (NotIn takes exactly one value for a field),
// ANDed into every nodeSelectorTerm of the template's own required node affinity (the terms are
// ORed: a term without it would let the pod back), or one term of its own when there is none.
// A template whose affinity has another shape there is left for the API server to name.
static void keep_off_nodes(json& spec, const std::vector<std::string>& nodes) {
  json* at = &spec;
  for (const char* key : {"affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"}) {
    json& next = (*at)[key];
    if (next.is_null()) next = json::object();
    if (!next.is_object()) return;
    at = &next;
  }
  json& terms = (*at)["nodeSelectorTerms"];
  if (terms.is_null()) terms = json::array();
  if (!terms.is_array()) return;
  if (terms.empty()) terms.push_back(json::object());
  for (json& term : terms) {
    if (!term.is_object()) continue;
    json& fields = term["matchFields"];
    if (fields.is_null()) fields = json::array();
    if (!fields.is_array()) continue;
    for (const auto& node : nodes)
      fields.push_back({{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", json::array({node})}});
  }
}

namespace {

// The pod's metadata: the template's labels and annotations, with the job's labels over them.
json pod_metadata(const JobView& job, int index, int attempt, json md) {
  json labels = take(md, "labels", json::value_t::object);
  labels[c::kLabelJobName] = job.name;
  labels[c::kLabelNodeRank] = std::to_string(index);
  labels[c::kLabelRestartAttempt] = std::to_string(attempt);
  if (job.gang) labels[c::kLabelPodGroup] = job.name;
  // Never Kueue's queue label, whoever put it in the template: Kueue's pod integration would
  // make each pod a Workload of its own, admitted one by one, and split the gang. The job is
  // queued as one Workload (Note [One Workload per job] in kueue.hpp).
  labels.erase(c::kLabelKueueQueue);
  labels.erase("kueue.x-k8s.io/priority-class");
  json meta = json::object();
  meta["name"] = pod_name(job, index);
  meta["namespace"] = job.ns;
  meta["labels"] = std::move(labels);
  meta["ownerReferences"] = json::array({owner_reference(job)});
  if (md.contains("annotations")) meta["annotations"] = std::move(md["annotations"]);
  return meta;
}

// The trainer container of the spec: the one named so, else the first (a default one if none).
json& trainer_container(json& spec) {
  json& containers = spec["containers"];
  if (!containers.is_array() || containers.empty())
    containers = json::array({{{"name", c::kTrainerContainer}, {"image", "lockstep/trainer:latest"}}});
  for (auto& ctr : containers)
    if (ctr.value("name", "") == c::kTrainerContainer) return ctr;
  return containers[0];
}

// The trainer container's environment: the template's, with the job's contract over it
// (docs/trainingjob.md, common/include/lockstep/contract.hpp), torchrun's PET_ names too.
void set_trainer_env(json& ctr, const JobView& job, int index, int attempt, const std::string& barrier_secret) {
  json env = take(ctr, "env", json::value_t::array);
  const std::string n = std::to_string(job.nodes), rank = std::to_string(index),
                    nproc = std::to_string(job.procs_per_node), addr = master_addr(job),
                    port = std::to_string(job.master_port);
  set_env(env, c::kJobName, job.name);
  set_env(env, c::kJobNamespace, job.ns);
  set_env(env, c::kJobUid, job.uid);
  set_env(env, c::kNnodes, n);
  set_env(env, c::kNodeRank, rank);
  set_env(env, c::kNprocPerNode, nproc);
  set_env(env, c::kMasterAddr, addr);
  set_env(env, c::kMasterPort, port);
  set_env(env, c::kRestartAttempt, std::to_string(attempt));
  set_env(env, c::kStrategy, job.strategy);
  set_env(env, c::kMetricsPort, std::to_string(job.metrics_port));
  // The in-place restart settings go on the agent's command line (Note [Agent flags]); a
  // template's own variables of those names would override the job's spec, so they go.
  drop_named(env, c::kInPlaceRestarts);
  drop_named(env, c::kRestartPolicy);
  // What the container may use, so the agent sizes its workers' thread pools to it
  // (Note [Worker threads] in agent/worker_env.cpp).
  const std::string ctr_name = ctr.contains("name") && ctr["name"].is_string() ? ctr["name"].get<std::string>()
                                                                              : std::string(c::kTrainerContainer);
  set_env_from_cpu(env, c::kCpuRequest, ctr_name, "requests.cpu");
  if (!cpu_request_set(ctr)) set_env_from_cpu(env, c::kCpuLimit, ctr_name, "limits.cpu");
  if (!barrier_secret.empty()) set_env(env, c::kBarrierSecret, barrier_secret);  // Note [Barrier secret]
  if (!job.checkpoint_path.empty()) {
    set_env(env, c::kCheckpointPath, job.checkpoint_path);
    set_env(env, c::kCheckpointEvery, std::to_string(job.checkpoint_every));
    set_env(env, c::kCheckpointKeep, std::to_string(job.checkpoint_keep));
    if (!job.checkpoint_resume_from.empty()) set_env(env, c::kCheckpointResumeFrom, job.checkpoint_resume_from);
  }
  set_env(env, c::kPetNnodes, n);
  set_env(env, c::kPetNodeRank, rank);
  set_env(env, c::kPetNprocPerNode, nproc);
  set_env(env, c::kPetMasterAddr, addr);
  set_env(env, c::kPetMasterPort, port);
  ctr["env"] = std::move(env);
}

// Note [Agent flags]
// The agents' in-place restarts (Note [In-place restarts]), their budget per gang attempt and the
// policy they judge a worker's exit by (as the operator judges a pod's), are the agent's own
// settings: no worker reads them (the agent derives TORCHELASTIC_MAX_RESTARTS), so they are
// flags on the agent's command line, each only where the job's value is not the agent's default
// (--max-restarts 0, --restart-policy OnFailure). As environment variables, each cost a stored
// pod about 120 bytes, its managedFields entry included (an owner entry per variable), where a
// flag costs its own length: the container's command is one atomic field in managedFields. 243
// bytes fewer for a job at the CRD's defaults (bench/operator/RESULTS.md, #44). `kubectl describe
// pod` shows them in the command, and `lockstep run` starts the agent with the same command.
std::vector<std::string> agent_flags(const JobView& job) {
  std::vector<std::string> flags;
  if (job.in_place_budget() != 0) flags.push_back("--max-restarts=" + std::to_string(job.in_place_budget()));
  if (job.restart_policy != RestartPolicy::OnFailure)
    flags.push_back(std::string("--restart-policy=") + to_string(job.restart_policy));
  return flags;
}

// The trainer container: the agent launches the trainer command nproc times
// (lockstep-agent [FLAGS] -- COMMAND ARGS..., from the injected bundle unless injection is off: Note
// [Agent injection]), with the contract's environment and the ports every pod may serve.
void make_trainer(json& spec, json& ctr, const JobView& job, int index, int attempt, const AgentInjection& agent,
                  const std::string& barrier_secret) {
  json cmd = json::array({agent.image.empty() ? std::string("lockstep-agent")
                                              : std::string(c::kAgentMountPath) + "/lockstep-agent"});
  for (auto& flag : agent_flags(job)) cmd.push_back(std::move(flag));
  cmd.push_back("--");
  for (const auto& a : job.command) cmd.push_back(a);
  for (const auto& a : job.args) cmd.push_back(a);
  ctr["command"] = cmd;
  ctr.erase("args");
  // A failed container's last log lines become its termination message, which the operator
  // quotes in the job's condition (describe_failure), unless the template chose otherwise.
  if (!ctr.contains("terminationMessagePolicy")) ctr["terminationMessagePolicy"] = "FallbackToLogsOnError";
  set_trainer_env(ctr, job, index, attempt, barrier_secret);
  // The ports the pod serves (Note [Job ports]), unless the template lists them already.
  json ports = take(ctr, "ports", json::value_t::array);
  add_port(ports, "metrics", job.metrics_port);
  if (index == 0) {
    add_port(ports, "rendezvous", job.master_port);
    add_port(ports, "barrier", barrier_port(job));
  }
  ctr["ports"] = std::move(ports);
  if (!agent.image.empty()) inject_agent(spec, ctr, agent);
}

}  // namespace

// Built from one copy of the template, its parts moved rather than copied into the pod: a
// gang's pods are built together, and copies of the template were most of the cost
// (bench/operator).
json pod_manifest(const JobView& job, int index, int attempt, const AgentInjection& agent,
                  const std::string& barrier_secret, const std::vector<std::string>& avoid_nodes,
                  const std::vector<std::string>& exclude_nodes) {
  json tmpl = job.tmpl.parsed();
  json spec = take(tmpl, "spec", json::value_t::object);
  json meta = pod_metadata(job, index, attempt, take(tmpl, "metadata", json::value_t::object));

  spec["hostname"] = pod_name(job, index);
  spec["subdomain"] = job.name;
  spec["restartPolicy"] = "Never";
  // Neither the agent nor the trainer talks to the API server: no token unless the template
  // asks for one (docs/trainingjob.md, "Pod security").
  if (!spec.contains("automountServiceAccountToken")) spec["automountServiceAccountToken"] = false;
  if (!job.scheduler_name.empty()) spec["schedulerName"] = job.scheduler_name;
  if (!job.priority_class_name.empty()) spec["priorityClassName"] = job.priority_class_name;
  if (job.one_pod_per_node) keep_off_each_others_nodes(spec, job);
  if (!avoid_nodes.empty()) prefer_other_nodes(spec, avoid_nodes);
  if (!exclude_nodes.empty()) keep_off_nodes(spec, exclude_nodes);
  make_trainer(spec, trainer_container(spec), job, index, attempt, agent, barrier_secret);

  json pod = json::object();
  pod["apiVersion"] = "v1";
  pod["kind"] = "Pod";
  pod["metadata"] = std::move(meta);
  pod["spec"] = std::move(spec);
  return pod;
}

namespace {

// The components of a path in a container as the runtime resolves it: empty ones and "."
// dropped, ".." one up (never above the root); a relative path is taken from the root.
std::vector<std::string> path_components(const std::string& path) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    if (part == "..") {
      if (!out.empty()) out.pop_back();
    } else if (!part.empty() && part != ".") {
      out.push_back(std::move(part));
    }
    start = end + 1;
  }
  return out;
}

bool at_or_below(const std::string& path, const std::string& dir) {
  const auto p = path_components(path), d = path_components(dir);
  return p.size() >= d.size() && std::equal(d.begin(), d.end(), p.begin());
}

}  // namespace

std::string agent_image_flag_error(const std::string& value) {
  if (value.find_first_of(" \t\r\n") == std::string::npos) return "";
  return "--agent-image: '" + value + "' is not an image reference (no spaces); '' injects nothing";
}

std::string pull_policy_flag_error(const std::string& value) {
  if (value == "Always" || value == "IfNotPresent" || value == "Never") return "";
  return "--agent-image-pull-policy: expected Always, IfNotPresent or Never, got '" + value + "'";
}

std::string isolation_flag_error(const std::string& value) {
  if (value == "None" || value == "NetworkPolicy") return "";
  return "--default-isolation: expected None or NetworkPolicy, got '" + value + "'";
}

std::string namespace_flag_error(const std::string& flag, const std::string& value) {
  static const std::regex label("([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?");
  if (std::regex_match(value, label)) return "";
  return flag + ": '" + value + "' is not a namespace name (a DNS label)";
}

std::string agent_overlay(const json& pod_template) {
  const json& spec = child(pod_template, "spec");
  auto containers = spec.find("containers");
  if (containers == spec.end() || !containers->is_array() || containers->empty()) return "";
  size_t index = 0;  // the container that runs the agent: as trainer_container() chooses it
  for (size_t i = 0; i < containers->size(); ++i)
    if (named((*containers)[i], c::kTrainerContainer)) {
      index = i;
      break;
    }
  const json& ctr = (*containers)[index];
  static const std::pair<const char*, const char*> kinds[] = {{"volumeMounts", "mountPath"},
                                                              {"volumeDevices", "devicePath"}};
  for (const auto& [list, field] : kinds) {
    auto entries = ctr.find(list);
    if (entries == ctr.end() || !entries->is_array()) continue;
    for (size_t i = 0; i < entries->size(); ++i) {
      const json& entry = (*entries)[i];
      // A mount of the agent's own volume here is replaced by the operator's (inject_agent).
      if (std::strcmp(list, "volumeMounts") == 0 && named(entry, c::kAgentVolume)) continue;
      const std::string path = string_field(entry, field);
      if (path.empty() || !at_or_below(path, c::kAgentMountPath)) continue;
      return "spec.template.spec.containers[" + std::to_string(index) + "]." + list + "[" + std::to_string(i) + "]." +
             field + ": Invalid value: " + json(text::utf8_head(path, 256)).dump() +
             ": the operator mounts the Lockstep agent at " + c::kAgentMountPath + " in the container that runs it (" +
             (named(ctr, c::kTrainerContainer) ? "the one named trainer" : "the first, as none is named trainer") +
             "), and " + (field == std::string("mountPath") ? "a mount" : "a device") + " at or below that path "
             "would hide or replace the agent; use a path outside " + c::kAgentMountPath;
    }
  }
  return "";
}

json service_manifest(const JobView& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata",
           {{"name", job.name}, {"namespace", job.ns}, {"labels", job_labels(job)},
            {"ownerReferences", json::array({owner_reference(job)})}}},
          {"spec",
           {{"clusterIP", "None"},
            {"selector", job_labels(job)},
            {"publishNotReadyAddresses", true},
            {"ports", json::array({{{"name", "rendezvous"}, {"port", job.master_port}, {"protocol", "TCP"}},
                                   {{"name", "metrics"}, {"port", job.metrics_port}, {"protocol", "TCP"}}})}}}};
}

json podgroup_manifest(const JobView& job) {
  json spec = {{"minMember", job.nodes}};
  return {{"apiVersion", "scheduling.x-k8s.io/v1alpha1"},
          {"kind", "PodGroup"},
          {"metadata",
           {{"name", job.name}, {"namespace", job.ns}, {"labels", job_labels(job)},
            {"ownerReferences", json::array({owner_reference(job)})}}},
          {"spec", spec}};
}

json network_policy_manifest(const JobView& job, const IsolationPeers& peers) {
  json metrics_only = json::array({{{"protocol", "TCP"}, {"port", job.metrics_port}}});
  auto from_namespace = [&](const std::string& ns) {
    return json{{"from", json::array({{{"namespaceSelector", {{"matchLabels", {{"kubernetes.io/metadata.name", ns}}}}}}})},
                {"ports", metrics_only}};
  };
  json ingress = json::array({{{"from", json::array({{{"podSelector", {{"matchLabels", job_labels(job)}}}}})}}});
  if (!peers.operator_namespace.empty()) ingress.push_back(from_namespace(peers.operator_namespace));
  if (!peers.monitoring_namespace.empty() && peers.monitoring_namespace != peers.operator_namespace)
    ingress.push_back(from_namespace(peers.monitoring_namespace));
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata",
           {{"name", job.name}, {"namespace", job.ns}, {"labels", job_labels(job)},
            {"ownerReferences", json::array({owner_reference(job)})}}},
          {"spec",
           {{"podSelector", {{"matchLabels", job_labels(job)}}},
            {"policyTypes", json::array({"Ingress"})},
            {"ingress", std::move(ingress)}}}};
}

json event_manifest(const JobView& job, const std::string& type, const std::string& reason,
                    const std::string& message, const std::string& now, const std::string& component) {
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"generateName", job.name + "."}, {"namespace", job.ns}}},
          {"involvedObject",
           {{"apiVersion", "lockstep.dev/v1alpha1"}, {"kind", "TrainingJob"}, {"name", job.name},
            {"namespace", job.ns}, {"uid", job.uid}}},
          {"type", type},
          {"reason", reason},
          {"message", text::utf8_head(message, kMaxEventMessage)},  // Note [UTF-8 text]
          {"firstTimestamp", now},
          {"lastTimestamp", now},
          {"count", 1},
          {"source", {{"component", component}}},
          {"reportingComponent", component},
          {"reportingInstance", component}};
}

}  // namespace lockstep::reconcile
