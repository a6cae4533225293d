// The nodes a job's pods run on, as the operator sees them, and when such a node is lost.
//
// Note [Lost nodes]
// A node that dies takes its pods' ranks with it, and their peers hang in a collective until
// a timeout. Kubernetes itself notices late: the node lifecycle controller marks it Unknown
// after 50 s without a heartbeat, taints it NoExecute, and evicts its pods after their default
// tolerationSeconds (300 s); the pods then stay Terminating, since no kubelet confirms the
// deletion, and the gang restart waits for them. So the operator watches the nodes itself
// (--node-watch) and judges a pod of the current attempt that has not finished, and is bound
// to a node, as lost at once when that node:
//  * has its Ready condition False or Unknown (NotReady, or unreachable);
//  * is gone: deleted while the pod is bound to it (a node the watch has not seen is read
//    from the API server before it counts as gone: the pod's watch can run ahead of the
//    node's for a node that has just joined);
//  * carries a NoExecute taint that the pod does not tolerate for ever. A toleration with
//    tolerationSeconds tolerates the taint for a while only, until the taint manager evicts
//    the pod: that is taken as not tolerating it, since the gang cannot train through the
//    eviction anyway, and waiting for it is what the watch is for. (Such a toleration also
//    lets the scheduler put the next attempt's pod on the same tainted node, where it is
//    lost again; the next attempt's preference for other nodes, below, makes that the
//    scheduler's last resort.)
// A node with no Ready condition yet (just registered) is not lost, nor is one whose pods'
// node the cache does not know and the API server cannot say. A pod that never ran on its
// node (still Pending there: bound, but no container of it started) lost nothing either: it
// has no rank to fence and its node cost the gang no work, so it is a pod that cannot start,
// PodsBlocked (reason BoundToLostNode), not a gang restart: restarting would only make the
// same pod again, which whatever bound it there (a scheduler that tolerates the node's taints,
// a webhook) may bind there again, a restart per pass. Kubernetes removes such a pod itself
// (the taint manager's eviction, the pod garbage collector for a node that is gone); if its
// deletion has begun, the operator force-deletes it (no kubelet will confirm it) and makes
// the pod again in the same attempt.
//
// The gang restarts as for a failed pod (decide.hpp), with reason NodeLost naming the node,
// the pod and its rank, and why; restartPolicy Never fails the job. A restart for a lost node
// does not count toward spec.runPolicy.backoffLimit (status.nodeLostRestarts counts them
// apart): the node's loss says nothing about the program, and batch/v1 Jobs' podFailurePolicy
// likewise lets disruptions be ignored. The first in a row does not wait the restart delay,
// which is there to keep a crashing program from churning the cluster (Note [Backoff reset]):
// the next attempt starts as soon as the lost pods are gone. Later ones in a row wait, and
// there is a cap (Note [Lost-node restarts in a row]). status.consecutiveRestarts is left as
// it was, unless the attempt had run stably, which starts it afresh as for any restart.
// Its pods prefer nodes other than those lost (status.lostNodes, a preferred node affinity of
// the highest weight, cleared once an attempt runs): a NotReady or tainted node repels them
// anyway, but a node that went silent without the node controller's knowledge yet does not.
// activeDeadlineSeconds still bounds a job that loses node after node.
//
// Pods on a lost node are deleted with gracePeriodSeconds 0 (force-deleted), the current
// attempt's and an earlier one's still Terminating there alike: their kubelet will not confirm
// a graceful deletion, and the next attempt reuses their names. Force deletion removes the
// object only: on a node that is partitioned rather than dead, the containers may still run,
// and may still reach their peers and the checkpoint store. Keeping such a rank out of the new
// gang (fencing) is the agent's and the trainer's job: the barrier secret of each attempt
// (Note [Barrier secret] in manifests.hpp), and the agents' heartbeats (docs/agent.md,
// "Heartbeats"). Pods on healthy nodes are deleted gracefully, as for any gang restart.
//
// A node can die without the node controller's knowing for up to its grace period (50 s), and
// the gang's agents notice in seconds (agent/barrier/server.hpp, Note [Heartbeats]): the agents that
// exit 76 because pod R's agent went silent say so in the first line of their termination
// message (`lockstep-silent-peer node=R`, Note [Silent peer] there). A pod of the attempt that
// failed with exit code 76 and that line, while pod R of the attempt is Running in the API
// (not finished, not being deleted), makes pod R's node lost too, as above: the gang restarts
// with NodeLost, pod R is force-deleted, and the next attempt prefers other nodes (its node is
// still Ready, so the scheduler would place a new pod there). The line is read strictly
// (first line, a rank of the job, exit code 76), but a program can still forge it: it may
// write the container's termination-message file itself, and its own logs become the message
// when the agent wrote none. So the agents' word is no more than a lost node's: what a forged
// line buys is what a real loss buys, and is bounded the same way, one restart at once, then
// restarts spaced by the doubling delay, and the job fails past the cap
// (Note [Lost-node restarts in a row], below); every one of them a restart of its own job
// only, whose force-deleted pod is its own. Requiring the node to look unhealthy as well would
// cost every real silent node its point (the node controller says so 50 s later), and counting
// the restart toward backoffLimit would fail a job with backoffLimit 0 on a node's death (and
// the cluster tier's job, backoffLimit 1, on its second fault). With the node watch off
// (--node-watch=false) the line is not read either, so that the operator then behaves as one
// that waits for eviction.
//
// Note [Lost-node restarts in a row]
// A node that is lost again and again is no longer a passing fault: a node NotReady or tainted
// that the pods tolerate for a while (the scheduler puts the next attempt back on it), or a
// program that forges the silent-peer line. Each restart creates every pod, force-deletes some
// and records an Event, out of the operator's request budget that every job shares; without a
// bound, such a job restarted once per reconcile pass, a thousand times past backoffLimit 3 in
// a reproduction. So status.consecutiveNodeLostRestarts counts the lost-node restarts since an
// attempt last ran for restart_backoff_reset (10 min, Note [Backoff reset]; an attempt that
// ran that long starts the count afresh, as does a program failure's restart after one). The
// first of a row starts the next attempt at once: a real lost node should cost no more than
// its pods' deletion. The n-th (n >= 2) waits restart_delay(n - 1): --restart-backoff (10 s),
// doubling up to --restart-backoff-max (5 min), the delays a crashing program gets. Past
// kMaxNodeLostRestartsInARow (10) in a row, the next loss fails the job
// (NodeLostRestartsExceeded): ten nodes lost without ten stable minutes between them is no
// cluster a gang trains on. A fixed cap rather than backoffLimit, so that a job with
// backoffLimit 0 still survives a node's death; ten at the default delays take about 25 minutes
// (0, 10, 20, 40, 80, 160, 300 s, ...). The Restarted condition and the NodeLost Event say
// which restart of the row it is, the cap, and the wait. restart_backoff_reset 0 never starts
// the count afresh: the cap then bounds the lost-node restarts of the job's life.
//
// Note [Pods placed by hand]
// spec.template.spec.nodeName binds every pod of the gang to one named node before any
// scheduler sees it: gang scheduling (the PodGroup's minMember) and the scheduler's fit checks
// are skipped, every rank lands on the same node, and a node that is missing or NotReady holds
// pods that never start (a gang restart for each, before Note [Lost-node restarts in a row]).
// The CRD refuses the field (a CEL rule naming it, which `lockstep validate` applies with the
// same words); an object stored before the rule, or under an older CRD, gets no pod from the
// operator: condition PodsBlocked (reason TemplateNodeName) names the field and what to use
// instead (nodeSelector on kubernetes.io/hostname, or node affinity), and the job waits for the
// template to change. Its pods already running are left alone.
//
// Node names, reasons, messages and taints reach conditions and Events; they come from the
// API server, but another team's controller may write a node's status and taints, so the
// cache keeps them bounded and printable (NodeView::from_json).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "reconcile/job.hpp"

