// Which pod failures restart the gang and which end the job (spec.runPolicy.restartPolicy),
// and which of several failed pods is the cause.
//
// Note [Exit codes]
// The agent exits with its failing worker's own exit code (docs/exit-codes.md). Under ExitCode,
// codes 1..127 are the program's own verdict (a bug, a bad flag): permanent. 128 and up are
// deaths by signal (OOM kill, preemption, a hang killed by SIGKILL): retryable. The codes
// for a stall (75), a rendezvous failure (76) and a collective that lost its peer (77) are in
// 1..127 but mean "the gang broke", so they retry too. A pod that failed with no exit code
// at all (evicted, deleted, its node lost) is an infrastructure failure: retryable.
//
// Note [The first failure]
// When one rank dies its peers fail too, a moment later: a collective error, a lost peer,
// a stall. Deciding by whichever failed pod comes first by index would let a peer's
// consequence (often exit 1 from a torchrun-style program) end a job whose real failure, an
// OOM kill, should have restarted it. So the cause is judged by container termination time
// (finishedAt):
//  * a failure with a consequence code (75, 76, 77) gives way to a failure without one that
//    ended within `consequence_window` after it: a rank that exits 1 closes its sockets
//    before its container ends, so its peers' 77 can be recorded first;
//  * otherwise the earliest failure is the cause. finishedAt has second precision and comes
//    from each node's clock, so failures within `simultaneous` of the earliest are a tie,
//    and so is a failure with no time. A tie goes to the retryable failure: retrying a bug
//    costs one attempt, failing an OOM-killed job loses it;
//  * while a permanent (or consequence) verdict could still change because a peer has not
//    finished yet, the decision waits up to `settle` after the failure for the peers' status.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "reconcile/job.hpp"

namespace lockstep::reconcile {

struct FailureTiming {
  std::chrono::seconds simultaneous{2};
  std::chrono::seconds consequence_window{30};
  std::chrono::seconds settle{5};
};

bool is_retryable(RestartPolicy policy, const PodView& failed_pod);

// Exit codes by which a rank reports that the gang broke around it (75, 76, 77).
bool is_consequence(const PodView& failed_pod);

// The cause among the failed pods of one attempt (Note [The first failure]); null if none.
const PodView* first_failure(const std::vector<const PodView*>& failed, RestartPolicy policy,
                             const FailureTiming& timing = {});

// "pod tj-1 failed with exit code 137 (OOMKilled)", for conditions and events, followed by
// the last line of its termination message when it has one: `: "lockstep-trainer: ..."`.
std::string describe_failure(const PodView& pod);

}  // namespace lockstep::reconcile
