// Stragglers (#42; docs/operator.md, "Stragglers"): node 0's agent's verdict, read from rank 0's
// /metrics with the progress (Note [Progress]), and the words the Straggler condition, its Events
// and a StragglerReplaced restart use. decide.cpp reports and acts on it
// (Note [Straggler condition], Note [Replacing a straggler]). The verdict itself is the agents':
// Note [Straggler score] in `common/include/lockstep/straggler.hpp`.
//
// Note [Straggler condition]
// Node 0's agent judges the gang and serves its standing verdicts as
// lockstep_straggler_slowdown{node_rank,rank,throttle} (the worst 8), with
// lockstep_stragglers (how many stand), lockstep_straggler_suspects and
// lockstep_straggler_window_seconds. The operator reads them from the page it already reads for
// the progress: no extra request. While a reading has a suspect or a straggler, the job's next
// reading comes within kStragglerReading (5 s), not the --progress-period, so a verdict shows
// (and clears) within seconds of the agent's.
//   The page is the pod's word (Note [Untrusted exposition]): a slowdown series counts only when
// its node_rank is a node of the job, its rank a rank of the job on that node (rank /
// procsPerNode == node_rank), its slowdown a finite number in [1, 1000] and its throttle tokens
// all known; a rank given twice counts once (the first); at most kMaxStragglersRead are taken,
// the worst first. Anything else is as if not served. The pod and node a message names are the
// operator's own (its pod cache: the current attempt's pod of that node rank and its
// spec.nodeName), never the page's.
//   The condition: True, reason SlowRank, naming the worst straggler, while a reading of the
// current attempt shows one; False, reason Recovered, once a reading shows none (a Normal
// Event StragglerRecovered); absent while no verdict was ever seen; False, reason Replaced or
// GangRestarted, when the gang restarts under it (the verdict was the old attempt's; the new
// one is judged afresh, and Replace's clock with it); one still True from before the gang last
// started running (a suspend, a Kueue eviction) is taken as new when a reading confirms it (a
// new lastTransitionTime). A Warning Event Straggler when it turns True and when it names
// another rank. A reading that did not come (rank 0 not answering) changes nothing, and a
// finished job keeps the condition it last had. Writes: the message says the slowdown to 2
// decimals, but the condition is rewritten only when what it says changes beyond the slowdown
// moving by less than 0.1 (same_verdict), so a straggler that drifts between 1.42 and 1.45
// costs no status write per reading.
// spec.runPolicy.stragglers.policy Ignore: the condition is never set nor changed.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::reconcile {

// At most this many verdicts are read from one page (the agent lists the worst 8).
inline constexpr size_t kMaxStragglersRead = 8;
// The next reading of a job whose last one had a suspect or a straggler comes within this.
inline constexpr std::chrono::milliseconds kStragglerReading{5000};
// spec.runPolicy.stragglers bounds (the CRD's).
inline constexpr long long kMaxReplaceAfterSeconds = 86400;
inline constexpr int kMaxStragglerReplacements = 16;

enum class StragglerPolicy { Report, Replace, Ignore };

struct StragglerVerdict {
  int rank = -1, node_rank = -1;
  double slowdown = 1;
  unsigned throttle = 0;  // straggler::Throttle bits
  bool operator==(const StragglerVerdict&) const = default;
};

struct StragglerReading {
  int attempt = -1;  // the gang attempt of the pod it came from
  std::vector<StragglerVerdict> stragglers;  // the worst first, at most kMaxStragglersRead
  int standing = 0;  // lockstep_stragglers when valid (at least stragglers.size()), else stragglers.size()
  int suspects = 0;  // lockstep_straggler_suspects when valid, else 0
  double window_s = 30;  // lockstep_straggler_window_seconds when valid, else the agents' default
  bool operator==(const StragglerReading&) const = default;
  // Whether the job is to be read again soon (Note [Straggler condition]).
  bool active() const { return !stragglers.empty() || suspects > 0 || standing > 0; }
};

// From rank 0's agent's page, for a job of `nodes` x `procs_per_node` ranks whose pod is of gang
// attempt `attempt`. Always a reading (an agent without the series: nobody straggles).
StragglerReading parse_stragglers(const std::string& metrics_text, int nodes, int procs_per_node, int attempt);

// "rank 5 (pod tj-2 on node gpu-17): work 1.42x the gang's typical rank over the last 30 s;
// GPU clocks throttled: power cap (and 2 more)": the reading's worst straggler, `pod` and
// `node` the operator's (node "" : "node unknown").
std::string straggler_message(const StragglerReading& r, const std::string& pod, const std::string& node);

// Whether condition messages `a` and `b` say the same but for a slowdown ("work 1.42x") that
// moved by less than 0.1 (Note [Straggler condition]).
bool same_verdict(const std::string& a, const std::string& b);
// A message's subject, "rank 5 (pod tj-2 on node gpu-17)": a new one is a new Event.
std::string verdict_subject(const std::string& message);

// Note [Replacing a straggler]
// spec.runPolicy.stragglers.policy Replace restarts the gang off the straggler's node once the
// Straggler condition has been True for replaceAfterSeconds (120) in the current attempt, at
// most maxReplacements (2) times per job: reason StragglerReplaced, counted in status.restarts
// and status.stragglers.replacements, not against backoffLimit, without a backoff (it is no
// failure). The node goes into status.stragglers.excludedNodes, and every later attempt's pods
// carry a required node affinity keeping each excluded node out (matchFields metadata.name
// NotIn [node], one requirement per node, in every nodeSelectorTerm of the template's own
// affinity, or one term of their own); the Node object is never touched. A verdict whose node
// the operator does not know (the pod not bound) replaces nothing, and the message says so.
//   When it is worth it: a straggler slows the whole gang by s (every rank steps at its pace), so
// a run with T seconds left at that pace would take T/s off the node. Moving costs the restart R
// (reschedule, rendezvous, reload the checkpoint: about a minute) and the steps since the last
// checkpoint, lost: on average half the checkpoint interval C. Replace pays when
//   T*(1 - 1/s) > R + C/2,
// so at s = 1.5 with C = 10 min and R = 1 min the run must have more than 18 min left
// (T/3 > 6 min); at s = 1.25, 30 min; at s = 2, 12 min. The hold (replaceAfterSeconds) keeps a
// passing slowdown from costing a restart; a job near its end, or one that checkpoints rarely,
// is better left on Report. The excluded nodes stay out for the job's life: a cluster short of
// nodes would leave the gang Pending (PodsBlocked says so), which maxReplacements bounds.
inline constexpr const char* kStragglerReplaced = "StragglerReplaced";

}  // namespace lockstep::reconcile
