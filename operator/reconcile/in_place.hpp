// In-place restarts (#14; docs/operator.md, "In-place restarts"): what rank 0's
// agent says about the restarts it made in the same pods, and the words status and Events use
// for them. decide.cpp counts them into the status (Note [In-place restarts]).
//
// Note [In-place restarts]
// The agents restart every worker of a job in place, up to spec.runPolicy.inPlaceRestarts
// times per gang attempt, among themselves: the operator takes no part and learns of them
// only from rank 0's agent's /metrics, read with the progress (Note [Progress]) every
// --progress-period (30 s by default). That period bounds how soon status.inPlaceRestarts,
// the Restarted condition and the InPlaceRestart Event show one; several between two
// readings make one Event that says how many.
//   The agent's counter, lockstep_restarts_total{kind="in_place"}, starts at 0 with its pod,
// so it counts within one gang attempt. The status keeps the job's total (inPlaceRestarts) and
// how much of it came from the current attempt (currentAttemptInPlaceRestarts): a reading adds
// only what it shows beyond that, so a new leader, which has only the status, counts nothing
// twice and loses nothing. A gang restart sets the attempt's share to 0, and a reading counts
// only against the attempt of the pod it came from (a reading of an earlier attempt, still
// held when the gang restarts, is ignored).
//   When the job Succeeds, rank 0's agent's final line (Note [Final progress]) says the
// attempt's count and last cause, and what it shows beyond the status is counted then. Restarts
// made after the last reading of an attempt that ends otherwise (a gang restart, a failure) are
// not seen: the total is short by at most one period's worth.
#pragma once

#include <optional>
#include <string>

#include "reconcile/time.hpp"

namespace lockstep::reconcile {

// The most in-place restarts one reading may say (the CRD allows at most 100 per attempt).
inline constexpr int kMaxInPlaceReading = 1000;
// The longest restart reason taken from an agent (see word_or_nothing in in_place.cpp).
inline constexpr size_t kMaxReasonBytes = 64;

// One reading of rank 0's agent's in-place restart series.
struct InPlaceReading {
  int attempt = -1;              // the gang attempt of the pod it came from (its label)
  int restarts = 0;              // lockstep_restarts_total{kind="in_place"}: in that attempt
  std::optional<Time> last_at;   // lockstep_last_restart_timestamp_seconds{kind="in_place"}
  // The labels of lockstep_last_restart_info{kind="in_place"}, the last restart's cause:
  // reason (WorkerFailed, Stall), the rank and its exit code; "" where the agent says nothing
  // or says it in other than a CamelCase word of at most kMaxReasonBytes and decimal integers
  // of at most 9 digits (Note [Untrusted exposition]).
  std::string reason, rank, exit_code;
  bool operator==(const InPlaceReading&) const = default;
};

// From an agent's Prometheus text, for a pod of gang attempt `attempt`. nullopt when there is
// no lockstep_restarts_total{kind="in_place"} series (an agent without in-place restarts), or
// when the agent's lockstep_restart_attempt names another attempt: a reading must never be
// counted against the wrong one.
std::optional<InPlaceReading> parse_in_place(const std::string& metrics_text, int attempt);

// Whether rank 0's agent of gang attempt `attempt` has started its workers: a
// lockstep_worker_up sample of 1 while lockstep_restart_attempt says `attempt`. The agents start
// workers only once every node's agent joined the rendezvous (Note [Restart barrier] in
// agent/barrier/state.hpp), so this is Kueue's PodsReady (Note [One Workload per job] in kueue.hpp).
bool parse_workers_started(const std::string& metrics_text, int attempt);
// The last restart's cause, e.g. "rank 3 exited with code 137 (WorkerFailed)".
std::string describe_in_place_cause(const InPlaceReading& r);

// What the Restarted condition says of the last in-place restart, e.g. "rank 3 exited with
// code 137 (WorkerFailed); every worker restarted in place in the same pods (2 of 3 in gang
// attempt 0)". `budget`: the in-place restarts the attempt may make.
std::string in_place_message(const InPlaceReading& r, int budget);

// The InPlaceRestart Event for `added` restarts seen since the last reading: the message
// above, preceded by how many when more than one.
std::string in_place_event_message(const InPlaceReading& r, int budget, int added);

}  // namespace lockstep::reconcile
