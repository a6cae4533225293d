// A stop on request: SIGTERM (the agent's, when Kueue preempts the job or the pod is deleted)
// or SIGINT (Ctrl-C) ends the run at a step every rank agrees on, checkpointed there.
//
// Note [Stop on request]
// A signal may reach the ranks at different moments, or only some of them (one pod's kubelet is
// quicker than another's), and a rank that left the loop alone would leave its peers blocked in
// the next step's collective. So the signal handler only records the signal (an atomic store
// and a write(2) of a line made beforehand: async-signal-safe), and the ranks agree at every step
// whether any of them has one: each rank's flag rides, as one float more, on a collective the step
// makes anyway, summed over the ranks (Note [Stop vote]): DDP's last gradient bucket, FSDP's
// gradient-norm all-reduce (--clip > 0); only FSDP with --clip 0 makes a 1-element all-reduce of
// its own, and one rank agrees with itself. Every rank reads the same sum after the same step, so
// every rank stops after that step: it is saved with the trainer's own checkpoint code (when a
// checkpoint directory is set), the ranks leave together, and the exit code is 128 + the signal
// (143 for SIGTERM, 130 for SIGINT; a rank stopped by a peer's signal says 143): a stop, not a
// failure, and never 0, which would tell the agent the training had finished. A resumed run starts
// at the next step: no step is lost and none is redone.
// A second signal during the stop is only logged: the checkpoint being written is never cut short
// by us (and a SIGKILL at the end of the agent's grace period cannot damage it either: Note
// [Durable checkpoint writes]). The handlers are installed only once training starts: before
// that (rendezvous, resume) there is nothing to save, and a signal ends the process at once as
// before. Note [Stop watchdog] covers a rank that cannot reach the end of its step.
#pragma once

#include <csignal>
#include <cstdint>
#include <string>

namespace lockstep::trainer::stop {

// Installs the SIGTERM and SIGINT handlers (SA_RESTART), naming `rank` in their lines, and
// starts the watchdog thread (Note [Stop watchdog]). Idempotent.
void install(int rank);

// The first stop signal this process received (SIGTERM or SIGINT), or 0.
int signal_received();

// "SIGTERM", "SIGINT".
inline const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

// Seconds since that signal arrived (the monotonic clock), or -1 without one.
double seconds_since_signal();

// Note [Stop vote]
// Each step every rank votes 1 if it has a stop signal, else 0, and the ranks' sum comes back to
// every rank in one collective the step makes anyway: DDP's last gradient bucket carries the vote
// as one float after its gradients (read as that bucket is launched), FSDP's all-reduce of the
// squared gradient norm as a second float (--clip > 0); FSDP with --clip 0 makes a 1-element
// all-reduce of its own after the step, and one rank without a process group counts its own
// vote. A rank may read its flag just before its signal lands and its peer just after: the sum
// is still one value that every rank receives after the same step, so they agree; the late
// vote counts in the next step. A sum > 0 after step S stops every rank after S. The sum is
// read once the step has ended on the device (no synchronisation of its own). What it costs:
// docs/trainer.md, "Stop on request".
inline float vote() { return signal_received() ? 1.0f : 0.0f; }

// Note [Stop watchdog]
// A rank that got the signal while blocked inside a collective whose peer will never come (a
// peer frozen, killed, or hung in NCCL) never reaches the vote; before this change SIGTERM ended
// it at once, and the agent's stall handling relies on that. So once a signal has arrived, a
// watchdog thread gives the step in progress a deadline: the longest step seen so far times 4,
// at least 10 s. A step past it means the rank is stuck, and nothing consistent can be saved: the
// watchdog says so and ends the process with 128 + the signal (_exit), as the default action
// would have. Outside a step (a checkpoint being written, start-up, the stop itself) there is no
// deadline: a save takes what it takes, bounded by the agent's grace period.
void step_begins();  // the main loop, before each step
void step_ends();    // and after it
// The stop itself has begun: no deadline from now on.
void stopping();

}  // namespace lockstep::trainer::stop
