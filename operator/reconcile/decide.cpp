#include "reconcile/decide.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "lockstep/contract.hpp"
#include "reconcile/failure_policy.hpp"

namespace lockstep::reconcile {
namespace {

using std::chrono::milliseconds;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A restart delay as a message says it: "10s", "2m40s"; under a second (tests), "250ms".
std::string wait_text(milliseconds d) {
  return d < std::chrono::seconds(1) ? std::to_string(d.count()) + "ms" : format_duration(d.count() / 1000);
}

// See Note [Lost nodes]: a pod none of whose containers started (still Pending on its node).
bool never_ran(const PodView& p) { return p.phase == "Pending"; }

// Why the gang restarts: a failure (counted against backoffLimit), a lost node
// (Note [Lost nodes]) or a straggler left behind (Note [Replacing a straggler]); neither of the
// last two counts.
enum class RestartKind { Failure, NodeLost, Straggler };
RestartKind restart_kind(const std::string& reason) {
  return reason == "NodeLost" ? RestartKind::NodeLost
         : reason == kStragglerReplaced ? RestartKind::Straggler : RestartKind::Failure;
}

// The state one decide() call works on.
struct Pass {
  const Observed& in;
  const Options& opt;
  const JobView& job;
  Decision out;
  std::string now;
  std::vector<const PodView*> current, stale;  // by attempt
  std::map<const PodView*, std::string> lost;  // pods on a lost node, and why (Note [Lost nodes])
  Admission adm = Admission::NotQueued;        // Note [One Workload per job] in kueue.hpp

  Pass(const Observed& o, const Options& op) : in(o), opt(op), job(o.job) {
    out.status = job.status;
    now = format_time(o.now);
    for (const auto& p : o.pods) (p.attempt == job.status.restarts ? current : stale).push_back(&p);
    std::sort(current.begin(), current.end(), [](auto* a, auto* b) { return a->index < b->index; });
    if (!o.watch_nodes) return;
    for (const auto& p : o.pods) {
      auto node = p.node_name.empty() ? o.nodes.end() : o.nodes.find(p.node_name);
      if (node == o.nodes.end()) continue;
      if (auto why = node_lost(p, node->second)) lost.emplace(&p, *why);
    }
  }

  JobStatus& s() { return out.status; }
  const JobStatus& s_const() const { return out.status; }

  void requeue(milliseconds d) {
    d = std::max(d, milliseconds(1));
    if (!out.requeue_after || d < *out.requeue_after) out.requeue_after = d;
  }

  // Note [Events that say something new]
  // Each Event is one more request to the API server (bench/operator counts them per job), and
  // a job's conditions already say, with their times, what `kubectl describe tj` shows first.
  // So an Event is recorded where it says what the conditions do not keep: a failure and the
  // restart it brings, pods blocked, the deadline, suspend and resume, the end, and the gang
  // running again after a restart (the Restarted condition keeps only the last). The first
  // creation of the pods and the first start are the Created and Running conditions alone.
  void event(const std::string& type, const std::string& reason, const std::string& message) {
    out.events.push_back({type, reason, message});
  }

  // Sets a condition; lastTransitionTime moves only when its status changes. A False
  // condition that was never True is not added, unless `add_false` (it says something of its
  // own, as Isolated does).
  void condition(const std::string& type, const std::string& status, const std::string& reason,
                 const std::string& message, bool new_transition = false, bool add_false = false) {
    for (auto& c : s().conditions) {
      if (c.type != type) continue;
      if (c.status != status || new_transition) c.last_transition_time = now;
      c.status = status;
      c.reason = reason;
      c.message = message;
      return;
    }
    if (status == "False" && !add_false) return;
    s().conditions.push_back({type, status, reason, message, now});
  }

  // The Restarted condition: the last restart, in place or of the gang, and when it happened.
  void restarted(const std::string& reason, const std::string& message, Time at) {
    std::string when = format_time(at);
    for (auto& c : s().conditions) {
      if (c.type != "Restarted") continue;
      c = {"Restarted", "True", reason, message, when};
      return;
    }
    s().conditions.push_back({"Restarted", "True", reason, message, when});
  }

  // A pod on a lost node is deleted with grace period 0, even when a graceful deletion is
  // under way (Note [Lost nodes]); any other, once.
  void delete_pod(const PodView* p) {
    bool force = lost.count(p) > 0;
    if (p->deleting && (!force || p->deleted_at_once)) return;
    if (std::find(out.delete_pods.begin(), out.delete_pods.end(), p->name) != out.delete_pods.end()) return;  // once
    out.delete_pods.push_back(p->name);
    out.delete_pod_uids.push_back(p->uid);
    out.delete_pod_force.push_back(force);
  }

  void count_nodes() {
    NodeCounts n;
    std::set<std::string> deleted(out.delete_pods.begin(), out.delete_pods.end());
    for (const auto* p : current) {
      if (p->phase == "Succeeded") ++n.succeeded;
      else if (p->phase == "Failed") ++n.failed;
      else if (!p->deleting && !deleted.count(p->name)) ++n.active;
      if (p->ready && p->phase == "Running" && !deleted.count(p->name)) ++n.ready;
    }
    n.active += static_cast<int>(out.create_pods.size());
    s().nodes = n;
  }

  void finish(const std::string& phase, const std::string& reason, const std::string& message) {
    s().phase = phase;
    s().completion_time = now;
    condition(phase, "True", reason, message);
    condition("Running", "False", reason, message);
    condition("Restarting", "False", reason, message);
    event(phase == "Succeeded" ? "Normal" : "Warning", reason, message);
  }

  // --- the steps of decide(), in order ---------------------------------------------------

  void clean_finished_pods() {
    for (const auto& p : in.pods) {
      bool remove = job.clean_pod_policy == CleanPodPolicy::All ||
                    (job.clean_pod_policy == CleanPodPolicy::Running && !p.finished());
      if (remove) delete_pod(&p);
    }
  }

