// controller::WorkQueue and controller::Expectations: the guarantees the controller relies on.
#include <gtest/gtest.h>

#include <thread>

#include "controller/expectations.hpp"
#include "controller/work_queue.hpp"

using lockstep::controller::Expectations;
using lockstep::controller::WorkQueue;
using namespace std::chrono_literals;

// Milliseconds since `t0`.
static long long ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

TEST(WorkQueue, DeduplicatesQueuedKeys) {
  WorkQueue q;
  q.add("a");
  q.add("a");
  q.add("b");
  EXPECT_EQ(q.depth(), 2u);
  EXPECT_EQ(*q.get(), "a");
  EXPECT_EQ(*q.get(), "b");
}

TEST(WorkQueue, AKeyInProgressIsNotHandedOutTwiceButIsRequeuedWhenDone) {
  WorkQueue q;
  q.add("a");
  auto k = q.get();
  q.add("a");  // while processing
  EXPECT_EQ(q.depth(), 0u);
  q.done(*k);
  EXPECT_EQ(q.depth(), 1u);
  EXPECT_EQ(*q.get(), "a");
}

TEST(WorkQueue, AddAfterDelays) {
  WorkQueue q;
  auto t0 = std::chrono::steady_clock::now();
  q.add_after("late", 100ms);
  q.add("now");
  EXPECT_EQ(*q.get(), "now");
  EXPECT_EQ(*q.get(), "late");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
}

TEST(WorkQueue, AddAfterKeepsOneDelayedEntryPerKeyTheEarliest) {
  WorkQueue q;
  auto t0 = std::chrono::steady_clock::now();
  q.add_after("k", 300ms);
  for (int i = 0; i < 1000; ++i) q.add_after("k", 5s);  // a job requeued on every reconcile
  q.add_after("k", 100ms);                              // sooner: replaces the 300 ms entry
  q.add_after("k", 200ms);
  EXPECT_EQ(q.delayed(), 1u);
  EXPECT_EQ(*q.get(), "k");
  long long waited = ms_since(t0);
  EXPECT_GE(waited, 100);
  EXPECT_LT(waited, 4000);
  EXPECT_EQ(q.delayed(), 0u) << "a later entry of the key is still waiting";
  EXPECT_EQ(q.depth(), 0u);
}

TEST(WorkQueue, RateLimitedBackoffGrowsAndForgetResetsIt) {
  WorkQueue q(10ms, 1s);
  for (int i = 0; i < 3; ++i) q.add_rate_limited("k");
  EXPECT_EQ(q.failures("k"), 3);
  q.forget("k");
  EXPECT_EQ(q.failures("k"), 0);
}

TEST(WorkQueue, ShutdownWakesWaitingWorkers) {
  WorkQueue q;
  std::thread t([&] { EXPECT_FALSE(q.get().has_value()); });
  std::this_thread::sleep_for(20ms);
  q.shutdown();
  t.join();
}

TEST(Expectations, OutstandingCreatesBlockUntilObserved) {
  Expectations e;
  EXPECT_TRUE(e.satisfied("ns/j"));
  e.expect_create("ns/j", "j-0");
  e.expect_create("ns/j", "j-1");
  EXPECT_FALSE(e.satisfied("ns/j"));
  e.observed_create("ns/j", "j-0");
  EXPECT_FALSE(e.satisfied("ns/j"));
  e.observed_create("ns/j", "j-1");
  EXPECT_TRUE(e.satisfied("ns/j"));
}

TEST(Expectations, AStatusWriteIsSatisfiedByItsOrANewerVersion) {
  Expectations e;
  e.expect_version("ns/j", "120");
  e.observed_version("ns/j", "119");
  EXPECT_FALSE(e.satisfied("ns/j"));
  e.observed_version("ns/j", "125");
  EXPECT_TRUE(e.satisfied("ns/j"));
}

TEST(Expectations, ExpireSoALostEventCannotWedgeAJob) {
  Expectations e(std::chrono::seconds(0));
  e.expect_delete("ns/j", "j-0");
  std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(e.satisfied("ns/j"));
}
