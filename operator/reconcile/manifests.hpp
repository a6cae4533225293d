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
// pod at start. Each is listed in the trainer container's ports. The job's NetworkPolicy
// (Note [Job isolation]) admits the job's own pods on every port and others on metrics.port only.
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
// `<kAgentMountPath>/lockstep-agent -- COMMAND ARGS...`. The bundle carries its own loader and
// libraries (docs/agent.md, "The bundle"), so the image's libc does not matter. The pattern
// of Tekton's entrypoint and Argo's emissary; no webhook: the operator writes every pod.
// The init container is small and passes the restricted Pod Security Standard (non-root, no
// privilege escalation, no capabilities, RuntimeDefault seccomp, read-only root). With no
// agent image (the operator's `--agent-image ''`, and `lockstep run`, whose agents are local
// processes) nothing is injected and the command is `lockstep-agent` from the image's PATH.
struct AgentInjection {
  std::string image;  // empty: no injection
  std::string pull_policy = "IfNotPresent";
};

// Pod <job>-<index> of attempt `attempt`: the template with the agent as the trainer
// container's entrypoint (injected when `agent.image` is set), the full LOCKSTEP_* and PET_*
// environment, labels, hostname and subdomain, restartPolicy Never, scheduling fields and a
// controller owner reference.
// `barrier_secret`: the gang attempt's LOCKSTEP_BARRIER_SECRET (Note [Barrier secret]); none
// when empty.
// `avoid_nodes`: nodes the pod should not land on if others fit (a preferred node affinity:
// the nodes the last gang restart lost, Note [Lost nodes] in node.hpp).
nlohmann::json pod_manifest(const JobView& job, int index, int attempt, const AgentInjection& agent = {},
                            const std::string& barrier_secret = "", const std::vector<std::string>& avoid_nodes = {});

// Note [Barrier secret]
// The agents of a gang attempt prove to node 0's agent that they hold one secret (Note
// [Barrier trust] in agent/barrier.hpp). The operator draws it, 32 random bytes, when it
// creates the first pod of an attempt and writes it into each pod's env
// (LOCKSTEP_BARRIER_SECRET): no Secret object, no RBAC beyond creating pods, and a new
// attempt's pods share nothing with the old one's, which fences the old ranks out. A pod
// recreated within an attempt gets the secret of a live pod of that attempt, read from the
// API server (barrier_secret_of; the informer's lean cache holds no env). If none can be
// read, a fresh one: node 0 refuses that pod's agent, which exits 76, and the gang restarts
// with a new attempt, so the failure is safe. Whoever may `get pods` in the job's namespace
// can read it (as they can read the pods' logs and usually exec into them); pods of other
// namespaces cannot. It is never logged, nor in an Event or a condition.
// The value of LOCKSTEP_BARRIER_SECRET in `pod`'s trainer container; "" if none.
std::string barrier_secret_of(const nlohmann::json& pod);
// Headless Service <job> (publishNotReadyAddresses: rendezvous happens before readiness).
nlohmann::json service_manifest(const JobView& job);
// PodGroup <job> with minMember = nodes, for the coscheduling plugin.
nlohmann::json podgroup_manifest(const JobView& job);
// NetworkPolicy <job> for spec.isolation NetworkPolicy (Note [Job isolation]).
nlohmann::json network_policy_manifest(const JobView& job, const IsolationPeers& peers);
// A core/v1 Event about the job.
nlohmann::json event_manifest(const JobView& job, const std::string& type, const std::string& reason,
                              const std::string& message, const std::string& now, const std::string& component);

nlohmann::json owner_reference(const JobView& job);

}  // namespace lockstep::reconcile