  void expire_after_ttl() {
    if (!job.ttl_seconds_after_finished) return;
    auto done = parse_time(s().completion_time);
    if (!done) return;
    auto expire = *done + std::chrono::seconds(*job.ttl_seconds_after_finished);
    if (in.now >= expire) out.delete_job = true;
    else requeue(std::chrono::duration_cast<milliseconds>(expire - in.now));
  }

  // True when the job is suspended (and nothing else is to be done).
  bool handle_suspend() {
    if (job.suspend) {
      for (const auto& p : in.pods) delete_pod(&p);
      if (s().phase != "Suspended") {
        s().phase = "Suspended";
        condition("Suspended", "True", "Suspended", "spec.runPolicy.suspend is true: pods removed");
        condition("Running", "False", "Suspended", "the job is suspended");
        event("Normal", "Suspended", "job suspended; its pods are being removed");
      }
      return true;
    }
    const Condition* c = s().condition("Suspended");
    if (s().phase == "Suspended" || (c && c->status == "True")) {
      condition("Suspended", "False", "Resumed", "spec.runPolicy.suspend is false again");
      s().phase = "Pending";
      s().start_time = now;  // the deadline counts from resumption, as for batch/v1 Jobs
      event("Normal", "Resumed", "job resumed; recreating its pods");
    }
    return false;
  }

  // True when the deadline has passed (the job is now Failed).
  bool handle_deadline() {
    if (!job.active_deadline_seconds) return false;
    auto start = parse_time(s().start_time);
    if (!start) return false;
    auto end = *start + std::chrono::seconds(*job.active_deadline_seconds);
    if (in.now < end) {
      requeue(std::chrono::duration_cast<milliseconds>(end - in.now));
      return false;
    }
    for (const auto& p : in.pods) delete_pod(&p);
    finish("Failed", "DeadlineExceeded",
           "the job ran longer than spec.runPolicy.activeDeadlineSeconds=" +
               std::to_string(*job.active_deadline_seconds));
    return true;
  }

  // See Note [In-place restarts]: what rank 0's agent counted beyond what the status holds for
  // this attempt is added to the job's total, with the Restarted condition and one Event.
  void count_in_place_restarts() { count_in_place_restarts(in.in_place); }
  void count_in_place_restarts(const std::optional<InPlaceReading>& r) {
    if (!r || r->attempt != s().restarts) return;  // none yet, or a reading of an earlier attempt
    int added = r->restarts - s().current_attempt_in_place_restarts;
    if (added <= 0) return;
    s().in_place_restarts += added;
    s().current_attempt_in_place_restarts = r->restarts;
    restarted("InPlaceRestart", in_place_message(*r, job.in_place_budget()), r->last_at.value_or(in.now));
    event("Warning", "InPlaceRestart", in_place_event_message(*r, job.in_place_budget(), added));
  }

  // See Note [Lost nodes]: a pod of the current attempt, not finished, on a lost node fails the
  // job or restarts the gang at once, whatever else failed (its peers' failures are likely
  // its consequences). True when it acted.
  bool handle_lost_nodes() {
    std::vector<std::string> why, nodes;
    int more = 0;
    for (const auto* p : current) {
      auto it = lost.find(p);
      if (it == lost.end() || p->finished()) continue;
      if (never_ran(*p)) {  // PodsBlocked, not lost (report_blocked_pods)
        if (p->deleting) delete_pod(p);  // Kubernetes removes it; no kubelet will confirm that
        continue;
      }
      if (why.size() < 2) why.push_back("pod " + p->name + " (rank " + std::to_string(p->index) + ") lost its node: " + it->second);
      else ++more;  // the message stays bounded however many are lost
      if (nodes.size() < kMaxLostNodes && std::find(nodes.begin(), nodes.end(), p->node_name) == nodes.end())
        nodes.push_back(p->node_name);
    }
    if (why.empty()) return false;
    std::string what = join(why);
    if (more > 0) what += ", and " + std::to_string(more) + " more pod(s) on lost nodes";
    lose_nodes(what, nodes);
    return true;
  }

  // The gang lost `nodes` (`what` says how): restartPolicy Never fails the job, and so does a
  // loss past the cap of lost-node restarts in a row; any other restarts the gang.
  // See Note [Lost nodes] and Note [Lost-node restarts in a row].
  void lose_nodes(const std::string& what, const std::vector<std::string>& nodes) {
    if (job.restart_policy == RestartPolicy::Never) {
      finish("Failed", "NodeLost", what + "; spec.runPolicy.restartPolicy=Never does not retry it");
      clean_finished_pods();
      return;
    }
    if (node_lost_in_a_row() > opt.max_node_lost_restarts_in_a_row) {
      finish("Failed", "NodeLostRestartsExceeded",
             what + "; the gang already restarted " + std::to_string(s().consecutive_node_lost_restarts) +
                 " times in a row for lost nodes, the most the operator makes without an attempt that ran for "
                 "--restart-backoff-reset between them: the nodes it lands on keep failing (look at them, and at "
                 "tolerations that put the pods back on a NotReady or tainted node)");
      clean_finished_pods();
      return;
    }
    restart_gang("NodeLost", what, RestartKind::NodeLost, nodes);
  }

  // The lost-node restarts in a row that one more would make: 1 after an attempt that ran
  // stably. See Note [Lost-node restarts in a row].
  int node_lost_in_a_row() const {
    const JobStatus& st = out.status;
    return ran_stably() ? 1 : std::min(st.consecutive_node_lost_restarts, st.node_lost_restarts) + 1;
  }

  // How long the attempt after the restart just made waits (Note [Backoff reset], Note
  // [Lost-node restarts in a row]): none for the first lost-node restart in a row.
  // A straggler's replacement is no failure: the next attempt at once.
  milliseconds next_attempt_delay(RestartKind kind) const {
    const JobStatus& st = out.status;
    if (kind == RestartKind::Straggler) return milliseconds(0);
    if (kind == RestartKind::Failure) return restart_delay(st.consecutive_restarts, opt);
    if (st.consecutive_node_lost_restarts <= 1) return milliseconds(0);
    return restart_delay(st.consecutive_node_lost_restarts - 1, opt);
  }

