// Which pod failures restart the gang and which end the job (spec.runPolicy.restartPolicy).
//
// Note [Exit codes]
// The agent exits with its failing worker's own exit code (DESIGN.md). Under ExitCode,
// codes 1..127 are the program's own verdict (a bug, a bad flag): permanent. 128 and up are
// deaths by signal (OOM kill, preemption, a hang killed by SIGKILL): retryable. The agent's
// own codes for a stall (75) and a rendezvous failure (76) are in 1..127 but mean "the gang
// broke", so they retry too. A pod that failed with no exit code at all (evicted, deleted,
// its node lost) is an infrastructure failure: retryable.
#pragma once

#include <string>

#include "reconcile/job.hpp"

namespace lockstep::reconcile {

bool is_retryable(RestartPolicy policy, const PodView& failed_pod);

// "pod tj-1 failed with exit code 137 (OOMKilled)", for conditions and events.
std::string describe_failure(const PodView& pod);

}  // namespace lockstep::reconcile
