// controller::StatusBatcher and status_wait (Note [Batched status writes]): which status writes
// wait, and until when.
#include <gtest/gtest.h>

#include "controller/status_batcher.hpp"

using lockstep::controller::status_wait;
using lockstep::controller::StatusBatcher;
using lockstep::controller::StatusWait;
using lockstep::reconcile::Condition;
using lockstep::reconcile::Decision;
using lockstep::reconcile::JobStatus;
using namespace std::chrono_literals;

namespace {

JobStatus running() {
  JobStatus s;
  s.phase = "Running";
  s.conditions = {{"Created", "True", "", "", ""}, {"Running", "True", "", "", ""}};
  s.nodes.active = 4;
  return s;
}

Decision changing(const JobStatus& to) {
  Decision d;
  d.status = to;
  d.status_changed = true;
  return d;
}

Decision first_write(const std::string& phase, std::vector<std::string> conditions) {
  JobStatus s;
  s.phase = phase;
  for (const auto& type : conditions) s.conditions.push_back({type, "True", "", "", ""});
  return changing(s);
}

}  // namespace

TEST(StatusWait, OnlyCountsOrProgressChangedWaitsForTheLastWrite) {
  JobStatus now = running();
  JobStatus counts = now;
  counts.nodes.ready = 3;
  EXPECT_EQ(status_wait(now, changing(counts)), StatusWait::SinceLastWrite);
  counts.progress = lockstep::reconcile::Progress{};
  EXPECT_EQ(status_wait(now, changing(counts)), StatusWait::SinceLastWrite);
}

TEST(StatusWait, AnyOtherChangeOrAnEventIsWrittenAtOnce) {
  JobStatus now = running();
  JobStatus other = now;
  other.phase = "Succeeded";
  EXPECT_EQ(status_wait(now, changing(other)), StatusWait::None);
  other = now;
  other.restarts = 1;
  EXPECT_EQ(status_wait(now, changing(other)), StatusWait::None);
  JobStatus counts = now;
  counts.nodes.ready = 3;
  Decision with_event = changing(counts);
  with_event.events.push_back({"Normal", "Reason", "message"});
  EXPECT_EQ(status_wait(now, with_event), StatusWait::None);
  Decision unchanged = changing(now);
  unchanged.status_changed = false;
  EXPECT_EQ(status_wait(now, unchanged), StatusWait::None);
}

TEST(StatusWait, ANewJobsFirstPendingOrQueuedWriteWaits) {
  const JobStatus fresh;  // phase "": never written
  EXPECT_EQ(status_wait(fresh, first_write("Pending", {"Created"})), StatusWait::SinceFirstSeen);
  EXPECT_EQ(status_wait(fresh, first_write("Pending", {"Created", "Isolated"})), StatusWait::SinceFirstSeen);
  EXPECT_EQ(status_wait(fresh, first_write("Queued", {"Queued"})), StatusWait::SinceFirstSeen);
  EXPECT_EQ(status_wait(fresh, first_write("Pending", {"Queued", "Created"})), StatusWait::SinceFirstSeen);
  EXPECT_EQ(status_wait(fresh, first_write("Running", {"Created", "Running"})), StatusWait::None);
  EXPECT_EQ(status_wait(fresh, first_write("Pending", {"Created", "Failed"})), StatusWait::None);
  EXPECT_EQ(status_wait(fresh, first_write("Failed", {"Failed"})), StatusWait::None);
}

TEST(StatusBatcher, ACountsOnlyWriteWaitsUntilAPeriodAfterTheLastWrite) {
  StatusBatcher batcher(1000ms);
  const auto t0 = StatusBatcher::Clock::time_point{} + 1h;
  JobStatus now = running();
  JobStatus counts = now;
  counts.nodes.ready = 3;
  EXPECT_EQ(batcher.wait("ns/tj", now, changing(counts), t0), 0ms) << "never written: at once";
  batcher.written("ns/tj", t0);
  EXPECT_EQ(batcher.wait("ns/tj", now, changing(counts), t0 + 300ms), 701ms) << "rounded up";
  EXPECT_EQ(batcher.wait("ns/tj2", now, changing(counts), t0 + 300ms), 0ms) << "another job's writes";
  EXPECT_EQ(batcher.wait("ns/tj", now, changing(counts), t0 + 1000ms), 0ms);
  batcher.forget("ns/tj");
  EXPECT_EQ(batcher.wait("ns/tj", now, changing(counts), t0 + 300ms), 0ms) << "forgotten with its job";
}

TEST(StatusBatcher, AFirstWriteWaitsAPeriodFromTheFirstTimeItWasPutOff) {
  StatusBatcher batcher(1000ms);
  const auto t0 = StatusBatcher::Clock::time_point{} + 1h;
  const Decision d = first_write("Pending", {"Created"});
  EXPECT_EQ(batcher.wait("ns/tj", JobStatus{}, d, t0), 1001ms);
  EXPECT_EQ(batcher.wait("ns/tj", JobStatus{}, d, t0 + 400ms), 601ms) << "not pushed back";
  EXPECT_EQ(batcher.wait("ns/tj", JobStatus{}, d, t0 + 1000ms), 0ms);
  batcher.written("ns/tj", t0 + 1000ms);
  EXPECT_EQ(batcher.wait("ns/tj", JobStatus{}, d, t0 + 5000ms), 1001ms) << "written: put off afresh";
}

TEST(StatusBatcher, APeriodOfZeroWritesEverythingAtOnce) {
  StatusBatcher batcher(0ms);
  const auto t0 = StatusBatcher::Clock::time_point{} + 1h;
  JobStatus now = running();
  JobStatus counts = now;
  counts.nodes.ready = 3;
  batcher.written("ns/tj", t0);
  EXPECT_EQ(batcher.wait("ns/tj", now, changing(counts), t0), 0ms);
  EXPECT_EQ(batcher.wait("ns/tj", JobStatus{}, first_write("Pending", {"Created"}), t0), 0ms);
}