  // See Note [Lost nodes]: a pod of the attempt that failed with exit code 76, whose agent says
  // pod R's agent went silent, while pod R is Running: pod R's node is lost. True when it acted.
  bool handle_silent_peer() {
    if (!in.watch_nodes) return false;
    for (const auto* p : current) {
      if (p->phase != "Failed" || p->exit_code != contract::kExitRendezvous) continue;
      auto rank = silent_peer(p->termination_message);
      if (!rank || *rank >= job.nodes) continue;
      const PodView* silent = nullptr;
      for (const auto* q : current)
        if (q->index == *rank && q->phase == "Running" && !q->deleting && !q->node_name.empty()) silent = q;
      if (!silent || silent == p) continue;
      const std::string node = printable(silent->node_name, kMaxNodeName);
      lost.emplace(silent, "its agent went silent to the gang (pod " + p->name + "'s agent heard nothing from it for the "
                           "agents' peer timeout), so node " + node + " is taken for lost before the node controller "
                           "marks it");
      lose_nodes("pod " + silent->name + " (rank " + std::to_string(silent->index) + ") on node " + node +
                     " went silent: " + describe_failure(*p),
                 {silent->node_name});
      return true;
    }
    return false;
  }

  // Whether the attempt now ending was Running for the stable stretch (Note [Backoff reset]).
  bool ran_stably() const {
    if (opt.restart_backoff_reset.count() <= 0 || job.status.phase != "Running") return false;
    const Condition* c = job.status.condition("Running");
    auto since = c && c->status == "True" ? parse_time(c->last_transition_time) : std::nullopt;
    return since && in.now - *since >= opt.restart_backoff_reset;
  }

  // Every pod of the attempt deleted, the next attempt after the backoff. `what` says why;
  // `kind` NodeLost: a lost node's restart (of `lost_nodes`), which backoffLimit does not count
  // and whose backoff counts the lost-node restarts in a row; Straggler: one that leaves a
  // straggler's node, counted by the caller, with no backoff and no count in a row.
  // See Note [Lost nodes], Note [Lost-node restarts in a row] and Note [Replacing a straggler].
  void restart_gang(const std::string& reason, const std::string& what, RestartKind kind,
                    const std::vector<std::string>& lost_nodes = {}) {
    const bool node_lost = kind == RestartKind::NodeLost;
    // See Note [Partly succeeded]: the whole gang reruns, the pods that succeeded included.
    std::vector<std::string> succeeded;
    for (const auto* p : current) {
      if (p->phase == "Succeeded") succeeded.push_back(p->name);
      delete_pod(p);
    }
    const int in_place = s().current_attempt_in_place_restarts;
    const bool stable = ran_stably();  // each count starts afresh after a stable run
    if (node_lost) {
      s().consecutive_node_lost_restarts = node_lost_in_a_row();
      if (stable) s().consecutive_restarts = 0;
    } else if (kind == RestartKind::Straggler) {
      if (stable) s().consecutive_restarts = s().consecutive_node_lost_restarts = 0;
    } else {
      s().consecutive_restarts = stable ? 1 : std::min(s().consecutive_restarts, s().restarts) + 1;
      if (stable) s().consecutive_node_lost_restarts = 0;
    }
    s().restarts += 1;
    if (node_lost) s().node_lost_restarts += 1;
    const milliseconds wait = next_attempt_delay(kind);
    s().lost_nodes = lost_nodes;
    s().current_attempt_in_place_restarts = 0;  // the new pods' agents count from 0
    s().phase = "Restarting";
    std::string msg = what + "; restarting the gang as attempt " + std::to_string(s().restarts);
    if (s().node_lost_restarts == 0 && s().stragglers.replacements == 0)
      msg += " of " + std::to_string(job.backoff_limit);
    else
      msg += " (" + std::to_string(counted_restarts()) + " of spec.runPolicy.backoffLimit=" +
             std::to_string(job.backoff_limit) + "; " + uncounted_kinds() + " do not count)";
    if (node_lost)  // Note [Lost-node restarts in a row]
      msg += "; lost-node restart " + std::to_string(s().consecutive_node_lost_restarts) + " in a row of at most " +
             std::to_string(opt.max_node_lost_restarts_in_a_row) + ", the next attempt " +
             (wait.count() > 0 ? "after " + wait_text(wait) : "at once");
    if (in_place > 0)
      msg += ", after " + std::to_string(in_place) + " in-place restart" + (in_place == 1 ? "" : "s") +
             " in attempt " + std::to_string(s().restarts - 1);
    if (!succeeded.empty())
      msg += " (" + join(succeeded) + " had succeeded; every rank reruns from the last checkpoint)";
    condition("Restarting", "True", reason, msg, /*new_transition=*/true);  // backoff counts from now
    condition("Running", "False", reason, msg);
    restarted(reason, msg, in.now);
    event("Warning", reason, msg);
    end_straggler_verdict(kind == RestartKind::Straggler ? "Replaced" : "GangRestarted", msg);
    requeue(wait);
  }

  // The gang restarts that count against backoffLimit, and what the others are.
  int counted_restarts() const {
    const JobStatus& st = out.status;
    return st.restarts - st.node_lost_restarts - st.stragglers.replacements;
  }
  std::string uncounted_kinds() const {
    const JobStatus& st = out.status;
    if (st.node_lost_restarts > 0 && st.stragglers.replacements > 0)
      return "restarts for lost nodes and straggler replacements";
    return st.node_lost_restarts > 0 ? "restarts for lost nodes" : "straggler replacements";
  }

