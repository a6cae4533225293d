// Checkpoints: written atomically, verified on load, resumed at the exact step.
//
// Layout under the checkpoint directory:
//   step-<S>/rank-<R>.pt   tensors (all parameters for DDP, written by rank 0; each rank's
//                          shards for FSDP) and the optimizer state, in LibTorch's archive format
//   step-<S>/rank-<R>.pt.sum  its size and checksum, written by the rank that wrote the file
//   step-<S>/MANIFEST      step, world size, strategy, checksum kind, the job's UID (Note [Checkpoint
//                          owner]), each file's size and checksum
//   LATEST                 the name of the newest complete step directory (for people; resume
//                          looks at every step-<S>/ with a MANIFEST)
//   .lockstep-token-<N>    only while the ranks start: Note [Shared checkpoint directory]
// Every file is written to a temporary name, fsynced and renamed, every result checked (Note
// [Durable checkpoint writes] in durable_file.hpp), and the MANIFEST is written only after every
// rank's file and checksum are in place; old checkpoints are pruned only after every rank has
// re-read and verified the new one. So a crash or a failing volume at any moment leaves the
// previous checkpoints intact. Note [Checkpoint fallback] says what resume does with a damaged
// one. The data order depends only on the step (Note [Global batch order]), so a resumed run
// sees exactly the batches the lost one would have.
#pragma once

#include <torch/torch.h>
#include "dist.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lockstep::trainer {

struct CheckpointTarget {
  std::string dir;
  int rank = 0, world = 1;
  std::string strategy;          // DDP or FSDP: shards only fit the same strategy and world size
  bool sharded = false;          // every rank writes (FSDP) or rank 0 only (DDP)
  int64_t keep = 3;              // complete checkpoints kept after a save; 0 keeps all
  std::string job_uid = "";      // LOCKSTEP_JOB_UID; empty: no owner recorded or checked
  std::string resume_from = "";  // spec.checkpoint.resumeFrom (--resume-from): Note [Checkpoint owner]
  int64_t attempt = -1;          // LOCKSTEP_RESTART_ATTEMPT, the gang attempt: Note [Checkpoint fencing]; -1 none
};

// Note [Checkpoint fencing]
// A gang restart can leave ranks of the old attempt alive: the operator force-deletes the pods
// of a lost node (docs/operator.md), and a frozen node that wakes up later runs them on from
// where they stopped. Such a rank must never write a checkpoint the new attempt reads. So each
// attempt fences the directory: at start (prepare_checkpoint_dir) rank 0 writes FENCE, "job
// <uid>\nattempt <A>\n", durably, unless it names a later attempt of the same job, in which
// case this rank is the stale one and stops (CheckpointFenced: it writes nothing). At every
// save rank 0 reads FENCE again just before its MANIFEST, the commit point; a later attempt's
// FENCE there makes it give up the save before the MANIFEST (CheckpointFenced), so the step
// directory stays incomplete, which resume ignores and the next save of that step overwrites.
// What is left open is the instant between that read and the MANIFEST's rename; a stale rank
// frozen exactly there and thawed later could still commit that one step. The agents' fencing
// (docs/agent.md, heartbeats) stops such ranks too. A FENCE of another job (another UID, or
// none: Note [Checkpoint owner]) is replaced, and without LOCKSTEP_RESTART_ATTEMPT (lockstep
// run's trainer of one attempt, a bare trainer) nothing is fenced.
class CheckpointFenced : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Note [Checkpoint owner]
// A TrainingJob deleted and applied again under the same name is a new job (a new UID) that
// may find the old one's checkpoints at the same path (a hostPath, a reused PVC). Every
// MANIFEST records the UID of the job that wrote it (LOCKSTEP_JOB_UID), and a job resumes only
// from its own: finding only another job's, it stops at start (std::invalid_argument, exit 64)
// saying whose they are, at which step, and that spec.checkpoint.resumeFrom (the trainer's
// --resume-from, LOCKSTEP_CHECKPOINT_RESUME_FROM) naming that directory makes it start from
// them. Starting afresh beside them is not done: its step directories would overwrite theirs.
// With resumeFrom, a job with no checkpoint of its own starts from the newest verifiable one
// in that directory, whoever wrote it; its own, once it has any, come first. Pruning removes only
// the job's own checkpoints, and only the job's own FENCE (Note [Checkpoint fencing]) fences it.
// A MANIFEST that names no job (a trainer before owners were recorded, or one run without
// LOCKSTEP_JOB_UID) is no job's own: anyone who can write the directory can write one, so a job
// with a UID neither resumes from it unasked nor prunes it; it stops at start as for another
// job's, saying the checkpoints name no owner, and resumeFrom naming the directory is what makes
// it start from them. A FENCE that names no job is replaced. A trainer run without
// LOCKSTEP_JOB_UID (lockstep run, a bare trainer) checks no owner: every checkpoint is its own.

// Note [Shared checkpoint directory]
// Every rank reads and writes the same step directories, so the directory must be the same
// storage for every pod (a ReadWriteMany volume); a per-pod emptyDir would let rank 0's
// step-<S>/ exist only on its own pod, and the other pods' ranks would fail at the first save,
// or each pod would resume from a different step. At start rank 0 writes a file named after a
// random number into the directory and broadcasts the number; every rank reads the file back
// and all agree, or every rank stops with the same message (std::invalid_argument, exit 64:
// retrying cannot fix a volume). Rank 0 also removes temporaries (*.tmp-*, tokens) that a
// killed process left; only those untouched for `stale_after`, so a writer of an attempt
// still shutting down is never cut short.
// A collective; a no-op without a process group, except the clean-up and the fence (Note
// [Checkpoint fencing]: throws CheckpointFenced on every rank when a later attempt fenced it).
void prepare_checkpoint_dir(const CheckpointTarget& t, const Dist& dist,
                            std::chrono::seconds stale_after = std::chrono::minutes(5));

// A collective when `dist` has a process group: every rank calls it at the same step. After the
// checkpoint is complete and every rank has re-read and verified its file, rank 0 removes this
// job's step directories older than the newest `t.keep`. A write, fsync, close or verification
// that fails on any rank makes every rank throw std::runtime_error (the failing rank's names
// the file and the error, e.g. ENOSPC) and prunes nothing; a later attempt's fence, found
// before the MANIFEST, makes every rank throw CheckpointFenced (Note [Checkpoint fencing]).
void save_checkpoint(const CheckpointTarget& t, int64_t step, const std::vector<torch::Tensor>& tensors,
                     torch::optim::Optimizer& optimizer, const Dist& dist);

// Note [Checkpoint fallback]
// Resume takes the newest step-<S>/ whose MANIFEST is there and whose files verify (size and
// checksum) on every rank. A newer one that is damaged or incomplete is skipped with a warning
// naming the file, so nothing is lost beyond the checkpoint it falls back to. Every rank must
// see the same list of checkpoints and resume from the same step, else std::invalid_argument
// (Note [Shared checkpoint directory]). A checkpoint of another strategy, world size or model
// is refused (std::invalid_argument, saying what would fit), as is a directory whose every
// checkpoint is damaged (std::runtime_error naming the files), and one that holds only another
// job's checkpoints (Note [Checkpoint owner]).
// Returns the step resumed from (tensors and optimizer loaded), or nullopt when there is no
// checkpoint. A collective when `dist` has a process group.
std::optional<int64_t> load_checkpoint(const CheckpointTarget& t, std::vector<torch::Tensor>& tensors,
                                       torch::optim::Optimizer& optimizer, const Dist& dist);

}  // namespace lockstep::trainer