namespace lockstep::reconcile {

struct NodeTaint {  // a NoExecute taint
  std::string key, value;
  bool operator==(const NodeTaint&) const = default;
};

// What the node informer keeps of a node (Note [Lean caches] in kube/informer.hpp).
struct NodeView {
  std::string name;
  // Its Ready condition: status True, False or Unknown ("" when it has none), reason,
  // message, and lastTransitionTime as written.
  std::string ready, ready_reason, ready_message, ready_since;
  std::vector<NodeTaint> no_execute;  // at most kMaxNodeTaints
  bool gone = false;  // no such node: deleted (never cached; set by the reader that found it gone)

  static NodeView from_json(const nlohmann::json& node);
  bool operator==(const NodeView&) const = default;
};

inline constexpr size_t kMaxNodeTaints = 16;

// See Note [Lost-node restarts in a row]: the lost-node restarts a job may make in a row.
inline constexpr int kMaxNodeLostRestartsInARow = 10;

// Why `pod` has lost `node` (Note [Lost nodes]), e.g. "node worker-2 is NotReady
// (Ready=Unknown, NodeStatusUnknown: Kubelet stopped posting node status) since
// 2026-11-28T12:03:04Z"; nullopt when the node serves it.
std::optional<std::string> node_lost(const PodView& pod, const NodeView& node);

// See Note [Lost nodes]: the rank of the silent node a termination message names in its first
// line (`lockstep-silent-peer node=R`, contract::kSilentPeerLine); nullopt when it names none
// or the line is not exactly that (R: 0 to 9999).
std::optional<int> silent_peer(const std::string& termination_message);

// Whether `toleration` tolerates `taint` (a NoExecute one) for ever, as the kubelet and the
// taint manager match them, less tolerationSeconds.
bool tolerates_for_ever(const Toleration& toleration, const NodeTaint& taint);

// `s` as it may appear in a message: bytes outside printable ASCII replaced with '?', at most
// `max` bytes, "..." marking a cut.
std::string printable(const std::string& s, size_t max);

}  // namespace lockstep::reconcile