  // A failed or vanished pod of the current attempt: fail the job or restart the gang.
  // True when it acted (or is waiting for the peers' status to judge the failure).
  bool handle_failure() {
    std::vector<const PodView*> failed;
    for (const auto* p : current)
      if (p->phase == "Failed") failed.push_back(p);
    const PodView* cause = first_failure(failed, job.restart_policy, opt.failure_timing);
    PodView vanished;
    if (!cause) {
      // A pod that disappears after the gang started running breaks every collective.
      if (s().phase != "Running") return false;
      std::set<int> present;
      for (const auto* p : current) present.insert(p->index);
      for (int i = 0; i < job.nodes && !cause; ++i) {
        if (present.count(i)) continue;
        vanished.name = job.name + "-" + std::to_string(i);
        vanished.index = i;
        vanished.reason = "PodDeleted";
        cause = &vanished;
      }
      if (!cause) return false;
    }
    bool retryable = is_retryable(job.restart_policy, *cause);
    // See Note [The first failure]: a verdict that a peer's status could still overturn waits.
    if ((!retryable || is_consequence(*cause)) && cause->finished_at) {
      bool peers_running = false;
      for (const auto* p : current) peers_running |= !p->finished() && !p->deleting;
      auto until = *cause->finished_at + opt.failure_timing.settle;
      until = std::min(until, in.now + opt.failure_timing.settle);  // a kubelet clock ahead of ours
      if (peers_running && in.now < until) {
        requeue(std::chrono::duration_cast<milliseconds>(until - in.now));
        return true;
      }
    }
    std::string what = describe_failure(*cause);
    std::vector<std::string> after;
    for (const auto* p : failed)
      if (p != cause) after.push_back(p->name + (p->exit_code >= 0 ? " (exit " + std::to_string(p->exit_code) + ")" : ""));
    if (!after.empty()) what += ", first; " + join(after) + " failed as well";
    if (!retryable) {
      std::string policy = job.restart_policy == RestartPolicy::Never ? "Never" : "ExitCode";
      finish("Failed", job.restart_policy == RestartPolicy::Never ? "PodFailed" : "NonRetryableExitCode",
             what + "; spec.runPolicy.restartPolicy=" + policy + " does not retry it");
      clean_finished_pods();
      return true;
    }
    const int counted = counted_restarts();  // Note [Lost nodes], Note [Replacing a straggler]
    if (counted >= job.backoff_limit) {
      const int uncounted = s().restarts - counted;
      finish("Failed", "BackoffLimitExceeded",
             what + "; " + std::to_string(counted) + " gang restart(s) reached spec.runPolicy.backoffLimit=" +
                 std::to_string(job.backoff_limit) +
                 (uncounted > 0 ? " (besides " + std::to_string(uncounted) + " " +
                                      (s().stragglers.replacements > 0 ? uncounted_kinds() : "for lost nodes") +
                                      ", which do not count)"
                                : ""));
      clean_finished_pods();
      return true;
    }
    restart_gang("GangRestart", what, RestartKind::Failure);
    return true;
  }

  // Note [Pods that do not terminate]
  // The next attempt waits until every pod of the earlier one is gone (its ranks must not meet
  // the new ones). A pod on a lost node is force-deleted (Note [Lost nodes]), so it goes at
  // once unless a finalizer holds it; one held past its deletion deadline otherwise (a
  // finalizer of some controller, a kubelet that does not answer on a node not judged lost,
  // or any node with the node watch off) would hold the gang restart forever without a word;
  // once one is kStuckAfter past due, the StuckTerminating condition names each, how long past
  // due, and its finalizers, refreshed every kStuckAfter.
  static constexpr std::chrono::seconds kStuckAfter{30};
  void report_stuck_terminating() {
    std::vector<std::string> stuck;
    for (const auto* p : stale) {
      if (!p->deleting || !p->deletion_due) continue;
      auto overdue = std::chrono::duration_cast<std::chrono::seconds>(in.now - *p->deletion_due);
      if (overdue < kStuckAfter) {
        requeue(std::chrono::duration_cast<milliseconds>(kStuckAfter - overdue));
        continue;
      }
      stuck.push_back(p->name + " (" + std::to_string(overdue.count()) + " s past its deletion" +
                      (p->finalizers.empty() ? "" : "; finalizers: " + p->finalizers) +
                      (lost.count(p) ? "; on a lost node, force-deleted" : "") + ")");
    }
    if (stuck.empty()) return;
    requeue(kStuckAfter);
    condition("StuckTerminating", "True", "PodsNotTerminating",
              "gang restart " + std::to_string(s().restarts) + " waits for " + std::to_string(stuck.size()) +
                  " pod(s) of an earlier attempt that do not terminate: " + join(stuck) +
                  ". Remove what holds them (a finalizer), or, if a node is gone and the operator does not "
                  "watch nodes (--node-watch), kubectl delete pod --force --grace-period=0");
  }

  // True while the next attempt must wait (old pods still there, or the backoff).
  bool waiting_to_restart() {
    bool old_pods = !stale.empty();
    for (const auto* p : stale) delete_pod(p);
    if (old_pods) {
      report_stuck_terminating();
      return true;  // their deletion events bring us back
    }
    condition("StuckTerminating", "False", "PodsTerminated", "every pod of the earlier attempts is gone");
    if (s().phase != "Restarting") return false;
    const Condition* c = s().condition("Restarting");
    // See Note [Lost-node restarts in a row]: the first lost-node restart in a row waits nothing.
    const milliseconds delay = next_attempt_delay(restart_kind(c ? c->reason : ""));
    auto since = c ? parse_time(c->last_transition_time) : std::nullopt;
    if (!since || delay.count() <= 0) return false;
    auto ready_at = *since + delay;
    if (in.now < ready_at) {
      requeue(std::chrono::duration_cast<milliseconds>(ready_at - in.now));
      return true;
    }
    return false;
  }

  bool handle_success() {
    int succeeded = 0;
    for (const auto* p : current) succeeded += p->phase == "Succeeded";
    if (succeeded < job.nodes) return false;
    finish("Succeeded", "AllNodesSucceeded", "all " + std::to_string(job.nodes) + " pods succeeded");
    // See Note [Final progress]: rank 0's last step as its agent left it in the termination
    // message, else the newest reading with every step taken (every rank exited 0).
    const PodView* rank0 = nullptr;
    for (const auto* p : current)
      if (p->index == 0 && !rank0) rank0 = p;
    auto summary = rank0 ? parse_final_summary(rank0->termination_message) : std::nullopt;
    s().progress = final_progress(in.progress ? in.progress : s().progress, summary);
    // Its in-place restarts too: those made after the last reading of its /metrics count now.
    if (summary && summary->in_place_restarts >= 0) {
      InPlaceReading r;
      r.attempt = s().restarts;  // rank0 is a pod of the current attempt
      r.restarts = summary->in_place_restarts;
      r.reason = summary->reason, r.rank = summary->rank, r.exit_code = summary->exit_code;
      count_in_place_restarts(r);
    }
    clean_finished_pods();
    expire_after_ttl();
    return true;
  }

