// The batched status writer: whether a decision's status write goes out now or waits, and for
// how long, so that the changes a gang's pods make within moments of each other are one write.
//
// Note [Batched status writes]
// Pods of a gang start, get ready and finish within moments of each other, and each step
// changes the job's node counts: written one by one, that was a status write (and its watch
// event and reconcile back) per pod: 12.7 writes per job over bench/operator's 4,000-pod run
// with its storm, 7.3 batched (RESULTS.md). A write that changes nothing but the counts (and progress)
// waits until status_batch_period after the job's last write; the reconcile is queued for
// then and writes the counts as they are by that time. So does a new job's first write
// while it only says Pending and Created: its pods often run within the period, and then
// one write says Running with both conditions (bench/operator counts the writes per job;
// startTime is then that of the write, at most one period after the job was first seen). So
// does a queued job's first write (Queued, or Pending once admitted, with the Queued condition).
// (The Isolated condition, in every first write, does not hurry it: Note [Job isolation].)
// Any other change of phase, conditions, restarts or times, and any write with events, goes
// out at once.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "reconcile/decide.hpp"

namespace lockstep::controller {

// Which wait a decision's status write is for.
enum class StatusWait {
  None,            // written at once
  SinceLastWrite,  // only the counts (and progress) changed
  SinceFirstSeen,  // a new job's first write, while it only says Pending or Queued
};

// The wait decision `d` asks for, of a job whose status is `current` (pure).
StatusWait status_wait(const reconcile::JobStatus& current, const reconcile::Decision& d);

class StatusBatcher {
 public:
  using Clock = std::chrono::steady_clock;

  // `period`: --status-batch-period; 0 writes every status at once.
  explicit StatusBatcher(std::chrono::milliseconds period) : period_(period) {}

  // How long the status write of decision `d` for job `key` (ns/name), whose status is
  // `current`, waits from `now`, rounded up to the next millisecond; 0: write it now. A new
  // job's first write put off is remembered, so its wait ends one period after the first time.
  std::chrono::milliseconds wait(const std::string& key, const reconcile::JobStatus& current,
                                 const reconcile::Decision& d, Clock::time_point now);
  void written(const std::string& key, Clock::time_point now);  // the job's status was written
  void forget(const std::string& key);                           // the job is gone

 private:
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::map<std::string, Clock::time_point> written_at_;    // when each job's status was last written
  std::map<std::string, Clock::time_point> put_off_at_;    // a new job's first write, put off since then
};

}  // namespace lockstep::controller
