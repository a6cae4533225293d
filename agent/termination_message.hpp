// What the agent leaves in its container's termination message.
//
// Note [Termination message]
// In a pod, the kubelet reads /dev/termination-log when the container ends and the operator
// quotes its last line in the TrainingJob's condition (describe_failure). The agent writes
// why it exits, then the failing rank's last lines (sent through the restart barrier when
// that rank ran on another node), so that last line is the program's own
// last words (a flag error, a Python exception) rather than the agent's summary. The file
// exists only in a container (the kubelet mounts it; the agent never creates one under
// /dev); LOCKSTEP_TERMINATION_LOG names another path. Kubernetes keeps 4096 bytes of it:
// the end is kept.
//   A run whose workers all exited 0 has no last words: node 0's agent writes rank 0's progress
// there instead, one line, `lockstep-progress step=N[ total=M][ restarts=K reason=W rank=R exit=E]`, which the operator shows as
// the finished job's progress once the pods and their /metrics are gone (Note [Final progress]
// in operator/reconcile/progress.hpp, which parses it strictly: keep the two in step).
#pragma once

#include <string>
#include <vector>

#include "metrics.hpp"

namespace lockstep::agent {

// Why the agent exits and the failing rank's last lines `tail`, the end kept; first, when
// `silent_peer` >= 0, the line that names the silent node (Note [Silent peer] in
// `agent/barrier/state.hpp`).
void write_termination_message(const std::string& why, const std::vector<std::string>& tail, int silent_peer);

// Rank 0's progress line for a run that succeeded; nothing when rank 0 reported no step.
void write_progress_summary(const Metrics& metrics);

}  // namespace lockstep::agent