  // --- stragglers (Note [Straggler condition], Note [Replacing a straggler]) ---------------

  // The gang restarts under a standing verdict: it was the old attempt's, and the new one is
  // judged afresh (and Replace's hold counts from its own verdict).
  void end_straggler_verdict(const std::string& reason, const std::string& why) {
    const Condition* c = s().condition("Straggler");
    if (job.straggler_policy == StragglerPolicy::Ignore || !c || c->status != "True") return;
    condition("Straggler", "False", reason, "the verdict ended with its gang attempt: " + why);
  }

  // Node 0's agent's verdict, from a reading of the current attempt: the Straggler condition,
  // its Events, and under Replace the gang restart. True when it restarted the gang.
  bool handle_stragglers() {
    if (job.straggler_policy == StragglerPolicy::Ignore || !in.stragglers) return false;
    const StragglerReading& r = *in.stragglers;
    if (r.attempt != s().restarts) return false;  // a reading of an earlier attempt
    const Condition* was = s().condition("Straggler");
    const bool was_true = was && was->status == "True";
    const std::string was_message = was ? was->message : "";  // `was` is rewritten below
    // A True one from before the gang last started running (a suspend, an eviction) is another
    // gang's: this verdict is new, and Replace's hold counts from it.
    const bool stale = was_true && raised_before_the_gang_ran(*was);
    if (r.stragglers.empty()) {
      if (!was_true) return false;
      const std::string msg = verdict_subject(was_message) + " is no longer slower than the gang's typical rank";
      condition("Straggler", "False", "Recovered", msg);
      event("Normal", "StragglerRecovered", msg);
      return false;
    }
    const StragglerVerdict& worst = r.stragglers.front();
    const PodView* pod = nullptr;
    for (const auto* p : current)
      if (p->index == worst.node_rank && !pod) pod = p;
    const std::string node = pod ? pod->node_name : "";
    const std::string base = straggler_message(r, job.name + "-" + std::to_string(worst.node_rank),
                                               printable(node, kMaxNodeName));
    const std::string msg = base + replace_note(node);
    if (!was_true || stale || !same_verdict(was_message, msg))
      condition("Straggler", "True", "SlowRank", msg, /*new_transition=*/stale);
    if (!was_true || stale || verdict_subject(was_message) != verdict_subject(msg)) event("Warning", "Straggler", msg);
    return replace_straggler(node, base);
  }

  bool raised_before_the_gang_ran(const Condition& verdict) const {
    const Condition* running = job.status.condition("Running");
    auto ran = running && running->status == "True" ? parse_time(running->last_transition_time) : std::nullopt;
    auto raised = parse_time(verdict.last_transition_time);
    return ran && raised && *raised < *ran;
  }

  // What Replace will do about the verdict, as the condition says it; "" under Report.
  std::string replace_note(const std::string& node) const {
    if (job.straggler_policy != StragglerPolicy::Replace) return "";
    if (node.empty()) return "; not replaced: its pod is on no node yet (spec.nodeName unset)";
    if (s_const().stragglers.replacements >= job.straggler_max_replacements)
      return "; not replaced: spec.runPolicy.stragglers.maxReplacements=" + std::to_string(job.straggler_max_replacements) +
             " reached";
    return "; the gang leaves node " + printable(node, kMaxNodeName) + " once this has held for " +
           "spec.runPolicy.stragglers.replaceAfterSeconds=" + std::to_string(job.straggler_replace_after_seconds);
  }

  // See Note [Replacing a straggler]: the gang restarted off `node` once the verdict has held for
  // replaceAfterSeconds, within maxReplacements. True when it restarted the gang.
  bool replace_straggler(const std::string& node, const std::string& verdict) {
    if (job.straggler_policy != StragglerPolicy::Replace || node.empty() || s().phase != "Running") return false;
    if (s().stragglers.replacements >= job.straggler_max_replacements) return false;
    const Condition* c = s().condition("Straggler");
    auto since = c ? parse_time(c->last_transition_time) : std::nullopt;
    if (!since) return false;
    const auto due = *since + std::chrono::seconds(job.straggler_replace_after_seconds);
    if (in.now < due) {
      requeue(std::chrono::duration_cast<milliseconds>(due - in.now));
      return false;
    }
    auto& st = s().stragglers;
    st.replacements += 1;
    if (std::find(st.excluded_nodes.begin(), st.excluded_nodes.end(), node) == st.excluded_nodes.end() &&
        st.excluded_nodes.size() < static_cast<size_t>(kMaxStragglerReplacements))
      st.excluded_nodes.push_back(node);
    restart_gang(kStragglerReplaced,
                 verdict + "; leaving node " + printable(node, kMaxNodeName) + " out of every later attempt (replacement " +
                     std::to_string(st.replacements) + " of spec.runPolicy.stragglers.maxReplacements=" +
                     std::to_string(job.straggler_max_replacements) + ")",
                 RestartKind::Straggler);
    return true;
  }

