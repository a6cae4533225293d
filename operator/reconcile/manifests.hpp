// The objects the operator creates for a TrainingJob, built from the JobView alone.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "reconcile/job.hpp"

namespace lockstep::reconcile {

// Stable DNS name of pod `index`: <job>-<index>.<job>.<ns>.svc (hostname + subdomain).
std::string pod_name(const JobView& job, int index);
std::string master_addr(const JobView& job);

// Note [Job ports]
// A job's pods serve three TCP ports: the rendezvous store (spec.masterPort, on pod 0), the
// agents' restart barrier (masterPort + 1, node 0's agent: LOCKSTEP_AGENT_PORT's default) and
// the agent's /metrics (spec.metrics.port). The CRD keeps them distinct and in range
// (masterPort <= 65534, metrics.port != masterPort, != masterPort + 1), since a clash fails every
// pod at start. Each is listed in the trainer container's ports of the pods that serve it:
// metrics on every pod, the rendezvous and the barrier on pod 0 only (rank 0's store and node
// 0's agent; the other pods listed them too until #44 measured each entry at about 170 bytes of
// every stored pod, its managedFields entry included). The job's NetworkPolicy (Note [Job
// isolation]) admits the job's own pods on every port and others on metrics.port only.
int barrier_port(const JobView& job);

// Note [Job isolation]
// spec.isolation NetworkPolicy: the operator keeps a NetworkPolicy <job> (owned by the job, so
// the garbage collector removes it with the job) selecting the job's pods by their job-name
// label, for Ingress only. It admits
//   - the job's own pods, on every port: Gloo and NCCL connect ranks on ephemeral ports, so
//     the rendezvous, barrier and metrics ports alone would break the collectives;
//   - every pod of the operator's namespace (--operator-namespace, else $POD_NAMESPACE), on
//     metrics.port: the operator reads rank 0's agent there for status.progress;
//   - every pod of the monitoring namespace (--monitoring-namespace), on metrics.port, for
//     Prometheus.
// A peer with no namespace is left out. Egress is not restricted. Setting the field back to None
// deletes the policy. The policy is created once and not updated: a changed flag or
// metrics.port takes effect for a job when its policy is recreated (isolation None and back).
// Whether anything is enforced is up to the CNI (docs/security.md, "Network isolation").
struct IsolationPeers {
  std::string operator_namespace;    // "": no rule for the operator (its progress reads are dropped)
  std::string monitoring_namespace;  // "": no monitoring rule
};

// Note [Agent injection]
// The user's image needs nothing of ours. Every pod gets an emptyDir (kAgentVolume), an init
// container from the lockstep/agent image that copies the agent bundle into it (the bundle's
// static launcher, `--install-bundle`, so the image needs no shell), and a read-only mount of
// it at kAgentMountPath in the trainer container, whose command becomes
// `<kAgentMountPath>/lockstep-agent [FLAGS] -- COMMAND ARGS...` (Note [Agent flags]). The
// bundle carries its own loader and libraries (docs/agent.md, "The bundle"), so the image's
// libc does not matter. The pattern of Tekton's entrypoint and Argo's emissary; no webhook:
// the operator writes every pod.
// The init container is small and passes the restricted Pod Security Standard (non-root, no
// privilege escalation, no capabilities, RuntimeDefault seccomp, read-only root); it runs as
// the agent image's own numeric user, which runAsNonRoot holds to not being root. With no
// agent image (the operator's `--agent-image ''`, and `lockstep run`, whose agents are local
// processes) nothing is injected and the command is `lockstep-agent` from the image's PATH.
//   The bundle stays what the init container copied. Every mount of kAgentVolume that the
// template makes, in any of its containers and init containers, whole or a subPath, is
// read-only whatever the template says: a sidecar that mounted it writable could replace the
// binary the trainer container runs. A template's own volume of that name, or init container
// named kAgentInitContainer, is replaced by the operator's (reserved names, contract.hpp). And
// the template may put nothing at or below kAgentMountPath in the container that runs the
// agent: a mount of any volume (a subPath of one too) or a device there would hide or replace
// the bundle. agent_overlay() says which field does: the operator makes no pod of such a
// template (condition PodsBlocked, reason TemplateOverlaysAgent, with those words) and
// `lockstep validate` refuses it with the same, whether or not the operator injects the agent
// (the path is reserved either way).
struct AgentInjection {
  std::string image;  // empty: no injection
  std::string pull_policy = "IfNotPresent";
};

// The operator's flags that shape what it creates, checked one way for `lockstep-operator` and
// for `lockstep render`, which takes them with the same names: "" when `value` is valid, else
// what is wrong, naming the flag.
std::string agent_image_flag_error(const std::string& value);           // --agent-image ('' injects nothing)
std::string pull_policy_flag_error(const std::string& value);           // --agent-image-pull-policy
std::string isolation_flag_error(const std::string& value);             // --default-isolation
std::string namespace_flag_error(const std::string& flag, const std::string& value);  // a DNS label, or ''

// Pod <job>-<index> of attempt `attempt`: the template with the agent as the trainer
// container's entrypoint (injected when `agent.image` is set), the full LOCKSTEP_* and PET_*
// environment, labels, hostname and subdomain, restartPolicy Never, scheduling fields and a
// controller owner reference.
// `barrier_secret`: the gang attempt's LOCKSTEP_BARRIER_SECRET (Note [Barrier secret]); none
// when empty.
// `avoid_nodes`: nodes the pod should not land on if others fit (a preferred node affinity:
// the nodes the last gang restart lost, Note [Lost nodes] in node.hpp).
// `exclude_nodes`: nodes the pod must not land on (a required node affinity: the stragglers'
// nodes the gang left, Note [Replacing a straggler] in stragglers.hpp).
nlohmann::json pod_manifest(const JobView& job, int index, int attempt, const AgentInjection& agent = {},
                            const std::string& barrier_secret = "", const std::vector<std::string>& avoid_nodes = {},
                            const std::vector<std::string>& exclude_nodes = {});

// See Note [Agent injection]: what of `pod_template` (a TrainingJob's spec.template) would overlay
// the agent, as a message naming the field and what is valid, e.g.
// "spec.template.spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/lockstep/agent/bin\":
// ... use a path outside /lockstep/agent"; "" when nothing would.
std::string agent_overlay(const nlohmann::json& pod_template);

// Note [Barrier secret]
// The agents of a gang attempt prove to node 0's agent that they hold one secret (Note
// [Barrier trust] in agent/barrier/trust.hpp). The operator draws it, 32 random bytes, when it
// creates the first pod of an attempt and writes it into the trainer container's env
// (LOCKSTEP_BARRIER_SECRET) of each pod: no Secret object, no RBAC beyond creating pods, and a
// new attempt's pods share nothing with the old one's, which fences the old ranks out.
//   Every pod created later in the same attempt (a second pass of slow start, a pass cut short
// by a refusal, a Pending pod recreated) gets the secret of a pod of that attempt that the job
// controls, from the pod informer's cache: the pod's text is read for it as for everything else
// (Note [Pod text]), from the trainer container only, and only a value of the operator's form
// (64 lowercase hex digits) counts. No request is made for it, so it needs no `get` on pods
// (the chart grants list and watch). Only when no pod of the attempt is left is a new one drawn,
// which is then a new gang: node 0 would refuse a pod holding another, whose agent exits 76,
// and the gang restarts with a new attempt, so even that failure is safe.
//   Who can read it: whoever may read the pods' specs in the job's namespace (get, list or
// watch pods: they can usually read the pods' logs and exec into them too), and the processes
// of the trainer container, where it is in the environment (/proc/<pid>/environ of the agent
// and its workers); pods of other namespaces cannot. It is never logged, nor in an Event, a
// condition, a label or an annotation (docs/security.md).
// Headless Service <job> (publishNotReadyAddresses: rendezvous happens before readiness).
nlohmann::json service_manifest(const JobView& job);
// PodGroup <job> with minMember = nodes, for the coscheduling plugin.
nlohmann::json podgroup_manifest(const JobView& job);
// NetworkPolicy <job> for spec.isolation NetworkPolicy (Note [Job isolation]).
nlohmann::json network_policy_manifest(const JobView& job, const IsolationPeers& peers);
// A core/v1 Event about the job. Its message is cut to kMaxEventMessage bytes, at a character
// boundary (Note [UTF-8 text] in `common/include/lockstep/text.hpp`): a refusal the API server
// words (a failed pod create's) can be longer.
inline constexpr size_t kMaxEventMessage = 1024;
nlohmann::json event_manifest(const JobView& job, const std::string& type, const std::string& reason,
                              const std::string& message, const std::string& now, const std::string& component);

nlohmann::json owner_reference(const JobView& job);

}  // namespace lockstep::reconcile