  void create_missing() {
    if (!in.service_exists) out.create_service = true;
    if (job.gang) {
      if (in.gang_support == GangSupport::Available) {
        if (!in.podgroup_exists) out.create_podgroup = true;
        condition("GangSchedulingUnavailable", "False", "PodGroupCRDInstalled", "PodGroup created");
      } else {
        condition("GangSchedulingUnavailable", "True", "PodGroupCRDMissing",
                  "spec.scheduling.gang is true but the PodGroup CRD (scheduling.x-k8s.io/v1alpha1) is not "
                  "installed; pods are scheduled one by one. Install scheduler-plugins' coscheduling, or set "
                  "spec.scheduling.gang=false");
      }
    }
    std::set<int> present;
    for (const auto* p : current) present.insert(p->index);
    // Note [Pods placed by hand]; Note [Agent injection] in manifests.hpp.
    for (int i = 0; i < job.nodes && job.template_node_name.empty() && job.template_agent_overlay.empty(); ++i)
      if (!present.count(i)) out.create_pods.push_back(i);
    if (!out.create_pods.empty()) out.avoid_nodes = s().lost_nodes;
    if (!out.create_pods.empty()) out.exclude_nodes = s().stragglers.excluded_nodes;
    // See Note [Events that say something new]: the condition, not an Event, says the pods were
    // created. Set while the attempt's pods exist, not only in the pass that creates them, so
    // a status write put off (Note [Batched status writes]) still carries it.
    if (!out.create_pods.empty() || !current.empty())
      condition("Created", "True", "PodsCreated", "pods of attempt " + std::to_string(s().restarts) + " created");
  }

  // A pod of the attempt that cannot start: the scheduler finds no node for it, or its
  // container cannot be created (the image cannot be pulled, a missing Secret, ...), or it is
  // bound to a lost node it never ran on (Note [Lost nodes]); or the template sets nodeName,
  // so no pod is made (Note [Pods placed by hand]). The job says which pod and why (condition
  // PodsBlocked, and a Warning Event when it first happens), instead of a silent Pending.
  void report_blocked_pods(bool started) {
    std::string reason, message;
    if (!started && !job.template_node_name.empty()) {
      reason = "TemplateNodeName";  // the CRD's words for it, and what the operator does
      message = "no pod is created while spec.template.spec.nodeName is set (" +
                printable(job.template_node_name, kMaxNodeName) +
                "): spec.template.spec.nodeName places every pod of the gang on one node by hand, past the "
                "scheduler and gang scheduling; remove it, and choose nodes with spec.template.spec.nodeSelector "
                "(kubernetes.io/hostname) or affinity";
    } else if (!started && !job.template_agent_overlay.empty()) {
      reason = "TemplateOverlaysAgent";
      message = job.template_agent_overlay + "; the operator creates no pod while it does";
    } else if (!started) {
      for (const auto* p : current)
        if (blocked(*p, reason, message)) break;
    }
    const Condition* was = s().condition("PodsBlocked");
    bool was_blocked = was && was->status == "True";
    if (reason.empty()) {
      if (was_blocked) condition("PodsBlocked", "False", "PodsStarted", "every pod of the attempt could start");
      return;
    }
    condition("PodsBlocked", "True", reason, message);
    if (!was_blocked) event("Warning", "PodsBlocked", message);
  }

  // Whether pod `p` of the attempt cannot start, and why (report_blocked_pods).
  bool blocked(const PodView& p, std::string& reason, std::string& message) const {
    static const std::set<std::string> stuck = {"ErrImagePull",          "ImagePullBackOff",           "InvalidImageName",
                                                "ErrImageNeverPull",     "CreateContainerConfigError", "CreateContainerError",
                                                "RunContainerError",     "PreCreateHookError",         "PreStartHookError"};
    if (p.phase != "Pending" || p.deleting) return false;
    if (auto it = lost.find(&p); it != lost.end()) {
      reason = "BoundToLostNode";
      message = "pod " + p.name + " never started on its node: " + it->second +
                "; it is made again once Kubernetes removes it (the pod garbage collector for a node that is gone, "
                "the taint manager's eviction for a NotReady or tainted one)";
    } else if (!p.unschedulable_message.empty()) {
      reason = "Unschedulable";
      message = "pod " + p.name + " cannot be scheduled: " + p.unschedulable_message;
      // A gang scheduler's words are about its plugin ("rejection in PostFilter"): say
      // what it means for the job.
      if (job.gang && !job.scheduler_name.empty() && in.gang_support == GangSupport::Available)
        message += " (gang scheduling by " + job.scheduler_name + ": none of the " + std::to_string(job.nodes) +
                   " pods starts until all of them fit)";
    } else if (stuck.count(p.waiting_reason)) {
      reason = p.waiting_reason;
      message = "pod " + p.name + " cannot start: " + p.waiting_reason +
                (p.waiting_message.empty() ? "" : ": " + p.waiting_message);
    } else {
      return false;
    }
    return true;
  }

  // Running once every pod of the attempt has started (Running, or already Succeeded), and
  // then until the job finishes or restarts: a pod that finishes first does not make the
  // gang Pending again (pods never go back to Pending; a vanished one restarts the gang).
  void update_phase() {
    int running = 0, succeeded = 0;
    for (const auto* p : current) {
      running += p->phase == "Running" && !p->deleting;
      succeeded += p->phase == "Succeeded";
    }
    bool started = out.create_pods.empty() && running > 0 && running + succeeded == job.nodes;
    report_blocked_pods(started);
    if (started && s().phase != "Running") {
      s().phase = "Running";
      s().lost_nodes.clear();  // the attempt runs: its pods found nodes
      std::string msg = "all " + std::to_string(job.nodes) + " pods are running";
      condition("Running", "True", "AllNodesRunning", msg);
      condition("Restarting", "False", "AllNodesRunning", msg);
      // See Note [Events that say something new]: the first start is the Running condition and
      // phase; after a gang restart, the Event closes the GangRestart one in the job's history.
      if (s().restarts > 0) event("Normal", "Running", msg + " again (attempt " + std::to_string(s().restarts) + ")");
    } else if (s().phase.empty()) {
      s().phase = "Pending";
    }
  }

  // See Note [Job isolation]: kept while the job asks for it, finished or not (cleanPodPolicy None
  // keeps pods), and removed once it does not.
  // status.isolation and the Isolated condition say what applies, and why, from the first
  // status write on (so they cost no write of their own): True while the job's policy is kept
  // (being made counts: a refused create is retried), False with what reaches the pods when
  // the job asked for none (or the operator's default is None), or when a NetworkPolicy of the
  // job's name that the job does not control is in the way: that one is left alone, and the
  // job is not isolated by it.
  void isolate() {
    const bool wanted = job.isolation == Isolation::NetworkPolicy;
    const bool taken = wanted && in.network_policy_uid.empty() && in.network_policy_taken;
    if (wanted && !taken && in.network_policy_uid.empty()) out.create_network_policy = true;
    if (!wanted && !in.network_policy_uid.empty()) out.delete_network_policy_uid = in.network_policy_uid;
    std::string reason, message;
    if (wanted && !taken) {
      reason = "NetworkPolicy";
      message = "NetworkPolicy " + job.name + " admits only the job's own pods, and the operator's and the monitoring "
                "namespaces' pods on metrics.port (enforced where the cluster's CNI enforces NetworkPolicy)";
    } else if (taken) {
      reason = "NetworkPolicyNameTaken";
      message = "spec.isolation is NetworkPolicy, but a NetworkPolicy named " + job.name +
                " that this job does not own is there, and it is left alone: the job is not isolated by the "
                "operator; delete or rename that policy";
    } else {
      reason = "NotRequested";
      message = std::string(job.isolation_given ? "spec.isolation is None" : "spec.isolation is unset and the operator's default is None") +
                ": any pod of the cluster can reach the job's rendezvous (masterPort), barrier (masterPort+1), "
                "metrics.port and collective ports; set spec.isolation: NetworkPolicy to admit only the job's own pods";
    }
    s().isolation = wanted && !taken ? "NetworkPolicy" : "None";
    condition("Isolated", wanted && !taken ? "True" : "False", reason, message, /*new_transition=*/false,
              /*add_false=*/true);
  }


  // --- Kueue (Note [One Workload per job] in kueue.hpp) ------------------------------------

  // A Kueue reason is quoted as the condition's reason when it is a CamelCase word.
  static std::string word_or(const std::string& reason, const std::string& fallback) {
    if (reason.empty() || reason.size() > 64 || !std::isupper(static_cast<unsigned char>(reason[0]))) return fallback;
    for (char ch : reason)
      if (!std::isalnum(static_cast<unsigned char>(ch))) return fallback;
    return reason;
  }

  std::string workload_ref() const {
    return "Workload " + workload_name(job) + " in LocalQueue " + queue_of(job);
  }

  // Waiting in the queue: no pods; the Queued condition says why, in Kueue's words.
  void queued(const std::string& reason, const std::string& message) {
    for (const auto& p : in.pods) delete_pod(&p);
    if (s().phase != "Queued" && s().phase != "Suspended") {
      s().phase = "Queued";
    }
    condition("Queued", "True", reason, message);
    condition("Running", "False", "Queued", "the job waits in its queue");
  }

  // Why Kueue has not admitted the Workload: its QuotaReserved or Admitted condition.
  void waiting() {
    const WorkloadView& wl = *in.workload;
    const WorkloadCondition* quota = wl.condition("QuotaReserved");
    const WorkloadCondition* admitted = wl.condition("Admitted");
    std::string reason = "Pending", why = "waiting for Kueue to consider it";
    if (!wl.active) {
      const WorkloadCondition* ev = wl.condition("Evicted");
      reason = "Inactive";
      why = "the Workload is inactive (spec.active: false" +
            std::string(wl.inactive_for_suspend ? ", for spec.runPolicy.suspend)"
                                                : ", set by Kueue or an administrator: the job waits until it is "
                                                  "active again)") +
            (ev && !ev->c.message.empty() ? "; " + ev->c.reason + ": " + ev->c.message : "");
    } else if (quota && quota->c.status == "False") {
      reason = word_or(quota->c.reason, "Pending");
      why = quota->c.reason + (quota->c.message.empty() ? "" : ": " + quota->c.message);
    } else if (quota && quota->c.status == "True") {
      reason = word_or(admitted ? admitted->c.reason : "", "QuotaReserved");
      why = "quota reserved in ClusterQueue " + wl.cluster_queue + "; waiting for admission" +
            (admitted && !admitted->c.message.empty() ? ": " + admitted->c.message : "");
    }
    queued(reason, workload_ref() + ": " + why);
  }

  // Evicted: every pod goes; once none is left, the admission is given back and the job waits
  // in the queue again. An eviction is no failure: no restart is counted. `suspended`: the
  // eviction of a suspended job (Deactivated), whose phase stays Suspended.
  void evicted(bool suspended) {
    const WorkloadView& wl = *in.workload;
    const WorkloadCondition* ev = wl.condition("Evicted");
    const std::string ev_reason = ev ? ev->c.reason : "Evicted", ev_message = ev ? ev->c.message : "";
    const std::string msg = "evicted by Kueue (" + ev_reason + ")" + (ev_message.empty() ? "" : ": " + ev_message);
    int left = 0;
    for (const auto& p : in.pods) {
      delete_pod(&p);
      ++left;
    }
    if (!suspended) {
      const Condition* was = s().condition("Evicted");
      if (!was || was->status != "True") event("Warning", "Evicted", msg + "; stopping the gang, then back in the queue");
      condition("Evicted", "True", word_or(ev_reason, "Evicted"), msg);
      queued(word_or(ev_reason, "Evicted"),
             workload_ref() + ": " + msg + (left ? "; stopping the gang (" + std::to_string(left) + " pod(s) left)"
                                                 : "; waiting in the queue again"));
    }
    if (left) return;  // their deletions bring us back
    // The gang is gone: the quota goes back to Kueue, as its own job reconciler gives it back.
    const bool requeued = ev_reason == "Preempted" || ev_reason == "NodeFailures";
    out.workload.clear_admission = true;
    out.workload.conditions.push_back({"QuotaReserved", "False", "Pending", ev_message.empty() ? msg : ev_message, now});
    out.workload.conditions.push_back({"Admitted", "False", "NoReservation", "The workload has no reservation", now});
    out.workload.conditions.push_back({"Requeued", requeued ? "True" : "False", word_or(ev_reason, "Evicted"),
                                       ev_message.empty() ? msg : ev_message, now});
    if (wl.condition("PodsReady"))
      out.workload.conditions.push_back({"PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", now});
    // The next admission is a fresh start: the deadline counts from it (as a batch Job's
    // startTime after Kueue suspends it), and its pods' agents count in-place restarts from 0.
    if (!suspended) s().start_time.clear();
    s().current_attempt_in_place_restarts = 0;
  }

  // spec.active follows spec.runPolicy.suspend; a Workload someone else deactivated stays so
  // (Note [Who deactivates] in kueue.hpp).
  void sync_active() {
    if (!in.workload) return;
    if (job.suspend && in.workload->active) out.workload.set_active = false;
    if (!job.suspend && !in.workload->active && in.workload->inactive_for_suspend) out.workload.set_active = true;
  }

  // While suspended: the Workload inactive, and an eviction (Deactivated) given back.
  void suspended_workload() {
    if (adm == Admission::NotQueued || !in.workload) return;
    sync_active();
    if (adm == Admission::Stopping) evicted(/*suspended=*/true);
  }

  // True when the gang may run: the job names no queue, or its Workload is admitted.
  bool admit() {
    std::string conflict;
    switch (adm) {
      case Admission::NotQueued:
        return true;
      case Admission::QueueConflict:
        queue_of(job, &conflict);
        queued("QueueConflict", conflict);
        return false;
      case Admission::KueueMissing:
        queued("KueueNotInstalled",
               "the job names LocalQueue " + queue_of(job) + " but the Kueue Workload API (kueue.x-k8s.io/v1beta2) "
               "is not served, or the operator may not use it (the chart's kueue.enabled grants that; the operator's "
               "log says which): it waits rather than run outside the queue's quota. Install Kueue, or remove the "
               "queue (the " + std::string("kueue.x-k8s.io/queue-name") + " label and spec.scheduling.queue)");
        return false;
      case Admission::CreateWorkload:
        out.workload.create = true;
        queued("WorkloadCreated", workload_ref() + ": created; waiting for Kueue");
        return false;
      case Admission::Replace:
        out.workload.replace = true;
        queued("WorkloadReplaced", workload_ref() + " was made for another shape of the job (changed while "
                                   "suspended): replacing it");
        return false;
      case Admission::Waiting:
        sync_active();
        waiting();
        return false;
      case Admission::Stopping:
        evicted(/*suspended=*/false);
        return false;
      case Admission::Admitted:
        sync_active();
        break;
    }
    const WorkloadView& wl = *in.workload;
    const Condition* q = s().condition("Queued");
    if (!q || q->status == "True")
      condition("Queued", "False", "Admitted", "Workload " + wl.name + " admitted by ClusterQueue " + wl.cluster_queue);
    const Condition* ev = s().condition("Evicted");
    if (ev && ev->status == "True") condition("Evicted", "False", "Readmitted", "admitted again by ClusterQueue " + wl.cluster_queue);
    if (s().phase == "Queued") s().phase = "Pending";
    return true;
  }

  // PodsReady, from what the agents know (Note [One Workload per job]).
  void pods_ready() {
    if (adm != Admission::Admitted || !in.workload) return;
    const WorkloadCondition* pr = in.workload->condition("PodsReady");
    const bool was_true = pr && pr->c.status == "True";
    const std::string was_reason = pr ? pr->c.reason : "";
    if (s().phase == "Running" && in.gang_joined) {
      if (!was_true)
        out.workload.conditions.push_back(
            {"PodsReady", "True", was_reason == "WaitForRecovery" || was_reason == "Recovered" ? "Recovered" : "Started",
             "every node's agent joined the rendezvous and started its workers (gang attempt " +
                 std::to_string(s().restarts) + ")",
             now});
    } else if (was_true && (s().phase == "Restarting" || s().phase == "Pending")) {
      out.workload.conditions.push_back({"PodsReady", "False", "WaitForRecovery",
                                         "the gang is restarting as attempt " + std::to_string(s().restarts), now});
    }
  }

  // A finished job's Workload is Finished, then its finalizer goes.
  void finish_workload() {
    if (!in.workload || in.workload->controller_uid != job.uid) return;
    if (!in.workload->finished()) {
      const Condition* done = s().condition(s().phase);
      out.workload.conditions.push_back({"Finished", "True", s().phase == "Succeeded" ? "Succeeded" : "Failed",
                                         done ? done->message : "the TrainingJob " + s().phase, now});
    } else if (in.workload->has_finalizer) {
      out.workload.remove_finalizer = true;
    }
  }

  void run() {
    if (job.deleting) return;
    isolate();
    s().observed_generation = job.generation;
    adm = admission(job, in.workload, in.kueue_served);
    s().queue = queue_of(job);
    if (job.status.finished()) {
      clean_finished_pods();
      expire_after_ttl();
      finish_workload();
      return;
    }
    if (handle_suspend()) {
      suspended_workload();
      return;
    }
    if (!admit()) return;
    run_gang();
    pods_ready();
  }

  // The gang's own story, once it may run.
  void run_gang() {
    if (s().start_time.empty()) s().start_time = now;
    count_in_place_restarts();  // before a gang restart can end the attempt they belong to
    if (handle_deadline()) return;
    if (handle_lost_nodes()) return;
    if (handle_silent_peer()) return;
    if (handle_failure()) return;
    if (waiting_to_restart()) return;
    if (handle_success()) return;
    if (handle_stragglers()) return;
    create_missing();
    update_phase();
    if (in.progress) s().progress = in.progress;
  }
};

}  // namespace

std::chrono::milliseconds restart_delay(int consecutive, const Options& options) {
  auto d = options.restart_backoff;
  for (int i = 1; i < consecutive && d < options.restart_backoff_max && d.count() > 0; ++i) d *= 2;
  return std::min(d, options.restart_backoff_max);
}

Decision decide(const Observed& observed, const Options& options) {
  Pass pass(observed, options);
  pass.run();
  if (!observed.job.deleting) pass.count_nodes();
  pass.out.status_changed = pass.out.status != observed.job.status;
  return std::move(pass.out);
}

}  // namespace lockstep::reconcile
